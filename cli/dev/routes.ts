/**
 * The dev server's route table (pure: the scan's endpoints in, routes out; no Fastify, so the scan
 * can check it before anything starts). Queue routes are named as Flash's dev server names them, by
 * the file's callables; load-balanced routes are the module's prefix and the route's path. Two
 * routes at one method and path are refused here (routeClashes), the one place that rule lives.
 */
import { badRequest } from '../../core/errors.js';
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

const prefixOf = (endpoint: ManifestEndpoint) => `/${endpoint.module.split('.').join('/')}`;

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
 * Routes of different files may still come out the same (app.py's `hello` beside app/hello.py): that
 * throws (routeClashes), at start and on a reload, rather than let one route call the other's code.
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
  const clashes = routeClashes(routes);
  if (clashes.length > 0) {
    throw badRequest(
      `${clashes.join('; ')}. Rename one of them or its file: a file's one callable is at /<module>/runsync, several at /<module>/<function or method>/runsync, a load-balanced route at /<module><path>`,
      'Rename one, then run ferry dev again.',
    );
  }
  return routes;
}

/**
 * Each method and path that more than one route has, with what each calls. Fastify (find-my-way)
 * takes one route per method and path, whatever its parameters are named (`/a/:x` is `/a/:y`).
 */
function routeClashes(routes: readonly DevRoute[]): string[] {
  const byKey = new Map<string, DevRoute[]>();
  for (const route of routes) {
    const key = `${route.method} ${route.path.replace(/:[A-Za-z_][A-Za-z0-9_]*/g, ':')}`;
    byKey.set(key, [...(byKey.get(key) ?? []), route]);
  }
  return [...byKey.values()]
    .filter((same) => same.length > 1)
    .map(
      (same) =>
        `${same.length === 2 ? 'Two' : same.length} routes are ${same[0]!.method} ${same[0]!.path}: ${same.map((r) => r.origin).join(' and ')}`,
    );
}
