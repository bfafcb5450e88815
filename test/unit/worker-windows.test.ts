/**
 * The worker rate limit's counter (core/worker-rate.ts WorkerWindows, used by the local front door
 * and the AWS agent) on a fake clock: a fixed window per token, refused past the limit with the time
 * left in the window, counted afresh in the next window, each token on its own; a result or stream
 * chunk counted but never refused.
 */
import { describe, expect, it } from 'vitest';
import { WorkerWindows } from '../../core/worker-rate.js';

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

  it('refuses a take or ping past the limit with its 429, never a result or a stream chunk', () => {
    let now = 0;
    const windows = new WorkerWindows(1, 10_000, () => now);
    expect(windows.refusal('a', '/v2/ep/ping/w1?job_id=j1')).toBeUndefined();
    now += 2_500;
    expect(windows.refusal('a', '/v2/ep/job-take/w1')).toEqual({
      retryAfterSec: 8,
      error: 'Rate limit of 1 requests per 10 s exceeded; retry in 8 s',
    });
    for (const route of ['job-done/w1/j1', 'job-done-batch/w1', 'job-stream/w1/j1'])
      expect(windows.refusal('a', `/v2/ep/${route}?agent=1`)).toBeUndefined();
    expect(windows.refusal('a', '/v2/ep/job-done-later/w1')).toBeDefined();
  });
});
