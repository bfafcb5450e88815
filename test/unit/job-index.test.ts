/** The job rules the stores' indexes share with the engine (core/job.ts): final statuses, run deadline. */
import { describe, expect, it } from 'vitest';
import { finalStatusList, isFinal, jobStatuses, moves, runDeadlineOf } from '../../core/job.js';

const policy = (executionTimeoutMs: number) => ({ executionTimeoutMs, ttlMs: 60_000, lowPriority: false });

describe('job index rules', () => {
  it('final statuses are exactly those no move leaves but retry', () => {
    const left = new Set(
      Object.entries(moves)
        .filter(([name]) => name !== 'retry')
        .flatMap(([, move]) => move.from as readonly string[]),
    );
    expect([...finalStatusList].sort()).toEqual(jobStatuses.filter((s) => !left.has(s)).sort());
    expect(isFinal('COMPLETED')).toBe(true);
    expect(isFinal('IN_PROGRESS')).toBe(false);
  });

  it('a timeout of 0 means none; otherwise the deadline counts from the start', () => {
    expect(runDeadlineOf({ startedAt: 1_000, policy: policy(0) })).toBeUndefined();
    expect(runDeadlineOf({ startedAt: undefined, policy: policy(5_000) })).toBeUndefined();
    expect(runDeadlineOf({ startedAt: 1_000, policy: policy(5_000) })).toBe(6_000);
  });
});
