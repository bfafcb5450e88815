/**
 * purge-queue inside the API's longest wait (ApiOptions.maxWaitMs): on AWS the route must answer
 * within API Gateway's integration timeout, where a deep backlog's purge used to run past it and
 * answer 504 with no count. The API hands maxWaitMs to Engine.purge as its budget (the engine's
 * rules are in test/unit/engine.test.ts); the embedded platform sets none and purges all at once.
 */
import { describe, expect, it } from 'vitest';
import { memoryApi } from '../support/memory-api.js';

async function apiOver(maxWaitMs: number | undefined, queued: number) {
  const { engine, request } = memoryApi(maxWaitMs === undefined ? {} : { maxWaitMs });
  for (let i = 0; i < queued; i++) await engine.submit('ep', { input: { i } }, { sync: false });
  const purge = async () => {
    const answer = await request('POST', '/v2/ep/purge-queue');
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
