/**
 * JobStore, ControlStore and WorkerRegistry on DynamoDB. This file is the map; each concern has its
 * own module under dynamo/: schema.ts (tables, indexes, createTables), client.ts (paging, batching,
 * transactions), job-item.ts (a job as an item), counts.ts (health counts), job-store.ts,
 * control-store.ts, worker-registry.ts. docs/aws.md#dynamodb-write-amplification says why.
 *
 * Four tables, described once in `dynamoSchema` (the CDK stacks in infra/ build the same tables from
 * it; `createTables` builds them for tests and for emulators):
 *
 *   jobs     jobId                 one item per job (big fields go to the BlobStore), and the
 *                                  endpoints' count items `<endpointId>-#counts#<bucket>#<shard>`
 *                                  (queued jobs: `…#<shard>#urgent` and `…#low`)
 *   chunks   jobId + seq           seq 0 = the job's stream meta {nextSeq, cursor, and the tokens
 *                                  lastAppend, drainedBy}; seq ≥ 1 = chunks (or `skipped` marks)
 *   control  pk + sk               APP#<app> · ENV#<app>#<env> · EP#<id> · KEY#<hash> · KEYID#<id>
 *   workers  workerId              one item per worker, listed per endpoint through a GSI
 *
 * Rules these modules follow, each working around an AWS limit (docs/api.md#aws-front-door):
 * - Every job transition is a conditional write: create = `attribute_not_exists(jobId)`, update =
 *   `version = :expected` on a whole-item Put (the derived index attributes depend on fields a
 *   patch may not carry). Whoever writes first wins; the other gets the item as it is now. When the
 *   write changes what the job counts as in health, it goes in one transaction with the count items.
 * - TTL deletes an expired item "typically within a few days of their expiration" (the developer
 *   guide, https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/howitworks-ttl.html;
 *   "typically within two days of expiration", says the UpdateTimeToLive reference,
 *   https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_UpdateTimeToLive.html),
 *   and reads still return it until then, so every read filters `expiresAt > now` in code (GetItem)
 *   or with a FilterExpression (Query). `expiresAtSec` (epoch seconds) is only DynamoDB's garbage
 *   collection.
 *   Unfinished jobs get a day of grace on it so the engine can still find and stop them
 *   (listExpiredUnfinished) before DynamoDB drops them.
 * - Items stay under 400 KB: input, output, error, s3Config and webhook each have an inline budget
 *   (`inlineBudgetBytes`, 376 KB together); a value over its budget is stored in the BlobStore under
 *   `payloads/<jobId>/…` with a pointer in the item, and read back transparently. Stream chunks over
 *   300 KB likewise. (The bucket's lifecycle rule on `payloads/` is a backstop past the longest a job
 *   is kept, limits.jobLifetimeMaxMs; a retry writes the job's blobs anew, so none is older than its job.)
 * - No Scans. Every list is a Query on a GSI that projects only what the query reads; the jobs a
 *   list hands out are then read by key (BatchGetItem). GSIs are eventually consistent on AWS
 *   (usually well under a second), so a job written a moment ago can be missing from a list, never
 *   from `get`.
 */

export * from './dynamo/client.js';
export * from './dynamo/control-store.js';
export { countPartitionPattern } from './dynamo/counts.js';
export { inlineBudgetBytes, statusShardCount, streamChunkInlineBytes } from './dynamo/job-item.js';
export * from './dynamo/job-store.js';
export * from './dynamo/schema.js';
export * from './dynamo/worker-registry.js';
