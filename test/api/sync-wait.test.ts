/**
 * `?wait=` on runsync and status-sync (docs/api.md#waiting): a whole number outside RunPod's
 * 1000–300000 ms is brought into the range, not refused. runpod's Go SDK sends `wait=0` for a 0 s
 * timeout (`wait = timeout * 1000` below 90 s, pkg/sdk/endpoint/endpoint.go) and takes any answer
 * but 200 as a failure, so a 400 broke its RunSync. The API over a real SQLite engine on a fake clock
 * (test/support/memory-api.ts): how long a request is held is read from the clock, not timed.
 */
import { describe, expect, it } from 'vitest';
import { memoryApi } from '../support/memory-api.js';

/** A runsync or status-sync with `?wait=<wait>` on a job that stays queued, once the engine holds it. */
async function held(route: 'runsync' | 'status-sync', wait: string) {
  const { clock, engine, request } = memoryApi();
  const answer =
    route === 'runsync'
      ? request('POST', '/v2/ep/runsync', { wait }, { input: {} })
      : request(
          'POST',
          `/v2/ep/status-sync/${(await engine.submit('ep', { input: {} }, { sync: false })).id}`,
          {
            wait,
          },
        );
  // The engine's only sleep is this request's hold (no worker, no background loop); an answer that
  // came at once (a 400) ends the wait for it too.
  let answered = false;
  void answer.finally(() => {
    answered = true;
  });
  while (clock.pendingSleeps() === 0 && !answered) await new Promise((r) => setImmediate(r));
  return { clock, answer };
}

describe.each(['runsync', 'status-sync'] as const)('%s ?wait= out of range', (route) => {
  it.each([
    ['0', 1_000],
    ['999', 1_000],
    ['300001', 300_000],
    ['99999999999999999999', 300_000],
  ])('wait=%s holds the request %i ms, then answers 200 {id, status}', async (wait, heldMs) => {
    const { clock, answer } = await held(route, wait);
    clock.advance(heldMs - 1);
    expect(clock.pendingSleeps()).toBe(1);
    clock.advance(1);
    expect(await answer).toEqual({
      statusCode: 200,
      body: expect.objectContaining({ id: expect.any(String), status: 'IN_QUEUE' }),
    });
  });

  it.each(['-5', '1.5', 'abc', '1e3'])('wait=%s is a 400 {error} naming wait', async (wait) => {
    const { request, engine } = memoryApi();
    const job = await engine.submit('ep', { input: {} }, { sync: false });
    const answer =
      route === 'runsync'
        ? await request('POST', '/v2/ep/runsync', { wait }, { input: {} })
        : await request('POST', `/v2/ep/status-sync/${job.id}`, { wait });
    expect(answer).toEqual({
      statusCode: 400,
      body: { error: "Query parameter 'wait' must be an integer number of milliseconds" },
    });
  });
});
