/**
 * The ECS service that runs one endpoint's workers: its task role (least privilege for the agent's
 * calls), the task definition (artifact init container, agent, worker) and the service, named
 * `ferry-<endpointId>` so the scaler Lambda (functions/scaler.ts) can set its desiredCount. Nothing
 * else scales it: no Application Auto Scaling target, no alarms (docs/scaling.md).
 *
 * Task layout: BRIDGE network mode. Every container has its own network namespace; the worker reaches
 * the agent (queue) or the agent the worker (load-balanced) through a container link, by name. No
 * port of the worker protocol is published on the host, and the one published port (the LB agent's)
 * gets a host port ECS picks from the ephemeral range, so any number of tasks share a host without
 * clashing. Egress goes through Docker's NAT on the host's public IP (the platform has no NAT
 * gateway). Why not awsvpc: on EC2, a task's own ENI never gets a public IP address, so tasks in
 * awsvpc mode reach the internet (SQS, the model hub) only through a NAT gateway, about $32 a month
 * per zone while idle (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-networking-awsvpc.html);
 * and each task takes an ENI, of which small GPU instances have few (g4dn.xlarge and g5.xlarge: 4,
 * one for the host) unless ENI trunking is on, which not every instance type supports
 * (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/container-instance-eni.html). docs/aws.md
 * has the full comparison.
 *
 *   artifact (init, FERRY_AGENT_MODE=artifact): S3 artifact ─▶ task volume /ferry, exits 0
 *       │ SUCCESS
 *       ▼
 *   queue:  SQS ──▶ agent :8090 (worker protocol: job-take, job-done, job-stream, job-stop, ping)
 *                      ▲ http://agent:8090 (link), RUNPOD_WEBHOOK_*
 *                   worker (ferry runtime or any RunPod-SDK image), unpacks /ferry/artifact.tar.gz
 *   lb:     ALB :80 ──▶ host ephemeral port ──▶ agent :8000 (API key, /ping) ──▶ http://worker:8001 (link)
 *
 * The artifact reaches the worker through the init container rather than a presigned
 * FERRY_ARTIFACT_URL: a URL in the task definition would expire while ECS keeps starting tasks from
 * it; the task role reads the one artifact key instead (worker-image/agent/artifact.ts).
 */
import { ArnFormat, Aws, Duration, Size, Stack, Validations } from 'aws-cdk-lib';
import * as ecr from 'aws-cdk-lib/aws-ecr';
import * as ecs from 'aws-cdk-lib/aws-ecs';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct } from 'constructs';
import { containerLogStreamPrefix, jobLogStreamPrefix } from '../../core/adapters/aws/cloudwatch-logs.js';
import type { Manifest, ManifestEndpoint } from '../../core/manifest.js';
import type { TaskContainer } from '../../core/ports.js';
import { placeholderWorkerId, workerProtocolEnv } from '../../worker-image/agent/protocol.js';
import {
  agentMemoryMiB,
  artifactInitMemoryMiB,
  type Placement,
  workerMemoryReservationMiB,
  workerSharedMemoryMiB,
} from '../gpu.js';
import { callKeySecret, EndpointAgentAccess, EndpointWorkerToken, userSecrets } from '../isolation.js';
import { clusterName, jobLogGroupName, serviceName } from '../names.js';
import type { PlatformRefs } from '../platform-exports.js';
import { blobPrefix } from '../platform-stack.js';
import {
  agentEntryPoint,
  agentMount,
  albIdleTimeoutSec,
  artifactMount,
  drainMs,
  healthCheckGraceSecOf,
  initContainer,
  leaseTiming,
  linkNames,
  ports,
  stopTimeoutSec,
} from '../task-layout.js';

export interface WorkerImages {
  /** Worker image for GPU endpoints (CUDA base). */
  gpuWorker: string;
  /** Worker image for CPU endpoints. */
  cpuWorker: string;
  /** The agent (its entrypoint runs agent.mjs; FERRY_AGENT_MODE picks queue, lb or artifact). */
  agent: string;
}

export interface EndpointServiceProps {
  appName: string;
  envName: string;
  manifest: Manifest;
  endpoint: ManifestEndpoint;
  endpointId: string;
  placement: Placement;
  capacityProviderName: string;
  platform: PlatformRefs;
  /** The platform bucket (payloads), by name. */
  platformBucketName: string;
  /** Where the artifact is. */
  artifact: { bucketName: string; key: string };
  images: WorkerImages;
  /** Queue endpoints: the urgent and low-priority queues the agent receives from. */
  queues?: { queue: sqs.IQueue; lowQueue: sqs.IQueue };
  /** The call key the workers hold now (core/call-keys.ts); its value is in Secrets Manager. */
  callKeyId?: string;
  /** An earlier deploy created this service: the scaler owns its count (AppEnvironmentStackProps.servicesCreated). */
  serviceCreated: boolean;
}

/**
 * A container's output to CloudWatch Logs through the ECS `awslogs` driver: into the platform's
 * job-log group, where `ferry logs` reads it beside the endpoint's job lines
 * (core/adapters/aws/cloudwatch-logs.ts `streamOf`). The stream prefix is the endpoint's id, so the
 * driver names each stream `<endpointId>/<container name>/<task id>` ("If you specify a prefix with
 * this option, then the log stream takes the following format: prefix-name/container-name/ecs-task-id",
 * https://docs.aws.amazon.com/cdk/api/v2/docs/aws-cdk-lib.aws_ecs.AwsLogDriverProps.html, after
 * https://docs.aws.amazon.com/AmazonECS/latest/developerguide/using_awslogs.html), under the
 * endpoint's own prefix. The driver writes with the task's execution role, which may write only
 * those streams (`allowContainerLogs`).
 *
 * Not CDK's `LogDrivers.awsLogs`: it grants the execution role CreateLogStream and PutLogEvents on
 * the whole log group (`arn:…:log-group:<name>:*`), every endpoint's streams of it.
 *
 * Never blocking the container: in blocking mode a slow CloudWatch stalls the container's writes to
 * stdout, and the agent's pings and lease renewals with them; the mode otherwise follows the
 * account's defaultLogDriverMode setting
 * (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/ecs-account-settings.html). Lines
 * past a full 25 MiB buffer are dropped (metric lines included, core/metrics.ts); job logs do not
 * depend on them (they go through job-log).
 */
class ContainerLogs extends ecs.LogDriver {
  constructor(private readonly endpointId: string) {
    super();
  }

  bind(scope: Construct, _container: ecs.ContainerDefinition): ecs.LogDriverConfig {
    return {
      logDriver: 'awslogs',
      options: {
        'awslogs-group': jobLogGroupName,
        'awslogs-stream-prefix': containerLogStreamPrefix(this.endpointId),
        'awslogs-region': Stack.of(scope).region,
        mode: 'non-blocking',
        'max-buffer-size': `${Size.mebibytes(25).toBytes()}b`,
      },
    };
  }
}

export class EndpointService extends Construct {
  readonly service: ecs.Ec2Service;
  readonly taskDefinition: ecs.Ec2TaskDefinition;
  readonly taskRole: iam.Role;
  /** The agent's scoped role (infra/isolation.ts). */
  readonly agentRole: iam.Role;

  constructor(
    scope: Construct,
    id: string,
    private readonly props: EndpointServiceProps,
  ) {
    super(scope, id);
    const { endpoint, endpointId, placement } = props;
    const { resources } = endpoint;

    const taskRole = new iam.Role(this, 'TaskRole', {
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
            resource: props.artifact.bucketName,
            resourceName: props.artifact.key,
          }),
        ],
      }),
    );
    const taskDefinition = new ecs.Ec2TaskDefinition(this, 'Task', {
      networkMode: ecs.NetworkMode.BRIDGE,
      taskRole,
    });
    // Fresh, task-scoped directories (ECS-managed bind mounts, deleted with the task).
    taskDefinition.addVolume({ name: artifactMount.volume });
    taskDefinition.addVolume({ name: agentMount.volume });

    const { agentEnv, workerEnv, agentSecrets, workerSecrets, initSecrets, agentRole } =
      this.environments(taskRole);
    this.agentRole = agentRole;

    // No raw sockets in any container. Docker's default capabilities include NET_RAW, and with it a
    // container on the host's bridge can forge ARP and read or alter other tasks' plain-HTTP traffic
    // on the same host: worker tokens, jobs, the ALB's requests to a load-balanced agent with the
    // callers' API keys ("When the add request parameter and the drop request parameter are both
    // empty, … the container capabilities are all of the default Docker capabilities",
    // https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-properties-ecs-taskdefinition-kernelcapabilities.html).
    // Pools are shared by every app of the platform, so a task's neighbours may be anyone's.
    // The worker's container also gets its /dev/shm here (workerSharedMemoryMiB).
    const linuxParameters = (id: string, sharedMemorySize?: number): ecs.LinuxParameters => {
      const linux = new ecs.LinuxParameters(this, id, sharedMemorySize ? { sharedMemorySize } : {});
      linux.dropCapabilities(ecs.Capability.NET_RAW);
      return linux;
    };
    const containerLogs = new ContainerLogs(endpointId);
    this.allowContainerLogs(taskDefinition);
    const agentImage = this.containerImage('AgentImage', props.images.agent);
    // Every worker base image ships Node and the agent bundle (worker-image/Dockerfile.*), so the
    // agent may run from the same image as the worker: only the entry point differs.
    const entryPoint = [...agentEntryPoint];
    const artifact = taskDefinition.addContainer(initContainer, {
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
        FERRY_ARTIFACT_BUCKET: props.artifact.bucketName,
        FERRY_ARTIFACT_KEY: props.artifact.key,
        FERRY_ARTIFACT_PATH: artifactMount.file,
        // The task's secret for the agent → worker hop, drawn here so both find it when they start.
        ...(endpoint.kind === 'lb' ? { FERRY_LB_SECRET_FILE: artifactMount.lbSecretFile } : {}),
        // Where the agent role's external id goes (task-layout.ts agentMount).
        FERRY_AGENT_EXTERNAL_ID_FILE: agentMount.externalIdFile,
      },
      // Nothing links to this container, and it runs no user code.
      secrets: initSecrets,
      linuxParameters: linuxParameters('ArtifactLinux'),
      logging: containerLogs,
    });
    artifact.addMountPoints(
      { sourceVolume: artifactMount.volume, containerPath: artifactMount.path, readOnly: false },
      { sourceVolume: agentMount.volume, containerPath: agentMount.path, readOnly: false },
    );
    const agent = taskDefinition.addContainer('agent' satisfies TaskContainer, {
      image: agentImage,
      entryPoint,
      essential: true,
      memoryReservationMiB: agentMemoryMiB,
      environment: agentEnv,
      secrets: agentSecrets,
      linuxParameters: linuxParameters('AgentLinux'),
      stopTimeout: Duration.seconds(stopTimeoutSec),
      logging: containerLogs,
      // hostPort 0: ECS picks a free host port and registers it with the target group.
      ...(endpoint.kind === 'lb' ? { portMappings: [{ containerPort: ports.lbPublic, hostPort: 0 }] } : {}),
    });
    agent.addMountPoints({ sourceVolume: agentMount.volume, containerPath: agentMount.path, readOnly: true });
    // An image endpoint's worker is the user's prebuilt RunPod-protocol image (docs/python.md, image
    // endpoints); the agent beside it is the same, and speaks to it through RUNPOD_WEBHOOK_*.
    const image =
      endpoint.image ?? (placement.kind === 'gpu' ? props.images.gpuWorker : props.images.cpuWorker);
    const worker = taskDefinition.addContainer('worker' satisfies TaskContainer, {
      image: this.containerImage('WorkerImage', image),
      // Not essential: its exit alone must not stop the task before the agent has seen it (a crash,
      // or a failed start counted on the endpoint: worker-image/agent/ecsWorker.ts). The agent, which
      // is essential, leaves once it has, and the task stops with it.
      essential: false,
      memoryReservationMiB: workerMemoryReservationMiB(placement.shape),
      ...(placement.kind === 'gpu' ? { gpuCount: resources.gpuCount } : {}),
      environment: workerEnv,
      secrets: workerSecrets,
      linuxParameters: linuxParameters('WorkerLinux', workerSharedMemoryMiB(placement.shape)),
      stopTimeout: Duration.seconds(stopTimeoutSec),
      logging: containerLogs,
    });
    worker.addMountPoints({
      sourceVolume: artifactMount.volume,
      containerPath: artifactMount.path,
      readOnly: true,
    });
    worker.addContainerDependencies({
      container: artifact,
      condition: ecs.ContainerDependencyCondition.SUCCESS,
    });
    // The agent too, in both kinds: a failed download must stop the task, and since the worker is not
    // essential, only an essential container that cannot start does (the agent would otherwise run on,
    // beside a worker that never starts, on a billed instance).
    agent.addContainerDependencies({
      container: artifact,
      condition: ecs.ContainerDependencyCondition.SUCCESS,
    });
    if (endpoint.kind === 'queue') {
      // The worker calls the agent: it links to it (so starts after it). START "validates that a
      // dependent container is started", not that it listens yet
      // (https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_ContainerDependency.html), so
      // the worker's first takes may be refused; its runtime retries those quietly
      // (worker-image/python/ferry/queue_runtime.py). HEALTHY would wait for a task-definition health
      // check on the agent, whose probes run every `interval` (5 s at least): a few seconds more on
      // every cold start, for a race the retry already covers.
      worker.addLink(agent, linkNames.agent);
      worker.addContainerDependencies({
        container: agent,
        condition: ecs.ContainerDependencyCondition.START,
      });
    } else {
      // The agent proxies to the worker: the link goes the other way. It reads the task's secret
      // for that hop from the init container's volume, once the init container has exited 0 (the
      // SUCCESS condition above: https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_ContainerDependency.html).
      agent.addLink(worker, linkNames.worker);
      agent.addMountPoints({
        sourceVolume: artifactMount.volume,
        containerPath: artifactMount.path,
        readOnly: true,
      });
    }
    this.acknowledgeTaskFindings(taskDefinition);

    const service = new ecs.Ec2Service(this, 'Service', {
      cluster: props.platform.cluster,
      serviceName: serviceName(endpointId),
      taskDefinition,
      // Zero at create; the scaler Lambda owns the count from then on, so a later template states
      // none (a stated count is sent on every update of the service: AppEnvironmentStackProps.servicesCreated).
      ...(props.serviceCreated ? {} : { desiredCount: 0 }),
      // Queue endpoints: old workers may stop before new ones start: queue jobs wait (or requeue when a
      // lease lapses), and no second GPU host is needed to roll. Load-balanced endpoints have nowhere
      // to keep a request: stopping every idle task first left the ALB answering 503 until the new
      // ones loaded their model and passed two health checks, on every deploy and every
      // `ferry secrets set`. So they start the new tasks first: "minimumHealthyPercent represents a
      // lower limit on the number of your service's tasks that must remain in the RUNNING state
      // during a deployment" (https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_DeploymentConfiguration.html),
      // which needs room for one more task per running one while it rolls.
      minHealthyPercent: endpoint.kind === 'lb' ? 100 : 0,
      maxHealthyPercent: endpoint.kind === 'lb' ? 200 : 100,
      // The strategy alone keeps tasks on the pool's hosts (its group launches the pool's type or, when
      // that type has no capacity, a fallback of the same GPU: infra/gpu.ts equivalentInstanceTypes).
      // No placement constraint: one on the instance type would leave tasks PENDING on a fallback
      // host, and AWS's cluster auto scaling recommends none but distinctInstance, so that scale-out
      // does not stop (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/cluster-auto-scaling.html).
      capacityProviderStrategies: [{ capacityProvider: props.capacityProviderName, weight: 1 }],
      circuitBreaker: { enable: true, rollback: false },
      propagateTags: ecs.PropagatedTagSource.SERVICE,
      ...(endpoint.kind === 'lb'
        ? {
            healthCheckGracePeriod: Duration.seconds(
              healthCheckGraceSecOf(endpoint.resources, placement.kind),
            ),
          }
        : {}),
    });
    this.allowTaskProtection(taskRole);
    this.service = service;
    this.taskDefinition = taskDefinition;
    this.taskRole = taskRole;
  }

  /**
   * The agent's and the worker's environment and ECS secrets, and the agent's scoped role
   * (infra/isolation.ts): the task role every container shares gets nothing of the platform.
   */
  private environments(taskRole: iam.Role): {
    agentEnv: Record<string, string>;
    workerEnv: Record<string, string>;
    agentSecrets: Record<string, ecs.Secret>;
    workerSecrets: Record<string, ecs.Secret>;
    /** The init container's: the agent role's external id, which it hands the agent in a file. */
    initSecrets: Record<string, ecs.Secret>;
    agentRole: iam.Role;
  } {
    const { props } = this;
    const { endpoint, endpointId, platform } = props;
    const { resources } = endpoint;
    const access = new EndpointAgentAccess(this, 'Agent', {
      appName: props.appName,
      envName: props.envName,
      endpointName: endpoint.name,
      endpointId,
      kind: endpoint.kind,
      taskRole,
      tables: {
        jobs: platform.jobsTable,
        chunks: platform.chunksTable,
        workers: platform.workersTable,
        control: platform.controlTable,
      },
      bucketName: props.platformBucketName,
      bucketFindingName: platform.bucketNameExport,
      ...(props.queues
        ? {
            queues: [props.queues.queue, props.queues.lowQueue],
            webhookQueueArn: platform.webhookQueue.queueArn,
          }
        : {}),
    });
    // The endpoint's `secrets` (names of ferry/<app>/<env>/<NAME> in Secrets Manager), read where the
    // manifest's resources carry them once the field is in resourcesSchema (issue 13).
    const secretNames = (resources as { secrets?: readonly string[] }).secrets ?? [];
    const workerUserSecrets = userSecrets(this, {
      appName: props.appName,
      envName: props.envName,
      endpointName: endpoint.name,
      names: secretNames,
      env: resources.env,
    });
    // The worker's key for calling the endpoints of its own app and environment (docs/python.md,
    // remote calls): the worker container only; the agent never calls the API. Read by the
    // execution role at task start, like the user's secrets (docs/security-aws.md, "Call keys").
    Object.assign(workerUserSecrets, callKeySecret(this, props));
    const common: Record<string, string> = {
      FERRY_APP: props.appName,
      FERRY_ENV: props.envName,
      FERRY_ENDPOINT: endpoint.name,
      FERRY_ENDPOINT_ID: endpointId,
      FERRY_ENDPOINT_KIND: endpoint.kind,
      FERRY_ARTIFACT_BUCKET: props.artifact.bucketName,
      FERRY_ARTIFACT_KEY: props.artifact.key,
      // A code-only change alters the task definition, so ECS rolls the service (docs/architecture.md#the-cli).
      FERRY_SOURCE_FINGERPRINT: props.manifest.sourceFingerprint,
      FERRY_MAX_CONCURRENCY: String(resources.maxConcurrency),
      FERRY_EXECUTION_TIMEOUT_MS: String(resources.executionTimeoutMs),
    };
    // ECS on EC2 does not set AWS_REGION in containers; the agent's SDK clients need it.
    const agentBase = {
      ...common,
      ...access.environment,
      AWS_REGION: Aws.REGION,
      FERRY_AGENT_EXTERNAL_ID_FILE: agentMount.externalIdFile,
    };
    // The worker's entrypoint unpacks this (worker-image/entrypoint.sh), then runs FERRY_MODULE.
    // Plus what the Python client needs to call other endpoints by name (docs/python.md, remote calls):
    // the platform's API and this endpoint's own name (a call to itself runs in place).
    const workerBase = {
      ...common,
      FERRY_ARTIFACT_PATH: artifactMount.file,
      FERRY_MODULE: endpoint.module,
      FERRY_API_URL: platform.apiRootUrl,
      FERRY_ENDPOINT_NAME: endpoint.name,
      ...(props.callKeyId ? { FERRY_CALL_KEY_ID: props.callKeyId } : {}),
    };

    if (props.queues) {
      const { queue, lowQueue } = props.queues;
      // Job output into the job-log group, in this endpoint's own streams only (`<endpointId>/…`).
      this.allowEndpointLogStreams(
        access.role,
        "Each task creates its own log stream under its endpoint's prefix; the grant stops there.",
      );
      const token = new EndpointWorkerToken(this, 'WorkerToken', {
        description: `Ferry ${props.appName}/${props.envName}/${endpoint.name}: worker token (agent and worker containers)`,
      });
      const agentEnv = {
        ...agentBase,
        FERRY_AGENT_MODE: 'queue',
        FERRY_JOBS_TABLE: platform.jobsTable.tableName,
        FERRY_CHUNKS_TABLE: platform.chunksTable.tableName,
        FERRY_WORKERS_TABLE: platform.workersTable.tableName,
        FERRY_CONTROL_TABLE: platform.controlTable.tableName,
        FERRY_BUCKET: props.platformBucketName,
        FERRY_BLOB_PREFIX: blobPrefix,
        FERRY_QUEUE_URL: queue.queueUrl,
        FERRY_QUEUE_URL_LOW: lowQueue.queueUrl,
        FERRY_WEBHOOK_QUEUE_URL: platform.webhookQueue.queueUrl,
        // Its own namespace: listening beyond loopback reaches only containers on the host's bridge.
        FERRY_AGENT_HOST: '0.0.0.0',
        FERRY_AGENT_PORT: String(ports.agent),
        FERRY_LEASE_SEC: String(leaseTiming.leaseSec),
        FERRY_DRAIN_MS: String(drainMs),
        FERRY_LOG_GROUP: jobLogGroupName,
        // Task scale-in protection stays on until the worker has been idle this long (agent.ts).
        FERRY_IDLE_TIMEOUT_SEC: String(resources.idleTimeoutSec),
        // A worker with no contact this long (a hung model load) is killed as a failed start
        // (agent.ts); only when the endpoint asks: no default fits every model download.
        ...(resources.healthCheckGraceSec
          ? { FERRY_HEALTH_CHECK_GRACE_SEC: String(resources.healthCheckGraceSec) }
          : {}),
      };
      // User env first: nothing a user sets can redirect the worker away from its agent. The
      // protocol env is the agent's own `workerEnv()` shape; the worker id is a placeholder the agent
      // replaces with its runtime id on every request.
      // The token itself is an ECS secret (token.workerSecrets), so it leaves the environment.
      const { RUNPOD_AI_API_KEY: _token, ...protocolEnv } = workerProtocolEnv({
        // Bridge mode: the worker reaches the agent through the container link, by name.
        agentUrl: `http://${linkNames.agent}:${ports.agent}`,
        endpointId,
        workerId: placeholderWorkerId(endpointId),
        workerToken: '',
      });
      const workerEnv = {
        ...resources.env,
        ...workerBase,
        ...protocolEnv,
        // ECS stops a task's containers in the reverse order of their dependencies, so the worker
        // (which depends on the agent) gets SIGTERM first and the agent only once it has exited
        // (https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_ContainerDependency.html).
        // The ferry runtime then finishes its running jobs for this long (its default, 25 s, is for
        // ECS's default stopTimeout): the drain period, under the container's stopTimeout.
        FERRY_GRACE_MS: String(drainMs),
        // An image endpoint's image runs its own handler: there is no target of ours to name.
        ...(endpoint.target ? { FERRY_TARGET: endpoint.target.name } : {}),
      };
      return {
        agentEnv,
        workerEnv,
        agentRole: access.role,
        // The worker holds this token itself (RUNPOD_AI_API_KEY): its link to the agent, which
        // hands it the agent's variables, shows it nothing new.
        agentSecrets: token.agentSecrets,
        workerSecrets: { ...workerUserSecrets, ...token.workerSecrets },
        initSecrets: access.initSecrets,
      };
    }
    // With its role (infra/isolation.ts): KEY#<hash> items of the control table, and its own worker
    // record (requests in flight for the scaler, worker-image/agent/lb.ts).
    const agentEnv = {
      ...agentBase,
      FERRY_AGENT_MODE: 'lb',
      FERRY_CONTROL_TABLE: platform.controlTable.tableName,
      FERRY_WORKERS_TABLE: platform.workersTable.tableName,
      FERRY_PORT: String(ports.lbWorker),
      FERRY_WORKER_HOST: linkNames.worker,
      FERRY_LB_SECRET_FILE: artifactMount.lbSecretFile,
      FERRY_AGENT_HOST: '0.0.0.0',
      FERRY_AGENT_PORT: String(ports.lbPublic),
      // Task scale-in protection while requests are in flight, and this long after (lb.ts).
      FERRY_IDLE_TIMEOUT_SEC: String(resources.idleTimeoutSec),
      // Idle connections outlive the ALB's (task-layout.ts albIdleTimeoutSec).
      FERRY_LB_IDLE_TIMEOUT_SEC: String(albIdleTimeoutSec(resources)),
      // SIGTERM lets requests in flight finish within the container's stopTimeout, as a queue drain does.
      FERRY_DRAIN_MS: String(drainMs),
      // The service's health check grace: a worker that has not answered /ping by then is killed as a
      // failed start and the agent leaves (lb.ts), before the ALB's failed checks would stop the task.
      FERRY_HEALTH_CHECK_GRACE_SEC: String(healthCheckGraceSecOf(endpoint.resources, props.placement.kind)),
    };
    // The worker listens in its own namespace and publishes no host port: the ALB reaches only the
    // agent's published port. Other tasks on the host's Docker bridge can reach the worker's port,
    // so the ferry runtime answers only requests with the task's secret, which the agent sends.
    const workerEnv = {
      ...resources.env,
      ...workerBase,
      FERRY_MODE: 'lb',
      FERRY_VARIABLE: endpoint.variable!,
      FERRY_HOST: '0.0.0.0',
      FERRY_PORT: String(ports.lbWorker),
      FERRY_LB_SECRET_FILE: artifactMount.lbSecretFile,
    };
    return {
      agentEnv,
      workerEnv,
      agentRole: access.role,
      agentSecrets: {},
      workerSecrets: workerUserSecrets,
      initSecrets: access.initSecrets,
    };
  }

  /**
   * The awslogs driver writes with the task's execution role ("The task execution role grants the
   * Amazon ECS container and Fargate agents permission to make AWS API calls on your behalf", among
   * them to send container logs to CloudWatch Logs,
   * https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task_execution_IAM_role.html): it may
   * create and write this endpoint's streams of the job-log group and no others. IAM authorizes both
   * calls on the stream's ARN, `…:log-group:<group>:log-stream:<stream>` (as AccessDenied answers
   * name it: "not authorized to perform: logs:CreateLogStream on resource:
   * arn:aws:logs:…:log-group:<group>:log-stream:<prefix>/<container>/<task id>"); the agent role's
   * grant of the same streams rests on that too.
   */
  private allowContainerLogs(taskDefinition: ecs.TaskDefinition): void {
    // `<endpointId>/*`: the driver's `<endpointId>/<container>/<task id>` (and the agent's own streams).
    this.allowEndpointLogStreams(
      taskDefinition.obtainExecutionRole(),
      "ECS names each task's streams with its task id, known only at run time; the grant stops at this endpoint's prefix.",
    );
  }

  /**
   * CreateLogStream and PutLogEvents on this endpoint's streams of the job-log group, `<endpointId>/*`,
   * and no others: the one grant the agent role and the execution role (the awslogs driver) share.
   */
  private allowEndpointLogStreams(role: iam.IRole, why: string): void {
    const streams = `${jobLogGroupName}:log-stream:${jobLogStreamPrefix(this.props.endpointId)}*`;
    role.addToPrincipalPolicy(
      new iam.PolicyStatement({
        actions: ['logs:CreateLogStream', 'logs:PutLogEvents'],
        resources: [
          Stack.of(this).formatArn({
            service: 'logs',
            resource: 'log-group',
            resourceName: streams,
            arnFormat: ArnFormat.COLON_RESOURCE_NAME,
          }),
        ],
      }),
    );
    Validations.of(role).acknowledge({
      id: `AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:logs:<AWS::Region>:<AWS::AccountId>:log-group:${streams}]`,
      reason: why,
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

  private acknowledgeTaskFindings(taskDefinition: ecs.Ec2TaskDefinition): void {
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

  /**
   * ECR URIs get pull permissions on their repository (ecrRepositoryOf); anything else is pulled
   * as public. The task pulls the URI exactly as given: ContainerImage.fromEcrRepository would rebuild
   * it from the ARN as `dkr.ecr.<region>.<URL suffix>`, turning a FIPS or dual-stack host into the
   * standard one.
   */
  private containerImage(id: string, uri: string): ecs.ContainerImage {
    const repository = ecrRepositoryOf(uri);
    if (repository === undefined) return ecs.ContainerImage.fromRegistry(uri);
    return new EcrUriImage(uri, ecr.Repository.fromRepositoryAttributes(this, id, repository));
  }
}

/**
 * The image `uri` itself, with ECR pull rights on `repository` for the task's execution role (what
 * ECS pulls with), as ContainerImage.fromEcrRepository grants them.
 */
class EcrUriImage extends ecs.ContainerImage {
  constructor(
    private readonly uri: string,
    private readonly repository: ecr.IRepository,
  ) {
    super();
  }

  bind(_scope: Construct, container: ecs.ContainerDefinition): ecs.ContainerImageConfig {
    this.repository.grantPull(container.taskDefinition.obtainExecutionRole());
    return { imageName: this.uri };
  }
}

/**
 * An ECR image registry host: `<account>.dkr.ecr.<region>.amazonaws.com` (`.com.cn` in China), its
 * FIPS form `dkr.ecr-fips.<region>.amazonaws.com`, and the dual-stack `dkr-ecr.<region>.on.aws` and
 * `dkr-ecr-fips.<region>.on.aws` (the OCI and Docker client endpoints of
 * https://docs.aws.amazon.com/general/latest/gr/ecr.html; "OCI and Docker client requests:
 * <registry-id>.dkr-ecr.<aws-region>.on.aws",
 * https://docs.aws.amazon.com/AmazonECR/latest/userguide/ecr-requests.html).
 */
const ecrImageUri =
  /^(\d{12})\.(?:dkr\.ecr(?:-fips)?\.([a-z0-9-]+)\.amazonaws\.com(?:\.cn)?|dkr-ecr(?:-fips)?\.([a-z0-9-]+)\.on\.aws)\/([^:@]+)(?:[:@].+)?$/;

/** The ECR repository `uri` names, or undefined when it is not an ECR image URI. */
export function ecrRepositoryOf(uri: string): { repositoryName: string; repositoryArn: string } | undefined {
  const match = ecrImageUri.exec(uri);
  if (!match) return undefined;
  const [, account, region, dualStackRegion, repositoryName] = match;
  const where = (region ?? dualStackRegion)!;
  return {
    repositoryName: repositoryName!,
    repositoryArn: `arn:${partitionOfRegion(where)}:ecr:${where}:${account}:repository/${repositoryName}`,
  };
}

/**
 * The ARN partition of a region: "aws - AWS Regions; aws-cn - China Regions; aws-us-gov - AWS
 * GovCloud (US) Regions" (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference-arns.html),
 * whose region codes start `cn-` and `us-gov-`.
 */
export function partitionOfRegion(region: string): 'aws' | 'aws-cn' | 'aws-us-gov' {
  if (region.startsWith('cn-')) return 'aws-cn';
  if (region.startsWith('us-gov-')) return 'aws-us-gov';
  return 'aws';
}
