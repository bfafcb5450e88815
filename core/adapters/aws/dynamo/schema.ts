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

export type KeyType = 'S' | 'N';
export interface KeyAttr {
  readonly name: string;
  readonly type: KeyType;
}
export interface IndexSpec {
  readonly indexName: string;
  readonly partitionKey: KeyAttr;
  readonly sortKey: KeyAttr;
}
export interface TableSpec {
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
