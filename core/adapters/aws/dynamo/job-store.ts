/** JobStore on DynamoDB: the `jobs` and `chunks` tables of `dynamoSchema` (../dynamo.ts says why). */
import { randomUUID } from 'node:crypto';
import type { AttributeValue } from '@aws-sdk/client-dynamodb';
import { type DynamoDBDocumentClient, GetCommand, QueryCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { unmarshall } from '@aws-sdk/util-dynamodb';
import { conflict, FerryError } from '../../../errors.js';
import {
  decodeJobCursor,
  encodeJobCursor,
  isBeforeCursor,
  isFinal,
  type Job,
  type JobStatus,
  jobStatuses,
  readsInput,
} from '../../../job.js';
import { limits } from '../../../limits.js';
import type {
  BlobStore,
  Deadline,
  JobChange,
  JobCounts,
  JobPatch,
  JobReadOptions,
  JobStore,
  JobUpdate,
  LeaseRenewal,
  ListByStatusOptions,
  QueuedCounts,
  QueuedJobCount,
  RecentJobsQuery,
  StreamRead,
} from '../../../ports.js';
import {
  batchGet,
  batchWrite,
  checkLimit,
  failedCondition,
  type Item,
  isConditionFailure,
  queryAll,
  singleWrite,
  toSec,
  transact,
  writeAtomically,
  writeOutcome,
} from './client.js';
import {
  type Counted,
  type CountMove,
  countedOfJob,
  countUpdates,
  readCounts,
  readQueuedAtMost,
  statusOfShard,
} from './counts.js';
import {
  type BigField,
  bigFields,
  bucketStartOf,
  type CountLane,
  daySec,
  inlineBudgetBytes,
  itemOf,
  MissingBlobError,
  payloadKey,
  refsOf,
  type Stored,
  shardOf,
  shardsOf,
  storedBigOf,
  streamChunkInlineBytes,
  streamDrainBlobs,
  streamDrainBytes,
  streamDrainChunks,
} from './job-item.js';
import { type DynamoTableNames, dynamoSchema, type IndexSpec } from './schema.js';

/** The inline JSON bytes of stream chunk items (a chunk kept in S3 counts 0 here). */
const chunkBytesOf = (rows: Item[]): number =>
  rows.reduce(
    (sum, row) => sum + (typeof row.chunkJson === 'string' ? Buffer.byteLength(row.chunkJson) : 0),
    0,
  );

/** The big fields a read without the input decodes (JobReadOptions). */
const withoutInput = bigFields.filter((field) => field !== 'input');

/** An item as DynamoDB's API hands it back (a failed condition's ALL_OLD). */
type RawItem = Record<string, AttributeValue>;
/**
 * The TTL of stream chunks and their meta, from each append (the meta's also from each clear, which
 * comes after a retry's new submission): a day past the longest a job is kept (limits.jobLifetimeMaxMs
 * from its submission, which comes before any append). TTL deletes expired
 * items in no order it promises (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/howitworks-ttl.html),
 * and a drain stops at the first missing seq: a chunk gone while its job can still be read would
 * hide every chunk after it.
 */
const streamLifeSec = toSec(limits.jobLifetimeMaxMs) + daySec;
/**
 * How many of the chunks a clear skipped it deletes itself: one Query page, one BatchWriteItem (25
 * deletes at most, https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_BatchWriteItem.html)
 * and their S3 objects' deletes side by side, however long the stream. A clear runs inside the
 * request that requeued the job (the API Lambda's /retry, the sweeper's requeue of a lapsed lease,
 * the agent's of a worker that exited), and deleting all of a stream of 100,000 small chunks takes
 * 4,000 BatchWriteItems one after the other: longer than API Gateway waits for the API Lambda (29 s
 * by default,
 * https://docs.aws.amazon.com/apigateway/latest/developerguide/limits.html) and than the function's
 * own timeout (https://docs.aws.amazon.com/lambda/latest/dg/configuration-timeout.html), so the
 * client got a 504 for a retry that happened. The rest stays behind clearedTo, where no read goes,
 * until the sweeper deletes the job's whole stream with the expired job (deleteExpired, over several
 * runs for a long one: sweepDropChunks), or else
 * the chunks' TTL (streamLifeSec) deletes them, typically within a few days of their expiry
 * (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/howitworks-ttl.html; typically
 * within two days, says https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_UpdateTimeToLive.html).
 */
const clearDropChunks = 25;
/**
 * How many chunk items one deleteExpired (one sweeper run) deletes at most, of all its jobs' streams
 * together: 200 BatchWriteItems of 25
 * (https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_BatchWriteItem.html), sent one
 * after the other. The sweeper's function stops at its timeout (55 s, infra/platform-stack.ts;
 * https://docs.aws.amazon.com/lambda/latest/dg/configuration-timeout.html), and a stream of 100,000
 * chunks deleted in one go was 4,000 of them: a run that ran out of time there skipped the resends,
 * dead letters and webhooks that come after deleteExpired (functions/sweeper.ts), and lost the
 * rest of that stream to its TTL, its job item already deleted. A job whose stream is not all
 * deleted stays, expired (no read shows it), for the next run: such a stream goes over several
 * runs, 5,000 chunks a minute. How long 200 BatchWriteItems take was never measured.
 */
const sweepDropChunks = 5_000;
/**
 * The chunk items of one Query page of deleteExpired's (10 BatchWriteItems of 25): the run's deadline
 * is checked between pages, and a page of the whole budget (5,000 small chunks fit in one Query's
 * 1 MB, https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Query.Pagination.html) was
 * 200 BatchWriteItems that no deadline could stop.
 */
const sweepPageChunks = 250;
/**
 * TransactWriteItems' limits (updateMany): 100 actions, and 4 MB of items together, of which the
 * job Puts take at most 3.5 MB here: the rest is room for the count items and the expressions,
 * whichever way "MB" is counted.
 */
const transactionMaxActions = 100;
const transactionMaxBytes = 3.5 * 1024 * 1024;
const encoder = new TextEncoder();
const decoder = new TextDecoder();

export interface DynamoJobStoreOptions {
  doc: DynamoDBDocumentClient;
  tables: Pick<DynamoTableNames, 'jobs' | 'chunks'>;
  /** Where values too big for an item go. */
  blobs: BlobStore;
  /** Wall time, only for the TTL of stream items (the port passes `nowMs` everywhere else). */
  nowMs?: () => number;
  /** Where a store that cannot do its job says so; defaults to console.warn. */
  warn?: (message: string) => void;
  /** The chunk deletes of one deleteExpired (default `sweepDropChunks`); a test's long stream needs fewer. */
  sweepDropChunks?: number;
}

/** Jobs as items described in ./job-item.ts; stream chunks as items of the chunks table. */
export class DynamoJobStore implements JobStore, QueuedJobCount {
  private readonly doc: DynamoDBDocumentClient;
  private readonly jobsTable: string;
  private readonly chunksTable: string;
  private readonly blobs: BlobStore;
  private readonly nowMs: () => number;
  private readonly warn: (message: string) => void;
  private readonly sweepDropChunks: number;
  /**
   * How the big fields of each job this store handed out are stored (inline JSON or an S3 ref), so an
   * update writes without reading the item again. Weak: a job the caller drops is forgotten.
   */
  private readonly storedBig = new WeakMap<Job, Partial<Record<BigField, Stored>>>();
  /**
   * Beside `storedBig`, and set with it: the lane each such job's item counts it in when queued
   * (`countLane`; undefined for an item without one, counted in the main count item), which the
   * next move takes it out of (./counts.ts).
   */
  private readonly countLanes = new WeakMap<Job, CountLane | undefined>();
  /**
   * The nextSeq of each stream as this store last set or saw it: where its next reservation
   * starts (`reserveSeqs`), so an append is one UpdateItem and no read. A guess only: a stale one
   * fails the condition, which hands back the meta item as it is. The most recently used streams.
   */
  private readonly nextSeqs = new Map<string, number>();

  constructor(options: DynamoJobStoreOptions) {
    this.doc = options.doc;
    this.jobsTable = options.tables.jobs;
    this.chunksTable = options.tables.chunks;
    this.blobs = options.blobs;
    this.nowMs = options.nowMs ?? Date.now;
    this.warn = options.warn ?? ((message) => console.warn(message));
    this.sweepDropChunks = checkLimit(options.sweepDropChunks ?? sweepDropChunks);
  }

  /**
   * One conditional PutItem; in one transaction with its count items when the job counts
   * (./counts.ts). A failed condition whose item carries this write's `writeId` is this write,
   * landed on a first attempt whose answer was lost (`wroteIt`), not a job that already existed;
   * any other error may hide such a write too (`landedAnyway`).
   */
  async create(job: Job): Promise<void> {
    const stored: Job = { ...job, version: 1 };
    const big = await this.storeBig(stored, bigFields);
    const put = {
      TableName: this.jobsTable,
      Item: { ...itemOf(stored, big), writeId: randomUUID() },
      ConditionExpression: 'attribute_not_exists(jobId)',
      ReturnValuesOnConditionCheckFailure: 'ALL_OLD' as const,
    };
    try {
      await writeAtomically(
        this.doc,
        { Put: put },
        countUpdates(this.jobsTable, [[undefined, countedOfJob(stored)]]),
      );
    } catch (error) {
      const failed = failedCondition(error);
      if (failed && wroteIt(put, failed.item?.writeId?.S)) return;
      // Not the blobs the job as it is now points at (as in `unstage`).
      const kept = failed
        ? refsOf(storedBigOf(failed.item ? (unmarshall(failed.item) as Item) : {}))
        : await this.landedAnyway(error, [put]);
      if (kept === 'landed') return;
      await this.dropBlobs(refsOf(big).filter((ref) => !kept.includes(ref)));
      if (failed) throw conflict(`A job with id ${job.id} already exists`);
      throw error;
    }
  }

  async get(jobId: string, nowMs: number, options?: JobReadOptions): Promise<Job | undefined> {
    const job = await this.readJob(jobId, options?.input);
    // TTL deletes an expired item typically days after its expiry (../dynamo.ts), and reads still
    // return it until then: an expired job still in the table reads as absent.
    return job && job.expiresAt > nowMs ? job : undefined;
  }

  /**
   * One conditional PutItem and no read: `current` came from this store, which remembers how its big
   * fields are stored (inline or in S3), so the write needs nothing else. On a lost race DynamoDB hands
   * back the item as it is now (ReturnValuesOnConditionCheckFailure ALL_OLD,
   * https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_PutItem.html), so the caller
   * decides again without a GetItem either. When the write changes what the job counts as in health
   * (status, retries, expiry), the PutItem and the count updates go in one transaction (./counts.ts).
   * A failed condition whose item carries this write's `writeId` is this write, landed on a first
   * attempt whose answer was lost (`settled`); any other error may hide such a write too
   * (`landedAnyway`).
   */
  async update(current: Job, patch: JobPatch): Promise<JobUpdate> {
    const staged = await this.stage(current, patch);
    if ('ok' in staged) return staged;
    const counts = countUpdates(this.jobsTable, [[staged.before, staged.after]]);
    try {
      await writeAtomically(this.doc, { Put: staged.put }, counts);
    } catch (error) {
      const failed = failedCondition(error);
      if (failed) return this.settled(staged, failed.item);
      const kept = await this.landedAnyway(error, [staged.put]);
      if (kept !== 'landed') {
        await this.unstage(staged, kept);
        throw error;
      }
    }
    return this.landed(staged);
  }

  /**
   * Like `update` for each change, with the writes of one shard's jobs put together in
   * TransactWriteItems of up to 100 actions and 4 MB (the job Puts and their count items, whose
   * deltas sum into one ADD each), the shards' transactions side by side: purging 500 queued jobs
   * is about ten requests where `update` makes 500. A transaction is all or nothing, so when some
   * of its jobs moved on meanwhile (ConditionalCheckFailed, with the item as it is now), those
   * answer `ok: false` and the rest is sent again without them.
   * https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html
   */
  async updateMany(changes: readonly JobChange[]): Promise<JobUpdate[]> {
    const answers: JobUpdate[] = new Array(changes.length);
    const byShard = new Map<number, { index: number; staged: Staged }[]>();
    await Promise.all(
      changes.map(async ({ current, patch }, index) => {
        const staged = await this.stage(current, patch);
        if ('ok' in staged) answers[index] = staged;
        else {
          const shard = shardOf(current.id);
          byShard.set(shard, [...(byShard.get(shard) ?? []), { index, staged }]);
        }
      }),
    );
    await Promise.all(
      [...byShard.values()].map(async (pending) => {
        // One shard's transactions one after the other: they share its count items, and two
        // transactions on one item at once would conflict.
        while (pending.length > 0) {
          const batch = this.transactionOf(pending);
          try {
            const moves = batch.map(({ staged }): CountMove => [staged.before, staged.after]);
            await transact(this.doc, [
              ...batch.map(({ staged }) => ({ Put: staged.put })),
              ...countUpdates(this.jobsTable, moves),
            ]);
          } catch (error) {
            const failedAt = batch.flatMap((_, at) => {
              const failed = failedCondition(error, at);
              return failed ? [{ at, item: failed.item }] : [];
            });
            if (failedAt.length > 0) {
              for (const { at, item } of failedAt.reverse()) {
                const [{ index, staged }] = pending.splice(at, 1) as [{ index: number; staged: Staged }];
                answers[index] = await this.settled(staged, item);
              }
              continue;
            }
            const kept = await this.landedAnyway(
              error,
              batch.map(({ staged }) => staged.put),
            );
            if (kept !== 'landed') {
              await Promise.all(pending.map(({ staged }) => this.unstage(staged, kept)));
              throw error;
            }
          }
          pending.splice(0, batch.length);
          for (const { index, staged } of batch) answers[index] = await this.landed(staged);
        }
      }),
    );
    return answers;
  }

  /**
   * One conditional UpdateItem and no read: a ping writes only leaseUntil, overdueAt and the version,
   * guarded by who holds the job (status, endpointId and workerId are item attributes for this).
   * It saves the GetItem and the request's payload, not write units: DynamoDB bills an update by the
   * larger of the item's size before and after it
   * (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/read-write-operations.html#write-operation-consumption).
   * Two cases fall back to the full compare-and-set, with the item the failed condition handed back
   * (ReturnValuesOnConditionCheckFailure ALL_OLD): the new lease passes the run deadline (overdueAt
   * must then stay at the deadline, which an update expression cannot take the minimum of), and an
   * item written before these attributes existed.
   */
  async renewLease(lease: LeaseRenewal): Promise<boolean> {
    const { jobId, endpointId, workerId, leaseUntil, nowMs } = lease;
    try {
      // singleWrite: the job item may be in a transaction of another write at this moment.
      await singleWrite(() =>
        this.doc.send(
          new UpdateCommand({
            TableName: this.jobsTable,
            Key: { jobId },
            UpdateExpression: 'SET leaseUntil = :lease, overdueAt = :lease, version = version + :one',
            ConditionExpression:
              '#status = :running AND endpointId = :endpoint AND workerId = :worker AND expiresAt > :now' +
              ' AND (attribute_not_exists(runDeadline) OR runDeadline >= :lease)',
            ExpressionAttributeNames: { '#status': 'status' },
            ExpressionAttributeValues: {
              ':lease': leaseUntil,
              ':one': 1,
              ':running': 'IN_PROGRESS',
              ':endpoint': endpointId,
              ':worker': workerId,
              ':now': nowMs,
            },
            ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
          }),
        ),
      );
      return true;
    } catch (error) {
      if (!isConditionFailure(error)) throw error;
      const old = (error as { Item?: Record<string, AttributeValue> }).Item;
      if (!old) return false;
      let job = await this.jobOfOrFresh(unmarshall(old) as Item);
      while (
        job &&
        job.expiresAt > nowMs &&
        job.endpointId === endpointId &&
        job.status === 'IN_PROGRESS' &&
        job.workerId === workerId
      ) {
        const renewed = await this.update(job, { leaseUntil });
        if (renewed.ok) return true;
        job = renewed.current;
      }
      return false;
    }
  }

  async listByStatus(
    endpointId: string,
    status: JobStatus,
    nowMs: number,
    limit: number,
    options?: ListByStatusOptions,
  ): Promise<Job[]> {
    checkLimit(limit);
    // createdFrom is the index's sort key: the listing starts there, past what comes before it.
    const from = options?.createdFrom;
    const items = await queryAll(
      this.doc,
      {
        TableName: this.jobsTable,
        IndexName: dynamoSchema.jobs.indexes.byEndpointStatus.indexName,
        KeyConditionExpression: `endpointStatus = :key${from === undefined ? '' : ' AND createdAt >= :from'}`,
        FilterExpression: 'expiresAt > :now',
        ExpressionAttributeValues: {
          ':key': `${endpointId}#${status}`,
          ':now': nowMs,
          ...(from === undefined ? {} : { ':from': from }),
        },
      },
      (found) => found.length >= limit,
    );
    return this.jobsFound(
      dynamoSchema.jobs.indexes.byEndpointStatus,
      items.slice(0, limit),
      nowMs,
      options?.input,
    );
  }

  /**
   * The management API's job list: one Query per status on `byEndpointStatus` (createdAt between
   * the window's start and the cursor, newest first, stopping at a page), merged newest first. Never
   * a Scan: each Query reads one endpoint's jobs of one status.
   */
  async listRecent(endpointId: string, query: RecentJobsQuery): Promise<{ jobs: Job[]; next?: string }> {
    const limit = checkLimit(query.limit);
    const statuses = query.statuses.length > 0 ? query.statuses : jobStatuses;
    const cursor = decodeJobCursor(query.cursor) ?? [query.toMs, '\uffff'];
    const perStatus = await Promise.all(
      statuses.map(async (status) => {
        const items = await queryAll(
          this.doc,
          {
            TableName: this.jobsTable,
            IndexName: dynamoSchema.jobs.indexes.byEndpointStatus.indexName,
            KeyConditionExpression: 'endpointStatus = :key AND createdAt BETWEEN :from AND :before',
            FilterExpression: 'expiresAt > :now',
            ExpressionAttributeValues: {
              ':key': `${endpointId}#${status}`,
              ':from': query.fromMs,
              ':before': cursor[0],
              ':now': query.nowMs,
            },
            ScanIndexForward: false,
            Limit: limit + 1,
          },
          (found) => found.length > limit,
        );
        return items.filter((item) =>
          isBeforeCursor({ createdAt: item.createdAt as number, id: item.jobId as string }, cursor),
        );
      }),
    );
    const merged = perStatus
      .flat()
      .sort((a, b) =>
        a.createdAt === b.createdAt
          ? String(a.jobId) < String(b.jobId)
            ? 1
            : -1
          : (b.createdAt as number) - (a.createdAt as number),
      );
    const jobs = await this.jobsFound(
      dynamoSchema.jobs.indexes.byEndpointStatus,
      merged.slice(0, limit),
      query.nowMs,
    );
    const last = jobs.at(-1);
    return merged.length > limit && last ? { jobs, next: encodeJobCursor(last) } : { jobs };
  }

  /**
   * Running jobs whose lease lapsed or whose execution timeout passed: one Query per shard of the
   * sparse `byStatusOverdue` index (overdueAt <= now), merged oldest deadline first.
   */
  async listOverdue(nowMs: number, limit: number, options?: Pick<JobReadOptions, 'input'>): Promise<Job[]> {
    checkLimit(limit);
    const items = await this.queryShards(
      ['IN_PROGRESS'],
      dynamoSchema.jobs.indexes.byStatusOverdue.indexName,
      'statusShard = :shard AND overdueAt <= :now',
      { ':now': nowMs },
      limit,
    );
    items.sort((a, b) => (a.overdueAt as number) - (b.overdueAt as number));
    return this.jobsFound(
      dynamoSchema.jobs.indexes.byStatusOverdue,
      items.slice(0, limit),
      undefined,
      options?.input,
    );
  }

  /** Unfinished jobs whose expiresAt passed (policy.ttl ran out): `get` hides them, the engine stops them. */
  async listExpiredUnfinished(
    nowMs: number,
    limit: number,
    options?: Pick<JobReadOptions, 'input'>,
  ): Promise<Job[]> {
    checkLimit(limit);
    const items = await this.queryShards(
      ['IN_QUEUE', 'IN_PROGRESS'],
      dynamoSchema.jobs.indexes.byStatusExpiry.indexName,
      'statusShard = :shard AND expiresAt <= :now',
      { ':now': nowMs },
      limit,
    );
    items.sort((a, b) => (a.expiresAt as number) - (b.expiresAt as number));
    return this.jobsFound(
      dynamoSchema.jobs.indexes.byStatusExpiry,
      items.slice(0, limit),
      undefined,
      options?.input,
    );
  }

  /**
   * Stream chunks: seq 0 of the job's partition in the chunks table is the meta item
   * {nextSeq, cursor, clearedTo}. appendStream reserves seqs by a conditional update of nextSeq
   * (`reserveSeqs`), then writes the chunks; drainStream hands out the contiguous run after `cursor`
   * and moves the cursor by a conditional update (`moveCursor`), so two drains racing never hand out
   * the same chunk:
   *
   *   chunks  1 2 3 4 _ 6        (5 reserved, not written yet)
   *           ▲     ▲
   *        cursor  drain hands out 2..4 and sets cursor 1 → 4 only if it is still 1
   *
   * An append that fails after its reservation (an S3 put of a big chunk, a BatchWriteItem that gave
   * up) still throws, but first marks the seqs it reserved and did not write as skipped
   * (`skipSeqs`), which a drain steps over: one failed append must not hold back every later chunk.
   * A handed-out chunk stays until its job goes (deleteExpired) or its TTL: readStream reads the
   * same runs from a seq of its caller's, and moves nothing. clearStream sets clearedTo, which no
   * read goes behind, and deletes only the first chunks behind it (clearDropChunks).
   */
  async appendStream(jobId: string, outputs: unknown[]): Promise<void> {
    if (outputs.length === 0) return;
    const expiresAtSec = toSec(this.nowMs()) + streamLifeSec;
    const firstSeq = await this.reserveSeqs(jobId, outputs.length, expiresAtSec);
    try {
      await this.writeChunks(jobId, firstSeq, outputs, expiresAtSec);
    } catch (error) {
      await this.skipSeqs(jobId, firstSeq, outputs.length, expiresAtSec);
      throw error;
    }
  }

  async drainStream(jobId: string): Promise<unknown[]> {
    for (let attempt = 0; attempt < 20; attempt++) {
      const meta = await this.streamMeta(jobId);
      if (!meta) return [];
      const read = await this.runAfter(jobId, meta.cursor, meta.nextSeq);
      if (!read) continue; // cleared meanwhile: the cursor moved past what was read
      const { run, values } = read;
      if (run === 0) return [];
      // Not moved: another drain (or a clear) moved the cursor; look again. The chunks stay
      // (readStream shows them) until the stream is cleared, then go with their job
      // (deleteExpired), else with their TTL.
      if (!(await this.moveCursor(jobId, meta.cursor, meta.cursor + run))) continue;
      // Only skipped seqs: what follows them may be there already.
      if (values.length > 0) return values;
    }
    throw new FerryError('failed', `Could not drain the stream of ${jobId}: too much contention`);
  }

  async readStream(jobId: string, afterSeq: number): Promise<StreamRead> {
    // Ends: runAfter answers undefined only when clearedTo moved past `from`, or the stream is gone.
    for (;;) {
      const meta = await this.streamMeta(jobId);
      // Chunks before a clear are gone: the read goes on from the first seq after it.
      const from = Math.max(afterSeq, meta?.clearedTo ?? 0);
      if (!meta) return { chunks: [], next: from };
      const read = await this.runAfter(jobId, from, meta.nextSeq);
      if (read) return { chunks: read.values, next: from + read.run };
    }
  }

  /** The stream's meta item (seq 0), read consistently; undefined before the first append. */
  private async streamMeta(
    jobId: string,
  ): Promise<{ cursor: number; nextSeq: number; clearedTo: number } | undefined> {
    const meta = (
      await this.doc.send(
        new GetCommand({ TableName: this.chunksTable, Key: { jobId, seq: 0 }, ConsistentRead: true }),
      )
    ).Item as Item | undefined;
    if (!meta) return undefined;
    return {
      cursor: (meta.cursor as number | undefined) ?? 0,
      nextSeq: (meta.nextSeq as number | undefined) ?? 0,
      clearedTo: (meta.clearedTo as number | undefined) ?? 0,
    };
  }

  /**
   * The contiguous run of chunk items after seq `from` (up to `nextSeq`), as many as one answer can
   * carry, and the values of those that are not skipped. Only the contiguous run: a reserved seq not
   * written yet holds back the ones after it. And only what one answer can carry
   * (streamDrainBytes): a cursor moves past what is returned, never past chunks an answer too big
   * to send would have lost. Undefined when a clear (or the sweeper) deleted a chunk's S3 object
   * after the Query found its item (`clearedBehind`): the caller reads the meta again.
   */
  private async runAfter(
    jobId: string,
    from: number,
    nextSeq: number,
  ): Promise<{ run: number; values: unknown[] } | undefined> {
    if (from >= nextSeq) return { run: 0, values: [] };
    const rows = await queryAll(
      this.doc,
      {
        TableName: this.chunksTable,
        KeyConditionExpression: 'jobId = :job AND seq BETWEEN :from AND :to',
        ExpressionAttributeValues: {
          ':job': jobId,
          ':from': from + 1,
          ':to': Math.min(nextSeq, from + streamDrainChunks),
        },
        ConsistentRead: true,
      },
      // Pages of up to 1 MB: no more of them than one answer can carry.
      (items) => chunkBytesOf(items) > streamDrainBytes,
    );
    const run: Item[] = [];
    let bytes = 0;
    let blobs = 0;
    for (const row of rows) {
      if (row.seq !== from + 1 + run.length) break;
      const rowBytes = chunkBytesOf([row]);
      const rowBlobs = typeof row.chunkRef === 'string' ? 1 : 0;
      const full =
        run.length >= streamDrainChunks ||
        bytes + rowBytes > streamDrainBytes ||
        blobs + rowBlobs > streamDrainBlobs;
      if (run.length > 0 && full) break;
      run.push(row);
      bytes += rowBytes;
      blobs += rowBlobs;
    }
    // Read the values before a drain claims them, so a failed blob read loses nothing. A skipped seq
    // (a failed append's, `skipSeqs`) has none.
    const missing: { seq: number; error: MissingBlobError }[] = [];
    const values = await Promise.all(
      run
        .filter((row) => row.skipped !== true)
        .map((row) =>
          this.chunkValue(row).catch((error: unknown) => {
            if (!(error instanceof MissingBlobError)) throw error;
            missing.push({ seq: row.seq as number, error });
          }),
        ),
    );
    if (missing.length === 0) return { run: run.length, values };
    if (await this.clearedBehind(jobId, missing)) return undefined;
    throw missing[0]?.error;
  }

  /**
   * Whether every chunk of `missing` (their S3 objects gone) is behind the stream's clearedTo as it
   * is now, or the stream is gone: a clear sets clearedTo, then deletes the first chunks behind it
   * and their objects (`dropChunks`); deleteExpired clears the stream as well before it deletes any
   * chunk, and deletes the meta item after the last one (`dropStream`). A reader between its Query
   * and its S3 reads meets those objects gone; what it was reading is cleared, not lost. An object missing ahead of clearedTo is lost (removed outside Ferry).
   */
  private async clearedBehind(jobId: string, missing: { seq: number }[]): Promise<boolean> {
    const meta = await this.streamMeta(jobId);
    return !meta || missing.every(({ seq }) => seq <= meta.clearedTo);
  }

  /** Seqs were reserved after the last clear: one consistent GetItem of the meta item. */
  async hasStream(jobId: string): Promise<boolean> {
    const meta = await this.streamMeta(jobId);
    return meta !== undefined && meta.nextSeq > meta.clearedTo;
  }

  async streamPending(jobId: string): Promise<boolean> {
    const meta = await this.streamMeta(jobId);
    return meta !== undefined && meta.cursor < meta.nextSeq;
  }

  async clearStream(jobId: string): Promise<void> {
    const clearedTo = await this.clearTo(jobId);
    if (clearedTo === undefined) return; // nothing was ever appended
    // Only the seqs this clear skipped: a chunk appended since (the next attempt's) is no leftover.
    // And only the first of them (clearDropChunks): the rest go with the job or their TTL.
    await this.dropChunks(jobId, clearedTo, clearDropChunks).catch((error: unknown) =>
      this.chunksLeft(jobId, error),
    );
  }

  /**
   * Moves the stream's clearedTo (and its cursor) to its nextSeq, so that no read or drain goes
   * behind it; answers it, or undefined when the stream has no meta item (nothing was appended, or
   * the sweeper deleted it).
   */
  private async clearTo(jobId: string): Promise<number | undefined> {
    try {
      // Skip everything appended so far; seqs keep growing, so nothing is ever reused. The meta item
      // lives on as long as the job a retry starts may: once TTL took it, the next append would
      // number chunks from 1 again, behind the clearedTo a reader goes on from.
      const { Attributes } = await this.doc.send(
        new UpdateCommand({
          TableName: this.chunksTable,
          Key: { jobId, seq: 0 },
          UpdateExpression: 'SET #cursor = nextSeq, clearedTo = nextSeq, expiresAtSec = :exp',
          ConditionExpression: 'attribute_exists(nextSeq)',
          ExpressionAttributeNames: { '#cursor': 'cursor' },
          ExpressionAttributeValues: { ':exp': toSec(this.nowMs()) + streamLifeSec },
          ReturnValues: 'UPDATED_NEW',
        }),
      );
      return Attributes?.clearedTo as number;
    } catch (error) {
      if (isConditionFailure(error)) return undefined;
      throw error;
    }
  }

  /** Two Queries on the count items and the current bucket, however many jobs the endpoint keeps (./counts.ts). */
  counts(endpointId: string, nowMs: number): Promise<JobCounts> {
    return readCounts(this.doc, this.jobsTable, endpointId, nowMs);
  }

  /**
   * At least the endpoint's IN_QUEUE jobs, all and the urgent ones, from its count items only (the
   * scaler's read, ./counts.ts).
   */
  queuedAtMost(endpointId: string, nowMs: number): Promise<QueuedCounts> {
    return readQueuedAtMost(this.doc, this.jobsTable, endpointId, nowMs);
  }

  /**
   * Deletes expired jobs in a final status with their chunks and blobs (DynamoDB's TTL would drop
   * the items, typically days later (../dynamo.ts), but never the blobs). Unfinished ones stay for
   * the engine to stop first.
   * At most `sweepDropChunks` chunk items in one call, of all the jobs' streams together: a job
   * whose stream is longer, or comes once they are spent, stays for the next call (its stream
   * cleared), which goes on where this one stopped; jobs without a stream left are still deleted.
   */
  async deleteExpired(nowMs: number, limit: number, deadline?: Deadline): Promise<number> {
    if (deadline?.passed()) return 0;
    const finals = jobStatuses.filter(isFinal);
    // Reads at most `limit` items per shard (the queries carry Limit), deletes the oldest `limit`.
    const found = await this.queryShards(
      finals,
      dynamoSchema.jobs.indexes.byStatusExpiry.indexName,
      'statusShard = :shard AND expiresAt <= :now',
      { ':now': nowMs },
      checkLimit(limit),
    );
    const items = found.sort((a, b) => (a.expiresAt as number) - (b.expiresAt as number)).slice(0, limit);
    let budget = this.sweepDropChunks;
    let deleted = 0;
    for (const item of items) {
      // Past the run's deadline no job starts: the ones left are still expired, for the next run.
      if (deadline?.passed()) break;
      const jobId = item.jobId as string;
      // Most jobs never streamed: one consistent read of the meta item tells, and such a job is
      // deleted as the index showed it, without the claim and the clear (two writes).
      const streamed = await this.streamMeta(jobId).then(
        (meta) => meta !== undefined,
        (error: unknown) => this.chunksLeft(jobId, error),
      );
      if (streamed === undefined || (streamed && budget <= 0)) continue; // the next run goes on
      let stillAsFound: Condition = expiredAsFound(item);
      if (streamed) {
        const version = await this.claimExpired(item);
        if (version === undefined) continue; // retried or already gone meanwhile
        // The stream before the job item: the item is what the next run finds (byStatusExpiry), so a
        // stream left half deleted (the budget spent, a request failed) keeps its job until it is gone.
        const stream = await this.dropStream(jobId, budget, deadline);
        budget -= stream.dropped;
        if (!stream.gone) continue;
        // As claimExpired left it: no write came after the claim.
        stillAsFound = {
          ConditionExpression: 'version = :version',
          ExpressionAttributeValues: { ':version': version },
        };
      }
      const del = { TableName: this.jobsTable, Key: { jobId }, ...stillAsFound };
      // A job of the current count bucket is still taken back by health: it leaves the counts with
      // its delete. Older buckets no longer count (./counts.ts).
      const inCurrentBucket = bucketStartOf(item.expiresAt as number) >= bucketStartOf(nowMs);
      const counts = inCurrentBucket ? countUpdates(this.jobsTable, [[countedOf(item), undefined]]) : [];
      try {
        await writeAtomically(this.doc, { Delete: del }, counts);
      } catch (error) {
        if (failedCondition(error)) continue; // already gone meanwhile
        throw error;
      }
      deleted++;
      await this.dropBlobs(refsOf(storedBigOf(item)));
    }
    return deleted;
  }

  /** The clients are injected and may be shared: their owner destroys them. */
  async close(): Promise<void> {}

  // ── internals ──

  /**
   * Everything a compare-and-set writes, ready to send: the job as it will be, its big fields stored
   * (new blobs uploaded, a retry's kept blobs renewed), the conditional Put, and what the job counted
   * as before (for the count items). A job this store did not hand out is read first; when it is no
   * longer at `current.version`, the lost race is answered right away.
   */
  private async stage(current: Job, patch: JobPatch): Promise<Staged | JobUpdate> {
    const expectedVersion = current.version;
    // What the stored job counts as: the version condition makes it `current`'s, in the lane its
    // item was written with.
    let before: Counted = { ...countedOfJob(current), lane: this.countLanes.get(current) };
    let big = this.storedBig.get(current);
    if (!big) {
      // A job this store did not hand out: read how its big fields are stored.
      const item = await this.readItem(current.id);
      if (!item || item.version !== expectedVersion) {
        return { ok: false, current: item ? await this.jobOf(item) : undefined };
      }
      big = storedBigOf(item);
      before = countedOf(item);
    }
    const next: Record<string, unknown> = { ...current };
    const patchedBig: BigField[] = [];
    for (const [key, value] of Object.entries(patch)) {
      // The identity and the version are not the caller's to write.
      if (key === 'id' || key === 'endpointId' || key === 'version') continue;
      if ((bigFields as string[]).includes(key)) patchedBig.push(key as BigField);
      if (value === undefined) delete next[key];
      else next[key] = value;
    }
    const written = { ...next, version: expectedVersion + 1 } as unknown as Job;
    const newBig = { ...big, ...(await this.storeBig(written, patchedBig)) };
    for (const field of patchedBig)
      if ((written as unknown as Item)[field] === undefined) delete newBig[field];
    // A retry submits the job again (a new createdAt): its blobs kept from before are written anew,
    // so none is older than its job and the bucket's age rule (infra/platform-stack.ts) never takes
    // one a job still points at.
    const renewed =
      written.createdAt !== current.createdAt ? await this.renewBlobs(written.id, newBig, patchedBig) : [];
    patchedBig.push(...renewed);
    const put = {
      TableName: this.jobsTable,
      // A token of this write alone: a failed condition finds it on the item when this write landed.
      Item: { ...itemOf(written, newBig), writeId: randomUUID() },
      ConditionExpression: 'version = :expected',
      ExpressionAttributeValues: { ':expected': expectedVersion },
      ReturnValuesOnConditionCheckFailure: 'ALL_OLD' as const,
    };
    return { before, after: countedOfJob(written), written, oldBig: big, newBig, patchedBig, put };
  }

  /** The write landed: the replaced blobs go (a reader that got the old item re-reads). */
  private async landed(staged: Staged): Promise<JobUpdate> {
    const { after, written, oldBig, newBig, patchedBig } = staged;
    await this.dropBlobs(patchedBig.flatMap((field) => refsOf({ [field]: oldBig[field] })));
    this.storedBig.set(written, newBig);
    this.countLanes.set(written, after.lane);
    return { ok: true, job: written };
  }

  /**
   * The conditional Put failed its condition; `old` is the item as it is now. The SDK re-sends a
   * request whose answer it lost (a reset connection, a timeout, a 5xx) even when the first attempt
   * was applied, and that retry then fails the condition the first attempt made false: the item then
   * carries this write's `writeId`, and the write landed. Otherwise the write lost its race.
   * https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/WorkingWithItems.html#WorkingWithItems.AtomicCounters
   */
  private settled(staged: Staged, old: RawItem | undefined): Promise<JobUpdate> {
    return wroteIt(staged.put, old?.writeId?.S) ? this.landed(staged) : this.lost(staged, old);
  }

  /**
   * Whether the write of `puts` (one Put, or the job Puts of one transaction), which failed with
   * `error` and not with a failed condition, landed all the same: an error that is no refusal
   * (`writeOutcome`) may come after an attempt DynamoDB applied, and dropping the blobs of a write
   * that landed leaves a job pointing at nothing (its input or output lost for good). So the items
   * are read again by key, strongly consistent: one that carries its put's `writeId` is this write
   * ('landed'; a transaction lands whole). Otherwise the blob refs the items point at now, which the
   * caller's cleanup keeps (as in `unstage`).
   *
   * Throws `error` and drops nothing when it cannot tell: the read failed, or the transaction is
   * still in progress and may commit after the read. Those blobs are orphans at worst, which the
   * bucket's `expire-payloads` rule removes (infra/platform-stack.ts).
   */
  private async landedAnyway(error: unknown, puts: readonly { Item: Item }[]): Promise<'landed' | string[]> {
    const outcome = writeOutcome(error);
    if (outcome === 'refused') return [];
    let items: (Item | undefined)[];
    try {
      items = await Promise.all(puts.map((put) => this.readItem(put.Item.jobId as string)));
    } catch (readError) {
      this.warn(
        `ferry: could not tell whether a write of job ${String(puts[0]?.Item.jobId)} landed ` +
          `(${String(readError)}); its new blobs are left to the bucket's lifecycle rule`,
      );
      throw error;
    }
    if (items.some((item, at) => wroteIt(puts[at] as { Item: Item }, item?.writeId))) return 'landed';
    if (outcome === 'pending') throw error;
    return items.flatMap((item) => (item ? refsOf(storedBigOf(item)) : []));
  }

  /** The write lost its race: the job as `old` (the failed condition's item) says it is now. */
  private async lost(staged: Staged, old: RawItem | undefined): Promise<JobUpdate> {
    const item = old ? (unmarshall(old) as Item) : undefined;
    await this.unstage(staged, item ? refsOf(storedBigOf(item)) : []);
    return { ok: false, current: item ? await this.jobOfOrFresh(item) : undefined };
  }

  /**
   * The write did not land: the blobs it uploaded go, except any the item as it is now points at
   * (`keep`): had this write landed after all and another gone on from it, those are that one's.
   */
  private async unstage({ newBig, patchedBig }: Staged, keep: readonly string[] = []): Promise<void> {
    const refs = patchedBig.flatMap((field) => refsOf({ [field]: newBig[field] }));
    await this.dropBlobs(refs.filter((ref) => !keep.includes(ref)));
  }

  /**
   * The leading writes of `pending` that fit one TransactWriteItems: at most 100 actions, job Puts
   * and count items together, and `transactionMaxBytes` of Puts (each item's JSON, a little over its
   * DynamoDB size). One write always fits (an item is under 400 KB).
   */
  private transactionOf<T extends { staged: Staged }>(pending: readonly T[]): T[] {
    let bytes = 0;
    let end = 0;
    while (end < pending.length) {
      const next = pending[end] as T;
      const size = Buffer.byteLength(JSON.stringify(next.staged.put.Item));
      const moves = pending.slice(0, end + 1).map(({ staged }): CountMove => [staged.before, staged.after]);
      const actions = end + 1 + countUpdates(this.jobsTable, moves).length;
      if (end > 0 && (actions > transactionMaxActions || bytes + size > transactionMaxBytes)) break;
      bytes += size;
      end++;
    }
    return pending.slice(0, end);
  }

  private async queryShards(
    statuses: readonly JobStatus[],
    indexName: string,
    keyCondition: string,
    values: Record<string, unknown>,
    limit: number,
  ): Promise<Item[]> {
    const perShard = await Promise.all(
      statuses.flatMap(shardsOf).map((shard) =>
        queryAll(
          this.doc,
          {
            TableName: this.jobsTable,
            IndexName: indexName,
            KeyConditionExpression: keyCondition,
            ExpressionAttributeValues: { ':shard': shard, ...values },
            // No filter here, so a page of `limit` items is all this shard can contribute.
            ...(Number.isFinite(limit) ? { Limit: limit } : {}),
          },
          (found) => found.length >= limit,
        ),
      ),
    );
    return perShard.flat();
  }

  private async readItem(jobId: string): Promise<Item | undefined> {
    const result = await this.doc.send(
      new GetCommand({ TableName: this.jobsTable, Key: { jobId }, ConsistentRead: true }),
    );
    return result.Item as Item | undefined;
  }

  /**
   * The job with the big fields `input` (JobReadOptions.input) wants decoded: the item names its
   * status, so a finished job's input (an S3 object when big) is not fetched for 'unfinished'.
   */
  private async readJob(jobId: string, input: JobReadOptions['input'] = true): Promise<Job | undefined> {
    // A writer deletes the blobs it replaced right after its write: a reader holding the older item
    // may find a blob gone, and reads again.
    for (let attempt = 0; ; attempt++) {
      const item = await this.readItem(jobId);
      // No body: not a job (a count item shares the table, ./counts.ts).
      if (typeof item?.body !== 'string') return undefined;
      try {
        return await this.jobOf(item, readsInput(input, item.status as string) ? bigFields : withoutInput);
      } catch (error) {
        if (!(error instanceof MissingBlobError) || attempt >= 2) throw error;
      }
    }
  }

  /**
   * The jobs an index query found, read from the table by key: the indexes project only keys and what
   * their queries filter on (./schema.ts), so one BatchGetItem per 100 jobs reads just the jobs handed
   * out, strongly consistent. A job that moved on since the index saw it (other index keys now, gone,
   * or expired at `unexpiredAtMs`) is left out, as a query a moment later would leave it out. `input`
   * as in `get` (false: an input in S3 is not fetched).
   */
  private async jobsFound(
    index: IndexSpec,
    found: Item[],
    unexpiredAtMs?: number,
    input: JobReadOptions['input'] = true,
  ): Promise<Job[]> {
    if (found.length === 0) return [];
    // One entry per job (a stale index may list a job twice; BatchGetItem refuses duplicate keys).
    const entries = new Map(found.map((entry) => [entry.jobId as string, entry]));
    const items = await batchGet(
      this.doc,
      this.jobsTable,
      [...entries.keys()].map((jobId) => ({ jobId })),
    );
    const byId = new Map(items.map((item) => [item.jobId as string, item]));
    const { partitionKey, sortKey } = index;
    const current = [...entries].flatMap(([jobId, entry]) => {
      const item = byId.get(jobId);
      const same =
        item !== undefined &&
        item[partitionKey.name] === entry[partitionKey.name] &&
        item[sortKey.name] === entry[sortKey.name] &&
        (unexpiredAtMs === undefined || (item.expiresAt as number) > unexpiredAtMs);
      return same ? [item] : [];
    });
    return this.jobsOf(current, input);
  }

  /**
   * A job whose blob is gone for good (removed outside Ferry) is left out with a warning: a list
   * feeds the sweeper, and one such job must not stop it from ending and deleting all the others.
   */
  private async jobsOf(items: Item[], input: JobReadOptions['input'] = true): Promise<Job[]> {
    const jobs = await Promise.all(
      items.map(async (item): Promise<Job | undefined> => {
        try {
          return await this.jobOf(item, readsInput(input, item.status as string) ? bigFields : withoutInput);
        } catch (error) {
          if (!(error instanceof MissingBlobError)) throw error;
        }
        // Changed since the index was read: take the item as it is now (gone: left out).
        try {
          return await this.readJob(item.jobId as string, input);
        } catch (error) {
          if (!(error instanceof MissingBlobError)) throw error;
          this.warn(`ferry: job ${String(item.jobId)} left out of a list: ${error.message}`);
          return undefined;
        }
      }),
    );
    return jobs.filter((job): job is Job => job !== undefined);
  }

  /**
   * The job of an item, its big fields read (inline, or from S3) for `fields` only; the others are
   * left out, and an update of the job keeps them as stored (storedBig remembers how).
   */
  private async jobOf(item: Item, fields: readonly BigField[] = bigFields): Promise<Job> {
    const small = JSON.parse(item.body as string) as Job;
    // renewLease writes these two attributes and leaves the body as it was.
    small.version = item.version as number;
    if (typeof item.leaseUntil === 'number') small.leaseUntil = item.leaseUntil;
    const big = storedBigOf(item);
    const job = await this.decode(small, big, fields);
    this.storedBig.set(job, big);
    this.countLanes.set(job, countLaneOfItem(item));
    return job;
  }

  /** The job of an item read a moment ago; when a writer already replaced its blobs, the job as it is now. */
  private async jobOfOrFresh(item: Item): Promise<Job | undefined> {
    if (typeof item.body !== 'string') return undefined; // a count item, not a job
    try {
      return await this.jobOf(item);
    } catch (error) {
      if (!(error instanceof MissingBlobError)) throw error;
      return this.readJob(item.jobId as string);
    }
  }

  /** Fills in the big fields of `job` from `big` (`fields` are the ones to fill). */
  private async decode(
    job: Job,
    big: Partial<Record<BigField, Stored>>,
    fields: readonly BigField[],
  ): Promise<Job> {
    const out = { ...job } as unknown as Item;
    await Promise.all(
      fields.map(async (field) => {
        const stored = big[field];
        if (!stored) {
          delete out[field];
          return;
        }
        out[field] = JSON.parse('json' in stored ? stored.json : await this.readBlob(stored.ref));
      }),
    );
    return out as unknown as Job;
  }

  private async readBlob(ref: string): Promise<string> {
    const bytes = await this.blobs.get(ref);
    if (!bytes) throw new MissingBlobError(ref);
    return decoder.decode(bytes);
  }

  private async chunkValue(row: Item): Promise<unknown> {
    if (typeof row.chunkRef === 'string') return JSON.parse(await this.readBlob(row.chunkRef));
    return JSON.parse(row.chunkJson as string);
  }

  /** JSON of each listed big field of `job`, inline when within budget, else uploaded. */
  private async storeBig(job: Job, fields: BigField[]): Promise<Partial<Record<BigField, Stored>>> {
    const out: Partial<Record<BigField, Stored>> = {};
    await Promise.all(
      fields.map(async (field) => {
        const value = (job as unknown as Item)[field];
        if (value === undefined) return;
        const json = JSON.stringify(value);
        if (Buffer.byteLength(json) <= inlineBudgetBytes[field]) {
          out[field] = { json };
          return;
        }
        const ref = payloadKey(job.id, field);
        await this.blobs.put(ref, encoder.encode(json));
        out[field] = { ref };
      }),
    );
    return out;
  }

  /**
   * Reserves `count` seqs after the stream's nextSeq and returns the first. Not an `ADD nextSeq`:
   * the SDK re-sends a request whose answer it lost (a reset connection, a timeout, a 5xx) even when
   * the first attempt was applied, and an ADD applied twice reserves a range no one writes, which
   * holds back every later chunk of the job for good
   * (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/WorkingWithItems.html#WorkingWithItems.AtomicCounters).
   * So a compare-and-set from the nextSeq this store knows (`nextSeqs`; none: no meta item yet),
   * marked with a token of this attempt. A failed condition hands back the meta item as it is
   * (ALL_OLD): when it carries the token and the nextSeq this attempt set, the attempt landed;
   * otherwise the next attempt starts from it. No GetItem: the agent's role may not read the chunks
   * table (infra/isolation.ts), and the answer of a failed condition is the same read.
   * (An SDK retry that finds another append landed after its first attempt cannot tell, and reserves
   * again: appends to one job come from the one worker holding it, one after the other.)
   */
  private async reserveSeqs(jobId: string, count: number, expiresAtSec: number): Promise<number> {
    let from = this.nextSeqs.get(jobId);
    for (let attempt = 0; attempt < 20; attempt++) {
      const token = randomUUID();
      const to = (from ?? 0) + count;
      try {
        await this.doc.send(
          new UpdateCommand({
            TableName: this.chunksTable,
            Key: { jobId, seq: 0 },
            UpdateExpression:
              'SET nextSeq = :to, lastAppend = :token, expiresAtSec = :exp,' +
              ' #cursor = if_not_exists(#cursor, :zero)',
            ConditionExpression: from === undefined ? 'attribute_not_exists(nextSeq)' : 'nextSeq = :from',
            ExpressionAttributeNames: { '#cursor': 'cursor' },
            ExpressionAttributeValues: {
              ':to': to,
              ':token': token,
              ':exp': expiresAtSec,
              ':zero': 0,
              ...(from === undefined ? {} : { ':from': from }),
            },
            ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
          }),
        );
      } catch (error) {
        const failed = failedCondition(error);
        if (!failed) throw error;
        const meta = failed.item ? (unmarshall(failed.item) as Item) : undefined;
        if (meta?.lastAppend !== token || meta.nextSeq !== to) {
          from = meta?.nextSeq as number | undefined;
          continue;
        }
      }
      this.rememberNextSeq(jobId, to);
      return to - count + 1;
    }
    throw new FerryError('failed', `Could not append to the stream of ${jobId}: too much contention`);
  }

  /** Keeps `nextSeq` of the stream of `jobId` as the most recently used of at most 1,000. */
  private rememberNextSeq(jobId: string, nextSeq: number): void {
    this.nextSeqs.delete(jobId);
    this.nextSeqs.set(jobId, nextSeq);
    if (this.nextSeqs.size > 1000) this.nextSeqs.delete(this.nextSeqs.keys().next().value as string);
  }

  /** The chunk items of `outputs` from `firstSeq` on: inline, or an S3 pointer when over 300 KB. */
  private async writeChunks(
    jobId: string,
    firstSeq: number,
    outputs: unknown[],
    expiresAtSec: number,
  ): Promise<void> {
    const items: Item[] = [];
    for (const [i, output] of outputs.entries()) {
      const seq = firstSeq + i;
      const json = JSON.stringify(output ?? null);
      const item: Item = { jobId, seq, expiresAtSec };
      if (Buffer.byteLength(json) > streamChunkInlineBytes) {
        const ref = payloadKey(jobId, `stream-${seq}`);
        await this.blobs.put(ref, encoder.encode(json));
        item.chunkRef = ref;
      } else {
        item.chunkJson = json;
      }
      items.push(item);
    }
    await batchWrite(
      this.doc,
      this.chunksTable,
      items.map((Item) => ({ PutRequest: { Item } })),
    );
  }

  /**
   * Best effort, after an append failed past its reservation: each of the `count` seqs from
   * `firstSeq` with no item yet becomes a placeholder (`skipped`), which drainStream steps over, so
   * the chunks appended after it are not held back. A chunk the append did write stays (a drain
   * may have handed it out already); a placeholder behind the cursor is never read and goes with
   * the stream's TTL or clearStream.
   */
  private async skipSeqs(jobId: string, firstSeq: number, count: number, expiresAtSec: number) {
    // UpdateItem, which creates a missing item: the agent's role may write chunks with UpdateItem and
    // BatchWriteItem only (infra/isolation.ts), and a batch write cannot be conditional.
    const results = await Promise.allSettled(
      Array.from({ length: count }, (_, i) =>
        this.doc.send(
          new UpdateCommand({
            TableName: this.chunksTable,
            Key: { jobId, seq: firstSeq + i },
            UpdateExpression: 'SET skipped = :true, expiresAtSec = :exp',
            ConditionExpression: 'attribute_not_exists(seq)',
            ExpressionAttributeValues: { ':true': true, ':exp': expiresAtSec },
          }),
        ),
      ),
    );
    const unmarked = results.filter(
      (result) => result.status === 'rejected' && !isConditionFailure(result.reason),
    ).length;
    if (unmarked > 0) {
      this.warn(
        `ferry: could not mark ${unmarked} unwritten stream chunk(s) of ${jobId} as skipped; ` +
          'the chunks after them wait until the stream is cleared',
      );
    }
  }

  /**
   * Moves the stream's cursor from `from` to `to` unless a drain moved it first; true when this
   * drain did. A token of this call marks the move: when the SDK re-sent it after a first attempt
   * that landed (its answer lost), the retry fails the condition the first attempt made false, and
   * the item (ALL_OLD) then carries the token and `to`, so the chunks are this drain's to hand out
   * and not nobody's
   * (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/WorkingWithItems.html#WorkingWithItems.ConditionalUpdate).
   */
  private async moveCursor(jobId: string, from: number, to: number): Promise<boolean> {
    const token = randomUUID();
    try {
      await this.doc.send(
        new UpdateCommand({
          TableName: this.chunksTable,
          Key: { jobId, seq: 0 },
          UpdateExpression: 'SET #cursor = :last, drainedBy = :token',
          ConditionExpression: '#cursor = :cursor',
          ExpressionAttributeNames: { '#cursor': 'cursor' },
          ExpressionAttributeValues: { ':last': to, ':cursor': from, ':token': token },
          ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
        }),
      );
      return true;
    } catch (error) {
      const failed = failedCondition(error);
      if (!failed) throw error;
      const meta = failed.item ? (unmarshall(failed.item) as Item) : undefined;
      return meta?.drainedBy === token && meta.cursor === to;
    }
  }

  /**
   * Claims an expired job for deleteExpired, which deletes its stream before the item: one
   * conditional UpdateItem that moves its version on, while it is still final, expired and as the
   * index showed it. A write that read the job before it expired (a /retry, a `?ttl=` that keeps it
   * longer) and comes after the claim then fails its condition (`version = :expected`) and reads the
   * job expired, as it would have found it deleted; without the claim it would bring back a job
   * whose stream the sweeper was deleting. Answers the version it set, or undefined when the job
   * moved on or is gone.
   */
  private async claimExpired(item: Item): Promise<number | undefined> {
    const asFound = expiredAsFound(item);
    try {
      // singleWrite: the job item may be in a transaction of another write at this moment.
      const { Attributes } = await singleWrite(() =>
        this.doc.send(
          new UpdateCommand({
            TableName: this.jobsTable,
            Key: { jobId: item.jobId },
            UpdateExpression: 'SET version = version + :one',
            ...asFound,
            ExpressionAttributeValues: { ...asFound.ExpressionAttributeValues, ':one': 1 },
            ReturnValues: 'UPDATED_NEW',
          }),
        ),
      );
      return Attributes?.version as number;
    } catch (error) {
      if (isConditionFailure(error)) return undefined;
      throw error;
    }
  }

  /**
   * Deletes an expired job's stream (deleteExpired): clears it first, so that a reader finds it
   * cleared (`clearedBehind`) rather than a chunk missing; then at most `budget` of its chunks, a
   * Query page at a time; then its meta item, once no chunk is left (a stream without one has no
   * chunk). `gone`: nothing of the stream is left. A failed request, or `deadline` passed before a
   * page, leaves the rest for the next run.
   */
  private async dropStream(
    jobId: string,
    budget: number,
    deadline?: Deadline,
  ): Promise<{ dropped: number; gone: boolean }> {
    let dropped = 0;
    try {
      const clearedTo = await this.clearTo(jobId);
      if (clearedTo === undefined) return { dropped, gone: true };
      for (let more = true; more; ) {
        if (dropped >= budget || deadline?.passed()) return { dropped, gone: false };
        const page = await this.dropChunks(jobId, clearedTo, Math.min(budget - dropped, sweepPageChunks));
        dropped += page.dropped;
        // Each page starts at seq 1 again, behind the deleted ones; one of them is empty only when
        // nothing is left (without a filter, a page cut short holds at least one item). Nor is
        // anything left after a page that ends on clearedTo, the last seq a clear skipped, though a
        // page its Limit cut still carries a LastEvaluatedKey ("it does not necessarily mean that
        // there is more data",
        // https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Query.Pagination.html):
        // a stream whose last chunks spend the budget exactly goes in this run, rather than keep
        // its job for the next run to claim and clear again only to delete its meta item.
        more = page.more && page.dropped > 0 && page.lastSeq < clearedTo;
      }
      // A BatchWriteItem of one: the sweeper's role may BatchWriteItem on the chunks table.
      await batchWrite(this.doc, this.chunksTable, [{ DeleteRequest: { Key: { jobId, seq: 0 } } }]);
      return { dropped, gone: true };
    } catch (error) {
      this.chunksLeft(jobId, error);
      return { dropped, gone: false };
    }
  }

  /**
   * Deletes the chunk items of the stream of `jobId` from seq 1 to `to` that one Query page of at
   * most `atMost` items finds, and their S3 blobs; `more`: the page ended before `to` (DynamoDB
   * answers LastEvaluatedKey when a page is cut by its Limit or by 1 MB,
   * https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Query.Pagination.html), so
   * chunks may be left; `lastSeq`: the page's last seq (0 for an empty page). The Query asks for
   * the keys and blob refs only: a long stream's chunks (up to 300 KB each inline) would otherwise
   * be held in memory (the sweeper's Lambda has 512 MB). The projection shrinks the answer, not the read units: those count the items' whole size
   * (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/read-write-operations.html#read-operation-consumption).
   */
  private async dropChunks(
    jobId: string,
    to: number,
    atMost: number,
  ): Promise<{ dropped: number; more: boolean; lastSeq: number }> {
    const page = await this.doc.send(
      new QueryCommand({
        TableName: this.chunksTable,
        KeyConditionExpression: 'jobId = :job AND seq BETWEEN :from AND :to',
        ExpressionAttributeValues: { ':job': jobId, ':from': 1, ':to': to },
        ProjectionExpression: 'seq, chunkRef',
        ConsistentRead: true,
        Limit: atMost,
      }),
    );
    const rows = (page.Items ?? []) as Item[];
    await batchWrite(
      this.doc,
      this.chunksTable,
      rows.map((row) => ({ DeleteRequest: { Key: { jobId, seq: row.seq } } })),
    );
    await this.dropBlobs(rows.flatMap((row) => (typeof row.chunkRef === 'string' ? [row.chunkRef] : [])));
    return {
      dropped: rows.length,
      more: page.LastEvaluatedKey !== undefined,
      lastSeq: (rows.at(-1)?.seq as number | undefined) ?? 0,
    };
  }

  /**
   * Chunks a clear or the sweeper could not delete. Nothing reads them (behind clearedTo), so a
   * failed read or delete costs only storage: the sweeper tries again with the job on its next run,
   * or else they go with their TTL and their blobs with the bucket's payload rule; a sweep goes on to
   * its next job rather than fail the run.
   */
  private chunksLeft(jobId: string, error: unknown): void {
    this.warn(`ferry: could not delete stream chunks of ${jobId}: ${String(error)}`);
  }

  /**
   * Writes each blob of `big` not in `skip` again under a fresh key, pointing `big` at it; returns the
   * fields it renewed (the caller drops their old blobs once its write lands, the new ones if not).
   */
  private async renewBlobs(
    jobId: string,
    big: Partial<Record<BigField, Stored>>,
    skip: readonly BigField[],
  ): Promise<BigField[]> {
    const renewed: BigField[] = [];
    await Promise.all(
      bigFields.map(async (field) => {
        const stored = big[field];
        if (skip.includes(field) || !stored || !('ref' in stored)) return;
        const ref = payloadKey(jobId, field);
        // Copied where it is stored: a retry does not read a big input back (10 MB and more).
        if (!(await this.blobs.copy(stored.ref, ref))) throw new MissingBlobError(stored.ref);
        big[field] = { ref };
        renewed.push(field);
      }),
    );
    return renewed;
  }

  /** Best effort: an orphan blob costs storage, never correctness (the lifecycle rule catches it). */
  private async dropBlobs(refs: string[]): Promise<void> {
    await Promise.all(
      refs.map((ref) =>
        this.blobs.delete(ref).catch((error: unknown) => {
          this.warn(`ferry: could not delete blob ${ref}: ${String(error)}`);
        }),
      ),
    );
  }
}

/**
 * Whether an item whose `writeId` is `token` is the item `put` wrote: the put's `writeId` is a
 * random token no other write shares.
 */
function wroteIt(put: { Item: Item }, token: unknown): boolean {
  return token !== undefined && token === put.Item.writeId;
}

/**
 * What a job item (or a byStatusExpiry index item, which carries the same attributes) counts as. That
 * index does not project `countLane`, which only a queued job's count depends on: deleteExpired
 * reads final jobs.
 */
function countedOf(item: Item): Counted {
  return {
    id: item.jobId as string,
    endpointId: item.endpointId as string,
    status: (item.status as JobStatus | undefined) ?? statusOfShard(item.statusShard as string),
    retries: (item.retries as number | undefined) ?? 0,
    expiresAt: item.expiresAt as number,
    lane: countLaneOfItem(item),
  };
}

/** The lane a job item's queued count is in; undefined (the main count item) for an item without one. */
function countLaneOfItem(item: Item): CountLane | undefined {
  return item.countLane === 'urgent' || item.countLane === 'low' ? item.countLane : undefined;
}

/** A compare-and-set ready to send (DynamoJobStore.stage). */
interface Staged {
  before: Counted;
  /** How `written` counts. */
  after: Counted;
  written: Job;
  oldBig: Partial<Record<BigField, Stored>>;
  newBig: Partial<Record<BigField, Stored>>;
  /** The big fields this write stores anew (patched, or renewed by a retry). */
  patchedBig: BigField[];
  put: {
    TableName: string;
    Item: Item;
    ConditionExpression: string;
    ExpressionAttributeValues: Record<string, unknown>;
    ReturnValuesOnConditionCheckFailure: 'ALL_OLD';
  };
}

/** A conditional write's condition, as the document client takes it. */
interface Condition {
  ConditionExpression: string;
  ExpressionAttributeNames?: Record<string, string>;
  ExpressionAttributeValues: Record<string, unknown>;
}

/**
 * The condition that an expired job found on byStatusExpiry is still as the index showed it: final,
 * expired, and counted as deleteExpired's count updates assume.
 */
function expiredAsFound(item: Item): Condition & { ExpressionAttributeValues: Record<string, unknown> } {
  return {
    ConditionExpression: 'expiresAt = :expiresAt AND #status = :status AND retries = :retries',
    ExpressionAttributeNames: { '#status': 'status' },
    ExpressionAttributeValues: {
      ':expiresAt': item.expiresAt,
      ':status': statusOfShard(item.statusShard as string),
      ':retries': item.retries,
    } as Record<string, unknown>,
  };
}
