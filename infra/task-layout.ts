/**
 * How an endpoint's ECS task is laid out: ports, the artifact mount, the agent's entry point, lease
 * and drain timings. Plain values (no CDK), shared by the constructs that build the task and by the
 * tests that read it back.
 */
import { limits } from '../core/limits.js';
import type { TaskContainer } from '../core/ports.js';

/**
 * The init container of every endpoint task: the artifact download, which the agent and the worker
 * wait for (SUCCESS). The platform's rule for its failures and the scaler match it by this name in
 * ECS's task events (functions/scaler.ts taskStartFailureOf).
 */
export const initContainer: TaskContainer = 'artifact';

/**
 * How the agent starts (worker-image/agent/bundle.ts writes agent.mjs), as the agent image's own
 * ENTRYPOINT: a task definition's entryPoint replaces the image's, so tini must be named here too.
 * As PID 1 it forwards SIGTERM and reaps children; a process that is PID 1 itself ignores any signal
 * it has no handler for (https://docs.docker.com/reference/cli/docker/container/run/#init), as the
 * artifact download has none. Every Ferry image ships /usr/bin/tini (worker-image/Dockerfile.*).
 */
export const agentEntryPoint = ['/usr/bin/tini', '--', 'node', '/opt/ferry/agent/agent.mjs'] as const;

/** The agent's lease and the queues' redrive, as the agent and engine use them. */
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

/**
 * Where the init container puts the artifact and the worker's entrypoint reads it; for load-balanced
 * endpoints also the task's secret for the agent → worker hop (core/auth.ts lbSecretHeader).
 */
export const artifactMount = {
  volume: 'ferry-artifact',
  path: '/ferry',
  file: '/ferry/artifact.tar.gz',
  lbSecretFile: '/ferry/lb-secret',
};

/**
 * The agent's own task volume: the init container writes the agent role's external id there, and
 * only the agent mounts it besides. Not the artifact volume, which the worker mounts; not an ECS
 * secret of the agent container either: a queue task's worker links to the agent, and a Docker
 * link hands the linking container every variable of the linked one ("all environment variables
 * originating from Docker within a container are made available to any container that links to
 * it", https://docs.docker.com/engine/network/links/), ECS's secrets included.
 */
export const agentMount = {
  volume: 'ferry-agent',
  path: '/ferry-agent',
  externalIdFile: '/ferry-agent/external-id',
};

/**
 * How long ECS waits after SIGTERM before SIGKILL; the agent's drain (FERRY_DRAIN_MS) must end
 * before it. 120 s is the ceiling AWS documents for Fargate; it documents none for EC2 tasks, and a
 * job cut here is requeued, so a longer drain would only delay a stopping task (scale-in waits for
 * task protection instead, docs/scaling.md).
 */
export const stopTimeoutSec = 120;
export const drainMs = 110_000;

/**
 * How long ECS ignores failing load-balancer health checks after a load-balanced task starts, unless
 * the endpoint sets `health_check_grace`: a GPU worker pulls a multi-GB image and loads its model
 * before it answers /ping, which takes minutes; ECS would otherwise replace it over and over
 * (healthCheckGracePeriodSeconds, https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_CreateService.html).
 */
export const defaultHealthCheckGraceSec = { gpu: 900, cpu: 180 } as const;

/**
 * The endpoint's health_check_grace, or the default for its kind of host: what ECS gives a
 * load-balanced task (infra/constructs/service.ts) and what the scaler lets a started task take
 * before its worker reports (functions/scaler.ts bootAllowanceOf).
 */
export function healthCheckGraceSecOf(
  resources: { healthCheckGraceSec?: number | undefined },
  hostKind: keyof typeof defaultHealthCheckGraceSec,
): number {
  return resources.healthCheckGraceSec || defaultHealthCheckGraceSec[hostKind];
}

/**
 * A load-balanced endpoint's ALB idle timeout: its execution timeout (0: the platform's default), at
 * least the ALB's 60 s and at most its 4000 s, so a long handler call is not cut
 * (https://docs.aws.amazon.com/elasticloadbalancing/latest/application/edit-load-balancer-attributes.html).
 * The agent keeps idle connections longer than this (lb.ts): "configure the idle timeout of your
 * application to be larger than the idle timeout configured for the load balancer", else the ALB may
 * reuse a connection the target is closing and answer 502.
 */
export function albIdleTimeoutSec(resources: { executionTimeoutMs: number }): number {
  const executionSec = Math.ceil((resources.executionTimeoutMs || limits.executionTimeoutDefaultMs) / 1000);
  return Math.min(4000, Math.max(60, executionSec));
}

/**
 * Bridge networking gives every container its own network namespace; a container port published with
 * host port 0 gets a free port of the instance's ephemeral range (the kernel's ip_local_port_range,
 * 32768-60999 on Amazon Linux 2023, or 49153-65535), so tasks never fight over a host port
 * (https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_PortMapping.html). The hosts'
 * security group opens this range to a load balancer's group only.
 */
export const ephemeralPorts = { from: 32768, to: 65535 } as const;

/** The link names containers use for each other in bridge mode. */
export const linkNames = { agent: 'agent', worker: 'worker' } as const;
