/**
 * A load-balanced worker whose port is taken between the pool's pick and the worker's bind (another
 * server bound it meanwhile, core/child-port.ts): the worker exits ("cannot listen", exit 2) and the
 * pool starts it again on a new port. Under `ferry dev`'s supervisor settings an exit 2 before contact
 * marks the endpoint failing at once ("fix the code and redeploy"), so that exit must not reach the
 * supervisor: the request that started the worker is served, and nothing counts as a crash.
 */
import { once } from 'node:events';
import { createServer } from 'node:net';
import { resolve } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { scanProject } from '../../cli/build/scan.js';
import { devStartFailureCodes } from '../../cli/dev/failures.js';
import { pickChildPort } from '../../core/child-port.js';
import { recordFor } from '../support/endpoints.js';
import { startTestPlatform, type TestPlatform, testApiKey } from '../support/platform.js';

const projectDir = resolve('test/e2e/fixtures/workers');
const taken = createServer();
let takenPort: number;
/** Every port the pool picked for a worker, in order. */
const picks: number[] = [];
let platform: TestPlatform;

beforeAll(async () => {
  taken.listen(0, '127.0.0.1');
  await once(taken, 'listening');
  takenPort = (taken.address() as { port: number }).port;
  platform = await startTestPlatform({
    supervisor: { startFailureCodes: devStartFailureCodes },
    workers: {
      ferryPythonPath: resolve('worker-image/python'),
      tickMs: 100,
      reconcileIntervalMs: 300,
      // The first pick is the port held above, as if another server had bound it after the pick.
      pickPort: async () => {
        const port = picks.length === 0 ? takenPort : await pickChildPort();
        picks.push(port);
        return port;
      },
    },
  });
  const { endpoints } = await scanProject({ projectDir });
  const lb = endpoints.find((endpoint) => endpoint.name === 'lb')!;
  await platform.db.control.putEndpoint(recordFor(lb, projectDir));
  await platform.workers!.reconcile();
});

afterAll(async () => {
  await platform?.stop();
  taken.close();
});

it('a worker that finds its port taken starts again on another; the request that woke it is served', async () => {
  const response = await fetch(`${platform.url}/lb/lb/items/7`, {
    headers: { authorization: `Bearer ${testApiKey}` },
  });
  const logs = platform.workers!.pool('lb')?.recentLogs() ?? [];
  expect(response.status, logs.join('\n')).toBe(200);
  expect(await response.json()).toEqual({ id: '7', q: null });
  // The race did happen: the first worker was handed the taken port and said so.
  expect(picks[0]).toBe(takenPort);
  expect(logs.some((line) => line.includes(`cannot listen on 127.0.0.1:${takenPort}`))).toBe(true);
  expect(logs.some((line) => line.includes(`port ${takenPort} was taken before it bound it`))).toBe(true);
  expect(picks.length).toBe(2);
  // Not a crash nor a failed start: no backoff, and the endpoint is not failing.
  expect(platform.supervisor.problem('lb')).toBeUndefined();
});
