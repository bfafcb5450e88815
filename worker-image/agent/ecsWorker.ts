/**
 * How the agent learns that the worker container beside it exited: the ECS task metadata endpoint
 * v4 (`${ECS_CONTAINER_METADATA_URI_V4}/task`) lists every container of the task with its
 * `KnownStatus` and, once it exited, its `ExitCode`
 * (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-metadata-endpoint-v4-response.html).
 * The agent polls it so a crashed worker's jobs go back to the queue at once instead of waiting for
 * the drain that follows ECS stopping the task (docs/workers.md).
 */
import { messageOf } from '../../core/errors.js';
import type { Clock } from '../../core/ports.js';

export interface WorkerContainerWatch {
  /** `ECS_CONTAINER_METADATA_URI_V4`, which ECS sets in every container. */
  metadataUri: string;
  /** The worker container's name in the task definition (the app stack names it `worker`). */
  containerName: string;
  clock: Clock;
  signal: AbortSignal;
  onExit(how: { code: number | null; signal: string | null }): void | Promise<void>;
  warn(message: string): void;
  pollMs?: number;
  fetch?: typeof fetch;
}

interface TaskMetadata {
  Containers?: { Name?: string; KnownStatus?: string; ExitCode?: number }[];
}

/** Resolves once the worker container is seen STOPPED (after calling onExit) or the signal aborts. */
export async function watchWorkerContainer(watch: WorkerContainerWatch): Promise<void> {
  const get = watch.fetch ?? fetch;
  let lastProblem = '';
  while (!watch.signal.aborted) {
    try {
      const response = await get(`${watch.metadataUri}/task`, { signal: AbortSignal.timeout(5_000) });
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      const task = (await response.json()) as TaskMetadata;
      const container = task.Containers?.find((c) => c.Name === watch.containerName);
      if (container?.KnownStatus === 'STOPPED') {
        await watch.onExit({ code: container.ExitCode ?? null, signal: null });
        return;
      }
      lastProblem = '';
    } catch (error) {
      const problem = messageOf(error);
      // Logged once per kind of failure: the metadata endpoint being down must not flood the log.
      if (problem !== lastProblem) watch.warn(`task metadata: ${problem}`);
      lastProblem = problem;
    }
    await watch.clock.sleep(watch.pollMs ?? 1_000, watch.signal);
  }
}
