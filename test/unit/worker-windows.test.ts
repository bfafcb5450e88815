/**
 * The worker rate limit's counter (core/worker-rate.ts WorkerWindows, used by the local front door
 * and the AWS agent) on a fake clock: a fixed window per token, refused past the limit with the time
 * left in the window, counted afresh in the next window, each token on its own; a result or stream
 * chunk counted but never refused; a request that causes several store reads (a job-log batch)
 * counted by its reads, refused whole when the window cannot take them.
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

  it('counts a request that causes several reads by its reads, and refuses it whole, counting nothing more, when they do not fit', () => {
    let now = 0;
    const windows = new WorkerWindows(10, 10_000, () => now);
    // The door counted the request (refusal); the batch of 4 jobs costs 3 more.
    expect(windows.refusal('a', '/v2/ep/job-log/w1')).toBeUndefined();
    expect(windows.readsRefusal('a', 4)).toBeUndefined();
    expect(windows.refusal('a', '/v2/ep/job-log/w1')).toBeUndefined();
    expect(windows.readsRefusal('a', 1)).toBeUndefined();
    // 5 counted: a batch of 7 jobs (6 more) does not fit and counts nothing; one of 6 (5 more) does.
    now += 3_000;
    expect(windows.refusal('a', '/v2/ep/job-log/w1')).toBeUndefined();
    expect(windows.readsRefusal('a', 7)).toEqual({
      retryAfterSec: 7,
      error: 'Rate limit of 10 requests per 10 s exceeded; retry in 7 s',
    });
    expect(windows.readsRefusal('a', 5)).toBeUndefined();
    expect(windows.take('a')).toBe(7_000);
    // Another token, and the next window, count afresh.
    expect(windows.refusal('b', '/v2/ep/job-log/w2')).toBeUndefined();
    expect(windows.readsRefusal('b', 10)).toBeUndefined();
    now += 7_000;
    expect(windows.refusal('a', '/v2/ep/job-log/w1')).toBeUndefined();
    expect(windows.readsRefusal('a', 10)).toBeUndefined();
    expect(windows.take('a')).toBe(10_000);
  });
});
