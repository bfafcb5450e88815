/**
 * The sweeper handler runs the engine's sweep and the store's deleteExpired (unit level, fakes).
 */
import { describe, expect, it, vi } from 'vitest';
import { createSweeper } from '../../functions/sweeper.js';
import type { Platform } from '../../functions/wiring.js';

describe('sweeper', () => {
  it('sweeps, deletes what expired before now, and logs counts only', async () => {
    const deleteExpired = vi.fn(async (_nowMs: number) => 3);
    const platform = {
      engine: { sweep: async () => ({ requeued: 1, failed: 0, timedOut: 2, expired: 0 }) },
      jobs: { deleteExpired },
    } as unknown as Platform;
    const log = vi.spyOn(console, 'log').mockImplementation(() => {});
    const report = await createSweeper(
      () => platform,
      () => 42_000,
    )();
    expect(report).toEqual({ requeued: 1, failed: 0, timedOut: 2, expired: 0, deleted: 3 });
    expect(deleteExpired).toHaveBeenCalledWith(42_000);
    expect(JSON.parse(String(log.mock.calls[0]![0]))).toMatchObject({ msg: 'ferry sweep', deleted: 3 });
    log.mockRestore();
  });
});
