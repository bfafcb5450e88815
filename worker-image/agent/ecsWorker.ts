/**
 * How the agent learns that the worker container beside it exited: the ECS task metadata endpoint
 * v4 (`${ECS_CONTAINER_METADATA_URI_V4}/task`) lists every container of the task with its
 * `KnownStatus` and, once it exited, its `ExitCode`
 * (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-metadata-endpoint-v4-response.html).
 * The agent polls it so a crashed worker's jobs go back to the queue at once, and so a worker that
 * dies before its first contact counts as a failed start (docs/aws.md#failing-endpoints).
 *
 * The worker container is not essential (infra/constructs/service.ts), so its exit alone does not stop
 * the task: the agent sees it here before any SIGTERM, and leaves itself (the agent is essential, so
 * the task then stops and the service replaces it). With an essential worker, ECS stopped the task at
 * once and the agent's SIGTERM raced this poll, so a crash was mostly taken for a planned stop
 * ("If the essential parameter of a container is marked as true, and that container fails or stops
 * for any reason, all other containers that are part of the task are stopped":
 * https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_ContainerDefinition.html).
 *
 * When ECS stops the task (scale-in, a deployment, a failed ALB health check), it sets the task's
 * desired status to STOPPED, then its containers stop
 * (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-lifecycle-explanation.html), in the reverse order of
 * their dependencies (https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_ContainerDependency.html),
 * so a queue task's worker stops before its agent: that exit is reported with `taskStopping`, a stop
 * someone asked for, not a crash.
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
  onExit(how: WorkerExit): void | Promise<void>;
  /** The worker container is running, since `atMs` (its `StartedAt`); called once. */
  onStarted?(atMs: number): void;
  /**
   * ECS is stopping the task (its DesiredStatus is STOPPED) while the worker still runs; called once.
   * The worker is signalled before the agent (the reverse of their start order), and a worker that
   * does not stop taking jobs on SIGTERM (a RunPod-SDK image, a handler run as PID 1) would take jobs
   * its stopTimeout then cuts off: the agent stops handing them out now.
   */
  onTaskStopping?(): void;
  warn(message: string): void;
  pollMs?: number;
  fetch?: typeof fetch;
}

/** How the worker ended, as an agent hears it: a container's exit code here, a process's signal in tests. */
export interface WorkerExit {
  code: number | null;
  signal: string | null;
  /** ECS was stopping the whole task (its DesiredStatus was STOPPED): a stop asked for, not a crash. */
  taskStopping?: boolean;
}

interface TaskMetadata {
  DesiredStatus?: string;
  Containers?: { Name?: string; KnownStatus?: string; ExitCode?: number; StartedAt?: string }[];
}

/**
 * Resolves once the worker container is seen STOPPED (after calling onExit) or the signal aborts.
 * An abort (the agent's SIGTERM) takes one last look first: ECS stops the worker before the agent
 * (the reverse of their start order), so the worker has usually just exited inside the poll
 * interval, and the agent must hear of it before it drains rather than wait out the drain for jobs
 * nobody is running.
 */
export async function watchWorkerContainer(watch: WorkerContainerWatch): Promise<void> {
  const get = watch.fetch ?? fetch;
  let lastProblem = '';
  let seenRunning = false;
  let seenStopping = false;
  /** One read of the task's metadata; true once the worker's exit was reported. */
  const look = async (): Promise<boolean> => {
    try {
      const response = await get(`${watch.metadataUri}/task`, { signal: AbortSignal.timeout(5_000) });
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      const task = (await response.json()) as TaskMetadata;
      const container = task.Containers?.find((c) => c.Name === watch.containerName);
      if (container?.KnownStatus === 'STOPPED') {
        await watch.onExit({
          code: container.ExitCode ?? null,
          signal: null,
          taskStopping: task.DesiredStatus === 'STOPPED',
        });
        return true;
      }
      if (task.DesiredStatus === 'STOPPED' && !seenStopping) {
        seenStopping = true;
        watch.onTaskStopping?.();
      }
      if (container?.KnownStatus === 'RUNNING' && !seenRunning) {
        seenRunning = true;
        const startedAt = Date.parse(container.StartedAt ?? '');
        watch.onStarted?.(Number.isNaN(startedAt) ? watch.clock.now() : startedAt);
      }
      lastProblem = '';
    } catch (error) {
      const problem = messageOf(error);
      // Logged once per kind of failure: the metadata endpoint being down must not flood the log.
      if (problem !== lastProblem) watch.warn(`task metadata: ${problem}`);
      lastProblem = problem;
    }
    return false;
  };
  while (!watch.signal.aborted) {
    if (await look()) return;
    await watch.clock.sleep(watch.pollMs ?? 1_000, watch.signal);
  }
  await look();
}
