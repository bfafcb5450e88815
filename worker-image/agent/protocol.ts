/**
 * The worker protocol's environment, as the queue agent hands it to its worker: what
 * `agent.workerEnv()` gives a worker started beside it, and what the CDK app stack
 * (infra/constructs/service.ts) puts in the worker container. No AWS SDK or CDK imports, so infra
 * can use it.
 */

/**
 * The worker id the app stack writes into the worker container's RUNPOD_WEBHOOK_* templates: the stack
 * cannot know the task's runtime id, so the agent takes this one as its worker's and serves it as its
 * own runtime workerId. Any other id in a worker route is refused (403).
 */
/** The agent-only route where the ferry runtime posts why it cannot start (`{"lines": [...]}`). */
export const startupFailureRoute = 'startup-failed';

export const placeholderWorkerId = (endpointId: string): string => `${endpointId}-worker`;

/**
 * The worker-protocol environment of a worker whose agent listens at `agentUrl`: what
 * `agent.workerEnv()` hands a worker, and what the CDK app stack puts in the worker container (it
 * knows the agent's port but not its runtime worker id; any id works, since the agent serves every
 * worker route as its own workerId).
 */
export function workerProtocolEnv(options: {
  agentUrl: string;
  endpointId: string;
  workerId: string;
  workerToken: string;
  pingIntervalMs?: number;
}): Record<string, string> {
  const base = `${options.agentUrl}/v2/${encodeURIComponent(options.endpointId)}`;
  const worker = encodeURIComponent(options.workerId);
  return {
    // Every template carries a `?`: the RunPod SDK appends `&job_in_progress=…` / `&isStream=…`.
    RUNPOD_WEBHOOK_GET_JOB: `${base}/job-take/${worker}?agent=1`,
    RUNPOD_WEBHOOK_POST_OUTPUT: `${base}/job-done/${worker}/$ID?agent=1`,
    RUNPOD_WEBHOOK_POST_STREAM: `${base}/job-stream/${worker}/$ID?agent=1`,
    RUNPOD_WEBHOOK_PING: `${base}/ping/${worker}?agent=1`,
    // The ferry runtime's results of several jobs in one request (docs/architecture.md#worker-protocol).
    FERRY_WEBHOOK_POST_OUTPUT_BATCH: `${base}/job-done-batch/${worker}?agent=1`,
    // The ferry runtime's job output (docs/observability.md); RunPod's SDK never calls it.
    FERRY_WEBHOOK_POST_LOG: `${base}/job-log/${worker}?agent=1`,
    // The ferry runtime's startup failure (worker-image/agent/agent.ts): the agent cannot read the
    // worker container's output, and the endpoint it may mark failing shows these lines.
    FERRY_WEBHOOK_POST_STARTUP: `${base}/${startupFailureRoute}/${worker}?agent=1`,
    RUNPOD_AI_API_KEY: options.workerToken,
    RUNPOD_POD_ID: options.workerId,
    // No RUNPOD_POD_HOSTNAME here, unlike the local pool: the stack could only give it the placeholder
    // worker id (a task's own hostname is not known to it), and the ferry runtime's error records then
    // lost the container's real hostname (socket.gethostname(), its fallback) for that placeholder.
    RUNPOD_ENDPOINT_ID: options.endpointId,
    RUNPOD_PING_INTERVAL: String(options.pingIntervalMs ?? 10_000),
    FERRY_MODE: 'queue',
  };
}
