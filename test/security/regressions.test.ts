/**
 * Regression tests for the correctness rows of issue 13, over real HTTP against the embedded
 * platform (SQLite) with a protocol-speaking worker; time is a fake clock, moved by hand.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openLocalDatabase } from '../../core/adapters/local/sqlite.js';
import { FakeClock } from '../../core/clock.js';
import type { Job } from '../../core/job.js';
import { limits } from '../../core/limits.js';
import { call, startTestPlatform, type TestPlatform } from '../support/platform.js';

let platform: TestPlatform;
let base: string;
const clock = new FakeClock(1_700_000_000_000);
let n = 0;

async function freshEndpoint() {
  const id = `reg${++n}`;
  await platform.addEndpoint(id);
  return { id, worker: platform.protocolWorker(id) };
}

beforeAll(async () => {
  platform = await startTestPlatform({ clock, sweepIntervalMs: 3_600_000, settings: { leaseMs: 60_000 } });
  base = platform.baseUrl;
});
afterAll(async () => {
  await platform.stop();
});

describe('issue 13 correctness rows', () => {
  it('an over-limit job-done fails the job at once with a clear error', async () => {
    const { id, worker } = await freshEndpoint();
    const { body } = await call(base, 'POST', `/${id}/run`, { input: {} });
    await worker.take();
    const big = { output: 'x'.repeat(limits.jobDoneBodyBytes) };
    const answer = await worker.done(body.id, big);
    expect(answer.status).toBe(400);
    expect(answer.body.error).toMatch(/over the 20971520-byte limit/);
    const status = await call(base, 'GET', `/${id}/status/${body.id}`);
    expect(status.body).toMatchObject({ status: 'FAILED', error: expect.stringMatching(/over the/) });
  });

  it('a job-done over the server cap fails the job too, with the job-done limit named', async () => {
    // RunPod's SDK sends a result however big: past the HTTP layer's cap for other routes (21 MiB) the
    // job was left running until its lease lapsed, and the 413 named that cap.
    const { id, worker } = await freshEndpoint();
    const { body } = await call(base, 'POST', `/${id}/run`, { input: {} });
    await worker.take();
    const answer = await worker.done(body.id, { output: 'x'.repeat(25 * 1024 * 1024) });
    expect(answer.status).toBe(400);
    expect(answer.body.error).toMatch(/over the 20971520-byte limit/);
    const status = await call(base, 'GET', `/${id}/status/${body.id}`);
    expect(status.body).toMatchObject({
      status: 'FAILED',
      error: expect.stringMatching(/over the 20971520/),
    });
  });

  it('drops the stream chunks of an earlier attempt when the job is queued again', async () => {
    const { id, worker } = await freshEndpoint();
    const { body } = await call(base, 'POST', `/${id}/run`, { input: {} });
    await worker.take();
    for (const chunk of ['a1', 'a2', 'a3']) expect((await worker.stream(body.id, chunk)).status).toBe(200);
    // The worker goes silent: its lease lapses and the sweeper queues the job again.
    clock.advance(61_000);
    await platform.sweep();
    expect((await call(base, 'GET', `/${id}/status/${body.id}`)).body.status).toBe('IN_QUEUE');
    const second = platform.protocolWorker(id);
    await second.take();
    await second.stream(body.id, 'b1');
    await second.done(body.id, { output: [] }, true);
    const stream = await call(base, 'GET', `/${id}/stream/${body.id}`);
    expect(stream.body.stream.map((c: { output: unknown }) => c.output)).toEqual(['b1']);
  });

  it('?ttl= on a running job sets how long its result is kept and never ends it', async () => {
    const { id, worker } = await freshEndpoint();
    const { body } = await call(base, 'POST', `/${id}/run`, { input: {} });
    await worker.take();
    expect((await call(base, 'GET', `/${id}/status/${body.id}?ttl=1`)).body.status).toBe('IN_PROGRESS');
    clock.advance(5_000);
    await platform.sweep();
    expect((await call(base, 'GET', `/${id}/status/${body.id}`)).body.status).toBe('IN_PROGRESS');
    await worker.ping([body.id]);
    expect((await worker.done(body.id, { output: 'ok' })).status).toBe(200);
    // The result is kept for the 1 ms asked for, then reads as 404.
    expect((await call(base, 'GET', `/${id}/status/${body.id}`)).body.status).toBe('COMPLETED');
    clock.advance(2);
    expect((await call(base, 'GET', `/${id}/status/${body.id}`)).status).toBe(404);
  });

  it.each([
    ['a __proto__ key', '{"input":{"__proto__":{"admin":true}}}', /__proto__/],
    ['an escaped __proto__ key', '{"input":{"\\u005f_proto__":1}}', /__proto__/],
    ['a number beyond double range', '{"input":{"n":1e999}}', /too large/],
    ['a 400-digit integer', `{"input":{"n":${'9'.repeat(400)}}}`, /too large/],
  ])('refuses JSON input with %s (400) instead of changing it', async (_name, text, message) => {
    const { id } = await freshEndpoint();
    const answer = await call(base, 'POST', `/${id}/run`, text);
    expect(answer.status).toBe(400);
    expect(answer.body.error).toMatch(message);
  });

  it('hands the worker the input exactly as sent', async () => {
    const { id, worker } = await freshEndpoint();
    const input = { a: { b: [1, 2.5, 'x', null, true] }, big: 1e300, small: -1e-300, unicode: 'é\u2028' };
    await call(base, 'POST', `/${id}/run`, { input });
    expect((await worker.take())!.input).toEqual(input);
  });
});

describe('/lb rows', () => {
  it('answers 400 for a queue endpoint on /lb, without starting anything', async () => {
    const { id } = await freshEndpoint();
    const answer = await call(platform.url, 'GET', `/lb/${id}/x`);
    expect(answer.status).toBe(400);
    expect(answer.body.error).toMatch(/queue endpoint/);
  });

  it('answers 4xx for a percent-encoded endpoint id and never prints an address', async () => {
    await platform.db.control.putEndpoint({
      id: 'hello',
      app: 'test',
      env: 'production',
      name: 'hello',
      kind: 'lb',
      config: {},
      fingerprint: 'f',
      createdAt: 1,
      updatedAt: 1,
    });
    const answer = await call(platform.url, 'GET', '/lb/%68ello/x');
    expect(answer.status).toBeGreaterThanOrEqual(400);
    expect(answer.status).toBeLessThan(500);
    expect(JSON.stringify(answer.body)).not.toMatch(/127\.0\.0\.1|localhost|:\d{4,5}/);
  });

  it('refuses deeply nested JSON on /lb with 400 before forwarding', async () => {
    const deep = `${'['.repeat(5_000)}${']'.repeat(5_000)}`;
    const answer = await call(platform.url, 'POST', '/lb/hello/predict', deep);
    expect(answer.status).toBe(400);
    expect(answer.body.error).toMatch(/nested/);
  });
});

describe('submit', () => {
  it('writes the job and its queue row in one transaction: a failed queue insert leaves no job', async () => {
    const db = openLocalDatabase(':memory:');
    try {
      const job = {
        id: 'tx-job',
        endpointId: 'e',
        status: 'IN_QUEUE',
        input: {},
        policy: { executionTimeoutMs: 1_000, ttlMs: 60_000, lowPriority: false },
        sync: false,
        retentionMs: 1_000,
        createdAt: 0,
        expiresAt: Number.MAX_SAFE_INTEGER,
        attempt: 0,
        retries: 0,
        version: 1,
      } as Job;
      await db.createQueued(job);
      expect((await db.jobs.get('tx-job', 1))?.status).toBe('IN_QUEUE');
      expect((await db.queue.depth('e')).visible).toBe(1);
      // The queue refuses the second insert: the job row of the same transaction is rolled back.
      await db.queue.close();
      await expect(db.createQueued({ ...job, id: 'tx-job-2' })).rejects.toThrow(/closed/);
      expect(await db.jobs.get('tx-job-2', 1)).toBeUndefined();
    } finally {
      await db.close();
    }
  });
});
