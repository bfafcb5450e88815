/**
 * What CloudFormation takes in one template, checked for an app environment's stack before anything
 * is deployed, so that an environment it would refuse stops at synth with exit 2, what is over and
 * the way out, instead of failing at CloudFormation minutes into a deploy. The quotas
 * (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/cloudformation-limits.html):
 *
 *  - 500 resources. Each endpoint declares about 21 (queues, roles, secrets, task definition,
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
 */
import { CfnResource, type Stack } from 'aws-cdk-lib';
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
