/**
 * The endpoints an environment keeps once `leaving` is gone, as its stack must be rebuilt from. Listed
 * through an index (eventually consistent), then each read by key, strongly: a record deleted moments
 * ago (the undeploy just before this one) may still be listed, and must not bring its endpoint back.
 */
async function endpointsLeft(
  control: ControlStore,
  app: string,
  env: string,
  leaving: readonly EndpointRecord[],
): Promise<EndpointRecord[]> {
  const gone = new Set(leaving.map((r) => r.id));
  const listed = (await control.listEndpoints({ app, env })).filter((r) => !gone.has(r.id));
  const current = await Promise.all(listed.map((r) => control.getEndpoint(r.id)));
  return current.filter((r): r is EndpointRecord => r !== undefined);
}

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
import type { SecretsManagerSecretStore } from '../../core/adapters/aws/secrets.js';
import {
  type CallTokenSecrets,
  deleteLegacyCallTokenSecret,
  legacyCallTokenSecretName,
  prepareCallKeys,
  retireCallKeys,
  revokeCallKeys,
} from '../../core/call-keys.js';
import { foregroundClock } from '../../core/clock.js';
import { type DnsRecord, endpointConfigSchema } from '../../core/deployment.js';
import { FerryError } from '../../core/errors.js';
import type { Manifest } from '../../core/manifest.js';
import type { BlobStore, ControlStore, EndpointRecord } from '../../core/ports.js';
import type { WorkerImages } from '../../infra/app-stack.js';
import type { LbHttpsOptions } from '../../infra/constructs/https-front.js';
import { appStackName, checkAppEnvNames, endpointIdFor, platformStackName } from '../../infra/names.js';
import type { InstanceTypeZones } from '../../infra/pool-zones.js';
import { apiKeyFromUser, apiKeyInShell, ferryVersion, installRoot } from '../config.js';
import { artifactKeyOf } from '../deploy/plan.js';
import type { Reporter } from '../io.js';
import { type AwsClients, awsClientsFromEnv, checkAwsConfiguration } from './aws/clients.js';
import { cloudFrontPrefixListId, needsCloudFrontPrefixList } from './aws/cloudfront-prefix-list.js';
import { lazyPort } from './aws/lazy-port.js';
import { manifestFromRecords } from './aws/manifest.js';
import {
  checkPlatformVersion,
  loadInfra,
  type PlatformOutputs,
  type PlatformSettings,
  parsePlatformOutputs,
  platformInstanceTypes,
  platformOutputsSchema,
  platformPools,
  platformSettings,
} from './aws/platform.js';
import { eventPrinter } from './aws/progress.js';
import {
  type AwsEndpointInfo,
  type AwsEndpointRecord,
  type AwsEnvironmentRecord,
  type AwsEnvironmentSettings,
  awsEndpointInfoSchema,
  awsInfoOf,
  awsSettingsOf,
  endpointsOutputSchema,
} from './aws/records.js';
import { integrationTimeoutFrom, lbHttpsFrom, workerImagesFrom } from './aws/settings.js';
import { ThrottleTolerantToolkit } from './aws/throttled.js';
import { deployedOfferings, deployedZones, type Ec2Like, platformZones, poolOfferings } from './aws/zones.js';
import {
  checkPlatformCreatable,
  type EcrRepositoriesLike,
  ensureEcsServiceLinkedRole,
  heldForReviewMs,
  type IamLike,
  platformDeleteFailedHint,
  replacedBecause,
  type SnsLike,
  type StackPorts,
  stackBusyError,
  subscribeAlarmEmail,
  usableStack,
  waitForQueueNames,
} from './aws-account.js';
import {
  acceleratorsOf,
  buildContextKey,
  buildMissingImages,
  type CodeBuildLike,
  type EcrLike,
  imagesAt,
  imagesIn,
  missingImages,
  neededImages,
  platformImageContent,
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
  /**
   * ECR again, for the repositories a deleted platform kept, before the platform is created
   * (aws-account.ts checkPlatformCreatable). None (the recording fake toolkit): not checked.
   */
  ecrRepositories?: EcrRepositoriesLike;
  codebuild?: CodeBuildLike;
  /** Where each endpoint's call key goes for its workers (core/call-keys.ts): Secrets Manager. */
  callTokens: CallTokenSecrets;
  /**
   * The user's `secrets=` values (`ferry/<app>/<env>/<NAME>`, core/adapters/aws/secrets.ts): looked
   * up by name so a deploy can warn of a name without one (`missingSecrets`), and listed
   * (`secretNames`). None (the recording fake toolkit): no warning.
   */
  secrets?: Pick<SecretsManagerSecretStore, 'list' | 'missing'>;
  /**
   * EC2, for the region's availability zones on the platform's first deploy (aws/zones.ts), for the
   * zones that offer a pool's instance types when the platform has not recorded them (same), and for
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
  /** The toolkit, with a deploy or destroy failed by a throttled events read checked (aws/throttled.ts). */
  readonly #toolkit: CdkToolkit;
  #platform: PlatformOutputs | undefined;
  #controlStore: DynamoControlStore | undefined;
  #blobStore: S3BlobStore | undefined;
  #functionsDir: Promise<string> | undefined;
  /** The platform's zones for this process's synths, decided once (aws/zones.ts). */
  #zones: Promise<string[] | undefined> | undefined;
  /** Instance type offerings known to this process's synths (aws/zones.ts poolOfferings). */
  #offerings: InstanceTypeZones | undefined;
  /**
   * Whether the deployed platform stack has termination protection on (EnableTerminationProtection),
   * as read before its deploy: the platform is synthesized with the same, so no deploy turns it off
   * (infra/app.ts terminationProtection). Undefined: not read yet.
   */
  #platformProtected: boolean | undefined;
  /** CloudFront's origin-facing prefix list id in this region, looked up once (aws/cloudfront-prefix-list.ts). */
  #cloudFrontPrefixList: Promise<string> | undefined;
  /** Endpoint ids each stack was deployed with by this process (a following destroy may skip work). */
  readonly #deployed = new Map<string, Set<string>>();
  readonly #destroyed = new Set<string>();
  readonly #urls = new Map<string, string>();
  /** What the last deploy's `Endpoints` output said each endpoint's URL waits for in DNS. */
  readonly #dnsRecords = new Map<string, DnsRecord>();

  /**
   * The `secrets=` names with a value in an app environment, from ListSecrets (needs
   * secretsmanager:ListSecrets, as `ferry secrets list` does), which may lag five minutes behind a
   * change: for notes only (`ferry env delete`'s kept secrets).
   */
  readonly secretNames?: (scope: { app: string; env: string }) => Promise<string[]>;

  /**
   * Which of `names` have no value in an app environment now. On AWS a task whose secret is missing
   * never starts: ECS reads secrets when it starts the container ("Sensitive data is injected into
   * your container when the container is initially started",
   * https://docs.aws.amazon.com/AmazonECS/latest/developerguide/secrets-envvar-secrets-manager.html),
   * and after three such starts the endpoint is failing (docs/aws.md#failing-endpoints). One
   * DescribeSecret per name (secretsmanager:DescribeSecret on ferry/*), which sees a `ferry secrets
   * set` or `delete` of a moment ago where ListSecrets may not (SecretsManagerSecretStore.missing).
   */
  readonly missingSecrets?: (
    scope: { app: string; env: string },
    names: readonly string[],
  ) => Promise<string[]>;

  constructor(private readonly options: AwsProviderOptions) {
    this.#stateDir = options.stateDir ?? path.join(options.projectDir, '.ferry');
    this.#toolkit = new ThrottleTolerantToolkit(options.toolkit, options.lookup);
    const { secrets } = options;
    if (secrets) {
      this.secretNames = async (scope) => (await secrets.list(scope)).map((s) => s.name);
      this.missingSecrets = (scope, names) => secrets.missing(scope, names);
    }
    this.control = lazyPort(() => this.#control());
    this.blobs = lazyPort(() => this.#blobs());
  }

  // ── the platform ──────────────────────────────────────────────────────────────────────────────

  /** The platform's outputs; a clear error when this account/region has none yet. */
  async platform(): Promise<PlatformOutputs> {
    const platform = await this.#deployedPlatform();
    if (!platform) {
      throw new FerryError(
        'not_found',
        `No Ferry platform in this AWS account and region (stack ${platformStackName})`,
        {
          hint: 'Run `ferry deploy --provider aws` in a project: the first deploy creates it. Check AWS_REGION/AWS_PROFILE.',
        },
      );
    }
    return platform;
  }

  /**
   * The platform's outputs, read from its stack once per process; undefined when this account and
   * region has none (no stack, or one never created). A platform that cannot be used (a failed
   * delete, a stack being created) is an error that says what to do.
   */
  async #deployedPlatform(): Promise<PlatformOutputs | undefined> {
    if (this.#platform) return this.#platform;
    const described = await this.options.lookup.describe(platformStackName);
    if (described && deadStackStatuses.has(described.status)) {
      throw new FerryError(
        'not_found',
        `The Ferry platform stack ${platformStackName} is in ${described.status}: ${replacedBecause(described.status)}`,
        {
          // A platform whose delete failed is not deleted and created again by a deploy (usableStack).
          hint:
            described.status === 'DELETE_FAILED'
              ? platformDeleteFailedHint(platformStackName)
              : 'Run `ferry deploy --provider aws` in a project: it deletes the failed stack and creates it again.',
        },
      );
    }
    // A platform stack that was never created (REVIEW_IN_PROGRESS) is no platform, unless it was made
    // minutes ago: another first deploy, at its approval prompt, is creating it (heldForReviewMs). One
    // that is being created has no outputs yet (an update keeps its outputs, and reading them is fine).
    if (
      described &&
      heldForReviewMs(described, (this.options.clock ?? foregroundClock).nowMs()) !== undefined
    ) {
      throw stackBusyError(platformStackName, described.status);
    }
    const created = described && !uncreatedStackStatuses.has(described.status) ? described : undefined;
    if (
      created &&
      isBusyStackStatus(created.status) &&
      !platformOutputsSchema.safeParse(created.outputs).success
    ) {
      throw stackBusyError(platformStackName, created.status);
    }
    const outputs = created?.outputs;
    if (!outputs) return undefined;
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
    // None yet: it is created unprotected, as CloudFormation creates a stack by default.
    this.#platformProtected = described?.terminationProtection ?? false;
    if (described) {
      this.#platform = parsePlatformOutputs(described.outputs);
      // Before anything is built or uploaded: this deploy deploys the platform too.
      checkPlatformVersion(this.#platform, ferryVersion());
      reporter.line(`  platform ${platformStackName}: ${this.#platform.ApiUrl}`);
      await this.#subscribeAlarms(reporter);
      return;
    }
    // Before anything is built: a create that fails on kept repositories fails every time.
    if (this.options.ecrRepositories) await checkPlatformCreatable(this.options.ecrRepositories, reporter);
    reporter.line(
      `  no ${platformStackName} stack in this account/region yet: creating it (first deploy; about 10 minutes)`,
    );
    const images = this.#images(input.manifest.pythonVersion, reporter);
    const env = input.env ?? 'production';
    const https = lbHttpsFrom(this.options.env, this.options.projectDir);
    const instanceTypes = await platformInstanceTypes(input.manifest.endpoints.map((e) => e.resources));
    const availabilityZones = await this.#platformZones(reporter);
    const settings = platformSettings(undefined, this.options.env);
    const assembly = await this.#synth({
      reporter,
      manifest: input.manifest,
      app: input.manifest.app,
      env,
      artifactKey: artifactKeyOf(input.manifest.app, env, input.manifest.sourceFingerprint),
      images,
      https,
      instanceTypes,
      availabilityZones,
      instanceTypeZones: await this.#poolOfferings(availabilityZones, instanceTypes, settings, reporter),
      cloudFrontPrefixListId: await this.#cloudFrontPrefixListId(input.manifest, https, reporter),
      platformSettings: settings,
      terminationProtection: { platform: false, app: false },
    });
    try {
      if (this.options.bootstrap) {
        reporter.line('  bootstrapping the account/region for the CDK (CDKToolkit stack)');
        await this.#toolkit.bootstrap(assembly, eventPrinter(reporter));
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
   * building missing tags in CodeBuild unless `build` is false; exit 2 when there is no way to usable
   * images.
   */
  async #deployImages(
    manifest: Manifest,
    reporter: Reporter,
    options: { build: boolean },
  ): Promise<WorkerImages> {
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
    const root = installRoot();
    // The tags name the images' content, the agent bundle included: bundle before naming them.
    const content = await platformImageContent(root, version, manifest.pythonVersion);
    const needed = neededImages(acceleratorsOf(manifest.endpoints), version, manifest.pythonVersion, content);
    const missing = await missingImages(this.options.ecr, needed);
    if (missing.length > 0) {
      const names = missing.map((m) => `${m.repository}:${m.tag}`).join(', ');
      if (!options.build) {
        throw new FerryError('usage', `No usable worker images: ${names} not in ${platform.ImageRegistry}`, {
          hint: `Removing endpoints never builds images. ${fix}, or deploy the environment again in its project (the deploy builds them).`,
        });
      }
      const mayBuild = this.options.env.FERRY_AWS_IMAGE_BUILD !== 'never';
      if (!mayBuild || !platform.ImageBuildProject || !this.options.codebuild) {
        throw new FerryError('usage', `No usable worker images: ${names} not in ${platform.ImageRegistry}`, {
          hint: `${fix}, or let the deploy build them in your account (unset FERRY_AWS_IMAGE_BUILD=never).`,
        });
      }
      reporter.line(`  images missing from ${platform.ImageRegistry}: ${names}`);
      const dir = path.join(this.#stateDir, 'aws');
      mkdirSync(dir, { recursive: true });
      const file = path.join(dir, 'image-context.tar.gz');
      await writeBuildContext(root, file, missing, version, manifest.pythonVersion, content);
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
    return imagesAt(platform.ImageRegistry, version, manifest.pythonVersion, content);
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
   * Where the platform's pools may launch (aws/zones.ts poolOfferings): what the platform recorded
   * plus what this process asked EC2, which later synths of this process reuse.
   */
  async #poolOfferings(
    zones: string[] | undefined,
    pools: readonly string[],
    settings: PlatformSettings,
    reporter: Reporter,
  ): Promise<InstanceTypeZones | undefined> {
    const offerings = await poolOfferings({
      ...(this.options.ec2 ? { ec2: this.options.ec2 } : {}),
      ...(this.#platform ? { deployed: this.#platform } : {}),
      ...(this.options.refreshZones ? { refresh: true } : {}),
      ...(this.#offerings ? { asked: this.#offerings } : {}),
      zones,
      pools,
      gpuWarmPoolSize: settings.gpuWarmPoolSize ?? 0,
      reporter,
    });
    if (offerings) this.#offerings = offerings;
    return offerings;
  }

  /**
   * The id of CloudFront's origin-facing prefix list, when `manifest` has load-balanced endpoints
   * behind CloudFront (no domain in `https`) and there is an EC2 client; asked once per process. A
   * failed lookup stops the deploy before anything is deployed (aws/cloudfront-prefix-list.ts).
   */
  async #cloudFrontPrefixListId(
    manifest: Manifest,
    https: LbHttpsOptions | undefined,
    reporter: Reporter,
  ): Promise<string | undefined> {
    const { ec2 } = this.options;
    if (!needsCloudFrontPrefixList(manifest, https)) return undefined;
    if (!this.#cloudFrontPrefixList) {
      // The no-domain front: CloudFront reaches the internet-facing ALB over HTTP, the ALB having no
      // certificate of its own. AWS: "Require HTTPS to improve the security of this solution"
      // (https://docs.aws.amazon.com/AmazonCloudFront/latest/DeveloperGuide/restrict-access-to-load-balancer.html).
      reporter.line(
        '  warning: load-balanced endpoints without a domain: CloudFront reaches their load balancer over plain HTTP, so API keys and payloads cross that leg unencrypted; set FERRY_AWS_DOMAIN for real traffic (docs/security-aws.md "Load-balanced endpoints over HTTPS")',
      );
    }
    if (!ec2) return undefined;
    if (!this.#cloudFrontPrefixList) {
      this.#cloudFrontPrefixList = cloudFrontPrefixListId(ec2);
      reporter.line(`  CloudFront origin-facing prefix list: ${await this.#cloudFrontPrefixList}`);
    }
    return this.#cloudFrontPrefixList;
  }

  #stackPorts(): StackPorts {
    return {
      lookup: this.options.lookup,
      toolkit: this.#toolkit,
      clock: this.options.clock ?? foregroundClock,
    };
  }

  /** The deployed platform's termination protection (#platformProtected), read once if need be. */
  async #platformProtection(): Promise<boolean> {
    this.#platformProtected ??=
      (await this.options.lookup.describe(platformStackName))?.terminationProtection ?? false;
    return this.#platformProtected;
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
    return this.#toolkit.deploy(
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
    /** HTTPS of load-balanced endpoints (aws/settings.ts lbHttpsFrom); none: CloudFront. */
    https: LbHttpsOptions | undefined;
    instanceTypes: string[];
    /** The platform-wide settings (aws/platform.ts platformSettings). */
    platformSettings: PlatformSettings;
    /** The platform VPC's zones; none: CDK's two `Fn::GetAZs` picks (offline synth). */
    availabilityZones?: string[] | undefined;
    /** The zones offering each pool's types (infra/pool-zones.ts); none: every pool spans every zone. */
    instanceTypeZones?: InstanceTypeZones | undefined;
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
    /** As the deployed stacks have it (infra/app.ts terminationProtection); none: off. */
    terminationProtection?: { platform: boolean; app: boolean };
    /** Where each phase is said (a synth takes tens of seconds on a small machine). */
    reporter: Reporter;
  }): Promise<SynthesizedAssembly> {
    // Each phase says what it is doing: together they take tens of seconds on a small machine.
    input.reporter.line('  bundling the platform functions…');
    const functionsCodeDir = await this.#functions();
    const { synthesize } = await loadInfra();
    const { https } = input;
    input.reporter.line('  synthesizing the CloudFormation templates…');
    return this.#toolkit.synth(
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
          ...(input.instanceTypeZones ? { instanceTypeZones: input.instanceTypeZones } : {}),
          ...(input.cloudFrontPrefixListId ? { cloudFrontPrefixListId: input.cloudFrontPrefixListId } : {}),
          ...(input.endpointIds ? { endpointIds: input.endpointIds } : {}),
          ...(input.servicesCreated ? { servicesCreated: input.servicesCreated } : {}),
          ...(input.callKeyIds ? { callKeyIds: input.callKeyIds } : {}),
          cfnValidate: input.cfnValidate ?? false,
          ...(input.terminationProtection ? { terminationProtection: input.terminationProtection } : {}),
          ...(https ? { https } : {}),
          ...input.platformSettings,
          ferryVersion: ferryVersion(),
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
    const https = lbHttpsFrom(this.options.env, this.options.projectDir);
    const assembly = await this.#synth({
      reporter: input.reporter,
      manifest: input.manifest,
      app: input.app,
      env: input.env,
      artifactKey: artifactKeyOf(input.app, input.env, input.manifest.sourceFingerprint),
      images: this.#images(input.manifest.pythonVersion, input.reporter),
      https,
      instanceTypes: await platformInstanceTypes(input.manifest.endpoints.map((e) => e.resources)),
      // Offline: the shell's settings, else the defaults (the deployed platform's are not read).
      platformSettings: platformSettings(undefined, this.options.env),
      cfnValidate: true,
    });
    // Offline: no EC2 call, so the template cannot name CloudFront's prefix list (its id differs per
    // region); the deploy looks it up and narrows the rule (infra/constructs/https-front.ts).
    if (needsCloudFrontPrefixList(input.manifest, https)) {
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
   * Deploys one environment's stack with exactly `records`; returns the records with where each
   * endpoint now is, and saves on the environment's record the settings it deployed with
   * (aws/records.ts). The endpoints in `rotate` (created or changed) get a new call key; the old ones
   * stop working once the stack, and so every task that held them, has been replaced
   * (core/call-keys.ts).
   *
   * `from: 'deployer'` (a deploy): the settings of the deployer's shell and project folder, images
   * built when missing, and the platform deployed first (the toolkit skips it when unchanged).
   * `from: 'record'` (removing endpoints): the settings the stack was last deployed with, and the
   * stack alone (#recordedSettings says why).
   */
  async #deployEnvironment(
    app: string,
    env: string,
    records: readonly EndpointRecord[],
    reporter: Reporter,
    options: { from: 'deployer' | 'record'; rotate?: ReadonlySet<string> },
  ): Promise<AwsEndpointRecord[]> {
    const platform = await this.platform();
    const callKeyIds = await prepareCallKeys(
      { control: await this.#control(), secrets: this.options.callTokens, nowMs: () => Date.now() },
      records,
      options.rotate ?? new Set(),
    );
    const manifest = manifestFromRecords(app, records);
    const artifactKey = records[0]!.artifactKey ?? artifactKeyOf(app, env, manifest.sourceFingerprint);
    const deployed = await (await this.#control()).listEndpoints();
    const deployedElsewhere = deployed
      .filter((r) => !(r.app === app && r.env === env))
      .map((r) => endpointConfigSchema.safeParse(r.config))
      .flatMap((parsed) => (parsed.success ? [parsed.data.endpoint.resources] : []));
    const stack = appStackName(app, env);
    const current = await this.#usableStack(stack, reporter, { app, env });
    const live = current !== undefined;
    const deployer = options.from === 'deployer';
    const settings = deployer
      ? await this.#deployerSettings(manifest, reporter, { build: true })
      : await this.#recordedSettings(app, env, manifest, reporter);
    // The stacks this deploy updates: the platform is left alone when endpoints are only removed.
    const stacks = [...(deployer ? [{ name: platformStackName, live: true }] : []), { name: stack, live }];
    const instanceTypes = await platformInstanceTypes(
      [...deployedElsewhere, ...manifest.endpoints.map((e) => e.resources)],
      platformPools(platform),
    );
    // An app stack imports as many subnets as the platform has zones: the deployed platform's when
    // it is not deployed with it (none named: an older platform on CDK's default two).
    const availabilityZones = deployer ? await this.#platformZones(reporter) : deployedZones(platform);
    // The deployed platform's, unless the deployer's shell sets one: said only when the platform
    // is deployed with it.
    const shared = platformSettings(platform, this.options.env, deployer ? reporter : undefined);
    const assembly = await this.#synth({
      reporter,
      manifest,
      app,
      env,
      artifactKey,
      images: settings.images,
      https: settings.https,
      instanceTypes,
      availabilityZones,
      // Where each pool may launch: asked of EC2 for pools it was never asked about when the platform
      // is deployed with this stack; else as the platform recorded it (aws/zones.ts poolOfferings).
      instanceTypeZones: deployer
        ? await this.#poolOfferings(availabilityZones, instanceTypes, shared, reporter)
        : deployedOfferings(platform),
      cloudFrontPrefixListId: await this.#cloudFrontPrefixListId(manifest, settings.https, reporter),
      platformSettings: shared,
      endpointIds: Object.fromEntries(records.map((r) => [r.name, r.id])),
      // An endpoint record is written once its stack deployed (provision), so this environment's
      // records name the services that exist: their desired count stays the scaler's. Unless the
      // stack is gone (a failed undeploy keeps the records, and usableStack deletes the stack it
      // left in DELETE_FAILED): its services are created again, and must state 0 (ECS starts 1).
      servicesCreated: live ? deployed.filter((r) => r.app === app && r.env === env).map((r) => r.id) : [],
      callKeyIds,
      // Each stack keeps the termination protection it has (a new one: off); the platform's counts
      // only when it is deployed here.
      terminationProtection: {
        platform: deployer ? await this.#platformProtection() : false,
        app: current?.terminationProtection ?? false,
      },
    });
    let outputs: Record<string, StackOutputs>;
    try {
      outputs = await this.#deploy(assembly, stacks, reporter);
    } catch (error) {
      // This Ferry's app stack reads a platform export that the deployed platform, from an older
      // Ferry, lacks (infra/platform-exports.ts), and the platform is not deployed here: say how on.
      if (!deployer && /No export named/i.test((error as Error).message ?? '')) {
        throw new FerryError('failed', (error as Error).message, {
          hint:
            `The ${platformStackName} stack is older than this Ferry. Run the command with the Ferry version ` +
            'that deployed it, or deploy a project with this version first (`ferry deploy --provider aws` updates the platform).',
          cause: error,
        });
      }
      throw error;
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
      if (out.dnsRecord) this.#dnsRecords.set(record.id, out.dnsRecord);
      else this.#dnsRecords.delete(record.id);
      return {
        ...record,
        aws: {
          stack,
          url,
          ...(out.queueUrl ? { queueUrl: out.queueUrl } : {}),
          ...(out.lowQueueUrl ? { lowQueueUrl: out.lowQueueUrl } : {}),
          ...(out.dnsRecord ? { dnsRecord: out.dnsRecord } : {}),
        },
      };
    });
    const control = await this.#control();
    for (const record of records) {
      await retireCallKeys(control, record.id, callKeyIds[record.name]!);
      await this.#deleteLegacyCallTokenSecret(record, reporter);
    }
    // What the stack is now built from, for the next undeploy of one of its endpoints. The deploy
    // creates the record first (cli/deploy/run.ts); a missing one is made here rather than lose them.
    const envRecord = await control.getEnvironment(app, env);
    const saved: AwsEnvironmentRecord = {
      ...(envRecord ?? { app, name: env, createdAt: Date.now() }),
      aws: settings,
    };
    await control.putEnvironment(saved);
    this.#deployed.set(stack, new Set(records.map((r) => r.id)));
    this.#destroyed.delete(stack);
    return located;
  }

  /** The settings of the deployer's shell and project folder (aws/settings.ts), as a deploy takes them. */
  async #deployerSettings(
    manifest: Manifest,
    reporter: Reporter,
    options: { build: boolean },
  ): Promise<AwsEnvironmentSettings> {
    const https = lbHttpsFrom(this.options.env, this.options.projectDir);
    const images = await this.#deployImages(manifest, reporter, options);
    return { ...(https ? { https } : {}), images };
  }

  /**
   * The settings `app`/`env`'s stack was last deployed with (aws/records.ts), so removing some of its
   * endpoints changes nothing else, wherever it is run from. The platform is not deployed with it:
   * it is shared by every app, its template follows the deployer's Ferry version, and it already
   * has what the remaining endpoints use (they were deployed with it, and pools are never pruned). Images are looked up in ECR but never built.
   * A record from before the settings were saved: the deployer's, as before, with a warning that
   * says where they are read from (the deploy then saves them).
   */
  async #recordedSettings(
    app: string,
    env: string,
    manifest: Manifest,
    reporter: Reporter,
  ): Promise<AwsEnvironmentSettings> {
    const saved = awsSettingsOf(await (await this.#control()).getEnvironment(app, env));
    if (!saved) {
      reporter.line(
        `  warning: ${app}/${env} has no saved deploy settings (an earlier Ferry deployed it): its stack is rebuilt with ` +
          `the HTTPS and image settings of this shell and ${path.join(this.options.projectDir, '.env')} ` +
          '(FERRY_AWS_DOMAIN, FERRY_AWS_CERTIFICATE_ARN, FERRY_AWS_HOSTED_ZONE_ID; FERRY_AWS_IMAGE_REGISTRY, ' +
          "FERRY_AWS_GPU_IMAGE, FERRY_AWS_CPU_IMAGE, FERRY_AWS_AGENT_IMAGE, else the platform registry's images of this " +
          "Ferry version). Run this in the environment's project, or deploy it once with this Ferry, which saves them.",
      );
      return this.#deployerSettings(manifest, reporter, { build: false });
    }
    const platform = await this.platform();
    if (platform.ImageRegistry && this.options.ecr) {
      const used = imagesIn(platform.ImageRegistry, saved.images, acceleratorsOf(manifest.endpoints));
      const missing = await missingImages(this.options.ecr, used);
      if (missing.length > 0) {
        throw new FerryError(
          'usage',
          `${app}/${env} was deployed with images that are no longer in ${platform.ImageRegistry}: ${missing
            .map((m) => `${m.repository}:${m.tag}`)
            .join(', ')}`,
          {
            hint: `Removing endpoints never builds images. Deploy the environment again in its project (\`ferry deploy --provider aws --env ${env}\` builds the images it needs and saves them), then run this again.`,
          },
        );
      }
    }
    return saved;
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
    const located = await this.#deployEnvironment(context.app, context.env, context.all, context.reporter, {
      from: 'deployer',
      rotate: new Set(changed.map((r) => r.id)),
    });
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
        // This process deployed the stack moments ago without them (a deploy that also removes
        // endpoints): it is already what it should be. It must not be rebuilt from the listing, which
        // reads an index: "All reads from GSIs and streams are eventually consistent ... the responses
        // may not reflect the results of a recently completed write operation"
        // (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/HowItWorks.ReadConsistency.html),
        // so the records that deploy just wrote could be missing, and the stack redeployed without
        // them (or destroyed, for a renamed only endpoint) while the deploy reported success.
        const deployedNow = this.#deployed.get(stack);
        const upToDate = deployedNow !== undefined && group.every((r) => !deployedNow.has(r.id));
        const remaining = upToDate ? [] : await endpointsLeft(control, app, env, group);
        if (upToDate) {
          // Nothing to change in the stack; the records go below.
        } else if (remaining.length === 0) {
          this.options.reporter.line(`  destroying stack ${stack}`);
          await this.#toolkit.destroy([stack], eventPrinter(this.options.reporter));
          this.#destroyed.add(stack);
          this.#deployed.delete(stack);
        } else {
          this.options.reporter.line(
            `  updating stack ${stack} without ${group.map((r) => r.name).join(', ')}`,
          );
          const located = await this.#deployEnvironment(app, env, remaining, this.options.reporter, {
            from: 'record',
          });
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
        const hint = FerryError.is(error) ? error.hint : undefined;
        for (const record of group) result.failed.push({ record, error: message, ...(hint ? { hint } : {}) });
      }
    }
    return result;
  }

  /** Destroys an environment's stack even when no endpoint record is left (a failed first deploy). */
  async destroyEnvironment(app: string, env: string): Promise<void> {
    const stack = appStackName(app, env);
    if (this.#destroyed.has(stack)) return;
    await this.#toolkit.destroy([stack], eventPrinter(this.options.reporter));
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

  dnsRecord(record: EndpointRecord): DnsRecord | undefined {
    return this.#dnsRecords.get(record.id) ?? awsInfoOf(record)?.dnsRecord;
  }

  async ensureServing(): Promise<ServingState> {
    return { url: (await this.platform()).ApiUrl, started: false };
  }

  /**
   * The platform's API URL, read from the platform stack's outputs (`ferry console` and `ferry logs`
   * ask before anything else has read them); undefined when no platform is deployed here.
   */
  async serving(): Promise<string | undefined> {
    return (await this.#deployedPlatform())?.ApiUrl;
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

  /** The key is the user's only (apiKey): $FERRY_API_KEY, or the .env that holds it. */
  async apiKeyInShell(): Promise<string> {
    return apiKeyInShell(this.options.env, this.options.projectDir);
  }

  async close(): Promise<void> {
    this.options.clients.close();
    this.options.lookup.close();
    this.options.ec2?.destroy?.();
  }
}
