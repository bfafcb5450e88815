/**
 * What a job transition costs on DynamoDB, counted on DynamoDB Local. JobStore.update takes the job
 * the caller already read and writes with one conditional PutItem; a lost race comes back with the
 * item as it is now (ReturnValuesOnConditionCheckFailure ALL_OLD), so neither the store nor the
 * engine reads it again. Before this port shape, update read the item first: one GetItem more per
 * transition, and one more again per lost race.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DynamoJobStore, documentClient } from '../../core/adapters/aws/dynamo.js';
import { LocalChangeFeed } from '../../core/changes.js';
import { systemClock } from '../../core/clock.js';
import { JobEngine } from '../../core/engine.js';
import { makeJob } from '../contract/helpers.js';
import { type AwsFixture, dynamoClientFor, startAwsFixture } from '../support/emulators.js';

let aws: AwsFixture;
beforeAll(async () => {
  aws = await startAwsFixture({ ttl: false });
});
afterAll(async () => {
  await aws?.stop();
});

/** A job store whose DynamoDB client records the name of every command it sends. */
function countedStore() {
  const calls: string[] = [];
  const inputs: Record<string, unknown>[] = [];
  const client = dynamoClientFor(aws.dynamo.endpoint);
  client.middlewareStack.add(
    (next, context) => async (args) => {
      calls.push(String(context.commandName).replace(/Command$/, ''));
      inputs.push(args.input as Record<string, unknown>);
      return next(args);
    },
    { step: 'initialize', name: 'countCalls' },
  );
  const doc = documentClient(client);
  const jobs = new DynamoJobStore({ doc, tables: aws.tables, blobs: aws.blobs('ferry/') });
  const count = (name: string) => calls.filter((call) => call === name).length;
  const reset = () => {
    calls.splice(0);
    inputs.splice(0);
  };
  return { jobs, calls, inputs, count, reset, close: () => client.destroy() };
}

describe('DynamoDB calls per job transition', () => {
  it('an update of a job the store handed out is one PutItem and no GetItem', async () => {
    const store = countedStore();
    try {
      const job = makeJob({ id: `io-${Date.now()}-a`, createdAt: Date.now() });
      await store.jobs.create(job);
      const current = (await store.jobs.get(job.id, 0))!;
      store.reset();
      const result = await store.jobs.update(current, { status: 'IN_PROGRESS', workerId: 'w1' });
      expect(result.ok).toBe(true);
      expect(store.calls).toEqual(['PutItem']);
    } finally {
      store.close();
    }
  });

  it('a lost race answers the job as stored now, without a GetItem', async () => {
    const store = countedStore();
    try {
      const job = makeJob({ id: `io-${Date.now()}-b`, createdAt: Date.now() });
      await store.jobs.create(job);
      const stale = (await store.jobs.get(job.id, 0))!;
      const won = await store.jobs.update(stale, { status: 'IN_PROGRESS', workerId: 'w1' });
      store.reset();
      const lost = await store.jobs.update(stale, { status: 'CANCELLED' });
      expect(lost).toEqual({ ok: false, current: won.ok ? won.job : undefined });
      expect(store.calls).toEqual(['PutItem']);
    } finally {
      store.close();
    }
  });

  it('the engine cancels a queued job with one GetItem (its read) and one PutItem', async () => {
    const store = countedStore();
    const changes = new LocalChangeFeed();
    const engine = new JobEngine({
      jobs: store.jobs,
      queue: aws.queue(),
      workers: aws.workers(),
      changes,
      clock: systemClock,
    });
    try {
      const submitted = await engine.submit('io-ep', { input: { n: 1 } }, { sync: false });
      store.reset();
      expect(await engine.cancel('io-ep', submitted.id)).toMatchObject({ status: 'CANCELLED' });
      expect(store.count('GetItem')).toBe(1);
      expect(store.count('PutItem')).toBe(1);
    } finally {
      store.close();
    }
  });
});

describe('a ping renews leases with one UpdateItem per job and no read', () => {
  const engineOn = (store: ReturnType<typeof countedStore>, nowMs: number) =>
    new JobEngine({
      jobs: store.jobs,
      queue: aws.queue(),
      workers: aws.workers(),
      changes: new LocalChangeFeed(),
      clock: { now: () => nowMs } as typeof systemClock,
      settings: { leaseMs: 60_000 },
    });

  it('writes only leaseUntil, overdueAt and version, and only for the worker that holds the job', async () => {
    const store = countedStore();
    const now = Date.now();
    try {
      const job = makeJob({
        id: `io-${now}-ping`,
        endpointId: 'io-ping',
        createdAt: now,
        status: 'IN_PROGRESS',
        workerId: 'w1',
        startedAt: now,
        leaseUntil: now + 1_000,
      });
      await store.jobs.create(job);
      store.reset();
      await engineOn(store, now).ping('io-ping', 'w1', [job.id]);
      expect(store.calls).toEqual(['UpdateItem']);
      const update = store.inputs[0] as { UpdateExpression: string };
      const written = [...update.UpdateExpression.matchAll(/(\w+) =/g)].map((m) => m[1]).sort();
      expect(written).toEqual(['leaseUntil', 'overdueAt', 'version']);
      const renewed = (await store.jobs.get(job.id, now))!;
      expect(renewed).toMatchObject({
        leaseUntil: now + 60_000,
        version: 2,
        workerId: 'w1',
        input: job.input,
      });

      // Another worker's ping, or a ping for another endpoint, renews nothing.
      await engineOn(store, now + 1).ping('io-ping', 'w2', [job.id]);
      await engineOn(store, now + 1).ping('other-ep', 'w1', [job.id]);
      expect(await store.jobs.get(job.id, now)).toMatchObject({ leaseUntil: now + 60_000, version: 2 });

      // A transition decided on the job as it was before the ping loses its compare-and-set.
      const stale = await store.jobs.update({ ...job, version: 1 }, { status: 'IN_QUEUE' });
      expect(stale.ok).toBe(false);
    } finally {
      store.close();
    }
  });

  it('a lease past the run deadline keeps the job overdue at the deadline', async () => {
    const store = countedStore();
    const now = Date.now();
    try {
      const job = makeJob({
        id: `io-${now}-deadline`,
        endpointId: 'io-ping',
        createdAt: now,
        status: 'IN_PROGRESS',
        workerId: 'w1',
        startedAt: now,
        leaseUntil: now + 1_000,
        policy: { executionTimeoutMs: 10_000, ttlMs: 86_400_000, lowPriority: false },
      });
      await store.jobs.create(job);
      await engineOn(store, now).ping('io-ping', 'w1', [job.id]);
      expect(await store.jobs.get(job.id, now)).toMatchObject({ leaseUntil: now + 60_000, version: 2 });
      // Overdue by its run deadline (now + 10 s), not by the renewed lease (now + 60 s).
      const overdue = await store.jobs.listOverdue(now + 10_000, 50);
      expect(overdue.map((j) => j.id)).toContain(job.id);
    } finally {
      store.close();
    }
  });
});

describe('deleteExpired is bounded per run', () => {
  it('reads and deletes at most `limit` expired jobs, oldest first; the rest wait for the next run', async () => {
    const store = countedStore();
    try {
      // Expired long ago (no other test's job expires this early), in three final statuses.
      const expired = (['COMPLETED', 'FAILED', 'CANCELLED', 'COMPLETED', 'TIMED_OUT'] as const).map(
        (status, i) =>
          makeJob({ id: `io-${Date.now()}-exp${i}`, createdAt: 0, expiresAt: 1_000 + i, status }),
      );
      for (const job of expired) await store.jobs.create(job);
      const left = async () =>
        (await Promise.all(expired.map((job) => store.jobs.get(job.id, 0))))
          .filter(Boolean)
          .map((job) => job!.id);
      store.reset();
      expect(await store.jobs.deleteExpired(2_000, 2)).toBe(2);
      expect(await left()).toEqual(expired.slice(2).map((job) => job.id));
      // Every index query asked for at most 2 items, and 2 jobs were deleted.
      const queries = store.inputs.filter((input, i) => store.calls[i] === 'Query' && input.IndexName) as {
        Limit?: number;
      }[];
      expect(queries.length).toBeGreaterThan(0);
      for (const query of queries) expect(query.Limit).toBe(2);
      expect(store.count('DeleteItem')).toBe(2);

      expect(await store.jobs.deleteExpired(2_000, 2)).toBe(2);
      expect(await store.jobs.deleteExpired(2_000, 2)).toBe(1);
      expect(await left()).toEqual([]);
    } finally {
      store.close();
    }
  });
});
