/**
 * A worker's call token (FERRY_CALL_TOKEN, docs/python.md#remote-calls) is held by user code, so it
 * reaches what a remote call needs and no more (docs/security.md, "Call tokens"): it submits to the
 * endpoints of its app and environment and follows the jobs its own endpoint submitted. Another
 * caller's job reads as unknown (404), and purge-queue, retry and status ?ttl= are refused (403),
 * over real HTTP against the local platform and its SQLite store. Client keys keep every route.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, startTestPlatform, type TestPlatform } from '../support/platform.js';

let platform: TestPlatform;
let base: string;
/** Headers carrying the call token of a live worker of endpoint A, B and C (one app and env). */
let tokenA: Record<string, string>;
let tokenC: Record<string, string>;

const A = 'ep-a';
const B = 'ep-b';
const C = 'ep-c';

beforeAll(async () => {
  platform = await startTestPlatform();
  base = platform.baseUrl;
  for (const id of [A, B, C]) await platform.addEndpoint(id);
  const tokenOf = (endpointId: string) => ({
    authorization: `Bearer ${platform.callToken(platform.adoptWorker(endpointId).workerId)}`,
  });
  tokenA = tokenOf(A);
  tokenC = tokenOf(C);
});
afterAll(async () => {
  await platform.stop();
});

/** A job on B submitted with the client key (another caller's, as far as A's code is concerned). */
async function clientJobOnB(input: Record<string, unknown> = { secret: 'b-private' }): Promise<string> {
  const r = await call(base, 'POST', `/${B}/run`, { input });
  expect(r.status).toBe(200);
  return r.body.id as string;
}

const notFoundBody = (jobId: string) => ({ error: `Job ${jobId} not found (or its results expired)` });

describe("a worker's call token on another endpoint of its app and environment", () => {
  it("reads another caller's job as unknown: status, status-sync, stream and cancel are 404, and nothing changes", async () => {
    const jobId = await clientJobOnB();
    const routes: [string, string][] = [
      ['GET', `/${B}/status/${jobId}`],
      ['POST', `/${B}/status/${jobId}`],
      ['GET', `/${B}/status-sync/${jobId}?wait=1000`],
      ['GET', `/${B}/stream/${jobId}?wait=0`],
      ['POST', `/${B}/cancel/${jobId}`],
      // The same by name.
      ['GET', `/by-name/test/production/${B}/status/${jobId}`],
      ['POST', `/by-name/test/-/${B}/cancel/${jobId}`],
    ];
    for (const headers of [tokenA, tokenC]) {
      for (const [method, path] of routes) {
        const r = await call(base, method, path, undefined, headers);
        // The answer an unknown id gets: the job's existence is not told, nor its input.
        expect({ path, status: r.status, body: r.body }).toEqual({
          path,
          status: 404,
          body: notFoundBody(jobId),
        });
      }
    }
    const unknown = await call(base, 'GET', `/${B}/status/${B}-nope`, undefined, tokenA);
    expect({ status: unknown.status, body: unknown.body }).toEqual({
      status: 404,
      body: notFoundBody(`${B}-nope`),
    });
    // Still queued, input intact: the cancel did nothing.
    const after = await call(base, 'GET', `/${B}/status/${jobId}`);
    expect(after.body).toMatchObject({ id: jobId, status: 'IN_QUEUE', input: { secret: 'b-private' } });
  });

  it("reads another caller's job on its own endpoint as unknown too", async () => {
    const own = await call(base, 'POST', `/${A}/run`, { input: { secret: 'a-client' } });
    const r = await call(base, 'GET', `/${A}/status/${own.body.id}`, undefined, tokenA);
    expect(r.status).toBe(404);
    expect(JSON.stringify(r.body)).not.toContain('a-client');
  });

  it('refuses purge-queue, retry and status ?ttl= with 403, before reading any job', async () => {
    // A failed job of B, which retry would run again (the queue emptied first, so the worker takes it).
    expect((await call(base, 'POST', `/${B}/purge-queue`)).status).toBe(200);
    const failed = await clientJobOnB({ fail: true });
    const worker = platform.protocolWorker(B);
    expect((await worker.take())?.id).toBe(failed);
    expect((await worker.done(failed, { error: 'boom' })).status).toBe(200);
    const jobId = await clientJobOnB();
    const healthBefore = (await call(base, 'GET', `/${B}/health`)).body;

    for (const [method, path] of [
      ['POST', `/${B}/purge-queue`],
      ['POST', `/by-name/test/production/${B}/purge-queue`],
      ['POST', `/${B}/retry/${failed}`],
      ['POST', `/${B}/retry/${B}-nope`],
      ['GET', `/${B}/status/${jobId}?ttl=1`],
      ['POST', `/${B}/status/${B}-nope?ttl=1`],
    ] as const) {
      const r = await call(base, method, path, undefined, tokenA);
      expect({ path, status: r.status }).toEqual({ path, status: 403 });
      expect(r.body).toEqual({ error: expect.stringMatching(/^A worker's call token may not /) });
    }
    // Nothing changed: the queued job is still there with its retention, the failed one still failed.
    expect((await call(base, 'GET', `/${B}/status/${jobId}`)).body.status).toBe('IN_QUEUE');
    expect((await call(base, 'GET', `/${B}/status/${failed}`)).body.status).toBe('FAILED');
    expect((await call(base, 'GET', `/${B}/health`)).body).toEqual(healthBefore);
    const stored = await platform.db.jobs.get(jobId, Date.now(), { input: false });
    expect(stored?.expiresAt).toBeGreaterThan(Date.now() + 60_000);
  });

  it('follows and cancels the jobs it submitted itself, by id and by name', async () => {
    const submitted = await call(base, 'POST', `/${B}/run`, { input: { mine: 1 } }, tokenA);
    expect(submitted.status).toBe(200);
    const jobId = submitted.body.id as string;
    // The submitter is recorded with the job, and is not in its view.
    const stored = await platform.db.jobs.get(jobId, Date.now(), { input: false });
    expect(stored?.submittedBy).toBe(A);
    const status = await call(base, 'GET', `/${B}/status/${jobId}`, undefined, tokenA);
    expect({ status: status.status, body: status.body }).toEqual({
      status: 200,
      body: { id: jobId, status: 'IN_QUEUE', delayTime: expect.any(Number), input: { mine: 1 } },
    });
    const byName = await call(base, 'GET', `/by-name/test/-/${B}/status/${jobId}`, undefined, tokenA);
    expect(byName.status).toBe(200);
    expect((await call(base, 'GET', `/${B}/stream/${jobId}?wait=0`, undefined, tokenA)).status).toBe(200);
    expect((await call(base, 'GET', `/${B}/status-sync/${jobId}?wait=1000`, undefined, tokenA)).status).toBe(
      200,
    );
    // Another endpoint's call token of the same app and environment is another caller.
    expect((await call(base, 'GET', `/${B}/status/${jobId}`, undefined, tokenC)).status).toBe(404);
    const cancelled = await call(base, 'POST', `/${B}/cancel/${jobId}`, undefined, tokenA);
    expect({ status: cancelled.status, body: cancelled.body }).toEqual({
      status: 200,
      body: { id: jobId, status: 'CANCELLED' },
    });
    // Health: counts only, the Python client's EndpointClient.health.
    expect((await call(base, 'GET', `/${B}/health`, undefined, tokenA)).status).toBe(200);
  });

  it("reads another endpoint's health without the last lines its workers printed, which may hold a client's job", async () => {
    // A worker of B printed a client's input as the job's line, then crashed: B backs off.
    const worker = platform.adoptWorker(B);
    platform.supervisor.output(B, worker.workerId, '[job-1] client input: card=4111-1111');
    await worker.exited();
    const client = await call(base, 'GET', `/${B}/health`);
    expect(client.body.problem).toMatchObject({
      state: 'backoff',
      lines: ['[job-1] client input: card=4111-1111'],
    });
    const { lines: _lines, ...problem } = client.body.problem as Record<string, unknown>;
    for (const path of [`/${B}/health`, `/by-name/test/production/${B}/health`]) {
      const r = await call(base, 'GET', path, undefined, tokenA);
      expect({ path, status: r.status, body: r.body }).toEqual({
        path,
        status: 200,
        body: { ...client.body, problem },
      });
    }
  });

  it('follows a /runsync it submitted that outlived its wait', async () => {
    const r = await call(base, 'POST', `/${B}/runsync?wait=1000`, { input: { sync: 1 } }, tokenA);
    expect(r.status).toBe(200);
    expect(r.body.status).toBe('IN_QUEUE');
    const jobId = r.body.id as string;
    expect((await platform.db.jobs.get(jobId, Date.now(), { input: false }))?.submittedBy).toBe(A);
    const polled = await call(base, 'GET', `/${B}/status-sync/${jobId}?wait=1000`, undefined, tokenA);
    expect({ status: polled.status, id: polled.body.id }).toEqual({ status: 200, id: jobId });
  });

  it('leaves client keys every route: a job a call token submitted is theirs to read, retry and purge', async () => {
    const submitted = await call(base, 'POST', `/${B}/run`, { input: { mine: 2 } }, tokenA);
    const jobId = submitted.body.id as string;
    expect((await call(base, 'GET', `/${B}/status/${jobId}?ttl=60000`)).status).toBe(200);
    const clientJob = await clientJobOnB();
    expect(
      (await platform.db.jobs.get(clientJob, Date.now(), { input: false }))?.submittedBy,
    ).toBeUndefined();
    const purged = await call(base, 'POST', `/${B}/purge-queue`);
    expect(purged.status).toBe(200);
    expect(purged.body.removed).toBeGreaterThanOrEqual(2);
  });
});
