/**
 * API keys and worker tokens. Keys are compared as sha256 digests with timingSafeEqual, so neither
 * the comparison time nor a log line reveals a key. A client key cannot call worker routes and a
 * worker token cannot call the client API (docs/architecture.md#worker-protocol).
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { type FerryError, forbidden, notFound, unauthorized } from './errors.js';
import { callerOfToken } from './names.js';
import type { ApiKeyLookup, ApiKeyRecord, EndpointLookup } from './ports.js';

/** Recent digests: every worker and client request hashes its key, a hot spot in profiles. Bounded. */
const recentHashes = new Map<string, string>();

export const hashKey = (key: string): string => {
  let hash = recentHashes.get(key);
  if (hash === undefined) {
    hash = createHash('sha256').update(key, 'utf8').digest('hex');
    if (recentHashes.size >= 1_000) recentHashes.clear();
    recentHashes.set(key, hash);
  }
  return hash;
};

/**
 * The hop from the front door to a load-balanced worker's own HTTP server. That port is reachable by
 * other endpoints' code on the same host (loopback locally, the Docker bridge between ECS tasks), so
 * the worker (ferry/lb.py) answers only requests carrying this header with its secret: the local pool
 * draws one per worker (FERRY_LB_SECRET), the ECS task's init container one per task, in a file the
 * agent and the worker read (FERRY_LB_SECRET_FILE). The front door sends it after checking the key.
 */
export const lbSecretHeader = 'x-ferry-lb-secret';

/** A new secret with a prefix that says what it is (`fy_` API key, `fyw_` worker token). */
export const newSecret = (prefix: 'fy' | 'fyw'): string =>
  `${prefix}_${randomBytes(24).toString('base64url')}`;

/** Accepts `Authorization: Bearer <key>` and the bare `<key>` (docs/api.md#authentication). */
export function credentialOf(header: string | string[] | undefined): string | undefined {
  const value = Array.isArray(header) ? header[0] : header;
  if (!value) return undefined;
  const trimmed = value.trim();
  const match = /^bearer\s+(.+)$/i.exec(trimmed);
  const key = (match ? match[1]! : trimmed).trim();
  return key.length > 0 ? key : undefined;
}

/** Recent digests as bytes, for timingSafeEqual: decoding both on every request showed in profiles. */
const recentDigests = new Map<string, Buffer>();

const digestBytes = (hashHex: string): Buffer => {
  let bytes = recentDigests.get(hashHex);
  if (bytes === undefined) {
    bytes = Buffer.from(hashHex, 'hex');
    if (recentDigests.size >= 1_000) recentDigests.clear();
    recentDigests.set(hashHex, bytes);
  }
  return bytes;
};

export function sameSecret(given: string, expectedHashHex: string): boolean {
  const a = digestBytes(hashKey(given));
  const b = digestBytes(expectedHashHex);
  return a.length === b.length && timingSafeEqual(a, b);
}

/** Who checks worker tokens: whoever issued them (the worker supervisor, core/supervisor.ts). */
export interface WorkerCredentials {
  /**
   * `ok`: the live worker's own token, for this endpoint and worker id; `unknown` (401): no live
   * worker has it; `mismatch` (403): another endpoint's or another worker's token.
   */
  verify(token: string | undefined, endpointId: string, workerId: string): 'ok' | 'unknown' | 'mismatch';
  /** The endpoint of `workerId` while that worker is live; undefined once it is buried or unknown. */
  liveEndpointOf?(workerId: string): string | undefined;
}

export type WorkerAccess = ReturnType<WorkerCredentials['verify']>;

/** What a client key may reach: every app (`{}`), one app, or one app's environment. */
export interface KeyScope {
  app?: string | undefined;
  env?: string | undefined;
  /**
   * Set for a worker's call token (a local HMAC token, core/names.ts, or an AWS call key,
   * core/call-keys.ts): the endpoint whose workers hold it. Such a key may submit to the endpoints of
   * its app and environment and follow the jobs it submitted, nothing more (core/api.ts CallTokenRule,
   * docs/security.md).
   */
  callFrom?: string | undefined;
}

export const scopeOf = (record: Pick<ApiKeyRecord, 'app' | 'env' | 'endpointId'>): KeyScope => ({
  ...(record.app ? { app: record.app, ...(record.env ? { env: record.env } : {}) } : {}),
  ...(record.endpointId ? { callFrom: record.endpointId } : {}),
});

/** The one rule for key scopes (both front doors' APIs, and the AWS load-balanced agent, call it). */
export function scopeCovers(scope: KeyScope, target: { app: string; env: string }): boolean {
  if (scope.app === undefined) return true;
  if (scope.app !== target.app) return false;
  return scope.env === undefined || scope.env === target.env;
}

export function describeScope(scope: KeyScope): string {
  if (scope.app === undefined) return 'all apps';
  return scope.env === undefined ? `app ${scope.app}` : `app ${scope.app}, environment ${scope.env}`;
}

/**
 * A client call to one endpoint: 401 without a known key (before the lookup), then the endpoint as the
 * key may see it (endpointWithinScope). The local /lb front door calls this before anything is read or written.
 */
export async function authorizeClient<T extends { app: string; env: string }>(
  auth: Authenticator,
  header: string | string[] | undefined,
  asked: string,
  lookup: () => Promise<T | undefined>,
): Promise<T> {
  const scope = await auth.clientKeyScope(credentialOf(header));
  if (!scope) throw unauthorized();
  return endpointWithinScope(scope, asked, await lookup());
}

/**
 * The 403 API Gateway answers itself when a known key calls a route its policy leaves out (a scoped
 * key or a call key on the management API, functions/authorizer.ts), a gateway response with no
 * request to read: the local API's own 403 (authorizeOperator) says the same in more words.
 */
export const outOfScopeMessage =
  "This API key's scope (an app, or an app environment) does not cover this route";

/**
 * The 404 for an endpoint `asked` (its id, or `<app>/<env>/<name>`) that the key cannot see. A scoped
 * key gets the same answer for an endpoint outside its scope as for one that does not exist, so it
 * cannot learn which endpoints other apps have (docs/security.md#api-key-scopes); its message says
 * the scope, which the caller knows already. A key of every app gets the plain not-found.
 */
export function endpointNotFound(scope: KeyScope, asked: string): FerryError {
  if (scope.app === undefined) return notFound(`Endpoint ${asked} not found`);
  return notFound(`Endpoint ${asked} not found within this API key's scope (${describeScope(scope)})`);
}

/**
 * The one rule for an endpoint a client key names (both front doors: core/api.ts, /lb): the record
 * when there is one and the key's scope covers it, else endpointNotFound. Worker routes pass `{}`.
 */
export function endpointWithinScope<T extends { app: string; env: string }>(
  scope: KeyScope,
  asked: string,
  record: T | undefined,
): T {
  if (record !== undefined && scopeCovers(scope, record)) return record;
  throw endpointNotFound(scope, asked);
}

/**
 * The management API (core/manage.ts) spans apps: its endpoint list, and every endpoint's jobs with
 * their inputs and outputs, logs, workers and metrics. It is the operator's, so it takes a key of
 * every app: 401 without a known key, 403 for a scoped key and for a worker's call token (which is
 * one). On AWS the authorizer's policy already leaves /manage/v1 out for scoped keys; the API checks
 * again, like every client route.
 */
export async function authorizeOperator(
  auth: Authenticator,
  header: string | string[] | undefined,
): Promise<void> {
  const scope = await auth.clientKeyScope(credentialOf(header));
  if (!scope) throw unauthorized();
  if (scope.app !== undefined || scope.callFrom !== undefined) {
    throw forbidden(
      `This API key (${describeScope(scope)}) may not read the management API, which spans every app; use a key of every app (ferry keys create without --app)`,
    );
  }
}

export interface Authenticator {
  isClientKey(key: string | undefined): Promise<boolean>;
  /** The key's scope, or undefined when it is not a client key. */
  clientKeyScope(key: string | undefined): Promise<KeyScope | undefined>;
  /** Whether `key` opens the worker routes of this endpoint for this worker id. */
  workerAccess(key: string | undefined, endpointId: string, workerId: string): Promise<WorkerAccess>;
}

/**
 * Client keys live hashed in the ControlStore (`ferry keys create`); `staticKeyHashes` adds keys
 * given by configuration (FERRY_API_KEY). Worker tokens are checked by whoever issued them; without
 * `workers`, no worker token is valid (the API Lambda serves client routes only).
 */
export class KeyAuthenticator implements Authenticator {
  private readonly cache = new Map<string, { scope: KeyScope | undefined; untilMs: number }>();

  constructor(
    private readonly options: {
      /** Key records; with getEndpoint, also workers' call tokens (their endpoint's app and env). */
      control?: ApiKeyLookup & Partial<EndpointLookup>;
      staticKeyHashes?: string[];
      workers?: WorkerCredentials;
      /**
       * Verifies workers' call tokens (core/names.ts): each is a client key scoped to its worker's
       * endpoint's app and environment while `workers` counts that worker live. Without it (or
       * without `workers`) no call token is valid.
       */
      callTokenSecret?: string;
      /**
       * How long a key lookup is remembered (5 s by default); revocation takes effect after at most
       * this long. 0: every check reads the store (the local platform's, where a lookup is one
       * indexed SQLite read and `ferry keys revoke` writes from another process).
       */
      cacheMs?: number;
    },
  ) {}

  async isClientKey(key: string | undefined): Promise<boolean> {
    return (await this.clientKeyScope(key)) !== undefined;
  }

  async clientKeyScope(key: string | undefined): Promise<KeyScope | undefined> {
    if (!key) return undefined;
    const caller = callerOfToken(this.options.callTokenSecret, key);
    if (caller !== undefined) {
      // A call token lives as long as its worker: a buried worker's token is no key at all.
      const endpointId = this.options.workers?.liveEndpointOf?.(caller);
      const own =
        endpointId === undefined ? undefined : await this.options.control?.getEndpoint?.(endpointId);
      return own ? { app: own.app, env: own.env, callFrom: own.id } : undefined;
    }
    // Keys given by configuration (FERRY_API_KEY) are the operator's: every app.
    if ((this.options.staticKeyHashes ?? []).some((hash) => sameSecret(key, hash))) return {};
    if (!this.options.control) return undefined;
    const hash = hashKey(key);
    const cacheMs = this.options.cacheMs ?? 5_000;
    const now = Date.now();
    const cached = cacheMs > 0 ? this.cache.get(hash) : undefined;
    if (cached && cached.untilMs > now) return cached.scope;
    const record = await this.options.control.findApiKeyByHash(hash);
    const scope = record !== undefined && sameSecret(key, record.hash) ? scopeOf(record) : undefined;
    if (cacheMs <= 0) return scope;
    if (this.cache.size > 10_000) this.cache.clear();
    this.cache.set(hash, { scope, untilMs: now + cacheMs });
    return scope;
  }

  async workerAccess(key: string | undefined, endpointId: string, workerId: string): Promise<WorkerAccess> {
    return this.options.workers?.verify(key, endpointId, workerId) ?? 'unknown';
  }
}
