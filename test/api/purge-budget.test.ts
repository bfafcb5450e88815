/**
 * purge-queue inside the API's longest wait (ApiOptions.maxWaitMs): on AWS the route must answer
 * within API Gateway's integration timeout, where a deep backlog's purge used to run past it and
 * answer 504 with no count. The API hands maxWaitMs to Engine.purge as its budget (the engine's
 * rules are in test/unit/engine.test.ts); the embedded platform sets none and purges all at once.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { openLocalDatabase } from '../../core/adapters/local/sqlite.js';
import { V2Api } from '../../core/api.js';
import { FakeClock } from '../../core/clock.js';
import type { ControlStore, EndpointRecord } from '../../core/ports.js';
import { localEngine } from '../support/localEngine.js';

const allowClients = {
  isClientKey: async () => true,
  clientKeyScope: async () => ({}),
  workerAccess: async () => 'unknown' as const,
};
const control = {
  getEndpoint: async (id: string) => ({ id, app: 'a', env: 'e', name: 'n', kind: 'queue' }) as EndpointRecord,
} as unknown as ControlStore;

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (closers.length > 0) await closers.pop()!();
});

async function apiOver(maxWaitMs: number | undefined, queued: number) {
  const clock = new FakeClock();
  const db = openLocalDatabase(':memory:', { clock });
  closers.push(() => db.close());
  const engine = localEngine(db, clock, {});
  for (let i = 0; i < queued; i++) await engine.submit('ep', { input: { i } }, { sync: false });
  const api = new V2Api({
    engine,
    control,
    auth: allowClients,
    ...(maxWaitMs === undefined ? {} : { maxWaitMs }),
  });
  const purge = async () => {
    const answer = await api.handle({
      method: 'POST',
      path: '/v2/ep/purge-queue',
      query: {},
      headers: { authorization: 'Bearer k' },
      body: undefined,
    });
    expect(answer.statusCode).toBe(200);
    return answer.body;
  };
  return { purge };
}

describe('purge-queue and the API wait bound', () => {
  it('with a spent wait bound, answers 200 in_progress with what it removed; the next call goes on', async () => {
    const { purge } = await apiOver(0, 700);
    expect(await purge()).toEqual({ removed: 500, status: 'in_progress' });
    expect(await purge()).toEqual({ removed: 200, status: 'completed' });
  });

  it('with no bound (the embedded platform), removes the whole backlog in one call', async () => {
    const { purge } = await apiOver(undefined, 700);
    expect(await purge()).toEqual({ removed: 700, status: 'completed' });
  });
});
