/**
 * The scaling policy (core/scaling.ts) applied by the local pool, end to end: real Python workers
 * (`python -m ferry.worker`), jobs through the v2 API over HTTP, /health read the way clients read it.
 * The pool is sampled every few milliseconds while the jobs run, so a worker started and stopped
 * between two health reads is still counted.
 */
import { rmSync } from 'node:fs';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { scanProject } from '../../cli/build/scan.js';
import { recordFor } from '../support/endpoints.js';
import { call, startTestPlatform, type TestPlatform } from '../support/platform.js';

const projectDir = resolve('test/e2e/fixtures/scaling');
let platform: TestPlatform;
let base: string;

const until = async <T>(probe: () => Promise<T>, ok: (v: T) => boolean, timeoutMs = 60_000): Promise<T> => {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (ok(value) || Date.now() > deadline) return value;
    await new Promise((r) => setTimeout(r, 100));
  }
};

/** The most workers the endpoint's pool had at once while `during` ran. */
async function peakWorkers<T>(
  endpoint: string,
  during: () => Promise<T>,
): Promise<{ peak: number; result: T }> {
  let peak = 0;
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      peak = Math.max(peak, platform.workers!.pool(endpoint)?.size ?? 0);
      await new Promise((r) => setTimeout(r, 5));
    }
  })();
  try {
    const result = await during();
    return { peak, result };
  } finally {
    sampling = false;
    await sampler;
  }
}

type Health = { body: { workers: { idle: number; running: number } } };
const healthOf = (endpoint: string) => () => call(base, 'GET', `/${endpoint}/health`) as Promise<Health>;
const workersIn = (r: Health) => r.body.workers.idle + r.body.workers.running;

beforeAll(async () => {
  platform = await startTestPlatform({
    workerWaitMs: 5_000,
    workers: {
      ferryPythonPath: resolve('worker-image/python'),
      tickMs: 100,
      drainMs: 3_000,
      gpuCount: 0,
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
  rmSync(resolve(projectDir, '__pycache__'), { recursive: true, force: true });
});

describe('local scaling through the one policy', () => {
  it('a burst of 50 on workers=(0,3) runs on exactly 3 workers, then back to 0 after idle_timeout', async () => {
    const health = healthOf('burst50');
    expect(workersIn(await health())).toBe(0);
    const { peak, result: pids } = await peakWorkers('burst50', async () => {
      const ids: string[] = [];
      for (let i = 0; i < 50; i++) {
        ids.push((await call(base, 'POST', '/burst50/run', { input: { ms: 200 } })).body.id);
      }
      const seen = new Set<number>();
      for (const id of ids) {
        const r = await until(
          () => call(base, 'GET', `/burst50/status/${id}`),
          (s) => s.body.status === 'COMPLETED',
        );
        expect(r.body.status).toBe('COMPLETED');
        seen.add(r.body.output as number);
      }
      return seen;
    });
    expect(peak).toBe(3);
    // Every job ran on one of exactly three worker processes: none was replaced, none extra started.
    expect(pids.size).toBe(3);
    const idle = await until(
      health,
      (r) => workersIn(r) === 0 && platform.workers!.pool('burst50')!.size === 0,
    );
    expect(workersIn(idle)).toBe(0);
    expect(platform.workers!.pool('burst50')!.size).toBe(0);
  });

  it('one job on an idle endpoint starts one worker, however many ticks it runs', async () => {
    const health = healthOf('lone');
    expect(workersIn(await health())).toBe(0);
    const { peak, result } = await peakWorkers('lone', () =>
      call(base, 'POST', '/lone/runsync', { input: { ms: 3000 } }),
    );
    expect(result.body.status).toBe('COMPLETED');
    expect(peak).toBe(1);
    const idle = await until(health, (r) => workersIn(r) === 0 && platform.workers!.pool('lone')!.size === 0);
    expect(workersIn(idle)).toBe(0);
  });

  it('low-priority jobs alone never start a worker', async () => {
    const { body } = await call(base, 'POST', '/lone/run', {
      input: { ms: 10 },
      policy: { lowPriority: true },
    });
    // Several pool ticks (100 ms each) pass while the job waits; none may start a worker for it.
    const { peak } = await peakWorkers('lone', () => new Promise((r) => setTimeout(r, 1_500)));
    expect(peak).toBe(0);
    expect((await call(base, 'GET', `/lone/status/${body.id}`)).body.status).toBe('IN_QUEUE');
    await call(base, 'POST', `/lone/cancel/${body.id}`);
  });
});
