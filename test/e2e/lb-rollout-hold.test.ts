/**
 * A load-balanced request that arrives while the endpoint is at its max with a worker of the earlier
 * deployment still finishing a request (a new deployment drains the old workers; `ferry dev` rolls one
 * on every save): the front door holds it until that worker has left and a new one is ready, as a job
 * waits in the queue. It was answered 500 "internal error" at once ("no worker to serve"), which the
 * `ferry dev` reload test met under load.
 */
import { resolve } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { scanProject } from '../../cli/build/scan.js';
import type { EndpointRecord } from '../../core/ports.js';
import { recordFor } from '../support/endpoints.js';
import { startTestPlatform, type TestPlatform, testApiKey } from '../support/platform.js';

const projectDir = resolve('test/e2e/fixtures/lb-rollout');
let platform: TestPlatform;
let record: EndpointRecord;

const get = async (path: string) => {
  const response = await fetch(`${platform.url}/lb/roll${path}`, {
    headers: { authorization: `Bearer ${testApiKey}` },
  });
  return { status: response.status, body: (await response.json()) as { pid?: number; error?: string } };
};

beforeAll(async () => {
  platform = await startTestPlatform({
    workers: { ferryPythonPath: resolve('worker-image/python'), tickMs: 100, reconcileIntervalMs: 300 },
  });
  const { endpoints } = await scanProject({ projectDir });
  record = recordFor(endpoints.find((endpoint) => endpoint.name === 'roll')!, projectDir);
  await platform.db.control.putEndpoint(record);
  await platform.workers!.reconcile();
});

afterAll(async () => {
  await platform?.stop();
});

it('holds a request while the one worker allowed is an old deployment finishing its request, then serves it on the new one', {
  timeout: 60_000,
}, async () => {
  const first = await get('/hello');
  expect(first.status, platform.workers!.pool('roll')?.recentLogs().join('\n')).toBe(200);
  // The old worker is busy for a while when the new deployment comes.
  const slow = get('/slow?seconds=2');
  await new Promise((r) => setTimeout(r, 500));
  await platform.db.control.putEndpoint({ ...record, fingerprint: 'dev-2', updatedAt: Date.now() });
  await platform.workers!.reconcile();
  // The race itself: the old worker still runs its request, and no worker serves.
  expect(platform.supervisor.liveOf('roll')).toHaveLength(1);
  expect(platform.supervisor.servingOf('roll')).toEqual([]);
  const held = await get('/hello');
  const logs = platform.workers!.pool('roll')?.recentLogs().join('\n');
  expect(held, logs).toEqual({ status: 200, body: { pid: expect.any(Number) } });
  // Served by a worker of the new deployment, once the old one had answered its request and left.
  expect(held.body.pid).not.toBe(first.body.pid);
  expect(await slow).toEqual({ status: 200, body: { pid: first.body.pid } });
});
