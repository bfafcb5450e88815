/**
 * Builds the job engine and the v2 API over the AWS adapters from the environment the CDK stack sets
 * on each function. Built once per Lambda container (module scope, lazily: `platformFromEnv`), so warm
 * invocations reuse the SDK clients and their keep-alive connections; tests inject clients instead.
 */

import { randomUUID } from 'node:crypto';
import { CloudWatchClient } from '@aws-sdk/client-cloudwatch';
import { CloudWatchLogsClient } from '@aws-sdk/client-cloudwatch-logs';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { ECSClient } from '@aws-sdk/client-ecs';
import { LambdaClient } from '@aws-sdk/client-lambda';
import { S3Client } from '@aws-sdk/client-s3';
import {
  DeleteMessageCommand,
  GetQueueAttributesCommand,
  GetQueueUrlCommand,
  ReceiveMessageCommand,
  SQSClient,
} from '@aws-sdk/client-sqs';
import type { Context } from 'aws-lambda';
import { z } from 'zod';
import { CloudWatchLogStore } from '../core/adapters/aws/cloudwatch-logs.js';
import {
  DynamoControlStore,
  DynamoJobStore,
  type DynamoTableNames,
  DynamoWorkerRegistry,
  documentClient,
} from '../core/adapters/aws/dynamo.js';
import { S3BlobStore, s3ClientConfig } from '../core/adapters/aws/s3.js';
import { SqsJobQueue } from '../core/adapters/aws/sqs.js';
import { StopSignallingChangeFeed } from '../core/adapters/aws/stop-signals.js';
import { QueuedWebhookSender } from '../core/adapters/aws/webhook-queue.js';
import { V2Api } from '../core/api.js';
import { type Authenticator, KeyAuthenticator } from '../core/auth.js';
import { PollingChangeFeed } from '../core/changes.js';
import { systemClock } from '../core/clock.js';
import { JobEngine } from '../core/engine.js';
import { FerryError } from '../core/errors.js';
import { endpointScopedJobId } from '../core/job.js';
import { ManageApi } from '../core/manage.js';
import type { ChangeFeed, Clock, LogStore } from '../core/ports.js';
import { S3PayloadStore } from './payloads.js';
import { lambdaInvoker, NudgingChangeFeed, type ScalerDeps, turnedAwayOf } from './scaler.js';

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
  /** The platform's webhook queue (core/adapters/aws/webhook-queue.ts): final-status webhooks go there. */
  FERRY_WEBHOOK_QUEUE_URL: z.string().url(),
  /** Cap on every wait: under API Gateway's 29 s integration timeout (docs/api.md#aws-front-door). */
  FERRY_MAX_WAIT_MS: positiveMs(25_000),
  /**
   * API Gateway's integration timeout (infra integrationTiming): the API function answers by it even
   * when a cold start took part of it (functions/api.ts).
   */
  FERRY_INTEGRATION_TIMEOUT_MS: positiveMs(29_000),
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
  /** The CloudWatch Logs group of job output (docs/observability.md); unset: no logs to read. */
  FERRY_LOG_GROUP: z.string().min(1).optional(),
  FERRY_LOGS_ENDPOINT: url,
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
  /** Job logs; absent: the management API answers every log read with no lines. */
  logs?: CloudWatchLogsClient;
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
    logs: new CloudWatchLogsClient(env.FERRY_LOGS_ENDPOINT ? { endpoint: env.FERRY_LOGS_ENDPOINT } : {}),
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
  /** The management API (/manage/v1), same keys as `api`. */
  manage: ManageApi;
  jobs: DynamoJobStore;
  control: DynamoControlStore;
  queue: SqsJobQueue;
  workers: DynamoWorkerRegistry;
  /** Present when the scaler is nudged; handlers await `settled()` before they answer. */
  nudges: NudgingChangeFeed | undefined;
  /**
   * Stop signals to agents; handlers await `settled()` before they answer. Always built by
   * buildPlatform; optional for platforms assembled by hand around a single engine.
   */
  stopSignals?: StopSignallingChangeFeed;
  payloads: S3PayloadStore;
  webhooks: QueuedWebhookSender;
  /** The sweeper's reader of dead-lettered messages (the endpoints' `-dlq` queues). */
  deadLetters: DeadLetters;
}

/** Messages of an endpoint's dead-letter queues, read and then deleted by the sweeper. */
export interface DeadLetters {
  /** Up to `max` dead-lettered job ids of the endpoint, each with a way to delete its message. */
  take(endpointId: string, max: number): Promise<Array<{ jobId: string; remove(): Promise<void> }>>;
}

/**
 * DeadLetters over SQS: `ferry-<id>-dlq` and `ferry-<id>-low-dlq` (infra/names.ts).
 *
 * A dead-letter queue is read with a long poll, never a short one. A short poll (WaitTimeSeconds 0)
 * "queries only a subset of the servers (based on a weighted random distribution)" and can answer
 * empty while messages wait; a long poll queries all of them and so eliminates "false empty
 * responses" (Amazon SQS short and long polling, SQS Developer Guide). Read with short polls and
 * stopped at the first empty answer, a dead letter could wait one run or several before its job
 * failed. A long poll returns as soon as a message is there, and waits its whole WaitTimeSeconds
 * (`waitSec`, the 1-second minimum) only when the queue is empty, so an empty answer ends the read.
 * The read stops as well once it has as many letters as the count said: no wait at all when the
 * count was right; what it did not count yet is left for the next run.
 *
 * That wait is not spent on a dead-letter queue whose ApproximateNumberOfMessages is 0: nearly all
 * of them, nearly always, and a 1 s wait on each, serially, would take most of the sweeper's minute
 * with a few dozen endpoints. The count is approximate and may lag ("may not achieve consistency
 * until at least 1 minute after the producers stop sending messages", GetQueueAttributes): a letter
 * it does not count yet is read by a later run, once the count shows it; it is never lost, since a
 * dead letter stays for the queue's retention (14 days, infra/constructs/queues.ts).
 */
export function sqsDeadLetters(sqs: SQSClient, prefix: string, waitSec = 1): DeadLetters {
  const urls = queueUrls(sqs, prefix);
  return {
    async take(endpointId, max) {
      const out: Array<{ jobId: string; remove(): Promise<void> }> = [];
      for (const suffix of ['-dlq', '-low-dlq']) {
        let url: string;
        try {
          url = await urls(`${endpointId}${suffix}`);
        } catch {
          continue; // an endpoint deployed before its DLQ existed, or being deleted
        }
        if (out.length >= max) break;
        const { Attributes } = await sqs.send(
          new GetQueueAttributesCommand({ QueueUrl: url, AttributeNames: ['ApproximateNumberOfMessages'] }),
        );
        let left = Math.min(Number(Attributes?.ApproximateNumberOfMessages ?? 0), max - out.length);
        while (left > 0) {
          const { Messages } = await sqs.send(
            new ReceiveMessageCommand({
              QueueUrl: url,
              MaxNumberOfMessages: Math.min(10, left),
              WaitTimeSeconds: waitSec,
              VisibilityTimeout: 60,
            }),
          );
          if (!Messages || Messages.length === 0) break;
          left -= Messages.length;
          for (const message of Messages) {
            let jobId: string | undefined;
            try {
              jobId = (JSON.parse(message.Body ?? '') as { jobId?: unknown }).jobId as string | undefined;
            } catch {
              jobId = undefined;
            }
            const remove = () =>
              sqs
                .send(new DeleteMessageCommand({ QueueUrl: url, ReceiptHandle: message.ReceiptHandle }))
                .then(() => undefined);
            if (typeof jobId === 'string' && jobId !== '') out.push({ jobId, remove });
            else await remove(); // not a Ferry message: nothing to fail
          }
        }
      }
      return out;
    },
  };
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
  // Webhooks are handed to the webhook queue, whose function makes the attempts; each handler waits
  // for the hand-over before it returns (settleWebhooks): Lambda freezes the sandbox once it returns.
  const webhooks = new QueuedWebhookSender({
    sqs: clients.sqs,
    queueUrl: env.FERRY_WEBHOOK_QUEUE_URL,
    blobs,
    log: { warn: (line) => console.error(`ferry: ${line}`) },
  });
  // A change that makes a worker let go of a job (cancel, timeout, requeue) also bumps that worker's
  // stop signal, which its agent polls instead of the job (core/adapters/aws/stop-signals.ts).
  const stopSignals = new StopSignallingChangeFeed({
    inner: new PollingChangeFeed(clock, env.FERRY_POLL_MS),
    signals: workers,
    clock,
    log: (line) => console.error(`ferry: ${line}`),
  });
  const polling = stopSignals;
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
    // Health shows an endpoint the agents marked failing (core/supervisor.ts, docs/aws.md).
    starts: control,
    // The endpoint leads the id, so IAM can scope each agent to its endpoint's jobs (core/job.ts).
    newId: (endpointId) => endpointScopedJobId(endpointId, `${randomUUID()}-u1`),
    // SQS counts the messages of cancelled and purged jobs until a worker drops them.
    queued: jobs,
    warn: (line) => console.error(`ferry: ${line}`),
  });
  const payloads = new S3PayloadStore({
    client: clients.s3,
    bucket: env.FERRY_BUCKET,
    prefix: env.FERRY_BLOB_PREFIX,
  });
  const auth = options.auth ?? new KeyAuthenticator({ control });
  const api = new V2Api({ engine, control, auth, payloads, maxWaitMs: env.FERRY_MAX_WAIT_MS });
  const logs: LogStore =
    env.FERRY_LOG_GROUP && clients.logs
      ? new CloudWatchLogStore({ client: clients.logs, logGroup: env.FERRY_LOG_GROUP })
      : {
          append: async () => {},
          read: async (query) => ({
            lines: [],
            next: query.after ?? '',
            more: false,
            ended: query.untilMs !== undefined,
          }),
        };
  // Workers as the agents mirror them into the registry (byEndpoint index, no Scan).
  const manage = new ManageApi({
    engine,
    jobs,
    queue,
    control,
    workers,
    logs,
    auth,
    payloads,
    now: () => clock.now(),
  });
  const deadLetters = sqsDeadLetters(clients.sqs, env.FERRY_QUEUE_NAME_PREFIX);
  return {
    env,
    engine,
    api,
    manage,
    jobs,
    control,
    queue,
    workers,
    nudges,
    stopSignals,
    payloads,
    webhooks,
    deadLetters,
  };
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
      jobs: platform.jobs,
      workers: platform.workers,
      ecs: new ECSClient({}),
      turnedAway: turnedAwayOf(new CloudWatchClient({})),
      cluster,
      serviceNamePrefix: platform.env.FERRY_SERVICE_NAME_PREFIX,
      clock: systemClock,
      workerStaleMs: platform.engine.settings.workerStaleMs,
      log: (line) => console.log(JSON.stringify(line)),
    };
  }
  return containerScaler;
}

/**
 * A signal that fires when `signal` does, or `marginMs` before the function times out; undefined
 * without either (a handler called without a Lambda context).
 */
export function deadlineSignal(
  context: Pick<Context, 'getRemainingTimeInMillis'> | undefined,
  marginMs: number,
  signal?: AbortSignal,
): AbortSignal | undefined {
  const remainingMs = context?.getRemainingTimeInMillis?.();
  if (remainingMs === undefined) return signal;
  const timeout = AbortSignal.timeout(Math.max(1, remainingMs - marginMs));
  return signal ? AbortSignal.any([signal, timeout]) : timeout;
}

/**
 * Waits until the webhooks the invocation started are on the webhook queue, until `budgetMs` runs
 * out. Lambda freezes the execution environment as soon as the handler returns and may discard it, so
 * a send left in the background can be lost
 * (https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtime-environment.html). The attempts
 * themselves, and their retries 10 s apart, are the webhook function's (functions/webhooks.ts).
 */
export function settleWebhooks(
  webhooks: Pick<QueuedWebhookSender, 'idle'>,
  budgetMs: number,
): Promise<'settled' | 'gave-up'> {
  return settleWithin('webhooks', () => webhooks.idle(), budgetMs);
}

/**
 * Waits for what an invocation started in the background, before Lambda freezes its environment
 * (https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtime-environment.html): the scaler nudges,
 * the stop signals and the webhooks' hand-over, all at once within `budgetMs`, so that one that hangs
 * takes no time from the others. What is given up is said (settleWithin), never job contents.
 */
export async function settleSends(
  sent: Pick<Platform, 'nudges' | 'stopSignals' | 'webhooks'>,
  budgetMs: number,
): Promise<void> {
  const { nudges, stopSignals, webhooks } = sent;
  await Promise.all([
    nudges && settleWithin('scaler nudges', () => nudges.settled(), budgetMs),
    stopSignals && settleWithin('stop signals', () => stopSignals.settled(), budgetMs),
    settleWebhooks(webhooks, budgetMs),
  ]);
}

/**
 * Waits for `settled` (background sends the invocation started: webhooks, scaler nudges, stop
 * signals) until `budgetMs` runs out, and says so when it gave up: the function must return before
 * its timeout.
 */
export async function settleWithin(
  what: string,
  settled: () => Promise<void>,
  budgetMs: number,
): Promise<'settled' | 'gave-up'> {
  if (budgetMs <= 0) return 'gave-up';
  let timer: NodeJS.Timeout | undefined;
  const outcome = await Promise.race([
    settled().then(() => 'settled' as const),
    new Promise<'gave-up'>((resolve) => {
      timer = setTimeout(() => resolve('gave-up'), budgetMs);
    }),
  ]);
  clearTimeout(timer);
  if (outcome === 'gave-up') console.warn(`ferry: ${what} still being sent when the function had to return`);
  return outcome;
}
