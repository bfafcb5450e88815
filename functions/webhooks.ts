/**
 * The webhook function: the webhook queue's event source (infra/platform-stack.ts). Each record is
 * one attempt of one job's final-status webhook; a failed attempt with attempts left goes back to the
 * queue 10 s later (core/adapters/aws/webhook-queue.ts). It needs no table: its role reaches the
 * webhook queue and the bodies under `payloads/webhooks/`, nothing else.
 */
import type { SQSBatchResponse, SQSEvent } from 'aws-lambda';
import { S3BlobStore } from '../core/adapters/aws/s3.js';
import { deliverWebhookRecords, type WebhookDeliveryOptions } from '../core/adapters/aws/webhook-queue.js';
import { clientsFromEnv, parseFunctionEnv } from './wiring.js';

export type WebhookHandler = (event: SQSEvent) => Promise<SQSBatchResponse>;

export function createWebhookHandler(options: () => WebhookDeliveryOptions): WebhookHandler {
  return (event) => deliverWebhookRecords(event.Records, options());
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
