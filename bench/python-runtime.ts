/**
 * The Python worker runtime (worker-image/python/ferry) against the TypeScript protocol worker
 * (bench/lib/worker.ts) in the same run (each endpoint on a platform of its own, built the same):
 *
 *   throughput: jobs/s of an echo handler, one worker process, max_concurrency 1 and 4, async and
 *     sync handlers; the peer is the TS worker with 1 and 4 take loops;
 *   cold start: runsync to an endpoint scaled to zero → result (median of FERRY_BENCH_COLD runs).
 *
 *   npx tsc -p tsconfig.json && node dist/bench/python-runtime.js
 *
 * Knobs: FERRY_BENCH_JOBS (jobs per throughput figure, 2000), FERRY_BENCH_COLD (runs, 10),
 * FERRY_BENCH_PYTHONPATH (another copy of the `ferry` package to measure, e.g. an older one).
 * Jobs are queued through the engine directly (the child's `submit` command, no HTTP), so the
 * figures are the drain rate of the worker, not of the submitting client.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { type PlatformChild, startPlatformChild } from './lib/child.js';
import { api, benchKey } from './lib/faults.js';
import { waitWorkers } from './lib/load.js';
import { envInt, pause, round, say } from './lib/util.js';
import { CountingWorker } from './lib/worker.js';

const jobs = envInt('FERRY_BENCH_JOBS', 2000);
const coldRuns = envInt('FERRY_BENCH_COLD', 10);

const PROJECT = `
from ferry import Endpoint


@Endpoint(name="pyasync1", cpu="1-2", workers=(1, 1), max_concurrency=1)
async def pyasync1(**kwargs):
    return kwargs


@Endpoint(name="pysync1", cpu="1-2", workers=(1, 1), max_concurrency=1)
def pysync1(**kwargs):
    return kwargs


@Endpoint(name="pyasync4", cpu="1-2", workers=(1, 1), max_concurrency=4)
async def pyasync4(**kwargs):
    return kwargs


@Endpoint(name="pysync4", cpu="1-2", workers=(1, 1), max_concurrency=4)
def pysync4(**kwargs):
    return kwargs


@Endpoint(name="pycold", cpu="1-2", workers=(0, 1), idle_timeout=1)
def pycold(**kwargs):
    return kwargs
`;

async function health(url: string, endpointId: string) {
  return (await api(url, 'GET', `/${endpointId}/health`)).body;
}

/** Queues `n` jobs through the engine, then waits until health counts them COMPLETED. */
async function drain(child: PlatformChild, endpointId: string, n: number) {
  const before = (await health(child.url, endpointId)).jobs.completed;
  const began = performance.now();
  await child.command({ cmd: 'submit', endpoint: endpointId, n });
  for (;;) {
    const h = await health(child.url, endpointId);
    if (h.jobs.completed - before >= n) break;
    if (h.jobs.failed > 0) throw new Error(`${endpointId}: ${h.jobs.failed} job(s) failed`);
    await pause(25);
  }
  return round((n * 1000) / (performance.now() - began));
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'ferry-pyrt-bench-'));
  writeFileSync(join(dir, 'workers.py'), PROJECT);
  const child = await startPlatformChild({
    dataDir: join(dir, 'data'),
    apiKey: benchKey,
    workerWaitMs: 20_000,
    project: { dir, ferryPythonPath: resolve(process.env.FERRY_BENCH_PYTHONPATH ?? 'worker-image/python') },
  });
  // The TypeScript worker's endpoint on a platform of its own, as in bench/run.ts: a platform that
  // runs worker pools holds a record with no build configuration (what an outside worker's endpoint
  // is there) as failing and fails its jobs.
  let tsChild: PlatformChild | undefined;
  const rows: { what: string; py: number; ts: number }[] = [];
  const load = [loadavg()[0]!];
  try {
    tsChild = await startPlatformChild({
      dataDir: join(dir, 'ts-data'),
      apiKey: benchKey,
      workerWaitMs: 20_000,
      endpoints: ['tsecho'],
    });
    for (const id of ['pyasync1', 'pysync1', 'pyasync4', 'pysync4'])
      await waitWorkers(child.url, id, 1, 60_000, 50);
    // Warm both sides (first SQLite pages, first connections) before anything is timed.
    const warm = new CountingWorker(tsChild.target('tsecho'), 'tsecho', {
      workerId: tsChild.target('tsecho').workerId,
      concurrency: 1,
    });
    warm.start();
    await drain(tsChild, 'tsecho', 100);
    await warm.stop();
    for (const id of ['pyasync1', 'pysync1', 'pyasync4', 'pysync4']) await drain(child, id, 50);

    for (const concurrency of [1, 4]) {
      const worker = new CountingWorker(tsChild.target('tsecho'), 'tsecho', {
        workerId: tsChild.target('tsecho').workerId,
        concurrency,
      });
      worker.start();
      const ts = await drain(tsChild, 'tsecho', jobs);
      await worker.stop();
      for (const kind of ['async', 'sync']) {
        const py = await drain(child, `py${kind}${concurrency}`, jobs);
        rows.push({ what: `${kind} handler, max_concurrency ${concurrency}`, py, ts });
        say(`${kind} ${concurrency}: python ${py} jobs/s, ts ${ts} jobs/s`);
      }
    }

    const coldMs: number[] = [];
    const auth = { authorization: `Bearer ${benchKey}`, 'content-type': 'application/json' };
    for (let i = 0; i < coldRuns; i++) {
      await waitWorkers(child.url, 'pycold', 0, 60_000, 50);
      await pause(300);
      const began = performance.now();
      const response = await fetch(`${child.url}/v2/pycold/runsync?wait=60000`, {
        method: 'POST',
        headers: auth,
        body: JSON.stringify({ input: { i } }),
      });
      const body = (await response.json()) as { status?: string };
      if (body.status !== 'COMPLETED') throw new Error(`cold start job ended ${body.status}`);
      coldMs.push(Math.round(performance.now() - began));
      say(`cold start ${i + 1}: ${coldMs.at(-1)} ms`);
    }
    load.push(loadavg()[0]!);
    const sorted = [...coldMs].sort((a, b) => a - b);
    const median = sorted[Math.floor(sorted.length / 2)]!;

    const lines = [
      `Python runtime vs TypeScript protocol worker, same build, same run (${jobs} jobs per figure; load ${load.map((l) => round(l, 2)).join(' → ')})`,
      '',
      '| echo | Python jobs/s | TS worker jobs/s | ratio |',
      '|---|---|---|---|',
      ...rows.map((r) => `| ${r.what} | ${r.py} | ${r.ts} | ${round(r.py / r.ts, 2)}× |`),
      '',
      `cold start (scaled to zero → runsync result): ${coldMs.join(', ')} ms; median ${median} ms`,
    ];
    process.stdout.write(`${lines.join('\n')}\n`);
  } finally {
    await tsChild?.stop();
    await child.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((error) => {
  say(`python-runtime bench failed: ${(error as Error).stack ?? error}`);
  process.exit(1);
});
