/**
 * The agent container's configuration, from its environment (the CDK app stack sets it). Parsed with
 * zod so a missing or malformed variable is one clear line naming it, never a stack trace.
 *
 * Not `.strict()`: the task hands the agent the same FERRY_* variables it hands the worker (app, env,
 * artifact, fingerprint…) and the OS adds its own; only the variables below are read.
 */
import { z } from 'zod';

const text = z.string().trim().min(1, 'must not be empty');
const url = z.url('must be a URL');
const ms = z.coerce.number().int('must be an integer').min(0, 'must be >= 0');

export const agentEnvSchema = z.object({
  FERRY_ENDPOINT_ID: text,
  FERRY_JOBS_TABLE: text,
  FERRY_CHUNKS_TABLE: text,
  FERRY_WORKERS_TABLE: text,
  /** Accepted for symmetry with the Lambdas; the agent does not read the control plane. */
  FERRY_CONTROL_TABLE: text.optional(),
  FERRY_BUCKET: text,
  /** Key prefix of job payloads in the bucket; must match the Lambda handlers'. */
  FERRY_BLOB_PREFIX: z.string().default(''),
  FERRY_QUEUE_URL: url,
  /** The endpoint's low-priority queue; without one, low-priority jobs share the urgent queue. */
  FERRY_QUEUE_URL_LOW: url.optional(),
  /** Generated when absent (then only a worker started with agent.workerEnv() knows it). */
  FERRY_WORKER_TOKEN: z.string().min(16, 'must be at least 16 characters').optional(),
  FERRY_AGENT_HOST: text.default('127.0.0.1'),
  FERRY_AGENT_PORT: z.coerce
    .number()
    .int('must be an integer')
    .min(1, 'must be a port (1-65535)')
    .max(65_535, 'must be a port (1-65535)')
    .default(8080),
  /** ECS stopTimeout is at most 120 s; leave the agent time to requeue and exit before SIGKILL. */
  FERRY_DRAIN_MS: ms.max(120_000, 'must be at most 120000 (ECS stopTimeout max)').default(110_000),
  FERRY_LEASE_SEC: z.coerce.number().int('must be an integer').min(10, 'must be >= 10').optional(),
  FERRY_STOP_GRACE_MS: ms.optional(),
  AWS_REGION: text,
  /** Injected by the ECS agent into every container; absent outside ECS (no task protection). */
  ECS_AGENT_URI: url.optional(),
});

export type AgentEnv = z.infer<typeof agentEnvSchema>;

/** The parsed environment, or the list of problems, one per variable. */
export function parseAgentEnv(
  env: Record<string, string | undefined>,
): { ok: true; env: AgentEnv } | { ok: false; problems: string[] } {
  // An empty variable counts as unset, as shells and task definitions tend to produce them.
  const given = Object.fromEntries(
    Object.entries(env).filter(([, value]) => value !== undefined && value !== ''),
  );
  const parsed = agentEnvSchema.safeParse(given);
  if (parsed.success) return { ok: true, env: parsed.data };
  const problems = parsed.error.issues.map((issue) => {
    const name = issue.path.join('.') || '(environment)';
    return given[name] === undefined ? `${name} is required` : `${name} ${issue.message}`;
  });
  return { ok: false, problems: [...new Set(problems)] };
}
