/**
 * Webhooks on AWS (core/adapters/aws/webhook-queue.ts): the api function (a cancel) and the agent (a
 * job its worker completed) hand a job's final-status webhook to the webhook queue; the webhook function, fed by the queue as Lambda's event
 * source mapping feeds it (pollWebhookQueue), makes the attempts, and a failed one comes back as a
 * delayed message with the next attempt number. fauxqs is the queue and the bucket, a real HTTP
 * server on 127.0.0.1 the receiver.
 */
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { PurgeQueueCommand, ReceiveMessageCommand, type SendMessageCommand } from '@aws-sdk/client-sqs';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import {
  deliverWebhookRecords,
  sqsSafeJson,
  type WebhookDeliveryOptions,
  webhookBodyPrefix,
} from '../../core/adapters/aws/webhook-queue.js';
import { createWebhookHandler, handler } from '../../functions/webhooks.js';
import { fakeAwsConfig } from '../support/emulators.js';
import { ProtocolWorker } from '../support/protocolWorker.js';
import { type AwsBox, messagesOn, pollWebhookQueue, shimCall, startAwsBox } from './box.js';

let box: AwsBox;
let receiver: Server;
let receiverUrl: string;
/** What the receiver got, in order, and the status it answers each time (default 200). */
let posts: { body: any; atMs: number }[] = [];
let answers: number[] = [];
const warnings: string[] = [];

beforeAll(async () => {
  box = await startAwsBox({ maxWaitMs: 3_000 });
  await box.addEndpoint('idle');
  await box.addEndpoint('main');
  receiver = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      posts.push({ body: JSON.parse(Buffer.concat(chunks).toString('utf8')), atMs: Date.now() });
      res.writeHead(answers.shift() ?? 200).end();
    });
  });
  receiver.listen(0, '127.0.0.1');
  await once(receiver, 'listening');
  receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook?token=secret`;
}, 120_000);

afterAll(async () => {
  receiver?.close();
  await box?.stop();
});

afterEach(async () => {
  posts = [];
  answers = [];
  warnings.length = 0;
  // Nothing left for the next case.
  expect(await onQueue()).toBe(0);
});

const call = (method: string, path: string, body?: unknown) => shimCall(box, method, path, body);
const queueUrl = () => box.fixture.webhookQueueUrl;

const onQueue = () => messagesOn(box.fixture.sqs, queueUrl());

/** The webhook function's options in the box: the loopback receiver allowed (it is private). */
function delivery(extra: Partial<WebhookDeliveryOptions> = {}): WebhookDeliveryOptions {
  return {
    sqs: box.fixture.sqs,
    queueUrl: queueUrl(),
    blobs: box.fixture.blobs(box.env.FERRY_BLOB_PREFIX),
    allow: ['127.0.0.1'],
    retryDelayMs: 1_000,
    log: { warn: (line) => warnings.push(line) },
    ...extra,
  };
}

/** Runs the event source mapping until the queue is empty (retries included) or `ms` pass. */
async function deliverAll(options: WebhookDeliveryOptions, ms = 15_000): Promise<void> {
  const handler = createWebhookHandler(() => options);
  const deadline = Date.now() + ms;
  while (Date.now() < deadline && (await onQueue()) > 0) {
    await pollWebhookQueue(box.fixture.sqs, queueUrl(), handler);
  }
}

/** A queued job of the workerless endpoint, with the receiver as its webhook, cancelled. */
async function cancelledJob(input: unknown = { n: 1 }): Promise<string> {
  const run = await call('POST', '/v2/idle/run', { input, webhook: receiverUrl });
  expect(run.status).toBe(200);
  const cancel = await call('POST', `/v2/idle/cancel/${run.body.id}`);
  expect(cancel.body.status).toBe('CANCELLED');
  return run.body.id;
}

describe('the api function hands webhooks to the queue', () => {
  it('answers a cancel before any attempt is made; the webhook function then posts the final body', async () => {
    answers = [500, 500, 500];
    const id = await cancelledJob();
    // The cancel's answer did not wait for the receiver, which has not been called at all: the
    // attempts are the webhook function's (before, the api waited out all three, 10 s apart).
    expect(posts).toEqual([]);
    const { Messages = [] } = await box.fixture.sqs.send(
      new ReceiveMessageCommand({
        QueueUrl: queueUrl(),
        MessageAttributeNames: ['All'],
        VisibilityTimeout: 0,
      }),
    );
    expect(Messages).toHaveLength(1);
    expect(Messages[0]!.MessageAttributes).toMatchObject({
      url: { StringValue: receiverUrl },
      attempt: { StringValue: '1' },
    });
    expect(JSON.parse(Messages[0]!.Body!)).toMatchObject({ id, status: 'CANCELLED', input: { n: 1 } });

    await deliverAll(delivery());
    // Three attempts in all, each a retry delay after the one before.
    expect(posts.map((p) => p.body)).toEqual([
      expect.objectContaining({ id, status: 'CANCELLED' }),
      expect.objectContaining({ id, status: 'CANCELLED' }),
      expect.objectContaining({ id, status: 'CANCELLED' }),
    ]);
    expect(posts[1]!.atMs - posts[0]!.atMs).toBeGreaterThanOrEqual(900);
    expect(posts[2]!.atMs - posts[1]!.atMs).toBeGreaterThanOrEqual(900);
    expect(warnings.filter((w) => w.includes('answered 500'))).toHaveLength(3);
    // The token in the URL's query never reaches a log line.
    expect(warnings.join('\n')).not.toContain('secret');
  }, 60_000);

  it('stops at the first 2xx', async () => {
    answers = [503, 200];
    const id = await cancelledJob();
    await deliverAll(delivery());
    expect(posts.map((p) => p.body.id)).toEqual([id, id]);
  }, 60_000);

  it('retries 10 s later by default: the retry is a delayed message with the next attempt number', async () => {
    answers = [500];
    await cancelledJob();
    const sent: SendMessageCommand['input'][] = [];
    const sqs = {
      send: (command: SendMessageCommand) => {
        sent.push(command.input);
        return box.fixture.sqs.send(command);
      },
    } as WebhookDeliveryOptions['sqs'];
    await pollWebhookQueue(
      box.fixture.sqs,
      queueUrl(),
      createWebhookHandler(() => delivery({ sqs, retryDelayMs: undefined })),
    );
    expect(posts).toHaveLength(1);
    expect(sent).toEqual([
      expect.objectContaining({
        DelaySeconds: 10,
        MessageAttributes: expect.objectContaining({ attempt: { DataType: 'Number', StringValue: '2' } }),
      }),
    ]);
    // Not receivable before its delay: the next poll finds nothing.
    expect(
      (await pollWebhookQueue(box.fixture.sqs, queueUrl(), async () => ({ batchItemFailures: [] }), 0))
        .records,
    ).toEqual([]);
    await deliverAll(delivery(), 20_000);
    expect(posts).toHaveLength(2);
  }, 60_000);

  it('puts a body past the inline size in S3, delivers it whole and deletes it', async () => {
    const big = 'é'.repeat(150 * 1024); // 300 KB of UTF-8
    const id = await cancelledJob({ big });
    const { Messages = [] } = await box.fixture.sqs.send(
      new ReceiveMessageCommand({
        QueueUrl: queueUrl(),
        MessageAttributeNames: ['All'],
        VisibilityTimeout: 0,
      }),
    );
    const bodyKey = Messages[0]!.MessageAttributes?.bodyKey?.StringValue;
    expect(bodyKey).toMatch(new RegExp(`^${webhookBodyPrefix}`));
    const blobs = box.fixture.blobs(box.env.FERRY_BLOB_PREFIX);
    expect(await blobs.exists(bodyKey!)).toBe(true);
    await deliverAll(delivery());
    expect(posts).toHaveLength(1);
    expect(posts[0]!.body).toMatchObject({ id, status: 'CANCELLED', input: { big } });
    expect(await blobs.exists(bodyKey!)).toBe(false);
  }, 60_000);

  it('makes one attempt at a private address it was not allowed, and drops the webhook', async () => {
    await cancelledJob();
    await deliverAll(delivery({ allow: [] }));
    expect(posts).toEqual([]);
    expect(warnings.join('\n')).toMatch(/not a public address/);
  }, 60_000);

  it('reports a record it cannot handle as a batch item failure, and the queue gives it back', async () => {
    await cancelledJob();
    const failing = delivery({
      sqs: {
        send: async () => {
          throw new Error('SQS is down');
        },
      } as unknown as WebhookDeliveryOptions['sqs'],
    });
    answers = [500];
    // The attempt fails and its retry cannot be queued: the record must come back, not vanish.
    const handed = await pollWebhookQueue(
      box.fixture.sqs,
      queueUrl(),
      createWebhookHandler(() => failing),
    );
    expect(handed.failures).toEqual([handed.records[0]!.messageId]);
    expect(await onQueue()).toBe(1);
    // Drop what is left for the next case: the message is in flight for 30 s.
    await box.fixture.sqs.send(new PurgeQueueCommand({ QueueUrl: queueUrl() }));
  }, 60_000);

  it('takes, from the agent, the webhook of a job its worker completed: the function delivers it, output and all', async () => {
    const agent = await box.agentFor('main');
    const worker = new ProtocolWorker(agent.url, 'main', agent.workerToken, agent.workerId).serve();
    try {
      const big = 'o'.repeat(250 * 1024);
      const run = await call('POST', '/v2/main/run', { input: { echo: big }, webhook: receiverUrl });
      await expect.poll(onQueue, { timeout: 30_000 }).toBe(1);
      const { Messages = [] } = await box.fixture.sqs.send(
        new ReceiveMessageCommand({
          QueueUrl: queueUrl(),
          MessageAttributeNames: ['All'],
          VisibilityTimeout: 0,
        }),
      );
      // Too big for a message: under the job's own key, which only its endpoint's agent may write.
      expect(Messages[0]!.MessageAttributes?.bodyKey?.StringValue).toMatch(
        new RegExp(`^${webhookBodyPrefix}${run.body.id}/`),
      );
      await deliverAll(delivery());
      expect(posts).toHaveLength(1);
      expect(posts[0]!.body).toMatchObject({ id: run.body.id, status: 'COMPLETED', output: big });
    } finally {
      await worker.stop();
    }
  }, 60_000);

  it('as deployed (options from the function environment, no allow-list) posts to no private address', async () => {
    const saved = { ...process.env };
    Object.assign(
      process.env,
      Object.fromEntries(Object.entries(box.env).map(([name, value]) => [name, String(value)])),
      {
        AWS_REGION: fakeAwsConfig.region,
        AWS_ACCESS_KEY_ID: fakeAwsConfig.credentials.accessKeyId,
        AWS_SECRET_ACCESS_KEY: fakeAwsConfig.credentials.secretAccessKey,
      },
    );
    const errors = vi.spyOn(console, 'error').mockImplementation(() => {});
    try {
      await cancelledJob();
      const { records } = await pollWebhookQueue(box.fixture.sqs, queueUrl(), handler);
      expect(records).toHaveLength(1);
      expect(posts).toEqual([]);
      expect(errors.mock.calls.flat().join('\n')).toMatch(/not a public address/);
    } finally {
      errors.mockRestore();
      process.env = saved;
    }
  }, 60_000);

  it('drops a message that is not a webhook message', async () => {
    const answer = await deliverWebhookRecords(
      [
        {
          messageId: 'm1',
          receiptHandle: 'r1',
          body: '{}',
          attributes: {} as never,
          messageAttributes: {},
          md5OfBody: '',
          eventSource: 'aws:sqs',
          eventSourceARN: 'arn',
          awsRegion: 'us-east-1',
        },
      ],
      delivery(),
    );
    expect(answer).toEqual({ batchItemFailures: [] });
    expect(warnings.join('\n')).toMatch(/not a webhook message/);
  });
});

describe('sqsSafeJson', () => {
  it('escapes the two characters SQS refuses and reads back as the same value', () => {
    const value = { text: 'a\uFFFEb\uFFFFc', other: 'ok é 😀' };
    const safe = sqsSafeJson(JSON.stringify(value));
    expect(safe).not.toMatch(/[\uFFFE\uFFFF]/);
    expect(JSON.parse(safe)).toEqual(value);
  });
});
