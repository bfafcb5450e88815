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
import type { z } from 'zod';
import { DynamoControlStore } from '../../core/adapters/aws/dynamo.js';
import { S3BlobStore } from '../../core/adapters/aws/s3.js';
import {
  type CallTokenSecrets,
  deleteLegacyCallTokenSecret,
  legacyCallTokenSecretName,
  prepareCallKeys,
  retireCallKeys,
  revokeCallKeys,
} from '../../core/call-keys.js';
import { foregroundClock } from '../../core/clock.js';
import { endpointConfigSchema } from '../../core/deployment.js';
import { FerryError } from '../../core/errors.js';
import type { Manifest } from '../../core/manifest.js';
import type { BlobStore, ControlStore, EndpointRecord } from '../../core/ports.js';
import type { WorkerImages } from '../../infra/app-stack.js';
import { appStackName, checkAppEnvNames, endpointIdFor, platformStackName } from '../../infra/names.js';
import { agentBundleDir } from '../../worker-image/images.js';
import { apiKeyFromUser, ferryVersion, installRoot } from '../config.js';
import { artifactKeyOf } from '../deploy/plan.js';
import type { Reporter } from '../io.js';
import { type AwsClients, awsClientsFromEnv, checkAwsConfiguration } from './aws/clients.js';
import { cloudFrontPrefixListId, needsCloudFrontPrefixList } from './aws/cloudfront-prefix-list.js';
import { lazyPort } from './aws/lazy-port.js';
import { manifestFromRecords } from './aws/manifest.js';
import {
  loadInfra,
  type PlatformOutputs,
  parsePlatformOutputs,
  platformInstanceTypes,
  platformOutputsSchema,
  platformPools,
} from './aws/platform.js';
import { eventPrinter } from './aws/progress.js';
import {
  type AwsEndpointInfo,
  type AwsEndpointRecord,
  awsEndpointInfoSchema,
  awsInfoOf,
  endpointsOutputSchema,
} from './aws/records.js';
import { integrationTimeoutFrom, lbHttpsFrom, workerImagesFrom } from './aws/settings.js';
import { type Ec2Like, platformZones } from './aws/zones.js';
import {
  ensureEcsServiceLinkedRole,
  type IamLike,
  replacedBecause,
  type SnsLike,
  type StackPorts,
  stackBusyError,
  subscribeAlarmEmail,
  usableStack,
  waitForQueueNames,
} from './aws-account.js';
import {
  buildContextKey,
  buildMissingImages,
  type CodeBuildLike,
  type EcrLike,
  imagesAt,
  missingImages,
  neededImages,
  writeBuildContext,
} from './aws-images.js';
import type { CdkToolkit, StackLookup, StackOutputs, SynthesizedAssembly } from './toolkit.js';
import { deadStackStatuses, isBusyStackStatus, queueNamesOf, uncreatedStackStatuses } from './toolkit.js';
import type { DestroyResult, PrepareInput, Provider, ProvisionContext, ServingState } from './types.js';

// Stack names come from infra/names.ts, which loads no CDK code.
export { appStackName, platformStackName } from '../../infra/names.js';
// The provider's parts, importable from here as before the split.
export {
  type AwsClients,
  type AwsEndpointInfo,
  type AwsEndpointRecord,
  awsClientsFromEnv,
  awsEndpointInfoSchema,
  awsInfoOf,
  checkAwsConfiguration,
  integrationTimeoutFrom,
  lbHttpsFrom,
  manifestFromRecords,
  type PlatformOutputs,
  platformInstanceTypes,
  platformPools,
  workerImagesFrom,
};

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
  /** Where each endpoint's call key goes for its workers (core/call-keys.ts): Secrets Manager. */
  callTokens: CallTokenSecrets;
  /**
   * EC2, for the region's availability zones on the platform's first deploy (aws/zones.ts) and for
   * CloudFront's origin-facing prefix list when load-balanced endpoints have no domain
   * (aws/cloudfront-prefix-list.ts). None (the recording fake toolkit): neither is looked up.
   */
  ec2?: Ec2Like;
  /** Move the platform to the region's current zones (`--refresh-zones`); default: keep its zones. */
  refreshZones?: boolean;
  /** Time, for waiting out SQS's 60 s queue-name reuse rule (tests pass a fake). */
  clock?: { nowMs(): number; sleep(ms: number): Promise<void> };
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
  /** The platform's zones for this process's synths, decided once (aws/zones.ts). */
  #zones: Promise<string[] | undefined> | undefined;
  /** CloudFront's origin-facing prefix list id in this region, looked up once (aws/cloudfront-prefix-list.ts). */
  #cloudFrontPrefixList: Promise<string> | undefined;
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
        `The Ferry platform stack ${platformStackName} is in ${described.status}: ${replacedBecause(described.status)}`,
        {
          hint: 'Run `ferry deploy --provider aws` in a project: it deletes the failed stack and creates it again.',
        },
      );
    }
    // A platform stack that was never created (REVIEW_IN_PROGRESS) is no platform; one that is
    // being created has no outputs yet (an update keeps its outputs, and reading them is fine).
    const created = described && !uncreatedStackStatuses.has(described.status) ? described : undefined;
    if (
      created &&
      isBusyStackStatus(created.status) &&
      !platformOutputsSchema.safeParse(created.outputs).success
    ) {
      throw stackBusyError(platformStackName, created.status);
    }
    const outputs = created?.outputs;
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
    const { poolFitOf } = await import('../../infra/gpu.js');
    for (const endpoint of input.manifest.endpoints) {
      const fit = poolFitOf(endpoint);
      if (fit.error) throw fit.error;
      if (fit.warning) reporter.line(`  warning: ${fit.warning}`);
    }
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
      availabilityZones: await this.#platformZones(reporter),
      cloudFrontPrefixListId: await this.#cloudFrontPrefixListId(input.manifest, reporter),
    });
    try {
      if (this.options.bootstrap) {
        reporter.line('  bootstrapping the account/region for the CDK (CDKToolkit stack)');
        await this.options.toolkit.bootstrap(assembly, eventPrinter(reporter));
      }
      const deployed = await this.#deploy(assembly, [{ name: platformStackName, live: false }], reporter);
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
      const clock = this.options.clock ?? foregroundClock;
      const key = buildContextKey(version, manifest.pythonVersion, clock.nowMs());
      await (await this.#blobs()).putFile(key, file);
      await buildMissingImages({
        codebuild: this.options.codebuild,
        ecr: this.options.ecr,
        missing,
        project: platform.ImageBuildProject,
        contextKey: key,
        reporter,
        clock,
      });
    }
    return imagesAt(platform.ImageRegistry, version, manifest.pythonVersion);
  }

  /** The zones the platform is synthesized with: its own once deployed (aws/zones.ts). */
  #platformZones(reporter: Reporter): Promise<string[] | undefined> {
    this.#zones ??= platformZones({
      ...(this.options.ec2 ? { ec2: this.options.ec2 } : {}),
      ...(this.#platform ? { deployed: this.#platform } : {}),
      ...(this.options.refreshZones ? { refresh: true } : {}),
      reporter,
    });
    return this.#zones;
  }

  /**
   * The id of CloudFront's origin-facing prefix list, when `manifest` has load-balanced endpoints
   * behind CloudFront (no domain) and there is an EC2 client; asked once per process. A failed lookup
   * stops the deploy before anything is deployed (aws/cloudfront-prefix-list.ts).
   */
  async #cloudFrontPrefixListId(manifest: Manifest, reporter: Reporter): Promise<string | undefined> {
    const { ec2 } = this.options;
    if (
      !ec2 ||
      !needsCloudFrontPrefixList(manifest, lbHttpsFrom(this.options.env, this.options.projectDir))
    ) {
      return undefined;
    }
    if (!this.#cloudFrontPrefixList) {
      this.#cloudFrontPrefixList = cloudFrontPrefixListId(ec2);
      reporter.line(`  CloudFront origin-facing prefix list: ${await this.#cloudFrontPrefixList}`);
    }
    return this.#cloudFrontPrefixList;
  }

  #stackPorts(): StackPorts {
    return {
      lookup: this.options.lookup,
      toolkit: this.options.toolkit,
      clock: this.options.clock ?? foregroundClock,
    };
  }

  #usableStack(stack: string, reporter: Reporter, owner?: { app: string; env: string }) {
    return usableStack(this.#stackPorts(), stack, {
      reporter,
      onEvent: eventPrinter(reporter),
      ...(owner ? { owner } : {}),
    });
  }

  /**
   * Deploys the assembly's stacks once SQS lets them create their queues (waitForQueueNames). `live`:
   * the stack exists (usableStack found it).
   */
  async #deploy(
    assembly: SynthesizedAssembly,
    stacks: ReadonlyArray<{ name: string; live: boolean }>,
    reporter: Reporter,
  ): Promise<Record<string, StackOutputs>> {
    for (const { name, live } of stacks) {
      const queueNames = queueNamesOf(assembly.template(name));
      await waitForQueueNames(this.#stackPorts(), name, { queueNames, live, reporter });
    }
    return this.options.toolkit.deploy(
      assembly,
      stacks.map((s) => s.name),
      eventPrinter(reporter),
    );
  }

  /** The Lambda bundles; esbuild runs again only when Ferry's sources changed (functions/bundle.ts). */
  #functions(): Promise<string> {
    const dir = path.join(this.#stateDir, 'aws', 'functions');
    const cacheFile = path.join(this.#stateDir, 'aws', 'functions.inputs.json');
    this.#functionsDir ??= loadInfra()
      .then(({ bundleFunctions }) => bundleFunctions(dir, { cacheFile }))
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
    /** The platform VPC's zones; none: CDK's two `Fn::GetAZs` picks (offline synth). */
    availabilityZones?: string[] | undefined;
    /** CloudFront's origin-facing prefix list; none: the ALBs admit any IPv4 on 80 (offline synth). */
    cloudFrontPrefixListId?: string | undefined;
    endpointIds?: Record<string, string>;
    servicesCreated?: string[];
    callKeyIds?: Record<string, string>;
    /**
     * The CDK's own CloudFormation validation (infra/app.ts cfnValidate): `--synth-only`, which is
     * for reading the templates, runs it; a deploy does not (warnings only, about Ferry's templates).
     */
    cfnValidate?: boolean;
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
          ...(input.availabilityZones ? { availabilityZones: input.availabilityZones } : {}),
          ...(input.cloudFrontPrefixListId ? { cloudFrontPrefixListId: input.cloudFrontPrefixListId } : {}),
          ...(input.endpointIds ? { endpointIds: input.endpointIds } : {}),
          ...(input.servicesCreated ? { servicesCreated: input.servicesCreated } : {}),
          ...(input.callKeyIds ? { callKeyIds: input.callKeyIds } : {}),
          cfnValidate: input.cfnValidate ?? false,
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
      cfnValidate: true,
    });
    // Offline: no EC2 call, so the template cannot name CloudFront's prefix list (its id differs per
    // region); the deploy looks it up and narrows the rule (infra/constructs/https-front.ts).
    if (needsCloudFrontPrefixList(input.manifest, lbHttpsFrom(this.options.env, this.options.projectDir))) {
      input.reporter.line(
        "  note: in these templates the ALBs of load-balanced endpoints admit port 80 from any IPv4 (the secret header still closes them); `ferry deploy` looks up the region's CloudFront origin-facing prefix list and admits only that",
      );
    }
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
   * toolkit skips when unchanged); returns the records with where each endpoint now is. The
   * endpoints in `rotate` (created or changed) get a new call key; the old ones stop working once the
   * stack, and so every task that held them, has been replaced (core/call-keys.ts).
   */
  async #deployEnvironment(
    app: string,
    env: string,
    records: readonly EndpointRecord[],
    reporter: Reporter,
    rotate: ReadonlySet<string> = new Set(),
  ): Promise<AwsEndpointRecord[]> {
    const platform = await this.platform();
    const callKeyIds = await prepareCallKeys(
      { control: await this.#control(), secrets: this.options.callTokens, nowMs: () => Date.now() },
      records,
      rotate,
    );
    const manifest = manifestFromRecords(app, records);
    const artifactKey = records[0]!.artifactKey ?? artifactKeyOf(app, env, manifest.sourceFingerprint);
    const deployed = await (await this.#control()).listEndpoints();
    const deployedElsewhere = deployed
      .filter((r) => !(r.app === app && r.env === env))
      .map((r) => endpointConfigSchema.safeParse(r.config))
      .flatMap((parsed) => (parsed.success ? [parsed.data.endpoint.resources] : []));
    const stack = appStackName(app, env);
    const live = (await this.#usableStack(stack, reporter, { app, env })) !== undefined;
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
      availabilityZones: await this.#platformZones(reporter),
      cloudFrontPrefixListId: await this.#cloudFrontPrefixListId(manifest, reporter),
      endpointIds: Object.fromEntries(records.map((r) => [r.name, r.id])),
      // An endpoint record is written once its stack deployed (provision), so this environment's
      // records name the services that exist: their desired count stays the scaler's. Unless the
      // stack is gone (a failed undeploy keeps the records, and usableStack deletes the stack it
      // left in DELETE_FAILED): its services are created again, and must state 0 (ECS starts 1).
      servicesCreated: live ? deployed.filter((r) => r.app === app && r.env === env).map((r) => r.id) : [],
      callKeyIds,
    });
    let outputs: Record<string, StackOutputs>;
    try {
      outputs = await this.#deploy(
        assembly,
        [
          { name: platformStackName, live: true },
          { name: stack, live },
        ],
        reporter,
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
    const control = await this.#control();
    for (const record of records) {
      await retireCallKeys(control, record.id, callKeyIds[record.name]!);
      await this.#deleteLegacyCallTokenSecret(record, reporter);
    }
    this.#deployed.set(stack, new Set(records.map((r) => r.id)));
    this.#destroyed.delete(stack);
    return located;
  }

  /**
   * The secret an earlier Ferry version kept the endpoint's call key in: nothing reads it once the
   * stack deployed. The stack is up by now, so a failure here costs a stray secret, not the deploy.
   */
  async #deleteLegacyCallTokenSecret(record: EndpointRecord, reporter: Reporter): Promise<void> {
    try {
      await deleteLegacyCallTokenSecret(this.options.callTokens, record);
    } catch (error) {
      reporter.line(
        `  warning: could not delete the old call-key secret ${legacyCallTokenSecretName(record)} (${(error as Error).message}); it is unused, delete it by hand`,
      );
    }
  }

  uploadArtifact(key: string, filePath: string, onProgress?: (sentBytes: number) => void): Promise<void> {
    return this.#blobs().then((blobs) => blobs.putFile(key, filePath, onProgress));
  }

  /** `_changed` is what the plan created or updated; a stack deploy always carries `context.all`. */
  async provision(changed: EndpointRecord[], context?: ProvisionContext): Promise<void> {
    if (!context) {
      throw new FerryError(
        'failed',
        'The AWS provider provisions whole environments: it needs the deploy context',
      );
    }
    if (context.all.length === 0) return;
    const located = await this.#deployEnvironment(
      context.app,
      context.env,
      context.all,
      context.reporter,
      new Set(changed.map((r) => r.id)),
    );
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
          // Its tasks are gone: nothing may call with its workers' key any more.
          await revokeCallKeys({ control, secrets: this.options.callTokens }, record);
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
    this.options.ec2?.destroy?.();
  }
}
