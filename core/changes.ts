/**
 * Change feeds: how a waiting request (runsync, status-sync, stream, job-take, job-stop) learns that
 * the thing it waits on may have changed. The protocol is watch → read → wait:
 *
 *   const w = feed.watch(key);          // from here on every notify(key) is remembered
 *   try { while (!done(await read())) if (!(await w.changed(leftMs))) break; } finally { w.close(); }
 *
 * so a change that lands between the read and the wait is never lost.
 */
import { systemClock } from './clock.js';

/**
 * The reason given when a wait's timer is cancelled. abort() without one builds a DOMException,
 * which on a busy platform (a wait ends on every job change) showed up in CPU profiles.
 */
const ended = Object.freeze({ reason: 'the wait ended' });

import type { ChangeDetail, ChangeFeed, Clock, Watch } from './ports.js';

class LocalWatch implements Watch {
  /** Set by notify while nobody waits; consumed by the next `changed`. */
  dirty = false;
  closed = false;
  /** The pending `changed` call, if any. */
  waiter: ((changed: boolean) => void) | undefined;
  detail: ChangeDetail | undefined;

  constructor(
    private readonly release: (watch: LocalWatch) => void,
    private readonly clock: Clock,
    /** Polling feeds: a wait answers true ("re-read") after at most this long. Undefined in-process. */
    private readonly pollMs: number | undefined,
  ) {}

  signal(detail: ChangeDetail | undefined): void {
    this.detail = detail;
    if (this.waiter) {
      const wake = this.waiter;
      this.waiter = undefined;
      wake(true);
    } else {
      this.dirty = true;
    }
  }

  async changed(waitMs: number, signal?: AbortSignal): Promise<boolean> {
    if (this.dirty) {
      this.dirty = false;
      return true;
    }
    if (this.closed || signal?.aborted || waitMs <= 0) return false;
    if (this.waiter) throw new Error('Watch.changed called while another call on the same watch is waiting');
    const polling = this.pollMs !== undefined;
    const timer = new AbortController();
    const onAbort = (): void => timer.abort(ended);
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      return await new Promise<boolean>((resolve) => {
        this.waiter = resolve;
        // The sleep ends on its own, or early when the caller aborts or a notify wins (finally below).
        void this.clock.sleep(Math.min(waitMs, this.pollMs ?? waitMs), timer.signal).then(() => {
          if (this.waiter !== resolve) return;
          this.waiter = undefined;
          // A poll interval ran out: the caller must re-read because another process may have written.
          resolve(polling && !signal?.aborted && !this.closed);
        });
      });
    } finally {
      signal?.removeEventListener('abort', onAbort);
      timer.abort(ended);
    }
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.release(this);
    const wake = this.waiter;
    this.waiter = undefined;
    wake?.(false);
  }
}

/** In-process feed: every writer and waiter share one process (the local provider). */
export class LocalChangeFeed implements ChangeFeed {
  readonly #watches = new Map<string, Set<LocalWatch>>();

  constructor(
    protected readonly clock: Clock = systemClock,
    protected readonly pollMs: number | undefined = undefined,
  ) {}

  watch(key: string): Watch {
    let set = this.#watches.get(key);
    if (!set) {
      set = new Set();
      this.#watches.set(key, set);
    }
    const watch = new LocalWatch((w) => this.#release(key, w), this.clock, this.pollMs);
    set.add(watch);
    return watch;
  }

  notify(key: string, detail?: ChangeDetail): void {
    const set = this.#watches.get(key);
    if (!set) return;
    for (const watch of set) watch.signal(detail);
  }

  /** Live watches, over all keys (for leak checks). */
  size(): number {
    let n = 0;
    for (const set of this.#watches.values()) n += set.size;
    return n;
  }

  /** Wakes every waiter with false and forgets all watches. Closing twice is fine. */
  close(): void {
    const all = [...this.#watches.values()].flatMap((set) => [...set]);
    for (const watch of all) watch.close();
    this.#watches.clear();
  }

  #release(key: string, watch: LocalWatch): void {
    const set = this.#watches.get(key);
    if (!set) return;
    set.delete(watch);
    // Drop empty sets, or thousands of one-off job keys would pile up in the map.
    if (set.size === 0) this.#watches.delete(key);
  }
}

/**
 * For processes that cannot hear each other's writes (AWS Lambda: the request that waits and the one
 * that completes the job run in different sandboxes). A wait answers true ("maybe changed, re-read")
 * after `min(waitMs, pollMs)`, or sooner when a write in this same process notifies.
 */
export class PollingChangeFeed extends LocalChangeFeed {
  constructor(clock: Clock = systemClock, pollMs = 1_000) {
    if (!(pollMs > 0)) throw new RangeError('pollMs must be positive');
    super(clock, pollMs);
  }
}
