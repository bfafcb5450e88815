/**
 * Calls between endpoints on AWS, in a box (core/call-keys.ts, docs/security-aws.md "Call keys"):
 * the call keys are minted by the deploy's own function (prepareCallKeys) into the control table on
 * DynamoDB Local; the test plays ECS's part and hands each worker its endpoint's FERRY_CALL_TOKEN as
 * the container secret would. Two real Python workers (`python -m ferry.worker`) serve `caller` and
 * `callee` through their agents; `caller`'s handler awaits `callee`'s function with no key set by
 * anyone, and the call goes worker → API Gateway shim → authorizer → api Lambda → callee's queue.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryCallTokens } from '../../core/adapters/aws/secrets.js';
import { outOfScopeMessage } from '../../core/auth.js';
import { callTokenSecretName, prepareCallKeys, revokeCallKeys } from '../../core/call-keys.js';
import { missingKeyMessage } from '../../core/errors.js';
import type { EndpointRecord } from '../../core/ports.js';
import { type PythonWorker, startPythonWorker } from '../agent/helpers.js';
import { type AwsBox, boxApiKey, shimCall, startAwsBox, untilFinished } from './box.js';

const project = mkdtempSync(path.join(tmpdir(), 'ferry-calls-'));
writeFileSync(
  path.join(project, 'calls_app.py'),
  `import os
from ferry import Endpoint


@Endpoint(name="callee")
def double(x: int):
    return {"value": x * 2, "pid": os.getpid(), "endpoint": os.environ["FERRY_ENDPOINT_ID"]}


@Endpoint(name="caller")
async def relay(x: int):
    inner = await double(x)
    return {"inner": inner, "pid": os.getpid(), "endpoint": os.environ["FERRY_ENDPOINT_ID"]}
`,
);

let box: AwsBox;
const secrets = new MemoryCallTokens();
const workers: PythonWorker[] = [];
let caller: EndpointRecord;
let callee: EndpointRecord;
let elsewhere: EndpointRecord;

const tokenOf = (endpoint: EndpointRecord) => secrets.values.get(callTokenSecretName(endpoint))!;

async function startWorker(endpoint: EndpointRecord, target: string) {
  const agent = await box.agentFor(endpoint.id);
  workers.push(
    startPythonWorker(agent, target, {
      app: { dir: project, module: 'calls_app' },
      env: {
        // What infra/constructs/service.ts gives every worker container, and (as an ECS secret) its key.
        FERRY_API_URL: box.shim.url,
        FERRY_APP: endpoint.app,
        FERRY_ENV: endpoint.env,
        FERRY_ENDPOINT_NAME: endpoint.name,
        FERRY_ENDPOINT_ID: endpoint.id,
        FERRY_CALL_TOKEN: tokenOf(endpoint),
      },
    }),
  );
}

const call = (method: string, url: string, key: string, body?: unknown) =>
  shimCall(box, method, url, body, key);

const recentJobs = (endpointId: string) =>
  box.lambda.jobs.listRecent(endpointId, {
    statuses: [],
    fromMs: 0,
    toMs: Date.now() + 60_000,
    nowMs: Date.now(),
    limit: 10,
  });

const logs = () => workers.map((w) => w.output.join('')).join('\n---\n');

beforeAll(async () => {
  box = await startAwsBox({ maxWaitMs: 3_000 });
  caller = { ...(await box.addEndpoint('caller')), name: 'caller' };
  callee = { ...(await box.addEndpoint('callee')), name: 'callee' };
  // Another app's endpoint of the same name: out of the call key's reach.
  elsewhere = { ...callee, id: 'elsewhere', app: 'other' };
  await box.lambda.control.putEndpoint(elsewhere);
  await box.fixture.queueUrlFor('elsewhere');
  await box.fixture.queueUrlFor('elsewhere', { lowPriority: true });
  const deps = { control: box.lambda.control, secrets, nowMs: () => Date.now() };
  await prepareCallKeys(deps, [caller, callee], new Set([caller.id, callee.id]));
  await startWorker(caller, 'relay');
  await startWorker(callee, 'double');
}, 120_000);

afterAll(async () => {
  for (const worker of workers) await worker.stop();
  await box?.stop();
  rmSync(project, { recursive: true, force: true });
});

describe('a worker calls another endpoint of its app on AWS', () => {
  it("runs the callee's function on the callee's worker, recorded by the callee's endpoint", async () => {
    const started = await call('POST', `/v2/${caller.id}/run`, boxApiKey, { input: { x: 21 } });
    expect(started.status).toBe(200);
    const done = await untilFinished(box, caller.id, started.body.id);
    expect(done.status, `${JSON.stringify(done)}\n${logs()}`).toBe('COMPLETED');
    const callerPid = workers[0]!.child.pid!;
    const calleePid = workers[1]!.child.pid!;
    expect(done.output).toEqual({
      inner: { value: 42, pid: calleePid, endpoint: callee.id },
      pid: callerPid,
      endpoint: caller.id,
    });
    // The callee's endpoint holds the job (its own id prefix, core/job.ts endpointScopedJobId).
    const recent = await recentJobs(callee.id);
    expect(recent.jobs).toHaveLength(1);
    expect(recent.jobs[0]).toMatchObject({ endpointId: callee.id, status: 'COMPLETED', input: { x: 21 } });
    // Submitted with the caller's call key: the job keeps who submitted it (core/api.ts CallTokenRule).
    expect(recent.jobs[0]!.submittedBy).toBe(caller.id);
    const view = await call('GET', `/v2/${callee.id}/status/${recent.jobs[0]!.id}`, boxApiKey);
    expect(view.body).toMatchObject({ status: 'COMPLETED', output: { value: 42 } });
    expect(view.body).not.toHaveProperty('submittedBy');
  });

  it("follows only the jobs it submitted; another caller's are unknown, purge-queue, retry and ?ttl= refused", async () => {
    const token = tokenOf(caller);
    // A job of the callee submitted with a client key, and one submitted with the caller's key.
    const theirs = await call('POST', `/v2/${callee.id}/run`, boxApiKey, { input: { x: 4 } });
    const mine = await call('POST', `/v2/${callee.id}/run`, token, { input: { x: 5 } });
    expect([theirs.status, mine.status]).toEqual([200, 200]);
    const theirsId = theirs.body.id as string;
    const mineId = mine.body.id as string;
    expect((await untilFinished(box, callee.id, theirsId)).status).toBe('COMPLETED');
    const notFound = { error: `Job ${theirsId} not found (or its results expired)` };
    for (const [method, url] of [
      ['GET', `/v2/${callee.id}/status/${theirsId}`],
      ['POST', `/v2/${callee.id}/status-sync/${theirsId}?wait=1000`],
      ['GET', `/v2/${callee.id}/stream/${theirsId}?wait=0`],
      ['POST', `/v2/${callee.id}/cancel/${theirsId}`],
      ['GET', `/v2/by-name/box/production/callee/status/${theirsId}`],
    ] as const) {
      const r = await call(method, url, token);
      expect({ status: r.status, body: r.body }, `${method} ${url}`).toEqual({ status: 404, body: notFound });
    }
    for (const [method, url] of [
      ['POST', `/v2/${callee.id}/purge-queue`],
      ['POST', `/v2/${callee.id}/retry/${theirsId}`],
      ['GET', `/v2/${callee.id}/status/${theirsId}?ttl=1`],
      ['GET', `/v2/${callee.id}/status/${mineId}?ttl=1`],
    ] as const) {
      const r = await call(method, url, token);
      expect(r.status, `${method} ${url}`).toBe(403);
      expect(r.body.error).toMatch(/^A worker's call token may not /);
    }
    // The client key still reads its job, whose result the refused ?ttl=1 left in place.
    const kept = await call('GET', `/v2/${callee.id}/status/${theirsId}`, boxApiKey);
    expect({ status: kept.status, output: kept.body.output }).toMatchObject({
      status: 200,
      output: { value: 8 },
    });
    // Its own job: status-sync and status answer as for a client key.
    const done = await call('POST', `/v2/${callee.id}/status-sync/${mineId}?wait=3000`, token);
    expect(done.status).toBe(200);
    const status = await call('GET', `/v2/${callee.id}/status/${mineId}`, token);
    expect({ status: status.status, id: status.body.id }).toEqual({ status: 200, id: mineId });
    // Its cancel reaches the job: a finished one answers the status it ended in, as it does a client key.
    const cancel = await call('POST', `/v2/${callee.id}/cancel/${mineId}`, token);
    expect({ status: cancel.status, body: cancel.body }).toEqual({
      status: 200,
      body: { id: mineId, status: done.body.status },
    });
  });

  it("reaches only its own app's environment with the worker's key", async () => {
    const token = tokenOf(caller);
    expect(
      (await call('POST', '/v2/by-name/box/production/callee/run', token, { input: { x: 1 } })).status,
    ).toBe(200);
    expect((await call('POST', `/v2/${callee.id}/run`, token, { input: { x: 2 } })).status).toBe(200);
    // Refused. Another app's endpoint answers as one that does not exist (404), as the local API
    // answers; the management API, outside the key's policy, is API Gateway's 403, as the local API
    // answers it too. A worker route is inside the policy (`v2/*`) and the api Lambda, which takes
    // no worker token, answers 401 (the shim routes every path to it; API Gateway has no worker
    // route at all, infra/platform-stack.ts).
    const hidden = (asked: string) =>
      `Endpoint ${asked} not found within this API key's scope (app box, environment production)`;
    for (const [method, url, status, error] of [
      ['POST', '/v2/elsewhere/run', 404, hidden('elsewhere')],
      ['POST', '/v2/by-name/other/production/callee/run', 404, hidden('other/production/callee')],
      ['GET', '/manage/v1/endpoints', 403, outOfScopeMessage],
      ['GET', '/manage/v1/keys', 403, outOfScopeMessage],
      ['GET', `/v2/${callee.id}/job-take/${callee.id}-w1`, 401, missingKeyMessage],
    ] as const) {
      const r = await call(method, url, token, method === 'POST' ? { input: {} } : undefined);
      expect({ status: r.status, body: r.body }, `${method} ${url}`).toEqual({ status, body: { error } });
    }
    expect((await recentJobs('elsewhere')).jobs).toHaveLength(0);
  });

  it('finds a `ferry dev` endpoint by its bare name, and answers a name not deployed 404, as locally', async () => {
    const token = tokenOf(caller);
    // `ferry dev --provider aws` records its endpoints as `live-<name>` (core/names.ts resolveByName):
    // code calls them by the bare name, which the key's policy must reach though no record bears it.
    const live = await box.addEndpoint('live-helper');
    const started = await call('POST', '/v2/by-name/box/production/helper/run', token, { input: { x: 5 } });
    expect({ status: started.status, body: started.body }).toEqual({
      status: 200,
      body: { id: expect.any(String), status: 'IN_QUEUE' },
    });
    expect((await recentJobs(live.id)).jobs.map((j) => j.id)).toEqual([started.body.id]);
    const resolved = await call('GET', '/v2/by-name/box/-/helper', token);
    expect(resolved.status).toBe(200);
    expect(resolved.body).toMatchObject({ id: live.id });
    // A name nothing bears: the API's 404 that says so (the Python client's EndpointNotDeployed).
    const missing = await call('POST', '/v2/by-name/box/production/nope/run', token, { input: {} });
    expect(missing.status).toBe(404);
    expect(missing.body.error).toContain(
      "Endpoint 'nope' is not deployed in app 'box', environment 'production'",
    );
  });

  it('stops working once the endpoint is undeployed', async () => {
    const token = tokenOf(caller);
    await revokeCallKeys({ control: box.lambda.control, secrets }, caller);
    // The API Lambda caches key lookups briefly; the authorizer reads the table every time.
    const r = await call('POST', `/v2/${callee.id}/run`, token, { input: { x: 3 } });
    // No longer a known key: 401, not the 403 of a key outside its scope.
    expect({ status: r.status, body: r.body }).toEqual({ status: 401, body: { error: missingKeyMessage } });
  });
});
