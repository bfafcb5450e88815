/**
 * API keys scoped to every app, one app, or one app environment (docs/security.md): on every client
 * route of the local server (/v2 and /lb) an endpoint outside the scope answers as one that does not
 * exist (404), and nothing changes; the management API answers 403; the AWS authorizer's policy lets
 * a scoped key reach the v2 routes only, where the API applies the same rule.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { APIGatewayRequestAuthorizerEvent } from 'aws-lambda';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type LocalPlatform, startLocalPlatform } from '../../core/adapters/local/platform.js';
import { reconcilePath } from '../../core/adapters/local/rollout.js';
import { hashKey } from '../../core/auth.js';
import type { EndpointRecord } from '../../core/ports.js';
import { createAuthorizer } from '../../functions/authorizer.js';
import { hiddenPairs, rawAnswer } from '../support/key-scope.js';

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
        expect([method, path, answer.status]).toEqual([method, path, 404]);
        expect(answer.body.error).toBe(
          "Endpoint shop-prod-ep not found within this API key's scope (app blog)",
        );
      }
    }
    // A key for shop/prod may not call shop/dev.
    for (const [method, path, body] of clientRoutes(shopDev.id, jobId)) {
      const answer = await call(keys.shopProd, method, path, body);
      expect([method, path, answer.status]).toEqual([method, path, 404]);
    }
    // Nothing changed: the job is still queued and the queue holds exactly it.
    expect((await call(keys.all, 'GET', `/v2/${shopProd.id}/status/${jobId}`)).body.status).toBe('IN_QUEUE');
    expect(await call(keys.all, 'GET', `/v2/${shopProd.id}/health`)).toEqual(healthBefore);
    expect(
      ((await call(keys.all, 'GET', `/v2/${shopDev.id}/health`)).body.jobs as { inQueue: number }).inQueue,
    ).toBe(0);
  });

  it('answers an endpoint of another app, by id and by name, and its jobs, as one that does not exist', async () => {
    const job = await call(keys.all, 'POST', `/v2/${shopProd.id}/run`, { input: { n: 2 } });
    expect(job.status).toBe(200);
    for (const [key, scope] of [
      [keys.blog, 'app blog'],
      [keys.shopProd, 'app shop, environment prod'],
    ] as const) {
      const target = key === keys.blog ? shopProd : shopDev;
      for (const { label, existing, unknown, swap } of hiddenPairs(target, job.body.id as string)) {
        const seen = await rawAnswer(platform.url, key, existing);
        const other = await rawAnswer(platform.url, key, unknown);
        expect(seen.status, label).toBe(404);
        expect(JSON.parse(seen.text).error, label).toContain(
          `not found within this API key's scope (${scope})`,
        );
        expect(seen, label).toEqual(
          swap ? { ...other, text: other.text.replaceAll(swap[0], swap[1]) } : other,
        );
      }
    }
    expect(resolving).toEqual([]);
    // A key of every app keeps the plain not-found.
    expect(await call(keys.all, 'GET', '/v2/nosuchendpoint9/health')).toEqual({
      status: 404,
      body: { error: 'Endpoint nosuchendpoint9 not found' },
    });
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

  it("keeps the local platform's roll-now route (what ferry deploy asks) to keys of every app", async () => {
    // Its answer names every endpoint of every app, as the management API's list does.
    const blogCallToken = platform.callToken(platform.adoptWorker(blogLb.id).workerId);
    for (const scoped of [keys.blog, keys.shop, keys.shopProd, blogCallToken]) {
      const refused = await call(scoped, 'POST', reconcilePath);
      expect(refused.status).toBe(403);
      expect(refused.body).toEqual({ error: expect.any(String) });
      expect(JSON.stringify(refused.body)).not.toContain(shopProd.id);
    }
    expect((await call('fy_unknown', 'POST', reconcilePath)).status).toBe(401);
    expect((await call(keys.all, 'POST', reconcilePath)).status).toBe(200);
  });

  it("refuses a by-name call outside the key's scope before anything is provisioned for it", async () => {
    for (const path of ['/v2/by-name/shop/prod/shop-prod-ep', '/v2/by-name/shop/-/shop-prod-ep/health']) {
      const refused = await call(keys.blog, 'GET', path);
      expect(refused.status, path).toBe(404);
      expect(refused.body.error).toMatch(/not found within this API key's scope/);
    }
    expect(resolving).toEqual([]);
    const allowed = await call(keys.shop, 'GET', '/v2/by-name/shop/prod/shop-prod-ep');
    expect(allowed.status).toBe(200);
    expect(resolving).toEqual(['shop/prod/shop-prod-ep']);
  });

  it('applies the same rule on /lb routes', async () => {
    const wrong = await rawAnswer(platform.url, keys.shop, ['POST', `/lb/${blogLb.id}/predict`, { x: 1 }]);
    const unknown = await rawAnswer(platform.url, keys.shop, ['POST', '/lb/nosuchlb/predict', { x: 1 }]);
    expect(wrong.status).toBe(404);
    expect(wrong).toEqual({ ...unknown, text: unknown.text.replaceAll('nosuchlb', blogLb.id) });
    // Another app's queue endpoint too: not its kind's 400, which would tell that it exists.
    const queue = await rawAnswer(platform.url, keys.blog, ['POST', `/lb/${shopProd.id}/predict`, { x: 1 }]);
    expect(queue.status).toBe(404);
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

  it('allows a scoped key the v2 routes only, where the API answers its scope (404 outside it)', async () => {
    for (const key of [keys.shop, keys.shopProd, keys.blog]) {
      const decision = await authorize(key);
      expect(decision.policyDocument.Statement).toEqual([
        { Action: 'execute-api:Invoke', Effect: 'Allow', Resource: `${stage}*/v2/*` },
      ]);
    }
    expect((await authorize(keys.shopProd)).context).toMatchObject({
      keyScope: 'app shop, environment prod',
    });
  });
});
