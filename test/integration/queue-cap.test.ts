/**
 * The queue cap on AWS (EngineDeps.queued): SQS keeps the message of a cancelled or purged job until
 * a worker receives and drops it, and the scaler starts no worker for an endpoint whose records say
 * nothing is queued, so those messages can sit in the queue's depth for the queue's whole retention
 * (7 days). ApproximateNumberOfMessages counts every message available for retrieval
 * (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_GetQueueAttributes.html);
 * the engine believes the job store's own count when the depth alone would refuse a submit.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LocalChangeFeed } from '../../core/changes.js';
import { systemClock } from '../../core/clock.js';
import { type EngineDeps, JobEngine } from '../../core/engine.js';
import { FerryError } from '../../core/errors.js';
import { type AwsFixture, startAwsFixture } from '../support/emulators.js';

let aws: AwsFixture;
beforeAll(async () => {
  aws = await startAwsFixture({ ttl: false });
});
afterAll(async () => {
  await aws?.stop();
});

const cap = 5;
const engineOf = (extra: Partial<EngineDeps>) => {
  const jobs = aws.jobs();
  return new JobEngine({
    jobs,
    queue: aws.queue(),
    workers: aws.workers(),
    changes: new LocalChangeFeed(),
    clock: systemClock,
    settings: { queueCapJobs: cap },
    ...extra,
  });
};

/** The code of what a submit threw, or 'ok'. */
async function submitAnswer(engine: JobEngine, endpointId: string): Promise<string> {
  try {
    await engine.submit(endpointId, { input: { n: 1 } }, { sync: false });
    return 'ok';
  } catch (error) {
    if (FerryError.is(error)) return error.code;
    throw error;
  }
}

describe('the queue cap counts queued jobs, not the messages of ended ones', () => {
  it('admits a submit after a purge left the queue full of messages, and still refuses a full queue', async () => {
    const endpointId = `cap${Date.now()}`;
    const jobs = aws.jobs();
    const engine = engineOf({ jobs, queued: jobs });
    for (let i = 0; i < cap; i++) expect(await submitAnswer(engine, endpointId)).toBe('ok');
    // Full: the depth and the records agree.
    expect(await submitAnswer(engineOf({ jobs, queued: jobs }), endpointId)).toBe('too_many_requests');

    expect((await engine.purge(endpointId)).removed).toBe(cap);
    // The purged jobs' messages are still in SQS: the depth alone says the queue is full.
    expect((await aws.queue().depth(endpointId)).visible).toBe(cap);
    expect(await submitAnswer(engineOf({ jobs }), endpointId)).toBe('too_many_requests');
    // The store's count says nothing is queued: a fresh engine (no allowance left from earlier
    // counts) admits the submit.
    expect(await submitAnswer(engineOf({ jobs, queued: jobs }), endpointId)).toBe('ok');
  });

  it('counts queued jobs of both priorities: low-priority jobs fill it too', async () => {
    const endpointId = `cap${Date.now()}low`;
    const jobs = aws.jobs();
    const engine = engineOf({ jobs, queued: jobs });
    for (let i = 0; i < cap; i++)
      await engine.submit(endpointId, { input: { i }, policy: { lowPriority: true } }, { sync: false });
    // None of them is urgent, and the cap holds all the same.
    expect(await jobs.queuedAtMost(endpointId, Date.now())).toEqual({ all: cap, urgent: 0 });
    expect(await submitAnswer(engineOf({ jobs, queued: jobs }), endpointId)).toBe('too_many_requests');
  });
});
