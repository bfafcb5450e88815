/**
 * Worker pools end to end: real Python worker processes (`python -m ferry.worker`) started by the
 * embedded platform, reached through the v2 API and the load-balanced front door over HTTP.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import type { IncomingMessage } from 'node:http';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { scanProject } from '../../cli/build/scan.js';
import { recordFor } from '../support/endpoints.js';
import { call, startTestPlatform, type TestPlatform, testApiKey } from '../support/platform.js';

const projectDir = resolve('test/e2e/fixtures/workers');
let platform: TestPlatform;
let base: string;
let scratch: string;

/** The first value `ok` accepts; throws with the last one seen once `timeoutMs` is over. */
const until = async <T>(probe: () => Promise<T>, ok: (v: T) => boolean, timeoutMs = 20_000): Promise<T> => {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (ok(value)) return value;
    if (Date.now() > deadline)
      throw new Error(`not there after ${timeoutMs} ms; last seen: ${JSON.stringify(value)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
};

beforeAll(async () => {
  scratch = mkdtempSync(join(tmpdir(), 'ferry-workers-'));
  platform = await startTestPlatform({
    workerWaitMs: 5_000,
    workers: {
      ferryPythonPath: resolve('worker-image/python'),
      tickMs: 100,
      stopGraceMs: 3_000,
      // As if nvidia-smi listed two GPUs: GPU endpoints get gpu_count of them, CPU ones none.
      gpuCount: 2,
      drainMs: 3_000,
      reconcileIntervalMs: 500,
    },
  });
  base = platform.baseUrl;
  const { endpoints } = await scanProject({ projectDir });
  for (const endpoint of endpoints) await platform.db.control.putEndpoint(recordFor(endpoint, projectDir));
  await platform.workers!.reconcile();
});

afterAll(async () => {
  await platform?.stop();
  rmSync(scratch, { recursive: true, force: true });
});

describe('queue-based handlers', () => {
  it('a sync function through runsync', async () => {
    const r = await call(base, 'POST', '/sync-echo/runsync', { input: { text: 'hello' } });
    expect(r.body).toMatchObject({ status: 'COMPLETED', output: { echo: 'hello' } });
  });

  it('an async function through run and status', async () => {
    const { body } = await call(base, 'POST', '/async-echo/run', { input: { text: 'later' } });
    const done = await until(
      () => call(base, 'GET', `/async-echo/status/${body.id}`),
      (r) => r.body.status === 'COMPLETED',
    );
    expect(done.body.output).toEqual({ echo: 'later' });
  });

  it('a generator streams its chunks and aggregates them as the output', async () => {
    const { body } = await call(base, 'POST', '/gen/run', { input: { n: 3 } });
    const chunks: unknown[] = [];
    let status = '';
    while (!['COMPLETED', 'FAILED'].includes(status)) {
      const r = await call(base, 'GET', `/gen/stream/${body.id}`);
      status = r.body.status;
      chunks.push(...r.body.stream);
    }
    expect(chunks).toEqual([{ output: { i: 0 } }, { output: { i: 1 } }, { output: { i: 2 } }]);
    expect((await call(base, 'GET', `/gen/status/${body.id}`)).body.output).toEqual([
      { i: 0 },
      { i: 1 },
      { i: 2 },
    ]);
  });

  it('an async generator through runsync', async () => {
    const r = await call(base, 'POST', '/agen/runsync', { input: { n: 2 } });
    expect(r.body).toMatchObject({ status: 'COMPLETED', output: ['tok0', 'tok1'] });
  });

  it('a handler exception ends FAILED with its message', async () => {
    const r = await call(base, 'POST', '/boom/runsync', { input: {} });
    expect(r.body.status).toBe('FAILED');
    expect(r.body.error).toMatch(/the handler broke/);
    expect(r.body.error).toMatch(/ValueError/);
  });
});

describe('stopping jobs', () => {
  it('cancel of a running job stops its handler', async () => {
    const tickFile = join(scratch, 'ticks');
    const { body } = await call(base, 'POST', '/ticker/run', { input: { tick_file: tickFile } });
    await until(async () => existsSync(tickFile), Boolean);
    expect((await call(base, 'POST', `/ticker/cancel/${body.id}`)).body.status).toBe('CANCELLED');
    // The file must stop growing: sample it until two readings 600 ms apart agree (a loaded
    // machine may take a while to deliver the stop), then check it stays put.
    const sizeAfter = async (ms: number) => {
      await new Promise((r) => setTimeout(r, ms));
      return statSync(tickFile).size;
    };
    let size = statSync(tickFile).size;
    for (let i = 0; i < 25; i++) {
      const next = await sizeAfter(600);
      if (next === size) break;
      size = next;
    }
    expect(await sizeAfter(1_000)).toBe(size);
    expect((await call(base, 'GET', `/ticker/status/${body.id}`)).body.status).toBe('CANCELLED');
  });

  it('the endpoint execution timeout ends a job TIMED_OUT', async () => {
    const { body } = await call(base, 'POST', '/slow/run', { input: {} });
    const done = await until(
      () => call(base, 'GET', `/slow/status/${body.id}`),
      (r) => r.body.status === 'TIMED_OUT',
    );
    expect(done.body.status).toBe('TIMED_OUT');
    expect(done.body.error).toMatch(/1500 ms/);
  });

  it('a worker killed mid-job leaves the job to be taken again and completed', async () => {
    const marker = join(scratch, 'crashy-marker');
    const { body } = await call(base, 'POST', '/crashy/run', { input: { marker } });
    await until(async () => existsSync(marker) && readFileSync(marker, 'utf8').length > 0, Boolean);
    process.kill(Number(readFileSync(marker, 'utf8')), 'SIGKILL');
    const done = await until(
      () => call(base, 'GET', `/crashy/status/${body.id}`),
      (r) => r.body.status === 'COMPLETED',
    );
    expect(done.body).toMatchObject({ status: 'COMPLETED', output: 'second try' });
  });

  it("the line a job printed just before its worker died is in the job's log, once", async () => {
    const marker = join(scratch, 'dies-marker');
    const { body } = await call(base, 'POST', '/dies/run', { input: { marker } });
    const done = await until(
      () => call(base, 'GET', `/dies/status/${body.id}`),
      (r) => r.body.status === 'COMPLETED',
    );
    expect(done.body.output).toBe('second try');
    const texts = async () => {
      const r = await call(platform.url, 'GET', `/manage/v1/endpoints/dies/logs?job=${body.id}`);
      return (r.body.lines as { text: string; jobId?: string }[]).map((line) => line.text);
    };
    const lines = await until(texts, (t) => t.includes('second try'));
    expect(lines.filter((text) => text === 'about to crash dies-marker')).toHaveLength(1);
    expect(lines.filter((text) => text === 'second try')).toHaveLength(1);
    // Kept out of the worker's own lines: the endpoint's log holds each line once.
    const all = await call(platform.url, 'GET', '/manage/v1/endpoints/dies/logs');
    const texts2 = (all.body.lines as { text: string }[]).map((line) => line.text);
    expect(texts2.filter((text) => text.includes('about to crash'))).toHaveLength(1);
    expect(texts2.filter((text) => text.includes('::ferry-log'))).toHaveLength(0);
    // Nor are the marked copies the pool keeps until lines are sent worker lines in the terminal.
    expect(platform.workers!.pool('dies')!.recentLogs().join('\n')).not.toContain('::ferry-log');
  });
});

describe('job-done-batch', () => {
  it('results that finish together go back in one request, each job with its own output', async () => {
    const routes: string[] = [];
    const onRequest = (request: IncomingMessage) => {
      const [v2, endpoint, route] = (request.url ?? '').split('?', 1)[0]!.split('/').slice(1);
      if (v2 === 'v2' && endpoint === 'many' && route?.startsWith('job-done')) routes.push(route);
    };
    platform.server.server.on('request', onRequest);
    try {
      const ids = await Promise.all(
        Array.from(
          { length: 16 },
          async (_, i) => (await call(base, 'POST', '/many/run', { input: { i } })).body.id,
        ),
      );
      for (const [i, id] of ids.entries()) {
        const done = await until(
          () => call(base, 'GET', `/many/status/${id}`),
          (r) => r.body.status === 'COMPLETED',
        );
        expect(done.body.output).toEqual({ i });
      }
      expect(routes).toContain('job-done-batch');
      // Fewer requests than jobs: that is the point.
      expect(routes.length).toBeLessThan(ids.length);
    } finally {
      platform.server.server.off('request', onRequest);
    }
  });
});

describe('scaling', () => {
  it('scales 0 → N → 0 under a burst, and health follows', async () => {
    const health = () => call(base, 'GET', '/burst/health');
    const workers = (r: { body: { workers: { idle: number; running: number } } }) =>
      r.body.workers.idle + r.body.workers.running;
    expect(workers(await health())).toBe(0);
    const ids: string[] = [];
    for (let i = 0; i < 9; i++)
      ids.push((await call(base, 'POST', '/burst/run', { input: { ms: 600 } })).body.id);
    const peak = await until(health, (r) => workers(r) >= 2);
    expect(workers(peak)).toBeGreaterThanOrEqual(2);
    expect(workers(peak)).toBeLessThanOrEqual(3);
    const pids = new Set<number>();
    for (const id of ids) {
      const r = await until(
        () => call(base, 'GET', `/burst/status/${id}`),
        (s) => s.body.status === 'COMPLETED',
      );
      pids.add(r.body.output);
    }
    expect(pids.size).toBeGreaterThanOrEqual(2);
    const idle = await until(
      health,
      (r) => workers(r) === 0 && platform.workers!.pool('burst')!.size === 0,
      30_000,
    );
    expect(workers(idle)).toBe(0);
    expect(platform.workers!.pool('burst')!.size).toBe(0);
  });
});

describe('GPUs', () => {
  it('gpu_count decides CUDA_VISIBLE_DEVICES; CPU endpoints see no GPU', async () => {
    const gpu = await call(base, 'POST', '/gpu-env/runsync', { input: {} });
    expect(gpu.body.output).toEqual({ cuda_visible_devices: '0' });
    const cpu = await call(base, 'POST', '/cpu-env/runsync', { input: {} });
    expect(cpu.body.output).toEqual({ cuda_visible_devices: '' });
  });
});

describe('load-balanced endpoints', () => {
  it('serves POST and GET routes over HTTP with the API key', async () => {
    const lb = `${platform.url}/lb/lb`;
    const headers = { authorization: `Bearer ${testApiKey}`, 'content-type': 'application/json' };
    const post = await fetch(`${lb}/process`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ input_data: { a: 1 } }),
    });
    expect(post.status).toBe(200);
    expect(await post.json()).toEqual({ got: { a: 1 } });
    const get = await fetch(`${lb}/items/42?q=x`, { headers });
    expect(await get.json()).toEqual({ id: '42', q: 'x' });
    const noKey = await fetch(`${lb}/process`, { method: 'POST', body: '{}' });
    expect(noKey.status).toBe(401);
    // A method the route does not take: 405 with the Allow header a 405 must carry (RFC 9110).
    const wrongMethod = await fetch(`${lb}/process`, { headers });
    expect(wrongMethod.status).toBe(405);
    expect(wrongMethod.headers.get('allow')).toBe('POST');
    expect(await wrongMethod.json()).toEqual({ error: 'method GET not allowed for /process; allowed: POST' });
  });

  it('a body nested too deep is a 400 from the worker, and HEAD answers as GET without a body', async () => {
    const lb = `${platform.url}/lb/lb`;
    const authorization = `Bearer ${testApiKey}`;
    // Not a JSON content type, so the front door forwards it unchecked; the worker reads it as JSON.
    const deep = await fetch(`${lb}/process`, {
      method: 'POST',
      headers: { authorization, 'content-type': 'text/plain' },
      body: `{"input_data":${'['.repeat(100_000)}${']'.repeat(100_000)}}`,
    });
    expect(deep.status).toBe(400);
    expect(((await deep.json()) as { error: string }).error).toContain('at most 512 levels are accepted');
    // HEAD was a 501 text/html from the worker; now the GET's status and headers, length included.
    const head = await fetch(`${lb}/items/42?q=x`, { method: 'HEAD', headers: { authorization } });
    expect(head.status).toBe(200);
    expect(head.headers.get('content-type')).toBe('application/json');
    expect(await head.text()).toBe('');
    const get = await fetch(`${lb}/items/42?q=x`, { headers: { authorization } });
    expect(head.headers.get('content-length')).toBe(String((await get.arrayBuffer()).byteLength));
  });

  it('hands a path parameter its text decoded once, a badly encoded one too, never a 400 (docs/api.md#load-balanced-endpoints)', async () => {
    // The front door's router answered /items/x% 400 before the worker heard of it (test/api/lb-path-encoding.test.ts).
    const authorization = `Bearer ${testApiKey}`;
    for (const [path, id] of [
      ['/items/x%', 'x%'],
      ['/items/a%zz', 'a%zz'],
      ['/items/%FF', '\ufffd'],
      ['/items/a%20b', 'a b'],
      ['/items/a%2Fb', 'a/b'],
      ['/it%65ms/7', '7'],
    ] as const) {
      const answer = await fetch(`${platform.url}/lb/lb${path}`, { headers: { authorization } });
      expect([path, answer.status, await answer.json()]).toEqual([path, 200, { id, q: null }]);
    }
  });

  it("refuses requests that reach the worker's own port around the front door", async () => {
    // Through the front door first: a worker serves now, and its port is the last one it logged.
    const through = await fetch(`${platform.url}/lb/lb/items/7`, {
      headers: { authorization: `Bearer ${testApiKey}` },
    });
    expect(await through.json()).toEqual({ id: '7', q: null });
    // Another endpoint's code on this machine can find the port (here: the worker's own log line).
    const logs = await call(platform.url, 'GET', '/manage/v1/endpoints/lb/logs');
    const port = [...JSON.stringify(logs.body).matchAll(/on http:\/\/127\.0\.0\.1:(\d+)/g)].at(-1)?.[1];
    expect(port).toBeDefined();
    for (const [path, init] of [
      ['/process', { method: 'POST', body: JSON.stringify({ input_data: { a: 1 } }) }],
      ['/items/42', {}],
      ['/ping', {}],
    ] as const) {
      const direct = await fetch(`http://127.0.0.1:${port}${path}`, {
        ...init,
        headers: { 'content-type': 'application/json', 'x-ferry-lb-secret': 'guessed' },
      });
      expect([path, direct.status]).toEqual([path, 403]);
      expect(await direct.json()).toEqual({ error: 'requests reach this worker through the platform only' });
    }
  });
});
