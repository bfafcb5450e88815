/**
 * Benchmarks (`npm run bench`, after a build). Every figure is a RATIO against a named peer measured
 * in the same run on the same machine, written to bench/results.md with the machine and the date:
 *
 *   (a) throughput: jobs/s from /run to COMPLETED, echo handler, Ferry (real Python worker pool, and
 *       the engine alone with a TypeScript protocol worker) against BullMQ on Redis at the same
 *       concurrency;
 *   (b) runsync latency p50/p99 at 1, 32 and 256 clients against a bare Fastify echo route (the floor);
 *   (c) cold start: submit to an endpoint scaled to zero → result (Python worker start included);
 *   (d) memory: platform RSS idle and with 100k queued jobs (child process, /proc);
 *   (e) cost of 1M jobs on AWS from bench/prices.json (bench/cost.ts).
 *
 * Knobs: FERRY_BENCH_JOBS (20000), FERRY_BENCH_CONCURRENCY (16), FERRY_BENCH_SECONDS per latency level
 * (5), FERRY_BENCH_QUEUE (100000), FERRY_BENCH_SKIP_BULLMQ=1. BullMQ and ioredis are installed at run
 * time into bench/.work/ (gitignored), redis-server with apt-get when it is missing.
 */
import { execFileSync, spawn, spawnSync } from 'node:child_process';
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
import { createServer } from 'node:net';
import { cpus, loadavg, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { costReport, loadPrices } from './cost.js';
import { startPlatformChild } from './lib/child.js';
import { api, benchKey, deepQueue, echoProject } from './lib/faults.js';
import { envInt, pause, round, say } from './lib/util.js';
import { CountingWorker } from './lib/worker.js';
import { awsScaleFromZeroReport } from './scale-from-zero.js';

const jobs = envInt('FERRY_BENCH_JOBS', 20_000);
const concurrency = envInt('FERRY_BENCH_CONCURRENCY', 16);
const levelSeconds = envInt('FERRY_BENCH_SECONDS', 5);
const queuedJobs = envInt('FERRY_BENCH_QUEUE', 100_000);
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

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

/** `clients` loops calling `once` for `seconds`, after a short warm-up; latencies in ms. */
async function latency(clients: number, seconds: number, once: () => Promise<unknown>) {
  const samples: number[] = [];
  let errors = 0;
  const warmUntil = performance.now() + 500;
  const endAt = warmUntil + seconds * 1000;
  await Promise.all(
    Array.from({ length: clients }, async () => {
      while (performance.now() < endAt) {
        const began = performance.now();
        try {
          await once();
          if (began >= warmUntil) samples.push(performance.now() - began);
        } catch {
          errors++;
        }
      }
    }),
  );
  samples.sort((a, b) => a - b);
  return {
    clients,
    requests: samples.length,
    errors,
    p50: round(percentile(samples, 50), 2),
    p99: round(percentile(samples, 99), 2),
  };
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

/** Calls `submit(1..n)` from `clients` parallel loops, each taking the next number when free. */
async function submitInParallel(n: number, clients: number, submit: (i: number) => Promise<void>) {
  let next = 0;
  await Promise.all(
    Array.from({ length: clients }, async () => {
      while (next < n) {
        next++;
        await submit(next);
      }
    }),
  );
}

/** Submits `n` jobs with `clients` parallel /run loops and waits until health counts them COMPLETED. */
async function ferryThroughput(url: string, endpointId: string, n: number, clients: number) {
  const before = (await api(url, 'GET', `/${endpointId}/health`)).body.jobs.completed as number;
  const began = performance.now();
  await submitInParallel(n, clients, async (i) => {
    const r = await api(url, 'POST', `/${endpointId}/run`, { input: { i, text: 'echo me' } });
    if (r.status !== 200) throw new Error(`/run answered ${r.status}: ${JSON.stringify(r.body)}`);
  });
  const submittedMs = performance.now() - began;
  for (;;) {
    const done = (await api(url, 'GET', `/${endpointId}/health`)).body.jobs.completed - before;
    if (done >= n) break;
    await pause(50);
  }
  const ms = performance.now() - began;
  return { jobs: n, ms: Math.round(ms), submitMs: Math.round(submittedMs), perSec: round((n * 1000) / ms) };
}

async function waitWorkers(url: string, endpointId: string, count: number, timeoutMs = 60_000) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const w = (await api(url, 'GET', `/${endpointId}/health`)).body.workers;
    if (w.idle + w.running === count) return;
    await pause(100);
  }
  throw new Error(`${endpointId} did not reach ${count} workers in ${timeoutMs} ms`);
}

// ── BullMQ ────────────────────────────────────────────────────────────────────────────────────────

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

const hasCommand = (name: string) => spawnSync('sh', ['-c', `command -v ${name}`]).status === 0;

/** Makes redis-server and bullmq available, or says why not. */
function prepareBullmq(): { ok: true; dir: string } | { ok: false; reason: string } {
  if (process.env.FERRY_BENCH_SKIP_BULLMQ === '1') return { ok: false, reason: 'FERRY_BENCH_SKIP_BULLMQ=1' };
  if (!hasCommand('redis-server')) {
    say('redis-server is missing: apt-get install -y redis-server');
    const apt = spawnSync('apt-get', ['install', '-y', 'redis-server'], {
      stdio: 'inherit',
      timeout: 300_000,
    });
    if (apt.status !== 0 || !hasCommand('redis-server')) {
      return {
        ok: false,
        reason: 'redis-server is not installed and `apt-get install -y redis-server` failed',
      };
    }
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

async function bullmqThroughput(dir: string, n: number, workerConcurrency: number, clients: number) {
  const port = await freePort();
  const redis = spawn('redis-server', ['--port', String(port), '--save', '', '--appendonly', 'no'], {
    stdio: 'ignore',
  });
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
    let resolveDone: () => void = () => {};
    const allDone = new Promise<void>((r) => {
      resolveDone = r;
    });
    const worker = new bullmq.Worker('echo', async (job: { data: unknown }) => job.data, {
      connection,
      concurrency: workerConcurrency,
    });
    worker.on('completed', () => {
      if (++completed >= n) resolveDone();
    });
    await worker.waitUntilReady();
    const began = performance.now();
    await submitInParallel(n, clients, async (i) => {
      await queue.add('echo', { i, text: 'echo me' });
    });
    await allDone;
    const ms = performance.now() - began;
    await worker.close();
    await queue.close();
    return { jobs: n, ms: Math.round(ms), perSec: round((n * 1000) / ms) };
  } finally {
    redis.kill('SIGKILL');
  }
}

// ── the run ───────────────────────────────────────────────────────────────────────────────────────

async function main(): Promise<void> {
  const info = machine();
  say(`bench: ${jobs} jobs, concurrency ${concurrency}, ${levelSeconds} s per latency level on ${info.cpu}`);
  const dataDir = mkdtempSync(join(tmpdir(), 'ferry-bench-'));
  const results: Record<string, unknown> = { machine: info };

  // (b) floor first, alone on the machine.
  const floorChild = await startPlatformChild({ dataDir: '--floor', apiKey: '' });
  const levels = [1, 32, 256];
  const floorLatency = [];
  try {
    for (const clients of levels) {
      floorLatency.push(
        await latency(clients, levelSeconds, () => postJson(`${floorChild.url}/echo`, { input: { x: 1 } })),
      );
      say(`floor ${clients} clients: ${JSON.stringify(floorLatency.at(-1))}`);
    }
  } finally {
    await floorChild.stop();
  }

  const profDir = join(process.cwd(), 'bench', '.work', 'prof');
  const profile = process.env.FERRY_BENCH_CPU_PROF === '1';
  if (profile) rmSync(profDir, { recursive: true, force: true });
  const child = await startPlatformChild({
    dataDir,
    apiKey: benchKey,
    workerWaitMs: 20_000,
    nodeArgs: profile ? ['--cpu-prof', '--cpu-prof-dir', profDir] : [],
    endpoints: ['tsecho'],
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
  const auth = { authorization: `Bearer ${benchKey}` };
  try {
    await waitWorkers(child.url, 'echo', pyWorkers);

    // (a) throughput first: health's completed count must not include runsync jobs, whose results
    // expire after a minute (docs/api.md#retention) and would leave the count mid-run.
    // Engine + TS worker, then the Python pool.
    const tsThroughputWorker = new CountingWorker(child.target('tsecho'), 'tsecho', {
      workerId: child.target('tsecho').workerId,
      concurrency,
    });
    tsThroughputWorker.start();
    const ferryTs = await ferryThroughput(child.url, 'tsecho', jobs, concurrency);
    await tsThroughputWorker.stop();
    say(`ferry throughput (TS worker): ${JSON.stringify(ferryTs)}`);
    const ferryPython = await ferryThroughput(child.url, 'echo', jobs, concurrency);
    say(`ferry throughput (Python pool): ${JSON.stringify(ferryPython)}`);
    results.throughput = { ferryTs, ferryPython };
    // (b) runsync latency through the platform: TS protocol worker, then the Python pool.
    const tsWorker = new CountingWorker(child.target('tsecho'), 'tsecho', {
      workerId: child.target('tsecho').workerId,
      concurrency: 64,
    });
    tsWorker.start();
    const tsLatency = [];
    const pyLatency = [];
    for (const clients of levels) {
      tsLatency.push(
        await latency(clients, levelSeconds, () =>
          postJson(`${child.url}/v2/tsecho/runsync?wait=60000`, { input: { x: 1 } }, auth),
        ),
      );
      say(`ferry runsync (TS worker) ${clients} clients: ${JSON.stringify(tsLatency.at(-1))}`);
    }
    for (const clients of levels) {
      pyLatency.push(
        await latency(clients, levelSeconds, () =>
          postJson(`${child.url}/v2/echo/runsync?wait=60000`, { input: { x: 1 } }, auth),
        ),
      );
      say(`ferry runsync (Python worker) ${clients} clients: ${JSON.stringify(pyLatency.at(-1))}`);
    }
    await tsWorker.stop();
    results.latency = { floor: floorLatency, ferryTs: tsLatency, ferryPython: pyLatency };

    // (c) cold start: the endpoint scaled to zero, one job, time to its result.
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
  } finally {
    await child.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }

  const bull = prepareBullmq();
  if (bull.ok) {
    try {
      const bullmq = await bullmqThroughput(bull.dir, jobs, concurrency, concurrency);
      say(`bullmq throughput: ${JSON.stringify(bullmq)}`);
      (results.throughput as Record<string, unknown>).bullmq = bullmq;
    } catch (error) {
      say(`BullMQ failed: ${(error as Error).message}`);
      (results.throughput as Record<string, unknown>).bullmqSkipped =
        `BullMQ run failed: ${(error as Error).message}`;
    }
  } else {
    say(`BullMQ skipped: ${bull.reason}`);
    (results.throughput as Record<string, unknown>).bullmqSkipped = bull.reason;
  }

  if (profile) results.profile = summarizeProfile(profDir);

  // (d) memory, in a fresh child.
  const memory = await deepQueue({ jobs: queuedJobs });
  say(`memory: ${JSON.stringify(memory)}`);
  results.memory = memory;

  (results.machine as Record<string, unknown>).loadAverageAtEnd = loadavg().map((n) => round(n, 2));
  const markdown = report(results as unknown as Results);
  writeFileSync(join(process.cwd(), 'bench', 'results.md'), markdown);
  mkdirSync(join(process.cwd(), 'bench', '.work'), { recursive: true });
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
interface Results {
  machine: ReturnType<typeof machine>;
  latency: { floor: Level[]; ferryTs: Level[]; ferryPython: Level[] };
  coldStartMs: number[];
  throughput: {
    ferryTs: { perSec: number; ms: number };
    ferryPython: { perSec: number; ms: number };
    bullmq?: { perSec: number; ms: number };
    bullmqSkipped?: string;
  };
  memory: Awaited<ReturnType<typeof deepQueue>>;
  profile?: { fn: string; pct: number }[];
}

function report(r: Results): string {
  const m = r.machine;
  const mb = (bytes: number | undefined) => (bytes === undefined ? 'n/a' : `${round(bytes / 1048576)} MB`);
  const t = r.throughput;
  const ratio = (a: number, b: number) => `${round(a / b, 2)}×`;
  const bullLine = t.bullmq
    ? `| BullMQ 5 on Redis (same concurrency) | ${t.bullmq.perSec} | 1.00× |`
    : `| BullMQ 5 on Redis | skipped: ${t.bullmqSkipped} | — |`;
  const peer = t.bullmq?.perSec;
  const lat = (levels: Level[], clients: number) => levels.find((l) => l.clients === clients)!;
  const latRows = [1, 32, 256].map((c) => {
    const f = lat(r.latency.floor, c);
    const ts = lat(r.latency.ferryTs, c);
    const py = lat(r.latency.ferryPython, c);
    return `| ${c} | ${f.p50} / ${f.p99} | ${ts.p50} / ${ts.p99} (${ratio(ts.p50, f.p50)}) | ${py.p50} / ${py.p99} (${ratio(py.p50, f.p50)}) |`;
  });
  const cold = [...r.coldStartMs].sort((a, b) => a - b);
  const coldMedian = cold[Math.floor(cold.length / 2)]!;
  const gap32 = round(lat(r.latency.ferryTs, 32).p50 - lat(r.latency.floor, 32).p50, 2);
  const gap32py = round(lat(r.latency.ferryPython, 32).p50 - lat(r.latency.floor, 32).p50, 2);
  const idleMb = (r.memory.rssIdleBytes ?? Number.NaN) / 1048576;
  const met = (ok: boolean | undefined) =>
    ok === undefined ? 'not measured' : ok ? '**met**' : '**not met**';
  return `# Ferry benchmarks

Measured in one run by \`npm run bench\` (bench/run.ts). Every figure is set against a peer measured in
the same run on the same machine; the absolute numbers only mean something next to their peer.

Machine: ${m.cpu}, ${m.cores} cores, ${m.memoryGb} GB memory; Node ${m.node}; ${m.python}. Date: ${m.date}.
The machine is shared with other work: load average (1/5/15 min) ${m.loadAverage.join(' / ')} at the start and ${(m as { loadAverageAtEnd?: number[] }).loadAverageAtEnd?.join(' / ') ?? 'n/a'} at the end of the run.
Run size: ${jobs} jobs per throughput figure, concurrency ${concurrency} (Python pool: ${pyWorkers} workers × max_concurrency ${Math.ceil(concurrency / pyWorkers)}), ${levelSeconds} s per latency level, ${queuedJobs} queued jobs for memory.

## Aims

| aim | measured | |
|---|---|---|
| throughput ≥ BullMQ's | Ferry + Python pool ${t.ferryPython.perSec} jobs/s vs BullMQ ${peer ?? 'n/a'} jobs/s (${peer ? ratio(t.ferryPython.perSec, peer) : 'n/a'}) | ${met(peer === undefined ? undefined : t.ferryPython.perSec >= peer)} |
| runsync p50 within 2 ms of the floor at 32 clients | TS worker +${gap32} ms, Python worker +${gap32py} ms | ${met(gap32 <= 2)} |
| cold start < 300 ms | median ${coldMedian} ms | ${met(coldMedian < 300)} |
| idle RSS < 120 MB | ${round(idleMb)} MB | ${met(idleMb < 120)} |

## (a) Throughput: /run → COMPLETED, echo handler

| system | jobs/s | ratio to BullMQ |
|---|---|---|
| Ferry, local provider, real Python worker pool | ${t.ferryPython.perSec} | ${peer ? ratio(t.ferryPython.perSec, peer) : 'n/a'} |
| Ferry engine alone, TypeScript protocol worker | ${t.ferryTs.perSec} | ${peer ? ratio(t.ferryTs.perSec, peer) : 'n/a'} |
${bullLine}

Ferry's figure includes HTTP for every submission (/run), every take and every job-done, and one
SQLite commit per transition; BullMQ's producer and worker talk to Redis directly in-process.

## (b) runsync latency, ms (p50 / p99), against a bare Fastify echo route

| clients | floor: Fastify echo | Ferry runsync, TS worker (p50 ratio) | Ferry runsync, Python worker (p50 ratio) |
|---|---|---|---|
${latRows.join('\n')}

A runsync is a job: submit, queue, a worker's long poll answers, the handler runs, job-done, and the
waiting request wakes up — four HTTP exchanges where the floor has one.

## (c) Cold start

Submit to an endpoint scaled to zero until its result, Python worker start included: ${r.coldStartMs.join(', ')} ms (median ${coldMedian} ms).
\`node dist/bench/scale-from-zero.js\` measures the same against a warm endpoint in one run.

${awsScaleFromZeroReport()}

## (d) Memory (platform in a child process, RSS from /proc after a GC)

| state | RSS |
|---|---|
| idle | ${mb(r.memory.rssIdleBytes)} |
| ${r.memory.jobs} jobs queued | ${mb(r.memory.rssQueuedBytes)} |
| after purge-queue | ${mb(r.memory.rssAfterPurgeBytes)} |

${r.memory.jobs} jobs were submitted through the engine in ${r.memory.submitMs} ms (${r.memory.submitPerSec}/s); health answered in ${r.memory.healthMs} ms and purge-queue removed ${r.memory.removed} in ${r.memory.purgeMs} ms. Queued jobs live in SQLite, not in the heap.

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
