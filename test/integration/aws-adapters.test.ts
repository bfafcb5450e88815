/**
 * What only the aws adapters have to get right, on DynamoDB Local + fauxqs (SQS, S3): payloads over
 * DynamoDB's 400 KB item limit going through S3 pointers, expired items that TTL has not deleted yet,
 * malformed queue messages, the low-priority queue, presigned URLs and multipart uploads.
 *
 * TTL is off on these tables, as the "expired but still present" case needs (DynamoDB Local deletes
 * expired items within seconds; AWS takes days).
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DescribeTimeToLiveCommand, DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { DeleteObjectCommand, HeadObjectCommand, ListObjectsV2Command } from '@aws-sdk/client-s3';
import { GetQueueAttributesCommand, SendMessageCommand } from '@aws-sdk/client-sqs';
import { GetCommand, PutCommand, QueryCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  streamDrainBlobs,
  streamDrainBytes,
  streamDrainChunks,
} from '../../core/adapters/aws/dynamo/job-item.js';
import { createTables, DynamoJobStore, dynamoSchema } from '../../core/adapters/aws/dynamo.js';
import type { Job } from '../../core/job.js';
import { limits } from '../../core/limits.js';
import { makeJob } from '../contract/helpers.js';
import { type AwsFixture, fakeAwsConfig, startAwsFixture } from '../support/emulators.js';

let aws: AwsFixture;
let scratch: string;

beforeAll(async () => {
  aws = await startAwsFixture({ ttl: false });
  scratch = await mkdtemp(join(tmpdir(), 'ferry-aws-adapters-'));
});
afterAll(async () => {
  await aws?.stop();
  if (scratch) await rm(scratch, { recursive: true, force: true });
});

/** A JSON value whose serialized form is about `bytes` long. */
const bigValue = (bytes: number) => ({
  blob: randomBytes(Math.ceil(bytes / 2))
    .toString('hex')
    .slice(0, bytes),
});

const rawItem = async (jobId: string) =>
  (await aws.doc.send(new GetCommand({ TableName: aws.tables.jobs, Key: { jobId } }))).Item;

/** The payload blobs of a job, as S3 lists them. */
async function payloadKeys(jobId: string): Promise<string[]> {
  const listed = await aws.s3.send(
    new ListObjectsV2Command({ Bucket: aws.bucket, Prefix: `ferry/payloads/${jobId}/` }),
  );
  return (listed.Contents ?? []).map((object) => object.Key as string).sort();
}

describe('DynamoJobStore: values over the 400 KB item limit', () => {
  const now = Date.now();
  const job = (overrides: Partial<Job> = {}) =>
    makeJob({ endpointId: `ep-${randomUUID()}`, createdAt: now, ...overrides });

  it('round-trips a 700 KB input through an S3 pointer, and keeps it across updates', async () => {
    const jobs = aws.jobs();
    const input = bigValue(700 * 1024);
    const j = job({ input });
    await jobs.create(j);

    const item = await rawItem(j.id);
    expect(item?.inputRef).toMatch(/^payloads\//);
    expect(item?.inputJson).toBeUndefined();
    expect(await payloadKeys(j.id)).toHaveLength(1);

    expect((await jobs.get(j.id, now))?.input).toEqual(input);
    const written = await jobs.update((await jobs.get(j.id, now))!, {
      status: 'IN_PROGRESS',
      leaseUntil: now + 60_000,
    });
    expect(written.ok && written.job.input).toEqual(input);
    expect((await jobs.listByStatus(j.endpointId, 'IN_PROGRESS', now, 10))[0]?.input).toEqual(input);
    // The input was not uploaded again.
    expect(await payloadKeys(j.id)).toHaveLength(1);
  });

  it('round-trips a 1 MB output, and deletes the blob it replaces', async () => {
    const jobs = aws.jobs();
    const j = job({ status: 'IN_PROGRESS', startedAt: now, leaseUntil: now + 60_000 });
    await jobs.create(j);
    const first = bigValue(1024 * 1024);
    const second = bigValue(1024 * 1024);

    const firstWrite = await jobs.update((await jobs.get(j.id, now))!, { output: first });
    expect(firstWrite.ok && firstWrite.job.output).toEqual(first);
    const firstKeys = await payloadKeys(j.id);
    expect(firstKeys).toHaveLength(1);
    expect((await jobs.get(j.id, now))?.output).toEqual(first);

    await jobs.update((await jobs.get(j.id, now))!, {
      status: 'COMPLETED',
      output: second,
      finishedAt: now + 5,
    });
    expect((await jobs.get(j.id, now))?.output).toEqual(second);
    const secondKeys = await payloadKeys(j.id);
    expect(secondKeys).toHaveLength(1);
    expect(secondKeys[0]).not.toBe(firstKeys[0]);

    // A small output goes back inline and the blob goes.
    const done = await jobs.update((await jobs.get(j.id, now))!, { output: { ok: true } });
    expect(done.ok && done.job.output).toEqual({ ok: true });
    expect((await rawItem(j.id))?.outputJson).toBe('{"ok":true}');
    expect(await payloadKeys(j.id)).toEqual([]);
  });

  it('leaves no blob behind when an update with a big output loses the race', async () => {
    const jobs = aws.jobs();
    const j = job();
    await jobs.create(j);
    const base = (await jobs.get(j.id, now))!;
    const results = await Promise.all([
      jobs.update(base, { output: bigValue(500 * 1024) }),
      jobs.update(base, { output: bigValue(500 * 1024) }),
    ]);
    expect(results.filter((r) => r.ok)).toHaveLength(1);
    expect(await payloadKeys(j.id)).toHaveLength(1);
  });

  it('a retry (a new createdAt) writes the kept input anew, so no blob is older than its job', async () => {
    // The bucket's payload rule expires objects by age (infra/platform-stack.ts payloadExpiryDays);
    // a job retried again and again would otherwise outlive the input it was first given.
    const jobs = aws.jobs();
    const input = bigValue(700 * 1024);
    const j = job({ input, status: 'FAILED', error: 'bad', finishedAt: now + 1 });
    await jobs.create(j);
    const [firstKey] = await payloadKeys(j.id);
    const retried = await jobs.update((await jobs.get(j.id, now))!, {
      status: 'IN_QUEUE',
      error: undefined,
      finishedAt: undefined,
      createdAt: now + 60_000,
      expiresAt: now + 60_000 + j.policy.ttlMs,
    });
    expect(retried.ok).toBe(true);
    const keys = await payloadKeys(j.id);
    expect(keys).toHaveLength(1);
    expect(keys[0]).not.toBe(firstKey);
    expect((await rawItem(j.id))?.inputRef).toBe(keys[0]!.replace(/^ferry\//, ''));
    expect((await jobs.get(j.id, now))?.input).toEqual(input);

    // Any other update keeps the blob where it is.
    await jobs.update((await jobs.get(j.id, now))!, { status: 'IN_PROGRESS', leaseUntil: now + 60_000 });
    expect(await payloadKeys(j.id)).toEqual(keys);
  });

  it('leaves a job whose blob is gone for good out of a list, with a warning, and lists the others', async () => {
    // One such job (its object removed outside Ferry) must not stop the sweeper's lists.
    const warnings: string[] = [];
    const jobs = aws.jobs({ warn: (message) => warnings.push(message) });
    const endpointId = `ep-${randomUUID()}`;
    const broken = job({ endpointId, input: bigValue(500 * 1024) });
    const fine = job({ endpointId, input: bigValue(500 * 1024) });
    await jobs.create(broken);
    await jobs.create(fine);
    for (const Key of await payloadKeys(broken.id))
      await aws.s3.send(new DeleteObjectCommand({ Bucket: aws.bucket, Key }));

    const listed = await jobs.listByStatus(endpointId, 'IN_QUEUE', now, 10);
    expect(listed.map((j) => j.id)).toEqual([fine.id]);
    expect(listed[0]?.input).toEqual(fine.input);
    expect(warnings).toEqual([expect.stringContaining(`job ${broken.id} left out of a list`)]);
  });

  it('streams a 1 MB chunk through S3 between small ones, in order, once', async () => {
    const jobs = aws.jobs();
    const j = job();
    await jobs.create(j);
    const big = bigValue(1024 * 1024);
    await jobs.appendStream(j.id, [{ i: 0 }, big, { i: 2 }]);
    expect(await payloadKeys(j.id)).toHaveLength(1);
    expect(await jobs.drainStream(j.id)).toEqual([{ i: 0 }, big, { i: 2 }]);
    expect(await jobs.drainStream(j.id)).toEqual([]);
    // Handed-out chunks stay for readStream (the console's read) until the stream is cleared, and
    // then go, blobs included.
    expect((await jobs.readStream(j.id, 0)).chunks).toEqual([{ i: 0 }, big, { i: 2 }]);
    await jobs.clearStream(j.id);
    expect(await payloadKeys(j.id)).toEqual([]);
  });

  it('keeps stream chunks and their meta at least as long as their job may be kept (limits.jobLifetimeMaxMs), and a day longer at most', async () => {
    // TTL deletes in no order: a chunk gone before its job would stop every drain at the gap. And a
    // job item that TTL took before the sweeper came (which deletes a job's stream with it) leaves
    // its chunks to their own TTL: bounded, never for ever.
    const jobs = aws.jobs();
    const j = job();
    await jobs.create(j);
    await jobs.appendStream(j.id, [{ i: 0 }, bigValue(400 * 1024)]);
    await jobs.appendStream(j.id, [{ i: 2 }]);
    const appendedBy = Date.now();
    const { Items = [] } = await aws.doc.send(
      new QueryCommand({
        TableName: aws.tables.chunks,
        KeyConditionExpression: 'jobId = :job',
        ExpressionAttributeValues: { ':job': j.id },
      }),
    );
    expect(Items.map((item) => item.seq)).toEqual([0, 1, 2, 3]);
    for (const item of Items) {
      const ttlMs = item[dynamoSchema.chunks.ttlAttribute] * 1000;
      expect(ttlMs).toBeGreaterThanOrEqual(j.createdAt + limits.jobLifetimeMaxMs);
      // Epoch seconds rounded up: a second more.
      expect(ttlMs).toBeLessThanOrEqual(appendedBy + limits.jobLifetimeMaxMs + 86_400_000 + 1_000);
    }
  });

  it("keeps a cleared stream's meta item as long as the retried job may be kept", async () => {
    // A retry 13 days after the last chunk starts a job kept up to 14 days more (a week queued, then
    // its retention). Its meta item, with nextSeq and clearedTo, must last as long: once TTL took it,
    // the next append would number the new attempt's chunks from 1 again, behind the clearedTo a
    // reader of the stream (the console) goes on from.
    const day = 86_400_000;
    let nowMs = Date.now();
    const jobs = new DynamoJobStore({
      doc: aws.doc,
      tables: aws.tables,
      blobs: aws.blobs('ferry/'),
      nowMs: () => nowMs,
    });
    const jobId = `ep-${randomUUID()}-meta`;
    await jobs.appendStream(jobId, [{ i: 1 }, { i: 2 }]);
    nowMs += 13 * day;
    await jobs.clearStream(jobId);
    const meta = await aws.doc.send(
      new GetCommand({ TableName: aws.tables.chunks, Key: { jobId, seq: 0 }, ConsistentRead: true }),
    );
    expect(meta.Item?.clearedTo).toBe(2);
    expect(meta.Item?.[dynamoSchema.chunks.ttlAttribute] * 1000).toBeGreaterThanOrEqual(
      nowMs + limits.jobLifetimeMaxMs,
    );
  });

  it('hands out a long backlog in parts one Lambda answer can carry, and says while more is left', async () => {
    // A /stream answer is one Lambda response (6 MB,
    // https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html): a drain of all of a
    // long backlog could not be sent, and the chunks it had already deleted were lost.
    const jobs = aws.jobs();
    const drainAll = async (jobId: string) => {
      const parts: number[] = [];
      const chunks: unknown[] = [];
      for (;;) {
        const part = await jobs.drainStream(jobId);
        chunks.push(...part);
        const pending = await jobs.streamPending(jobId);
        parts.push(part.length);
        if (!pending) return { parts, chunks };
      }
    };

    const tokens = job();
    await jobs.create(tokens);
    const many = Array.from({ length: streamDrainChunks * 2 + 500 }, (_, i) => ({ t: i }));
    for (let i = 0; i < many.length; i += 500) await jobs.appendStream(tokens.id, many.slice(i, i + 500));
    const drained = await drainAll(tokens.id);
    expect(drained.parts).toEqual([streamDrainChunks, streamDrainChunks, 500]);
    expect(drained.chunks).toEqual(many);
    expect(await jobs.drainStream(tokens.id)).toEqual([]);

    const inline = job();
    await jobs.create(inline);
    const wide = Array.from({ length: 10 }, () => bigValue(250 * 1024));
    await jobs.appendStream(inline.id, wide);
    const byBytes = await drainAll(inline.id);
    // 250 KB each: eight fit in streamDrainBytes, the ninth would not.
    expect(byBytes.parts).toEqual([Math.floor(streamDrainBytes / (250 * 1024 + 11)), 2]);
    expect(byBytes.chunks).toEqual(wide);

    const blobs = job();
    await jobs.create(blobs);
    const huge = Array.from({ length: streamDrainBlobs + 2 }, () => bigValue(400 * 1024));
    await jobs.appendStream(blobs.id, huge);
    const byBlobs = await drainAll(blobs.id);
    expect(byBlobs.parts).toEqual([streamDrainBlobs, 2]);
    expect(byBlobs.chunks).toEqual(huge);
    // readStream reads in the same parts, and moves nothing.
    const first = await jobs.readStream(blobs.id, 0);
    expect(first.chunks).toEqual(huge.slice(0, streamDrainBlobs));
    expect(await jobs.readStream(blobs.id, first.next)).toEqual({
      chunks: huge.slice(streamDrainBlobs),
      next: huge.length,
    });
    await jobs.clearStream(blobs.id);
    expect(await payloadKeys(blobs.id)).toEqual([]);
  }, 120_000);

  it('keeps every job item under 400 KB even when several fields are just under their budgets', async () => {
    const jobs = aws.jobs();
    const j = job({
      input: bigValue(159 * 1024),
      output: bigValue(159 * 1024),
      error: 'e'.repeat(31 * 1024),
      status: 'FAILED',
    });
    // DynamoDB Local enforces the 400 KB limit: an oversized item would make this throw.
    await jobs.create(j);
    expect(await jobs.get(j.id, now)).toEqual({ ...j, version: 1 });
    expect(await payloadKeys(j.id)).toEqual([]);
  });
});

describe('DynamoJobStore: expired items that TTL has not deleted', () => {
  it('reads them as absent from get, lists and counts while the item is still in the table', async () => {
    const jobs = aws.jobs();
    const now = Date.now();
    const endpointId = `ep-${randomUUID()}`;
    // Expired two count buckets ago (5 min each), so its TTL has passed too: a finished job's TTL
    // waits for the end of its bucket (core/adapters/aws/dynamo/counts.ts).
    const expired = makeJob({
      endpointId,
      createdAt: now - 720_000,
      expiresAt: now - 600_000,
      status: 'COMPLETED',
    });
    const live = makeJob({ endpointId, createdAt: now - 120_000, status: 'COMPLETED' });
    await jobs.create(expired);
    await jobs.create(live);

    const item = await rawItem(expired.id);
    expect(item?.expiresAtSec).toBeLessThan(now / 1000);
    expect(await jobs.get(expired.id, now)).toBeUndefined();
    expect((await jobs.listByStatus(endpointId, 'COMPLETED', now, 10)).map((x) => x.id)).toEqual([live.id]);
    expect((await jobs.counts(endpointId, now)).completed).toBe(1);
    // Still there: only the read filter hides it.
    expect(await rawItem(expired.id)).toBeDefined();
  });

  it('gives finished jobs with objects in S3 a day of TTL grace, so the sweeper deletes their objects with them', async () => {
    // TTL runs no code when it deletes an item: one it took before a sweep left its objects behind.
    const jobs = aws.jobs();
    const now = Date.now();
    const bucketEnd = (Math.floor(now / 300_000) + 1) * 300_000;
    const small = makeJob({ createdAt: now - 1_000, expiresAt: now, status: 'COMPLETED' });
    const big = makeJob({
      createdAt: now - 1_000,
      expiresAt: now,
      status: 'COMPLETED',
      input: bigValue(200 * 1024),
    });
    await jobs.create(small);
    await jobs.create(big);
    expect((await rawItem(big.id))?.inputRef).toMatch(/^payloads\//);
    expect((await rawItem(small.id))?.expiresAtSec).toBe(bucketEnd / 1000);
    expect((await rawItem(big.id))?.expiresAtSec).toBe(bucketEnd / 1000 + 86_400);
  });

  it('gives unfinished jobs a day of TTL grace so the engine can still stop them', async () => {
    const jobs = aws.jobs();
    const now = Date.now();
    const stuck = makeJob({ createdAt: now - 120_000, expiresAt: now - 60_000, status: 'IN_QUEUE' });
    await jobs.create(stuck);
    expect((await rawItem(stuck.id))?.expiresAtSec).toBeGreaterThan(now / 1000 + 23 * 3600);
    expect((await jobs.listExpiredUnfinished(now, 1_000)).map((x) => x.id)).toContain(stuck.id);
  });

  it('createTables turns TTL on by default, on the attribute dynamoSchema names', async () => {
    const client = new DynamoDBClient({ ...fakeAwsConfig, endpoint: aws.dynamo.endpoint });
    try {
      const suffix = randomUUID().slice(0, 8);
      const names = {
        jobs: `j-${suffix}`,
        chunks: `s-${suffix}`,
        control: `c-${suffix}`,
        workers: `w-${suffix}`,
      };
      await createTables(client, names);
      const ttl = await client.send(new DescribeTimeToLiveCommand({ TableName: names.jobs }));
      expect(ttl.TimeToLiveDescription?.AttributeName).toBe(dynamoSchema.jobs.ttlAttribute);
      expect(ttl.TimeToLiveDescription?.TimeToLiveStatus).toBe('ENABLED');
      const none = await client.send(new DescribeTimeToLiveCommand({ TableName: aws.tables.jobs }));
      expect(none.TimeToLiveDescription?.TimeToLiveStatus).toBe('DISABLED');
    } finally {
      client.destroy();
    }
  });

  it('does not trip over an item written by hand with a past TTL', async () => {
    const jobs = aws.jobs();
    const now = Date.now();
    const j = makeJob({ createdAt: now - 10_000, expiresAt: now - 1 });
    const body = { ...j } as Record<string, unknown>;
    delete body.input;
    await aws.doc.send(
      new PutCommand({
        TableName: aws.tables.jobs,
        Item: {
          jobId: j.id,
          body: JSON.stringify(body),
          version: 1,
          expiresAt: j.expiresAt,
          expiresAtSec: 1,
        },
      }),
    );
    expect(await jobs.get(j.id, now)).toBeUndefined();
    expect(await jobs.get(j.id, now - 5_000)).toMatchObject({ id: j.id });
  });
});

describe('SqsJobQueue', () => {
  it('acks and drops malformed messages with a log line, and still delivers the good one', async () => {
    const warnings: string[] = [];
    const queue = aws.queue({ warn: (message) => warnings.push(message) });
    const ep = `ep-${randomUUID()}`;
    const url = await aws.queueUrlFor(ep);
    for (const body of [
      'not json',
      JSON.stringify({ jobId: 'x' }),
      JSON.stringify({ jobId: 'x', endpointId: ep, lowPriority: false, extra: 1 }),
      JSON.stringify({ jobId: 'x', endpointId: 'another-endpoint', lowPriority: false }),
    ]) {
      await aws.sqs.send(new SendMessageCommand({ QueueUrl: url, MessageBody: body }));
    }
    await queue.send(ep, 'good', { lowPriority: false });

    const got = await queue.receive(ep, { max: 10, visibilityMs: 1_000, waitMs: 0 });
    expect(got.map((m) => m.jobId)).toEqual(['good']);
    expect(warnings).toHaveLength(4);
    expect(warnings[0]).toContain('malformed');
    // Deleted, not merely hidden: nothing comes back after the visibility timeout.
    await new Promise((resolve) => setTimeout(resolve, 1_200));
    expect(await queue.receive(ep, { max: 10, visibilityMs: 1_000, waitMs: 0 })).toHaveLength(1);
    const attrs = await aws.sqs.send(
      new GetQueueAttributesCommand({
        QueueUrl: url,
        AttributeNames: ['ApproximateNumberOfMessagesNotVisible'],
      }),
    );
    expect(attrs.Attributes?.ApproximateNumberOfMessagesNotVisible).toBe('1');
  });

  it('puts low-priority jobs on the second queue, which scaling does not read', async () => {
    const queue = aws.queue();
    const ep = `ep-${randomUUID()}`;
    await queue.send(ep, 'slow', { lowPriority: true });
    const count = async (lowPriority: boolean) => {
      const attrs = await aws.sqs.send(
        new GetQueueAttributesCommand({
          QueueUrl: await aws.queueUrlFor(ep, { lowPriority }),
          AttributeNames: ['ApproximateNumberOfMessages'],
        }),
      );
      return Number(attrs.Attributes?.ApproximateNumberOfMessages);
    };
    expect(await count(false)).toBe(0);
    expect(await count(true)).toBe(1);
    expect(await queue.depth(ep)).toEqual({ visible: 1, urgent: 0 });
    const [message] = await queue.receive(ep, { max: 1, visibilityMs: 5_000, waitMs: 0 });
    expect(message?.jobId).toBe('slow');
    expect(message?.receipt.startsWith('l:')).toBe(true);
    await queue.ack(ep, message!.receipt);
    expect(await count(true)).toBe(0);
  });

  it('refuses a receipt it did not make with an internal error', async () => {
    const queue = aws.queue();
    await expect(queue.ack('ep-x', 'garbage')).rejects.toMatchObject({ code: 'internal' });
  });
});

describe('S3BlobStore', () => {
  it('presigned PUT then presigned GET work through plain fetch', async () => {
    const blobs = aws.blobs('presign/');
    const key = `claims/${randomUUID()}.json`;
    const body = JSON.stringify({ input: { prompt: 'a cat' } });
    const putUrl = await blobs.presignPut(key, 300, Buffer.byteLength(body));
    expect(putUrl).toContain('X-Amz-Signature=');
    const put = await fetch(putUrl, { method: 'PUT', body });
    expect(put.status).toBe(200);
    expect(new TextDecoder().decode(await blobs.get(key))).toBe(body);

    const get = await fetch(await blobs.presignGet(key, 300));
    expect(get.status).toBe(200);
    expect(await get.text()).toBe(body);
  });

  it('refuses a presign lifetime outside 1 s – 7 days', async () => {
    const blobs = aws.blobs();
    await expect(blobs.presignGet('k', 0)).rejects.toMatchObject({ code: 'internal' });
    await expect(blobs.presignPut('k', 8 * 24 * 3600, 1)).rejects.toMatchObject({ code: 'internal' });
  });

  it('uploads a 20 MB file in 8 MB parts with progress after each part', async () => {
    const blobs = aws.blobs('artifacts/');
    const size = 20 * 1024 * 1024 + 123;
    const content = randomBytes(size);
    const file = join(scratch, 'artifact.tar.gz');
    await writeFile(file, content);
    const progress: number[] = [];
    const key = `${randomUUID()}/artifact.tar.gz`;
    await blobs.putFile(key, file, (sent) => progress.push(sent));

    expect(progress).toEqual([8 * 1024 * 1024, 16 * 1024 * 1024, size]);
    expect(Buffer.from((await blobs.get(key))!).equals(content)).toBe(true);
    // A multipart object's ETag ends in -<parts>.
    const head = await aws.s3.send(new HeadObjectCommand({ Bucket: aws.bucket, Key: `artifacts/${key}` }));
    expect(head.ETag).toMatch(/-3"?$/);
    expect(head.ContentLength).toBe(size);
  });
});
