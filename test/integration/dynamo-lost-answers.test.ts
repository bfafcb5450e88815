/**
 * Writes whose answer is lost after DynamoDB applied them, on DynamoDB Local. The SDK retries a
 * request whose answer it did not get (a reset connection, a timeout, HTTP 500/502/503/504) without
 * knowing whether the first attempt landed, so the retry meets the item as the first attempt left
 * it: a conditional write fails the condition it made false, an ADD adds twice. AWS: "With an atomic
 * counter, the updates are not idempotent ... If an UpdateItem operation fails, the application
 * could simply retry the operation. This would risk updating the counter twice"
 * (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/WorkingWithItems.html#WorkingWithItems.AtomicCounters).
 * DynamoDB Local never loses an answer: `LosingHandler` forwards a request, lets DynamoDB Local
 * apply it, then drops the answer and throws ECONNRESET, which the SDK retries
 * (NODEJS_TIMEOUT_ERROR_CODES in @smithy/core's retry classification). Nor does it throttle or fail:
 * `LosingHandler` answers requests it is told to refuse with the error DynamoDB would send, without
 * forwarding them.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { Readable } from 'node:stream';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { GetCommand } from '@aws-sdk/lib-dynamodb';
import { NodeHttpHandler } from '@smithy/node-http-handler';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DynamoJobStore, documentClient } from '../../core/adapters/aws/dynamo.js';
import type { BlobStore } from '../../core/ports.js';
import { makeJob } from '../contract/helpers.js';
import { type AwsFixture, fakeAwsConfig, startAwsFixture } from '../support/emulators.js';

let aws: AwsFixture;
beforeAll(async () => {
  aws = await startAwsFixture({ ttl: false });
});
afterAll(async () => {
  await aws?.stop();
});

/**
 * The SDK's HTTP handler, except that the answer to the next request of each operation named in
 * `loseNext` is dropped after DynamoDB Local applied the request, and the requests of an operation
 * named in `refuse` are answered with an error and never reach DynamoDB Local.
 */
class LosingHandler extends NodeHttpHandler {
  /** The `x-amz-target` of every request sent, in order (retries included). */
  readonly sent: string[] = [];
  /** The JSON body of every request sent, in order. */
  readonly bodies: Record<string, unknown>[] = [];
  /** The targets whose answer was dropped. */
  readonly lost: string[] = [];
  /** The targets answered with an error by `refuse`, in order. */
  readonly refused: string[] = [];
  private readonly armed: string[] = [];
  private readonly refusals = new Map<string, { type: string; status: number }>();

  /** Drops the answer of the next request of `operation` (PutItem, UpdateItem, TransactWriteItems…). */
  loseNext(operation: string): void {
    this.armed.push(`DynamoDB_20120810.${operation}`);
  }

  /**
   * From now on answers each request of `operation` (except one whose answer `loseNext` drops) with
   * the DynamoDB error `type` at HTTP `status`, as DynamoDB's JSON protocol sends errors.
   */
  refuse(operation: string, type: string, status: number): void {
    this.refusals.set(`DynamoDB_20120810.${operation}`, { type, status });
  }

  override async handle(...args: Parameters<NodeHttpHandler['handle']>) {
    const [request] = args;
    const target = String(request.headers['x-amz-target']);
    this.sent.push(target);
    const body = request.body as string | Uint8Array;
    this.bodies.push(JSON.parse(typeof body === 'string' ? body : new TextDecoder().decode(body)));
    const at = this.armed.indexOf(target);
    const refusal = this.refusals.get(target);
    if (at < 0 && refusal) {
      this.refused.push(target);
      const error = { __type: `com.amazonaws.dynamodb.v20120810#${refusal.type}`, message: refusal.type };
      return {
        response: {
          statusCode: refusal.status,
          headers: { 'content-type': 'application/x-amz-json-1.0', 'x-amzn-requestid': randomUUID() },
          body: Readable.from([Buffer.from(JSON.stringify(error))]),
        },
      };
    }
    const answer = await super.handle(...args);
    if (at < 0) return answer;
    this.armed.splice(at, 1);
    this.lost.push(target);
    // DynamoDB Local answered (so it applied the request): the answer never reaches the SDK.
    (answer.response.body as Readable).destroy();
    throw Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' });
  }
}

/** A job store whose DynamoDB client loses the answers its handler is told to lose. */
function losingStore(blobs: BlobStore = aws.blobs('ferry/'), warn?: (message: string) => void) {
  const handler = new LosingHandler();
  const client = new DynamoDBClient({
    ...fakeAwsConfig,
    endpoint: aws.dynamo.endpoint,
    requestHandler: handler,
  });
  const jobs = new DynamoJobStore({ doc: documentClient(client), tables: aws.tables, blobs, warn });
  const sends = (operation: string) =>
    handler.sent.filter((target) => target === `DynamoDB_20120810.${operation}`).length;
  return { jobs, handler, sends, close: () => client.destroy() };
}

/** A JSON value whose serialized form is about `bytes` long: over the inline budget it goes to S3. */
const bigValue = (bytes: number) => ({ blob: randomBytes(bytes / 2).toString('hex') });

describe('a job write whose answer is lost lands once and answers ok', () => {
  it('update() with a 200 KB output (an S3 blob): the SDK retry fails the version condition, the write is ours', async () => {
    const store = losingStore();
    try {
      const now = Date.now();
      // In progress, and the patch changes no count: one conditional PutItem (no transaction).
      const job = makeJob({
        endpointId: `lost-${now}`,
        createdAt: now,
        status: 'IN_PROGRESS',
        workerId: 'w1',
      });
      await store.jobs.create(job);
      const current = (await store.jobs.get(job.id, now))!;
      const output = bigValue(200 * 1024);
      store.handler.loseNext('PutItem');
      const result = await store.jobs.update(current, { output });
      expect(store.handler.lost).toEqual(['DynamoDB_20120810.PutItem']);
      expect(store.sends('PutItem')).toBe(2);
      expect(result.ok).toBe(true);
      // The saved item points at the blob this write uploaded: it must still be there.
      const stored = await aws.jobs().get(job.id, now);
      expect(stored).toMatchObject({ version: current.version + 1, output });
    } finally {
      store.close();
    }
  });

  it('create() of a job that counts nowhere (one PutItem): the retry is not "already exists"', async () => {
    const store = losingStore();
    try {
      const now = Date.now();
      // CANCELLED with no retries adds to no count (healthCountOf): the create is a single PutItem.
      const input = bigValue(200 * 1024);
      const job = makeJob({ endpointId: `lost-${now}`, createdAt: now, status: 'CANCELLED', input });
      store.handler.loseNext('PutItem');
      await store.jobs.create(job);
      expect(store.handler.lost).toEqual(['DynamoDB_20120810.PutItem']);
      expect(store.sends('PutItem')).toBe(2);
      expect(await aws.jobs().get(job.id, now)).toMatchObject({ id: job.id, version: 1, input });
    } finally {
      store.close();
    }
  });

  it('a status move (TransactWriteItems): the SDK sends one ClientRequestToken for both attempts, and the counts move once', async () => {
    // Holds on the old code as well: it shows why the transaction path needs no token check
    // (core/adapters/aws/dynamo/client.ts, transact), DynamoDB Local honouring the token as AWS does.
    const store = losingStore();
    try {
      const now = Date.now();
      const job = makeJob({ endpointId: `lost-${now}`, createdAt: now });
      await store.jobs.create(job);
      const current = (await store.jobs.get(job.id, now))!;
      store.handler.loseNext('TransactWriteItems');
      const result = await store.jobs.update(current, { status: 'IN_PROGRESS', workerId: 'w1' });
      expect(store.handler.lost).toEqual(['DynamoDB_20120810.TransactWriteItems']);
      const tokens = store.handler.bodies
        .filter((_, i) => store.handler.sent[i] === 'DynamoDB_20120810.TransactWriteItems')
        .slice(-2)
        .map((body) => body.ClientRequestToken);
      expect(tokens[0]).toEqual(expect.any(String));
      expect(tokens[1]).toBe(tokens[0]);
      expect(result.ok).toBe(true);
      expect(await store.jobs.counts(job.endpointId, now)).toMatchObject({ inQueue: 0, inProgress: 1 });
    } finally {
      store.close();
    }
  });
});

/** The S3 blob store, with the keys of the blobs put through it (a job's payloads have random keys). */
function recordingBlobs() {
  const s3 = aws.blobs('ferry/');
  const keys: string[] = [];
  const blobs: BlobStore = Object.assign(Object.create(s3) as BlobStore, {
    put: async (key: string, bytes: Uint8Array) => {
      keys.push(key);
      await s3.put(key, bytes);
    },
  });
  return { blobs, keys, exists: (key: string) => s3.exists(key) };
}

/** An IN_PROGRESS job of its own endpoint with a 200 KB input (an S3 blob), created and read back. */
async function runningJob(store: ReturnType<typeof losingStore>, nowMs: number) {
  const job = makeJob({
    endpointId: `lost-${randomUUID()}`,
    createdAt: nowMs,
    status: 'IN_PROGRESS',
    workerId: 'w1',
    input: bigValue(200 * 1024),
  });
  await store.jobs.create(job);
  return (await store.jobs.get(job.id, nowMs))!;
}

describe('a job write that landed though its retries failed keeps its blobs', () => {
  // The SDK re-sends a TransactWriteItems whose answer it lost with the same ClientRequestToken; when
  // its retries meet TransactionInProgressException (the first attempt not finished yet), a 5xx or
  // throttling, the call fails though the first attempt committed. The job item then points at the
  // blobs this write uploaded: dropping them loses the job's input or output.
  // https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html
  it('create() of a queued job (a transaction with its counts), retries answered TransactionInProgressException', async () => {
    const store = losingStore();
    try {
      const now = Date.now();
      const input = bigValue(200 * 1024);
      const job = makeJob({ endpointId: `lost-${randomUUID()}`, createdAt: now, input });
      store.handler.loseNext('TransactWriteItems');
      store.handler.refuse('TransactWriteItems', 'TransactionInProgressException', 400);
      await store.jobs.create(job);
      expect(store.handler.lost).toEqual(['DynamoDB_20120810.TransactWriteItems']);
      expect(store.handler.refused.length).toBeGreaterThan(0);
      expect(await aws.jobs().get(job.id, now)).toMatchObject({ id: job.id, version: 1, input });
      expect(await aws.jobs().counts(job.endpointId, now)).toMatchObject({ inQueue: 1 });
    } finally {
      store.close();
    }
  });

  it('update() to COMPLETED with a 200 KB output, retries answered 500: ok, and the job reads whole', async () => {
    const store = losingStore();
    try {
      const now = Date.now();
      const current = await runningJob(store, now);
      const output = bigValue(200 * 1024);
      store.handler.loseNext('TransactWriteItems');
      store.handler.refuse('TransactWriteItems', 'InternalServerError', 500);
      const result = await store.jobs.update(current, { status: 'COMPLETED', output });
      expect(store.handler.lost).toEqual(['DynamoDB_20120810.TransactWriteItems']);
      expect(store.handler.refused.length).toBeGreaterThan(0);
      expect(result).toMatchObject({ ok: true, job: { status: 'COMPLETED', version: current.version + 1 } });
      expect(await aws.jobs().get(current.id, now)).toMatchObject({
        status: 'COMPLETED',
        version: current.version + 1,
        input: current.input,
        output,
      });
      expect(await aws.jobs().counts(current.endpointId, now)).toMatchObject({ inProgress: 0, completed: 1 });
    } finally {
      store.close();
    }
  });

  it('updateMany() to COMPLETED with a 200 KB output, retries answered TransactionInProgressException', async () => {
    const store = losingStore();
    try {
      const now = Date.now();
      const current = await runningJob(store, now);
      const output = bigValue(200 * 1024);
      store.handler.loseNext('TransactWriteItems');
      store.handler.refuse('TransactWriteItems', 'TransactionInProgressException', 400);
      const [result] = await store.jobs.updateMany([{ current, patch: { status: 'COMPLETED', output } }]);
      expect(store.handler.lost).toEqual(['DynamoDB_20120810.TransactWriteItems']);
      expect(result).toMatchObject({ ok: true, job: { status: 'COMPLETED' } });
      expect(await aws.jobs().get(current.id, now)).toMatchObject({
        status: 'COMPLETED',
        input: current.input,
        output,
      });
    } finally {
      store.close();
    }
  });

  it('update() whose re-read fails too: the error is thrown, the blobs stay, the job reads whole', async () => {
    const recording = recordingBlobs();
    const warnings: string[] = [];
    const store = losingStore(recording.blobs, (message) => warnings.push(message));
    try {
      const now = Date.now();
      const current = await runningJob(store, now);
      const output = bigValue(200 * 1024);
      store.handler.loseNext('TransactWriteItems');
      store.handler.refuse('TransactWriteItems', 'InternalServerError', 500);
      store.handler.refuse('GetItem', 'InternalServerError', 500);
      await expect(store.jobs.update(current, { status: 'COMPLETED', output })).rejects.toMatchObject({
        name: 'InternalServerError',
      });
      const outputKey = recording.keys.at(-1) as string;
      expect(await recording.exists(outputKey)).toBe(true);
      // Through a client that does not fail: the write had landed.
      expect(await aws.jobs().get(current.id, now)).toMatchObject({ status: 'COMPLETED', output });
      expect(warnings).toEqual([
        expect.stringContaining(`could not tell whether a write of job ${current.id}`),
      ]);
    } finally {
      store.close();
    }
  });
});

describe('a job write that did not land', () => {
  it('update() refused with 500 on every attempt: the error is thrown and its blob removed', async () => {
    // Holds on the old code as well: a guard that the re-read does not keep what nothing points at.
    const recording = recordingBlobs();
    const store = losingStore(recording.blobs);
    try {
      const now = Date.now();
      const current = await runningJob(store, now);
      const [inputKey] = recording.keys as [string];
      store.handler.refuse('TransactWriteItems', 'InternalServerError', 500);
      await expect(
        store.jobs.update(current, { status: 'COMPLETED', output: bigValue(200 * 1024) }),
      ).rejects.toMatchObject({ name: 'InternalServerError' });
      expect(store.handler.lost).toEqual([]);
      const outputKey = recording.keys.at(-1) as string;
      expect(outputKey).not.toBe(inputKey);
      expect(await recording.exists(outputKey)).toBe(false);
      expect(await recording.exists(inputKey)).toBe(true);
      expect(await aws.jobs().get(current.id, now)).toMatchObject({
        status: 'IN_PROGRESS',
        version: current.version,
        input: current.input,
      });
    } finally {
      store.close();
    }
  });

  it('create() whose transaction is still in progress (TransactionInProgressException, not landed yet): the blob stays', async () => {
    // The transaction may still commit after the re-read: its input blob must outlive that. Left
    // alone, the bucket's expire-payloads rule removes it (infra/platform-stack.ts).
    const recording = recordingBlobs();
    const store = losingStore(recording.blobs);
    try {
      const now = Date.now();
      const job = makeJob({
        endpointId: `lost-${randomUUID()}`,
        createdAt: now,
        input: bigValue(200 * 1024),
      });
      store.handler.refuse('TransactWriteItems', 'TransactionInProgressException', 400);
      await expect(store.jobs.create(job)).rejects.toMatchObject({ name: 'TransactionInProgressException' });
      expect(await aws.jobs().get(job.id, now)).toBeUndefined();
      expect(recording.keys).toHaveLength(1);
      expect(await recording.exists(recording.keys[0] as string)).toBe(true);
    } finally {
      store.close();
    }
  });
});

describe('stream chunks survive lost answers', () => {
  it('appendStream whose reservation answer is lost: drainStream returns every chunk in order', async () => {
    const store = losingStore();
    try {
      const jobId = `lost-append-${randomUUID()}`;
      await store.jobs.appendStream(jobId, ['a']);
      store.handler.loseNext('UpdateItem');
      await store.jobs.appendStream(jobId, ['b', 'c']);
      expect(store.handler.lost).toEqual(['DynamoDB_20120810.UpdateItem']);
      await store.jobs.appendStream(jobId, ['d']);
      expect(await aws.jobs().drainStream(jobId)).toEqual(['a', 'b', 'c', 'd']);
    } finally {
      store.close();
    }
  });

  it("appends from two stores in turn (each one's nextSeq stale in turn) keep their order", async () => {
    // Holds on the old code as well: a guard for reserveSeqs, which starts from the nextSeq its store
    // last saw and, when another store appended since, from the item the failed condition hands back.
    const [first, second] = [aws.jobs(), aws.jobs()];
    const jobId = `two-stores-${randomUUID()}`;
    await first.appendStream(jobId, ['a']);
    await second.appendStream(jobId, ['b', 'c']);
    await first.appendStream(jobId, ['d']);
    await second.appendStream(jobId, ['e']);
    expect(await first.drainStream(jobId)).toEqual(['a', 'b', 'c', 'd', 'e']);
  });

  it('drainStream whose cursor move answer is lost: returns the chunks, and a second drain does not', async () => {
    const store = losingStore();
    try {
      const jobId = `lost-drain-${randomUUID()}`;
      await store.jobs.appendStream(jobId, ['a', 'b']);
      const updatesBefore = store.sends('UpdateItem');
      store.handler.loseNext('UpdateItem');
      expect(await store.jobs.drainStream(jobId)).toEqual(['a', 'b']);
      expect(store.handler.lost).toEqual(['DynamoDB_20120810.UpdateItem']);
      expect(store.sends('UpdateItem') - updatesBefore).toBe(2);
      expect(await store.jobs.drainStream(jobId)).toEqual([]);
      await store.jobs.appendStream(jobId, ['c']);
      expect(await store.jobs.drainStream(jobId)).toEqual(['c']);
      // The drained chunks stay, once each, for readStream (the console's read), until cleared.
      expect((await store.jobs.readStream(jobId, 0)).chunks).toEqual(['a', 'b', 'c']);
      await store.jobs.clearStream(jobId);
      const chunk = await aws.doc.send(
        new GetCommand({ TableName: aws.tables.chunks, Key: { jobId, seq: 1 }, ConsistentRead: true }),
      );
      expect(chunk.Item).toBeUndefined();
    } finally {
      store.close();
    }
  });

  it('an append that fails after its reservation (an S3 put) does not hold back the chunks after it', async () => {
    const s3 = aws.blobs('ferry/');
    let failPuts = false;
    const blobs: BlobStore = Object.assign(Object.create(s3) as BlobStore, {
      put: (key: string, bytes: Uint8Array) =>
        failPuts ? Promise.reject(new Error('S3 is down')) : s3.put(key, bytes),
    });
    const warnings: string[] = [];
    const jobs = new DynamoJobStore({
      doc: aws.doc,
      tables: aws.tables,
      blobs,
      warn: (m) => warnings.push(m),
    });
    const jobId = `lost-chunk-${randomUUID()}`;
    await jobs.appendStream(jobId, ['a']);
    failPuts = true;
    // Over the 300 KB a chunk item holds inline: its S3 put fails, after its seqs were reserved.
    await expect(jobs.appendStream(jobId, ['b', bigValue(400 * 1024)])).rejects.toThrow('S3 is down');
    failPuts = false;
    await jobs.appendStream(jobId, ['c']);
    expect(await jobs.drainStream(jobId)).toEqual(['a', 'c']);
    expect(await jobs.drainStream(jobId)).toEqual([]);
    expect(warnings).toEqual([]);
  });
});
