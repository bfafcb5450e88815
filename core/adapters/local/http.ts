/**
 * The local front door: Fastify on loopback (or --host), forwarding `/v2/*` to the framework-free
 * V2Api. Bodies reach the API as raw bytes whatever their content type, because RunPod workers post
 * JSON labelled `application/x-www-form-urlencoded` and each route has its own size limit.
 */
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import type { ApiRequest, V2Api } from '../../api.js';
import { type Authenticator, credentialOf } from '../../auth.js';
import { errorBody, httpStatus, unauthorized } from '../../errors.js';
import { limits } from '../../limits.js';
import type { ManageApi } from '../../manage.js';
import { registerConsole } from './console.js';
import type { LbRequest, LbResponse } from './pool.js';

/** Load-balanced endpoints: `/lb/<endpointId>/<route path>`, API key required like every endpoint. */
export interface LbFrontDoor {
  auth: Authenticator;
  forward(endpointId: string, request: LbRequest): Promise<LbResponse>;
}

/** Above every route limit, so the API itself answers 413/400 with the route's own message. */
const bodyLimitBytes = limits.runsyncBodyBytes + 1024 * 1024;

export function createHttpServer(options: {
  api: V2Api;
  lb?: LbFrontDoor;
  /** The management API at /manage/v1 (core/manage.ts). */
  manage?: ManageApi;
  /** Serve the web console at /console from this folder. */
  consoleDir?: string;
}): FastifyInstance {
  const app = Fastify({
    logger: false,
    bodyLimit: bodyLimitBytes,
    forceCloseConnections: true,
    // A URL that does not percent-decode (`/status/%E0%A4%A`) gets the API's one error shape too.
    frameworkErrors: (error, _request, reply) => {
      (reply as FastifyReply).code(400).send({ error: `Bad request: ${error.message}` });
    },
  });
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer', bodyLimit: bodyLimitBytes }, (_req, body, done) => {
    done(null, body);
  });

  const forward = async (request: FastifyRequest, reply: FastifyReply) => {
    const abort = new AbortController();
    // Only a client that leaves early aborts: creating the abort error on every finished response
    // showed up in profiles.
    reply.raw.on('close', () => {
      if (!reply.raw.writableFinished) abort.abort();
    });
    const [path] = request.url.split('?', 1);
    const apiRequest: ApiRequest = {
      method: request.method,
      path: path!,
      query: singleValues(request.query as Record<string, string | string[] | undefined>),
      headers: request.headers,
      body: Buffer.isBuffer(request.body) ? request.body : undefined,
      signal: abort.signal,
    };
    const response = await (apiRequest.path.startsWith('/manage/') && options.manage
      ? options.manage
      : options.api
    ).handle(apiRequest);
    reply.code(response.statusCode);
    if (response.statusCode === 204) return reply.send();
    return reply.type('application/json').send(JSON.stringify(response.body));
  };
  app.route({ method: ['GET', 'POST', 'PUT', 'DELETE', 'PATCH'], url: '/v2/*', handler: forward });
  if (options.manage)
    app.route({ method: ['GET', 'POST', 'PUT', 'DELETE', 'PATCH'], url: '/manage/v1/*', handler: forward });
  if (options.consoleDir) registerConsole(app, options.consoleDir);

  const lb = options.lb;
  if (lb) {
    app.route({
      method: ['GET', 'POST', 'PUT', 'DELETE', 'PATCH'],
      url: '/lb/:endpointId/*',
      handler: async (request, reply) => {
        try {
          if (!(await lb.auth.isClientKey(credentialOf(request.headers.authorization)))) throw unauthorized();
          const { endpointId } = request.params as { endpointId: string };
          const prefix = `/lb/${endpointId}`;
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
            path: request.url.slice(prefix.length) || '/',
            headers,
            body: Buffer.isBuffer(request.body) ? request.body : undefined,
            signal: abort.signal,
          });
          reply.code(response.statusCode).headers(response.headers);
          return reply.send(response.body);
        } catch (error) {
          return reply.code(httpStatus(error) === 500 ? 502 : httpStatus(error)).send(errorBody(error));
        }
      },
    });
  }

  app.setNotFoundHandler((request, reply) => {
    reply.code(404).send({ error: `No route for ${request.method} ${request.url.split('?', 1)[0]}` });
  });
  // Fastify's own errors (body over the limit, bad content length, ...) keep its status but take our shape.
  app.setErrorHandler((error: { statusCode?: number; message: string }, _request, reply) => {
    const statusCode =
      error.statusCode && error.statusCode >= 400 && error.statusCode < 500 ? error.statusCode : 500;
    const message =
      statusCode === 413
        ? `Request body is over the ${limits.runsyncBodyBytes}-byte limit`
        : statusCode < 500
          ? error.message
          : 'Internal error';
    reply.code(statusCode).send({ error: message });
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
