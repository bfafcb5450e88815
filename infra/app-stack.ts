/**
 * One app in one environment: per endpoint of the build manifest, the ECS service that runs its
 * workers, and for queue endpoints the SQS queue (+ DLQ) the v2 API feeds; for load-balanced
 * endpoints an internet-facing ALB. Shared resources come from the platform (`PlatformExports`).
 *
 * Task layout (both kinds): two containers in HOST network mode, so the worker reaches the `agent`
 * sidecar on 127.0.0.1 and both use the host's public IP for egress (the platform has no NAT).
 * One task per host (gpu.ts reserves the host's memory), so fixed ports never clash.
 *
 *   queue:  SQS ──▶ agent :8090 (worker protocol: job-take, job-done, job-stream, job-stop, ping)
 *                      ▲ RUNPOD_WEBHOOK_* (localhost)
 *                   worker (ferry runtime or any RunPod-SDK image)
 *   lb:     ALB :80 ──▶ agent :8000 (checks the API key, answers /ping) ──▶ worker :8001 (localhost)
 *
 * Leases and visibility (the agent's contract, see `leaseTiming`): the agent receives a message,
 * claims the job in DynamoDB with a 60 s lease, renews the lease every 20 s and at each renewal
 * extends the message's visibility to 120 s; it deletes the message when the job is final. So the
 * message stays in flight while the job runs (the backlog metric counts running jobs), and when an
 * agent dies the message reappears after at most 120 s — after its 60 s lease has lapsed, so the next
 * taker's conditional claim succeeds. A message received 5 times goes to the DLQ.
 */
import { createHash } from 'node:crypto';
import {
  Aws,
  CfnOutput,
  Duration,
  Fn,
  RemovalPolicy,
  Stack,
  type StackProps,
  Validations,
} from 'aws-cdk-lib';
import * as appscaling from 'aws-cdk-lib/aws-applicationautoscaling';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as cwActions from 'aws-cdk-lib/aws-cloudwatch-actions';
import type * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as ecr from 'aws-cdk-lib/aws-ecr';
import * as ecs from 'aws-cdk-lib/aws-ecs';
import * as elbv2 from 'aws-cdk-lib/aws-elasticloadbalancingv2';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import type { Construct } from 'constructs';
import { FerryError } from '../core/errors.js';
import { limits } from '../core/limits.js';
import type { Manifest, ManifestEndpoint } from '../core/manifest.js';
import { agentMemoryMiB, type Placement, placementFor, workerMemoryReservationMiB } from './gpu.js';
import { type PlatformExports, payloadsPrefix, queueNamePrefix } from './platform-stack.js';

/** The agent's lease timing; visibility is twice the lease so a live agent never loses its message. */
export const leaseTiming = {
  leaseSec: limits.leaseMs / 1000,
  renewEverySec: 20,
  visibilityTimeoutSec: 120,
  /** Receives before a message goes to the DLQ. */
  maxReceiveCount: 5,
} as const;

export const ports = {
  /** The agent's worker-protocol server (queue endpoints), on localhost. */
  agent: 8090,
  /** What the ALB reaches: the agent's key-checking proxy (load-balanced endpoints). */
  lbPublic: 8000,
  /** The worker's own HTTP server behind that proxy (FERRY_PORT in the worker). */
  lbWorker: 8001,
} as const;

export interface WorkerImages {
  /** Worker image for GPU endpoints (CUDA base). */
  gpuWorker: string;
  /** Worker image for CPU endpoints. */
  cpuWorker: string;
  /** The agent sidecar. */
  agent: string;
}

export interface AppEnvironmentStackProps extends StackProps {
  appName: string;
  envName: string;
  manifest: Manifest;
  /** Where `ferry deploy` uploaded the artifact (usually the platform bucket, under artifacts/). */
  artifact: { bucketName: string; key: string };
  platform: PlatformExports;
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

/** The environment a RunPod-SDK worker needs to talk to the agent on localhost (DESIGN.md §5). */
export function workerProtocolEnv(endpointId: string, workerToken: string): Record<string, string> {
  const base = `http://127.0.0.1:${ports.agent}/v2/${endpointId}`;
  return {
    // The SDK substitutes $ID (worker id) here and appends `&job_in_progress=…`, so a `?` must be in.
    RUNPOD_WEBHOOK_GET_JOB: `${base}/job-take/$ID?agent=1`,
    RUNPOD_WEBHOOK_POST_OUTPUT: `${base}/job-done/$RUNPOD_POD_ID/$ID?agent=1`,
    RUNPOD_WEBHOOK_POST_STREAM: `${base}/job-stream/$RUNPOD_POD_ID/$ID?agent=1`,
    RUNPOD_WEBHOOK_PING: `${base}/ping/$RUNPOD_POD_ID`,
    RUNPOD_POD_ID: 'worker',
    RUNPOD_ENDPOINT_ID: endpointId,
    RUNPOD_AI_API_KEY: workerToken,
  };
}

/** The CloudFormation stack name of one app environment. */
export function appStackName(app: string, env: string): string {
  const clean = (s: string) => s.replace(/[^A-Za-z0-9-]/g, '-');
  return `Ferry-${clean(app)}-${clean(env)}`.slice(0, 128);
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
  queue?: sqs.Queue;
  deadLetterQueue?: sqs.Queue;
  loadBalancer?: elbv2.ApplicationLoadBalancer;
}

export class AppEnvironmentStack extends Stack {
  readonly endpoints: readonly DeployedEndpoint[];
  private readonly logGroup: logs.LogGroup;
  private readonly platformBucketName: string;

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
    this.platformBucketName = Fn.importValue(props.platform.bucketNameExport);
    this.logGroup = new logs.LogGroup(this, 'Logs', {
      retention: logs.RetentionDays.ONE_MONTH,
      removalPolicy: RemovalPolicy.DESTROY,
    });
    this.endpoints = props.manifest.endpoints.map((endpoint) => this.addEndpoint(endpoint));
    new CfnOutput(this, 'Endpoints', {
      description: 'JSON list of {name, id, kind, queueUrl?, url?} for the CLI',
      value: Stack.of(this).toJsonString(
        this.endpoints.map((e) => ({
          name: e.name,
          id: e.id,
          kind: e.kind,
          ...(e.queue ? { queueUrl: e.queue.queueUrl } : {}),
          ...(e.loadBalancer ? { url: `http://${e.loadBalancer.loadBalancerDnsName}` } : {}),
        })),
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
    const endpointId =
      props.endpointIds?.[endpoint.name] ?? endpointIdFor(props.appName, props.envName, endpoint.name);
    const placement = placementFor(resources);
    const capacityProvider = props.platform.capacityProviderFor(placement.shape.instanceType);
    const prefix = `Ep-${endpoint.name}`;

    const taskRole = new iam.Role(this, `${prefix}-TaskRole`, {
      assumedBy: new iam.ServicePrincipal('ecs-tasks.amazonaws.com'),
      description: `Ferry ${props.appName}/${props.envName}/${endpoint.name} worker task`,
    });
    // The artifact object, read-only, by exact key.
    taskRole.addToPolicy(
      new iam.PolicyStatement({
        actions: ['s3:GetObject'],
        resources: [
          Stack.of(this).formatArn({
            service: 's3',
            region: '',
            account: '',
            resource: props.artifact.bucketName,
            resourceName: props.artifact.key,
          }),
        ],
      }),
    );
    const taskDefinition = new ecs.Ec2TaskDefinition(this, `${prefix}-Task`, {
      networkMode: ecs.NetworkMode.HOST,
      taskRole,
    });

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
      FERRY_ARTIFACT_BUCKET: props.artifact.bucketName,
      FERRY_ARTIFACT_KEY: props.artifact.key,
      // A code-only change alters the task definition, so ECS rolls the service (spec §4.4 rule 4).
      FERRY_SOURCE_FINGERPRINT: props.manifest.sourceFingerprint,
      FERRY_MAX_CONCURRENCY: String(resources.maxConcurrency),
      FERRY_EXECUTION_TIMEOUT_MS: String(resources.executionTimeoutMs),
    };

    let queue: sqs.Queue | undefined;
    let deadLetterQueue: sqs.Queue | undefined;
    let agentEnv: Record<string, string>;
    let workerEnv: Record<string, string>;
    if (endpoint.kind === 'queue') {
      deadLetterQueue = new sqs.Queue(this, `${prefix}-Dlq`, {
        queueName: `${queueNamePrefix}${endpointId}-dlq`,
        retentionPeriod: Duration.days(14),
        encryption: sqs.QueueEncryption.SQS_MANAGED,
        enforceSSL: true,
      });
      queue = new sqs.Queue(this, `${prefix}-Queue`, {
        queueName: `${queueNamePrefix}${endpointId}`,
        visibilityTimeout: Duration.seconds(leaseTiming.visibilityTimeoutSec),
        receiveMessageWaitTime: Duration.seconds(20),
        // policy.ttl may keep a job for up to 7 days.
        retentionPeriod: Duration.millis(limits.ttlMaxMs),
        encryption: sqs.QueueEncryption.SQS_MANAGED,
        enforceSSL: true,
        deadLetterQueue: { queue: deadLetterQueue, maxReceiveCount: leaseTiming.maxReceiveCount },
      });
      props.platform.addDlqAlarm(this, `${prefix}-DlqAlarm`, deadLetterQueue);
      taskRole.addToPolicy(
        new iam.PolicyStatement({
          actions: [
            'sqs:ReceiveMessage',
            'sqs:DeleteMessage',
            'sqs:ChangeMessageVisibility',
            'sqs:GetQueueAttributes',
          ],
          resources: [queue.queueArn],
        }),
      );
      this.allowJobTables(taskRole);
      agentEnv = {
        ...common,
        FERRY_QUEUE_URL: queue.queueUrl,
        FERRY_JOBS_TABLE: props.platform.jobsTable.tableName,
        FERRY_CHUNKS_TABLE: props.platform.chunksTable.tableName,
        FERRY_CONTROL_TABLE: props.platform.controlTable.tableName,
        FERRY_BUCKET: this.platformBucketName,
        FERRY_AGENT_PORT: String(ports.agent),
        FERRY_WORKER_TOKEN: workerToken,
        FERRY_LEASE_SEC: String(leaseTiming.leaseSec),
        FERRY_LEASE_RENEW_SEC: String(leaseTiming.renewEverySec),
        FERRY_VISIBILITY_TIMEOUT_SEC: String(leaseTiming.visibilityTimeoutSec),
      };
      // User env first: nothing a user sets can redirect the worker away from its agent.
      workerEnv = { ...resources.env, ...common, ...workerProtocolEnv(endpointId, workerToken) };
    } else {
      // Clients' keys are checked by the agent against the platform's hashed keys table.
      taskRole.addToPolicy(
        new iam.PolicyStatement({
          actions: ['dynamodb:GetItem'],
          resources: [props.platform.apiKeysTable.tableArn],
        }),
      );
      agentEnv = {
        ...common,
        FERRY_KEYS_TABLE: props.platform.apiKeysTable.tableName,
        FERRY_PUBLIC_PORT: String(ports.lbPublic),
        FERRY_WORKER_URL: `http://127.0.0.1:${ports.lbWorker}`,
      };
      workerEnv = { ...resources.env, ...common, FERRY_PORT: String(ports.lbWorker) };
    }

    const image = placement.kind === 'gpu' ? props.images.gpuWorker : props.images.cpuWorker;
    const agent = taskDefinition.addContainer('agent', {
      image: this.containerImage(`${prefix}-AgentImage`, props.images.agent),
      essential: true,
      memoryReservationMiB: agentMemoryMiB,
      environment: agentEnv,
      logging: ecs.LogDrivers.awsLogs({ logGroup: this.logGroup, streamPrefix: `${endpoint.name}/agent` }),
    });
    const worker = taskDefinition.addContainer('worker', {
      image: this.containerImage(`${prefix}-WorkerImage`, image),
      essential: true,
      memoryReservationMiB: workerMemoryReservationMiB(placement.shape),
      ...(placement.kind === 'gpu' ? { gpuCount: resources.gpuCount } : {}),
      environment: workerEnv,
      logging: ecs.LogDrivers.awsLogs({ logGroup: this.logGroup, streamPrefix: `${endpoint.name}/worker` }),
      ...(endpoint.kind === 'lb' ? { portMappings: [{ containerPort: ports.lbWorker }] } : {}),
    });
    if (endpoint.kind === 'lb') agent.addPortMappings({ containerPort: ports.lbPublic });
    worker.addContainerDependencies({ container: agent, condition: ecs.ContainerDependencyCondition.START });
    this.acknowledgeTaskFindings(taskDefinition, taskRole);

    const service = new ecs.Ec2Service(this, `${prefix}-Service`, {
      cluster: props.platform.cluster,
      taskDefinition,
      // Zero at create; Application Auto Scaling owns the count from then on. A template that keeps
      // saying 0 does not reset a running service, because CloudFormation only sends changed values.
      desiredCount: 0,
      // Old workers may stop before new ones start: queue jobs wait (or requeue when a lease lapses),
      // and no second GPU host is needed to roll.
      minHealthyPercent: 0,
      maxHealthyPercent: 100,
      capacityProviderStrategies: [{ capacityProvider: capacityProvider.capacityProviderName, weight: 1 }],
      placementConstraints: [
        ecs.PlacementConstraint.memberOf(`attribute:ecs.instance-type == ${placement.shape.instanceType}`),
      ],
      circuitBreaker: { enable: true, rollback: false },
      propagateTags: ecs.PropagatedTagSource.SERVICE,
    });

    const scalableTarget = new appscaling.ScalableTarget(this, `${prefix}-Scaling`, {
      serviceNamespace: appscaling.ServiceNamespace.ECS,
      scalableDimension: 'ecs:service:DesiredCount',
      resourceId: `service/${props.platform.cluster.clusterName}/${service.serviceName}`,
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
    if (queue && deadLetterQueue) {
      this.queueScaling(prefix, endpoint, service, scalableTarget, queue);
      return { ...deployed, queue, deadLetterQueue };
    }
    const loadBalancer = this.loadBalancer(prefix, endpoint, service, scalableTarget);
    return { ...deployed, loadBalancer };
  }

  /**
   * Three policies:
   *  1. From zero — step: ApproximateNumberOfMessagesVisible ≥ 1 → +1. Target tracking cannot leave
   *     zero (it scales proportionally to the current count), the SageMaker-async fix (aws-anchor §2.3).
   *  2. Backlog per task — target tracking on (visible + in flight) / running tasks, target =
   *     maxConcurrency, scale-out only. In-flight counts because the agent holds a job's message
   *     until the job is final. The division has no IF guard: with no running task it yields no
   *     datapoint, which target tracking treats as "no action" — exactly right, since policy 1 owns
   *     0 → 1 — and it avoids depending on Application Auto Scaling accepting IF (unverified).
   *     Written as L1, because the L2 `scaleToTrackMetric` takes no metric math.
   *  3. Idle — step: no job visible or in flight for idleTimeoutSec → exact capacity workersMin.
   *     Only then, so a scale-in never stops a busy worker.
   */
  private queueScaling(
    prefix: string,
    endpoint: ManifestEndpoint,
    service: ecs.Ec2Service,
    target: appscaling.ScalableTarget,
    queue: sqs.Queue,
  ): void {
    const { resources } = endpoint;
    const minute = Duration.minutes(1);
    const visible = queue.metricApproximateNumberOfMessagesVisible({ period: minute, statistic: 'Maximum' });
    const inFlight = queue.metricApproximateNumberOfMessagesNotVisible({
      period: minute,
      statistic: 'Maximum',
    });

    const fromZero = new appscaling.StepScalingAction(this, `${prefix}-FromZero`, {
      scalingTarget: target,
      adjustmentType: appscaling.AdjustmentType.CHANGE_IN_CAPACITY,
      cooldown: minute,
    });
    fromZero.addAdjustment({ lowerBound: 0, adjustment: 1 });
    new cloudwatch.Alarm(this, `${prefix}-BacklogAlarm`, {
      alarmDescription: `Ferry ${endpoint.name}: jobs are waiting`,
      metric: visible,
      threshold: 1,
      evaluationPeriods: 1,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    }).addAlarmAction(new cwActions.ApplicationScalingAction(fromZero));

    const queueName = queue.queueName;
    new appscaling.CfnScalingPolicy(this, `${prefix}-BacklogPerTask`, {
      policyName: `${prefix}-BacklogPerTask`,
      policyType: 'TargetTrackingScaling',
      scalingTargetId: target.scalableTargetId,
      targetTrackingScalingPolicyConfiguration: {
        targetValue: resources.maxConcurrency,
        disableScaleIn: true,
        scaleOutCooldown: 60,
        customizedMetricSpecification: {
          metrics: [
            sqsMetricStat('m1', 'ApproximateNumberOfMessagesVisible', queueName),
            sqsMetricStat('m2', 'ApproximateNumberOfMessagesNotVisible', queueName),
            {
              id: 'm3',
              returnData: false,
              metricStat: {
                metric: {
                  namespace: 'ECS/ContainerInsights',
                  metricName: 'RunningTaskCount',
                  dimensions: [
                    { name: 'ClusterName', value: this.props.platform.cluster.clusterName },
                    { name: 'ServiceName', value: service.serviceName },
                  ],
                },
                stat: 'Average',
              },
            },
            { id: 'e1', expression: '(m1 + m2) / m3', label: 'Jobs per running task', returnData: true },
          ],
        },
      },
    });

    const idleMinutes = Math.max(1, Math.ceil(resources.idleTimeoutSec / 60));
    const idle = new appscaling.StepScalingAction(this, `${prefix}-Idle`, {
      scalingTarget: target,
      adjustmentType: appscaling.AdjustmentType.EXACT_CAPACITY,
      cooldown: Duration.seconds(resources.idleTimeoutSec),
    });
    idle.addAdjustment({ upperBound: 0, adjustment: resources.workersMin });
    new cloudwatch.Alarm(this, `${prefix}-IdleAlarm`, {
      alarmDescription: `Ferry ${endpoint.name}: no jobs for ${resources.idleTimeoutSec} s`,
      metric: new cloudwatch.MathExpression({
        expression: 'visible + inFlight',
        usingMetrics: { visible, inFlight },
        period: minute,
        label: 'Jobs waiting or running',
      }),
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
    const { platform } = this.props;
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

  /** Jobs and chunks: the calls the agent makes (claim/renew/finish, append chunks) and no others. */
  private allowJobTables(role: iam.Role): void {
    const { jobsTable, chunksTable, controlTable } = this.props.platform;
    const table = (t: dynamodb.ITable, actions: string[]) =>
      role.addToPolicy(new iam.PolicyStatement({ actions, resources: [t.tableArn] }));
    table(jobsTable, ['dynamodb:GetItem', 'dynamodb:UpdateItem']);
    table(chunksTable, ['dynamodb:PutItem']);
    // Queue generation (purge) and the worker's own heartbeat record for /health.
    table(controlTable, ['dynamodb:GetItem', 'dynamodb:PutItem', 'dynamodb:UpdateItem']);
    role.addToPolicy(
      new iam.PolicyStatement({
        actions: ['s3:GetObject', 's3:PutObject'],
        resources: [`arn:${Aws.PARTITION}:s3:::${this.platformBucketName}/${payloadsPrefix}*`],
      }),
    );
  }

  private acknowledgeTaskFindings(taskDefinition: ecs.Ec2TaskDefinition, taskRole: iam.Role): void {
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
    Validations.of(taskRole).acknowledge({
      id: `AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:s3:::${this.props.platform.bucketNameExport}/${payloadsPrefix}*]`,
      reason: 'Claim-check payloads have per-job keys under payloads/; the grant stops at that prefix.',
    });
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

function sqsMetricStat(id: string, metricName: string, queueName: string) {
  return {
    id,
    returnData: false,
    metricStat: {
      metric: { namespace: 'AWS/SQS', metricName, dimensions: [{ name: 'QueueName', value: queueName }] },
      stat: 'Sum',
    },
  };
}
