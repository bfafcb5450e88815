/**
 * How long `/stream` holds a request with no `?wait=` (limits.streamWaitMs, docs/api.md#waiting).
 * runpod-python's `Job.stream()` sends each GET with a 10 s read timeout (requests' `timeout=10`), so
 * a hold near 10 s ends in a ReadTimeout whenever a job waits in the queue or between two chunks that
 * long, and a chunk handed out to a request the client gave up on is lost (each chunk goes out once).
 * runpod-sdk (JavaScript) polls with no sleep between calls, so the hold must not be short either.
 * The API over a real SQLite engine on a fake clock (test/support/memory-api.ts).
 */
import { describe, expect, it } from 'vitest';
import { memoryApi } from '../support/memory-api.js';

/** runpod-python's read timeout on the GET of `Job.stream()`. */
const runpodPythonReadTimeoutMs = 10_000;

/** A GET of /stream with no ?wait= on a job that stays queued, once the engine holds it. */
async function heldStream() {
  const { clock, engine, request } = memoryApi();
  const job = await engine.submit('ep', { input: {} }, { sync: false });
  const answer = request('GET', `/v2/ep/stream/${job.id}`);
  // The engine's only sleep is this request's hold (no worker, no background loop).
  while (clock.pendingSleeps() === 0) await new Promise((r) => setImmediate(r));
  return { clock, answer, jobId: job.id };
}

describe('/stream with no ?wait=', () => {
  it("answers within half of runpod-python's 10 s read timeout, with stream: []", async () => {
    const { clock, answer, jobId } = await heldStream();
    clock.advance(runpodPythonReadTimeoutMs / 2);
    // The hold's sleep was woken by that advance: the answer is on its way, not still held.
    expect(clock.pendingSleeps()).toBe(0);
    expect(await answer).toEqual({ statusCode: 200, body: { id: jobId, status: 'IN_QUEUE', stream: [] } });
  });

  it('still holds the request for a second, so runpod-sdk, which polls with no sleep, does not spin', async () => {
    const { clock, answer } = await heldStream();
    clock.advance(999);
    expect(clock.pendingSleeps()).toBe(1);
    clock.advance(runpodPythonReadTimeoutMs);
    expect((await answer).statusCode).toBe(200);
  });
});
