/**
 * No lost work on AWS, on DynamoDB Local and fauxqs (SQS) with a fake clock: the sweeper re-sends the
 * message of a job left IN_QUEUE (its send failed, or the message was lost), once per staleness
 * window, and fails a job whose message was dead-lettered, with the reason, deleting the dead letter.
 */
import {
  CreateQueueCommand,
  DeleteQueueCommand,
  GetQueueAttributesCommand,
  SendMessageCommand,
} from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { FakeClock } from '../../core/clock.js';
import { silentLogger } from '../../core/log.js';
import { createApiHandler } from '../../functions/api.js';
import { createSweeper, sweepTiming } from '../../functions/sweeper.js';
import { buildPlatform, type Platform, parseFunctionEnv } from '../../functions/wiring.js';
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
const endpointId = 'orphans0000000';
const clients: { destroy(): void }[] = [];

/** The functions' environment over the emulators' tables, bucket and queues. */
const functionEnv = () =>
  parseFunctionEnv({
    FERRY_JOBS_TABLE: fixture.tables.jobs,
    FERRY_CHUNKS_TABLE: fixture.tables.chunks,
    FERRY_CONTROL_TABLE: fixture.tables.control,
    FERRY_WORKERS_TABLE: fixture.tables.workers,
    FERRY_BUCKET: fixture.bucket,
    FERRY_QUEUE_NAME_PREFIX: 'ferry-',
    FERRY_WEBHOOK_QUEUE_URL: fixture.webhookQueueUrl,
  });

async function visible(queueUrl: string): Promise<number> {
  const { Attributes } = await fixture.sqs.send(
    new GetQueueAttributesCommand({ QueueUrl: queueUrl, AttributeNames: ['ApproximateNumberOfMessages'] }),
  );
  return Number(Attributes?.ApproximateNumberOfMessages ?? 0);
}

beforeAll(async () => {
  fixture = await startAwsFixture({ ttl: false });
  const env = functionEnv();
  const lambdaClients = {
    dynamo: dynamoClientFor(fixture.dynamo.endpoint),
    sqs: sqsClientFor(fixture.fauxqs.endpoint),
    s3: s3ClientFor(fixture.fauxqs.endpoint),
  };
  clients.push(...Object.values(lambdaClients));
  platform = buildPlatform({ env, clients: lambdaClients, clock });
  await queueEndpoint(endpointId, 'shop', 'gen');
}, 120_000);

/** A queue endpoint's record and its four queues (urgent, low, and their dead-letter queues). */
async function queueEndpoint(id: string, app: string, name: string): Promise<string[]> {
  const queues = [id, `${id}-low`, `${id}-dlq`, `${id}-low-dlq`].map((q) => `ferry-${q}`);
  for (const QueueName of queues) await fixture.sqs.send(new CreateQueueCommand({ QueueName }));
  await platform.control.putEndpoint({
    id,
    app,
    env: 'production',
    name,
    kind: 'queue',
    createdAt: clock.now(),
    updatedAt: clock.now(),
  } as never);
  return queues;
}
afterAll(async () => {
  for (const c of clients) c.destroy();
  await fixture?.stop();
});

const sweep = () => {
  vi.spyOn(console, 'log').mockImplementation(() => {});
  return createSweeper(
    () => platform,
    () => clock.now(),
  )(undefined, { getRemainingTimeInMillis: () => 50_000 });
};

describe('sweeper on emulators', () => {
  it('re-sends the message of a job whose send was lost, once per window; a worker can then take it once', async () => {
    const urgentUrl = (await fixture.sqs.send(new CreateQueueCommand({ QueueName: `ferry-${endpointId}` })))
      .QueueUrl!;
    expect(urgentUrl).toContain(`ferry-${endpointId}`);
    // The API wrote the job, then its SendMessage failed: the job, and no message.
    const job = await platform.engine.submit(endpointId, { input: { n: 1 } }, { sync: false });
    await platform.queue
      .receive(endpointId, { max: 10, visibilityMs: 0, waitMs: 0 })
      .then((ms) => Promise.all(ms.map((m) => platform.queue.ack(endpointId, m.receipt))));
    expect(await visible(urgentUrl)).toBe(0);

    // Younger than the bound: nothing is sent.
    clock.advance(sweepTiming.staleQueuedMs - sweepTiming.periodMs);
    expect((await sweep()).resent).toBe(0);
    expect(await visible(urgentUrl)).toBe(0);
    // The sweep in which it crosses the bound re-sends it; the next sweeps do not, until the next window.
    clock.advance(sweepTiming.periodMs);
    expect((await sweep()).resent).toBe(1);
    expect(await visible(urgentUrl)).toBe(1);
    clock.advance(sweepTiming.periodMs);
    expect((await sweep()).resent).toBe(0);
    clock.advance(sweepTiming.staleQueuedMs - sweepTiming.periodMs);
    expect((await sweep()).resent).toBe(1);
    expect(await visible(urgentUrl)).toBe(2);

    // Two messages for one job: the first take claims it, the duplicate finds nothing to take.
    const messages = await platform.queue.receive(endpointId, { max: 10, visibilityMs: 30_000, waitMs: 0 });
    expect(messages.map((m) => m.jobId)).toEqual([job.id, job.id]);
    const stored = await platform.jobs.get(job.id, clock.now());
    const first = await platform.jobs.update(stored!, {
      status: 'IN_PROGRESS',
      workerId: 'w1',
      attempt: 1,
    });
    expect(first.ok && first.job.status).toBe('IN_PROGRESS');
    // The duplicate's claim is a compare-and-set on the version it read: it loses.
    const second = await platform.jobs.update(stored!, {
      status: 'IN_PROGRESS',
      workerId: 'w2',
      attempt: 1,
    });
    expect(second.ok).toBe(false);
    // Running jobs are never re-sent.
    clock.advance(sweepTiming.staleQueuedMs);
    expect((await sweep()).resent).toBe(0);
  });

  it('a /run whose SendMessage fails answers 200 with the stored job, which the sweeper then queues', async () => {
    // SQS can fail a send (InternalFailure, 500:
    // https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/CommonErrors.html). A 5xx
    // told the client the call failed while its job still ran later; the client's retry ran it twice.
    const sqs = sqsClientFor(fixture.fauxqs.endpoint);
    clients.push(sqs);
    const realSend = sqs.send.bind(sqs) as (command: unknown) => Promise<unknown>;
    let failSends = 1;
    (sqs as unknown as { send: (command: unknown) => Promise<unknown> }).send = async (command) => {
      if (command instanceof SendMessageCommand && failSends > 0) {
        failSends--;
        throw Object.assign(new Error('We encountered an internal error. Please try again.'), {
          name: 'InternalFailure',
          $metadata: { httpStatusCode: 500 },
        });
      }
      return realSend(command);
    };
    const flaky = buildPlatform({
      env: functionEnv(),
      clients: {
        dynamo: dynamoClientFor(fixture.dynamo.endpoint),
        sqs,
        s3: s3ClientFor(fixture.fauxqs.endpoint),
      },
      clock,
      auth: {
        isClientKey: async () => true,
        clientKeyScope: async () => ({}),
        workerAccess: async () => 'unknown' as const,
      },
    });
    const warned = vi.spyOn(console, 'error').mockImplementation(() => {});
    const api = createApiHandler(() => flaky, silentLogger);
    const answer = await api(
      {
        httpMethod: 'POST',
        path: `/v2/${endpointId}/run`,
        headers: { authorization: 'Bearer k', 'content-type': 'application/json' },
        multiValueHeaders: {},
        queryStringParameters: null,
        multiValueQueryStringParameters: null,
        pathParameters: null,
        body: JSON.stringify({ input: { charge: 42 } }),
        isBase64Encoded: false,
        requestContext: { requestId: 'r1' },
      } as never,
      { getRemainingTimeInMillis: () => 20_000, awsRequestId: 'a' } as never,
    );
    expect(answer.statusCode).toBe(200);
    const { id, status } = JSON.parse(answer.body) as { id: string; status: string };
    expect(status).toBe('IN_QUEUE');
    expect(failSends).toBe(0);
    expect(String(warned.mock.calls.at(-1)?.[0])).toContain(
      `job ${id} is stored but its queue message was not sent`,
    );
    warned.mockRestore();
    expect((await flaky.jobs.get(id, clock.now()))?.status).toBe('IN_QUEUE');
    expect(
      (await flaky.queue.receive(endpointId, { max: 10, visibilityMs: 0, waitMs: 0 })).map((m) => m.jobId),
    ).not.toContain(id);
    // The sweeper sends it once it has waited staleQueuedMs.
    clock.advance(sweepTiming.staleQueuedMs);
    expect((await sweep()).resent).toBeGreaterThanOrEqual(1);
    const messages = await platform.queue.receive(endpointId, { max: 10, visibilityMs: 30_000, waitMs: 0 });
    expect(messages.map((m) => m.jobId)).toContain(id);
    for (const m of messages) await platform.queue.ack(endpointId, m.receipt);
  });

  it('fails a job whose message was dead-lettered, with the reason, and deletes the dead letter', async () => {
    const job = await platform.engine.submit(endpointId, { input: { n: 2 } }, { sync: false });
    const dlq = (await fixture.sqs.send(new CreateQueueCommand({ QueueName: `ferry-${endpointId}-dlq` })))
      .QueueUrl!;
    await fixture.sqs.send(
      new SendMessageCommand({
        QueueUrl: dlq,
        MessageBody: JSON.stringify({ jobId: job.id, endpointId, lowPriority: false }),
      }),
    );
    const report = await sweep();
    expect(report.deadLettered).toBe(1);
    const failed = await platform.jobs.get(job.id, clock.now());
    expect(failed?.status).toBe('FAILED');
    expect(failed?.error).toContain('dead-lettered');
    expect(await visible(dlq)).toBe(0);
    // A dead letter of a job that already ended changes nothing and is still removed.
    await fixture.sqs.send(
      new SendMessageCommand({
        QueueUrl: dlq,
        MessageBody: JSON.stringify({ jobId: job.id, endpointId, lowPriority: false }),
      }),
    );
    expect((await sweep()).deadLettered).toBe(0);
    expect(await visible(dlq)).toBe(0);
    expect((await platform.jobs.get(job.id, clock.now()))?.error).toBe(failed?.error);
  });

  it("an endpoint whose queue is gone does not stop the other endpoints' resends and dead letters; the run fails last", async () => {
    // A stack deleted by hand, or an undeploy that failed and kept the records: the record lists an
    // endpoint whose queues answer QueueDoesNotExist. It sorts first (app 'aaa'), so before the fix
    // its resend threw and the run stopped before any other endpoint.
    const goneId = 'gone0000000000';
    const goneQueues = await queueEndpoint(goneId, 'aaa', 'gone');
    await platform.engine.submit(goneId, { input: { n: 3 } }, { sync: false });
    const mine = await platform.engine.submit(endpointId, { input: { n: 4 } }, { sync: false });
    const urgentUrl = (await fixture.sqs.send(new CreateQueueCommand({ QueueName: `ferry-${endpointId}` })))
      .QueueUrl!;
    for (const id of [endpointId, goneId]) {
      await platform.queue
        .receive(id, { max: 10, visibilityMs: 0, waitMs: 0 })
        .then((ms) => Promise.all(ms.map((m) => platform.queue.ack(id, m.receipt))));
    }
    for (const QueueName of goneQueues) {
      const { QueueUrl } = await fixture.sqs.send(new CreateQueueCommand({ QueueName }));
      await fixture.sqs.send(new DeleteQueueCommand({ QueueUrl }));
    }
    const dlq = (await fixture.sqs.send(new CreateQueueCommand({ QueueName: `ferry-${endpointId}-dlq` })))
      .QueueUrl!;
    const dead = await platform.engine.submit(endpointId, { input: { n: 5 } }, { sync: false });
    await fixture.sqs.send(
      new SendMessageCommand({
        QueueUrl: dlq,
        MessageBody: JSON.stringify({ jobId: dead.id, endpointId, lowPriority: false }),
      }),
    );
    clock.advance(sweepTiming.staleQueuedMs);
    const errors = vi.spyOn(console, 'error').mockImplementation(() => {});
    await expect(sweep()).rejects.toThrow(`resending waiting jobs of ${goneId}`);
    errors.mockRestore();
    // The other endpoint was swept all the same: its waiting job sent again, its dead letter handled.
    const messages = await platform.queue.receive(endpointId, { max: 10, visibilityMs: 30_000, waitMs: 0 });
    expect(messages.map((m) => m.jobId)).toContain(mine.id);
    for (const m of messages) await platform.queue.ack(endpointId, m.receipt);
    expect((await platform.jobs.get(dead.id, clock.now()))?.status).toBe('FAILED');
    expect(await visible(dlq)).toBe(0);
    expect(urgentUrl).toContain(endpointId);
    await platform.control.deleteEndpoint(goneId);
  });
});
