/**
 * API keys scoped to every app, one app, or one app environment (docs/security.md): the wrong scope
 * is refused with 403 on every client route of both front doors (the local server, /v2 and /lb, and
 * the AWS authorizer's policy), and nothing changes.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { APIGatewayRequestAuthorizerEvent } from 'aws-lambda';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type LocalPlatform, startLocalPlatform } from '../../core/adapters/local/platform.js';
import { hashKey } from '../../core/auth.js';
import type { EndpointRecord } from '../../core/ports.js';
import { createAuthorizer } from '../../functions/authorizer.js';

const endpoint = (id: string, app: string, env: string, kind: 'queue' | 'lb' = 'queue'): EndpointRecord => ({
  id,
  app,
  env,
  name: id,
  kind,
  config: {},
  fingerprint: 'f',
  createdAt: 1,
  updatedAt: 1,
});
const shopProd = endpoint('shop-prod-ep', 'shop', 'prod');
const shopDev = endpoint('shop-dev-ep', 'shop', 'dev');
const blogLb = endpoint('blog-lb-ep', 'blog', 'prod', 'lb');

const keys = {
  all: 'fy_scope_all',
  shop: 'fy_scope_shop',
  shopProd: 'fy_scope_shop_prod',
  blog: 'fy_scope_blog',
};

let platform: LocalPlatform;
let dir: string;
/** By-name lookups that reached beforeResolve (`ferry dev` provisions a live endpoint there). */
const resolving: string[] = [];

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'ferry-scope-'));
  platform = await startLocalPlatform({
    dataDir: join(dir, 'home'),
    port: 0,
    beforeResolve: async (app, env, name) => {
      resolving.push(`${app}/${env}/${name}`);
    },
  });
  for (const record of [shopProd, shopDev, blogLb]) await platform.db.control.putEndpoint(record);
  const scopes: Record<keyof typeof keys, { app?: string; env?: string }> = {
    all: {},
    shop: { app: 'shop' },
    shopProd: { app: 'shop', env: 'prod' },
    blog: { app: 'blog' },
  };
  for (const [name, key] of Object.entries(keys)) {
    await platform.db.control.putApiKey({
      id: `key-${name}`,
      name,
      hash: hashKey(key),
      createdAt: 1,
      ...scopes[name as keyof typeof keys],
    });
  }
});

afterAll(async () => {
  await platform?.close();
  rmSync(dir, { recursive: true, force: true });
});

const call = async (key: string, method: string, path: string, body?: unknown) => {
  const response = await fetch(`${platform.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
};

/** Every client route of the v2 API, for an endpoint and one of its jobs. */
const clientRoutes = (id: string, jobId: string): [string, string, unknown?][] => [
  ['POST', `/v2/${id}/run`, { input: { n: 1 } }],
  ['POST', `/v2/${id}/runsync?wait=1000`, { input: { n: 1 } }],
  ['GET', `/v2/${id}/status/${jobId}`],
  ['GET', `/v2/${id}/status-sync/${jobId}?wait=1000`],
  ['GET', `/v2/${id}/stream/${jobId}?wait=0`],
  ['POST', `/v2/${id}/cancel/${jobId}`],
  ['POST', `/v2/${id}/retry/${jobId}`],
  ['POST', `/v2/${id}/purge-queue`],
  ['GET', `/v2/${id}/health`],
];

describe('scoped API keys on the local front door', () => {
  it('refuses the wrong app or environment on every client route, and nothing changes', async () => {
    const job = await call(keys.all, 'POST', `/v2/${shopProd.id}/run`, { input: { mine: true } });
    expect(job.status).toBe(200);
    const jobId = job.body.id as string;
    const healthBefore = await call(keys.all, 'GET', `/v2/${shopProd.id}/health`);

    for (const wrongKey of [keys.blog]) {
      for (const [method, path, body] of clientRoutes(shopProd.id, jobId)) {
        const answer = await call(wrongKey, method, path, body);
        expect([method, path, answer.status]).toEqual([method, path, 403]);
        expect(answer.body.error).toMatch(/may not call endpoint shop-prod-ep/);
      }
    }
    // A key for shop/prod may not call shop/dev.
    for (const [method, path, body] of clientRoutes(shopDev.id, jobId)) {
      const answer = await call(keys.shopProd, method, path, body);
      expect([method, path, answer.status]).toEqual([method, path, 403]);
    }
    // Nothing changed: the job is still queued and the queue holds exactly it.
    expect((await call(keys.all, 'GET', `/v2/${shopProd.id}/status/${jobId}`)).body.status).toBe('IN_QUEUE');
    expect(await call(keys.all, 'GET', `/v2/${shopProd.id}/health`)).toEqual(healthBefore);
    expect(
      ((await call(keys.all, 'GET', `/v2/${shopDev.id}/health`)).body.jobs as { inQueue: number }).inQueue,
    ).toBe(0);
  });

  it('lets the right scope through', async () => {
    for (const key of [keys.all, keys.shop, keys.shopProd]) {
      expect((await call(key, 'GET', `/v2/${shopProd.id}/health`)).status).toBe(200);
    }
    expect((await call(keys.shop, 'GET', `/v2/${shopDev.id}/health`)).status).toBe(200);
  });

  it('keeps the management API to keys of every app: a scoped key or a worker call token reads nothing there', async () => {
    const job = await call(keys.all, 'POST', `/v2/${shopProd.id}/run`, { input: { secret: 'shop data' } });
    const jobId = job.body.id as string;
    const manageRoutes = [
      '/manage/v1/endpoints',
      ...[shopProd.id, blogLb.id].flatMap((id) => [
        `/manage/v1/endpoints/${id}`,
        `/manage/v1/endpoints/${id}/jobs`,
        `/manage/v1/endpoints/${id}/jobs/${jobId}`,
        `/manage/v1/endpoints/${id}/logs`,
        `/manage/v1/endpoints/${id}/workers`,
        `/manage/v1/endpoints/${id}/metrics`,
      ]),
    ];
    // A worker of blog/prod holds a call token scoped to blog/prod (docs/security.md).
    const blogCallToken = platform.callToken(platform.adoptWorker(blogLb.id).workerId);
    // Even a key covering the endpoint: the management API spans apps (its list, metrics, workers).
    for (const scoped of [keys.blog, keys.shop, keys.shopProd, blogCallToken]) {
      for (const path of manageRoutes) {
        const answer = await call(scoped, 'GET', path);
        expect([path, answer.status]).toEqual([path, 403]);
        expect(answer.body.error).toMatch(/management API/);
        expect(JSON.stringify(answer.body)).not.toContain('shop data');
      }
    }
    expect((await call('fy_unknown', 'GET', '/manage/v1/endpoints')).status).toBe(401);
    const detail = await call(keys.all, 'GET', `/manage/v1/endpoints/${shopProd.id}/jobs/${jobId}`);
    expect(detail.status).toBe(200);
    expect(JSON.stringify(detail.body)).toContain('shop data');
  });

  it("refuses a by-name call outside the key's scope before anything is provisioned for it", async () => {
    for (const path of ['/v2/by-name/shop/prod/shop-prod-ep', '/v2/by-name/shop/-/shop-prod-ep/health']) {
      const refused = await call(keys.blog, 'GET', path);
      expect(refused.status, path).toBe(403);
      expect(refused.body.error).toMatch(/may not call/);
    }
    expect(resolving).toEqual([]);
    const allowed = await call(keys.shop, 'GET', '/v2/by-name/shop/prod/shop-prod-ep');
    expect(allowed.status).toBe(200);
    expect(resolving).toEqual(['shop/prod/shop-prod-ep']);
  });

  it('applies the same rule on /lb routes', async () => {
    const wrong = await call(keys.shop, 'POST', `/lb/${blogLb.id}/predict`, { x: 1 });
    expect(wrong.status).toBe(403);
    expect((await call('fy_unknown', 'GET', `/lb/${blogLb.id}/predict`)).status).toBe(401);
  });
});

describe('scoped API keys on the AWS authorizer', () => {
  const methodArn = 'arn:aws:execute-api:eu-west-1:123456789012:abc123/prod/POST/v2/shop-prod-ep/run';
  const authorize = (key: string) =>
    createAuthorizer(() => platform.db.control)({
      type: 'REQUEST',
      methodArn,
      headers: { Authorization: `Bearer ${key}` },
    } as unknown as APIGatewayRequestAuthorizerEvent);
  const stage = 'arn:aws:execute-api:eu-west-1:123456789012:abc123/prod/';

  it('allows an unscoped key the whole stage', async () => {
    const result = await authorize(keys.all);
    expect(result.policyDocument.Statement[0]).toMatchObject({ Effect: 'Allow', Resource: `${stage}*` });
  });

  it('allows a scoped key only the routes of the endpoints its scope covers, and names under its app', async () => {
    // Each covered endpoint by id (its routes, and its lookup GET /v2/<id>).
    const routesOf = (e: { id: string }) => [`${stage}*/v2/${e.id}/*`, `${stage}*/v2/${e.id}`];
    // Names by prefix: a name may resolve to `live-<name>` (ferry dev) or to nothing (a 404 the API
    // gives), and the API checks the scope again on the record it finds.
    const shop = await authorize(keys.shop);
    expect(shop.policyDocument.Statement[0]).toMatchObject({
      Effect: 'Allow',
      Resource: [...routesOf(shopDev), ...routesOf(shopProd), `${stage}*/v2/by-name/shop/*`],
    });
    const shopProdOnly = await authorize(keys.shopProd);
    expect(shopProdOnly.policyDocument.Statement[0]).toMatchObject({
      Resource: [...routesOf(shopProd), `${stage}*/v2/by-name/shop/prod/*`, `${stage}*/v2/by-name/shop/-/*`],
    });
    // Nothing of another app, by id or by name.
    const blogOnly = JSON.stringify((await authorize(keys.blog)).policyDocument);
    expect(blogOnly).not.toContain('/shop/');
    expect(blogOnly).not.toContain(shopProd.id);
    expect(JSON.stringify(shop.policyDocument)).not.toContain('/blog/');
    expect(shopProdOnly.context).toMatchObject({ keyScope: 'app shop, environment prod' });
  });
});
