/**
 * The engine's time-dependent rules with a fake clock and the real SQLite store: retention, policy.ttl,
 * `?ttl=`, leases, execution timeouts, and the lease-expiry-against-job-done race. No sleeps. Every
 * rule runs twice: with take composed of queue receive + compare-and-set + ack (as on AWS), and with
 * the store's one-write take (EngineDeps.takeQueued, as the local platform wires it).
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type LocalDatabase, openLocalDatabase } from '../../core/adapters/local/sqlite.js';
import { LocalChangeFeed } from '../../core/changes.js';
import { FakeClock } from '../../core/clock.js';
import { type EngineDeps, JobEngine, splitChunk } from '../../core/engine.js';
import { JsonText, parseJsonExact, stringifyJsonExact } from '../../core/json.js';
import { limits } from '../../core/limits.js';
import { silentLogger } from '../../core/log.js';
import type { JobReadOptions, JobStore } from '../../core/ports.js';
import { WorkerSupervisor } from '../../core/supervisor.js';
import { localEngine } from '../support/localEngine.js';

const ep = 'ep';
let clock: FakeClock;
let db: LocalDatabase;
let engine: JobEngine;

afterEach(async () => {
  await db.close();
});

const minutes = (m: number) => m * 60_000;

/** `target` with the methods of `own` in place of its own. */
const over = <T extends object>(target: T, own: Partial<T>): T =>
  new Proxy(target, {
    get(store, key) {
      if (key in own) return own[key as keyof T];
      const value = Reflect.get(store, key);
      return typeof value === 'function' ? value.bind(store) : value;
    },
  });

async function runAndFinish(sync = false, waitMs?: number) {
  const job = await engine.submit(ep, { input: {} }, { sync, waitMs });
  const [taken] = await engine.take(ep, 'w1', 1, 0);
  expect(taken?.id).toBe(job.id);
  await engine.done(ep, 'w1', job.id, { output: 'ok' });
  return job.id;
}

describe.each([{ take: 'composed' }, { take: 'one write' }])('take $take', ({ take }) => {
  beforeEach(() => {
    clock = new FakeClock();
    db = openLocalDatabase(':memory:', { clock });
    engine = localEngine(
      db,
      clock,
      { leaseMs: 30_000, maxAttempts: 2 },
      { composedTake: take === 'composed' },
    );
  });

  describe('retention', () => {
    it('keeps /run results 30 minutes after completion, then 404', async () => {
      const id = await runAndFinish();
      clock.advance(minutes(30) - 1);
      expect((await engine.status(ep, id)).status).toBe('COMPLETED');
      clock.advance(1);
      await expect(engine.status(ep, id)).rejects.toMatchObject({ code: 'not_found' });
    });

    it('keeps /runsync results 1 minute', async () => {
      const id = await runAndFinish(true, 90_000);
      clock.advance(minutes(1) - 1);
      expect((await engine.status(ep, id)).status).toBe('COMPLETED');
      clock.advance(1);
      await expect(engine.status(ep, id)).rejects.toMatchObject({ code: 'not_found' });
    });

    it.each([
      [200_000, 200_000],
      [300_000, minutes(5)],
      [5_000, minutes(1)],
    ])('a runsync wait of %d ms keeps results %d ms', async (waitMs, keptMs) => {
      const id = await runAndFinish(true, waitMs);
      clock.advance(keptMs - 1);
      expect((await engine.status(ep, id)).status).toBe('COMPLETED');
      clock.advance(1);
      await expect(engine.status(ep, id)).rejects.toMatchObject({ code: 'not_found' });
    });

    it('?ttl= sets the time-to-live from now', async () => {
      const id = await runAndFinish();
      await engine.status(ep, id, 6_000);
      clock.advance(5_999);
      expect((await engine.status(ep, id)).status).toBe('COMPLETED');
      clock.advance(1);
      await expect(engine.status(ep, id)).rejects.toMatchObject({ code: 'not_found' });
    });

    it('?ttl= keeps a result at most limits.jobLifetimeMaxMs after submission, however often it is asked', async () => {
      const submittedAt = clock.now();
      const id = await runAndFinish();
      const day = 24 * 3_600_000;
      // Renewing a 7-day retention every 5 days would keep the job forever without the cap.
      for (let i = 0; i < 2; i++) {
        await engine.status(ep, id, limits.ttlMaxMs);
        clock.advance(5 * day);
      }
      await engine.status(ep, id, limits.ttlMaxMs);
      clock.set(submittedAt + limits.jobLifetimeMaxMs - 1);
      expect((await engine.status(ep, id)).status).toBe('COMPLETED');
      clock.advance(1);
      await expect(engine.status(ep, id)).rejects.toMatchObject({ code: 'not_found' });
    });

    it('retry is refused once results expired', async () => {
      const job = await engine.submit(ep, { input: {} }, { sync: false });
      await engine.take(ep, 'w1', 1, 0);
      await engine.done(ep, 'w1', job.id, { error: 'bad' });
      clock.advance(limits.runRetentionMs);
      await expect(engine.retry(ep, job.id)).rejects.toMatchObject({ code: 'not_found' });
    });
  });

  describe('policy.ttl', () => {
    it('a job still queued when its ttl runs out reads as 404 and is never handed out', async () => {
      const job = await engine.submit(ep, { input: {}, policy: { ttl: 10_000 } }, { sync: false });
      clock.advance(10_000);
      await expect(engine.status(ep, job.id)).rejects.toMatchObject({ code: 'not_found' });
      expect((await engine.sweep()).expired).toBe(1);
      expect(await engine.take(ep, 'w1', 1, 0)).toEqual([]);
      expect((await engine.health(ep)).jobs.inQueue).toBe(0);
    });

    it('a running job past its ttl is stopped', async () => {
      const job = await engine.submit(ep, { input: {}, policy: { ttl: 10_000 } }, { sync: false });
      await engine.take(ep, 'w1', 1, 0);
      clock.advance(10_000);
      await engine.sweep();
      expect(await engine.jobsToStop(ep, 'w1', 0)).toEqual([job.id]);
    });

    it('a job the sweep ends past its ttl still reads as 404, sends its webhook once and is deleted', async () => {
      const sent: { url: string; body: unknown }[] = [];
      engine = localEngine(
        db,
        clock,
        { leaseMs: 30_000, maxAttempts: 2 },
        { composedTake: take === 'composed', webhooks: { send: (url, body) => sent.push({ url, body }) } },
      );
      const policy = { ttl: 10_000 };
      const running = await engine.submit(
        ep,
        { input: { n: 'running' }, webhook: 'https://example.test/running', policy },
        { sync: false },
      );
      await engine.take(ep, 'w1', 1, 0);
      const queued = await engine.submit(
        ep,
        { input: { n: 'queued' }, webhook: 'https://example.test/queued', policy },
        { sync: false },
      );
      clock.advance(10_000);
      for (const job of [running, queued])
        await expect(engine.status(ep, job.id)).rejects.toMatchObject({ code: 'not_found' });

      expect((await engine.sweep()).expired).toBe(2);
      // A client polling /status saw 404 at the ttl: the job never comes back, not even as ended.
      for (const job of [running, queued])
        await expect(engine.status(ep, job.id)).rejects.toMatchObject({ code: 'not_found' });
      clock.advance(minutes(1));
      for (const job of [running, queued])
        await expect(engine.status(ep, job.id)).rejects.toMatchObject({ code: 'not_found' });
      expect(await engine.jobsToStop(ep, 'w1', 0)).toEqual([running.id]);
      expect((await engine.sweep()).expired).toBe(0);
      expect(sent).toEqual([
        {
          url: 'https://example.test/running',
          body: expect.objectContaining({ id: running.id, status: 'TIMED_OUT', input: { n: 'running' } }),
        },
        {
          url: 'https://example.test/queued',
          body: expect.objectContaining({ id: queued.id, status: 'CANCELLED', input: { n: 'queued' } }),
        },
      ]);
      expect(await db.jobs.deleteExpired(clock.now(), 10)).toBe(2);
    });
  });

  describe('sweeps and batch moves on jobs listed without their inputs', () => {
    const hook = 'https://example.test/hook';
    const withStore = (jobs: JobStore, extra: Pick<EngineDeps, 'warn' | 'webhooks'> = {}) =>
      localEngine(
        db,
        clock,
        { leaseMs: 30_000, maxAttempts: 2 },
        { composedTake: take === 'composed', jobs, ...extra },
      );

    it('a job whose move throws is reported and left for the next sweep; the others are still swept', async () => {
      const ids = [];
      for (let i = 0; i < 3; i++) ids.push((await engine.submit(ep, { input: {} }, { sync: false })).id);
      await engine.take(ep, 'w1', 3, 0);
      const [broken] = ids as [string];
      const warnings: string[] = [];
      engine = withStore(
        over(db.jobs, {
          update: async (current, patch) => {
            if (current.id === broken) throw new Error('write refused');
            return db.jobs.update(current, patch);
          },
        }),
        { warn: (line) => warnings.push(line) },
      );
      clock.advance(30_000);
      expect(await engine.sweep()).toMatchObject({ requeued: 2, left: 1 });
      expect(warnings).toEqual([`job ${broken} left for the next sweep: write refused`]);
      expect((await engine.status(ep, broken)).status).toBe('IN_PROGRESS');
      for (const id of ids.slice(1)) expect((await engine.status(ep, id)).status).toBe('IN_QUEUE');
    });

    it('purge leaves a job with a webhook that a worker took between its listing and its whole read', async () => {
      const sent: unknown[] = [];
      let raced = false;
      engine = withStore(
        over(db.jobs, {
          get: async (jobId, nowMs, options) => {
            // The whole read (no options) of the listed job: a worker takes it just before.
            if (options === undefined && !raced) {
              raced = true;
              expect(await engine.take(ep, 'w1', 1, 0)).toMatchObject([{ id: jobId }]);
            }
            return db.jobs.get(jobId, nowMs, options);
          },
        }),
        { webhooks: { send: (_url, body) => sent.push(body) } },
      );
      const job = await engine.submit(ep, { input: {}, webhook: hook }, { sync: false });
      expect(await engine.purge(ep)).toEqual({ removed: 0, status: 'completed' });
      // Purge cancels queued jobs only: running ones keep running.
      expect((await engine.status(ep, job.id)).status).toBe('IN_PROGRESS');
      expect(await engine.jobsToStop(ep, 'w1', 0)).toEqual([]);
      expect(sent).toEqual([]);
    });

    it('a purge reads its webhook jobs whole a few at a time, and each webhook carries its input', async () => {
      let reading = 0;
      let mostAtOnce = 0;
      const sent: { id: string; input?: unknown }[] = [];
      engine = withStore(
        over(db.jobs, {
          get: async (jobId, nowMs, options) => {
            reading++;
            mostAtOnce = Math.max(mostAtOnce, reading);
            // Yield, so that reads started side by side overlap (SQLite answers at once).
            await new Promise((resolve) => setImmediate(resolve));
            reading--;
            return db.jobs.get(jobId, nowMs, options);
          },
        }),
        { webhooks: { send: (_url, body) => sent.push(body as never) } },
      );
      const ids = [];
      for (let i = 0; i < 40; i++)
        ids.push((await engine.submit(ep, { input: { i }, webhook: hook }, { sync: false })).id);
      expect(await engine.purge(ep)).toEqual({ removed: 40, status: 'completed' });
      expect(mostAtOnce).toBeGreaterThan(1);
      expect(mostAtOnce).toBeLessThanOrEqual(8);
      expect(sent.map((body) => [body.id, body.input])).toEqual(ids.map((id, i) => [id, { i }]));
    });
  });

  describe('JSON the engine turns into text keeps integers beyond 2^53 exact (core/json.ts)', () => {
    const exact = (text: string) => parseJsonExact(Buffer.from(text), 'Request body');

    it('an error object reaches clients as its JSON text with every digit', async () => {
      const job = await engine.submit(ep, { input: {} }, { sync: false });
      await engine.take(ep, 'w1', 1, 0);
      await engine.done(ep, 'w1', job.id, { error: exact('{"code":18446744073709551615}') });
      expect((await engine.status(ep, job.id)).error).toBe('{"code":18446744073709551615}');
    });

    it('a view written straight out holds an unfinished input as the stored text; other reads parse it', async () => {
      const input = exact(`{"seed":18446744073709551615,"text":"${'x'.repeat(70_000)}"}`) as Record<
        string,
        unknown
      >;
      const job = await engine.submit(ep, { input }, { sync: false });
      const stored = JSON.stringify(input); // marker strings and all, as job_inputs holds it
      const asText = await engine.status(ep, job.id, undefined, true);
      expect(asText.input).toBeInstanceOf(JsonText);
      expect((asText.input as JsonText).text).toBe(stored);
      expect(stringifyJsonExact(asText)).toContain('"input":{"seed":18446744073709551615,"text":"xxx');
      expect((await engine.statusSync(ep, job.id, 0, undefined, true)).input).toBeInstanceOf(JsonText);
      expect((await engine.status(ep, job.id)).input).toEqual(input); // without the flag: parsed
      // ?ttl= writes the job: the input stays as stored (the row's write leaves job_inputs alone).
      await engine.take(ep, 'w1', 1, 0);
      expect((await engine.status(ep, job.id, 60_000, true)).input).toBeInstanceOf(JsonText);
      expect((await engine.status(ep, job.id)).input).toEqual(input);
      await engine.done(ep, 'w1', job.id, { output: 1 });
      expect((await engine.status(ep, job.id, undefined, true)).input).toBeUndefined(); // finished: none
    });

    it('a chunk split into pieces of its JSON text keeps the digits', () => {
      const output = exact(`{"seed":18446744073709551615,"pad":"${'x'.repeat(limits.streamChunkBytes)}"}`);
      const pieces = splitChunk({ output }) as { output: string }[];
      expect(pieces.length).toBeGreaterThan(1);
      expect(pieces.map((piece) => piece.output).join('')).toMatch(
        /^\{"seed":18446744073709551615,"pad":"x+"\}$/,
      );
    });
  });

  describe('leases', () => {
    it('a lapsed lease puts the job back in the queue, then fails it after maxAttempts', async () => {
      const job = await engine.submit(ep, { input: {} }, { sync: false });
      await engine.take(ep, 'w1', 1, 0);
      clock.advance(30_000);
      expect(await engine.sweep()).toMatchObject({ requeued: 1 });
      expect((await engine.status(ep, job.id)).status).toBe('IN_QUEUE');
      const [again] = await engine.take(ep, 'w2', 1, 0);
      expect(again?.id).toBe(job.id);
      clock.advance(30_000);
      expect(await engine.sweep()).toMatchObject({ failed: 1 });
      const failed = await engine.status(ep, job.id);
      expect(failed.status).toBe('FAILED');
      expect(failed.error).toMatch(/stopped responding; the job was tried 2 times/);
    });

    it("a worker gone: each job it held is queued again, message after clear, though one job's clear fails", async () => {
      // Stores that record clears and sends in order and refuse the first clear, as the agent role
      // once refused the Query on DynamoDB's chunks table that a clear needs.
      const order: string[] = [];
      let refuse = true;
      const jobs = over(db.jobs, {
        clearStream: async (jobId) => {
          order.push(`clear ${jobId}`);
          if (refuse) {
            refuse = false;
            throw new Error('refused');
          }
          return db.jobs.clearStream(jobId);
        },
      });
      const queue = over(db.queue, {
        send: async (endpointId, jobId, options) => {
          order.push(`send ${jobId}`);
          return db.queue.send(endpointId, jobId, options);
        },
      });
      engine = new JobEngine({
        jobs,
        queue,
        workers: db.workers,
        changes: new LocalChangeFeed(clock),
        clock,
        settings: { leaseMs: 30_000, maxAttempts: 2 },
        ...(take === 'composed'
          ? {}
          : {
              createQueued: (job) => db.createQueued(job),
              takeQueued: (endpointId, options) => db.takeQueued(endpointId, options),
            }),
      });
      const ids = [
        (await engine.submit(ep, { input: {} }, { sync: false })).id,
        (await engine.submit(ep, { input: {} }, { sync: false })).id,
      ].sort();
      expect((await engine.take(ep, 'w1', 2, 0)).map((j) => j.id).sort()).toEqual(ids);
      for (const id of ids) await engine.streamChunk(ep, 'w1', id, { output: 'first attempt' });
      order.length = 0;

      // The refusal reaches the caller (the supervisor logs it), after every job was handled.
      await expect(engine.workerGone(ep, 'w1', 'exited')).rejects.toThrow('refused');
      for (const id of ids) {
        expect((await engine.status(ep, id)).status).toBe('IN_QUEUE');
        // Clear before send: a worker that took the job first could have its new chunks cleared.
        expect(order.indexOf(`clear ${id}`)).toBeGreaterThanOrEqual(0);
        expect(order.indexOf(`clear ${id}`)).toBeLessThan(order.indexOf(`send ${id}`));
      }
      expect(order.filter((call) => call.startsWith('send')).sort()).toEqual(ids.map((id) => `send ${id}`));
      // Both messages are there: another worker takes both jobs again.
      expect((await engine.take(ep, 'w2', 2, 0)).map((j) => j.id).sort()).toEqual(ids);
    });

    it('a worker the platform stopped: its job goes back without using an attempt, however many stops', async () => {
      // maxAttempts is 2 here: three stops (three saves under `ferry dev`) would fail a counted job.
      const job = await engine.submit(ep, { input: {} }, { sync: false });
      for (const worker of ['w1', 'w2', 'w3']) {
        expect((await engine.take(ep, worker, 1, 0)).map((j) => j.id)).toEqual([job.id]);
        clock.advance(1_000);
        expect(await engine.workerGone(ep, worker, `Worker ${worker} was stopped`, { stopped: true })).toBe(
          1,
        );
        const stored = await db.jobs.get(job.id, clock.now());
        expect(stored).toMatchObject({ status: 'IN_QUEUE', attempt: 0 });
      }
      // The next take is its first attempt; a crash then counts it, as before.
      await engine.take(ep, 'w4', 1, 0);
      expect((await db.jobs.get(job.id, clock.now()))?.attempt).toBe(1);
      expect(await engine.workerGone(ep, 'w4', 'Worker w4 exited (code 1) while running the job')).toBe(1);
      expect((await db.jobs.get(job.id, clock.now()))?.attempt).toBe(1);
      await engine.take(ep, 'w5', 1, 0);
      await engine.workerGone(ep, 'w5', 'Worker w5 exited (code 1) while running the job');
      expect(await engine.status(ep, job.id)).toMatchObject({
        status: 'FAILED',
        error: 'Worker w5 exited (code 1) while running the job; the job was tried 2 times',
      });
    });

    it('a stop on its last attempt queues the job again rather than failing it', async () => {
      const job = await engine.submit(ep, { input: {} }, { sync: false });
      await engine.take(ep, 'w1', 1, 0);
      await engine.workerGone(ep, 'w1', 'Worker w1 exited (signal SIGSEGV) while running the job');
      await engine.take(ep, 'w2', 1, 0);
      expect((await db.jobs.get(job.id, clock.now()))?.attempt).toBe(2);
      await engine.workerGone(ep, 'w2', 'Worker w2 was stopped', { stopped: true });
      expect(await db.jobs.get(job.id, clock.now())).toMatchObject({ status: 'IN_QUEUE', attempt: 1 });
      const [again] = await engine.take(ep, 'w3', 1, 0);
      await engine.done(ep, 'w3', again!.id, { output: 'ok' });
      expect(await engine.status(ep, job.id)).toMatchObject({ status: 'COMPLETED', output: 'ok' });
    });

    it('ping renews the lease', async () => {
      const job = await engine.submit(ep, { input: {} }, { sync: false });
      await engine.take(ep, 'w1', 1, 0);
      for (let i = 0; i < 5; i++) {
        clock.advance(20_000);
        await engine.ping(ep, 'w1', [job.id]);
        await engine.sweep();
      }
      expect((await engine.status(ep, job.id)).status).toBe('IN_PROGRESS');
    });

    it('lease expiry against job-done: whichever lands first wins', async () => {
      const job = await engine.submit(ep, { input: {} }, { sync: false });
      await engine.take(ep, 'w1', 1, 0);
      clock.advance(30_000);
      await engine.sweep();
      await expect(engine.done(ep, 'w1', job.id, { output: 'late' })).rejects.toMatchObject({
        code: 'conflict',
      });
      const [retaken] = await engine.take(ep, 'w2', 1, 0);
      await engine.done(ep, 'w2', retaken!.id, { output: 'on time' });
      clock.advance(30_000);
      expect(await engine.sweep()).toEqual({ requeued: 0, failed: 0, timedOut: 0, expired: 0, left: 0 });
      expect(await engine.status(ep, job.id)).toMatchObject({ status: 'COMPLETED', output: 'on time' });
    });
  });

  describe('execution timeout', () => {
    it('ends a running job TIMED_OUT, tells its worker to stop, and allows retry', async () => {
      const job = await engine.submit(
        ep,
        { input: {}, policy: { executionTimeout: 5_000 } },
        { sync: false },
      );
      await engine.take(ep, 'w1', 1, 0);
      clock.advance(4_999);
      await engine.ping(ep, 'w1', [job.id]);
      expect((await engine.sweep()).timedOut).toBe(0);
      clock.advance(1);
      expect((await engine.sweep()).timedOut).toBe(1);
      expect(await engine.status(ep, job.id)).toMatchObject({
        status: 'TIMED_OUT',
        error: expect.stringMatching(/5000 ms/),
      });
      expect(await engine.jobsToStop(ep, 'w1', 0)).toEqual([job.id]);
      expect((await engine.retry(ep, job.id)).status).toBe('IN_QUEUE');
    });

    it("uses the endpoint's timeout when the request sets none", async () => {
      const job = await engine.submit(ep, { input: {} }, { sync: false, executionTimeoutMs: 7_000 });
      await engine.take(ep, 'w1', 1, 0);
      clock.advance(7_000);
      await engine.sweep();
      expect((await engine.status(ep, job.id)).status).toBe('TIMED_OUT');
    });
  });

  describe('cancel of a job that has ended', () => {
    // A client that gave up waiting cancels as the job ends; runpod-python, runpod-sdk and runpod's
    // Go SDK all raise on any answer but 200 to a cancel, so the job's own status is the answer.
    const ended = {
      COMPLETED: async (id: string) => engine.done(ep, 'w1', id, { output: 'ok' }),
      FAILED: async (id: string) => engine.done(ep, 'w1', id, { error: 'boom' }),
      TIMED_OUT: async () => {
        clock.advance(limits.executionTimeoutDefaultMs);
        expect((await engine.sweep()).timedOut).toBe(1);
      },
    };

    it.each(Object.keys(ended) as (keyof typeof ended)[])(
      'answers %s, the status it ended in, and changes nothing',
      async (status) => {
        const job = await engine.submit(ep, { input: {} }, { sync: false });
        await engine.take(ep, 'w1', 1, 0);
        await ended[status](job.id);
        const before = await db.jobs.get(job.id, clock.now());
        expect(await engine.cancel(ep, job.id)).toEqual({ id: job.id, status });
        expect(await db.jobs.get(job.id, clock.now())).toEqual(before);
      },
    );

    it('answers the status the job ended in when its write lost the race to that end', async () => {
      const job = await engine.submit(ep, { input: {} }, { sync: false });
      await engine.take(ep, 'w1', 1, 0);
      const plain = engine;
      let raced = false;
      engine = localEngine(
        db,
        clock,
        {},
        {
          composedTake: take === 'composed',
          jobs: over(db.jobs, {
            update: async (current, patch) => {
              // The cancel's write, read while the job ran: the worker's result lands just before it.
              if (patch.status === 'CANCELLED' && !raced) {
                raced = true;
                await plain.done(ep, 'w1', job.id, { output: 'ok' });
              }
              return db.jobs.update(current, patch);
            },
          }),
        },
      );
      expect(await engine.cancel(ep, job.id)).toEqual({ id: job.id, status: 'COMPLETED' });
      expect(raced).toBe(true);
      expect(await engine.status(ep, job.id)).toMatchObject({ status: 'COMPLETED', output: 'ok' });
      expect(await engine.jobsToStop(ep, 'w1', 0)).toEqual([]);
    });

    it('is still a 404 for a job that does not exist', async () => {
      await expect(engine.cancel(ep, 'no-such-job')).rejects.toMatchObject({ code: 'not_found' });
    });
  });

  describe('the stop channel', () => {
    it('does not tell a worker to stop the job it just finished', async () => {
      const job = await engine.submit(ep, { input: {} }, { sync: false });
      await engine.take(ep, 'w1', 1, 0);
      const stopping = engine.jobsToStop(ep, 'w1', 1_000);
      await engine.done(ep, 'w1', job.id, { output: 'ok' });
      await new Promise((r) => setImmediate(r));
      clock.advance(1_000);
      expect(await stopping).toEqual([]);
    });

    it('does not keep answering for a finished job a late ping still lists', async () => {
      const job = await engine.submit(ep, { input: {} }, { sync: false });
      await engine.take(ep, 'w1', 1, 0);
      await engine.done(ep, 'w1', job.id, { output: 'ok' });
      await engine.ping(ep, 'w1', [job.id]);
      expect(await engine.jobsToStop(ep, 'w1', 0)).toEqual([]);
    });

    it('tells a worker whose lease lapsed for good to let go', async () => {
      const job = await engine.submit(ep, { input: {} }, { sync: false });
      for (const worker of ['w1', 'w2']) {
        await engine.take(ep, worker, 1, 0);
        clock.advance(30_000);
        await engine.sweep();
      }
      expect((await engine.status(ep, job.id)).status).toBe('FAILED');
      expect(await engine.jobsToStop(ep, 'w2', 0)).toEqual([job.id]);
    });

    it('tells it to stop a job cancelled while it runs', async () => {
      const job = await engine.submit(ep, { input: {} }, { sync: false });
      await engine.take(ep, 'w1', 1, 0);
      const stopping = engine.jobsToStop(ep, 'w1', 1_000);
      await engine.cancel(ep, job.id);
      expect(await stopping).toEqual([job.id]);
    });
  });

  describe('purge-queue within a time budget (on AWS, inside the integration timeout)', () => {
    const submit = async (n: number) => {
      for (let i = 0; i < n; i++) await engine.submit(ep, { input: { i } }, { sync: false });
    };

    it('starts no batch past its budget, answers in_progress, and the next purge goes on', async () => {
      await submit(1_100);
      // A spent budget: each purge ends one batch (500), then stops while a full batch says more may remain.
      expect(await engine.purge(ep, { budgetMs: 0 })).toEqual({ removed: 500, status: 'in_progress' });
      expect((await engine.health(ep)).jobs.inQueue).toBe(600);
      expect(await engine.purge(ep, { budgetMs: 0 })).toEqual({ removed: 500, status: 'in_progress' });
      // A short batch was the end of the listing: completed, even past the budget.
      expect(await engine.purge(ep, { budgetMs: 0 })).toEqual({ removed: 100, status: 'completed' });
      expect((await engine.health(ep)).jobs.inQueue).toBe(0);
    });

    it('rejectQueued (a failing endpoint, the AWS sweeper) keeps to its budget the same way', async () => {
      await submit(700);
      expect(await engine.rejectQueued(ep, 'broken', { budgetMs: 0 })).toBe(500);
      expect((await engine.health(ep)).jobs.inQueue).toBe(200);
      expect(await engine.rejectQueued(ep, 'broken', { budgetMs: 0 })).toBe(200);
      expect((await engine.health(ep)).jobs).toMatchObject({ inQueue: 0, failed: 700 });
    });

    it('with time left, or with no budget (the embedded platform), ends the whole backlog in one call', async () => {
      await submit(1_100);
      expect(await engine.purge(ep, { budgetMs: 25_000 })).toEqual({ removed: 1_100, status: 'completed' });
      await submit(600);
      expect(await engine.purge(ep)).toEqual({ removed: 600, status: 'completed' });
    });
  });

  describe("max_concurrency caps what a worker holds (the take's last argument)", () => {
    const submitMany = async (count: number) => {
      for (let i = 0; i < count; i++) await engine.submit(ep, { input: { i } }, { sync: false });
    };
    const turns = async () => {
      for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r));
    };

    it('a take gets max_concurrency less what the worker holds; at the cap it waits for a job let go, with no clock movement', async () => {
      await submitMany(5);
      const first = await engine.take(ep, 'w1', 10, 0, undefined, false, 3);
      expect(first).toHaveLength(3);
      let answered = false;
      const next = engine.take(ep, 'w1', 10, 60_000, undefined, false, 3).finally(() => {
        answered = true;
      });
      await turns();
      // Held, not answered empty at once: RunPod's SDK would ask again at once.
      expect(answered).toBe(false);
      await engine.done(ep, 'w1', first[0]!.id, { output: 'ok' });
      expect(await next).toHaveLength(1);
      // Another worker of the endpoint gets the rest.
      expect(await engine.take(ep, 'w2', 10, 0, undefined, false, 3)).toHaveLength(1);
    });

    it('at the cap a take claims nothing and ends empty when its wait runs out', async () => {
      await submitMany(2);
      expect(await engine.take(ep, 'w1', 5, 0, undefined, false, 1)).toHaveLength(1);
      const next = engine.take(ep, 'w1', 5, 10_000, undefined, false, 1);
      await turns();
      clock.advance(10_000);
      expect(await next).toEqual([]);
      expect(await engine.take(ep, 'w2', 5, 0, undefined, false, 1)).toHaveLength(1);
    });

    it('a ping that no longer lists a job frees its room', async () => {
      await submitMany(2);
      const [held] = await engine.take(ep, 'w1', 5, 0, undefined, false, 1);
      const next = engine.take(ep, 'w1', 5, 60_000, undefined, false, 1);
      await turns();
      // The worker dropped the job (say, it was cancelled and stopped): its ping leaves it out.
      await engine.cancel(ep, held!.id);
      await engine.ping(ep, 'w1', []);
      expect(await next).toHaveLength(1);
    });

    it('a take waiting at the cap takes nothing once its worker is drained meanwhile (a reload, a scale-in)', async () => {
      const supervisor = new WorkerSupervisor({
        clock,
        log: silentLogger,
        settings: { refusedTakeHoldMs: 0 },
      });
      engine = new JobEngine({
        jobs: db.jobs,
        queue: db.queue,
        workers: db.workers,
        ledger: supervisor,
        changes: new LocalChangeFeed(clock),
        clock,
        settings: { leaseMs: 30_000 },
      });
      const { workerId } = supervisor.adoptNew(ep);
      await submitMany(2);
      const [held] = await engine.take(ep, workerId, 5, 0, undefined, false, 1);
      const next = engine.take(ep, workerId, 5, 60_000, undefined, false, 1);
      await turns();
      supervisor.drain(workerId);
      await engine.done(ep, workerId, held!.id, { output: 'ok' });
      await turns();
      clock.advance(0);
      expect(await next).toEqual([]);
      // The job it left is there for another worker.
      expect(await engine.take(ep, supervisor.adoptNew(ep).workerId, 5, 0)).toHaveLength(1);
    });

    it('two takes of one worker at once never hold more than max_concurrency together', async () => {
      await submitMany(6);
      const [a, b] = await Promise.all([
        engine.take(ep, 'w1', 3, 0, undefined, false, 2),
        engine.take(ep, 'w1', 3, 0, undefined, false, 2),
      ]);
      expect(a!.length + b!.length).toBe(2);
    });
  });

  describe('long polls wake on change, not on a timer', () => {
    it('runSync returns as soon as the worker finishes, with no clock movement', async () => {
      const pending = engine.runSync(ep, { input: {} }, 90_000, undefined);
      let taken: { id: string }[] = [];
      while (taken.length === 0) taken = await engine.take(ep, 'w1', 1, 0);
      await engine.done(ep, 'w1', taken[0]!.id, { output: 42 });
      expect(await pending).toMatchObject({ status: 'COMPLETED', output: 42 });
    });

    /** An engine on `feed`, wired like the one of beforeEach. */
    const engineOn = (feed: LocalChangeFeed) =>
      localEngine(db, clock, { leaseMs: 30_000 }, { composedTake: take === 'composed', changes: feed });

    it('runSync and status-sync wake once, when the job ends, and read it without its input', async () => {
      // A feed that records which watches woke.
      const woke: string[] = [];
      const feed = new (class extends LocalChangeFeed {
        override watch(key: string) {
          const watch = super.watch(key);
          const changed = watch.changed.bind(watch);
          watch.changed = async (waitMs, signal) => {
            const result = await changed(waitMs, signal);
            if (result) woke.push(key.split(':')[0]!);
            return result;
          };
          return watch;
        }
      })(clock);
      engine = engineOn(feed);
      const reads: JobReadOptions['input'][] = [];
      const get = db.jobs.get.bind(db.jobs);
      db.jobs.get = (jobId, nowMs, options) => {
        reads.push(options?.input);
        return get(jobId, nowMs, options);
      };
      const input = { image: 'x'.repeat(10_000) };
      const runsync = engine.runSync(ep, { input }, 90_000, undefined);
      let taken: { id: string; input?: unknown }[] = [];
      while (taken.length === 0) taken = await engine.take(ep, 'w1', 1, 0);
      const id = taken[0]!.id;
      expect(taken[0]!.input).toEqual(input);
      const statusSync = engine.statusSync(ep, id, 90_000);
      const turns = async () => {
        for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
      };
      await turns();
      reads.splice(0);
      // Steps on the way: a progress update, stream chunks, a ping. Neither wait wakes for them.
      await engine.done(ep, 'w1', id, { status: 'IN_PROGRESS', output: { pct: 50 } });
      await engine.streamChunk(ep, 'w1', id, { output: 'part 1' });
      await engine.streamChunk(ep, 'w1', id, { output: 'part 2' });
      await engine.ping(ep, 'w1', [id]);
      await turns();
      expect(woke).toEqual([]);
      await engine.done(ep, 'w1', id, { output: { ok: true } });
      expect(await runsync).toMatchObject({ id, status: 'COMPLETED', output: { ok: true } });
      expect(await statusSync).toMatchObject({ id, status: 'COMPLETED', output: { ok: true } });
      expect(woke).toEqual(['job-end', 'job-end']);
      // Every read since the take, the worker's moves' and the waits', left the input out.
      expect(reads.length).toBeGreaterThan(0);
      expect(reads.every((option) => option === false)).toBe(true);
    });

    /**
     * A runSync whose job the worker w1 has taken, and the job ids read without their input from
     * then on (the worker's take reads the input; the wait and job-done's move read without it).
     */
    async function runSyncTaken(n: number) {
      const noInputReads: string[] = [];
      const get = db.jobs.get.bind(db.jobs);
      db.jobs.get = (jobId, nowMs, options) => {
        if (options?.input === false) noInputReads.push(jobId);
        return get(jobId, nowMs, options);
      };
      const pending = engine.runSync(ep, { input: { n } }, 90_000, undefined);
      let taken: { id: string }[] = [];
      while (taken.length === 0) taken = await engine.take(ep, 'w1', 1, 0);
      return { noInputReads, pending, taken: taken[0]! };
    }

    it('runSync reads the job neither after storing it nor after it ended here: the end comes with its notify', async () => {
      const { noInputReads, pending, taken } = await runSyncTaken(2);
      for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
      expect(noInputReads).toEqual([]);
      await engine.done(ep, 'w1', taken.id, { output: 2 });
      expect(await pending).toMatchObject({ status: 'COMPLETED', output: 2, workerId: 'w1' });
      // job-done's read for its move only.
      expect(noInputReads).toEqual([taken.id]);
    });

    it('a wait whose wake-up carries no ended job (another process ended it) reads the job', async () => {
      // The job-end notify as a feed that only hears another process would see it: no detail.
      const feed = new (class extends LocalChangeFeed {
        override notify(key: string) {
          super.notify(key);
        }
      })(clock);
      engine = engineOn(feed);
      const { noInputReads, pending, taken } = await runSyncTaken(3);
      await engine.done(ep, 'w1', taken.id, { output: 3 });
      expect(await pending).toMatchObject({ status: 'COMPLETED', output: 3 });
      // job-done's read for its move, then the wait's read of the ended job.
      expect(noInputReads).toEqual([taken.id, taken.id]);
    });

    it('status-sync that runs out on an unfinished job answers its view with the input', async () => {
      const job = await engine.submit(ep, { input: { n: 7 } }, { sync: false });
      const pending = engine.statusSync(ep, job.id, 1_000);
      while (clock.pendingSleeps() === 0) await new Promise((r) => setImmediate(r));
      clock.advance(1_000);
      expect(await pending).toMatchObject({ id: job.id, status: 'IN_QUEUE', input: { n: 7 } });
    });

    it('runSync answers {id, status} when the wait runs out', async () => {
      const pending = engine.runSync(ep, { input: {} }, 1_000, undefined);
      // Advance only once the wait has begun (the submit's commit lands at the end of a loop turn).
      while (clock.pendingSleeps() === 0) await new Promise((r) => setImmediate(r));
      clock.advance(1_000);
      const view = await pending;
      expect(Object.keys(view).sort()).toEqual(['id', 'status']);
      expect(view.status).toBe('IN_QUEUE');
    });
  });
});

describe('job ids', () => {
  it('are distinct time-ordered UUIDs (v7) with the -u1 suffix, from the pooled random bytes', async () => {
    db = openLocalDatabase(':memory:', { clock: new FakeClock() });
    engine = localEngine(db, new FakeClock(), {});
    const before = Date.now();
    // More than one pool (256 ids) so a refill is crossed.
    const jobs = await Promise.all(
      Array.from({ length: 600 }, () => engine.submit(ep, { input: {} }, { sync: false })),
    );
    const ids = jobs.map((job) => job.id);
    expect(new Set(ids).size).toBe(ids.length);
    for (const id of ids) {
      expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}-u1$/);
      // The first 48 bits are the creation time in milliseconds.
      const ms = Number.parseInt(id.replace(/-/g, '').slice(0, 12), 16);
      expect(ms).toBeGreaterThanOrEqual(before);
      expect(ms).toBeLessThanOrEqual(Date.now());
    }
    // The random part differs between ids made in the same millisecond.
    expect(new Set(ids.map((id) => id.slice(15, 36))).size).toBe(ids.length);
  });
});

describe("a worker drained while its take waits (the local platform's one-write take)", () => {
  const turns = async () => {
    for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r));
  };

  it('gets no job that comes after the drain: the next worker takes it (a deploy rolled the endpoint)', async () => {
    clock = new FakeClock();
    db = openLocalDatabase(':memory:', { clock });
    const supervisor = new WorkerSupervisor({ clock, log: silentLogger, settings: { refusedTakeHoldMs: 0 } });
    engine = localEngine(db, clock, { leaseMs: 30_000 }, { ledger: supervisor });
    const old = supervisor.adoptNew(ep).workerId;
    // An idle worker of the old code, waiting for work in its long poll.
    const waiting = engine.take(ep, old, 1, 60_000);
    await turns();
    supervisor.drain(old);
    const job = await engine.submit(ep, { input: { v: 2 } }, { sync: false });
    await turns();
    clock.advance(60_000);
    expect(await waiting).toEqual([]);
    expect((await engine.status(ep, job.id)).status).toBe('IN_QUEUE');
    const [taken] = await engine.take(ep, supervisor.adoptNew(ep).workerId, 1, 0);
    expect(taken?.id).toBe(job.id);
  });
});
