/**
 * Every name Ferry gives an AWS resource that more than one module must agree on: stack names, queue
 * names, the cluster, the platform's export names. No CDK import here on purpose: the CLI finds its
 * stacks and queues with these names without loading aws-cdk-lib, and the Lambdas derive queue names
 * from the same prefix (functions/wiring.ts), so there is one owner per name.
 */
import { createHash } from 'node:crypto';
import { checkRecordName } from '../core/deployment.js';
import { FerryError } from '../core/errors.js';

/** The shared platform stack, one per account and region. */
export const platformStackName = 'FerryPlatform';

/**
 * A FerryError (exit 2) unless `app` and `env` are names an app and an environment may have
 * (core/deployment.ts recordNameRules, which the names below rely on).
 */
export function checkAppEnvNames(app: string, env: string): void {
  checkRecordName('app', app);
  checkRecordName('environment', env);
}

/**
 * 8 hex characters of sha256(app, env), kept apart by a newline: `ml-api`+`prod` and `ml`+`api-prod`
 * read the same once joined with dashes, but never hash the same.
 */
export function appEnvHash(app: string, env: string): string {
  return createHash('sha256').update(`${app}\n${env}`).digest('hex').slice(0, 8);
}

/**
 * The CloudFormation stack name of one app environment: `Ferry-<app>-<env>-<hash>`. The readable part
 * is for people; the hash makes it unique per (app, env). Stack names allow letters, digits and
 * dashes, up to 128 characters (https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_CreateStack.html).
 */
export function appStackName(app: string, env: string): string {
  checkAppEnvNames(app, env);
  const clean = (s: string) => s.replace(/[^A-Za-z0-9-]/g, '-');
  // 'Ferry-' + readable + '-' + 8 hex ≤ 128: the readable part gives way, the hash never does.
  const readable = `${clean(app)}-${clean(env)}`.slice(0, 128 - 'Ferry-'.length - 1 - 8);
  return `Ferry-${readable}-${appEnvHash(app, env)}`;
}

/** Tags on every app stack (and, propagated by CloudFormation, its resources): who owns it. */
export const ownershipTags = { app: 'ferry:app', env: 'ferry:env' } as const;

/** Every queue of every app is named with this prefix, so platform functions can be granted them all. */
export const queueNamePrefix = 'ferry-';
/** The prefix as a CloudWatch search token (`QueueName=ferry`): search splits names at `-`. */
export const queueNameToken = queueNamePrefix.replace(/-$/, '');

/** Which of an endpoint's four queues. */
export type QueueRole = 'urgent' | 'urgent-dlq' | 'low' | 'low-dlq';
const queueSuffix: Readonly<Record<QueueRole, string>> = {
  urgent: '',
  'urgent-dlq': '-dlq',
  low: '-low',
  'low-dlq': '-low-dlq',
};

/** The SQS queue name of one of an endpoint's queues; the Lambdas derive the same (functions/wiring.ts). */
export function queueName(endpointId: string, role: QueueRole): string {
  return `${queueNamePrefix}${endpointId}${queueSuffix[role]}`;
}

/**
 * Every endpoint's ECS service is `ferry-<endpointId>`: the scaler Lambda finds it by this name
 * (FERRY_SERVICE_NAME_PREFIX, functions/scaler.ts) and its IAM grant stops at this prefix.
 */
export const serviceNamePrefix = 'ferry-';

export function serviceName(endpointId: string): string {
  return `${serviceNamePrefix}${endpointId}`;
}

/** The platform's scaler function, by a fixed name app stacks can point alarms at. */
export const scalerFunctionName = 'ferry-scaler';

/**
 * The scaler's log group, by a fixed name, so an app stack's dashboard counts its failed-start lines
 * (core/metrics.ts) with no cross-stack reference. Only the scaler writes it.
 */
export const scalerLogGroupName = `/ferry/${scalerFunctionName}`;

/** A load-balanced endpoint's wake-up alarm; the scaler takes the endpoint id from the name. */
export const wakeAlarmPrefix = 'ferry-wake-';

export function wakeAlarmName(endpointId: string): string {
  return `${wakeAlarmPrefix}${endpointId}`;
}

/**
 * The ECS cluster's name. Fixed (one platform per account and region), so app stacks can name the
 * cluster's task ARNs in IAM without a cross-stack token (task scale-in protection).
 */
export const clusterName = 'ferry';

/** Every export name starts with this; CDK's generated `FerryPlatform:ExportsOutput…` names never do. */
export const exportPrefix = 'Ferry-';

/** The platform's fixed export names (infra/platform-exports.ts explains why they are fixed). */
export const platformExportNames = {
  apiUrl: 'Ferry-ApiUrl',
  apiId: 'Ferry-ApiId',
  bucketName: 'Ferry-BucketName',
  bucketArn: 'Ferry-BucketArn',
  clusterName: 'Ferry-ClusterName',
  clusterArn: 'Ferry-ClusterArn',
  vpcId: 'Ferry-VpcId',
  availabilityZones: 'Ferry-AvailabilityZones',
  publicSubnetIds: 'Ferry-PublicSubnetIds',
  publicSubnetRouteTableIds: 'Ferry-PublicSubnetRouteTableIds',
  instanceSecurityGroupId: 'Ferry-InstanceSecurityGroupId',
  loadBalancerSecurityGroupId: 'Ferry-LoadBalancerSecurityGroupId',
  jobsTableName: 'Ferry-JobsTableName',
  jobsTableArn: 'Ferry-JobsTableArn',
  chunksTableName: 'Ferry-ChunksTableName',
  chunksTableArn: 'Ferry-ChunksTableArn',
  controlTableName: 'Ferry-ControlTableName',
  controlTableArn: 'Ferry-ControlTableArn',
  workersTableName: 'Ferry-WorkersTableName',
  workersTableArn: 'Ferry-WorkersTableArn',
  alarmTopicArn: 'Ferry-AlarmTopicArn',
  webhookQueueUrl: 'Ferry-WebhookQueueUrl',
  webhookQueueArn: 'Ferry-WebhookQueueArn',
} as const;
export type PlatformExportKey = keyof typeof platformExportNames;

/** `Ferry-Pool-g5-xlarge-CapacityProvider` for `g5.xlarge`. */
export function poolExportName(instanceType: string): string {
  if (!/^[a-z0-9]+\.[a-z0-9]+$/.test(instanceType)) {
    throw new FerryError('bad_request', `"${instanceType}" is not an EC2 instance type (like g5.xlarge)`);
  }
  return `${exportPrefix}Pool-${instanceType.replace('.', '-')}-CapacityProvider`;
}

/** The output logical id of an export: its name without the prefix and dashes (ids are alphanumeric). */
export function outputIdOf(exportName: string): string {
  return exportName.slice(exportPrefix.length).replace(/[^A-Za-z0-9]/g, '');
}

/** Where `ferry deploy` puts image build contexts in the platform bucket (the CodeBuild role reads them). */
export const imageBuildPrefix = 'image-builds/';

/**
 * How long the image CodeBuild project lets a build wait in the queue before it gives up
 * (QueuedTimeoutInMinutes, 5 to 480; CodeBuild's default is 8 hours). A build queues while the
 * account's concurrent builds are taken: "If the build project does not have a concurrent build limit
 * set, builds are queued if the number of running builds reaches the concurrent build limit for the
 * platform and compute type" (https://docs.aws.amazon.com/codebuild/latest/userguide/builds-working.html).
 * The deploy waiting on it says so after a minute (cli/providers/aws-images.ts runImageBuild).
 */
export const imageBuildQueuedMinutes = 60;

/**
 * A stable endpoint id: the same app, environment and endpoint name always get the same id, so a
 * redeploy keeps client URLs. 14 lowercase letters and digits, like RunPod's: no '-', so
 * IAM can scope an agent to keys that start with its id (infra/isolation.ts).
 */
export function endpointIdFor(app: string, env: string, endpointName: string): string {
  const digest = createHash('sha256').update(`${app}\n${env}\n${endpointName}`).digest();
  const alphabet = 'abcdefghijklmnopqrstuvwxyz0123456789';
  let id = '';
  for (let i = 0; i < 14; i++) id += alphabet[digest[i]! % alphabet.length];
  return id;
}

/**
 * The CloudWatch Logs group of job output (docs/observability.md). Fixed, like the cluster: agents of
 * every app write there and the API Lambda reads it, with no cross-stack reference.
 */
export const jobLogGroupName = '/ferry/job-logs';
