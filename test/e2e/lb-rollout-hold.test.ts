/**
 * A load-balanced request that arrives while the endpoint is at its max with a worker of the earlier
 * deployment still finishing a request (a new deployment drains the old workers; `ferry dev` rolls one
 * on every save): the front door holds it until that worker has left and a new one is ready, as a job
 * waits in the queue. It was answered 500 "internal error" at once ("no worker to serve"), which the
 * `ferry dev` reload test met under load. A request no worker can ever serve (the code does not
 * start) is answered at once: a 503 that says why, with Retry-After, as the ALB answers on AWS.
 */
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { scanProject } from '../../cli/build/scan.js';
import type { EndpointRecord } from '../../core/ports.js';
import { recordFor } from '../support/endpoints.js';
import { startTestPlatform, type TestPlatform, testApiKey } from '../support/platform.js';
import { until } from '../support/until.js';

const projectDir = resolve('test/e2e/fixtures/lb-rollout');
let platform: TestPlatform;
let record: EndpointRecord;
/** Where the busy request says it started and the test lets it go. */
const marks = mkdtempSync(join(tmpdir(), 'ferry-lb-rollout-'));

const get = async (path: string, endpoint = 'roll') => {
  const response = await fetch(`${platform.url}/lb/${endpoint}${path}`, {
    headers: { authorization: `Bearer ${testApiKey}` },
  });
  return {
    status: response.status,
    retryAfter: response.headers.get('retry-after'),
    body: (await response.json()) as { pid?: number; error?: string },
  };
};

beforeAll(async () => {
  platform = await startTestPlatform({
    workers: { ferryPythonPath: resolve('worker-image/python'), tickMs: 100, reconcileIntervalMs: 300 },
    // As `ferry dev` runs: a worker that exits at import marks its endpoint failing at once.
    supervisor: { startFailureCodes: [1, 2] },
  });
  const { endpoints } = await scanProject({ projectDir });
  record = recordFor(endpoints.find((endpoint) => endpoint.name === 'roll')!, projectDir);
  await platform.db.control.putEndpoint(record);
  await platform.db.control.putEndpoint(
    recordFor(endpoints.find((endpoint) => endpoint.name === 'broken')!, projectDir),
  );
  await platform.workers!.reconcile();
});

afterAll(async () => {
  writeFileSync(join(marks, 'release'), 'go');
  await platform?.stop();
  rmSync(marks, { recursive: true, force: true });
});

it('holds a request while the one worker allowed is an old deployment finishing its request, then serves it on the new one', {
  timeout: 60_000,
}, async () => {
  const first = await get('/hello');
  expect(first.status, platform.workers!.pool('roll')?.recentLogs().join('\n')).toBe(200);
  // The old worker runs a request until the test lets it go; the new deployment comes meanwhile.
  const [started, release] = [join(marks, 'started'), join(marks, 'release')];
  const busy = get(`/busy?started=${encodeURIComponent(started)}&release=${encodeURIComponent(release)}`);
  await until('the busy request to start', () => existsSync(started), Boolean);
  await platform.db.control.putEndpoint({ ...record, fingerprint: 'dev-2', updatedAt: Date.now() });
  await platform.workers!.reconcile();
  // The race itself: the one worker allowed is the old one, draining, and no worker serves.
  expect(platform.supervisor.liveOf('roll')).toHaveLength(1);
  expect(platform.supervisor.servingOf('roll')).toEqual([]);
  let answered = false;
  const held = get('/hello').finally(() => {
    answered = true;
  });
  await new Promise((r) => setTimeout(r, 300));
  expect(answered).toBe(false);
  writeFileSync(release, 'go');
  expect(await busy).toEqual({ status: 200, retryAfter: null, body: { pid: first.body.pid } });
  // Served by a worker of the new deployment, once the old one had answered its request and left.
  const answer = await held;
  const logs = platform.workers!.pool('roll')?.recentLogs().join('\n');
  expect(answer, logs).toEqual({ status: 200, retryAfter: null, body: { pid: expect.any(Number) } });
  expect(answer.body.pid).not.toBe(first.body.pid);
});

it('answers a request no worker can serve, the code failing to start, at once: 503 saying why, with Retry-After', {
  timeout: 60_000,
}, async () => {
  // The first request starts a worker, which exits at import: that request was forwarded to a
  // worker that failed (502), and the endpoint is failing.
  const first = await get('/hello', 'broken');
  expect(first.status).toBe(502);
  await until(
    'the endpoint to be failing',
    () => platform.supervisor.problem('broken')?.state,
    (s) => s === 'failing',
  );
  const began = performance.now();
  const answer = await get('/hello', 'broken');
  expect(performance.now() - began).toBeLessThan(5_000);
  expect(answer.status).toBe(503);
  expect(answer.retryAfter).toBe('5');
  expect(answer.body.error).toMatch(/^Endpoint broken has no worker to serve this request: /);
  expect(answer.body.error).toContain('its worker could not start');
});
