/**
 * An app environment's stack stays within CloudFormation's 500 resources per template
 * (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/cloudformation-limits.html,
 * infra/template-limits.ts): what each kind of endpoint declares, measured here (docs/aws.md "How many
 * endpoints an environment fits" states these numbers), and the check that refuses an environment
 * past the limit while the stacks are built, before anything is deployed.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Template } from 'aws-cdk-lib/assertions';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ManifestEndpoint } from '../../core/manifest.js';
import { manifestSchema } from '../../core/manifest.js';
import { buildApp, type SynthesizeOptions } from '../../infra/app.js';
import { maxTemplateResources, templateResourceCount } from '../../infra/template-limits.js';
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
const many = (n: number, make: (i: number) => ManifestEndpoint) =>
  Array.from({ length: n }, (_, i) => make(i));

function build(endpoints: ManifestEndpoint[], extra: Partial<SynthesizeOptions> = {}) {
  const outdir = mkdtempSync(join(tmpdir(), 'ferry-infra-limits-'));
  outdirs.push(outdir);
  return buildApp({
    manifest: manifestSchema.parse({ ...sampleManifest, endpoints }),
    env: 'dev',
    functionsCodeDir: fns.dir,
    artifact: { key: 'artifacts/demo/dev/fff.tar.gz' },
    images: sampleImages,
    // cdk-nag has its own tests; here it would only slow the big stacks down.
    nag: false,
    outdir,
    ...extra,
  });
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

  it('a queue endpoint declares 21, CPU or GPU; the stack itself 2 (log group, dashboard)', () => {
    expect(resourcesOf([queue(0), queue(1)]) - one).toBe(21);
    expect(resourcesOf([queue(0), queue(1, gpuEndpoint)]) - one).toBe(21);
    expect(one - 21).toBe(2);
  });

  it('a load-balanced endpoint declares 21 behind CloudFront, 20 with a domain, 21 with its Route 53 zone', () => {
    expect(resourcesOf([queue(0), loadBalanced(0)]) - one).toBe(21);
    const domain = { https: { domainName: 'example.com' } };
    expect(resourcesOf([queue(0), loadBalanced(0)], domain) - resourcesOf([queue(0)], domain)).toBe(20);
    const zone = { https: { domainName: 'example.com', hostedZoneId: 'Z0123456789' } };
    expect(resourcesOf([queue(0), loadBalanced(0)], zone) - resourcesOf([queue(0)], zone)).toBe(21);
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
  it('23 queue endpoints (486 resources with CDKMetadata) synthesize', () => {
    const built = build(many(23, queue), { context: { 'aws:cdk:version-reporting': true } });
    expect(templateResourceCount(built.appStack)).toBe(486);
    const template = built.app.synth().getStackArtifact(built.appStack.artifactId).template;
    expect(Object.keys(template.Resources).length).toBeLessThanOrEqual(maxTemplateResources);
  });

  it('24 are refused while the stacks are built: the count, the limit and the way out', () => {
    let error: unknown;
    try {
      build(many(24, queue));
    } catch (caught) {
      error = caught;
    }
    expect(error).toMatchObject({
      name: 'FerryError',
      code: 'usage',
      message: expect.stringMatching(
        /demo\/dev needs 507 CloudFormation resources for its 24 endpoints.*500/,
      ),
      hint: expect.stringContaining('ferry deploy -e'),
    });
  });
});
