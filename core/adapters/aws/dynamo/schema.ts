/**
 * The DynamoDB tables, described once: `createTables` builds them for tests and emulators, and the
 * CDK stacks in infra/ build the same tables from `dynamoSchema`. What lives in each table is in
 * ../dynamo.ts.
 */
import {
  type AttributeDefinition,
  CreateTableCommand,
  type DynamoDBClient,
  type GlobalSecondaryIndex,
  type KeySchemaElement,
  UpdateTimeToLiveCommand,
} from '@aws-sdk/client-dynamodb';
import { bigFields, countFields } from './job-item.js';

export type KeyType = 'S' | 'N';
export interface KeyAttr {
  readonly name: string;
  readonly type: KeyType;
}
/**
 * What a GSI copies of each item besides the keys (the table's and its own, always projected):
 * nothing, or the named attributes. Never ALL: an index holds a copy of what it projects, and every
 * write that changes a projected attribute is written again to the index
 * (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/GSI.html#GSI.Projections).
 * A query that needs the whole item reads it by key from the table (BatchGetItem).
 */
export type Projection =
  | { readonly type: 'KEYS_ONLY' }
  | { readonly type: 'INCLUDE'; readonly attributes: readonly string[] };
export interface IndexSpec {
  readonly indexName: string;
  readonly partitionKey: KeyAttr;
  readonly sortKey: KeyAttr;
  readonly projection: Projection;
}
export interface TableSpec {
  readonly partitionKey: KeyAttr;
  readonly sortKey?: KeyAttr;
  /** DynamoDB's TTL attribute (epoch seconds); absent when the table has none. */
  readonly ttlAttribute?: string;
  readonly indexes: Readonly<Record<string, IndexSpec>>;
}

/**
 * The tables and indexes, in one place: `createTables` builds them and infra/ must build the same.
 * Every table is PAY_PER_REQUEST; each index projects only what the queries on it read.
 */
export const dynamoSchema = {
  jobs: {
    partitionKey: { name: 'jobId', type: 'S' },
    ttlAttribute: 'expiresAtSec',
    indexes: {
      /**
       * listByStatus and listRecent: `endpointStatus` = `<endpointId>#<status>`, by createdAt. The
       * lists order and page on the keys and filter on expiresAt, then read the jobs they hand out
       * by key.
       */
      byEndpointStatus: {
        indexName: 'byEndpointStatus',
        partitionKey: { name: 'endpointStatus', type: 'S' },
        sortKey: { name: 'createdAt', type: 'N' },
        projection: { type: 'INCLUDE', attributes: ['expiresAt'] },
      },
      /**
       * listExpiredUnfinished (IN_QUEUE/IN_PROGRESS shards) and deleteExpired (final shards).
       * deleteExpired reads what it must undo from the index alone: the blob refs to delete, and
       * the endpoint and retries its counts move by.
       */
      byStatusExpiry: {
        indexName: 'byStatusExpiry',
        partitionKey: { name: 'statusShard', type: 'S' },
        sortKey: { name: 'expiresAt', type: 'N' },
        projection: {
          type: 'INCLUDE',
          attributes: ['endpointId', 'retries', ...bigFields.map((field) => `${field}Ref`)],
        },
      },
      /**
       * counts (health), per endpoint by expiresAt, for two kinds of item: the endpoint's count
       * items (endpointId `<endpointId>#COUNTS`, one per expiry bucket, ./counts.ts) and its jobs
       * (status and retries: those of the jobs that expired in the current bucket are taken back).
       */
      byEndpointExpiry: {
        indexName: 'byEndpointExpiry',
        partitionKey: { name: 'endpointId', type: 'S' },
        sortKey: { name: 'expiresAt', type: 'N' },
        projection: { type: 'INCLUDE', attributes: ['status', 'retries', ...countFields] },
      },
      /**
       * listOverdue. Sparse: only IN_PROGRESS jobs carry `overdueAt` = min(leaseUntil,
       * startedAt + policy.executionTimeoutMs), so the index holds just the running jobs.
       */
      byStatusOverdue: {
        indexName: 'byStatusOverdue',
        partitionKey: { name: 'statusShard', type: 'S' },
        sortKey: { name: 'overdueAt', type: 'N' },
        projection: { type: 'KEYS_ONLY' },
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
        projection: { type: 'INCLUDE', attributes: ['body'] },
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
        projection: { type: 'INCLUDE', attributes: ['body'] },
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
      Projection: {
        ProjectionType: index.projection.type,
        ...(index.projection.type === 'INCLUDE'
          ? { NonKeyAttributes: [...index.projection.attributes] }
          : {}),
      },
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
