/**
 * GPUs on the local pool: a worker gets its gpu_count GPUs or does not start (its jobs wait in the
 * queue, as on a GPU pool), an endpoint asking for more GPUs than the machine has is failing with
 * the reason, and on a machine without GPUs GPU endpoints run on the CPU. `gpuCount` stands for what
 * `nvidia-smi -L` lists (as in workers.test.ts).
 */
import { rmSync } from 'node:fs';
import { resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { scanProject } from '../../cli/build/scan.js';
import { recordFor } from '../support/endpoints.js';
import { call, startTestPlatform, type TestPlatform } from '../support/platform.js';

const projectDir = resolve('test/e2e/fixtures/gpus');
const platforms: TestPlatform[] = [];

async function platformWith(gpuCount: number): Promise<TestPlatform> {
  const platform = await startTestPlatform({
    workerWaitMs: 5_000,
    workers: {
      ferryPythonPath: resolve('worker-image/python'),
      tickMs: 100,
      drainMs: 3_000,
      gpuCount,
      reconcileIntervalMs: 500,
    },
  });
  platforms.push(platform);
  const { endpoints } = await scanProject({ projectDir });
  for (const endpoint of endpoints) await platform.db.control.putEndpoint(recordFor(endpoint, projectDir));
  await platform.workers!.reconcile();
  return platform;
}

afterAll(async () => {
  for (const platform of platforms) await platform.stop();
  rmSync(resolve(projectDir, '__pycache__'), { recursive: true, force: true });
});

type Done = { body: { status: string; output: { cuda_visible_devices: string; pid: number } } };

describe('a machine with one GPU', () => {
  it('a second worker of a gpu_count=1 endpoint waits for the GPU: its jobs queue, none runs on the CPU', async () => {
    const platform = await platformWith(1);
    const base = platform.baseUrl;
    let peak = 0;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        peak = Math.max(peak, platform.workers!.pool('one-gpu')?.size ?? 0);
        await new Promise((r) => setTimeout(r, 5));
      }
    })();
    const done = (await Promise.all([
      call(base, 'POST', '/one-gpu/runsync', { input: { ms: 1000 } }),
      call(base, 'POST', '/one-gpu/runsync', { input: { ms: 1000 } }),
    ])) as Done[];
    sampling = false;
    await sampler;
    expect(done.map((r) => r.body.status)).toEqual(['COMPLETED', 'COMPLETED']);
    expect(done.map((r) => r.body.output.cuda_visible_devices)).toEqual(['0', '0']);
    expect(peak).toBe(1);
  });

  it('an endpoint asking for more GPUs than the machine has is failing, with the reason', async () => {
    const platform = platforms[0]!;
    const r = await call(platform.baseUrl, 'POST', '/two-gpus/runsync', { input: {} });
    expect(r.body.status).toBe('FAILED');
    expect(r.body.error).toContain('gpu_count=2');
    expect(r.body.error).toContain('this machine has 1');
    const health = await call(platform.baseUrl, 'GET', '/two-gpus/health');
    expect(health.body.problem).toMatchObject({ state: 'failing' });
    expect(health.body.problem.reason).toContain('gpu_count=2');
    expect(platform.workers!.pool('two-gpus')!.size).toBe(0);
  });
});

describe('a machine without GPUs', () => {
  it('GPU endpoints run on the CPU, as documented', async () => {
    const platform = await platformWith(0);
    const r = (await call(platform.baseUrl, 'POST', '/two-gpus/runsync', { input: {} })) as Done;
    expect(r.body).toMatchObject({ status: 'COMPLETED', output: { cuda_visible_devices: '' } });
  });
});
