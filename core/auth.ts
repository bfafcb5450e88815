/**
 * API keys and worker tokens. Keys are compared as sha256 digests with timingSafeEqual, so neither
 * the comparison time nor a log line reveals a key. A client key cannot call worker routes and a
 * worker token cannot call the client API (docs/architecture.md#worker-protocol).
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { ControlStore } from './ports.js';

export const hashKey = (key: string): string => createHash('sha256').update(key, 'utf8').digest('hex');

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

export function sameSecret(given: string, expectedHashHex: string): boolean {
  const a = Buffer.from(hashKey(given), 'hex');
  const b = Buffer.from(expectedHashHex, 'hex');
  return a.length === b.length && timingSafeEqual(a, b);
}

/** Who checks worker tokens: whoever issued them (the worker supervisor, core/supervisor.ts). */
export interface WorkerCredentials {
  /**
   * `ok`: the live worker's own token, for this endpoint and worker id; `unknown` (401): no live
   * worker has it; `mismatch` (403): another endpoint's or another worker's token.
   */
  verify(token: string | undefined, endpointId: string, workerId: string): 'ok' | 'unknown' | 'mismatch';
}

export type WorkerAccess = ReturnType<WorkerCredentials['verify']>;

export interface Authenticator {
  isClientKey(key: string | undefined): Promise<boolean>;
  /** Whether `key` opens the worker routes of this endpoint for this worker id. */
  workerAccess(key: string | undefined, endpointId: string, workerId: string): Promise<WorkerAccess>;
}

/**
 * Client keys live hashed in the ControlStore (`ferry keys create`); `staticKeyHashes` adds keys
 * given by configuration (FERRY_API_KEY). Worker tokens are checked by whoever issued them; without
 * `workers`, no worker token is valid (the API Lambda serves client routes only).
 */
export class KeyAuthenticator implements Authenticator {
  private readonly cache = new Map<string, { ok: boolean; untilMs: number }>();

  constructor(
    private readonly options: {
      control?: ControlStore;
      staticKeyHashes?: string[];
      workers?: WorkerCredentials;
      /** How long a key lookup is remembered; revocation takes effect after at most this long. */
      cacheMs?: number;
    },
  ) {}

  async isClientKey(key: string | undefined): Promise<boolean> {
    if (!key) return false;
    if ((this.options.staticKeyHashes ?? []).some((hash) => sameSecret(key, hash))) return true;
    if (!this.options.control) return false;
    const hash = hashKey(key);
    const cached = this.cache.get(hash);
    const now = Date.now();
    if (cached && cached.untilMs > now) return cached.ok;
    const record = await this.options.control.findApiKeyByHash(hash);
    const ok = record !== undefined && sameSecret(key, record.hash);
    if (this.cache.size > 10_000) this.cache.clear();
    this.cache.set(hash, { ok, untilMs: now + (this.options.cacheMs ?? 5_000) });
    return ok;
  }

  async workerAccess(key: string | undefined, endpointId: string, workerId: string): Promise<WorkerAccess> {
    return this.options.workers?.verify(key, endpointId, workerId) ?? 'unknown';
  }
}
