/**
 * Builds the job engine and the v2 API over the AWS adapters from the environment the CDK stack sets
 * on each function. Built once per Lambda container (module scope, lazily: `platformFromEnv`), so warm
 * invocations reuse the SDK clients and their keep-alive connections; tests inject clients instead.
 */
import { randomUUID } from 'node:crypto';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { ECSClient } from '@aws-sdk/client-ecs';
import { LambdaClient } from '@aws-sdk/client-lambda';
import { S3Client } from '@aws-sdk/client-s3';
import { GetQueueUrlCommand, SQSClient } from '@aws-sdk/client-sqs';
import { z } from 'zod';
import {
  DynamoControlStore,
  DynamoJobStore,
  type DynamoTableNames,
  DynamoWorkerRegistry,
  documentClient,
} from '../core/adapters/aws/dynamo.js';
import { S3BlobStore, s3ClientConfig } from '../core/adapters/aws/s3.js';
import { SqsJobQueue } from '../core/adapters/aws/sqs.js';
import { V2Api } from '../core/api.js';
import { type Authenticator, KeyAuthenticator } from '../core/auth.js';
import { PollingChangeFeed } from '../core/changes.js';
import { systemClock } from '../core/clock.js';
import { JobEngine } from '../core/engine.js';
import { FerryError } from '../core/errors.js';
import { endpointScopedJobId } from '../core/job.js';
import type { ChangeFeed, Clock } from '../core/ports.js';
import { HttpWebhookSender } from '../core/webhooks.js';
import { S3PayloadStore } from './payloads.js';
import { lambdaInvoker, NudgingChangeFeed, type ScalerDeps } from './scaler.js';

const positiveMs = (fallback: number) => z.coerce.number().int().positive().default(fallback);
const url = z.string().url().optional();

/** What the stack sets on the functions. Unknown FERRY_* variables are ignored, not rejected. */
export const functionEnvSchema = z.object({
  FERRY_JOBS_TABLE: z.string().min(1),
  FERRY_CHUNKS_TABLE: z.string().min(1),
  FERRY_CONTROL_TABLE: z.string().min(1),
  FERRY_WORKERS_TABLE: z.string().min(1),
  FERRY_BUCKET: z.string().min(1),
  /** Blob keys are prefixed with this (the agent must use the same one). */
  FERRY_BLOB_PREFIX: z.string().default(''),
  /** Queues are `<prefix><endpointId>` and `<prefix><endpointId>-low` (infra/ names them). */
  FERRY_QUEUE_NAME_PREFIX: z.string().default('ferry-'),
  /** Cap on every wait: under API Gateway's 29 s integration timeout (docs/api.md#aws-front-door). */
  FERRY_MAX_WAIT_MS: positiveMs(25_000),
  /** How often a waiting request re-reads DynamoDB (other sandboxes' writes are not heard). */
  FERRY_POLL_MS: positiveMs(500),
  /** The scaler function the API nudges when work reaches an endpoint with no worker (scaler.ts). */
  FERRY_SCALER_FUNCTION: z.string().min(1).optional(),
  /** Scaler only: the ECS cluster of the worker services, and their names' prefix (+ endpoint id). */
  FERRY_CLUSTER: z.string().min(1).optional(),
  FERRY_SERVICE_NAME_PREFIX: z.string().default('ferry-'),
  /** Overrides for emulators and tests; unset on AWS. */
  FERRY_DYNAMODB_ENDPOINT: url,
  FERRY_SQS_ENDPOINT: url,
  FERRY_S3_ENDPOINT: url,
});
export type FunctionEnv = z.infer<typeof functionEnvSchema>;

export function parseFunctionEnv(env: Record<string, string | undefined>): FunctionEnv {
  const parsed = functionEnvSchema.safeParse(env);
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0]!;
  throw new FerryError('failed', `Function configuration: ${issue.path.join('.')}: ${issue.message}`);
}

export interface AwsClients {
  dynamo: DynamoDBClient;
  sqs: SQSClient;
  /** Must carry `s3ClientConfig` (WHEN_REQUIRED checksums) or presigned PUTs break. */
  s3: S3Client;
  /** For the scaler nudge; without it (or FERRY_SCALER_FUNCTION) nothing is nudged. */
  lambda?: LambdaClient;
}

/** Region and credentials from the Lambda environment; endpoints only when overridden. */
export function clientsFromEnv(env: FunctionEnv): AwsClients {
  return {
    dynamo: new DynamoDBClient(env.FERRY_DYNAMODB_ENDPOINT ? { endpoint: env.FERRY_DYNAMODB_ENDPOINT } : {}),
    sqs: new SQSClient(env.FERRY_SQS_ENDPOINT ? { endpoint: env.FERRY_SQS_ENDPOINT } : {}),
    s3: new S3Client({
      ...s3ClientConfig,
      ...(env.FERRY_S3_ENDPOINT ? { endpoint: env.FERRY_S3_ENDPOINT, forcePathStyle: true } : {}),
    }),
    ...(env.FERRY_SCALER_FUNCTION ? { lambda: new LambdaClient({}) } : {}),
  };
}

export interface Platform {
  env: FunctionEnv;
  engine: JobEngine;
  api: V2Api;
  jobs: DynamoJobStore;
  control: DynamoControlStore;
  queue: SqsJobQueue;
  workers: DynamoWorkerRegistry;
  /** Present when the scaler is nudged; handlers await `settled()` before they answer. */
  nudges: NudgingChangeFeed | undefined;
  payloads: S3PayloadStore;
  webhooks: HttpWebhookSender;
}

export interface PlatformOptions {
  env: FunctionEnv;
  clients: AwsClients;
  clock?: Clock;
  /** Who may call. Default: client API keys looked up in the control table, and no worker tokens. */
  auth?: Authenticator;
}

/**
 * The engine and the API over DynamoDB, SQS and S3. The API Lambda serves client routes only: its
 * default authenticator knows no worker token, so worker routes answer 401 behind API Gateway (workers
 * talk to the agent sidecar, never to the public API).
 */
export function buildPlatform(options: PlatformOptions): Platform {
  const { env, clients } = options;
  const clock = options.clock ?? systemClock;
  const doc = documentClient(clients.dynamo);
  const tables: DynamoTableNames = {
    jobs: env.FERRY_JOBS_TABLE,
    chunks: env.FERRY_CHUNKS_TABLE,
    control: env.FERRY_CONTROL_TABLE,
    workers: env.FERRY_WORKERS_TABLE,
  };
  const blobs = new S3BlobStore({
    client: clients.s3,
    bucket: env.FERRY_BUCKET,
    prefix: env.FERRY_BLOB_PREFIX,
  });
  const jobs = new DynamoJobStore({ doc, tables, blobs });
  const control = new DynamoControlStore({ doc, table: tables.control });
  const workers = new DynamoWorkerRegistry({ doc, table: tables.workers });
  const queue = new SqsJobQueue({
    client: clients.sqs,
    queueUrlFor: queueUrls(clients.sqs, env.FERRY_QUEUE_NAME_PREFIX),
  });
  // Webhooks go out in the background; a frozen sandbox resumes them on its next invocation.
  const webhooks = new HttpWebhookSender({ clock });
  const polling = new PollingChangeFeed(clock, env.FERRY_POLL_MS);
  // Late-bound: the engine owns how old a registry record may be before its worker counts as gone.
  const workerStaleMs = () => engine.settings.workerStaleMs;
  const nudges =
    env.FERRY_SCALER_FUNCTION && clients.lambda
      ? new NudgingChangeFeed({
          inner: polling,
          workers,
          clock,
          workerStaleMs,
          invoke: lambdaInvoker(clients.lambda, env.FERRY_SCALER_FUNCTION),
          log: (line) => console.error(`ferry: ${line}`),
        })
      : undefined;
  const changes: ChangeFeed = nudges ?? polling;
  const engine = new JobEngine({
    jobs,
    queue,
    workers,
    changes,
    clock,
    webhooks,
    // The endpoint leads the id, so IAM can scope each agent to its endpoint's jobs (core/job.ts).
    newId: (endpointId) => endpointScopedJobId(endpointId, `${randomUUID()}-u1`),
  });
  const payloads = new S3PayloadStore({
    client: clients.s3,
    bucket: env.FERRY_BUCKET,
    prefix: env.FERRY_BLOB_PREFIX,
  });
  const auth = options.auth ?? new KeyAuthenticator({ control });
  const api = new V2Api({ engine, control, auth, payloads, maxWaitMs: env.FERRY_MAX_WAIT_MS });
  return { env, engine, api, jobs, control, queue, workers, nudges, payloads, webhooks };
}

/**
 * Queue URLs by GetQueueUrl, remembered for the container's life. A failed lookup is forgotten so the
 * next request tries again (a queue created by a later deploy is found without a cold start).
 */
export function queueUrls(sqs: SQSClient, prefix: string) {
  const cache = new Map<string, Promise<string>>();
  return (endpointId: string, options: { lowPriority?: boolean } = {}): Promise<string> => {
    const name = `${prefix}${endpointId}${options.lowPriority ? '-low' : ''}`;
    let found = cache.get(name);
    if (!found) {
      found = sqs.send(new GetQueueUrlCommand({ QueueName: name })).then((result) => {
        if (!result.QueueUrl) throw new FerryError('failed', `SQS has no URL for queue ${name}`);
        return result.QueueUrl;
      });
      found.catch(() => cache.delete(name));
      cache.set(name, found);
    }
    return found;
  };
}

let containerPlatform: Platform | undefined;

/** The container's platform, built on first use from process.env. */
export function platformFromEnv(): Platform {
  if (!containerPlatform) {
    const env = parseFunctionEnv(process.env);
    containerPlatform = buildPlatform({ env, clients: clientsFromEnv(env) });
  }
  return containerPlatform;
}

let containerScaler: ScalerDeps | undefined;

/** The scaler's dependencies, built on first use from process.env (FERRY_CLUSTER is required). */
export function scalerDepsFromEnv(): ScalerDeps {
  if (!containerScaler) {
    const platform = platformFromEnv();
    const cluster = platform.env.FERRY_CLUSTER;
    if (!cluster) throw new FerryError('failed', 'Function configuration: FERRY_CLUSTER is not set');
    containerScaler = {
      control: platform.control,
      queue: platform.queue,
      workers: platform.workers,
      ecs: new ECSClient({}),
      cluster,
      serviceNamePrefix: platform.env.FERRY_SERVICE_NAME_PREFIX,
      clock: systemClock,
      workerStaleMs: platform.engine.settings.workerStaleMs,
      log: (line) => console.log(JSON.stringify(line)),
    };
  }
  return containerScaler;
}
