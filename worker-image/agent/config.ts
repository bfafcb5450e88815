/**
 * The agent container's configuration, from its environment (the CDK app stack sets it). Parsed with
 * zod so a missing or malformed variable is one clear line naming it, never a stack trace.
 *
 * Not `.strict()`: the task hands the agent the same FERRY_* variables it hands the worker (app, env,
 * artifact, fingerprint…) and the OS adds its own; only the variables below are read.
 *
 * `FERRY_AGENT_MODE` picks one of three shapes:
 *   queue     (default) the worker-protocol sidecar of a queue endpoint: SQS + DynamoDB jobs
 *   lb        the front of a load-balanced endpoint: checks API keys, proxies to the worker
 *   artifact  the task's init container: downloads the app artifact into the shared volume, exits 0
 */
import { z } from 'zod';
import { drainMs, stopTimeoutSec } from '../../infra/task-layout.js';

const text = z.string().trim().min(1, 'must not be empty');
const url = z.url('must be a URL');
const ms = z.coerce.number().int('must be an integer').min(0, 'must be >= 0');
const port = z.coerce
  .number()
  .int('must be an integer')
  .min(1, 'must be a port (1-65535)')
  .max(65_535, 'must be a port (1-65535)');

export const agentModes = ['queue', 'lb', 'artifact'] as const;
export type AgentMode = (typeof agentModes)[number];

const base = {
  FERRY_ENDPOINT_ID: text,
  /** The endpoint's name (the stack sets it); the supervisor's log lines say it rather than the id. */
  FERRY_ENDPOINT: text.optional(),
  AWS_REGION: text,
  /** The endpoint's scoped agent role and its external id (credentials.ts); absent: default chain. */
  FERRY_AGENT_ROLE_ARN: text.optional(),
  /**
   * On ECS only the init container gets the id (an ECS secret); it writes it to this file of the
   * agent's own volume, which the agents read (infra/task-layout.ts agentMount).
   */
  FERRY_AGENT_EXTERNAL_ID: text.optional(),
  FERRY_AGENT_EXTERNAL_ID_FILE: text.optional(),
};

/** Where the app artifact is and where it goes (artifact mode; the stack's init container). */
export const artifactEnvSchema = z.object({
  ...base,
  FERRY_AGENT_MODE: z.literal('artifact'),
  FERRY_ARTIFACT_BUCKET: text,
  FERRY_ARTIFACT_KEY: text,
  /** The file the worker's entrypoint reads (a shared task volume). */
  FERRY_ARTIFACT_PATH: text,
  /**
   * How long the download may receive nothing before its connection is cut and the download resumed
   * (artifact.ts artifactStallMs, 30000). The stacks leave it unset; a knob for tests and odd links.
   */
  FERRY_ARTIFACT_STALL_MS: z.coerce.number().int('must be an integer').min(1, 'must be >= 1').optional(),
  /**
   * Load-balanced endpoints: where to write the task's secret for the agent → worker hop (the same
   * shared volume; the agent and the worker read it, core/auth.ts lbSecretHeader).
   */
  FERRY_LB_SECRET_FILE: text.optional(),
});

/** Task scale-in protection (protection.ts), the same for both agents. */
const taskProtectionEnv = {
  /**
   * The endpoint's idle_timeout: task scale-in protection stays on until the task has been idle
   * this long, so ECS never stops a worker the scaling policy still keeps (docs/scaling.md).
   */
  FERRY_IDLE_TIMEOUT_SEC: z.coerce.number().int('must be an integer').min(1, 'must be >= 1').optional(),
  /** Injected by the ECS agent into every container; absent outside ECS (no task protection). */
  ECS_AGENT_URI: url.optional(),
};

/** Where both agent modes see the worker container's exit (ecsWorker.ts), and how long it may start. */
const workerContainerEnv = {
  /** Injected by ECS into every container: the task metadata endpoint v4. */
  ECS_CONTAINER_METADATA_URI_V4: url.optional(),
  /** The worker container's name in the task definition. */
  FERRY_WORKER_CONTAINER: text.default('worker'),
  /**
   * The endpoint's health_check_grace: a worker with no contact this long after its container started
   * (ECS task metadata; a load-balanced one's first /ping answered, a queue one's first job-take or
   * ping) is killed as a failed start and the agent exits 1 (core/supervisor.ts). Always set for load-balanced endpoints
   * (the service's grace), for queue endpoints only when the endpoint sets it.
   */
  FERRY_HEALTH_CHECK_GRACE_SEC: z.coerce.number().int('must be an integer').min(1, 'must be >= 1').optional(),
};

export const queueAgentEnvSchema = z.object({
  ...base,
  FERRY_AGENT_MODE: z.literal('queue').default('queue'),
  FERRY_JOBS_TABLE: text,
  FERRY_CHUNKS_TABLE: text,
  FERRY_WORKERS_TABLE: text,
  /** Accepted for symmetry with the Lambdas; a queue agent does not read the control plane. */
  FERRY_CONTROL_TABLE: text.optional(),
  FERRY_BUCKET: text,
  /** Key prefix of job payloads in the bucket; must match the Lambda handlers'. */
  FERRY_BLOB_PREFIX: z.string().default(''),
  FERRY_QUEUE_URL: url,
  /** The endpoint's low-priority queue; without one, low-priority jobs share the urgent queue. */
  FERRY_QUEUE_URL_LOW: url.optional(),
  /**
   * The platform's webhook queue: the webhooks of the jobs this agent ends go there, and the webhook
   * function makes the attempts (core/adapters/aws/webhook-queue.ts). Without it the agent posts them
   * itself, retrying in memory.
   */
  FERRY_WEBHOOK_QUEUE_URL: url.optional(),
  /**
   * The endpoint's max_concurrency (the app stack sets it for both containers): the worker is handed
   * at most this many jobs at once (core/engine.ts take). Absent: no cap.
   */
  FERRY_MAX_CONCURRENCY: z.coerce.number().int('must be an integer').min(1, 'must be >= 1').optional(),
  /** Generated when absent (then only a worker started with agent.workerEnv() knows it). */
  FERRY_WORKER_TOKEN: z.string().min(16, 'must be at least 16 characters').optional(),
  /** The CloudWatch Logs group for job output (docs/observability.md); without it job-log is a 404. */
  FERRY_LOG_GROUP: text.optional(),
  FERRY_AGENT_HOST: text.default('127.0.0.1'),
  FERRY_AGENT_PORT: port.default(8080),
  /** ECS stopTimeout is at most 120 s; leave the agent time to requeue and exit before SIGKILL. */
  FERRY_DRAIN_MS: ms
    .max(stopTimeoutSec * 1000, 'must be at most 120000 (ECS stopTimeout max)')
    .default(drainMs),
  FERRY_LEASE_SEC: z.coerce.number().int('must be an integer').min(10, 'must be >= 10').optional(),
  FERRY_STOP_GRACE_MS: ms.optional(),
  ...taskProtectionEnv,
  ...workerContainerEnv,
});

export const lbAgentEnvSchema = z.object({
  ...base,
  FERRY_AGENT_MODE: z.literal('lb'),
  /** The endpoint's app and environment: keys scoped elsewhere answer 403. */
  FERRY_APP: text,
  FERRY_ENV: text,
  /** Where client API keys live (`KEY#<sha256>` items, core/adapters/aws/dynamo.ts). */
  FERRY_CONTROL_TABLE: text,
  /** The worker's own HTTP server (the worker's FERRY_PORT). */
  FERRY_PORT: port,
  /** Where that server is: loopback in a shared namespace, the linked `worker` container in bridge mode. */
  FERRY_WORKER_HOST: text.default('127.0.0.1'),
  /** The task's secret for the hop to the worker, written by the init container (artifact mode). */
  FERRY_LB_SECRET_FILE: text.optional(),
  /** The ALB reaches the agent on the host's address, so it listens beyond loopback. */
  FERRY_AGENT_HOST: text.default('0.0.0.0'),
  FERRY_AGENT_PORT: port.default(8080),
  /** Where the agent reports its requests in flight for the scaler (docs/scaling.md); optional. */
  FERRY_WORKERS_TABLE: text.optional(),
  /** How long a key lookup is remembered; a revoked key stops working after at most this long. */
  FERRY_KEY_CACHE_MS: ms.max(300_000, 'must be at most 300000').default(30_000),
  /** How long SIGTERM lets requests in flight finish (ALB deregistration is 30 s). */
  FERRY_DRAIN_MS: ms.max(120_000, 'must be at most 120000 (ECS stopTimeout max)').default(30_000),
  /** The ALB's idle timeout: idle connections are kept longer (infra/task-layout.ts albIdleTimeoutSec). */
  FERRY_LB_IDLE_TIMEOUT_SEC: z.coerce
    .number()
    .int('must be an integer')
    .min(1, 'must be >= 1')
    .max(4000, 'must be at most 4000 (the ALB maximum)')
    .optional(),
  ...taskProtectionEnv,
  ...workerContainerEnv,
});

export type QueueAgentEnv = z.infer<typeof queueAgentEnvSchema>;
export type LbAgentEnv = z.infer<typeof lbAgentEnvSchema>;
export type ArtifactEnv = z.infer<typeof artifactEnvSchema>;
export type AgentEnv = QueueAgentEnv | LbAgentEnv | ArtifactEnv;

export const agentEnvSchemas = {
  queue: queueAgentEnvSchema,
  lb: lbAgentEnvSchema,
  artifact: artifactEnvSchema,
} as const;

/** The variables a mode cannot start without (no default, not optional): the stack must set them. */
export function requiredAgentVariables(mode: AgentMode): string[] {
  const shape = agentEnvSchemas[mode].shape as Record<string, z.ZodType>;
  return Object.entries(shape)
    .filter(([, schema]) => !schema.safeParse(undefined).success)
    .map(([name]) => name);
}

/** The parsed environment, or the list of problems, one per variable. */
export function parseAgentEnv(
  env: Record<string, string | undefined>,
): { ok: true; env: AgentEnv } | { ok: false; problems: string[] } {
  // An empty variable counts as unset, as shells and task definitions tend to produce them.
  const given = Object.fromEntries(
    Object.entries(env).filter(([, value]) => value !== undefined && value !== ''),
  );
  const mode = given.FERRY_AGENT_MODE ?? 'queue';
  if (!(agentModes as readonly string[]).includes(mode)) {
    return {
      ok: false,
      problems: [`FERRY_AGENT_MODE must be one of ${agentModes.join(', ')}, got ${JSON.stringify(mode)}`],
    };
  }
  const parsed = agentEnvSchemas[mode as AgentMode].safeParse(given);
  if (parsed.success) return { ok: true, env: parsed.data };
  const problems = parsed.error.issues.map((issue) => {
    const name = issue.path.join('.') || '(environment)';
    return given[name] === undefined ? `${name} is required` : `${name} ${issue.message}`;
  });
  return { ok: false, problems: [...new Set(problems)] };
}
