/**
 * AWS in a box: DynamoDB Local + fauxqs (SQS and S3) with the platform's tables, bucket and queues;
 * the Lambda handlers (authorizer + api) behind the API Gateway shim; and, per endpoint, the agent
 * sidecar (worker-image/agent) that serves the worker protocol next to a worker on ECS.
 *
 *   client ──HTTP──▶ shim ──▶ authorizer.handler ──▶ api.handler ──▶ DynamoDB Local / fauxqs
 *   worker ──HTTP──▶ agent (startAgent, one per endpoint) ───────────▶ the same tables and queues
 *
 * The two sides share nothing in process but the emulators: each has its own SDK clients and engine,
 * as a Lambda sandbox and an ECS task would.
 */

import { DescribeServicesCommand, UpdateServiceCommand } from '@aws-sdk/client-ecs';
import type { LambdaClient } from '@aws-sdk/client-lambda';
import {
  DeleteMessageCommand,
  GetQueueAttributesCommand,
  ReceiveMessageCommand,
  type SQSClient,
} from '@aws-sdk/client-sqs';
import type { SQSBatchResponse, SQSRecord } from 'aws-lambda';
import { CloudWatchLogStore } from '../../core/adapters/aws/cloudwatch-logs.js';
import { S3BlobStore } from '../../core/adapters/aws/s3.js';
import { QueuedWebhookSender } from '../../core/adapters/aws/webhook-queue.js';
import { hashKey } from '../../core/auth.js';
import { systemClock } from '../../core/clock.js';
import type { EndpointRecord } from '../../core/ports.js';
import { createApiHandler } from '../../functions/api.js';
import { createAuthorizer } from '../../functions/authorizer.js';
import { type ScalerEvent, scaleEndpoints } from '../../functions/scaler.js';
import { type Shim, startShim } from '../../functions/shim.js';
import {
  type AwsClients,
  buildPlatform,
  type FunctionEnv,
  type Platform,
  parseFunctionEnv,
  queueUrls,
} from '../../functions/wiring.js';
import { jobLogGroupName } from '../../infra/names.js';
import { type Agent, type AgentOptions, startAgent } from '../../worker-image/agent/agent.js';
import { FakeCloudWatchLogs } from '../support/cloudwatchLogs.js';
import {
  type AwsFixture,
  dynamoClientFor,
  s3ClientFor,
  sqsClientFor,
  startAwsFixture,
} from '../support/emulators.js';
import { call } from '../support/platform.js';

export const boxApiKey = 'fy_aws_box_test_key';

export interface AwsBox {
  fixture: AwsFixture;
  env: FunctionEnv;
  /** The platform the api Lambda built (its engine, stores, payload store). */
  lambda: Platform;
  shim: Shim;
  /** `${shim.url}/v2`, what clients use. */
  baseUrl: string;
  /** The agent of an endpoint (started on first use); workers connect to `agent.url`. */
  agentFor(endpointId: string): Promise<Agent>;
  /**
   * A new agent of the endpoint, as one more ECS task starts one, with the box's clients and
   * settings overridden by `extra`. Not cached: the caller closes it.
   */
  newAgent(endpointId: string, extra?: Partial<AgentOptions>): Promise<Agent>;
  /** Job output: CloudWatch Logs in memory (no emulator runs here), shared by agents and the Lambda. */
  cloudWatchLogs: FakeCloudWatchLogs;
  /** Exit codes the agents asked for (a worker that kept a stopped job); tests expect none. */
  agentExits: number[];
  addEndpoint(id: string, config?: Record<string, unknown>): Promise<EndpointRecord>;
  stop(): Promise<void>;
}

export interface AwsBoxOptions {
  maxWaitMs?: number;
  /** How long the agents hold worker long polls. */
  workerWaitMs?: number;
  /** FERRY_BLOB_PREFIX (default `ferry/`); the deployed stacks use '' (infra/platform-stack.ts). */
  blobPrefix?: string;
  /** The api Lambda nudges this scaler function (FERRY_SCALER_FUNCTION) through `lambda`, or through functionClients' api one. */
  scaler?: { functionName: string; lambda?: LambdaClient };
  /**
   * The api and authorizer Lambdas' own clients (each function's role in front of them,
   * test/support/iam-gate.ts); without them both use the box's. `lambda` keeps the box's clients
   * either way: it sets up what an operator's deploy would (endpoints, keys).
   */
  functionClients?: (
    fixture: AwsFixture,
    logs: FakeCloudWatchLogs,
  ) => { api: AwsClients; authorizer: AwsClients };
}

const clientsFor = (fixture: AwsFixture) => ({
  dynamo: dynamoClientFor(fixture.dynamo.endpoint),
  sqs: sqsClientFor(fixture.fauxqs.endpoint),
  s3: s3ClientFor(fixture.fauxqs.endpoint),
});

export async function startAwsBox(options: AwsBoxOptions = {}): Promise<AwsBox> {
  const fixture = await startAwsFixture();
  // The deployed job-log group (infra/names.ts), which the api role's logs grant names.
  const logGroup = jobLogGroupName;
  const cloudWatchLogs = new FakeCloudWatchLogs([logGroup]);
  const env = parseFunctionEnv({
    FERRY_JOBS_TABLE: fixture.tables.jobs,
    FERRY_CHUNKS_TABLE: fixture.tables.chunks,
    FERRY_CONTROL_TABLE: fixture.tables.control,
    FERRY_WORKERS_TABLE: fixture.tables.workers,
    FERRY_BUCKET: fixture.bucket,
    FERRY_BLOB_PREFIX: options.blobPrefix ?? 'ferry/',
    FERRY_QUEUE_NAME_PREFIX: 'ferry-',
    FERRY_WEBHOOK_QUEUE_URL: fixture.webhookQueueUrl,
    FERRY_MAX_WAIT_MS: String(options.maxWaitMs ?? 25_000),
    FERRY_POLL_MS: '200',
    FERRY_DYNAMODB_ENDPOINT: fixture.dynamo.endpoint,
    FERRY_SQS_ENDPOINT: fixture.fauxqs.endpoint,
    FERRY_S3_ENDPOINT: fixture.fauxqs.endpoint,
    FERRY_LOG_GROUP: logGroup,
    ...(options.scaler ? { FERRY_SCALER_FUNCTION: options.scaler.functionName } : {}),
  });
  const lambdaClients = {
    ...clientsFor(fixture),
    logs: cloudWatchLogs.asClient(),
    ...(options.scaler?.lambda ? { lambda: options.scaler.lambda } : {}),
  };
  const agentClients = clientsFor(fixture);
  const destroyClients = () => {
    for (const client of [...Object.values(lambdaClients), ...Object.values(agentClients)]) client?.destroy();
  };
  const agents = new Map<string, Promise<Agent>>();
  const agentExits: number[] = [];
  const closeAgents = async () => {
    const started = await Promise.allSettled(agents.values());
    await Promise.all(started.map((a) => (a.status === 'fulfilled' ? a.value.close() : undefined)));
  };
  let shim: Shim | undefined;
  let closeFunctions = async () => {};
  try {
    // The api Lambda's container: built once, as platformFromEnv does on AWS.
    const lambda = buildPlatform({ env, clients: lambdaClients });
    await lambda.control.putApiKey({
      id: 'key-box',
      name: 'aws box',
      hash: hashKey(boxApiKey),
      createdAt: Date.now(),
    });
    const functions = options.functionClients?.(fixture, cloudWatchLogs);
    const api = functions ? buildPlatform({ env, clients: functions.api }) : lambda;
    const authorizer = functions ? buildPlatform({ env, clients: functions.authorizer }) : lambda;
    closeFunctions = async () => {
      for (const platform of new Set([api, authorizer])) {
        if (platform === lambda) continue;
        await platform.queue.close();
      }
    };
    shim = await startShim({
      api: createApiHandler(() => api),
      authorizer: createAuthorizer(() => authorizer.control),
    });
    const agentQueueUrls = queueUrls(agentClients.sqs, env.FERRY_QUEUE_NAME_PREFIX);

    const running = shim;
    const newAgent = (endpointId: string, extra: Partial<AgentOptions> = {}) =>
      startAgent({
        endpointId,
        clients: agentClients,
        // As on ECS (worker-image/agent/main.ts): the jobs' webhooks go to the platform's queue, with
        // the agent's own clients.
        webhooks: new QueuedWebhookSender({
          sqs: (extra.clients ?? agentClients).sqs,
          queueUrl: fixture.webhookQueueUrl,
          blobs: new S3BlobStore({
            client: (extra.clients ?? agentClients).s3,
            bucket: fixture.bucket,
            prefix: env.FERRY_BLOB_PREFIX,
          }),
        }),
        tables: fixture.tables,
        queueUrlFor: agentQueueUrls,
        bucket: fixture.bucket,
        blobPrefix: env.FERRY_BLOB_PREFIX,
        port: 0,
        workerWaitMs: options.workerWaitMs ?? 2_000,
        pollMs: 200,
        pingIntervalMs: 500,
        tickMs: 200,
        log: { info: () => {}, warn: () => {}, error: () => {} },
        // Never process.exit the test runner; the tests assert no exit was asked for.
        exit: (code) => {
          agentExits.push(code);
        },
        ...extra,
      });
    return {
      fixture,
      env,
      lambda,
      shim: running,
      baseUrl: `${running.url}/v2`,
      cloudWatchLogs,
      agentExits,
      newAgent,
      agentFor(endpointId) {
        let agent = agents.get(endpointId);
        if (!agent) {
          agent = newAgent(endpointId, {
            // One log stream per agent, as one per ECS task on AWS.
            logs: new CloudWatchLogStore({
              client: cloudWatchLogs.asClient(),
              logGroup,
              logStream: `${endpointId}/box`,
            }),
          });
          agents.set(endpointId, agent);
        }
        return agent;
      },
      async addEndpoint(id, config = {}) {
        const record: EndpointRecord = {
          id,
          app: 'box',
          env: 'production',
          name: id,
          kind: 'queue',
          config,
          fingerprint: 'box',
          createdAt: Date.now(),
          updatedAt: Date.now(),
        };
        await lambda.control.putEndpoint(record);
        // infra/ creates both queues per endpoint; the functions find them with GetQueueUrl.
        await fixture.queueUrlFor(id);
        await fixture.queueUrlFor(id, { lowPriority: true });
        return record;
      },
      async stop() {
        await running.close();
        await closeAgents();
        await closeFunctions();
        await lambda.queue.close();
        destroyClients();
        await fixture.stop();
      },
    };
  } catch (error) {
    await shim?.close();
    await closeAgents();
    await closeFunctions();
    destroyClients();
    await fixture.stop();
    throw error;
  }
}

/** One request through the shim (API Gateway's part), as a client sends it: JSON in, status and JSON out. */
export async function shimCall(
  box: AwsBox,
  method: string,
  path: string,
  body?: unknown,
  key: string = boxApiKey,
): Promise<{ status: number; body: any }> {
  return call(box.shim.url, method, path, body, { authorization: `Bearer ${key}` });
}

/** A job's status once it no longer waits or runs (status-sync through the shim, a minute at most). */
export async function untilFinished(box: AwsBox, endpointId: string, id: string): Promise<any> {
  for (let i = 0; i < 20; i++) {
    const r = await shimCall(box, 'POST', `/v2/${endpointId}/status-sync/${id}?wait=3000`);
    if (!['IN_QUEUE', 'IN_PROGRESS'].includes(r.body.status)) return r.body;
  }
  throw new Error(`job ${id} never finished`);
}

/**
 * The scaler Lambda's answer for one endpoint of the box (its real scaleEndpoints on the box's
 * tables), with ECS answering that the endpoint's service wants one task now; `updates` holds the
 * desiredCount it asked ECS for, if any.
 */
export async function scalerDecision(
  box: AwsBox,
  endpointId: string,
  event: ScalerEvent = { endpointId },
): Promise<{ desired: number | undefined; updates: number[] }> {
  const updates: number[] = [];
  const [report] = await scaleEndpoints(
    {
      control: box.lambda.control,
      queue: box.lambda.queue,
      jobs: box.lambda.jobs,
      workers: box.lambda.workers,
      ecs: {
        async send(command: unknown): Promise<any> {
          if (command instanceof DescribeServicesCommand) {
            return {
              services: [{ serviceName: `ferry-${endpointId}`, status: 'ACTIVE', desiredCount: 1 }],
            };
          }
          if (command instanceof UpdateServiceCommand) updates.push(command.input.desiredCount!);
          return {};
        },
      },
      cluster: 'ferry',
      serviceNamePrefix: 'ferry-',
      clock: systemClock,
      workerStaleMs: box.lambda.engine.settings.workerStaleMs,
    },
    event,
  );
  return { desired: report?.decision?.desired, updates };
}

/**
 * What Lambda's event source mapping does for the webhook function (infra/platform-stack.ts): receive
 * up to 10 messages of the webhook queue with their attributes, hand them to `handler` as SQS records,
 * and delete those it did not list as batch item failures; those stay invisible until the queue's
 * visibility timeout. One poll; answers how many records it handed over.
 */
export async function pollWebhookQueue(
  sqs: SQSClient,
  queueUrl: string,
  handler: (event: { Records: SQSRecord[] }) => Promise<SQSBatchResponse>,
  waitSeconds = 1,
): Promise<{ records: SQSRecord[]; failures: string[] }> {
  const { Messages = [] } = await sqs.send(
    new ReceiveMessageCommand({
      QueueUrl: queueUrl,
      MaxNumberOfMessages: 10,
      WaitTimeSeconds: waitSeconds,
      MessageAttributeNames: ['All'],
      // Lambda's own receive sets the visibility timeout it reads from the queue; 30 s here.
      VisibilityTimeout: 30,
    }),
  );
  const records = Messages.map(
    (m): SQSRecord => ({
      messageId: m.MessageId!,
      receiptHandle: m.ReceiptHandle!,
      body: m.Body ?? '',
      attributes: {} as SQSRecord['attributes'],
      messageAttributes: Object.fromEntries(
        Object.entries(m.MessageAttributes ?? {}).map(([name, value]) => [
          name,
          { stringValue: value.StringValue, dataType: value.DataType! },
        ]),
      ),
      md5OfBody: m.MD5OfBody ?? '',
      eventSource: 'aws:sqs',
      eventSourceARN: queueUrl,
      awsRegion: 'us-east-1',
    }),
  );
  if (records.length === 0) return { records, failures: [] };
  const { batchItemFailures } = await handler({ Records: records });
  const failures = batchItemFailures.map((f) => f.itemIdentifier);
  for (const m of Messages) {
    if (!failures.includes(m.MessageId!))
      await sqs.send(new DeleteMessageCommand({ QueueUrl: queueUrl, ReceiptHandle: m.ReceiptHandle }));
  }
  return { records, failures };
}

/** Messages on a queue: visible, delayed and in flight. */
export async function messagesOn(sqs: SQSClient, queueUrl: string): Promise<number> {
  const { Attributes = {} } = await sqs.send(
    new GetQueueAttributesCommand({
      QueueUrl: queueUrl,
      AttributeNames: [
        'ApproximateNumberOfMessages',
        'ApproximateNumberOfMessagesDelayed',
        'ApproximateNumberOfMessagesNotVisible',
      ],
    }),
  );
  return Object.values(Attributes).reduce((sum, n) => sum + Number(n), 0);
}
