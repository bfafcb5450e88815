/**
 * The sweeper handler runs the engine's sweep and the store's deleteExpired (unit level, fakes).
 */
import { describe, expect, it, vi } from 'vitest';
import { createSweeper, sweepTiming } from '../../functions/sweeper.js';
import type { Platform } from '../../functions/wiring.js';

describe('sweeper', () => {
  it('sweeps, deletes what expired before now, and logs counts only', async () => {
    const deleteExpired = vi.fn(async (_nowMs: number, _limit: number, _deadline?: unknown) => 3);
    const platform = {
      engine: {
        sweep: async () => ({ requeued: 1, failed: 0, timedOut: 2, expired: 0 }),
        resendWaiting: async () => 0,
      },
      jobs: { deleteExpired },
      control: { listEndpoints: async () => [] },
      deadLetters: { take: async () => [] },
      webhooks: { idle: async () => {} },
    } as unknown as Platform;
    const log = vi.spyOn(console, 'log').mockImplementation(() => {});
    const report = await createSweeper(
      () => platform,
      () => 42_000,
    )();
    expect(report).toEqual({
      requeued: 1,
      failed: 0,
      timedOut: 2,
      expired: 0,
      deleted: 3,
      resent: 0,
      deadLettered: 0,
      notStartable: 0,
    });
    expect(deleteExpired).toHaveBeenCalledWith(42_000, sweepTiming.expiredDeleteLimit, expect.anything());
    expect(JSON.parse(String(log.mock.calls[0]![0]))).toMatchObject({ msg: 'ferry sweep', deleted: 3 });
    log.mockRestore();
  });

  it('fails a failing endpoint’s backlog within its share of the run, leaving time for the webhooks', async () => {
    const rejectQueued = vi.fn(
      async (_endpointId: string, _error: string, _options?: { budgetMs?: number }) => 500,
    );
    const platform = {
      engine: {
        sweep: async () => ({ requeued: 0, failed: 0, timedOut: 0, expired: 0 }),
        resendWaiting: async () => 0,
        rejectQueued,
      },
      jobs: { deleteExpired: async () => 0 },
      control: {
        listEndpoints: async () => [{ id: 'broken', kind: 'queue' }],
        startFailures: async () => ({
          failedStarts: 3,
          problem: { state: 'failing', reason: 'image gone', lines: [], sinceMs: 0 },
        }),
      },
      deadLetters: { take: async () => [] },
      webhooks: { idle: async () => {} },
    } as unknown as Platform;
    const log = vi.spyOn(console, 'log').mockImplementation(() => {});
    const report = await createSweeper(() => platform)(undefined, { getRemainingTimeInMillis: () => 50_000 });
    log.mockRestore();
    expect(report.notStartable).toBe(500);
    expect(rejectQueued.mock.calls[0]![2]).toEqual({ budgetMs: 50_000 - sweepTiming.finishMs });
  });

  it('does not return before the webhooks the sweep started are delivered', async () => {
    const events: string[] = [];
    let deliver: () => void = () => {};
    const delivered = new Promise<void>((resolve) => {
      deliver = resolve;
    });
    const platform = {
      engine: {
        sweep: async () => ({ requeued: 0, failed: 1, timedOut: 1, expired: 0 }),
        resendWaiting: async () => 0,
      },
      jobs: { deleteExpired: async () => 0 },
      control: { listEndpoints: async () => [] },
      deadLetters: { take: async () => [] },
      webhooks: {
        idle: async () => {
          events.push('waiting for webhooks');
          await delivered;
          events.push('webhooks delivered');
        },
      },
    } as unknown as Platform;
    const log = vi.spyOn(console, 'log').mockImplementation(() => {});
    const run = createSweeper(() => platform)(undefined, { getRemainingTimeInMillis: () => 50_000 }).then(
      () => events.push('returned'),
    );
    for (let i = 0; i < 10 && events.length === 0; i++) await new Promise((resolve) => setImmediate(resolve));
    expect(events).toEqual(['waiting for webhooks']);
    deliver();
    await run;
    expect(events).toEqual(['waiting for webhooks', 'webhooks delivered', 'returned']);
    log.mockRestore();
  });

  it('returns within its time when a scaler nudge or a stop signal never settles', async () => {
    // They were awaited with no bound: one that hung ran the function into its timeout
    // (https://docs.aws.amazon.com/lambda/latest/dg/configuration-timeout.html), webhooks unsettled.
    const never = () => new Promise<void>(() => {});
    const idle = vi.fn(async () => {});
    const platform = {
      engine: {
        sweep: async () => ({ requeued: 1, failed: 0, timedOut: 1, expired: 0 }),
        resendWaiting: async () => 0,
      },
      jobs: { deleteExpired: async () => 0 },
      control: { listEndpoints: async () => [] },
      deadLetters: { take: async () => [] },
      webhooks: { idle },
      nudges: { settled: never },
      stopSignals: { settled: never },
    } as unknown as Platform;
    const log = vi.spyOn(console, 'log').mockImplementation(() => {});
    const warn = vi.spyOn(console, 'warn').mockImplementation(() => {});
    // 5 ms past what the sweeper keeps to return: each settle waits at most that long.
    const report = await createSweeper(() => platform)(undefined, { getRemainingTimeInMillis: () => 2_005 });
    expect(report.timedOut).toBe(1);
    expect(warn.mock.calls.map((call) => String(call[0]))).toEqual([
      'ferry: scaler nudges still being sent when the function had to return',
      'ferry: stop signals still being sent when the function had to return',
    ]);
    expect(idle).toHaveBeenCalled();
    log.mockRestore();
    warn.mockRestore();
  });

  it('gives up on deliveries still running when its time is up, and says so', async () => {
    const warn = vi.spyOn(console, 'warn').mockImplementation(() => {});
    const { settleWebhooks } = await import('../../functions/wiring.js');
    const never = { idle: () => new Promise<void>(() => {}) };
    expect(await settleWebhooks(never, 5)).toBe('gave-up');
    expect(await settleWebhooks({ idle: async () => {} }, 1000)).toBe('settled');
    expect(warn).toHaveBeenCalledTimes(1);
    warn.mockRestore();
  });
  it('begins each minute at another endpoint, so a run that runs out of time does not leave the same ones every time', async () => {
    // Endpoints were visited in the same order every run: while time kept running out after the
    // first endpoints, the last ones' waiting jobs were never resent nor their dead letters read.
    const endpoints = ['a', 'b', 'c'].map((id) => ({ id, kind: 'queue' }));
    const firstVisited = async (minute: number) => {
      const visited: string[] = [];
      let left = 50_000;
      const platform = {
        engine: {
          sweep: async () => ({ requeued: 0, failed: 0, timedOut: 0, expired: 0 }),
          resendWaiting: async ([id]: string[]) => {
            visited.push(id!);
            left = 0; // one endpoint's resends take the rest of the run's time
            return 0;
          },
        },
        jobs: { deleteExpired: async () => 0 },
        control: { listEndpoints: async () => endpoints },
        deadLetters: { take: async () => [] },
        webhooks: { idle: async () => {} },
      } as unknown as Platform;
      const log = vi.spyOn(console, 'log').mockImplementation(() => {});
      await createSweeper(
        () => platform,
        () => minute * sweepTiming.periodMs + 1_234,
      )(undefined, { getRemainingTimeInMillis: () => left + sweepTiming.finishMs });
      log.mockRestore();
      return visited;
    };
    const runs = [];
    for (const minute of [0, 1, 2, 3]) runs.push(await firstVisited(minute));
    expect(runs).toEqual([['a'], ['b'], ['c'], ['a']]);
  });
});
