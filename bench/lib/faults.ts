/**
 * The fault scenarios, shared by `npm run fault` (bench/fault.ts, full size) and the short version in
 * npm test (test/fault/fault.test.ts). Each returns what it observed; callers assert or print.
 */
import { mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { type PlatformChild, rssBytes, startPlatformChild } from './child.js';
import { pause } from './util.js';
import { CountingWorker } from './worker.js';

export const benchKey = 'fy_bench_key_loopback_only';

/** The fields v2 answers carry; which ones are present depends on the route. */
export interface ApiBody {
  id: string;
  status: string;
  output?: unknown;
  error?: string;
  removed: number;
  jobs: { completed: number; failed: number; inProgress: number; inQueue: number; retried: number };
  workers: { idle: number; running: number };
  /** Health's account of a failing endpoint. */
  problem?: { reason: string };
}

export async function api(
  url: string,
  method: string,
  path: string,
  body?: unknown,
): Promise<{ status: number; body: ApiBody }> {
  const response = await fetch(`${url}/v2${path}`, {
    method,
    headers: { authorization: `Bearer ${benchKey}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : undefined };
}

/** Polls until every id reaches one of `statuses` or the deadline passes; returns the last status of each. */
export async function settle(
  url: () => string,
  endpointId: string,
  ids: string[],
  statuses: string[],
  timeoutMs: number,
): Promise<Map<string, string>> {
  const last = new Map<string, string>();
  const deadline = Date.now() + timeoutMs;
  let open = [...ids];
  while (open.length > 0 && Date.now() < deadline) {
    const still: string[] = [];
    for (let i = 0; i < open.length; i += 50) {
      const batch = open.slice(i, i + 50);
      const answers = await Promise.all(
        batch.map((id) => api(url(), 'GET', `/${endpointId}/status/${id}`).catch(() => undefined)),
      );
      batch.forEach((id, j) => {
        const status =
          answers[j]?.body?.status ?? (answers[j] ? `HTTP ${answers[j]!.status}` : 'unreachable');
        last.set(id, status);
        if (!statuses.includes(status)) still.push(id);
      });
    }
    open = still;
    if (open.length > 0) await pause(200);
  }
  return last;
}

const tempDir = (name: string) => mkdtempSync(join(tmpdir(), `ferry-${name}-`));

// ── (a) kill -9 of the platform under load ─────────────────────────────────────────────────────────

export interface KillResult {
  submitted: number;
  acknowledged: number;
  kills: number;
  completed: number;
  /** Acknowledged jobs that ended in another state (must be empty). */
  notCompleted: [string, string][];
  /** Job ids whose job-done the platform accepted more than once (must be empty). */
  completedTwice: string[];
  /** Jobs whose handler ran more than once (allowed: at-least-once after a crash). */
  ranTwice: number;
  restartMs: number[];
}

export async function killPlatformUnderLoad(options: {
  jobs: number;
  kills: number;
  clients?: number;
  workMs?: number;
}): Promise<KillResult> {
  const dataDir = tempDir('fault-kill');
  const start = () =>
    startPlatformChild({
      dataDir,
      apiKey: benchKey,
      leaseMs: 2_000,
      sweepMs: 200,
      workerWaitMs: 1_000,
      endpoints: ['fault'],
    });
  let child = await start();
  const worker = new CountingWorker(child.target('fault'), 'fault', {
    workerId: child.target('fault').workerId,
    concurrency: 4,
    workMs: options.workMs ?? 5,
  });
  worker.start();
  const acked: string[] = [];
  let attempted = 0;
  let down = false;
  const restartMs: number[] = [];
  try {
    const killAt = Array.from({ length: options.kills }, (_, k) =>
      Math.floor(((k + 1) * options.jobs) / (options.kills + 1)),
    );
    const submitter = async () => {
      while (attempted < options.jobs) {
        if (down) {
          await pause(20);
          continue;
        }
        attempted++;
        try {
          const r = await api(child.url, 'POST', '/fault/run', { input: { n: attempted } });
          if (r.status === 200) acked.push(r.body.id);
        } catch {
          // The platform died mid-request: this submission was never acknowledged.
        }
      }
    };
    const killer = async () => {
      for (const at of killAt) {
        while (acked.length < at) await pause(5);
        down = true;
        await child.kill('SIGKILL');
        const began = performance.now();
        child = await start();
        restartMs.push(Math.round(performance.now() - began));
        worker.retarget(child.target('fault'));
        down = false;
      }
    };
    await Promise.all([killer(), ...Array.from({ length: options.clients ?? 8 }, submitter)]);
    const last = await settle(() => child.url, 'fault', acked, ['COMPLETED'], 60_000);
    const notCompleted = [...last].filter(([, s]) => s !== 'COMPLETED');
    return {
      submitted: attempted,
      acknowledged: acked.length,
      kills: options.kills,
      completed: acked.length - notCompleted.length,
      notCompleted,
      completedTwice: [...worker.completions].filter(([, n]) => n > 1).map(([id]) => id),
      ranTwice: [...worker.executions.values()].filter((n) => n > 1).length,
      restartMs,
    };
  } finally {
    await worker.stop();
    await child.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

// ── (b) Python workers killed mid-job ────────────────────────────────────────────────────────────

export interface WorkerKillResult {
  jobs: number;
  killedPids: number[];
  statuses: string[];
  /** Pids that produced the results: none may be a killed one. */
  resultPids: number[];
}

export const echoProject = () => ({
  dir: resolve('bench/fixtures/echo'),
  ferryPythonPath: resolve('worker-image/python'),
});

/**
 * Part (a)'s pool: the echo endpoint with 2 Python workers × max_concurrency 8 kept up, the fixture's
 * other endpoints at rest (bench/ab.ts, bench/profile.ts).
 */
export const echoPoolProject = () => ({
  ...echoProject(),
  resources: {
    echo: { workersMin: 2, workersMax: 2, maxConcurrency: 8, idleTimeoutSec: 600 },
    cold: { workersMin: 0, workersMax: 1, idleTimeoutSec: 1 },
    slow: { workersMin: 0, workersMax: 1 },
  },
});

export async function killWorkersMidJob(options: { jobs: number; jobMs: number }): Promise<WorkerKillResult> {
  const dataDir = tempDir('fault-workers');
  const pidDir = join(dataDir, 'pids');
  mkdirSync(pidDir);
  const child = await startPlatformChild({
    dataDir,
    apiKey: benchKey,
    workerWaitMs: 2_000,
    project: { ...echoProject(), resources: { slow: { workersMin: 0, workersMax: 2 } } },
  });
  try {
    const ids: string[] = [];
    for (let i = 0; i < options.jobs; i++) {
      const r = await api(child.url, 'POST', '/slow/run', { input: { ms: options.jobMs, pid_dir: pidDir } });
      ids.push(r.body.id);
    }
    // Wait until workers are running jobs, then SIGKILL every worker seen so far.
    const deadline = Date.now() + 30_000;
    while (readdirSync(pidDir).length === 0 && Date.now() < deadline) await pause(50);
    await pause(100);
    const killedPids = readdirSync(pidDir).map(Number);
    for (const pid of killedPids) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    const last = await settle(() => child.url, 'slow', ids, ['COMPLETED', 'FAILED'], 90_000);
    const resultPids: number[] = [];
    for (const id of ids) {
      const r = await api(child.url, 'GET', `/slow/status/${id}`);
      if (typeof r.body.output === 'number') resultPids.push(r.body.output);
    }
    return { jobs: ids.length, killedPids, statuses: ids.map((id) => last.get(id) ?? '?'), resultPids };
  } finally {
    await child.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

// ── (c) a deep queue ───────────────────────────────────────────────────────────────────────────────

export interface DeepQueueResult {
  jobs: number;
  submitMs: number;
  submitPerSec: number;
  inQueue: number;
  healthMs: number;
  removed: number;
  purgeMs: number;
  inQueueAfterPurge: number;
  rssIdleBytes?: number;
  rssQueuedBytes?: number;
  rssAfterPurgeBytes?: number;
}

export async function deepQueue(options: { jobs: number }): Promise<DeepQueueResult> {
  const dataDir = tempDir('fault-deep');
  const child = await startPlatformChild({
    dataDir,
    apiKey: benchKey,
    endpoints: ['deep'],
    nodeArgs: ['--expose-gc'],
  });
  try {
    await child.command({ cmd: 'mem' });
    const rssIdleBytes = rssBytes(child.pid);
    const submitted = await child.command({ cmd: 'submit', endpoint: 'deep', n: options.jobs });
    await child.command({ cmd: 'mem' });
    const rssQueuedBytes = rssBytes(child.pid);
    const healthStarted = performance.now();
    const health = await api(child.url, 'GET', '/deep/health');
    const healthMs = Math.round(performance.now() - healthStarted);
    const purgeStarted = performance.now();
    const purge = await api(child.url, 'POST', '/deep/purge-queue');
    const purgeMs = Math.round(performance.now() - purgeStarted);
    const after = await api(child.url, 'GET', '/deep/health');
    await child.command({ cmd: 'mem' });
    return {
      jobs: options.jobs,
      submitMs: submitted.ms ?? 0,
      submitPerSec: Math.round((options.jobs * 1000) / Math.max(1, submitted.ms ?? 0)),
      inQueue: health.body.jobs.inQueue,
      healthMs,
      removed: purge.body.removed,
      purgeMs,
      inQueueAfterPurge: after.body.jobs.inQueue,
      rssIdleBytes,
      rssQueuedBytes,
      rssAfterPurgeBytes: rssBytes(child.pid),
    };
  } finally {
    await child.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

// ── (d) slow and failing webhooks ──────────────────────────────────────────────────────────────────

export interface WebhookResult {
  /** runsync answers for jobs whose webhook hangs, fails or drops: all must be COMPLETED. */
  statuses: Record<string, string>;
  /** How long each runsync took (ms): a webhook must not hold it up. */
  runsyncMs: Record<string, number>;
  /** POSTs each receiver got. */
  hits: Record<string, number>;
  /** How long closing the platform took with a webhook still hanging. */
  stopMs: number;
}

export async function webhookFaults(options: { retryDelayMs: number }): Promise<WebhookResult> {
  const dataDir = tempDir('fault-hooks');
  const hits: Record<string, number> = { hang: 0, fail: 0, drop: 0 };
  const hanging = new Set<import('node:http').ServerResponse>();
  const receiver: Server = createServer((req, res) => {
    const kind = (req.url ?? '').slice(1);
    hits[kind] = (hits[kind] ?? 0) + 1;
    req.resume();
    if (kind === 'hang') hanging.add(res);
    else if (kind === 'drop') req.socket.destroy();
    else res.writeHead(500).end('{"error":"receiver is down"}');
  });
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
  const hookBase = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}`;
  const child = await startPlatformChild({
    dataDir,
    apiKey: benchKey,
    endpoints: ['hooks'],
    workerWaitMs: 1_000,
    webhookRetryDelayMs: options.retryDelayMs,
  });
  const worker = new CountingWorker(child.target('hooks'), 'hooks', {
    workerId: child.target('hooks').workerId,
    concurrency: 2,
  });
  worker.start();
  const statuses: Record<string, string> = {};
  const runsyncMs: Record<string, number> = {};
  let stopMs = 0;
  try {
    for (const kind of ['hang', 'fail', 'drop']) {
      const began = performance.now();
      const r = await api(child.url, 'POST', '/hooks/runsync?wait=20000', {
        input: { kind },
        webhook: `${hookBase}/${kind}`,
      });
      runsyncMs[kind] = Math.round(performance.now() - began);
      statuses[kind] = r.body.status;
    }
    // Every failing receiver gets the first POST and 2 retries, then no more.
    const deadline = Date.now() + 10 * options.retryDelayMs + 5_000;
    while ((hits.fail! < 3 || hits.drop! < 3) && Date.now() < deadline) await pause(20);
    await pause(3 * options.retryDelayMs);
  } finally {
    await worker.stop();
    const began = performance.now();
    await child.stop();
    stopMs = Math.round(performance.now() - began);
    for (const res of hanging) res.destroy();
    await new Promise((r) => receiver.close(r));
    rmSync(dataDir, { recursive: true, force: true });
  }
  return { statuses, runsyncMs, hits: { ...hits }, stopMs };
}

export type { PlatformChild };
