/**
 * Drain of the queue agent (SIGTERM, or the supervisor wants the task gone).
 *
 * ECS sends SIGTERM to every container of a stopping task and SIGKILL after stopTimeout (≤ 120 s).
 * Draining makes job-take answer 204 without touching the queue (after a short hold, so a worker that
 * asks again at once does not spin; takes in flight are aborted, and a job claimed for an aborted
 * take goes straight back to the queue), keeps serving job-done/job-stream/ping/job-stop so held jobs
 * can finish, waits up to `drainMs` (default 110 s, infra/task-layout.ts), then requeues whatever is
 * still held (the supervisor's `exited`, which calls engine.workerGone) and turns task protection off.
 */
import { messageOf } from '../../core/errors.js';
import type { Logger } from '../../core/log.js';
import type { Clock } from '../../core/ports.js';
import type { WorkerSupervisor } from '../../core/supervisor.js';
import type { TaskProtection } from './protection.js';

export interface DrainOptions {
  supervisor: Pick<WorkerSupervisor, 'drain' | 'exited' | 'heldBy'>;
  workerId: string;
  clock: Clock;
  log: Logger;
  /** How long held jobs may finish before they are requeued. */
  drainMs: number;
  /** Aborts when the agent closes: a drain still waiting stops waiting. */
  closing: AbortSignal;
  protection?: TaskProtection | undefined;
  /** Final-status webhooks still being sent are waited for. */
  webhooks?: { idle(): Promise<void> } | undefined;
}

export class Drain {
  readonly #draining = new AbortController();
  #takesInFlight = 0;
  #done: Promise<void> | undefined;

  constructor(private readonly options: DrainOptions) {}

  /** Aborted once draining starts (or takes are stopped on close): job-take long polls end with it. */
  get signal(): AbortSignal {
    return this.#draining.signal;
  }

  /**
   * Runs a job-take. Only takes that may reach the queue count: once draining, a take is refused
   * before the queue (held briefly), and a worker that asks again at once must not keep the drain
   * waiting.
   */
  async take<T>(run: () => Promise<T>): Promise<T> {
    const counted = !this.#draining.signal.aborted;
    if (counted) this.#takesInFlight++;
    try {
      return await run();
    } finally {
      if (counted) this.#takesInFlight--;
    }
  }

  /** Resolves once held jobs finished or were requeued; the same promise when called again. */
  start(): Promise<void> {
    this.#done ??= this.#run();
    return this.#done;
  }

  /** The agent closes: no take may wait any longer. */
  stopTakes(): void {
    this.#draining.abort();
  }

  async #run(): Promise<void> {
    const { supervisor, workerId, clock, log, drainMs, closing } = this.options;
    const held = () => supervisor.heldBy(workerId);
    const deadline = clock.now() + drainMs;
    supervisor.drain(workerId);
    this.#draining.abort();
    log.info(`draining: no new jobs; waiting up to ${drainMs} ms for ${held().length} held job(s)`);
    while ((held().length > 0 || this.#takesInFlight > 0) && clock.now() < deadline) {
      await clock.sleep(Math.min(200, deadline - clock.now()), closing);
      if (closing.aborted) break;
    }
    const left = held();
    try {
      // Requeues anything this worker still runs and buries it: its token and registry entry go. A
      // drain is the platform's stop (ECS stopping the task, a deploy), so no attempt is counted.
      await supervisor.exited(workerId, { code: 0, signal: 'SIGTERM', asked: true });
      if (left.length > 0) log.warn(`drain deadline: ${left.length} job(s) went back to the queue`);
    } catch (error) {
      log.warn(`releasing held jobs: ${messageOf(error)}`);
    }
    await this.options.protection?.release();
    await this.options.webhooks?.idle();
    log.info('drained');
  }
}
