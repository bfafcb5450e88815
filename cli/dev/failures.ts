/**
 * What `ferry dev` answers when an endpoint's worker cannot start (an import error, a missing
 * package, a class whose __init__ raises). The worker supervisor (core/supervisor.ts) is the one
 * owner of that state: under `ferry dev` it marks the endpoint failing at the first such exit
 * (SupervisorSettings.startFailureCodes), fails its queued jobs, and starts no worker until the code
 * changes (a reload redeploys it). The dev server reads `problem()` and answers with the worker's
 * last lines.
 */
import type { EndpointProblem } from '../../core/ports.js';

/** ferry.worker's start-failure exit codes (worker-image/python/ferry/worker.py). */
export const devStartFailureCodes = [1, 2] as const;

/** What a failing endpoint's reason says to do under `ferry dev`, which reloads on every save. */
export const devStartFailureFix = 'fix the code and save it: ferry dev reloads it';

/**
 * Why the endpoint is failing to start, else undefined: the worker's last lines, or the reason where
 * no worker ran (a secret with no value: WorkerSupervisor.unconfigured).
 */
export const startFailureOf = (problem: EndpointProblem | undefined): string | undefined =>
  problem?.state !== 'failing'
    ? undefined
    : problem.lines.length > 0
      ? problem.lines.join('\n')
      : problem.reason;

/** What the request answers: the error and the worker's last lines, without the noise. */
export function startFailureMessage(endpoint: string, output: string): string {
  const lines = output.split('\n').filter((l) => l.trim() !== '');
  return `The worker of ${endpoint} failed to start:\n${lines.slice(-15).join('\n')}`;
}
