/**
 * The local front door's defences against clients that would starve the platform (docs/security.md):
 *
 * - A request that carries a body must present a credential the platform knows before one byte of
 *   the body is read; otherwise it gets 401 and its socket is closed, so unauthenticated uploads cost
 *   no memory whatever their size or speed.
 * - Header, request and idle timeouts close slow or silent sockets; a connection cap bounds sockets.
 * - Client requests are rate limited per API key (per address without a known one): 429 with Retry-After.
 *
 * Which key may call which route is still decided by the API (core/api.ts); this is only the cheap
 * check that keeps bodies of strangers out.
 */
import rateLimit from '@fastify/rate-limit';
import type { FastifyInstance, FastifyRequest, FastifyServerOptions } from 'fastify';
import { credentialOf, hashKey } from '../../auth.js';
import { missingKeyMessage } from '../../errors.js';
import { limits } from '../../limits.js';
import {
  connectionsCheckingIntervalMs,
  defaultServerLimits,
  hasBody,
  type ServerLimits,
} from '../../request-body.js';

/** The server's limits (shared with the AWS agent, core/request-body.ts) and the client rate limit. */
export interface FrontDoorLimits extends ServerLimits {
  rateLimitRequests: number;
  rateLimitWindowMs: number;
}

export const defaultFrontDoorLimits: FrontDoorLimits = {
  ...defaultServerLimits,
  rateLimitRequests: limits.rateLimitRequests,
  rateLimitWindowMs: limits.rateLimitWindowMs,
};

export interface FrontDoorGuard {
  /** Whether this is a credential the platform knows at all (a client key or a worker token). */
  knows(key: string): Promise<boolean>;
  /** Worker credentials poll and stream all the time: the client rate limit does not apply to them. */
  isWorker(key: string): Promise<boolean>;
  limits?: Partial<FrontDoorLimits>;
}

export function frontDoorLimits(guard: FrontDoorGuard | undefined): FrontDoorLimits {
  return { ...defaultFrontDoorLimits, ...guard?.limits };
}

/** Node's own timeouts, set when the server is built. */
export function serverOptions(l: FrontDoorLimits): Partial<FastifyServerOptions> {
  return {
    requestTimeout: l.requestTimeoutMs,
    keepAliveTimeout: l.keepAliveTimeoutMs,
    connectionTimeout: l.socketIdleTimeoutMs,
    http: {
      headersTimeout: l.headersTimeoutMs,
      connectionsCheckingInterval: connectionsCheckingIntervalMs(l),
    },
  } as Partial<FastifyServerOptions>;
}

/** Must be awaited before routes are added: the rate limiter attaches itself to routes as they are added. */
export async function installGuards(app: FastifyInstance, guard: FrontDoorGuard | undefined): Promise<void> {
  const l = frontDoorLimits(guard);
  app.server.maxConnections = l.maxConnections;
  if (!guard) return;

  // Whether the request's credential is one the platform knows, asked once per request: the body
  // check below and the limiter's key both need it, and a created key's answer is a SQLite read.
  const known = new WeakMap<FastifyRequest, Promise<boolean>>();
  const knowsCaller = (request: FastifyRequest): Promise<boolean> => {
    let answer = known.get(request);
    if (!answer) {
      const key = credentialOf(request.headers.authorization);
      answer = key ? guard.knows(key) : Promise.resolve(false);
      known.set(request, answer);
    }
    return answer;
  };

  app.addHook('onRequest', async (request, reply) => {
    if (!hasBody(request.headers)) return;
    if (await knowsCaller(request)) return;
    // Closing the socket after the answer drops the rest of the body unread.
    reply.header('connection', 'close');
    return reply.code(401).send({ error: missingKeyMessage });
  });

  await app.register(rateLimit, {
    global: true,
    max: l.rateLimitRequests,
    timeWindow: l.rateLimitWindowMs,
    keyGenerator: async (request) => {
      // Only a key the platform knows has a bucket of its own (the digest, so the limiter's memory
      // never holds a key); an unknown one counts against its address like no key, or a client
      // trying one made-up key per request would never be limited.
      const key = credentialOf(request.headers.authorization);
      return key && (await knowsCaller(request)) ? `key:${hashKey(key)}` : `ip:${request.ip}`;
    },
    allowList: async (request) => {
      const key = credentialOf(request.headers.authorization);
      return key !== undefined && (await guard.isWorker(key));
    },
    errorResponseBuilder: (_request, context) =>
      Object.assign(
        new Error(
          `Rate limit of ${context.max} requests per ${Math.round(l.rateLimitWindowMs / 1000)} s exceeded; retry in ${Math.ceil(context.ttl / 1000)} s`,
        ),
        { statusCode: 429 },
      ),
  });
}
