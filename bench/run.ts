/**
 * Benchmarks (`npm run bench`, after a build). Every figure is a RATIO against a named peer measured
 * in the same run on the same machine, written to bench/results.md with the machine and the date:
 *
 *   (a) throughput: jobs/s from /run to COMPLETED, echo handler, Ferry (real Python worker pool, and
 *       the engine alone with a TypeScript protocol worker) against BullMQ on Redis and Celery on
 *       Redis (Python workers) at the same concurrency; Ferry and Celery also with 4 and 16 Python
 *       worker processes and with a 64 KB input, so the cost curve shows;
 *   (b) runsync latency p50/p99 at 1, 32 and 256 clients against a bare Fastify echo route (the floor);
 *   (c) cold start: submit to an endpoint scaled to zero → result (Python worker start included);
 *   (d) memory: platform RSS idle and with 100k queued jobs (child process, /proc);
 *   (e) cost of 1M jobs on AWS from bench/prices.json (bench/cost.ts).
 *
 * Knobs: FERRY_BENCH_JOBS (20000), FERRY_BENCH_CONCURRENCY (16), FERRY_BENCH_SECONDS per latency level
 * (5), FERRY_BENCH_WARMUP_SECONDS of untimed load before each throughput figure (5),
 * FERRY_BENCH_QUEUE (100000), FERRY_BENCH_SKIP_BULLMQ=1, FERRY_BENCH_SKIP_CELERY=1,
 * FERRY_BENCH_ONLY (a comma list of the parts to run, e.g. `a,b`; all by default),
 * FERRY_BENCH_CELERY_PYTHON (/usr/bin/python3: Debian's python3-celery lives there, not in a pyenv).
 * BullMQ and ioredis are installed at run time into bench/.work/ (gitignored), redis-server with
 * apt-get when it is missing; Celery is not installed by the bench (its row says why it was skipped).
 */
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { createRequire } from 'node:module';
import { cpus, loadavg, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { startOnChildPort } from '../core/child-port.js';
import { costReport, loadPrices } from './cost.js';
import { cpuMs, descendantsCpuMs, startPlatformChild } from './lib/child.js';
import { benchKey, deepQueue, echoProject } from './lib/faults.js';
import { jsonPoster } from './lib/http.js';
import { echoText, postInLoops, runJobs, waitWorkers } from './lib/load.js';
import { envInt, pause, percentile, round, say } from './lib/util.js';
import { CountingWorker } from './lib/worker.js';
import { awsScaleFromZeroReport } from './scale-from-zero.js';

const jobs = envInt('FERRY_BENCH_JOBS', 20_000);
const concurrency = envInt('FERRY_BENCH_CONCURRENCY', 16);
const levelSeconds = envInt('FERRY_BENCH_SECONDS', 5);
const queuedJobs = envInt('FERRY_BENCH_QUEUE', 100_000);
/**
 * Seconds of the same load through each system, untimed, just before its timed figure. A short run
 * measures mostly warm-up: Node's JIT still compiling the hot path on its helper threads, the bench
 * client's own code too. Probed in passes of 10 000 jobs on this kind of machine: Ferry's Python pool
 * 4 311 jobs/s in its first pass (after 1 000 jobs), then 5 122 to 5 261; BullMQ 12 327 in its first,
 * 15 631 in its second, then 17 235 to 17 701 (bench/results.md). Every system gets the same warm-up,
 * so the ratios compare steady states. 0 measures from cold, as every run before the eighth pass of
 * issue 18 did.
 */
const warmUpSeconds = envInt('FERRY_BENCH_WARMUP_SECONDS', 5);
/** The parts to run: a (throughput), b (runsync latency), c (cold start), d (memory). */
const only = new Set((process.env.FERRY_BENCH_ONLY ?? 'a,b,c,d').split(',').map((p) => p.trim()));
/** The large-input point of the cost curve, and how many jobs it runs (a quarter: 64 KB each). */
const bigInputBytes = 64 * 1024;
const bigJobs = Math.max(1, Math.floor(jobs / 4));
/** Python worker processes for the cost curve, beside the default of one per core. */
const curveWorkers = [4, 16];
const celeryPython = process.env.FERRY_BENCH_CELERY_PYTHON ?? '/usr/bin/python3';
/** Python worker processes for the echo endpoint: one per core, the rest as max_concurrency. */
const pyWorkers = Math.max(1, Math.min(cpus().length, concurrency));

// ── machine ───────────────────────────────────────────────────────────────────────────────────────

function machine() {
  let python = 'n/a';
  try {
    python = execFileSync('python3', ['--version'], { encoding: 'utf8' }).trim();
  } catch {
    // no python
  }
  return {
    cpu: cpus()[0]?.model ?? 'unknown',
    cores: cpus().length,
    memoryGb: round(totalmem() / 1024 ** 3),
    node: process.version,
    python,
    date: new Date().toISOString(),
    /** The machine is shared: the load average says how busy it was while the figures were taken. */
    loadAverage: loadavg().map((n) => round(n, 2)),
  };
}

// ── measuring ─────────────────────────────────────────────────────────────────────────────────────

/** `clients` loops calling `once` for `seconds`, after a short warm-up; latencies in ms. */
async function latency(clients: number, seconds: number, once: () => Promise<unknown>) {
  const samples: number[] = [];
  let errors = 0;
  let firstError: unknown;
  const warmUntil = performance.now() + 500;
  const endAt = warmUntil + seconds * 1000;
  await Promise.all(
    Array.from({ length: clients }, async () => {
      while (performance.now() < endAt) {
        const began = performance.now();
        try {
          await once();
          if (began >= warmUntil) samples.push(performance.now() - began);
        } catch (error) {
          errors++;
          firstError ??= error;
        }
      }
    }),
  );
  // A figure made of failed calls measures the failure, not the system: the run stops instead.
  if (errors > 0) {
    throw new Error(
      `${errors} of ${errors + samples.length} calls at ${clients} clients failed, the first: ${(firstError as Error).message}`,
    );
  }
  samples.sort((a, b) => a - b);
  return {
    clients,
    requests: samples.length,
    errors,
    p50: round(percentile(samples, 50), 2),
    p99: round(percentile(samples, 99), 2),
  };
}

/**
 * `latency` with undici's pooled client, one socket per client loop. fetch costs the bench process
 * several times the CPU per request, and on 2 cores that CPU is taken from the system measured: the
 * lean levels show what the platform adds once the client weighs little, beside the fetch levels.
 */
async function leanLatency(baseUrl: string, path: string, headers: Record<string, string>, clients: number) {
  const poster = jsonPoster(baseUrl, headers, clients);
  try {
    return await latency(clients, levelSeconds, async () => {
      const answer = await poster.post(path, { input: { x: 1 } });
      if (answer.status !== 200) throw new Error(`HTTP ${answer.status}`);
    });
  } finally {
    await poster.close();
  }
}

async function postJson(
  url: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<{ status?: string }> {
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  const parsed = (await response.json()) as { status?: string };
  if (response.status !== 200) throw new Error(`HTTP ${response.status}`);
  return parsed;
}

/** One runsync of the echo input, which must end COMPLETED (a failed job answers fast, and 200). */
async function runsyncOnce(url: string, headers: Record<string, string>): Promise<void> {
  const answer = await postJson(url, { input: { x: 1 } }, headers);
  if (answer.status !== 'COMPLETED') throw new Error(`runsync ended ${answer.status}`);
}

/** `n` jobs through /run → COMPLETED after an untimed warm-up (warmUpSeconds), with CPU per job. */
async function ferryThroughput(
  url: string,
  endpointId: string,
  n: number,
  clients: number,
  payloadBytes = 0,
  platformPid?: number,
) {
  const text = echoText(payloadBytes);
  const warmUntil = performance.now() + warmUpSeconds * 1000;
  await runJobs(url, endpointId, () => performance.now() < warmUntil, clients, text);
  const cpuBefore = platformPid === undefined ? undefined : cpuOf(platformPid);
  const clientCpuBefore = process.cpuUsage();
  const { submittedMs, ms } = await runJobs(url, endpointId, (submitted) => submitted < n, clients, text);
  const cpuAfter = platformPid === undefined ? undefined : cpuOf(platformPid);
  const clientCpu = process.cpuUsage(clientCpuBefore);
  const perJob = (a: number | undefined, b: number | undefined) =>
    a === undefined || b === undefined ? undefined : round((b - a) / n, 3);
  return {
    jobs: n,
    ms: Math.round(ms),
    submitMs: Math.round(submittedMs),
    perSec: round((n * 1000) / ms),
    platformCpuMsPerJob: perJob(cpuBefore?.platform, cpuAfter?.platform),
    workersCpuMsPerJob: perJob(cpuBefore?.workers, cpuAfter?.workers),
    // The bench process itself: the /run client, plus the health polls that watch for the end.
    clientCpuMsPerJob: perJob(0, (clientCpu.user + clientCpu.system) / 1000),
  };
}

/**
 * The HTTP ceiling: the bare Fastify echo route (the latency floor's child) driven by the same client,
 * concurrency and body as Ferry's /run, with no job behind it. The job API costs every job at least
 * one such request (/run), so no platform behind it can exceed this figure on the same machine: it
 * tells whether an aim set against a peer that needs no HTTP (BullMQ) is reachable here at all.
 */
async function httpCeiling(n: number, clients: number) {
  const floorChild = await startPlatformChild({ dataDir: '--floor', apiKey: '' });
  const post = (more: (sent: number) => boolean) =>
    postInLoops(floorChild.url, {}, '/echo', { clients, more, text: echoText(0) });
  try {
    const warmUntil = performance.now() + warmUpSeconds * 1000;
    await post(() => performance.now() < warmUntil);
    const cpuBefore = cpuMs(floorChild.pid);
    const began = performance.now();
    await post((sent) => sent < n);
    const ms = performance.now() - began;
    const cpuAfter = cpuMs(floorChild.pid);
    return {
      jobs: n,
      ms: Math.round(ms),
      perSec: round((n * 1000) / ms),
      serverCpuMsPerRequest:
        cpuBefore === undefined || cpuAfter === undefined ? undefined : round((cpuAfter - cpuBefore) / n, 3),
    };
  } finally {
    await floorChild.stop();
  }
}

/** CPU ms used so far by the platform child and by its worker processes. */
function cpuOf(pid: number): { platform: number | undefined; workers: number } {
  return { platform: cpuMs(pid), workers: descendantsCpuMs(pid) };
}

// ── BullMQ ────────────────────────────────────────────────────────────────────────────────────────

const hasCommand = (name: string) => spawnSync('sh', ['-c', `command -v ${name}`]).status === 0;

/**
 * True when `present()` holds, after `apt-get install` of `packages` if it did not (the bench's peers
 * are not project dependencies); progress on stderr.
 */
function aptEnsure(packages: string[], present: () => boolean): boolean {
  if (present()) return true;
  say(`missing: apt-get install -y --no-install-recommends ${packages.join(' ')}`);
  const apt = spawnSync('apt-get', ['install', '-y', '--no-install-recommends', ...packages], {
    stdio: ['ignore', 'inherit', 'inherit'],
    timeout: 300_000,
    env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' },
  });
  return apt.status === 0 && present();
}

/** Makes redis-server and bullmq available, or says why not. */
function prepareBullmq(): { ok: true; dir: string } | { ok: false; reason: string } {
  if (process.env.FERRY_BENCH_SKIP_BULLMQ === '1') return { ok: false, reason: 'FERRY_BENCH_SKIP_BULLMQ=1' };
  if (!aptEnsure(['redis-server'], () => hasCommand('redis-server'))) {
    return {
      ok: false,
      reason: 'redis-server is not installed and `apt-get install -y redis-server` failed',
    };
  }
  const dir = join(process.cwd(), 'bench', '.work');
  if (!existsSync(join(dir, 'node_modules', 'bullmq'))) {
    say('installing bullmq@5 and ioredis into bench/.work');
    const npm = spawnSync(
      'npm',
      [
        'install',
        '--prefix',
        dir,
        '--no-save',
        '--no-package-lock',
        '--no-audit',
        '--no-fund',
        'bullmq@5',
        'ioredis',
      ],
      { stdio: 'inherit', timeout: 300_000 },
    );
    if (npm.status !== 0)
      return { ok: false, reason: '`npm install --prefix bench/.work bullmq@5 ioredis` failed' };
  }
  return { ok: true, dir };
}

/** The part of BullMQ's API the bench uses (it is installed at run time, so not typed from node_modules). */
interface BullConnection {
  host: string;
  port: number;
  maxRetriesPerRequest: null;
}
interface BullQueue {
  waitUntilReady(): Promise<unknown>;
  add(name: string, data: unknown): Promise<unknown>;
  close(): Promise<void>;
}
interface BullWorker {
  on(event: 'completed', listener: () => void): void;
  waitUntilReady(): Promise<unknown>;
  close(): Promise<void>;
}
interface BullMq {
  Queue: new (name: string, options: { connection: BullConnection }) => BullQueue;
  Worker: new (
    name: string,
    processor: (job: { data: unknown }) => Promise<unknown>,
    options: { connection: BullConnection; concurrency: number },
  ) => BullWorker;
}

/** A throw-away redis-server on a free loopback port, in its own temp dir and process group. */
/**
 * A redis-server on a free port. `appendOnly` turns on its append-only file with appendfsync
 * everysec, the peer closest to Ferry's guarantee for /run (a job acknowledged survives kill -9 of the
 * platform; a power loss may drop the last commits): Redis's persistence notes say a failure of the
 * Redis process then loses at most a single write, a power loss up to a second of writes.
 * https://redis.io/docs/latest/operate/oss_and_stack/management/persistence/
 */
async function startRedis(appendOnly = false): Promise<{ port: number; stop: () => void }> {
  // On a port picked free but not held: should another server take it first, redis-server exits
  // ("bind: Address already in use") and starts again on another.
  return startOnChildPort((port) => startRedisOn(port, appendOnly));
}

async function startRedisOn(port: number, appendOnly: boolean): Promise<{ port: number; stop: () => void }> {
  const dir = mkdtempSync(join(tmpdir(), 'ferry-bench-redis-'));
  const persistence = appendOnly
    ? ['--appendonly', 'yes', '--appendfsync', 'everysec']
    : ['--appendonly', 'no'];
  const redis = spawn(
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', ...persistence],
    { stdio: 'ignore', detached: true },
  );
  const stop = () => {
    killGroup(redis.pid);
    rmSync(dir, { recursive: true, force: true });
  };
  // Ready when it accepts a PING; an exit before that is a failed start. Each PING is bounded: what
  // took the port may accept and never answer, and redis-cli would wait for it (blocking this loop).
  for (let i = 0; i < 100 && redis.exitCode === null; i++) {
    const ping = spawnSync('redis-cli', ['-p', String(port), 'ping'], { encoding: 'utf8', timeout: 2_000 });
    if (ping.stdout?.trim() === 'PONG') {
      return { port, stop };
    }
    await pause(50);
  }
  const exitCode = redis.exitCode;
  stop();
  if (exitCode === null) await once(redis, 'exit');
  throw new Error(
    exitCode === null
      ? `redis-server did not answer PING on port ${port}`
      : `redis-server exited with code ${exitCode} before it answered PING on port ${port}`,
  );
}

/** SIGKILL to a process group started with `detached: true`; gone already is fine. */
function killGroup(pid: number | undefined): void {
  if (pid === undefined) return;
  try {
    process.kill(-pid, 'SIGKILL');
  } catch {
    // already gone
  }
}

async function bullmqThroughput(
  dir: string,
  n: number,
  workerConcurrency: number,
  clients: number,
  payloadBytes = 0,
  appendOnly = false,
) {
  const redis = await startRedis(appendOnly);
  const port = redis.port;
  const text = echoText(payloadBytes);
  try {
    // BullMQ's ESM build does not load under Node's own resolver; its CommonJS build does.
    const bullmq = createRequire(join(dir, 'bench.cjs'))('bullmq') as BullMq;
    const connection = { host: '127.0.0.1', port, maxRetriesPerRequest: null };
    for (let i = 0; i < 50; i++) {
      const probe = new bullmq.Queue('probe', { connection });
      try {
        await probe.waitUntilReady();
        await probe.close();
        break;
      } catch {
        await probe.close().catch(() => {});
        await pause(100);
      }
    }
    const queue = new bullmq.Queue('echo', { connection });
    let completed = 0;
    let target = Number.POSITIVE_INFINITY;
    let allDone: () => void = () => {};
    const worker = new bullmq.Worker('echo', async (job: { data: unknown }) => job.data, {
      connection,
      concurrency: workerConcurrency,
    });
    worker.on('completed', () => {
      if (++completed >= target) allDone();
    });
    await worker.waitUntilReady();
    /** Adds jobs from `clients` loops while `more(added)` holds; resolves when all are completed. */
    const pass = async (more: (added: number) => boolean) => {
      completed = 0;
      target = Number.POSITIVE_INFINITY;
      const done = new Promise<void>((resolve) => {
        allDone = resolve;
      });
      let next = 0;
      await Promise.all(
        Array.from({ length: clients }, async () => {
          while (more(next)) {
            next++;
            await queue.add('echo', { i: next, text });
          }
        }),
      );
      target = next;
      if (completed >= target) allDone();
      await done;
    };
    const warmUntil = performance.now() + warmUpSeconds * 1000;
    await pass(() => performance.now() < warmUntil);
    const began = performance.now();
    await pass((added) => added < n);
    const ms = performance.now() - began;
    await worker.close();
    await queue.close();
    return { jobs: n, ms: Math.round(ms), perSec: round((n * 1000) / ms) };
  } finally {
    redis.stop();
  }
}

// ── Celery ────────────────────────────────────────────────────────────────────────────────────────

const celeryDir = () => join(process.cwd(), 'bench', 'fixtures', 'celery');

/** Celery and redis-py importable by `celeryPython`, and redis-server present, or why not. */
function prepareCelery(): { ok: true } | { ok: false; reason: string } {
  if (process.env.FERRY_BENCH_SKIP_CELERY === '1') return { ok: false, reason: 'FERRY_BENCH_SKIP_CELERY=1' };
  if (!hasCommand('redis-server') || !hasCommand('redis-cli')) {
    return { ok: false, reason: 'redis-server is not installed (apt-get install -y redis-server)' };
  }
  const importable = () =>
    spawnSync(celeryPython, ['-c', 'import celery, redis; print(celery.__version__)'], { encoding: 'utf8' })
      .status === 0;
  // Debian's packages are for Debian's python3; another interpreter brings its own.
  const installable = celeryPython === '/usr/bin/python3';
  if (!(installable ? aptEnsure(['python3-celery', 'python3-redis'], importable) : importable())) {
    return {
      ok: false,
      reason: `${celeryPython} cannot import celery and redis (apt-get install -y --no-install-recommends python3-celery python3-redis, or set FERRY_BENCH_CELERY_PYTHON)`,
    };
  }
  return { ok: true };
}

/**
 * Celery on Redis: `processes` worker processes (`celery worker --pool threads`), each running
 * ceil(concurrency / processes) tasks at once, the shape of Ferry's pool (workers × max_concurrency).
 * The producer is Celery's own client in Python (bench/fixtures/celery/drive.py) with `clients`
 * threads; a job counts when its result is stored in the result backend.
 */
async function celeryThroughput(n: number, processes: number, clients: number, payloadBytes = 0) {
  const redis = await startRedis();
  const env = { ...process.env, FERRY_BENCH_REDIS_URL: `redis://127.0.0.1:${redis.port}` };
  const perProcess = Math.ceil(concurrency / processes);
  const workers = Array.from({ length: processes }, (_, i) =>
    spawn(
      celeryPython,
      [
        '-m',
        'celery',
        '-A',
        'echo_app',
        'worker',
        '--pool',
        'threads',
        '--concurrency',
        String(perProcess),
        '--hostname',
        `w${i}@bench`,
        '--without-gossip',
        '--without-mingle',
        '--without-heartbeat',
        '--loglevel',
        'WARNING',
      ],
      { cwd: celeryDir(), env, stdio: 'ignore', detached: true },
    ),
  );
  try {
    const driver = spawn(
      celeryPython,
      [
        'drive.py',
        String(n),
        String(clients),
        String(payloadBytes),
        String(processes),
        String(warmUpSeconds),
      ],
      { cwd: celeryDir(), env, stdio: ['ignore', 'pipe', 'pipe'], detached: true },
    );
    let out = '';
    let err = '';
    driver.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
    });
    driver.stderr!.on('data', (d: Buffer) => {
      err = (err + d.toString()).slice(-4000);
    });
    const code = await new Promise<number | null>((resolve) => driver.on('exit', resolve));
    if (code !== 0) throw new Error(`celery driver exited ${code}: ${err.trim().split('\n').at(-1)}`);
    const line = out.trim().split('\n').at(-1) ?? '';
    return { ...(JSON.parse(line) as { jobs: number; ms: number; perSec: number }), processes, perProcess };
  } finally {
    for (const worker of workers) killGroup(worker.pid);
    redis.stop();
  }
}

/** Ferry with its own platform child whose echo pool has `workers` Python processes (cost curve). */
async function ferryPythonCurve(workers: number, n: number, payloadBytes = 0) {
  const dataDir = mkdtempSync(join(tmpdir(), 'ferry-bench-curve-'));
  const child = await startPlatformChild({
    dataDir,
    apiKey: benchKey,
    workerWaitMs: 20_000,
    project: {
      ...echoProject(),
      resources: {
        echo: {
          workersMin: workers,
          workersMax: workers,
          maxConcurrency: Math.ceil(concurrency / workers),
          idleTimeoutSec: 600,
        },
      },
    },
  });
  try {
    await waitWorkers(child.url, 'echo', workers);
    return {
      ...(await ferryThroughput(child.url, 'echo', n, concurrency, payloadBytes, child.pid)),
      workers,
    };
  } finally {
    await child.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

// ── the run ───────────────────────────────────────────────────────────────────────────────────────

async function main(): Promise<void> {
  const info = machine();
  say(`bench: ${jobs} jobs, concurrency ${concurrency}, ${levelSeconds} s per latency level on ${info.cpu}`);
  const dataDir = mkdtempSync(join(tmpdir(), 'ferry-bench-'));
  const results: Record<string, unknown> = { machine: info, parts: [...only] };
  const throughput: Record<string, unknown> = {};

  // (b) floor first, alone on the machine.
  const levels = [1, 32, 256];
  const leanLevels = [1, 32];
  const floorLatency = [];
  const floorLean = [];
  if (only.has('b')) {
    const floorChild = await startPlatformChild({ dataDir: '--floor', apiKey: '' });
    try {
      for (const clients of levels) {
        floorLatency.push(
          await latency(clients, levelSeconds, () => postJson(`${floorChild.url}/echo`, { input: { x: 1 } })),
        );
        say(`floor ${clients} clients: ${JSON.stringify(floorLatency.at(-1))}`);
      }
      for (const clients of leanLevels) {
        floorLean.push(await leanLatency(floorChild.url, '/echo', {}, clients));
        say(`floor ${clients} clients, undici: ${JSON.stringify(floorLean.at(-1))}`);
      }
    } finally {
      await floorChild.stop();
    }
  }

  const profDir = join(process.cwd(), 'bench', '.work', 'prof');
  const profile = process.env.FERRY_BENCH_CPU_PROF === '1';
  if (profile) rmSync(profDir, { recursive: true, force: true });
  const child = await startPlatformChild({
    dataDir,
    apiKey: benchKey,
    workerWaitMs: 20_000,
    nodeArgs: profile ? ['--cpu-prof', '--cpu-prof-dir', profDir] : [],
    project: {
      ...echoProject(),
      resources: {
        echo: {
          workersMin: pyWorkers,
          workersMax: pyWorkers,
          maxConcurrency: Math.ceil(concurrency / pyWorkers),
          idleTimeoutSec: 600,
        },
        cold: { workersMin: 0, workersMax: 1, idleTimeoutSec: 1 },
        slow: { workersMin: 0, workersMax: 1 },
      },
    },
  });
  // The engine alone, for the TypeScript protocol worker: a platform of its own, because a platform
  // that runs worker pools holds a record with no build configuration (what an outside worker's
  // endpoint is here) as failing and fails its jobs.
  const tsDataDir = mkdtempSync(join(tmpdir(), 'ferry-bench-ts-'));
  const tsChild = await startPlatformChild({
    dataDir: tsDataDir,
    apiKey: benchKey,
    workerWaitMs: 20_000,
    endpoints: ['tsecho'],
  });
  const auth = { authorization: `Bearer ${benchKey}` };
  try {
    await waitWorkers(child.url, 'echo', pyWorkers);

    // (a) throughput first: health's completed count must not include runsync jobs, whose results
    // expire after a minute (docs/api.md#retention) and would leave the count mid-run.
    // Engine + TS worker, then the Python pool, then the pool with a 64 KB input.
    if (only.has('a')) {
      const tsThroughputWorker = new CountingWorker(tsChild.target('tsecho'), 'tsecho', {
        workerId: tsChild.target('tsecho').workerId,
        concurrency,
      });
      tsThroughputWorker.start();
      throughput.ferryTs = await ferryThroughput(tsChild.url, 'tsecho', jobs, concurrency, 0, tsChild.pid);
      await tsThroughputWorker.stop();
      say(`ferry throughput (TS worker): ${JSON.stringify(throughput.ferryTs)}`);
      throughput.ferryPython = await ferryThroughput(child.url, 'echo', jobs, concurrency, 0, child.pid);
      say(`ferry throughput (Python pool): ${JSON.stringify(throughput.ferryPython)}`);
      throughput.ferryPythonBig = await ferryThroughput(
        child.url,
        'echo',
        bigJobs,
        concurrency,
        bigInputBytes,
        child.pid,
      );
      say(`ferry throughput (Python pool, 64 KB input): ${JSON.stringify(throughput.ferryPythonBig)}`);
    }
    // (b) runsync latency through the platform: TS protocol worker, then the Python pool.
    if (only.has('b')) {
      const tsWorker = new CountingWorker(tsChild.target('tsecho'), 'tsecho', {
        workerId: tsChild.target('tsecho').workerId,
        concurrency: 64,
      });
      tsWorker.start();
      const tsLatency = [];
      const pyLatency = [];
      for (const clients of levels) {
        tsLatency.push(
          await latency(clients, levelSeconds, () =>
            runsyncOnce(`${tsChild.url}/v2/tsecho/runsync?wait=60000`, auth),
          ),
        );
        say(`ferry runsync (TS worker) ${clients} clients: ${JSON.stringify(tsLatency.at(-1))}`);
      }
      for (const clients of levels) {
        pyLatency.push(
          await latency(clients, levelSeconds, () =>
            runsyncOnce(`${child.url}/v2/echo/runsync?wait=60000`, auth),
          ),
        );
        say(`ferry runsync (Python worker) ${clients} clients: ${JSON.stringify(pyLatency.at(-1))}`);
      }
      const pyLean = [];
      for (const clients of leanLevels) {
        pyLean.push(await leanLatency(child.url, '/v2/echo/runsync?wait=60000', auth, clients));
        say(`ferry runsync (Python worker) ${clients} clients, undici: ${JSON.stringify(pyLean.at(-1))}`);
      }
      await tsWorker.stop();
      results.latency = {
        floor: floorLatency,
        ferryTs: tsLatency,
        ferryPython: pyLatency,
        floorLean,
        ferryPythonLean: pyLean,
      };
    }

    // (c) cold start: the endpoint scaled to zero, one job, time to its result.
    if (only.has('c')) {
      const coldMs: number[] = [];
      for (let i = 0; i < 5; i++) {
        await waitWorkers(child.url, 'cold', 0);
        await pause(300);
        const began = performance.now();
        const r = await postJson(`${child.url}/v2/cold/runsync?wait=60000`, { input: { i } }, auth);
        if (r.status !== 'COMPLETED') throw new Error(`cold start job ended ${r.status}`);
        coldMs.push(Math.round(performance.now() - began));
        say(`cold start ${i + 1}: ${coldMs.at(-1)} ms`);
      }
      results.coldStartMs = coldMs;
    }
  } finally {
    await Promise.all([child.stop(), tsChild.stop()]);
    rmSync(dataDir, { recursive: true, force: true });
    rmSync(tsDataDir, { recursive: true, force: true });
  }

  if (only.has('a')) {
    // The cost curve: Ferry with 4 and 16 Python worker processes, each in its own platform child.
    throughput.ferryCurve = [];
    for (const workers of curveWorkers) {
      const point = await ferryPythonCurve(workers, jobs);
      say(`ferry throughput (${workers} Python workers): ${JSON.stringify(point)}`);
      (throughput.ferryCurve as unknown[]).push(point);
    }

    throughput.httpCeiling = await httpCeiling(jobs, concurrency);
    say(`HTTP ceiling (bare Fastify echo, same client): ${JSON.stringify(throughput.httpCeiling)}`);

    const bull = prepareBullmq();
    if (bull.ok) {
      try {
        throughput.bullmq = await bullmqThroughput(bull.dir, jobs, concurrency, concurrency);
        say(`bullmq throughput: ${JSON.stringify(throughput.bullmq)}`);
        throughput.bullmqDurable = await bullmqThroughput(bull.dir, jobs, concurrency, concurrency, 0, true);
        say(`bullmq throughput (Redis append-only file): ${JSON.stringify(throughput.bullmqDurable)}`);
        throughput.bullmqBig = await bullmqThroughput(
          bull.dir,
          bigJobs,
          concurrency,
          concurrency,
          bigInputBytes,
        );
        say(`bullmq throughput (64 KB input): ${JSON.stringify(throughput.bullmqBig)}`);
      } catch (error) {
        say(`BullMQ failed: ${(error as Error).message}`);
        throughput.bullmqSkipped = `BullMQ run failed: ${(error as Error).message}`;
      }
    } else {
      say(`BullMQ skipped: ${bull.reason}`);
      throughput.bullmqSkipped = bull.reason;
    }

    const celery = prepareCelery();
    if (celery.ok) {
      try {
        throughput.celery = await celeryThroughput(jobs, pyWorkers, concurrency);
        say(`celery throughput: ${JSON.stringify(throughput.celery)}`);
        throughput.celeryBig = await celeryThroughput(bigJobs, pyWorkers, concurrency, bigInputBytes);
        say(`celery throughput (64 KB input): ${JSON.stringify(throughput.celeryBig)}`);
        throughput.celeryCurve = [];
        for (const workers of curveWorkers) {
          const point = await celeryThroughput(jobs, workers, concurrency);
          say(`celery throughput (${workers} Python workers): ${JSON.stringify(point)}`);
          (throughput.celeryCurve as unknown[]).push(point);
        }
      } catch (error) {
        say(`Celery failed: ${(error as Error).message}`);
        throughput.celerySkipped = `Celery run failed: ${(error as Error).message}`;
      }
    } else {
      say(`skipped: Celery: ${celery.reason}`);
      throughput.celerySkipped = celery.reason;
    }
    results.throughput = throughput;
  }

  if (profile) results.profile = summarizeProfile(profDir);

  // (d) memory, in a fresh child.
  if (only.has('d')) {
    const memory = await deepQueue({ jobs: queuedJobs });
    say(`memory: ${JSON.stringify(memory)}`);
    results.memory = memory;
  }

  (results.machine as Record<string, unknown>).loadAverageAtEnd = loadavg().map((n) => round(n, 2));
  const markdown = report(results as unknown as Results);
  // A partial run (FERRY_BENCH_ONLY) does not overwrite the full report.
  const full = ['a', 'b', 'c', 'd'].every((p) => only.has(p));
  mkdirSync(join(process.cwd(), 'bench', '.work'), { recursive: true });
  writeFileSync(join(process.cwd(), full ? 'bench/results.md' : 'bench/.work/results-partial.md'), markdown);
  writeFileSync(
    join(process.cwd(), 'bench', '.work', 'results.json'),
    `${JSON.stringify(results, null, 2)}\n`,
  );
  process.stdout.write(markdown);
}

/** Self time by function in the platform child's CPU profile (FERRY_BENCH_CPU_PROF=1), top 15. */
function summarizeProfile(dir: string): { fn: string; pct: number }[] {
  const file = readdirSync(dir).find((f) => f.endsWith('.cpuprofile'));
  if (!file) return [];
  const prof = JSON.parse(readFileSync(join(dir, file), 'utf8')) as {
    nodes: {
      id: number;
      hitCount?: number;
      callFrame: { functionName: string; url: string; lineNumber: number };
    }[];
  };
  const byFn = new Map<string, number>();
  let total = 0;
  for (const node of prof.nodes) {
    const hits = node.hitCount ?? 0;
    total += hits;
    const where = node.callFrame.url.split('/').slice(-2).join('/') || '(native)';
    const key = `${node.callFrame.functionName || '(anonymous)'} ${where}:${node.callFrame.lineNumber + 1}`;
    byFn.set(key, (byFn.get(key) ?? 0) + hits);
  }
  return [...byFn]
    .sort((a, b) => b[1] - a[1])
    .slice(0, 15)
    .map(([fn, hits]) => ({ fn, pct: round((100 * hits) / Math.max(1, total), 1) }));
}

// ── the report ────────────────────────────────────────────────────────────────────────────────────

interface Level {
  clients: number;
  requests: number;
  errors: number;
  p50: number;
  p99: number;
}
interface Rate {
  perSec: number;
  ms: number;
  /** CPU ms per job of the platform process, and of its worker processes (Ferry rows only). */
  platformCpuMsPerJob?: number;
  workersCpuMsPerJob?: number;
  clientCpuMsPerJob?: number;
}
interface Results {
  machine: ReturnType<typeof machine>;
  latency?: {
    floor: Level[];
    ferryTs: Level[];
    ferryPython: Level[];
    /** The same with undici's client (leanLatency); absent in results from before it was measured. */
    floorLean?: Level[];
    ferryPythonLean?: Level[];
  };
  coldStartMs?: number[];
  throughput?: {
    ferryTs: Rate;
    ferryPython: Rate;
    ferryPythonBig: Rate;
    ferryCurve: (Rate & { workers: number })[];
    bullmq?: Rate;
    /** BullMQ with Redis's append-only file: acknowledged jobs survive kill -9, as Ferry's do. */
    bullmqDurable?: Rate;
    bullmqBig?: Rate;
    bullmqSkipped?: string;
    celery?: Rate;
    celeryBig?: Rate;
    celeryCurve?: (Rate & { processes: number })[];
    celerySkipped?: string;
    /** The bare Fastify echo route under the same client: what one HTTP request per job allows here. */
    httpCeiling?: { perSec: number; ms: number; serverCpuMsPerRequest?: number };
  };
  memory?: Awaited<ReturnType<typeof deepQueue>>;
  profile?: { fn: string; pct: number }[];
}

const notRun = (part: string) => `Not run in this pass (FERRY_BENCH_ONLY left out part ${part}).\n`;

const cpuLine = (rate: Rate | undefined) =>
  rate?.platformCpuMsPerJob === undefined ? 'n/a' : `${rate.platformCpuMsPerJob} ms`;

function throughputSection(t: NonNullable<Results['throughput']>): string {
  const ratio = (a: number, b: number | undefined) => (b ? `${round(a / b, 2)}×` : 'n/a');
  const bull = t.bullmq?.perSec;
  const cel = t.celery?.perSec;
  const row = (name: string, rate: Rate | undefined, skipped?: string) =>
    rate
      ? `| ${name} | ${rate.perSec} | ${ratio(rate.perSec, bull)} | ${ratio(rate.perSec, cel)} |`
      : `| ${name} | skipped: ${skipped ?? 'not run'} | — | — |`;
  const curveRows = [
    `| ${pyWorkers} (one per core) | ${t.ferryPython.perSec} | ${t.celery?.perSec ?? 'n/a'} | ${ratio(t.ferryPython.perSec, t.celery?.perSec)} |`,
    ...t.ferryCurve.map((f) => {
      const c = t.celeryCurve?.find((p) => p.processes === f.workers);
      return `| ${f.workers} | ${f.perSec} | ${c?.perSec ?? 'n/a'} | ${ratio(f.perSec, c?.perSec)} |`;
    }),
  ];
  return `| system | jobs/s | ratio to BullMQ | ratio to Celery |
|---|---|---|---|
${row('Ferry, local provider, real Python worker pool', t.ferryPython)}
${row('Ferry engine alone, TypeScript protocol worker', t.ferryTs)}
${row('BullMQ 5 on Redis (Node worker, same concurrency)', t.bullmq, t.bullmqSkipped)}
${row('BullMQ 5 on Redis with its append-only file (appendfsync everysec)', t.bullmqDurable, t.bullmqSkipped)}
${row('Celery 5 on Redis (Python workers, same concurrency)', t.celery, t.celerySkipped)}
${t.httpCeiling ? `| HTTP ceiling: a bare Fastify echo route, same client, no job behind it | ${t.httpCeiling.perSec} | ${ratio(t.httpCeiling.perSec, bull)} | ${ratio(t.httpCeiling.perSec, cel)} |` : ''}

Ferry's figure includes HTTP for every submission (/run), every take and every job-done, and a durable
SQLite commit before each answer (an acknowledged job survives kill -9 of the platform); BullMQ's
producer and worker talk to Redis directly in-process, and the first BullMQ row runs Redis without
persistence (the setting of every run before this one); with Redis's append-only file, the closest to Ferry's
guarantee, Ferry's pool is ${ratio(t.ferryPython.perSec, t.bullmqDurable?.perSec)} of BullMQ. Celery's
producer is its Python client (${concurrency} threads) and its workers are \`celery worker --pool threads\`
processes, as many as Ferry's pool has, each running ceil(${concurrency} / processes) tasks at once; a Celery
job counts when its result is in the Redis result backend.

${ceilingParagraph(t)}Cost curve, same ${concurrency} concurrency spread over more Python processes (jobs/s):

| Python worker processes | Ferry | Celery | Ferry / Celery |
|---|---|---|---|
${curveRows.join('\n')}

CPU per job (user + system from /proc, ms; far steadier than jobs/s on a shared machine): the platform process ${cpuLine(t.ferryPython)} with the Python pool, ${cpuLine(t.ferryTs)} with the TypeScript worker, ${cpuLine(t.ferryPythonBig)} with the ${bigInputBytes / 1024} KB input${t.ferryCurve.map((f) => `, ${cpuLine(f)} with ${f.workers} processes`).join('')}; the Python worker processes ${t.ferryPython.workersCpuMsPerJob ?? 'n/a'} ms; the bench client (its /run loop and health polls) ${t.ferryPython.clientCpuMsPerJob ?? 'n/a'} ms.

A ${bigInputBytes / 1024} KB input (${bigJobs} jobs, ${pyWorkers} Python processes): Ferry ${t.ferryPythonBig.perSec} jobs/s, BullMQ ${t.bullmqBig?.perSec ?? 'n/a'} (${ratio(t.ferryPythonBig.perSec, t.bullmqBig?.perSec)}), Celery ${t.celeryBig?.perSec ?? 'n/a'} (${ratio(t.ferryPythonBig.perSec, t.celeryBig?.perSec)}).
`;
}

/**
 * Whether the BullMQ aim is within what the job API's one HTTP request per job allows on this machine:
 * Ferry's /run is at least the ceiling's request, so 0.5× BullMQ above the ceiling is out of reach for
 * any platform behind that API, whatever it does after the request arrives.
 */
function ceilingParagraph(t: NonNullable<Results['throughput']>): string {
  const ceiling = t.httpCeiling;
  const bull = t.bullmq?.perSec;
  if (!ceiling || !bull) return '';
  const needed = round(bull / 2);
  const share = round(t.ferryPython.perSec / ceiling.perSec, 2);
  const reach =
    ceiling.perSec < needed
      ? `below the ${needed} jobs/s that 0.5× BullMQ needs: on this machine no platform that answers one HTTP request per job can meet that aim`
      : `above the ${needed} jobs/s that 0.5× BullMQ needs`;
  return `The HTTP ceiling (${ceiling.perSec} requests/s, the bare route's server ${ceiling.serverCpuMsPerRequest ?? 'n/a'} ms of CPU per request) is ${reach}. Ferry + Python pool runs at ${share}× the ceiling, with a durable job, a worker's take and its job-done behind each request.

`;
}

function report(r: Results): string {
  const m = r.machine;
  const mb = (bytes: number | undefined) => (bytes === undefined ? 'n/a' : `${round(bytes / 1048576)} MB`);
  const t = r.throughput;
  const ratio = (a: number, b: number) => `${round(a / b, 2)}×`;
  const met = (ok: boolean | undefined) =>
    ok === undefined ? 'not measured' : ok ? '**met**' : '**not met**';
  const lat = (levels: Level[], clients: number) => levels.find((l) => l.clients === clients)!;
  const L = r.latency;
  const latRows = L
    ? [1, 32, 256].map((c) => {
        const f = lat(L.floor, c);
        const ts = lat(L.ferryTs, c);
        const py = lat(L.ferryPython, c);
        return `| ${c} | ${f.p50} / ${f.p99} | ${ts.p50} / ${ts.p99} (${ratio(ts.p50, f.p50)}) | ${py.p50} / ${py.p99} (${ratio(py.p50, f.p50)}) |`;
      })
    : [];
  const leanRows =
    L?.floorLean && L.ferryPythonLean
      ? L.floorLean.map((f) => {
          const py = lat(L.ferryPythonLean!, f.clients);
          return `| ${f.clients} | ${f.p50} / ${f.p99} | ${py.p50} / ${py.p99} (${ratio(py.p50, f.p50)}, +${round(py.p50 - f.p50, 2)} ms) |`;
        })
      : [];
  const cold = [...(r.coldStartMs ?? [])].sort((a, b) => a - b);
  const coldMedian = cold[Math.floor(cold.length / 2)];
  const gap1 = L ? round(lat(L.ferryPython, 1).p50 - lat(L.floor, 1).p50, 2) : undefined;
  const x32 = L ? round(lat(L.ferryPython, 32).p50 / lat(L.floor, 32).p50, 2) : undefined;
  const idleMb = r.memory ? (r.memory.rssIdleBytes ?? Number.NaN) / 1048576 : undefined;
  const bull = t?.bullmq?.perSec;
  const cel = t?.celery?.perSec;
  const py = t?.ferryPython.perSec;
  return `# Ferry benchmarks

Measured in one run by \`npm run bench\` (bench/run.ts). Every figure is set against a peer measured in
the same run on the same machine; the absolute numbers only mean something next to their peer.

Machine: ${m.cpu}, ${m.cores} cores, ${m.memoryGb} GB memory; Node ${m.node}; ${m.python}. Date: ${m.date}.
The machine is shared with other work: load average (1/5/15 min) ${m.loadAverage.join(' / ')} at the start and ${(m as { loadAverageAtEnd?: number[] }).loadAverageAtEnd?.join(' / ') ?? 'n/a'} at the end of the run.
Run size: ${jobs} jobs per throughput figure, each after ${warmUpSeconds} s of the same load untimed on the same system (JIT and connections warm: steady state), concurrency ${concurrency} (Python pool: ${pyWorkers} workers × max_concurrency ${Math.ceil(concurrency / pyWorkers)}), ${levelSeconds} s per latency level, ${queuedJobs} queued jobs for memory.

## Aims

| aim | measured | |
|---|---|---|
| throughput ≥ 0.5× BullMQ | Ferry + Python pool ${py ?? 'n/a'} jobs/s vs BullMQ ${bull ?? 'n/a'} jobs/s (${py && bull ? ratio(py, bull) : 'n/a'}) | ${met(py && bull ? py >= 0.5 * bull : undefined)} |
| throughput ≥ 4× Celery | Ferry + Python pool ${py ?? 'n/a'} jobs/s vs Celery ${cel ?? 'n/a'} jobs/s (${py && cel ? ratio(py, cel) : 'n/a'}) | ${met(py && cel ? py >= 4 * cel : undefined)} |
| runsync p50 at 1 client within 1 ms of the floor | Python worker +${gap1 ?? 'n/a'} ms | ${met(gap1 === undefined ? undefined : gap1 <= 1)} |
| runsync p50 at 32 clients ≤ 2× the floor | Python worker ${x32 ?? 'n/a'}× | ${met(x32 === undefined ? undefined : x32 <= 2)} |
| cold start < 300 ms | median ${coldMedian ?? 'n/a'} ms | ${met(coldMedian === undefined ? undefined : coldMedian < 300)} |
| idle RSS < 120 MB | ${idleMb === undefined ? 'n/a' : round(idleMb)} MB | ${met(idleMb === undefined ? undefined : idleMb < 120)} |

## (a) Throughput: /run → COMPLETED, echo handler

${t ? throughputSection(t) : notRun('a')}
## (b) runsync latency, ms (p50 / p99), against a bare Fastify echo route

${
  L
    ? `| clients | floor: Fastify echo | Ferry runsync, TS worker (p50 ratio) | Ferry runsync, Python worker (p50 ratio) |
|---|---|---|---|
${latRows.join('\n')}

A runsync is a job: submit, queue, a worker's long poll answers, the handler runs, job-done, and the
waiting request wakes up — four HTTP exchanges where the floor has one.
${
  leanRows.length > 0
    ? `
The same with undici's pooled client instead of fetch on both sides. The bench client shares the
machine with what it measures, and fetch costs it several times the CPU per request; the aims above
are judged on the fetch levels, as they were first measured.

| clients | floor: Fastify echo | Ferry runsync, Python worker (p50 ratio, gap) |
|---|---|---|
${leanRows.join('\n')}
`
    : ''
}`
    : notRun('b')
}
## (c) Cold start

${
  r.coldStartMs
    ? `Submit to an endpoint scaled to zero until its result, Python worker start included: ${r.coldStartMs.join(', ')} ms (median ${coldMedian} ms).
\`node dist/bench/scale-from-zero.js\` measures the same against a warm endpoint in one run.

${awsScaleFromZeroReport()}`
    : notRun('c')
}
## (d) Memory (platform in a child process, RSS from /proc after a GC)

${
  r.memory
    ? `| state | RSS |
|---|---|
| idle | ${mb(r.memory.rssIdleBytes)} |
| ${r.memory.jobs} jobs queued | ${mb(r.memory.rssQueuedBytes)} |
| after purge-queue | ${mb(r.memory.rssAfterPurgeBytes)} |

${r.memory.jobs} jobs were submitted through the engine in ${r.memory.submitMs} ms (${r.memory.submitPerSec}/s); health answered in ${r.memory.healthMs} ms and purge-queue removed ${r.memory.removed} in ${r.memory.purgeMs} ms. Queued jobs live in SQLite, not in the heap.
`
    : notRun('d')
}
${
  r.profile && r.profile.length > 0
    ? `## Where the platform spends its CPU (--cpu-prof of the platform child over the whole run, self time)\n\n| function | self % |\n|---|---|\n${r.profile.map((p) => `| \`${p.fn}\` | ${p.pct} |`).join('\n')}\n\n`
    : ''
}## (e) Cost model

${costReport(1_000_000, loadPrices())}
`;
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
