/**
 * The agent container's entry point (bundled to agent.mjs by bundle.ts). Reads its configuration from
 * the environment (config.ts) and runs the mode FERRY_AGENT_MODE names:
 *
 *   queue     (default) the worker-protocol sidecar; on SIGTERM drains and exits 0
 *   lb        the key-checking proxy of a load-balanced endpoint; on SIGTERM finishes requests, exits 0
 *   artifact  downloads the app artifact for the worker (the task's init container) and exits 0
 *
 * Both serving modes watch the worker container (ecsWorker.ts) and leave when it is gone.
 *
 * Exit codes: 0 after a drain, a download, or a worker that stopped with its task; 1 when the worker
 * exited on its own, kept a stopped job past its grace period or made no contact within its start
 * grace (ECS then replaces the task), a download failed, or the agent failed; 2 for missing or bad
 * configuration.
 */

import { randomUUID } from 'node:crypto';
import { CloudWatchLogsClient } from '@aws-sdk/client-cloudwatch-logs';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { ECSClient } from '@aws-sdk/client-ecs';
import { S3Client } from '@aws-sdk/client-s3';
import { SQSClient } from '@aws-sdk/client-sqs';
import { CloudWatchLogStore, jobLogStreamPrefix } from '../../core/adapters/aws/cloudwatch-logs.js';
import { DynamoControlStore, DynamoWorkerRegistry, documentClient } from '../../core/adapters/aws/dynamo.js';
import { S3BlobStore, s3ClientConfig } from '../../core/adapters/aws/s3.js';
import { QueuedWebhookSender } from '../../core/adapters/aws/webhook-queue.js';
import { systemClock } from '../../core/clock.js';
import { messageOf } from '../../core/errors.js';
import type { StartGrace } from '../../core/supervisor.js';
import { serviceName } from '../../infra/names.js';
import { startAgent } from './agent.js';
import {
  artifactS3Config,
  downloadArtifact,
  readTaskSecret,
  writeLbSecret,
  writeTaskSecret,
} from './artifact.js';
import { type ArtifactEnv, type LbAgentEnv, parseAgentEnv, type QueueAgentEnv } from './config.js';
import { agentCredentials } from './credentials.js';
import { type WorkerExit, watchWorkerContainer } from './ecsWorker.js';
import { startLbAgent } from './lb.js';
import { agentLog } from './log.js';
import type { EcsProtectionOptions } from './protection.js';
import { watchSuperseded } from './superseded.js';

/**
 * Task scale-in protection on ECS (protection.ts): on while the task is busy, off once it has been
 * idle for the endpoint's idle_timeout. Outside ECS there is no ECS agent to ask.
 */
function taskProtectionOf(env: QueueAgentEnv | LbAgentEnv): { ecs?: EcsProtectionOptions } {
  if (!env.ECS_AGENT_URI) return {};
  return {
    ecs: {
      agentUri: env.ECS_AGENT_URI,
      ...(env.FERRY_IDLE_TIMEOUT_SEC ? { protectionOffAfterMs: env.FERRY_IDLE_TIMEOUT_SEC * 1000 } : {}),
    },
  };
}

/** How long the worker may take to make contact (the endpoint's health_check_grace), both modes. */
const startGraceOf = (env: QueueAgentEnv | LbAgentEnv): { startGrace: StartGrace } => ({
  startGrace: {
    ...(env.FERRY_HEALTH_CHECK_GRACE_SEC ? { startGraceMs: env.FERRY_HEALTH_CHECK_GRACE_SEC * 1000 } : {}),
    // On ECS the task metadata reports the worker container's start; the grace counts from it.
    awaitStart: env.ECS_CONTAINER_METADATA_URI_V4 !== undefined,
  },
});

/**
 * SIGTERM or SIGINT from now on. Each serving mode listens before it starts its agent: a stop that
 * comes while the agent is still starting (ECS scaling in a task just placed) is then a stop, not
 * the signal's default death.
 */
const signalled = (): Promise<void> =>
  new Promise<void>((resolve) => {
    process.once('SIGTERM', () => resolve());
    process.once('SIGINT', () => resolve());
  });

/**
 * Runs until ECS stops the task (SIGTERM: exit code 0 after the agent's own wind-down) or the agent
 * wants to leave, watching the worker container meanwhile: its exit goes to `workerExited`, which
 * decides whether it was a crash, a failed start or a stop with the task (ecsWorker.ts).
 */
async function untilLeaving(
  env: QueueAgentEnv | LbAgentEnv,
  agent: {
    leaving: Promise<number>;
    workerStarted(atMs: number): void;
    workerExited(how: WorkerExit): Promise<void>;
    /** A deploy replaced this task's definition (superseded.ts): step aside once the work is done. */
    retire?(why: string): void;
    /** ECS is stopping the task: no new work from now (ecsWorker.ts onTaskStopping). */
    drain?(): Promise<void>;
  },
  stopAsked: Promise<void>,
  ecs?: ECSClient,
): Promise<number> {
  const watching = new AbortController();
  const metadataUri = env.ECS_CONTAINER_METADATA_URI_V4;
  const warn = (message: string) => process.stderr.write(`ferry-agent: ${message}\n`);
  const watched = metadataUri
    ? watchWorkerContainer({
        metadataUri,
        containerName: env.FERRY_WORKER_CONTAINER,
        clock: systemClock,
        signal: watching.signal,
        onStarted: (atMs) => agent.workerStarted(atMs),
        onExit: (how) => agent.workerExited(how),
        // The queue agent's drain: what SIGTERM would start, begun as soon as the stop is decided.
        onTaskStopping: () => {
          agent.drain?.().catch((error: unknown) => warn(`draining: ${messageOf(error)}`));
        },
        warn,
      })
    : Promise.resolve();
  const retire = agent.retire?.bind(agent);
  const superseded =
    metadataUri && ecs && retire
      ? watchSuperseded({
          ecs,
          metadataUri,
          serviceName: serviceName(env.FERRY_ENDPOINT_ID),
          clock: systemClock,
          signal: watching.signal,
          onSuperseded: (reason) => retire(reason),
          warn,
        })
      : Promise.resolve();
  const code = await Promise.race([stopAsked.then(() => 0), agent.leaving]);
  watching.abort();
  await Promise.all([watched, superseded]);
  return code;
}

async function runQueue(env: QueueAgentEnv): Promise<number> {
  const stopAsked = signalled();
  const region = env.AWS_REGION;
  const credentials = await agentCredentials(env);
  const clients = {
    dynamo: new DynamoDBClient({ region, credentials }),
    // Address SQS at the client's endpoint (AWS_ENDPOINT_URL_SQS when set, else the regional one),
    // not at the queue URL's host: the same on AWS, and it lets a VPC endpoint or an emulator work.
    sqs: new SQSClient({ region, credentials, useQueueUrlAsEndpoint: false }),
    s3: new S3Client({ region, credentials, ...s3ClientConfig }),
  };
  const ecs = new ECSClient({ region, credentials });
  const lowUrl = env.FERRY_QUEUE_URL_LOW ?? env.FERRY_QUEUE_URL;
  const logsClient = new CloudWatchLogsClient({ region, credentials });
  const agent = await startAgent({
    endpointId: env.FERRY_ENDPOINT_ID,
    endpointName: env.FERRY_ENDPOINT,
    clients,
    tables: {
      jobs: env.FERRY_JOBS_TABLE,
      chunks: env.FERRY_CHUNKS_TABLE,
      workers: env.FERRY_WORKERS_TABLE,
      ...(env.FERRY_CONTROL_TABLE ? { control: env.FERRY_CONTROL_TABLE } : {}),
    },
    queueUrlFor: (_endpointId, options) => (options?.lowPriority ? lowUrl : env.FERRY_QUEUE_URL),
    bucket: env.FERRY_BUCKET,
    blobPrefix: env.FERRY_BLOB_PREFIX,
    host: env.FERRY_AGENT_HOST,
    port: env.FERRY_AGENT_PORT,
    ...(env.FERRY_WORKER_TOKEN ? { workerToken: env.FERRY_WORKER_TOKEN } : {}),
    ...(env.FERRY_LEASE_SEC ? { leaseMs: env.FERRY_LEASE_SEC * 1000 } : {}),
    ...(env.FERRY_MAX_CONCURRENCY ? { maxConcurrency: env.FERRY_MAX_CONCURRENCY } : {}),
    ...(env.FERRY_STOP_GRACE_MS !== undefined ? { stopGraceMs: env.FERRY_STOP_GRACE_MS } : {}),
    drainMs: env.FERRY_DRAIN_MS,
    ...startGraceOf(env),
    ...(env.FERRY_WEBHOOK_QUEUE_URL
      ? {
          webhooks: new QueuedWebhookSender({
            sqs: clients.sqs,
            queueUrl: env.FERRY_WEBHOOK_QUEUE_URL,
            blobs: new S3BlobStore({
              client: clients.s3,
              bucket: env.FERRY_BUCKET,
              prefix: env.FERRY_BLOB_PREFIX,
            }),
            log: agentLog,
          }),
        }
      : {}),
    // One metrics line per ended job on stdout: the awslogs driver ships it to the agent container's
    // stream, where the dashboard's queries read it (core/metrics.ts).
    metricsOut: (line) => process.stdout.write(`${line}\n`),
    ...(env.FERRY_LOG_GROUP
      ? {
          logs: new CloudWatchLogStore({
            client: logsClient,
            logGroup: env.FERRY_LOG_GROUP,
            // One stream per task: writers never share a stream.
            logStream: `${jobLogStreamPrefix(env.FERRY_ENDPOINT_ID)}${randomUUID()}`,
          }),
        }
      : {}),
    ...taskProtectionOf(env),
  });
  // SIGTERM from ECS, or the supervisor wants this task replaced (refresh_worker, a dead worker).
  const code = await untilLeaving(env, agent, stopAsked, ecs);
  await agent.drain();
  await agent.close();
  for (const client of Object.values(clients)) client.destroy();
  logsClient.destroy();
  ecs.destroy();
  return code;
}

async function runLb(env: LbAgentEnv): Promise<number> {
  const stopAsked = signalled();
  const credentials = await agentCredentials(env);
  const dynamo = new DynamoDBClient({ region: env.AWS_REGION, credentials });
  const ecs = new ECSClient({ region: env.AWS_REGION, credentials });
  const doc = documentClient(dynamo);
  // API keys (KEY#…) and the endpoint's run of failed worker starts (STARTS#<id>): infra/isolation.ts.
  const control = new DynamoControlStore({ doc, table: env.FERRY_CONTROL_TABLE });
  const agent = await startLbAgent({
    endpointId: env.FERRY_ENDPOINT_ID,
    endpointName: env.FERRY_ENDPOINT,
    app: env.FERRY_APP,
    env: env.FERRY_ENV,
    control,
    starts: control,
    workerPort: env.FERRY_PORT,
    workerHost: env.FERRY_WORKER_HOST,
    ...(env.FERRY_LB_SECRET_FILE
      ? { workerSecret: await readTaskSecret(env.FERRY_LB_SECRET_FILE, 'FERRY_LB_SECRET_FILE') }
      : {}),
    host: env.FERRY_AGENT_HOST,
    port: env.FERRY_AGENT_PORT,
    keyCacheMs: env.FERRY_KEY_CACHE_MS,
    ...(env.FERRY_LB_IDLE_TIMEOUT_SEC ? { upstreamIdleMs: env.FERRY_LB_IDLE_TIMEOUT_SEC * 1000 } : {}),
    ...(env.FERRY_WORKERS_TABLE
      ? { registry: new DynamoWorkerRegistry({ doc, table: env.FERRY_WORKERS_TABLE }) }
      : {}),
    ...taskProtectionOf(env),
    ...startGraceOf(env),
  });
  const code = await untilLeaving(env, agent, stopAsked, ecs);
  await agent.close(env.FERRY_DRAIN_MS);
  dynamo.destroy();
  ecs.destroy();
  return code;
}

async function runArtifact(env: ArtifactEnv): Promise<number> {
  // Its socket timeout cuts a stalled connection; downloadArtifact resumes, at most a few times, then
  // fails, and main exits 1: the task stops instead of holding its host with no agent running.
  const s3 = new S3Client({ region: env.AWS_REGION, ...artifactS3Config(env.FERRY_ARTIFACT_STALL_MS) });
  try {
    const bytes = await downloadArtifact({
      s3,
      bucket: env.FERRY_ARTIFACT_BUCKET,
      key: env.FERRY_ARTIFACT_KEY,
      path: env.FERRY_ARTIFACT_PATH,
      log: (line) => process.stderr.write(`ferry-agent: ${line}\n`),
    });
    process.stderr.write(`ferry-agent: artifact ready at ${env.FERRY_ARTIFACT_PATH} (${bytes} bytes)\n`);
    if (env.FERRY_LB_SECRET_FILE) await writeLbSecret(env.FERRY_LB_SECRET_FILE);
    if (env.FERRY_AGENT_EXTERNAL_ID_FILE && env.FERRY_AGENT_EXTERNAL_ID) {
      await writeTaskSecret(env.FERRY_AGENT_EXTERNAL_ID_FILE, env.FERRY_AGENT_EXTERNAL_ID);
    }
    return 0;
  } finally {
    s3.destroy();
  }
}

async function main(): Promise<number> {
  const parsed = parseAgentEnv(process.env);
  if (!parsed.ok) {
    process.stderr.write(
      `ferry-agent: bad configuration:\n${parsed.problems.map((p) => `  ${p}\n`).join('')}`,
    );
    return 2;
  }
  const env = parsed.env;
  switch (env.FERRY_AGENT_MODE) {
    case 'lb':
      return runLb(env);
    case 'artifact':
      return runArtifact(env);
    default:
      return runQueue(env);
  }
}

/**
 * Leave by setting the exit code and letting the event loop empty, so stdout (the metrics lines)
 * and stderr are flushed. Everything the agent opened is closed by then; the unref'd timer is only a
 * backstop for a socket an SDK client left open, so a drained task never outlives ECS's stopTimeout.
 */
function leaveWith(code: number): void {
  process.exitCode = code;
  setTimeout(() => process.exit(code), 5_000).unref();
}

main().then(leaveWith, (error: unknown) => {
  process.stderr.write(`ferry-agent: ${messageOf(error)}\n`);
  leaveWith(1);
});
