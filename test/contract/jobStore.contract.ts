/**
 * The JobStore contract. Every adapter (SQLite, DynamoDB) must pass it unchanged.
 *
 * Time is passed in (`nowMs`), so nothing here sleeps. Ids are unique per test, and queries that span
 * endpoints (listOverdue, listExpiredUnfinished) are checked on this test's own jobs only, so several
 * tests may share one table.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Job } from '../../core/job.js';
import type { JobStore, JobUpdate } from '../../core/ports.js';
import { expectFerryError, futureBaseMs, makeJob, uniqueId } from './helpers.js';

export interface JobStoreFixture {
  jobs: JobStore;
  close(): Promise<void>;
}

export interface JobStoreContractOptions {
  /**
   * The backend deletes expired items on its own schedule (DynamoDB TTL) and `deleteExpired` may do
   * nothing and return 0. The suite then checks only that expired jobs stay invisible.
   */
  deleteExpiredIsBackground?: boolean;
}

export function describeJobStoreContract(
  name: string,
  open: () => Promise<JobStoreFixture>,
  options: JobStoreContractOptions = {},
): void {
  describe(`JobStore contract: ${name}`, () => {
    let fixture: JobStoreFixture;
    let jobs: JobStore;
    let t0: number;
    let endpointId: string;

    beforeEach(async () => {
      fixture = await open();
      jobs = fixture.jobs;
      t0 = futureBaseMs();
      endpointId = uniqueId('ep');
    });
    afterEach(async () => {
      await fixture.close();
    });

    const job = (overrides: Partial<Job> = {}): Job => makeJob({ endpointId, createdAt: t0, ...overrides });
    const ids = (list: Job[]): string[] => list.map((j) => j.id);

    describe('create and get', () => {
      it('stores a job and reads it back as written, at version 1', async () => {
        const j = job({ webhook: 'https://example.test/hook', s3Config: { bucket: 'b' } });
        await jobs.create(j);
        const read = await jobs.get(j.id, t0);
        expect(read).toEqual({ ...j, version: 1 });
      });

      it('refuses a second job with the same id with a conflict error and keeps the first', async () => {
        const j = job({ input: { first: true } });
        await jobs.create(j);
        await expectFerryError(jobs.create({ ...j, input: { first: false } }), 'conflict');
        expect((await jobs.get(j.id, t0))?.input).toEqual({ first: true });
      });

      it('reads an unknown id as undefined', async () => {
        expect(await jobs.get(uniqueId('missing'), t0)).toBeUndefined();
      });

      it('reads a job without its input when asked; an update of that job keeps the stored input', async () => {
        // A small input and one over DynamoDB's inline budget (an S3 object there).
        for (const input of [{ small: true }, { big: 'x'.repeat(200 * 1024) }]) {
          const j = job({ input, webhook: 'https://example.test/hook' });
          await jobs.create(j);
          const bare = (await jobs.get(j.id, t0, { input: false }))!;
          expect(bare).toEqual({ ...j, input: undefined, version: 1 });
          expect('input' in bare).toBe(false);
          const result = await jobs.update(bare, {
            status: 'IN_PROGRESS',
            workerId: 'w1',
            startedAt: t0 + 1,
          });
          expect(result.ok).toBe(true);
          const read = await jobs.get(j.id, t0);
          expect(read?.input).toEqual(input);
          expect(read).toMatchObject({ status: 'IN_PROGRESS', workerId: 'w1', version: 2 });
        }
      });

      it("reads the input only of an unfinished job when asked for 'unfinished'; an update of a finished one keeps it", async () => {
        for (const input of [{ small: true }, { big: 'x'.repeat(200 * 1024) }]) {
          const j = job({ input });
          await jobs.create(j);
          // Queued, then running: the view of either shows the input (docs/api.md), so it is read.
          expect((await jobs.get(j.id, t0, { input: 'unfinished' }))?.input).toEqual(input);
          const running = await jobs.update((await jobs.get(j.id, t0))!, {
            status: 'IN_PROGRESS',
            workerId: 'w1',
          });
          expect(running.ok).toBe(true);
          expect((await jobs.get(j.id, t0, { input: 'unfinished' }))?.input).toEqual(input);
          const done = await jobs.update((running as { job: Job }).job, {
            status: 'COMPLETED',
            output: { ok: 1 },
          });
          expect(done.ok).toBe(true);
          // Finished: its view has no input, so none is read.
          const finished = (await jobs.get(j.id, t0, { input: 'unfinished' }))!;
          expect(finished).toMatchObject({ status: 'COMPLETED', output: { ok: 1 }, version: 3 });
          expect('input' in finished).toBe(false);
          // A ?ttl= on /status updates the job read that way; the stored input stays.
          const kept = await jobs.update(finished, { expiresAt: t0 + 120_000, retentionMs: 120_000 });
          expect(kept.ok).toBe(true);
          expect((await jobs.get(j.id, t0))?.input).toEqual(input);
        }
      });

      it('reads a job as absent from the moment it expires', async () => {
        const j = job({ expiresAt: t0 + 1_000 });
        await jobs.create(j);
        expect(await jobs.get(j.id, t0 + 999)).toBeDefined();
        expect(await jobs.get(j.id, t0 + 1_000)).toBeUndefined();
        expect(await jobs.get(j.id, t0 + 5_000)).toBeUndefined();
      });
    });

    describe('update (compare-and-set on version)', () => {
      /** The job as the store hands it out: update takes it as the current state. */
      const stored = async (id: string) => (await jobs.get(id, t0))!;
      const written = (result: JobUpdate) => {
        expect(result.ok).toBe(true);
        return (result as { job: Job }).job;
      };

      it('applies a patch at the current version and bumps the version', async () => {
        const j = job();
        await jobs.create(j);
        const result = written(
          await jobs.update(await stored(j.id), {
            status: 'IN_PROGRESS',
            startedAt: t0 + 10,
            leaseUntil: t0 + 60_010,
            workerId: 'w1',
            attempt: 1,
          }),
        );
        expect(result).toMatchObject({
          id: j.id,
          status: 'IN_PROGRESS',
          workerId: 'w1',
          attempt: 1,
          version: 2,
        });
        expect(await jobs.get(j.id, t0)).toEqual(result);
      });

      it('refuses a stale job and answers the job as stored now; a missing job answers undefined', async () => {
        const j = job();
        await jobs.create(j);
        const first = await stored(j.id);
        const now = written(await jobs.update(first, { status: 'IN_PROGRESS' }));
        const lost = await jobs.update(first, { status: 'CANCELLED' });
        expect(lost).toEqual({ ok: false, current: now });
        expect((await jobs.get(j.id, t0))?.status).toBe('IN_PROGRESS');
        const gone = { ...first, id: uniqueId('missing') };
        expect(await jobs.update(gone, { status: 'CANCELLED' })).toEqual({ ok: false, current: undefined });
      });

      it('renews the lease only of a job the worker holds, bumps the version, and keeps the rest', async () => {
        const running = { status: 'IN_PROGRESS' as const, startedAt: t0, workerId: 'w1', attempt: 1 };
        const held = job({ ...running, leaseUntil: t0 + 500 });
        const queued = job({ leaseUntil: undefined });
        for (const j of [held, queued]) await jobs.create(j);
        const before = await stored(held.id);
        const lease = { jobId: held.id, endpointId, workerId: 'w1', leaseUntil: t0 + 90_000, nowMs: t0 };

        expect(await jobs.renewLease({ ...lease, workerId: 'w2' })).toBe(false);
        expect(await jobs.renewLease({ ...lease, endpointId: 'other' })).toBe(false);
        expect(await jobs.renewLease({ ...lease, jobId: queued.id })).toBe(false);
        expect(await jobs.renewLease({ ...lease, jobId: uniqueId('missing') })).toBe(false);
        expect(await jobs.renewLease({ ...lease, nowMs: held.expiresAt })).toBe(false);
        expect(await stored(held.id)).toEqual(before);

        expect(await jobs.renewLease(lease)).toBe(true);
        const after = await stored(held.id);
        expect(after).toEqual({ ...before, leaseUntil: t0 + 90_000, version: before.version + 1 });
        // A transition decided on the job as it was before the renewal loses, and sees the renewal.
        expect(await jobs.update(before, { status: 'IN_QUEUE' })).toEqual({ ok: false, current: after });
        expect(
          written(await jobs.update(after, { status: 'COMPLETED', leaseUntil: undefined })).version,
        ).toBe(before.version + 2);
      });

      it('lets exactly one of two concurrent updates from the same version win', async () => {
        const j = job();
        await jobs.create(j);
        const base = await stored(j.id);
        const [a, b] = await Promise.all([
          jobs.update(base, { status: 'CANCELLED', finishedAt: t0 + 5 }),
          jobs.update(base, { status: 'IN_PROGRESS', startedAt: t0 + 5, workerId: 'w1' }),
        ]);
        const winners = [a, b].filter((x) => x.ok);
        expect(winners).toHaveLength(1);
        const loser = [a, b].find((x) => !x.ok) as { current: Job };
        const now = await jobs.get(j.id, t0);
        expect(now?.version).toBe(2);
        expect(now?.status).toBe((winners[0] as { job: Job }).job.status);
        expect(loser.current).toEqual(now);
      });

      it('updateMany applies each change as update would, answers in order, and skips only the stale ones', async () => {
        const queued = Array.from({ length: 12 }, (_, i) => job({ input: { i } }));
        // One over DynamoDB's inline budget: its input is an S3 object there, kept as it is.
        queued.push(job({ input: { big: 'x'.repeat(200 * 1024) } }));
        for (const j of queued) await jobs.create(j);
        const current = await Promise.all(queued.map((j) => stored(j.id)));
        // Two of them move on before the batch: a worker takes one, a cancel ends the other.
        const taken = written(await jobs.update(current[3]!, { status: 'IN_PROGRESS', workerId: 'w1' }));
        const cancelled = written(
          await jobs.update(current[8]!, { status: 'CANCELLED', finishedAt: t0 + 1 }),
        );
        const gone = { ...current[0]!, id: uniqueId('missing') };
        const patch = { status: 'FAILED' as const, finishedAt: t0 + 2, error: 'no worker can start' };

        const results = await jobs.updateMany([...current, gone].map((j) => ({ current: j, patch })));
        expect(results).toHaveLength(current.length + 1);
        expect(results[3]).toEqual({ ok: false, current: taken });
        expect(results[8]).toEqual({ ok: false, current: cancelled });
        expect(results[current.length]).toEqual({ ok: false, current: undefined });
        for (const [i, j] of current.entries()) {
          if (i === 3 || i === 8) continue;
          const after = written(results[i]!);
          expect(after).toEqual({ ...j, ...patch, version: j.version + 1 });
          expect(await jobs.get(j.id, t0)).toEqual(after);
        }
        expect(await jobs.updateMany([])).toEqual([]);
        expect(await jobs.counts(endpointId, t0 + 100)).toEqual({
          inQueue: 0,
          inProgress: 1,
          completed: 0,
          failed: 11,
          retried: 0,
        });
      });

      it('keeps versions strictly increasing over many sequential updates', async () => {
        const j = job();
        await jobs.create(j);
        let current = await stored(j.id);
        for (let i = 0; i < 5; i++) {
          const next = written(await jobs.update(current, { output: { step: i } }));
          expect(next.version).toBe(current.version + 1);
          current = next;
        }
        expect(await jobs.get(j.id, t0)).toMatchObject({ version: 6, output: { step: 4 } });
      });

      it('removes a field whose key is present with the value undefined, and keeps the rest', async () => {
        const j = job({
          status: 'FAILED',
          output: { partial: [1, 2] },
          error: 'boom',
          workerId: 'w1',
          startedAt: t0 + 1,
          finishedAt: t0 + 2,
        });
        await jobs.create(j);
        const result = written(
          await jobs.update(await stored(j.id), {
            status: 'IN_QUEUE',
            output: undefined,
            error: undefined,
            workerId: undefined,
            retries: 1,
          }),
        );
        for (const job of [result, await jobs.get(j.id, t0)]) {
          expect(job).toBeDefined();
          expect(job).not.toHaveProperty('output');
          expect(job).not.toHaveProperty('error');
          expect(job).not.toHaveProperty('workerId');
          expect(job).toMatchObject({ status: 'IN_QUEUE', retries: 1, startedAt: t0 + 1, input: j.input });
        }
      });

      it('keeps the identity: id and endpointId do not change', async () => {
        const j = job();
        await jobs.create(j);
        const sneaky = { endpointId: 'other', status: 'IN_PROGRESS' } as unknown as Parameters<
          JobStore['update']
        >[1];
        const result = written(await jobs.update(await stored(j.id), sneaky));
        expect(result.endpointId).toBe(endpointId);
        expect((await jobs.get(j.id, t0))?.endpointId).toBe(endpointId);
      });

      it("keeps who submitted a job (a call token's endpoint) through its moves, read with or without input", async () => {
        const j = job({ submittedBy: 'callerep' });
        await jobs.create(j);
        let current = written(
          await jobs.update(await stored(j.id), { status: 'IN_PROGRESS', workerId: 'w1', startedAt: t0 + 1 }),
        );
        current = written(await jobs.update(current, { status: 'FAILED', finishedAt: t0 + 2, error: 'x' }));
        current = written(
          await jobs.update(current, {
            status: 'IN_QUEUE',
            error: undefined,
            workerId: undefined,
            retries: 1,
          }),
        );
        expect(current.submittedBy).toBe('callerep');
        expect((await jobs.get(j.id, t0))?.submittedBy).toBe('callerep');
        expect((await jobs.get(j.id, t0, { input: false }))?.submittedBy).toBe('callerep');
        expect((await jobs.listByStatus(endpointId, 'IN_QUEUE', t0, 10))[0]?.submittedBy).toBe('callerep');
        // A client key's job has none.
        const plain = job();
        await jobs.create(plain);
        expect(await jobs.get(plain.id, t0)).not.toHaveProperty('submittedBy');
      });
    });

    describe('queries', () => {
      it('lists unexpired jobs of one endpoint in one status, oldest first, up to the limit', async () => {
        const b = job({ createdAt: t0 + 2 });
        const a = job({ createdAt: t0 + 1 });
        const c = job({ createdAt: t0 + 3 });
        const done = job({ createdAt: t0, status: 'COMPLETED' });
        const elsewhere = job({ endpointId: uniqueId('ep'), createdAt: t0 });
        const expired = job({ createdAt: t0, expiresAt: t0 + 100 });
        for (const j of [b, a, c, done, elsewhere, expired]) await jobs.create(j);

        expect(ids(await jobs.listByStatus(endpointId, 'IN_QUEUE', t0 + 100, 10))).toEqual([
          a.id,
          b.id,
          c.id,
        ]);
        expect(ids(await jobs.listByStatus(endpointId, 'IN_QUEUE', t0 + 100, 2))).toEqual([a.id, b.id]);
        expect(ids(await jobs.listByStatus(endpointId, 'IN_QUEUE', t0 + 50, 10))).toContain(expired.id);
        expect(ids(await jobs.listByStatus(endpointId, 'COMPLETED', t0 + 100, 10))).toEqual([done.id]);
        expect(await jobs.listByStatus(endpointId, 'FAILED', t0 + 100, 10)).toEqual([]);
        // createdFrom: at or after that submit time only (a batch walk's next listing).
        expect(
          ids(await jobs.listByStatus(endpointId, 'IN_QUEUE', t0 + 100, 10, { createdFrom: t0 + 2 })),
        ).toEqual([b.id, c.id]);
        expect(
          await jobs.listByStatus(endpointId, 'IN_QUEUE', t0 + 100, 10, { createdFrom: t0 + 4 }),
        ).toEqual([]);
      });

      it('finds running jobs whose lease lapsed or whose execution timeout passed', async () => {
        const running = { status: 'IN_PROGRESS' as const, startedAt: t0, workerId: 'w1', attempt: 1 };
        const lapsed = job({ ...running, leaseUntil: t0 + 500 });
        const healthy = job({ ...running, leaseUntil: t0 + 60_000 });
        const timedOut = job({
          ...running,
          leaseUntil: t0 + 60_000,
          policy: { executionTimeoutMs: 800, ttlMs: 86_400_000, lowPriority: false },
        });
        const queued = job({ leaseUntil: t0 + 1 });
        const finished = job({ status: 'COMPLETED', leaseUntil: t0 + 1, startedAt: t0 });
        for (const j of [lapsed, healthy, timedOut, queued, finished]) await jobs.create(j);

        const mine = new Set([lapsed.id, healthy.id, timedOut.id, queued.id, finished.id]);
        const overdue = async (nowMs: number) =>
          ids(await jobs.listOverdue(nowMs, 1_000))
            .filter((id) => mine.has(id))
            .sort();

        expect(await overdue(t0 + 100)).toEqual([]);
        expect(await overdue(t0 + 500)).toEqual([lapsed.id]);
        expect(await overdue(t0 + 1_000)).toEqual([lapsed.id, timedOut.id].sort());
        // A renewed lease takes the job off the list.
        await jobs.update((await jobs.get(lapsed.id, 0))!, { leaseUntil: t0 + 90_000 });
        expect(await overdue(t0 + 1_000)).toEqual([timedOut.id]);
        expect(await overdue(t0 + 60_000)).toEqual([healthy.id, timedOut.id].sort());
        // So does renewLease; on a job past its run deadline it stays on the list.
        const renewal = { endpointId, workerId: 'w1', leaseUntil: t0 + 70_000, nowMs: t0 + 1_000 };
        expect(await jobs.renewLease({ ...renewal, jobId: healthy.id })).toBe(true);
        expect(await jobs.renewLease({ ...renewal, jobId: timedOut.id })).toBe(true);
        expect(await overdue(t0 + 60_000)).toEqual([timedOut.id]);
      });

      it('finds jobs that expired before they ended (which get hides)', async () => {
        const queued = job({ expiresAt: t0 + 500 });
        const running = job({
          status: 'IN_PROGRESS',
          startedAt: t0,
          leaseUntil: t0 + 60_000,
          expiresAt: t0 + 500,
        });
        const done = job({ status: 'COMPLETED', expiresAt: t0 + 500 });
        const cancelled = job({ status: 'CANCELLED', expiresAt: t0 + 500 });
        const later = job({ expiresAt: t0 + 5_000 });
        for (const j of [queued, running, done, cancelled, later]) await jobs.create(j);

        const mine = new Set([queued.id, running.id, done.id, cancelled.id, later.id]);
        const expiredUnfinished = async (nowMs: number) =>
          ids(await jobs.listExpiredUnfinished(nowMs, 1_000))
            .filter((id) => mine.has(id))
            .sort();

        expect(await expiredUnfinished(t0 + 499)).toEqual([]);
        expect(await expiredUnfinished(t0 + 1_000)).toEqual([queued.id, running.id].sort());
        expect(await jobs.get(queued.id, t0 + 1_000)).toBeUndefined();
        // Once finalised it is no longer unfinished.
        await jobs.update((await jobs.get(running.id, 0))!, { status: 'CANCELLED' });
        expect(await expiredUnfinished(t0 + 1_000)).toEqual([queued.id]);
      });

      it('lists overdue and expired jobs without their inputs when asked; an update of one keeps the stored input', async () => {
        // A small input and one over DynamoDB's inline budget (an S3 object there).
        for (const input of [{ small: true }, { big: 'x'.repeat(200 * 1024) }]) {
          const lapsed = job({
            input,
            status: 'IN_PROGRESS',
            startedAt: t0,
            workerId: 'w1',
            leaseUntil: t0 + 500,
          });
          const expired = job({ input, expiresAt: t0 + 500 });
          for (const j of [lapsed, expired]) await jobs.create(j);
          const mine = (list: Job[]) => list.filter((j) => j.id === lapsed.id || j.id === expired.id);

          const [overdue] = mine(await jobs.listOverdue(t0 + 1_000, 1_000, { input: false }));
          const [unfinished] = mine(await jobs.listExpiredUnfinished(t0 + 1_000, 1_000, { input: false }));
          expect(overdue).toEqual({ ...lapsed, input: undefined, version: 1 });
          expect(unfinished).toEqual({ ...expired, input: undefined, version: 1 });
          expect('input' in (overdue as Job) || 'input' in (unfinished as Job)).toBe(false);
          // Without options, as ever: whole.
          expect(mine(await jobs.listOverdue(t0 + 1_000, 1_000))).toEqual([{ ...lapsed, version: 1 }]);
          expect(mine(await jobs.listExpiredUnfinished(t0 + 1_000, 1_000))).toEqual([
            { ...expired, version: 1 },
          ]);

          const requeued = await jobs.update(overdue as Job, {
            status: 'IN_QUEUE',
            workerId: undefined,
            leaseUntil: undefined,
          });
          const cancelled = await jobs.update(unfinished as Job, {
            status: 'CANCELLED',
            finishedAt: t0 + 1_000,
          });
          expect(requeued.ok && cancelled.ok).toBe(true);
          expect((await jobs.get(lapsed.id, t0))?.input).toEqual(input);
          expect((await jobs.get(expired.id, t0))?.input).toEqual(input);
        }
      });

      it('counts the unexpired jobs of one endpoint by status (failed includes TIMED_OUT)', async () => {
        const statuses = [
          'IN_QUEUE',
          'IN_QUEUE',
          'IN_PROGRESS',
          'COMPLETED',
          'FAILED',
          'TIMED_OUT',
          'CANCELLED',
        ] as const;
        for (const status of statuses) await jobs.create(job({ status }));
        await jobs.create(job({ status: 'IN_QUEUE', retries: 2 }));
        await jobs.create(job({ status: 'COMPLETED', expiresAt: t0 + 10 }));
        await jobs.create(job({ status: 'FAILED', retries: 1, expiresAt: t0 + 10 }));
        await jobs.create(job({ endpointId: uniqueId('ep'), status: 'IN_QUEUE' }));

        expect(await jobs.counts(endpointId, t0 + 100)).toEqual({
          inQueue: 3,
          inProgress: 1,
          completed: 1,
          failed: 2,
          retried: 1,
        });
        expect(await jobs.counts(uniqueId('ep'), t0)).toEqual({
          inQueue: 0,
          inProgress: 0,
          completed: 0,
          failed: 0,
          retried: 0,
        });
      });
    });

    describe('stream chunks', () => {
      it('hands out appended chunks in order, each once, per job', async () => {
        const a = job();
        const b = job();
        await jobs.create(a);
        await jobs.create(b);
        await jobs.appendStream(a.id, [{ text: ['a1'] }, { text: ['a2'] }]);
        await jobs.appendStream(b.id, [{ text: ['b1'] }]);
        await jobs.appendStream(a.id, [{ text: ['a3'] }, 'plain', 42, null]);
        await jobs.appendStream(a.id, []);

        expect(await jobs.drainStream(a.id)).toEqual([
          { text: ['a1'] },
          { text: ['a2'] },
          { text: ['a3'] },
          'plain',
          42,
          null,
        ]);
        expect(await jobs.drainStream(a.id)).toEqual([]);
        await jobs.appendStream(a.id, [{ text: ['a4'] }]);
        expect(await jobs.drainStream(a.id)).toEqual([{ text: ['a4'] }]);
        expect(await jobs.drainStream(b.id)).toEqual([{ text: ['b1'] }]);
        expect(await jobs.drainStream(uniqueId('missing'))).toEqual([]);
      });

      it('never hands the same chunk to two concurrent drains', async () => {
        const j = job();
        await jobs.create(j);
        const total = 40;
        await jobs.appendStream(
          j.id,
          Array.from({ length: total / 2 }, (_, i) => ({ i })),
        );
        const [first, second, third] = await Promise.all([
          jobs.drainStream(j.id),
          jobs
            .appendStream(
              j.id,
              Array.from({ length: total / 2 }, (_, i) => ({ i: i + total / 2 })),
            )
            .then(() => jobs.drainStream(j.id)),
          jobs.drainStream(j.id),
        ]);
        const rest = await jobs.drainStream(j.id);
        const seen = [first, second, third, rest].flat().map((c) => (c as { i: number }).i);
        expect([...seen].sort((x, y) => x - y)).toEqual(Array.from({ length: total }, (_, i) => i));
        // Each drain's own slice is in order.
        for (const part of [first, second, third, rest]) {
          const order = part.map((c) => (c as { i: number }).i);
          expect(order).toEqual([...order].sort((x, y) => x - y));
        }
      });

      it('reads the chunks so far without handing any out, the handed-out ones too, until cleared', async () => {
        const j = job();
        await jobs.create(j);
        expect(await jobs.readStream(j.id, 0)).toEqual({ chunks: [], next: 0 });
        expect(await jobs.hasStream(j.id)).toBe(false);
        await jobs.appendStream(j.id, [1, { two: 2 }]);
        expect(await jobs.hasStream(j.id)).toBe(true);
        const first = await jobs.readStream(j.id, 0);
        expect(first.chunks).toEqual([1, { two: 2 }]);
        // Read, not handed out: the job's client still gets them, and they stay readable after.
        expect(await jobs.drainStream(j.id)).toEqual([1, { two: 2 }]);
        await jobs.appendStream(j.id, [3]);
        expect((await jobs.readStream(j.id, 0)).chunks).toEqual([1, { two: 2 }, 3]);
        const second = await jobs.readStream(j.id, first.next);
        expect(second.chunks).toEqual([3]);
        expect(await jobs.readStream(j.id, second.next)).toEqual({ chunks: [], next: second.next });
        expect(await jobs.drainStream(j.id)).toEqual([3]);
        // A retry's clear: the chunks of the attempt before are gone for readers too.
        await jobs.clearStream(j.id);
        expect((await jobs.readStream(j.id, 0)).chunks).toEqual([]);
        expect(await jobs.hasStream(j.id)).toBe(false);
        await jobs.appendStream(j.id, [4]);
        expect(await jobs.hasStream(j.id)).toBe(true);
        expect((await jobs.readStream(j.id, second.next)).chunks).toEqual([4]);
        expect((await jobs.readStream(j.id, 0)).chunks).toEqual([4]);
        expect(await jobs.drainStream(j.id)).toEqual([4]);
        expect(await jobs.readStream(uniqueId('missing'), 0)).toEqual({ chunks: [], next: 0 });
        expect(await jobs.hasStream(uniqueId('missing'))).toBe(false);
      });

      it('clears every chunk of a job', async () => {
        const j = job();
        await jobs.create(j);
        await jobs.appendStream(j.id, [1, 2, 3]);
        await jobs.clearStream(j.id);
        expect(await jobs.drainStream(j.id)).toEqual([]);
        await jobs.appendStream(j.id, [4]);
        expect(await jobs.drainStream(j.id)).toEqual([4]);
      });
    });

    describe('deleteExpired', () => {
      it('deletes expired finished jobs and keeps unexpired ones', async () => {
        const old = job({ status: 'COMPLETED', expiresAt: t0 + 100, output: { ok: true } });
        const fresh = job({ status: 'COMPLETED', expiresAt: t0 + 10_000 });
        await jobs.create(old);
        await jobs.create(fresh);
        await jobs.appendStream(old.id, [{ chunk: 1 }]);

        const removed = await jobs.deleteExpired(t0 + 1_000, 100);
        expect(removed).toBeGreaterThanOrEqual(options.deleteExpiredIsBackground ? 0 : 1);
        expect(await jobs.get(old.id, t0 + 1_000)).toBeUndefined();
        expect(await jobs.get(fresh.id, t0 + 1_000)).toMatchObject({ id: fresh.id, status: 'COMPLETED' });
        if (!options.deleteExpiredIsBackground) {
          // Gone for real: even a read with an earlier clock finds nothing, and its chunks went too.
          expect(await jobs.get(old.id, t0)).toBeUndefined();
          expect(await jobs.drainStream(old.id)).toEqual([]);
          expect((await jobs.readStream(old.id, 0)).chunks).toEqual([]);
          expect(await jobs.deleteExpired(t0 + 1_000, 100)).toBe(0);
        }
      });
    });
  });
}
