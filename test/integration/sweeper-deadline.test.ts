/**
 * The sweeper keeps within its Lambda timeout, on DynamoDB Local and fauxqs with a fake clock that
 * every DynamoDB request moves on, as real requests spend a run's time. Lambda stops an invocation at
 * its timeout wherever it is (https://docs.aws.amazon.com/lambda/latest/dg/configuration-timeout.html),
 * and then the run's `finally` (its webhooks, nudges, stop signals) never ran: a run starts no job,
 * page or message once the time the context leaves it
 * (getRemainingTimeInMillis, https://docs.aws.amazon.com/lambda/latest/dg/nodejs-context.html) is
 * down to what its `finally` needs, and the next run goes on.
 */
import { CreateQueueCommand, GetQueueAttributesCommand, SendMessageCommand } from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { FakeClock } from '../../core/clock.js';
import type { Job } from '../../core/job.js';
import { createSweeper, sweepTiming } from '../../functions/sweeper.js';
import { buildPlatform, type Platform, parseFunctionEnv } from '../../functions/wiring.js';
import { makeJob } from '../contract/helpers.js';
import {
  type AwsFixture,
  dynamoClientFor,
  s3ClientFor,
  sqsClientFor,
  startAwsFixture,
} from '../support/emulators.js';

let fixture: AwsFixture;
let platform: Platform;
const clock = new FakeClock();
/** What each DynamoDB request of the sweeper's platform costs on the fake clock. */
const requestMs = 100;
const clients: { destroy(): void }[] = [];
/** Called after each DynamoDB request of the sweeper's platform, with the command's name. */
let afterRequest: ((command: string) => void) | undefined;

beforeAll(async () => {
  fixture = await startAwsFixture({ ttl: false });
  const dynamo = dynamoClientFor(fixture.dynamo.endpoint);
  dynamo.middlewareStack.add(
    (next, context) => async (args) => {
      clock.advance(requestMs);
      const result = await next(args);
      afterRequest?.(String(context.commandName));
      return result;
    },
    { step: 'initialize', name: 'spendTime' },
  );
  const lambdaClients = {
    dynamo,
    sqs: sqsClientFor(fixture.fauxqs.endpoint),
    s3: s3ClientFor(fixture.fauxqs.endpoint),
  };
  clients.push(...Object.values(lambdaClients));
  platform = buildPlatform({
    env: parseFunctionEnv({
      FERRY_JOBS_TABLE: fixture.tables.jobs,
      FERRY_CHUNKS_TABLE: fixture.tables.chunks,
      FERRY_CONTROL_TABLE: fixture.tables.control,
      FERRY_WORKERS_TABLE: fixture.tables.workers,
      FERRY_BUCKET: fixture.bucket,
      FERRY_QUEUE_NAME_PREFIX: 'ferry-',
      FERRY_WEBHOOK_QUEUE_URL: fixture.webhookQueueUrl,
    }),
    clients: lambdaClients,
    clock,
  });
}, 120_000);

afterAll(async () => {
  for (const c of clients) c.destroy();
  await fixture?.stop();
});

async function webhooksQueued(): Promise<number> {
  const { Attributes } = await fixture.sqs.send(
    new GetQueueAttributesCommand({
      QueueUrl: fixture.webhookQueueUrl,
      AttributeNames: ['ApproximateNumberOfMessages'],
    }),
  );
  return Number(Attributes?.ApproximateNumberOfMessages ?? 0);
}

/**
 * One run whose Lambda times out `timeoutMs` after it starts, on the fake clock; what it answers,
 * and the time it had left when it returned.
 */
async function sweepWithin(timeoutMs: number, runOut?: (command: string) => boolean) {
  let endsAt = clock.now() + timeoutMs;
  // The run's time is spent at once once `runOut` says so: what the `finally` keeps is all it has.
  afterRequest = (command) => {
    if (runOut?.(command)) endsAt = Math.min(endsAt, clock.now() + sweepTiming.finishMs);
  };
  const log = vi.spyOn(console, 'log').mockImplementation(() => {});
  log.mockClear();
  const report = await createSweeper(
    () => platform,
    () => clock.now(),
  )(undefined, { getRemainingTimeInMillis: () => endsAt - clock.now() });
  const line = JSON.parse(String(log.mock.calls.at(-1)?.[0])) as { outOfTime: boolean };
  return { report, leftMs: endsAt - clock.now(), outOfTime: line.outOfTime };
}

describe('the sweeper keeps within its time', () => {
  it('a run short of time starts no job past its deadline, still settles its webhooks, and the next run does the rest', async () => {
    const now = clock.now();
    // Running past their execution timeout (each move a webhook and a stop signal), and expired.
    const overrun: Job[] = Array.from({ length: 4 }, (_, i) =>
      makeJob({
        id: `deadline-overrun-${i}`,
        endpointId: 'deadline00000',
        createdAt: now - 3_600_000,
        status: 'IN_PROGRESS',
        workerId: 'w1',
        attempt: 1,
        startedAt: now - 3_000_000,
        leaseUntil: now + 3_600_000,
        webhook: 'https://hooks.example.com/ferry',
      }),
    );
    const expired: Job[] = Array.from({ length: 4 }, (_, i) =>
      makeJob({
        id: `deadline-expired-${i}`,
        endpointId: 'deadline00000',
        createdAt: now - 7_200_000,
        status: 'COMPLETED',
        expiresAt: now - 60_000 + i,
      }),
    );
    for (const job of [...overrun, ...expired]) await platform.jobs.create(job);
    expect(await fixture.workers().stopSignal('w1')).toBe(0);
    const statuses = async (jobs: Job[]) =>
      Promise.all(jobs.map(async (job) => (await platform.jobs.get(job.id, 0))?.status ?? 'gone'));

    // Time for the listing and a few moves, past what the `finally` keeps (the deadline's margin).
    const first = await sweepWithin(sweepTiming.finishMs + 10 * requestMs);
    expect(first.leftMs).toBeGreaterThan(0);
    expect(first.outOfTime).toBe(true);
    expect(first.report.timedOut).toBeGreaterThan(0);
    expect(first.report.timedOut).toBeLessThan(overrun.length);
    // No job of the second step was started: the deadline had passed.
    expect(first.report.deleted).toBe(0);
    expect((await statuses(overrun)).filter((s) => s === 'TIMED_OUT')).toHaveLength(first.report.timedOut);
    expect(await statuses(expired)).toEqual(expired.map(() => 'COMPLETED'));
    // The webhooks of the jobs it did time out are on their queue, and their worker's agent has its
    // stop signal: the `finally` ran.
    expect(await webhooksQueued()).toBe(first.report.timedOut);
    expect(await fixture.workers().stopSignal('w1')).toBeGreaterThan(0);

    // The next run, with its whole time, does what was left.
    const second = await sweepWithin(55_000);
    expect(second.outOfTime).toBe(false);
    expect(second.report.timedOut).toBe(overrun.length - first.report.timedOut);
    expect(second.report.deleted).toBe(expired.length);
    expect(await statuses(overrun)).toEqual(overrun.map(() => 'TIMED_OUT'));
    expect(await statuses(expired)).toEqual(expired.map(() => 'gone'));
    expect(await webhooksQueued()).toBe(overrun.length);
  }, 120_000);

  it('a run short of time leaves the dead letters of the endpoints after its deadline to the next run', async () => {
    // Two queue endpoints, each with a job whose message was dead-lettered.
    const endpoints = ['dlfirst0000000', 'dlsecond000000'];
    const jobs: Job[] = [];
    for (const [i, id] of endpoints.entries()) {
      for (const suffix of ['', '-low', '-dlq', '-low-dlq'])
        await fixture.sqs.send(new CreateQueueCommand({ QueueName: `ferry-${id}${suffix}` }));
      await platform.control.putEndpoint({
        id,
        app: `dl${i}`,
        env: 'production',
        name: 'gen',
        kind: 'queue',
        createdAt: clock.now(),
        updatedAt: clock.now(),
      } as never);
      const job = await platform.engine.submit(id, { input: { n: i } }, { sync: false });
      jobs.push((await platform.jobs.get(job.id, clock.now()))!);
      const dlq = await fixture.queueUrlFor(`${id}-dlq`);
      await fixture.sqs.send(
        new SendMessageCommand({
          QueueUrl: dlq,
          MessageBody: JSON.stringify({ jobId: job.id, endpointId: id, lowPriority: false }),
        }),
      );
    }
    const statuses = async () =>
      Promise.all(jobs.map(async (job) => (await platform.jobs.get(job.id, clock.now()))?.status));
    const dlqOf = async (id: string) => fixture.queueUrlFor(`${id}-dlq`);
    const waiting = async (queueUrl: string) => {
      const { Attributes } = await fixture.sqs.send(
        new GetQueueAttributesCommand({
          QueueUrl: queueUrl,
          AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible'],
        }),
      );
      return (
        Number(Attributes?.ApproximateNumberOfMessages ?? 0) +
        Number(Attributes?.ApproximateNumberOfMessagesNotVisible ?? 0)
      );
    };

    // The run's time runs out with the first dead-lettered job's move (its TransactWriteItems).
    const first = await sweepWithin(55_000, (command) => command === 'TransactWriteItemsCommand');
    expect(first.leftMs).toBeGreaterThan(0);
    expect(first.report.deadLettered).toBe(1);
    // Which endpoint a run begins with turns with the minute (the sweeper's rotation).
    const after = await statuses();
    expect([...after].sort()).toEqual(['FAILED', 'IN_QUEUE']);
    const [visited, left] = after[0] === 'FAILED' ? endpoints : [...endpoints].reverse();
    // The other endpoint's dead letter was not even taken: it waits, visible, for the next run.
    expect(await waiting(await dlqOf(visited!))).toBe(0);
    expect(await waiting(await dlqOf(left!))).toBe(1);

    const second = await sweepWithin(55_000);
    expect(second.report.deadLettered).toBe(1);
    expect(await statuses()).toEqual(['FAILED', 'FAILED']);
    expect(await waiting(await dlqOf(left!))).toBe(0);
  }, 120_000);
});
