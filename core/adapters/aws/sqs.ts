/**
 * JobQueue on SQS: dispatch only, the JobStore is the source of truth (a message says "job X may be
 * ready"; the taker's compare-and-set decides). Purge and cancel are CAS moves in the JobStore, never
 * PurgeQueue (rate-limited to once per 60 s and up to 60 s to take effect).
 *
 * Two queues per endpoint: urgent work and low-priority work. The scaler (functions/scaler.ts) reads
 * the urgent queue's depth only, so `policy.lowPriority` jobs never scale workers up — a message
 * attribute could not do that, since SQS counts every message of a queue. Workers drain the urgent
 * queue first:
 *
 *   receive ─▶ urgent (short poll) ─▶ low (short poll) ─▶ urgent (long poll, one slice) ─┐
 *                                         ▲                                                │ nothing
 *                                         └────────────── until waitMs runs out ───────────┘
 *
 * A long poll is cut into slices (`longPollSliceSec`) rather than aborted: see receiveFrom.
 */
import {
  ChangeMessageVisibilityBatchCommand,
  DeleteMessageCommand,
  GetQueueAttributesCommand,
  type Message,
  ReceiveMessageCommand,
  SendMessageCommand,
  type SQSClient,
} from '@aws-sdk/client-sqs';
import { z } from 'zod';
import { internal } from '../../errors.js';
import type { JobQueue, QueueMessage, ReceiveOptions } from '../../ports.js';

/** The message body. Anything else on the queue is dropped. */
export const queueMessageSchema = z
  .object({ jobId: z.string().min(1), endpointId: z.string().min(1), lowPriority: z.boolean() })
  .strict();
export type QueueMessageBody = z.infer<typeof queueMessageSchema>;

export type QueueUrlFor = (
  endpointId: string,
  options?: { lowPriority?: boolean },
) => string | Promise<string>;

export interface SqsJobQueueOptions {
  client: SQSClient;
  /** The queue URL of an endpoint's urgent queue, or of its low-priority one. */
  queueUrlFor: QueueUrlFor;
  /** Where dropped messages are reported; defaults to console.warn. */
  warn?: (message: string) => void;
  /**
   * Length of one ReceiveMessage long poll (1–20 s, default 2): how late an abort or close is heard.
   * An idle receiver makes ~1 request per slice to each queue (SQS bills per request).
   */
  longPollSliceSec?: number;
}

/** SQS limits: 10 messages per receive, a 20 s long poll, visibility 0 s – 12 h. */
const maxBatch = 10;
const maxWaitSec = 20;
const maxVisibilitySec = 12 * 3600;

type Lane = 'u' | 'l';

export class SqsJobQueue implements JobQueue {
  private readonly client: SQSClient;
  private readonly queueUrlFor: QueueUrlFor;
  private readonly warn: (message: string) => void;
  private readonly sliceSec: number;
  private closed = false;

  constructor(options: SqsJobQueueOptions) {
    this.client = options.client;
    this.queueUrlFor = options.queueUrlFor;
    this.warn = options.warn ?? ((message) => console.warn(message));
    this.sliceSec = Math.min(maxWaitSec, Math.max(1, Math.round(options.longPollSliceSec ?? 2)));
  }

  private url(endpointId: string, lane: Lane): Promise<string> {
    return Promise.resolve(this.queueUrlFor(endpointId, { lowPriority: lane === 'l' }));
  }

  async send(endpointId: string, jobId: string, options: { lowPriority: boolean }): Promise<void> {
    this.assertOpen();
    const body: QueueMessageBody = { jobId, endpointId, lowPriority: options.lowPriority };
    await this.client.send(
      new SendMessageCommand({
        QueueUrl: await this.url(endpointId, options.lowPriority ? 'l' : 'u'),
        MessageBody: JSON.stringify(body),
      }),
    );
  }

  async receive(endpointId: string, options: ReceiveOptions): Promise<QueueMessage[]> {
    const { max, visibilityMs, waitMs, signal } = options;
    if (!Number.isInteger(max) || max < 1) throw internal(`max must be a positive integer, got ${max}`);
    if (!(visibilityMs >= 0)) throw internal(`visibilityMs must be >= 0, got ${visibilityMs}`);
    const visibilitySec = Math.min(maxVisibilitySec, Math.ceil(visibilityMs / 1000));
    const batch = Math.min(max, maxBatch);
    const deadlineMs = Date.now() + Math.max(0, waitMs);
    const stopped = () => this.closed || signal?.aborted === true;
    if (stopped()) return [];
    const first = await this.receiveFrom(endpointId, 'u', batch, visibilitySec, 0, stopped);
    if (first.length > 0 || stopped()) return first;
    for (;;) {
      const low = await this.receiveFrom(endpointId, 'l', batch, visibilitySec, 0, stopped);
      if (low.length > 0 || stopped()) return low;
      const leftSec = Math.ceil((deadlineMs - Date.now()) / 1000);
      if (leftSec <= 0) return [];
      const sliceSec = Math.min(leftSec, this.sliceSec);
      const urgent = await this.receiveFrom(endpointId, 'u', batch, visibilitySec, sliceSec, stopped);
      if (urgent.length > 0 || stopped()) return urgent;
    }
  }

  /**
   * One ReceiveMessage. It is never aborted mid-flight: SQS would still hand messages to the dropped
   * connection and hide them for the whole visibility timeout. Instead a long poll is cut into short
   * slices, and messages that arrive after the caller stopped are released at once (visibility 0).
   */
  private async receiveFrom(
    endpointId: string,
    lane: Lane,
    batch: number,
    visibilitySec: number,
    waitSec: number,
    stopped: () => boolean,
  ): Promise<QueueMessage[]> {
    const queueUrl = await this.url(endpointId, lane);
    const result = await this.client.send(
      new ReceiveMessageCommand({
        QueueUrl: queueUrl,
        MaxNumberOfMessages: batch,
        VisibilityTimeout: visibilitySec,
        WaitTimeSeconds: waitSec,
      }),
    );
    const messages = (result.Messages ?? []).filter((m) => m.ReceiptHandle);
    if (stopped()) {
      await this.release(queueUrl, messages);
      return [];
    }
    const out: QueueMessage[] = [];
    for (const message of messages) {
      const body = this.parse(message, endpointId);
      if (body) {
        out.push({ jobId: body.jobId, receipt: `${lane}:${message.ReceiptHandle}` });
      } else {
        // Never redeliver what can never be understood: delete it, say so once.
        await this.deleteFrom(queueUrl, message.ReceiptHandle as string);
      }
    }
    return out;
  }

  /** Makes received messages visible again now, for the next receiver. */
  private async release(queueUrl: string, messages: Message[]): Promise<void> {
    if (messages.length === 0) return;
    await this.client.send(
      new ChangeMessageVisibilityBatchCommand({
        QueueUrl: queueUrl,
        Entries: messages.map((m, i) => ({
          Id: String(i),
          ReceiptHandle: m.ReceiptHandle as string,
          VisibilityTimeout: 0,
        })),
      }),
    );
  }

  private parse(message: Message, endpointId: string): QueueMessageBody | undefined {
    let raw: unknown;
    try {
      raw = JSON.parse(message.Body ?? '');
    } catch {
      raw = undefined;
    }
    const parsed = queueMessageSchema.safeParse(raw);
    if (!parsed.success || parsed.data.endpointId !== endpointId) {
      const preview = (message.Body ?? '').slice(0, 200);
      this.warn(
        `ferry: dropped a malformed message ${message.MessageId ?? '?'} from the queue of ${endpointId}: ${JSON.stringify(preview)}`,
      );
      return undefined;
    }
    return parsed.data;
  }

  async ack(endpointId: string, receipt: string): Promise<void> {
    this.assertOpen();
    const match = /^([ul]):(.+)$/s.exec(receipt);
    if (!match) throw internal('Malformed queue receipt');
    await this.deleteFrom(await this.url(endpointId, match[1] as Lane), match[2] as string);
  }

  private async deleteFrom(queueUrl: string, receiptHandle: string): Promise<void> {
    try {
      await this.client.send(new DeleteMessageCommand({ QueueUrl: queueUrl, ReceiptHandle: receiptHandle }));
    } catch (error) {
      // Acknowledging twice (or after the message came back and was deleted by another) is fine.
      const name = error instanceof Error ? error.name : '';
      if (
        name === 'ReceiptHandleIsInvalid' ||
        name === 'InvalidParameterValue' ||
        name === 'MessageNotInflight'
      ) {
        return;
      }
      throw error;
    }
  }

  /** `visible` counts both queues; `urgent` only the one scaling reads. */
  async depth(endpointId: string): Promise<{ visible: number; urgent: number }> {
    this.assertOpen();
    const [urgent, low] = await Promise.all([
      this.visibleIn(endpointId, 'u'),
      this.visibleIn(endpointId, 'l'),
    ]);
    return { visible: urgent + low, urgent };
  }

  private async visibleIn(endpointId: string, lane: Lane): Promise<number> {
    const result = await this.client.send(
      new GetQueueAttributesCommand({
        QueueUrl: await this.url(endpointId, lane),
        AttributeNames: ['ApproximateNumberOfMessages'],
      }),
    );
    return Number(result.Attributes?.ApproximateNumberOfMessages ?? 0);
  }

  /**
   * Receives answer [] from the end of their current slice; the injected client is its owner's to
   * destroy. Closing twice is fine.
   */
  async close(): Promise<void> {
    this.closed = true;
  }

  private assertOpen(): void {
    if (this.closed) throw new Error('The queue is closed');
  }
}
