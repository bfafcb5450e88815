/**
 * Clocks. `systemClock` is wall time; `FakeClock` is time that only moves when a test moves it, so
 * tests of leases, expiry and long polls run in microseconds and never flake on a busy machine.
 */
import type { Clock } from './ports.js';

export const systemClock: Clock = {
  now: () => Date.now(),
  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      if (signal?.aborted || ms <= 0) {
        resolve();
        return;
      }
      const onAbort = (): void => {
        clearTimeout(timer);
        resolve();
      };
      const timer = setTimeout(() => {
        signal?.removeEventListener('abort', onAbort);
        resolve();
      }, ms);
      // A pending long poll must never keep the process alive on shutdown.
      timer.unref();
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  },
};

/**
 * Wall time for a command that waits on purpose (a deploy waiting out an AWS rule): its timers keep
 * the process alive through the wait, where systemClock's never hold it.
 */
export const foregroundClock = {
  nowMs: (): number => Date.now(),
  sleep: (ms: number): Promise<void> => new Promise<void>((resolve) => setTimeout(resolve, ms)),
};

interface PendingSleep {
  deadlineMs: number;
  /** Order of registration, so sleeps with equal deadlines wake in the order they began. */
  order: number;
  wake: () => void;
}

/** Deterministic time for tests: no real timers; `advance`/`set` wake the sleeps that are due. */
export class FakeClock implements Clock {
  #nowMs: number;
  #order = 0;
  readonly #sleeps = new Set<PendingSleep>();

  constructor(startMs = 1_700_000_000_000) {
    this.#nowMs = startMs;
  }

  now(): number {
    return this.#nowMs;
  }

  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      if (signal?.aborted || ms <= 0) {
        resolve();
        return;
      }
      const entry: PendingSleep = {
        deadlineMs: this.#nowMs + ms,
        order: this.#order++,
        wake: () => {
          this.#sleeps.delete(entry);
          signal?.removeEventListener('abort', entry.wake);
          resolve();
        },
      };
      this.#sleeps.add(entry);
      signal?.addEventListener('abort', entry.wake, { once: true });
    });
  }

  /** Moves time forward by `ms` and wakes every sleep whose deadline is reached, earliest first. */
  advance(ms: number): void {
    if (ms < 0) throw new RangeError('FakeClock cannot go back in time');
    this.set(this.#nowMs + ms);
  }

  /** Sets the time (never backwards) and wakes the sleeps that are due. */
  set(nowMs: number): void {
    if (nowMs < this.#nowMs) throw new RangeError('FakeClock cannot go back in time');
    this.#nowMs = nowMs;
    const due = [...this.#sleeps]
      .filter((s) => s.deadlineMs <= nowMs)
      .sort((a, b) => a.deadlineMs - b.deadlineMs || a.order - b.order);
    for (const s of due) s.wake();
  }

  /** How many sleeps are waiting; tests use it to know a long poll has started waiting. */
  pendingSleeps(): number {
    return this.#sleeps.size;
  }
}
