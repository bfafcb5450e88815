/**
 * A worker built on RunPod's Python worker SDK runs unchanged: the pool starts its own command with
 * the RUNPOD_* environment. The fixture reproduces the SDK's wire behaviour (see its docstring).
 */
import { resolve } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { withConfigHash } from '../../cli/build/scan.js';
import type { EndpointConfig } from '../../core/deployment.js';
import { sampleResources } from '../infra/fixtures.js';
import { call, startTestPlatform, type TestPlatform, testApiKey } from '../support/platform.js';

let platform: TestPlatform;

beforeAll(async () => {
  platform = await startTestPlatform({
    workers: { ferryPythonPath: resolve('worker-image/python'), tickMs: 100, drainMs: 1_000 },
  });
  const codeDir = resolve('test/e2e/fixtures/runpod-style');
  const config: EndpointConfig = {
    endpoint: withConfigHash({
      name: 'runpod-style',
      kind: 'queue',
      file: 'handler.py',
      module: 'handler',
      target: { name: 'handler', type: 'function', isAsync: false, isGenerator: false, params: ['job'] },
      resources: { ...sampleResources, workersMax: 1, idleTimeoutSec: 1 },
      configHash: '',
    }),
    pythonVersion: '3.11',
    codeDir,
    command: ['python3', '-u', 'handler.py'],
  };
  await platform.db.control.putEndpoint({
    id: 'runpod-style',
    app: 'test',
    env: 'production',
    name: 'runpod-style',
    kind: 'queue',
    config,
    fingerprint: 'x',
    createdAt: Date.now(),
    updatedAt: Date.now(),
  });
  await platform.workers!.reconcile();
});

afterAll(async () => {
  await platform?.stop();
});

it('completes a job', async () => {
  const r = await call(platform.baseUrl, 'POST', '/runpod-style/runsync', { input: { text: 'ship it' } });
  expect(r.body).toMatchObject({ status: 'COMPLETED', output: { upper: 'SHIP IT' } });
});

it('gets and answers a 64-bit integer with every digit (core/json.ts)', async () => {
  const response = await fetch(`${platform.baseUrl}/runpod-style/runsync`, {
    method: 'POST',
    headers: { authorization: `Bearer ${testApiKey}`, 'content-type': 'application/json' },
    body: '{"input":{"seed":18446744073709551615}}',
  });
  // As text: JSON.parse here would round what the platform sent.
  const text = await response.text();
  expect(response.status).toBe(200);
  expect(text).toContain('"status":"COMPLETED"');
  expect(text).toContain('"output":{"seed":18446744073709551615,"next":18446744073709551616}');
});

it('gets whole floats as floats, and answers them as floats (core/json.ts)', async () => {
  const response = await fetch(`${platform.baseUrl}/runpod-style/runsync`, {
    method: 'POST',
    headers: { authorization: `Bearer ${testApiKey}`, 'content-type': 'application/json' },
    body: '{"input":{"floats":[1.0,-0.0,1e2,2.5,3]}}',
  });
  // As text: JSON.parse here would write 2.0 as 2 again.
  const text = await response.text();
  expect(response.status).toBe(200);
  expect(text).toContain('"status":"COMPLETED"');
  // Python's own json.dumps wrote the doubles as 2.0, -0.0, 200.0: they come back as it wrote them.
  expect(text).toContain(
    '"output":{"types":["float","float","float","float","int"],"doubled":[2.0,-0.0,200.0,5.0,6]}',
  );
});

it('streams a generator and aggregates it', async () => {
  const { body } = await call(platform.baseUrl, 'POST', '/runpod-style/run', {
    input: { text: 'a b c', stream: true },
  });
  const chunks: unknown[] = [];
  let status = '';
  while (status !== 'COMPLETED') {
    const r = await call(platform.baseUrl, 'GET', `/runpod-style/stream/${body.id}`);
    status = r.body.status;
    chunks.push(...r.body.stream);
  }
  expect(chunks).toEqual([{ output: 'a' }, { output: 'b' }, { output: 'c' }]);
  expect((await call(platform.baseUrl, 'GET', `/runpod-style/status/${body.id}`)).body.output).toEqual([
    'a',
    'b',
    'c',
  ]);
});

it('reports an exception as FAILED with the SDK error format', async () => {
  const r = await call(platform.baseUrl, 'POST', '/runpod-style/runsync', { input: { text: 'explode' } });
  expect(r.body.status).toBe('FAILED');
  const record = JSON.parse(r.body.error);
  expect(record).toMatchObject({ error_message: 'handler exploded' });
  // RUNPOD_POD_HOSTNAME is set (the SDK writes "unknown" without it): the worker's id, as RUNPOD_POD_ID.
  expect(record.hostname).toBe(record.worker_id);
  expect(record.hostname).toBe(r.body.workerId);
});
