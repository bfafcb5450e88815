/**
 * The dev server's route table (pure: the scan's endpoints in, routes out; no server, so the scan
 * can check it before anything starts). Queue routes are named as Flash's dev server names them, by
 * the file's callables; load-balanced routes are the module's prefix and the route's path. Two
 * routes at one method and path, or a route at a path the dev server serves itself (ownRoutes), are
 * refused here (routeClashes), the one place that rule lives.
 */
import { createRequire } from 'node:module';
import type FindMyWay from 'find-my-way';
import { badRequest } from '../../core/errors.js';
import { managePrefix } from '../../core/manage.js';
import type { ManifestEndpoint, Route } from '../../core/manifest.js';
import type { CallableInput } from './inputs.js';

export interface DevRoute {
  method: 'GET' | 'POST' | 'PUT' | 'DELETE' | 'PATCH';
  /** Fastify path (`:param`). */
  path: string;
  /** Prefix stripped before proxying (load-balanced). */
  prefix: string;
  endpoint: string;
  kind: 'queue' | 'lb';
  summary: string | undefined;
  params: string[];
  /** A class endpoint's method this route calls (sent as input["method"]). */
  classMethod?: string;
  /** The signature's parameters with types and defaults: the OpenAPI document, a queue route's check. */
  inputs?: CallableInput[];
  /** Why the route is not named as the others are (a name two callables of the file share). */
  note?: string;
  /** The signature has **kwargs. */
  varKeywords?: true;
  /** A one-method class's method: its worker takes an input["method"] naming it (inputs.ts). */
  soleMethod?: string;
  /** What the route calls, and in which file, for a message: `hello of app.py`, `@api.post("/echo") of api.py`. */
  origin: string;
}

type Method = DevRoute['method'];
const everyMethod: readonly Method[] = ['GET', 'POST', 'PUT', 'DELETE', 'PATCH'];

/** A path the dev server serves itself; one ending in `*` takes any rest, as in Fastify. */
export interface OwnRoute {
  methods: readonly Method[];
  path: string;
  /** What it is, for the message that refuses a project route there. */
  what: string;
  /** The platform's routes, passed through: only a project route with a parameter takes them. */
  passthrough?: true;
}

/**
 * The dev server's own routes, declared once: server.ts registers each from here (Swagger UI under
 * `docs`), and refuses at start any other route that is not the project's (ownRouteOf), so a
 * project route is checked against all it serves (routeClashes).
 */
export const ownRoutes = {
  index: { methods: ['GET'], path: '/', what: 'its list of endpoints and routes' },
  ping: { methods: ['GET'], path: '/ping', what: 'its liveness check' },
  openapi: { methods: ['GET'], path: '/openapi.json', what: 'its OpenAPI document' },
  // Swagger UI's (@fastify/swagger-ui), each page it registers: a module named docs keeps its other paths.
  docs: { methods: ['GET'], path: '/docs', what: 'its Swagger UI' },
  docsSlash: { methods: ['GET'], path: '/docs/', what: 'its Swagger UI' },
  docsJson: { methods: ['GET'], path: '/docs/json', what: "Swagger UI's OpenAPI document" },
  docsYaml: { methods: ['GET'], path: '/docs/yaml', what: "Swagger UI's OpenAPI document in YAML" },
  docsStatic: { methods: ['GET'], path: '/docs/static/*', what: "Swagger UI's scripts and styles" },
  manage: {
    methods: ['GET'],
    path: `${managePrefix}/*`,
    what: "the platform's management API, passed through",
    passthrough: true,
  },
  v2: {
    methods: everyMethod,
    path: '/v2/*',
    what: "the platform's v2 API, passed through",
    passthrough: true,
  },
  lb: {
    methods: everyMethod,
    path: '/lb/*',
    what: "the platform's load-balanced routes, passed through",
    passthrough: true,
  },
} as const satisfies Record<string, OwnRoute>;

type Router = FindMyWay.Instance<FindMyWay.HTTPVersion.V1>;
let findMyWay: typeof FindMyWay | undefined;
/**
 * A router as Fastify's (find-my-way, with Fastify's defaults: case-sensitive, a trailing slash and
 * a double one count), so which paths a route takes is Fastify's rule, not one written here. Loaded
 * on first use: every command loads this module (the command table, through state.ts).
 */
function routerOf(routes: ReadonlyArray<{ method: string; path: string }> = []): Router {
  findMyWay ??= createRequire(import.meta.url)('find-my-way') as typeof FindMyWay;
  const router = findMyWay();
  for (const route of routes) router.on(route.method as FindMyWay.HTTPMethod, route.path, () => {});
  return router;
}

const isParam = (segment: string) => segment.startsWith(':') || segment === '*';

/**
 * A URL that both Fastify paths could take, if any can: each parameter (or wildcard) of one takes
 * the other's segment there, and 'x' where both have one. Whether each does take it is the router's
 * answer (ownRouteOf), not this function's.
 */
function witness(a: string, b: string): string {
  const [as, bs] = [a.split('/'), b.split('/')];
  const url: string[] = [];
  const filled = (segments: string[]) => segments.map((s) => (isParam(s) ? 'x' : s));
  for (let i = 0; i < Math.max(as.length, bs.length); i++) {
    const [x, y] = [as[i], bs[i]];
    if (x === '*' || y === '*' || x === undefined || y === undefined) {
      // The rest is the other's (a wildcard takes any rest, an empty one too).
      const rest = x === '*' || x === undefined ? bs.slice(i) : as.slice(i);
      url.push(...(rest.length > 0 ? filled(rest) : ['x']));
      break;
    }
    url.push(!isParam(x) ? x : !isParam(y) ? y : 'x');
  }
  return url.join('/');
}

let ownRouters: ReadonlyArray<{ own: OwnRoute; router: Router }> | undefined;
/**
 * Each of ownRoutes with a router of its own (its path at each of its methods), in ownRoutes'
 * order: built on first use, once, as the routes never change. One router each, not one for all,
 * so each own route is asked whether it takes a URL whatever another would.
 */
function ownRoutersOf(): ReadonlyArray<{ own: OwnRoute; router: Router }> {
  ownRouters ??= Object.values(ownRoutes).map((own: OwnRoute) => ({
    own,
    router: routerOf(own.methods.map((method) => ({ method, path: own.path }))),
  }));
  return ownRouters;
}

/**
 * The dev server's own route that `method path` would share a URL with (a HEAD is its GET's), and
 * that URL; undefined when there is none. The first in ownRoutes' order whose router and the
 * route's own both take the URL the two paths could share (witness).
 */
export function ownRouteOf(method: string, path: string): { own: OwnRoute; url: string } | undefined {
  const asked = (method === 'HEAD' ? 'GET' : method) as Method;
  let mine: Router | undefined;
  for (const { own, router } of ownRoutersOf()) {
    if (!own.methods.includes(asked)) continue;
    // Under a passthrough's wildcard a static project route (v2.py's /v2/runsync, lb.py's /lb/echo)
    // takes its own URL only, which Fastify gives it before the wildcard, and which no call to the
    // platform behind uses: its endpoints are live-<name> with generated ids. One with a parameter
    // would take the platform's URLs too (/v2/{id}/run takes every /v2/<id>/run).
    if ('passthrough' in own && !path.includes(':') && !path.includes('*')) continue;
    try {
      mine ??= routerOf([{ method: asked, path }]);
    } catch {
      return undefined; // a path Fastify does not take (server.ts says so when it skips the route)
    }
    const url = witness(path, own.path);
    if (mine.find(asked, url) && router.find(asked, url)) return { own, url };
  }
  return undefined;
}

/**
 * Whether the parameters Fastify's router found for a project route are ones the load-balanced
 * runtime would give it too. There (worker-image/python/ferry/endpoint.py Route, on the path's
 * segments decoded one by one: split_path, which server.ts makes Fastify's router read alike through
 * routableUrl) a parameter takes one character or more, `%2F` among them; find-my-way
 * also takes an empty one (`/items/` at `/items/:id`, `/a//b` at `/a/:x/b`), which the runtime
 * answers 404 at every method (lb.py Router.find), so ferry dev answers no route there too. Both
 * routers end a parameter at a `/`.
 */
export const runtimeTakes = (params: Readonly<Record<string, string | undefined>>): boolean =>
  Object.values(params).every((value) => value !== '');

/**
 * The methods at which a project route takes a URL, by Fastify's router (parameters anywhere in a
 * segment, percent-encoding, the query string left out) where the runtime takes it too
 * (runtimeTakes), sorted; [] when none does. The router is built once for the table: the function
 * asks it. A path Fastify refuses takes nothing, as server.ts skips its route.
 */
export function methodsRouting(routes: readonly DevRoute[]): (url: string) => Method[] {
  const router = routerOf();
  for (const route of routes) {
    try {
      router.on(route.method, route.path, () => {});
    } catch {
      // a path Fastify does not take (server.ts says so when it skips the route)
    }
  }
  const methods = [...everyMethod].sort();
  return (url) =>
    methods.filter((method) => {
      const found = router.find(method, url);
      return found !== null && runtimeTakes(found.params);
    });
}

/** A module's routes are under its path; a root __init__.py's, at their own paths. */
const prefixOf = (endpoint: ManifestEndpoint) =>
  endpoint.module === '' ? '' : `/${endpoint.module.split('.').join('/')}`;

/** One thing a queue route calls: a function (or an image endpoint), or one public method of a class. */
interface QueueCallable {
  endpoint: ManifestEndpoint;
  /** The function's or the method's name. */
  name: string;
  /** The class a method belongs to. */
  className?: string;
  /** What the route documents: the function's, or the method's. */
  doc: Pick<Route, 'summary' | 'params' | 'inputs' | 'varKeywords'>;
  /** Sent as input["method"]: a class with several methods needs it. */
  classMethod?: string;
  /** A class's only method, which its worker calls without input["method"] (and with one naming it). */
  soleMethod?: string;
}

function queueCallables(endpoint: ManifestEndpoint): QueueCallable[] {
  const target = endpoint.target;
  const methods = target?.methods ?? [];
  if (target === undefined || methods.length === 0)
    return [{ endpoint, name: target?.name ?? endpoint.name, doc: target ?? { params: [] } }];
  return methods.map((method) => ({
    endpoint,
    name: method.name,
    className: target.name,
    doc: { ...method, summary: method.summary ?? target.summary },
    ...(methods.length > 1 ? { classMethod: method.name } : { soleMethod: method.name }),
  }));
}

/**
 * The route table from the scanned endpoints (pure, so tests can read it without a server). Queue
 * routes are named as Flash's dev server names them: `/<module>/runsync` when the file has one
 * callable, else `/<module>/<function or method>/runsync` for each of its functions and class methods.
 * Where two of one file share a name (two classes' methods, or a function and a method), each method
 * among them keeps its class in the route (`/<module>/<Class>/<method>/runsync`), with a `note` why.
 * Routes of different files may still come out the same (app.py's `hello` beside app/hello.py), or
 * take a path the dev server serves itself (docs.py's `@api.get("/json")` at Swagger UI's /docs/json):
 * that throws (routeClashes), at start and on a reload, rather than let one route call the other's
 * code, or hide a page.
 */
export function devRoutes(endpoints: readonly ManifestEndpoint[]): DevRoute[] {
  const routes: DevRoute[] = [];
  const namesByFile = new Map<string, string[]>();
  for (const endpoint of endpoints) {
    if (endpoint.kind !== 'queue') continue;
    const names = namesByFile.get(endpoint.file) ?? [];
    names.push(...queueCallables(endpoint).map((c) => c.name));
    namesByFile.set(endpoint.file, names);
  }
  for (const endpoint of endpoints) {
    const prefix = prefixOf(endpoint);
    if (endpoint.kind === 'queue') {
      const names = namesByFile.get(endpoint.file) ?? [];
      for (const callable of queueCallables(endpoint)) {
        const shared = names.filter((name) => name === callable.name).length > 1;
        const qualified = shared && callable.className !== undefined;
        const path =
          names.length === 1
            ? `${prefix}/runsync`
            : qualified
              ? `${prefix}/${callable.className}/${callable.name}/runsync`
              : `${prefix}/${callable.name}/runsync`;
        routes.push({
          method: 'POST',
          path,
          prefix,
          endpoint: endpoint.name,
          kind: 'queue',
          summary: callable.doc.summary,
          origin: `${callable.className ? `${callable.className}.` : ''}${callable.name} of ${endpoint.file}`,
          params: callable.doc.params,
          ...(callable.doc.inputs ? { inputs: callable.doc.inputs } : {}),
          ...(callable.doc.varKeywords ? { varKeywords: true } : {}),
          ...(callable.classMethod ? { classMethod: callable.classMethod } : {}),
          ...(callable.soleMethod ? { soleMethod: callable.soleMethod } : {}),
          ...(qualified
            ? {
                note: `more than one callable of ${endpoint.file} is named ${callable.name}: ${callable.className}.${callable.name} keeps its class in the route`,
              }
            : {}),
        });
      }
    } else {
      for (const route of endpoint.routes ?? []) {
        routes.push({
          method: route.method,
          path: `${prefix}${route.path.replace(/\{([^{}]+)\}/g, ':$1')}`,
          prefix,
          endpoint: endpoint.name,
          kind: 'lb',
          summary: route.summary,
          origin: `@${endpoint.variable}.${route.method.toLowerCase()}("${route.path}") of ${endpoint.file}`,
          params: route.params,
          ...(route.inputs ? { inputs: route.inputs } : {}),
          ...(route.varKeywords ? { varKeywords: true } : {}),
        });
      }
    }
  }
  const { shared, own } = routeClashes(routes);
  if (shared.length > 0 || own.length > 0) {
    const said = [
      ...(shared.length > 0
        ? [
            `${shared.join('; ')}. Rename one of them or its file: a file's one callable is at /<module>/runsync, several at /<module>/<function or method>/runsync, a load-balanced route at /<module><path>`,
          ]
        : []),
      ...(own.length > 0
        ? [
            `${own.join('; ')}. Rename the route or its module: ferry dev serves ${listed(Object.values(ownRoutes).map((r) => r.path))} itself`,
          ]
        : []),
    ];
    throw badRequest(
      said.join('. '),
      shared.length > 0
        ? 'Rename one, then run ferry dev again.'
        : 'Rename the route or its module, then run ferry dev again.',
    );
  }
  return routes;
}

/** `a, b and c`. */
const listed = (items: readonly string[]) =>
  items.length > 1 ? `${items.slice(0, -1).join(', ')} and ${items.at(-1)}` : (items[0] ?? '');

/**
 * What keeps the routes from being served as they are: each method and path that more than one
 * route has (`shared`, with what each calls), and each route that would take a URL the dev server
 * serves itself (`own`: its pages, the platform's APIs it passes through; whichever Fastify gave
 * that URL to, the other would never get it). Fastify (find-my-way) takes one route per method and
 * path, whatever its parameters are named (`/a/:x` is `/a/:y`): its router says which are one.
 */
function routeClashes(routes: readonly DevRoute[]): { shared: string[]; own: string[] } {
  const router = routerOf();
  const groups: DevRoute[][] = [];
  const own: string[] = [];
  for (const route of routes) {
    const taken = ownRouteOf(route.method, route.path);
    if (taken !== undefined) {
      const { own: theirs, url } = taken;
      own.push(
        `${route.origin} is ${route.method} ${route.path}, ${url === route.path ? '' : `which takes ${route.method} ${url}, `}a path ferry dev serves itself (${theirs.what}, at ${theirs.path})`,
      );
      continue;
    }
    try {
      const same = router.findRoute(route.method, route.path)?.store as DevRoute[] | undefined;
      if (same !== undefined) same.push(route);
      else {
        const group = [route];
        groups.push(group);
        router.on(route.method, route.path, () => {}, group);
      }
    } catch {
      // a path Fastify does not take (server.ts says so when it skips the route)
    }
  }
  return {
    shared: groups
      .filter((same) => same.length > 1)
      .map(
        (same) =>
          `${same.length === 2 ? 'Two' : same.length} routes are ${same[0]!.method} ${same[0]!.path}: ${same.map((r) => r.origin).join(' and ')}`,
      ),
    own,
  };
}
