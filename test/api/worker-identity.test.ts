/**
 * Worker identity (docs/workers.md): every worker has its own token bound to its endpoint and worker
 * id. Every worker route with another endpoint's token, another worker's id, a client key or no key
 * is refused (401/403 JSON) and changes nothing; a worker token opens no client route; a buried
 * worker is refused; health counts only live workers; a platform restart requeues at once what the
 * workers of the earlier run held.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, startTestPlatform, type TestPlatform, testApiKey } from '../support/platform.js';

let platform: TestPlatform;
let dataDir: string;

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), 'ferry-identity-'));
  platform = await startTestPlatform({ dataDir, workerWaitMs: 300 });
  // Two apps, three endpoints.
  await platform.addEndpoint('victim');
  await platform.addEndpoint('victim-b');
  await platform.addEndpoint('spy');
});

afterAll(async () => {
  await platform?.stop();
  rmSync(dataDir, { recursive: true, force: true });
});

async function raw(method: string, path: string, authorization: string | undefined, body?: unknown) {
  const response = await fetch(`${platform.url}/v2/${path}`, {
    method,
    headers: {
      ...(authorization === undefined ? {} : { authorization }),
      'content-type': 'application/x-www-form-urlencoded',
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : undefined };
}

describe('worker routes check token, endpoint and worker id', () => {
  it('refuses another endpoint’s token, a forged worker id, a client key and no key; nothing changes', async () => {
    const holder = platform.adoptWorker('victim');
    const spy = platform.adoptWorker('spy');
    const other = platform.adoptWorker('victim'); // same endpoint, another worker
    const submitted = await call(platform.baseUrl, 'POST', '/victim/run', {
      input: { secret: 'victim data' },
    });
    const jobId = submitted.body.id as string;
    const queued = (await call(platform.baseUrl, 'POST', '/victim/run', { input: { n: 2 } })).body
      .id as string;
    // The holder takes the first job.
    const taken = await raw('GET', `victim/job-take/${holder.workerId}`, holder.token);
    expect(taken.status).toBe(200);
    expect(taken.body.id).toBe(jobId);
    const before = await platform.db.jobs.get(jobId, Date.now());
    const healthBefore = (await call(platform.baseUrl, 'GET', '/victim/health')).body.workers;

    const routes = (workerId: string) => [
      ['GET', `victim/job-take/${workerId}`],
      ['GET', `victim/job-take-batch/${workerId}?batch_size=5`],
      ['GET', `victim/job-stop/${workerId}`],
      ['POST', `victim/job-done/${workerId}/${jobId}?isStream=false`],
      ['POST', `victim/job-stream/${workerId}/${jobId}`],
      ['GET', `victim/ping/${workerId}?job_id=${jobId}`],
    ];
    const attempts: [string, string, string | undefined, number][] = [];
    // Another endpoint's live worker, under its own id and under the holder's id.
    for (const [m, p] of routes(spy.workerId)) attempts.push([m!, p!, spy.token, 403]);
    for (const [m, p] of routes(holder.workerId)) attempts.push([m!, p!, spy.token, 403]);
    // A live worker of the same endpoint posing as the holder (forged worker id).
    for (const [m, p] of routes(holder.workerId)) attempts.push([m!, p!, other.token, 403]);
    // The holder's token under a worker id nobody started.
    for (const [m, p] of routes('forged-worker')) attempts.push([m!, p!, holder.token, 403]);
    // A client key, a made-up token, no key.
    for (const [m, p] of routes(holder.workerId)) {
      attempts.push([m!, p!, testApiKey, 401]);
      attempts.push([m!, p!, `Bearer ${testApiKey}`, 401]);
      attempts.push([m!, p!, 'fyw_made_up_token_000000000000000', 401]);
      attempts.push([m!, p!, undefined, 401]);
    }
    for (const [method, path, authorization, expected] of attempts) {
      const body = method === 'POST' ? { output: 'forged' } : undefined;
      const r = await raw(method, path, authorization, body);
      expect(r.status, `${method} ${path} with ${authorization}`).toBe(expected);
      expect(typeof r.body?.error).toBe('string');
    }
    const after = await platform.db.jobs.get(jobId, Date.now());
    expect(after).toEqual(before);
    expect(after?.status).toBe('IN_PROGRESS');
    expect((await platform.db.jobs.get(queued, Date.now()))?.status).toBe('IN_QUEUE');
    expect(await platform.db.jobs.drainStream(jobId)).toEqual([]);
    expect((await call(platform.baseUrl, 'GET', '/victim/health')).body.workers).toEqual(healthBefore);

    // The holder itself still completes it.
    const done = await raw(
      'POST',
      `victim/job-done/${holder.workerId}/${jobId}?isStream=false`,
      holder.token,
      {
        output: 'real',
      },
    );
    expect(done.status).toBe(200);
    expect((await call(platform.baseUrl, 'GET', `/victim/status/${jobId}`)).body.output).toBe('real');
  });

  it('a worker token opens no client route, of its endpoint or another', async () => {
    const worker = platform.adoptWorker('victim-b');
    for (const [method, path] of [
      ['GET', 'victim-b/health'],
      ['POST', 'victim-b/run'],
      ['POST', 'victim-b/runsync'],
      ['POST', 'victim-b/purge-queue'],
      ['GET', 'victim/health'],
      ['GET', 'victim-b/status/x'],
      ['POST', 'victim-b/cancel/x'],
    ]) {
      const r = await raw(method!, path!, worker.token, method === 'POST' ? { input: {} } : undefined);
      expect(r.status, `${method} ${path}`).toBe(401);
    }
  });

  it('a buried worker is refused and its pings change nothing; health counts live workers only', async () => {
    const worker = platform.adoptWorker('victim-b');
    expect((await raw('GET', `victim-b/ping/${worker.workerId}`, worker.token)).status).toBe(200);
    const live = (await call(platform.baseUrl, 'GET', '/victim-b/health')).body.workers;
    expect(live.idle + live.running).toBeGreaterThanOrEqual(1);
    await worker.exited();
    for (let i = 0; i < 3; i++) {
      expect((await raw('GET', `victim-b/ping/${worker.workerId}`, worker.token)).status).toBe(401);
    }
    expect((await raw('GET', `victim-b/job-take/${worker.workerId}`, worker.token)).status).toBe(401);
    const afterHealth = (await call(platform.baseUrl, 'GET', '/victim-b/health')).body.workers;
    expect(afterHealth.idle + afterHealth.running).toBe(live.idle + live.running - 1);
  });
});

describe('platform restart', () => {
  it('treats every worker of the earlier run as gone: its token is refused and its jobs are queued at once', async () => {
    await platform.addEndpoint('restart');
    const worker = platform.adoptWorker('restart');
    const jobId = (await call(platform.baseUrl, 'POST', '/restart/run', { input: {} })).body.id as string;
    expect((await raw('GET', `restart/job-take/${worker.workerId}`, worker.token)).status).toBe(200);
    expect((await platform.db.jobs.get(jobId, Date.now()))?.status).toBe('IN_PROGRESS');
    await platform.stop(false);

    platform = await startTestPlatform({ dataDir, workerWaitMs: 300 });
    // Queued again before any lease could lapse (the default lease is a minute).
    const job = await platform.db.jobs.get(jobId, Date.now());
    expect(job?.status).toBe('IN_QUEUE');
    expect(job?.workerId).toBeUndefined();
    expect((await raw('GET', `restart/ping/${worker.workerId}?job_id=${jobId}`, worker.token)).status).toBe(
      401,
    );
    const fresh = platform.adoptWorker('restart');
    const again = await raw('GET', `restart/job-take/${fresh.workerId}`, fresh.token);
    expect(again.body.id).toBe(jobId);
  });
});
