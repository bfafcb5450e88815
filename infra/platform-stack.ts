/**
 * The platform: one per AWS account and region. It owns what every app shares — the v2 job API
 * (API Gateway REST + Lambda), the DynamoDB tables, the payload/artifact bucket, the VPC, the ECS
 * cluster with its GPU and CPU capacity pools, the lease sweeper, and the dashboard. App stacks
 * (app-stack.ts) add queues and ECS services on top and reach these resources through `PlatformExports`.
 *
 * Lambda code is not built here: `functionsCodeDir` is a directory of esbuild bundles made by the CLI
 * from functions/ (target node22). The entries this stack expects in it (`handlers` below):
 *
 *   api.js         export `handler`: the v2 router (middy http-router). Deployed once per route group
 *                  with that group's IAM policy and FERRY_ROUTE_GROUP, so a group only ever serves
 *                  its own routes even though the bundle holds them all.
 *   authorizer.js  export `handler`: REQUEST authorizer; reads `Authorization` (`Bearer <key>` or the
 *                  bare key), looks up sha256(key) in the keys table, returns Allow on
 *                  `<methodArn up to the stage>/*` (the answer is cached per key for a minute, so it
 *                  must cover every route) or Deny.
 *   sweeper.js     export `handler`: runs every minute; puts jobs with lapsed leases back in their
 *                  queue (or fails them after limits.maxAttempts), times out overdue jobs, and
 *                  publishes `Ferry/OldestJobAgeSec`.
 */
import { CfnOutput, Duration, RemovalPolicy, Stack, type StackProps, Validations } from 'aws-cdk-lib';
import * as apigw from 'aws-cdk-lib/aws-apigateway';
import * as autoscaling from 'aws-cdk-lib/aws-autoscaling';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as ecs from 'aws-cdk-lib/aws-ecs';
import * as events from 'aws-cdk-lib/aws-events';
import * as eventsTargets from 'aws-cdk-lib/aws-events-targets';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as s3 from 'aws-cdk-lib/aws-s3';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import type { Construct } from 'constructs';
import { FerryError } from '../core/errors.js';
import { cpuInstanceFor, defaultCpuSpec, defaultGpuModel, gpuInstanceFor, isGpuInstanceType } from './gpu.js';

/** Table layouts, shared with the DynamoDB adapter (core/adapters/aws) so both read the same names. */
export const jobsTableLayout = {
  partitionKey: 'id',
  /** Epoch seconds. DynamoDB deletes days late: readers still filter on it (aws-anchor §1.1). */
  ttlAttribute: 'expiresAtSec',
  /** `<endpointId>#<status>` → jobs of one endpoint in one status, oldest first (purge, health). */
  byEndpointStatus: { indexName: 'byEndpointStatus', partitionKey: 'endpointStatus', sortKey: 'createdAtMs' },
  /**
   * `status` → jobs by the time something must happen to them: the lease end for IN_PROGRESS, the
   * ttl deadline for IN_QUEUE. The sweeper queries `status = IN_PROGRESS AND dueAtMs < now`.
   * Sparse: final jobs drop `dueAtMs`, so the index only holds live work.
   */
  byStatusDue: { indexName: 'byStatusDue', partitionKey: 'status', sortKey: 'dueAtMs' },
} as const;
export const chunksTableLayout = {
  partitionKey: 'jobId',
  sortKey: 'seq',
  ttlAttribute: 'expiresAtSec',
} as const;
/** Single-table control records: apps, envs, endpoints (id → queue URL), workers, queue generations. */
export const controlTableLayout = {
  partitionKey: 'pk',
  sortKey: 'sk',
  ttlAttribute: 'expiresAtSec',
} as const;
/** Keys are stored hashed: the item key is the hex sha256 of the API key, never the key itself. */
export const apiKeysTableLayout = { partitionKey: 'keyHash' } as const;

/** Every queue of every app is named with this prefix, so platform functions can be granted them all. */
export const queueNamePrefix = 'ferry-';
export const payloadsPrefix = 'payloads/';
export const artifactsPrefix = 'artifacts/';
/** Custom metrics the sweeper publishes. */
export const metricsNamespace = 'Ferry';
export const oldestJobAgeMetric = 'OldestJobAgeSec';

/**
 * API Gateway REST gives up on an integration after 29 s unless a quota increase is granted
 * (aws-anchor §1.1). Waiting routes answer `{id, status}` before that (clients keep polling).
 */
export const integrationTimeoutSec = 29;
export const maxWaitMs = 25_000;

export type RouteGroup = 'run' | 'runsync' | 'status' | 'stream' | 'control' | 'health';
export const routeGroups: readonly RouteGroup[] = ['run', 'runsync', 'status', 'stream', 'control', 'health'];
/** Groups that hold a request open, and so get FERRY_MAX_WAIT_MS. */
const waitingGroups: ReadonlySet<RouteGroup> = new Set(['runsync', 'status', 'stream']);

export interface FunctionHandlers {
  api: string;
  authorizer: string;
  sweeper: string;
}
export const defaultHandlers: FunctionHandlers = {
  api: 'api.handler',
  authorizer: 'authorizer.handler',
  sweeper: 'sweeper.handler',
};

export interface PlatformStackProps extends StackProps {
  /** Directory with the esbuild bundles (api.js, authorizer.js, sweeper.js). */
  functionsCodeDir: string;
  /**
   * Instance types to make ECS capacity pools for (gpu.ts `instanceTypesFor` over every deployed
   * manifest). Pools cost nothing at zero instances. Default: the `any` GPU and the default CPU shape.
   */
  instanceTypes?: readonly string[];
  /** Upper bound of each pool's Auto Scaling group. */
  maxInstancesPerPool?: number;
  handlers?: Partial<FunctionHandlers>;
  /** API Gateway stage; clients use `<api url>/v2` as the base. */
  stageName?: string;
}

/** What an app stack needs from the platform. */
export interface PlatformExports {
  readonly vpc: ec2.IVpc;
  readonly cluster: ecs.ICluster;
  /** The ECS instances' group: no inbound rules but the ones app stacks add for their load balancers. */
  readonly instanceSecurityGroup: ec2.ISecurityGroup;
  readonly jobsTable: dynamodb.ITable;
  readonly chunksTable: dynamodb.ITable;
  readonly controlTable: dynamodb.ITable;
  /** Hashed API keys: load-balanced endpoints' agents check client keys against it. */
  readonly apiKeysTable: dynamodb.ITable;
  readonly bucket: s3.IBucket;
  /**
   * The CloudFormation export holding the bucket name. App stacks import it by this fixed name, so
   * their IAM resources read the same in every synth (and cdk-nag findings can name them).
   */
  readonly bucketNameExport: string;
  capacityProviderFor(instanceType: string): ecs.AsgCapacityProvider;
  addDlqAlarm(scope: Construct, id: string, dlq: sqs.IQueue): cloudwatch.Alarm;
}

export const defaultInstanceTypes = (): string[] => [
  gpuInstanceFor(defaultGpuModel, 1).instanceType,
  cpuInstanceFor(defaultCpuSpec).instanceType,
];

/** ecs.config lines for every instance. Host networking needs the last one for task IAM roles. */
const ecsConfigLines = [
  'ECS_IMAGE_PULL_BEHAVIOR=prefer-cached',
  'ECS_ENABLE_TASK_IAM_ROLE=true',
  'ECS_ENABLE_TASK_IAM_ROLE_NETWORK_HOST=true',
];

export class PlatformStack extends Stack implements PlatformExports {
  readonly vpc: ec2.Vpc;
  readonly cluster: ecs.Cluster;
  readonly instanceSecurityGroup: ec2.SecurityGroup;
  readonly jobsTable: dynamodb.Table;
  readonly chunksTable: dynamodb.Table;
  readonly controlTable: dynamodb.Table;
  readonly apiKeysTable: dynamodb.Table;
  readonly bucket: s3.Bucket;
  readonly bucketNameExport: string;
  readonly api: apigw.RestApi;
  readonly authorizerFunction: lambda.Function;
  readonly routeFunctions: Readonly<Record<RouteGroup, lambda.Function>>;
  readonly sweeperFunction: lambda.Function;
  readonly dashboard: cloudwatch.Dashboard;
  private readonly pools = new Map<string, ecs.AsgCapacityProvider>();

  constructor(scope: Construct, id: string, props: PlatformStackProps) {
    super(scope, id, props);
    const handlers = { ...defaultHandlers, ...props.handlers };

    // ── State ──────────────────────────────────────────────────────────────────────────────────
    this.jobsTable = this.table(
      'Jobs',
      jobsTableLayout.partitionKey,
      undefined,
      jobsTableLayout.ttlAttribute,
    );
    this.jobsTable.addGlobalSecondaryIndex({
      indexName: jobsTableLayout.byEndpointStatus.indexName,
      partitionKey: {
        name: jobsTableLayout.byEndpointStatus.partitionKey,
        type: dynamodb.AttributeType.STRING,
      },
      sortKey: { name: jobsTableLayout.byEndpointStatus.sortKey, type: dynamodb.AttributeType.NUMBER },
    });
    this.jobsTable.addGlobalSecondaryIndex({
      indexName: jobsTableLayout.byStatusDue.indexName,
      partitionKey: { name: jobsTableLayout.byStatusDue.partitionKey, type: dynamodb.AttributeType.STRING },
      sortKey: { name: jobsTableLayout.byStatusDue.sortKey, type: dynamodb.AttributeType.NUMBER },
    });
    this.chunksTable = this.table(
      'StreamChunks',
      chunksTableLayout.partitionKey,
      chunksTableLayout.sortKey,
      chunksTableLayout.ttlAttribute,
    );
    this.controlTable = this.table(
      'Control',
      controlTableLayout.partitionKey,
      controlTableLayout.sortKey,
      controlTableLayout.ttlAttribute,
    );
    this.apiKeysTable = this.table('ApiKeys', apiKeysTableLayout.partitionKey);

    // Not versioned: payloads are transient by design (claim-check bodies, expired after 3 days), and
    // artifacts are written under a new key per source fingerprint, never overwritten; versions would
    // only keep deleted payload bytes around and bill for them.
    this.bucket = new s3.Bucket(this, 'Bucket', {
      encryption: s3.BucketEncryption.S3_MANAGED,
      enforceSSL: true,
      blockPublicAccess: s3.BlockPublicAccess.BLOCK_ALL,
      objectOwnership: s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
      versioned: false,
      removalPolicy: RemovalPolicy.RETAIN,
      lifecycleRules: [
        { id: 'expire-payloads', prefix: payloadsPrefix, expiration: Duration.days(3) },
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
    // its ~$32/month. The hosts take no inbound traffic (instanceSecurityGroup has no rules unless an
    // app's load balancer adds one); S3 and DynamoDB go through free gateway endpoints.
    this.vpc = new ec2.Vpc(this, 'Vpc', {
      maxAzs: 2,
      natGateways: 0,
      subnetConfiguration: [{ name: 'public', subnetType: ec2.SubnetType.PUBLIC, cidrMask: 20 }],
      gatewayEndpoints: {
        S3: { service: ec2.GatewayVpcEndpointAwsService.S3 },
        DynamoDB: { service: ec2.GatewayVpcEndpointAwsService.DYNAMODB },
      },
    });
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
      vpc: this.vpc,
      containerInsightsV2: ecs.ContainerInsights.ENABLED,
    });
    this.instanceSecurityGroup = new ec2.SecurityGroup(this, 'InstanceSecurityGroup', {
      vpc: this.vpc,
      description: 'Ferry ECS hosts: no inbound except what app load balancers add',
      allowAllOutbound: true,
    });
    const instanceTypes = [...new Set(props.instanceTypes ?? defaultInstanceTypes())].sort();
    for (const instanceType of instanceTypes) {
      this.addPool(instanceType, props.maxInstancesPerPool ?? 8);
    }

    // ── Functions ─────────────────────────────────────────────────────────────────────────────
    const code = lambda.Code.fromAsset(props.functionsCodeDir);
    const commonEnv: Record<string, string> = {
      NODE_OPTIONS: '--enable-source-maps',
      FERRY_JOBS_TABLE: this.jobsTable.tableName,
      FERRY_CHUNKS_TABLE: this.chunksTable.tableName,
      FERRY_CONTROL_TABLE: this.controlTable.tableName,
      FERRY_BUCKET: this.bucket.bucketName,
      FERRY_QUEUE_PREFIX: queueNamePrefix,
    };

    const routeFunctions = {} as Record<RouteGroup, lambda.Function>;
    for (const group of routeGroups) {
      const waits = waitingGroups.has(group);
      routeFunctions[group] = this.fn(`Route-${group}`, code, handlers.api, {
        // Waiting routes must outlive their wait, but not the gateway: 25 s wait < 28 s < 29 s.
        timeout: Duration.seconds(waits ? integrationTimeoutSec - 1 : 10),
        environment: {
          ...commonEnv,
          FERRY_ROUTE_GROUP: group,
          ...(waits ? { FERRY_MAX_WAIT_MS: String(maxWaitMs) } : {}),
        },
      });
    }
    this.routeFunctions = routeFunctions;
    this.grantRouteGroups(routeFunctions);

    this.authorizerFunction = this.fn('Authorizer', code, handlers.authorizer, {
      timeout: Duration.seconds(5),
      environment: { NODE_OPTIONS: '--enable-source-maps', FERRY_KEYS_TABLE: this.apiKeysTable.tableName },
    });
    this.allowTable(this.authorizerFunction, this.apiKeysTable, ['dynamodb:GetItem']);

    this.sweeperFunction = this.fn('Sweeper', code, handlers.sweeper, {
      timeout: Duration.seconds(55),
      environment: { ...commonEnv, FERRY_METRICS_NAMESPACE: metricsNamespace },
    });
    this.allowTable(
      this.sweeperFunction,
      this.jobsTable,
      ['dynamodb:GetItem', 'dynamodb:UpdateItem', 'dynamodb:Query'],
      [jobsTableLayout.byStatusDue.indexName],
    );
    this.allowTable(this.sweeperFunction, this.controlTable, ['dynamodb:GetItem', 'dynamodb:Query']);
    this.allowQueues(this.sweeperFunction, ['sqs:SendMessage', 'sqs:GetQueueUrl']);
    this.sweeperFunction.addToRolePolicy(
      new iam.PolicyStatement({
        actions: ['cloudwatch:PutMetricData'],
        // PutMetricData has no resource-level permissions; the namespace condition is the scope.
        resources: ['*'],
        conditions: { StringEquals: { 'cloudwatch:namespace': metricsNamespace } },
      }),
    );
    Validations.of(this.sweeperFunction).acknowledge({
      id: 'AwsSolutions-IAM5[Resource::*]',
      reason: 'cloudwatch:PutMetricData supports no resource ARNs; it is limited to the Ferry namespace.',
    });
    new events.Rule(this, 'SweepEveryMinute', {
      description: 'Ferry: requeue lapsed leases, time out overdue jobs, publish queue age',
      schedule: events.Schedule.rate(Duration.minutes(1)),
      targets: [new eventsTargets.LambdaFunction(this.sweeperFunction, { retryAttempts: 0 })],
    });

    // ── API ───────────────────────────────────────────────────────────────────────────────────
    this.api = this.restApi(props.stageName ?? 'api', routeFunctions);

    // ── Observability ─────────────────────────────────────────────────────────────────────────
    this.dashboard = this.observability(routeFunctions);

    new CfnOutput(this, 'ApiUrl', { value: this.api.urlForPath('/v2') });
    this.bucketNameExport = `${this.stackName}-BucketName`;
    new CfnOutput(this, 'BucketName', { value: this.bucket.bucketName, exportName: this.bucketNameExport });
    new CfnOutput(this, 'ClusterName', { value: this.cluster.clusterName });
    new CfnOutput(this, 'ApiKeysTableName', { value: this.apiKeysTable.tableName });
    new CfnOutput(this, 'ControlTableName', { value: this.controlTable.tableName });
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
  get instanceTypes(): string[] {
    return [...this.pools.keys()].sort();
  }

  /**
   * A DLQ alarm, created in the caller's stack (the platform must not reference app resources, or
   * the two stacks would depend on each other). The platform dashboard finds every DLQ by name.
   */
  addDlqAlarm(scope: Construct, id: string, dlq: sqs.IQueue): cloudwatch.Alarm {
    return new cloudwatch.Alarm(scope, id, {
      alarmDescription: 'Ferry: jobs reached the dead-letter queue (a message was received 5 times)',
      metric: dlq.metricApproximateNumberOfMessagesVisible({
        period: Duration.minutes(1),
        statistic: 'Maximum',
      }),
      threshold: 1,
      evaluationPeriods: 1,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      // SQS only emits metrics for active queues (aws-anchor §1.1): silence is not a problem.
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    });
  }

  private table(name: string, partitionKey: string, sortKey?: string, ttlAttribute?: string): dynamodb.Table {
    return new dynamodb.Table(this, name, {
      partitionKey: { name: partitionKey, type: dynamodb.AttributeType.STRING },
      ...(sortKey ? { sortKey: { name: sortKey, type: dynamodb.AttributeType.NUMBER } } : {}),
      ...(ttlAttribute ? { timeToLiveAttribute: ttlAttribute } : {}),
      billingMode: dynamodb.BillingMode.PAY_PER_REQUEST,
      encryption: dynamodb.TableEncryption.AWS_MANAGED,
      pointInTimeRecoverySpecification: { pointInTimeRecoveryEnabled: true },
      removalPolicy: RemovalPolicy.RETAIN,
    });
  }

  private addPool(instanceType: string, maxInstances: number): void {
    const gpu = isGpuInstanceType(instanceType);
    const id = `Pool-${instanceType.replace(/\./g, '-')}`;
    const userData = ec2.UserData.forLinux();
    const lines = gpu ? [...ecsConfigLines, 'ECS_ENABLE_GPU_SUPPORT=true'] : ecsConfigLines;
    userData.addCommands(...lines.map((line) => `echo ${line} >> /etc/ecs/ecs.config`));
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
    const asg = new autoscaling.AutoScalingGroup(this, `${id}-Asg`, {
      vpc: this.vpc,
      vpcSubnets: { subnetType: ec2.SubnetType.PUBLIC },
      launchTemplate,
      minCapacity: 0,
      maxCapacity: maxInstances,
    });
    Validations.of(asg).acknowledge({
      id: 'AwsSolutions-AS3',
      reason: 'Scaling is driven by ECS managed scaling; its activity is visible in ECS and the dashboard.',
    });
    const provider = new ecs.AsgCapacityProvider(this, `${id}-Provider`, {
      autoScalingGroup: asg,
      enableManagedScaling: true,
      targetCapacityPercent: 100,
      // Off, so the pool can reach zero without instance scale-in protection. Busy workers are kept
      // by ECS task scale-in protection, which the agent sets while it holds a job.
      enableManagedTerminationProtection: false,
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
    options: { timeout: Duration; environment: Record<string, string> },
  ): lambda.Function {
    const fn = new lambda.Function(this, id, {
      runtime: lambda.Runtime.NODEJS_22_X,
      architecture: lambda.Architecture.ARM_64,
      code,
      handler,
      memorySize: 512,
      timeout: options.timeout,
      environment: options.environment,
      logGroup: new logs.LogGroup(this, `${id}-Logs`, {
        retention: logs.RetentionDays.ONE_MONTH,
        removalPolicy: RemovalPolicy.DESTROY,
      }),
    });
    Validations.of(fn).acknowledge(
      {
        id: 'AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]',
        reason: 'The AWS-managed basic execution policy only writes this function’s logs.',
      },
      {
        id: 'AwsSolutions-L1',
        reason: 'Pinned to nodejs22.x: the bundles target node22 and middy 6 (DESIGN.md §8).',
      },
    );
    return fn;
  }

  /** Grants actions on a table and, when named, on its indexes — never `index/*`. */
  private allowTable(
    fn: lambda.IFunction,
    table: dynamodb.ITable,
    actions: string[],
    indexNames: readonly string[] = [],
  ): void {
    fn.addToRolePolicy(
      new iam.PolicyStatement({
        actions,
        resources: [table.tableArn, ...indexNames.map((name) => `${table.tableArn}/index/${name}`)],
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
    Validations.of(fn).acknowledge({
      id: `AwsSolutions-IAM5[Resource::<${Stack.of(this).getLogicalId(this.bucket.node.defaultChild as s3.CfnBucket)}.Arn>/${payloadsPrefix}*]`,
      reason: 'Claim-check payloads have per-job keys under payloads/; the grant stops at that prefix.',
    });
  }

  /** Least privilege per route group: each gets only the calls its routes make. */
  private grantRouteGroups(fns: Record<RouteGroup, lambda.Function>): void {
    const { byEndpointStatus } = jobsTableLayout;
    for (const group of ['run', 'runsync'] as const) {
      const fn = fns[group];
      this.allowTable(fn, this.jobsTable, ['dynamodb:PutItem', 'dynamodb:GetItem', 'dynamodb:UpdateItem']);
      this.allowTable(fn, this.controlTable, ['dynamodb:GetItem']);
      this.allowQueues(fn, ['sqs:SendMessage']);
      this.allowPayloads(fn, ['s3:PutObject', 's3:GetObject']);
    }
    // status and status-sync: read the job; `?ttl=` rewrites its retention.
    this.allowTable(fns.status, this.jobsTable, ['dynamodb:GetItem', 'dynamodb:UpdateItem']);
    this.allowPayloads(fns.status, ['s3:GetObject']);
    // stream: read the job, hand out each chunk once (conditional delete).
    this.allowTable(fns.stream, this.jobsTable, ['dynamodb:GetItem']);
    this.allowTable(fns.stream, this.chunksTable, ['dynamodb:Query', 'dynamodb:DeleteItem']);
    this.allowPayloads(fns.stream, ['s3:GetObject']);
    // cancel, retry, purge-queue: compare-and-set on jobs, queued jobs by endpoint, queue generation
    // in the control table, re-enqueue on retry, best-effort PurgeQueue.
    this.allowTable(
      fns.control,
      this.jobsTable,
      ['dynamodb:GetItem', 'dynamodb:UpdateItem', 'dynamodb:Query'],
      [byEndpointStatus.indexName],
    );
    this.allowTable(fns.control, this.controlTable, ['dynamodb:GetItem', 'dynamodb:UpdateItem']);
    this.allowQueues(fns.control, ['sqs:SendMessage', 'sqs:PurgeQueue']);
    // health: counts by status, workers from the control table.
    this.allowTable(fns.health, this.jobsTable, ['dynamodb:Query'], [byEndpointStatus.indexName]);
    this.allowTable(fns.health, this.controlTable, ['dynamodb:GetItem', 'dynamodb:Query']);
  }

  private restApi(stageName: string, fns: Record<RouteGroup, lambda.Function>): apigw.RestApi {
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
        reason: 'Clients authenticate with Ferry API keys (spec §5), checked by a Lambda authorizer.',
      },
    );

    // Errors keep the one body shape of the API, `{"error": "..."}` (DESIGN.md §4), even when API
    // Gateway answers by itself; a denied or missing key is a 401, never a 403.
    const unauthorized = '{"error":"Missing or invalid API key"}';
    api.addGatewayResponse('Unauthorized', {
      type: apigw.ResponseType.UNAUTHORIZED,
      statusCode: '401',
      templates: { 'application/json': unauthorized },
    });
    api.addGatewayResponse('AccessDenied', {
      type: apigw.ResponseType.ACCESS_DENIED,
      statusCode: '401',
      templates: { 'application/json': unauthorized },
    });
    api.addGatewayResponse('TooLarge', {
      type: apigw.ResponseType.REQUEST_TOO_LARGE,
      statusCode: '413',
      templates: {
        'application/json': '{"error":"Request body is larger than API Gateway accepts (10 MB)"}',
      },
    });
    api.addGatewayResponse('Default4xx', {
      type: apigw.ResponseType.DEFAULT_4XX,
      templates: { 'application/json': '{"error":$context.error.messageString}' },
    });
    api.addGatewayResponse('Default5xx', {
      type: apigw.ResponseType.DEFAULT_5XX,
      templates: { 'application/json': '{"error":$context.error.messageString}' },
    });

    const authorizer = new apigw.RequestAuthorizer(this, 'ApiKeyAuthorizer', {
      handler: this.authorizerFunction,
      identitySources: [apigw.IdentitySource.header('Authorization')],
      resultsCacheTtl: Duration.minutes(1),
    });
    // Path parameters are checked here; bodies have no API Gateway model (the functions validate them
    // with zod), so body validation is on but has nothing to enforce.
    const validator = api.addRequestValidator('Validator', {
      validateRequestParameters: true,
      validateRequestBody: true,
    });

    const integrations = new Map<RouteGroup, apigw.LambdaIntegration>();
    const integrationFor = (group: RouteGroup): apigw.LambdaIntegration => {
      let integration = integrations.get(group);
      if (!integration) {
        integration = new apigw.LambdaIntegration(fns[group], {
          proxy: true,
          timeout: Duration.seconds(integrationTimeoutSec),
          // One invoke permission per function instead of two per method: the resource policy
          // of a function has a 20 KB ceiling.
          scopePermissionToMethod: false,
        });
        integrations.set(group, integration);
      }
      return integration;
    };

    const endpoint = api.root.addResource('v2').addResource('{endpointId}');
    const route = (path: string[], methods: string[], group: RouteGroup): void => {
      let resource: apigw.IResource = endpoint;
      for (const part of path) resource = resource.getResource(part) ?? resource.addResource(part);
      const requestParameters: Record<string, boolean> = { 'method.request.path.endpointId': true };
      if (path.includes('{jobId}')) requestParameters['method.request.path.jobId'] = true;
      for (const method of methods) {
        resource.addMethod(method, integrationFor(group), {
          authorizer,
          authorizationType: apigw.AuthorizationType.CUSTOM,
          requestValidator: validator,
          requestParameters,
        });
      }
    };
    route(['run'], ['POST'], 'run');
    route(['runsync'], ['POST'], 'runsync');
    route(['status', '{jobId}'], ['GET', 'POST'], 'status');
    route(['status-sync', '{jobId}'], ['GET', 'POST'], 'status');
    route(['stream', '{jobId}'], ['GET', 'POST'], 'stream');
    route(['cancel', '{jobId}'], ['POST'], 'control');
    route(['retry', '{jobId}'], ['POST'], 'control');
    route(['purge-queue'], ['POST'], 'control');
    route(['health'], ['GET'], 'health');
    return api;
  }

  private observability(fns: Record<RouteGroup, lambda.Function>): cloudwatch.Dashboard {
    const oldestJobAge = new cloudwatch.Metric({
      namespace: metricsNamespace,
      metricName: oldestJobAgeMetric,
      statistic: 'Maximum',
      period: Duration.minutes(1),
    });
    new cloudwatch.Alarm(this, 'Api5xxAlarm', {
      alarmDescription: 'Ferry: the v2 API answered 5xx (bad input must never cause one)',
      metric: this.api.metricServerError({ period: Duration.minutes(5), statistic: 'Sum' }),
      threshold: 5,
      evaluationPeriods: 1,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    });
    new cloudwatch.Alarm(this, 'OldestJobAgeAlarm', {
      alarmDescription: 'Ferry: a job has waited in a queue for 15 minutes (no capacity, or workers failing)',
      metric: oldestJobAge,
      threshold: 900,
      evaluationPeriods: 5,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    });

    const dashboard = new cloudwatch.Dashboard(this, 'Dashboard', { dashboardName: 'Ferry' });
    // App DLQs are found by name: the platform template must not reference app stacks.
    const dlqDepth = new cloudwatch.MathExpression({
      expression: `SEARCH('{AWS/SQS,QueueName} MetricName="ApproximateNumberOfMessagesVisible" QueueName="${queueNamePrefix}" dlq', 'Maximum', 60)`,
      usingMetrics: {},
      label: 'DLQ depth',
      period: Duration.minutes(1),
    });
    dashboard.addWidgets(
      new cloudwatch.GraphWidget({
        title: 'API requests and errors',
        left: [this.api.metricCount(), this.api.metricClientError(), this.api.metricServerError()],
        right: [this.api.metricLatency({ statistic: 'p90' })],
        width: 12,
      }),
      new cloudwatch.GraphWidget({ title: 'Oldest job age (s)', left: [oldestJobAge], width: 12 }),
      new cloudwatch.GraphWidget({
        title: 'Function errors',
        left: [...Object.values(fns), this.authorizerFunction, this.sweeperFunction].map((fn) =>
          fn.metricErrors(),
        ),
        width: 12,
      }),
      new cloudwatch.GraphWidget({ title: 'Dead-letter queues', left: [dlqDepth], width: 12 }),
    );
    return dashboard;
  }
}
