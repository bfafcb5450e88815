/**
 * The contract suites against the aws provider: DynamoDB Local (the official emulator, a JVM) for
 * JobStore, ControlStore and WorkerRegistry; fauxqs for SQS (JobQueue) and S3 (BlobStore). Started
 * once for this file; every test uses unique ids, so they share the tables, queues and bucket.
 */
import { afterAll, beforeAll } from 'vitest';
import { type AwsFixture, startAwsFixture } from '../support/emulators.js';
import { describeBlobStoreContract } from './blobStore.contract.js';
import { describeControlStoreContract } from './controlStore.contract.js';
import { describeJobQueueContract } from './jobQueue.contract.js';
import { describeJobStoreContract } from './jobStore.contract.js';
import { describeWorkerRegistryContract } from './workerRegistry.contract.js';

let aws: AwsFixture;

beforeAll(async () => {
  aws = await startAwsFixture();
});
afterAll(async () => {
  await aws?.stop();
});

describeJobStoreContract('dynamodb local + s3 (fauxqs)', async () => {
  const jobs = aws.jobs();
  return { jobs, close: () => jobs.close() };
});

// SQS counts visibility and long polls in whole seconds.
describeJobQueueContract(
  'sqs (fauxqs)',
  async () => {
    const queue = aws.queue();
    return { queue, close: () => queue.close() };
  },
  { visibilityMs: 1_000, longPollMs: 1_000 },
);

describeControlStoreContract('dynamodb local', async () => {
  const control = aws.control();
  return { control, close: () => control.close() };
});

describeWorkerRegistryContract('dynamodb local', async () => {
  return { workers: aws.workers(), close: async () => {} };
});

describeBlobStoreContract('s3 (fauxqs)', async () => {
  const blobs = aws.blobs('contract/');
  return { blobs, close: () => blobs.close() };
});
