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
 * (NODEJS_TIMEOUT_ERROR_CODES in @smithy/core's retry classification).
 */
import { randomBytes, randomUUID } from 'node:crypto';
import type { Readable } from 'node:stream';
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
 * `loseNext` is dropped after DynamoDB Local applied the request.
 */
class LosingHandler extends NodeHttpHandler {
  /** The `x-amz-target` of every request sent, in order (retries included). */
  readonly sent: string[] = [];
  /** The JSON body of every request sent, in order. */
  readonly bodies: Record<string, unknown>[] = [];
  /** The targets whose answer was dropped. */
  readonly lost: string[] = [];
  private readonly armed: string[] = [];

  /** Drops the answer of the next request of `operation` (PutItem, UpdateItem, TransactWriteItems…). */
  loseNext(operation: string): void {
    this.armed.push(`DynamoDB_20120810.${operation}`);
  }

  override async handle(...args: Parameters<NodeHttpHandler['handle']>) {
    const [request] = args;
    const target = String(request.headers['x-amz-target']);
    this.sent.push(target);
    const body = request.body as string | Uint8Array;
    this.bodies.push(JSON.parse(typeof body === 'string' ? body : new TextDecoder().decode(body)));
    const answer = await super.handle(...args);
    const at = this.armed.indexOf(target);
    if (at < 0) return answer;
    this.armed.splice(at, 1);
    this.lost.push(target);
    // DynamoDB Local answered (so it applied the request): the answer never reaches the SDK.
    (answer.response.body as Readable).destroy();
    throw Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' });
  }
}

/** A job store whose DynamoDB client loses the answers its handler is told to lose. */
function losingStore(blobs: BlobStore = aws.blobs('ferry/')) {
  const handler = new LosingHandler();
  const client = new DynamoDBClient({
    ...fakeAwsConfig,
    endpoint: aws.dynamo.endpoint,
    requestHandler: handler,
  });
  const jobs = new DynamoJobStore({ doc: documentClient(client), tables: aws.tables, blobs });
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
      // The drained chunks were deleted: only the meta item and none of a, b is left.
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
