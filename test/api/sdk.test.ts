/**
 * The real `runpod-sdk` npm client against the embedded platform on loopback, with a worker that
 * completes jobs through the worker protocol over HTTP.
 */
import runpodSdk from 'runpod-sdk';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { startTestPlatform, type TestPlatform, testApiKey } from '../support/platform.js';
import { ProtocolWorker } from '../support/protocolWorker.js';

describe('runpod-sdk against the embedded platform', () => {
  let platform: TestPlatform;
  let worker: { stop(): Promise<void> };
  let endpoint: ReturnType<ReturnType<typeof runpodSdk>['endpoint']>;

  beforeAll(async () => {
    platform = await startTestPlatform();
    await platform.addEndpoint('echo');
    worker = new ProtocolWorker(platform.url, 'echo', platform.workerToken).serve();
    endpoint = runpodSdk(testApiKey, { baseUrl: platform.baseUrl }).endpoint('echo')!;
    // runSync logs "<id>: <status>" while it polls; keep test output clean.
    vi.spyOn(console, 'log').mockImplementation(() => {});
  });

  afterAll(async () => {
    await worker.stop();
    await platform.stop();
  });

  it('run, then status until COMPLETED', async () => {
    const { id, status } = await endpoint.run({ input: { echo: { hello: 'world' } } });
    expect(status).toBe('IN_QUEUE');
    let result = await endpoint.status(id);
    for (let i = 0; i < 100 && !result.completed; i++) {
      await new Promise((r) => setTimeout(r, 20));
      result = await endpoint.status(id);
    }
    expect(result).toMatchObject({ id, status: 'COMPLETED', output: { hello: 'world' }, succeeded: true });
    expect(typeof (result as { executionTime: number }).executionTime).toBe('number');
    expect(typeof (result as { delayTime: number }).delayTime).toBe('number');
  });

  it('runSync returns the output', async () => {
    const result = await endpoint.runSync({ input: { echo: [1, 2, 3] } });
    expect(result).toMatchObject({ status: 'COMPLETED', output: [1, 2, 3], completed: true });
    expect((result as { id: string }).id).toMatch(/^sync-/);
  });

  it('runSync keeps polling status-sync while the job is slower than one wait', async () => {
    const result = await endpoint.runSync({ input: { echo: 'slow', sleepMs: 1_500 } }, 10_000);
    expect(result).toMatchObject({ status: 'COMPLETED', output: 'slow' });
  });

  it('stream yields each chunk once, then ends', async () => {
    const { id } = await endpoint.run({ input: { chunks: ['a', 'b', 'c'] } });
    const seen: unknown[] = [];
    for await (const chunk of endpoint.stream(id)) seen.push(chunk);
    expect(seen).toEqual([{ output: 'a' }, { output: 'b' }, { output: 'c' }]);
  });

  it('cancel stops a queued job', async () => {
    await worker.stop();
    const { id } = await endpoint.run({ input: { echo: 'never' } });
    const cancelled = await endpoint.cancel(id);
    expect(cancelled).toMatchObject({ id, status: 'CANCELLED' });
    expect(await endpoint.status(id)).toMatchObject({ id, status: 'CANCELLED' });
    worker = new ProtocolWorker(platform.url, 'echo', platform.workerToken).serve();
  });

  it('health counts jobs and workers', async () => {
    const health = await endpoint.health();
    expect(health.jobs.completed).toBeGreaterThanOrEqual(4);
    expect(health.jobs).toHaveProperty('inQueue');
    expect(health.jobs).toHaveProperty('inProgress');
    expect(health.jobs).toHaveProperty('failed');
    expect(health.jobs).toHaveProperty('retried');
    expect(health.workers.idle + health.workers.running).toBeGreaterThanOrEqual(1);
  });

  it('purgeQueue removes queued jobs only', async () => {
    await worker.stop();
    // Let the platform see the worker's long poll hang up before jobs arrive.
    await new Promise((r) => setTimeout(r, 100));
    await endpoint.run({ input: { echo: 1 } });
    await endpoint.run({ input: { echo: 2 } });
    expect(await endpoint.purgeQueue()).toEqual({ removed: 2, status: 'completed' });
    expect((await endpoint.health()).jobs.inQueue).toBe(0);
    worker = new ProtocolWorker(platform.url, 'echo', platform.workerToken).serve();
  });

  it('a wrong key is rejected with 401', async () => {
    const bad = runpodSdk('not-the-key', { baseUrl: platform.baseUrl }).endpoint('echo')!;
    await expect(bad.health()).rejects.toThrow(/401/);
  });
});
