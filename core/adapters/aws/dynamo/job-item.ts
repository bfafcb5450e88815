/**
 * A job as a DynamoDB item: the small fields as one JSON `body` (so fields added to Job later
 * round-trip untouched), big fields as `<field>Json` (inline) or `<field>Ref` (a BlobStore key), and
 * copies of the fields the indexes key on and the conditions read.
 */
import { randomUUID } from 'node:crypto';
import { FerryError } from '../../../errors.js';
import { isFinal, type Job, type JobStatus, runDeadlineOf } from '../../../job.js';
import type { JobCounts } from '../../../ports.js';
import { type Item, toSec } from './client.js';

/**
 * How many shards the per-status sweep indexes spread over. A GSI partition key with a handful of
 * values (the status) would cap writes at one partition's ~1000 WCU/s and throttle the base table
 * through back-pressure; `statusShard` = `<status>#<0..n-1>` (a hash of the job id) spreads them,
 * and the sweeps query every shard.
 */
export const statusShardCount = 4;

/** The counts of JobCounts, each also an attribute of the count items (./counts.ts). */
export const countFields = [
  'inQueue',
  'inProgress',
  'completed',
  'failed',
  'retried',
] as const satisfies readonly (keyof JobCounts)[];

const KB = 1024;
export const daySec = 24 * 3600;
/** Unfinished jobs stay a day past expiresAt so the engine finds them to stop (../dynamo.ts). */
const unfinishedGraceSec = daySec;
/**
 * Finished jobs with payloads in S3 stay a day longer too: their objects are deleted with the job by
 * the sweeper (deleteExpired, a bounded number each minute), and TTL runs no code when it deletes an
 * item (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/howitworks-ttl.html), so an
 * item TTL took first left its objects to the bucket's 15-day backstop rule, long past the job's
 * retention, whenever more jobs expired than a sweep deletes. Reads already hide it past expiresAt.
 */
const blobsGraceSec = daySec;

/** Per-field inline budgets; together 376 KB, leaving room for the other attributes under 400 KB. */
export const inlineBudgetBytes = {
  input: 160 * KB,
  output: 160 * KB,
  error: 32 * KB,
  s3Config: 16 * KB,
  webhook: 8 * KB,
} as const;
export type BigField = keyof typeof inlineBudgetBytes;
export const bigFields = Object.keys(inlineBudgetBytes) as BigField[];
/** A stream chunk item holds one chunk, so it may use more of the 400 KB. */
export const streamChunkInlineBytes = 300 * KB;
/**
 * One /stream answer's share of a backlog, so it fits one Lambda response (6 MB, JSON inside JSON:
 * escaping can double it) and one function's memory: inline chunks up to this many bytes, at most
 * `streamDrainBlobs` chunks kept in S3 (payloads.ts moves those to URLs first), at most
 * `streamDrainChunks` chunks. Always at least one chunk. The rest waits for the next poll.
 */
export const streamDrainBytes = 2 * 1024 * KB;
export const streamDrainBlobs = 4;
export const streamDrainChunks = 1_000;

/**
 * Count items (./counts.ts) tally jobs by the bucket their expiresAt falls in: so many ms per bucket.
 * Health reads one item per live bucket and shard (at most 7 d / 5 min × shards), and takes back
 * the jobs that expired in the current bucket by reading them (at most 5 minutes' worth).
 */
export const countBucketMs = 5 * 60_000;
/** The first ms of the bucket `atMs` falls in. */
export const bucketStartOf = (atMs: number): number => Math.floor(atMs / countBucketMs) * countBucketMs;

/**
 * Which count item holds a queued job's `inQueue` (./counts.ts): the urgent or the low-priority one of
 * its bucket and shard, by `policy.lowPriority`. Each job item says which in its `countLane`
 * attribute, so a later move takes the job out of the item it was counted in; an item without one
 * was written before lanes existed (or by an older Ferry), and its job is counted in the main count
 * item. The priority never changes, so a job's lane changes only when such an item is written again.
 */
export type CountLane = 'urgent' | 'low';
export const countLaneOf = (job: Pick<Job, 'policy'>): CountLane =>
  job.policy?.lowPriority === true ? 'low' : 'urgent';

/** A big field as stored: inline JSON, or a pointer to the blob holding the JSON. */
export type Stored = { json: string } | { ref: string };

/** Sums an FNV-1a hash of the id into a shard number: stable, cheap, spreads uuids evenly. */
export function shardOf(id: string): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < id.length; i++) {
    hash ^= id.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193);
  }
  return (hash >>> 0) % statusShardCount;
}

export const shardsOf = (status: JobStatus): string[] =>
  Array.from({ length: statusShardCount }, (_, shard) => `${status}#${shard}`);

export class MissingBlobError extends FerryError {
  constructor(ref: string) {
    super('failed', `A stored payload is missing: ${ref}`);
  }
}

/** A fresh key under a job's payload folder; random, so two racing writers never share one. */
export const payloadKey = (jobId: string, name: string): string =>
  `payloads/${encodeURIComponent(jobId)}/${name}-${randomUUID()}`;

export function refsOf(big: Partial<Record<BigField, Stored | undefined>>): string[] {
  return Object.values(big).flatMap((stored) => (stored && 'ref' in stored ? [stored.ref] : []));
}

export function storedBigOf(item: Item): Partial<Record<BigField, Stored>> {
  const out: Partial<Record<BigField, Stored>> = {};
  for (const field of bigFields) {
    const json = item[`${field}Json`];
    const ref = item[`${field}Ref`];
    if (typeof json === 'string') out[field] = { json };
    else if (typeof ref === 'string') out[field] = { ref };
  }
  return out;
}

/** The item for a job: body (small fields), big fields as stored, and the index attributes. */
export function itemOf(job: Job, big: Partial<Record<BigField, Stored>>): Item {
  const small: Item = { ...(job as unknown as Item) };
  for (const field of bigFields) delete small[field];
  const item: Item = {
    jobId: job.id,
    body: JSON.stringify(small),
    endpointId: job.endpointId,
    status: job.status,
    version: job.version,
    createdAt: job.createdAt,
    expiresAt: job.expiresAt,
    retries: job.retries,
    endpointStatus: `${job.endpointId}#${job.status}`,
    statusShard: `${job.status}#${shardOf(job.id)}`,
    countLane: countLaneOf(job),
    // A finished job stays at least until its count bucket ends: health takes back the jobs that
    // expired in the current bucket by reading them, so TTL must not drop one before (./counts.ts).
    expiresAtSec: isFinal(job.status)
      ? toSec(bucketStartOf(job.expiresAt) + countBucketMs) + (refsOf(big).length > 0 ? blobsGraceSec : 0)
      : toSec(job.expiresAt) + unfinishedGraceSec,
  };
  for (const field of bigFields) {
    const stored = big[field];
    if (stored && 'json' in stored) item[`${field}Json`] = stored.json;
    else if (stored) item[`${field}Ref`] = stored.ref;
  }
  if (job.status === 'IN_PROGRESS') {
    const runDeadline = runDeadlineOf(job);
    const deadlines = [job.leaseUntil, runDeadline].filter((at): at is number => at !== undefined);
    if (deadlines.length > 0) item.overdueAt = Math.min(...deadlines);
    // What renewLease's condition reads (the body is one string it cannot look into).
    if (job.leaseUntil !== undefined) item.leaseUntil = job.leaseUntil;
    if (job.workerId !== undefined) item.workerId = job.workerId;
    if (runDeadline !== undefined) item.runDeadline = runDeadline;
  }
  return item;
}
