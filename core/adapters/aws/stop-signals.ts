/**
 * Stop signals: how a change made in a Lambda (cancel, timeout, expiry, a requeue by the sweeper)
 * reaches the job-stop long poll of the agent whose worker holds the job, without the agent
 * re-reading every held job twice a second.
 *
 * The engine calls `notify(workerKey(holder))` exactly when a change means the holder must let go
 * (core/engine.ts). In the Lambdas, `StopSignallingChangeFeed` turns that into one UpdateItem on the
 * worker's small stop-signal item in the workers table (`DynamoWorkerRegistry.signalStop`). In the
 * agent, `StopSignalChangeFeed` answers waits on its own worker key by polling that item, and says
 * "changed" only when the counter moved; only then does the engine read the held jobs again.
 *
 * Why: a strongly consistent GetItem costs one read unit per 4 KB of the whole item, whatever a
 * ProjectionExpression keeps (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/read-write-operations.html).
 * A job item carries its input inline up to ~160 KB, so polling it every 500 ms cost up to 40 read
 * units twice a second per held job; the stop-signal item is a few bytes: one read unit per poll.
 */

import { LocalChangeFeed, PollingChangeFeed } from '../../changes.js';
import { workerKey } from '../../engine.js';
import { PendingWork } from '../../pending-work.js';
import type { ChangeDetail, ChangeFeed, Clock, Watch } from '../../ports.js';

const workerKeyPrefix = workerKey('');

/** The two registry calls the feeds need (DynamoWorkerRegistry has them). */
export interface StopSignals {
  signalStop(workerId: string, nowMs: number): Promise<void>;
  stopSignal(workerId: string): Promise<number>;
}

export interface StopSignallingOptions {
  inner: ChangeFeed;
  signals: Pick<StopSignals, 'signalStop'>;
  clock: Clock;
  log?: (line: string) => void;
}

/**
 * Lambda side: every notify on a worker key also bumps that worker's stop signal. The write runs in
 * the background; handlers await `settled()` before they return, since Lambda may freeze the sandbox
 * as soon as they do (https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtime-environment.html).
 */
export class StopSignallingChangeFeed implements ChangeFeed {
  private readonly pending = new PendingWork();

  constructor(private readonly options: StopSignallingOptions) {}

  watch(key: string): Watch {
    return this.options.inner.watch(key);
  }

  notify(key: string, detail?: ChangeDetail): void {
    this.options.inner.notify(key, detail);
    if (!key.startsWith(workerKeyPrefix)) return;
    const workerId = key.slice(workerKeyPrefix.length);
    const work = this.options.signals.signalStop(workerId, this.options.clock.now()).catch((error) => {
      // The job write already landed; the agent's safety re-read finds it (StopSignalChangeFeed).
      this.options.log?.(`stop signal for worker ${workerId}: ${(error as Error).message}`);
    });
    this.pending.track(work);
  }

  /** Resolves once every signal started so far has been written (or given up). */
  async settled(): Promise<void> {
    await this.pending.settled();
  }
}

export interface StopSignalFeedOptions {
  /** The agent's own worker: waits on its key poll the stop signal. */
  workerId: string;
  signals: Pick<StopSignals, 'stopSignal'>;
  clock: Clock;
  /** How often the stop signal (and every other key the agent waits on) is re-read; 500 ms. */
  pollMs: number;
  /**
   * A wait on the worker key answers "changed" at least this often even when the signal did not move
   * (default 15 s). The signal is written after the job, not in the same write: a Lambda that times
   * out or is frozen between the two, or a throttled UpdateItem, loses it. The engine's own
   * job-stop call re-reads the held jobs when it starts, so a lost signal delays a stop by at most
   * this long, never forever.
   */
  safetyMs?: number;
}

/**
 * Agent side. Waits on the agent's own worker key poll the stop-signal item every `pollMs`; waits on
 * any other key keep PollingChangeFeed's behaviour. notify() from this process (the agent's own
 * timeouts and job-done) wakes both kinds at once.
 */
export class StopSignalChangeFeed implements ChangeFeed {
  private readonly own: string;
  private readonly local: LocalChangeFeed;
  private readonly polling: PollingChangeFeed;
  readonly safetyMs: number;
  /** The last value read, and when that read was sent: reads within `pollMs` of it share it. */
  private last: { value: number; sentAtMs: number } | undefined;
  private reading: Promise<number> | undefined;
  /** Closed with the feed: a wait must end then, not spin on a closed inner watch. */
  private readonly signalWatches = new Set<StopSignalWatch>();

  constructor(readonly options: StopSignalFeedOptions) {
    this.own = workerKey(options.workerId);
    this.local = new LocalChangeFeed(options.clock);
    this.polling = new PollingChangeFeed(options.clock, options.pollMs);
    this.safetyMs = options.safetyMs ?? 15_000;
  }

  watch(key: string): Watch {
    if (key !== this.own) return this.polling.watch(key);
    // The baseline is the value of a read sent before this watch began, so a signal written after it
    // (and so after the job write it announces) shows as a difference on a later read. Before the
    // first read there is none: the first read counts as a change (one extra read of the jobs).
    const watch = new StopSignalWatch(this, this.local.watch(key), this.last?.value, (w) =>
      this.signalWatches.delete(w),
    );
    this.signalWatches.add(watch);
    return watch;
  }

  notify(key: string, detail?: ChangeDetail): void {
    if (key === this.own) this.local.notify(key, detail);
    else this.polling.notify(key, detail);
  }

  /** The current signal, from a read sent at most `pollMs` ago. */
  current(): Promise<number> {
    const now = this.options.clock.now();
    if (this.last && now - this.last.sentAtMs < this.options.pollMs) return Promise.resolve(this.last.value);
    if (!this.reading) {
      this.reading = this.options.signals
        .stopSignal(this.options.workerId)
        .then((value) => {
          this.last = { value, sentAtMs: now };
          return value;
        })
        .finally(() => {
          this.reading = undefined;
        });
    }
    return this.reading;
  }

  /** Live watches, over all keys (for leak checks). */
  size(): number {
    return this.local.size() + this.polling.size();
  }

  close(): void {
    for (const watch of [...this.signalWatches]) watch.close();
    this.local.close();
    this.polling.close();
  }
}

class StopSignalWatch implements Watch {
  private closed = false;
  private safetyAtMs: number;

  constructor(
    private readonly feed: StopSignalChangeFeed,
    private readonly inner: Watch,
    private seen: number | undefined,
    private readonly release: (watch: StopSignalWatch) => void,
  ) {
    this.safetyAtMs = feed.options.clock.now() + feed.safetyMs;
  }

  async changed(waitMs: number, signal?: AbortSignal): Promise<boolean> {
    const { clock, pollMs } = this.feed.options;
    const deadline = clock.now() + Math.max(0, waitMs);
    for (;;) {
      // A notify from this process answers at once; otherwise this sleeps one poll interval (or
      // answers at once with waitMs 0: a single look, as the supervisor's tick asks).
      if (await this.inner.changed(Math.min(deadline - clock.now(), pollMs), signal)) return this.reread();
      if (this.closed || signal?.aborted) return false;
      if (clock.now() >= this.safetyAtMs) return this.reread();
      let value: number;
      try {
        value = await this.feed.current();
      } catch {
        // The signal cannot be read (throttled, a network error): re-read the jobs as before, whose
        // own errors surface through the engine.
        return this.reread();
      }
      if (value !== this.seen) {
        this.seen = value;
        return this.reread();
      }
      if (this.closed || signal?.aborted || clock.now() >= deadline) return false;
    }
  }

  /** "Changed": the caller re-reads the jobs now, so the next safety re-read is a full period away. */
  private reread(): true {
    this.safetyAtMs = this.feed.options.clock.now() + this.feed.safetyMs;
    return true;
  }

  close(): void {
    this.closed = true;
    this.release(this);
    this.inner.close();
  }
}
