/**
 * Each platform Lambda does its whole job holding only its own role: the api (every client route and
 * the management API), the authorizer, the sweeper, the scaler and the webhook function.
 *
 * A role that lacks a grant deploys without complaint and fails on its first call that needs it, so
 * template tests that list a role's actions cannot show it is enough. Here each function's roles'
 * statements come from a synthesized PlatformStack and are put in front of its DynamoDB, SQS and S3
 * clients (test/support/iam-gate.ts), and in front of the CloudWatch Logs, Lambda and ECS stand-ins;
 * the function runs against DynamoDB Local and fauxqs as in the other aws-box tests, and every call it
 * makes must be allowed. Each role is also shown refused what it must not reach. What this does NOT
 * show: that AWS evaluates the statements the same way (docs/security-aws.md); the shim stands in for
 * API Gateway, which checks the authorizer's answer itself.
 */

import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { FilterLogEventsCommand } from '@aws-sdk/client-cloudwatch-logs';
import { UpdateItemCommand } from '@aws-sdk/client-dynamodb';
import {
  DescribeServicesCommand,
  DescribeTasksCommand,
  ListTasksCommand,
  UpdateServiceCommand,
} from '@aws-sdk/client-ecs';
import { InvokeCommand } from '@aws-sdk/client-lambda';
import { DeleteObjectCommand, ListObjectsV2Command } from '@aws-sdk/client-s3';
import { CreateQueueCommand, SendMessageCommand } from '@aws-sdk/client-sqs';
import { App } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { S3BlobStore } from '../../core/adapters/aws/s3.js';
import {
  deliverWebhookRecords,
  type WebhookDeliveryOptions,
  webhookBodyPrefix,
} from '../../core/adapters/aws/webhook-queue.js';
import { hashKey } from '../../core/auth.js';
import { systemClock } from '../../core/clock.js';
import { createScaler, scaleEndpoints } from '../../functions/scaler.js';
import { createSweeper, sweepTiming } from '../../functions/sweeper.js';
import { createWebhookHandler } from '../../functions/webhooks.js';
import { type AwsClients, buildPlatform, type Platform } from '../../functions/wiring.js';
import { PlatformStack } from '../../infra/platform-stack.js';
import type { Agent } from '../../worker-image/agent/agent.js';
import { gpuEndpoint, lbEndpoint, stubFunctionsDir } from '../infra/fixtures.js';
import { statementsOf } from '../infra/iam.js';
import type { FakeCloudWatchLogs } from '../support/cloudwatchLogs.js';
import { type AwsFixture, dynamoClientFor, s3ClientFor, sqsClientFor } from '../support/emulators.js';
import { recordFor } from '../support/endpoints.js';
import { type Access, arnOf, IamGate, Policy, s3Denied } from '../support/iam-gate.js';
import { ProtocolWorker } from '../support/protocolWorker.js';
import {
  type AwsBox,
  boxApiKey,
  messagesOn,
  pollWebhookQueue,
  shimCall,
  startAwsBox,
  untilFinished,
} from './box.js';

const scalerName = 'ferry-scaler';
const scopedKey = 'fy_platform_scope_scoped_key';

let stack: PlatformStack;
let template: Template;
let cleanupStubs: () => void;
let box: AwsBox;
/** One gate per function, each its role's policy. */
const gates = {} as Record<'api' | 'authorizer' | 'sweeper' | 'scaler' | 'webhooks', IamGate>;
const destroyers: (() => void)[] = [];
/** Scaler invocations the api and the sweeper sent (their nudges). */
const nudges: string[] = [];
let mainAgent: Agent;
let worker: { stop(): Promise<void> };

/** A role's policy, the template's tables, bucket, webhook queue and scaler function standing for the box's. */
function policyOf(fn: lambda.Function, fixture: AwsFixture): Policy {
  const logicalId = (construct: { node: { defaultChild?: unknown } }) =>
    stack.getLogicalId(construct.node.defaultChild as never);
  const { tables, bucket } = fixture;
  const arns: Record<string, string> = {
    [logicalId(stack.bucket)]: arnOf.bucket(bucket),
    [logicalId(stack.scalerFunction)]: arnOf.function(scalerName),
    [logicalId(stack.webhookQueue)]: arnOf.queueAt(fixture.webhookQueueUrl),
  };
  for (const role of Object.keys(tables) as (keyof typeof tables)[]) {
    arns[logicalId(stack.tables[role])] = arnOf.table(tables[role]);
  }
  return new Policy(statementsOf(template, fn.role!), arns);
}

/** A function's clients, every one behind its gate. */
function gatedClients(gate: IamGate, fixture: AwsFixture, logs?: FakeCloudWatchLogs): AwsClients {
  const { dynamo, fauxqs, tables } = fixture;
  const clients = {
    dynamo: gate.dynamo(dynamoClientFor(dynamo.endpoint), tables),
    sqs: gate.sqs(sqsClientFor(fauxqs.endpoint)),
    s3: gate.s3(s3ClientFor(fauxqs.endpoint)),
  };
  destroyers.push(() => {
    for (const client of Object.values(clients)) client.destroy();
  });
  const lambdaStandIn = {
    async send(command: InvokeCommand) {
      nudges.push(new TextDecoder().decode(command.input.Payload as Uint8Array));
      return { StatusCode: 202 };
    },
    destroy() {},
  };
  return {
    ...clients,
    ...(logs
      ? {
          logs: gate.send(logs.asClient(), 'logs', (command) =>
            command instanceof FilterLogEventsCommand
              ? [
                  {
                    action: 'logs:FilterLogEvents',
                    resource: arnOf.logGroupEvents(command.input.logGroupName!),
                    leadingKeys: [],
                  },
                ]
              : undefined,
          ),
        }
      : {}),
    lambda: gate.send(lambdaStandIn, 'lambda', (command) =>
      command instanceof InvokeCommand
        ? [
            {
              action: 'lambda:InvokeFunction',
              resource: arnOf.function(command.input.FunctionName!),
              leadingKeys: [],
            },
          ]
        : undefined,
    ) as unknown as AwsClients['lambda'],
  };
}

beforeAll(async () => {
  const stubs = stubFunctionsDir();
  cleanupStubs = stubs.cleanup;
  stack = new PlatformStack(new App(), 'FerryPlatform', {
    functionsCodeDir: stubs.dir,
    instanceTypes: ['g5.xlarge', 'm7i.large'],
  });
  template = Template.fromStack(stack);
  box = await startAwsBox({
    maxWaitMs: 3_000,
    blobPrefix: '',
    scaler: { functionName: scalerName },
    functionClients: (fixture, logs) => {
      gates.api = new IamGate(policyOf(stack.apiFunction, fixture));
      gates.authorizer = new IamGate(policyOf(stack.authorizerFunction, fixture));
      gates.sweeper = new IamGate(policyOf(stack.sweeperFunction, fixture));
      gates.scaler = new IamGate(policyOf(stack.scalerFunction, fixture));
      gates.webhooks = new IamGate(policyOf(stack.webhookFunction, fixture));
      return {
        api: gatedClients(gates.api, fixture, logs),
        authorizer: gatedClients(gates.authorizer, fixture),
      };
    },
  });
  // Deployed configurations, which the scaler reads (the workers' bounds).
  for (const id of ['main', 'idle', 'sweep', 'scale']) {
    await box.addEndpoint(id, recordFor({ ...gpuEndpoint, name: id }, '/nowhere', id).config);
  }
  await box.lambda.control.putApiKey({
    id: 'key-scoped',
    name: 'scoped',
    hash: hashKey(scopedKey),
    createdAt: Date.now(),
    app: 'box',
  });
  mainAgent = await box.agentFor('main');
  worker = new ProtocolWorker(mainAgent.url, 'main', mainAgent.workerToken, mainAgent.workerId).serve();
}, 120_000);

afterAll(async () => {
  await worker?.stop();
  await box?.stop();
  for (const destroy of destroyers) destroy();
  cleanupStubs?.();
});

const call = (method: string, path: string, body?: unknown, key = boxApiKey) =>
  shimCall(box, method, path, body, key);
const untilFinal = (endpointId: string, id: string) => untilFinished(box, endpointId, id);

const used = (gate: IamGate, operation: string) => gate.decisions.some((d) => d.operation === operation);
/** Each operation went through the gate: the policy was exercised, not bypassed. */
const expectExercised = (gate: IamGate, operations: string[]) => {
  for (const operation of operations) expect(used(gate, operation), operation).toBe(true);
};
const denied = { name: 'AccessDeniedException' };
const webhookQueueArn = () => arnOf.queueAt(box.fixture.webhookQueueUrl);
/** The gate let `operation` through on a resource containing `resource`. */
const expectOn = (gate: IamGate, operation: string, resource: string) =>
  expect(
    gate.decisions.some(
      (d) => d.operation === operation && d.allowed && d.resources.some((r) => r.includes(resource)),
    ),
    `${operation} on ${resource}`,
  ).toBe(true);
/** A worker record of main's, as only its agents may write one. */
const forgeWorkerRecord = (platform: Platform) =>
  platform.workers.heartbeat({
    workerId: 'main-forged',
    endpointId: 'main',
    state: 'idle',
    jobIds: [],
    lastSeenAt: 0,
  });

describe('the api and authorizer functions, each with its own role', () => {
  it('serve every client route and the management API; every call allowed', async () => {
    const run = await call('POST', '/v2/main/run', { input: { echo: 'small' } });
    expect(run.status).toBe(200);
    expect(await untilFinal('main', run.body.id)).toMatchObject({ status: 'COMPLETED', output: 'small' });
    expect((await call('GET', `/v2/main/status/${run.body.id}`)).body.status).toBe('COMPLETED');

    const sync = await call('POST', '/v2/main/runsync?wait=10000', { input: { echo: 'sync' } });
    expect(sync.body).toMatchObject({ status: 'COMPLETED', output: 'sync' });

    // Over a DynamoDB item's inline budget: input and output live in S3.
    const big = 'x'.repeat(200 * 1024);
    const bigRun = await call('POST', '/v2/main/run', { input: { echo: big } });
    expect((await untilFinal('main', bigRun.body.id)).output).toBe(big);

    // uploads + inputRef: the presigned PUT, the ranged read of the input by the run.
    const input = '{"echo":"uploaded"}';
    const upload = await call('POST', '/v2/main/uploads', { sizeBytes: input.length });
    expect(upload.status).toBe(200);
    expect((await fetch(upload.body.uploadUrl, { method: 'PUT', body: input })).status).toBe(200);
    const uploaded = await call('POST', '/v2/main/run', { inputRef: upload.body.inputRef });
    expect(uploaded.status).toBe(200);
    expect((await untilFinal('main', uploaded.body.id)).output).toBe('uploaded');

    const streamed = await call('POST', '/v2/main/run', { input: { chunks: ['a', 'b'] } });
    await untilFinal('main', streamed.body.id);
    expect((await call('GET', `/v2/main/stream/${streamed.body.id}`)).status).toBe(200);

    // A running job cancelled: its holder's stop signal; a failed job retried (its stream cleared).
    const slow = await call('POST', '/v2/main/run', { input: { echo: 'slow', sleepMs: 3_000 } });
    await expect
      .poll(async () => (await call('GET', `/v2/main/status/${slow.body.id}`)).body.status, {
        timeout: 10_000,
      })
      .toBe('IN_PROGRESS');
    expect((await call('POST', `/v2/main/cancel/${slow.body.id}`)).body.status).toBe('CANCELLED');
    // Its input in S3: the retry copies it to a fresh key (CopyObject), so no blob outlives its job.
    const failing = await call('POST', '/v2/main/run', {
      input: { fail: 'boom', pad: 'p'.repeat(200 * 1024) },
    });
    expect((await untilFinal('main', failing.body.id)).status).toBe('FAILED');
    expect((await call('POST', `/v2/main/retry/${failing.body.id}`)).body.status).toBe('IN_QUEUE');
    await untilFinal('main', failing.body.id);

    // No worker on idle: the submit nudges the scaler; a queued job cancelled (its webhook, with a
    // body big enough to wait in S3, handed to the webhook queue); the queue purged.
    const queued = await call('POST', '/v2/idle/run', {
      input: { n: 1, big: 'w'.repeat(250 * 1024) },
      webhook: 'https://hooks.example.com/ferry',
    });
    expect((await call('POST', `/v2/idle/cancel/${queued.body.id}`)).body.status).toBe('CANCELLED');
    await call('POST', '/v2/idle/run', { input: { n: 2 } });
    expect((await call('POST', '/v2/idle/purge-queue')).body).toMatchObject({ removed: 1 });
    const health = await call('GET', '/v2/main/health');
    expect(health.status).toBe(200);
    expect(health.body.jobs.completed).toBeGreaterThanOrEqual(1);

    // The management API.
    for (const path of [
      '/manage/v1/endpoints',
      '/manage/v1/endpoints/main',
      '/manage/v1/endpoints/main/jobs',
      `/manage/v1/endpoints/main/jobs/${run.body.id}`,
      '/manage/v1/endpoints/main/logs',
      '/manage/v1/endpoints/main/workers',
      '/manage/v1/endpoints/main/metrics',
    ]) {
      expect((await call('GET', path)).status, path).toBe(200);
    }

    // A key scoped to an app: the authorizer allows it the v2 routes; the API checks its scope.
    expect((await call('GET', '/v2/main/health', undefined, scopedKey)).status).toBe(200);

    expect(gates.api.denied()).toEqual([]);
    expect(gates.authorizer.denied()).toEqual([]);
    // Exercised, not bypassed.
    expectExercised(gates.api, [
      'dynamodb:TransactWriteItems',
      'dynamodb:Query',
      'dynamodb:UpdateItem',
      'sqs:SendMessage',
      'sqs:GetQueueAttributes',
      's3:PutObject',
      // An upload is read with one ranged GetObject (functions/payloads.ts), no HeadObject first.
      's3:GetObject',
      's3:CopyObject',
      'logs:FilterLogEvents',
      'lambda:Invoke',
    ]);
    expect(
      gates.api.decisions.some(
        (d) => d.operation === 'dynamodb:UpdateItem' && d.keys.some((k) => k.endsWith('#stop')),
      ),
    ).toBe(true);
    expectOn(gates.api, 'sqs:SendMessage', webhookQueueArn());
    expectOn(gates.api, 's3:PutObject', `/${webhookBodyPrefix}`);
    expect(used(gates.authorizer, 'dynamodb:GetItem')).toBe(true);
    // It reads the key alone: no listing of endpoints for a scoped key's policy any more.
    expect(used(gates.authorizer, 'dynamodb:Query')).toBe(false);
    expect(nudges.some((payload) => payload.includes('idle'))).toBe(true);

    // What they must not reach: the api writes no endpoint record and no worker record (only their
    // stop signals); the authorizer reads API keys, never an endpoint record, nor lists them.
    const api = buildPlatform({ env: box.env, clients: gatedClients(gates.api, box.fixture) });
    const authorizer = buildPlatform({ env: box.env, clients: gatedClients(gates.authorizer, box.fixture) });
    try {
      const record = (await box.lambda.control.getEndpoint('main'))!;
      await expect(api.control.putEndpoint({ ...record, config: { forged: true } })).rejects.toMatchObject(
        denied,
      );
      await expect(forgeWorkerRecord(api)).rejects.toMatchObject(denied);
      await expect(authorizer.control.getEndpoint('main')).rejects.toMatchObject(denied);
      await expect(authorizer.control.startFailures('main')).rejects.toMatchObject(denied);
      await expect(authorizer.control.listEndpoints()).rejects.toMatchObject(denied);
    } finally {
      await api.queue.close();
      await authorizer.queue.close();
    }
  }, 120_000);
});

describe('the sweeper function with its own role', () => {
  it("requeues a lapsed lease, resends a stale job, fails dead letters and a failing endpoint's queue, deletes expired jobs; every call allowed", async () => {
    const admin = box.lambda;
    // A job taken by a worker that then went silent: its input big enough to live in S3.
    const sweepAgent = await box.agentFor('sweep');
    const silent = new ProtocolWorker(sweepAgent.url, 'sweep', sweepAgent.workerToken, sweepAgent.workerId);
    // Its timeout outlasts the sweep's clock, so the lapsed lease requeues it (and nudges the scaler).
    // Its webhook carries the input: the sweep that ends it past its ttl reads it (s3:GetObject).
    const held = await call('POST', '/v2/sweep/run', {
      input: { blob: 'h'.repeat(200 * 1024) },
      policy: { executionTimeout: 3_600_000 },
      webhook: 'https://hooks.example.com/held',
    });
    expect((await silent.take())?.id).toBe(held.body.id);
    // A job left waiting, and one whose message was dead-lettered.
    const waiting = await call('POST', '/v2/sweep/run', { input: { n: 'waiting' } });
    const lettered = await call('POST', '/v2/sweep/run', { input: { n: 'lettered' } });
    const { QueueUrl } = await box.fixture.sqs.send(new CreateQueueCommand({ QueueName: 'ferry-sweep-dlq' }));
    await box.fixture.sqs.send(
      new SendMessageCommand({ QueueUrl, MessageBody: JSON.stringify({ jobId: lettered.body.id }) }),
    );
    // An endpoint whose workers cannot start, with a job waiting.
    const stranded = await call('POST', '/v2/idle/run', {
      input: { n: 'stranded' },
      webhook: 'https://hooks.example.com/stranded',
    });
    await admin.control.markFailing('idle', {
      state: 'failing',
      reason: 'cannot start',
      lines: [],
      sinceMs: 0,
    });

    // The sweeper's own platform, its clock moved on: past the lease and the job timeout into the
    // minute a job waiting 10 minutes gets its message again (sweepTiming), then forty days.
    let offsetMs = sweepTiming.staleQueuedMs + 30_000;
    const clock = { now: () => Date.now() + offsetMs, sleep: systemClock.sleep };
    const platform: Platform = buildPlatform({
      env: box.env,
      clients: gatedClients(gates.sweeper, box.fixture),
      clock,
    });
    const sweep = createSweeper(
      () => platform,
      () => clock.now(),
    );
    const quiet = vi.spyOn(console, 'log').mockImplementation(() => {});
    const nudgesBefore = nudges.length;
    try {
      const first = await sweep();
      expect(first).toMatchObject({ deadLettered: 1 });
      expect(first.requeued).toBeGreaterThanOrEqual(1);
      expect((await admin.jobs.get(held.body.id, clock.now()))?.status).toBe('IN_QUEUE');
      // The requeue nudged the scaler, after looking for the endpoint's live workers (none now).
      expect(nudges.slice(nudgesBefore).map((payload) => JSON.parse(payload).endpointId)).toContain('sweep');
      expect(first.resent).toBeGreaterThanOrEqual(1);
      expect(first.notStartable).toBeGreaterThanOrEqual(1);
      expect((await admin.jobs.get(lettered.body.id, clock.now()))?.status).toBe('FAILED');
      expect((await admin.jobs.get(stranded.body.id, clock.now()))?.status).toBe('FAILED');
      expect((await admin.jobs.get(waiting.body.id, clock.now()))?.status).toBe('IN_QUEUE');
      offsetMs = 40 * 24 * 3_600_000;
      const second = await sweep();
      expect(second.expired + second.deleted).toBeGreaterThanOrEqual(1);
      const third = await sweep();
      expect(second.deleted + third.deleted).toBeGreaterThanOrEqual(1);
    } finally {
      quiet.mockRestore();
      await platform.queue.close();
      await admin.control.clearStartFailures('idle');
    }
    expect(gates.sweeper.denied()).toEqual([]);
    // The stranded job's webhook, handed to the webhook queue.
    expectOn(gates.sweeper, 'sqs:SendMessage', webhookQueueArn());
    expectExercised(gates.sweeper, [
      'dynamodb:TransactWriteItems',
      'dynamodb:Query',
      'dynamodb:BatchGetItem',
      'sqs:SendMessage',
      'sqs:ReceiveMessage',
      'sqs:DeleteMessage',
      's3:GetObject',
      's3:DeleteObject',
    ]);
    // What it must not reach: endpoint records, API keys, the agents' worker records.
    const sweeper = buildPlatform({ env: box.env, clients: gatedClients(gates.sweeper, box.fixture) });
    await expect(sweeper.control.getEndpoint('main')).rejects.toMatchObject(denied);
    await expect(sweeper.control.findApiKeyByHash(hashKey(boxApiKey))).rejects.toMatchObject(denied);
    await expect(forgeWorkerRecord(sweeper)).rejects.toMatchObject(denied);
    await sweeper.queue.close();
  }, 120_000);
});

describe('the sweeper and a payload that is gone for good (S3 tells a missing key only to a role that may list the bucket)', () => {
  it('leaves the job out of its sweep with a warning and moves the others; no call refused', async () => {
    await box.addEndpoint('gone', recordFor({ ...gpuEndpoint, name: 'gone' }, '/nowhere', 'gone').config);
    const agent = await box.agentFor('gone');
    const silent = new ProtocolWorker(agent.url, 'gone', agent.workerToken, agent.workerId);
    const policy = { executionTimeout: 3_600_000 };
    // Both taken by a worker that then goes silent; one's input (an S3 object) is removed outside
    // Ferry. That one overran its execution timeout and has a webhook, which carries the input: the
    // sweep that times it out reads it whole (a requeue, or a job without a webhook, reads no input).
    const broken = await call('POST', '/v2/gone/run', {
      input: { blob: 'g'.repeat(200 * 1024) },
      policy: { executionTimeout: 5_000 },
      webhook: 'https://hooks.example.com/gone',
    });
    const fine = await call('POST', '/v2/gone/run', { input: { n: 'fine' }, policy });
    const taken = [(await silent.take())?.id, (await silent.take())?.id];
    expect(taken.sort()).toEqual([broken.body.id, fine.body.id].sort());
    const { Contents = [] } = await box.fixture.s3.send(
      new ListObjectsV2Command({ Bucket: box.fixture.bucket, Prefix: `payloads/${broken.body.id}` }),
    );
    expect(Contents.length).toBeGreaterThan(0);
    for (const { Key } of Contents)
      await box.fixture.s3.send(new DeleteObjectCommand({ Bucket: box.fixture.bucket, Key }));

    // Past the lease: both are overdue.
    const clock = { now: () => Date.now() + 5 * 60_000, sleep: systemClock.sleep };
    const platform = buildPlatform({
      env: box.env,
      clients: gatedClients(gates.sweeper, box.fixture),
      clock,
    });
    const warnings: string[] = [];
    // The engine reports a job it could not move on stderr (functions/wiring.ts).
    const warn = vi.spyOn(console, 'error').mockImplementation((line: string) => void warnings.push(line));
    const reports: string[] = [];
    const quiet = vi.spyOn(console, 'log').mockImplementation((line: string) => void reports.push(line));
    const deniedBefore = gates.sweeper.denied().length;
    try {
      // The run does the rest, then fails, so that the SweeperErrors alarm (Lambda's Errors metric)
      // hears of the job it left.
      await expect(
        createSweeper(
          () => platform,
          () => clock.now(),
        )(),
      ).rejects.toThrow('1 job(s) could not be swept and were left for the next run');
      const report = reports.map((line) => JSON.parse(line)).find((r) => r.msg === 'ferry sweep');
      expect(report).toMatchObject({ left: 1 });
      expect(report.requeued).toBeGreaterThanOrEqual(1);
      expect((await box.lambda.jobs.get(fine.body.id, clock.now()))?.status).toBe('IN_QUEUE');
      // Read as missing (a 404), not refused: the sweep says so and leaves the job for the next one.
      expect(warnings.join('\n')).toContain(
        `job ${broken.body.id} left for the next sweep: A stored payload is missing`,
      );
      expect((await box.lambda.jobs.get(broken.body.id, clock.now(), { input: false }))?.status).toBe(
        'IN_PROGRESS',
      );
    } finally {
      warn.mockRestore();
      quiet.mockRestore();
      await platform.queue.close();
    }
    // The read of the missing object went through as a 404, not a refusal.
    expect(gates.sweeper.denied().slice(deniedBefore)).toEqual([]);
  }, 60_000);
});

describe('the scaler function with its own role', () => {
  it('reads demand and sets desired counts, every call allowed; it reads no job and touches no other service', async () => {
    for (const n of [1, 2]) await call('POST', '/v2/scale/run', { input: { n } });
    // A load-balanced endpoint just woken from zero: one task, created 30 s ago, not running yet.
    const wake = { ...lbEndpoint, name: 'wake', resources: { ...lbEndpoint.resources, workersMin: 0 } };
    await box.addEndpoint('wake', recordFor(wake, '/nowhere', 'wake').config);
    const wakingTask = arnOf.task('ferry', 'waking1');
    const updates: { service: string; desired: number }[] = [];
    const ecsStandIn = {
      async send(
        command: DescribeServicesCommand | UpdateServiceCommand | ListTasksCommand | DescribeTasksCommand,
      ) {
        if (command instanceof DescribeServicesCommand) {
          return {
            services: (command.input.services ?? []).map((serviceName) => ({
              serviceName,
              status: 'ACTIVE',
              desiredCount: serviceName === 'ferry-wake' ? 1 : 0,
              deployments: [{ id: 'ecs-svc/1', status: 'PRIMARY' }],
            })),
          };
        }
        if (command instanceof ListTasksCommand) {
          return { taskArns: command.input.serviceName === 'ferry-wake' ? [wakingTask] : [] };
        }
        if (command instanceof DescribeTasksCommand) {
          return { tasks: [{ taskArn: wakingTask, createdAt: new Date(Date.now() - 30_000) }] };
        }
        updates.push({ service: command.input.service!, desired: command.input.desiredCount! });
        return {};
      },
    };
    const ecs = gates.scaler.send(ecsStandIn, 'ecs', (command): Access[] | undefined => {
      const onService = (action: string, service: string) => ({
        action,
        resource: arnOf.service(command.input.cluster, service),
        leadingKeys: [],
      });
      if (command instanceof DescribeServicesCommand)
        return (command.input.services ?? []).map((s) => onService('ecs:DescribeServices', s));
      if (command instanceof UpdateServiceCommand)
        return [onService('ecs:UpdateService', command.input.service!)];
      if (command instanceof ListTasksCommand)
        return [
          {
            action: 'ecs:ListTasks',
            resource: '*',
            leadingKeys: [],
            context: { 'ecs:cluster': arnOf.cluster(command.input.cluster!) },
          },
        ];
      if (command instanceof DescribeTasksCommand)
        return (command.input.tasks ?? []).map((task) => ({
          action: 'ecs:DescribeTasks',
          resource: task.startsWith('arn:') ? task : arnOf.task(command.input.cluster!, task),
          leadingKeys: [],
        }));
      return undefined;
    });
    const platform = buildPlatform({ env: box.env, clients: gatedClients(gates.scaler, box.fixture) });
    const deps = {
      control: platform.control,
      queue: platform.queue,
      jobs: platform.jobs,
      workers: platform.workers,
      ecs: ecs as never,
      cluster: 'ferry',
      serviceNamePrefix: 'ferry-',
      clock: systemClock,
      workerStaleMs: platform.engine.settings.workerStaleMs,
      log: () => {},
    };
    try {
      const reports = await scaleEndpoints(deps, {});
      expect(reports.filter((r) => r.error)).toEqual([]);
      expect(updates).toContainEqual({ service: 'ferry-scale', desired: expect.any(Number) });
      expect(updates.find((u) => u.service === 'ferry-scale')!.desired).toBeGreaterThanOrEqual(1);
      // The woken endpoint keeps its booting task: its tasks were read, its count left at 1.
      expect(reports.find((r) => r.endpointId === 'wake')).toMatchObject({ booting: 1, updated: false });
      expect(updates.map((u) => u.service)).not.toContain('ferry-wake');
      expect(gates.scaler.denied()).toEqual([]);
      expectExercised(gates.scaler, [
        'dynamodb:Query',
        'sqs:GetQueueAttributes',
        'ecs:DescribeServices',
        'ecs:UpdateService',
        'ecs:ListTasks',
        'ecs:DescribeTasks',
      ]);
      // The IN_QUEUE bound read only count partitions of the jobs table.
      const onJobs = gates.scaler.decisions.filter((d) =>
        d.resources.some((r) => r.includes(`table/${box.fixture.tables.jobs}`)),
      );
      expect(onJobs.length).toBeGreaterThan(0);
      expect(onJobs.flatMap((d) => d.keys).every((k) => k.endsWith('#COUNTS'))).toBe(true);

      // Tasks that could not start (a secrets= name with no secret), as EventBridge hands them over
      // (infra/constructs/alarms.ts): each task counts once as a failed start of its endpoint (a copy
      // of an event does not), and the third makes it failing, so the scaler wants no task for it,
      // with no call refused.
      const failedStart = (task: string) => ({
        version: '0',
        source: 'aws.ecs',
        'detail-type': 'ECS Task State Change',
        detail: {
          clusterArn: arnOf.cluster('ferry'),
          taskArn: arnOf.task('ferry', task),
          startedBy: 'ecs-svc/1',
          containerInstanceArn: `${arnOf.cluster('ferry').replace(':cluster/', ':container-instance/')}/0a1b2c`,
          group: 'service:ferry-scale',
          lastStatus: 'STOPPED',
          desiredStatus: 'STOPPED',
          stopCode: 'TaskFailedToStart',
          stoppedReason:
            'ResourceInitializationError: unable to pull secrets or registry auth: retrieve secret from ferry/box/production/HF_TOKEN',
          containers: [{ name: 'worker', lastStatus: 'STOPPED' }],
        },
      });
      const scaler = createScaler(() => deps);
      await scaler(failedStart('failed1'));
      for (let i = 1; i <= 3; i++) {
        const [report] = await scaler(failedStart(`failed${i}`));
        expect(report?.decision?.desired, `after failed start ${i}`).toEqual(i < 3 ? expect.any(Number) : 0);
      }
      const starts = await box.lambda.control.startFailures('scale');
      expect(starts?.failedStarts).toBe(3);
      expect(starts?.problem).toMatchObject({ state: 'failing' });
      expect(starts?.problem?.reason).toContain('ferry/box/production/HF_TOKEN');
      expect(gates.scaler.denied()).toEqual([]);
      expectExercised(gates.scaler, ['dynamodb:UpdateItem']);
      // Its writes reach STARTS# items only: not a key's item, say.
      const forged = new UpdateItemCommand({
        TableName: box.fixture.tables.control,
        Key: { pk: { S: `KEY#${hashKey('forged')}` }, sk: { S: 'KEY' } },
        UpdateExpression: 'SET body = :b',
        ExpressionAttributeValues: { ':b': { S: '{}' } },
      });
      await expect(gatedClients(gates.scaler, box.fixture).dynamo.send(forged)).rejects.toMatchObject(denied);
      await box.lambda.control.clearStartFailures('scale');

      // No job, no write of a table, no service outside Ferry's.
      const jobId = (await call('POST', '/v2/scale/run', { input: { n: 3 } })).body.id;
      await expect(platform.jobs.get(jobId, Date.now())).rejects.toMatchObject(denied);
      await expect(platform.jobs.listByStatus('scale', 'IN_QUEUE', Date.now(), 10)).rejects.toMatchObject(
        denied,
      );
      const record = (await box.lambda.control.getEndpoint('scale'))!;
      await expect(
        platform.control.putEndpoint({ ...record, config: { forged: true } }),
      ).rejects.toMatchObject(denied);
      await expect(
        ecs.send(new UpdateServiceCommand({ cluster: 'ferry', service: 'billing-api', desiredCount: 0 })),
      ).rejects.toMatchObject(denied);
      await expect(
        ecs.send(new UpdateServiceCommand({ cluster: 'other', service: 'ferry-scale', desiredCount: 0 })),
      ).rejects.toMatchObject(denied);
      // Tasks of another cluster are neither listed nor described.
      await expect(ecs.send(new ListTasksCommand({ cluster: 'other' }))).rejects.toMatchObject(denied);
      await expect(
        ecs.send(new DescribeTasksCommand({ cluster: 'other', tasks: [arnOf.task('other', 't1')] })),
      ).rejects.toMatchObject(denied);
    } finally {
      await platform.queue.close();
    }
  }, 60_000);
});

describe('the webhook function with its own role', () => {
  it('receives, attempts, queues a retry and deletes a body in S3; every call allowed; it reads no job and reaches no endpoint queue', async () => {
    // A receiver that fails once, then takes it.
    const answers = [500];
    const posts: string[] = [];
    const receiver = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        posts.push(req.url ?? '');
        res.writeHead(answers.shift() ?? 200).end();
      });
    });
    receiver.listen(0, '127.0.0.1');
    await once(receiver, 'listening');
    const hook = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
    const { sqs, s3 } = gatedClients(gates.webhooks, box.fixture);
    try {
      const queued = await call('POST', '/v2/idle/run', { input: { n: 'hooked' }, webhook: hook });
      expect((await call('POST', `/v2/idle/cancel/${queued.body.id}`)).body.status).toBe('CANCELLED');
      const options: WebhookDeliveryOptions = {
        sqs,
        queueUrl: box.fixture.webhookQueueUrl,
        blobs: new S3BlobStore({ client: s3, bucket: box.fixture.bucket, prefix: box.env.FERRY_BLOB_PREFIX }),
        // The earlier cases' webhooks (hooks.example.com) go to a closed local port: they fail fast.
        resolve: async () => [{ address: '127.0.0.1', family: 4 }],
        allow: ['127.0.0.1'],
        retryDelayMs: 1_000,
        log: { warn: () => {} },
      };
      // Lambda's event source mapping receives and deletes with the function's role too.
      const handler = createWebhookHandler(() => options);
      for (let i = 0; i < 40 && (await messagesOn(box.fixture.sqs, box.fixture.webhookQueueUrl)) > 0; i++) {
        await pollWebhookQueue(sqs, box.fixture.webhookQueueUrl, handler);
      }
      expect(posts).toEqual(['/hook', '/hook']);
      expect(gates.webhooks.denied()).toEqual([]);
      expectExercised(gates.webhooks, [
        'sqs:ReceiveMessage',
        'sqs:DeleteMessage',
        's3:GetObject',
        's3:DeleteObject',
      ]);
      expectOn(gates.webhooks, 'sqs:SendMessage', webhookQueueArn());

      // A message received again after its delivery ended (SQS may hand out a deleted message again):
      // its body is gone, and the function must see that as gone (404), not as refused (403), or the
      // record would go round five times into the dead-letter queue and raise the alarm.
      const again = await deliverWebhookRecords(
        [
          {
            messageId: 'again',
            receiptHandle: 'again',
            body: `${webhookBodyPrefix}${queued.body.id}/gone.json`,
            attributes: {} as never,
            messageAttributes: {
              url: { stringValue: hook, dataType: 'String' },
              attempt: { stringValue: '2', dataType: 'Number' },
              bodyKey: { stringValue: `${webhookBodyPrefix}${queued.body.id}/gone.json`, dataType: 'String' },
            },
            md5OfBody: '',
            eventSource: 'aws:sqs',
            eventSourceARN: 'arn',
            awsRegion: 'us-east-1',
          },
        ],
        options,
      );
      expect(again).toEqual({ batchItemFailures: [] });
      expect(posts).toHaveLength(2);

      // What it must not reach: any table, an endpoint's queue, a job's payloads.
      const platform = buildPlatform({ env: box.env, clients: gatedClients(gates.webhooks, box.fixture) });
      try {
        await expect(platform.jobs.get(queued.body.id, Date.now())).rejects.toMatchObject(denied);
        await expect(platform.control.findApiKeyByHash(hashKey(boxApiKey))).rejects.toMatchObject(denied);
        await expect(
          sqs.send(
            new SendMessageCommand({
              QueueUrl: await box.fixture.queueUrlFor('main'),
              MessageBody: JSON.stringify({ jobId: 'main-forged', endpointId: 'main', lowPriority: false }),
            }),
          ),
        ).rejects.toMatchObject(denied);
        await expect(options.blobs.get(`payloads/${queued.body.id}/input`)).rejects.toMatchObject(s3Denied);
        await expect(
          options.blobs.put(`${webhookBodyPrefix}forged.json`, Buffer.from('{}')),
        ).rejects.toMatchObject(s3Denied);
      } finally {
        await platform.queue.close();
      }
    } finally {
      receiver.close();
    }
  }, 120_000);
});
