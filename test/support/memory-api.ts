/**
 * The v2 API over a real SQLite engine in memory on a fake clock, for tests of one route's rules
 * without a server: every key is a client's, and every endpoint id names one queue endpoint. The
 * database closes when the test ends.
 */
import { onTestFinished } from 'vitest';
import { openLocalDatabase } from '../../core/adapters/local/sqlite.js';
import { type ApiOptions, V2Api } from '../../core/api.js';
import { FakeClock } from '../../core/clock.js';
import type { ControlStore, EndpointRecord } from '../../core/ports.js';
import { localEngine } from './localEngine.js';

const everyKeyAClient = {
  isClientKey: async () => true,
  clientKeyScope: async () => ({}),
  workerAccess: async () => 'unknown' as const,
};
const oneQueueEndpoint = {
  getEndpoint: async (id: string) => ({ id, app: 'a', env: 'e', name: 'n', kind: 'queue' }) as EndpointRecord,
} as unknown as ControlStore;

export function memoryApi(options: Partial<ApiOptions> = {}) {
  const clock = new FakeClock();
  const db = openLocalDatabase(':memory:', { clock });
  onTestFinished(() => db.close());
  const engine = localEngine(db, clock, {});
  const api = new V2Api({ engine, control: oneQueueEndpoint, auth: everyKeyAClient, ...options });
  /** A client's request, with no body unless given one (sent as JSON). */
  const request = (method: string, path: string, query: Record<string, string> = {}, body?: unknown) =>
    api.handle({
      method,
      path,
      query,
      headers: { authorization: 'Bearer k' },
      body: body === undefined ? undefined : Buffer.from(JSON.stringify(body)),
    });
  return { clock, engine, api, request };
}
