/**
 * What one worker token can make the platform do (docs/security.md, "Front door (local)"). Endpoint
 * code holds its worker's token, so the worker routes are bounded like the client ones: a ping lists
 * at most `limits.pingJobIds` job ids (each is a lease renewal in the store; 7 600 made-up one-letter
 * ids cost 78 ms of the platform's CPU per ping), a job-log batch names at most `limits.logBatchJobs`
 * jobs (each is a read in the store), and worker tokens have a rate limit of their own, per token,
 * apart from the client keys' buckets, in which a job-log batch counts by the jobs it names. Real platform, real HTTP. The AWS agent keeps the same
 * bounds: test/agent/worker-load.test.ts. A ping renews only the listed jobs the worker holds, by the
 * supervisor's record: a ping costs the store at most one write per held job, whatever it lists.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { FakeClock } from '../../core/clock.js';
import { limits } from '../../core/limits.js';
import { call, startTestPlatform, type TestPlatform, testApiKey } from '../support/platform.js';

const started: { platform: TestPlatform; dataDir: string }[] = [];

async function platformWith(options: Parameters<typeof startTestPlatform>[0] = {}) {
  const dataDir = mkdtempSync(join(tmpdir(), 'ferry-worker-load-'));
  const platform = await startTestPlatform({ dataDir, workerWaitMs: 300, ...options });
  started.push({ platform, dataDir });
  await platform.addEndpoint('load');
  return platform;
}

afterEach(async () => {
  for (const { platform, dataDir } of started.splice(0)) {
    await platform.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
});

async function get(platform: TestPlatform, path: string, authorization: string) {
  const response = await fetch(`${platform.url}/v2/${path}`, { headers: { authorization } });
  const text = await response.text();
  return {
    status: response.status,
    retryAfter: response.headers.get('retry-after'),
    body: text ? (JSON.parse(text) as Record<string, unknown>) : undefined,
  };
}

describe('a worker token bounded', () => {
  it(`refuses a ping of more than ${limits.pingJobIds} job ids with a 400 {"error"}, renewing nothing`, async () => {
    const platform = await platformWith();
    const worker = platform.adoptWorker('load');
    const jobId = (await call(platform.baseUrl, 'POST', '/load/run', { input: {} })).body.id as string;
    expect((await get(platform, `load/job-take/${worker.workerId}`, worker.token)).status).toBe(200);
    const before = await platform.db.jobs.get(jobId, Date.now());

    const madeUp = Array.from({ length: limits.pingJobIds }, (_, i) => `j${i}`);
    const over = await get(
      platform,
      `load/ping/${worker.workerId}?job_id=${[jobId, ...madeUp].join(',')}`,
      worker.token,
    );
    expect(over.status).toBe(400);
    expect(over.body).toEqual({
      error: `A ping lists at most ${limits.pingJobIds} job ids (the jobs the worker holds); this one lists ${limits.pingJobIds + 1}`,
    });
    expect((await platform.db.jobs.get(jobId, Date.now()))?.leaseUntil).toBe(before?.leaseUntil);

    // Up to the cap, a ping is served as before: the held job among made-up ids.
    const atCap = [jobId, ...madeUp.slice(1)].join(',');
    expect((await get(platform, `load/ping/${worker.workerId}?job_id=${atCap}`, worker.token)).status).toBe(
      200,
    );
  });

  it('renews on a ping only the listed jobs it holds: ids it does not hold are no write in the store, and the answer is as before', async () => {
    // Started at the real time: the test reads the jobs on the system clock (expiry).
    const clock = new FakeClock(Date.now());
    const platform = await platformWith({ clock });
    const worker = platform.adoptWorker('load');
    const jobId = (await call(platform.baseUrl, 'POST', '/load/run', { input: {} })).body.id as string;
    expect((await get(platform, `load/job-take/${worker.workerId}`, worker.token)).body?.id).toBe(jobId);
    const queued = (await call(platform.baseUrl, 'POST', '/load/run', { input: {} })).body.id as string;
    const leaseAt = async () => (await platform.db.jobs.get(jobId, Date.now()))?.leaseUntil;
    const takenLease = await leaseAt();
    expect(takenLease).toBe(clock.now() + limits.leaseMs);
    const renewals: string[] = [];
    const renewLease = platform.db.jobs.renewLease.bind(platform.db.jobs);
    platform.db.jobs.renewLease = (lease) => {
      renewals.push(lease.jobId);
      return renewLease(lease);
    };

    const notHeld = [queued, ...Array.from({ length: limits.pingJobIds - 1 }, (_, i) => `j${i}`)];
    const ping = await get(
      platform,
      `load/ping/${worker.workerId}?job_id=${notHeld.join(',')}`,
      worker.token,
    );
    expect(ping).toEqual({ status: 200, retryAfter: null, body: {} });
    expect(renewals).toEqual([]);
    expect(await leaseAt()).toBe(takenLease);

    // Its held job listed 200 times among 300 it does not hold: one renewal, the lease moved on.
    clock.advance(10_000);
    const listed = [...Array.from({ length: 200 }, () => jobId), ...notHeld.slice(0, 300)];
    const renewed = await get(
      platform,
      `load/ping/${worker.workerId}?job_id=${listed.join(',')}`,
      worker.token,
    );
    expect(renewed).toEqual({ status: 200, retryAfter: null, body: {} });
    expect(renewals).toEqual([jobId]);
    expect(await leaseAt()).toBe(clock.now() + limits.leaseMs);
  });

  it('renews a held job at most once per twelfth of its lease, however often the worker pings: a ping loop is not a write loop', async () => {
    const clock = new FakeClock(Date.now());
    const platform = await platformWith({ clock });
    const worker = platform.adoptWorker('load');
    const jobId = (await call(platform.baseUrl, 'POST', '/load/run', { input: {} })).body.id as string;
    expect((await get(platform, `load/job-take/${worker.workerId}`, worker.token)).body?.id).toBe(jobId);
    const renewals: number[] = [];
    const renewLease = platform.db.jobs.renewLease.bind(platform.db.jobs);
    platform.db.jobs.renewLease = (lease) => {
      renewals.push(clock.now());
      return renewLease(lease);
    };
    const leaseLeft = async () =>
      ((await platform.db.jobs.get(jobId, Date.now()))?.leaseUntil ?? 0) - clock.now();
    const gapMs = limits.leaseMs / 12;
    const takenAt = clock.now();

    // 50 pings a second for three gaps: one renewal per gap, and the lease never runs short.
    let least = Number.POSITIVE_INFINITY;
    for (let i = 0; i < 150 * (gapMs / 1000); i++) {
      clock.advance(20);
      expect((await get(platform, `load/ping/${worker.workerId}?job_id=${jobId}`, worker.token)).status).toBe(
        200,
      );
      least = Math.min(least, await leaseLeft());
    }
    expect(renewals).toEqual([takenAt + gapMs, takenAt + 2 * gapMs, takenAt + 3 * gapMs]);
    expect(least).toBeGreaterThanOrEqual(limits.leaseMs - gapMs);
  });

  it(`refuses a job-log batch naming more than ${limits.logBatchJobs} jobs with a 400 {"error"}, storing nothing`, async () => {
    const platform = await platformWith();
    const worker = platform.adoptWorker('load');
    const jobId = (await call(platform.baseUrl, 'POST', '/load/run', { input: {} })).body.id as string;
    expect((await get(platform, `load/job-take/${worker.workerId}`, worker.token)).status).toBe(200);
    const post = async (jobIds: string[]) => {
      const response = await fetch(`${platform.url}/v2/load/job-log/${worker.workerId}`, {
        method: 'POST',
        headers: { authorization: worker.token, 'content-type': 'application/json' },
        body: JSON.stringify({
          lines: jobIds.map((id) => ({ jobId: id, atMs: Date.now(), stream: 'stdout', text: `into ${id}` })),
        }),
      });
      return { status: response.status, body: (await response.json()) as Record<string, unknown> };
    };

    // Each job a batch names is a read in the store: one request names at most logBatchJobs.
    const madeUp = Array.from({ length: limits.logBatchJobs }, (_, i) => `j${i}`);
    expect(await post([jobId, ...madeUp])).toEqual({
      status: 400,
      body: {
        error: `A job-log request carries the lines of at most ${limits.logBatchJobs} jobs; this one names ${limits.logBatchJobs + 1}`,
      },
    });
    // At the cap the jobs are read, and the first one this worker never ran refuses the batch.
    const atCap = await post([jobId, ...madeUp.slice(1)]);
    expect(atCap.status).toBe(400);
    expect(atCap.body.error).toMatch(/^Job j1 is not a job that worker /);
    const stored = async () =>
      (await call(`${platform.url}/manage/v1`, 'GET', `/endpoints/load/logs?job=${jobId}`)).body.lines.map(
        (line: { text: string }) => line.text,
      );
    expect(await stored()).toEqual([]);
    expect((await post([jobId])).status).toBe(200);
    expect(await stored()).toEqual([`into ${jobId}`]);
  });

  it(`counts a job-log batch by the distinct jobs it names: batches of ${limits.logBatchJobs} jobs meet a 429 at the ${limits.workerRateLimitRequests / limits.logBatchJobs}th of a window, which reads and stores nothing`, async () => {
    const clock = new FakeClock(Date.now());
    const platform = await platformWith({ clock });
    const worker = platform.adoptWorker('load');
    const ran: string[] = [];
    for (let i = 0; i < limits.logBatchJobs; i++)
      ran.push((await call(platform.baseUrl, 'POST', '/load/run', { input: {} })).body.id as string);
    let taken = 0;
    while (taken < ran.length) {
      const take = await get(platform, `load/job-take-batch/${worker.workerId}?batch_size=100`, worker.token);
      taken += (take.body as unknown as unknown[]).length;
    }
    // A fresh window for the batches alone.
    clock.advance(limits.rateLimitWindowMs);
    const reads: string[] = [];
    const read = platform.db.jobs.get.bind(platform.db.jobs);
    platform.db.jobs.get = (jobId, ...rest) => {
      reads.push(jobId);
      return read(jobId, ...rest);
    };
    const post = async (jobIds: string[], text: string) => {
      const response = await fetch(`${platform.url}/v2/load/job-log/${worker.workerId}`, {
        method: 'POST',
        headers: { authorization: worker.token, 'content-type': 'application/json' },
        body: JSON.stringify({
          lines: jobIds.map((id) => ({ jobId: id, atMs: clock.now(), stream: 'stdout', text })),
        }),
      });
      return {
        status: response.status,
        retryAfter: response.headers.get('retry-after'),
        body: (await response.json()) as Record<string, unknown>,
      };
    };

    // One job's batch counts as one request; a job named twice is read once.
    expect((await post([ran[0]!, ran[0]!], 'one')).status).toBe(200);
    expect(reads).toEqual([ran[0]]);
    // Then each batch naming every job counts as 500: the window takes 39 more.
    const full = limits.workerRateLimitRequests / limits.logBatchJobs;
    for (let i = 1; i < full; i++) expect((await post(ran, `batch ${i}`)).status).toBe(200);
    expect(reads.length).toBe(1 + (full - 1) * ran.length);
    const refused = await post(ran, 'refused');
    expect(refused).toEqual({
      status: 429,
      retryAfter: String(limits.rateLimitWindowMs / 1000),
      body: {
        error: `Rate limit of ${limits.workerRateLimitRequests} requests per ${limits.rateLimitWindowMs / 1000} s exceeded; retry in ${limits.rateLimitWindowMs / 1000} s`,
      },
    });
    // Nothing read for it, and the store's reads in the window stay within the worker's limit.
    expect(reads.length).toBe(1 + (full - 1) * ran.length);
    expect(reads.length).toBeLessThanOrEqual(limits.workerRateLimitRequests);
    // What the window has left still takes a batch that fits.
    expect((await post([ran[1]!], 'small')).status).toBe(200);
    const stored = async (jobId: string) =>
      (await call(`${platform.url}/manage/v1`, 'GET', `/endpoints/load/logs?job=${jobId}`)).body.lines.map(
        (line: { text: string }) => line.text,
      );
    expect(await stored(ran[1]!)).toEqual([
      ...Array.from({ length: full - 1 }, (_, i) => `batch ${i + 1}`),
      'small',
    ]);

    // After Retry-After, the whole batch goes through.
    clock.advance(limits.rateLimitWindowMs);
    expect((await post(ran, 'again')).status).toBe(200);
    expect((await stored(ran[2]!)).at(-1)).toBe('again');
  });

  it('limits each worker token on its own, apart from the client keys', async () => {
    const platform = await platformWith({
      frontDoor: { rateLimitRequests: 2, workerRateLimitRequests: 4, rateLimitWindowMs: 60_000 },
    });
    const looping = platform.adoptWorker('load');
    const other = platform.adoptWorker('load');
    const statuses: number[] = [];
    for (let i = 0; i < 5; i++)
      statuses.push((await get(platform, `load/ping/${looping.workerId}`, looping.token)).status);
    expect(statuses).toEqual([200, 200, 200, 200, 429]);
    // Each refused route says when to come back, within the window: the ferry runtime waits what
    // Retry-After asks.
    const logBatch = await fetch(`${platform.url}/v2/load/job-log/${looping.workerId}`, {
      method: 'POST',
      headers: { authorization: looping.token, 'content-type': 'application/json' },
      body: JSON.stringify({ lines: [{ jobId: 'j1', atMs: Date.now(), stream: 'stdout', text: 'x' }] }),
    });
    const refusals = [
      await get(platform, `load/job-take/${looping.workerId}`, looping.token),
      await get(platform, `load/job-take-batch/${looping.workerId}?batch_size=2`, looping.token),
      await get(platform, `load/job-stop/${looping.workerId}`, looping.token),
      await get(platform, `load/ping/${looping.workerId}`, looping.token),
      {
        status: logBatch.status,
        retryAfter: logBatch.headers.get('retry-after'),
        body: (await logBatch.json()) as Record<string, unknown>,
      },
    ];
    for (const refused of refusals) {
      expect(refused.status).toBe(429);
      expect(Number(refused.retryAfter)).toBeGreaterThan(0);
      expect(Number(refused.retryAfter)).toBeLessThanOrEqual(60);
      expect(refused.body).toEqual({
        error: expect.stringMatching(/^Rate limit of 4 requests per 60 s exceeded; retry in \d+ s$/),
      });
    }
    // Another worker of the same endpoint has a window of its own; the client keys keep theirs,
    // which the worker's requests did not count against.
    expect((await get(platform, `load/ping/${other.workerId}`, other.token)).status).toBe(200);
    const client: number[] = [];
    for (let i = 0; i < 3; i++)
      client.push((await get(platform, 'load/health', `Bearer ${testApiKey}`)).status);
    expect(client).toEqual([200, 200, 429]);
  });

  it("takes a held job's result from a token over its limit: a refused result would be dropped and the job run again", async () => {
    const platform = await platformWith({
      frontDoor: { workerRateLimitRequests: 2, rateLimitWindowMs: 60_000 },
    });
    const worker = platform.adoptWorker('load');
    const jobId = (await call(platform.baseUrl, 'POST', '/load/run', { input: {} })).body.id as string;
    expect((await get(platform, `load/job-take/${worker.workerId}`, worker.token)).status).toBe(200);
    expect((await get(platform, `load/ping/${worker.workerId}`, worker.token)).status).toBe(200);
    expect((await get(platform, `load/ping/${worker.workerId}`, worker.token)).status).toBe(429);

    const done = await fetch(`${platform.url}/v2/load/job-done/${worker.workerId}/${jobId}`, {
      method: 'POST',
      headers: { authorization: worker.token, 'content-type': 'application/json' },
      body: JSON.stringify({ output: { ok: true } }),
    });
    expect(done.status).toBe(200);
    expect(await platform.db.jobs.get(jobId, Date.now())).toMatchObject({
      status: 'COMPLETED',
      output: { ok: true },
    });
  });
});
