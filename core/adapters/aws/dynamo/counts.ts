/**
 * An endpoint's health counts (JobStore.counts) without reading its jobs. The semantics are the local
 * adapter's: unexpired jobs at `nowMs`, counted by status as core/job.ts healthCountOf says, plus
 * those with retries > 0 in `retried`.
 *
 * Count items. Every job adds one to its endpoint's count item for the bucket its expiresAt falls in
 * (`countBucketMs`) and the shard of its id: attributes inQueue, inProgress, completed, failed,
 * retried. The item lives in the jobs table itself, keyed `<endpointId>-#counts#<bucket>#<shard>`,
 * so whoever may write an endpoint's jobs may write its counts under the same IAM partition-key
 * fence (infra/isolation.ts), and one transaction spans both.
 *
 *  - Every write that changes what a job counts as (create, a status move, a retry, a new expiresAt,
 *    deleteExpired) goes in ONE TransactWriteItems with `ADD` updates of the count items it leaves
 *    and enters: all of them happen or none do, so a transition never lands without its counts
 *    (https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html,
 *    ADD: https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Expressions.UpdateExpressions.html#Expressions.UpdateExpressions.ADD).
 *    The SDK gives each transaction a ClientRequestToken, so its own retries of a lost answer apply
 *    it once. The price: a transactional write costs two write units per KB instead of one, so
 *    writes that change no count (progress, lease renewals) stay single conditional writes.
 *  - Expiry needs no write at all, which matters because TTL deletes run no code
 *    (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/howitworks-ttl.html): health
 *    sums the count items of the buckets from the current one on (one Query), and takes back the
 *    jobs of the current bucket whose expiresAt already passed (one Query on the same index, over at
 *    most one bucket's worth of expiries). Buckets before the current one never count, whether
 *    TTL has dropped their items yet or not. A finished job's own TTL waits for its bucket to end
 *    (job-item.ts), so what the second Query must take back is still there to read.
 *  - Shards (`statusShardCount`, by the job id as in job-item.ts) spread the writes of a busy
 *    endpoint over several count items: two transactions on one item at once conflict, and the
 *    loser is retried (`transact`).
 *  - Lanes: a queued job's `inQueue` is counted in a count item of its priority's lane, keyed
 *    `<endpointId>-#counts#<bucket>#<shard>#urgent` or `…#low` (`CountLane`, job-item.ts), so the
 *    scaler can tell the urgent jobs waiting (low-priority ones never start a worker) from one Query
 *    as before; every other count stays in the main item. Items, not a new attribute: the key is
 *    always in the index, and an existing index's projection cannot change. The job item records
 *    its lane (`countLane`), and a move takes the job out of the item it was counted in. A job item
 *    without one (written before lanes existed, or by an older Ferry, whose writes know only the
 *    main item) is counted in the main item, and `readQueuedAtMost` counts those as urgent.
 *
 * Both queries read the `byEndpointExpiry` GSI, which is eventually consistent: a transition a
 * moment ago may show a moment later. Health is a view, and the counts themselves never drift.
 */
import type { DynamoDBDocumentClient, TransactWriteCommandInput } from '@aws-sdk/lib-dynamodb';
import { healthCountOf, type Job, type JobStatus } from '../../../job.js';
import type { JobCounts, QueuedCounts } from '../../../ports.js';
import { type Item, queryAll, toSec } from './client.js';
import {
  bucketStartOf,
  type CountLane,
  countBucketMs,
  countFields,
  countLaneOf,
  daySec,
  shardOf,
} from './job-item.js';
import { dynamoSchema } from './schema.js';

type TransactItem = NonNullable<TransactWriteCommandInput['TransactItems']>[number];
type CountField = (typeof countFields)[number];
type Tally = Partial<Record<CountField, number>>;

/**
 * What decides where and how a job counts. `lane`: the count item its `inQueue` is in, that of its
 * lane, or the main one (undefined) for a job item without `countLane`.
 */
export type Counted = Pick<Job, 'id' | 'endpointId' | 'status' | 'retries' | 'expiresAt'> & {
  lane: CountLane | undefined;
};

/** How a job counts once this store writes it: its queued count in its priority's lane. */
export const countedOfJob = (job: Job): Counted => ({
  id: job.id,
  endpointId: job.endpointId,
  status: job.status,
  retries: job.retries,
  expiresAt: job.expiresAt,
  lane: countLaneOf(job),
});

/** The partition key of an endpoint's count items in the byEndpointExpiry index. */
const countsPartition = (endpointId: string): string => `${endpointId}#COUNTS`;

/** The lane a count item counts the queued jobs of, by its key; undefined for a main item. */
function laneOfCountItem(key: string): CountLane | undefined {
  if (key.endsWith('#urgent')) return 'urgent';
  if (key.endsWith('#low')) return 'low';
  return undefined;
}

/** What one job adds to its endpoint's counts while it is unexpired. */
function tallyOf(job: Pick<Counted, 'status' | 'retries'>): Tally {
  const tally: Tally = {};
  const field = healthCountOf[job.status];
  if (field) tally[field] = 1;
  if (job.retries > 0) tally.retried = 1;
  return tally;
}

/** A job's move as the counts see it: from `before` (undefined: new) to `after` (undefined: deleted). */
export type CountMove = readonly [before: Counted | undefined, after: Counted | undefined];

/**
 * The count-item updates that turn the counts of each move's `before` into those of its `after`:
 * none when nothing a job counts as changed, else one per count item touched (a job's main item and
 * its lane's when it leaves or enters the queue, two main items when its expiry moved to another
 * bucket), the moves' deltas on one item summed into one ADD (a transaction may not touch an item
 * twice).
 */
export function countUpdates(table: string, moves: readonly CountMove[]): TransactItem[] {
  const deltas = new Map<string, { job: Counted; tally: Record<string, number> }>();
  const add = (job: Counted | undefined, sign: 1 | -1) => {
    if (!job) return;
    const main = `${job.endpointId}-#counts#${bucketStartOf(job.expiresAt)}#${shardOf(job.id)}`;
    for (const [field, n] of Object.entries(tallyOf(job))) {
      // A queued job is counted in its lane's item (undefined: in the main one, as before lanes).
      const key = field === 'inQueue' && job.lane ? `${main}#${job.lane}` : main;
      const entry = deltas.get(key) ?? { job, tally: {} };
      entry.tally[field] = (entry.tally[field] ?? 0) + sign * n;
      deltas.set(key, entry);
    }
  };
  for (const [before, after] of moves) {
    add(before, -1);
    add(after, 1);
  }
  const updates: TransactItem[] = [];
  for (const [jobId, { job, tally }] of deltas) {
    const moved = Object.entries(tally).filter(([, n]) => n !== 0);
    if (moved.length === 0) continue;
    const bucketStart = bucketStartOf(job.expiresAt);
    updates.push({
      Update: {
        TableName: table,
        Key: { jobId },
        UpdateExpression: `SET endpointId = :counts, expiresAt = :start, expiresAtSec = :ttl ADD ${moved
          .map(([field]) => `${field} :${field}`)
          .join(', ')}`,
        ExpressionAttributeValues: {
          ':counts': countsPartition(job.endpointId),
          ':start': bucketStart,
          // Dead once its bucket ended (health no longer reads it); a day more for clock skew.
          ':ttl': toSec(bucketStart + countBucketMs) + daySec,
          ...Object.fromEntries(moved.map(([field, n]) => [`:${field}`, n])),
        },
      },
    });
  }
  return updates;
}

/** The status a `byStatusExpiry` index item was in (its statusShard is `<status>#<shard>`). */
export const statusOfShard = (statusShard: string): JobStatus => statusShard.split('#')[0] as JobStatus;

/** The count items of the buckets from the current one on: what every job unexpired at `nowMs` added. */
function countItemsOf(doc: DynamoDBDocumentClient, table: string, endpointId: string, nowMs: number) {
  return queryAll(doc, {
    TableName: table,
    IndexName: dynamoSchema.jobs.indexes.byEndpointExpiry.indexName,
    KeyConditionExpression: 'endpointId = :counts AND expiresAt >= :start',
    ExpressionAttributeValues: { ':counts': countsPartition(endpointId), ':start': bucketStartOf(nowMs) },
  });
}

/**
 * Upper bounds of the endpoint's IN_QUEUE jobs at `nowMs`, all of them and the urgent ones, from its
 * count items alone (one Query on the `<endpointId>#COUNTS` partition, what the scaler is allowed to
 * read): jobs of the current bucket that already expired are still in them.
 *
 * `urgent` is the urgent lane plus the main items' queued jobs, whose priority the counts do not
 * know: jobs written before lanes existed count as urgent until they leave the queue (as every
 * queued job did before), never as none. An older Ferry's move (an agent not yet redeployed) takes
 * a laned job out of the main item, which knows no lanes: the lane it left still counts it, and the
 * main items may sum below their own jobs (taken as 0). So an urgent job in its lane is never
 * missed; a stale urgent count only asks for a worker more, and never more than `all`.
 */
export async function readQueuedAtMost(
  doc: DynamoDBDocumentClient,
  table: string,
  endpointId: string,
  nowMs: number,
): Promise<QueuedCounts> {
  const queued = { urgent: 0, low: 0, main: 0 };
  for (const item of await countItemsOf(doc, table, endpointId, nowMs)) {
    queued[laneOfCountItem(item.jobId as string) ?? 'main'] += (item.inQueue as number | undefined) ?? 0;
  }
  const all = Math.max(0, queued.urgent + queued.low + queued.main);
  return { all, urgent: Math.min(all, Math.max(0, queued.urgent) + Math.max(0, queued.main)) };
}

/** The scaler's grant: the count partitions of the byEndpointExpiry index, never a job's items. */
export const countPartitionPattern = countsPartition('*');

/** The counts at `nowMs`: two Queries, whatever the number of jobs the endpoint retains. */
export async function readCounts(
  doc: DynamoDBDocumentClient,
  table: string,
  endpointId: string,
  nowMs: number,
): Promise<JobCounts> {
  const indexName = dynamoSchema.jobs.indexes.byEndpointExpiry.indexName;
  const currentStart = bucketStartOf(nowMs);
  const [countItems, expiredNow] = await Promise.all([
    countItemsOf(doc, table, endpointId, nowMs),
    // Jobs of the current bucket that already expired (expiresAt <= now reads as absent).
    queryAll(doc, {
      TableName: table,
      IndexName: indexName,
      KeyConditionExpression: 'endpointId = :ep AND expiresAt BETWEEN :start AND :now',
      ExpressionAttributeValues: { ':ep': endpointId, ':start': currentStart, ':now': nowMs },
    }),
  ]);
  const counts: JobCounts = { completed: 0, failed: 0, inProgress: 0, inQueue: 0, retried: 0 };
  for (const item of countItems) {
    for (const field of countFields) counts[field] += (item[field] as number | undefined) ?? 0;
  }
  for (const job of expiredNow as Item[]) {
    for (const [field, n] of Object.entries(tallyOf(job as unknown as Counted)))
      counts[field as CountField] -= n;
  }
  // Never below zero: jobs written before count items existed leave their counts on moving on.
  for (const field of countFields) counts[field] = Math.max(0, counts[field]);
  return counts;
}
