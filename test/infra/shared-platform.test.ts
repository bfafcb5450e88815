/**
 * Several apps share one platform stack. App A (a GPU endpoint on g5 and a load-balanced one) and app
 * B (a single CPU endpoint) are synthesized each alone, as two `ferry deploy`s would, with the same
 * instance-type union (what the CLI passes). The platform templates must be identical, and every
 * `Fn::ImportValue` of either app must name an export the platform has — so deploying B's platform
 * can never drop an export A imports.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { platformInstanceTypes, platformPools } from '../../cli/providers/aws/platform.js';
import { FerryError } from '../../core/errors.js';
import { type Manifest, manifestSchema } from '../../core/manifest.js';
import { buildApp, platformStackName } from '../../infra/app.js';
import { appStackName } from '../../infra/app-stack.js';
import { instanceTypesFor } from '../../infra/gpu.js';
import { platformExportNames, poolExportName } from '../../infra/platform-exports.js';
import { defaultInstanceTypes } from '../../infra/platform-stack.js';
import {
  cpuEndpoint,
  gpuEndpoint,
  lbEndpoint,
  sampleImages,
  sampleManifest,
  stubFunctionsDir,
} from './fixtures.js';

interface CfnTemplate {
  Resources: Record<string, { Type: string; Properties?: Record<string, unknown> }>;
  Outputs?: Record<string, { Value: unknown; Export?: { Name: unknown } }>;
  Parameters?: Record<string, unknown>;
}

const manifestOf = (app: string, endpoints: Manifest['endpoints']): Manifest =>
  manifestSchema.parse({ ...sampleManifest, app, endpoints });

/** App A: a g5 GPU queue endpoint and a load-balanced CPU endpoint (VPC, subnets, ALB group). */
const manifestA = manifestOf('alpha', [gpuEndpoint, lbEndpoint]);
/** App B: one CPU queue endpoint on a shape nobody else uses (m7i.xlarge). */
const manifestB = manifestOf('beta', [
  { ...cpuEndpoint, resources: { ...cpuEndpoint.resources, cpu: '4-16' } },
]);
/** What the CLI passes to both: defaults plus every deployed endpoint's instance type. */
const union = [
  ...new Set([
    ...defaultInstanceTypes(),
    ...instanceTypesFor([...manifestA.endpoints, ...manifestB.endpoints].map((e) => e.resources)),
  ]),
].sort();

interface Synthesized {
  platform: CfnTemplate;
  app: CfnTemplate;
  appStack: string;
  dependencies: string[];
  synthError: unknown;
  validationReport: string | undefined;
}

const cleanups: (() => void)[] = [];
let functionsDir: string;
let alpha: Synthesized;
let beta: Synthesized;

/** One `ferry deploy` of one app: both stacks, cdk-nag on, read back from the cloud assembly. */
function synthesizeAlone(manifest: Manifest): Synthesized {
  const outdir = mkdtempSync(join(tmpdir(), 'ferry-infra-shared-'));
  cleanups.push(() => rmSync(outdir, { recursive: true, force: true }));
  const { app } = buildApp({
    manifest,
    env: 'production',
    functionsCodeDir: functionsDir,
    artifact: { key: `artifacts/${manifest.app}/production/${manifest.sourceFingerprint}.tar.gz` },
    images: sampleImages,
    instanceTypes: union,
    outdir,
  });
  let synthError: unknown;
  try {
    app.synth();
  } catch (error) {
    synthError = error;
  }
  const appStack = appStackName(manifest.app, 'production');
  const read = (name: string) =>
    JSON.parse(readFileSync(join(outdir, `${name}.template.json`), 'utf8')) as CfnTemplate;
  const cloudManifest = JSON.parse(readFileSync(join(outdir, 'manifest.json'), 'utf8')) as {
    artifacts: Record<string, { dependencies?: string[] }>;
  };
  const report = join(outdir, 'validation-report.json');
  return {
    platform: read(platformStackName),
    app: read(appStack),
    appStack,
    dependencies: cloudManifest.artifacts[appStack]?.dependencies ?? [],
    synthError,
    validationReport: existsSync(report) ? readFileSync(report, 'utf8') : undefined,
  };
}

/** Every `Fn::ImportValue` argument anywhere in a template. */
function importsOf(template: CfnTemplate): unknown[] {
  const found: unknown[] = [];
  const walk = (node: unknown): void => {
    if (Array.isArray(node)) node.forEach(walk);
    else if (node && typeof node === 'object') {
      for (const [key, value] of Object.entries(node)) {
        if (key === 'Fn::ImportValue') found.push(value);
        else walk(value);
      }
    }
  };
  walk(template);
  return found;
}

const exportsOf = (template: CfnTemplate): string[] =>
  Object.values(template.Outputs ?? {}).flatMap((o) => (o.Export ? [o.Export.Name as string] : []));

beforeAll(() => {
  const fns = stubFunctionsDir();
  functionsDir = fns.dir;
  cleanups.push(fns.cleanup);
  alpha = synthesizeAlone(manifestA);
  beta = synthesizeAlone(manifestB);
}, 120_000);
afterAll(() => {
  for (const cleanup of cleanups.reverse()) cleanup();
});

describe('two apps, one platform', () => {
  it('the union has A’s g5 pool and B’s CPU pool (the fixture means what it says)', () => {
    expect(union).toContain('g5.xlarge');
    expect(union).toContain('m7i.xlarge');
    expect(instanceTypesFor(manifestB.endpoints.map((e) => e.resources))).toEqual(['m7i.xlarge']);
  });

  it('synthesizing app A or app B gives the same platform template', () => {
    expect(JSON.stringify(alpha.platform).length).toBeGreaterThan(1000);
    expect(beta.platform).toEqual(alpha.platform);
  });

  it('the platform exports every pool of the union, even when B (CPU only) is deployed', () => {
    const exported = exportsOf(beta.platform);
    for (const instanceType of union) expect(exported).toContain(poolExportName(instanceType));
    expect(exported).toContain('Ferry-Pool-g5-xlarge-CapacityProvider');
  });

  it('the platform exports every fixed name, and only fixed names (no CDK-generated exports)', () => {
    const exported = exportsOf(alpha.platform);
    for (const name of Object.values(platformExportNames)) expect(exported).toContain(name);
    for (const name of exported) {
      expect(name).toMatch(/^Ferry-[A-Za-z0-9-]+$/);
      expect(name).not.toContain('ExportsOutput');
    }
    expect(new Set(exported).size).toBe(exported.length);
  });

  it('every Fn::ImportValue of both app stacks is a plain name the platform exports', () => {
    for (const side of [alpha, beta]) {
      const exported = new Set(exportsOf(side.platform));
      const imports = importsOf(side.app);
      expect(imports.length).toBeGreaterThan(0);
      for (const name of imports) {
        expect(typeof name, JSON.stringify(name)).toBe('string');
        expect(exported.has(name as string), `${side.appStack} imports ${String(name)}`).toBe(true);
      }
    }
  });

  it('each app imports its own pool: A the g5 one, B only its CPU one', () => {
    const alphaImports = importsOf(alpha.app);
    const betaImports = importsOf(beta.app);
    expect(alphaImports).toContain(poolExportName('g5.xlarge'));
    expect(betaImports).toContain(poolExportName('m7i.xlarge'));
    expect(betaImports.filter((n) => String(n).startsWith('Ferry-Pool-'))).toEqual([
      poolExportName('m7i.xlarge'),
    ]);
    // A's load balancer reads the VPC, its subnets and the load balancers' group from the platform
    // too; the hosts' group stays the platform's alone (PlatformStack.hostsFromLoadBalancers).
    for (const name of [
      platformExportNames.vpcId,
      platformExportNames.publicSubnetIds,
      platformExportNames.loadBalancerSecurityGroupId,
    ]) {
      expect(alphaImports).toContain(name);
    }
    for (const imports of [alphaImports, betaImports]) {
      expect(imports).not.toContain(platformExportNames.instanceSecurityGroupId);
    }
    expect(betaImports).not.toContain(platformExportNames.loadBalancerSecurityGroupId);
  });

  it('app stacks hold no reference to a platform resource other than by export name', () => {
    for (const side of [alpha, beta]) {
      const text = JSON.stringify(side.app);
      expect(text).not.toContain(`${platformStackName}:`);
      // Every Ref / GetAtt stays inside the app template (its resources, or the bootstrap parameter).
      const local = new Set([...Object.keys(side.app.Resources), ...Object.keys(side.app.Parameters ?? {})]);
      let refs = 0;
      for (const match of text.matchAll(/"Ref":"([A-Za-z0-9:]+)"|"Fn::GetAtt":\["([A-Za-z0-9]+)"/g)) {
        const id = match[1] ?? match[2]!;
        if (id.startsWith('AWS::')) continue;
        refs++;
        expect(local.has(id), `${side.appStack} refers to ${id}`).toBe(true);
      }
      expect(refs).toBeGreaterThan(10);
    }
  });

  it('each app stack is deployed after the platform (an explicit dependency: imports carry none)', () => {
    expect(alpha.dependencies).toContain(platformStackName);
    expect(beta.dependencies).toContain(platformStackName);
  });

  it('passes cdk-nag AwsSolutions for both apps', () => {
    for (const side of [alpha, beta]) {
      expect(side.synthError).toBeUndefined();
      if (side.validationReport !== undefined) expect(side.validationReport).not.toContain('"failure"');
    }
  });

  it('lists the pools in a plain (not exported) InstanceTypes output the CLI keeps', () => {
    const output = alpha.platform.Outputs?.InstanceTypes;
    expect(output?.Value).toBe(union.join(','));
    expect(output?.Export).toBeUndefined();
  });
});

describe('the instance-type union', () => {
  it('refuses, at synth, an endpoint whose pool the platform would not have', () => {
    expect(() =>
      buildApp({
        manifest: manifestB,
        env: 'production',
        functionsCodeDir: functionsDir,
        artifact: { key: 'artifacts/beta/production/x.tar.gz' },
        images: sampleImages,
        instanceTypes: ['g5.xlarge'],
        nag: false,
      }),
    ).toThrowError(FerryError);
  });

  it('the CLI keeps pools the platform already has, even when no endpoint needs them any more', async () => {
    const pools = platformPools({
      ApiUrl: 'https://x/v2',
      BucketName: 'b',
      ControlTableName: 'c',
      InstanceTypes: 'g5.xlarge, p5.48xlarge,m7i.large',
    });
    expect(pools).toEqual(['g5.xlarge', 'p5.48xlarge', 'm7i.large']);
    const next = await platformInstanceTypes(
      manifestB.endpoints.map((e) => e.resources),
      pools,
    );
    expect(next).toEqual(['g5.xlarge', 'm7i.large', 'm7i.xlarge', 'p5.48xlarge']);
    // A platform of an older version has no InstanceTypes output: nothing extra, nothing lost.
    expect(platformPools({ ApiUrl: 'https://x/v2', BucketName: 'b', ControlTableName: 'c' })).toEqual([]);
  });
});
