/**
 * The dev server (docs/api.md#the-dev-server), on Fastify with a Swagger UI at /docs. Routes come from the scan:
 *   POST /<module>/runsync             one callable in the file ({input} wrapper)
 *   POST /<module>/<function>/runsync  several in one file: each function and class method (routes.ts)
 *   <METHOD> /<module><route path>     load-balanced routes, passed to the live endpoint as they came
 * No Authorization header here; the server adds the key when it calls the platform. So it answers
 * only its own pages and clients that are not browsers (site-guard.ts).
 */

import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import swagger, { type SwaggerTransformObject } from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import { houseClientErrors, noRoute, readBody, routableUrl } from '../../core/adapters/local/http.js';
import { FerryError, httpStatus, messageOf } from '../../core/errors.js';
import { isFinal } from '../../core/job.js';
import { parseJsonExact, stringifyJsonExact } from '../../core/json.js';
import { limits } from '../../core/limits.js';
import { printable } from '../../core/log.js';
import { manageOpenApi, managePrefix } from '../../core/manage.js';
import { overLimitMessage } from '../../core/request-body.js';
import { startFailureMessage } from './failures.js';
import { inputMismatch, inputSchema } from './inputs.js';
import { type DevRoute, methodsRouting, ownRouteOf, ownRoutes, runtimeTakes } from './routes.js';
import { corsAnswer, crossSiteRefusal, type SiteGuard } from './site-guard.js';
import type { LiveEndpoints } from './state.js';

export interface DevServerOptions {
  live: LiveEndpoints;
  /** The worker's last lines while the endpoint cannot start (failures.ts startFailureOf), else undefined. */
  startFailure?: (endpointId: string) => string | undefined;
  /** Why the last reload failed, until one succeeds (failures.ts reloadFailureMessage), else undefined. */
  reloadFailure?: () => string | undefined;
  platformUrl: string;
  apiKey: string;
  /** Who may call (site-guard.ts): the server takes no key, so a web page must not reach it. */
  guard: SiteGuard;
  log: (line: string) => void;
}

/**
 * A call to the platform's own JSON API (v2, management) with the dev key. Bodies both ways keep
 * integers beyond 2^53 exact (core/json.ts), as the platform's own front door does.
 */
async function callPlatform(options: DevServerOptions, method: string, path: string, body?: unknown) {
  const response = await fetch(`${options.platformUrl}${path}`, {
    method,
    headers: { authorization: `Bearer ${options.apiKey}`, 'content-type': 'application/json' },
    ...(body === undefined ? {} : { body: stringifyJsonExact(body) }),
  });
  const text = await response.text();
  let json: unknown = text;
  try {
    json = text ? parseJsonExact(Buffer.from(text), 'The answer') : undefined;
  } catch {
    // not JSON (a proxy's error page): the text as it is
  }
  return { status: response.status, body: json };
}

/** The request's bytes, whatever their content type; undefined without a body. */
const rawBody = (request: FastifyRequest): Buffer | undefined =>
  Buffer.isBuffer(request.body) && request.body.length > 0 ? request.body : undefined;

/**
 * A request passed on to the platform as it came: its bytes and content type (a load-balanced
 * worker may take any body, not only JSON), and the answer's bytes as they came back.
 */
async function forwardRaw(
  options: DevServerOptions,
  request: FastifyRequest,
  path: string,
  authorization: string | undefined,
) {
  const headers: Record<string, string> = {};
  if (authorization) headers.authorization = authorization;
  const type = request.headers['content-type'];
  if (type) headers['content-type'] = type;
  const body = rawBody(request);
  const response = await fetch(`${options.platformUrl}${path}`, {
    method: request.method,
    headers,
    ...(body && request.method !== 'GET' && request.method !== 'HEAD' ? { body } : {}),
  });
  // The answer's type, and a 405's Allow (the methods the route takes), as the platform sent them.
  const passed: Record<string, string> = {};
  for (const name of ['content-type', 'allow']) {
    const value = response.headers.get(name);
    if (value) passed[name] = value;
  }
  return { status: response.status, headers: passed, body: Buffer.from(await response.arrayBuffer()) };
}

async function runQueueJob(
  options: DevServerOptions,
  route: DevRoute,
  request: FastifyRequest,
  reply: FastifyReply,
) {
  // JSON whatever its label, as the platform's /run reads it (curl -d sends it as a form).
  const bytes = rawBody(request);
  const body = (bytes ? parseJsonExact(bytes, 'Request body') : undefined) as { input?: unknown } | undefined;
  if (
    !body ||
    typeof body !== 'object' ||
    body.input === undefined ||
    body.input === null ||
    typeof body.input !== 'object' ||
    Array.isArray(body.input)
  ) {
    return reply.code(400).send({ error: 'The body needs the wrapper {"input": {...}}' });
  }
  // Before the endpoint is provisioned and a job made: 422, as Flash's dev server answers it.
  const callable = route.classMethod ? `${route.endpoint}.${route.classMethod}` : route.endpoint;
  const mismatch = inputMismatch(route, body.input as Record<string, unknown>, callable);
  if (mismatch !== undefined) {
    // The caller's keys and values, written out: they cannot rewrite the terminal.
    options.log(printable(`${route.method} ${route.path} → 422 ${mismatch}`));
    return reply.code(422).send({ error: mismatch });
  }
  const record = await options.live.ensure(route.endpoint);
  const failed = options.startFailure?.(record.id);
  if (failed !== undefined) return startFailed(options, route, reply, failed);
  const input = route.classMethod
    ? { ...(body.input as Record<string, unknown>), method: route.classMethod }
    : body.input;
  let job = await callPlatform(options, 'POST', `/v2/${record.id}/run`, { input });
  if (job.status !== 200) return reply.code(job.status).send(job.body);
  let current = job.body as { id: string; status: string; output?: unknown; error?: unknown };
  // The dev server has no gateway limit: keep waiting until the job ends. A worker that cannot start
  // ends it at once: the supervisor fails the queued jobs of an endpoint it marks failing.
  while (!isFinal(current.status)) {
    job = await callPlatform(options, 'POST', `/v2/${record.id}/status-sync/${current.id}?wait=60000`);
    if (job.status !== 200) return reply.code(job.status).send(job.body);
    current = job.body as typeof current;
  }
  const cannotStart = current.status === 'FAILED' ? options.startFailure?.(record.id) : undefined;
  if (cannotStart !== undefined) return startFailed(options, route, reply, cannotStart);
  options.log(`${route.method} ${route.path} → ${current.status}`);
  return reply.send({
    id: current.id,
    status: current.status,
    ...(current.output !== undefined ? { output: current.output } : {}),
    ...(current.error !== undefined ? { error: current.error } : {}),
  });
}

function startFailed(options: DevServerOptions, route: DevRoute, reply: FastifyReply, output: string) {
  const message = startFailureMessage(route.endpoint, output);
  options.log(`error: ${route.method} ${route.path}: ${message}`);
  return reply.code(502).send({ error: message });
}

async function proxyRoute(
  options: DevServerOptions,
  route: DevRoute,
  request: FastifyRequest,
  reply: FastifyReply,
) {
  const record = await options.live.ensure(route.endpoint);
  const failed = options.startFailure?.(record.id);
  if (failed !== undefined) return startFailed(options, route, reply, failed);
  const suffix = request.url.slice(route.prefix.length) || '/';
  // The local front door fails the request when its worker exits before it is ready.
  const result = await forwardRaw(options, request, `/lb/${record.id}${suffix}`, `Bearer ${options.apiKey}`);
  const cannotStart = result.status >= 500 ? options.startFailure?.(record.id) : undefined;
  if (cannotStart !== undefined) return startFailed(options, route, reply, cannotStart);
  options.log(`${route.method} ${route.path} → ${result.status}`);
  return reply.code(result.status).headers(result.headers).send(result.body);
}

/**
 * The 503 each of the project's routes answers while the code on disk does not load (failures.ts
 * reloadFailureMessage): its workers still hold the code from before the change, whose answers a
 * caller would take for the new code's. The platform refuses runs with the same message
 * (LocalPlatformOptions.runsRefusedBecause); a route answers it first, before it checks the input
 * against the old code's signature or provisions an endpoint of the old code. Undefined while the
 * code loads.
 */
function refusedAfterFailedReload(options: DevServerOptions, reply: FastifyReply) {
  const message = options.reloadFailure?.();
  return message === undefined ? undefined : reply.code(503).send({ error: message });
}

/**
 * The session's one listener (cli/commands/dev-run.ts swaps the routes behind it on reload). What Node's
 * parser refuses never reaches the routes: it is answered in the API's {"error"} shape, as the
 * platform's front door answers it, not with Node's bare 400.
 */
export function createDevListener(
  route: (request: IncomingMessage, response: ServerResponse) => void,
): Server {
  const listener = createServer(route);
  listener.on('clientError', houseClientErrors.clientErrorHandler);
  return listener;
}

export async function createDevServer(options: DevServerOptions): Promise<FastifyInstance> {
  const app = Fastify({
    logger: false,
    frameworkErrors: houseClientErrors.frameworkErrors,
    // A path is routed as the load-balanced runtime routes it (a badly encoded parameter reaches its
    // route with its text); messages name the path as it was sent (request.originalUrl). Not the
    // platform's v2 and management APIs, passed through as sent: a URL there that does not decode
    // gets the platform's own 400, as it would from the platform itself.
    rewriteUrl: (request) => {
      const url = request.url ?? '/';
      return url.startsWith('/v2/') || url.startsWith(`${managePrefix}/`) ? url : routableUrl(url);
    },
    // The platform's largest body (/runsync, /lb); each route below has the limit of the platform
    // route it calls, so the dev server refuses what the platform would, and nothing less.
    bodyLimit: Math.max(limits.runsyncBodyBytes, limits.lbBodyBytes),
  });
  // Bodies stay bytes whatever their content type, read by the platform's own reader (a body over its
  // route's limit is read through, so the client hears the 413): a queue route reads them as JSON
  // (integers beyond 2^53 exact, core/json.ts; the same 400s), the rest pass on as they came.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', readBody);
  app.setReplySerializer((payload) => stringifyJsonExact(payload));
  // Schemas here document the routes for Swagger; the handlers check input themselves and answer {error}.
  app.setValidatorCompiler(() => () => true);
  // Every route of the dev server's own (Swagger UI's too) is one routes.ts declares, so the scan
  // refuses a project route there (routeClashes) instead of Fastify refusing or hiding one of the two.
  app.addHook('onRoute', (added) => {
    if ((added.config as { project?: boolean } | undefined)?.project) return;
    for (const method of [added.method].flat())
      if (ownRouteOf(method, added.url) === undefined)
        throw new Error(`the dev server's route ${method} ${added.url} is not one of ownRoutes (routes.ts)`);
  });
  // Before any route, Swagger's included, and before a body is read.
  app.addHook('onRequest', async (request, reply) => {
    const refusal = crossSiteRefusal(request.headers, options.guard);
    if (refusal === undefined) return;
    // The Host and Origin are the caller's words: written out, they cannot rewrite the terminal.
    options.log(printable(`refused ${request.method} ${request.url.split('?', 1)[0]}: ${refusal}`));
    return reply.code(403).send({ error: refusal });
  });
  // An --allow-origin page may read the answers, and ask first for a JSON POST (site-guard.ts).
  app.addHook('onRequest', async (request, reply) => {
    const cors = corsAnswer(request.method, request.headers, options.guard);
    if (cors === undefined) return;
    reply.headers(cors.headers);
    if (cors.preflight) return reply.code(204).send();
  });
  await app.register(swagger, {
    openapi: {
      info: {
        title: 'Ferry dev server',
        version: '1',
        description: 'Your endpoints, running your code as it is on disk.',
      },
    },
    // The management API (core/manage.ts) is proxied below; its paths join this document.
    transformObject: (document) => {
      type Doc = {
        paths?: Record<string, unknown>;
        components?: { securitySchemes?: Record<string, unknown>; schemas?: Record<string, unknown> };
      };
      const doc = ('openapiObject' in document ? document.openapiObject : document.swaggerObject) as Doc;
      const merged = {
        ...(doc as Record<string, unknown>),
        paths: { ...doc.paths, ...manageOpenApi.paths },
        components: {
          ...doc.components,
          securitySchemes: {
            ...doc.components?.securitySchemes,
            ...manageOpenApi.components.securitySchemes,
          },
          schemas: { ...doc.components?.schemas, ...manageOpenApi.components.schemas },
        },
      };
      return merged as unknown as ReturnType<SwaggerTransformObject>;
    },
  });
  await app.register(swaggerUi, { routePrefix: ownRoutes.docs.path });
  const routes = options.live.snapshot.routes;
  app.get(ownRoutes.index.path, { schema: { summary: 'Health check', tags: ['dev server'] } }, async () => ({
    status: 'ok',
    server: 'ferry dev',
    docs: ownRoutes.docs.path,
    endpoints: options.live.snapshot.endpoints.map((e) => ({ name: e.name, kind: e.kind, file: e.file })),
    routes: routes.map((r) => `${r.method} ${r.path}`),
  }));
  // Flash's dev server answers it too (load balancers and scripts wait on it).
  app.get(ownRoutes.ping.path, { schema: { summary: 'Liveness check', tags: ['dev server'] } }, async () => ({
    status: 'healthy',
  }));
  for (const route of routes) {
    const schema: Record<string, unknown> = {
      summary: route.summary ?? `${route.endpoint}`,
      // A root __init__.py's routes have no module to group them by: their endpoint does.
      tags: [route.prefix.slice(1) || route.endpoint],
    };
    const args = inputSchema(route, route.kind === 'queue');
    if (route.method !== 'GET' && route.method !== 'DELETE') {
      schema.body =
        route.kind === 'queue' ? { type: 'object', required: ['input'], properties: { input: args } } : args;
    } else if (Object.keys(args.properties as object).length > 0) {
      // Query parameters, without the path's own.
      const pathParams = new Set([...route.path.matchAll(/:([A-Za-z_][A-Za-z0-9_]*)/g)].map((m) => m[1]));
      const properties = Object.fromEntries(
        Object.entries(args.properties as Record<string, unknown>).filter(([k]) => !pathParams.has(k)),
      );
      if (Object.keys(properties).length > 0) schema.querystring = { type: 'object', properties };
    }
    try {
      app.route({
        method: route.method,
        url: route.path,
        config: { project: true },
        // A queue route submits a /run; a load-balanced one is an /lb request.
        bodyLimit: route.kind === 'queue' ? limits.runBodyBytes : limits.lbBodyBytes,
        schema,
        handler: async (request, reply) => {
          // A URL the runtime routes nowhere (an empty parameter) is no route here either, before
          // anything else: the not-found handler's answer (below), as for any other such URL.
          if (!runtimeTakes(request.params as Record<string, string>)) return reply.callNotFound();
          return (
            refusedAfterFailedReload(options, reply) ??
            (route.kind === 'queue'
              ? runQueueJob(options, route, request, reply)
              : proxyRoute(options, route, request, reply))
          );
        },
      });
    } catch (error) {
      // Two project routes at one path, or one at the dev server's own, never get here (the scan
      // refuses them: routes.ts), nor a `*` or a `:` Fastify would read otherwise than the runtime
      // (declaration.py path_problem): a guard for a path Fastify refuses all the same.
      options.log(
        `warning: route ${route.method} ${route.path} of ${route.endpoint} skipped: ${(error as Error).message}`,
      );
    }
  }
  // The management API of the platform behind, with the dev key added like every dev-server call.
  app.get(ownRoutes.manage.path, { schema: { hide: true } }, async (request, reply) => {
    const result = await callPlatform(options, 'GET', request.url);
    return reply.code(result.status).send(result.body);
  });
  // Scripts and other services reach the live endpoints here too, with their own key: the v2 API
  // (by id or by name, docs/python.md) and load-balanced routes, passed through to the platform.
  // After a failed reload the platform itself refuses what would run the project's code (503), for
  // every caller: its answer passes back as it came.
  const passThrough = async (request: FastifyRequest, reply: FastifyReply) => {
    // As sent: the platform's front door decodes a /lb/ path by the same rule (routableUrl).
    const result = await forwardRaw(options, request, request.originalUrl, request.headers.authorization);
    return reply.code(result.status).headers(result.headers).send(result.body);
  };
  const hidden = { schema: { hide: true } };
  for (const own of [ownRoutes.v2, ownRoutes.lb])
    app.route({ method: [...own.methods], url: own.path, ...hidden, handler: passThrough });
  // The OpenAPI document at the path tools look for first, beside Swagger UI's /docs/json.
  app.get(ownRoutes.openapi.path, { schema: { hide: true } }, async () => app.swagger());
  // Which methods would route a URL: the 405 below, for exactly the URLs Fastify gives a project
  // route at another method (its router, its parameters), built once for this table.
  const methodsAt = methodsRouting(routes);
  app.setNotFoundHandler((request, reply) => {
    const path = request.originalUrl.split('?', 1)[0]!;
    const allowed = methodsAt(request.url);
    if (allowed.length === 0) return noRoute(request, reply);
    // A named route asked with another method: the 405 the load-balanced runtime answers on the
    // platform (worker-image/python/ferry/lb.py method_not_allowed), in its words, with the Allow
    // header HTTP asks of a 405 (HEAD wherever GET is: Fastify answers it, as the runtime does).
    const listed = [...allowed, ...(allowed.includes('GET') ? ['HEAD'] : [])].sort().join(', ');
    reply.header('allow', listed);
    return reply
      .code(405)
      .send({ error: `method ${request.method} not allowed for ${path}; allowed: ${listed}` });
  });
  app.setErrorHandler((error, request, reply) => {
    const message = messageOf(error);
    // The client's mistakes (a body that is not JSON, too large; a call ferry dev cannot serve) keep
    // their 4xx; the rest is ours.
    const status = FerryError.is(error) ? httpStatus(error) : (error as { statusCode?: number }).statusCode;
    if (status === 413) {
      void reply
        .code(413)
        .send({ error: overLimitMessage(request.method, request.url, request.routeOptions.bodyLimit) });
      return;
    }
    if (status !== undefined && status >= 400 && status < 500) {
      void reply.code(status).send({ error: message });
      return;
    }
    options.log(`error: ${message}`);
    void reply.code(502).send({ error: message });
  });
  return app;
}
