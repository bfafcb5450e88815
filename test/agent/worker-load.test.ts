/**
 * What the worker's token can make the queue agent ask of SQS and DynamoDB, on DynamoDB Local +
 * fauxqs (docs/security-aws.md, "What is left"): the worker is untrusted code, and each of its
 * requests the agent serves is SQS and DynamoDB requests the account pays for.
 *
 * - The local front door's worker rate limit, by the same rule (core/worker-rate.ts): past it, a take,
 *   ping or log batch is a 429 with Retry-After that reaches neither the queue nor the API, while a
 *   held job's result is still taken; the window is counted on the agent's clock (a fake one here).
 *   A request without the token is a 401 that does not count against the worker's window.
 * - A job-log batch names at most limits.logBatchJobs jobs (each a DynamoDB read): 400 above. Within
 *   that, it counts against the window by the distinct jobs it names (one GetItem each): a batch the
 *   window cannot take whole is a 429 that reads and stores nothing, so the worker's GetItems stay
 *   within its limit.
 * - A ping renews only the listed jobs the agent's supervisor says its worker holds: each renewal is
 *   an UpdateItem on the jobs table every endpoint shares, so a ping of ids it does not hold (made-up
 *   ones, or ids outside its endpoint's form, which its role may not write) makes none, and one that
 *   lists its held job many times makes one.
 */
import { randomUUID } from 'node:crypto';
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CloudWatchLogStore } from '../../core/adapters/aws/cloudwatch-logs.js';
import { FakeClock } from '../../core/clock.js';
import { limits } from '../../core/limits.js';
import { FakeCloudWatchLogs } from '../support/cloudwatchLogs.js';
import { type AwsFixture, dynamoClientFor, startAwsFixture } from '../support/emulators.js';
import { agentOn, apiEngine, memoryLog, watchAgentApi, watchAgentQueue } from './helpers.js';

const log = memoryLog();
const logGroup = '/ferry/job-logs';
const cloudWatch = new FakeCloudWatchLogs([logGroup]);
// Started at the real time: the API side (apiEngine) reads the agents' jobs on the system clock.
const clock = new FakeClock(Date.now());
let aws: AwsFixture;
let api: ReturnType<typeof apiEngine>;

interface Served {
  endpointId: string;
  handle: Awaited<ReturnType<typeof agentOn>>;
}
/** The default limits. Both agents have the job-log route, into an in-memory CloudWatch Logs. */
const logging = { endpointId: `log-${randomUUID().slice(0, 8)}` } as Served;
/** A rate limit of 3 requests a minute on a fake clock. */
const limited = { endpointId: `rate-${randomUUID().slice(0, 8)}` } as Served;
/** The worker routes the limited agent's API served, in order, and the receives it asked of SQS. */
const served: string[] = [];
let receives: string[];
/** The default limits, on a clock of its own, its DynamoDB client counted (`jobUpdates`). */
const pinging = { endpointId: `ping-${randomUUID().slice(0, 8)}` } as Served;
const pingClock = new FakeClock(Date.now());
let pingDynamo: DynamoDBClient;
/** The job ids of the UpdateItem calls the pinging agent sent to the jobs table, in order. */
const jobUpdates: string[] = [];
/** A rate limit of 10 requests a minute on a clock of its own, its DynamoDB client counted (`jobReads`). */
const reading = { endpointId: `read-${randomUUID().slice(0, 8)}` } as Served;
const readClock = new FakeClock(Date.now());
let readDynamo: DynamoDBClient;
/** The job ids of the GetItem calls the reading agent sent to the jobs table, in order. */
const jobReads: string[] = [];

/** Calls `record` with the job id of each `commandName` call `client` sends to the jobs table. */
function countJobCalls(client: DynamoDBClient, commandName: string, record: (jobId: string) => void) {
  client.middlewareStack.add(
    (next, context) => async (args) => {
      // Before or after the document client's marshalling: the key as a string or as { S }.
      const input = args.input as { TableName?: string; Key?: { jobId?: string | { S?: string } } };
      const key = input.Key?.jobId;
      if (context.commandName === commandName && input.TableName === aws.tables.jobs)
        record((typeof key === 'string' ? key : key?.S) ?? '?');
      return next(args);
    },
    { step: 'initialize', name: `count${commandName}` },
  );
}

beforeAll(async () => {
  aws = await startAwsFixture();
  const logsOf = (endpointId: string) =>
    new CloudWatchLogStore({ client: cloudWatch.asClient(), logGroup, logStream: `${endpointId}/agent` });
  logging.handle = await agentOn(aws, logging.endpointId, { log, logs: logsOf(logging.endpointId) });
  limited.handle = await agentOn(aws, limited.endpointId, {
    log,
    logs: logsOf(limited.endpointId),
    clock,
    workerRateLimitRequests: 3,
    rateLimitWindowMs: 60_000,
  });
  watchAgentApi(limited.handle.agent, (req) => served.push(req.path.split('/')[3] ?? ''));
  receives = watchAgentQueue(limited.handle.agent);
  pingDynamo = dynamoClientFor(aws.dynamo.endpoint);
  countJobCalls(pingDynamo, 'UpdateItemCommand', (jobId) => jobUpdates.push(jobId));
  pinging.handle = await agentOn(aws, pinging.endpointId, {
    log,
    clock: pingClock,
    clients: { dynamo: pingDynamo, sqs: aws.sqs, s3: aws.s3 },
  });
  readDynamo = dynamoClientFor(aws.dynamo.endpoint);
  countJobCalls(readDynamo, 'GetItemCommand', (jobId) => jobReads.push(jobId));
  reading.handle = await agentOn(aws, reading.endpointId, {
    log,
    logs: logsOf(reading.endpointId),
    clock: readClock,
    workerRateLimitRequests: 10,
    rateLimitWindowMs: 60_000,
    clients: { dynamo: readDynamo, sqs: aws.sqs, s3: aws.s3 },
  });
  api = apiEngine(aws);
});

afterAll(async () => {
  await logging.handle?.close();
  await limited.handle?.close();
  await pinging.handle?.close();
  pingDynamo?.destroy();
  await reading.handle?.close();
  readDynamo?.destroy();
  api?.close();
  await aws?.stop();
});

/** A worker request to `to`'s agent: `route` is the path after the endpoint id, `{worker}` its worker id. */
async function request(to: Served, route: string, options: { token?: string; body?: unknown } = {}) {
  const { agent } = to.handle;
  const path = route.replace('{worker}', encodeURIComponent(agent.workerId));
  const response = await fetch(`${agent.url}/v2/${to.endpointId}/${path}`, {
    method: options.body === undefined ? 'GET' : 'POST',
    headers: { authorization: options.token ?? agent.workerToken, 'content-type': 'application/json' },
    ...(options.body === undefined ? {} : { body: JSON.stringify(options.body) }),
  });
  const text = await response.text();
  return {
    status: response.status,
    retryAfter: response.headers.get('retry-after'),
    body: text ? (JSON.parse(text) as Record<string, unknown>) : undefined,
  };
}

const logLines = (jobIds: string[], atMs: number) => ({
  lines: jobIds.map((jobId) => ({ jobId, atMs, stream: 'stdout', text: `into ${jobId}` })),
});

describe("the worker's token on the queue agent", () => {
  it(`refuses a job-log batch naming more than ${limits.logBatchJobs} jobs with a 400, storing nothing`, async () => {
    const job = await api.engine.submit(logging.endpointId, { input: {} }, { sync: false });
    const taken = await request(logging, 'job-take/{worker}?agent=1');
    expect(taken.status, log.lines.join('\n')).toBe(200);
    expect(taken.body?.id).toBe(job.id);

    const madeUp = Array.from({ length: limits.logBatchJobs }, (_, i) => `j${i}`);
    const over = await request(logging, 'job-log/{worker}?agent=1', {
      body: logLines([job.id, ...madeUp], Date.now()),
    });
    expect(over.status).toBe(400);
    expect(over.body).toEqual({
      error: `A job-log request carries the lines of at most ${limits.logBatchJobs} jobs; this one names ${limits.logBatchJobs + 1}`,
    });
    // At the cap the batch is read job by job, and refused for the first job this worker never ran.
    const atCap = await request(logging, 'job-log/{worker}?agent=1', {
      body: logLines([job.id, ...madeUp.slice(1)], Date.now()),
    });
    expect(atCap.status).toBe(400);
    expect(atCap.body?.error).toMatch(/^Job j1 is not a job that worker /);
    expect(cloudWatch.calls).not.toContain('PutLogEvents');

    const one = await request(logging, 'job-log/{worker}?agent=1', { body: logLines([job.id], Date.now()) });
    expect(one.status).toBe(200);
    expect(cloudWatch.calls).toContain('PutLogEvents');
    const done = await request(logging, `job-done/{worker}/${job.id}?agent=1`, { body: { output: 'done' } });
    expect(done.status).toBe(200);
  });

  it('limits its requests per window: a take, ping or log batch past it is a 429 that reaches neither SQS nor the API, a result is still taken', async () => {
    const job = await api.engine.submit(limited.endpointId, { input: {} }, { sync: false });
    // Anything on the Docker bridge can reach the agent: its requests without the token are 401 and
    // leave the worker's window as it was.
    for (let i = 0; i < 4; i++) {
      const stranger = await request(limited, 'ping/{worker}?agent=1', { token: 'fyw_not_the_token' });
      expect(stranger.status).toBe(401);
    }

    const taken = await request(limited, 'job-take/{worker}?agent=1');
    expect(taken.status, log.lines.join('\n')).toBe(200);
    expect(taken.body?.id).toBe(job.id);
    expect((await request(limited, `ping/{worker}?agent=1&job_id=${job.id}`)).status).toBe(200);
    expect((await request(limited, `ping/{worker}?agent=1&job_id=${job.id}`)).status).toBe(200);

    clock.advance(15_000);
    // Each refused route says when to come back: the ferry runtime waits what Retry-After asks.
    const refused = {
      status: 429,
      retryAfter: '45',
      body: { error: 'Rate limit of 3 requests per 60 s exceeded; retry in 45 s' },
    };
    expect(await request(limited, `ping/{worker}?agent=1&job_id=${job.id}`)).toEqual(refused);
    for (const route of [
      'job-take/{worker}?agent=1',
      'job-take-batch/{worker}?agent=1&batch_size=2',
      'job-stop/{worker}?agent=1',
    ]) {
      expect(await request(limited, route), route).toEqual(refused);
    }
    const logged = await request(limited, 'job-log/{worker}?agent=1', {
      body: logLines([job.id], clock.now()),
    });
    expect(logged).toEqual(refused);
    expect(receives).toHaveLength(1);
    expect(served).toEqual(['job-take', 'ping', 'ping']);

    // A refused result would be dropped by the worker, and the job run again: it is taken.
    const done = await request(limited, `job-done/{worker}/${job.id}?agent=1`, {
      body: { output: { ok: true } },
    });
    expect(done.status).toBe(200);
    expect(await api.engine.status(limited.endpointId, job.id)).toMatchObject({
      status: 'COMPLETED',
      output: { ok: true },
    });

    // The next window on the agent's clock: served again.
    clock.advance(45_000);
    expect((await request(limited, 'ping/{worker}?agent=1')).status).toBe(200);
    expect(served).toEqual(['job-take', 'ping', 'ping', 'job-done', 'ping']);
  });

  it('renews on a ping only the listed jobs it holds: ids it does not hold cost no DynamoDB write and are answered as before', async () => {
    const job = await api.engine.submit(pinging.endpointId, { input: {} }, { sync: false });
    const taken = await request(pinging, 'job-take/{worker}?agent=1');
    expect(taken.status, log.lines.join('\n')).toBe(200);
    expect(taken.body?.id).toBe(job.id);
    const leaseAt = async () => (await aws.jobs().get(job.id, Date.now()))?.leaseUntil;
    const takenLease = await leaseAt();
    expect(takenLease).toBe(pingClock.now() + limits.leaseMs);

    // Ids it does not hold: of its endpoint's form, another endpoint's queued job, and ids outside
    // the form (its role may not write those on AWS). Short, so 500 fit Node's 16 KB request head.
    const other = await api.engine.submit(logging.endpointId, { input: {} }, { sync: false });
    const notHeld = [
      other.id,
      ...Array.from({ length: limits.pingJobIds - 11 }, (_, i) => `${pinging.endpointId}-${i}`),
      ...Array.from({ length: 10 }, (_, i) => `elsewhere-${i}`),
    ];
    expect(notHeld).toHaveLength(limits.pingJobIds);
    jobUpdates.splice(0);
    const ping = await request(pinging, `ping/{worker}?agent=1&job_id=${notHeld.join(',')}`);
    expect(ping).toEqual({ status: 200, retryAfter: null, body: {} });
    expect(jobUpdates).toEqual([]);
    expect(await leaseAt()).toBe(takenLease);
    expect(await api.engine.status(logging.endpointId, other.id)).toMatchObject({ status: 'IN_QUEUE' });

    // Its held job listed 200 times among 300 it does not hold: one write, and the lease moves on
    // on the agent's clock.
    pingClock.advance(10_000);
    const listed = [...Array.from({ length: 200 }, () => job.id), ...notHeld.slice(0, 300)];
    const renewed = await request(pinging, `ping/{worker}?agent=1&job_id=${listed.join(',')}`);
    expect(renewed).toEqual({ status: 200, retryAfter: null, body: {} });
    expect(jobUpdates).toEqual([job.id]);
    expect(await leaseAt()).toBe(pingClock.now() + limits.leaseMs);

    const done = await request(pinging, `job-done/{worker}/${job.id}?agent=1`, { body: { output: 'done' } });
    expect(done.status).toBe(200);
  });

  it('counts a job-log batch by the distinct jobs it names: one the window cannot take whole is a 429 that costs no GetItem and stores nothing', async () => {
    // Four jobs the worker ran: 8 requests of its 10.
    const ran: string[] = [];
    for (let i = 0; i < 4; i++) {
      const job = await api.engine.submit(reading.endpointId, { input: {} }, { sync: false });
      const taken = await request(reading, 'job-take/{worker}?agent=1');
      expect(taken.body?.id, log.lines.join('\n')).toBe(job.id);
      expect(
        (await request(reading, `job-done/{worker}/${job.id}?agent=1`, { body: { output: i } })).status,
      ).toBe(200);
      ran.push(job.id);
    }
    // A fresh window for the batches alone.
    readClock.advance(60_000);
    jobReads.splice(0);
    const post = (jobIds: string[], text: string) =>
      request(reading, 'job-log/{worker}?agent=1', {
        body: { lines: jobIds.map((jobId) => ({ jobId, atMs: readClock.now(), stream: 'stdout', text })) },
      });
    const stored = () =>
      cloudWatch
        .events(logGroup)
        .filter((event) => event.logStreamName === `${reading.endpointId}/agent`)
        .map((event) => event.message);

    // Each job named twice, read once: a batch costs 4 of the 10.
    const twice = [...ran, ...ran];
    expect((await post(twice, 'first')).status).toBe(200);
    expect((await post(twice, 'second')).status).toBe(200);
    expect([...jobReads].sort()).toEqual([...ran, ...ran].sort());
    const before = stored();
    expect(before.filter((message) => message.includes('second'))).toHaveLength(8);
    // 8 counted: the third batch would make 12.
    expect(await post(twice, 'third')).toEqual({
      status: 429,
      retryAfter: '60',
      body: { error: 'Rate limit of 10 requests per 60 s exceeded; retry in 60 s' },
    });
    expect(jobReads).toHaveLength(8);
    expect(stored()).toEqual(before);
    // What is left still takes a batch of one job; then the window is full.
    expect((await post([ran[0]!], 'fourth')).status).toBe(200);
    expect(jobReads).toHaveLength(9);
    expect((await post([ran[0]!], 'fifth')).status).toBe(429);
    expect(jobReads).toHaveLength(9);

    // After Retry-After, the whole batch goes through.
    readClock.advance(60_000);
    expect((await post(twice, 'again')).status).toBe(200);
    expect(jobReads).toHaveLength(13);
  });
});
