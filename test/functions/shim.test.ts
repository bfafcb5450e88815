/**
 * The API Gateway shim over real HTTP on loopback, with stand-in handlers (unit level): the 10 MB and
 * 6 MB caps, the authorizer's refusals (401 for a missing or unknown key, 403 for a known key outside
 * its policy), and how results and failures come back.
 */
import type { APIGatewayProxyEvent, APIGatewayProxyResult } from 'aws-lambda';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { hashKey, outOfScopeMessage } from '../../core/auth.js';
import { missingKeyMessage, noRouteMessage } from '../../core/errors.js';
import type { ApiKeyRecord, ControlStore } from '../../core/ports.js';
import type { ApiHandler } from '../../functions/api.js';
import { type AuthorizerHandler, createAuthorizer } from '../../functions/authorizer.js';
import { type Shim, type ShimOptions, startShim } from '../../functions/shim.js';

const MB = 1024 * 1024;
const allowAll: AuthorizerHandler = async (event) => ({
  principalId: 'key-1',
  policyDocument: {
    Version: '2012-10-17',
    Statement: [
      {
        Action: 'execute-api:Invoke',
        Effect: 'Allow',
        Resource: `${event.methodArn.split('/').slice(0, 2).join('/')}/*`,
      },
    ],
  },
  context: { keyId: 'key-1' },
});
let shim: Shim | undefined;
const events: APIGatewayProxyEvent[] = [];
const echo: ApiHandler = async (event) => {
  events.push(event);
  return {
    statusCode: 200,
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ ok: true }),
  };
};

async function start(options: Partial<ShimOptions> = {}) {
  shim = await startShim({ api: echo, authorizer: allowAll, ...options });
  return shim.url;
}

afterEach(async () => {
  await shim?.close();
  shim = undefined;
  events.length = 0;
  vi.restoreAllMocks();
});

const post = (url: string, body: string | Uint8Array, authorization = 'Bearer k') =>
  fetch(url, { method: 'POST', headers: { authorization, 'content-type': 'application/json' }, body });

describe('API Gateway shim', () => {
  it('builds a REST v1 proxy event with the authorizer context and maps the result back', async () => {
    const url = await start();
    const r = await fetch(`${url}/v2/ep/status/j1?wait=2000&job_id=a&job_id=b`, {
      headers: { authorization: 'k' },
    });
    expect(r.status).toBe(200);
    expect(await r.json()).toEqual({ ok: true });
    const event = events[0]!;
    expect(event).toMatchObject({
      httpMethod: 'GET',
      path: '/v2/ep/status/j1',
      resource: '/v2/{proxy+}',
      pathParameters: { proxy: 'ep/status/j1' },
      queryStringParameters: { wait: '2000', job_id: 'b' },
      multiValueQueryStringParameters: { job_id: ['a', 'b'] },
      body: null,
      isBase64Encoded: false,
      requestContext: { stage: 'local', authorizer: { principalId: 'key-1', keyId: 'key-1' } },
    });
  });

  it('passes text bodies as they are and other bytes as base64', async () => {
    const url = await start();
    await post(`${url}/v2/ep/run`, '{"input":{"é":1}}');
    await post(`${url}/v2/ep/run`, new Uint8Array([0xff, 0xfe, 0x00]));
    expect(events.map((e) => [e.body, e.isBase64Encoded])).toEqual([
      ['{"input":{"é":1}}', false],
      ['//4A', true],
    ]);
  });

  it('401 {error} without a key, or when the authorizer throws "Unauthorized"; the api never runs', async () => {
    const url = await start({ authorizer: async () => Promise.reject(new Error('Unauthorized')) });
    for (const headers of [{}, { authorization: 'fy_unknown' }] as Record<string, string>[]) {
      const r = await fetch(`${url}/v2/ep/health`, { headers });
      expect(r.status).toBe(401);
      expect(await r.json()).toEqual({ error: missingKeyMessage });
    }
    expect(events).toHaveLength(0);
  });

  describe('with the real authorizer and a key scoped to one app', () => {
    const shop = 'fy_shim_shop_key';
    const endpoints = [
      { id: 'shopep1', app: 'shop', env: 'prod', name: 'resize' },
      { id: 'blogep2', app: 'blog', env: 'prod', name: 'resize' },
    ].map((e) => ({
      ...e,
      kind: 'queue' as const,
      config: {},
      fingerprint: 'f',
      createdAt: 1,
      updatedAt: 1,
    }));
    const keys: ApiKeyRecord[] = [
      { id: 'key-shop', name: 'shop', hash: hashKey(shop), createdAt: 1, app: 'shop' },
    ];
    const control = {
      findApiKeyByHash: async (hash: string) => keys.find((k) => k.hash === hash),
      listEndpoints: async (filter: { app?: string; env?: string } = {}) =>
        endpoints.filter(
          (e) => (!filter.app || e.app === filter.app) && (!filter.env || e.env === filter.env),
        ),
    } as unknown as ControlStore;
    const call = async (url: string, path: string, authorization?: string) => {
      const r = await fetch(`${url}${path}`, { headers: authorization ? { authorization } : {} });
      return { status: r.status, body: await r.json() };
    };

    it('hands every v2 route to the api (which answers the scope), 403 {error} outside its policy without running it', async () => {
      const url = await start({ authorizer: createAuthorizer(() => control) });
      const v2 = ['/v2/shopep1/health', '/v2/blogep2/health', '/v2/by-name/blog/prod/resize/run'];
      for (const path of v2) {
        expect(await call(url, path, `Bearer ${shop}`), path).toEqual({ status: 200, body: { ok: true } });
      }
      expect(events.map((e) => e.path)).toEqual(v2);
      expect(await call(url, '/manage/v1/endpoints', `Bearer ${shop}`)).toEqual({
        status: 403,
        body: { error: outOfScopeMessage },
      });
      expect(events).toHaveLength(v2.length);
    });

    it.each([
      ['an unknown key', 'Bearer fy_not_stored'],
      ['an empty Bearer', 'Bearer '],
      ['no header', undefined],
    ])('401 {error} for %s, without running the api', async (_name, authorization) => {
      const url = await start({ authorizer: createAuthorizer(() => control) });
      expect(await call(url, '/v2/shopep1/health', authorization)).toEqual({
        status: 401,
        body: { error: missingKeyMessage },
      });
      expect(events).toHaveLength(0);
    });
  });

  it('404 {error} off the two roots the stack routes (/v2/, /manage/v1/), key or not; the api never runs', async () => {
    const url = await start();
    for (const path of ['/', '/v1/ep/run', '/v2', '/manage/v2/endpoints', '/lb/ep/predict']) {
      for (const headers of [{}, { authorization: 'Bearer fy_some-key' }] as Record<string, string>[]) {
        const r = await fetch(`${url}${path}`, { method: 'POST', headers, body: '{}' });
        expect({ path, status: r.status, body: await r.json() }).toEqual({
          path,
          status: 404,
          body: { error: noRouteMessage },
        });
      }
    }
    expect(events).toHaveLength(0);
    for (const path of ['/v2/ep/anything', '/manage/v1/anything'])
      expect(
        (await fetch(`${url}${path}`, { method: 'DELETE', headers: { authorization: 'k' } })).status,
      ).toBe(200);
    expect(events.map((e) => `${e.httpMethod} ${e.path}`)).toEqual([
      'DELETE /v2/ep/anything',
      'DELETE /manage/v1/anything',
    ]);
  });

  it('413 {error} over the 6 MB Lambda cap and over the 10 MB API Gateway cap', async () => {
    const url = await start();
    const six = await post(`${url}/v2/ep/run`, JSON.stringify({ input: { x: 'a'.repeat(6 * MB) } }));
    expect(six.status).toBe(413);
    expect(((await six.json()) as { error: string }).error).toMatch(/6 MB.*uploads/);
    const ten = await post(`${url}/v2/ep/run`, 'a'.repeat(10 * MB + 1));
    expect(ten.status).toBe(413);
    expect(((await ten.json()) as { error: string }).error).toMatch(/10485760/);
    const under = await post(`${url}/v2/ep/run`, JSON.stringify({ input: { x: 'a'.repeat(5 * MB) } }));
    expect(under.status).toBe(200);
    expect(events).toHaveLength(1);
  });

  it('502 when the function throws or returns more than 6 MB; 504 past the integration timeout', async () => {
    // Each is a masked 5xx; what happened is in the log under the answer's request id.
    const lines: string[] = [];
    const log = { info() {}, warn() {}, error: (m: string) => lines.push(m) };
    const loggedFor = async (r: Response) => {
      const { requestId } = (await r.json()) as { requestId: string };
      return lines.find((l) => l.includes(requestId));
    };
    const url = await start({ api: async () => Promise.reject(new Error('crash')), log });
    expect((await fetch(`${url}/v2/ep/health`, { headers: { authorization: 'k' } })).status).toBe(502);
    await shim!.close();
    const huge: ApiHandler = async (): Promise<APIGatewayProxyResult> => ({
      statusCode: 200,
      body: 'x'.repeat(6 * MB + 1),
    });
    const url2 = await start({ api: huge, log });
    const r = await fetch(`${url2}/v2/ep/health`, { headers: { authorization: 'k' } });
    expect(r.status).toBe(502);
    expect(await loggedFor(r)).toMatch(/6 MB/);
    await shim!.close();
    const slow: ApiHandler = () => new Promise(() => {});
    const url3 = await start({ api: slow, integrationTimeoutMs: 200, log });
    const late = await fetch(`${url3}/v2/ep/health`, { headers: { authorization: 'k' } });
    expect(late.status).toBe(504);
    expect(await loggedFor(late)).toMatch(/took over 200 ms/);
  });
});
