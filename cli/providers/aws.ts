/**
 * The AWS provider: endpoints live in CloudFormation stacks in the user's account, records in the
 * platform's DynamoDB control table (so every machine of the team sees the same apps — flash kept
 * them in one laptop's .flash/resources.pkl), artifacts in the platform bucket.
 *
 *   FerryPlatform            one per account/region: API, tables, bucket, cluster (infra/platform-stack.ts)
 *   Ferry-<app>-<env>        one per app environment: queues, services, ALBs (infra/app-stack.ts)
 *
 * The unit CloudFormation deploys is a stack, so the provider works per app environment: provisioning
 * deploys the environment's stack with every endpoint it should have; removing some endpoints deploys
 * it without them; removing the last destroys it. Records are written only after CloudFormation said
 * yes, and deleted only after it removed what they describe.
 *
 * The platform is found by stack name (DescribeStacks) and read through its outputs (ApiUrl,
 * BucketName, ControlTableName). The first deploy in an account creates it; later deploys update it
 * only when its template changed (the toolkit skips unchanged stacks).
 *
 * Hidden test hooks (environment, for the CLI's end-to-end tests): FERRY_TEST_FAKE_TOOLKIT (see
 * toolkit.ts), FERRY_DYNAMODB_ENDPOINT and FERRY_S3_ENDPOINT (emulators instead of AWS).
 */
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { S3Client } from '@aws-sdk/client-s3';
import type { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { z } from 'zod';
import { DynamoControlStore, documentClient } from '../../core/adapters/aws/dynamo.js';
import { S3BlobStore, s3ClientConfig } from '../../core/adapters/aws/s3.js';
import { endpointConfigOf, endpointConfigSchema } from '../../core/deployment.js';
import { FerryError, usage } from '../../core/errors.js';
import { type Manifest, manifestSchema, type Resources } from '../../core/manifest.js';
import type { BlobStore, ControlStore, EndpointRecord } from '../../core/ports.js';
import type { WorkerImages } from '../../infra/app-stack.js';
import type { LbHttpsOptions } from '../../infra/constructs/https-front.js';
import { appStackName, checkAppEnvNames, endpointIdFor, platformStackName } from '../../infra/names.js';
import { agentBundleDir, agentImage, baseImageFor } from '../../worker-image/images.js';
import { apiKeyFromUser, ferryVersion, installRoot, readDotEnv } from '../config.js';
import { artifactKeyOf } from '../deploy/plan.js';
import type { Reporter } from '../io.js';
import {
  ensureEcsServiceLinkedRole,
  type IamLike,
  type SnsLike,
  subscribeAlarmEmail,
  usableStack,
} from './aws-account.js';
import {
  buildContextKey,
  type CodeBuildLike,
  type EcrLike,
  imagesAt,
  missingImages,
  neededImages,
  runImageBuild,
  writeBuildContext,
} from './aws-images.js';
import type {
  CdkToolkit,
  StackLookup,
  StackOutputs,
  SynthesizedAssembly,
  ToolkitEvent,
  ToolkitEventHandler,
} from './toolkit.js';
import { deadStackStatuses } from './toolkit.js';
import type { DestroyResult, PrepareInput, Provider, ProvisionContext, ServingState } from './types.js';

/**
 * The CDK app and the Lambda bundler, loaded on first use: aws-cdk-lib, cdk-nag and esbuild take a
 * second or more to import, and `ferry app list` needs none of them.
 */
async function loadInfra() {
  const [app, gpu, platform, bundle] = await Promise.all([
    import('../../infra/app.js'),
    import('../../infra/gpu.js'),
    import('../../infra/platform-stack.js'),
    import('../../functions/bundle.js'),
  ]);
  return {
    synthesize: app.synthesize,
    instanceTypesFor: gpu.instanceTypesFor,
    defaultInstanceTypes: platform.defaultInstanceTypes,
    bundleFunctions: bundle.bundleFunctions,
  };
}

// Stack names come from infra/names.ts, which loads no CDK code.
export { appStackName, platformStackName } from '../../infra/names.js';

/** The platform outputs the CLI reads (the stack has more; unknown ones are ignored on purpose). */
const platformOutputsSchema = z.object({
  ApiUrl: z.string().min(1),
  BucketName: z.string().min(1),
  ControlTableName: z.string().min(1),
  /** The platform's capacity pools, comma-separated (absent on platforms of older versions). */
  InstanceTypes: z.string().optional(),
  /** The platform's ECR registry and image CodeBuild project (absent on older platforms). */
  ImageRegistry: z.string().optional(),
  ImageBuildProject: z.string().optional(),
  /** The alarm topic (exported as Ferry-AlarmTopicArn). */
  AlarmTopicArn: z.string().optional(),
});
export type PlatformOutputs = z.infer<typeof platformOutputsSchema>;

/** The app stack's `Endpoints` output. Not strict: the stack may add fields later versions read. */
const endpointsOutputSchema = z.array(
  z.object({
    name: z.string(),
    id: z.string(),
    kind: z.enum(['queue', 'lb']),
    url: z.string().optional(),
    queueUrl: z.string().optional(),
    lowQueueUrl: z.string().optional(),
  }),
);

/**
 * Where a deployed endpoint is, kept on its record as `aws` (the control store saves the record as
 * JSON, so the field travels; EndpointRecord.config stays the strict EndpointConfig).
 */
export const awsEndpointInfoSchema = z
  .object({
    stack: z.string(),
    /** Clients' base URL: `<ApiUrl>/<id>` for queue endpoints, the ALB's URL for load-balanced ones. */
    url: z.string(),
    queueUrl: z.string().optional(),
    lowQueueUrl: z.string().optional(),
  })
  .strict();
export type AwsEndpointInfo = z.infer<typeof awsEndpointInfoSchema>;
export type AwsEndpointRecord = EndpointRecord & { aws?: AwsEndpointInfo };

export function awsInfoOf(record: EndpointRecord): AwsEndpointInfo | undefined {
  const parsed = awsEndpointInfoSchema.safeParse((record as AwsEndpointRecord).aws);
  return parsed.success ? parsed.data : undefined;
}

export interface AwsClients {
  doc: DynamoDBDocumentClient;
  s3: S3Client;
  close(): void;
}

/** Region and credentials from the usual AWS chain; endpoints only for emulators (test hooks). */
export function awsClientsFromEnv(env: NodeJS.ProcessEnv): AwsClients {
  const dynamo = new DynamoDBClient(
    env.FERRY_DYNAMODB_ENDPOINT ? { endpoint: env.FERRY_DYNAMODB_ENDPOINT } : {},
  );
  const doc = documentClient(dynamo);
  const s3 = new S3Client({
    ...s3ClientConfig,
    ...(env.FERRY_S3_ENDPOINT ? { endpoint: env.FERRY_S3_ENDPOINT, forcePathStyle: true } : {}),
  });
  return {
    doc,
    s3,
    close: () => {
      doc.destroy();
      dynamo.destroy();
      s3.destroy();
    },
  };
}

/**
 * The worker images: FERRY_AWS_GPU_IMAGE / FERRY_AWS_CPU_IMAGE / FERRY_AWS_AGENT_IMAGE (environment or
 * .env) win; otherwise the images of worker-image/images.ts under FERRY_AWS_IMAGE_REGISTRY
 * (e.g. `123456789012.dkr.ecr.us-east-1.amazonaws.com`). The agent has its own small image.
 */
export function workerImagesFrom(
  env: NodeJS.ProcessEnv,
  projectDir: string,
  pythonVersion: string,
): { images: WorkerImages; fromRegistry: boolean } {
  const dotenv = readDotEnv(projectDir);
  const get = (key: string) => (env[key] ?? dotenv[key])?.trim() || undefined;
  const registry = get('FERRY_AWS_IMAGE_REGISTRY')?.replace(/\/+$/, '');
  const version = ferryVersion();
  const at = (tag: string) => (registry ? `${registry}/${tag}` : tag);
  const cpuWorker = get('FERRY_AWS_CPU_IMAGE') ?? at(baseImageFor('cpu', version, pythonVersion));
  const images = {
    gpuWorker: get('FERRY_AWS_GPU_IMAGE') ?? at(baseImageFor('gpu', version, pythonVersion)),
    cpuWorker,
    agent: get('FERRY_AWS_AGENT_IMAGE') ?? at(agentImage(version)),
  };
  const explicit = ['FERRY_AWS_GPU_IMAGE', 'FERRY_AWS_CPU_IMAGE', 'FERRY_AWS_AGENT_IMAGE'].every(
    (k) => get(k) !== undefined,
  );
  return { images, fromRegistry: registry !== undefined || explicit };
}

/**
 * HTTPS of load-balanced endpoints (infra/constructs/https-front.ts), from FERRY_AWS_DOMAIN,
 * FERRY_AWS_CERTIFICATE_ARN and FERRY_AWS_HOSTED_ZONE_ID (environment, then the project's .env).
 * Without a domain: undefined, and each load-balanced endpoint gets a CloudFront https address.
 */
export function lbHttpsFrom(env: NodeJS.ProcessEnv, projectDir: string): LbHttpsOptions | undefined {
  const dotenv = readDotEnv(projectDir);
  const get = (key: string) => (env[key] ?? dotenv[key])?.trim() || undefined;
  const domainName = get('FERRY_AWS_DOMAIN')?.replace(/\.+$/, '');
  const certificateArn = get('FERRY_AWS_CERTIFICATE_ARN');
  const hostedZoneId = get('FERRY_AWS_HOSTED_ZONE_ID');
  if (!domainName) {
    if (certificateArn || hostedZoneId) {
      throw usage(
        'FERRY_AWS_CERTIFICATE_ARN and FERRY_AWS_HOSTED_ZONE_ID need FERRY_AWS_DOMAIN',
        'Set FERRY_AWS_DOMAIN to the domain your load-balanced endpoints answer under.',
      );
    }
    return undefined;
  }
  return {
    domainName,
    ...(certificateArn ? { certificateArn } : {}),
    ...(hostedZoneId ? { hostedZoneId } : {}),
  };
}

/**
 * FERRY_AWS_INTEGRATION_TIMEOUT_SEC: the API Gateway integration timeout this account's quota allows
 * (docs/aws.md "runsync"). Every deploy must pass the same value, since the platform is shared.
 */
export function integrationTimeoutFrom(env: NodeJS.ProcessEnv): { integrationTimeoutSec?: number } {
  const raw = env.FERRY_AWS_INTEGRATION_TIMEOUT_SEC?.trim();
  if (!raw) return {};
  const value = Number(raw);
  if (!Number.isInteger(value) || value < 29 || value > 900) {
    throw new FerryError(
      'usage',
      `FERRY_AWS_INTEGRATION_TIMEOUT_SEC must be a whole number 29-900, got ${raw}`,
      {
        hint: 'Leave it unset (29 s), or set the integration timeout API Gateway granted this account.',
      },
    );
  }
  return { integrationTimeoutSec: value };
}

/** The manifest an environment's stack is built from, put back together from its endpoint records. */
export function manifestFromRecords(app: string, records: readonly EndpointRecord[]): Manifest {
  const first = records[0];
  if (!first) throw new FerryError('failed', 'No endpoints to build a stack from');
  for (const record of records) {
    if (record.fingerprint !== first.fingerprint || record.artifactKey !== first.artifactKey) {
      throw new FerryError(
        'failed',
        `Endpoints of ${app}/${first.env} run different builds (${first.name}: ${first.fingerprint.slice(0, 12)}, ${record.name}: ${record.fingerprint.slice(0, 12)})`,
        { hint: `Deploy the environment again: \`ferry deploy --provider aws --env ${first.env}\`.` },
      );
    }
  }
  const configs = records.map((record) => endpointConfigOf(record));
  return manifestSchema.parse({
    version: 1,
    app,
    pythonVersion: configs[0]!.pythonVersion,
    generatedAt: new Date(first.updatedAt).toISOString(),
    sourceFingerprint: first.fingerprint,
    // The record's name (`live-x` in dev) names the stack's constructs, so two copies never clash.
    endpoints: records
      .map((record, i) => ({ ...configs[i]!.endpoint, name: record.name }))
      .sort((a, b) => a.name.localeCompare(b.name)),
    dependencies: { installed: [], excluded: [] },
  });
}

/**
 * The pools the shared platform needs: defaults, every deployed endpoint's, the new ones, and the
 * pools the platform already has (its `InstanceTypes` output). Pools are kept, never pruned: an idle
 * pool costs nothing, and dropping one could pull it from under an app stack still placed on it
 * (infra/platform-stack.ts).
 */
export async function platformInstanceTypes(
  resources: readonly Resources[],
  existing: readonly string[] = [],
): Promise<string[]> {
  const { defaultInstanceTypes, instanceTypesFor } = await loadInfra();
  return [...new Set([...defaultInstanceTypes(), ...instanceTypesFor(resources), ...existing])].sort();
}

/** The instance types listed in the platform's `InstanceTypes` output. */
export function platformPools(outputs: PlatformOutputs): string[] {
  return (outputs.InstanceTypes ?? '')
    .split(',')
    .map((t) => t.trim())
    .filter((t) => t !== '');
}

export interface AwsProviderOptions {
  env: NodeJS.ProcessEnv;
  projectDir: string;
  reporter: Reporter;
  toolkit: CdkToolkit;
  lookup: StackLookup;
  clients: AwsClients;
  /** Where the Lambda bundles and the cloud assembly go (default `<projectDir>/.ferry`). */
  stateDir?: string;
  /** Bootstrap the account/region (CDKToolkit stack) before the first deploy. */
  bootstrap?: boolean;
  /** IAM, for the ECS service-linked role check before a deploy (none: the check is skipped). */
  iam?: IamLike;
  /** SNS, and the address `--alarm-email` subscribes to the alarm topic. */
  sns?: SnsLike;
  alarmEmail?: string;
  /** ECR and CodeBuild, for the platform's images (none: only user-configured images work). */
  ecr?: EcrLike;
  codebuild?: CodeBuildLike;
  /** Time, for waiting out SQS's 60 s queue-name reuse rule (tests pass a fake). */
  clock?: { nowMs(): number; sleep(ms: number): Promise<void> };
}

const realClock = {
  nowMs: () => Date.now(),
  sleep: (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms)),
};

/** Progress lines from toolkit events: stacks as they start, resources every 10 %, failures always. */
function eventPrinter(reporter: Reporter): ToolkitEventHandler {
  const lastTenth = new Map<string, number>();
  return (event: ToolkitEvent) => {
    switch (event.type) {
      case 'stack':
        reporter.line(`  ${event.message}`);
        break;
      case 'resources': {
        const failed = /FAILED/.test(event.message);
        const stack = event.stack ?? '';
        const percent =
          event.total && event.completed !== undefined
            ? Math.min(100, Math.round((event.completed / event.total) * 100))
            : undefined;
        const tenth = percent === undefined ? -1 : Math.floor(percent / 10);
        if (!failed && (tenth <= (lastTenth.get(stack) ?? -1) || percent === undefined)) break;
        lastTenth.set(stack, tenth);
        const count = percent === undefined ? '' : `${event.completed}/${event.total} (${percent}%) `;
        reporter.line(`    ${stack} ${count}${event.message}`);
        break;
      }
      case 'done':
        reporter.line(`  ✓ ${event.message}`);
        break;
      case 'warning':
        reporter.line(`  warning: ${event.message}`);
        break;
      case 'error':
        reporter.line(`  error: ${event.message}`);
        break;
    }
  };
}

/** A port whose adapter is made on first use (the table's name is known only once the platform is). */
function lazyPort<T extends object>(open: () => Promise<T>): T {
  return new Proxy({} as T, {
    get(_target, prop) {
      // Not a thenable: `await provider.control` must not call into the store.
      if (prop === 'then') return undefined;
      // The provider closes the clients; a store never opened has nothing to close.
      if (prop === 'close') return async () => {};
      return async (...args: unknown[]) => {
        const port = (await open()) as Record<PropertyKey, unknown>;
        return (port[prop] as (...a: unknown[]) => unknown).apply(port, args);
      };
    },
  });
}

export class AwsProvider implements Provider {
  readonly name = 'aws' as const;
  readonly control: ControlStore;
  readonly blobs: BlobStore;
  readonly #stateDir: string;
  #platform: PlatformOutputs | undefined;
  #controlStore: DynamoControlStore | undefined;
  #blobStore: S3BlobStore | undefined;
  #functionsDir: Promise<string> | undefined;
  /** Endpoint ids each stack was deployed with by this process (a following destroy may skip work). */
  readonly #deployed = new Map<string, Set<string>>();
  readonly #destroyed = new Set<string>();
  readonly #urls = new Map<string, string>();

  constructor(private readonly options: AwsProviderOptions) {
    this.#stateDir = options.stateDir ?? path.join(options.projectDir, '.ferry');
    this.control = lazyPort(() => this.#control());
    this.blobs = lazyPort(() => this.#blobs());
  }

  // ── the platform ──────────────────────────────────────────────────────────────────────────────

  /** The platform's outputs; a clear error when this account/region has none yet. */
  async platform(): Promise<PlatformOutputs> {
    if (this.#platform) return this.#platform;
    const described = await this.options.lookup.describe(platformStackName);
    if (described && deadStackStatuses.has(described.status)) {
      throw new FerryError(
        'not_found',
        `The Ferry platform stack ${platformStackName} is in ${described.status}: its first deploy failed and rolled back`,
        {
          hint: 'Run `ferry deploy --provider aws` in a project: it deletes the failed stack and creates it again.',
        },
      );
    }
    const outputs = described?.outputs;
    if (!outputs) {
      throw new FerryError(
        'not_found',
        `No Ferry platform in this AWS account and region (stack ${platformStackName})`,
        {
          hint: 'Run `ferry deploy --provider aws` in a project: the first deploy creates it. Check AWS_REGION/AWS_PROFILE.',
        },
      );
    }
    this.#platform = parsePlatformOutputs(outputs);
    return this.#platform;
  }

  async #control(): Promise<DynamoControlStore> {
    if (!this.#controlStore) {
      const platform = await this.platform();
      this.#controlStore = new DynamoControlStore({
        doc: this.options.clients.doc,
        table: platform.ControlTableName,
      });
    }
    return this.#controlStore;
  }

  async #blobs(): Promise<S3BlobStore> {
    if (!this.#blobStore) {
      const platform = await this.platform();
      this.#blobStore = new S3BlobStore({ client: this.options.clients.s3, bucket: platform.BucketName });
    }
    return this.#blobStore;
  }

  /** Before deploy reads records: finds the platform, or creates it on first use. */
  async prepare(input: PrepareInput): Promise<void> {
    const { reporter } = input;
    checkAppEnvNames(input.manifest.app, input.env ?? 'production');
    if (this.options.iam) await ensureEcsServiceLinkedRole(this.options.iam, reporter);
    const described = await this.#usableStack(platformStackName, reporter);
    if (described) {
      this.#platform = parsePlatformOutputs(described.outputs);
      reporter.line(`  platform ${platformStackName}: ${this.#platform.ApiUrl}`);
      await this.#subscribeAlarms(reporter);
      return;
    }
    reporter.line(
      `  no ${platformStackName} stack in this account/region yet: creating it (first deploy; about 10 minutes)`,
    );
    const images = this.#images(input.manifest.pythonVersion, reporter);
    const env = input.env ?? 'production';
    const assembly = await this.#synth({
      manifest: input.manifest,
      app: input.manifest.app,
      env,
      artifactKey: artifactKeyOf(input.manifest.app, env, input.manifest.sourceFingerprint),
      images,
      instanceTypes: await platformInstanceTypes(input.manifest.endpoints.map((e) => e.resources)),
    });
    try {
      if (this.options.bootstrap) {
        reporter.line('  bootstrapping the account/region for the CDK (CDKToolkit stack)');
        await this.options.toolkit.bootstrap(assembly, eventPrinter(reporter));
      }
      const deployed = await this.options.toolkit.deploy(
        assembly,
        [platformStackName],
        eventPrinter(reporter),
      );
      this.#platform = parsePlatformOutputs(deployed[platformStackName] ?? {});
    } finally {
      await assembly.dispose();
    }
    reporter.line(`  ✓ platform ready: ${this.#platform.ApiUrl}`);
    await this.#subscribeAlarms(reporter);
  }

  async #subscribeAlarms(reporter: Reporter): Promise<void> {
    const { alarmEmail, sns } = this.options;
    if (!alarmEmail) return;
    const topic = this.#platform?.AlarmTopicArn;
    if (!sns || !topic) {
      throw new FerryError('usage', '--alarm-email needs a platform with an alarm topic', {
        hint: 'Deploy once with this Ferry version (it adds the topic), then pass --alarm-email again.',
      });
    }
    await subscribeAlarmEmail(sns, topic, alarmEmail, reporter);
  }

  #images(pythonVersion: string, reporter?: Reporter): WorkerImages {
    const { images, fromRegistry } = workerImagesFrom(
      this.options.env,
      this.options.projectDir,
      pythonVersion,
    );
    if (!fromRegistry && reporter) {
      reporter.line(
        `  warning: no image registry set; ECS will pull ${images.gpuWorker} and ${images.cpuWorker} as named. Build and push the worker images, then set FERRY_AWS_IMAGE_REGISTRY (see README "AWS").`,
      );
    }
    return images;
  }

  /**
   * The images of a deploy (cli/providers/aws-images.ts): the user's, or the platform registry's,
   * building missing tags in CodeBuild; exit 2 when there is no way to usable images.
   */
  async #deployImages(manifest: Manifest, reporter: Reporter): Promise<WorkerImages> {
    const configured = workerImagesFrom(this.options.env, this.options.projectDir, manifest.pythonVersion);
    if (configured.fromRegistry) return configured.images;
    const platform = await this.platform();
    const fix =
      'Build and push the images (`ferry images build && ferry images push --registry <your ECR registry>`) and set ' +
      'FERRY_AWS_IMAGE_REGISTRY, or set FERRY_AWS_GPU_IMAGE, FERRY_AWS_CPU_IMAGE and FERRY_AWS_AGENT_IMAGE';
    if (!platform.ImageRegistry || !this.options.ecr) {
      throw new FerryError('usage', 'No usable worker images: no image registry is configured', {
        hint: `${fix}. A platform of this Ferry version has its own ECR registry and builds them itself: deploy it with this version.`,
      });
    }
    const version = ferryVersion();
    const { placementFor } = await import('../../infra/gpu.js');
    const accelerators = new Set(manifest.endpoints.map((e) => placementFor(e.resources).kind));
    const needed = neededImages(accelerators, version, manifest.pythonVersion);
    const missing = await missingImages(this.options.ecr, needed);
    if (missing.length > 0) {
      const names = missing.map((m) => `${m.repository}:${m.tag}`).join(', ');
      const mayBuild = this.options.env.FERRY_AWS_IMAGE_BUILD !== 'never';
      if (!mayBuild || !platform.ImageBuildProject || !this.options.codebuild) {
        throw new FerryError('usage', `No usable worker images: ${names} not in ${platform.ImageRegistry}`, {
          hint: `${fix}, or let the deploy build them in your account (unset FERRY_AWS_IMAGE_BUILD=never).`,
        });
      }
      reporter.line(`  images missing from ${platform.ImageRegistry}: ${names}`);
      const { bundleAgent } = await import('../../worker-image/agent/bundle.js');
      const root = installRoot();
      await bundleAgent(path.join(root, agentBundleDir));
      const dir = path.join(this.#stateDir, 'aws');
      mkdirSync(dir, { recursive: true });
      const file = path.join(dir, 'image-context.tar.gz');
      await writeBuildContext(root, file, missing, version, manifest.pythonVersion);
      const clock = this.options.clock ?? realClock;
      const key = buildContextKey(version, manifest.pythonVersion, clock.nowMs());
      await (await this.#blobs()).putFile(key, file);
      await runImageBuild({
        codebuild: this.options.codebuild,
        project: platform.ImageBuildProject,
        contextKey: key,
        reporter,
        clock,
      });
    }
    return imagesAt(platform.ImageRegistry, version, manifest.pythonVersion);
  }

  #usableStack(stack: string, reporter: Reporter, owner?: { app: string; env: string }) {
    return usableStack(
      { lookup: this.options.lookup, toolkit: this.options.toolkit, clock: this.options.clock ?? realClock },
      stack,
      { reporter, onEvent: eventPrinter(reporter), ...(owner ? { owner } : {}) },
    );
  }

  #functions(): Promise<string> {
    const dir = path.join(this.#stateDir, 'aws', 'functions');
    this.#functionsDir ??= loadInfra()
      .then(({ bundleFunctions }) => bundleFunctions(dir))
      .then(() => dir);
    return this.#functionsDir;
  }

  get assemblyDir(): string {
    return path.join(this.#stateDir, 'cdk.out');
  }

  async #synth(input: {
    manifest: Manifest;
    app: string;
    env: string;
    artifactKey: string;
    images: WorkerImages;
    instanceTypes: string[];
    endpointIds?: Record<string, string>;
  }): Promise<SynthesizedAssembly> {
    const functionsCodeDir = await this.#functions();
    const { synthesize } = await loadInfra();
    const https = lbHttpsFrom(this.options.env, this.options.projectDir);
    return this.options.toolkit.synth(
      ({ outdir, context }) =>
        synthesize({
          manifest: input.manifest,
          app: input.app,
          env: input.env,
          functionsCodeDir,
          artifact: { key: input.artifactKey },
          images: input.images,
          instanceTypes: input.instanceTypes,
          ...(input.endpointIds ? { endpointIds: input.endpointIds } : {}),
          ...(https ? { https } : {}),
          ...integrationTimeoutFrom(this.options.env),
          ...(outdir ? { outdir } : {}),
          ...(context ? { context } : {}),
        }),
      { outdir: this.assemblyDir },
    );
  }

  /** `--synth-only`: the templates of the platform and this environment, offline, no credentials. */
  async synthOnly(input: { manifest: Manifest; app: string; env: string; reporter: Reporter }): Promise<{
    directory: string;
    stacks: Array<{ name: string; template: string }>;
  }> {
    const assembly = await this.#synth({
      manifest: input.manifest,
      app: input.app,
      env: input.env,
      artifactKey: artifactKeyOf(input.app, input.env, input.manifest.sourceFingerprint),
      images: this.#images(input.manifest.pythonVersion, input.reporter),
      instanceTypes: await platformInstanceTypes(input.manifest.endpoints.map((e) => e.resources)),
    });
    try {
      return {
        directory: assembly.directory,
        stacks: assembly.stackNames.map((name) => ({
          name,
          template: path.join(assembly.directory, `${name}.template.json`),
        })),
      };
    } finally {
      await assembly.dispose();
    }
  }

  // ── environments ──────────────────────────────────────────────────────────────────────────────

  /**
   * Deploys one environment's stack with exactly `records` (and the platform first, which the
   * toolkit skips when unchanged); returns the records with where each endpoint now is.
   */
  async #deployEnvironment(
    app: string,
    env: string,
    records: readonly EndpointRecord[],
    reporter: Reporter,
  ): Promise<AwsEndpointRecord[]> {
    const platform = await this.platform();
    const manifest = manifestFromRecords(app, records);
    const artifactKey = records[0]!.artifactKey ?? artifactKeyOf(app, env, manifest.sourceFingerprint);
    const deployedElsewhere = (await (await this.#control()).listEndpoints())
      .filter((r) => !(r.app === app && r.env === env))
      .map((r) => endpointConfigSchema.safeParse(r.config))
      .flatMap((parsed) => (parsed.success ? [parsed.data.endpoint.resources] : []));
    const stack = appStackName(app, env);
    await this.#usableStack(stack, reporter, { app, env });
    const assembly = await this.#synth({
      manifest,
      app,
      env,
      artifactKey,
      images: await this.#deployImages(manifest, reporter),
      instanceTypes: await platformInstanceTypes(
        [...deployedElsewhere, ...manifest.endpoints.map((e) => e.resources)],
        platformPools(platform),
      ),
      endpointIds: Object.fromEntries(records.map((r) => [r.name, r.id])),
    });
    let outputs: Record<string, StackOutputs>;
    try {
      outputs = await this.options.toolkit.deploy(
        assembly,
        [platformStackName, stack],
        eventPrinter(reporter),
      );
    } finally {
      await assembly.dispose();
    }
    // The platform may have gained pools: a later deploy of this process must keep them too.
    const platformNow = platformOutputsSchema.safeParse(outputs[platformStackName]);
    if (platformNow.success) this.#platform = platformNow.data;
    const raw = outputs[stack]?.Endpoints;
    let listed: z.infer<typeof endpointsOutputSchema>;
    try {
      listed = endpointsOutputSchema.parse(JSON.parse(raw ?? ''));
    } catch {
      throw new FerryError(
        'failed',
        `Stack ${stack} deployed, but its Endpoints output is missing or unreadable`,
        {
          hint: 'The stack and this Ferry may be different versions; deploy again with this version.',
        },
      );
    }
    const byId = new Map(listed.map((e) => [e.id, e]));
    const located = records.map((record): AwsEndpointRecord => {
      const out = byId.get(record.id);
      if (!out)
        throw new FerryError('failed', `Stack ${stack} has no endpoint ${record.name} (${record.id})`);
      const url =
        record.kind === 'lb' ? (out.url ?? '') : `${platform.ApiUrl.replace(/\/+$/, '')}/${record.id}`;
      if (!url)
        throw new FerryError('failed', `Stack ${stack} gives no URL for ${record.name} (${record.id})`);
      this.#urls.set(record.id, url);
      return {
        ...record,
        aws: {
          stack,
          url,
          ...(out.queueUrl ? { queueUrl: out.queueUrl } : {}),
          ...(out.lowQueueUrl ? { lowQueueUrl: out.lowQueueUrl } : {}),
        },
      };
    });
    this.#deployed.set(stack, new Set(records.map((r) => r.id)));
    this.#destroyed.delete(stack);
    return located;
  }

  uploadArtifact(key: string, filePath: string, onProgress?: (sentBytes: number) => void): Promise<void> {
    return this.#blobs().then((blobs) => blobs.putFile(key, filePath, onProgress));
  }

  /** `_changed` is what the plan created or updated; a stack deploy always carries `context.all`. */
  async provision(_changed: EndpointRecord[], context?: ProvisionContext): Promise<void> {
    if (!context) {
      throw new FerryError(
        'failed',
        'The AWS provider provisions whole environments: it needs the deploy context',
      );
    }
    if (context.all.length === 0) return;
    const located = await this.#deployEnvironment(context.app, context.env, context.all, context.reporter);
    const control = await this.#control();
    for (const record of located) await control.putEndpoint(record);
  }

  async destroy(records: EndpointRecord[]): Promise<DestroyResult> {
    const result: DestroyResult = { deleted: [], failed: [] };
    const groups = new Map<string, EndpointRecord[]>();
    for (const record of records) {
      const key = JSON.stringify([record.app, record.env]);
      groups.set(key, [...(groups.get(key) ?? []), record]);
    }
    const control = await this.#control();
    for (const group of groups.values()) {
      const { app, env } = group[0]!;
      const stack = appStackName(app, env);
      try {
        const leaving = new Set(group.map((r) => r.id));
        const remaining = (await control.listEndpoints({ app, env })).filter((r) => !leaving.has(r.id));
        const alreadyDeployed = this.#deployed.get(stack);
        const upToDate =
          alreadyDeployed !== undefined &&
          alreadyDeployed.size === remaining.length &&
          remaining.every((r) => alreadyDeployed.has(r.id));
        if (remaining.length === 0) {
          this.options.reporter.line(`  destroying stack ${stack}`);
          await this.options.toolkit.destroy([stack], eventPrinter(this.options.reporter));
          this.#destroyed.add(stack);
          this.#deployed.delete(stack);
        } else if (!upToDate) {
          this.options.reporter.line(
            `  updating stack ${stack} without ${group.map((r) => r.name).join(', ')}`,
          );
          const located = await this.#deployEnvironment(app, env, remaining, this.options.reporter);
          for (const record of located) await control.putEndpoint(record);
        }
        for (const record of group) {
          await control.deleteEndpoint(record.id);
          result.deleted.push(record);
        }
      } catch (error) {
        const message = FerryError.is(error) ? error.message : (error as Error).message;
        for (const record of group) result.failed.push({ record, error: message });
      }
    }
    return result;
  }

  /** Destroys an environment's stack even when no endpoint record is left (a failed first deploy). */
  async destroyEnvironment(app: string, env: string): Promise<void> {
    const stack = appStackName(app, env);
    if (this.#destroyed.has(stack)) return;
    await this.options.toolkit.destroy([stack], eventPrinter(this.options.reporter));
    this.#destroyed.add(stack);
  }

  newEndpointId(app: string, env: string, name: string): string {
    return endpointIdFor(app, env, name);
  }

  endpointUrl(record: EndpointRecord): string {
    const known = awsInfoOf(record)?.url ?? this.#urls.get(record.id);
    if (known) return known;
    if (record.kind === 'queue' && this.#platform)
      return `${this.#platform.ApiUrl.replace(/\/+$/, '')}/${record.id}`;
    return '(not deployed)';
  }

  async ensureServing(): Promise<ServingState> {
    return { url: (await this.platform()).ApiUrl, started: false };
  }

  async serving(): Promise<string | undefined> {
    return this.#platform?.ApiUrl;
  }

  async apiKey(): Promise<{ key: string; source: string }> {
    const fromUser = apiKeyFromUser(this.options.env, this.options.projectDir);
    if (!fromUser) {
      throw new FerryError('unauthorized', 'FERRY_API_KEY is not set', {
        hint: 'Create a key with `ferry keys create --provider aws` and put it in .env as FERRY_API_KEY.',
      });
    }
    return {
      key: fromUser.key,
      source: fromUser.source === 'environment' ? 'FERRY_API_KEY' : '.env FERRY_API_KEY',
    };
  }

  async close(): Promise<void> {
    this.options.clients.close();
    this.options.lookup.close();
  }
}

function parsePlatformOutputs(outputs: StackOutputs): PlatformOutputs {
  const parsed = platformOutputsSchema.safeParse(outputs);
  if (!parsed.success) {
    throw new FerryError(
      'failed',
      `Stack ${platformStackName} lacks outputs the CLI needs: ${parsed.error.issues.map((i) => i.path.join('.')).join(', ')}`,
      { hint: 'It was deployed by another Ferry version: run `ferry deploy --provider aws` with this one.' },
    );
  }
  return parsed.data;
}
