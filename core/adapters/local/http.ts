/**
 * The local front door: Fastify on loopback (or --host), forwarding `/v2/*` to the framework-free
 * V2Api. Bodies reach the API as raw bytes whatever their content type, because RunPod workers post
 * JSON labelled `application/x-www-form-urlencoded` and each route has its own size limit.
 */
import { randomUUID } from 'node:crypto';
import { maxHeaderSize, STATUS_CODES } from 'node:http';
import type { Socket } from 'node:net';
import Fastify, {
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
  type FastifyServerOptions,
} from 'fastify';
import type { ApiRequest, V2Api } from '../../api.js';
import { type Authenticator, authorizeClient, authorizeOperator } from '../../auth.js';
import { badRequest, internal, toHttpResponse } from '../../errors.js';
import { assertJsonDepth, stringifyJsonExact } from '../../json.js';
import { limits } from '../../limits.js';
import { type Logger, stderrLogger } from '../../log.js';
import type { ManageApi } from '../../manage.js';
import type { EndpointRecord } from '../../ports.js';
import { overLimitMessage, readLimitedBody } from '../../request-body.js';
import { registerConsole } from './console.js';
import { type FrontDoorGuard, frontDoorLimits, installGuards, serverOptions } from './guard.js';
import type { LbRequest, LbResponse } from './pool.js';
import { type RolloutReport, reconcilePath } from './rollout.js';

/** `POST /local/v1/reconcile` (core/adapters/local/rollout.ts). */
export interface LocalRollout {
  auth: Authenticator;
  reconcile(): Promise<RolloutReport>;
}

/** Load-balanced endpoints: `/lb/<endpointId>/<route path>`, API key required like every endpoint. */
export interface LbFrontDoor {
  auth: Authenticator;
  endpoint(endpointId: string): Promise<EndpointRecord | undefined>;
  /** Why no request may reach a worker now (ApiOptions.runsRefusedBecause, the same rule), else undefined. */
  refusedBecause?: () => string | undefined;
  forward(endpointId: string, request: LbRequest): Promise<LbResponse>;
}

/**
 * The server's cap, for the routes without a limit of their own here. /run and /runsync (by id and by
 * name) and /lb have their own limits; a body over a route's limit never reaches its handler, and the 413 names that
 * limit (`request.routeOptions.bodyLimit`). job-done has its own too, but its handler hears of an
 * over-limit body (DroppedBody).
 */
const bodyLimitBytes = limits.runsyncBodyBytes + 1024 * 1024;

// HEAD reaches the routers, which answer it where a GET only reads (core/api.ts readMethods) and
// 404 elsewhere: they know which GETs have side effects (a job-take claims jobs), Fastify does not.
const methods = ['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'PATCH'];

/** A worker's result: the one route whose handler hears of a body over its limit (DroppedBody). */
const jobDoneUrl = '/v2/:endpointId/job-done/:worker/:id';

/**
 * What job-done gets for a body over its limit: the size, the bytes dropped. The job fails with the
 * reason (docs/security.md); a 413 alone would leave it running until its lease lapsed, then run it
 * again. Past overLimitReadBytes (core/limits.ts) the body is not read through, and that 413 is all
 * there is.
 */
class DroppedBody {
  constructor(readonly bytes: number) {}
}

const tooLargeError = (): Error => Object.assign(new Error('Request body too large'), { statusCode: 413 });

/**
 * Every body as raw bytes, up to the route's limit (`request.routeOptions.bodyLimit`), by the rule of
 * core/request-body.ts: the 413 is answered once the body has been read through, or at once past
 * overLimitReadBytes.
 */
export function readBody(
  request: FastifyRequest,
  payload: NodeJS.ReadableStream,
  done: (error: Error | null, body?: Buffer) => void,
): void {
  readLimitedBody(payload, request.headers, request.routeOptions.bodyLimit).then(
    (result) => {
      if (result.kind === 'body') done(null, result.body ?? Buffer.alloc(0));
      else if (result.kind === 'over' && request.routeOptions.url === jobDoneUrl)
        done(null, new DroppedBody(result.bytes) as unknown as Buffer);
      else done(tooLargeError());
    },
    (error: Error) => done(error),
  );
}

/**
 * What Node's HTTP parser refuses before there is a request (malformed HTTP, a URL or headers over
 * Node's limit, a request that took too long to arrive): the status Node itself would answer, with
 * the API's one error shape (docs/api.md#errors).
 */
function clientErrorAnswer(error: { code?: string; reason?: string }): {
  statusCode: number;
  error: string;
} {
  switch (error.code) {
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return { statusCode: 408, error: 'The request did not arrive in time' };
    case 'HPE_HEADER_OVERFLOW':
      return {
        statusCode: 431,
        error: `The request's URL and headers are over the ${maxHeaderSize}-byte limit`,
      };
    case 'HPE_CHUNK_EXTENSIONS_OVERFLOW':
      return { statusCode: 413, error: "The request's chunk extensions are over the limit" };
    default:
      return {
        statusCode: 400,
        error: `Malformed HTTP request${error.reason ? `: ${error.reason}` : ''}`,
      };
  }
}

/**
 * Node's clientError listener: writes the answer on the socket (there is no request to answer) and
 * closes it, as Node requires; nothing is read from it after the error.
 */
function onClientError(error: Error & { code?: string; reason?: string }, socket: Socket): void {
  if (error.code === 'ECONNRESET' || socket.destroyed) return;
  if (!socket.writable) {
    socket.destroy();
    return;
  }
  const { statusCode, error: message } = clientErrorAnswer(error);
  const body = JSON.stringify({ error: message });
  socket.end(
    `HTTP/1.1 ${statusCode} ${STATUS_CODES[statusCode]}\r\nContent-Type: application/json\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    () => socket.destroy(),
  );
}
/**
 * Fastify options that answer what never reaches a route with the API's one error shape
 * (docs/api.md#errors): what Node's HTTP parser refuses (onClientError), and a URL that does not
 * percent-decode (`/status/%E0%A4%A`). Every Fastify server Ferry listens with takes them, so no
 * client meets Fastify's own `{statusCode, error, message}` body.
 */
export const houseClientErrors = {
  clientErrorHandler: onClientError,
  frameworkErrors: (error: Error, _request: FastifyRequest, reply: FastifyReply) => {
    reply.code(400).send({ error: `Bad request: ${error.message}` });
  },
} satisfies Pick<FastifyServerOptions, 'clientErrorHandler' | 'frameworkErrors'>;

/** The API's answer to a path no route serves (Fastify's own 404 body is another shape). */
export function noRoute(request: FastifyRequest, reply: FastifyReply): void {
  reply.code(404).send({ error: `No route for ${request.method} ${request.originalUrl.split('?', 1)[0]}` });
}

export async function createHttpServer(options: {
  api: V2Api;
  lb?: LbFrontDoor;
  /** The management API at /manage/v1 (core/manage.ts). */
  manage?: ManageApi;
  /** Serve the web console at /console from this folder. */
  consoleDir?: string;
  guard?: FrontDoorGuard;
  log?: Logger;
  /** `POST /local/v1/reconcile` (rollout.ts). */
  rollout?: LocalRollout;
}): Promise<FastifyInstance> {
  const log = options.log ?? stderrLogger;
  const app = Fastify({
    ...serverOptions(frontDoorLimits(options.guard)),
    logger: false,
    // The request id a 5xx answer carries and the log line names (docs/api.md#errors).
    genReqId: () => randomUUID(),
    bodyLimit: bodyLimitBytes,
    forceCloseConnections: true,
    ...houseClientErrors,
    // A load-balanced route's path reaches its worker as the client sent it (lbPath of originalUrl),
    // whatever its percent-encoding: the runtime decodes it (routableUrl says how), not this router.
    rewriteUrl: (request) => {
      const url = request.url ?? '/';
      return url.startsWith('/lb/') ? routableUrl(url) : url;
    },
  });
  await installGuards(app, options.guard);
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', readBody);

  const forward = async (request: FastifyRequest, reply: FastifyReply) => {
    // Only a client that leaves early aborts: creating the abort error on every finished response
    // showed up in profiles. The controller itself is made only for a route that reads the signal
    // (the long polls); a /run or a job-done never does, and one per request showed up too.
    let abort: AbortController | undefined;
    let left = false;
    reply.raw.on('close', () => {
      if (reply.raw.writableFinished) return;
      left = true;
      abort?.abort();
    });
    const [path] = request.url.split('?', 1);
    const apiRequest: ApiRequest = {
      method: request.method,
      path: path!,
      query: singleValues(request.query as Record<string, string | string[] | undefined>),
      headers: request.headers,
      body: Buffer.isBuffer(request.body) ? request.body : undefined,
      droppedBodyBytes: request.body instanceof DroppedBody ? request.body.bytes : undefined,
      get signal() {
        if (!abort) {
          abort = new AbortController();
          if (left) abort.abort();
        }
        return abort.signal;
      },
      requestId: request.id,
    };
    const response = await (apiRequest.path.startsWith('/manage/') && options.manage
      ? options.manage
      : options.api
    ).handle(apiRequest);
    reply.code(response.statusCode);
    if (response.headers) reply.headers(response.headers);
    if (response.statusCode === 204) return reply.send();
    return reply.type('application/json').send(stringifyJsonExact(response.body));
  };
  app.route({ method: methods, url: '/v2/*', handler: forward });
  // The client submits, by id and by name, at their own limits (docs/api.md#limits): a body over one
  // is never handed over, and its 413 names that limit, not the server's cap.
  for (const endpoint of ['/v2/:endpointId', '/v2/by-name/:app/:env/:name']) {
    app.route({ method: methods, url: `${endpoint}/run`, bodyLimit: limits.runBodyBytes, handler: forward });
    app.route({
      method: methods,
      url: `${endpoint}/runsync`,
      bodyLimit: limits.runsyncBodyBytes,
      handler: forward,
    });
  }
  // A worker's result, at the worker protocol's limit; one over it fails its job (DroppedBody).
  app.route({
    method: methods,
    url: jobDoneUrl,
    bodyLimit: limits.jobDoneBodyBytes,
    handler: forward,
  });
  if (options.manage) app.route({ method: methods, url: '/manage/v1/*', handler: forward });
  if (options.consoleDir) registerConsole(app, options.consoleDir);

  const rollout = options.rollout;
  if (rollout) {
    app.route({
      method: 'POST',
      url: reconcilePath,
      handler: async (request, reply) => {
        try {
          await authorizeOperator(rollout.auth, request.headers.authorization);
          return reply.code(200).send(await rollout.reconcile());
        } catch (error) {
          const answer = toHttpResponse(error, { requestId: request.id, log, what: `POST ${reconcilePath}` });
          return reply
            .code(answer.statusCode)
            .headers(answer.headers ?? {})
            .send(answer.body);
        }
      },
    });
  }

  const lb = options.lb;
  if (lb) {
    app.route({
      // With HEAD (methods): the worker's answer carries the GET body's length (pool.ts forward).
      method: methods,
      url: '/lb/:endpointId/*',
      // The platform's limit, checked before anything is forwarded: a worker that refused the body
      // unread would break the upload, and the client would get a 502 instead of this 413.
      bodyLimit: limits.lbBodyBytes,
      handler: async (request, reply) => {
        try {
          const { endpointId } = request.params as { endpointId: string };
          await authorizeLb(lb, request.headers.authorization, endpointId);
          // Every /lb request runs the endpoint's code: refused as the v2 API refuses a run (503).
          const refused = lb.refusedBecause?.();
          if (refused !== undefined) return reply.code(503).send({ error: refused });
          const body = Buffer.isBuffer(request.body) ? request.body : undefined;
          if (body && /json/i.test(request.headers['content-type'] ?? '')) assertJsonDepth(body);
          const abort = new AbortController();
          // Only a client that leaves early aborts: creating the abort error on every finished response
          // showed up in profiles.
          reply.raw.on('close', () => {
            if (!reply.raw.writableFinished) abort.abort();
          });
          const headers: Record<string, string> = {};
          const type = request.headers['content-type'];
          if (type) headers['content-type'] = type;
          const response = await lb.forward(endpointId, {
            method: request.method,
            path: lbPath(request.originalUrl),
            headers,
            body,
            signal: abort.signal,
          });
          reply.code(response.statusCode).headers(response.headers);
          return reply.send(response.body);
        } catch (error) {
          const answer = toHttpResponse(error, { requestId: request.id, log, what: `${request.method} lb` });
          return reply
            .code(answer.statusCode)
            .headers(answer.headers ?? {})
            .send(answer.body);
        }
      },
    });
  }

  app.setNotFoundHandler(noRoute);
  // Fastify's own errors (body over the limit, bad content length, ...) keep its status but take our shape.
  app.setErrorHandler((error: { statusCode?: number; message: string }, request, reply) => {
    const statusCode = error.statusCode;
    if (statusCode === undefined || statusCode < 400 || statusCode >= 500) {
      const answer = toHttpResponse(internal('Fastify failed a request', error), {
        requestId: request.id,
        log,
        what: `${request.method} ${request.url.split('?', 1)[0]}`,
      });
      return reply.code(answer.statusCode).send(answer.body);
    }
    const message =
      statusCode === 413
        ? overLimitMessage(request.method, request.url, request.routeOptions.bodyLimit)
        : error.message;
    return reply.code(statusCode).send({ error: message });
  });
  return app;
}

/**
 * Fastify hands a repeated query parameter (`?job_id=a&job_id=b`) over as an array, where the API
 * expects one string: the values are joined with commas, so a repeated job_id lists every job and a
 * repeated wait is a 400 like any other non-integer.
 */
function singleValues(
  query: Record<string, string | string[] | undefined>,
): Record<string, string | undefined> {
  const out: Record<string, string | undefined> = {};
  for (const [key, value] of Object.entries(query ?? {}))
    out[key] = Array.isArray(value) ? value.join(',') : value;
  return out;
}

/**
 * Key (401), the endpoint as the key may see it (404 when unknown or outside its scope), then its
 * kind (400 for a queue endpoint), as the v2 API orders them (core/api.ts).
 */
async function authorizeLb(lb: LbFrontDoor, header: string | undefined, endpointId: string): Promise<void> {
  const record = await authorizeClient(lb.auth, header, endpointId, () => lb.endpoint(endpointId));
  if (record.kind !== 'lb') {
    throw badRequest(
      `Endpoint ${endpointId} is a queue endpoint: call it on /v2/${endpointId}/run or /runsync`,
    );
  }
}

/** What a path segment keeps as it is: RFC 3986's pchar, the rest percent-encoded (`%` among it). */
const notPchar = /[^A-Za-z0-9\-._~!$&'()*+,;=:@]/gu;
const escapeRun = /(?:%[0-9A-Fa-f]{2})+/g;
const utf8 = new TextDecoder('utf-8'); // not fatal: bytes that are not UTF-8 decode to U+FFFD

/**
 * The URL with its path written so that Fastify's router (find-my-way) reads it as the load-balanced
 * runtime does (docs/api.md#load-balanced-endpoints, worker-image/python/ferry/endpoint.py
 * split_path): each segment decoded once as uvicorn decodes a path (a `%` that starts no escape is a
 * `%`, bytes that are not UTF-8 are U+FFFD), then encoded again as it must be. find-my-way would
 * refuse `/items/x%` or `/items/%FF` (a 400 or a 404) where the runtime hands the function `x%` or
 * `\ufffd`, and would not find `/items/a;b` at `/items/a%3Bb`. Decoding a segment at a time keeps an
 * encoded `/` in its parameter, as the runtime does. The query string is left as it came; a path
 * without a `%` needs nothing. Fastify's `rewriteUrl`: `request.originalUrl` keeps what was sent.
 */
export function routableUrl(url: string): string {
  const end = url.search(/[?#]/);
  const path = end === -1 ? url : url.slice(0, end);
  if (!path.startsWith('/') || !path.includes('%')) return url;
  const decode = (segment: string) =>
    segment.replace(escapeRun, (run) =>
      utf8.decode(Uint8Array.from(run.slice(1).split('%'), (hex) => Number.parseInt(hex, 16))),
    );
  const routable = path
    .split('/')
    .map((segment) => decode(segment).replace(notPchar, (char) => encodeURIComponent(char)))
    .join('/');
  return end === -1 ? routable : routable + url.slice(end);
}

/**
 * The path after `/lb/<endpointId>`, taken from the raw URL (never rebuilt from the decoded id, which
 * may be percent-encoded in the URL) and always starting with '/', so it can only name a path on the
 * worker, never another host.
 */
export function lbPath(url: string): string {
  const rest = url.replace(/^\/lb\/[^/?#]*/, '');
  return rest.startsWith('/') ? rest : `/${rest}`;
}
