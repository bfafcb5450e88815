/**
 * One app in one environment: per endpoint of the build manifest, the ECS service that runs its
 * workers; for queue endpoints the two SQS queues the v2 API feeds (urgent `ferry-<id>` and
 * low-priority `ferry-<id>-low`, core/adapters/aws/sqs.ts), each with its DLQ; for load-balanced
 * endpoints an internet-facing ALB. Shared resources come from the platform through its fixed
 * CloudFormation exports (`PlatformImports`, platform-exports.ts), never by reference to the platform
 * stack's objects: what this stack uses must not shape the template of a platform other apps share.
 *
 * Each concern is its own construct (infra/constructs/): the endpoint's queues, its ECS service
 * (task layout and grants), and the load balancer. Worker counts are set by the platform's scaler
 * Lambda (functions/scaler.ts, docs/scaling.md), not by anything in this stack. Names every module agrees on live
 * in infra/names.ts, task ports and timings in infra/task-layout.ts.
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
import { CfnOutput, Stack, type StackProps } from 'aws-cdk-lib';
import type * as ecs from 'aws-cdk-lib/aws-ecs';
import type * as elbv2 from 'aws-cdk-lib/aws-elasticloadbalancingv2';
import type * as iam from 'aws-cdk-lib/aws-iam';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import type { Construct } from 'constructs';
import type { DnsRecord } from '../core/deployment.js';
import { workersInOrder } from '../core/endpoint-spec.js';
import { FerryError } from '../core/errors.js';
import type { Manifest, ManifestEndpoint } from '../core/manifest.js';
import { EnvironmentDashboard, regionalDashboardName } from './constructs/dashboard.js';
import type { LbHttpsOptions } from './constructs/https-front.js';
import { EndpointLoadBalancer } from './constructs/load-balancer.js';
import { EndpointQueues } from './constructs/queues.js';
import { EndpointService, type WorkerImages } from './constructs/service.js';
import { type Placement, placementFor, poolFitOf } from './gpu.js';
import { PlatformImports, type PlatformImportsProps, type PlatformRefs } from './platform-exports.js';
import { checkTemplateResources } from './template-limits.js';

export type { WorkerImages } from './constructs/service.js';
export { appStackName, endpointIdFor } from './names.js';

import { endpointIdFor } from './names.js';

export { agentEntryPoint, artifactMount, leaseTiming, ports } from './task-layout.js';

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
  /**
   * Ids of the endpoints whose ECS service an earlier deploy created. Their service leaves
   * DesiredCount out: CloudFormation sends a stated count on every update of the service, which set
   * the count the scaler had chosen back to 0 on each deploy that changed the service; left out, it
   * is "omitted from the operation" for an existing service
   * (https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-ecs-service.html#cfn-ecs-service-desiredcount).
   * A new service must state 0, since ECS starts one task by default.
   */
  servicesCreated?: readonly string[];
  /**
   * The id of the call key (core/call-keys.ts) each endpoint's workers get, by endpoint name. It is
   * in the worker's environment so that a new key (a new value in the same secret) rolls the tasks.
   */
  callKeyIds?: Readonly<Record<string, string>>;
  /** Load-balanced endpoints: a domain for an ACM certificate; without one, a CloudFront front. */
  https?: LbHttpsOptions;
  /**
   * Without a domain: the id of CloudFront's origin-facing prefix list in the deploy's region, which
   * the ALBs admit port 80 from (constructs/https-front.ts); unset, any IPv4 (header-checked).
   */
  cloudFrontPrefixListId?: string;
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
  /** Load-balanced, a domain without a hosted zone: the record the user creates (https-front.ts). */
  dnsRecord?: DnsRecord;
}

export interface DeployedEndpoint {
  name: string;
  id: string;
  kind: 'queue' | 'lb';
  placement: Placement;
  service: ecs.Ec2Service;
  taskDefinition: ecs.Ec2TaskDefinition;
  taskRole: iam.Role;
  /** The agent's scoped role (infra/isolation.ts), assumed with an external id. */
  agentRole: iam.Role;
  /** Urgent jobs; the only queue the scaler reads (functions/scaler.ts). */
  queue?: sqs.Queue;
  deadLetterQueue?: sqs.Queue;
  /** policy.lowPriority jobs: drained by running workers, never a reason to start one. */
  lowQueue?: sqs.Queue;
  lowDeadLetterQueue?: sqs.Queue;
  loadBalancer?: elbv2.ApplicationLoadBalancer;
  /** Load-balanced: the https address clients use (infra/constructs/https-front.ts). */
  url?: string;
  /** Load-balanced, a domain without a hosted zone: the DNS record `url` waits for. */
  dnsRecord?: DnsRecord;
}

export class AppEnvironmentStack extends Stack {
  readonly endpoints: readonly DeployedEndpoint[];
  /** The platform, imported (every value a `Fn::ImportValue` of a name in platform-exports.ts). */
  readonly platform: PlatformRefs;
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
    this.endpoints = props.manifest.endpoints.map((endpoint) => this.addEndpoint(endpoint));
    new EnvironmentDashboard(this, 'Observability', {
      dashboardName: regionalDashboardName(id.replace(/[^A-Za-z0-9_-]/g, '-')),
      endpoints: this.endpoints.map((e) => ({
        name: e.name,
        id: e.id,
        queue: e.queue,
        gpu: e.placement.kind === 'gpu',
      })),
    });
    new CfnOutput(this, 'Endpoints', {
      description: 'JSON list of {name, id, kind, url?, queueUrl?, lowQueueUrl?, dnsRecord?} for the CLI',
      value: Stack.of(this).toJsonString(
        this.endpoints.map(
          (e): EndpointOutput => ({
            name: e.name,
            id: e.id,
            kind: e.kind,
            ...(e.url ? { url: e.url } : {}),
            ...(e.queue ? { queueUrl: e.queue.queueUrl } : {}),
            ...(e.lowQueue ? { lowQueueUrl: e.lowQueue.queueUrl } : {}),
            ...(e.dnsRecord ? { dnsRecord: e.dnsRecord } : {}),
          }),
        ),
      ),
    });
    checkTemplateResources(this, {
      app: props.appName,
      env: props.envName,
      endpoints: this.endpoints.length,
    });
  }

  private addEndpoint(endpoint: ManifestEndpoint): DeployedEndpoint {
    const { props } = this;
    const { resources } = endpoint;
    if (!workersInOrder(resources.workersMin, resources.workersMax)) {
      throw new FerryError(
        'bad_request',
        `Endpoint "${endpoint.name}": workers min ${resources.workersMin} exceeds max ${resources.workersMax}`,
      );
    }
    const fit = poolFitOf(endpoint);
    if (fit.error) throw fit.error;
    // An image endpoint's worker is its image: it names no function of ours (docs/python.md).
    if (endpoint.kind === 'queue' && !endpoint.target && !endpoint.image) {
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
    const prefix = `Ep-${endpoint.name}`;

    const queues =
      endpoint.kind === 'queue'
        ? new EndpointQueues(this, `${prefix}-Queues`, { endpointId, alarmTopic: this.platform.alarmTopic })
        : undefined;
    const { service, taskDefinition, taskRole, agentRole } = new EndpointService(this, prefix, {
      appName: props.appName,
      envName: props.envName,
      manifest: props.manifest,
      endpoint,
      endpointId,
      placement,
      capacityProviderName: this.platform.capacityProviderNameFor(placement.shape.instanceType),
      platform: this.platform,
      platformBucketName: this.platformBucketName,
      artifact: { bucketName: this.artifactBucketName, key: props.artifact.key },
      images: props.images,
      ...(queues ? { queues } : {}),
      ...(props.callKeyIds?.[endpoint.name] ? { callKeyId: props.callKeyIds[endpoint.name] } : {}),
      serviceCreated: props.servicesCreated?.includes(endpointId) ?? false,
    });
    const deployed: DeployedEndpoint = {
      name: endpoint.name,
      id: endpointId,
      kind: endpoint.kind,
      placement,
      service,
      taskDefinition,
      taskRole,
      agentRole,
    };
    if (queues) {
      return {
        ...deployed,
        queue: queues.queue,
        deadLetterQueue: queues.deadLetterQueue,
        lowQueue: queues.lowQueue,
        lowDeadLetterQueue: queues.lowDeadLetterQueue,
      };
    }
    const { loadBalancer, url, dnsRecord } = new EndpointLoadBalancer(this, `${prefix}-LoadBalancer`, {
      endpoint,
      endpointId,
      platform: this.platform,
      service,
      https: props.https,
      cloudFrontPrefixListId: props.cloudFrontPrefixListId,
    });
    return { ...deployed, loadBalancer, url, ...(dnsRecord ? { dnsRecord } : {}) };
  }
}
