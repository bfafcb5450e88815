/**
 * LocalPlatformOptions.runsRefusedBecause (core/api.ts, `ferry dev` after a failed reload) over real
 * HTTP on SQLite: while it gives a reason, run, runsync and retry (by id, by name, with a worker's
 * call token) and /lb answer 503 {"error": reason} once the key is checked, and a refused by-name run
 * provisions nothing; a job's status, cancel, health and purge-queue still answer. Once it gives
 * none, runs are taken again.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { call, startTestPlatform, type TestPlatform } from '../support/platform.js';

let platform: TestPlatform;
let reason: string | undefined;
/** The names by-name lookups asked to provision (beforeResolve). */
const resolved: string[] = [];

beforeAll(async () => {
  platform = await startTestPlatform({
    runsRefusedBecause: () => reason,
    beforeResolve: async (_app, _env, name) => {
      resolved.push(name);
    },
  });
  await platform.addEndpoint('q1');
  await platform.db.control.putEndpoint({
    id: 'lb1',
    app: 'test',
    env: 'production',
    name: 'lb1',
    kind: 'lb',
    config: {},
    fingerprint: 'test',
    createdAt: Date.now(),
    updatedAt: Date.now(),
  });
});
afterAll(async () => {
  reason = undefined;
  await platform.stop();
});

it('answers 503 with the reason to every request that would run code, whoever sends it, and lets a job be followed and stopped', async () => {
  const base = platform.baseUrl;
  const earlier = await call(base, 'POST', '/q1/run', { input: { n: 1 } });
  expect(earlier.body.status).toBe('IN_QUEUE');

  reason = 'ferry dev could not reload the project after app.py changed: app.py:3: syntax error.';
  const refused = { status: 503, body: { error: reason } };
  const callToken = {
    authorization: `Bearer ${platform.callToken(platform.adoptWorker('q1').workerId)}`,
  };
  for (const [path, headers] of [
    ['/q1/run', {}],
    ['/q1/runsync', {}],
    [`/q1/retry/${earlier.body.id}`, {}],
    ['/by-name/test/production/q1/run', {}],
    ['/by-name/test/-/q1/runsync', {}],
    ['/q1/run', callToken],
    ['/by-name/test/-/q1/run', callToken],
  ] as const) {
    expect({ path, ...(await call(base, 'POST', path, { input: { n: 2 } }, headers)) }).toEqual({
      path,
      ...refused,
    });
  }
  const lb = await call(platform.url, 'POST', '/lb/lb1/echo', { x: 1 });
  expect(lb).toEqual(refused);
  // The key first: a caller without it learns nothing.
  expect((await call(base, 'POST', '/q1/run', { input: {} }, { authorization: '' })).status).toBe(401);
  expect((await call(platform.url, 'GET', '/lb/lb1/echo', undefined, { authorization: '' })).status).toBe(
    401,
  );
  // A refused by-name run provisions nothing; a by-name read still does.
  expect(resolved).toEqual([]);
  expect((await call(base, 'GET', `/by-name/test/-/q1/status/${earlier.body.id}`)).status).toBe(200);
  expect(resolved).toEqual(['q1']);

  expect((await call(base, 'GET', `/q1/status/${earlier.body.id}`)).body.status).toBe('IN_QUEUE');
  expect((await call(base, 'GET', '/q1/health')).status).toBe(200);
  expect((await call(base, 'POST', `/q1/cancel/${earlier.body.id}`)).body.status).toBe('CANCELLED');
  expect((await call(base, 'POST', '/q1/purge-queue')).status).toBe(200);

  reason = undefined;
  const again = await call(base, 'POST', '/q1/run', { input: { n: 3 } });
  expect(again).toMatchObject({ status: 200, body: { status: 'IN_QUEUE' } });
  expect((await call(base, 'POST', '/by-name/test/-/q1/run', { input: { n: 4 } })).status).toBe(200);
});
