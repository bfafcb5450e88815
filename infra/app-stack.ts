/**
 * One app in one environment: per endpoint of the build manifest, the ECS service that runs its
 * workers; for queue endpoints the two SQS queues the v2 API feeds (urgent `ferry-<id>` and
 * low-priority `ferry-<id>-low`, core/adapters/aws/sqs.ts), each with its DLQ; for load-balanced
 * endpoints an internet-facing ALB. Shared resources come from the platform through its fixed
 * CloudFormation exports (`PlatformImports`, platform-exports.ts), never by reference to the platform
 * stack's objects: what this stack uses must not shape the template of a platform other apps share.
 *
 * Task layout: containers in HOST network mode, so the worker reaches the agent on 127.0.0.1 and
 * both use the host's public IP for egress (the platform has no NAT). One task per host (gpu.ts
 * reserves the host's memory), so fixed ports never clash.
 *
 *   artifact (init, FERRY_AGENT_MODE=artifact): S3 artifact ─▶ task volume /ferry, exits 0
 *       │ SUCCESS
 *       ▼
 *   queue:  SQS ──▶ agent 127.0.0.1:8090 (worker protocol: job-take, job-done, job-stream, job-stop, ping)
 *                      ▲ RUNPOD_WEBHOOK_* (localhost)
 *                   worker (ferry runtime or any RunPod-SDK image), unpacks /ferry/artifact.tar.gz
 *   lb:     ALB :80 ──▶ agent :8000 (FERRY_AGENT_MODE=lb: API key, /ping) ──▶ worker 127.0.0.1:8001
 *
 * The artifact reaches the worker through the init container rather than a presigned
 * FERRY_ARTIFACT_URL: a URL in the task definition would expire while ECS keeps starting tasks from
 * it; the task role reads the one artifact key instead (worker-image/agent/artifact.ts).
 *
 * Leases (the agent's contract, worker-image/agent/agent.ts): the agent receives a message (hidden
 * for `leaseTiming.receiveVisibilitySec`), claims the job in DynamoDB with a conditional write and
 * DELETES the message at once. From then on the job is guarded by its lease in DynamoDB, renewed by
 * the worker's pings; if the task dies, the lease lapses and the sweeper Lambda requeues the job with
 * a new message (or fails it after maxAttempts). No message is in flight while a job runs, so there
 * is no visibility to extend, and ApproximateNumberOfMessagesNotVisible is ~0 whatever the load. A
 * message only comes back if an agent died between receive and delete; after `maxReceiveCount`
 * such receives it goes to the DLQ.
 */
import { createHash } from 'node:crypto';
import { Aws, CfnOutput, Duration, RemovalPolicy, Stack, type StackProps, Validations } from 'aws-cdk-lib';
import * as appscaling from 'aws-cdk-lib/aws-applicationautoscaling';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as cwActions from 'aws-cdk-lib/aws-cloudwatch-actions';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as ecr from 'aws-cdk-lib/aws-ecr';
import * as ecs from 'aws-cdk-lib/aws-ecs';
import * as elbv2 from 'aws-cdk-lib/aws-elasticloadbalancingv2';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import type { Construct } from 'constructs';
import { dynamoSchema } from '../core/adapters/aws/dynamo.js';
import { FerryError } from '../core/errors.js';
import { limits } from '../core/limits.js';
import type { Manifest, ManifestEndpoint } from '../core/manifest.js';
import { placeholderWorkerId, workerProtocolEnv } from '../worker-image/agent/agent.js';
import {
  agentMemoryMiB,
  artifactInitMemoryMiB,
  type Placement,
  placementFor,
  workerMemoryReservationMiB,
} from './gpu.js';
import { PlatformImports, type PlatformImportsProps, type PlatformRefs } from './platform-exports.js';
import {
  allowIndexes,
  allowTable,
  blobPrefix,
  clusterName,
  keyLookupStatement,
  payloadsPrefix,
  queueNamePrefix,
} from './platform-stack.js';

/** The agent's lease and the queues' redrive, as the agent and engine use them. */
/** How the agent starts inside a worker base image (worker-image/agent/bundle.ts writes agent.mjs). */
export const agentEntryPoint = ['node', '/opt/ferry/agent/agent.mjs'] as const;

export const leaseTiming = {
  /** FERRY_LEASE_SEC: a claimed job's lease in DynamoDB, renewed by every worker ping. */
  leaseSec: limits.leaseMs / 1000,
  /**
   * How long a received message stays hidden: the engine receives with visibility = the lease, and
   * deletes the message right after the claim (milliseconds later). Also the queue's default.
   */
  receiveVisibilitySec: limits.leaseMs / 1000,
  /** Receives before a message goes to the DLQ (each one means an agent died mid-claim). */
  maxReceiveCount: 5,
} as const;

export const ports = {
  /** The agent's worker-protocol server (queue endpoints), on localhost. */
  agent: 8090,
  /** What the ALB reaches: the agent's key-checking proxy (load-balanced endpoints). */
  lbPublic: 8000,
  /** The worker's own HTTP server behind that proxy (FERRY_PORT in the worker), on localhost. */
  lbWorker: 8001,
} as const;

/** Where the init container puts the artifact and the worker's entrypoint reads it. */
export const artifactMount = { volume: 'ferry-artifact', path: '/ferry', file: '/ferry/artifact.tar.gz' };

/** ECS's ceiling for stopTimeout: the agent's drain (FERRY_DRAIN_MS) must end before it. */
const stopTimeoutSec = 120;
const drainMs = 110_000;

export interface WorkerImages {
  /** Worker image for GPU endpoints (CUDA base). */
  gpuWorker: string;
  /** Worker image for CPU endpoints. */
  cpuWorker: string;
  /** The agent (its entrypoint runs agent.mjs; FERRY_AGENT_MODE picks queue, lb or artifact). */
  agent: string;
}

export interface AppEnvironmentStackProps extends StackProps {
  appName: string;
  envName: string;
  manifest: Manifest;
  /** Where `ferry deploy` uploaded the artifact; the bucket defaults to the platform's (imported). */
  artifact: { bucketName?: string; key: string };
  /** The platform's pools; everything else of the platform is imported by its fixed export name. */
  platform: PlatformImportsProps;
  images: WorkerImages;
  /** Endpoint ids by endpoint name; default `endpointIdFor(app, env, name)`. */
  endpointIds?: Readonly<Record<string, string>>;
}

/**
 * A stable endpoint id: the same app, environment and endpoint name always get the same id, so a
 * redeploy keeps client URLs. 14 lowercase characters, like RunPod's.
 */
export function endpointIdFor(app: string, env: string, endpointName: string): string {
  const digest = createHash('sha256').update(`${app}\n${env}\n${endpointName}`).digest();
  const alphabet = 'abcdefghijklmnopqrstuvwxyz0123456789';
  let id = '';
  for (let i = 0; i < 14; i++) id += alphabet[digest[i]! % alphabet.length];
  return id;
}

/** The CloudFormation stack name of one app environment. */
export function appStackName(app: string, env: string): string {
  const clean = (s: string) => s.replace(/[^A-Za-z0-9-]/g, '-');
  return `Ferry-${clean(app)}-${clean(env)}`.slice(0, 128);
}

/** What `Endpoints` (the app stack's output) lists, one entry per endpoint. */
export interface EndpointOutput {
  name: string;
  id: string;
  kind: 'queue' | 'lb';
  /** Load-balanced: the ALB's address (http). */
  url?: string;
  queueUrl?: string;
  lowQueueUrl?: string;
}

export interface DeployedEndpoint {
  name: string;
  id: string;
  kind: 'queue' | 'lb';
  placement: Placement;
  service: ecs.Ec2Service;
  taskDefinition: ecs.Ec2TaskDefinition;
  taskRole: iam.Role;
  scalableTarget: appscaling.ScalableTarget;
  /** Urgent jobs; the only queue scaling reads. */
  queue?: sqs.Queue;
  deadLetterQueue?: sqs.Queue;
  /** policy.lowPriority jobs: drained by running workers, never a reason to start one. */
  lowQueue?: sqs.Queue;
  lowDeadLetterQueue?: sqs.Queue;
  loadBalancer?: elbv2.ApplicationLoadBalancer;
}

export class AppEnvironmentStack extends Stack {
  readonly endpoints: readonly DeployedEndpoint[];
  /** The platform, imported (every value a `Fn::ImportValue` of a name in platform-exports.ts). */
  readonly platform: PlatformRefs;
  private readonly logGroup: logs.LogGroup;
  private readonly platformBucketName: string;
  private readonly artifactBucketName: string;

  constructor(
    scope: Construct,
    id: string,
    private readonly props: AppEnvironmentStackProps,
  ) {
    super(scope, id, props);
    const names = new Set<string>();
    for (const endpoint of props.manifest.endpoints) {
      if (names.has(endpoint.name)) {
        throw new FerryError('bad_request', `Two endpoints are named "${endpoint.name}"`);
      }
      names.add(endpoint.name);
    }
    this.platform = new PlatformImports(this, 'Platform', props.platform);
    this.platformBucketName = this.platform.bucketName;
    this.artifactBucketName = props.artifact.bucketName ?? this.platformBucketName;
    this.logGroup = new logs.LogGroup(this, 'Logs', {
      retention: logs.RetentionDays.ONE_MONTH,
      removalPolicy: RemovalPolicy.DESTROY,
    });
    this.endpoints = props.manifest.endpoints.map((endpoint) => this.addEndpoint(endpoint));
    new CfnOutput(this, 'Endpoints', {
      description: 'JSON list of {name, id, kind, url?, queueUrl?, lowQueueUrl?} for the CLI',
      value: Stack.of(this).toJsonString(
        this.endpoints.map(
          (e): EndpointOutput => ({
            name: e.name,
            id: e.id,
            kind: e.kind,
            ...(e.loadBalancer ? { url: `http://${e.loadBalancer.loadBalancerDnsName}` } : {}),
            ...(e.queue ? { queueUrl: e.queue.queueUrl } : {}),
            ...(e.lowQueue ? { lowQueueUrl: e.lowQueue.queueUrl } : {}),
          }),
        ),
      ),
    });
  }

  private addEndpoint(endpoint: ManifestEndpoint): DeployedEndpoint {
    const { props } = this;
    const { resources } = endpoint;
    if (resources.workersMin > resources.workersMax) {
      throw new FerryError(
        'bad_request',
        `Endpoint "${endpoint.name}": workers min ${resources.workersMin} exceeds max ${resources.workersMax}`,
      );
    }
    if (endpoint.kind === 'queue' && !endpoint.target) {
      throw new FerryError('bad_request', `Queue endpoint "${endpoint.name}" names no function or class`);
    }
    if (endpoint.kind === 'lb' && !endpoint.variable) {
      throw new FerryError(
        'bad_request',
        `Load-balanced endpoint "${endpoint.name}" names no Endpoint variable`,
      );
    }
    const endpointId =
      props.endpointIds?.[endpoint.name] ?? endpointIdFor(props.appName, props.envName, endpoint.name);
    const placement = placementFor(resources);
    const capacityProviderName = this.platform.capacityProviderNameFor(placement.shape.instanceType);
    const prefix = `Ep-${endpoint.name}`;

    const taskRole = new iam.Role(this, `${prefix}-TaskRole`, {
      assumedBy: new iam.ServicePrincipal('ecs-tasks.amazonaws.com'),
      description: `Ferry ${props.appName}/${props.envName}/${endpoint.name} worker task`,
    });
    // The artifact object, read-only, by exact key (the init container).
    taskRole.addToPolicy(
      new iam.PolicyStatement({
        actions: ['s3:GetObject'],
        resources: [
          Stack.of(this).formatArn({
            service: 's3',
            region: '',
            account: '',
            resource: this.artifactBucketName,
            resourceName: props.artifact.key,
          }),
        ],
      }),
    );
    const taskDefinition = new ecs.Ec2TaskDefinition(this, `${prefix}-Task`, {
      networkMode: ecs.NetworkMode.HOST,
      taskRole,
    });
    // A fresh, task-scoped directory (ECS-managed bind mount, deleted with the task).
    taskDefinition.addVolume({ name: artifactMount.volume });

    const workerToken = createHash('sha256')
      .update(
        `ferry-worker\n${props.appName}\n${props.envName}\n${endpointId}\n${props.manifest.sourceFingerprint}`,
      )
      .digest('hex');
    const common: Record<string, string> = {
      FERRY_APP: props.appName,
      FERRY_ENV: props.envName,
      FERRY_ENDPOINT: endpoint.name,
      FERRY_ENDPOINT_ID: endpointId,
      FERRY_ENDPOINT_KIND: endpoint.kind,
      FERRY_ARTIFACT_BUCKET: this.artifactBucketName,
      FERRY_ARTIFACT_KEY: props.artifact.key,
      // A code-only change alters the task definition, so ECS rolls the service (spec §4.4 rule 4).
      FERRY_SOURCE_FINGERPRINT: props.manifest.sourceFingerprint,
      FERRY_MAX_CONCURRENCY: String(resources.maxConcurrency),
      FERRY_EXECUTION_TIMEOUT_MS: String(resources.executionTimeoutMs),
    };
    // ECS on EC2 does not set AWS_REGION in containers; the agent's SDK clients need it.
    const agentBase = { ...common, AWS_REGION: Aws.REGION };
    // The worker's entrypoint unpacks this (worker-image/entrypoint.sh), then runs FERRY_MODULE.
    const workerBase = { ...common, FERRY_ARTIFACT_PATH: artifactMount.file, FERRY_MODULE: endpoint.module };

    let queues: ReturnType<AppEnvironmentStack['queues']> | undefined;
    let agentEnv: Record<string, string>;
    let workerEnv: Record<string, string>;
    if (endpoint.kind === 'queue') {
      queues = this.queues(prefix, endpointId);
      this.allowQueueAgent(taskRole, [queues.queue, queues.lowQueue]);
      agentEnv = {
        ...agentBase,
        FERRY_AGENT_MODE: 'queue',
        FERRY_JOBS_TABLE: this.platform.jobsTable.tableName,
        FERRY_CHUNKS_TABLE: this.platform.chunksTable.tableName,
        FERRY_WORKERS_TABLE: this.platform.workersTable.tableName,
        FERRY_CONTROL_TABLE: this.platform.controlTable.tableName,
        FERRY_BUCKET: this.platformBucketName,
        FERRY_BLOB_PREFIX: blobPrefix,
        FERRY_QUEUE_URL: queues.queue.queueUrl,
        FERRY_QUEUE_URL_LOW: queues.lowQueue.queueUrl,
        FERRY_WORKER_TOKEN: workerToken,
        FERRY_AGENT_HOST: '127.0.0.1',
        FERRY_AGENT_PORT: String(ports.agent),
        FERRY_LEASE_SEC: String(leaseTiming.leaseSec),
        FERRY_DRAIN_MS: String(drainMs),
      };
      // User env first: nothing a user sets can redirect the worker away from its agent. The
      // protocol env is the agent's own `workerEnv()` shape; the worker id is a placeholder the agent
      // replaces with its runtime id on every request.
      workerEnv = {
        ...resources.env,
        ...workerBase,
        ...workerProtocolEnv({
          agentUrl: `http://127.0.0.1:${ports.agent}`,
          endpointId,
          workerId: placeholderWorkerId(endpointId),
          workerToken,
        }),
        FERRY_TARGET: endpoint.target!.name,
      };
    } else {
      // Clients' keys are checked by the agent: KEY#<hash> items of the control table, nothing else.
      taskRole.addToPolicy(keyLookupStatement(this.platform.controlTable));
      agentEnv = {
        ...agentBase,
        FERRY_AGENT_MODE: 'lb',
        FERRY_CONTROL_TABLE: this.platform.controlTable.tableName,
        FERRY_PORT: String(ports.lbWorker),
        FERRY_AGENT_HOST: '0.0.0.0',
        FERRY_AGENT_PORT: String(ports.lbPublic),
      };
      // Loopback only: the ALB must not reach the worker around the agent's key check.
      workerEnv = {
        ...resources.env,
        ...workerBase,
        FERRY_MODE: 'lb',
        FERRY_VARIABLE: endpoint.variable!,
        FERRY_HOST: '127.0.0.1',
        FERRY_PORT: String(ports.lbWorker),
      };
    }

    const agentImage = this.containerImage(`${prefix}-AgentImage`, props.images.agent);
    // Every worker base image ships Node and the agent bundle (worker-image/Dockerfile.*), so the
    // agent may run from the same image as the worker: only the entry point differs.
    const entryPoint = [...agentEntryPoint];
    const artifact = taskDefinition.addContainer('artifact', {
      image: agentImage,
      entryPoint,
      essential: false,
      memoryReservationMiB: artifactInitMemoryMiB,
      // Root only to write into the fresh task volume (owned by root); it runs no user code, writes
      // one file (mode 0644, so the worker's user can read it) and exits.
      user: '0',
      environment: {
        FERRY_AGENT_MODE: 'artifact',
        FERRY_ENDPOINT_ID: endpointId,
        AWS_REGION: Aws.REGION,
        FERRY_ARTIFACT_BUCKET: this.artifactBucketName,
        FERRY_ARTIFACT_KEY: props.artifact.key,
        FERRY_ARTIFACT_PATH: artifactMount.file,
      },
      logging: ecs.LogDrivers.awsLogs({ logGroup: this.logGroup, streamPrefix: `${endpoint.name}/artifact` }),
    });
    artifact.addMountPoints({
      sourceVolume: artifactMount.volume,
      containerPath: artifactMount.path,
      readOnly: false,
    });
    const agent = taskDefinition.addContainer('agent', {
      image: agentImage,
      entryPoint,
      essential: true,
      memoryReservationMiB: agentMemoryMiB,
      environment: agentEnv,
      stopTimeout: Duration.seconds(stopTimeoutSec),
      logging: ecs.LogDrivers.awsLogs({ logGroup: this.logGroup, streamPrefix: `${endpoint.name}/agent` }),
      ...(endpoint.kind === 'lb' ? { portMappings: [{ containerPort: ports.lbPublic }] } : {}),
    });
    const image = placement.kind === 'gpu' ? props.images.gpuWorker : props.images.cpuWorker;
    const worker = taskDefinition.addContainer('worker', {
      image: this.containerImage(`${prefix}-WorkerImage`, image),
      essential: true,
      memoryReservationMiB: workerMemoryReservationMiB(placement.shape),
      ...(placement.kind === 'gpu' ? { gpuCount: resources.gpuCount } : {}),
      environment: workerEnv,
      stopTimeout: Duration.seconds(stopTimeoutSec),
      logging: ecs.LogDrivers.awsLogs({ logGroup: this.logGroup, streamPrefix: `${endpoint.name}/worker` }),
    });
    worker.addMountPoints({
      sourceVolume: artifactMount.volume,
      containerPath: artifactMount.path,
      readOnly: true,
    });
    worker.addContainerDependencies(
      { container: artifact, condition: ecs.ContainerDependencyCondition.SUCCESS },
      { container: agent, condition: ecs.ContainerDependencyCondition.START },
    );
    this.acknowledgeTaskFindings(taskDefinition, taskRole);

    const service = new ecs.Ec2Service(this, `${prefix}-Service`, {
      cluster: this.platform.cluster,
      taskDefinition,
      // Zero at create; Application Auto Scaling owns the count from then on. A template that keeps
      // saying 0 does not reset a running service, because CloudFormation only sends changed values.
      desiredCount: 0,
      // Old workers may stop before new ones start: queue jobs wait (or requeue when a lease lapses),
      // and no second GPU host is needed to roll.
      minHealthyPercent: 0,
      maxHealthyPercent: 100,
      capacityProviderStrategies: [{ capacityProvider: capacityProviderName, weight: 1 }],
      placementConstraints: [
        ecs.PlacementConstraint.memberOf(`attribute:ecs.instance-type == ${placement.shape.instanceType}`),
      ],
      circuitBreaker: { enable: true, rollback: false },
      propagateTags: ecs.PropagatedTagSource.SERVICE,
    });
    this.allowTaskProtection(taskRole);

    const scalableTarget = new appscaling.ScalableTarget(this, `${prefix}-Scaling`, {
      serviceNamespace: appscaling.ServiceNamespace.ECS,
      scalableDimension: 'ecs:service:DesiredCount',
      resourceId: `service/${this.platform.cluster.clusterName}/${service.serviceName}`,
      minCapacity: resources.workersMin,
      maxCapacity: resources.workersMax,
    });

    const deployed: DeployedEndpoint = {
      name: endpoint.name,
      id: endpointId,
      kind: endpoint.kind,
      placement,
      service,
      taskDefinition,
      taskRole,
      scalableTarget,
    };
    if (queues) {
      this.queueScaling(prefix, endpoint, scalableTarget, queues.queue);
      return { ...deployed, ...queues };
    }
    const loadBalancer = this.loadBalancer(prefix, endpoint, service, scalableTarget);
    return { ...deployed, loadBalancer };
  }

  /** The urgent and the low-priority queue of one endpoint, each with its own DLQ and DLQ alarm. */
  private queues(prefix: string, endpointId: string) {
    const make = (suffix: '' | '-low', id: string) => {
      const deadLetterQueue = new sqs.Queue(this, `${prefix}-${id}Dlq`, {
        queueName: `${queueNamePrefix}${endpointId}${suffix}-dlq`,
        retentionPeriod: Duration.days(14),
        encryption: sqs.QueueEncryption.SQS_MANAGED,
        enforceSSL: true,
      });
      const queue = new sqs.Queue(this, `${prefix}-${id}Queue`, {
        // The name the Lambdas derive: FERRY_QUEUE_NAME_PREFIX + id (+ '-low'), functions/wiring.ts.
        queueName: `${queueNamePrefix}${endpointId}${suffix}`,
        visibilityTimeout: Duration.seconds(leaseTiming.receiveVisibilitySec),
        receiveMessageWaitTime: Duration.seconds(20),
        // policy.ttl may keep a job for up to 7 days.
        retentionPeriod: Duration.millis(limits.ttlMaxMs),
        encryption: sqs.QueueEncryption.SQS_MANAGED,
        enforceSSL: true,
        deadLetterQueue: { queue: deadLetterQueue, maxReceiveCount: leaseTiming.maxReceiveCount },
      });
      this.dlqAlarm(`${prefix}-${id}DlqAlarm`, deadLetterQueue);
      return { queue, deadLetterQueue };
    };
    const urgent = make('', '');
    const low = make('-low', 'Low');
    return {
      queue: urgent.queue,
      deadLetterQueue: urgent.deadLetterQueue,
      lowQueue: low.queue,
      lowDeadLetterQueue: low.deadLetterQueue,
    };
  }

  /**
   * A DLQ alarm. It lives here, with its queue: the shared platform has no per-app resource, and its
   * dashboard finds every DLQ by name.
   */
  private dlqAlarm(id: string, dlq: sqs.IQueue): cloudwatch.Alarm {
    return new cloudwatch.Alarm(this, id, {
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

  /**
   * Scaling reads the urgent queue's ApproximateNumberOfMessagesVisible only. Messages are deleted
   * the moment a worker claims their job, so "not visible" (in flight) is ~0 even under full load
   * and cannot measure work; "visible" is exactly the jobs no worker has picked up yet. The
   * low-priority queue is left out on purpose: those jobs never start a worker (DESIGN.md §3).
   *
   *  1. Scale out — step, on "visible ≥ 1" (1-minute maximum), ChangeInCapacity, relative to that
   *     threshold: < 2·maxConcurrency waiting → +1, < 8·maxConcurrency → +2, more → +4. From zero
   *     too (target tracking cannot leave zero, aws-anchor §2.3). While jobs keep waiting the alarm
   *     stays in ALARM and the policy fires again after each cooldown, up to workersMax.
   *  2. Scale in — step, on "nothing visible for idleTimeoutSec" (missing data counts: an idle
   *     queue stops emitting metrics), ExactCapacity workersMin. Busy tasks survive it: the agent
   *     turns on ECS task scale-in protection while its worker holds a job
   *     (PUT $ECS_AGENT_URI/task-protection/v1/state, allowed by the task role), so ECS stops only
   *     idle tasks and the protected ones once they finish.
   */
  private queueScaling(
    prefix: string,
    endpoint: ManifestEndpoint,
    target: appscaling.ScalableTarget,
    queue: sqs.Queue,
  ): void {
    const { resources } = endpoint;
    const minute = Duration.minutes(1);
    const visible = queue.metricApproximateNumberOfMessagesVisible({ period: minute, statistic: 'Maximum' });
    const per = Math.max(1, resources.maxConcurrency);

    const scaleOut = new appscaling.StepScalingAction(this, `${prefix}-ScaleOut`, {
      scalingTarget: target,
      adjustmentType: appscaling.AdjustmentType.CHANGE_IN_CAPACITY,
      cooldown: minute,
    });
    scaleOut.addAdjustment({ lowerBound: 0, upperBound: 2 * per, adjustment: 1 });
    scaleOut.addAdjustment({ lowerBound: 2 * per, upperBound: 8 * per, adjustment: 2 });
    scaleOut.addAdjustment({ lowerBound: 8 * per, adjustment: 4 });
    new cloudwatch.Alarm(this, `${prefix}-BacklogAlarm`, {
      alarmDescription: `Ferry ${endpoint.name}: jobs are waiting for a worker`,
      metric: visible,
      threshold: 1,
      evaluationPeriods: 1,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    }).addAlarmAction(new cwActions.ApplicationScalingAction(scaleOut));

    const idleMinutes = Math.max(1, Math.ceil(resources.idleTimeoutSec / 60));
    const idle = new appscaling.StepScalingAction(this, `${prefix}-Idle`, {
      scalingTarget: target,
      adjustmentType: appscaling.AdjustmentType.EXACT_CAPACITY,
      cooldown: Duration.seconds(resources.idleTimeoutSec),
    });
    idle.addAdjustment({ upperBound: 0, adjustment: resources.workersMin });
    new cloudwatch.Alarm(this, `${prefix}-IdleAlarm`, {
      alarmDescription: `Ferry ${endpoint.name}: no job waiting for ${resources.idleTimeoutSec} s`,
      metric: visible,
      threshold: 0,
      evaluationPeriods: idleMinutes,
      comparisonOperator: cloudwatch.ComparisonOperator.LESS_THAN_OR_EQUAL_TO_THRESHOLD,
      // An inactive queue stops emitting metrics (aws-anchor §1.1): silence means idle.
      treatMissingData: cloudwatch.TreatMissingData.BREACHING,
    }).addAlarmAction(new cwActions.ApplicationScalingAction(idle));
  }

  /**
   * An internet-facing ALB per load-balanced endpoint, so user routes keep their own paths (a shared
   * ALB would need path prefixes the worker does not know about). HTTP only: HTTPS needs a
   * certificate for a domain the user owns; `ferry deploy` prints the URL as http. An ALB with no
   * healthy target answers 503, so the same from-zero step policy watches its request count.
   */
  private loadBalancer(
    prefix: string,
    endpoint: ManifestEndpoint,
    service: ecs.Ec2Service,
    target: appscaling.ScalableTarget,
  ): elbv2.ApplicationLoadBalancer {
    const { platform } = this;
    const { resources } = endpoint;
    const securityGroup = new ec2.SecurityGroup(this, `${prefix}-AlbSecurityGroup`, {
      vpc: platform.vpc,
      description: `Ferry ${endpoint.name}: public HTTP`,
      allowAllOutbound: false,
    });
    securityGroup.addIngressRule(
      ec2.Peer.anyIpv4(),
      ec2.Port.tcp(80),
      'Public HTTP; the agent checks the API key',
    );
    securityGroup.addEgressRule(platform.instanceSecurityGroup, ec2.Port.tcp(ports.lbPublic), 'To the agent');
    // The rule lives in this stack (deleted with it) but opens the platform's host group to this ALB only.
    new ec2.CfnSecurityGroupIngress(this, `${prefix}-HostIngress`, {
      groupId: platform.instanceSecurityGroup.securityGroupId,
      sourceSecurityGroupId: securityGroup.securityGroupId,
      ipProtocol: 'tcp',
      fromPort: ports.lbPublic,
      toPort: ports.lbPublic,
      description: `Ferry ${endpoint.name} ALB to its agent`,
    });
    Validations.of(securityGroup).acknowledge({
      id: 'AwsSolutions-EC23',
      reason: 'A load-balanced endpoint is public by design (spec §4.2); every request needs the API key.',
    });

    const alb = new elbv2.ApplicationLoadBalancer(this, `${prefix}-Alb`, {
      vpc: platform.vpc,
      internetFacing: true,
      securityGroup,
      vpcSubnets: { subnetType: ec2.SubnetType.PUBLIC },
      dropInvalidHeaderFields: true,
      // Long handler calls (model inference) must not be cut at the 60 s default.
      idleTimeout: Duration.seconds(
        Math.min(4000, Math.max(60, Math.ceil(resources.executionTimeoutMs / 1000))),
      ),
    });
    Validations.of(alb).acknowledge({
      id: 'AwsSolutions-ELB2',
      reason:
        'Access logs need a dedicated bucket with an ELB delivery policy; requests are logged by the agent.',
    });
    const targetGroup = new elbv2.ApplicationTargetGroup(this, `${prefix}-Targets`, {
      vpc: platform.vpc,
      port: ports.lbPublic,
      protocol: elbv2.ApplicationProtocol.HTTP,
      targetType: elbv2.TargetType.INSTANCE,
      deregistrationDelay: Duration.seconds(30),
      healthCheck: { path: '/ping', healthyHttpCodes: '200', interval: Duration.seconds(15) },
    });
    service.attachToApplicationTargetGroup(targetGroup);
    alb.addListener(`${prefix}-Http`, { port: 80, open: false, defaultTargetGroups: [targetGroup] });

    const requests = alb.metrics.requestCount({ period: Duration.minutes(1), statistic: 'Sum' });
    const fromZero = new appscaling.StepScalingAction(this, `${prefix}-FromZero`, {
      scalingTarget: target,
      adjustmentType: appscaling.AdjustmentType.CHANGE_IN_CAPACITY,
      cooldown: Duration.minutes(1),
    });
    fromZero.addAdjustment({ lowerBound: 0, adjustment: 1 });
    new cloudwatch.Alarm(this, `${prefix}-RequestsAlarm`, {
      alarmDescription: `Ferry ${endpoint.name}: requests arrived`,
      metric: requests,
      threshold: 1,
      evaluationPeriods: 1,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    }).addAlarmAction(new cwActions.ApplicationScalingAction(fromZero));
    target.scaleToTrackMetric(`${prefix}-RequestsPerTask`, {
      predefinedMetric: appscaling.PredefinedMetric.ALB_REQUEST_COUNT_PER_TARGET,
      resourceLabel: `${alb.loadBalancerFullName}/${targetGroup.targetGroupFullName}`,
      // Requests per task per minute; a worker serves maxConcurrency at a time.
      targetValue: 60 * resources.maxConcurrency,
      scaleInCooldown: Duration.seconds(resources.idleTimeoutSec),
      scaleOutCooldown: Duration.minutes(1),
    });
    return alb;
  }

  /**
   * The queue agent's calls (worker-image/agent/agent.ts through JobEngine and the adapters), and no
   * others: receive + delete (and release at visibility 0) on its own two queues, send to them when
   * it gives jobs back (drain, a stuck worker); jobs Get + conditional Put, byEndpointStatus to find
   * its worker's jobs on drain; chunks Update + BatchWrite (job-stream); its own worker record; the
   * payloads of big inputs and outputs.
   */
  private allowQueueAgent(role: iam.Role, queues: sqs.Queue[]): void {
    const { jobsTable, chunksTable, workersTable } = this.platform;
    role.addToPolicy(
      new iam.PolicyStatement({
        actions: [
          'sqs:ReceiveMessage',
          'sqs:DeleteMessage',
          'sqs:ChangeMessageVisibility',
          'sqs:SendMessage',
        ],
        resources: queues.map((q) => q.queueArn),
      }),
    );
    allowTable(role, jobsTable, ['dynamodb:GetItem', 'dynamodb:PutItem']);
    allowIndexes(role, jobsTable, ['dynamodb:Query'], [dynamoSchema.jobs.indexes.byEndpointStatus.indexName]);
    allowTable(role, chunksTable, ['dynamodb:UpdateItem', 'dynamodb:BatchWriteItem']);
    allowTable(role, workersTable, ['dynamodb:GetItem', 'dynamodb:PutItem', 'dynamodb:DeleteItem']);
    role.addToPolicy(
      new iam.PolicyStatement({
        actions: ['s3:GetObject', 's3:PutObject', 's3:DeleteObject'],
        resources: [`arn:${Aws.PARTITION}:s3:::${this.platformBucketName}/${payloadsPrefix}*`],
      }),
    );
    Validations.of(role).acknowledge({
      id: `AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:s3:::${this.platform.bucketNameExport}/${payloadsPrefix}*]`,
      reason: 'Payloads have per-job keys under payloads/; the grant stops at that prefix.',
    });
  }

  /** The ECS agent endpoint's task-protection call acts with the task role, on this cluster's tasks. */
  private allowTaskProtection(role: iam.Role): void {
    role.addToPolicy(
      new iam.PolicyStatement({
        actions: ['ecs:UpdateTaskProtection', 'ecs:GetTaskProtection'],
        resources: [
          Stack.of(this).formatArn({ service: 'ecs', resource: 'task', resourceName: `${clusterName}/*` }),
        ],
      }),
    );
    Validations.of(role).acknowledge({
      id: `AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ecs:<AWS::Region>:<AWS::AccountId>:task/${clusterName}/*]`,
      reason: 'Task ids are only known at run time; the grant is limited to tasks of the Ferry cluster.',
    });
  }

  private acknowledgeTaskFindings(taskDefinition: ecs.Ec2TaskDefinition, _taskRole: iam.Role): void {
    Validations.of(taskDefinition).acknowledge(
      {
        id: 'AwsSolutions-ECS2',
        reason:
          'Environment holds configuration only (names, ids, ports). The worker token only works on the ' +
          "host's loopback, which the host security group keeps unreachable from outside.",
      },
      {
        id: 'AwsSolutions-IAM5[Resource::*]',
        reason: 'The execution role needs ecr:GetAuthorizationToken, which has no resource-level scoping.',
      },
    );
  }

  /** ECR URIs get pull permissions on their repository; anything else is pulled as public. */
  private containerImage(id: string, uri: string): ecs.ContainerImage {
    const match = /^(\d{12})\.dkr\.ecr\.([a-z0-9-]+)\.amazonaws\.com(?:\.cn)?\/([^:@]+)(?:[:@](.+))?$/.exec(
      uri,
    );
    if (!match) return ecs.ContainerImage.fromRegistry(uri);
    const [, account, region, repositoryName, tagOrDigest] = match;
    const partition = uri.includes('.amazonaws.com.cn') ? 'aws-cn' : 'aws';
    const repository = ecr.Repository.fromRepositoryAttributes(this, id, {
      repositoryName: repositoryName!,
      repositoryArn: `arn:${partition}:ecr:${region}:${account}:repository/${repositoryName}`,
    });
    return ecs.ContainerImage.fromEcrRepository(repository, tagOrDigest ?? 'latest');
  }
}
