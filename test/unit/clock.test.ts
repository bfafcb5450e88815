import { describe, expect, it } from 'vitest';
import { FakeClock, systemClock } from '../../core/clock.js';

const flush = async () => {
  for (let i = 0; i < 3; i++) await new Promise((resolve) => setImmediate(resolve));
};

describe('FakeClock', () => {
  it('starts where told and only moves when advanced or set', async () => {
    const clock = new FakeClock(1_000);
    expect(clock.now()).toBe(1_000);
    clock.advance(250);
    expect(clock.now()).toBe(1_250);
    clock.set(5_000);
    expect(clock.now()).toBe(5_000);
    expect(() => clock.set(4_999)).toThrow(RangeError);
    expect(() => clock.advance(-1)).toThrow(RangeError);
  });

  it('wakes a sleep only once time reaches its deadline', async () => {
    const clock = new FakeClock(0);
    let woke = false;
    const sleeping = clock.sleep(100).then(() => {
      woke = true;
    });
    expect(clock.pendingSleeps()).toBe(1);
    clock.advance(99);
    await flush();
    expect(woke).toBe(false);
    clock.advance(1);
    await sleeping;
    expect(woke).toBe(true);
    expect(clock.pendingSleeps()).toBe(0);
  });

  it('wakes due sleeps earliest first when time jumps past several deadlines', async () => {
    const clock = new FakeClock(0);
    const order: number[] = [];
    const all = [300, 100, 200, 100].map((ms, i) => clock.sleep(ms).then(() => order.push(i)));
    const late = clock.sleep(1_000).then(() => order.push(99));
    clock.set(500);
    await Promise.all(all);
    expect(order).toEqual([1, 3, 2, 0]);
    expect(clock.pendingSleeps()).toBe(1);
    clock.advance(500);
    await late;
    expect(order.at(-1)).toBe(99);
  });

  it('resolves at once for zero, negative or aborted sleeps and drops a sleep when its signal aborts', async () => {
    const clock = new FakeClock(0);
    await clock.sleep(0);
    await clock.sleep(-5);
    await clock.sleep(1_000, AbortSignal.abort());
    const controller = new AbortController();
    const sleeping = clock.sleep(1_000, controller.signal);
    expect(clock.pendingSleeps()).toBe(1);
    controller.abort();
    await sleeping;
    expect(clock.pendingSleeps()).toBe(0);
    expect(clock.now()).toBe(0);
  });
});

describe('systemClock', () => {
  it('reads wall time', () => {
    const before = Date.now();
    const now = systemClock.now();
    expect(now).toBeGreaterThanOrEqual(before);
    expect(now).toBeLessThanOrEqual(Date.now());
  });

  it('sleeps about as long as asked', async () => {
    const started = performance.now();
    await systemClock.sleep(30);
    expect(performance.now() - started).toBeGreaterThanOrEqual(25);
  });

  it('resolves at once when the signal aborts, and for an already aborted signal', async () => {
    const controller = new AbortController();
    const started = performance.now();
    const sleeping = systemClock.sleep(60_000, controller.signal);
    setTimeout(() => controller.abort(), 10);
    await sleeping;
    await systemClock.sleep(60_000, AbortSignal.abort());
    expect(performance.now() - started).toBeLessThan(1_000);
  });

  it('does not keep the process alive while sleeping (its timer is unref-ed)', async () => {
    const timers = () => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
    const before = timers();
    const controller = new AbortController();
    const sleeping = systemClock.sleep(60_000, controller.signal);
    expect(timers()).toBe(before);
    controller.abort();
    await sleeping;
    // Control: a plain ref-ed timer does show up, so the check above can fail.
    const ref = setTimeout(() => {}, 60_000);
    expect(timers()).toBe(before + 1);
    clearTimeout(ref);
  });
});
