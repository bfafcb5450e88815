/**
 * What CloudFormation takes in one template, checked for an app environment's stack before anything
 * is deployed, so that an environment it would refuse stops at synth with exit 2, what is over and
 * the way out, instead of failing at CloudFormation minutes into a deploy. The quotas
 * (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/cloudformation-limits.html):
 *
 *  - 500 resources. Each endpoint declares about 20 (queues, roles, secrets, task definition,
 *    service, alarms, and for a load-balanced one its ALB and front; measured in
 *    test/infra/template-limits.test.ts, docs/aws.md "How many endpoints an environment fits").
 *    Counted once the stack is built, before synthesis: CDK's own count at synthesis fails with a
 *    bare validation error and no way forward (`checkTemplateResources`).
 *  - 60 dynamic references (`{{resolve:…}}`) per template, of every kind: ssm, ssm-secure and
 *    secretsmanager alike (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/dynamic-references.html,
 *    "General considerations"). Every endpoint holds one (its agent role's external id,
 *    infra/isolation.ts); a load-balanced endpoint behind CloudFront two more (the origin header
 *    its CloudFront distribution sends and its ALB listener checks, infra/constructs/https-front.ts).
 *  - 1 MB of template body in an S3 object. CDK's default synthesizer makes the template a file
 *    asset that the toolkit uploads to the bootstrap bucket, and the deploy's change set names it by
 *    TemplateURL (toolkit-lib's makeBodyParameter uses the stack's stackTemplateAssetObjectUrl), so
 *    this quota applies, not the 51,200 bytes of a TemplateBody passed in the request
 *    (https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_CreateChangeSet.html,
 *    TemplateURL "max size: 1 MB"). The bytes are the template file's, as uploaded.
 *
 * The last two are counted on the synthesized template (`checkSynthesizedTemplate`, called by
 * infra/app.ts after `app.synth()`): the references and the bytes exist only once CDK has written it.
 * So is ECS's size of each task definition (`checkTaskDefinitionSizes`, below).
 */
import { CfnResource, type Stack } from 'aws-cdk-lib';
import { platformEnvNameOf } from '../core/endpoint-spec.js';
import { usage } from '../core/errors.js';

export const maxTemplateResources = 500;

/** Dynamic references CloudFormation resolves in one template. */
export const maxDynamicReferences = 60;

/**
 * The "1 MB" of a template in S3, read as 1,000,000 bytes: AWS gives no byte count, and the smaller
 * reading never lets through a template CloudFormation refuses (cfn-lint's template size rule uses
 * the same number).
 */
export const maxTemplateBytes = 1_000_000;

/** The AWS::CDK::Metadata resource CDK adds at synthesis when version reporting is on (the CLI's default). */
const addedAtSynthesis = 1;

/** What an app environment's refusal names. */
export interface TemplateEnvironment {
  app: string;
  env: string;
  endpoints: number;
}

const splitHint =
  'Split the endpoints across environments: deploy some of them from another project folder, ' +
  'as their own environment (`ferry deploy -e <env>`) or app. docs/aws.md, "How many endpoints an environment fits".';

/** The resources `stack` will hold in its template: those declared so far plus what synthesis adds. */
export function templateResourceCount(stack: Stack): number {
  const declared = stack.node.findAll().filter((c) => CfnResource.isCfnResource(c)).length;
  return declared + addedAtSynthesis;
}

/** Throws a usage error (exit 2) when the app environment's stack would hold too many resources. */
export function checkTemplateResources(stack: Stack, environment: TemplateEnvironment): void {
  const count = templateResourceCount(stack);
  if (count <= maxTemplateResources) return;
  const { app, env, endpoints } = environment;
  throw usage(
    `${app}/${env} needs ${count} CloudFormation resources for its ${endpoints} endpoints; one stack may hold at most ${maxTemplateResources}`,
    splitHint,
  );
}

const referenceStart = '{{resolve:';

function occurrences(text: string): number {
  let count = 0;
  for (let at = text.indexOf(referenceStart); at >= 0; at = text.indexOf(referenceStart, at + 1)) count++;
  return count;
}

/**
 * The dynamic references in `template`: each `{{resolve:` in any string value, wherever it is nested
 * (a resource property, an `Fn::Sub` string, a part of an `Fn::Join`). The literal parts of an
 * `Fn::Join` are read joined, so a reference cut across two parts still counts once. Each
 * occurrence counts, also a second one of the same secret: how CloudFormation counts repeats is not
 * documented, and counting each one never lets through a template it refuses.
 */
export function dynamicReferenceCount(template: unknown): number {
  if (typeof template === 'string') return occurrences(template);
  if (Array.isArray(template))
    return template.reduce((n: number, item) => n + dynamicReferenceCount(item), 0);
  if (template === null || typeof template !== 'object') return 0;
  let count = 0;
  for (const [key, value] of Object.entries(template)) {
    const join = key === 'Fn::Join' && Array.isArray(value) ? value : undefined;
    if (join && typeof join[0] === 'string' && Array.isArray(join[1])) {
      const parts = join[1] as unknown[];
      // A part that is not a literal string cannot close a reference begun before it.
      count += occurrences(parts.map((p) => (typeof p === 'string' ? p : '\0')).join(join[0]));
      for (const part of parts) if (typeof part !== 'string') count += dynamicReferenceCount(part);
    } else {
      count += dynamicReferenceCount(value);
    }
  }
  return count;
}

/** A synthesized template: as CloudFormation reads it, and its size as uploaded. */
export interface SynthesizedTemplate {
  template: unknown;
  bytes: number;
}

/**
 * Throws a usage error (exit 2) when the app environment's synthesized template holds more dynamic
 * references or bytes than CloudFormation takes; names each quota that is over, and by how much.
 */
export function checkSynthesizedTemplate(
  synthesized: SynthesizedTemplate,
  environment: TemplateEnvironment,
): void {
  const over: string[] = [];
  const references = dynamicReferenceCount(synthesized.template);
  if (references > maxDynamicReferences) {
    over.push(
      `${references} dynamic references ({{resolve:…}}), ${references - maxDynamicReferences} over the ${maxDynamicReferences} CloudFormation resolves in one template`,
    );
  }
  if (synthesized.bytes > maxTemplateBytes) {
    const bytes = (n: number) => n.toLocaleString('en-US');
    over.push(
      `${bytes(synthesized.bytes)} bytes, ${bytes(synthesized.bytes - maxTemplateBytes)} over the ${bytes(maxTemplateBytes)} (1 MB) CloudFormation takes in one template`,
    );
  }
  if (over.length === 0) return;
  const { app, env, endpoints } = environment;
  throw usage(
    `The template of ${app}/${env} (${endpoints} endpoints) holds ${over.join(', and ')}`,
    splitHint,
  );
}

/**
 * What ECS takes in one task definition: "Task definition size", 64 KiB, not adjustable ("The
 * maximum size, in KiB, of a task definition",
 * https://docs.aws.amazon.com/AmazonECS/latest/developerguide/service-quotas.html). CloudFormation
 * does not check it: a bigger one synthesizes and deploys until RegisterTaskDefinition refuses it
 * and the stack rolls back. Nearly all of an endpoint's task definition is fixed by Ferry (a few
 * KiB); what can grow without bound is the user's `env`, which lands in the worker container's
 * environment.
 */
export const maxTaskDefinitionBytes = 64 * 1024;

/**
 * What a CloudFormation token in a task definition weighs once resolved: the ARNs, queue URLs and
 * names it stands for (an ARN of a Ferry secret, role or log group is under 200 bytes). Counted at
 * this much rather than at its own JSON, so the estimate never falls below the registered size for
 * a token's sake.
 */
const resolvedTokenBytes = 256;

const isIntrinsic = (value: object): boolean => {
  const keys = Object.keys(value);
  return keys.length === 1 && (keys[0] === 'Ref' || keys[0]!.startsWith('Fn::'));
};

/**
 * The bytes `value` takes in the JSON ECS registers: strings, numbers and structure as written, each
 * CloudFormation token as `resolvedTokenBytes`, and an `Fn::Join` as its literal parts plus its
 * tokens (it resolves to one string).
 */
export function resolvedJsonBytes(value: unknown): number {
  if (value === null || typeof value !== 'object') return Buffer.byteLength(JSON.stringify(value) ?? '');
  if (Array.isArray(value)) {
    return 2 + Math.max(0, value.length - 1) + value.reduce((n: number, v) => n + resolvedJsonBytes(v), 0);
  }
  if (isIntrinsic(value)) {
    const join = (value as Record<string, unknown>)['Fn::Join'];
    if (Array.isArray(join) && typeof join[0] === 'string' && Array.isArray(join[1])) {
      const parts = join[1] as unknown[];
      const literal = parts
        .map((p) => (typeof p === 'string' ? JSON.stringify(p).slice(1, -1) : ''))
        .join('');
      const tokens = parts.filter((p) => typeof p !== 'string').length;
      return (
        2 +
        Buffer.byteLength(literal) +
        join[0].length * Math.max(0, parts.length - 1) +
        tokens * resolvedTokenBytes
      );
    }
    return resolvedTokenBytes;
  }
  const entries = Object.entries(value);
  return (
    2 +
    Math.max(0, entries.length - 1) +
    entries.reduce((n, [k, v]) => n + Buffer.byteLength(JSON.stringify(k)) + 1 + resolvedJsonBytes(v), 0)
  );
}

interface TaskDefinitionResource {
  Type: string;
  Properties?: {
    ContainerDefinitions?: { Name?: string; Environment?: { Name: string; Value: unknown }[] }[];
  };
}

/**
 * Throws a usage error (exit 2) for each task definition of the synthesized app stack whose
 * container definitions weigh more than ECS registers (`resolvedJsonBytes`, an estimate: the rest
 * of a task definition, its family, roles and volumes, is a few hundred bytes), naming the endpoint
 * (its FERRY_ENDPOINT) and its biggest environment values.
 */
export function checkTaskDefinitionSizes(template: unknown, environment: TemplateEnvironment): void {
  const resources = ((template as { Resources?: Record<string, TaskDefinitionResource> }).Resources ??
    {}) as Record<string, TaskDefinitionResource>;
  const over: string[] = [];
  for (const [logicalId, resource] of Object.entries(resources)) {
    if (resource.Type !== 'AWS::ECS::TaskDefinition') continue;
    const containers = resource.Properties?.ContainerDefinitions ?? [];
    const bytes = resolvedJsonBytes(containers);
    if (bytes <= maxTaskDefinitionBytes) continue;
    const variables = containers.flatMap((c) => c.Environment ?? []);
    const endpoint = variables.find((v) => v.Name === 'FERRY_ENDPOINT')?.Value;
    // The user's own: the platform's variables (platformEnvNames) are not theirs to shrink.
    const biggest = variables
      .filter((v) => platformEnvNameOf(v.Name) === undefined)
      .map((v) => ({ name: v.Name, bytes: resolvedJsonBytes(v.Value) - 2 }))
      .sort((a, b) => b.bytes - a.bytes)
      .slice(0, 3)
      .map((v) => `${v.name} (${v.bytes.toLocaleString('en-US')} bytes)`);
    over.push(
      `'${typeof endpoint === 'string' ? endpoint : logicalId}' needs a task definition of about ${bytes.toLocaleString('en-US')} bytes, ` +
        `over the ${maxTaskDefinitionBytes.toLocaleString('en-US')} (64 KiB) ECS registers; its biggest env values: ${biggest.join(', ')}`,
    );
  }
  if (over.length === 0) return;
  throw usage(
    `${environment.app}/${environment.env}: ${over.join('; ')}`,
    'Keep env= values small: ship big configuration as a file in the project (it travels with the code), ' +
      'or as a secret (`ferry secrets set`, named in secrets=), which the task definition names by ARN only.',
  );
}
