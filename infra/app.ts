/**
 * The CDK app: the platform stack plus one app-environment stack, checked by cdk-nag (AwsSolutions).
 *
 * Two ways in:
 *  - `synthesize(options)` / `buildApp(options)`: for the CLI through @aws-cdk/toolkit-lib,
 *      const cx = await toolkit.fromAssemblyBuilder(async ({ outdir, context }) =>
 *        synthesize({ ...opts, outdir, context }));
 *  - `npx cdk synth` with cdk.json `{"app": "node dist/infra/app.js"}`, options as context:
 *      -c ferry:manifest=<path to ferry_manifest.json> -c ferry:env=production
 *      -c ferry:functionsDir=<bundles dir> -c ferry:artifactKey=artifacts/<app>/<env>/<fp>.tar.gz
 *      -c ferry:gpuWorkerImage=… -c ferry:cpuWorkerImage=… -c ferry:agentImage=…
 *      (optional: ferry:app, ferry:artifactBucket, ferry:instanceTypes=a,b, ferry:gpuWarmPoolSize=N,
 *      ferry:gpuScaleOutStep=N, ferry:availabilityZones=a,b,c,
 *      ferry:instanceTypeZones=g5.xlarge:a,b;m7i.large:a,b,c, ferry:cloudFrontPrefixList=pl-…)
 *
 * Stacks are environment-agnostic (no account/region): no lookups, so synth runs offline with no
 * credentials; the region comes from the deploying credentials.
 */
import { readFileSync, statSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { App, Validations } from 'aws-cdk-lib';
import type { CloudAssembly } from 'aws-cdk-lib/cx-api';
import { AwsSolutionsChecks } from 'cdk-nag';
import { ferryVersion } from '../cli/config.js';
import { FerryError } from '../core/errors.js';
import { type Manifest, manifestSchema } from '../core/manifest.js';
import { parseOr400 } from '../core/schemas.js';
import { AppEnvironmentStack, type WorkerImages } from './app-stack.js';
import { checkPrefixListId, type LbHttpsOptions } from './constructs/https-front.js';
import { instanceTypesFor } from './gpu.js';
import { appStackName, ownershipTags, platformStackName } from './names.js';
import { gpuPoolSettingsFrom } from './platform-settings.js';
import { defaultInstanceTypes, PlatformStack } from './platform-stack.js';
import { type InstanceTypeZones, parseInstanceTypeZones } from './pool-zones.js';
import { checkSynthesizedTemplate, checkTaskDefinitionSizes } from './template-limits.js';

export { platformStackName } from './names.js';

/**
 * Context every Ferry app synthesizes with (cdk.json carries the same). Ferry makes no automatic
 * cross-stack reference at all (app stacks import the platform's fixed exports by name,
 * platform-exports.ts); should one slip in, it stays a strong reference, which CloudFormation guards.
 */
export const ferryContext: Readonly<Record<string, unknown>> = {
  '@aws-cdk/core:defaultCrossStackReferences': 'strong',
};

export interface SynthesizeOptions {
  manifest: Manifest;
  /** App name; default `manifest.app`. */
  app?: string;
  env: string;
  functionsCodeDir: string;
  /** The artifact's key, and its bucket (default: the platform bucket). */
  artifact: { key: string; bucketName?: string };
  images: WorkerImages;
  /**
   * Capacity pools of the platform. The platform is shared by every app in the account, so the CLI
   * passes the union over every deployed endpoint of every app, the pools the platform already has
   * (its `InstanceTypes` output: pools are kept, never pruned) and this manifest's. The default only
   * covers this manifest and the platform defaults. The platform template depends on this list (and
   * the function bundles) only, never on which app is synthesized.
   */
  instanceTypes?: readonly string[];
  /** Stopped GPU instances kept ready per GPU pool (PlatformStackProps.gpuWarmPoolSize); default 0. */
  gpuWarmPoolSize?: number;
  /** GPU hosts per managed scale-out round (PlatformStackProps.gpuScaleOutStep); default 1. */
  gpuScaleOutStep?: number;
  /** The region's zones for the platform VPC (PlatformStackProps.availabilityZones); default two. */
  availabilityZones?: readonly string[];
  /**
   * The zones that offer each pool's instance types (PlatformStackProps.instanceTypeZones; the CLI
   * asks EC2, cli/providers/aws/zones.ts); default none known: every pool spans every zone.
   */
  instanceTypeZones?: InstanceTypeZones;
  endpointIds?: Readonly<Record<string, string>>;
  /**
   * Endpoints whose service an earlier deploy of this environment created (AppEnvironmentStackProps
   * servicesCreated): their template leaves the desired count to the scaler.
   */
  servicesCreated?: readonly string[];
  /** The call key each endpoint's tasks run with, by endpoint name (AppEnvironmentStackProps). */
  callKeyIds?: Readonly<Record<string, string>>;
  /** HTTPS of load-balanced endpoints: a domain (ACM), else CloudFront (constructs/https-front.ts). */
  https?: LbHttpsOptions;
  /**
   * Without a domain: the id of the `com.amazonaws.global.cloudfront.origin-facing` prefix list in the
   * deploy's region, which the ALBs admit port 80 from. Ids differ per region and these stacks are
   * environment-agnostic, so the CLI looks it up at deploy (cli/providers/aws/cloudfront-prefix-list.ts);
   * `-c ferry:cloudFrontPrefixList=pl-…` with `npx cdk synth`. Unset: any IPv4, and a synth warning.
   */
  cloudFrontPrefixListId?: string;
  /** The REST API's integration timeout (s); 29 unless the account's quota was raised (docs/aws.md). */
  integrationTimeoutSec?: number;
  /**
   * The Ferry version that builds the platform, output as `FerryVersion`: the CLI refuses to deploy
   * the platform with an older Ferry than the one that last did (cli/providers/aws/platform.ts).
   */
  ferryVersion?: string;
  outdir?: string;
  /**
   * Termination protection of each stack, as the deployed stack has it (the CLI reads
   * EnableTerminationProtection before it synthesizes; default off, as for a new stack). toolkit-lib
   * sets every stack it deploys to its artifact's value (deploy-stack.js updateTerminationProtection:
   * UpdateTerminationProtection whenever the deployed stack's differs), so a stack synthesized without
   * it had the protection an administrator set turned off by the next deploy. Ferry never turns it
   * on or off itself.
   */
  terminationProtection?: { platform?: boolean; app?: boolean };
  /** CDK context (toolkit-lib's builder hands one over). */
  context?: Record<string, unknown>;
  /** cdk-nag AwsSolutions checks (default on): synth throws "Validation failed" on a finding. */
  nag?: boolean;
  /**
   * The CDK's built-in CloudFormation Validate plugin (its default rules), default on: Ferry's tests
   * and `npx cdk synth` run it. Its findings are warnings only (Ferry does not set
   * `@aws-cdk/core:validateAgainstDefaultRules`), about Ferry's templates rather than the user's
   * code, and starting its engine costs a deploy about as much as the rest of the synth.
   */
  cfnValidate?: boolean;
}

export interface FerryApp {
  app: App;
  platform: PlatformStack;
  appStack: AppEnvironmentStack;
}

/** Builds the stacks into `app` (a new one by default). Bad options are FerryErrors. */
export function buildApp(
  options: SynthesizeOptions,
  app = new App({
    ...(options.outdir ? { outdir: options.outdir } : {}),
    context: { ...ferryContext, ...options.context },
    builtinCloudFormationValidation: options.cfnValidate ?? true,
  }),
): FerryApp {
  const manifest = parseOr400(manifestSchema, options.manifest, 'build manifest');
  const appName = options.app ?? manifest.app;
  if (!options.env) throw new FerryError('usage', 'An environment name is required');
  const instanceTypes = options.instanceTypes ?? [
    ...defaultInstanceTypes(),
    ...instanceTypesFor(manifest.endpoints.map((e) => e.resources)),
  ];
  const platform = new PlatformStack(app, platformStackName, {
    functionsCodeDir: options.functionsCodeDir,
    instanceTypes,
    ...(options.gpuWarmPoolSize ? { gpuWarmPoolSize: options.gpuWarmPoolSize } : {}),
    ...(options.gpuScaleOutStep ? { gpuScaleOutStep: options.gpuScaleOutStep } : {}),
    ...(options.availabilityZones ? { availabilityZones: options.availabilityZones } : {}),
    ...(options.instanceTypeZones ? { instanceTypeZones: options.instanceTypeZones } : {}),
    ...(options.integrationTimeoutSec ? { integrationTimeoutSec: options.integrationTimeoutSec } : {}),
    ...(options.ferryVersion ? { ferryVersion: options.ferryVersion } : {}),
    description: 'Ferry platform: v2 job API, tables, bucket, ECS cluster',
    terminationProtection: options.terminationProtection?.platform ?? false,
  });
  const appStack = new AppEnvironmentStack(app, appStackName(appName, options.env), {
    appName,
    envName: options.env,
    manifest,
    // Default bucket: the platform's, imported by its export name inside the app stack.
    artifact: options.artifact,
    platform: { instanceTypes: platform.instanceTypes, azCount: platform.azCount },
    images: options.images,
    ...(options.endpointIds ? { endpointIds: options.endpointIds } : {}),
    ...(options.callKeyIds ? { callKeyIds: options.callKeyIds } : {}),
    ...(options.servicesCreated ? { servicesCreated: options.servicesCreated } : {}),
    ...(options.https ? { https: options.https } : {}),
    ...(options.cloudFrontPrefixListId ? { cloudFrontPrefixListId: options.cloudFrontPrefixListId } : {}),
    description: `Ferry ${appName}/${options.env}`,
    terminationProtection: options.terminationProtection?.app ?? false,
    // Who owns the stack: the CLI refuses to deploy over a stack whose tags name another app/env.
    // CloudFormation copies stack tags to the resources that take tags.
    tags: { [ownershipTags.app]: appName, [ownershipTags.env]: options.env },
  });
  // Imports by name carry no reference CDK could order the stacks by: the platform (and the exports
  // the app imports) must be deployed first, so say it.
  appStack.addStackDependency(platform, 'imports the platform exports (platform-exports.ts)');
  if (options.nag ?? true) Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
  return { app, platform, appStack };
}

/**
 * Synthesizes the cloud assembly. For toolkit-lib:
 *   toolkit.fromAssemblyBuilder(async ({ outdir, context }) => synthesize({ ...options, outdir, context }))
 */
export function synthesize(options: SynthesizeOptions): CloudAssembly {
  return synthesizeChecked(buildApp(options), options);
}

/**
 * `app.synth()`, then the quotas CloudFormation applies to the app environment's template that only
 * the synthesized template shows (dynamic references, bytes; infra/template-limits.ts), and ECS's
 * size of each task definition: a template CloudFormation or ECS would refuse is a usage error here,
 * before anything is deployed.
 */
function synthesizeChecked({ app, appStack }: FerryApp, options: SynthesizeOptions): CloudAssembly {
  const assembly = app.synth();
  const artifact = assembly.getStackArtifact(appStack.artifactId);
  const environment = {
    app: options.app ?? options.manifest.app,
    env: options.env,
    endpoints: appStack.endpoints.length,
  };
  checkSynthesizedTemplate(
    // The file is what the toolkit uploads for CloudFormation to read (its size is the quota's).
    { template: artifact.template, bytes: statSync(artifact.templateFullPath).size },
    environment,
  );
  checkTaskDefinitionSizes(artifact.template, environment);
  return assembly;
}

/** Options from CDK context, for `npx cdk synth`. */
export function optionsFromContext(app: App): SynthesizeOptions {
  const get = (key: string): string | undefined => {
    const value = app.node.tryGetContext(`ferry:${key}`);
    return typeof value === 'string' && value !== '' ? value : undefined;
  };
  const need = (key: string): string => {
    const value = get(key);
    if (!value)
      throw new FerryError('usage', `Missing CDK context ferry:${key}`, { hint: `Pass -c ferry:${key}=…` });
    return value;
  };
  const manifestPath = resolve(need('manifest'));
  let manifest: Manifest;
  try {
    manifest = manifestSchema.parse(JSON.parse(readFileSync(manifestPath, 'utf8')));
  } catch (error) {
    throw new FerryError('bad_request', `Cannot read the build manifest ${manifestPath}`, {
      hint: 'Run `ferry build` first.',
      cause: error,
    });
  }
  const bucketName = get('artifactBucket');
  const app_ = get('app');
  const instanceTypes = get('instanceTypes');
  const availabilityZones = get('availabilityZones');
  const instanceTypeZones = get('instanceTypeZones');
  const cloudFrontPrefixList = get('cloudFrontPrefixList');
  return {
    manifest,
    ...(app_ ? { app: app_ } : {}),
    env: need('env'),
    functionsCodeDir: resolve(need('functionsDir')),
    artifact: { key: need('artifactKey'), ...(bucketName ? { bucketName } : {}) },
    images: {
      gpuWorker: need('gpuWorkerImage'),
      cpuWorker: need('cpuWorkerImage'),
      agent: need('agentImage'),
    },
    ...(instanceTypes ? { instanceTypes: instanceTypes.split(',').map((s) => s.trim()) } : {}),
    ...gpuPoolSettingsFrom('context', get),
    ferryVersion: ferryVersion(),
    ...(availabilityZones
      ? {
          availabilityZones: availabilityZones
            .split(',')
            .map((s) => s.trim())
            .filter(Boolean),
        }
      : {}),
    ...(instanceTypeZones
      ? { instanceTypeZones: parseInstanceTypeZones(instanceTypeZones, 'ferry:instanceTypeZones') }
      : {}),
    ...(cloudFrontPrefixList
      ? {
          cloudFrontPrefixListId: checkPrefixListId(
            cloudFrontPrefixList.trim(),
            'ferry:cloudFrontPrefixList',
          ),
        }
      : {}),
  };
}

function main(): void {
  const app = new App({ context: { ...ferryContext } });
  try {
    const options = optionsFromContext(app);
    synthesizeChecked(buildApp(options, app), options);
  } catch (error) {
    if (!FerryError.is(error)) throw error;
    process.stderr.write(`Error: ${error.message}\n${error.hint ? `${error.hint}\n` : ''}`);
    process.exitCode = 2;
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) main();
