/**
 * The agent container's entry point (bundled to agent.mjs by bundle.ts). Reads its configuration from
 * the environment (config.ts), starts the agent, and on SIGTERM drains and exits 0.
 *
 * Exit codes: 0 after a drain; 1 when the worker kept a stopped job past its grace period (ECS then
 * replaces the task) or the agent failed; 2 for missing or bad configuration.
 */
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { S3Client } from '@aws-sdk/client-s3';
import { SQSClient } from '@aws-sdk/client-sqs';
import { s3ClientConfig } from '../../core/adapters/aws/s3.js';
import { startAgent } from './agent.js';
import { parseAgentEnv } from './config.js';

async function main(): Promise<number> {
  const parsed = parseAgentEnv(process.env);
  if (!parsed.ok) {
    process.stderr.write(
      `ferry-agent: bad configuration:\n${parsed.problems.map((p) => `  ${p}\n`).join('')}`,
    );
    return 2;
  }
  const env = parsed.env;
  const region = env.AWS_REGION;
  const clients = {
    dynamo: new DynamoDBClient({ region }),
    // Address SQS at the client's endpoint (AWS_ENDPOINT_URL_SQS when set, else the regional one),
    // not at the queue URL's host: the same on AWS, and it lets a VPC endpoint or an emulator work.
    sqs: new SQSClient({ region, useQueueUrlAsEndpoint: false }),
    s3: new S3Client({ region, ...s3ClientConfig }),
  };
  const lowUrl = env.FERRY_QUEUE_URL_LOW ?? env.FERRY_QUEUE_URL;
  const agent = await startAgent({
    endpointId: env.FERRY_ENDPOINT_ID,
    clients,
    tables: { jobs: env.FERRY_JOBS_TABLE, chunks: env.FERRY_CHUNKS_TABLE, workers: env.FERRY_WORKERS_TABLE },
    queueUrlFor: (_endpointId, options) => (options?.lowPriority ? lowUrl : env.FERRY_QUEUE_URL),
    bucket: env.FERRY_BUCKET,
    blobPrefix: env.FERRY_BLOB_PREFIX,
    host: env.FERRY_AGENT_HOST,
    port: env.FERRY_AGENT_PORT,
    ...(env.FERRY_WORKER_TOKEN ? { workerToken: env.FERRY_WORKER_TOKEN } : {}),
    ...(env.FERRY_LEASE_SEC ? { leaseMs: env.FERRY_LEASE_SEC * 1000 } : {}),
    ...(env.FERRY_STOP_GRACE_MS !== undefined ? { stopGraceMs: env.FERRY_STOP_GRACE_MS } : {}),
    drainMs: env.FERRY_DRAIN_MS,
    ...(env.ECS_AGENT_URI ? { ecs: { agentUri: env.ECS_AGENT_URI } } : {}),
  });
  const signalled = new Promise<void>((resolve) => {
    process.once('SIGTERM', () => resolve());
    process.once('SIGINT', () => resolve());
  });
  await signalled;
  await agent.drain();
  await agent.close();
  for (const client of Object.values(clients)) client.destroy();
  return 0;
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`ferry-agent: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(1);
  },
);
