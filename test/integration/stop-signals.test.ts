/**
 * What the job-stop long poll of an agent reads on DynamoDB Local (core/adapters/aws/stop-signals.ts).
 * An agent-side engine holds a job with a big inline input; its job-stop poll must read only the
 * worker's small stop-signal item in the steady state, and read the job only once a Lambda-side
 * engine (same tables, its own client) cancels it, within one poll interval of the cancel.
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  DynamoJobStore,
  DynamoWorkerRegistry,
  documentClient,
  stopSignalKey,
} from '../../core/adapters/aws/dynamo.js';
import { StopSignalChangeFeed, StopSignallingChangeFeed } from '../../core/adapters/aws/stop-signals.js';
import { PollingChangeFeed } from '../../core/changes.js';
import { FakeClock } from '../../core/clock.js';
import { JobEngine, workerKey } from '../../core/engine.js';
import type { WorkerLedger } from '../../core/ports.js';
import { buildPlatform, parseFunctionEnv } from '../../functions/wiring.js';
import { makeJob } from '../contract/helpers.js';
import { type AwsFixture, dynamoClientFor, startAwsFixture } from '../support/emulators.js';

let aws: AwsFixture;
beforeAll(async () => {
  aws = await startAwsFixture({ ttl: false });
});
afterAll(async () => {
  await aws?.stop();
});

const pollMs = 500;
const safetyMs = 15_000;

/** A DynamoDB client that records every GetItem as `<table> <key>`. */
function countedDoc() {
  const gets: string[] = [];
  const client = dynamoClientFor(aws.dynamo.endpoint);
  client.middlewareStack.add(
    (next, context) => async (args) => {
      if (context.commandName === 'GetItemCommand') {
        // The document client may not have marshalled the key yet at this step.
        const input = args.input as { TableName: string; Key: Record<string, string | { S?: string }> };
        const key = Object.values(input.Key)[0];
        gets.push(`${input.TableName} ${typeof key === 'string' ? key : key?.S}`);
      }
      return next(args);
    },
    { step: 'initialize', name: 'countGets' },
  );
  return { doc: documentClient(client), gets, close: () => client.destroy() };
}

/** The agent's ledger: the worker holds exactly these jobs (the supervisor's record, in memory). */
function ledgerHolding(jobIds: string[]): WorkerLedger {
  return {
    mayTake: async () => true,
    taken: async () => {},
    released: async () => {},
    pinged: async () => {},
    held: async () => jobIds,
    leasesDue: async (_workerId, listed) => jobIds.filter((jobId) => listed.has(jobId)),
    gone: async () => {},
    counts: async () => ({ idle: 0, running: 1, ready: 1, initializing: 0, throttled: 0, unhealthy: 0 }),
  } as WorkerLedger;
}

/** Lets the poll run its I/O until it sleeps on the fake clock again. */
async function untilWaiting(clock: FakeClock): Promise<void> {
  while (clock.pendingSleeps() === 0) await new Promise((resolve) => setTimeout(resolve, 5));
}

async function setup(name: string) {
  const clock = new FakeClock(Date.now());
  const endpointId = `stop-${name}-${Date.now()}`;
  const workerId = `${endpointId}-w1`;
  const agentSide = countedDoc();
  const agentJobs = new DynamoJobStore({
    doc: agentSide.doc,
    tables: aws.tables,
    blobs: aws.blobs('ferry/'),
  });
  const agentWorkers = new DynamoWorkerRegistry({ doc: agentSide.doc, table: aws.tables.workers });
  const changes = new StopSignalChangeFeed({ workerId, signals: agentWorkers, clock, pollMs, safetyMs });
  const job = makeJob({
    id: `${endpointId}-job1`,
    endpointId,
    createdAt: clock.now(),
    status: 'IN_PROGRESS',
    workerId,
    startedAt: clock.now(),
    leaseUntil: clock.now() + 600_000,
    // Inline, so every GetItem of the job costs ~25 read units (4 KB each) on AWS.
    input: { prompt: 'x'.repeat(100_000) },
  });
  await aws.jobs().create(job);
  const agent = new JobEngine({
    jobs: agentJobs,
    queue: aws.queue(),
    workers: agentWorkers,
    ledger: ledgerHolding([job.id]),
    changes,
    clock,
  });
  // The Lambda side: its own client and feed, the same tables.
  const lambdaSide = documentClient(dynamoClientFor(aws.dynamo.endpoint));
  const lambdaWorkers = new DynamoWorkerRegistry({ doc: lambdaSide, table: aws.tables.workers });
  const stopSignals = new StopSignallingChangeFeed({
    inner: new PollingChangeFeed(clock, pollMs),
    signals: lambdaWorkers,
    clock,
  });
  const lambda = new JobEngine({
    jobs: new DynamoJobStore({ doc: lambdaSide, tables: aws.tables, blobs: aws.blobs('ferry/') }),
    queue: aws.queue(),
    workers: lambdaWorkers,
    changes: stopSignals,
    clock,
  });
  const jobGets = () => agentSide.gets.filter((g) => g === `${aws.tables.jobs} ${job.id}`).length;
  const signalGets = () =>
    agentSide.gets.filter((g) => g === `${aws.tables.workers} ${stopSignalKey(workerId)}`).length;
  const close = () => {
    changes.close();
    agentSide.close();
    lambdaSide.destroy();
  };
  return {
    clock,
    endpointId,
    workerId,
    job,
    agent,
    lambda,
    stopSignals,
    changes,
    agentSide,
    jobGets,
    signalGets,
    close,
  };
}

describe('job-stop on AWS reads the stop signal, not the held jobs', () => {
  it('steady state: one small registry read per poll interval and no job read; a cancel is seen within one interval', async () => {
    const t = await setup('cancel');
    try {
      const stopping = t.agent.jobsToStop(t.endpointId, t.workerId, 60_000);
      await untilWaiting(t.clock);
      // The call's first look at what it holds.
      expect(t.jobGets()).toBe(1);
      // The agent's first signal read has nothing to compare with: it counts as a change (one
      // more look at the jobs, once per agent life).
      t.clock.advance(pollMs);
      await untilWaiting(t.clock);
      expect(t.jobGets()).toBe(2);

      t.agentSide.gets.splice(0);
      const intervals = 20;
      for (let i = 0; i < intervals; i++) {
        t.clock.advance(pollMs);
        await untilWaiting(t.clock);
      }
      expect(t.jobGets()).toBe(0);
      expect(t.signalGets()).toBe(intervals);
      expect(t.agentSide.gets).toHaveLength(intervals);

      t.agentSide.gets.splice(0);
      // The Lambda cancels; its handler waits for the signal write before it returns.
      expect(await t.lambda.cancel(t.endpointId, t.job.id)).toMatchObject({ status: 'CANCELLED' });
      await t.stopSignals.settled();
      expect(t.jobGets()).toBe(0);
      // One poll interval later the agent's job-stop answers with the job, after one job read.
      t.clock.advance(pollMs);
      expect(await stopping).toEqual([t.job.id]);
      expect(t.signalGets()).toBe(1);
      expect(t.jobGets()).toBe(1);
    } finally {
      t.close();
    }
  });

  it('re-reads the held jobs every safetyMs even without a signal (a signal write can be lost)', async () => {
    const t = await setup('safety');
    try {
      const stopping = t.agent.jobsToStop(t.endpointId, t.workerId, 60_000);
      await untilWaiting(t.clock);
      t.clock.advance(pollMs);
      await untilWaiting(t.clock);
      t.agentSide.gets.splice(0);
      // The job is cancelled behind the agent's back, with no signal (as if the Lambda died between
      // its two writes): a feed that never notifies workers.
      const silent = new JobEngine({
        jobs: aws.jobs(),
        queue: aws.queue(),
        workers: aws.workers(),
        changes: new PollingChangeFeed(t.clock, pollMs),
        clock: t.clock,
      });
      await silent.cancel(t.endpointId, t.job.id);
      // The last look at the jobs was one interval after the call began; the next is safetyMs later.
      for (let i = 0; i < safetyMs / pollMs - 1; i++) {
        t.clock.advance(pollMs);
        await untilWaiting(t.clock);
      }
      expect(t.jobGets()).toBe(0);
      expect(t.signalGets()).toBe(safetyMs / pollMs - 1);
      // The safety re-read comes due and finds the cancel.
      t.clock.advance(pollMs);
      expect(await stopping).toEqual([t.job.id]);
      expect(t.jobGets()).toBe(1);
    } finally {
      t.close();
    }
  });

  it("the supervisor's per-tick question reads only the signal, and says yes once per signal", async () => {
    const t = await setup('tick');
    try {
      const watch = t.changes.watch(workerKey(t.workerId));
      // No baseline yet: the first answer is yes (the tick reads the held jobs once).
      expect(await watch.changed(0)).toBe(true);
      t.clock.advance(pollMs);
      expect(await watch.changed(0)).toBe(false);
      const lambdaWorkers = new DynamoWorkerRegistry({ doc: aws.doc, table: aws.tables.workers });
      await lambdaWorkers.signalStop(t.workerId, t.clock.now());
      // Within pollMs of the last read the cached value answers; the next interval sees the signal.
      expect(await watch.changed(0)).toBe(false);
      t.clock.advance(pollMs);
      expect(await watch.changed(0)).toBe(true);
      t.clock.advance(pollMs);
      expect(await watch.changed(0)).toBe(false);
      // An in-process notify (the agent's own timeout) answers at once, without a read.
      t.agentSide.gets.splice(0);
      t.changes.notify(workerKey(t.workerId));
      expect(await watch.changed(0)).toBe(true);
      expect(t.agentSide.gets).toEqual([]);
      expect(t.jobGets()).toBe(0);
      watch.close();
    } finally {
      t.close();
    }
  });

  it('the caller leaving ends a waiting job-stop at once, and its watch is released', async () => {
    const t = await setup('close');
    try {
      const left = new AbortController();
      const stopping = t.agent.jobsToStop(t.endpointId, t.workerId, 60_000, left.signal);
      await untilWaiting(t.clock);
      t.clock.advance(pollMs);
      await untilWaiting(t.clock);
      expect(t.changes.size()).toBe(1);
      left.abort();
      expect(await stopping).toEqual([]);
      expect(t.changes.size()).toBe(0);
    } finally {
      t.close();
    }
  });

  it("the Lambdas' platform (buildPlatform) signals the holder when it cancels a held job, not when the worker finishes one", async () => {
    const env = parseFunctionEnv({
      FERRY_JOBS_TABLE: aws.tables.jobs,
      FERRY_CHUNKS_TABLE: aws.tables.chunks,
      FERRY_CONTROL_TABLE: aws.tables.control,
      FERRY_WORKERS_TABLE: aws.tables.workers,
      FERRY_BUCKET: aws.bucket,
      FERRY_BLOB_PREFIX: 'ferry/',
      FERRY_WEBHOOK_QUEUE_URL: aws.webhookQueueUrl,
    });
    const dynamo = dynamoClientFor(aws.dynamo.endpoint);
    const platform = buildPlatform({ env, clients: { dynamo, sqs: aws.sqs, s3: aws.s3 } });
    const endpointId = `stop-wiring-${Date.now()}`;
    const workerId = `${endpointId}-w1`;
    const held = (id: string) =>
      makeJob({
        id: `${endpointId}-${id}`,
        endpointId,
        createdAt: Date.now(),
        status: 'IN_PROGRESS',
        workerId,
        startedAt: Date.now(),
        leaseUntil: Date.now() + 600_000,
      });
    const cancelled = held('c');
    await aws.jobs().create(cancelled);
    await platform.engine.cancel(endpointId, cancelled.id);
    await platform.stopSignals?.settled();
    expect(await aws.workers().stopSignal(workerId)).toBe(1);
    // A job the worker finishes itself signals nothing: only a change that makes it let go does.
    const done = held('d');
    await aws.jobs().create(done);
    await platform.engine.done(endpointId, workerId, done.id, { output: 'ok' });
    await platform.stopSignals?.settled();
    expect(await aws.workers().stopSignal(workerId)).toBe(1);
    dynamo.destroy();
  });

  it('signals go to the sibling item and never touch the worker record (heartbeats are whole-item Puts)', async () => {
    const workers = aws.workers();
    const workerId = `stop-rec-${Date.now()}-w1`;
    const record = {
      workerId,
      endpointId: `stop-rec-${Date.now()}`,
      lastSeenAt: Date.now(),
      state: 'running',
      jobs: [],
    } as unknown as Parameters<typeof workers.heartbeat>[0];
    await workers.heartbeat(record);
    expect(await workers.stopSignal(workerId)).toBe(0);
    await workers.signalStop(workerId, Date.now());
    await workers.heartbeat(record);
    await workers.signalStop(workerId, Date.now());
    expect(await workers.stopSignal(workerId)).toBe(2);
    expect(await workers.get(workerId)).toEqual(record);
    // The signal item is not a worker: the endpoint's list does not show it.
    expect((await workers.list(record.endpointId, 0)).map((w) => w.workerId)).toEqual([workerId]);
  });
});
