/**
 * Deadline watching of the queue agent. The supervisor (core/supervisor.ts) times held jobs out at
 * startedAt + executionTimeout by itself; what needs a clock here is the rest, checked every tick:
 *
 *   - a job the worker was told to stop (cancel from a Lambda, a timeout) but still holds after
 *     `stopGraceMs`: the supervisor kills the worker (the agent exits 1 and ECS replaces the task);
 *   - a worker told to leave (drain, refresh_worker) that has not left within the drain period;
 *   - task scale-in protection (protection.ts), which follows whether the worker holds a job.
 *
 * A failed check is logged and tried again on the next tick: a throttled table must not end the agent.
 */
import { messageOf } from '../../core/errors.js';
import type { Logger } from '../../core/log.js';
import type { Clock } from '../../core/ports.js';
import type { WorkerSupervisor } from '../../core/supervisor.js';
import type { TaskProtection } from './protection.js';
import { tickEvery } from './ticker.js';

export interface DeadlineWatch {
  supervisor: Pick<WorkerSupervisor, 'tick'>;
  endpointId: string;
  protection?: TaskProtection | undefined;
  clock: Clock;
  /** How often held jobs are checked (default 1 s). */
  tickMs?: number | undefined;
  /** Ends the watch (the agent closes). */
  signal: AbortSignal;
  log: Logger;
}

/** Runs until `signal` aborts. */
export function watchDeadlines(watch: DeadlineWatch): Promise<void> {
  return tickEvery(watch.clock, watch.tickMs ?? 1_000, watch.signal, async () => {
    try {
      await watch.supervisor.tick(watch.endpointId);
    } catch (error) {
      watch.log.warn(`checking held jobs: ${messageOf(error)}`);
    }
    watch.protection?.tick();
  });
}
