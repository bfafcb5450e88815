/**
 * The runpod-sdk suite, run against every front door: the real `runpod-sdk` npm client, with a worker
 * that completes jobs through the worker protocol over HTTP. test/api/sdk.test.ts runs it against the
 * embedded platform, test/aws-box/sdk.test.ts against the Lambda handlers on DynamoDB Local + fauxqs.
 */
import runpodSdk from 'runpod-sdk';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';

export interface SdkHarness {
  /** `<front door>/v2`. */
  baseUrl: string;
  apiKey: string;
  /** A queue endpoint the harness created, served by the harness's workers. */
  endpointId: string;
  /** Starts a worker serving the endpoint (ProtocolWorker semantics: echo, chunks, sleepMs, fail). */
  startWorker(): void;
  /** Stops it; resolves once its long poll has hung up. */
  stopWorker(): Promise<void>;
  stop(): Promise<void>;
}

export function runSdkSuite(name: string, start: () => Promise<SdkHarness>): void {
  describe(name, () => {
    let harness: SdkHarness;
    let endpoint: NonNullable<ReturnType<ReturnType<typeof runpodSdk>['endpoint']>>;

    beforeAll(async () => {
      harness = await start();
      harness.startWorker();
      endpoint = runpodSdk(harness.apiKey, { baseUrl: harness.baseUrl }).endpoint(harness.endpointId)!;
      // runSync logs "<id>: <status>" while it polls; keep test output clean.
      vi.spyOn(console, 'log').mockImplementation(() => {});
    });

    afterAll(async () => {
      await harness?.stopWorker();
      await harness?.stop();
    });

    it('run, then status until COMPLETED', async () => {
      const { id, status } = await endpoint.run({ input: { echo: { hello: 'world' } } });
      expect(status).toBe('IN_QUEUE');
      let result = await endpoint.status(id);
      for (let i = 0; i < 500 && !(result as { completed?: boolean }).completed; i++) {
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
      await harness.stopWorker();
      const { id } = await endpoint.run({ input: { echo: 'never' } });
      const cancelled = await endpoint.cancel(id);
      expect(cancelled).toMatchObject({ id, status: 'CANCELLED' });
      expect(await endpoint.status(id)).toMatchObject({ id, status: 'CANCELLED' });
      harness.startWorker();
    });

    it('cancel of a job that already ended answers the status it ended in (the SDK throws on a non-2xx)', async () => {
      // A cancel that comes after the job completed (a client that gave up waiting, a moment late).
      const done = await endpoint.runSync({ input: { echo: 'finished' } });
      expect(done).toMatchObject({ status: 'COMPLETED' });
      const id = (done as { id: string }).id;
      expect(await endpoint.cancel(id)).toEqual({ id, status: 'COMPLETED' });
      expect(await endpoint.status(id)).toMatchObject({ id, status: 'COMPLETED', output: 'finished' });
      await expect(endpoint.cancel('no-such-job')).rejects.toThrow(/404/);
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
      await harness.stopWorker();
      // Let the platform see the worker's long poll hang up before jobs arrive.
      await new Promise((r) => setTimeout(r, 100));
      await endpoint.run({ input: { echo: 1 } });
      await endpoint.run({ input: { echo: 2 } });
      expect(await endpoint.purgeQueue()).toEqual({ removed: 2, status: 'completed' });
      expect((await endpoint.health()).jobs.inQueue).toBe(0);
      harness.startWorker();
    });

    it('a wrong key is rejected with 401', async () => {
      const bad = runpodSdk('not-the-key', { baseUrl: harness.baseUrl }).endpoint(harness.endpointId)!;
      await expect(bad.health()).rejects.toThrow(/401/);
    });
  });
}
