/**
 * The worker rate limit's counter (core/adapters/local/guard.ts WorkerWindows) on a fake clock: a
 * fixed window per token, refused past the limit with the time left in the window, counted afresh in
 * the next window, each token on its own.
 */
import { describe, expect, it } from 'vitest';
import { WorkerWindows } from '../../core/adapters/local/guard.js';

describe('WorkerWindows', () => {
  it('answers 0 within the limit, then the ms left in the window, and counts afresh in the next', () => {
    let now = 1_000;
    const windows = new WorkerWindows(3, 10_000, () => now);
    expect([windows.take('a'), windows.take('a'), windows.take('a')]).toEqual([0, 0, 0]);
    now += 4_000;
    expect(windows.take('a')).toBe(6_000);
    expect(windows.take('b')).toBe(0);
    now += 6_000;
    expect([windows.take('a'), windows.take('a'), windows.take('a'), windows.take('a')]).toEqual([
      0, 0, 0, 10_000,
    ]);
  });
});
