/**
 * A load-balanced worker of a custom image that answers before it reads the upload and resets the
 * connection (test/fixtures/early-answer/server.py), behind the local front door: the client gets
 * the worker's own answer, not a 502 for the broken upload. The AWS agent's twin is in
 * test/agent/lb.test.ts.
 */
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { withConfigHash } from '../../cli/build/scan.js';
import type { EndpointConfig } from '../../core/deployment.js';
import { sampleResources } from '../infra/fixtures.js';
import { startTestPlatform, type TestPlatform, testApiKey } from '../support/platform.js';

const codeDir = resolve('test/fixtures/early-answer');
let platform: TestPlatform;

beforeAll(async () => {
  platform = await startTestPlatform({
    workerWaitMs: 20_000,
    workers: { ferryPythonPath: resolve('worker-image/python'), tickMs: 100, stopGraceMs: 3_000 },
  });
  const config: EndpointConfig = {
    endpoint: withConfigHash({
      name: 'early',
      kind: 'lb',
      file: 'server.py',
      module: 'server',
      variable: 'api',
      // One GPU wanted (sampleResources); none on this machine, so the worker runs on CPU.
      resources: { ...sampleResources, workersMax: 1 },
      configHash: '',
    }),
    pythonVersion: '3.11',
    codeDir,
    // A custom image's server in place of `python -m ferry.worker` (module and variable go unused).
    command: ['python3', '-u', 'server.py'],
  };
  const now = Date.now();
  await platform.db.control.putEndpoint({
    id: 'early',
    app: 'test',
    env: 'production',
    name: 'early',
    kind: 'lb',
    config,
    fingerprint: 'x',
    createdAt: now,
    updatedAt: now,
  });
  await platform.workers!.reconcile();
});

afterAll(async () => {
  await platform?.stop();
});

describe('a load-balanced worker that answers before reading the upload', () => {
  it("gives the client the worker's status, headers and body for a 15 MiB upload, not a 502", async () => {
    const answer = await fetch(`${platform.url}/lb/early/upload`, {
      method: 'POST',
      headers: { authorization: `Bearer ${testApiKey}`, 'content-type': 'application/octet-stream' },
      body: Buffer.alloc(15 * 1024 * 1024, 1),
    });
    expect(answer.status).toBe(413);
    expect(answer.headers.get('content-type')).toBe('application/json');
    expect(await answer.json()).toEqual({ error: 'this worker takes at most 1 MiB' });
  });
});
