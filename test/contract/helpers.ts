/**
 * Shared bits of the contract suites. Nothing here knows about an adapter: the suites run against
 * SQLite/files today and DynamoDB Local, fauxqs and S3 emulators later.
 */
import { randomUUID } from 'node:crypto';
import { expect } from 'vitest';
import { FerryError } from '../../core/errors.js';
import type { Job } from '../../core/job.js';

/** A unique name, so suites can share one table or queue server between tests without collisions. */
export const uniqueId = (prefix: string): string => `${prefix}-${randomUUID()}`;

/**
 * The "now" the job suites pass to the store: an hour ahead of the wall clock, so every expiresAt a
 * test writes is still in the real future and DynamoDB Local's TTL sweeper never deletes a row
 * behind the test's back (that is DynamoDB's job, not what the suite checks).
 */
export const futureBaseMs = (): number => Math.ceil((Date.now() + 3_600_000) / 1000) * 1000;

export function makeJob(overrides: Partial<Job> & { createdAt: number }): Job {
  return {
    id: uniqueId('job'),
    endpointId: 'ep-default',
    status: 'IN_QUEUE',
    input: { prompt: 'hello', n: 1 },
    policy: { executionTimeoutMs: 600_000, ttlMs: 86_400_000, lowPriority: false },
    sync: false,
    retentionMs: 1_800_000,
    expiresAt: overrides.createdAt + 86_400_000,
    attempt: 0,
    retries: 0,
    version: 1,
    ...overrides,
  };
}

export async function expectFerryError(promise: Promise<unknown>, code: FerryError['code']): Promise<void> {
  let caught: unknown;
  try {
    await promise;
  } catch (error) {
    caught = error;
  }
  expect(FerryError.is(caught), `expected a FerryError '${code}', got ${String(caught)}`).toBe(true);
  expect((caught as FerryError).code).toBe(code);
}

export const realSleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Lets pending promise callbacks and I/O callbacks run. */
export async function flush(rounds = 5): Promise<void> {
  for (let i = 0; i < rounds; i++) await new Promise((resolve) => setImmediate(resolve));
}

/** Tracks whether a promise settled yet, without awaiting it. */
export function track<T>(promise: Promise<T>): { readonly settled: boolean; promise: Promise<T> } {
  const state = { settled: false, promise };
  promise.then(
    () => {
      state.settled = true;
    },
    () => {
      state.settled = true;
    },
  );
  return state;
}
