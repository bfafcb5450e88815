import { describe, expect, it } from 'vitest';
import { LocalChangeFeed, PollingChangeFeed } from '../../core/changes.js';
import { FakeClock } from '../../core/clock.js';

const flush = async () => {
  for (let i = 0; i < 3; i++) await new Promise((resolve) => setImmediate(resolve));
};

function track<T>(promise: Promise<T>) {
  const state: { settled: boolean; value?: T } = { settled: false };
  void promise.then((value) => {
    state.settled = true;
    state.value = value;
  });
  return state;
}

describe('LocalChangeFeed', () => {
  it('remembers a notify between watch and wait (watch → read → wait loses nothing)', async () => {
    const feed = new LocalChangeFeed(new FakeClock());
    const watch = feed.watch('job-1');
    feed.notify('job-1');
    expect(await watch.changed(1_000)).toBe(true);
    watch.close();
  });

  it("hands each watch of the key the latest notify's detail, whether it waited or not", async () => {
    const feed = new LocalChangeFeed(new FakeClock());
    const parked = feed.watch('k');
    const idle = feed.watch('k');
    const other = feed.watch('other');
    const woke = parked.changed(1_000);
    feed.notify('k', { queuedLowPriority: true });
    expect(await woke).toBe(true);
    expect(parked.detail).toEqual({ queuedLowPriority: true });
    expect(idle.detail).toEqual({ queuedLowPriority: true });
    expect(other.detail).toBeUndefined();
    // A later notify without one clears it: a detail never outlives the notify that carried it.
    feed.notify('k');
    expect(await idle.changed(1_000)).toBe(true);
    expect(idle.detail).toBeUndefined();
    for (const watch of [parked, idle, other]) watch.close();
  });

  it('consumes a notify: the next wait waits again', async () => {
    const clock = new FakeClock();
    const feed = new LocalChangeFeed(clock);
    const watch = feed.watch('k');
    feed.notify('k');
    feed.notify('k');
    expect(await watch.changed(1_000)).toBe(true);
    const next = track(watch.changed(1_000));
    await flush();
    expect(next.settled).toBe(false);
    clock.advance(1_000);
    await flush();
    expect(next).toEqual({ settled: true, value: false });
  });

  it('wakes a waiter on the next notify of its key only', async () => {
    const clock = new FakeClock();
    const feed = new LocalChangeFeed(clock);
    const watch = feed.watch('a');
    const waiting = track(watch.changed(60_000));
    feed.notify('b');
    await flush();
    expect(waiting.settled).toBe(false);
    feed.notify('a');
    await flush();
    expect(waiting).toEqual({ settled: true, value: true });
    // The wait's timer is released once the notify won.
    expect(clock.pendingSleeps()).toBe(0);
  });

  it('answers false after waitMs, and false at once for waitMs <= 0 or an aborted signal', async () => {
    const clock = new FakeClock();
    const feed = new LocalChangeFeed(clock);
    const watch = feed.watch('k');
    const waiting = track(watch.changed(500));
    clock.advance(499);
    await flush();
    expect(waiting.settled).toBe(false);
    clock.advance(1);
    await flush();
    expect(waiting).toEqual({ settled: true, value: false });
    expect(await watch.changed(0)).toBe(false);
    expect(await watch.changed(1_000, AbortSignal.abort())).toBe(false);
  });

  it('answers false when the signal aborts mid-wait and releases the timer', async () => {
    const clock = new FakeClock();
    const feed = new LocalChangeFeed(clock);
    const watch = feed.watch('k');
    const controller = new AbortController();
    const waiting = track(watch.changed(60_000, controller.signal));
    await flush();
    expect(clock.pendingSleeps()).toBe(1);
    controller.abort();
    await flush();
    expect(waiting).toEqual({ settled: true, value: false });
    expect(clock.pendingSleeps()).toBe(0);
  });

  it('notifies every watch of a key', async () => {
    const feed = new LocalChangeFeed(new FakeClock());
    const a = feed.watch('k');
    const b = feed.watch('k');
    const waitingA = track(a.changed(60_000));
    feed.notify('k');
    await flush();
    expect(waitingA.value).toBe(true);
    expect(await b.changed(60_000)).toBe(true);
  });

  it('close on a watch wakes its waiter with false and stops listening', async () => {
    const feed = new LocalChangeFeed(new FakeClock());
    const watch = feed.watch('k');
    const waiting = track(watch.changed(60_000));
    watch.close();
    watch.close();
    await flush();
    expect(waiting).toEqual({ settled: true, value: false });
    feed.notify('k');
    expect(await watch.changed(60_000)).toBe(false);
    expect(feed.size()).toBe(0);
  });

  it('close on the feed releases every listener and wakes every waiter', async () => {
    const clock = new FakeClock();
    const feed = new LocalChangeFeed(clock);
    const waits = ['a', 'b', 'b'].map((key) => track(feed.watch(key).changed(60_000)));
    await flush();
    feed.close();
    feed.close();
    await flush();
    expect(waits.map((w) => w.value)).toEqual([false, false, false]);
    expect(feed.size()).toBe(0);
    expect(clock.pendingSleeps()).toBe(0);
  });

  it('does not leak with thousands of watches that come and go', async () => {
    const clock = new FakeClock();
    const feed = new LocalChangeFeed(clock);
    for (let round = 0; round < 5; round++) {
      const watches = Array.from({ length: 2_000 }, (_, i) => feed.watch(`job-${round}-${i}`));
      const waits = watches.map((w) => w.changed(30_000));
      for (let i = 0; i < watches.length; i += 2) feed.notify(`job-${round}-${i}`);
      clock.advance(30_000);
      const results = await Promise.all(waits);
      expect(results.filter(Boolean)).toHaveLength(1_000);
      for (const w of watches) w.close();
      expect(feed.size()).toBe(0);
      expect(clock.pendingSleeps()).toBe(0);
    }
  });

  it('refuses two concurrent waits on one watch', async () => {
    const feed = new LocalChangeFeed(new FakeClock());
    const watch = feed.watch('k');
    void watch.changed(60_000);
    await expect(watch.changed(60_000)).rejects.toThrow(/another call/);
    watch.close();
  });
});

describe('PollingChangeFeed', () => {
  it('answers true after the poll interval so the caller re-reads', async () => {
    const clock = new FakeClock();
    const feed = new PollingChangeFeed(clock, 1_000);
    const watch = feed.watch('k');
    const waiting = track(watch.changed(20_000));
    clock.advance(999);
    await flush();
    expect(waiting.settled).toBe(false);
    clock.advance(1);
    await flush();
    expect(waiting).toEqual({ settled: true, value: true });
  });

  it('answers true after waitMs when that is shorter than the poll interval', async () => {
    const clock = new FakeClock();
    const watch = new PollingChangeFeed(clock, 1_000).watch('k');
    const waiting = track(watch.changed(300));
    clock.advance(300);
    await flush();
    expect(waiting).toEqual({ settled: true, value: true });
  });

  it('answers at once on an in-process notify, and false on abort', async () => {
    const clock = new FakeClock();
    const feed = new PollingChangeFeed(clock, 1_000);
    const watch = feed.watch('k');
    const waiting = track(watch.changed(20_000));
    feed.notify('k');
    await flush();
    expect(waiting).toEqual({ settled: true, value: true });
    const controller = new AbortController();
    const aborted = track(watch.changed(20_000, controller.signal));
    controller.abort();
    await flush();
    expect(aborted).toEqual({ settled: true, value: false });
    expect(clock.pendingSleeps()).toBe(0);
  });

  it('refuses a poll interval that is not positive', () => {
    expect(() => new PollingChangeFeed(new FakeClock(), 0)).toThrow(RangeError);
  });
});
