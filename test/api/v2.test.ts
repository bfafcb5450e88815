/**
 * The v2 API rows of docs/architecture.md#jobs and docs/api.md#errors over real HTTP on loopback, against the real SQLite store, with
 * a worker speaking the worker protocol.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EndpointConfig } from '../../core/deployment.js';
import { cpuEndpoint } from '../infra/fixtures.js';
import { call, startTestPlatform, type TestPlatform, testApiKey } from '../support/platform.js';

let platform: TestPlatform;
let base: string;
let n = 0;
/** A fresh endpoint per test keeps queues apart. */
async function freshEndpoint(config: Record<string, unknown> = {}) {
  const id = `ep${++n}`;
  await platform.addEndpoint(id, config);
  return { id, worker: platform.protocolWorker(id) };
}

beforeAll(async () => {
  platform = await startTestPlatform({ webhookRetryDelayMs: 50, webhookAllow: ['127.0.0.1'] });
  base = platform.baseUrl;
});
afterAll(async () => {
  await platform.stop();
});

describe('submission', () => {
  it('/run answers 200 {id, status: IN_QUEUE} at once', async () => {
    const { id } = await freshEndpoint();
    const r = await call(base, 'POST', `/${id}/run`, { input: { a: 1 } });
    expect(r.status).toBe(200);
    expect(Object.keys(r.body).sort()).toEqual(['id', 'status']);
    expect(r.body.status).toBe('IN_QUEUE');
    expect(r.body.id).toMatch(/^[0-9a-f-]{36}-u1$/);
  });

  it.each([
    ['no body', undefined, /JSON object/],
    ['invalid JSON', '{"input":', /not valid JSON/],
    ['input missing', {}, /input/],
    ['input not an object', { input: 'text' }, /input/],
    ['unknown field', { input: {}, surprise: 1 }, /unknown field 'surprise'/],
    ['policy out of range', { input: {}, policy: { executionTimeout: 10 } }, /policy.executionTimeout/],
    // Kept exact as a marker string on the way in (core/json.ts), still refused as a number out of range.
    [
      'policy beyond 2^53',
      '{"input":{},"policy":{"ttl":99999999999999999999}}',
      /policy.ttl': Too big: .*604800000/,
    ],
    ['webhook not a URL', { input: {}, webhook: 'nope' }, /webhook/],
    [
      'a webhook URL past 8192 characters',
      { input: {}, webhook: `https://hooks.example.com/${'a'.repeat(8_200)}` },
      /webhook.*at most 8192 characters/,
    ],
  ])('/run with %s is a 400 with a message', async (_name, body, message) => {
    const { id } = await freshEndpoint();
    const r = await call(base, 'POST', `/${id}/run`, body);
    expect(r.status).toBe(400);
    expect(r.body.error).toMatch(message);
    expect((await call(base, 'GET', `/${id}/health`)).body.jobs.inQueue).toBe(0);
  });

  it('/run over 10 MB is a 413; /runsync takes up to 20 MB', async () => {
    const { id } = await freshEndpoint();
    const big = { input: { blob: 'x'.repeat(11 * 1024 * 1024) } };
    const run = await call(base, 'POST', `/${id}/run`, big);
    expect(run.status).toBe(413);
    expect(run.body.error).toMatch(/at most 10485760 bytes/);
    const sync = await call(base, 'POST', `/${id}/runsync?wait=1000`, big);
    expect(sync.status).toBe(200);
    expect(sync.body.status).toBe('IN_QUEUE');
    const huge = await call(base, 'POST', `/${id}/runsync`, {
      input: { blob: 'x'.repeat(21 * 1024 * 1024) },
    });
    expect(huge.status).toBe(413);
    expect(typeof huge.body.error).toBe('string');
  });

  it.each(['abc', '-5', '1.5'])('/runsync?wait=%s is a 400', async (wait) => {
    const { id } = await freshEndpoint();
    const r = await call(base, 'POST', `/${id}/runsync?wait=${wait}`, { input: {} });
    expect(r.status).toBe(400);
    expect(r.body.error).toMatch(/wait/);
  });

  it("/runsync?wait=0, as runpod's Go SDK sends it for a 0 s timeout, is a 200; so is status-sync's", async () => {
    const { id, worker } = await freshEndpoint();
    const serving = worker.serve();
    const r = await call(base, 'POST', `/${id}/runsync?wait=0`, { input: { echo: 'go' } });
    const polled = await call(base, 'POST', `/${id}/status-sync/${r.body.id}?wait=0`);
    await serving.stop();
    expect([r.status, polled.status]).toEqual([200, 200]);
    expect(r.body.id).toMatch(/^sync-/);
    expect(polled.body.id).toBe(r.body.id);
  });

  it('/runsync that outlasts its wait answers 200 {id, status}', async () => {
    const { id } = await freshEndpoint();
    const r = await call(base, 'POST', `/${id}/runsync?wait=1000`, { input: {} });
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ id: expect.stringMatching(/^sync-/), status: 'IN_QUEUE' });
  });

  it('/runsync returns id, status, delayTime, executionTime and output', async () => {
    const { id, worker } = await freshEndpoint();
    const serving = worker.serve();
    const r = await call(base, 'POST', `/${id}/runsync`, { input: { echo: 'hi' } });
    await serving.stop();
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ status: 'COMPLETED', output: 'hi' });
    expect(r.body.delayTime).toBeGreaterThanOrEqual(0);
    expect(r.body.executionTime).toBeGreaterThanOrEqual(0);
  });
});

describe('authentication', () => {
  it('accepts the bare key and the Bearer form, rejects others with 401', async () => {
    const { id } = await freshEndpoint();
    expect((await call(base, 'GET', `/${id}/health`, undefined, { authorization: testApiKey })).status).toBe(
      200,
    );
    expect((await call(base, 'GET', `/${id}/health`)).status).toBe(200);
    const workerToken = platform.adoptWorker(id).token;
    for (const authorization of ['', 'Bearer', 'Bearer wrong', 'wrong', workerToken]) {
      const r = await call(base, 'GET', `/${id}/health`, undefined, { authorization });
      expect(r.status).toBe(401);
      expect(r.body).toEqual({ error: 'Missing or invalid API key' });
    }
  });

  it('a client key cannot take jobs', async () => {
    const { id } = await freshEndpoint();
    const r = await call(base, 'GET', `/${id}/job-take/w1`);
    expect(r.status).toBe(401);
  });
});

describe('lookups', () => {
  it('unknown endpoint, job and route are 404 with an error body', async () => {
    const { id } = await freshEndpoint();
    expect(await call(base, 'GET', `/nope/health`)).toEqual({
      status: 404,
      body: { error: 'Endpoint nope not found' },
    });
    const job = await call(base, 'GET', `/${id}/status/missing`);
    expect(job.status).toBe(404);
    expect(job.body.error).toMatch(/not found/);
    const route = await call(base, 'GET', `/${id}/nonsense`);
    expect(route.status).toBe(404);
  });

  it('status answers GET and POST and echoes input while queued', async () => {
    const { id } = await freshEndpoint();
    const { body } = await call(base, 'POST', `/${id}/run`, { input: { q: 1 } });
    for (const method of ['GET', 'POST']) {
      const r = await call(base, method, `/${id}/status/${body.id}`);
      expect(r.status).toBe(200);
      expect(r.body).toMatchObject({ id: body.id, status: 'IN_QUEUE', input: { q: 1 } });
    }
  });

  it('status and status-sync show an unfinished job’s input with every character and digit', async () => {
    // Views are written with the input as the store holds it (JsonText): a 70 KB string, escapes and
    // a 64-bit integer come back exactly as a parse and a second write would have written them.
    const { id, worker } = await freshEndpoint();
    // The JSON text of a string with escapes in it (a quote, a backslash, a tab) and non-ASCII.
    const text = `${'x'.repeat(70_000)} \\"quoted\\" \\\\ tab\\t é 🚀`;
    const input = `{"seed":18446744073709551615,"text":"${text}","nested":{"n":[1,2.5,-3e-7]}}`;
    const { body } = await call(base, 'POST', `/${id}/run`, `{"input":${input}}`);
    const expected = `"input":{"seed":18446744073709551615,"text":"${text}","nested":{"n":[1,2.5,-3e-7]}}`;
    const raw = async (path: string) =>
      (await fetch(`${base}${path}`, { headers: { authorization: `Bearer ${testApiKey}` } })).text();
    expect(await raw(`/${id}/status/${body.id}`)).toContain(expected);
    expect(await raw(`/${id}/status-sync/${body.id}?wait=1000`)).toContain(expected);
    const taken = await worker.take();
    expect(taken?.id).toBe(body.id);
    expect(await raw(`/${id}/status/${body.id}?ttl=60000`)).toContain(expected); // IN_PROGRESS, with ?ttl=
    await worker.done(body.id, { output: { ok: true } });
    const finished = await call(base, 'GET', `/${id}/status/${body.id}`);
    expect(finished.body).toMatchObject({ status: 'COMPLETED', output: { ok: true } });
    expect(finished.body.input).toBeUndefined();
  });
});

describe('transitions (docs/architecture.md#jobs)', () => {
  it('IN_QUEUE → CANCELLED: the queued job is removed before it starts', async () => {
    const { id, worker } = await freshEndpoint();
    const { body } = await call(base, 'POST', `/${id}/run`, { input: {} });
    expect(await call(base, 'POST', `/${id}/cancel/${body.id}`)).toEqual({
      status: 200,
      body: { id: body.id, status: 'CANCELLED' },
    });
    expect(await worker.take()).toBeUndefined();
  });

  it('IN_PROGRESS → CANCELLED: the worker is told to stop and its late result is refused', async () => {
    const { id, worker } = await freshEndpoint();
    const { body } = await call(base, 'POST', `/${id}/run`, { input: {} });
    const job = await worker.take();
    expect(job?.id).toBe(body.id);
    expect((await call(base, 'GET', `/${id}/status/${body.id}`)).body.status).toBe('IN_PROGRESS');
    const stopping = worker.jobsToStop();
    expect((await call(base, 'POST', `/${id}/cancel/${body.id}`)).body.status).toBe('CANCELLED');
    expect(await stopping).toEqual([body.id]);
    const late = await worker.done(body.id, { output: 'too late' });
    expect(late.status).toBe(409);
    expect((await call(base, 'GET', `/${id}/status/${body.id}`)).body).toMatchObject({ status: 'CANCELLED' });
  });

  it('cancel of a finished job answers 200 with the status it ended in; of a cancelled one CANCELLED again', async () => {
    const { id, worker } = await freshEndpoint();
    const { body } = await call(base, 'POST', `/${id}/run`, { input: {} });
    await worker.take();
    await worker.done(body.id, { output: 1 });
    expect(await call(base, 'POST', `/${id}/cancel/${body.id}`)).toEqual({
      status: 200,
      body: { id: body.id, status: 'COMPLETED' },
    });
    expect((await call(base, 'GET', `/${id}/status/${body.id}`)).body).toMatchObject({
      status: 'COMPLETED',
      output: 1,
    });
    expect((await call(base, 'POST', `/${id}/cancel/unknown`)).status).toBe(404);
    const { body: other } = await call(base, 'POST', `/${id}/run`, { input: {} });
    await call(base, 'POST', `/${id}/cancel/${other.id}`);
    expect((await call(base, 'POST', `/${id}/cancel/${other.id}`)).body.status).toBe('CANCELLED');
  });

  it('FAILED → IN_QUEUE by retry: same id, original input, output cleared', async () => {
    const { id, worker } = await freshEndpoint();
    const { body } = await call(base, 'POST', `/${id}/run`, { input: { n: 7 } });
    await worker.take();
    await worker.done(body.id, { error: 'boom', output: { partial: true } });
    const failed = await call(base, 'GET', `/${id}/status/${body.id}`);
    expect(failed.body).toMatchObject({ status: 'FAILED', error: 'boom', output: { partial: true } });
    expect(await call(base, 'POST', `/${id}/retry/${body.id}`)).toEqual({
      status: 200,
      body: { id: body.id, status: 'IN_QUEUE' },
    });
    const queued = await call(base, 'GET', `/${id}/status/${body.id}`);
    expect(queued.body).toMatchObject({ id: body.id, status: 'IN_QUEUE', input: { n: 7 }, retries: 1 });
    expect(queued.body).not.toHaveProperty('output');
    expect(queued.body).not.toHaveProperty('error');
    const again = await worker.take();
    expect(again).toMatchObject({ id: body.id, input: { n: 7 } });
    expect((await call(base, 'GET', `/${id}/health`)).body.jobs.retried).toBe(1);
  });

  it('retry is refused for other statuses and unknown jobs', async () => {
    const { id, worker } = await freshEndpoint();
    const { body } = await call(base, 'POST', `/${id}/run`, { input: {} });
    const queued = await call(base, 'POST', `/${id}/retry/${body.id}`);
    expect(queued.status).toBe(409);
    expect(queued.body.error).toMatch(/only FAILED or TIMED_OUT/);
    await worker.take();
    await worker.done(body.id, { output: 'ok' });
    expect((await call(base, 'POST', `/${id}/retry/${body.id}`)).status).toBe(409);
    expect((await call(base, 'POST', `/${id}/retry/unknown`)).status).toBe(404);
  });

  it('purge-queue removes queued jobs; jobs in progress keep running', async () => {
    const { id, worker } = await freshEndpoint();
    const running = (await call(base, 'POST', `/${id}/run`, { input: {} })).body.id;
    await worker.take();
    for (let i = 0; i < 3; i++) await call(base, 'POST', `/${id}/run`, { input: { i } });
    expect(await call(base, 'POST', `/${id}/purge-queue`)).toEqual({
      status: 200,
      body: { removed: 3, status: 'completed' },
    });
    expect((await call(base, 'GET', `/${id}/status/${running}`)).body.status).toBe('IN_PROGRESS');
    expect((await worker.done(running, { output: 'fine' })).status).toBe(200);
    expect((await call(base, 'GET', `/${id}/status/${running}`)).body).toMatchObject({ status: 'COMPLETED' });
  });

  it("cancel racing completion: exactly one wins; the cancel answers the job's end either way", async () => {
    const { id, worker } = await freshEndpoint();
    for (let i = 0; i < 10; i++) {
      const { body } = await call(base, 'POST', `/${id}/run`, { input: {} });
      await worker.take();
      const [cancel, done] = await Promise.all([
        call(base, 'POST', `/${id}/cancel/${body.id}`),
        worker.done(body.id, { output: i }),
      ]);
      const final = (await call(base, 'GET', `/${id}/status/${body.id}`)).body.status;
      expect(cancel).toEqual({ status: 200, body: { id: body.id, status: final } });
      // The worker's result is refused (409) exactly when the cancel won.
      expect(done.status).toBe(final === 'CANCELLED' ? 409 : 200);
      expect(['CANCELLED', 'COMPLETED']).toContain(final);
    }
  });
});

describe('worker protocol', () => {
  it('progress updates show while IN_PROGRESS and never overwrite a final result', async () => {
    const { id, worker } = await freshEndpoint();
    const { body } = await call(base, 'POST', `/${id}/run`, { input: {} });
    await worker.take();
    await worker.done(body.id, { status: 'IN_PROGRESS', output: { progress: '4/10' } });
    expect((await call(base, 'GET', `/${id}/status/${body.id}`)).body).toMatchObject({
      status: 'IN_PROGRESS',
      output: { progress: '4/10' },
    });
    await worker.done(body.id, { output: { final: true } });
    const late = await worker.done(body.id, { status: 'IN_PROGRESS', output: { progress: '9/10' } });
    expect(late.status).toBe(409);
    expect((await call(base, 'GET', `/${id}/status/${body.id}`)).body).toMatchObject({
      status: 'COMPLETED',
      output: { final: true },
    });
  });

  it('job-take-batch hands out up to batch_size jobs; 204 when empty', async () => {
    const { id, worker } = await freshEndpoint();
    expect(await worker.takeBatch(3)).toEqual([]);
    for (let i = 0; i < 4; i++) await call(base, 'POST', `/${id}/run`, { input: { i } });
    const batch = await worker.takeBatch(3);
    expect(batch.map((j) => j.input.i)).toEqual([0, 1, 2]);
  });

  it("job-take-batch hands a worker at most the endpoint's max_concurrency, the jobs it holds included", async () => {
    const config: EndpointConfig = {
      endpoint: { ...cpuEndpoint, resources: { ...cpuEndpoint.resources, maxConcurrency: 2 } },
      pythonVersion: '3.11',
    };
    const { id, worker } = await freshEndpoint(config);
    for (let i = 0; i < 5; i++) await call(base, 'POST', `/${id}/run`, { input: { i } });
    // A RunPod-SDK worker asks for as many as its own concurrency_modifier says.
    const first = await worker.takeBatch(10);
    expect(first.map((j) => j.input.i)).toEqual([0, 1]);
    // At the cap the take is held, not answered empty at once (the SDK would ask again at once) ...
    const next = worker.takeBatch(10);
    // ... until the worker lets a job go: then it gets one job, not the rest of the queue.
    expect((await worker.done(first[0]!.id, { output: 'ok' })).status).toBe(200);
    expect((await next).map((j) => j.input.i)).toEqual([2]);
    // Another worker of the endpoint still finds the rest.
    expect((await platform.protocolWorker(id).takeBatch(10)).map((j) => j.input.i)).toEqual([3, 4]);
    // A plain job-take at the cap claims nothing; its wait ends with a 204.
    await call(base, 'POST', `/${id}/run`, { input: { i: 5 } });
    expect(await worker.take()).toBeUndefined();
    expect((await call(base, 'GET', `/${id}/health`)).body.jobs.inQueue).toBe(1);
  });

  it('a job-take whose worker hung up claims nothing: the next job goes to the next take', async () => {
    const { id, worker } = await freshEndpoint();
    const leaving = new AbortController();
    const abandoned = worker.take(leaving.signal).catch(() => undefined);
    // Pauses only order the steps (the poll is waiting, then the hang-up has reached the platform);
    // the platform holds a poll 2 s, so a hang-up it missed would still be there to claim the job.
    await new Promise((resolve) => setTimeout(resolve, 300));
    leaving.abort();
    await abandoned;
    await new Promise((resolve) => setTimeout(resolve, 300));
    const { body } = await call(base, 'POST', `/${id}/run`, { input: {} });
    expect((await worker.take())?.id).toBe(body.id);
  });

  it('bad JSON on job-done is a 400; unknown job is a 404; over 20 MB is a 400 that fails the job', async () => {
    const { id, worker } = await freshEndpoint();
    const { body } = await call(base, 'POST', `/${id}/run`, { input: {} });
    await worker.take();
    const res = await fetch(
      `${platform.url}/v2/${id}/job-done/${worker.workerId}/${body.id}?isStream=false`,
      {
        method: 'POST',
        headers: { authorization: worker.token },
        body: '{not json',
      },
    );
    expect(res.status).toBe(400);
    expect((await worker.done('missing', { output: 1 })).status).toBe(404);
    expect((await call(base, 'GET', `/${id}/status/${body.id}`)).body.status).toBe('IN_PROGRESS');
    const big = await worker.done(body.id, { output: 'x'.repeat(20 * 1024 * 1024 + 10) });
    expect(big.status).toBe(400);
    expect(big.body.error).toMatch(/limit/);
    // The result can never be stored: the job ends now rather than run again (docs/security.md).
    const after = (await call(base, 'GET', `/${id}/status/${body.id}`)).body;
    expect(after.status).toBe('FAILED');
    expect(after.error).toMatch(/limit/);
  });

  it('job-done-batch ends each job as its own job-done would, and answers each job on its own', async () => {
    const { id, worker } = await freshEndpoint();
    const ids: string[] = [];
    for (let i = 0; i < 4; i++) ids.push((await call(base, 'POST', `/${id}/run`, { input: { i } })).body.id);
    await worker.takeBatch(3);
    const other = platform.protocolWorker(id);
    expect((await other.take())?.id).toBe(ids[3]);
    const r = await worker.doneBatch({
      jobs: [
        { id: ids[0], result: { output: { n: 0 } } },
        { id: ids[1], result: { error: 'boom' } },
        { id: ids[2], result: { output: 1 } },
        { id: ids[3], result: { output: 'not mine' } },
        { id: 'missing', result: { output: 1 } },
        { id: ids[2], result: 'not an object' },
      ],
    });
    expect(r.status).toBe(200);
    const [first, second, third, foreign, missing, bad] = r.body.jobs;
    expect(first).toEqual({ id: ids[0], statusCode: 200, status: 'COMPLETED' });
    expect(second).toEqual({ id: ids[1], statusCode: 200, status: 'FAILED' });
    expect(third).toEqual({ id: ids[2], statusCode: 200, status: 'COMPLETED' });
    expect(foreign).toMatchObject({ id: ids[3], statusCode: 409 });
    expect(missing).toMatchObject({ id: 'missing', statusCode: 404 });
    expect(bad).toMatchObject({ id: ids[2], statusCode: 400 });
    expect(bad.error).toMatch(/result of job/);
    const status = async (jobId: string) => (await call(base, 'GET', `/${id}/status/${jobId}`)).body;
    expect(await status(ids[0]!)).toMatchObject({ status: 'COMPLETED', output: { n: 0 } });
    expect(await status(ids[1]!)).toMatchObject({ status: 'FAILED', error: 'boom' });
    // Another worker's job is left to it.
    expect(await status(ids[3]!)).toMatchObject({ status: 'IN_PROGRESS' });
    expect((await other.done(ids[3]!, { output: 'mine' })).status).toBe(200);
  });

  it("job-done-batch: a bad body is a 400 for the whole batch; another endpoint's token is a 403", async () => {
    const { id, worker } = await freshEndpoint();
    const { body } = await call(base, 'POST', `/${id}/run`, { input: {} });
    await worker.take();
    const tooMany = Array.from({ length: 101 }, (_, i) => ({ id: `j${i}`, result: {} }));
    for (const bad of [{ jobs: [] }, { jobs: tooMany }, { jobs: [{ id: body.id }], more: 1 }, [], 'x']) {
      const r = await worker.doneBatch(bad);
      expect(r.status).toBe(400);
      expect(r.body.error).toMatch(/job-done-batch body/);
    }
    const stranger = (await freshEndpoint()).worker;
    const res = await fetch(`${platform.url}/v2/${id}/job-done-batch/${worker.workerId}`, {
      method: 'POST',
      headers: { authorization: stranger.token },
      body: JSON.stringify({ jobs: [{ id: body.id, result: { output: 'forged' } }] }),
    });
    expect(res.status).toBe(403);
    expect((await call(base, 'GET', `/${id}/status/${body.id}`)).body.status).toBe('IN_PROGRESS');
  });

  it('stream always carries `stream`, hands each chunk out once and splits chunks over 1 MB', async () => {
    const { id, worker } = await freshEndpoint();
    const { body } = await call(base, 'POST', `/${id}/run`, { input: {} });
    await worker.take();
    await worker.stream(body.id, 'first');
    const big = 'é'.repeat(700 * 1024); // 1.4 MB of UTF-8
    await worker.stream(body.id, big);
    const first = await call(base, 'GET', `/${id}/stream/${body.id}`);
    expect(first.body.status).toBe('IN_PROGRESS');
    expect(first.body.stream[0]).toEqual({ output: 'first' });
    const pieces = first.body.stream.slice(1).map((c: { output: string }) => c.output);
    expect(pieces.length).toBeGreaterThan(1);
    expect(pieces.join('')).toBe(big);
    for (const piece of pieces)
      expect(Buffer.byteLength(JSON.stringify({ output: piece }))).toBeLessThanOrEqual(1024 * 1024);
    await worker.done(body.id, { output: [] }, true);
    const last = await call(base, 'GET', `/${id}/stream/${body.id}`);
    expect(last.body).toEqual({ id: body.id, status: 'COMPLETED', stream: [] });
  });
});

describe('webhooks', () => {
  let receiver: Server;
  let url: string;
  const received: { path: string; body: any }[] = [];
  let failuresLeft = 0;

  beforeAll(async () => {
    receiver = createServer((req, res) => {
      let data = '';
      req.on('data', (c) => (data += c));
      req.on('end', () => {
        received.push({ path: req.url!, body: JSON.parse(data) });
        if (failuresLeft-- > 0) res.writeHead(500).end();
        else res.writeHead(200).end('ok');
      });
    });
    await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
    url = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}`;
  });
  afterAll(() => new Promise<void>((r) => receiver.close(() => r())));

  it('POSTs the final job with input and webhook, retrying twice on failure', async () => {
    const { id, worker } = await freshEndpoint();
    failuresLeft = 2;
    const { body } = await call(base, 'POST', `/${id}/run`, { input: { w: 1 }, webhook: `${url}/hook` });
    await worker.take();
    await worker.done(body.id, { output: 'done' });
    // Bounded by a deadline, not a count of polls: a busy machine makes each turn slower.
    const deadline = Date.now() + 10_000;
    while (received.length < 3) {
      if (Date.now() > deadline) throw new Error(`3 webhook attempts within 10 s; got ${received.length}`);
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(received).toHaveLength(3);
    expect(received[2]!.body).toMatchObject({
      id: body.id,
      status: 'COMPLETED',
      output: 'done',
      input: { w: 1 },
      webhook: `${url}/hook`,
    });
  });
});
