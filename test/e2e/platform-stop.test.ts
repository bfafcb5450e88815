/**
 * Stopping workers the way `ferry serve` and `ferry dev` do, with real Python workers and the real
 * SQLite file: a platform closed (Ctrl+C, SIGTERM) while a job runs sends its worker SIGTERM, counts
 * no crash, and leaves the job queued with its message, so the next start on the same database runs
 * it to the end (README: a job that got an id survives the platform), with none of its attempts used
 * by such stops, while a crash of the worker's own still uses one; a worker killed for keeping a
 * cancelled job hands its other job back without using an attempt; an endpoint removed (its file
 * deleted under `ferry dev`, an undeploy) has its idle worker stopped with SIGTERM, not killed.
 */
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { scanProject } from '../../cli/build/scan.js';
import { openLocalDatabase } from '../../core/adapters/local/sqlite.js';
import { recordFor } from '../support/endpoints.js';
import { call, startTestPlatform, type TestPlatform } from '../support/platform.js';
import { until } from '../support/until.js';

let scratch: string;
const running: TestPlatform[] = [];
/** Process groups of workers a test saw (killed at the end in case a test failed half way). */
const groups: number[] = [];

/**
 * A platform with worker pools on `dataDir`, its log lines (what `ferry serve` prints) in `lines`;
 * `workers` overrides the pools' settings.
 */
async function start(
  dataDir: string,
  lines: string[],
  workers: Partial<NonNullable<Parameters<typeof startTestPlatform>[0]>['workers']> = {},
): Promise<TestPlatform> {
  const platform = await startTestPlatform({
    dataDir,
    log: {
      info: (m) => lines.push(m),
      warn: (m) => lines.push(m),
      error: (m) => lines.push(m),
    },
    workerWaitMs: 2_000,
    workers: {
      ferryPythonPath: resolve('worker-image/python'),
      tickMs: 100,
      reconcileIntervalMs: 300,
      pingIntervalMs: 500,
      shutdownGraceMs: 2_000,
      ...workers,
    },
  });
  running.push(platform);
  return platform;
}

async function deploy(platform: TestPlatform, name: string, source: string) {
  const dir = join(scratch, name);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'app.py'), source);
  const { endpoints } = await scanProject({ projectDir: dir });
  for (const endpoint of endpoints) await platform.db.control.putEndpoint(recordFor(endpoint, dir));
  await platform.workers!.reconcile();
}

async function stop(platform: TestPlatform) {
  await platform.stop(false);
  running.splice(running.indexOf(platform), 1);
}

beforeAll(() => {
  scratch = mkdtempSync(join(tmpdir(), 'ferry-platform-stop-'));
});

afterAll(async () => {
  for (const platform of running) await platform.stop(false).catch(() => {});
  for (const pgid of groups) {
    try {
      process.kill(-pgid, 'SIGKILL');
    } catch {
      // gone, as it should be
    }
  }
  rmSync(scratch, { recursive: true, force: true });
});

describe('stopping the platform while a job runs', () => {
  it('the worker gets SIGTERM, no crash is counted, and the job runs to the end after a restart on the same database', async () => {
    const dataDir = join(scratch, 'home');
    const mark = join(scratch, 'first-attempt');
    const lines: string[] = [];
    const first = await start(dataDir, lines);
    await deploy(
      first,
      'slow',
      `import os, time
from ferry import Endpoint

@Endpoint(name="slow", cpu="1-2", workers=(0, 1), idle_timeout=30)
def slow(mark, seconds=60):
    # The first attempt outlasts the shutdown grace; the one after the restart ends at once.
    if os.path.exists(mark):
        return {"attempt": "again"}
    with open(mark, "w") as f:
        f.write(str(os.getpgid(0)))
    time.sleep(seconds)
    return {"attempt": "first"}
`,
    );
    const base = first.baseUrl;
    const jobId = (await call(base, 'POST', '/slow/run', { input: { mark } })).body.id as string;
    const pgid = Number(
      await until(
        'the job to start',
        () => (existsSync(mark) ? readFileSync(mark, 'utf8') : ''),
        (t) => t !== '',
      ),
    );
    groups.push(pgid);

    // What `ferry serve` does on Ctrl+C or SIGTERM (cli/commands/serve-run.ts).
    await stop(first);
    const said = lines.join('\n');
    // The ferry runtime heard SIGTERM (it prints so), so it could finish or leave its job itself.
    expect(said).toMatch(/received SIGTERM/);
    expect(said).not.toMatch(/crash\(es\) in a row/);
    expect(said).not.toMatch(/requeueing the jobs of/);

    // On disk: back in the queue with its message (before, IN_QUEUE with no message: never taken).
    const db = openLocalDatabase(join(dataDir, 'ferry.db'));
    try {
      expect((await db.jobs.get(jobId, Date.now()))?.status).toBe('IN_QUEUE');
      expect((await db.queue.depth('slow')).visible).toBe(1);
    } finally {
      await db.close();
    }

    const again = await start(dataDir, []);
    const view = await until(
      `job ${jobId} to end`,
      async () => (await call(again.baseUrl, 'GET', `/slow/status/${jobId}`)).body,
      (b) => ['COMPLETED', 'FAILED', 'CANCELLED', 'TIMED_OUT'].includes(b.status),
    );
    expect(view).toMatchObject({ status: 'COMPLETED', output: { attempt: 'again' } });
    await stop(again);
  }, 90_000);
});

describe("stops the platform chose are not the job's failure", () => {
  it('three stops during a long job use none of its attempts; a crash of its own still uses one', async () => {
    const dataDir = join(scratch, 'home-attempts');
    const runs = join(scratch, 'runs');
    const source = `import os, time
from ferry import Endpoint

@Endpoint(name="long", cpu="1-2", workers=(0, 1), idle_timeout=30)
def long(runs):
    n = int(open(runs).read()) + 1 if os.path.exists(runs) else 1
    with open(runs, "w") as f:
        f.write(str(n))
    if n <= 3:
        time.sleep(60)  # stopped by the platform meanwhile
    if n == 4:
        os._exit(1)  # the worker crashes on its own
    return {"runs": n}
`;
    const runsSoFar = () => (existsSync(runs) ? Number(readFileSync(runs, 'utf8')) : 0);
    let platform = await start(dataDir, []);
    await deploy(platform, 'long', source);
    const jobId = (await call(platform.baseUrl, 'POST', '/long/run', { input: { runs } })).body.id as string;
    // The platform's default of 3 attempts: with each stop counted, the third stop failed the job.
    for (let round = 1; round <= 3; round++) {
      await until(`run ${round} to start`, runsSoFar, (n) => n === round, 60_000);
      // What `ferry serve` and `ferry dev` do on Ctrl+C: SIGTERM, then SIGKILL after the grace.
      await stop(platform);
      const db = openLocalDatabase(join(dataDir, 'ferry.db'));
      try {
        expect(await db.jobs.get(jobId, Date.now())).toMatchObject({ status: 'IN_QUEUE', attempt: 0 });
      } finally {
        await db.close();
      }
      platform = await start(dataDir, []);
    }
    const view = await until(
      `job ${jobId} to end`,
      async () => (await call(platform.baseUrl, 'GET', `/long/status/${jobId}`)).body,
      (b) => ['COMPLETED', 'FAILED', 'CANCELLED', 'TIMED_OUT'].includes(b.status),
      60_000,
    );
    expect(view).toMatchObject({ status: 'COMPLETED', output: { runs: 5 } });
    // Run 4's crash counted, and run 5's take: two attempts.
    expect((await platform.db.jobs.get(jobId, Date.now()))?.attempt).toBe(2);
    await stop(platform);
  }, 180_000);
});

describe('a worker killed for keeping a cancelled job', () => {
  it('hands its other job back without using an attempt, and that job completes on a new worker', async () => {
    const dataDir = join(scratch, 'home-kept');
    const keptRuns = join(scratch, 'kept-runs');
    const longRuns = join(scratch, 'long-runs');
    const lines: string[] = [];
    // stopGraceMs: how long the cancelled job may be kept before the worker is killed.
    const platform = await start(dataDir, lines, { stopGraceMs: 1_000 });
    await deploy(
      platform,
      'pair',
      `import os, time
from ferry import Endpoint

@Endpoint(name="pair", cpu="1-2", workers=(0, 1), max_concurrency=2, idle_timeout=30)
def pair(runs):
    n = int(open(runs).read()) + 1 if os.path.exists(runs) else 1
    with open(runs, "w") as f:
        f.write(str(n))
    if n == 1:
        # One call into C: the stop the runtime raises in this thread waits for it to return, so a
        # cancel is ignored (queue_runtime.py); for the long job, the first run outlasts the kill.
        time.sleep(60)
    return {"runs": n}
`,
    );
    const base = platform.baseUrl;
    const runsOf = (file: string) => (existsSync(file) ? Number(readFileSync(file, 'utf8')) : 0);
    const kept = (await call(base, 'POST', '/pair/run', { input: { runs: keptRuns } })).body.id as string;
    await until(
      'the kept job to start',
      () => runsOf(keptRuns),
      (n) => n === 1,
    );
    const long = (await call(base, 'POST', '/pair/run', { input: { runs: longRuns } })).body.id as string;
    await until(
      'the long job to start beside it',
      () => runsOf(longRuns),
      (n) => n === 1,
    );
    const workerOf = async (jobId: string) => (await platform.db.jobs.get(jobId, Date.now()))?.workerId;
    const first = await workerOf(long);
    expect(await workerOf(kept)).toBe(first);

    expect((await call(base, 'POST', `/pair/cancel/${kept}`)).body.status).toBe('CANCELLED');
    const view = await until(
      `job ${long} to end`,
      async () => (await call(base, 'GET', `/pair/status/${long}`)).body,
      (b) => ['COMPLETED', 'FAILED', 'CANCELLED', 'TIMED_OUT'].includes(b.status),
      60_000,
    );
    expect(view).toMatchObject({ status: 'COMPLETED', output: { runs: 2 } });
    expect(lines.join('\n')).toContain(`killing worker ${first}: it kept stopped job ${kept}`);
    const done = await platform.db.jobs.get(long, Date.now());
    expect(done?.workerId).not.toBe(first);
    // Only its take on the new worker counts: the kill was the platform's, not the job's failure
    // (before, 2: the kill used one of its attempts).
    expect(done?.attempt).toBe(1);
    // The kept job stays cancelled: handing the others back free does not bring it back.
    expect((await call(base, 'GET', `/pair/status/${kept}`)).body.status).toBe('CANCELLED');
    expect(runsOf(keptRuns)).toBe(1);
    await stop(platform);
  }, 120_000);
});

describe('removing an endpoint', () => {
  it('stops its idle worker with SIGTERM (its atexit handlers run), not a SIGKILL after a wait', async () => {
    const dataDir = join(scratch, 'home-remove');
    const atexitMark = join(scratch, 'atexit');
    const lines: string[] = [];
    const platform = await start(dataDir, lines);
    await deploy(
      platform,
      'leaver',
      `import atexit, os
from ferry import Endpoint

def _left():
    with open(${JSON.stringify(atexitMark)}, "w") as f:
        f.write("atexit")

atexit.register(_left)

@Endpoint(name="leaver", cpu="1-2", workers=(1, 1), idle_timeout=30)
def leaver():
    return os.getpgid(0)
`,
    );
    const pgid = (await call(platform.baseUrl, 'POST', '/leaver/runsync', { input: {} })).body
      .output as number;
    groups.push(pgid);
    await until(
      'an idle worker',
      async () => (await call(platform.baseUrl, 'GET', '/leaver/health')).body.workers,
      (w) => w?.idle === 1,
    );

    // What `ferry dev` does when the endpoint's file goes, and undeploy on `ferry serve`.
    await platform.db.control.deleteEndpoint('leaver');
    await platform.workers!.reconcile();
    expect(readFileSync(atexitMark, 'utf8')).toBe('atexit');
    // Stopped, not killed after the shutdown grace (2 s here, 5 s by default): a kill says so.
    expect(lines.join('\n')).not.toMatch(/still running: killing it/);
    await stop(platform);
  }, 60_000);
});
