/**
 * Webhooks on AWS go through a queue: whoever ends a job (the api or sweeper function, the queue
 * agent beside the worker) hands its webhook to SQS and goes on; the webhook function
 * (functions/webhooks.ts, an SQS event source) makes the attempts.
 *
 *   api / sweeper / agent ──SendMessage──▶ webhook queue ──▶ webhook function ──POST──▶ receiver
 *                                               ▲                    │ failed, attempts left
 *                                               └── SendMessage, DelaySeconds 10, attempt + 1
 *
 * Why not deliver in the function that ended the job: Lambda may freeze or discard the sandbox once
 * the handler returns (https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtime-environment.html),
 * so that function had to wait for every attempt before answering: a cancel, or a purge of jobs with
 * webhooks, held its client for the receiver's retries (10 s apart, up to the function's timeout),
 * and what did not fit was lost. An agent's retries lived in its memory, lost with its task.
 *
 * A retry is a new message with the next attempt number and a delivery delay (SQS DelaySeconds, up
 * to 15 minutes: https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessage.html),
 * so the attempts count exactly and the wait between them costs no running function. A record the
 * function could not handle at all (S3 or SQS failing) is reported as a batch item failure and comes
 * back after the queue's visibility timeout; after 5 receives it goes to the dead-letter queue.
 *
 * The message body is the webhook's JSON text; its URL and attempt travel as message attributes. A
 * body over `inlineBodyBytes` waits in S3 under `payloads/webhooks/<jobId>/` (the message carries its key),
 * since an SQS message holds 256 KiB by default and a job's input and output can be megabytes; the
 * object is deleted when the delivery is over (the bucket's lifecycle rule on `payloads/` is the
 * backstop).
 *
 * Delivery is at least once, as RunPod's: a record handled twice (its deletion lost) posts twice.
 */
import { randomUUID } from 'node:crypto';
import { type MessageAttributeValue, SendMessageCommand, type SQSClient } from '@aws-sdk/client-sqs';
import type { SQSBatchResponse, SQSRecord } from 'aws-lambda';
import type { WebhookSender } from '../../engine.js';
import { stringifyJsonExact } from '../../json.js';
import { limits } from '../../limits.js';
import { PendingWork } from '../../pending-work.js';
import type { BlobStore } from '../../ports.js';
import { attemptWebhook, redact, type WebhookAttemptOptions, type WebhookLog } from '../../webhooks.js';

/** Where webhook bodies too big for a message wait (under the payloads rule's prefix). */
export const webhookBodyPrefix = 'payloads/webhooks/';

/**
 * Where a body waits: under its job's id, so an endpoint's agent may write only its own jobs' bodies
 * (its role's grant is `payloads/webhooks/<its job id patterns>`, infra/isolation.ts).
 */
export function webhookBodyKey(jobId: string | undefined): string {
  const folder = jobId ? `${encodeURIComponent(jobId)}/` : '';
  return `${webhookBodyPrefix}${folder}${randomUUID()}.json`;
}

/**
 * Bodies up to this many UTF-8 bytes travel in the message: under SQS's default 256 KiB maximum
 * with room for the attributes (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/quotas-messages.html).
 */
export const inlineBodyBytes = 200 * 1024;

/** The message attributes of a webhook message. */
const attribute = { url: 'url', attempt: 'attempt', bodyKey: 'bodyKey' } as const;

/**
 * SQS refuses message bodies with characters outside XML's set; JSON text can hold U+FFFE and U+FFFF
 * raw inside strings (JSON.stringify writes them as they are). They go out as JSON escapes, which
 * read back as the same string. Everything else JSON.stringify writes is allowed (it escapes control
 * characters and lone surrogates).
 */
export function sqsSafeJson(text: string): string {
  return text.replace(/[\uFFFE\uFFFF]/g, (c) => `\\u${c.charCodeAt(0).toString(16)}`);
}

interface WebhookMessage {
  url: string;
  /** The attempt this message is for, from 1. */
  attempt: number;
  /** The body itself, or undefined when it waits in S3 under `bodyKey`. */
  body?: string;
  bodyKey?: string;
}

function messageCommand(queueUrl: string, message: WebhookMessage, delaySeconds = 0): SendMessageCommand {
  const attributes: Record<string, MessageAttributeValue> = {
    [attribute.url]: { DataType: 'String', StringValue: message.url },
    [attribute.attempt]: { DataType: 'Number', StringValue: String(message.attempt) },
  };
  if (message.bodyKey) attributes[attribute.bodyKey] = { DataType: 'String', StringValue: message.bodyKey };
  return new SendMessageCommand({
    QueueUrl: queueUrl,
    // A message body cannot be empty; a body in S3 leaves its key there too, for people reading the queue.
    MessageBody: message.body ?? message.bodyKey,
    MessageAttributes: attributes,
    ...(delaySeconds > 0 ? { DelaySeconds: delaySeconds } : {}),
  });
}

type Blobs = Pick<BlobStore, 'put' | 'get' | 'delete'>;

export interface QueuedWebhookSenderOptions {
  sqs: Pick<SQSClient, 'send'>;
  queueUrl: string;
  /**
   * The platform bucket under FERRY_BLOB_PREFIX, as the webhook function reads it (bodies go under
   * webhookBodyPrefix).
   */
  blobs: Blobs;
  log?: WebhookLog;
}

/** The engine's WebhookSender in the platform functions: each webhook becomes a message. */
export class QueuedWebhookSender implements WebhookSender {
  private readonly handedOver = new PendingWork();

  constructor(private readonly options: QueuedWebhookSenderOptions) {}

  send(url: string, body: unknown): void {
    const jobId = (body as { id?: unknown } | undefined)?.id;
    this.handedOver.track(
      this.enqueue(
        url,
        sqsSafeJson(stringifyJsonExact(body)),
        typeof jobId === 'string' ? jobId : undefined,
      ).catch((error: Error) =>
        this.options.log?.warn(`webhook ${redact(url)} not queued: ${error.message}`),
      ),
    );
  }

  /** Resolves when every webhook sent so far is on the queue (or failed to get there, logged). */
  idle(): Promise<void> {
    return this.handedOver.settled();
  }

  private async enqueue(url: string, text: string, jobId: string | undefined): Promise<void> {
    const message: WebhookMessage = { url, attempt: 1 };
    // The URL's attribute shares the message's room (it is at most limits.webhookUrlChars).
    if (Buffer.byteLength(text) + Buffer.byteLength(url) <= inlineBodyBytes) message.body = text;
    else {
      message.bodyKey = webhookBodyKey(jobId);
      await this.options.blobs.put(message.bodyKey, Buffer.from(text));
    }
    await this.options.sqs.send(messageCommand(this.options.queueUrl, message));
  }
}

export interface WebhookDeliveryOptions extends WebhookAttemptOptions {
  sqs: Pick<SQSClient, 'send'>;
  /** The webhook queue, where retries go. */
  queueUrl: string;
  blobs: Blobs;
  /** Between attempts (default limits.webhookRetryDelayMs), whole seconds on SQS. */
  retryDelayMs?: number;
}

/** A record's message, or undefined when it is not a webhook message (dropped). */
function messageOf(record: SQSRecord): WebhookMessage | undefined {
  const read = (name: string) => record.messageAttributes?.[name]?.stringValue;
  const url = read(attribute.url);
  const attempt = Number(read(attribute.attempt));
  if (!url || !Number.isInteger(attempt) || attempt < 1) return undefined;
  const bodyKey = read(attribute.bodyKey);
  if (bodyKey !== undefined && !bodyKey.startsWith(webhookBodyPrefix)) return undefined;
  return bodyKey ? { url, attempt, bodyKey } : { url, attempt, body: record.body };
}

/**
 * The webhook function's work on one batch: one attempt per record, side by side (a receiver that
 * hangs until its timeout holds up no other). Failed attempts with attempts left go back to the queue
 * as a delayed message; the answer lists the records that could not be handled (partial batch
 * response: https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-errorhandling.html).
 *
 * `signal` is the function's own deadline (functions/webhooks.ts). When it fires, the attempts still
 * under way are abandoned and only their records are listed: they come back after the visibility
 * timeout for the same attempt, their bodies kept. Running into the timeout instead is a function
 * error, which gives the whole batch back, the records already delivered included (same page): every
 * other receiver in the batch would get its webhook again, and every queued retry would fork.
 */
export async function deliverWebhookRecords(
  records: readonly SQSRecord[],
  options: WebhookDeliveryOptions,
): Promise<SQSBatchResponse> {
  const attempts = options.attempts ?? limits.webhookAttempts;
  const delaySeconds = Math.ceil((options.retryDelayMs ?? limits.webhookRetryDelayMs) / 1000);
  const failed = await Promise.all(
    records.map(async (record) => {
      const message = messageOf(record);
      if (!message) {
        options.log?.warn(`webhook queue: message ${record.messageId} is not a webhook message; dropped`);
        return undefined;
      }
      try {
        const body = message.bodyKey ? await options.blobs.get(message.bodyKey) : message.body;
        if (body === undefined) {
          // Its object is gone: this delivery ended before (a record handled twice) or was abandoned.
          options.log?.warn(`webhook queue: message ${record.messageId} has no body any more; dropped`);
          return undefined;
        }
        const text = typeof body === 'string' ? body : Buffer.from(body).toString('utf8');
        const outcome = await attemptWebhook(message.url, text, message.attempt, { ...options, attempts });
        if (outcome === 'abandoned') return { itemIdentifier: record.messageId };
        if (outcome === 'failed' && message.attempt < attempts) {
          await options.sqs.send(
            messageCommand(options.queueUrl, { ...message, attempt: message.attempt + 1 }, delaySeconds),
          );
          return undefined;
        }
        if (message.bodyKey) {
          await options.blobs.delete(message.bodyKey).catch((error: Error) => {
            options.log?.warn(`webhook queue: body ${message.bodyKey} not deleted: ${error.message}`);
          });
        }
        return undefined;
      } catch (error) {
        options.log?.warn(`webhook queue: message ${record.messageId} failed: ${(error as Error).message}`);
        return { itemIdentifier: record.messageId };
      }
    }),
  );
  return { batchItemFailures: failed.filter((f) => f !== undefined) };
}
