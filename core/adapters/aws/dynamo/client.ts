/**
 * What every DynamoDB adapter here shares: the document client, paging, batching, and the few error
 * and number rules of DynamoDB's API.
 */
import type { AttributeValue, DynamoDBClient } from '@aws-sdk/client-dynamodb';
import {
  BatchGetCommand,
  BatchWriteCommand,
  DeleteCommand,
  DynamoDBDocumentClient,
  GetCommand,
  PutCommand,
  QueryCommand,
  type QueryCommandInput,
  TransactWriteCommand,
  type TransactWriteCommandInput,
} from '@aws-sdk/lib-dynamodb';
import { FerryError, internal } from '../../../errors.js';

export type Item = Record<string, unknown>;

export const errorName = (error: unknown): string | undefined =>
  error instanceof Error ? error.name : undefined;
export const isConditionFailure = (error: unknown): boolean =>
  errorName(error) === 'ConditionalCheckFailedException';

export function checkLimit(limit: number): number {
  if (!Number.isInteger(limit) || limit < 1) throw internal(`limit must be a positive integer, got ${limit}`);
  return limit;
}

/** Epoch seconds, rounded up: DynamoDB's TTL attribute. */
export const toSec = (ms: number): number => Math.ceil(ms / 1000);

/** Code points, not locale: the order the local adapter's SQL gives. */
export const compare = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);

/**
 * The document client every adapter here relies on. removeUndefinedValues: a JobPatch removes a field
 * by setting it to undefined, and records carry optional fields; without it the SDK throws on them.
 * Composition roots build their document client here, never by hand.
 */
export function documentClient(client: DynamoDBClient): DynamoDBDocumentClient {
  return DynamoDBDocumentClient.from(client, { marshallOptions: { removeUndefinedValues: true } });
}

/** Every page of a Query; `stop` ends early once the caller has enough. */
export async function queryAll(
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

/**
 * How long to wait before resend `attempt` (1, 2, ...): a random time up to an exponential ceiling
 * (100 ms, 200 ms, ... 12.8 s), "full jitter". The writers that DynamoDB refused together (a
 * transaction conflict on an endpoint's count items, throttling of one partition) were in step; with
 * a fixed delay they came back in step and collided again, every attempt, until they gave up.
 */
export function backoffDelayMs(attempt: number, random: () => number = Math.random): number {
  return Math.floor(random() * 50 * 2 ** attempt);
}

/**
 * Waits before resending what DynamoDB refused or left unprocessed (throttling, conflicts), or gives
 * up after the eighth resend.
 */
async function backoff(attempt: number, what: string): Promise<void> {
  if (attempt > 8) throw new FerryError('failed', `DynamoDB kept refusing ${what}`);
  if (attempt > 0) await new Promise((resolve) => setTimeout(resolve, backoffDelayMs(attempt)));
}

/** BatchWrite in groups of 25, resending what DynamoDB left unprocessed with backoff. */
export async function batchWrite(
  doc: DynamoDBDocumentClient,
  table: string,
  requests: { PutRequest?: { Item: Item }; DeleteRequest?: { Key: Item } }[],
): Promise<void> {
  for (let i = 0; i < requests.length; i += 25) {
    let pending = requests.slice(i, i + 25);
    for (let attempt = 0; pending.length > 0; attempt++) {
      await backoff(attempt, `writes to ${table}`);
      const result = await doc.send(new BatchWriteCommand({ RequestItems: { [table]: pending } }));
      pending = (result.UnprocessedItems?.[table] ?? []) as typeof pending;
    }
  }
}

/**
 * The items of `keys` (distinct keys), read strongly consistent in groups of 100 (BatchGetItem's
 * limit), resending unprocessed keys with backoff. Missing items are absent from the answer, whose
 * order is DynamoDB's: callers match by key.
 */
export async function batchGet(doc: DynamoDBDocumentClient, table: string, keys: Item[]): Promise<Item[]> {
  const items: Item[] = [];
  for (let i = 0; i < keys.length; i += 100) {
    let pending = keys.slice(i, i + 100);
    for (let attempt = 0; pending.length > 0; attempt++) {
      await backoff(attempt, `reads of ${table}`);
      const result = await doc.send(
        new BatchGetCommand({ RequestItems: { [table]: { Keys: pending, ConsistentRead: true } } }),
      );
      items.push(...((result.Responses?.[table] ?? []) as Item[]));
      pending = (result.UnprocessedKeys?.[table]?.Keys ?? []) as Item[];
    }
  }
  return items;
}

/** Why DynamoDB cancelled a transaction, per action in order (`Code` None for the ones that were fine). */
export interface CancellationReason {
  Code?: string;
  /** The item as it is, raw, when the action asked for ReturnValuesOnConditionCheckFailure ALL_OLD. */
  Item?: Record<string, AttributeValue>;
}

/** The reasons of a cancelled transaction, or undefined when `error` is something else. */
export function cancellationReasons(error: unknown): CancellationReason[] | undefined {
  if (errorName(error) !== 'TransactionCanceledException') return undefined;
  return (error as { CancellationReasons?: CancellationReason[] }).CancellationReasons ?? [];
}

/**
 * Why DynamoDB may cancel a transaction that wrote nothing and may be sent again as it is: another
 * transaction held one of its items, or a table or index ran out of throughput. The SDK retries
 * neither: a TransactionCanceledException is not among the errors it classifies as retryable.
 * https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html
 * ("Cancellation reason codes")
 */
const retryableCancellations = new Set([
  'TransactionConflict',
  'ThrottlingError',
  'ProvisionedThroughputExceeded',
]);

/** A cancellation every action of which was fine (None) or retryable, at least one retryable. */
function isRetryableCancellation(error: unknown): boolean {
  const reasons = cancellationReasons(error);
  if (!reasons) return false;
  const retryable = (reason: CancellationReason) => retryableCancellations.has(reason.Code ?? '');
  return reasons.some(retryable) && reasons.every((reason) => reason.Code === 'None' || retryable(reason));
}

/** `send`, sent again with backoff while it fails with an error `retryable` says wrote nothing. */
async function retrying<T>(
  what: string,
  send: () => Promise<T>,
  retryable: (error: unknown) => boolean,
): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    await backoff(attempt, what);
    try {
      return await send();
    } catch (error) {
      if (!retryable(error)) throw error;
    }
  }
}

/**
 * TransactWriteItems, sent again while DynamoDB cancels it only for reasons that wrote nothing
 * (`retryableCancellations`). Any other cancellation (a failed condition) is the caller's, as the SDK
 * threw it.
 * https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html#transaction-conflict-handling
 *
 * The SDK's own retries (a lost answer: a reset connection, a timeout, a 5xx) send the same request
 * again, ClientRequestToken included: the token is filled in by the serializer (the input schema
 * marks it idempotencyToken), which runs once, before the retry middleware
 * (@aws-sdk/client-dynamodb 3.1162: TransactWriteItemsInput$, `serialize` step; retryMiddleware is
 * in `finalizeRequest`). DynamoDB applies a transaction with the same token once within 10 minutes
 * and answers the retry as it answered the first:
 * https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html#DDB-TransactWriteItems-request-ClientRequestToken
 * Our own retries here build a new request (a new token): only cancelled ones, which wrote nothing.
 */
export async function transact(
  doc: DynamoDBDocumentClient,
  items: NonNullable<TransactWriteCommandInput['TransactItems']>,
): Promise<void> {
  await retrying(
    'a transaction',
    () => doc.send(new TransactWriteCommand({ TransactItems: items })),
    isRetryableCancellation,
  );
}

/**
 * A single PutItem, UpdateItem or DeleteItem on an item a transaction may hold, sent again with
 * backoff while it fails with TransactionConflictException: the transaction was in progress on that
 * item, so this write was refused and wrote nothing. The SDK does not retry it.
 * https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html#transaction-conflict-handling
 */
export function singleWrite<T>(send: () => Promise<T>): Promise<T> {
  return retrying('a write', send, (error) => errorName(error) === 'TransactionConflictException');
}

type TransactItem = NonNullable<TransactWriteCommandInput['TransactItems']>[number];
/** A conditional write of one item, as `writeAtomically` takes it. */
export type AtomicWrite =
  | { Put: NonNullable<TransactItem['Put']> }
  | { Delete: NonNullable<TransactItem['Delete']> };

/**
 * `action` and `withItems` (count updates) all or none: one TransactWriteItems, or the single write
 * alone when there is nothing with it (a transactional write costs twice the write units). Either
 * way sent again while DynamoDB refuses it for a reason that wrote nothing (`transact`,
 * `singleWrite`). A failed condition comes back as the SDK threw it (`failedCondition` reads it).
 */
export async function writeAtomically(
  doc: DynamoDBDocumentClient,
  action: AtomicWrite,
  withItems: readonly TransactItem[],
): Promise<void> {
  if (withItems.length > 0) return transact(doc, [action, ...withItems]);
  await singleWrite(() =>
    'Put' in action ? doc.send(new PutCommand(action.Put)) : doc.send(new DeleteCommand(action.Delete)),
  );
}

/**
 * When `error` is a failed condition of a single write, or of the action at `at` of a cancelled
 * transaction: the item as it is now (raw), when the write asked for
 * ReturnValuesOnConditionCheckFailure ALL_OLD and the item exists. Undefined for any other error.
 */
export function failedCondition(
  error: unknown,
  at = 0,
): { item?: Record<string, AttributeValue> | undefined } | undefined {
  const reason = cancellationReasons(error)?.[at];
  if (reason) return reason.Code === 'ConditionalCheckFailed' ? { item: reason.Item } : undefined;
  if (!isConditionFailure(error)) return undefined;
  return { item: (error as { Item?: Record<string, AttributeValue> }).Item };
}

/**
 * What a write that threw `error` did to the table, as far as the error alone tells:
 *
 * - 'refused': nothing, whatever attempt came before. A failed condition; a cancelled transaction
 *   (its actions are all or nothing, and a retry of a token whose first attempt committed answers
 *   success, not a cancellation: `transact`); a request DynamoDB found invalid, as it would have
 *   found every attempt of the same request.
 * - 'pending': the transaction of this request token is still in progress, and may yet commit.
 *   AWS: "The transaction with the given request token is already in progress", with settings that
 *   "help ensure that the client retries will trigger completion of the ongoing TransactWriteItems
 *   request" (https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html,
 *   Errors: TransactionInProgressException).
 * - 'unknown': anything else (throttling, a 5xx, a timeout, a reset connection). The SDK re-sends
 *   a request whose answer it lost, so an earlier attempt may have been applied before the last
 *   one failed ("If an UpdateItem operation fails, the application could simply retry the
 *   operation. This would risk updating the counter twice",
 *   https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/WorkingWithItems.html#WorkingWithItems.AtomicCounters).
 */
export function writeOutcome(error: unknown): 'refused' | 'pending' | 'unknown' {
  const name = errorName(error);
  if (name === 'TransactionInProgressException') return 'pending';
  const refused = ['ConditionalCheckFailedException', 'TransactionCanceledException', 'ValidationException'];
  return name !== undefined && refused.includes(name) ? 'refused' : 'unknown';
}

/** Where an adapter of one table finds it: the document client (documentClient) and the table name. */
export interface TableOptions {
  doc: DynamoDBDocumentClient;
  table: string;
}

/**
 * One table of records stored as a JSON `body` next to their key attributes: the shape of the
 * control and worker tables. The adapters add their own keys and indexes on top.
 */
export class BodyTable {
  readonly doc: DynamoDBDocumentClient;
  readonly name: string;

  constructor(options: TableOptions) {
    this.doc = options.doc;
    this.name = options.table;
  }

  async put(item: Item): Promise<void> {
    await this.doc.send(new PutCommand({ TableName: this.name, Item: item }));
  }

  /** The whole item, read strongly consistent. */
  async getItem(key: Item): Promise<Item | undefined> {
    const result = await this.doc.send(
      new GetCommand({ TableName: this.name, Key: key, ConsistentRead: true }),
    );
    return result.Item as Item | undefined;
  }

  async getBody<T>(key: Item): Promise<T | undefined> {
    const item = await this.getItem(key);
    return item ? (JSON.parse(item.body as string) as T) : undefined;
  }

  async delete(key: Item): Promise<void> {
    await this.doc.send(new DeleteCommand({ TableName: this.name, Key: key }));
  }

  /** The bodies of every item a Query on an index finds. */
  async queryBodies<T>(input: Omit<QueryCommandInput, 'TableName'>): Promise<T[]> {
    const items = await queryAll(this.doc, { ...input, TableName: this.name });
    return items.map((item) => JSON.parse(item.body as string) as T);
  }
}

/** An adapter over one BodyTable (the control store, the worker registry). */
export abstract class BodyTableAdapter {
  protected readonly table: BodyTable;

  constructor(options: TableOptions) {
    this.table = new BodyTable(options);
  }
}
