/**
 * The local front door's defences against clients that would starve the platform (docs/security.md):
 *
 * - A request that carries a body must present a credential the platform knows before one byte of
 *   the body is read; otherwise it gets 401 and its socket is closed, so unauthenticated uploads cost
 *   no memory whatever their size or speed.
 * - Header, request and idle timeouts close slow or silent sockets; a connection cap bounds sockets.
 * - Requests are rate limited per API key (per address without a known one) and, with a limit of
 *   their own, per worker token: 429 with Retry-After.
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
import { rateLimitMessage, WorkerWindows } from '../../worker-rate.js';

/** The server's limits (shared with the AWS agent, core/request-body.ts) and the rate limits. */
export interface FrontDoorLimits extends ServerLimits {
  rateLimitRequests: number;
  /** Per worker token, in the same window: workers poll and stream all the time (core/limits.ts). */
  workerRateLimitRequests: number;
  rateLimitWindowMs: number;
}

export const defaultFrontDoorLimits: FrontDoorLimits = {
  ...defaultServerLimits,
  rateLimitRequests: limits.rateLimitRequests,
  workerRateLimitRequests: limits.workerRateLimitRequests,
  rateLimitWindowMs: limits.rateLimitWindowMs,
};

/** Whose a credential is: a live worker's token, a client key (a call token too), or none the platform knows. */
export type Caller = 'worker' | 'client' | undefined;

export interface FrontDoorGuard {
  callerOf(key: string): Promise<Caller>;
  limits?: Partial<FrontDoorLimits>;
  /**
   * The worker tokens' windows (workerWindowsOf these limits), when the API behind counts in them
   * too (ApiOptions.workerWindows: a job-log batch by its reads); default, windows of their own.
   */
  workers?: WorkerWindows;
}

export function frontDoorLimits(guard: FrontDoorGuard | undefined): FrontDoorLimits {
  return { ...defaultFrontDoorLimits, ...guard?.limits };
}

/** The worker rate limit's windows (core/worker-rate.ts) of these limits, on `now`'s time. */
export function workerWindowsOf(l: FrontDoorLimits, now?: () => number): WorkerWindows {
  return new WorkerWindows(l.workerRateLimitRequests, l.rateLimitWindowMs, now);
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

  // Whose the request's credential is, asked once per request: the body check, the worker limit
  // and the client limiter all need it, and a created key's answer is a SQLite read.
  const callers = new WeakMap<FastifyRequest, Promise<Caller>>();
  const callerOf = (request: FastifyRequest): Promise<Caller> => {
    let answer = callers.get(request);
    if (!answer) {
      const key = credentialOf(request.headers.authorization);
      answer = key ? guard.callerOf(key) : Promise.resolve(undefined);
      callers.set(request, answer);
    }
    return answer;
  };

  // A pool at full speed stays far below the worker limit; one endpoint's code looping on its
  // worker routes cannot take the whole platform (docs/security.md). Kept beside the client limiter
  // (@fastify/rate-limit) rather than in it: a worker request there cost about 15 µs more (its store
  // round, its x-ratelimit headers), on the path every job takes.
  const workers = guard.workers ?? workerWindowsOf(l);
  app.addHook('onRequest', async (request, reply) => {
    const key = credentialOf(request.headers.authorization);
    const caller = key === undefined ? undefined : await callerOf(request);
    if (caller === 'worker') {
      const refused = workers.refusal(hashKey(key!), request.url);
      if (refused === undefined) return;
      reply.header('retry-after', String(refused.retryAfterSec));
      return reply.code(429).send({ error: refused.error });
    }
    if (caller !== undefined || !hasBody(request.headers)) return;
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
      // trying one made-up key per request would never be limited. Worker tokens have their own
      // limit (WorkerWindows, above) and no bucket here.
      const key = credentialOf(request.headers.authorization);
      const caller = key === undefined ? undefined : await callerOf(request);
      if (caller === 'worker') return 'worker';
      return caller === 'client' ? `key:${hashKey(key!)}` : `ip:${request.ip}`;
    },
    allowList: (_request, bucket) => bucket === 'worker',
    errorResponseBuilder: (_request, context) =>
      Object.assign(new Error(rateLimitMessage(context.max, l.rateLimitWindowMs, context.ttl)), {
        statusCode: 429,
      }),
  });
}
