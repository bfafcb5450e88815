/**
 * What a job transition and a health read cost on DynamoDB, counted on DynamoDB Local.
 * JobStore.update takes the job the caller already read and writes with one conditional PutItem, in
 * one TransactWriteItems with the endpoint's count items when what the job counts as changes; a lost
 * race comes back with the item as it is now (ReturnValuesOnConditionCheckFailure ALL_OLD), so neither
 * the store nor the engine reads it again. Health reads count items, never the jobs themselves
 * (core/adapters/aws/dynamo/counts.ts); the SQLite store is the judge of what the counts must be.
 */

import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { ListObjectsV2Command } from '@aws-sdk/client-s3';
import {
  BatchWriteCommand,
  type DynamoDBDocumentClient,
  GetCommand,
  QueryCommand,
} from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Counted, countedOfJob, countUpdates } from '../../core/adapters/aws/dynamo/counts.js';
import { itemOf, shardOf } from '../../core/adapters/aws/dynamo/job-item.js';
import {
  DynamoJobStore,
  type DynamoJobStoreOptions,
  documentClient,
  statusShardCount,
  transact,
} from '../../core/adapters/aws/dynamo.js';
import { openLocalDatabase } from '../../core/adapters/local/sqlite.js';
import { LocalChangeFeed, PollingChangeFeed } from '../../core/changes.js';
import { FakeClock, systemClock } from '../../core/clock.js';
import { type EngineDeps, JobEngine } from '../../core/engine.js';
import type { Job } from '../../core/job.js';
import type { BlobStore, JobCounts, JobPatch, JobStore } from '../../core/ports.js';
import type { RunRequest } from '../../core/schemas.js';
import { makeJob } from '../contract/helpers.js';
import { type AwsFixture, dynamoClientFor, startAwsFixture } from '../support/emulators.js';

let aws: AwsFixture;
/** The start of a 5-minute count bucket, so the scenario's expiries fall mid-bucket where it says. */
const bucketAligned = (ms: number) => Math.floor(ms / 300_000) * 300_000;
beforeAll(async () => {
  aws = await startAwsFixture({ ttl: false });
});
afterAll(async () => {
  await aws?.stop();
});

/**
 * A job store whose DynamoDB client records the name of every command it sends; `wrap` adds a
 * middleware of the test's own to that client first (one that changes an answer as DynamoDB may).
 */
function countedStore(
  options: Pick<DynamoJobStoreOptions, 'sweepDropChunks'> = {},
  wrap?: (client: DynamoDBClient) => void,
) {
  const calls: string[] = [];
  const inputs: Record<string, unknown>[] = [];
  const outputs: Record<string, unknown>[] = [];
  const client = dynamoClientFor(aws.dynamo.endpoint);
  wrap?.(client);
  client.middlewareStack.add(
    (next, context) => async (args) => {
      calls.push(String(context.commandName).replace(/Command$/, ''));
      inputs.push(args.input as Record<string, unknown>);
      const result = await next(args);
      outputs.push(result.output as unknown as Record<string, unknown>);
      return result;
    },
    { step: 'initialize', name: 'countCalls' },
  );
  const doc = documentClient(client);
  // The S3 objects read (big fields over the inline budget), by key.
  const blobReads: string[] = [];
  const s3 = aws.blobs('ferry/');
  const blobs: BlobStore = Object.assign(Object.create(s3) as BlobStore, {
    get: (key: string) => {
      blobReads.push(key);
      return s3.get(key);
    },
  });
  const jobs = new DynamoJobStore({ doc, tables: aws.tables, blobs, ...options });
  const count = (name: string) => calls.filter((call) => call === name).length;
  const reset = () => {
    calls.splice(0);
    inputs.splice(0);
    outputs.splice(0);
    blobReads.splice(0);
  };
  return { jobs, calls, inputs, outputs, blobReads, count, reset, close: () => client.destroy() };
}

/** An engine on the counted store, with the fixture's queue and registry, on real time. */
const engineFor = (store: ReturnType<typeof countedStore>, extra: Partial<EngineDeps> = {}) =>
  new JobEngine({
    jobs: store.jobs,
    queue: aws.queue(),
    workers: aws.workers(),
    changes: new LocalChangeFeed(),
    clock: systemClock,
    ...extra,
  });

describe('DynamoDB calls per job transition', () => {
  it('a status move is one TransactWriteItems (the job Put and its count item ADDs) and no GetItem', async () => {
    const store = countedStore();
    try {
      const job = makeJob({ id: `io-${Date.now()}-a`, createdAt: Date.now() });
      await store.jobs.create(job);
      const current = (await store.jobs.get(job.id, 0))!;
      store.reset();
      const result = await store.jobs.update(current, { status: 'IN_PROGRESS', workerId: 'w1' });
      expect(result.ok).toBe(true);
      expect(store.calls).toEqual(['TransactWriteItems']);
      const { TransactItems } = store.inputs[0] as {
        TransactItems: {
          Put?: { Item: { jobId: string } };
          Update?: { Key: { jobId: string }; UpdateExpression: string };
        }[];
      };
      // The job, then its count items (same bucket, same shard): IN_QUEUE -1 in its lane's (an
      // urgent job), IN_PROGRESS +1 in the main one.
      expect(TransactItems.map((item) => Object.keys(item)[0])).toEqual(['Put', 'Update', 'Update']);
      expect(TransactItems[0]?.Put?.Item.jobId).toBe(job.id);
      expect(TransactItems[1]?.Update?.Key.jobId).toMatch(/-#counts#\d+#\d#urgent$/);
      expect(TransactItems[1]?.Update?.UpdateExpression).toMatch(/ADD inQueue :inQueue$/);
      expect(TransactItems[2]?.Update?.Key.jobId).toMatch(/-#counts#\d+#\d$/);
      expect(TransactItems[2]?.Update?.UpdateExpression).toMatch(/ADD inProgress :inProgress$/);
    } finally {
      store.close();
    }
  });

  it('a write that changes no count (a progress update) stays one PutItem', async () => {
    const store = countedStore();
    try {
      const job = makeJob({ id: `io-${Date.now()}-p`, createdAt: Date.now(), status: 'IN_PROGRESS' });
      await store.jobs.create(job);
      const current = (await store.jobs.get(job.id, 0))!;
      store.reset();
      expect((await store.jobs.update(current, { output: { step: 1 } })).ok).toBe(true);
      expect(store.calls).toEqual(['PutItem']);
    } finally {
      store.close();
    }
  });

  it('a lost race answers the job as stored now, without a GetItem', async () => {
    const store = countedStore();
    try {
      const job = makeJob({
        id: `io-${Date.now()}-b`,
        endpointId: `io${Date.now()}b`,
        createdAt: Date.now(),
      });
      await store.jobs.create(job);
      const stale = (await store.jobs.get(job.id, 0))!;
      const won = await store.jobs.update(stale, { status: 'IN_PROGRESS', workerId: 'w1' });
      store.reset();
      const lost = await store.jobs.update(stale, { status: 'CANCELLED' });
      expect(lost).toEqual({ ok: false, current: won.ok ? won.job : undefined });
      expect(store.calls).toEqual(['TransactWriteItems']);
      // The lost transaction moved no count: the job counts once, in progress.
      expect(await store.jobs.counts(job.endpointId, 0)).toMatchObject({ inQueue: 0, inProgress: 1 });
    } finally {
      store.close();
    }
  });

  it('the engine cancels a queued job with one GetItem (its read) and one transaction', async () => {
    const store = countedStore();
    const engine = engineFor(store);
    try {
      const submitted = await engine.submit('io-ep', { input: { n: 1 } }, { sync: false });
      store.reset();
      expect(await engine.cancel('io-ep', submitted.id)).toMatchObject({ status: 'CANCELLED' });
      expect(store.count('GetItem')).toBe(1);
      expect(store.count('TransactWriteItems')).toBe(1);
      expect(store.count('PutItem')).toBe(0);
    } finally {
      store.close();
    }
  });
});

describe('purge and rejectQueued write many jobs per transaction', () => {
  /** The actions of each TransactWriteItems the store sent, and their items' JSON size together. */
  const transactions = (store: ReturnType<typeof countedStore>) =>
    store.inputs
      .filter((_, i) => store.calls[i] === 'TransactWriteItems')
      .map((input) => {
        const items = (input as { TransactItems: { Put?: { Item: object } }[] }).TransactItems;
        const bytes = items.reduce((sum, item) => sum + JSON.stringify(item.Put?.Item ?? {}).length, 0);
        return { actions: items.length, puts: items.filter((item) => item.Put).length, bytes };
      });

  it('purging 300 queued jobs (expiries over five count buckets) takes a few transactions, not 300 writes', async () => {
    const store = countedStore();
    const engine = engineFor(store);
    const now = Date.now();
    const endpointId = `io${now}purge`;
    try {
      for (let i = 0; i < 300; i++) {
        // Submitted over the last 25 minutes: their expiries fall in five 5-minute count buckets.
        const createdAt = now - 25 * 60_000 + i * 5_000;
        // Kept a day once purged: the table is shared, and the deleteExpired case below must not meet them.
        const kept = { retentionMs: 86_400_000, expiresAt: createdAt + 86_400_000 };
        await store.jobs.create(makeJob({ endpointId, createdAt, ...kept }));
      }
      const running = makeJob({ endpointId, createdAt: now, status: 'IN_PROGRESS', workerId: 'w1' });
      await store.jobs.create(running);
      store.reset();

      expect(await engine.purge(endpointId)).toEqual({ removed: 300, status: 'completed' });
      const sent = transactions(store);
      expect(sent.reduce((sum, t) => sum + t.puts, 0)).toBe(300);
      // 300 jobs over 4 shards, up to 100 actions each (the Puts and their shard's count items).
      expect(sent.length).toBeLessThanOrEqual(2 * statusShardCount);
      for (const t of sent) expect(t.actions).toBeLessThanOrEqual(100);
      expect(store.count('PutItem') + store.count('UpdateItem')).toBe(0);
      expect(await engine.health(endpointId)).toMatchObject({
        jobs: { inQueue: 0, inProgress: 1, failed: 0 },
      });
      const purged = await store.jobs.listByStatus(endpointId, 'CANCELLED', Date.now(), 1_000);
      expect(purged).toHaveLength(300);
      expect(purged.every((job) => job.error === 'Removed from the queue by purge-queue')).toBe(true);
      expect((await store.jobs.get(running.id, Date.now()))?.status).toBe('IN_PROGRESS');
    } finally {
      store.close();
    }
  });

  it('purges past a first batch that the lagging index still lists as queued', async () => {
    // A global secondary index is eventually consistent: "your applications need to anticipate and
    // handle situations where a query on a global secondary index returns results that are not up to
    // date" (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/GSI.html). DynamoDB
    // Local updates it at once, so this store's index keeps listing the first batch it handed out as
    // still queued, as a lagging one would right after the batch was cancelled.
    const store = countedStore();
    const stale: Record<string, unknown>[] = [];
    // The store's own document client (private), its send wrapped.
    const doc = (store.jobs as unknown as { doc: { send: (command: unknown) => Promise<unknown> } }).doc;
    const send = doc.send.bind(doc);
    doc.send = async (command) => {
      const answer = (await send(command)) as { Items?: Record<string, unknown>[] };
      const input = (command as QueryCommand).input;
      if (!(command instanceof QueryCommand) || input.IndexName !== 'byEndpointStatus') return answer;
      if (stale.length === 0) {
        // The first batch: the 500 oldest, which the purge cancels first.
        const oldest = [...(answer.Items ?? [])].sort(
          (a, b) => (a.createdAt as number) - (b.createdAt as number),
        );
        stale.push(...oldest.slice(0, 500));
        return answer;
      }
      const from = (input.ExpressionAttributeValues?.[':from'] as number | undefined) ?? 0;
      const fresh = new Set((answer.Items ?? []).map((item) => item.jobId));
      const lagging = stale.filter((item) => (item.createdAt as number) >= from && !fresh.has(item.jobId));
      const items = [...lagging, ...(answer.Items ?? [])].sort(
        (a, b) => (a.createdAt as number) - (b.createdAt as number),
      );
      return { ...answer, Items: items };
    };
    const engine = engineFor(store);
    const now = Date.now();
    const endpointId = `io${now}lag`;
    try {
      for (let i = 0; i < 700; i += 100) {
        await Promise.all(
          Array.from({ length: 100 }, (_, j) =>
            store.jobs.create(
              // Kept a day once purged, as above: deleteExpired below must not meet them.
              makeJob({
                endpointId,
                createdAt: now - 60_000 + (i + j) * 10,
                retentionMs: 86_400_000,
                expiresAt: now + 86_400_000,
              }),
            ),
          ),
        );
      }
      expect(await engine.purge(endpointId)).toEqual({ removed: 700, status: 'completed' });
      expect(stale).toHaveLength(500);
      expect((await engine.health(endpointId)).jobs.inQueue).toBe(0);
    } finally {
      store.close();
    }
  }, 60_000);

  it('splits a batch at 4 MB of items, and a job taken mid-batch stays taken', async () => {
    const store = countedStore();
    const now = Date.now();
    const endpointId = `io${now}big`;
    try {
      // 40 queued jobs of one shard, each with a 150 KB input kept inline: 6 MB together.
      const queued: Job[] = [];
      for (let i = 0; queued.length < 40; i++) {
        const job = makeJob({
          id: `${endpointId}-${i}`,
          endpointId,
          createdAt: now,
          input: { text: 'x'.repeat(150 * 1024) },
        });
        if (shardOf(job.id) === 0) queued.push(job);
      }
      for (const job of queued) await store.jobs.create(job);
      const current = await Promise.all(queued.map(async (job) => (await store.jobs.get(job.id, now))!));
      const taken = await store.jobs.update(current[30]!, { status: 'IN_PROGRESS', workerId: 'w1' });
      store.reset();

      const patch = { status: 'FAILED' as const, finishedAt: now, error: 'no worker can start' };
      const results = await store.jobs.updateMany(current.map((job) => ({ current: job, patch })));
      expect(results.filter((result) => result.ok)).toHaveLength(39);
      expect(results[30]).toEqual({ ok: false, current: taken.ok ? taken.job : undefined });
      const sent = transactions(store);
      // At least two transactions of at most 4 MB; the one that met the taken job was sent again without it.
      expect(sent.filter((t) => t.puts > 0).length).toBeGreaterThanOrEqual(3);
      for (const t of sent) expect(t.bytes).toBeLessThanOrEqual(4_000_000);
      expect(await store.jobs.counts(endpointId, now)).toMatchObject({
        inQueue: 0,
        inProgress: 1,
        failed: 39,
      });
    } finally {
      store.close();
    }
  });
});

/** An input over the item budget, so the store keeps it in S3 (where reading it shows in blobReads). */
const bigInput = { image: 'x'.repeat(200 * 1024) };

/** A queued job of a fresh endpoint with `bigInput`, and `webhook` when one is given. */
async function submitBig(engine: JobEngine, prefix: string, webhook?: string) {
  const endpointId = `${prefix}-${Date.now()}-${webhook ? 'hook' : 'plain'}`;
  const { id } = await engine.submit(
    endpointId,
    { input: bigInput, ...(webhook ? { webhook } : {}) },
    { sync: false },
  );
  return { endpointId, id };
}

describe('worker routes do not read the input back', () => {
  it("job-done and job-stream of a job with a 200 KB input (an S3 object) read no S3 object; a webhook's job-done does", async () => {
    const store = countedStore();
    const engine = engineFor(store, { webhooks: { send: () => {} } });
    try {
      for (const webhook of [undefined, 'https://example.test/hook']) {
        const { endpointId, id } = await submitBig(engine, 'io-in', webhook);
        const [taken] = await engine.take(endpointId, 'w1', 1, 0);
        // The worker gets the input: that read is the one that must fetch it.
        expect(taken?.input).toEqual(bigInput);
        store.reset();
        await engine.streamChunk(endpointId, 'w1', id, { output: 'part' });
        await engine.done(endpointId, 'w1', id, { output: { ok: true } });
        // A webhook carries the input (docs/api.md): only then is it read.
        expect(store.blobReads.length).toBe(webhook ? 1 : 0);
        const done = await store.jobs.get(id, Date.now());
        expect(done).toMatchObject({ status: 'COMPLETED', output: { ok: true }, input: bigInput });
      }
    } finally {
      store.close();
    }
  });
});

describe('runsync, status-sync and stream waits do not read the input back', () => {
  it('a polling wait on a job with a 200 KB input (an S3 object) reads no S3 object until the view needs the input', async () => {
    const store = countedStore();
    // How the API Lambda waits: a re-read every FERRY_POLL_MS (functions/wiring.ts); 20 ms here.
    const engine = engineFor(store, { changes: new PollingChangeFeed(systemClock, 20) });
    const endpointId = `io-wait-${Date.now()}`;
    try {
      // No worker: runsync polls until its wait runs out and answers {id, status}.
      const view = await engine.runSync(endpointId, { input: bigInput }, 300, undefined);
      expect(view).toEqual({ id: view.id, status: 'IN_QUEUE' });
      // It re-read the job (each a GetItem) without its input. How many times depends on the
      // emulator's speed on a busy machine, so only that it came back to it.
      expect(store.count('GetItem')).toBeGreaterThanOrEqual(2);
      expect(store.blobReads).toEqual([]);

      // status-sync that runs out: the view of an unfinished job shows its input, read once at the end.
      store.reset();
      const unfinished = await engine.statusSync(endpointId, view.id, 200);
      expect(unfinished).toMatchObject({ status: 'IN_QUEUE', input: bigInput });
      // At least two reads in the loop, then the view's read with the input.
      expect(store.count('GetItem')).toBeGreaterThanOrEqual(3);
      expect(store.blobReads.length).toBe(1);

      // A worker takes it (that read fetches the input) and finishes it while status-sync waits.
      const [taken] = await engine.take(endpointId, 'w1', 1, 0);
      expect(taken?.input).toEqual(bigInput);
      store.reset();
      // A /stream long poll (runpod-sdk polls it in a loop) names the job and its status only.
      const streamed = engine.stream(endpointId, view.id, 5_000);
      await new Promise((r) => setTimeout(r, 100));
      await engine.streamChunk(endpointId, 'w1', view.id, { output: 'part' });
      expect(await streamed).toEqual({ id: view.id, status: 'IN_PROGRESS', stream: [{ output: 'part' }] });
      const waiting = engine.statusSync(endpointId, view.id, 5_000);
      await new Promise((r) => setTimeout(r, 100));
      await engine.done(endpointId, 'w1', view.id, { output: { ok: true } });
      expect(await waiting).toMatchObject({ status: 'COMPLETED', output: { ok: true } });
      expect(store.blobReads).toEqual([]);
    } finally {
      store.close();
    }
  });
});

describe('/status reads the input only while its view shows it', () => {
  it('of a job with a 200 KB input (an S3 object): read while queued and running, not once it has ended', async () => {
    const store = countedStore();
    const engine = engineFor(store);
    try {
      const { endpointId, id } = await submitBig(engine, 'io-status');
      store.reset();
      expect(await engine.status(endpointId, id)).toMatchObject({ status: 'IN_QUEUE', input: bigInput });
      expect(store.blobReads.length).toBe(1);
      await engine.take(endpointId, 'w1', 1, 0);
      store.reset();
      expect(await engine.status(endpointId, id)).toMatchObject({ status: 'IN_PROGRESS', input: bigInput });
      expect(store.blobReads.length).toBe(1);
      await engine.done(endpointId, 'w1', id, { output: { ok: true } });
      store.reset();
      // Clients poll /status until the job ends, and often once more: none of those fetch the input.
      for (let i = 0; i < 3; i++) {
        const view = await engine.status(endpointId, id);
        expect(view).toMatchObject({ status: 'COMPLETED', output: { ok: true } });
        expect('input' in view).toBe(false);
      }
      // ?ttl= writes the job read that way: the input stays stored.
      await engine.status(endpointId, id, 120_000);
      expect(store.blobReads).toEqual([]);
      expect((await store.jobs.get(id, Date.now()))?.input).toEqual(bigInput);
    } finally {
      store.close();
    }
  });
});

describe('cancel and retry do not read the input back', () => {
  it('of a job with a 200 KB input (an S3 object) read no S3 object; a cancel that sends a webhook does', async () => {
    const store = countedStore();
    const engine = engineFor(store, { webhooks: { send: () => {} } });
    try {
      for (const webhook of [undefined, 'https://example.test/hook']) {
        const { endpointId, id } = await submitBig(engine, 'io-cancel', webhook);
        store.reset();
        expect(await engine.cancel(endpointId, id)).toEqual({ id, status: 'CANCELLED' });
        // The webhook carries the input (docs/api.md): only then is it read.
        expect(store.blobReads.length).toBe(webhook ? 1 : 0);
      }

      const { endpointId, id } = await submitBig(engine, 'io-retry');
      await engine.take(endpointId, 'w1', 1, 0);
      await engine.done(endpointId, 'w1', id, { error: 'out of memory' });
      store.reset();
      expect(await engine.retry(endpointId, id)).toMatchObject({ id, status: 'IN_QUEUE' });
      expect(store.blobReads).toEqual([]);
      // The retried job still has its input for the worker that takes it.
      const [taken] = await engine.take(endpointId, 'w2', 1, 0);
      expect(taken).toMatchObject({ id, input: bigInput });
    } finally {
      store.close();
    }
  });
});

describe('purge and a dead worker do not read the inputs back', () => {
  it('of jobs with 200 KB inputs (S3 objects) read none; a job with a webhook reads its own, which the webhook carries', async () => {
    const store = countedStore();
    const sent: { id: string; input?: unknown }[] = [];
    const engine = engineFor(store, { webhooks: { send: (_url, body) => sent.push(body as never) } });
    try {
      const endpointId = `io-purge-big-${Date.now()}`;
      const plain: string[] = [];
      for (let i = 0; i < 3; i++)
        plain.push((await engine.submit(endpointId, { input: bigInput }, { sync: false })).id);
      const hooked = await engine.submit(
        endpointId,
        { input: bigInput, webhook: 'https://example.test/hook' },
        { sync: false },
      );
      store.reset();
      expect(await engine.purge(endpointId)).toEqual({ removed: 4, status: 'completed' });
      expect(store.blobReads).toHaveLength(1);
      expect(sent).toEqual([
        expect.objectContaining({ id: hooked.id, status: 'CANCELLED', input: bigInput }),
      ]);

      // A worker's exit (workerGone) requeues what it held, reading no input either.
      const other = `io-gone-big-${Date.now()}`;
      const { id } = await engine.submit(other, { input: bigInput }, { sync: false });
      await engine.take(other, 'w1', 1, 0);
      store.reset();
      expect(await engine.workerGone(other, 'w1')).toBe(1);
      expect(store.blobReads).toEqual([]);
      const [again] = await engine.take(other, 'w2', 1, 0);
      expect(again).toMatchObject({ id, input: bigInput });
    } finally {
      store.close();
    }
  });
});

describe('the sweep does not read the inputs back', () => {
  it('requeues and ends jobs with 300 KB inputs (S3 objects) reading none; a webhook job it ends reads its own, which the webhook carries', async () => {
    const store = countedStore();
    const sent: { url: string; body: Record<string, unknown> }[] = [];
    const clock = new FakeClock(Date.now());
    const engine = engineFor(store, {
      clock,
      settings: { leaseMs: 60_000 },
      webhooks: { send: (url, body) => sent.push({ url, body: body as Record<string, unknown> }) },
    });
    const input = { image: 'x'.repeat(300 * 1024) };
    const prefix = `io-sweep-${clock.now()}`;
    /** A job of its own endpoint (take hands out that one), taken by w1 when `taken`. */
    const submit = async (name: string, request: Omit<RunRequest, 'input'>, taken: boolean) => {
      const endpointId = `${prefix}-${name}`;
      const { id } = await engine.submit(endpointId, { input, ...request }, { sync: false });
      if (taken) expect(await engine.take(endpointId, 'w1', 1, 0)).toMatchObject([{ id, input }]);
      return id;
    };
    const ttl = { policy: { ttl: 10_000 } };
    try {
      // Past their ttl while queued, and running on a worker that went silent: no webhooks.
      const expired = [await submit('expired-a', ttl, false), await submit('expired-b', ttl, false)];
      const lapsed = [await submit('lapsed-a', {}, true), await submit('lapsed-b', {}, true)];
      clock.advance(60_001);
      store.reset();
      const swept = await engine.sweep();
      expect(store.blobReads).toEqual([]);
      expect(swept.requeued).toBeGreaterThanOrEqual(2);
      expect(swept.expired).toBeGreaterThanOrEqual(2);
      for (const id of lapsed)
        expect(await store.jobs.get(id, clock.now())).toMatchObject({
          status: 'IN_QUEUE',
          input,
          attempt: 1,
        });
      for (const id of expired) {
        // Past its ttl the job reads as 404, and the sweep that cancels it keeps it so.
        expect(await store.jobs.get(id, clock.now())).toBeUndefined();
        expect(await store.jobs.listExpiredUnfinished(clock.now(), 1_000)).not.toContainEqual(
          expect.objectContaining({ id }),
        );
      }

      // With webhooks: one past its ttl, one past its execution timeout, one whose lease lapsed.
      const hook = 'https://example.test/hook';
      const hookExpired = await submit('hook-expired', { webhook: hook, ...ttl }, false);
      const hookOverran = await submit(
        'hook-overran',
        { webhook: hook, policy: { executionTimeout: 5_000 } },
        true,
      );
      const hookLapsed = await submit('hook-lapsed', { webhook: hook }, true);
      clock.advance(60_001);
      store.reset();
      await engine.sweep();
      // Only the two it ended, each read once: the requeued one sends no webhook.
      expect(store.blobReads).toHaveLength(2);
      for (const id of [hookExpired, hookOverran])
        expect(store.blobReads.filter((key) => key.includes(id))).toHaveLength(1);
      expect(sent).toEqual([
        {
          url: hook,
          body: expect.objectContaining({ id: hookOverran, status: 'TIMED_OUT', input, webhook: hook }),
        },
        {
          url: hook,
          body: expect.objectContaining({
            id: hookExpired,
            status: 'CANCELLED',
            input,
            webhook: hook,
            error: "The job's time-to-live of 10000 ms ran out",
          }),
        },
      ]);
      expect(await store.jobs.get(hookExpired, clock.now())).toBeUndefined();
      expect(await store.jobs.get(hookLapsed, clock.now())).toMatchObject({ status: 'IN_QUEUE', input });
    } finally {
      store.close();
    }
  });
});

describe('a ping renews leases with one UpdateItem per job and no read', () => {
  const engineOn = (store: ReturnType<typeof countedStore>, nowMs: number) =>
    engineFor(store, { clock: { now: () => nowMs } as typeof systemClock, settings: { leaseMs: 60_000 } });
  /**
   * The engine's ledger here is the registry (RegistryLedger), and a ping renews only the jobs the
   * ledger says its worker holds: `workerId` is recorded as holding `jobId`, as its take would have.
   */
  const holding = (workerId: string, endpointId: string, jobId: string, nowMs: number) =>
    aws.workers().heartbeat({
      workerId,
      endpointId,
      state: 'running',
      jobIds: [jobId],
      lastSeenAt: nowMs,
      lastBusyAt: nowMs,
    });

  it('writes only leaseUntil, overdueAt and version, and only for the worker that holds the job', async () => {
    const store = countedStore();
    const now = Date.now();
    try {
      const job = makeJob({
        id: `io-${now}-ping`,
        endpointId: 'io-ping',
        createdAt: now,
        status: 'IN_PROGRESS',
        workerId: 'w1',
        startedAt: now,
        leaseUntil: now + 1_000,
      });
      await store.jobs.create(job);
      // w2 on record as holding it too: the store's own check turns its ping down.
      await holding('w1', 'io-ping', job.id, now);
      await holding('w2', 'io-ping', job.id, now);
      store.reset();
      await engineOn(store, now).ping('io-ping', 'w1', [job.id]);
      expect(store.calls).toEqual(['UpdateItem']);
      const update = store.inputs[0] as { UpdateExpression: string };
      const written = [...update.UpdateExpression.matchAll(/(\w+) =/g)].map((m) => m[1]).sort();
      expect(written).toEqual(['leaseUntil', 'overdueAt', 'version']);
      const renewed = (await store.jobs.get(job.id, now))!;
      expect(renewed).toMatchObject({
        leaseUntil: now + 60_000,
        version: 2,
        workerId: 'w1',
        input: job.input,
      });

      // Another worker's ping, or a ping for another endpoint, renews nothing.
      await engineOn(store, now + 1).ping('io-ping', 'w2', [job.id]);
      await engineOn(store, now + 1).ping('other-ep', 'w1', [job.id]);
      expect(await store.jobs.get(job.id, now)).toMatchObject({ leaseUntil: now + 60_000, version: 2 });

      // A transition decided on the job as it was before the ping loses its compare-and-set.
      const stale = await store.jobs.update({ ...job, version: 1 }, { status: 'IN_QUEUE' });
      expect(stale.ok).toBe(false);
    } finally {
      store.close();
    }
  });

  it('a lease past the run deadline keeps the job overdue at the deadline', async () => {
    const store = countedStore();
    const now = Date.now();
    try {
      const job = makeJob({
        id: `io-${now}-deadline`,
        endpointId: 'io-ping',
        createdAt: now,
        status: 'IN_PROGRESS',
        workerId: 'w1',
        startedAt: now,
        leaseUntil: now + 1_000,
        policy: { executionTimeoutMs: 10_000, ttlMs: 86_400_000, lowPriority: false },
      });
      await store.jobs.create(job);
      await holding('w1', 'io-ping', job.id, now);
      await engineOn(store, now).ping('io-ping', 'w1', [job.id]);
      expect(await store.jobs.get(job.id, now)).toMatchObject({ leaseUntil: now + 60_000, version: 2 });
      // Overdue by its run deadline (now + 10 s), not by the renewed lease (now + 60 s).
      const overdue = await store.jobs.listOverdue(now + 10_000, 50);
      expect(overdue.map((j) => j.id)).toContain(job.id);
    } finally {
      store.close();
    }
  });
});

describe('deleteExpired is bounded per run', () => {
  it('reads and deletes at most `limit` expired jobs, oldest first; the rest wait for the next run', async () => {
    const store = countedStore();
    try {
      // Expired long ago (no other test's job expires this early), in three final statuses.
      const expired = (['COMPLETED', 'FAILED', 'CANCELLED', 'COMPLETED', 'TIMED_OUT'] as const).map(
        (status, i) =>
          makeJob({ id: `io-${Date.now()}-exp${i}`, createdAt: 0, expiresAt: 1_000 + i, status }),
      );
      for (const job of expired) await store.jobs.create(job);
      const left = async () =>
        (await Promise.all(expired.map((job) => store.jobs.get(job.id, 0))))
          .filter(Boolean)
          .map((job) => job!.id);
      store.reset();
      expect(await store.jobs.deleteExpired(2_000, 2)).toBe(2);
      expect(await left()).toEqual(expired.slice(2).map((job) => job.id));
      // Every index query asked for at most 2 items, and 2 jobs were deleted.
      const queries = store.inputs.filter((input, i) => store.calls[i] === 'Query' && input.IndexName) as {
        Limit?: number;
      }[];
      expect(queries.length).toBeGreaterThan(0);
      for (const query of queries) expect(query.Limit).toBe(2);
      // At now = 2 s the jobs expired in the current count bucket, so each delete also takes the
      // job out of its count item, in one transaction.
      expect(store.count('TransactWriteItems')).toBe(2);

      expect(await store.jobs.deleteExpired(2_000, 2)).toBe(2);
      expect(await store.jobs.deleteExpired(2_000, 2)).toBe(1);
      expect(await left()).toEqual([]);
    } finally {
      store.close();
    }
  });
});

describe('health reads count items, not jobs', () => {
  /** The calls and the items DynamoDB read (ScannedCount) for one `counts`. */
  async function healthCost(store: ReturnType<typeof countedStore>, endpointId: string, nowMs: number) {
    store.reset();
    const counts = await store.jobs.counts(endpointId, nowMs);
    const scanned = store.outputs.reduce((sum, output) => sum + ((output.ScannedCount as number) ?? 0), 0);
    return { counts, calls: [...store.calls], scanned };
  }

  it('costs the same two Queries for 200 retained jobs as for 2, reading at most one count item per shard', async () => {
    const store = countedStore();
    const now = Date.now();
    try {
      const few = `io${now}few`;
      const many = `io${now}many`;
      const create = (endpointId: string, i: number) =>
        store.jobs.create(
          makeJob({ id: `${endpointId}-${i}`, endpointId, createdAt: now, expiresAt: now + 3_600_000 }),
        );
      for (let i = 0; i < 2; i++) await create(few, i);
      for (let i = 0; i < 200; i += 20)
        await Promise.all(Array.from({ length: 20 }, (_, j) => create(many, i + j)));

      const small = await healthCost(store, few, now);
      const large = await healthCost(store, many, now);
      expect(small.counts).toMatchObject({ inQueue: 2 });
      expect(large.counts).toMatchObject({ inQueue: 200 });
      expect(small.calls).toEqual(['Query', 'Query']);
      expect(large.calls).toEqual(['Query', 'Query']);
      // One bucket of expiry, spread over the shards: the 200 jobs are never read.
      expect(large.scanned).toBeLessThanOrEqual(statusShardCount);
      const queries = store.inputs as { IndexName?: string }[];
      expect(queries.every((input) => input.IndexName === 'byEndpointExpiry')).toBe(true);
    } finally {
      store.close();
    }
  });
});

describe('counts stay right through every move, judged by the SQLite store', () => {
  it('create, take, done, fail, time out, cancel, retry, purge, expiry and deleteExpired', async () => {
    const store = countedStore();
    const dir = await mkdtemp(join(tmpdir(), 'ferry-counts-'));
    const judge = openLocalDatabase(join(dir, 'ferry.db'), { clock: new FakeClock() });
    const t0 = bucketAligned(Date.now()) + 3_600_000;
    const endpointId = `io${t0}counts`;
    const stores = [store.jobs, judge.jobs];
    const both = async (write: (jobs: JobStore) => Promise<unknown>) => {
      for (const jobs of stores) await write(jobs);
    };
    const move = (id: string, patch: JobPatch, nowMs: number) =>
      both(async (jobs) => {
        const current = (await jobs.get(id, nowMs)) ?? (await jobs.get(id, 0));
        const result = await jobs.update(current!, patch);
        expect(result.ok).toBe(true);
      });
    const expectSame = async (nowMs: number, expected: Partial<JobCounts>) => {
      const [dynamo, sqlite] = await Promise.all(stores.map((jobs) => jobs.counts(endpointId, nowMs)));
      expect(sqlite).toMatchObject(expected);
      expect(dynamo).toEqual(sqlite);
    };
    const ttl = 600_000;
    const job = (n: number, overrides: Partial<Job> = {}) =>
      makeJob({ id: `${endpointId}-${n}`, endpointId, createdAt: t0, expiresAt: t0 + ttl, ...overrides });
    try {
      for (let n = 1; n <= 6; n++) await both((jobs) => jobs.create(job(n)));
      await expectSame(t0, { inQueue: 6, inProgress: 0, completed: 0, failed: 0, retried: 0 });

      // take: 1..4 start running.
      for (const n of [1, 2, 3, 4])
        await move(`${endpointId}-${n}`, { status: 'IN_PROGRESS', workerId: 'w1', startedAt: t0 }, t0);
      await expectSame(t0, { inQueue: 2, inProgress: 4 });

      // done, fail, time out (each a final status with a retention that moves expiresAt to another bucket).
      const finished = { finishedAt: t0 + 1_000, expiresAt: t0 + 1_000 + 2 * ttl };
      await move(`${endpointId}-1`, { status: 'COMPLETED', output: { ok: true }, ...finished }, t0);
      await move(`${endpointId}-2`, { status: 'FAILED', error: 'boom', ...finished }, t0);
      await move(`${endpointId}-3`, { status: 'TIMED_OUT', ...finished }, t0);
      await expectSame(t0, { inQueue: 2, inProgress: 1, completed: 1, failed: 2 });

      // cancel a running job; purge a queued one.
      await move(`${endpointId}-4`, { status: 'CANCELLED', ...finished }, t0);
      await move(`${endpointId}-5`, { status: 'CANCELLED', ...finished }, t0);
      await expectSame(t0, { inQueue: 1, inProgress: 0, completed: 1, failed: 2, retried: 0 });

      // retry the failed job: back in the queue with a retry and a fresh TTL.
      await move(
        `${endpointId}-2`,
        {
          status: 'IN_QUEUE',
          retries: 1,
          error: undefined,
          finishedAt: undefined,
          expiresAt: t0 + 5_000 + ttl,
        },
        t0,
      );
      await expectSame(t0, { inQueue: 2, failed: 1, retried: 1 });

      // Expiry, with no write: job 6 (queued, expires at t0 + ttl, the first ms of a bucket) drops
      // out at its expiresAt to the millisecond; job 2 (retried) 5 s later, in the middle of that bucket.
      await expectSame(t0 + ttl - 1, { inQueue: 2, retried: 1 });
      await expectSame(t0 + ttl, { inQueue: 1, retried: 1 });
      await expectSame(t0 + ttl + 5_000, { inQueue: 0, retried: 0 });
      // The finished jobs expire in a later bucket.
      await expectSame(t0 + 1_000 + 2 * ttl - 1, { completed: 1, failed: 1 });
      await expectSame(t0 + 1_000 + 2 * ttl, { completed: 0, failed: 0 });

      // deleteExpired in the middle of the finished jobs' bucket keeps the counts right.
      const mid = t0 + 1_000 + 2 * ttl + 1;
      await both((jobs) => jobs.deleteExpired(mid, 100));
      await expectSame(mid, { inQueue: 0, inProgress: 0, completed: 0, failed: 0, retried: 0 });
      expect(await store.jobs.get(`${endpointId}-1`, 0)).toBeUndefined();
    } finally {
      store.close();
      await judge.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe("the urgent count (the scaler's cap) follows each job's priority", () => {
  const ttl = 600_000;
  /** Jobs of one endpoint, urgent or low-priority, expiring within one bucket of `t0`. */
  function scenario(name: string) {
    const t0 = bucketAligned(Date.now()) + 3_600_000;
    const endpointId = `io${t0}${name}`;
    const job = (n: string, lowPriority: boolean) =>
      makeJob({
        id: `${endpointId}-${n}`,
        endpointId,
        createdAt: t0,
        expiresAt: t0 + ttl,
        policy: { executionTimeoutMs: 600_000, ttlMs: ttl, lowPriority },
      });
    return { t0, endpointId, job };
  }
  /** A compare-and-set on the job as the store hands it out now. */
  const move = async (jobs: JobStore, id: string, patch: JobPatch) => {
    const result = await jobs.update((await jobs.get(id, 0))!, patch);
    expect(result.ok).toBe(true);
  };
  const taking = (t0: number): JobPatch => ({
    status: 'IN_PROGRESS',
    workerId: 'w1',
    startedAt: t0,
    attempt: 1,
  });
  const failing = (t0: number): JobPatch => ({
    status: 'FAILED',
    error: 'boom',
    finishedAt: t0,
    expiresAt: t0 + 2 * ttl,
  });
  const retrying = (t0: number): JobPatch => ({
    status: 'IN_QUEUE',
    retries: 1,
    error: undefined,
    finishedAt: undefined,
    // A fresh TTL in another count bucket.
    expiresAt: t0 + 2 * ttl + 5_000,
  });

  /**
   * A write as a Ferry from before count lanes makes it (an agent not yet redeployed): the job item
   * without `countLane`, its counts moved in the main count item alone.
   */
  async function writeUnlaned(before: Job | undefined, after: Job) {
    const client = dynamoClientFor(aws.dynamo.endpoint);
    try {
      const item = itemOf(after, { input: { json: JSON.stringify(after.input) } });
      delete item.countLane;
      const unlaned = (job: Job): Counted => ({ ...countedOfJob(job), lane: undefined });
      await transact(documentClient(client), [
        { Put: { TableName: aws.tables.jobs, Item: item } },
        ...countUpdates(aws.tables.jobs, [[before && unlaned(before), unlaned(after)]]),
      ]);
    } finally {
      client.destroy();
    }
  }

  it('through submits, takes, cancels, requeues, retries and a purge of both priorities', async () => {
    const store = countedStore();
    const { t0, endpointId, job } = scenario('lanes');
    const queued = () => store.jobs.queuedAtMost(endpointId, t0);
    try {
      for (const n of ['u1', 'u2']) await store.jobs.create(job(n, false));
      for (const n of ['l1', 'l2', 'l3']) await store.jobs.create(job(n, true));
      expect(await queued()).toEqual({ all: 5, urgent: 2 });

      await move(store.jobs, `${endpointId}-u1`, taking(t0));
      await move(store.jobs, `${endpointId}-l1`, taking(t0));
      expect(await queued()).toEqual({ all: 3, urgent: 1 });

      // Cancelled while queued, given as a copy the store did not hand out (it reads the item for
      // what the job counts as): low-priority jobs wait, no urgent one does.
      const u2 = (await store.jobs.get(`${endpointId}-u2`, 0))!;
      store.reset();
      expect((await store.jobs.update({ ...u2 }, { status: 'CANCELLED', finishedAt: t0 })).ok).toBe(true);
      expect(store.calls).toEqual(['GetItem', 'TransactWriteItems']);
      expect(await queued()).toEqual({ all: 2, urgent: 0 });

      // A lapsed lease puts each back in the queue, each in its own lane.
      await move(store.jobs, `${endpointId}-u1`, { status: 'IN_QUEUE', workerId: undefined });
      await move(store.jobs, `${endpointId}-l1`, { status: 'IN_QUEUE', workerId: undefined });
      expect(await queued()).toEqual({ all: 4, urgent: 1 });

      // Failed, then retried into another count bucket.
      for (const n of ['u1', 'l1']) await move(store.jobs, `${endpointId}-${n}`, taking(t0));
      expect(await queued()).toEqual({ all: 2, urgent: 0 });
      for (const n of ['u1', 'l1']) await move(store.jobs, `${endpointId}-${n}`, failing(t0));
      await move(store.jobs, `${endpointId}-l1`, retrying(t0));
      expect(await queued()).toEqual({ all: 3, urgent: 0 });
      await move(store.jobs, `${endpointId}-u1`, retrying(t0));
      expect(await queued()).toEqual({ all: 4, urgent: 1 });
      // Health sums both lanes with the rest.
      expect(await store.jobs.counts(endpointId, t0)).toMatchObject({
        inQueue: 4,
        inProgress: 0,
        retried: 2,
      });

      // A purge: one updateMany, its count deltas summed per item.
      const all = await store.jobs.listByStatus(endpointId, 'IN_QUEUE', t0, 100);
      expect(all).toHaveLength(4);
      const purged = await store.jobs.updateMany(
        all.map((current) => ({ current, patch: { status: 'CANCELLED', finishedAt: t0 } })),
      );
      expect(purged.every((answer) => answer.ok)).toBe(true);
      expect(await queued()).toEqual({ all: 0, urgent: 0 });
      expect(await store.jobs.counts(endpointId, t0)).toMatchObject({ inQueue: 0, inProgress: 0 });
      // The one Query on the count items, as before.
      store.reset();
      await queued();
      expect(store.calls).toEqual(['Query']);
    } finally {
      store.close();
    }
  });

  it('jobs written before lanes count as urgent while queued, leave the main count item, and take their lane on a requeue', async () => {
    const store = countedStore();
    const { t0, endpointId, job } = scenario('legacy');
    const queued = () => store.jobs.queuedAtMost(endpointId, t0);
    try {
      const [oldUrgent, oldLow] = [job('ou', false), job('ol', true)];
      await writeUnlaned(undefined, oldUrgent);
      await writeUnlaned(undefined, oldLow);
      // Their counts do not say their priority: both count as urgent (as every queued job did).
      expect(await queued()).toEqual({ all: 2, urgent: 2 });

      // This store moves them out of the main count item they were counted in.
      await move(store.jobs, oldLow.id, taking(t0));
      expect(await queued()).toEqual({ all: 1, urgent: 1 });
      await move(store.jobs, oldUrgent.id, { status: 'CANCELLED', finishedAt: t0 });
      expect(await queued()).toEqual({ all: 0, urgent: 0 });
      await store.jobs.create(job('u', false));
      expect(await queued()).toEqual({ all: 1, urgent: 1 });

      // Requeued by this store, the old low-priority job is in the low lane from then on.
      await move(store.jobs, oldLow.id, { status: 'IN_QUEUE', workerId: undefined });
      expect(await queued()).toEqual({ all: 2, urgent: 1 });
      await move(store.jobs, oldLow.id, taking(t0));
      expect(await queued()).toEqual({ all: 1, urgent: 1 });
      expect(await store.jobs.counts(endpointId, t0)).toMatchObject({ inQueue: 1, inProgress: 1 });
    } finally {
      store.close();
    }
  });

  it('an older Ferry taking a low-priority job (out of the main count item) never hides an urgent one', async () => {
    const store = countedStore();
    const { t0, endpointId, job } = scenario('skew');
    const queued = () => store.jobs.queuedAtMost(endpointId, t0);
    try {
      const low = job('l', true);
      await store.jobs.create(low);
      await store.jobs.create(job('u', false));
      expect(await queued()).toEqual({ all: 2, urgent: 1 });
      // Its lane still counts the job it took; the main items sum to -1.
      await writeUnlaned(low, { ...low, status: 'IN_PROGRESS', workerId: 'w1', startedAt: t0, version: 2 });
      expect(await queued()).toEqual({ all: 1, urgent: 1 });
      // This store finishes it from the item the older one wrote (no lane), and the counts agree.
      await move(store.jobs, low.id, { status: 'COMPLETED', finishedAt: t0, expiresAt: t0 + 2 * ttl });
      expect(await store.jobs.counts(endpointId, t0)).toMatchObject({
        inQueue: 1,
        inProgress: 0,
        completed: 1,
      });
      expect(await queued()).toEqual({ all: 1, urgent: 1 });
    } finally {
      store.close();
    }
  });
});

describe('health through the engine on DynamoDB Local and SQS (fauxqs)', () => {
  it('counts right after run, take, done, fail, cancel, retry and purge', async () => {
    const store = countedStore();
    const endpointId = `io${Date.now()}engine`;
    const engine = engineFor(store);
    const health = async () => (await engine.health(endpointId)).jobs;
    try {
      const ids: string[] = [];
      for (let i = 0; i < 5; i++)
        ids.push((await engine.submit(endpointId, { input: { i } }, { sync: false })).id);
      expect(await health()).toEqual({ inQueue: 5, inProgress: 0, completed: 0, failed: 0, retried: 0 });

      const taken: string[] = [];
      while (taken.length < 3) {
        const got = await engine.take(endpointId, 'w1', 3 - taken.length, 1_000);
        taken.push(...got.map((job) => job.id));
      }
      expect(await health()).toMatchObject({ inQueue: 2, inProgress: 3 });

      const [ok, bad, running] = taken as [string, string, string];
      await engine.done(endpointId, 'w1', ok, { output: { fine: true } });
      await engine.done(endpointId, 'w1', bad, { error: 'boom' });
      expect(await health()).toEqual({ inQueue: 2, inProgress: 1, completed: 1, failed: 1, retried: 0 });

      await engine.cancel(endpointId, running);
      expect(await health()).toEqual({ inQueue: 2, inProgress: 0, completed: 1, failed: 1, retried: 0 });

      await engine.retry(endpointId, bad);
      expect(await health()).toEqual({ inQueue: 3, inProgress: 0, completed: 1, failed: 0, retried: 1 });

      expect((await engine.purge(endpointId)).removed).toBe(3);
      expect(await health()).toEqual({ inQueue: 0, inProgress: 0, completed: 1, failed: 0, retried: 1 });
      // Each health read was the same two Queries, whatever the endpoint holds.
      store.reset();
      await health();
      expect(store.calls).toEqual(['Query', 'Query']);
    } finally {
      store.close();
    }
  });
});

describe('count items under concurrent moves', () => {
  it('40 jobs created and taken at once on one endpoint all land in the counts; the count items expire', async () => {
    const store = countedStore();
    const now = Date.now();
    const endpointId = `io${now}busy`;
    const expiresAt = now + 3_600_000;
    try {
      const jobs = Array.from({ length: 40 }, (_, i) =>
        makeJob({ id: `${endpointId}-${i}`, endpointId, createdAt: now, expiresAt }),
      );
      // Transactions on the same count items at once: those DynamoDB cancels for a conflict are sent again.
      await Promise.all(jobs.map((job) => store.jobs.create(job)));
      const current = await Promise.all(jobs.map((job) => store.jobs.get(job.id, now)));
      const moved = await Promise.all(
        current.map((job) =>
          store.jobs.update(job!, { status: 'IN_PROGRESS', workerId: 'w1', startedAt: now }),
        ),
      );
      expect(moved.every((result) => result.ok)).toBe(true);
      expect(await store.jobs.counts(endpointId, now)).toEqual({
        inQueue: 0,
        inProgress: 40,
        completed: 0,
        failed: 0,
        retried: 0,
      });

      // The count items: two per shard in the jobs' bucket (the main one, the urgent lane's), each
      // with a TTL a day past the bucket's end.
      const client = dynamoClientFor(aws.dynamo.endpoint);
      try {
        const { Items } = await documentClient(client).send(
          new QueryCommand({
            TableName: aws.tables.jobs,
            IndexName: 'byEndpointExpiry',
            KeyConditionExpression: 'endpointId = :counts',
            ExpressionAttributeValues: { ':counts': `${endpointId}#COUNTS` },
          }),
        );
        const bucketEnd = bucketAligned(expiresAt) + 300_000;
        expect(Items?.length).toBeGreaterThan(0);
        expect(Items!.length).toBeLessThanOrEqual(2 * statusShardCount);
        expect(Items!.every((item) => /-#counts#\d+#\d(#urgent)?$/.test(item.jobId as string))).toBe(true);
        for (const item of Items!) {
          // Not a job: `get` reads a count item as absent.
          expect(await store.jobs.get(item.jobId as string, 0)).toBeUndefined();
          const full = await documentClient(client).send(
            new GetCommand({ TableName: aws.tables.jobs, Key: { jobId: item.jobId } }),
          );
          expect(full.Item?.expiresAtSec).toBe(bucketEnd / 1000 + 86_400);
        }
      } finally {
        client.destroy();
      }
    } finally {
      store.close();
    }
  });
});

describe('lists read from keys-only indexes, then only the jobs they hand out', () => {
  it('listByStatus of 2 out of 6 queued jobs gets exactly those 2 by key, with their inputs', async () => {
    const store = countedStore();
    const now = Date.now();
    const endpointId = `io${now}list`;
    try {
      for (let i = 0; i < 6; i++) {
        await store.jobs.create(
          makeJob({
            id: `${endpointId}-${i}`,
            endpointId,
            createdAt: now + i,
            input: { i, pad: 'x'.repeat(1_000) },
          }),
        );
      }
      store.reset();
      const listed = await store.jobs.listByStatus(endpointId, 'IN_QUEUE', now, 2);
      expect(listed.map((job) => job.input)).toEqual([0, 1].map((i) => ({ i, pad: 'x'.repeat(1_000) })));
      expect(store.calls).toEqual(['Query', 'BatchGetItem']);
      const [query, batch] = store.inputs as [
        { IndexName: string },
        { RequestItems: Record<string, { Keys: unknown[]; ConsistentRead: boolean }> },
      ];
      expect(query.IndexName).toBe('byEndpointStatus');
      expect(batch.RequestItems[aws.tables.jobs]).toEqual({
        Keys: [{ jobId: `${endpointId}-0` }, { jobId: `${endpointId}-1` }],
        ConsistentRead: true,
      });
      // The index entries carry no input: the query's answer is keys and expiresAt only.
      const page = store.outputs[0] as { Items: Record<string, unknown>[] };
      for (const entry of page.Items)
        expect(Object.keys(entry).sort()).toEqual(['createdAt', 'endpointStatus', 'expiresAt', 'jobId']);
    } finally {
      store.close();
    }
  });
});

describe('a stream of several MB: every Query page read, in order, and all of it deleted', () => {
  // A Query answers at most 1 MB a page, with LastEvaluatedKey while more is left
  // (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Query.Pagination.html), and
  // DynamoDB Local pages the same way: these streams span many pages.
  const chunk = (i: number, bytes: number) => ({ i, pad: 'x'.repeat(bytes) });
  /** 40 chunks of 200 KB, two of them 400 KB (kept in S3), then 3,000 small ones: about 8 MB. */
  const longStream = () => [
    ...Array.from({ length: 40 }, (_, i) => chunk(i, i === 10 || i === 30 ? 400 * 1024 : 200 * 1024)),
    ...Array.from({ length: 3_000 }, (_, i) => chunk(40 + i, 8)),
  ];
  const append = async (jobs: JobStore, jobId: string, chunks: unknown[]) => {
    for (let i = 0; i < chunks.length; i += 500) await jobs.appendStream(jobId, chunks.slice(i, i + 500));
  };
  /** Every item of the job's partition of the chunks table, its meta item (seq 0) included. */
  const streamItems = async (jobId: string) =>
    (
      await aws.doc.send(
        new QueryCommand({
          TableName: aws.tables.chunks,
          KeyConditionExpression: 'jobId = :job',
          ExpressionAttributeValues: { ':job': jobId },
          ConsistentRead: true,
        }),
      )
    ).Items ?? [];
  /** The job's item as it is, expired or not (`get` hides an expired job). */
  const jobItem = async (jobId: string) =>
    (await aws.doc.send(new GetCommand({ TableName: aws.tables.jobs, Key: { jobId }, ConsistentRead: true })))
      .Item;
  const blobKeys = async (jobId: string) =>
    (await aws.s3.send(new ListObjectsV2Command({ Bucket: aws.bucket, Prefix: `ferry/payloads/${jobId}/` })))
      .Contents ?? [];

  it('readStream and the drain hand out all of it in order, none twice; deleteExpired then leaves no item and no blob of it', async () => {
    const store = countedStore();
    try {
      // Expired before any other job of this file, so deleteExpired(…, 1) takes this one.
      const job = makeJob({
        id: `io-${Date.now()}-stream`,
        createdAt: 0,
        expiresAt: 100,
        status: 'COMPLETED',
      });
      await store.jobs.create(job);
      const all = longStream();
      await append(store.jobs, job.id, all);
      expect(await blobKeys(job.id)).toHaveLength(2);

      store.reset();
      const first = await store.jobs.readStream(job.id, 0);
      // One read's 2 MB of chunks take more than one page.
      expect(store.count('Query')).toBeGreaterThan(1);
      const read = [...first.chunks];
      for (let next = first.next; ; ) {
        const part = await store.jobs.readStream(job.id, next);
        if (part.next === next) break;
        read.push(...part.chunks);
        next = part.next;
      }
      expect(read).toEqual(all);

      const drained: unknown[] = [];
      for (let part = await store.jobs.drainStream(job.id); part.length > 0; ) {
        drained.push(...part);
        part = await store.jobs.drainStream(job.id);
      }
      expect(drained).toEqual(all);
      expect(await store.jobs.streamPending(job.id)).toBe(false);

      store.reset();
      expect(await store.jobs.deleteExpired(200, 1)).toBe(1);
      // The sweeper's Query asked for keys and blob refs, not for 8 MB of chunks at once.
      const chunkQueries = store.calls.flatMap((call, at) =>
        call === 'Query' && store.inputs[at]?.TableName === aws.tables.chunks ? [at] : [],
      );
      expect(chunkQueries.length).toBeGreaterThan(1);
      for (const at of chunkQueries) {
        for (const item of (store.outputs[at]?.Items ?? []) as Record<string, unknown>[])
          expect(Object.keys(item).every((name) => name === 'seq' || name === 'chunkRef')).toBe(true);
      }
      // Nothing of the stream is left for TTL, its meta item neither, and no blob.
      expect(await streamItems(job.id)).toEqual([]);
      expect(await blobKeys(job.id)).toEqual([]);
    } finally {
      store.close();
    }
  }, 120_000);

  it("a retry's clear of a long stream is one Query and one BatchWriteItem; the sweeper deletes the rest with the job", async () => {
    // A clear runs inside the request that requeued the job (the API Lambda's /retry): deleting
    // all of a long stream there (4,000 BatchWriteItems for 100,000 chunks) outlasted API
    // Gateway's 29 s (https://docs.aws.amazon.com/apigateway/latest/developerguide/limits.html).
    // It deletes the first 25 chunks it skipped, the rest stay behind clearedTo, where no read
    // goes, until deleteExpired deletes the expired job's whole stream.
    const job = makeJob({ id: `io-${Date.now()}-clear`, createdAt: 0, expiresAt: 30, status: 'FAILED' });
    const jobs = aws.jobs();
    await jobs.create(job);
    // 300 chunks, two in S3: one among the first 25 (seq 2), one after them (seq 200).
    const all = Array.from({ length: 300 }, (_, i) => chunk(i, i === 1 || i === 199 ? 400 * 1024 : 8));
    await append(jobs, job.id, all);
    expect(await blobKeys(job.id)).toHaveLength(2);
    // The next attempt appends between the clear's move of the meta item and its Query.
    let raced = false;
    const sent: string[] = [];
    const answers: Record<string, unknown>[][] = [];
    const doc = {
      send: async (command: { input: { TableName?: string } }) => {
        sent.push(command.constructor.name);
        const query = command instanceof QueryCommand && command.input.TableName === aws.tables.chunks;
        if (query && !raced) {
          raced = true;
          await jobs.appendStream(job.id, [{ next: 'attempt' }]);
        }
        const answer = await aws.doc.send(command as QueryCommand);
        if (query) answers.push((answer.Items ?? []) as Record<string, unknown>[]);
        return answer;
      },
    } as unknown as DynamoDBDocumentClient;
    await new DynamoJobStore({ doc, tables: aws.tables, blobs: aws.blobs('ferry/') }).clearStream(job.id);

    expect(sent).toEqual(['UpdateCommand', 'QueryCommand', 'BatchWriteCommand']);
    // Keys and blob refs only.
    expect(answers.flat().some((item) => 'chunkJson' in item)).toBe(false);
    const seqsLeft = Array.from({ length: all.length - 25 }, (_, i) => 26 + i);
    expect((await streamItems(job.id)).map((item) => item.seq)).toEqual([0, ...seqsLeft, all.length + 1]);
    expect(await blobKeys(job.id)).toHaveLength(1);
    // Behind clearedTo: no reader sees what is left.
    expect(await jobs.readStream(job.id, 0)).toEqual({ chunks: [{ next: 'attempt' }], next: all.length + 1 });
    expect(await jobs.drainStream(job.id)).toEqual([{ next: 'attempt' }]);

    expect(await jobs.deleteExpired(35, 1)).toBe(1);
    expect(await streamItems(job.id)).toEqual([]);
    expect(await blobKeys(job.id)).toEqual([]);
  }, 120_000);

  it('sends again the deletes a BatchWriteItem left unprocessed (throttling), until none is left', async () => {
    // "If DynamoDB returns any unprocessed items, you should retry the batch operation on those
    // items ... we strongly recommend that you use an exponential backoff algorithm"
    // (https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_BatchWriteItem.html).
    // DynamoDB Local never throttles: this client applies half of each of the first batches and
    // hands the rest back as UnprocessedItems, as DynamoDB does under throttling.
    const job = makeJob({
      id: `io-${Date.now()}-unprocessed`,
      createdAt: 0,
      expiresAt: 20,
      status: 'COMPLETED',
    });
    const jobs = aws.jobs();
    await jobs.create(job);
    const all = Array.from({ length: 60 }, (_, i) => chunk(i, 8));
    await append(jobs, job.id, all);
    let throttled = 3;
    const sent: number[] = [];
    const doc = {
      send: async (command: object) => {
        if (!(command instanceof BatchWriteCommand)) return aws.doc.send(command as QueryCommand);
        const [[table, requests]] = Object.entries(command.input.RequestItems ?? {}) as [[string, unknown[]]];
        sent.push(requests.length);
        if (throttled-- <= 0) return aws.doc.send(command);
        const half = Math.ceil(requests.length / 2);
        await aws.doc.send(
          new BatchWriteCommand({ RequestItems: { [table]: requests.slice(0, half) as never } }),
        );
        return { UnprocessedItems: { [table]: requests.slice(half) } };
      },
    } as unknown as DynamoDBDocumentClient;
    const store = new DynamoJobStore({ doc, tables: aws.tables, blobs: aws.blobs('ferry/') });
    expect(await store.deleteExpired(25, 1)).toBe(1);

    // 60 chunks in groups of 25: the first one sent again with what was left of it (12, 6, 3), the
    // other two once; then the meta item, once no chunk is left.
    expect(sent).toEqual([25, 12, 6, 3, 25, 10, 1]);
    expect(await streamItems(job.id)).toEqual([]);
  });

  it('a read whose S3 chunk a clear or the sweeper deleted after its Query goes on after them, not an error', async () => {
    // A clear sets clearedTo, then deletes the first chunks behind it and their S3 objects; the
    // sweeper deletes an expired job's meta item, then its objects. A reader between its Query and
    // its S3 read found the object gone and failed with MissingBlobError (a 500 to the client).
    const jobs = aws.jobs();
    const stream = [chunk(0, 8), chunk(1, 400 * 1024), chunk(2, 8)];
    /** A store whose first Query of the chunks table runs `race` once DynamoDB answered it. */
    const racedStore = (race: () => Promise<unknown>) => {
      let raced = false;
      const doc = {
        send: async (command: { input: { TableName?: string } }) => {
          const answer = await aws.doc.send(command as QueryCommand);
          if (command instanceof QueryCommand && command.input.TableName === aws.tables.chunks && !raced) {
            raced = true;
            await race();
          }
          return answer;
        },
      } as unknown as DynamoDBDocumentClient;
      return new DynamoJobStore({ doc, tables: aws.tables, blobs: aws.blobs('ferry/') });
    };
    const clearedThenAppended = (jobId: string) => async () => {
      await jobs.clearStream(jobId);
      await jobs.appendStream(jobId, [{ next: 'attempt' }]);
    };

    const read = `io-${Date.now()}-raced-read`;
    await append(jobs, read, stream);
    expect(await racedStore(clearedThenAppended(read)).readStream(read, 0)).toEqual({
      chunks: [{ next: 'attempt' }],
      next: stream.length + 1,
    });

    const drained = `io-${Date.now()}-raced-drain`;
    await append(jobs, drained, stream);
    expect(await racedStore(clearedThenAppended(drained)).drainStream(drained)).toEqual([
      { next: 'attempt' },
    ]);

    const swept = makeJob({
      id: `io-${Date.now()}-raced-sweep`,
      createdAt: 0,
      expiresAt: 10,
      status: 'COMPLETED',
    });
    await jobs.create(swept);
    await append(jobs, swept.id, stream);
    expect(await racedStore(() => jobs.deleteExpired(15, 1)).readStream(swept.id, 0)).toEqual({
      chunks: [],
      next: 0,
    });
    expect(await blobKeys(swept.id)).toEqual([]);

    // An object gone ahead of clearedTo (removed outside Ferry) is lost, and still says so.
    const lost = `io-${Date.now()}-lost`;
    await append(jobs, lost, stream);
    const [object] = await blobKeys(lost);
    await aws.blobs('ferry/').delete(object!.Key!.slice('ferry/'.length));
    await expect(jobs.readStream(lost, 0)).rejects.toThrow(/A stored payload is missing/);
  });

  it("goes on sweeping when a job's chunks cannot be read, leaving that job for the next run with a warning", async () => {
    // A failed Query of one job's chunks must not fail the sweep run and leave the next expired
    // jobs behind too. The job item goes after its stream, so the job stays for the next run.
    const stamp = Date.now();
    const failing = makeJob({
      id: `io-${stamp}-unreadable`,
      createdAt: 0,
      expiresAt: 40,
      status: 'COMPLETED',
    });
    const next = makeJob({ id: `io-${stamp}-swept`, createdAt: 0, expiresAt: 41, status: 'COMPLETED' });
    const jobs = aws.jobs();
    for (const job of [failing, next]) {
      await jobs.create(job);
      await append(jobs, job.id, [chunk(1, 8), chunk(2, 8)]);
    }
    const doc = {
      send: async (command: object) => {
        const input = (command as QueryCommand).input;
        if (
          command instanceof QueryCommand &&
          input.TableName === aws.tables.chunks &&
          input.ExpressionAttributeValues?.[':job'] === failing.id
        )
          throw new Error('ProvisionedThroughputExceededException');
        return aws.doc.send(command as QueryCommand);
      },
    } as unknown as DynamoDBDocumentClient;
    const warnings: string[] = [];
    const store = new DynamoJobStore({
      doc,
      tables: aws.tables,
      blobs: aws.blobs('ferry/'),
      warn: (message) => warnings.push(message),
    });

    expect(await store.deleteExpired(50, 2)).toBe(1);
    expect(warnings).toEqual([expect.stringContaining(`could not delete stream chunks of ${failing.id}`)]);
    expect(await streamItems(next.id)).toEqual([]);
    // The unreadable job is left whole, where the next run finds it and deletes it.
    expect((await streamItems(failing.id)).map((item) => item.seq)).toEqual([0, 1, 2]);
    expect(await jobItem(failing.id)).toBeDefined();
    expect(await jobs.deleteExpired(50, 2)).toBe(1);
    expect(await streamItems(failing.id)).toEqual([]);
    expect(await jobItem(failing.id)).toBeUndefined();
  });

  it("deletes an expired job's long stream over several runs, a bounded number of chunks a run, the job item last", async () => {
    // A run deleted a whole stream in one go (4,000 BatchWriteItems one after the other for 100,000
    // chunks), its job item first: past the sweeper's timeout
    // (https://docs.aws.amazon.com/lambda/latest/dg/configuration-timeout.html) the rest of that
    // stream was left to its TTL with nothing pointing at it, and the rest of the run was skipped.
    // Here a run deletes at most 100 chunks; a job whose stream is not all deleted stays.
    const store = countedStore({ sweepDropChunks: 100 });
    try {
      const stamp = Date.now();
      // Expired in this order, after every job this file's earlier tests left and deleted.
      const long = makeJob({ id: `io-${stamp}-long`, createdAt: 0, expiresAt: 60, status: 'COMPLETED' });
      const bare = makeJob({ id: `io-${stamp}-bare`, createdAt: 0, expiresAt: 61, status: 'FAILED' });
      const short = makeJob({ id: `io-${stamp}-short`, createdAt: 0, expiresAt: 62, status: 'COMPLETED' });
      for (const job of [long, bare, short]) await store.jobs.create(job);
      // 250 chunks, two in S3: one in the first run's 100 (seq 50), the last one (seq 250).
      const all = Array.from({ length: 250 }, (_, i) => chunk(i, i === 49 || i === 249 ? 400 * 1024 : 8));
      await append(store.jobs, long.id, all);
      await append(store.jobs, short.id, [chunk(0, 8), chunk(1, 8)]);
      expect(await blobKeys(long.id)).toHaveLength(2);
      // Read before it expired, as a /retry or a `?ttl=` does just before.
      const readBefore = (await store.jobs.get(long.id, 0))!;

      /** One run: what it answers, and the chunk items (seq ≥ 1) and meta items it deleted. */
      const run = async () => {
        store.reset();
        const deleted = await store.jobs.deleteExpired(70, 10);
        const keys = store.calls.flatMap((call, at) =>
          call === 'BatchWriteItem'
            ? (
                store.inputs[at] as {
                  RequestItems: Record<string, { DeleteRequest: { Key: { seq: number } } }[]>;
                }
              ).RequestItems[aws.tables.chunks]!.map((request) => request.DeleteRequest.Key.seq)
            : [],
        );
        const chunkQueries = store.inputs.filter(
          (input, at) => store.calls[at] === 'Query' && input.TableName === aws.tables.chunks,
        ) as { Limit?: number }[];
        for (const query of chunkQueries)
          expect(query.Limit ?? Number.POSITIVE_INFINITY).toBeLessThanOrEqual(100);
        return {
          deleted,
          chunks: keys.filter((seq) => seq > 0).length,
          metas: keys.filter((seq) => seq === 0).length,
        };
      };

      // The long stream takes the first run's 100 deletes: the job without a stream is still
      // deleted, the short stream waits.
      expect(await run()).toEqual({ deleted: 1, chunks: 100, metas: 0 });
      // Writes of that run per job (UpdateItems: a claim, a clear): none for the job that never
      // streamed (a read of its meta item tells; it is deleted as found) nor for the short stream
      // once the budget is spent (it waits, unclaimed).
      const updatesOf = (jobId: string) =>
        store.inputs.filter(
          (input, at) =>
            store.calls[at] === 'UpdateItem' && (input as { Key: { jobId: string } }).Key.jobId === jobId,
        ).length;
      expect([long.id, bare.id, short.id].map(updatesOf)).toEqual([2, 0, 0]);
      expect(await jobItem(bare.id)).toBeUndefined();
      for (const job of [long, short]) expect(await jobItem(job.id)).toBeDefined();
      expect((await streamItems(long.id)).map((item) => item.seq)).toEqual([
        0,
        ...Array.from({ length: 150 }, (_, i) => 101 + i),
      ]);
      expect(await blobKeys(long.id)).toHaveLength(1);
      // Cleared before any delete: a reader finds no chunk, rather than a gap.
      expect(await store.jobs.readStream(long.id, 0)).toEqual({ chunks: [], next: all.length });
      // A write from before the expiry does not bring back a job whose stream is half deleted.
      expect((await store.jobs.update(readBefore, { expiresAt: 1_000_000 })).ok).toBe(false);

      expect(await run()).toEqual({ deleted: 0, chunks: 100, metas: 0 });
      // The last 50 of the long stream and its meta item, then the short stream with the 50 left.
      expect(await run()).toEqual({ deleted: 2, chunks: 52, metas: 2 });
      expect(await run()).toEqual({ deleted: 0, chunks: 0, metas: 0 });
      for (const job of [long, bare, short]) {
        expect(await jobItem(job.id)).toBeUndefined();
        expect(await streamItems(job.id)).toEqual([]);
        expect(await blobKeys(job.id)).toEqual([]);
      }
    } finally {
      store.close();
    }
  }, 120_000);

  it("a stream whose last chunks spend the run's budget exactly goes with its job in that run; no streamed job is claimed after", async () => {
    // The Query page that deleted the budget's last chunk, cut by its Limit, may carry a
    // LastEvaluatedKey though nothing is left ("it does not necessarily mean that there is more
    // data", https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Query.Pagination.html),
    // and the run kept that job, its stream all deleted but its meta item: the next run claimed and
    // cleared it again (two UpdateItems) only to delete the meta item and the job. DynamoDB Local
    // leaves the key out when the page reached the end of its key range, so the wrapper below puts
    // it on every chunks page its Limit cut, as DynamoDB may.
    const store = countedStore({ sweepDropChunks: 100 }, (client) =>
      client.middlewareStack.add(
        (next) => async (args) => {
          const result = await next(args);
          const input = args.input as { TableName?: string; Limit?: number };
          const output = result.output as {
            Items?: { jobId: unknown; seq: unknown }[];
            LastEvaluatedKey?: unknown;
          };
          const last = output.Items?.at(-1);
          if (input.TableName === aws.tables.chunks && last && output.Items?.length === input.Limit)
            output.LastEvaluatedKey ??= { jobId: last.jobId, seq: last.seq };
          return result;
        },
        { step: 'initialize', name: 'limitCutKeepsKey' },
      ),
    );
    try {
      const stamp = Date.now();
      // Expired after the jobs of the test above, which deletes up to 70.
      const exact = makeJob({ id: `io-${stamp}-exact`, createdAt: 0, expiresAt: 71, status: 'COMPLETED' });
      const waiting = makeJob({
        id: `io-${stamp}-waiting`,
        createdAt: 0,
        expiresAt: 72,
        status: 'COMPLETED',
      });
      const bare = makeJob({ id: `io-${stamp}-bare`, createdAt: 0, expiresAt: 73, status: 'FAILED' });
      for (const job of [exact, waiting, bare]) await store.jobs.create(job);
      await append(
        store.jobs,
        exact.id,
        Array.from({ length: 100 }, (_, i) => chunk(i, 8)),
      );
      await append(store.jobs, waiting.id, [chunk(0, 8), chunk(1, 8)]);

      const ids = [exact.id, waiting.id, bare.id];
      /** One run: how many jobs it deleted, and its UpdateItems (a claim, a clear) per job of `ids`. */
      const run = async () => {
        store.reset();
        const deleted = await store.jobs.deleteExpired(75, 10);
        const updates = ids.map(
          (jobId) =>
            store.inputs.filter(
              (input, at) =>
                store.calls[at] === 'UpdateItem' && (input as { Key: { jobId: string } }).Key.jobId === jobId,
            ).length,
        );
        return { deleted, updates };
      };
      const first = await run();
      const second = await run();
      // The exact stream is claimed and cleared once, in the first run, which spends its budget
      // there: the waiting stream is claimed in the second run only, the job without one deleted
      // in the first.
      expect([first.updates, second.updates]).toEqual([
        [2, 0, 0],
        [0, 2, 0],
      ]);
      expect([first.deleted, second.deleted]).toEqual([2, 1]);
      expect((await run()).deleted).toBe(0);
      for (const job of [exact, waiting, bare]) {
        expect(await jobItem(job.id)).toBeUndefined();
        expect(await streamItems(job.id)).toEqual([]);
      }
    } finally {
      store.close();
    }
  }, 120_000);

  it("starts no job and no page of a stream past the run's deadline; the next run goes on where it stopped", async () => {
    // Lambda stops the sweeper at its timeout wherever it is
    // (https://docs.aws.amazon.com/lambda/latest/dg/configuration-timeout.html); a deletion that
    // ran into it skipped the run's webhooks. Here each DynamoDB request moves a fake clock on, and
    // the run's deadline (functions/sweeper.ts runDeadline) passes while the first page of a long
    // stream is deleted: the budget of chunks (5,000) is far from spent.
    const clock = new FakeClock(0);
    const store = countedStore({}, (client) =>
      client.middlewareStack.add(
        (next) => async (args) => {
          clock.advance(100);
          return next(args);
        },
        { step: 'initialize', name: 'spendTime' },
      ),
    );
    try {
      const stamp = Date.now();
      // Expired after the jobs of the tests above, which delete up to 75.
      const long = makeJob({ id: `io-${stamp}-dl-long`, createdAt: 0, expiresAt: 86, status: 'COMPLETED' });
      const bare = makeJob({ id: `io-${stamp}-dl-bare`, createdAt: 0, expiresAt: 87, status: 'FAILED' });
      for (const job of [long, bare]) await store.jobs.create(job);
      await append(
        store.jobs,
        long.id,
        Array.from({ length: 600 }, (_, i) => chunk(i, 8)),
      );
      // The listing's requests (a Query per final status shard), with nothing expired yet.
      store.reset();
      await store.jobs.deleteExpired(0, 10);
      const listing = store.calls.length;

      // Past its deadline a run sends no request at all.
      store.reset();
      expect(await store.jobs.deleteExpired(90, 10, { passed: () => true })).toBe(0);
      expect(store.calls).toEqual([]);

      // Time for the listing, the long stream's meta read, claim, clear and first page (a Query and
      // 10 BatchWriteItems of 25): the deadline passes during that page.
      store.reset();
      const until = clock.now() + (listing + 14) * 100;
      expect(await store.jobs.deleteExpired(90, 10, { passed: () => clock.now() >= until })).toBe(0);
      // Nothing started after it: the other job waits, and so do the rest of the stream and its job.
      expect(store.calls).toHaveLength(listing + 14);
      expect(store.count('BatchWriteItem')).toBe(10);
      expect((await streamItems(long.id)).map((item) => item.seq)).toEqual([
        0,
        ...Array.from({ length: 350 }, (_, i) => 251 + i),
      ]);
      for (const job of [long, bare]) expect(await jobItem(job.id)).toBeDefined();

      // The next run, with time, deletes the rest of the stream and both jobs.
      expect(await store.jobs.deleteExpired(90, 10, { passed: () => false })).toBe(2);
      for (const job of [long, bare]) {
        expect(await jobItem(job.id)).toBeUndefined();
        expect(await streamItems(job.id)).toEqual([]);
      }
    } finally {
      store.close();
    }
  }, 120_000);
});
