/**
 * The dev server's 405 (cli/dev/server.ts): a project route asked with another method answers as the
 * load-balanced runtime does on the platform (worker-image/python/ferry/lb.py method_not_allowed),
 * for exactly the URLs Fastify's router gives that route (cli/dev/routes.ts methodsRouting), the
 * rest a 404; a URL that leaves a parameter empty is a 404 too, as the runtime routes it nowhere. Through the real server (Fastify's inject) on a route table written here: no request
 * reaches a worker or the platform, so the live endpoints are a fake that only has the table. The
 * e2e test (test/e2e/cli-dev.test.ts) asks a template project's routes, which have no parameters.
 */
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DevRoute } from '../../cli/dev/routes.js';
import { createDevServer } from '../../cli/dev/server.js';
import type { LiveEndpoints } from '../../cli/dev/state.js';

const lbRoute = (method: DevRoute['method'], path: string): DevRoute => ({
  method,
  path,
  prefix: '/api',
  endpoint: 'api',
  kind: 'lb',
  summary: undefined,
  params: [...path.matchAll(/:(\w+)/g)].map((m) => m[1]!),
  origin: `@api.${method.toLowerCase()}("${path}") of api.py`,
});

const routes = [
  lbRoute('GET', '/api/items/:id'),
  lbRoute('PUT', '/api/items/:id'),
  lbRoute('GET', '/api/files/prefix-:name'),
  lbRoute('GET', '/api/docs/:name.:ext'),
  lbRoute('POST', '/api/echo'),
  lbRoute('GET', '/api/shelves/:shelf/items'),
];
// Which endpoints a request got as far as starting: the fake's ensure records the name and fails,
// so a request that reaches a route answers 502 without a platform behind.
const ensured: string[] = [];

let app: FastifyInstance;
beforeAll(async () => {
  const live = {
    snapshot: { endpoints: [], routes },
    ensure: async (name: string) => {
      ensured.push(name);
      throw new Error(`started ${name}`);
    },
  } as unknown as LiveEndpoints;
  app = await createDevServer({
    live,
    platformUrl: 'http://127.0.0.1:9',
    apiKey: 'fy_unused',
    guard: { listenHost: '127.0.0.1', allowOrigins: [] },
    log: () => {},
  });
});
afterAll(() => app?.close());

describe("ferry dev's 405 for a route asked with another method", () => {
  it('answers 405 with the Allow header wherever a route with a parameter takes the URL, the parameter anywhere in its segment', async () => {
    for (const [method, url, allowed] of [
      ['DELETE', '/api/items/7', 'GET, HEAD, PUT'],
      ['POST', '/api/items/7?full=1', 'GET, HEAD, PUT'],
      ['DELETE', '/api/items/a%2Fb', 'GET, HEAD, PUT'],
      // Fastify's router takes `prefix-:name` at /api/files/prefix-7 (so does the runtime's).
      ['DELETE', '/api/files/prefix-7', 'GET, HEAD'],
      ['DELETE', '/api/docs/readme.md', 'GET, HEAD'],
      ['GET', '/api/echo', 'POST'],
    ] as const) {
      const response = await app.inject({ method, url });
      expect(response.statusCode, `${method} ${url}`).toBe(405);
      expect(response.headers.allow, `${method} ${url}`).toBe(allowed);
      expect(response.json()).toEqual({
        error: `method ${method} not allowed for ${url.split('?', 1)[0]}; allowed: ${allowed}`,
      });
    }
  });

  it('answers 404 for a path that only looks like a route: one segment more or less, a trailing slash, another case, a segment without the static part or the dot between two parameters', async () => {
    for (const url of [
      '/api/items/7/extra',
      '/api/items/7/',
      '/api/Items/7',
      '/api/items',
      '/api/files/7',
      '/api/files/prefix',
      // `:name.:ext` takes a segment with a dot only.
      '/api/docs/readme',
      '/api/echo/',
    ]) {
      const response = await app.inject({ method: 'DELETE', url });
      expect(response.statusCode, url).toBe(404);
      expect(response.json()).toEqual({ error: `No route for DELETE ${url}` });
    }
  });
});

describe('an empty path parameter under ferry dev', () => {
  // The runtime's router (worker-image/python/ferry/endpoint.py Route, lb.py Router.find) gives a
  // parameter one or more characters, so /items/ is its 404 however the route is asked; Fastify's
  // router would give /api/items/:id the id "" (test_invoke.py pins the runtime's side).
  it('is no route, at any method, the same 404 as for any URL no route takes, and starts nothing', async () => {
    for (const [method, url] of [
      ['GET', '/api/items/'],
      ['GET', '/api/items/?full=1'],
      ['HEAD', '/api/items/'],
      ['PUT', '/api/items/'],
      ['DELETE', '/api/items/'],
      ['GET', '/api/shelves//items'],
      ['POST', '/api/shelves//items'],
    ] as const) {
      const response = await app.inject({ method, url });
      expect(response.statusCode, `${method} ${url}`).toBe(404);
      expect(response.headers.allow, `${method} ${url}`).toBeUndefined();
      if (method !== 'HEAD')
        expect(response.json(), `${method} ${url}`).toEqual({
          error: `No route for ${method} ${url.split('?', 1)[0]}`,
        });
    }
    expect(ensured).toEqual([]);
  });

  it('still reaches the route with one character or more, an encoded slash too (the runtime takes %2F)', async () => {
    for (const url of ['/api/items/x', '/api/items/%2F', '/api/shelves/s/items']) {
      ensured.length = 0;
      const response = await app.inject({ method: 'GET', url });
      expect(response.json(), url).toEqual({ error: 'started api' });
      expect(ensured, url).toEqual(['api']);
    }
  });
});

describe('a percent-encoded path under ferry dev', () => {
  // The runtime decodes each segment once, as uvicorn decodes a path, and routes that
  // (worker-image/python/ferry/endpoint.py split_path; test_invoke.py pins its side): a % that starts
  // no escape is a %, bytes that are not UTF-8 are U+FFFD, and an escape in the static text counts.
  // Fastify's router answered these 400 or 404 without reaching the route.
  it('reaches the route as the runtime does, a badly encoded parameter too: the function gets its text', async () => {
    for (const url of [
      '/api/items/x%',
      '/api/items/a%zz',
      '/api/items/%',
      '/api/items/%FF',
      '/api/items/%E0%A4%A',
      '/api/items/a%20b',
      '/api/items/a%2Fb',
      '/api/it%65ms/7',
      '/api/shelves/x%/items',
    ]) {
      ensured.length = 0;
      const response = await app.inject({ method: 'GET', url });
      expect(response.json(), url).toEqual({ error: 'started api' });
      expect(ensured, url).toEqual(['api']);
    }
  });

  it("answers a badly encoded path's 405 and 404 as for any other, naming the path as it was sent", async () => {
    ensured.length = 0;
    const notAllowed = await app.inject({ method: 'DELETE', url: '/api/items/x%' });
    expect(notAllowed.statusCode).toBe(405);
    expect(notAllowed.headers.allow).toBe('GET, HEAD, PUT');
    expect(notAllowed.json()).toEqual({
      error: 'method DELETE not allowed for /api/items/x%; allowed: GET, HEAD, PUT',
    });
    for (const url of ['/api/items/x%/more', '/api/nothing/%zz']) {
      const response = await app.inject({ method: 'GET', url });
      expect(response.statusCode, url).toBe(404);
      expect(response.json(), url).toEqual({ error: `No route for GET ${url}` });
    }
    expect(ensured).toEqual([]);
  });
});
