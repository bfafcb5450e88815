/**
 * The webhook function: the webhook queue's event source (infra/platform-stack.ts). Each record is
 * one attempt of one job's final-status webhook; a failed attempt with attempts left goes back to the
 * queue 10 s later (core/adapters/aws/webhook-queue.ts). It needs no table: its role reaches the
 * webhook queue and the bodies under `payloads/webhooks/`, nothing else.
 */
import type { Context, SQSBatchResponse, SQSEvent } from 'aws-lambda';
import { S3BlobStore } from '../core/adapters/aws/s3.js';
import { deliverWebhookRecords, type WebhookDeliveryOptions } from '../core/adapters/aws/webhook-queue.js';
import { clientsFromEnv, deadlineSignal, parseFunctionEnv } from './wiring.js';

/**
 * What the function keeps of its timeout after abandoning the attempts still under way: to queue
 * the retries of attempts that failed just before, and to answer. A timeout would be a function
 * error, which gives back the whole batch, the delivered records too
 * (https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-errorhandling.html).
 */
export const returnMarginMs = 1_000;

export type WebhookHandler = (
  event: SQSEvent,
  context?: Pick<Context, 'getRemainingTimeInMillis'>,
) => Promise<SQSBatchResponse>;

export function createWebhookHandler(options: () => WebhookDeliveryOptions): WebhookHandler {
  return (event, context) =>
    deliverWebhookRecords(event.Records, {
      ...options(),
      signal: deadlineSignal(context, returnMarginMs),
    });
}

let containerOptions: WebhookDeliveryOptions | undefined;

/** Built once per container from the environment the stack sets on every function. */
function optionsFromEnv(): WebhookDeliveryOptions {
  if (!containerOptions) {
    const env = parseFunctionEnv(process.env);
    // The same clients (and emulator overrides) as the other functions; only SQS and S3 are used.
    const { sqs, s3 } = clientsFromEnv(env);
    containerOptions = {
      sqs,
      queueUrl: env.FERRY_WEBHOOK_QUEUE_URL,
      blobs: new S3BlobStore({ client: s3, bucket: env.FERRY_BUCKET, prefix: env.FERRY_BLOB_PREFIX }),
      log: { warn: (line) => console.error(`ferry: ${line}`) },
    };
  }
  return containerOptions;
}

/** `webhooks.handler` in the bundle (functions/bundle.ts). */
export const handler: WebhookHandler = createWebhookHandler(optionsFromEnv);
