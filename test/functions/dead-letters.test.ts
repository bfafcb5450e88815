/**
 * The sweeper's dead-letter reads (functions/wiring.ts sqsDeadLetters) against SQS's documented
 * receive behaviour (test/support/sampled-sqs.ts): a short poll samples a subset of the servers and
 * may answer empty while messages wait; a long poll does not. fauxqs answers short polls from the
 * whole queue, so test/integration/sweeper-orphans.test.ts cannot show the difference.
 */
import { describe, expect, it } from 'vitest';
import { sqsDeadLetters } from '../../functions/wiring.js';
import { sampledSqs } from '../support/sampled-sqs.js';

const letter = (jobId: string) => JSON.stringify({ jobId, endpointId: 'ep', lowPriority: false });

describe('reading dead letters', () => {
  it('takes a dead letter that short polls keep missing, in the one run', async () => {
    const sqs = sampledSqs(); // every short poll samples servers without the letter
    sqs.put('ferry-ep-dlq', letter('job-u'));
    sqs.put('ferry-ep-low-dlq', letter('job-l'));
    const dead = sqsDeadLetters(sqs.client, 'ferry-');
    const startMs = sqs.now();
    const taken = await dead.take('ep', 100);
    expect(taken.map((t) => t.jobId)).toEqual(['job-u', 'job-l']);
    for (const t of taken) await t.remove();
    expect(sqs.count('ferry-ep-dlq') + sqs.count('ferry-ep-low-dlq')).toBe(0);
    // The reads were long polls, and none waited: each stopped once it had what the count said.
    expect(sqs.requests.every((r) => r.waitSec >= 1)).toBe(true);
    expect(sqs.now()).toBe(startMs);
  });

  it('ends a read whose count said more than there is on the long poll’s empty answer, after its 1 s', async () => {
    // The count lags: it still says 3 where one letter is left.
    const sqs = sampledSqs({ approximate: (_queue, visible) => (visible > 0 ? 3 : 0) });
    sqs.put('ferry-ep-dlq', letter('job-1'));
    const startMs = sqs.now();
    const taken = await sqsDeadLetters(sqs.client, 'ferry-').take('ep', 100);
    expect(taken.map((t) => t.jobId)).toEqual(['job-1']);
    expect(sqs.requests.map((r) => r.got)).toEqual([1, 0]);
    expect(sqs.now() - startMs).toBe(1_000);
  });

  it('takes up to max, across receives of 10, and leaves the rest for the next run', async () => {
    const sqs = sampledSqs();
    for (let i = 0; i < 25; i++) sqs.put('ferry-ep-dlq', letter(`job-${i}`));
    const taken = await sqsDeadLetters(sqs.client, 'ferry-').take('ep', 12);
    expect(taken.map((t) => t.jobId)).toEqual(Array.from({ length: 12 }, (_, i) => `job-${i}`));
  });

  it('spends no wait on a dead-letter queue whose count says it is empty', async () => {
    const sqs = sampledSqs();
    const startMs = sqs.now();
    expect(await sqsDeadLetters(sqs.client, 'ferry-').take('ep', 100)).toEqual([]);
    // No receive at all, so no long poll's 1-second wait: an empty queue costs one quick call.
    expect(sqs.requests).toEqual([]);
    expect(sqs.now()).toBe(startMs);
  });
});
