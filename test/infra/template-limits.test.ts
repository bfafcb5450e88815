/**
 * An app environment's stack stays within CloudFormation's quotas per template: 500 resources, 60
 * dynamic references and 1 MB of template in S3
 * (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/cloudformation-limits.html,
 * https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/dynamic-references.html,
 * infra/template-limits.ts): what each kind of endpoint takes of each, measured here (docs/aws.md
 * "How many endpoints an environment fits" states these numbers), and the checks that refuse an
 * environment past a quota when the stacks are built or synthesized, before anything is deployed.
 */
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Template } from 'aws-cdk-lib/assertions';
import type { CloudAssembly } from 'aws-cdk-lib/cx-api';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { exitCode as exitCodeFor, FerryError } from '../../core/errors.js';
import type { ManifestEndpoint } from '../../core/manifest.js';
import { manifestSchema } from '../../core/manifest.js';
import { buildApp, type SynthesizeOptions, synthesize } from '../../infra/app.js';
import { appStackName } from '../../infra/app-stack.js';
import {
  dynamicReferenceCount,
  maxDynamicReferences,
  maxTemplateBytes,
  maxTemplateResources,
  resolvedJsonBytes,
  templateResourceCount,
} from '../../infra/template-limits.js';
import {
  cpuEndpoint,
  gpuEndpoint,
  lbEndpoint,
  sampleImages,
  sampleManifest,
  stubFunctionsDir,
} from './fixtures.js';

const fns = stubFunctionsDir();
const outdirs: string[] = [];
afterAll(() => {
  fns.cleanup();
  for (const dir of outdirs) rmSync(dir, { recursive: true, force: true });
});

const queue = (i: number, base: ManifestEndpoint = cpuEndpoint): ManifestEndpoint => ({
  ...base,
  name: `queue_${i}`,
});
const loadBalanced = (i: number): ManifestEndpoint => ({ ...lbEndpoint, name: `lb_${i}` });
/** CloudFront's origin-facing prefix list in us-east-1, as `ferry deploy` looks it up. */
const cloudFrontPrefixListId = 'pl-3b927c52';
const many = (n: number, make: (i: number) => ManifestEndpoint) =>
  Array.from({ length: n }, (_, i) => make(i));

function optionsFor(
  endpoints: ManifestEndpoint[],
  extra: Partial<SynthesizeOptions> = {},
): SynthesizeOptions {
  const outdir = mkdtempSync(join(tmpdir(), 'ferry-infra-limits-'));
  outdirs.push(outdir);
  return {
    manifest: manifestSchema.parse({ ...sampleManifest, endpoints }),
    env: 'dev',
    functionsCodeDir: fns.dir,
    artifact: { key: 'artifacts/demo/dev/fff.tar.gz' },
    images: sampleImages,
    // cdk-nag has its own tests; here it would only slow the big stacks down.
    nag: false,
    outdir,
    // As `ferry deploy` synthesizes: the ALBs behind CloudFront admit its prefix list only, a rule
    // that is a resource of its own (infra/constructs/https-front.ts).
    cloudFrontPrefixListId,
    ...extra,
  };
}

const build = (endpoints: ManifestEndpoint[], extra: Partial<SynthesizeOptions> = {}) =>
  buildApp(optionsFor(endpoints, extra));

/** As the CLI synthesizes (version reporting on: CDKMetadata is in the template and its bytes). */
const cliContext = { context: { 'aws:cdk:version-reporting': true } };

const appTemplates = new Map<
  string,
  { references: number; bytes: number; artifact: ReturnType<CloudAssembly['getStackArtifact']> }
>();

/**
 * The app template's dynamic references and bytes (the file the toolkit uploads), unchecked. The
 * same endpoints and options are synthesized once per file: the tests only read what comes back.
 */
function appTemplateOf(endpoints: ManifestEndpoint[], extra: Partial<SynthesizeOptions> = {}) {
  const key = JSON.stringify([endpoints, extra]);
  let synthesized = appTemplates.get(key);
  if (synthesized === undefined) {
    const built = build(endpoints, { ...cliContext, ...extra });
    const artifact = built.app.synth().getStackArtifact(built.appStack.artifactId);
    synthesized = {
      references: dynamicReferenceCount(artifact.template),
      bytes: statSync(artifact.templateFullPath).size,
      artifact,
    };
    appTemplates.set(key, synthesized);
  }
  return synthesized;
}

/** What `synthesize` (the CLI's way in, infra/app.ts) threw, or undefined. */
function synthesizeError(endpoints: ManifestEndpoint[], extra: Partial<SynthesizeOptions> = {}): unknown {
  try {
    synthesize(optionsFor(endpoints, { ...cliContext, ...extra }));
  } catch (caught) {
    return caught;
  }
  return undefined;
}

/** Resources in the synthesized app template (the tests' App reports no version: no CDKMetadata). */
const resourcesOf = (endpoints: ManifestEndpoint[], extra: Partial<SynthesizeOptions> = {}) =>
  Object.keys(Template.fromStack(build(endpoints, extra).appStack).toJSON().Resources).length;

describe('resources per endpoint (docs/aws.md "How many endpoints an environment fits")', () => {
  // The first synthesis loads most of aws-cdk-lib: in the hook, whose timeout is longer.
  let one: number;
  beforeAll(() => {
    one = resourcesOf([queue(0)]);
  });

  it('a queue endpoint declares 20, CPU or GPU; the stack itself 1 (its dashboard: its containers log to the platform’s group)', () => {
    expect(resourcesOf([queue(0), queue(1)]) - one).toBe(20);
    expect(resourcesOf([queue(0), queue(1, gpuEndpoint)]) - one).toBe(20);
    expect(one - 20).toBe(1);
  });

  it('a load-balanced endpoint declares 18 behind CloudFront, 16 with a domain, 17 with its Route 53 zone', () => {
    // No rule of its own to the hosts: its ALB carries the platform's load balancer group
    // (infra/constructs/load-balancer.ts), so neither an ingress on the hosts' group nor an egress; and
    // no Lambda permission for its wake-up alarm (the platform's one covers them all).
    expect(resourcesOf([queue(0), loadBalanced(0)]) - one).toBe(18);
    // Synthesized offline (no prefix list id), its port-80 rule is inline in its group: one fewer.
    const offline = { cloudFrontPrefixListId: undefined };
    expect(resourcesOf([queue(0), loadBalanced(0)], offline) - resourcesOf([queue(0)], offline)).toBe(17);
    const domain = { https: { domainName: 'example.com' } };
    expect(resourcesOf([queue(0), loadBalanced(0)], domain) - resourcesOf([queue(0)], domain)).toBe(16);
    const zone = { https: { domainName: 'example.com', hostedZoneId: 'Z0123456789' } };
    expect(resourcesOf([queue(0), loadBalanced(0)], zone) - resourcesOf([queue(0)], zone)).toBe(17);
  });

  it('the count made before synthesis is the template’s, plus the CDKMetadata resource synthesis adds', () => {
    const built = build([queue(0), loadBalanced(0)], { context: { 'aws:cdk:version-reporting': true } });
    const before = templateResourceCount(built.appStack);
    const template = built.app.synth().getStackArtifact(built.appStack.artifactId).template;
    expect(Object.keys(template.Resources)).toContain('CDKMetadata');
    expect(Object.keys(template.Resources)).toHaveLength(before);
  });
});

describe('an environment past 500 resources', () => {
  it('24 queue endpoints (482 resources with CDKMetadata) synthesize, in under 1 MB', () => {
    const built = build(many(24, queue), { context: { 'aws:cdk:version-reporting': true } });
    expect(templateResourceCount(built.appStack)).toBe(482);
    const artifact = built.app.synth().getStackArtifact(built.appStack.artifactId);
    expect(Object.keys(artifact.template.Resources).length).toBeLessThanOrEqual(maxTemplateResources);
    // The most endpoints 500 resources hold: the size quota is not what limits plain declarations.
    expect(statSync(artifact.templateFullPath).size).toBeLessThan(maxTemplateBytes);
  });

  it('25 are refused while the stacks are built: the count, the limit and the way out', () => {
    let error: unknown;
    try {
      build(many(25, queue));
    } catch (caught) {
      error = caught;
    }
    expect(error).toMatchObject({
      name: 'FerryError',
      code: 'usage',
      message: expect.stringMatching(
        /demo\/dev needs 502 CloudFormation resources for its 25 endpoints.*500/,
      ),
      hint: expect.stringContaining('ferry deploy -e'),
    });
  });
});

describe('dynamic references per endpoint (docs/aws.md "How many endpoints an environment fits")', () => {
  let one: { references: number; bytes: number };
  beforeAll(() => {
    one = appTemplateOf([queue(0)]);
  });

  it('a queue endpoint holds 1 (its agent’s external id), CPU or GPU; the stack itself none', () => {
    expect(appTemplateOf([queue(0), queue(1)]).references - one.references).toBe(1);
    expect(appTemplateOf([queue(0), queue(1, gpuEndpoint)]).references - one.references).toBe(1);
    expect(one.references - 1).toBe(0);
  });

  it('a load-balanced endpoint holds 3 behind CloudFront (external id, origin header twice), 1 with a domain', () => {
    expect(appTemplateOf([queue(0), loadBalanced(0)]).references - one.references).toBe(3);
    const domain = { https: { domainName: 'example.com' } };
    expect(
      appTemplateOf([queue(0), loadBalanced(0)], domain).references -
        appTemplateOf([queue(0)], domain).references,
    ).toBe(1);
  });

  it('20 load-balanced endpoints behind CloudFront (60 references) synthesize', () => {
    const assembly = synthesize(optionsFor(many(20, loadBalanced), cliContext));
    const app = assembly.stacks.find((stack) => stack.stackName === appStackName('demo', 'dev'));
    expect(dynamicReferenceCount(app?.template)).toBe(maxDynamicReferences);
  });

  it('21 are refused at synth, within 500 resources (380): the count, the excess and the way out', () => {
    expect(templateResourceCount(build(many(21, loadBalanced), cliContext).appStack)).toBe(380);
    expect(synthesizeError(many(21, loadBalanced))).toMatchObject({
      name: 'FerryError',
      code: 'usage',
      message: expect.stringMatching(
        /^The template of demo\/dev \(21 endpoints\) holds 63 dynamic references \(\{\{resolve:…\}\}\), 3 over the 60 /,
      ),
      hint: expect.stringContaining('ferry deploy -e'),
    });
  });
});

describe('template bytes', () => {
  it('the app template is uploaded to the bootstrap bucket: the 1 MB quota of a template in S3 applies', () => {
    // toolkit-lib's makeBodyParameter deploys by TemplateURL when the stack names its template asset.
    const { artifact } = appTemplateOf([queue(0)]);
    expect(artifact.stackTemplateAssetObjectUrl).toMatch(/^s3:\/\/cdk-[a-z0-9]+-assets-/);
  });

  it('endpoints whose declarations make the template pass 1 MB are refused at synth, with the size and the excess', () => {
    // Each declared env variable is written into the worker container's definition.
    const bulky = (i: number): ManifestEndpoint => ({
      ...queue(i),
      resources: { ...cpuEndpoint.resources, env: { BLOB: 'x'.repeat(350_000) } },
    });
    expect(appTemplateOf(many(3, bulky)).bytes).toBeGreaterThan(maxTemplateBytes);
    expect(synthesizeError(many(3, bulky))).toMatchObject({
      code: 'usage',
      message: expect.stringMatching(
        /^The template of demo\/dev \(3 endpoints\) holds [\d,]+ bytes, [\d,]+ over the 1,000,000 \(1 MB\)/,
      ),
    });
  });
});

// ECS's "Task definition size" quota, 64 KiB, not adjustable
// (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/service-quotas.html); CloudFormation
// does not check it, so a task definition past it failed the deploy at RegisterTaskDefinition.
describe('task definition size (infra/template-limits.ts checkTaskDefinitionSizes)', () => {
  const withEnv = (env: Record<string, string>): ManifestEndpoint => ({
    ...cpuEndpoint,
    name: 'big_env',
    resources: { ...cpuEndpoint.resources, env },
  });

  it('a queue and a load-balanced endpoint weigh a few KiB each, far under 64 KiB', () => {
    const { artifact } = appTemplateOf([queue(0), loadBalanced(0)]);
    const resources = artifact.template.Resources as Record<
      string,
      { Type: string; Properties: Record<string, unknown> }
    >;
    const sizes = Object.values(resources)
      .filter((r) => r.Type === 'AWS::ECS::TaskDefinition')
      .map((r) => resolvedJsonBytes(r.Properties.ContainerDefinitions));
    expect(sizes).toHaveLength(2);
    for (const bytes of sizes) {
      expect(bytes).toBeGreaterThan(2_000);
      expect(bytes).toBeLessThan(16 * 1024);
    }
  });

  it('a 70,000-byte env value is refused at synth (exit 2), naming the endpoint and the value', () => {
    const error = synthesizeError([queue(0), withEnv({ SMALL: 'x', MODEL_CONFIG: 'x'.repeat(70_000) })]);
    expect(FerryError.is(error)).toBe(true);
    expect((error as FerryError).code).toBe('usage');
    expect(exitCodeFor(error)).toBe(2);
    expect((error as FerryError).message).toMatch(
      /^demo\/dev: 'big_env' needs a task definition of about [\d,]+ bytes, over the 65,536 \(64 KiB\) ECS registers; its biggest env values: MODEL_CONFIG \(70,000 bytes\), /,
    );
    expect((error as FerryError).hint).toContain('ferry secrets set');
  });

  it('env values that fit pass', () => {
    expect(synthesizeError([queue(0), withEnv({ MODEL_CONFIG: 'x'.repeat(40_000) })])).toBeUndefined();
  });
});
