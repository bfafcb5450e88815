/**
 * `/v2/by-name/<app>/<env>/<endpoint>/…` (core/names.ts) over real HTTP against the real SQLite
 * store: resolution by name (live- records too, '-' for the only environment), 404 when not
 * deployed, and the scope of a worker's call token (its own app and environment, client routes only).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EndpointRecord } from '../../core/ports.js';
import { call, startTestPlatform, type TestPlatform } from '../support/platform.js';

let platform: TestPlatform;
let base: string;

async function put(
  id: string,
  app: string,
  env: string,
  name: string,
  kind: 'queue' | 'lb' = 'queue',
  extra: Record<string, unknown> = {},
) {
  const record: EndpointRecord = {
    ...extra,
    id,
    app,
    env,
    name,
    kind,
    config: {},
    fingerprint: 'test',
    createdAt: Date.now(),
    updatedAt: Date.now(),
  };
  await platform.db.control.putEndpoint(record);
}

beforeAll(async () => {
  platform = await startTestPlatform();
  base = platform.baseUrl;
  await put('shop-sum-1', 'shop', 'production', 'sum');
  await put('shop-api-1', 'shop', 'production', 'api', 'lb');
  await put('shop-other-1', 'shop', 'staging', 'other');
  await put('lab-sum-1', 'lab', 'dev', 'live-sum');
  await put('lab-two-a', 'lab', 'a', 'two');
  await put('lab-two-b', 'lab', 'b', 'two');
  await put('bank-vault-1', 'bank', 'production', 'vault');
  // As the AWS provider records a deployed load-balanced endpoint (cli/providers/aws.ts).
  await put('cloud-api-1', 'cloud', 'production', 'api', 'lb', {
    aws: { stack: 'Ferry-cloud-production', url: 'https://d111111abcdef8.cloudfront.net' },
  });
  await put('cloud-sum-1', 'cloud', 'production', 'sum', 'queue', {
    aws: {
      stack: 'Ferry-cloud-production',
      url: 'https://abc.execute-api.us-east-1.amazonaws.com/api/v2/cloud-sum-1',
    },
  });
});
afterAll(async () => {
  await platform.stop();
});

/** The call token of a live worker of `endpointId` (the supervisor issues the worker id). */
const token = (endpointId: string) => ({
  authorization: `Bearer ${platform.callToken(platform.adoptWorker(endpointId).workerId)}`,
});

describe('by-name resolution', () => {
  it('answers id and kind for app/env/name, and runs client routes on the resolved endpoint', async () => {
    const found = await call(base, 'GET', '/by-name/shop/production/sum');
    expect(found).toEqual({
      status: 200,
      body: { id: 'shop-sum-1', kind: 'queue', app: 'shop', env: 'production', name: 'sum' },
    });
    const run = await call(base, 'POST', '/by-name/shop/production/sum/run', { input: { x: 1 } });
    expect(run.status).toBe(200);
    const status = await call(base, 'GET', `/shop-sum-1/status/${run.body.id}`);
    expect(status.body.status).toBe('IN_QUEUE');
    expect((await call(base, 'GET', '/by-name/shop/-/api')).body.kind).toBe('lb');
  });

  it("serves a route with a parameter by name, and answers a route it lacks, or one asked with another method, with the 404 of the route after the endpoint's", async () => {
    const run = await call(base, 'POST', '/by-name/shop/production/sum/run', { input: { x: 2 } });
    const status = await call(base, 'GET', `/by-name/shop/production/sum/status/${run.body.id}`);
    expect(status.body).toMatchObject({ id: run.body.id, status: 'IN_QUEUE' });
    for (const [method, path] of [
      ['GET', '/by-name/shop/production/sum/nope'],
      ['GET', '/by-name/shop/production/sum/run'],
      ['POST', `/by-name/shop/production/sum/status/${run.body.id}/more`],
    ] as const)
      expect(await call(base, method, path)).toEqual({
        status: 404,
        body: { error: `No route for ${method} /v2${path}` },
      });
    // An endpoint that is not there answers as one (its 404) before its route is looked at.
    expect((await call(base, 'GET', '/by-name/shop/production/nope/nope')).body.error).toMatch(
      /Endpoint 'nope' is not deployed/,
    );
  });

  /** The lookup of the load-balanced endpoint the AWS provider recorded (beforeAll). */
  const cloudApi = {
    id: 'cloud-api-1',
    kind: 'lb',
    app: 'cloud',
    env: 'production',
    name: 'api',
    url: 'https://d111111abcdef8.cloudfront.net',
  };

  it('gives a load-balanced endpoint deployed on AWS its recorded HTTPS URL (queue ones go through /v2)', async () => {
    expect((await call(base, 'GET', '/by-name/cloud/production/api')).body).toEqual(cloudApi);
    expect((await call(base, 'GET', '/by-name/cloud/-/sum')).body.url).toBeUndefined();
    // A local load-balanced endpoint has no URL of its own: callers use /lb/<id>.
    expect((await call(base, 'GET', '/by-name/shop/production/api')).body.url).toBeUndefined();
  });

  it('GET /v2/<id> answers the same lookup by id: where an AWS load-balanced endpoint is called', async () => {
    // What `Endpoint(id=…)` in the SDK reads before calling a load-balanced endpoint's routes.
    expect(await call(base, 'GET', '/cloud-api-1')).toEqual({ status: 200, body: cloudApi });
    expect((await call(base, 'GET', '/shop-sum-1')).body).toEqual(
      (await call(base, 'GET', '/by-name/shop/production/sum')).body,
    );
    expect((await call(base, 'GET', '/cloud-sum-1')).body.url).toBeUndefined(); // queue: through /v2
    const missing = await call(base, 'GET', '/nosuchid');
    expect(missing).toEqual({ status: 404, body: { error: 'Endpoint nosuchid not found' } });
    expect((await call(base, 'GET', '/cloud-api-1', undefined, { authorization: '' })).status).toBe(401);
    expect((await call(base, 'POST', '/cloud-api-1')).status).toBe(404); // GET only
  });

  it("finds ferry dev's live- records by the bare name; '-' picks the only environment", async () => {
    expect((await call(base, 'GET', '/by-name/lab/-/sum')).body.id).toBe('lab-sum-1');
    expect((await call(base, 'GET', '/by-name/lab/dev/sum')).body.id).toBe('lab-sum-1');
  });

  it('404 names the endpoint when it is not deployed; 400 when the environment is ambiguous', async () => {
    const missing = await call(base, 'GET', '/by-name/shop/production/nope');
    expect(missing.status).toBe(404);
    expect(missing.body.error).toMatch(
      /Endpoint 'nope' is not deployed in app 'shop', environment 'production'/,
    );
    const ambiguous = await call(base, 'GET', '/by-name/lab/-/two');
    expect(ambiguous.status).toBe(400);
    expect(ambiguous.body.error).toMatch(/several environments \(a, b\)/);
    // What to do is in the message: the API's body carries nothing else.
    expect(ambiguous.body.error).toContain('name one (FERRY_ENV=a for a Python call;');
    expect(ambiguous.body.error).toMatch(/\/v2\/by-name\/[^/]+\/a\/[^/ ]+ in a URL\)$/);
  });

  it("needs a client key: none, a wrong one and a worker's own token are 401", async () => {
    const workerToken = platform.protocolWorker('shop-sum-1').token;
    for (const authorization of ['', 'Bearer fy_wrong', `Bearer ${workerToken}`]) {
      const r = await call(
        base,
        'POST',
        '/by-name/shop/production/sum/run',
        { input: {} },
        { authorization },
      );
      expect(r.status).toBe(401);
    }
  });
});

describe("a worker's call token", () => {
  it('reaches endpoints of its own app and environment, by name', async () => {
    const r = await call(
      base,
      'POST',
      '/by-name/shop/production/sum/run',
      { input: {} },
      token('shop-api-1'),
    );
    expect(r.status).toBe(200);
    // '-' means the caller's own environment.
    const own = await call(base, 'GET', '/by-name/shop/-/sum', undefined, token('shop-api-1'));
    expect(own.body.id).toBe('shop-sum-1');
  });

  it('is a key scoped to its app and environment: outside it 404 as for no endpoint, by name or by id; 401 on worker routes', async () => {
    const otherApp = await call(
      base,
      'POST',
      '/by-name/bank/production/vault/run',
      { input: {} },
      token('shop-sum-1'),
    );
    expect(otherApp.status).toBe(404);
    // Refused before the lookup: the answer names what was asked, not the other app's endpoint id,
    // and is the same whether that endpoint exists or not.
    expect(otherApp.body.error).toBe(
      "Endpoint bank/production/vault not found within this API key's scope (app shop, environment production)",
    );
    const missing = await call(
      base,
      'POST',
      '/by-name/bank/production/nothing/run',
      { input: {} },
      token('shop-sum-1'),
    );
    expect(missing.status).toBe(404);
    const otherEnv = await call(base, 'GET', '/by-name/shop/staging/other', undefined, token('shop-sum-1'));
    expect(otherEnv.status).toBe(404);
    const byId = await call(base, 'POST', '/bank-vault-1/run', { input: {} }, token('shop-sum-1'));
    expect(byId.status).toBe(404);
    const lookup = await call(base, 'GET', '/bank-vault-1', undefined, token('shop-sum-1'));
    expect(lookup.status).toBe(404);
    expect((await call(base, 'GET', '/shop-api-1', undefined, token('shop-sum-1'))).body.kind).toBe('lb');
    const ownById = await call(base, 'POST', '/shop-sum-1/run', { input: {} }, token('shop-api-1'));
    expect(ownById.status).toBe(200);
    const workerRoute = await call(base, 'GET', '/shop-sum-1/job-take/w1', undefined, token('shop-api-1'));
    expect(workerRoute.status).toBe(401);
  });

  it('dies with its worker: once the supervisor buries the worker, the token is no key (401)', async () => {
    const worker = platform.adoptWorker('shop-api-1');
    const authorization = `Bearer ${platform.callToken(worker.workerId)}`;
    const before = await call(base, 'GET', '/by-name/shop/-/sum', undefined, { authorization });
    expect(before.status).toBe(200);
    await worker.exited();
    const after = await call(base, 'GET', '/by-name/shop/-/sum', undefined, { authorization });
    expect(after.status).toBe(401);
    // A worker id the supervisor never issued, with a valid MAC, is refused the same way.
    const unissued = `Bearer ${platform.callToken('shop-api-1-000000000000')}`;
    expect(
      (await call(base, 'GET', '/by-name/shop/-/sum', undefined, { authorization: unissued })).status,
    ).toBe(401);
  });

  it('a forged token (another worker id with a copied MAC) is refused', async () => {
    const real = platform.callToken(platform.adoptWorker('shop-sum-1').workerId);
    const victim = platform.adoptWorker('bank-vault-1').workerId;
    const forged = `fyc_${Buffer.from(victim).toString('base64url')}.${real.split('.')[1]}`;
    const r = await call(base, 'GET', '/by-name/bank/production/vault', undefined, {
      authorization: `Bearer ${forged}`,
    });
    expect(r.status).toBe(401);
  });
});
