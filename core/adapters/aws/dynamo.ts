/**
 * JobStore, ControlStore and WorkerRegistry on DynamoDB.
 *
 * Four tables, described once in `dynamoSchema` (the CDK stacks in infra/ build the same tables from
 * it; `createTables` builds them for tests and for emulators):
 *
 *   jobs     jobId                 one item per job; big fields go to the BlobStore (below)
 *   chunks   jobId + seq           seq 0 = the job's stream meta {nextSeq, cursor}; seq ≥ 1 = chunks
 *   control  pk + sk               APP#<app> · ENV#<app>#<env> · EP#<id> · KEY#<hash> · KEYID#<id>
 *   workers  workerId              one item per worker, listed per endpoint through a GSI
 *
 * Rules this file follows, each working around an AWS limit (docs/api.md#aws-front-door):
 * - Every job transition is a conditional write: create = `attribute_not_exists(jobId)`, update =
 *   `version = :expected` on a whole-item Put (a read-modify-write: the derived index attributes
 *   depend on fields a patch may not carry). Whoever writes first wins; the other gets undefined.
 * - TTL deletion lags by days, so every read filters `expiresAt > now` in code (GetItem) or with a
 *   FilterExpression (Query). `expiresAtSec` (epoch seconds) is only DynamoDB's garbage collection.
 *   Unfinished jobs get a day of grace on it so the engine can still find and stop them
 *   (listExpiredUnfinished) before DynamoDB drops them.
 * - Items stay under 400 KB: input, output, error, s3Config and webhook each have an inline budget
 *   (`inlineBudgetBytes`, 376 KB together); a value over its budget is stored in the BlobStore under
 *   `payloads/<jobId>/…` with a pointer in the item, and read back transparently. Stream chunks over
 *   300 KB likewise. (Give the bucket a lifecycle rule on `payloads/` as a backstop: ~8 days.)
 * - No Scans. Every list is a Query on a GSI (below). GSIs are eventually consistent on AWS (usually
 *   well under a second), so a job written a moment ago can be missing from a list, never from `get`.
 */
import { randomUUID } from 'node:crypto';
import {
  type AttributeDefinition,
  type AttributeValue,
  CreateTableCommand,
  type DynamoDBClient,
  type GlobalSecondaryIndex,
  type KeySchemaElement,
  UpdateTimeToLiveCommand,
} from '@aws-sdk/client-dynamodb';
import {
  BatchWriteCommand,
  DeleteCommand,
  DynamoDBDocumentClient,
  GetCommand,
  PutCommand,
  QueryCommand,
  type QueryCommandInput,
  TransactWriteCommand,
  UpdateCommand,
} from '@aws-sdk/lib-dynamodb';
import { unmarshall } from '@aws-sdk/util-dynamodb';
import { conflict, FerryError, internal } from '../../errors.js';
import {
  decodeJobCursor,
  encodeJobCursor,
  isBeforeCursor,
  isFinal,
  type Job,
  type JobStatus,
  jobStatuses,
  runDeadlineOf,
} from '../../job.js';
import type {
  ApiKeyRecord,
  AppRecord,
  BlobStore,
  ControlStore,
  EndpointRecord,
  EnvironmentRecord,
  JobCounts,
  JobPatch,
  JobStore,
  JobUpdate,
  LeaseRenewal,
  RecentJobsQuery,
  WorkerRecord,
  WorkerRegistry,
} from '../../ports.js';

// ── schema ────────────────────────────────────────────────────────────────────────────────────────

type KeyType = 'S' | 'N';
interface KeyAttr {
  readonly name: string;
  readonly type: KeyType;
}
interface IndexSpec {
  readonly indexName: string;
  readonly partitionKey: KeyAttr;
  readonly sortKey: KeyAttr;
}
interface TableSpec {
  readonly partitionKey: KeyAttr;
  readonly sortKey?: KeyAttr;
  /** DynamoDB's TTL attribute (epoch seconds); absent when the table has none. */
  readonly ttlAttribute?: string;
  readonly indexes: Readonly<Record<string, IndexSpec>>;
}

/**
 * How many shards the per-status sweep indexes spread over. A GSI partition key with a handful of
 * values (the status) would cap writes at one partition's ~1000 WCU/s and throttle the base table
 * through back-pressure; `statusShard` = `<status>#<0..n-1>` (a hash of the job id) spreads them,
 * and the sweeps query every shard.
 */
export const statusShardCount = 4;

/**
 * The tables and indexes, in one place: `createTables` builds them and infra/ must build the same.
 * Every table is PAY_PER_REQUEST and every index projects ALL attributes.
 */
export const dynamoSchema = {
  jobs: {
    partitionKey: { name: 'jobId', type: 'S' },
    ttlAttribute: 'expiresAtSec',
    indexes: {
      /** listByStatus and counts: `endpointStatus` = `<endpointId>#<status>`, oldest first. */
      byEndpointStatus: {
        indexName: 'byEndpointStatus',
        partitionKey: { name: 'endpointStatus', type: 'S' },
        sortKey: { name: 'createdAt', type: 'N' },
      },
      /** listExpiredUnfinished (IN_QUEUE/IN_PROGRESS shards) and deleteExpired (final shards). */
      byStatusExpiry: {
        indexName: 'byStatusExpiry',
        partitionKey: { name: 'statusShard', type: 'S' },
        sortKey: { name: 'expiresAt', type: 'N' },
      },
      /**
       * listOverdue. Sparse: only IN_PROGRESS jobs carry `overdueAt` = min(leaseUntil,
       * startedAt + policy.executionTimeoutMs), so the index holds just the running jobs.
       */
      byStatusOverdue: {
        indexName: 'byStatusOverdue',
        partitionKey: { name: 'statusShard', type: 'S' },
        sortKey: { name: 'overdueAt', type: 'N' },
      },
    },
  },
  chunks: {
    partitionKey: { name: 'jobId', type: 'S' },
    sortKey: { name: 'seq', type: 'N' },
    ttlAttribute: 'expiresAtSec',
    indexes: {},
  },
  control: {
    partitionKey: { name: 'pk', type: 'S' },
    sortKey: { name: 'sk', type: 'S' },
    indexes: {
      /** Lists: kind = 'APP' | 'ENV#<app>' | 'EP' | 'KEY'; kindSort orders them within a kind. */
      byKind: {
        indexName: 'byKind',
        partitionKey: { name: 'kind', type: 'S' },
        sortKey: { name: 'kindSort', type: 'S' },
      },
    },
  },
  workers: {
    partitionKey: { name: 'workerId', type: 'S' },
    ttlAttribute: 'expiresAtSec',
    indexes: {
      byEndpoint: {
        indexName: 'byEndpoint',
        partitionKey: { name: 'endpointId', type: 'S' },
        sortKey: { name: 'lastSeenAt', type: 'N' },
      },
    },
  },
} as const satisfies Record<string, TableSpec>;

export type DynamoTable = keyof typeof dynamoSchema;
/** The physical table names (stack-specific), by role. */
export type DynamoTableNames = Record<DynamoTable, string>;

/**
 * Creates the tables and their indexes, and turns TTL on (`ttl: false` leaves it off, for tests of
 * expired-but-present items). Matches what infra/ deploys.
 */
export async function createTables(
  client: DynamoDBClient,
  names: DynamoTableNames,
  options: { ttl?: boolean } = {},
): Promise<void> {
  for (const role of Object.keys(dynamoSchema) as DynamoTable[]) {
    const spec: TableSpec = dynamoSchema[role];
    const attributes = new Map<string, KeyType>();
    const keySchema = (pk: KeyAttr, sk?: KeyAttr): KeySchemaElement[] => {
      attributes.set(pk.name, pk.type);
      const keys: KeySchemaElement[] = [{ AttributeName: pk.name, KeyType: 'HASH' }];
      if (sk) {
        attributes.set(sk.name, sk.type);
        keys.push({ AttributeName: sk.name, KeyType: 'RANGE' });
      }
      return keys;
    };
    const tableKeys = keySchema(spec.partitionKey, spec.sortKey);
    const indexes: GlobalSecondaryIndex[] = Object.values(spec.indexes).map((index) => ({
      IndexName: index.indexName,
      KeySchema: keySchema(index.partitionKey, index.sortKey),
      Projection: { ProjectionType: 'ALL' },
    }));
    const definitions: AttributeDefinition[] = [...attributes].map(([name, type]) => ({
      AttributeName: name,
      AttributeType: type,
    }));
    await client.send(
      new CreateTableCommand({
        TableName: names[role],
        BillingMode: 'PAY_PER_REQUEST',
        KeySchema: tableKeys,
        AttributeDefinitions: definitions,
        ...(indexes.length > 0 ? { GlobalSecondaryIndexes: indexes } : {}),
      }),
    );
    if (spec.ttlAttribute && options.ttl !== false) {
      await client.send(
        new UpdateTimeToLiveCommand({
          TableName: names[role],
          TimeToLiveSpecification: { AttributeName: spec.ttlAttribute, Enabled: true },
        }),
      );
    }
  }
}

// ── shared helpers ────────────────────────────────────────────────────────────────────────────────

type Item = Record<string, unknown>;

const KB = 1024;
const daySec = 24 * 3600;
/** Unfinished jobs stay a day past expiresAt so the engine finds them to stop (see the header). */
const unfinishedGraceSec = daySec;
/** Stream chunks and their meta: the longest policy.ttl (7 d) plus a day. */
const streamLifeSec = 8 * daySec;
/** Workers not seen for a day are garbage. */
const workerLifeSec = daySec;

/** Per-field inline budgets; together 376 KB, leaving room for the other attributes under 400 KB. */
export const inlineBudgetBytes = {
  input: 160 * KB,
  output: 160 * KB,
  error: 32 * KB,
  s3Config: 16 * KB,
  webhook: 8 * KB,
} as const;
type BigField = keyof typeof inlineBudgetBytes;
const bigFields = Object.keys(inlineBudgetBytes) as BigField[];
/** A stream chunk item holds one chunk, so it may use more of the 400 KB. */
export const streamChunkInlineBytes = 300 * KB;

const errorName = (error: unknown): string | undefined => (error instanceof Error ? error.name : undefined);
const isConditionFailure = (error: unknown): boolean =>
  errorName(error) === 'ConditionalCheckFailedException';

function checkLimit(limit: number): number {
  if (!Number.isInteger(limit) || limit < 1) throw internal(`limit must be a positive integer, got ${limit}`);
  return limit;
}

const toSec = (ms: number): number => Math.ceil(ms / 1000);
const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Sums an FNV-1a hash of the id into a shard number: stable, cheap, spreads uuids evenly. */
function shardOf(id: string): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < id.length; i++) {
    hash ^= id.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193);
  }
  return (hash >>> 0) % statusShardCount;
}

const shardsOf = (status: JobStatus): string[] =>
  Array.from({ length: statusShardCount }, (_, shard) => `${status}#${shard}`);

/** Every page of a Query; `stop` ends early once the caller has enough. */
async function queryAll(
  doc: DynamoDBDocumentClient,
  input: QueryCommandInput,
  stop: (items: Item[]) => boolean = () => false,
): Promise<Item[]> {
  const items: Item[] = [];
  let startKey: Record<string, unknown> | undefined;
  do {
    const page = await doc.send(new QueryCommand({ ...input, ExclusiveStartKey: startKey }));
    items.push(...((page.Items ?? []) as Item[]));
    startKey = page.LastEvaluatedKey;
  } while (startKey && !stop(items));
  return items;
}

/** BatchWrite in groups of 25, resending what DynamoDB left unprocessed (throttling) with backoff. */
async function batchWrite(
  doc: DynamoDBDocumentClient,
  table: string,
  requests: { PutRequest?: { Item: Item }; DeleteRequest?: { Key: Item } }[],
): Promise<void> {
  for (let i = 0; i < requests.length; i += 25) {
    let pending = requests.slice(i, i + 25);
    for (let attempt = 0; pending.length > 0; attempt++) {
      if (attempt > 8) throw new FerryError('failed', `DynamoDB kept refusing writes to ${table}`);
      if (attempt > 0) await new Promise((resolve) => setTimeout(resolve, 50 * 2 ** attempt));
      const result = await doc.send(new BatchWriteCommand({ RequestItems: { [table]: pending } }));
      pending = (result.UnprocessedItems?.[table] ?? []) as typeof pending;
    }
  }
}

// ── jobs ──────────────────────────────────────────────────────────────────────────────────────────

/** A big field as stored: inline JSON, or a pointer to the blob holding the JSON. */
type Stored = { json: string } | { ref: string };

export interface DynamoJobStoreOptions {
  doc: DynamoDBDocumentClient;
  tables: Pick<DynamoTableNames, 'jobs' | 'chunks'>;
  /** Where values too big for an item go. */
  blobs: BlobStore;
  /** Wall time, only for the TTL of stream items (the port passes `nowMs` everywhere else). */
  nowMs?: () => number;
  /** Where a store that cannot do its job says so; defaults to console.warn. */
  warn?: (message: string) => void;
}

/**
 * The document client every adapter here relies on. removeUndefinedValues: a JobPatch removes a field
 * by setting it to undefined, and records carry optional fields; without it the SDK throws on them.
 * Composition roots build their document client here, never by hand.
 */
export function documentClient(client: DynamoDBClient): DynamoDBDocumentClient {
  return DynamoDBDocumentClient.from(client, { marshallOptions: { removeUndefinedValues: true } });
}

/**
 * The job item: the small fields as one JSON `body` (so fields added to Job later round-trip
 * untouched), big fields as `<field>Json` or `<field>Ref`, and copies of the fields the indexes key on.
 */
export class DynamoJobStore implements JobStore {
  private readonly doc: DynamoDBDocumentClient;
  private readonly jobsTable: string;
  private readonly chunksTable: string;
  private readonly blobs: BlobStore;
  private readonly nowMs: () => number;
  private readonly warn: (message: string) => void;
  /**
   * How the big fields of each job this store handed out are stored (inline JSON or an S3 ref), so an
   * update writes without reading the item again. Weak: a job the caller drops is forgotten.
   */
  private readonly storedBig = new WeakMap<Job, Partial<Record<BigField, Stored>>>();

  constructor(options: DynamoJobStoreOptions) {
    this.doc = options.doc;
    this.jobsTable = options.tables.jobs;
    this.chunksTable = options.tables.chunks;
    this.blobs = options.blobs;
    this.nowMs = options.nowMs ?? Date.now;
    this.warn = options.warn ?? ((message) => console.warn(message));
  }

  async create(job: Job): Promise<void> {
    const stored: Job = { ...job, version: 1 };
    const big = await this.storeBig(stored, bigFields);
    try {
      await this.doc.send(
        new PutCommand({
          TableName: this.jobsTable,
          Item: itemOf(stored, big),
          ConditionExpression: 'attribute_not_exists(jobId)',
        }),
      );
    } catch (error) {
      await this.dropBlobs(refsOf(big));
      if (isConditionFailure(error)) throw conflict(`A job with id ${job.id} already exists`);
      throw error;
    }
  }

  async get(jobId: string, nowMs: number): Promise<Job | undefined> {
    const job = await this.readJob(jobId);
    // TTL deletion lags by days: an expired job still in the table reads as absent.
    return job && job.expiresAt > nowMs ? job : undefined;
  }

  /**
   * One conditional PutItem and no read: `current` came from this store, which remembers how its big
   * fields are stored (inline or in S3), so the write needs nothing else. On a lost race DynamoDB hands
   * back the item as it is now (ReturnValuesOnConditionCheckFailure ALL_OLD,
   * https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_PutItem.html), so the caller
   * decides again without a GetItem either.
   */
  async update(current: Job, patch: JobPatch): Promise<JobUpdate> {
    const expectedVersion = current.version;
    let big = this.storedBig.get(current);
    if (!big) {
      // A job this store did not hand out: read how its big fields are stored.
      const item = await this.readItem(current.id);
      if (!item || item.version !== expectedVersion) {
        return { ok: false, current: item ? await this.jobOf(item) : undefined };
      }
      big = storedBigOf(item);
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

    try {
      await this.doc.send(
        new PutCommand({
          TableName: this.jobsTable,
          Item: itemOf(written, newBig),
          ConditionExpression: 'version = :expected',
          ExpressionAttributeValues: { ':expected': expectedVersion },
          ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
        }),
      );
    } catch (error) {
      await this.dropBlobs(patchedBig.flatMap((field) => refsOf({ [field]: newBig[field] })));
      if (!isConditionFailure(error)) throw error;
      const old = (error as { Item?: Record<string, AttributeValue> }).Item;
      return { ok: false, current: old ? await this.jobOfOrFresh(unmarshall(old) as Item) : undefined };
    }
    // The replaced blobs: nothing points at them any more (a reader that got the old item re-reads).
    await this.dropBlobs(patchedBig.flatMap((field) => refsOf({ [field]: big[field] })));
    this.storedBig.set(written, newBig);
    return { ok: true, job: written };
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
      await this.doc.send(
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

  async listByStatus(endpointId: string, status: JobStatus, nowMs: number, limit: number): Promise<Job[]> {
    checkLimit(limit);
    const items = await queryAll(
      this.doc,
      {
        TableName: this.jobsTable,
        IndexName: dynamoSchema.jobs.indexes.byEndpointStatus.indexName,
        KeyConditionExpression: 'endpointStatus = :key',
        FilterExpression: 'expiresAt > :now',
        ExpressionAttributeValues: { ':key': `${endpointId}#${status}`, ':now': nowMs },
      },
      (found) => found.length >= limit,
    );
    return this.jobsOf(items.slice(0, limit));
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
    const jobs = await this.jobsOf(merged.slice(0, limit));
    const last = jobs.at(-1);
    return merged.length > limit && last ? { jobs, next: encodeJobCursor(last) } : { jobs };
  }

  /**
   * Running jobs whose lease lapsed or whose execution timeout passed: one Query per shard of the
   * sparse `byStatusOverdue` index (overdueAt <= now), merged oldest deadline first.
   */
  async listOverdue(nowMs: number, limit: number): Promise<Job[]> {
    checkLimit(limit);
    const items = await this.queryShards(
      ['IN_PROGRESS'],
      dynamoSchema.jobs.indexes.byStatusOverdue.indexName,
      'statusShard = :shard AND overdueAt <= :now',
      { ':now': nowMs },
      limit,
    );
    items.sort((a, b) => (a.overdueAt as number) - (b.overdueAt as number));
    return this.jobsOf(items.slice(0, limit));
  }

  /** Unfinished jobs whose expiresAt passed (policy.ttl ran out): `get` hides them, the engine stops them. */
  async listExpiredUnfinished(nowMs: number, limit: number): Promise<Job[]> {
    checkLimit(limit);
    const items = await this.queryShards(
      ['IN_QUEUE', 'IN_PROGRESS'],
      dynamoSchema.jobs.indexes.byStatusExpiry.indexName,
      'statusShard = :shard AND expiresAt <= :now',
      { ':now': nowMs },
      limit,
    );
    items.sort((a, b) => (a.expiresAt as number) - (b.expiresAt as number));
    return this.jobsOf(items.slice(0, limit));
  }

  /**
   * Stream chunks: seq 0 of the job's partition in the chunks table is the meta item
   * {nextSeq, cursor}. appendStream reserves seqs by an atomic ADD on nextSeq, then writes the chunks;
   * drainStream hands out the contiguous run after `cursor` and moves the cursor by a conditional
   * update, so two drains racing never hand out the same chunk:
   *
   *   chunks  1 2 3 4 _ 6        (5 reserved, not written yet)
   *           ▲     ▲
   *        cursor  drain hands out 2..4 and sets cursor 1 → 4 only if it is still 1
   */
  async appendStream(jobId: string, outputs: unknown[]): Promise<void> {
    if (outputs.length === 0) return;
    const expiresAtSec = toSec(this.nowMs()) + streamLifeSec;
    const reserved = await this.doc.send(
      new UpdateCommand({
        TableName: this.chunksTable,
        Key: { jobId, seq: 0 },
        UpdateExpression: 'ADD nextSeq :n SET expiresAtSec = :exp, #cursor = if_not_exists(#cursor, :zero)',
        ExpressionAttributeNames: { '#cursor': 'cursor' },
        ExpressionAttributeValues: { ':n': outputs.length, ':exp': expiresAtSec, ':zero': 0 },
        ReturnValues: 'UPDATED_NEW',
      }),
    );
    const lastSeq = reserved.Attributes?.nextSeq as number;
    const firstSeq = lastSeq - outputs.length + 1;
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

  async drainStream(jobId: string): Promise<unknown[]> {
    for (let attempt = 0; attempt < 20; attempt++) {
      const meta = (
        await this.doc.send(
          new GetCommand({ TableName: this.chunksTable, Key: { jobId, seq: 0 }, ConsistentRead: true }),
        )
      ).Item as Item | undefined;
      if (!meta) return [];
      const cursor = (meta.cursor as number | undefined) ?? 0;
      const nextSeq = (meta.nextSeq as number | undefined) ?? 0;
      if (cursor >= nextSeq) return [];
      const rows = await queryAll(this.doc, {
        TableName: this.chunksTable,
        KeyConditionExpression: 'jobId = :job AND seq BETWEEN :from AND :to',
        ExpressionAttributeValues: { ':job': jobId, ':from': cursor + 1, ':to': nextSeq },
        ConsistentRead: true,
      });
      // Only the contiguous run: a reserved seq not written yet holds back the ones after it.
      const run: Item[] = [];
      for (const row of rows) {
        if (row.seq !== cursor + 1 + run.length) break;
        run.push(row);
      }
      if (run.length === 0) return [];
      // Read the values before claiming them, so a failed blob read loses nothing.
      const values = await Promise.all(run.map((row) => this.chunkValue(row)));
      const lastSeq = cursor + run.length;
      try {
        await this.doc.send(
          new UpdateCommand({
            TableName: this.chunksTable,
            Key: { jobId, seq: 0 },
            UpdateExpression: 'SET #cursor = :last',
            ConditionExpression: '#cursor = :cursor',
            ExpressionAttributeNames: { '#cursor': 'cursor' },
            ExpressionAttributeValues: { ':last': lastSeq, ':cursor': cursor },
          }),
        );
      } catch (error) {
        if (isConditionFailure(error)) continue; // another drain took them; look again
        throw error;
      }
      await this.deleteChunks(jobId, run);
      return values;
    }
    throw new FerryError('failed', `Could not drain the stream of ${jobId}: too much contention`);
  }

  async clearStream(jobId: string): Promise<void> {
    try {
      // Skip everything appended so far; seqs keep growing, so nothing is ever reused.
      await this.doc.send(
        new UpdateCommand({
          TableName: this.chunksTable,
          Key: { jobId, seq: 0 },
          UpdateExpression: 'SET #cursor = nextSeq',
          ConditionExpression: 'attribute_exists(nextSeq)',
          ExpressionAttributeNames: { '#cursor': 'cursor' },
        }),
      );
    } catch (error) {
      if (isConditionFailure(error)) return; // nothing was ever appended
      throw error;
    }
    const rows = await queryAll(this.doc, {
      TableName: this.chunksTable,
      KeyConditionExpression: 'jobId = :job AND seq > :zero',
      ExpressionAttributeValues: { ':job': jobId, ':zero': 0 },
      ConsistentRead: true,
    });
    await this.deleteChunks(jobId, rows);
  }

  /**
   * Per endpoint, one Query per status on `byEndpointStatus` with the expiry filter, reading only
   * `retries` (a Query costs what it reads, not what it returns, so this is as cheap as Select COUNT
   * and also yields `retried`). failed counts FAILED and TIMED_OUT; CANCELLED counts only in retried.
   * Counting beats atomic counters here: counters cannot see expiry, which only reads decide.
   */
  async counts(endpointId: string, nowMs: number): Promise<JobCounts> {
    const perStatus = await Promise.all(
      jobStatuses.map(async (status) => {
        const items = await queryAll(this.doc, {
          TableName: this.jobsTable,
          IndexName: dynamoSchema.jobs.indexes.byEndpointStatus.indexName,
          KeyConditionExpression: 'endpointStatus = :key',
          FilterExpression: 'expiresAt > :now',
          ProjectionExpression: 'retries',
          ExpressionAttributeValues: { ':key': `${endpointId}#${status}`, ':now': nowMs },
        });
        return {
          status,
          n: items.length,
          retried: items.filter((item) => (item.retries as number) > 0).length,
        };
      }),
    );
    const counts: JobCounts = { completed: 0, failed: 0, inProgress: 0, inQueue: 0, retried: 0 };
    for (const { status, n, retried } of perStatus) {
      counts.retried += retried;
      if (status === 'COMPLETED') counts.completed += n;
      else if (status === 'FAILED' || status === 'TIMED_OUT') counts.failed += n;
      else if (status === 'IN_PROGRESS') counts.inProgress += n;
      else if (status === 'IN_QUEUE') counts.inQueue += n;
    }
    return counts;
  }

  /**
   * Deletes expired jobs in a final status with their chunks and blobs (DynamoDB's TTL would drop
   * the items days later but never the blobs). Unfinished ones stay for the engine to stop first.
   * Each delete is conditional on the item still being final and expired.
   */
  async deleteExpired(nowMs: number, limit: number): Promise<number> {
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
    let deleted = 0;
    for (const item of items) {
      try {
        await this.doc.send(
          new DeleteCommand({
            TableName: this.jobsTable,
            Key: { jobId: item.jobId },
            ConditionExpression: 'expiresAt <= :now AND #status IN (:s0, :s1, :s2, :s3)',
            ExpressionAttributeNames: { '#status': 'status' },
            ExpressionAttributeValues: {
              ':now': nowMs,
              ...Object.fromEntries(finals.map((status, i) => [`:s${i}`, status])),
            },
          }),
        );
      } catch (error) {
        if (isConditionFailure(error)) continue; // retried or already gone meanwhile
        throw error;
      }
      deleted++;
      await this.dropBlobs(refsOf(storedBigOf(item)));
      await this.clearStream(item.jobId as string);
    }
    return deleted;
  }

  /** The clients are injected and may be shared: their owner destroys them. */
  async close(): Promise<void> {}

  // ── internals ──

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

  private async readJob(jobId: string): Promise<Job | undefined> {
    // A writer deletes the blobs it replaced right after its write: a reader holding the older item
    // may find a blob gone, and reads again.
    for (let attempt = 0; ; attempt++) {
      const item = await this.readItem(jobId);
      if (!item) return undefined;
      try {
        return await this.jobOf(item);
      } catch (error) {
        if (!(error instanceof MissingBlobError) || attempt >= 2) throw error;
      }
    }
  }

  private async jobsOf(items: Item[]): Promise<Job[]> {
    return Promise.all(
      items.map(async (item) => {
        try {
          return await this.jobOf(item);
        } catch (error) {
          if (!(error instanceof MissingBlobError)) throw error;
          // Changed since the index was read: take the item as it is now.
          const fresh = await this.readJob(item.jobId as string);
          if (!fresh) throw error;
          return fresh;
        }
      }),
    );
  }

  private async jobOf(item: Item): Promise<Job> {
    const small = JSON.parse(item.body as string) as Job;
    // renewLease writes these two attributes and leaves the body as it was.
    small.version = item.version as number;
    if (typeof item.leaseUntil === 'number') small.leaseUntil = item.leaseUntil;
    const big = storedBigOf(item);
    const job = await this.decode(small, big, bigFields);
    this.storedBig.set(job, big);
    return job;
  }

  /** The job of an item read a moment ago; when a writer already replaced its blobs, the job as it is now. */
  private async jobOfOrFresh(item: Item): Promise<Job | undefined> {
    try {
      return await this.jobOf(item);
    } catch (error) {
      if (!(error instanceof MissingBlobError)) throw error;
      return this.readJob(item.jobId as string);
    }
  }

  /** Fills in the big fields of `job` from `big` (`fields` are the ones to fill). */
  private async decode(job: Job, big: Partial<Record<BigField, Stored>>, fields: BigField[]): Promise<Job> {
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

  private async deleteChunks(jobId: string, rows: Item[]): Promise<void> {
    try {
      await batchWrite(
        this.doc,
        this.chunksTable,
        rows.map((row) => ({ DeleteRequest: { Key: { jobId, seq: row.seq } } })),
      );
      await this.dropBlobs(rows.flatMap((row) => (typeof row.chunkRef === 'string' ? [row.chunkRef] : [])));
    } catch (error) {
      // Handed out already (the cursor moved); the leftovers go with the TTL.
      this.warn(`ferry: could not delete drained stream chunks of ${jobId}: ${String(error)}`);
    }
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

class MissingBlobError extends FerryError {
  constructor(ref: string) {
    super('failed', `A stored payload is missing: ${ref}`);
  }
}

/** A fresh key under a job's payload folder; random, so two racing writers never share one. */
const payloadKey = (jobId: string, name: string): string =>
  `payloads/${encodeURIComponent(jobId)}/${name}-${randomUUID()}`;

function refsOf(big: Partial<Record<BigField, Stored | undefined>>): string[] {
  return Object.values(big).flatMap((stored) => (stored && 'ref' in stored ? [stored.ref] : []));
}

function storedBigOf(item: Item): Partial<Record<BigField, Stored>> {
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
function itemOf(job: Job, big: Partial<Record<BigField, Stored>>): Item {
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
    expiresAtSec: toSec(job.expiresAt) + (isFinal(job.status) ? 0 : unfinishedGraceSec),
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

// ── control ───────────────────────────────────────────────────────────────────────────────────────

/** Components are URI-encoded so a '#' inside a name never splits a key the wrong way. */
const enc = encodeURIComponent;

export interface DynamoControlStoreOptions {
  doc: DynamoDBDocumentClient;
  table: string;
}

/**
 * One item per record, keyed for its get (`APP#<app>`, `ENV#<app>#<env>`, `EP#<id>`, `KEY#<hash>`,
 * `KEYID#<id>`), listed through the `byKind` GSI. An API key is two items written in one transaction:
 * `KEY#<hash>` (the lookup on every request, and the uniqueness of the hash) and `KEYID#<id>` (list
 * and delete by id). Deleting an app or environment does not cascade (the CLI removes the parts first).
 */
export class DynamoControlStore implements ControlStore {
  private readonly doc: DynamoDBDocumentClient;
  private readonly table: string;

  constructor(options: DynamoControlStoreOptions) {
    this.doc = options.doc;
    this.table = options.table;
  }

  async putApp(app: AppRecord): Promise<void> {
    await this.put(`APP#${enc(app.name)}`, 'APP', app, 'APP', app.name);
  }

  getApp(name: string): Promise<AppRecord | undefined> {
    return this.getBody<AppRecord>(`APP#${enc(name)}`, 'APP');
  }

  async listApps(): Promise<AppRecord[]> {
    const apps = await this.list<AppRecord>('APP');
    return apps.sort((a, b) => compare(a.name, b.name));
  }

  async deleteApp(name: string): Promise<void> {
    await this.delete(`APP#${enc(name)}`, 'APP');
  }

  async putEnvironment(env: EnvironmentRecord): Promise<void> {
    await this.put(`ENV#${enc(env.app)}#${enc(env.name)}`, 'ENV', env, `ENV#${enc(env.app)}`, env.name);
  }

  getEnvironment(app: string, name: string): Promise<EnvironmentRecord | undefined> {
    return this.getBody<EnvironmentRecord>(`ENV#${enc(app)}#${enc(name)}`, 'ENV');
  }

  async listEnvironments(app: string): Promise<EnvironmentRecord[]> {
    const envs = await this.list<EnvironmentRecord>(`ENV#${enc(app)}`);
    return envs.sort((a, b) => compare(a.name, b.name));
  }

  async deleteEnvironment(app: string, name: string): Promise<void> {
    await this.delete(`ENV#${enc(app)}#${enc(name)}`, 'ENV');
  }

  async putEndpoint(endpoint: EndpointRecord): Promise<void> {
    const sort = `${enc(endpoint.app)}#${enc(endpoint.env)}#${enc(endpoint.id)}`;
    await this.put(`EP#${enc(endpoint.id)}`, 'EP', endpoint, 'EP', sort);
  }

  getEndpoint(id: string): Promise<EndpointRecord | undefined> {
    return this.getBody<EndpointRecord>(`EP#${enc(id)}`, 'EP');
  }

  async listEndpoints(filter: { app?: string; env?: string } = {}): Promise<EndpointRecord[]> {
    let prefix: string | undefined;
    if (filter.app !== undefined) {
      prefix = `${enc(filter.app)}#`;
      if (filter.env !== undefined) prefix += `${enc(filter.env)}#`;
    }
    const endpoints = await this.list<EndpointRecord>('EP', prefix);
    return endpoints
      .filter((ep) => filter.env === undefined || ep.env === filter.env)
      .sort(
        (a, b) =>
          compare(a.app, b.app) || compare(a.env, b.env) || compare(a.name, b.name) || compare(a.id, b.id),
      );
  }

  async deleteEndpoint(id: string): Promise<void> {
    await this.delete(`EP#${enc(id)}`, 'EP');
  }

  async putApiKey(key: ApiKeyRecord): Promise<void> {
    const idKey = { pk: `KEYID#${enc(key.id)}`, sk: 'KEY' };
    const previous = (
      await this.doc.send(new GetCommand({ TableName: this.table, Key: idKey, ConsistentRead: true }))
    ).Item as Item | undefined;
    const previousHash = previous?.hash as string | undefined;
    const body = JSON.stringify(key);
    try {
      await this.doc.send(
        new TransactWriteCommand({
          TransactItems: [
            {
              Put: {
                TableName: this.table,
                Item: {
                  ...idKey,
                  kind: 'KEY',
                  kindSort: `${key.createdAt.toString().padStart(16, '0')}#${key.id}`,
                  hash: key.hash,
                  body,
                },
                // Nobody re-pointed this id at another hash since we read it.
                ConditionExpression:
                  previousHash === undefined
                    ? 'attribute_not_exists(pk)'
                    : 'attribute_exists(pk) AND #hash = :previous',
                ...(previousHash === undefined
                  ? {}
                  : {
                      ExpressionAttributeNames: { '#hash': 'hash' },
                      ExpressionAttributeValues: { ':previous': previousHash },
                    }),
              },
            },
            {
              Put: {
                TableName: this.table,
                Item: { pk: `KEY#${key.hash}`, sk: 'KEY', keyId: key.id, body },
                // The same hash under another id is a conflict.
                ConditionExpression: 'attribute_not_exists(pk) OR keyId = :id',
                ExpressionAttributeValues: { ':id': key.id },
              },
            },
            ...(previousHash !== undefined && previousHash !== key.hash
              ? [{ Delete: { TableName: this.table, Key: { pk: `KEY#${previousHash}`, sk: 'KEY' } } }]
              : []),
          ],
        }),
      );
    } catch (error) {
      const reasons = (error as { CancellationReasons?: { Code?: string }[] }).CancellationReasons;
      if (
        errorName(error) === 'TransactionCanceledException' &&
        reasons?.[1]?.Code === 'ConditionalCheckFailed'
      ) {
        throw conflict('An API key with the same hash already exists');
      }
      if (
        errorName(error) === 'TransactionCanceledException' &&
        reasons?.[0]?.Code === 'ConditionalCheckFailed'
      ) {
        throw conflict(`The API key ${key.id} changed meanwhile; try again`);
      }
      throw error;
    }
  }

  findApiKeyByHash(hash: string): Promise<ApiKeyRecord | undefined> {
    return this.getBody<ApiKeyRecord>(`KEY#${hash}`, 'KEY');
  }

  async listApiKeys(): Promise<ApiKeyRecord[]> {
    const keys = await this.list<ApiKeyRecord>('KEY');
    return keys.sort((a, b) => a.createdAt - b.createdAt || compare(a.id, b.id));
  }

  async deleteApiKey(id: string): Promise<void> {
    const idKey = { pk: `KEYID#${enc(id)}`, sk: 'KEY' };
    const item = (
      await this.doc.send(new GetCommand({ TableName: this.table, Key: idKey, ConsistentRead: true }))
    ).Item as Item | undefined;
    if (!item) return;
    await this.doc.send(
      new TransactWriteCommand({
        TransactItems: [
          { Delete: { TableName: this.table, Key: idKey } },
          {
            Delete: {
              TableName: this.table,
              Key: { pk: `KEY#${item.hash as string}`, sk: 'KEY' },
              // Only while it still belongs to this id.
              ConditionExpression: 'attribute_not_exists(pk) OR keyId = :id',
              ExpressionAttributeValues: { ':id': id },
            },
          },
        ],
      }),
    );
  }

  async close(): Promise<void> {}

  private async put(pk: string, sk: string, record: object, kind: string, kindSort: string): Promise<void> {
    await this.doc.send(
      new PutCommand({
        TableName: this.table,
        Item: { pk, sk, kind, kindSort, body: JSON.stringify(record) },
      }),
    );
  }

  private async getBody<T>(pk: string, sk: string): Promise<T | undefined> {
    const result = await this.doc.send(
      new GetCommand({ TableName: this.table, Key: { pk, sk }, ConsistentRead: true }),
    );
    return result.Item ? (JSON.parse(result.Item.body as string) as T) : undefined;
  }

  private async delete(pk: string, sk: string): Promise<void> {
    await this.doc.send(new DeleteCommand({ TableName: this.table, Key: { pk, sk } }));
  }

  private async list<T>(kind: string, sortPrefix?: string): Promise<T[]> {
    const items = await queryAll(this.doc, {
      TableName: this.table,
      IndexName: dynamoSchema.control.indexes.byKind.indexName,
      KeyConditionExpression:
        sortPrefix === undefined ? 'kind = :kind' : 'kind = :kind AND begins_with(kindSort, :prefix)',
      ExpressionAttributeValues: {
        ':kind': kind,
        ...(sortPrefix === undefined ? {} : { ':prefix': sortPrefix }),
      },
    });
    return items.map((item) => JSON.parse(item.body as string) as T);
  }
}

const compare = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);

// ── workers ───────────────────────────────────────────────────────────────────────────────────────

export interface DynamoWorkerRegistryOptions {
  doc: DynamoDBDocumentClient;
  table: string;
}

/** One item per worker; `byEndpoint` (endpointId, lastSeenAt) answers "who was seen since". */
export class DynamoWorkerRegistry implements WorkerRegistry {
  private readonly doc: DynamoDBDocumentClient;
  private readonly table: string;

  constructor(options: DynamoWorkerRegistryOptions) {
    this.doc = options.doc;
    this.table = options.table;
  }

  async heartbeat(worker: WorkerRecord): Promise<void> {
    await this.doc.send(
      new PutCommand({
        TableName: this.table,
        Item: {
          workerId: worker.workerId,
          endpointId: worker.endpointId,
          lastSeenAt: worker.lastSeenAt,
          body: JSON.stringify(worker),
          expiresAtSec: toSec(worker.lastSeenAt) + workerLifeSec,
        },
      }),
    );
  }

  async get(workerId: string): Promise<WorkerRecord | undefined> {
    const result = await this.doc.send(
      new GetCommand({ TableName: this.table, Key: { workerId }, ConsistentRead: true }),
    );
    return result.Item ? (JSON.parse(result.Item.body as string) as WorkerRecord) : undefined;
  }

  async list(endpointId: string, sinceMs: number): Promise<WorkerRecord[]> {
    const items = await queryAll(this.doc, {
      TableName: this.table,
      IndexName: dynamoSchema.workers.indexes.byEndpoint.indexName,
      KeyConditionExpression: 'endpointId = :ep AND lastSeenAt >= :since',
      ExpressionAttributeValues: { ':ep': endpointId, ':since': sinceMs },
    });
    return items
      .map((item) => JSON.parse(item.body as string) as WorkerRecord)
      .sort((a, b) => compare(a.workerId, b.workerId));
  }

  async remove(workerId: string): Promise<void> {
    await this.doc.send(new DeleteCommand({ TableName: this.table, Key: { workerId } }));
  }
}
