/**
 * The dev server's route table (devRoutes, cli/dev/routes.ts) from files the real scanner read
 * (scan.py through real python3): queue routes named as Flash's dev server names them, by the
 * file's callables (docs/python.md, "The ferry dev loop"), and the class kept in the route only
 * where two callables of a file share a name.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { scanProject } from '../../cli/build/scan.js';
import { type DevRoute, devRoutes, ownRouteOf, ownRoutes } from '../../cli/dev/routes.js';
import { exitCode, FerryError } from '../../core/errors.js';

const root = mkdtempSync(path.join(tmpdir(), 'wb-dev-routes-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const files: Record<string, string> = {
  'single.py': `from ferry import Endpoint


@Endpoint(name="single", cpu="1-2")
def single(x: int):
    return x
`,
  'lone.py': `from ferry import Endpoint


@Endpoint(name="lone", cpu="1-2")
class Lone:
    def only(self, x: int):
        """The one method."""
        return x
`,
  'model.py': `from ferry import Endpoint


@Endpoint(name="model", cpu="1-2")
class Model:
    def predict(self, x: int):
        return x

    def embed(self, text: str):
        return text
`,
  'app.py': `from ferry import Endpoint


@Endpoint(name="hello", cpu="1-2")
def hello(name: str):
    return name


@Endpoint(name="model2", cpu="1-2")
class Model:
    def predict(self, x: int):
        return x

    def embed(self, text: str):
        return text


@Endpoint(name="one", cpu="1-2")
class One:
    def run(self):
        return 1
`,
  'clash.py': `from ferry import Endpoint


@Endpoint(name="clash_a", cpu="1-2")
class A:
    def predict(self, x: int):
        return x

    def embed(self, text: str):
        return text


@Endpoint(name="clash_b", cpu="1-2")
class B:
    def predict(self, x: int):
        return x

    def score(self):
        return 0


@Endpoint(name="clash_fn", cpu="1-2")
def embed(text: str):
    return text
`,
};
let table: DevRoute[] = [];
beforeAll(async () => {
  for (const [name, text] of Object.entries(files)) writeFileSync(path.join(root, name), text);
  table = devRoutes((await scanProject({ projectDir: root })).endpoints);
});
const byPath = () =>
  Object.fromEntries(
    table.map((r) => [r.path, { endpoint: r.endpoint, classMethod: r.classMethod, note: r.note }]),
  );

describe('devRoutes: queue routes', () => {
  it("a file with one callable gets /<module>/runsync; several, /<module>/<function or method>/runsync, as Flash's", async () => {
    const routes = byPath();
    expect(routes['/single/runsync']).toEqual({ endpoint: 'single' });
    // A class with one method is one callable: it dispatches to it without "method".
    expect(routes['/lone/runsync']).toEqual({ endpoint: 'lone' });
    expect(routes['/model/predict/runsync']).toEqual({ endpoint: 'model', classMethod: 'predict' });
    expect(routes['/model/embed/runsync']).toEqual({ endpoint: 'model', classMethod: 'embed' });
    // Functions and class methods of one file side by side, the class not in the route.
    expect(routes['/app/hello/runsync']).toEqual({ endpoint: 'hello' });
    expect(routes['/app/predict/runsync']).toEqual({ endpoint: 'model2', classMethod: 'predict' });
    expect(routes['/app/embed/runsync']).toEqual({ endpoint: 'model2', classMethod: 'embed' });
    expect(routes['/app/run/runsync']).toEqual({ endpoint: 'one' });
    expect(Object.keys(routes).filter((p) => p.startsWith('/app/'))).toHaveLength(4);
  });

  it('keeps the class in the route of the methods whose name another callable of the file has, and says why', async () => {
    const routes = byPath();
    const note = (method: string) =>
      `more than one callable of clash.py is named ${method.split('.')[1]}: ${method} keeps its class in the route`;
    expect(Object.fromEntries(Object.entries(routes).filter(([p]) => p.startsWith('/clash/')))).toEqual({
      '/clash/A/predict/runsync': { endpoint: 'clash_a', classMethod: 'predict', note: note('A.predict') },
      '/clash/A/embed/runsync': { endpoint: 'clash_a', classMethod: 'embed', note: note('A.embed') },
      '/clash/B/predict/runsync': { endpoint: 'clash_b', classMethod: 'predict', note: note('B.predict') },
      // Its name is the file's only score: named as Flash names it.
      '/clash/score/runsync': { endpoint: 'clash_b', classMethod: 'score' },
      // A function has no class to keep: it has the plain route.
      '/clash/embed/runsync': { endpoint: 'clash_fn' },
    });
  });

  it("documents a method's own summary and parameters", async () => {
    const lone = table.find((r) => r.path === '/lone/runsync')!;
    expect(lone.summary).toBe('The one method.');
    expect(lone.params).toEqual(['x']);
  });
});

describe('devRoutes: two routes at one method and path', () => {
  const clashing = mkdtempSync(path.join(tmpdir(), 'wb-dev-clash-'));
  afterAll(() => rmSync(clashing, { recursive: true, force: true }));

  it("refuses app.py's hello beside app/hello.py, and a load-balanced route another's path with other parameter names, naming both files", async () => {
    mkdirSync(path.join(clashing, 'app'));
    mkdirSync(path.join(clashing, 'api'));
    writeFileSync(
      path.join(clashing, 'app.py'),
      'from ferry import Endpoint\n\n\n@Endpoint(name="hello", cpu="1-2")\ndef hello(name: str):\n    return name\n\n\n@Endpoint(name="bye", cpu="1-2")\ndef bye(name: str):\n    return name\n',
    );
    writeFileSync(
      path.join(clashing, 'app', 'hello.py'),
      'from ferry import Endpoint\n\n\n@Endpoint(name="other", cpu="1-2")\ndef greet(name: str):\n    return name\n',
    );
    writeFileSync(
      path.join(clashing, 'api.py'),
      'from ferry import Endpoint\n\napi = Endpoint(name="api", cpu="1-2")\n\n\n@api.get("/items/{item_id}")\ndef item(item_id: str):\n    return item_id\n',
    );
    writeFileSync(
      path.join(clashing, 'api', 'items.py'),
      'from ferry import Endpoint\n\nitems = Endpoint(name="items", cpu="1-2")\n\n\n@items.get("/{key}")\ndef one(key: str):\n    return key\n',
    );
    const { endpoints } = await scanProject({ projectDir: clashing });
    let thrown: unknown;
    try {
      devRoutes(endpoints);
    } catch (error) {
      thrown = error;
    }
    expect(FerryError.is(thrown) && exitCode(thrown)).toBe(2);
    const error = thrown as FerryError;
    expect(error.message).toBe(
      'Two routes are GET /api/items/:item_id: @api.get("/items/{item_id}") of api.py and @items.get("/{key}") of api/items.py; ' +
        'Two routes are POST /app/hello/runsync: hello of app.py and greet of app/hello.py. ' +
        "Rename one of them or its file: a file's one callable is at /<module>/runsync, several at /<module>/<function or method>/runsync, a load-balanced route at /<module><path>",
    );
    expect(error.hint).toBe('Rename one, then run ferry dev again.');
  });
});

describe("devRoutes: a route at a path ferry dev serves itself (ownRoutes), by Fastify's router", () => {
  const dirs: string[] = [];
  afterAll(() => {
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  });
  /** The scanned project of `files`, and what devRoutes throws for it (undefined when nothing). */
  async function routesOf(project: Record<string, string>) {
    const dir = mkdtempSync(path.join(tmpdir(), 'wdev-own-'));
    dirs.push(dir);
    for (const [name, text] of Object.entries(project)) {
      mkdirSync(path.dirname(path.join(dir, name)), { recursive: true });
      writeFileSync(path.join(dir, name), text);
    }
    const { endpoints } = await scanProject({ projectDir: dir });
    try {
      return { routes: devRoutes(endpoints), thrown: undefined };
    } catch (error) {
      return { routes: undefined, thrown: error as FerryError };
    }
  }
  const lb = (variable: string, routes: Array<[string, string]>) =>
    `from ferry import Endpoint\n\n${variable} = Endpoint(name="${variable}", cpu="1-2")\n${routes
      .map(
        ([method, route], i) =>
          `\n\n@${variable}.${method}("${route}")\ndef r${i}(${[...route.matchAll(/\{(\w+)\}/g)].map((m) => `${m[1]}: str`).join(', ')}):\n    return ${i}\n`,
      )
      .join('')}`;

  it("refuses a root module's route at Swagger UI's /docs/json or at /openapi.json, a parametric route that takes one of its pages, and a file whose route with a parameter takes the platform's /v2 URLs it passes through", async () => {
    const { thrown } = await routesOf({
      '__init__.py': lb('api', [
        ['get', '/docs/json'],
        ['get', '/openapi.json'],
      ]),
      'docs.py': lb('pages', [['get', '/{page}']]),
      'v2.py': lb('v2api', [['post', '/{id}/run']]),
    });
    expect(FerryError.is(thrown) && exitCode(thrown)).toBe(2);
    expect(thrown!.message).toBe(
      '@api.get("/docs/json") of __init__.py is GET /docs/json, a path ferry dev serves itself ' +
        "(Swagger UI's OpenAPI document, at /docs/json); " +
        '@api.get("/openapi.json") of __init__.py is GET /openapi.json, a path ferry dev serves itself (its OpenAPI document, at /openapi.json); ' +
        // Fastify gives /docs/ to the parameter too (an empty one matches).
        '@pages.get("/{page}") of docs.py is GET /docs/:page, which takes GET /docs/, a path ferry dev serves itself ' +
        '(its Swagger UI, at /docs/); ' +
        '@v2api.post("/{id}/run") of v2.py is POST /v2/:id/run, which takes POST /v2/x/run, a path ferry dev serves itself ' +
        "(the platform's v2 API, passed through, at /v2/*). " +
        'Rename the route or its module: ferry dev serves /, /ping, /openapi.json, /docs, /docs/, /docs/json, /docs/yaml, /docs/static/*, /manage/v1/*, /v2/* and /lb/* itself',
    );
    expect(thrown!.hint).toBe('Rename the route or its module, then run ferry dev again.');
  });

  it("refuses a parameter at the root, which Fastify would give ferry dev's / (an empty parameter matches), and a module's parameter under /lb", async () => {
    const { thrown } = await routesOf({
      '__init__.py': lb('api', [['get', '/{name}']]),
      'lb.py': lb('balanced', [['post', '/{name}']]),
    });
    expect(thrown?.message).toBe(
      '@api.get("/{name}") of __init__.py is GET /:name, which takes GET /, a path ferry dev serves itself (its list of endpoints and routes, at /); ' +
        '@balanced.post("/{name}") of lb.py is POST /lb/:name, which takes POST /lb/x, a path ferry dev serves itself (the platform\'s load-balanced routes, passed through, at /lb/*). ' +
        'Rename the route or its module: ferry dev serves /, /ping, /openapi.json, /docs, /docs/, /docs/json, /docs/yaml, /docs/static/*, /manage/v1/*, /v2/* and /lb/* itself',
    );
  });

  it('names both kinds at once, each with its own advice', async () => {
    const { thrown } = await routesOf({
      'a.py': lb('first', [['get', '/b/{x}']]),
      'a/b.py': lb('second', [['get', '/{y}']]),
      '__init__.py': lb('api', [['get', '/docs']]),
    });
    expect(thrown?.message).toBe(
      'Two routes are GET /a/b/:x: @first.get("/b/{x}") of a.py and @second.get("/{y}") of a/b.py. ' +
        "Rename one of them or its file: a file's one callable is at /<module>/runsync, several at /<module>/<function or method>/runsync, a load-balanced route at /<module><path>. " +
        '@api.get("/docs") of __init__.py is GET /docs, a path ferry dev serves itself (its Swagger UI, at /docs). ' +
        'Rename the route or its module: ferry dev serves /, /ping, /openapi.json, /docs, /docs/, /docs/json, /docs/yaml, /docs/static/*, /manage/v1/*, /v2/* and /lb/* itself',
    );
    expect(thrown?.hint).toBe('Rename one, then run ferry dev again.');
  });

  it("takes what Fastify keeps apart: another method at ferry dev's GET pages, a path that only starts like one, a docs module's other pages, static routes under the passthroughs (v2.py's, lb.py's), and a root module's routes at their own paths", async () => {
    const { routes, thrown } = await routesOf({
      '__init__.py': lb('api', [
        ['post', '/docs/json'],
        ['post', '/openapi.json'],
        ['get', '/documents'],
        ['get', '/pingx'],
        ['get', '/v2'],
        ['put', '/manage/v1/x'],
      ]),
      'docs.py': lb('pages', [
        ['get', '/mine'],
        ['get', '/static'],
      ]),
      'tools/__init__.py':
        'from ferry import Endpoint\n\n\n@Endpoint(name="tool", cpu="1-2")\ndef tool(x: int):\n    return x\n',
      'v2.py':
        'from ferry import Endpoint\n\n\n@Endpoint(name="hello", cpu="1-2")\ndef hello(name: str):\n    return name\n',
      'lb.py': lb('balanced', [
        ['post', '/'],
        ['get', '/echo'],
      ]),
    });
    expect(thrown).toBeUndefined();
    expect(routes!.map((r) => `${r.method} ${r.path}`)).toEqual([
      'POST /docs/json',
      'POST /openapi.json',
      'GET /documents',
      'GET /pingx',
      'GET /v2',
      'PUT /manage/v1/x',
      'GET /docs/mine',
      'GET /docs/static',
      'POST /lb/',
      'GET /lb/echo',
      'POST /tools/runsync',
      'POST /v2/runsync',
    ]);
    // The module's prefix stripped before the call is none: the worker gets the path as it came.
    expect(routes![0]!.prefix).toBe('');
  });
});

describe("ownRouteOf: the dev server's own route a method and path would share a URL with", () => {
  it("answers a HEAD as its GET, the same own route on every ask, and none for a method ferry dev's routes do not take or a path Fastify refuses", () => {
    for (let ask = 0; ask < 2; ask++) {
      expect(ownRouteOf('HEAD', '/docs/:page')).toEqual({ own: ownRoutes.docsSlash, url: '/docs/' });
      expect(ownRouteOf('GET', '/docs/:page')).toEqual({ own: ownRoutes.docsSlash, url: '/docs/' });
      expect(ownRouteOf('DELETE', '/v2/:id/run')).toEqual({ own: ownRoutes.v2, url: '/v2/x/run' });
    }
    expect(ownRouteOf('POST', '/docs/:page')).toBeUndefined();
    expect(ownRouteOf('OPTIONS', '/v2/:id/run')).toBeUndefined();
    // Static under a passthrough: Fastify gives that one URL to the project's route.
    expect(ownRouteOf('POST', '/v2/runsync')).toBeUndefined();
    // A `*` before the last segment: Fastify refuses the route (server.ts skips it), so it takes nothing.
    expect(ownRouteOf('GET', '/v2/*/x')).toBeUndefined();
  });
});
