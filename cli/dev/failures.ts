/**
 * What `ferry dev` answers when an endpoint's worker cannot start (an import error, a missing
 * package, a class whose __init__ raises). The worker supervisor (core/supervisor.ts) is the one
 * owner of that state: under `ferry dev` it marks the endpoint failing at the first such exit
 * (SupervisorSettings.startFailureCodes), fails its queued jobs, and starts no worker until the code
 * changes (a reload redeploys it). The dev server reads `problem()` and answers with the worker's
 * last lines. And what it answers while the code on disk does not load (reloadFailureMessage).
 */
import { messageOf } from '../../core/errors.js';
import type { EndpointProblem } from '../../core/ports.js';
import { countOf } from '../io.js';

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

/**
 * What each of the project's routes, and the platform to each run (LocalPlatformOptions
 * runsRefusedBecause), answers (503) after a reload failed, until one succeeds: the code on disk
 * does not load, and its workers still hold the code from before the change, whose answers a caller
 * would take for the new code's. Reloading is all or nothing (one scan of the whole project), so
 * every route answers it. `files` are the files whose change started the reload.
 */
export function reloadFailureMessage(files: readonly string[], error: unknown): string {
  const lines = messageOf(error)
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line !== '');
  const shown = `${lines.slice(0, 4).join(' ')}${lines.length > 4 ? ' …' : ''}`.replace(/[.:]$/, '');
  const named = files.slice(0, 3).join(', ');
  const changed = files.length > 3 ? `${named} and ${countOf(files.length - 3, 'more file')}` : named;
  return (
    `ferry dev could not reload the project${changed ? ` after ${changed} changed` : ''}: ${shown}. ` +
    'It does not run the code from before that change: fix the code and save, and ferry dev reloads it on the next save.'
  );
}
