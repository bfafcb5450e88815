/**
 * Fault suite, short version (the full one is `npm run fault`, bench/fault.ts). The platform runs in a
 * child process (`node dist/bench/serve-child.js`, so `npm test` builds first) and is killed with
 * SIGKILL under load; Python workers are killed mid-job; a deep queue is counted and purged; webhook
 * receivers hang, fail and drop connections. Nothing here is timed as a benchmark: bounds are generous
 * and only say "not held up by" or "did not hang".
 */
import { describe, expect, it } from 'vitest';
import {
  deepQueue,
  killPlatformUnderLoad,
  killWorkersMidJob,
  webhookFaults,
} from '../../bench/lib/faults.js';

describe('fault suite', () => {
  it('kill -9 of the platform under load: every acknowledged job completes exactly once', async () => {
    const result = await killPlatformUnderLoad({ jobs: 300, kills: 1 });
    expect(result.acknowledged).toBeGreaterThan(150);
    expect(result.notCompleted).toEqual([]);
    expect(result.completed).toBe(result.acknowledged);
    expect(result.completedTwice).toEqual([]);
  }, 90_000);

  it('Python workers killed mid-job: their jobs are taken again and completed by new workers', async () => {
    const result = await killWorkersMidJob({ jobs: 4, jobMs: 1_500 });
    expect(result.killedPids.length).toBeGreaterThan(0);
    expect(result.statuses).toEqual(Array(result.jobs).fill('COMPLETED'));
    for (const pid of result.resultPids) expect(result.killedPids).not.toContain(pid);
    expect(result.resultPids).toHaveLength(result.jobs);
  }, 90_000);

  it('a queue of 10k jobs: health counts it, purge removes it all', async () => {
    const result = await deepQueue({ jobs: 10_000 });
    expect(result.inQueue).toBe(10_000);
    expect(result.removed).toBe(10_000);
    expect(result.inQueueAfterPurge).toBe(0);
  }, 90_000);

  it('hanging, failing and dropping webhooks neither delay completion nor stop the retries', async () => {
    const result = await webhookFaults({ retryDelayMs: 100 });
    expect(result.statuses).toEqual({ hang: 'COMPLETED', fail: 'COMPLETED', drop: 'COMPLETED' });
    // The runsync waited for the job, not for the webhook (whose timeout is 10 s).
    for (const ms of Object.values(result.runsyncMs)) expect(ms).toBeLessThan(8_000);
    expect(result.hits).toEqual({ hang: 1, fail: 3, drop: 3 });
    // Closing the platform abandons the hanging delivery instead of waiting for it.
    expect(result.stopMs).toBeLessThan(8_000);
  }, 60_000);
});
