/**
 * The management API and job logs on the embedded platform, with real Python workers: a handler's
 * print() lines reach `GET /manage/v1/.../logs?job=` with their stream and worker, the job detail
 * carries input, output, timings and logs, and every route checks the key and its input.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { scanProject } from '../../cli/build/scan.js';
import { recordFor } from '../support/endpoints.js';
import { call, startTestPlatform, type TestPlatform } from '../support/platform.js';

const projectDir = resolve('test/e2e/fixtures/observe');
let platform: TestPlatform;
let v2: string;
let manage: string;

async function until<T>(probe: () => Promise<T>, ok: (v: T) => boolean): Promise<T> {
  for (;;) {
    const value = await probe();
    if (ok(value)) return value;
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function runToEnd(endpoint: string, input: unknown) {
  const { body } = await call(v2, 'POST', `/${endpoint}/run`, { input });
  const done = await until(
    () => call(v2, 'POST', `/${endpoint}/status-sync/${body.id}?wait=5000`),
    (r) => ['COMPLETED', 'FAILED'].includes(r.body.status),
  );
  return done.body as { id: string; status: string; output?: unknown; error?: string };
}

beforeAll(async () => {
  platform = await startTestPlatform({
    workerWaitMs: 5_000,
    workers: { ferryPythonPath: resolve('worker-image/python'), tickMs: 100, reconcileIntervalMs: 500 },
  });
  v2 = platform.baseUrl;
  manage = `${platform.url}/manage/v1`;
  const { endpoints } = await scanProject({ projectDir });
  for (const endpoint of endpoints) await platform.db.control.putEndpoint(recordFor(endpoint, projectDir));
  await platform.addEndpoint('quiet');
  await platform.workers!.reconcile();
}, 60_000);

afterAll(async () => {
  await platform?.stop();
});

describe('job logs', () => {
  it("a job run through /run has its handler's print() lines, by stream and worker", async () => {
    const job = await runToEnd('chatty', { name: 'Ada', lines: 3 });
    expect(job.status).toBe('COMPLETED');
    const { status, body } = await call(manage, 'GET', `/endpoints/chatty/logs?job=${job.id}`);
    expect(status).toBe(200);
    const lines = body.lines as {
      text: string;
      stream: string;
      jobId: string;
      workerId: string;
      atMs: number;
    }[];
    expect(lines.map((l) => [l.stream, l.text])).toEqual([
      ['stdout', 'working on Ada: step 0'],
      ['stdout', 'working on Ada: step 1'],
      ['stdout', 'working on Ada: step 2'],
      ['stderr', 'careful, Ada'],
    ]);
    expect(new Set(lines.map((l) => l.jobId))).toEqual(new Set([job.id]));
    expect(lines[0]!.workerId).toMatch(/.+/);
    expect(lines[0]!.atMs).toBeGreaterThan(Date.now() - 600_000);
  });

  it("another job's lines stay out, and --follow's cursor returns only newer lines", async () => {
    const first = await runToEnd('chatty', { name: 'One', lines: 1 });
    const page = await call(manage, 'GET', `/endpoints/chatty/logs?job=${first.id}`);
    expect(page.body.lines.map((l: { text: string }) => l.text)).toEqual([
      'working on One: step 0',
      'careful, One',
    ]);
    const again = await call(manage, 'GET', `/endpoints/chatty/logs?job=${first.id}&after=${page.body.next}`);
    expect(again.body.lines).toEqual([]);
    const second = await runToEnd('chatty', { name: 'Two', lines: 1 });
    const all = await call(manage, 'GET', `/endpoints/chatty/logs?after=${page.body.next}`);
    const jobLines = all.body.lines.filter((l: { jobId?: string }) => l.jobId !== undefined);
    expect(new Set(jobLines.map((l: { jobId: string }) => l.jobId))).toEqual(new Set([second.id]));
  });

  it("the endpoint's log also has each worker's own lines (no job)", async () => {
    const all = await until(
      () => call(manage, 'GET', '/endpoints/chatty/logs?limit=5000'),
      (r) => r.body.lines.some((l: { jobId?: string }) => l.jobId === undefined),
    );
    const own = all.body.lines.filter((l: { jobId?: string }) => l.jobId === undefined);
    expect(own[0].workerId).toMatch(/.+/);
  });

  it('a failed job shows its error and the lines before it', async () => {
    const job = await runToEnd('boom', { why: 'testing' });
    expect(job.status).toBe('FAILED');
    const { body } = await call(manage, 'GET', `/endpoints/boom/jobs/${job.id}`);
    expect(body).toMatchObject({ id: job.id, status: 'FAILED', input: { why: 'testing' } });
    expect(body.error).toContain('boom: testing');
    expect(body.logs.map((l: { text: string }) => l.text)).toContain('about to fail');
  });
});

describe('management API', () => {
  it('lists endpoints with health and scaling', async () => {
    const { status, body } = await call(manage, 'GET', '/endpoints');
    expect(status).toBe(200);
    const chatty = body.endpoints.find((e: { id: string }) => e.id === 'chatty');
    expect(chatty).toMatchObject({ name: 'chatty', kind: 'queue', scaling: { workersMin: 0 } });
    expect(chatty.health.jobs.completed).toBeGreaterThanOrEqual(1);
    expect(chatty.queue).toEqual({ visible: expect.any(Number), urgent: expect.any(Number) });
  });

  /** An endpoint of `kind` named `id`: `head` first (what breaks it), then one worker always. */
  const brokenSource = (kind: 'lb' | 'queue', id: string, head: string, endpointArgs: string) =>
    kind === 'lb'
      ? `${head}\nfrom ferry import Endpoint\n\napi = Endpoint(name="${id}", cpu="1-2", workers=(1, 1)${endpointArgs})\n\n\n@api.get("/x")\ndef x():\n    return 1\n`
      : `${head}\nfrom ferry import Endpoint\n\n\n@Endpoint(name="${id}", cpu="1-2", workers=(1, 1)${endpointArgs})\ndef handler(job):\n    return 1\n`;

  /**
   * Deploys the one endpoint of `source` (a module's text) under `id` from a temp folder, runs `use`
   * with the folder, then the endpoint and the folder go.
   */
  async function deployed(id: string, source: string, use: (dir: string) => Promise<void>) {
    const dir = mkdtempSync(join(tmpdir(), 'ferry-manage-'));
    try {
      writeFileSync(join(dir, 'app.py'), source);
      const { endpoints } = await scanProject({ projectDir: dir });
      await platform.db.control.putEndpoint(recordFor(endpoints[0]!, dir, id));
      await platform.workers!.reconcile();
      await use(dir);
    } finally {
      await platform.db.control.deleteEndpoint(id);
      await platform.workers!.reconcile();
      rmSync(dir, { recursive: true, force: true });
    }
  }

  /**
   * Deploys a broken endpoint of `kind` (brokenSource) and waits until the local supervisor calls it
   * failing; `check` sees its summary, then the endpoint goes.
   */
  async function failingEndpoint(
    kind: 'lb' | 'queue',
    id: string,
    head: string,
    endpointArgs: string,
    check: (summary: Record<string, any>) => Promise<void>,
  ) {
    await deployed(id, brokenSource(kind, id, head, endpointArgs), async () =>
      check(
        await until(
          async () => (await call(manage, 'GET', `/endpoints/${id}`)).body,
          // A load-balanced endpoint's problem sits beside its summary; a queue endpoint's in its health.
          (e) => (e.problem ?? e.health?.problem)?.state === 'failing',
        ),
      ),
    );
  }

  it("shows a load-balanced endpoint's workers that cannot start as its problem (it has no health)", async () => {
    // Its workers die at import, one start after another, until the supervisor calls it failing.
    await failingEndpoint('lb', 'brokenapi', 'import ferry_no_such_package_xyz', '', async (failing) => {
      expect(failing.kind).toBe('lb');
      expect(failing.health).toBeUndefined();
      expect(failing.problem.reason).toMatch(/workers in a row exited/);
      const listed = (await call(manage, 'GET', '/endpoints')).body.endpoints;
      expect(listed.find((e: { id: string }) => e.id === 'brokenapi').problem.state).toBe('failing');
      // A queue endpoint with working workers has none, in its health or beside it.
      const chatty = listed.find((e: { id: string }) => e.id === 'chatty');
      expect(chatty.problem).toBeUndefined();
      expect(chatty.health.problem).toBeUndefined();
    });
  }, 60_000);

  it("counts a load-balanced endpoint's workers beside its summary: running while it serves, then idle", async () => {
    // A route that answers once the file `go` is there: its worker is running until then.
    const source = [
      'import os',
      'import time',
      '',
      'from ferry import Endpoint',
      '',
      'api = Endpoint(name="waitapi", cpu="1-2", workers=(0, 1), idle_timeout=60)',
      '',
      '',
      '@api.post("/wait")',
      'def wait(go):',
      '    while not os.path.exists(go):',
      '        time.sleep(0.05)',
      '    return {"went": True}',
      '',
    ].join('\n');
    await deployed('waitapi', source, async (dir) => {
      const summary = async () => (await call(manage, 'GET', '/endpoints/waitapi')).body;
      // None before a call: it scales from 0.
      expect(await summary()).toMatchObject({ kind: 'lb', workers: { idle: 0, running: 0 } });
      const go = join(dir, 'go');
      const answer = call(platform.url, 'POST', '/lb/waitapi/wait', { go });
      const serving = await until(summary, (e) => e.workers?.running === 1);
      // It has no jobs, so no health: the counts sit beside its summary.
      expect(serving.health).toBeUndefined();
      expect(serving.workers).toEqual({ idle: 0, running: 1 });
      // The list says the same as the endpoint's own summary.
      const listed = (await call(manage, 'GET', '/endpoints')).body.endpoints;
      expect(listed.find((e: { id: string }) => e.id === 'waitapi').workers).toEqual({ idle: 0, running: 1 });
      writeFileSync(go, '');
      expect(await answer).toMatchObject({ status: 200, body: { went: true } });
      // Answered, its worker stays for its idle timeout, idle.
      expect((await until(summary, (e) => e.workers?.running === 0)).workers).toEqual({
        idle: 1,
        running: 0,
      });
    });
  }, 60_000);

  it('a load-balanced worker silent past its health_check_grace is stopped and counted, as on AWS', async () => {
    // A model load that never ends: the worker never answers GET /ping. With a 1 s grace, each is
    // stopped after it, and the third in a row makes the endpoint failing.
    await failingEndpoint(
      'lb',
      'silentapi',
      'import time\n\ntime.sleep(600)',
      ', health_check_grace=1',
      async (failing) => {
        expect(failing.problem.reason).toMatch(/3 workers in a row exited \(signal SIGKILL\)/);
        expect(failing.problem.lines.join('\n')).toMatch(
          /did not answer GET \/ping within its health check grace \(1 s\)/,
        );
      },
    );
  }, 60_000);

  it('a queue worker with no contact past its health_check_grace is stopped and counted, as on AWS', async () => {
    // The same hung model load in a queue endpoint that sets a grace: no job-take, no ping.
    await failingEndpoint(
      'queue',
      'silentworker',
      'import time\n\ntime.sleep(600)',
      ', health_check_grace=1',
      async (failing) => {
        expect(failing.health.problem.reason).toMatch(/3 workers in a row exited \(signal SIGKILL\)/);
        expect(failing.health.problem.lines.join('\n')).toMatch(
          /made no contact \(no job-take or ping\) within its start grace \(1 s\)/,
        );
      },
    );
  }, 60_000);

  it('one job has input, output and timings', async () => {
    const job = await runToEnd('chatty', { name: 'Grace', lines: 0 });
    const { body } = await call(manage, 'GET', `/endpoints/chatty/jobs/${job.id}`);
    expect(body).toMatchObject({
      status: 'COMPLETED',
      input: { name: 'Grace', lines: 0 },
      output: { greeting: 'Hello, Grace!' },
      // Not a generator, and no chunks: the console reads no stream for it.
      streams: false,
    });
    expect(body.delayMs).toBeGreaterThanOrEqual(0);
    expect(body.executionMs).toBeGreaterThanOrEqual(0);
    expect(body.finishedAt).toBeGreaterThanOrEqual(body.startedAt);
    // It streamed nothing: its stream read (the console's, which takes no chunk) is empty.
    expect((await call(manage, 'GET', `/endpoints/chatty/jobs/${job.id}/stream`)).body).toEqual({
      status: 'COMPLETED',
      stream: [],
      next: 0,
    });
  });

  it("reads a running job's chunks so far, only the new ones after `next`, and takes none from its client", async () => {
    const source = [
      'import os',
      'import time',
      '',
      'from ferry import Endpoint',
      '',
      '',
      '@Endpoint(name="trickle", cpu="1-2", idle_timeout=5)',
      'def trickle(go):',
      '    """Yield two chunks, wait for the file `go`, then yield a third."""',
      '    yield "one"',
      '    yield "two"',
      '    while not os.path.exists(go):',
      '        time.sleep(0.05)',
      '    yield "three"',
      '',
    ].join('\n');
    await deployed('trickle', source, async (dir) => {
      const go = join(dir, 'go');
      const { body } = await call(v2, 'POST', '/trickle/run', { input: { go } });
      const read = async (after?: number) =>
        (
          await call(
            manage,
            'GET',
            `/endpoints/trickle/jobs/${body.id}/stream${after === undefined ? '' : `?after=${after}`}`,
          )
        ).body;
      const first = await until(read, (r) => r.stream.length === 2);
      expect(first).toMatchObject({ status: 'IN_PROGRESS', stream: [{ output: 'one' }, { output: 'two' }] });
      // Read again: the same chunks (nothing was taken), and none after `next`.
      expect((await read(0)).stream).toEqual(first.stream);
      expect(await read(first.next)).toEqual({ status: 'IN_PROGRESS', stream: [], next: first.next });
      // The job's client still gets both, once; the management read still sees them after.
      const client = await call(v2, 'POST', `/trickle/stream/${body.id}?wait=0`);
      expect(client.body.stream).toEqual([{ output: 'one' }, { output: 'two' }]);
      expect((await read()).stream).toEqual(first.stream);
      writeFileSync(go, '');
      // After `next`: only the chunk that came since.
      const last = await until(
        () => read(first.next),
        (r) => r.status === 'COMPLETED',
      );
      expect(last.stream).toEqual([{ output: 'three' }]);
      expect(last.next).toBeGreaterThan(first.next);
      expect((await call(v2, 'POST', `/trickle/stream/${body.id}?wait=0`)).body.stream).toEqual([
        { output: 'three' },
      ]);
    });
  }, 60_000);

  it('lists jobs newest first, by status, a page at a time', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push((await runToEnd('chatty', { name: `p${i}`, lines: 0 })).id);
    const first = await call(manage, 'GET', '/endpoints/chatty/jobs?status=COMPLETED&limit=2');
    expect(first.body.jobs.map((j: { id: string }) => j.id)).toEqual([ids[2], ids[1]]);
    expect(first.body.jobs[0].input).toBeUndefined(); // lists leave payloads out
    const second = await call(
      manage,
      'GET',
      `/endpoints/chatty/jobs?status=COMPLETED&limit=2&cursor=${first.body.next}`,
    );
    expect(second.body.jobs[0].id).toBe(ids[0]);
    const failed = await call(manage, 'GET', '/endpoints/chatty/jobs?status=FAILED');
    expect(failed.body.jobs).toEqual([]);
    const later = await call(manage, 'GET', `/endpoints/chatty/jobs?from=${Date.now() + 60_000}`);
    expect(later.body.jobs).toEqual([]);
  });

  it('lists workers with the jobs they hold', async () => {
    const { body } = await until(
      () => call(manage, 'GET', '/endpoints/chatty/workers'),
      (r) => r.body.workers.length > 0,
    );
    expect(body.workers[0]).toMatchObject({ workerId: expect.any(String), jobIds: expect.any(Array) });
  });

  it('has time series for the last hours', async () => {
    const { body } = await call(manage, 'GET', '/endpoints/chatty/metrics?hours=1&step=60');
    expect(body.t.length).toBe(60);
    for (const series of [
      'jobsPerSec',
      'executionP50Ms',
      'executionP95Ms',
      'delayP50Ms',
      'delayP95Ms',
      'queueDepth',
      'workers',
    ])
      expect(body[series]).toHaveLength(60);
    expect(
      Math.round(body.jobsPerSec.reduce((a: number, b: number) => a + b, 0) * 60),
    ).toBeGreaterThanOrEqual(5);
    // The last bucket holds the present's gauge sample (queue depth, workers).
    expect(body.queueDepth.at(-1)).toEqual(expect.any(Number));
    expect(body.workers.at(-1)).toEqual(expect.any(Number));
  });

  it("leaves a cancelled job's message out of the charted queue depth, as the endpoint's inQueue does", async () => {
    // A platform with no worker pools, so nothing takes from the queue and its messages stay where
    // they are. On the shared one the pools' reconcile fails the queued jobs of an endpoint it cannot
    // run, as it did on a loaded machine.
    const own = await startTestPlatform();
    onTestFinished(() => own.stop());
    await own.addEndpoint('still');
    const cancelled = (await call(own.baseUrl, 'POST', '/still/run', { input: {} })).body.id as string;
    expect((await call(own.baseUrl, 'POST', `/still/cancel/${cancelled}`)).body.status).toBe('CANCELLED');
    expect((await call(own.baseUrl, 'POST', '/still/run', { input: {} })).status).toBe(200);
    expect((await call(own.baseUrl, 'GET', '/still/health')).body.jobs.inQueue).toBe(1);
    const { body } = await call(`${own.url}/manage/v1`, 'GET', '/endpoints/still/metrics?hours=1');
    expect(body.queueDepth.at(-1)).toBe(1);
  });

  it('serves its OpenAPI document without a key', async () => {
    const r = await fetch(`${manage}/openapi.json`);
    const doc = (await r.json()) as { paths: Record<string, unknown> };
    expect(Object.keys(doc.paths)).toContain('/manage/v1/endpoints/{id}/logs');
  });
});

describe('refusals', () => {
  const routes = [
    '/endpoints',
    '/endpoints/chatty',
    '/endpoints/chatty/jobs',
    '/endpoints/chatty/jobs/x',
    '/endpoints/chatty/logs',
    '/endpoints/chatty/workers',
    '/endpoints/chatty/metrics',
  ];

  it('every route wants a client key: none, a wrong one and a worker token get 401', async () => {
    for (const route of routes) {
      for (const headers of [
        {},
        { authorization: 'Bearer wrong' },
        { authorization: platform.protocolWorker('quiet', 'w-auth').token },
      ]) {
        const r = await fetch(`${manage}${route}`, { headers: headers as Record<string, string> });
        expect(r.status, `${route} ${JSON.stringify(headers)}`).toBe(401);
        expect(await r.json()).toEqual({ error: expect.any(String) });
      }
    }
  });

  it('bad input is a 400 that names it; unknown things are 404', async () => {
    for (const path of [
      '/endpoints/chatty/jobs?status=DONE',
      '/endpoints/chatty/jobs?limit=0',
      '/endpoints/chatty/jobs?cursor=zzz',
      '/endpoints/chatty/jobs?colour=red',
      '/endpoints/chatty/logs?after=abc',
      '/endpoints/chatty/jobs/nope/stream?after=-1',
      '/endpoints/chatty/jobs/nope/stream?after=abc',
      '/endpoints/chatty/metrics?hours=100',
      '/endpoints?x=1',
    ]) {
      const r = await call(manage, 'GET', path);
      expect(r.status, path).toBe(400);
      expect(r.body.error).toMatch(/.+/);
    }
    for (const path of [
      '/endpoints/nope',
      '/endpoints/nope/jobs',
      '/endpoints/chatty/jobs/nope',
      '/endpoints/chatty/jobs/nope/stream',
      '/endpoints/chatty/logs?job=nope',
      '/nothing',
    ]) {
      expect((await call(manage, 'GET', path)).status, path).toBe(404);
    }
    expect((await call(manage, 'POST', '/endpoints', {})).status).toBe(404);
  });

  it("job-log takes this worker's token only, and only for jobs this worker ran", async () => {
    // A platform with no worker pools: the test plays every worker (protocolWorker adopts them). On
    // the shared one, the pools' reconcile fails the queued jobs of an endpoint it cannot run, which
    // raced the takes below.
    const own = await startTestPlatform({ workerWaitMs: 5_000 });
    onTestFinished(() => own.stop());
    const ownV2 = own.baseUrl;
    const ownManage = `${own.url}/manage/v1`;
    await own.addEndpoint('quiet');
    await own.addEndpoint('other');
    const w1 = own.protocolWorker('quiet', 'w1');
    const w2 = own.protocolWorker('quiet', 'w2');
    const submit = async (endpoint = 'quiet') =>
      (await call(ownV2, 'POST', `/${endpoint}/run`, { input: {} })).body.id as string;
    // One at a time, so each take gets the job just submitted.
    const mine = await submit();
    expect((await w1.take())?.id).toBe(mine);
    const theirs = await submit();
    expect((await w2.take())?.id).toBe(theirs);
    const queued = await submit();
    // A finished job of another endpoint.
    const otherWorker = own.protocolWorker('other', 'wo');
    const otherJob = await submit('other');
    expect((await otherWorker.take())?.id).toBe(otherJob);
    expect((await otherWorker.done(otherJob, { output: 'done' })).status).toBe(200);
    // Stamped now: a job's lines are read within its life (jobLogWindow, core/manage.ts).
    const post = (endpoint: string, authorization: string, jobIds = [mine], stream = 'stdout') =>
      fetch(`${ownV2}/${endpoint}/job-log/w1`, {
        method: 'POST',
        headers: { authorization, 'content-type': 'application/json' },
        body: JSON.stringify({
          lines: jobIds.map((jobId) => ({ jobId, atMs: Date.now(), stream, text: `by w1 into ${jobId}` })),
        }),
      });
    const refused = async (response: Response, status: number) => {
      expect(response.status).toBe(status);
      expect(await response.json()).toEqual({ error: expect.any(String) });
    };
    await refused(await post('quiet', 'Bearer fy_test_key_for_loopback_only'), 401);
    await refused(await post('other', w1.token), 403); // quiet's worker token on other
    await refused(await post('quiet', w1.token, [otherJob]), 400); // other's job
    await refused(await post('quiet', w1.token, ['nope']), 400);
    await refused(await post('quiet', w1.token, [mine], 'video'), 400);
    // Jobs of its own endpoint that it does not run: another worker's, and one nobody took yet.
    await refused(await post('quiet', w1.token, [theirs]), 400);
    await refused(await post('quiet', w1.token, [queued]), 400);
    // A batch with one such line is refused whole: nothing of it is stored.
    await refused(await post('quiet', w1.token, [mine, theirs]), 400);
    expect((await post('quiet', w1.token)).status).toBe(200);
    // A cancelled handler prints until it is stopped; the runtime ships those lines after the end.
    expect((await call(ownV2, 'POST', `/quiet/cancel/${mine}`)).body.status).toBe('CANCELLED');
    expect((await post('quiet', w1.token)).status).toBe(200);
    const linesOf = async (jobId: string) =>
      (await call(ownManage, 'GET', `/endpoints/quiet/logs?job=${jobId}`)).body.lines.map(
        (l: { text: string; workerId: string }) => [l.text, l.workerId],
      );
    expect(await linesOf(mine)).toEqual([
      [`by w1 into ${mine}`, 'w1'],
      [`by w1 into ${mine}`, 'w1'],
    ]);
    expect(await linesOf(theirs)).toEqual([]);
    expect(await linesOf(queued)).toEqual([]);
    await w2.done(theirs, { output: 'done' });
  });
});
