/**
 * The platform: one per AWS account and region. It owns what every app shares — the v2 job API
 * (API Gateway REST + Lambda), the four DynamoDB tables, the payload/artifact bucket, the VPC, the ECS
 * cluster with its GPU and CPU capacity pools, the sweeper, and the dashboard. App stacks
 * (app-stack.ts) add queues and ECS services on top and reach these resources only through the
 * CloudFormation exports with fixed names of platform-exports.ts, never by object reference: the
 * platform is shared by every app of the account and must not change with the app being deployed.
 *
 * Capacity pools (one per EC2 instance type) follow the instance types passed in, which the CLI makes
 * the union over every endpoint deployed in the account (cli/providers/aws/platform.ts). A type no app needs
 * any more is KEPT, not pruned: the CLI also adds the platform's current pools (its `InstanceTypes`
 * output) to the union, so the list only grows. A pool at zero instances costs nothing (an empty Auto
 * Scaling group and a launch template), while removing one could race an app stack whose service is
 * still placed on it (CloudFormation would refuse to delete its export, failing the platform update).
 * An operator who wants a pool gone deletes the endpoints that use it and redeploys the platform with
 * an explicit `instanceTypes` list (`-c ferry:instanceTypes=…`).
 *
 * The runtime is the source of truth and this file follows it:
 *   - tables: `dynamoSchema` (core/adapters/aws/dynamo.ts), imported, so keys, indexes and TTL
 *     attributes cannot drift from what the adapters read and write;
 *   - function environment: `functionEnvSchema` (functions/wiring.ts);
 *   - bundles and handlers: `functionEntries` (functions/bundle.ts) — `functionsCodeDir` holds the
 *     esbuild output, one `<name>.mjs` per entry, made by the CLI (target node24).
 *
 *   api         `api.handler`: every v2 route (one function; API Gateway proxies each route to it).
 *   authorizer  `authorizer.handler`: REQUEST authorizer; sha256 of the `Authorization` key looked up
 *               as `KEY#<hash>` in the control table; Allow on `<api>/<stage>/*` (cached a minute).
 *   sweeper     `sweeper.handler`, every minute: JobEngine.sweep (lapsed leases back to the queue
 *               with a new message, or FAILED after maxAttempts; overrunning jobs TIMED_OUT; jobs past
 *               policy.ttl stopped) and DynamoJobStore.deleteExpired.
 *   scaler      `scaler.handler` (named `ferry-scaler`), every minute and when nudged (the api and the
 *               sweeper when work reaches an endpoint with no worker; a load-balanced endpoint's
 *               wake-up alarm): sets each endpoint service's desiredCount from the scaling policy
 *               (functions/scaler.ts, docs/scaling.md). Nothing else decides worker counts.
 *   webhooks    `webhooks.handler`, fed by the webhook queue (an SQS event source): one attempt of a
 *               job's final-status webhook per record; a failed one goes back 10 s later as a new
 *               message, up to 3 attempts (core/adapters/aws/webhook-queue.ts).
 *
 * IAM is least privilege per function, derived from the calls those code paths make (listed at
 * each grant). No function gets the `index/*` of a table, only the indexes it queries.
 */
import {
  ArnFormat,
  CfnOutput,
  Duration,
  Fn,
  RemovalPolicy,
  Stack,
  type StackProps,
  Validations,
} from 'aws-cdk-lib';
import * as apigw from 'aws-cdk-lib/aws-apigateway';
import * as autoscaling from 'aws-cdk-lib/aws-autoscaling';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as cwActions from 'aws-cdk-lib/aws-cloudwatch-actions';
import * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as ecs from 'aws-cdk-lib/aws-ecs';
import * as events from 'aws-cdk-lib/aws-events';
import * as eventsTargets from 'aws-cdk-lib/aws-events-targets';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as lambdaEvents from 'aws-cdk-lib/aws-lambda-event-sources';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as s3 from 'aws-cdk-lib/aws-s3';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import type { Construct } from 'constructs';
import {
  countPartitionPattern,
  type DynamoTable,
  dynamoSchema,
  type IndexSpec,
  startFailuresKey,
  stopSignalKey,
} from '../core/adapters/aws/dynamo.js';
import { webhookBodyPrefix } from '../core/adapters/aws/webhook-queue.js';
import { outOfScopeMessage } from '../core/auth.js';
import { FerryError, inlineBodyTooLargeMessage, missingKeyMessage, noRouteMessage } from '../core/errors.js';
import { limits } from '../core/limits.js';
import { functionEntries } from '../functions/bundle.js';
import { payloadCopyExpiryDays } from '../functions/payloads.js';
import { AlarmTopic } from './constructs/alarms.js';
import { regionalDashboardName } from './constructs/dashboard.js';
import { ImageRegistry } from './constructs/images.js';
import { deadLetterAlarm } from './constructs/queues.js';
import {
  cpuInstanceFor,
  defaultCpuSpec,
  defaultGpuModel,
  equivalentInstanceTypes,
  gpuInstanceFor,
  isGpuInstanceType,
  poolInstanceTypes,
  poolMaxInstances,
} from './gpu.js';
import { leadingKeysCondition } from './leading-keys.js';
import {
  clusterName,
  imageBuildPrefix,
  jobLogGroupName,
  queueNamePrefix,
  queueNameToken,
  scalerFunctionName,
  scalerLogGroupName,
  serviceNamePrefix,
  wakeAlarmPrefix,
} from './names.js';
import {
  maxPlatformAzs,
  outputIdOf,
  type PlatformExportKey,
  platformAzCount,
  platformExportNames,
  poolExportName,
  type TableRef,
} from './platform-exports.js';
import { gpuPoolSettings, platformSettingOutputs } from './platform-settings.js';
import {
  formatInstanceTypeZones,
  type InstanceTypeZones,
  instanceTypeZonesOutput,
  poolZones,
} from './pool-zones.js';
import { keptWhenStackDeleted } from './retention.js';
import { ephemeralPorts, initContainer } from './task-layout.js';

export { clusterName, queueNamePrefix } from './names.js';

/**
 * FERRY_BLOB_PREFIX of the functions and agents (they must agree): empty, so the job store's big
 * fields and the claim-check bodies all live under `payloads/` at the bucket root.
 */
export const blobPrefix = '';
export const payloadsPrefix = `${blobPrefix}payloads/`;
/**
 * The bucket's backstop rule for `payloads/` (the sweeper deletes a job's blobs with the job): a day
 * past the longest a job is kept (limits.jobLifetimeMaxMs, from its submission; a retry writes its
 * blobs anew), so the rule only ever takes orphans. S3 counts the days from an object's creation and
 * rounds up to the next midnight UTC
 * (https://docs.aws.amazon.com/AmazonS3/latest/userguide/intro-lifecycle-rules.html).
 */
export const payloadExpiryDays = Math.ceil(limits.jobLifetimeMaxMs / 86_400_000) + 1;
export const artifactsPrefix = 'artifacts/';
/** The bucket's rule for the image build contexts under `image-builds/` (imageBuildPrefix). */
export const imageBuildExpiryDays = 7;
/**
 * The control table's API-key items: partition key `KEY#<sha256 hex>` (DynamoControlStore). The
 * authorizer and load-balanced agents may read only this partition range (dynamodb:LeadingKeys).
 */
export const apiKeyLeadingKey = 'KEY#*';

/**
 * API Gateway REST gives up on an integration after 29 s unless a quota increase is granted
 * (aws-anchor §1.1). Waiting routes answer `{id, status}` before that (clients keep polling).
 */
export const integrationTimeoutSec = 29;
/** FERRY_MAX_WAIT_MS: every wait of the API function ends by 25 s, inside the 28 s function timeout. */
export const maxWaitMs = 25_000;
/** FERRY_POLL_MS: how often a waiting request re-reads DynamoDB. */
export const pollMs = 500;
/**
 * The webhook function and its queue. An attempt ends by limits.webhookTimeoutMs (10 s, a deadline
 * for its lookup, connection, upload and answer: core/webhooks.ts) and a batch's attempts run side by
 * side, so 30 s covers a batch of receivers that all hang. Work still under way near the timeout (S3
 * or SQS slow) is abandoned and only its records go back (functions/webhooks.ts), since a timeout
 * would give back the whole batch.
 */
export const webhookTiming = {
  functionTimeoutSec: 30,
  batchSize: 10,
  maxConcurrency: 10,
  maxReceiveCount: 5,
} as const;

export interface FunctionHandlers {
  api: string;
  authorizer: string;
  sweeper: string;
  scaler: string;
  webhooks: string;
}
export const defaultHandlers: FunctionHandlers = { ...functionEntries };

export interface PlatformStackProps extends StackProps {
  /** Directory with the esbuild bundles (functions/bundle.ts: one .mjs per entry of functionEntries). */
  functionsCodeDir: string;
  /**
   * The region's availability zones (the CLI looks them up and passes `-c ferry:availabilityZones=a,b,c`).
   * The stack is environment-agnostic, and for such a stack CDK knows no zone names: `Stack.availabilityZones`
   * is two `Fn::GetAZs` picks (https://docs.aws.amazon.com/cdk/api/v2/docs/aws-cdk-lib.Stack.html#availabilityzones).
   * Given names, the VPC spans up to `maxPlatformAzs` of them, so GPU groups have more places to
   * find capacity. Default: two zones, as before.
   */
  availabilityZones?: readonly string[];
  /**
   * The zones that offer each instance type (EC2 DescribeInstanceTypeOfferings, asked by the CLI:
   * cli/providers/aws/zones.ts; `-c ferry:instanceTypeZones=…`). With zone names, each pool's Auto
   * Scaling group spans only the zones offering one of its types (pool-zones.ts says why). Default:
   * none known, every pool spans every zone.
   */
  instanceTypeZones?: InstanceTypeZones;
  /**
   * Instance types to make ECS capacity pools for (gpu.ts `instanceTypesFor` over every deployed
   * manifest). Pools cost nothing at zero instances. Default: the `any` GPU and the default CPU shape.
   */
  instanceTypes?: readonly string[];
  /**
   * Stopped GPU instances kept ready beside each GPU pool (an EC2 Auto Scaling warm pool): a scale-out
   * starts one of them (already booted once, image cached) instead of launching a fresh instance.
   * Costs their EBS volumes while stopped. Default 0: no warm pool. docs/scaling.md has the numbers.
   */
  gpuWarmPoolSize?: number;
  /**
   * GPU hosts each scale-out round of ECS managed scaling adds to a GPU pool (its capacity provider's
   * minimumScalingStepSize). Default 1: a burst that needs N hosts gets them one round at a time; N
   * starts them at once, at the cost of hosts a smaller need leaves idle. docs/scaling.md says more.
   */
  gpuScaleOutStep?: number;
  handlers?: Partial<FunctionHandlers>;
  /** API Gateway stage; clients use `<api url>/v2` as the base. */
  stageName?: string;
  /**
   * The REST API's integration timeout (s). 29 by default; a Regional REST API may go higher once the
   * account's "Maximum integration timeout in milliseconds" quota is raised (integrationTimeout).
   */
  integrationTimeoutSec?: number;
  /** The Ferry version deploying the stack, output as `FerryVersion` (infra/platform-settings.ts). */
  ferryVersion?: string;
}

/**
 * The integration timeout, and how long runsync/status waits may hold a request under it. API Gateway
 * REST: 50 ms-29 s by default; Regional and private APIs may be raised above 29 s through Service
 * Quotas, at the cost of a lower account throttle
 * (https://docs.aws.amazon.com/apigateway/latest/developerguide/limits.html,
 * https://aws.amazon.com/about-aws/whats-new/2024/06/amazon-api-gateway-integration-timeout-limit-29-seconds/).
 * The wait leaves 4 s for the function to answer; RunPod's default runsync wait is 90 s, so with a
 * raised quota of 95 s or more the default wait is RunPod's, and otherwise waits end early with
 * `{id, status}` (the client polls /status), which RunPod clients already handle.
 */
export function integrationTiming(integrationTimeoutSec = integrationTimeoutSecDefault): {
  integrationTimeoutSec: number;
  functionTimeoutSec: number;
  maxWaitMs: number;
} {
  if (!Number.isInteger(integrationTimeoutSec) || integrationTimeoutSec < 29 || integrationTimeoutSec > 900) {
    throw new FerryError('usage', `Integration timeout must be 29-900 s, got ${integrationTimeoutSec}`, {
      hint: 'Set FERRY_AWS_INTEGRATION_TIMEOUT_SEC to the quota API Gateway granted this account (default 29).',
    });
  }
  return {
    integrationTimeoutSec,
    functionTimeoutSec: integrationTimeoutSec - 1,
    maxWaitMs: Math.min(runpodDefaultWaitMs, (integrationTimeoutSec - 4) * 1000),
  };
}
const integrationTimeoutSecDefault = 29;
/** RunPod's default runsync wait (docs/api.md). */
const runpodDefaultWaitMs = 90_000;

/** A `dynamoSchema` key attribute → CDK. */
const attribute = (key: { name: string; type: 'S' | 'N' }): dynamodb.Attribute => ({
  name: key.name,
  type: key.type === 'S' ? dynamodb.AttributeType.STRING : dynamodb.AttributeType.NUMBER,
});

/** The environment every function reads (functions/wiring.ts `functionEnvSchema`). */
export function functionEnvironment(
  tables: Record<DynamoTable, dynamodb.ITable>,
  bucket: s3.IBucket,
  webhookQueue: sqs.IQueue,
  waitMs: number = maxWaitMs,
  integrationTimeoutSec: number = integrationTimeoutSecDefault,
) {
  return {
    NODE_OPTIONS: '--enable-source-maps',
    FERRY_JOBS_TABLE: tables.jobs.tableName,
    FERRY_CHUNKS_TABLE: tables.chunks.tableName,
    FERRY_CONTROL_TABLE: tables.control.tableName,
    FERRY_WORKERS_TABLE: tables.workers.tableName,
    FERRY_BUCKET: bucket.bucketName,
    FERRY_BLOB_PREFIX: blobPrefix,
    FERRY_QUEUE_NAME_PREFIX: queueNamePrefix,
    FERRY_WEBHOOK_QUEUE_URL: webhookQueue.queueUrl,
    FERRY_MAX_WAIT_MS: String(waitMs),
    FERRY_INTEGRATION_TIMEOUT_MS: String(integrationTimeoutSec * 1000),
    FERRY_POLL_MS: String(pollMs),
    FERRY_LOG_GROUP: jobLogGroupName,
    FERRY_SCALER_FUNCTION: scalerFunctionName,
    FERRY_CLUSTER: clusterName,
    FERRY_SERVICE_NAME_PREFIX: serviceNamePrefix,
  };
}

/** Actions on a table itself (not its indexes). */
export function allowTable(role: iam.IRole, table: Pick<TableRef, 'tableArn'>, actions: string[]): void {
  role.addToPrincipalPolicy(new iam.PolicyStatement({ actions, resources: [table.tableArn] }));
}

/** Actions on named indexes of a table — never `index/*`. */
export function allowIndexes(
  role: iam.IRole,
  table: Pick<TableRef, 'tableArn'>,
  actions: string[],
  indexNames: readonly string[],
): void {
  role.addToPrincipalPolicy(
    new iam.PolicyStatement({
      actions,
      resources: indexNames.map((name) => `${table.tableArn}/index/${name}`),
    }),
  );
}

/**
 * GetItem on the control table, only for items whose partition key is `KEY#…`. dynamoSchema's
 * control table is keyed `pk` (string) + `sk`, and DynamoControlStore puts an API key at
 * `pk = KEY#<sha256 hex>` (the other kinds are APP#, ENV#, EP#, KEYID#, none of which matches
 * `KEY#*`), so dynamodb:LeadingKeys can fence a key reader off apps, environments and endpoints.
 */
export function keyLookupStatement(controlTable: Pick<TableRef, 'tableArn'>): iam.PolicyStatement {
  return new iam.PolicyStatement({
    actions: ['dynamodb:GetItem'],
    resources: [controlTable.tableArn],
    conditions: { 'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': [apiKeyLeadingKey] } },
  });
}

/**
 * s3:ListBucket on the payload bucket, so that a role reading payloads can tell a blob that is gone
 * from a refusal: S3 answers a GET or HEAD of a missing key with 404 only to a principal that may
 * list the bucket, and with 403 to any other
 * (https://docs.aws.amazon.com/AmazonS3/latest/API/API_GetObject.html). Gone blobs are ordinary: a
 * writer deletes the blobs it replaced right after its write (a reader holding the older item reads
 * again), a webhook body is deleted once delivered, an object may be removed outside Ferry (the
 * job store leaves such a job out of the sweeper's lists, where a refusal stopped every sweep). Read
 * as 403, each of those failed its request. Key names only, never contents.
 *
 * `prefixes` fence the listing with StringLike on `s3:prefix`, the prefix parameter of a listing
 * request (https://docs.aws.amazon.com/AmazonS3/latest/userguide/amazon-s3-policy-keys.html,
 * https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazons3.html): an
 * endpoint's agent lists its own jobs' key names and never another endpoint's, and a listing with
 * no prefix carries no `s3:prefix`, so the condition is false and it is refused ("If the key that
 * you specify in a policy condition is not present in the request context, the values do not
 * match": https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_condition_operators.html).
 * Without `prefixes` (the platform functions, which read every payload anyway) the whole bucket.
 * For the 404 of a missing key, S3 weighs s3:ListBucket with the key itself as `s3:prefix`, so a
 * missing key under a fenced prefix reads as missing. AWS's pages do not spell that out; Ceph's S3
 * gateway adopted it to match S3 (https://github.com/ceph/ceph/pull/68577). Not run on a real
 * account (docs/security-aws.md#what-is-left): were it otherwise, the fenced role would get 403 for
 * a missing key as it did before this grant, never more access.
 */
export function allowTellingMissing(
  principal: iam.IGrantable,
  bucketArn: string,
  prefixes?: readonly string[],
): void {
  principal.grantPrincipal.addToPrincipalPolicy(
    new iam.PolicyStatement({
      actions: ['s3:ListBucket'],
      resources: [bucketArn],
      ...(prefixes ? { conditions: { StringLike: { 's3:prefix': [...prefixes] } } } : {}),
    }),
  );
}

export const defaultInstanceTypes = (): string[] => [
  gpuInstanceFor(defaultGpuModel, 1).instanceType,
  cpuInstanceFor(defaultCpuSpec).instanceType,
];

/**
 * User data that cloud-init runs at every boot, not only the first: the launch template's script
 * (the ecs.config lines above, and the ECS_CLUSTER line CDK adds to the same part, which is the
 * default one) behind a cloud-config part that sets `scripts-user` to `always`.
 *
 * Why, for warm-pool hosts: "As soon as an instance finishes launching into the warm pool, Amazon EC2
 * Auto Scaling stops or hibernates the instance. Amazon EC2 Auto Scaling does not wait for user data
 * to finish running", and "by default, cloud-init runs user data only on the first boot", so an
 * interrupted script does not run again when the instance leaves the pool
 * (https://docs.aws.amazon.com/autoscaling/ec2/userguide/warm-pool-instance-lifecycle.html). A host
 * whose ecs.config lost its ECS_CLUSTER line would start its agent into the `default` cluster: InService
 * to Auto Scaling, never given a Ferry task, and kept from scale-in by the new-instance protection
 * that only ECS lifts. Running the script at every boot is one of the three ways out that page lists
 * (the others: a lifecycle hook the instance completes itself, which needs
 * autoscaling:CompleteLifecycleAction on the host role, or a custom AMI), in the form AWS gives for
 * it (https://repost.aws/knowledge-center/execute-user-data-ec2; the list replaces the AMI's final
 * modules, which an ECS host does not use). The ECS agent's unit starts after cloud-init's final
 * stage, so the lines are written before it reads them. A second run appends the same lines again:
 * ecs.config is read as variables, and the repeats carry the same values.
 */
function everyBoot(script: ec2.UserData): ec2.UserData {
  const userData = new ec2.MultipartUserData();
  userData.addPart(
    ec2.MultipartBody.fromRawBody({
      contentType: 'text/cloud-config; charset="us-ascii"',
      body: '#cloud-config\ncloud_final_modules:\n- [scripts-user, always]\n',
    }),
  );
  userData.addUserDataPart(script, ec2.MultipartBody.SHELL_SCRIPT, true);
  return userData;
}

/**
 * ecs.config lines for every instance. Tasks use bridge networking (infra/task-layout.ts), where the
 * instance metadata service is kept from containers by IMDSv2 with a hop limit of 1 (launch template):
 * the extra hop of the bridge drops the token response
 * (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/configuring-IMDS-existing-instances.html).
 * ECS_AWSVPC_BLOCK_IMDS covers awsvpc tasks should a task definition ever use that mode
 * (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/ec2-security-considerations.html,
 * docs/security-aws.md); the host-network role switch stays so a task definition of an older Ferry
 * still gets its role.
 *
 * ECS_PULL_DEPENDENT_CONTAINERS_UPFRONT: the worker container depends on the artifact download (and a
 * queue worker on the agent), and by default the ECS agent starts pulling a container's image only
 * once its dependsOn conditions hold ("If the environment variable is set to false or is not
 * specified, the container will only start pulling images right after the dependsOn condition has
 * been fulfilled": https://github.com/aws/amazon-ecs-agent/pull/2730, the agent's README lists it).
 * The worker's image is the big one (torch), so it is pulled while the artifact downloads instead of
 * after: a cold start pays the longer of the two, not their sum.
 *
 * ECS_IMAGE_PULL_BEHAVIOR=once: a host pulls an image the first time a task needs it and starts later
 * tasks from its copy ("The image is pulled remotely only if it wasn't pulled by a previous task on
 * the same container instance or if the cached image was removed by the automated image cleanup
 * process. Otherwise, the cached image on the instance is used"), as fast as prefer-cached, which
 * Ferry used before. prefer-cached keeps every image for good ("Automated image cleanup is turned off
 * for the container to ensure that the cached image isn't removed":
 * https://docs.aws.amazon.com/AmazonECS/latest/developerguide/pull-behavior.html), and a GPU host is
 * long-lived and shared by every app: the multi-GB worker images of each Ferry version and each
 * image endpoint piled up on it until a pull failed for want of disk. Ferry's tags never change
 * (immutable ECR tags, docs/aws.md#images), so a cached copy is never stale.
 */
export const ecsConfigLines = [
  'ECS_IMAGE_PULL_BEHAVIOR=once',
  'ECS_PULL_DEPENDENT_CONTAINERS_UPFRONT=true',
  'ECS_ENABLE_TASK_IAM_ROLE=true',
  'ECS_ENABLE_TASK_IAM_ROLE_NETWORK_HOST=true',
  'ECS_AWSVPC_BLOCK_IMDS=true',
  // No task of the platform runs privileged (which would also ignore infra/constructs/service.ts's
  // dropped capabilities); the agent refuses any that asks.
  'ECS_DISABLE_PRIVILEGED=true',
];

export class PlatformStack extends Stack {
  readonly vpc: ec2.Vpc;
  readonly cluster: ecs.Cluster;
  readonly instanceSecurityGroup: ec2.SecurityGroup;
  /** Every load-balanced endpoint's ALB carries it: its one way to the hosts (hostsFromLoadBalancers). */
  readonly loadBalancerSecurityGroup: ec2.SecurityGroup;
  readonly tables: Readonly<Record<DynamoTable, dynamodb.Table>>;
  readonly jobsTable: dynamodb.Table;
  readonly chunksTable: dynamodb.Table;
  readonly controlTable: dynamodb.Table;
  readonly workersTable: dynamodb.Table;
  readonly bucket: s3.Bucket;
  readonly api: apigw.RestApi;
  readonly apiFunction: lambda.Function;
  readonly authorizerFunction: lambda.Function;
  readonly sweeperFunction: lambda.Function;
  readonly scalerFunction: lambda.Function;
  readonly webhookFunction: lambda.Function;
  /** Final-status webhooks, one message per attempt (core/adapters/aws/webhook-queue.ts). */
  readonly webhookQueue: sqs.Queue;
  readonly webhookDeadLetters: sqs.Queue;
  readonly images: ImageRegistry;
  readonly alarms: AlarmTopic;
  /** Tasks whose artifact download failed, to the scaler (a failed start of their endpoint). */
  readonly taskInitFailures: events.Rule;
  readonly timing: ReturnType<typeof integrationTiming>;
  /** Stopped GPU instances per GPU pool (PlatformStackProps.gpuWarmPoolSize). */
  readonly gpuWarmPoolSize: number;
  /** GPU hosts per managed scale-out round of each GPU pool (PlatformStackProps.gpuScaleOutStep). */
  readonly gpuScaleOutStep: number;
  private readonly pools = new Map<string, ecs.AsgCapacityProvider>();
  /** The VPC's zone names; undefined: CDK's `Fn::GetAZs` picks, no names at synth. */
  private readonly platformZones: readonly string[] | undefined;
  /** PlatformStackProps.instanceTypeZones: where each pool's group may launch (pool-zones.ts). */
  private readonly instanceTypeZones: InstanceTypeZones | undefined;

  constructor(scope: Construct, id: string, props: PlatformStackProps) {
    super(scope, id, props);
    const handlers = { ...defaultHandlers, ...props.handlers };

    // ── State ──────────────────────────────────────────────────────────────────────────────────
    this.tables = {
      jobs: this.table('Jobs', 'jobs'),
      chunks: this.table('StreamChunks', 'chunks'),
      control: this.table('Control', 'control'),
      workers: this.table('Workers', 'workers'),
    };
    this.jobsTable = this.tables.jobs;
    this.chunksTable = this.tables.chunks;
    this.controlTable = this.tables.control;
    this.workersTable = this.tables.workers;

    // Not versioned: payloads are transient by design (claim-check bodies, gone with their job), and
    // artifacts are written under a new key per source fingerprint, never overwritten; versions would
    // only keep deleted payload bytes around and bill for them.
    this.bucket = new s3.Bucket(this, 'Bucket', {
      encryption: s3.BucketEncryption.S3_MANAGED,
      enforceSSL: true,
      blockPublicAccess: s3.BlockPublicAccess.BLOCK_ALL,
      objectOwnership: s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
      versioned: false,
      // Artifacts and payloads outlive a deleted platform (retention.ts).
      removalPolicy: keptWhenStackDeleted,
      lifecycleRules: [
        // A backstop only: the sweeper deletes a job's blobs with the job (deleteExpired).
        { id: 'expire-payloads', prefix: payloadsPrefix, expiration: Duration.days(payloadExpiryDays) },
        // Uploads and output copies belong to no job record, so nothing deletes them with their job:
        // they go days sooner (functions/payloads.ts). Where two expirations overlap, "the shorter
        // expiration policy is honored" (https://docs.aws.amazon.com/AmazonS3/latest/userguide/lifecycle-conflicts.html).
        ...(['uploads', 'outputs'] as const).map((copies) => ({
          id: `expire-payload-${copies}`,
          prefix: `${payloadsPrefix}${copies}/`,
          expiration: Duration.days(payloadCopyExpiryDays),
        })),
        // Image build contexts (cli/providers/aws-images.ts) are read once, by a build that CodeBuild
        // stops after its 2-hour timeout (infra/constructs/images.ts); nothing reads them later.
        {
          id: 'expire-image-builds',
          prefix: imageBuildPrefix,
          expiration: Duration.days(imageBuildExpiryDays),
        },
        { id: 'abort-incomplete-uploads', abortIncompleteMultipartUploadAfter: Duration.days(1) },
      ],
    });
    Validations.of(this.bucket).acknowledge({
      id: 'AwsSolutions-S1',
      reason:
        'Server access logs would need a second bucket for a store that only Ferry roles can reach; ' +
        'CloudTrail data events are the audit trail if an operator wants one.',
    });

    // ── Network and compute ───────────────────────────────────────────────────────────────────
    // Public subnets and no NAT gateway: an idle Ferry account costs nothing, and worker hosts pull
    // multi-GB images and model weights, which through a NAT gateway would cost $0.045/GB on top of
    // its ~$32/month. The hosts take no inbound traffic but from the load balancers' group
    // (hostsFromLoadBalancers); S3 and DynamoDB go through free gateway endpoints.
    const zones = props.availabilityZones?.slice(0, maxPlatformAzs);
    if (zones && zones.length < platformAzCount) {
      throw new FerryError('usage', `The platform needs at least ${platformAzCount} availability zones`, {
        hint: 'Pass -c ferry:availabilityZones with two or more zone names, or leave it out.',
      });
    }
    this.vpc = new ec2.Vpc(this, 'Vpc', {
      ...(zones ? { availabilityZones: [...zones] } : { maxAzs: platformAzCount }),
      natGateways: 0,
      subnetConfiguration: [{ name: 'public', subnetType: ec2.SubnetType.PUBLIC, cidrMask: 20 }],
      gatewayEndpoints: {
        S3: { service: ec2.GatewayVpcEndpointAwsService.S3 },
        DynamoDB: { service: ec2.GatewayVpcEndpointAwsService.DYNAMODB },
      },
    });
    if (this.vpc.publicSubnets.length !== (zones?.length ?? platformAzCount)) {
      // App stacks import exactly azCount subnets (platform-exports.ts).
      throw new FerryError(
        'failed',
        `The platform VPC has ${this.vpc.publicSubnets.length} public subnets, expected ${zones?.length ?? platformAzCount}`,
      );
    }
    this.vpc.addFlowLog('RejectedFlows', {
      trafficType: ec2.FlowLogTrafficType.REJECT,
      destination: ec2.FlowLogDestination.toCloudWatchLogs(
        new logs.LogGroup(this, 'FlowLogs', {
          retention: logs.RetentionDays.ONE_MONTH,
          removalPolicy: RemovalPolicy.DESTROY,
        }),
      ),
    });

    this.cluster = new ecs.Cluster(this, 'Cluster', {
      clusterName,
      vpc: this.vpc,
      // For ECS's console and the operator's own alarms; nothing of Ferry reads it, since a worker's
      // printed line can add points to it (docs/observability.md).
      containerInsightsV2: ecs.ContainerInsights.ENABLED,
    });
    this.instanceSecurityGroup = new ec2.SecurityGroup(this, 'InstanceSecurityGroup', {
      vpc: this.vpc,
      // Kept as first deployed: a new GroupDescription replaces the group
      // (https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-ec2-securitygroup.html),
      // and the hosts' launch templates name it. What the hosts admit is hostsFromLoadBalancers'.
      description: 'Ferry ECS hosts: no inbound except what app load balancers add',
      allowAllOutbound: true,
    });
    this.loadBalancerSecurityGroup = this.hostsFromLoadBalancers();
    const instanceTypes = [...new Set(props.instanceTypes ?? defaultInstanceTypes())].sort();
    this.gpuWarmPoolSize = props.gpuWarmPoolSize ?? 0;
    this.gpuScaleOutStep = props.gpuScaleOutStep ?? 1;
    this.platformZones = zones;
    this.instanceTypeZones = props.instanceTypeZones;
    for (const instanceType of instanceTypes) {
      this.addPool(instanceType, poolMaxInstances, this.gpuWarmPoolSize, this.gpuScaleOutStep);
    }

    // ── Functions ─────────────────────────────────────────────────────────────────────────────
    // Hashed from the folder's content, so its S3 key is the same from every project only because the
    // bundles are (functions/bundle.ts rootRelativeMap).
    const code = lambda.Code.fromAsset(props.functionsCodeDir);
    // Every function gets the whole environment: the bundles share functions/wiring.ts, which parses
    // all of it. Names are not secrets; what a function may touch is decided by IAM below.
    this.timing = integrationTiming(props.integrationTimeoutSec);
    // The webhook queue: not under the endpoint queues' name prefix, so no grant on `ferry-*` reaches it.
    this.webhookDeadLetters = new sqs.Queue(this, 'WebhookDeadLetters', {
      retentionPeriod: Duration.days(14),
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      enforceSSL: true,
    });
    this.webhookQueue = new sqs.Queue(this, 'Webhooks', {
      // "set the source queue's visibility timeout to at least six times the configuration timeout on
      // your function" (https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-configure.html).
      visibilityTimeout: Duration.seconds(6 * webhookTiming.functionTimeoutSec),
      // Three attempts span about 20 s; a day covers a webhook function that fails for hours.
      retentionPeriod: Duration.days(1),
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      enforceSSL: true,
      // A record the function could not handle at all (S3 or SQS failing), five times.
      deadLetterQueue: { queue: this.webhookDeadLetters, maxReceiveCount: webhookTiming.maxReceiveCount },
    });
    const environment = functionEnvironment(
      this.tables,
      this.bucket,
      this.webhookQueue,
      this.timing.maxWaitMs,
      this.timing.integrationTimeoutSec,
    );
    // Job output (agents write, the API reads): kept two weeks, longer than a job can stay readable
    // (policy.ttl up to 7 days, then its result's retention).
    new logs.LogGroup(this, 'JobLogs', {
      logGroupName: jobLogGroupName,
      retention: logs.RetentionDays.TWO_WEEKS,
      removalPolicy: RemovalPolicy.DESTROY,
    });

    // Waits end by FERRY_MAX_WAIT_MS < the function timeout < the integration timeout.
    this.apiFunction = this.fn('ApiFunction', code, handlers.api, {
      timeout: Duration.seconds(this.timing.functionTimeoutSec),
      environment,
    });
    this.grantApi(this.apiFunction);

    this.authorizerFunction = this.fn('Authorizer', code, handlers.authorizer, {
      timeout: Duration.seconds(5),
      environment,
    });
    this.grantKeyLookup(this.authorizerFunction.role as iam.Role);

    // The sweeper and the scaler are invoked asynchronously (the schedules, nudges, the wake alarm).
    // A failed run is not retried: Lambda's default would run it again a minute later, beside the
    // next scheduled run (https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-error-handling.html);
    // the next run does the same work anyway. The schedules' own `retryAttempts: 0` is EventBridge's,
    // which covers only failures to invoke. Nor is a throttled invoke kept: "For throttling errors
    // (429) and system errors (500-series), Lambda returns the event to the queue and attempts to run
    // the function again for up to 6 hours" (same page), so after the account's concurrency ran out,
    // hours of stale scheduled runs and nudges (an urgent-job nudge counts one job whatever the queue
    // says) would all run at once. A minute, the least Lambda takes (60 to 21600 s): the next
    // scheduled run is never further away.
    this.sweeperFunction = this.fn('Sweeper', code, handlers.sweeper, {
      // The schedule is a minute; a sweep that runs longer would overlap the next one.
      timeout: Duration.seconds(55),
      environment,
      retryAttempts: 0,
      maxEventAge: Duration.minutes(1),
    });
    this.grantSweeper(this.sweeperFunction);
    new events.Rule(this, 'SweepEveryMinute', {
      description: 'Ferry: requeue lapsed leases, time out overdue jobs, delete expired jobs',
      schedule: events.Schedule.rate(Duration.minutes(1)),
      targets: [new eventsTargets.LambdaFunction(this.sweeperFunction, { retryAttempts: 0 })],
    });

    this.scalerFunction = this.fn('Scaler', code, handlers.scaler, {
      // A pass reads a few items per endpoint and makes one DescribeServices call per ten.
      timeout: Duration.seconds(55),
      environment,
      functionName: scalerFunctionName,
      // The dashboards count its failed-start lines there (infra/constructs/dashboard.ts).
      logGroupName: scalerLogGroupName,
      retryAttempts: 0,
      maxEventAge: Duration.minutes(1),
    });
    this.grantScaler(this.scalerFunction);
    // Every load-balanced endpoint's wake-up alarm may invoke the scaler: one statement for all of
    // them, by alarm name pattern. One per endpoint (what an alarm action adds in its app stack)
    // filled the function's resource-based policy, 20 KB and not raisable
    // (https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html), at about 40 endpoints
    // in the account, and the next deploy failed.
    this.scalerFunction.addPermission('WakeAlarms', {
      principal: new iam.ServicePrincipal('lambda.alarms.cloudwatch.amazonaws.com'),
      action: 'lambda:InvokeFunction',
      sourceAccount: Stack.of(this).account,
      sourceArn: Stack.of(this).formatArn({
        service: 'cloudwatch',
        resource: 'alarm',
        resourceName: `${wakeAlarmPrefix}*`,
        arnFormat: ArnFormat.COLON_RESOURCE_NAME,
      }),
    });

    this.webhookFunction = this.fn('WebhookDelivery', code, handlers.webhooks, {
      timeout: Duration.seconds(webhookTiming.functionTimeoutSec),
      environment,
    });
    this.webhookFunction.addEventSource(
      new lambdaEvents.SqsEventSource(this.webhookQueue, {
        batchSize: webhookTiming.batchSize,
        // Only the records the function lists go back to the queue, not the whole batch
        // (https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-errorhandling.html).
        reportBatchItemFailures: true,
        // Bounds the posts to receivers at once: 10 sandboxes × 10 records.
        maxConcurrency: webhookTiming.maxConcurrency,
      }),
    );
    this.grantWebhookDelivery(this.webhookFunction);
    // The functions that end jobs hand their webhooks over (bodies past the inline size go to S3
    // under payloads/, which both may already write).
    for (const sender of [this.apiFunction, this.sweeperFunction])
      this.webhookQueue.grantSendMessages(sender);
    // A rate cannot be shorter than a minute
    // (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-rate-expressions.html); the nudges
    // make scale-from-zero immediate, this catches scale-in and any nudge that was lost.
    new events.Rule(this, 'ScaleEveryMinute', {
      description: 'Ferry: set each endpoint service desiredCount from the scaling policy',
      schedule: events.Schedule.rate(Duration.minutes(1)),
      targets: [new eventsTargets.LambdaFunction(this.scalerFunction, { retryAttempts: 0 })],
    });
    // The api and the sweeper nudge it (async invoke) when work reaches an endpoint with no worker.
    for (const nudger of [this.apiFunction, this.sweeperFunction]) {
      // The function itself, not its versions (`grantInvoke` would add `<arn>:*`).
      nudger.addToRolePolicy(
        new iam.PolicyStatement({
          actions: ['lambda:InvokeFunction'],
          resources: [this.scalerFunction.functionArn],
        }),
      );
    }

    // ── API ───────────────────────────────────────────────────────────────────────────────────
    this.api = this.restApi(props.stageName ?? 'api', this.apiFunction);

    // ── Observability ─────────────────────────────────────────────────────────────────────────
    this.images = new ImageRegistry(this, 'Images', { bucket: this.bucket });
    this.alarms = new AlarmTopic(this, 'Alarms', { clusterArn: this.cluster.clusterArn });
    // A task that could not start counts as a failed start of its endpoint: no agent ran in it to
    // count it (functions/scaler.ts recordTaskStartFailure). Retried: a lost event is a start not
    // counted, and the next failed task counts again; a copy of an event (a retry, or ECS's and
    // Lambda's at-least-once delivery) counts its task no second time.
    const countsFailedStart = new eventsTargets.LambdaFunction(this.scalerFunction, { retryAttempts: 2 });
    this.alarms.taskStartFailures.addTarget(countsFailedStart);
    // A task whose artifact download (the init container) exited non-zero never ran its agent or
    // worker either, but ECS documents no stop code for it: this rule hands the scaler such tasks
    // stopped as EssentialContainerExited (the essential agent's dependency on the init container
    // failed), and the scaler checks the init container's exit code itself (taskStartFailureOf);
    // TaskFailedToStart comes through the rule above. The containers condition may match fields of
    // two different containers (EventBridge documents no per-element matching for arrays of objects,
    // https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-event-patterns-arrays.html): at
    // worst a task that ran and crashed reaches the scaler, which counts nothing for it.
    this.taskInitFailures = new events.Rule(this, 'TaskInitFailures', {
      description: 'Ferry: a worker task stopped because its artifact download (init container) failed',
      eventPattern: {
        source: ['aws.ecs'],
        detailType: ['ECS Task State Change'],
        detail: {
          clusterArn: [this.cluster.clusterArn],
          lastStatus: ['STOPPED'],
          stopCode: ['EssentialContainerExited'],
          containers: { name: [initContainer], exitCode: [{ 'anything-but': 0 }] },
        },
      },
      targets: [countsFailedStart],
    });
    this.observability();

    // ── Outputs and exports ───────────────────────────────────────────────────────────────────
    this.exportAll(props.ferryVersion);
  }

  capacityProviderFor(instanceType: string): ecs.AsgCapacityProvider {
    const pool = this.pools.get(instanceType);
    if (!pool) {
      throw new FerryError('bad_request', `The platform has no capacity pool for ${instanceType}`, {
        hint: `Add "${instanceType}" to the platform's instanceTypes and deploy the platform first.`,
      });
    }
    return pool;
  }

  /** Instance types with a pool, sorted. */
  /** How many zones (one public subnet each) the VPC spans: what app stacks import. */
  get azCount(): number {
    return this.vpc.publicSubnets.length;
  }

  get instanceTypes(): string[] {
    return [...this.pools.keys()].sort();
  }

  /**
   * The one path to the hosts: a group every load-balanced endpoint's ALB carries besides its own
   * (infra/constructs/load-balancer.ts), admitted by the hosts' group on the ephemeral range, where
   * bridge mode publishes the agent's port (task-layout.ts). One rule on the hosts' group whatever
   * the number of endpoints, apps and environments: a group takes 60 inbound rules by default
   * (https://docs.aws.amazon.com/vpc/latest/userguide/amazon-vpc-limits.html#vpc-limits-security-groups),
   * and a rule per ALB made the 61st load-balanced endpoint of the account and region fail its deploy.
   * A rule that names a group admits the network interfaces that carry it
   * (https://docs.aws.amazon.com/vpc/latest/userguide/security-group-rules.html#security-group-referencing),
   * and only ALBs carry this one, so what reaches the hosts is what the per-ALB rules admitted: every
   * Ferry ALB of the account and region, on that range. The ALB needs the way out as well as the
   * hosts the way in (https://docs.aws.amazon.com/elasticloadbalancing/latest/application/load-balancer-update-security-groups.html,
   * "Recommended rules": outbound to the instance security group on the listener and health check
   * ports; the health check uses the traffic port). The rules of every group on an interface add up
   * (security-group-rules.html, "When you associate multiple security groups with a resource, the
   * rules from each security group are aggregated"), so this group owns the egress and the ALB's own
   * group none.
   *
   * The egress is inline: a group created with egress rules of its own gets no allow-all rule
   * (https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-ec2-securitygroup.html),
   * so this group reaches nothing else from its first second. The hosts' rule is a resource of its
   * own (AWS::EC2::SecurityGroupIngress), as that page asks of two groups that name each other. The
   * group has no inbound rule: nothing connects to an ALB through it.
   */
  private hostsFromLoadBalancers(): ec2.SecurityGroup {
    const agentPorts = ec2.Port.tcpRange(ephemeralPorts.from, ephemeralPorts.to);
    const group = new ec2.SecurityGroup(this, 'LoadBalancerSecurityGroup', {
      vpc: this.vpc,
      description: 'Ferry load balancers: to the ECS hosts dynamic ports only',
      allowAllOutbound: false,
    });
    // A group id peer is written inline (a group object would be a separate resource).
    group.addEgressRule(
      ec2.Peer.securityGroupId(this.instanceSecurityGroup.securityGroupId),
      agentPorts,
      'To the agents (dynamic host ports)',
    );
    this.instanceSecurityGroup.addIngressRule(
      group,
      agentPorts,
      'From Ferry load balancers (dynamic host ports)',
    );
    return group;
  }

  /**
   * Every export of platform-exports.ts, under its fixed name, whatever app is synthesized next to this
   * stack; each is also an output, read by the CLI by its id (ApiUrl, BucketName, ControlTableName …).
   * Plus `InstanceTypes` (comma-separated pools), a plain output: it grows with deploys, and an
   * exported value could not change while imported. And the platform-wide settings
   * (infra/platform-settings.ts), plain outputs too.
   */
  private exportAll(ferryVersion: string | undefined): void {
    const publicSubnets = this.vpc.publicSubnets;
    const values: Record<PlatformExportKey, string> = {
      apiUrl: this.api.urlForPath('/v2'),
      alarmTopicArn: this.alarms.topic.topicArn,
      apiId: this.api.restApiId,
      bucketName: this.bucket.bucketName,
      bucketArn: this.bucket.bucketArn,
      clusterName: this.cluster.clusterName,
      clusterArn: this.cluster.clusterArn,
      vpcId: this.vpc.vpcId,
      availabilityZones: Fn.join(
        ',',
        publicSubnets.map((s) => s.availabilityZone),
      ),
      publicSubnetIds: Fn.join(
        ',',
        publicSubnets.map((s) => s.subnetId),
      ),
      publicSubnetRouteTableIds: Fn.join(
        ',',
        publicSubnets.map((s) => s.routeTable.routeTableId),
      ),
      instanceSecurityGroupId: this.instanceSecurityGroup.securityGroupId,
      loadBalancerSecurityGroupId: this.loadBalancerSecurityGroup.securityGroupId,
      jobsTableName: this.jobsTable.tableName,
      jobsTableArn: this.jobsTable.tableArn,
      chunksTableName: this.chunksTable.tableName,
      chunksTableArn: this.chunksTable.tableArn,
      controlTableName: this.controlTable.tableName,
      controlTableArn: this.controlTable.tableArn,
      workersTableName: this.workersTable.tableName,
      workersTableArn: this.workersTable.tableArn,
      webhookQueueUrl: this.webhookQueue.queueUrl,
      webhookQueueArn: this.webhookQueue.queueArn,
    };
    const descriptions: Partial<Record<PlatformExportKey, string>> = {
      apiUrl: 'Base URL of the v2 job API (clients call <ApiUrl>/<endpointId>/run …)',
    };
    for (const key of Object.keys(values) as PlatformExportKey[]) {
      const exportName = platformExportNames[key];
      new CfnOutput(this, outputIdOf(exportName), {
        value: values[key],
        exportName,
        ...(descriptions[key] ? { description: descriptions[key] } : {}),
      });
    }
    for (const instanceType of this.instanceTypes) {
      const exportName = poolExportName(instanceType);
      new CfnOutput(this, outputIdOf(exportName), {
        description: `ECS capacity provider of the ${instanceType} pool`,
        value: this.capacityProviderFor(instanceType).capacityProviderName,
        exportName,
      });
    }
    new CfnOutput(this, 'ImageRegistry', {
      description: 'ECR registry of the Ferry images (ferry images push --registry …)',
      value: this.images.registry,
    });
    new CfnOutput(this, 'ImageBuildProject', {
      description: 'CodeBuild project that builds missing image tags (started by ferry deploy)',
      value: this.images.buildProject.projectName,
    });
    new CfnOutput(this, 'RunsyncMaxWaitMs', {
      description: 'How long runsync/status waits hold a request before answering {id, status}',
      value: String(this.timing.maxWaitMs),
    });
    new CfnOutput(this, 'InstanceTypes', {
      description: 'Instance types with a capacity pool, comma-separated (the CLI keeps them all)',
      value: this.instanceTypes.join(','),
    });
    const placedBy = this.placedBy();
    if (placedBy) {
      new CfnOutput(this, instanceTypeZonesOutput, {
        description:
          "Zones of the platform that offer each pool's instance types (EC2 DescribeInstanceTypeOfferings); pools launch only there",
        value: placedBy,
      });
    }
    // The account-wide settings this template was built with: the next deploy, from any app or shell,
    // keeps them unless its deployer sets one (infra/platform-settings.ts says why).
    new CfnOutput(this, platformSettingOutputs.integrationTimeoutSec, {
      description:
        'API Gateway integration timeout (s); a deploy keeps it unless FERRY_AWS_INTEGRATION_TIMEOUT_SEC is set',
      value: String(this.timing.integrationTimeoutSec),
    });
    new CfnOutput(this, platformSettingOutputs.gpuWarmPoolSize, {
      description:
        'Stopped GPU instances per GPU pool; a deploy keeps it unless FERRY_AWS_GPU_WARM_POOL_SIZE is set',
      value: String(this.gpuWarmPoolSize),
    });
    new CfnOutput(this, platformSettingOutputs.gpuScaleOutStep, {
      description:
        'GPU hosts per managed scale-out round of each GPU pool; a deploy keeps it unless FERRY_AWS_GPU_SCALE_OUT_STEP is set',
      value: String(this.gpuScaleOutStep),
    });
    if (ferryVersion) {
      new CfnOutput(this, platformSettingOutputs.ferryVersion, {
        description: 'Ferry version that deployed this stack (an older Ferry refuses to deploy over it)',
        value: ferryVersion,
      });
    }
  }

  /**
   * The offerings the pools were placed by, within the platform's zones, for every type a pool may
   * launch (with or without a warm pool): the `InstanceTypeZones` output the CLI reads back
   * (pool-zones.ts). None when no offering or no zone name is known.
   */
  private placedBy(): string | undefined {
    const zones = this.platformZones;
    const known = this.instanceTypeZones;
    if (!zones || !known) return undefined;
    const recorded: Record<string, string[]> = {};
    for (const type of new Set(this.instanceTypes.flatMap(equivalentInstanceTypes))) {
      const offered = known[type];
      if (offered) recorded[type] = zones.filter((zone) => offered.includes(zone));
    }
    return Object.keys(recorded).length > 0 ? formatInstanceTypeZones(recorded) : undefined;
  }

  /** One table of `dynamoSchema`: its keys, GSIs (with their projections, as createTables makes them), TTL. */
  private table(id: string, role: DynamoTable): dynamodb.Table {
    const spec: (typeof dynamoSchema)[DynamoTable] = dynamoSchema[role];
    const table = new dynamodb.Table(this, id, {
      partitionKey: attribute(spec.partitionKey),
      ...('sortKey' in spec ? { sortKey: attribute(spec.sortKey) } : {}),
      ...('ttlAttribute' in spec ? { timeToLiveAttribute: spec.ttlAttribute } : {}),
      billingMode: dynamodb.BillingMode.PAY_PER_REQUEST,
      encryption: dynamodb.TableEncryption.AWS_MANAGED,
      pointInTimeRecoverySpecification: { pointInTimeRecoveryEnabled: true },
      // Jobs, keys and apps outlive a mistaken `cdk destroy`, not a failed first create (retention.ts).
      removalPolicy: keptWhenStackDeleted,
    });
    for (const index of Object.values(spec.indexes) as IndexSpec[]) {
      const { projection } = index;
      table.addGlobalSecondaryIndex({
        indexName: index.indexName,
        partitionKey: attribute(index.partitionKey),
        sortKey: attribute(index.sortKey),
        projectionType: dynamodb.ProjectionType[projection.type],
        ...(projection.type === 'INCLUDE' ? { nonKeyAttributes: [...projection.attributes] } : {}),
      });
    }
    return table;
  }

  private addPool(
    instanceType: string,
    maxInstances: number,
    warmPoolSize: number,
    scaleOutStep: number,
  ): void {
    const gpu = isGpuInstanceType(instanceType);
    const warm = gpu && warmPoolSize > 0;
    const step = gpu ? scaleOutStep : 1;
    const id = `Pool-${instanceType.replace(/\./g, '-')}`;
    const script = ec2.UserData.forLinux();
    const lines = [
      ...ecsConfigLines,
      ...(gpu ? ['ECS_ENABLE_GPU_SUPPORT=true'] : []),
      // A warm-pool instance must not register with the cluster while it is being prepared
      // (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/using-warm-pool.html).
      ...(warm ? ['ECS_WARM_POOLS_CHECK=true'] : []),
    ];
    script.addCommands(...lines.map((line) => `echo ${line} >> /etc/ecs/ecs.config`));
    const userData = warm ? everyBoot(script) : script;
    const role = new iam.Role(this, `${id}-InstanceRole`, {
      assumedBy: new iam.ServicePrincipal('ec2.amazonaws.com'),
      description: `Ferry ECS host (${instanceType})`,
    });
    const launchTemplate = new ec2.LaunchTemplate(this, `${id}-LaunchTemplate`, {
      machineImage: ecs.EcsOptimizedImage.amazonLinux2023(
        gpu ? ecs.AmiHardwareType.GPU : ecs.AmiHardwareType.STANDARD,
      ),
      instanceType: new ec2.InstanceType(instanceType),
      role,
      securityGroup: this.instanceSecurityGroup,
      userData,
      requireImdsv2: true,
      // A second line behind ECS_AWSVPC_BLOCK_IMDS: an IMDSv2 token answer dies after one hop, so it
      // reaches the host (the ECS agent runs on the host network) but not a container's own network
      // namespace (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/configuring-instance-metadata-options.html).
      httpPutResponseHopLimit: 1,
      // Worker images carry CUDA and torch (10+ GB) and may cache model weights.
      blockDevices: [
        {
          deviceName: '/dev/xvda',
          volume: ec2.BlockDeviceVolume.ebs(gpu ? 200 : 60, {
            encrypted: true,
            volumeType: ec2.EbsDeviceVolumeType.GP3,
          }),
        },
      ],
    });
    // Several equivalent types (same GPU model and count, gpu.ts) as a mixed-instances group: all
    // On-Demand, `prioritized` so EC2 Auto Scaling launches the first type and falls back to the next
    // only when it cannot, e.g. on InsufficientInstanceCapacity
    // (https://docs.aws.amazon.com/autoscaling/ec2/userguide/ec2-auto-scaling-mixed-instances-groups.html,
    // https://docs.aws.amazon.com/autoscaling/ec2/userguide/allocation-strategies.html).
    // A warm pool keeps the pool to its first type (gpu.ts poolInstanceTypes).
    const types = poolInstanceTypes(instanceType, warmPoolSize);
    // Only the zones that offer one of the pool's types (pool-zones.ts: a launch in another zone
    // fails and alarms). Not known, or none of them (a pool the CLI refuses to add; one the platform
    // already has keeps what it had): every zone. The VPC, ALBs and exports keep every zone.
    const offered = poolZones(types, this.platformZones, this.instanceTypeZones);
    const asg = new autoscaling.AutoScalingGroup(this, `${id}-Asg`, {
      vpc: this.vpc,
      vpcSubnets:
        offered && offered.length > 0
          ? { subnets: this.vpc.publicSubnets.filter((s) => offered.includes(s.availabilityZone)) }
          : { subnetType: ec2.SubnetType.PUBLIC },
      ...(types.length > 1
        ? {
            mixedInstancesPolicy: {
              launchTemplate,
              launchTemplateOverrides: types.map((type) => ({ instanceType: new ec2.InstanceType(type) })),
              instancesDistribution: {
                onDemandAllocationStrategy: autoscaling.OnDemandAllocationStrategy.PRIORITIZED,
                onDemandBaseCapacity: 0,
                onDemandPercentageAboveBaseCapacity: 100,
              },
            },
          }
        : { launchTemplate }),
      minCapacity: 0,
      maxCapacity: maxInstances,
    });
    if (types.length > 1) {
      Validations.of(asg).acknowledge({
        id: 'AwsSolutions-EC26',
        reason:
          "The rule cannot read a launch template inside a mixed-instances policy; the template's root " +
          'volume is encrypted (encrypted: true above, asserted by the platform-stack template test).',
      });
    }
    Validations.of(asg).acknowledge({
      id: 'AwsSolutions-AS3',
      reason: 'Scaling is driven by ECS managed scaling; its activity is visible in ECS and the dashboard.',
    });
    if (warm) {
      // Stopped instances (EBS cost only); ReuseOnScaleIn is not supported with ECS
      // (https://docs.aws.amazon.com/autoscaling/ec2/userguide/ec2-auto-scaling-warm-pools.html).
      asg.addWarmPool({
        minSize: warmPoolSize,
        maxGroupPreparedCapacity: warmPoolSize,
        poolState: autoscaling.PoolState.STOPPED,
        reuseOnScaleIn: false,
      });
    }
    const provider = new ecs.AsgCapacityProvider(this, `${id}-Provider`, {
      autoScalingGroup: asg,
      // The ASG follows the tasks the scaler asks for: ECS places them, managed scaling adds
      // instances for tasks waiting in PROVISIONING and removes empty ones.
      enableManagedScaling: true,
      targetCapacityPercent: 100,
      // How many hosts a scale-out round adds (minimumScalingStepSize). A pool's group mostly spans
      // several zones, and a GPU pool's may mix types; for such a group "Amazon ECS will scale up by the exact minimum
      // scaling step size value and will ignore both the maximum scaling step size as well as the
      // capacity demand" (https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_ManagedScaling.html),
      // so at ECS's default of 1 a burst that needs eight hosts gets them one round at a time.
      // GPU pools only take gpuScaleOutStep: a GPU round costs minutes (first boot, a 10+ GB image)
      // and a burst waits on it; CPU pools keep 1, so the GPU setting never starts idle CPU hosts.
      // At 1 nothing is said (ECS's default when omitted; older platforms' templates stay as they
      // were). Above 1 the maximum is said too, at the API's highest value (both take 1-10000), so it
      // is never below the minimum whichever default applies: the API reference says 10000 when
      // omitted, CDK's props say 1000, an older CloudFormation page said 1, and CDK checks neither.
      ...(step > 1
        ? { minimumScalingStepSize: step, maximumScalingStepSize: gpuPoolSettings.gpuScaleOutStep.max }
        : {}),
      // On: ECS protects every instance that runs a task from the ASG's scale-in, and lifts it once
      // the instance is empty, so an instance is only terminated when no worker is on it
      // (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/managed-termination-protection.html).
      // CDK turns on the ASG's new-instance scale-in protection, which this requires. Busy tasks
      // themselves are kept by ECS task scale-in protection (the agent, worker-image/agent/agent.ts).
      enableManagedTerminationProtection: true,
      instanceWarmupPeriod: 180,
      machineImageType: ecs.MachineImageType.AMAZON_LINUX_2,
    });
    // ECS managed draining moves tasks off terminating hosts, so CDK's older drain-hook Lambda (and its
    // SNS topic) is not needed: `taskDrainTime: 0` skips it. The option left the typings but
    // addAsgCapacityProvider still reads it (aws-cdk-lib 2.276; the test asserts there is no hook).
    const noDrainHook = {
      machineImageType: ecs.MachineImageType.AMAZON_LINUX_2,
      taskDrainTime: Duration.seconds(0),
    };
    this.cluster.addAsgCapacityProvider(provider, noDrainHook);
    Validations.of(role).acknowledge(
      {
        id: 'AwsSolutions-IAM5[Action::ecs:Submit*]',
        reason: 'CDK grants the ECS agent ecs:Submit* on this cluster only (state change reports).',
      },
      {
        id: 'AwsSolutions-IAM5[Resource::*]',
        reason:
          'Statements added by the CDK ECS capacity provider for the ECS agent (ecs:DiscoverPollEndpoint, ' +
          'ecr:GetAuthorizationToken, logs) have no resource-level scoping.',
      },
    );
    this.pools.set(instanceType, provider);
  }

  private fn(
    id: string,
    code: lambda.Code,
    handler: string,
    options: {
      timeout: Duration;
      environment: Record<string, string>;
      functionName?: string;
      /** The function's log group, by name (CloudFormation names it otherwise). */
      logGroupName?: string;
      /** Lambda's own retries of a failed asynchronous invoke (its default is 2). */
      retryAttempts?: number;
      /** How long Lambda keeps an asynchronous invoke it could not run yet (its default is 6 hours). */
      maxEventAge?: Duration;
    },
  ): lambda.Function {
    const fn = new lambda.Function(this, id, {
      ...(options.functionName ? { functionName: options.functionName } : {}),
      ...(options.retryAttempts === undefined ? {} : { retryAttempts: options.retryAttempts }),
      ...(options.maxEventAge === undefined ? {} : { maxEventAge: options.maxEventAge }),
      // Node.js 24: AWS supports it past 2027 (22 is deprecated on 30 April 2027,
      // https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtimes.html); the bundles target node24.
      runtime: lambda.Runtime.NODEJS_24_X,
      architecture: lambda.Architecture.ARM_64,
      code,
      handler,
      memorySize: 512,
      timeout: options.timeout,
      environment: options.environment,
      logGroup: new logs.LogGroup(this, `${id}-Logs`, {
        ...(options.logGroupName ? { logGroupName: options.logGroupName } : {}),
        retention: logs.RetentionDays.ONE_MONTH,
        removalPolicy: RemovalPolicy.DESTROY,
      }),
    });
    Validations.of(fn).acknowledge({
      id: 'AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]',
      reason: 'The AWS-managed basic execution policy only writes this function’s logs.',
    });
    return fn;
  }

  /** The api function: the calls of V2Api → JobEngine → the aws adapters, route by route. */
  private grantApi(fn: lambda.Function): void {
    const role = fn.role as iam.Role;
    const { jobs, workers } = dynamoSchema;
    // run/runsync create (conditional Put); every transition is Get + conditional whole-item Put, in
    // a transaction with UpdateItem ADDs on the endpoint's count items when its counts move
    // (transactions need the rights of the actions in them); purge-queue lists a status through
    // byEndpointStatus and reads those jobs by key (BatchGetItem); health reads byEndpointExpiry.
    allowTable(role, this.jobsTable, [
      'dynamodb:GetItem',
      'dynamodb:BatchGetItem',
      'dynamodb:PutItem',
      'dynamodb:UpdateItem',
    ]);
    allowIndexes(
      role,
      this.jobsTable,
      ['dynamodb:Query'],
      [jobs.indexes.byEndpointStatus.indexName, jobs.indexes.byEndpointExpiry.indexName],
    );
    // stream hands each chunk out once (meta Get, Query, cursor Update, BatchWrite deletes); retry
    // clears a job's stream.
    allowTable(role, this.chunksTable, [
      'dynamodb:GetItem',
      'dynamodb:Query',
      'dynamodb:UpdateItem',
      'dynamodb:BatchWriteItem',
    ]);
    // The endpoint record (EP#<id>) of every route, and KEY#<hash> (V2Api checks the key again).
    allowTable(role, this.controlTable, ['dynamodb:GetItem']);
    // health counts the endpoint's workers.
    allowIndexes(role, this.workersTable, ['dynamodb:Query'], [workers.indexes.byEndpoint.indexName]);
    // A cancel tells the holder's agent to stop the job.
    this.allowStopSignals(role);
    this.allowQueues(fn, ['sqs:SendMessage', 'sqs:GetQueueUrl', 'sqs:GetQueueAttributes']);
    // The management API (core/manage.ts): endpoint lists through byKind, queue depth
    // (GetQueueAttributes above) and job logs, read-only, from the job-log group alone.
    allowIndexes(
      role,
      this.controlTable,
      ['dynamodb:Query'],
      [dynamoSchema.control.indexes.byKind.indexName],
    );
    // The group's ARN with its trailing `:*`, the form IAM policies use for every action but the
    // tagging ones (https://docs.aws.amazon.com/AmazonCloudWatch/latest/logs/iam-access-control-overview-cwl.html):
    // without it a FilterLogEvents request, evaluated on `…:log-group:<name>:log-stream:`, is refused.
    role.addToPrincipalPolicy(
      new iam.PolicyStatement({
        actions: ['logs:FilterLogEvents'],
        resources: [
          Stack.of(this).formatArn({
            service: 'logs',
            resource: 'log-group',
            resourceName: `${jobLogGroupName}:*`,
            arnFormat: ArnFormat.COLON_RESOURCE_NAME,
          }),
        ],
      }),
    );
    Validations.of(fn).acknowledge({
      id: `AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:logs:<AWS::Region>:<AWS::AccountId>:log-group:${jobLogGroupName}:*]`,
      reason: "The `:*` is how IAM names one log group's events; the grant is the job-log group's alone.",
    });
    // HeadObject is authorized by s3:GetObject (there is no s3:HeadObject action). Presigned PUT and
    // GET URLs act with this role, so it needs Put/Get itself. Delete: a replaced big field's blob.
    // Reading payloads includes telling a missing one (allowTellingMissing): POST /run with an
    // inputRef nothing was uploaded to is a clear 400, not a 500 (S3PayloadStore.readInput).
    this.allowPayloads(fn, ['s3:GetObject', 's3:PutObject', 's3:DeleteObject']);
  }

  /**
   * The authorizer reads API keys and nothing else of the control table: a scoped key's policy is the
   * same for every key (functions/authorizer.ts allowedResources), so it lists no endpoints.
   */
  private grantKeyLookup(role: iam.Role): void {
    role.addToPolicy(keyLookupStatement(this.controlTable));
  }

  /** The sweeper: JobEngine.sweep and DynamoJobStore.deleteExpired. */
  private grantSweeper(fn: lambda.Function): void {
    const role = fn.role as iam.Role;
    const { byStatusOverdue, byStatusExpiry } = dynamoSchema.jobs.indexes;
    // listOverdue, listExpiredUnfinished, deleteExpired query the shard indexes and read the jobs
    // they hand out by key (BatchGetItem); moves are Get + conditional Put; deleteExpired claims a
    // job (a conditional UpdateItem) and deletes it conditionally; both with UpdateItem ADDs on count
    // items, in one transaction, when counts move.
    allowTable(role, this.jobsTable, [
      'dynamodb:GetItem',
      'dynamodb:BatchGetItem',
      'dynamodb:PutItem',
      'dynamodb:UpdateItem',
      'dynamodb:DeleteItem',
    ]);
    allowIndexes(
      role,
      this.jobsTable,
      ['dynamodb:Query'],
      [byStatusOverdue.indexName, byStatusExpiry.indexName],
    );
    // A timed-out, expired or requeued job tells its holder's agent to stop it.
    this.allowStopSignals(role);
    // A deleted job's stream (meta Get: whether the job streamed at all; meta Update: the clear
    // before its deletes; Query, BatchWrite deletes, its meta item's too), and clearStream of a
    // requeued one.
    allowTable(role, this.chunksTable, [
      'dynamodb:GetItem',
      'dynamodb:Query',
      'dynamodb:UpdateItem',
      'dynamodb:BatchWriteItem',
    ]);
    // A lapsed lease, or a job left waiting, goes back to the queue with a new message; dead
    // letters are counted (GetQueueAttributes: a long poll only where the count says something),
    // read and deleted (functions/wiring.ts sqsDeadLetters).
    this.allowQueues(fn, [
      'sqs:SendMessage',
      'sqs:GetQueueUrl',
      'sqs:GetQueueAttributes',
      'sqs:ReceiveMessage',
      'sqs:DeleteMessage',
    ]);
    // An endpoint whose workers cannot start: its STARTS# item only (its queued jobs end FAILED).
    role.addToPolicy(
      new iam.PolicyStatement({
        actions: ['dynamodb:GetItem'],
        resources: [this.controlTable.tableArn],
        conditions: leadingKeysCondition([startFailuresKey('*').pk]),
      }),
    );
    // Which queue endpoints exist (control table, kind index) and their waiting jobs (byEndpointStatus).
    allowIndexes(
      role,
      this.controlTable,
      ['dynamodb:Query'],
      [dynamoSchema.control.indexes.byKind.indexName],
    );
    allowIndexes(
      role,
      this.jobsTable,
      ['dynamodb:Query'],
      [dynamoSchema.jobs.indexes.byEndpointStatus.indexName],
    );
    // Moves read and rewrite big fields; deleted jobs take their blobs with them.
    this.allowPayloads(fn, ['s3:GetObject', 's3:PutObject', 's3:DeleteObject']);
    // A requeued job nudges the scaler (functions/scaler.ts NudgingChangeFeed) unless the endpoint
    // has live workers, which it reads first: without this the nudge is refused and the job waits
    // for the scaler's next scheduled run.
    allowIndexes(
      role,
      this.workersTable,
      ['dynamodb:Query'],
      [dynamoSchema.workers.indexes.byEndpoint.indexName],
    );
  }

  /**
   * The scaler: listEndpoints/getEndpoint (control table: byKind index, GetItem), the workers seen
   * lately (workers table: byEndpoint index), queue depth (GetQueueAttributes), and on ECS only
   * DescribeServices and UpdateService, only on services of the Ferry cluster named `ferry-*`.
   */
  private grantScaler(fn: lambda.Function): void {
    const role = fn.role as iam.Role;
    const { control, workers } = dynamoSchema;
    allowTable(role, this.controlTable, ['dynamodb:GetItem']);
    // A task that could not start: one more failed start of its endpoint, and the verdict at the
    // run's limit (functions/scaler.ts recordTaskStartFailure), on STARTS# items only.
    role.addToPrincipalPolicy(
      new iam.PolicyStatement({
        actions: ['dynamodb:UpdateItem'],
        resources: [this.controlTable.tableArn],
        conditions: leadingKeysCondition([startFailuresKey('*').pk]),
      }),
    );
    allowIndexes(role, this.controlTable, ['dynamodb:Query'], [control.indexes.byKind.indexName]);
    allowIndexes(role, this.workersTable, ['dynamodb:Query'], [workers.indexes.byEndpoint.indexName]);
    // How many jobs are IN_QUEUE at most (functions/scaler.ts urgentDemand): the endpoints' count
    // items on byEndpointExpiry (`<endpointId>#COUNTS`), never the partitions of their jobs.
    role.addToPrincipalPolicy(
      new iam.PolicyStatement({
        actions: ['dynamodb:Query'],
        resources: [
          `${this.jobsTable.tableArn}/index/${dynamoSchema.jobs.indexes.byEndpointExpiry.indexName}`,
        ],
        conditions: leadingKeysCondition([countPartitionPattern]),
      }),
    );
    this.allowQueues(fn, ['sqs:GetQueueAttributes', 'sqs:GetQueueUrl']);
    const services = Stack.of(this).formatArn({
      service: 'ecs',
      resource: 'service',
      resourceName: `${clusterName}/${serviceNamePrefix}*`,
    });
    role.addToPolicy(
      new iam.PolicyStatement({
        actions: ['ecs:DescribeServices', 'ecs:UpdateService'],
        resources: [services],
      }),
    );
    // Which load-balanced endpoints turn requests away now (functions/scaler.ts turnedAwayOf): their
    // wake-up alarms only. A narrower scope than * leaves out composite alarms, which these are not
    // (https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_DescribeAlarms.html).
    role.addToPolicy(
      new iam.PolicyStatement({
        actions: ['cloudwatch:DescribeAlarms'],
        resources: [
          Stack.of(this).formatArn({
            service: 'cloudwatch',
            resource: 'alarm',
            resourceName: `${wakeAlarmPrefix}*`,
            arnFormat: ArnFormat.COLON_RESOURCE_NAME,
          }),
        ],
      }),
    );
    // A load-balanced endpoint about to go to 0 with tasks no worker reported for: their ages, to keep
    // the ones still booting (functions/scaler.ts serviceTasks). ListTasks is authorized on the
    // cluster through the ecs:cluster condition key; DescribeTasks on the cluster's tasks
    // (https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonelasticcontainerservice.html).
    const cluster = Stack.of(this).formatArn({
      service: 'ecs',
      resource: 'cluster',
      resourceName: clusterName,
    });
    role.addToPolicy(
      new iam.PolicyStatement({
        actions: ['ecs:ListTasks'],
        resources: ['*'],
        conditions: { ArnEquals: { 'ecs:cluster': cluster } },
      }),
    );
    role.addToPolicy(
      new iam.PolicyStatement({
        actions: ['ecs:DescribeTasks'],
        resources: [
          Stack.of(this).formatArn({ service: 'ecs', resource: 'task', resourceName: `${clusterName}/*` }),
        ],
      }),
    );
    Validations.of(fn).acknowledge(
      {
        id: `AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:cloudwatch:<AWS::Region>:<AWS::AccountId>:alarm:${wakeAlarmPrefix}*]`,
        reason:
          'Wake-up alarms are created by app stacks, one per load-balanced endpoint; read only, by prefix.',
      },
      {
        id: `AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ecs:<AWS::Region>:<AWS::AccountId>:service/${clusterName}/${serviceNamePrefix}*]`,
        reason:
          'Endpoint services are created by app stacks after the platform; the grant stops at the ' +
          'Ferry cluster and the service name prefix.',
      },
      {
        id: 'AwsSolutions-IAM5[Resource::*]',
        reason:
          'ecs:ListTasks names the cluster through the ecs:cluster condition, which is set to the Ferry cluster.',
      },
      {
        id: `AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ecs:<AWS::Region>:<AWS::AccountId>:task/${clusterName}/*]`,
        reason: 'Task ids are ECS-assigned; DescribeTasks stops at the Ferry cluster (read only).',
      },
    );
  }

  /**
   * The webhook function: its records come from the event source mapping, which receives and deletes
   * with the function's role (sqs:ReceiveMessage, DeleteMessage, GetQueueAttributes:
   * https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-configure.html); a retry is a new
   * message on the same queue; a body in S3 is read, and deleted when the delivery is over; the
   * bucket's key names may be listed, so that a body already gone reads as missing. No table.
   */
  private grantWebhookDelivery(fn: lambda.Function): void {
    this.webhookQueue.grantConsumeMessages(fn);
    this.webhookQueue.grantSendMessages(fn);
    fn.addToRolePolicy(
      new iam.PolicyStatement({
        actions: ['s3:GetObject', 's3:DeleteObject'],
        resources: [this.bucket.arnForObjects(`${blobPrefix}${webhookBodyPrefix}*`)],
      }),
    );
    // SQS may hand out a message again after its delivery ended and its body was deleted
    // (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_DeleteMessage.html):
    // read as a refusal, such a missing body would send the record round five times into the
    // dead-letter queue.
    allowTellingMissing(fn, this.bucket.bucketArn);
    Validations.of(fn).acknowledge({
      id: `AwsSolutions-IAM5[Resource::<${Stack.of(this).getLogicalId(this.bucket.node.defaultChild as s3.CfnBucket)}.Arn>/${blobPrefix}${webhookBodyPrefix}*]`,
      reason:
        'Webhook bodies have per-delivery keys under payloads/webhooks/; the grant stops at that prefix.',
    });
  }

  /**
   * UpdateItem on the workers table's stop-signal items only (`<workerId>#stop`,
   * core/adapters/aws/stop-signals.ts): the LeadingKeys condition keeps the workers' own records,
   * which the agents write, out of reach
   * (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/specifying-conditions.html).
   */
  private allowStopSignals(role: iam.Role): void {
    role.addToPrincipalPolicy(
      new iam.PolicyStatement({
        actions: ['dynamodb:UpdateItem'],
        resources: [this.workersTable.tableArn],
        conditions: { 'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': [stopSignalKey('*')] } },
      }),
    );
  }

  /** Queues live in app stacks; platform functions reach them by the shared name prefix. */
  private allowQueues(fn: lambda.Function, actions: string[]): void {
    fn.addToRolePolicy(
      new iam.PolicyStatement({
        actions,
        resources: [
          Stack.of(this).formatArn({ service: 'sqs', resource: `${queueNamePrefix}*`, arnFormat: undefined }),
        ],
      }),
    );
    Validations.of(fn).acknowledge({
      id: `AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:sqs:<AWS::Region>:<AWS::AccountId>:${queueNamePrefix}*]`,
      reason:
        'Endpoint queues are created by app stacks deployed after the platform; the name prefix ' +
        'limits this function to Ferry queues.',
    });
  }

  private allowPayloads(fn: lambda.Function, actions: string[]): void {
    fn.addToRolePolicy(
      new iam.PolicyStatement({ actions, resources: [this.bucket.arnForObjects(`${payloadsPrefix}*`)] }),
    );
    if (actions.includes('s3:GetObject')) allowTellingMissing(fn, this.bucket.bucketArn);
    Validations.of(fn).acknowledge({
      id: `AwsSolutions-IAM5[Resource::<${Stack.of(this).getLogicalId(this.bucket.node.defaultChild as s3.CfnBucket)}.Arn>/${payloadsPrefix}*]`,
      reason: 'Payloads have per-job keys under payloads/; the grant stops at that prefix.',
    });
  }

  private restApi(stageName: string, fn: lambda.Function): apigw.RestApi {
    const accessLogs = new logs.LogGroup(this, 'ApiAccessLogs', {
      retention: logs.RetentionDays.ONE_MONTH,
      removalPolicy: RemovalPolicy.DESTROY,
    });
    const api = new apigw.RestApi(this, 'Api', {
      restApiName: 'ferry',
      description: 'Ferry v2 job API (RunPod-compatible)',
      endpointConfiguration: { types: [apigw.EndpointType.REGIONAL] },
      // Execution logs need the account-level API Gateway role.
      cloudWatchRole: true,
      // Plain Retain, even when the first create rolls back (not retention.ts): the account's setting
      // keeps naming this role after its stack is gone ("API Gateway can still assume the provided IAM
      // role", https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-apigateway-account.html),
      // and other REST APIs of the region log through it. Its name is generated, so a kept role never
      // blocks a retry.
      cloudWatchRoleRemovalPolicy: RemovalPolicy.RETAIN,
      deployOptions: {
        stageName,
        accessLogDestination: new apigw.LogGroupLogDestination(accessLogs),
        accessLogFormat: apigw.AccessLogFormat.jsonWithStandardFields(),
        loggingLevel: apigw.MethodLoggingLevel.ERROR,
        dataTraceEnabled: false,
        metricsEnabled: true,
      },
    });
    Validations.of(api).acknowledge(
      {
        id: 'AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AmazonAPIGatewayPushToCloudWatchLogs]',
        reason: 'The account-level API Gateway logging role uses the AWS policy made for it.',
      },
      {
        id: 'AwsSolutions-APIG3',
        reason: 'Every method needs an API key checked by the authorizer; WAF is an operator add-on.',
      },
      {
        id: 'AwsSolutions-COG4',
        reason: 'Clients authenticate with Ferry API keys (docs/api.md), checked by a Lambda authorizer.',
      },
      {
        id: 'AwsSolutions-APIG2',
        reason:
          'Two greedy proxy methods carry every route; the API function validates each body and path (zod), with the errors of docs/api.md.',
      },
    );

    // Errors keep the one body shape of the API, `{"error": "..."}` (docs/api.md#errors), even when API
    // Gateway answers by itself: 401 for a missing or unknown key (the authorizer threw
    // "Unauthorized"), 403 for a scoped key on the management API (its policy covers /v2 only,
    // functions/authorizer.ts), as the local API answers.
    api.addGatewayResponse('Unauthorized', {
      type: apigw.ResponseType.UNAUTHORIZED,
      statusCode: '401',
      templates: { 'application/json': JSON.stringify({ error: missingKeyMessage }) },
    });
    api.addGatewayResponse('AccessDenied', {
      type: apigw.ResponseType.ACCESS_DENIED,
      statusCode: '403',
      templates: { 'application/json': JSON.stringify({ error: outOfScopeMessage }) },
    });
    // REQUEST_TOO_LARGE is "the gateway response for the request too large error"
    // (https://docs.aws.amazon.com/apigateway/latest/developerguide/supported-gateway-response-types.html).
    // A body under API Gateway's 10 MB can still be too large: the proxy event that carries it must
    // fit Lambda's 6 MB synchronous payload ("For synchronous invocations, the maximum payload size is
    // 6 MB", https://docs.aws.amazon.com/lambda/latest/dg/API_Invoke.html), so the answer names the
    // uploads route, not the 10 MB. Unverified on a real account: a public report shows this case as
    // a 413 {"message": "Request Too Long"}, which suggests API Gateway may not apply a customized
    // REQUEST_TOO_LARGE template; docs/api.md#aws-front-door tells clients to go by the 413.
    api.addGatewayResponse('TooLarge', {
      type: apigw.ResponseType.REQUEST_TOO_LARGE,
      statusCode: '413',
      templates: { 'application/json': JSON.stringify({ error: inlineBodyTooLargeMessage }) },
    });
    // A path outside /v2 and /manage/v1 (every path under them reaches the function, which answers an
    // unknown route 404 itself): API Gateway's answer for "a method or resource that does not exist" is
    // 403 "Missing Authentication Token" by default (MISSING_AUTHENTICATION_TOKEN, "including the cases
    // when the client attempts to invoke an unsupported API method or resource",
    // https://docs.aws.amazon.com/apigateway/latest/developerguide/supported-gateway-response-types.html);
    // the API's answer is the 404 of an unknown route (docs/api.md#errors). No message of API
    // Gateway's is passed on: for a request with an Authorization header it quotes the header back.
    api.addGatewayResponse('NoRoute', {
      type: apigw.ResponseType.MISSING_AUTHENTICATION_TOKEN,
      statusCode: '404',
      templates: { 'application/json': JSON.stringify({ error: noRouteMessage }) },
    });
    api.addGatewayResponse('Default4xx', {
      type: apigw.ResponseType.DEFAULT_4XX,
      templates: { 'application/json': '{"error":$context.error.messageString}' },
    });
    // A 5xx API Gateway makes itself (the authorizer failed, which it does on purpose when a key cannot
    // be checked; the integration timed out; Lambda throttled or failed) answers as the function's own
    // 5xx does: "internal error" and the request id, the one the function logs with
    // (event.requestContext.requestId). `$context.error.messageString` is a JSON null for a failed
    // authorizer, and API Gateway's own wording otherwise.
    api.addGatewayResponse('Default5xx', {
      type: apigw.ResponseType.DEFAULT_5XX,
      templates: { 'application/json': '{"error":"internal error","requestId":"$context.requestId"}' },
    });

    const authorizer = new apigw.RequestAuthorizer(this, 'ApiKeyAuthorizer', {
      handler: this.authorizerFunction,
      identitySources: [apigw.IdentitySource.header('Authorization')],
      resultsCacheTtl: Duration.minutes(1),
    });

    // One function serves every route (functions/api.ts routes by path), so one integration and one
    // invoke permission for the whole API: a function's resource policy has a 20 KB ceiling.
    const integration = new apigw.LambdaIntegration(fn, {
      proxy: true,
      timeout: Duration.seconds(this.timing.integrationTimeoutSec),
      scopePermissionToMethod: false,
    });
    // Every method of every path under /v2 (the client routes of core/api.ts, by id and by name) and
    // under /manage/v1 (core/manage.ts) goes to the function behind the key authorizer: the function
    // routes by method and path, as the local server does, so an unknown route or method is its 404
    // `{"error"}`, not API Gateway's 403 for a resource or method it lacks. Worker routes reach it too
    // and answer 401 (it takes no worker token; workers talk to their agent). The authorizer's policy
    // is matched against the request's own method and path either way.
    for (const root of [api.root.addResource('v2'), api.root.addResource('manage').addResource('v1')]) {
      root.addResource('{proxy+}').addMethod('ANY', integration, {
        authorizer,
        authorizationType: apigw.AuthorizationType.CUSTOM,
      });
    }
    return api;
  }

  private observability(): cloudwatch.Dashboard {
    const notify = new cwActions.SnsAction(this.alarms.topic);
    new cloudwatch.Alarm(this, 'Api5xxAlarm', {
      alarmDescription: 'Ferry: the v2 API answered 5xx (bad input must never cause one)',
      metric: this.api.metricServerError({ period: Duration.minutes(5), statistic: 'Sum' }),
      threshold: 5,
      evaluationPeriods: 1,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    }).addAlarmAction(notify);
    deadLetterAlarm(
      this,
      'WebhookDlqAlarm',
      this.webhookDeadLetters,
      'Ferry: a webhook was given up (the webhook function could not handle its message 5 times)',
      this.alarms.topic,
    );
    // The scheduled functions fail a run for work they had to leave (the sweeper: a job it could not
    // move; the scaler: an endpoint it could not scale, functions/scaler.ts failedScales). Both run
    // every minute, so three failed runs in five minutes is something stuck, not a blip.
    const failingRuns = (id: string, fn: lambda.Function, alarmDescription: string) =>
      new cloudwatch.Alarm(this, id, {
        alarmDescription,
        metric: fn.metricErrors({ period: Duration.minutes(5), statistic: 'Sum' }),
        threshold: 3,
        evaluationPeriods: 1,
        comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      }).addAlarmAction(notify);
    failingRuns(
      'SweeperErrorsAlarm',
      this.sweeperFunction,
      'Ferry: the sweeper failed (lapsed leases are not requeued while it fails)',
    );
    failingRuns(
      'ScalerErrorsAlarm',
      this.scalerFunction,
      'Ferry: the scaler failed (an endpoint could not be scaled: its jobs wait with no worker started)',
    );

    const dashboard = new cloudwatch.Dashboard(this, 'Dashboard', {
      dashboardName: regionalDashboardName('Ferry'),
    });
    // App queues are found by name: the platform template must not reference app stacks. A message
    // is deleted as soon as a worker claims its job, so the age of the oldest message is the longest
    // wait for a worker. `QueueName=ferry` is a partial match on the name's token: a quoted value
    // "finds the exact string" only, so `QueueName="ferry-"` matched no queue
    // (https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/search-expression-syntax.html).
    const search = (metricName: string, filter: string, label: string) =>
      new cloudwatch.MathExpression({
        expression: `SEARCH('{AWS/SQS,QueueName} MetricName="${metricName}" QueueName=${queueNameToken} ${filter}', 'Maximum', 60)`,
        usingMetrics: {},
        label,
        period: Duration.minutes(1),
      });
    dashboard.addWidgets(
      new cloudwatch.GraphWidget({
        title: 'API requests and errors',
        left: [this.api.metricCount(), this.api.metricClientError(), this.api.metricServerError()],
        right: [this.api.metricLatency({ statistic: 'p90' })],
        width: 12,
      }),
      new cloudwatch.GraphWidget({
        title: 'Oldest waiting job (s)',
        left: [search('ApproximateAgeOfOldestMessage', 'NOT QueueName=dlq', 'Oldest message')],
        width: 12,
      }),
      new cloudwatch.GraphWidget({
        title: 'Function errors',
        left: [
          this.apiFunction,
          this.authorizerFunction,
          this.sweeperFunction,
          this.scalerFunction,
          this.webhookFunction,
        ].map((f) => f.metricErrors()),
        width: 12,
      }),
      new cloudwatch.GraphWidget({
        title: 'Dead-letter queues',
        left: [search('ApproximateNumberOfMessagesVisible', 'QueueName=dlq', 'DLQ depth')],
        width: 12,
      }),
    );
    return dashboard;
  }
}
