/**
 * Two builds of Ferry against each other (`node dist/bench/ab.js <checkout A> <checkout B>`, each
 * checkout built): the platform's CPU per job of part (a)'s Python-pool figure, in rounds that
 * alternate between the two (A B, B A, A B, ...), with the ratio B / A of each pair of rounds, for
 * the whole process and for its main thread (the event loop) alone.
 *
 * Why: on the shared two-core hosts this project is measured on, a build's CPU per job moves by 10
 * to 25 % from one run to the next as the host's speed drifts (bench/results.md, nineteenth pass: the
 * same hour took BullMQ from 10 770 to 16 548 jobs/s). A change worth 3 to 7 % is lost in that
 * between two `npm run bench` runs; the median of paired rounds minutes apart keeps most of the drift
 * out of the comparison.
 *
 * Each checkout's own `dist/bench/serve-child.js`, echo fixture and Python runtime are used (this
 * process changes into the checkout to start its platform). Knobs: FERRY_BENCH_AB_ROUNDS (6 pairs),
 * FERRY_BENCH_JOBS (20000 per round), FERRY_BENCH_WARMUP_SECONDS (3, untimed, before each round),
 * FERRY_BENCH_AB_PART: `pool` (default: /run → COMPLETED through 2 Python workers × 8), `run` (/run
 * alone, to an endpoint without workers: the submit path only, with the answers' 99.9th percentile
 * and slowest; each round queues its jobs, so keep rounds × (jobs + warm-up) under the queue cap of
 * 100 000) or `sync` (part (b)'s runsync against the same pool: FERRY_BENCH_SECONDS (5) of one
 * runsync loop, then as long of 32, with each level's p50 and the CPU a runsync at one client, where
 * a job is paid alone; undici clients, so the client takes little of the two cores).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import {
  cpuMs,
  descendantsCpuMs,
  mainThreadCpuMs,
  type PlatformChild,
  startPlatformChild,
} from './lib/child.js';
import { benchKey, echoPoolProject } from './lib/faults.js';
import { echoText, postInLoops, runJobs, runsyncLoops, waitWorkers } from './lib/load.js';
import { envInt, percentile, round, say } from './lib/util.js';

const rounds = envInt('FERRY_BENCH_AB_ROUNDS', 6);
const jobs = envInt('FERRY_BENCH_JOBS', 20_000);
const warmUpSeconds = envInt('FERRY_BENCH_WARMUP_SECONDS', 3);
const part = process.env.FERRY_BENCH_AB_PART ?? 'pool';
if (!['pool', 'run', 'sync'].includes(part)) {
  console.error(`FERRY_BENCH_AB_PART is pool, run or sync, not ${part}`);
  process.exit(2);
}
const levelSeconds = envInt('FERRY_BENCH_SECONDS', 5);
const clients = 16;
/** The runsync levels of the `sync` part: the aims' 1 and 32 clients (bench/results.md, part (b)). */
const syncLevels = [1, 32] as const;
const endpointId = part === 'run' ? 'q' : 'echo';

interface Side {
  label: string;
  child: PlatformChild;
  dataDir: string;
  rows: {
    perSec: number;
    platformMs: number;
    mainThreadMs: number;
    p999Ms?: number;
    maxMs?: number;
    /** The sync part: runsync p50 at 1 and at 32 clients. */
    p50Ms1?: number;
    p50Ms32?: number;
  }[];
}

/** The platform of `checkout`, started from there, its echo endpoint's workers up (pool) or none (run). */
async function start(checkout: string, label: string): Promise<Side> {
  const home = process.cwd();
  const dataDir = mkdtempSync(join(tmpdir(), 'ferry-bench-ab-'));
  process.chdir(checkout);
  try {
    const child = await startPlatformChild({
      dataDir,
      apiKey: benchKey,
      workerWaitMs: 20_000,
      ...(part === 'run' ? { endpoints: [endpointId] } : { project: echoPoolProject() }),
    });
    if (part !== 'run') await waitWorkers(child.url, endpointId, 2);
    return { label, child, dataDir, rows: [] };
  } finally {
    process.chdir(home);
  }
}

/**
 * /run from `clients` loops while `more(sent)`; with workers, until health counts them COMPLETED. ms.
 * In the `run` part each answer's time goes to `latenciesMs`.
 */
async function load(side: Side, more: (sent: number) => boolean, latenciesMs?: number[]): Promise<number> {
  const { url } = side.child;
  const text = echoText(0);
  if (part !== 'run') return (await runJobs(url, endpointId, more, clients, text)).ms;
  const began = performance.now();
  await postInLoops(url, { authorization: `Bearer ${benchKey}` }, `/v2/${endpointId}/run`, {
    clients,
    more,
    text,
    latenciesMs,
  });
  return performance.now() - began;
}

/** `clients` runsync loops for `seconds` (runsyncLoops). */
function runsyncs(side: Side, clientCount: number, seconds: number) {
  const endAt = performance.now() + seconds * 1000;
  return runsyncLoops(side.child.url, endpointId, clientCount, () => performance.now() < endAt);
}

/** `work` on the side's platform, with the platform's CPU over it in ms: the process and its main thread. */
async function withPlatformCpu<T>(side: Side, work: () => Promise<T>) {
  const before = cpuMs(side.child.pid);
  const mainBefore = mainThreadCpuMs(side.child.pid);
  const result = await work();
  const after = cpuMs(side.child.pid);
  const mainAfter = mainThreadCpuMs(side.child.pid);
  if (before === undefined || after === undefined || mainBefore === undefined || mainAfter === undefined)
    throw new Error('no CPU figures: /proc is needed (Linux)');
  return { result, platformMs: after - before, mainThreadMs: mainAfter - mainBefore };
}

/** A round of the sync part: warm-up, then each level; the CPU a runsync is the 1-client level's. */
async function measureSync(side: Side): Promise<void> {
  await runsyncs(side, 1, warmUpSeconds);
  const cpu = await withPlatformCpu(side, () => runsyncs(side, syncLevels[0], levelSeconds));
  const one = cpu.result;
  const many = await runsyncs(side, syncLevels[1], levelSeconds);
  const row = {
    perSec: round((one.count * 1000) / one.ms),
    platformMs: round(cpu.platformMs / one.count, 4),
    mainThreadMs: round(cpu.mainThreadMs / one.count, 4),
    p50Ms1: round(one.p50Ms, 3),
    p50Ms32: round(many.p50Ms, 3),
  };
  side.rows.push(row);
  say(
    `${side.label}: runsync p50 ${row.p50Ms1} ms at 1 client (${row.perSec}/s, platform ${row.platformMs} ms a runsync, its main thread ${row.mainThreadMs}), ${row.p50Ms32} ms at 32`,
  );
}

async function measure(side: Side): Promise<void> {
  if (part === 'sync') return measureSync(side);
  const warmUntil = performance.now() + warmUpSeconds * 1000;
  await load(side, () => performance.now() < warmUntil);
  const workersBefore = descendantsCpuMs(side.child.pid);
  const latenciesMs: number[] = [];
  const cpu = await withPlatformCpu(side, () => load(side, (sent) => sent < jobs, latenciesMs));
  const row = {
    perSec: round((jobs * 1000) / cpu.result),
    platformMs: round(cpu.platformMs / jobs, 4),
    mainThreadMs: round(cpu.mainThreadMs / jobs, 4),
    ...(latenciesMs.length > 0 ? tail(latenciesMs) : {}),
  };
  side.rows.push(row);
  const workersMs = round((descendantsCpuMs(side.child.pid) - workersBefore) / jobs, 4);
  const answers = row.p999Ms === undefined ? '' : `, /run p99.9 ${row.p999Ms} ms, slowest ${row.maxMs} ms`;
  say(
    `${side.label}: ${row.perSec} jobs/s, platform ${row.platformMs} ms a job (its main thread ${row.mainThreadMs}), workers ${workersMs}${answers}`,
  );
}

/** The slow end of a round's answer times: what a stalled event loop shows first. */
function tail(latenciesMs: number[]) {
  const sorted = [...latenciesMs].sort((a, b) => a - b);
  return { p999Ms: round(percentile(sorted, 99.9), 1), maxMs: round(sorted.at(-1)!, 1) };
}

const median = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
};

async function main() {
  const [a, b] = process.argv.slice(2).map((checkout) => resolve(checkout));
  if (!a || !b) {
    console.error('usage: node dist/bench/ab.js <checkout A> <checkout B>   (each built: npm run build)');
    process.exit(2);
  }
  const roundSize = part === 'sync' ? `${levelSeconds} s a level` : `${jobs} jobs`;
  say(`A/B, part ${part}: ${rounds} pairs of ${roundSize}, A = ${a}, B = ${b}`);
  const sides: Side[] = [];
  try {
    sides.push(await start(a, 'A'));
    sides.push(await start(b, 'B'));
    const [sideA, sideB] = sides as [Side, Side];
    for (let r = 0; r < rounds; r++) {
      for (const side of r % 2 === 0 ? [sideA, sideB] : [sideB, sideA]) await measure(side);
    }
    type Row = Side['rows'][number];
    /** The medians of one figure of the rounds, per side. */
    const medians = (figure: (row: Row) => number) => ({
      A: median(sideA.rows.map(figure)),
      B: median(sideB.rows.map(figure)),
    });
    /** The ratio B / A of one figure, pair by pair. */
    const ratios = (figure: (row: Row) => number) =>
      sideA.rows.map((rowA, i) => figure(sideB.rows[i]!) / figure(rowA));
    const platformRatios = ratios((r) => r.platformMs);
    console.log(
      JSON.stringify({
        part,
        pairs: rounds,
        ...(part === 'sync' ? { levelSeconds } : { jobs }),
        platformMsMedian: medians((r) => r.platformMs),
        jobsPerSecMedian: medians((r) => r.perSec),
        platformRatiosBOverA: platformRatios.map((ratio) => round(ratio, 3)),
        platformRatioMedian: round(median(platformRatios), 3),
        mainThreadMsMedian: medians((r) => r.mainThreadMs),
        mainThreadRatioMedian: round(median(ratios((r) => r.mainThreadMs)), 3),
        ...(part === 'run' && {
          runP999MsMedian: medians((r) => r.p999Ms!),
          runMaxMsMedian: medians((r) => r.maxMs!),
        }),
        ...(part === 'sync' && {
          runsyncP50Ms1Median: medians((r) => r.p50Ms1!),
          runsyncP50Ms1RatioMedian: round(median(ratios((r) => r.p50Ms1!)), 3),
          runsyncP50Ms32Median: medians((r) => r.p50Ms32!),
          runsyncP50Ms32RatioMedian: round(median(ratios((r) => r.p50Ms32!)), 3),
        }),
      }),
    );
  } finally {
    for (const side of sides) {
      await side.child.stop();
      rmSync(side.dataDir, { recursive: true, force: true });
    }
  }
}

await main();
