/** ControlStore on DynamoDB: the `control` table of `dynamoSchema`. */
import { UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { unmarshall } from '@aws-sdk/util-dynamodb';
import { conflict } from '../../../errors.js';
import type {
  ApiKeyRecord,
  AppRecord,
  ControlStore,
  EndpointProblem,
  EndpointRecord,
  EnvironmentRecord,
  StartFailureRecord,
  StartFailures,
  TaskStartCount,
  TaskStartFailureRecord,
} from '../../../ports.js';
import {
  BodyTableAdapter,
  compare,
  errorName,
  failedCondition,
  type Item,
  type TableOptions,
  transact,
} from './client.js';
import { dynamoSchema } from './schema.js';

/** Components are URI-encoded so a '#' inside a name never splits a key the wrong way. */
const enc = encodeURIComponent;

/**
 * The partition key of an endpoint's run of failed worker starts. Its own partition, not a sort key
 * beside `EP#<id>`: IAM's dynamodb:LeadingKeys fences partition keys only, and the agent that writes
 * this item must not be able to write the endpoint record (infra/isolation.ts). It has no `kind`, so
 * the byKind index never lists it.
 */
export const startFailuresKey = (endpointId: string) => ({ pk: `STARTS#${enc(endpointId)}`, sk: 'STARTS' });

export type DynamoControlStoreOptions = TableOptions;

/** A `STARTS#` item as the run it holds (its `countedTasks` are the store's own business). */
function startFailuresOf(item: Item): StartFailures {
  const problem =
    typeof item.problem === 'string' ? (JSON.parse(item.problem) as EndpointProblem) : undefined;
  return { failedStarts: Number(item.failedStarts ?? 0), ...(problem ? { problem } : {}) };
}

/**
 * One item per record, keyed for its get (`APP#<app>`, `ENV#<app>#<env>`, `EP#<id>`, `KEY#<hash>`,
 * `KEYID#<id>`), listed through the `byKind` GSI. An API key is two items written in one transaction:
 * `KEY#<hash>` (the lookup on every request, and the uniqueness of the hash) and `KEYID#<id>` (list
 * and delete by id). Deleting an app or environment does not cascade (the CLI removes the parts first).
 */
export class DynamoControlStore
  extends BodyTableAdapter
  implements ControlStore, StartFailureRecord, TaskStartFailureRecord
{
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

  /** A deploy writes the record: whatever made the endpoint's workers fail may be fixed by it. */
  async putEndpoint(endpoint: EndpointRecord): Promise<void> {
    const sort = `${enc(endpoint.app)}#${enc(endpoint.env)}#${enc(endpoint.id)}`;
    await this.put(`EP#${enc(endpoint.id)}`, 'EP', endpoint, 'EP', sort);
    await this.clearStartFailures(endpoint.id);
  }

  async startFailures(endpointId: string): Promise<StartFailures | undefined> {
    const item = await this.table.getItem(startFailuresKey(endpointId));
    return item ? startFailuresOf(item) : undefined;
  }

  async addFailedStart(endpointId: string): Promise<number> {
    // ADD is atomic: agents of several tasks failing at once each count once.
    const result = await this.table.doc.send(
      new UpdateCommand({
        TableName: this.table.name,
        Key: startFailuresKey(endpointId),
        UpdateExpression: 'ADD failedStarts :one',
        ExpressionAttributeValues: { ':one': 1 },
        ReturnValues: 'UPDATED_NEW',
      }),
    );
    return Number(result.Attributes?.failedStarts ?? 1);
  }

  /**
   * The scaler's count of a task that could not start (functions/scaler.ts recordTaskStartFailure),
   * once per task: the item keeps the ARNs of the tasks it counted in a string set, `countedTasks`,
   * and the ADD is conditional on the task's ARN not being in it. ECS sends its events "on an at
   * least once basis. This means you might receive multiple copies of a given event"
   * (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/ecs_cwet_handling.html), and Lambda
   * may hand the function "the same event from Lambda multiple times"
   * (https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-error-handling.html): counted per
   * copy, one or two transient failures made the endpoint failing until the next deploy.
   *
   * Only while the run is below `atMost` (the threshold that makes the endpoint failing): past it one
   * more changes nothing, and the set holds at most `atMost` ARNs (about 100 bytes each), whatever ECS
   * starts before the scaler's count of 0 lands. A refused ADD answers the item as it is
   * (ReturnValuesOnConditionCheckFailure ALL_OLD, no second read), so the caller still writes a
   * verdict that is due and missing: its own earlier call that counted the task but stopped before
   * the verdict, or a first attempt of this write that landed and whose answer the SDK lost (the SDK
   * sends it again, and the copy finds the ARN in the set). A deploy or a worker's contact deletes
   * the item, the set with it (`clearStartFailures`).
   */
  async addTaskStartFailure(endpointId: string, taskArn: string, atMost: number): Promise<TaskStartCount> {
    try {
      const result = await this.table.doc.send(
        new UpdateCommand({
          TableName: this.table.name,
          Key: startFailuresKey(endpointId),
          UpdateExpression: 'ADD failedStarts :one, countedTasks :tasks',
          ConditionExpression:
            '(attribute_not_exists(countedTasks) OR NOT contains(countedTasks, :task)) AND ' +
            '(attribute_not_exists(failedStarts) OR failedStarts < :atMost)',
          ExpressionAttributeValues: {
            ':one': 1,
            // A JavaScript Set of strings is a DynamoDB string set (SS) to the document client.
            ':tasks': new Set([taskArn]),
            ':task': taskArn,
            ':atMost': atMost,
          },
          ReturnValues: 'ALL_NEW',
          ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
        }),
      );
      return { ...startFailuresOf(result.Attributes ?? {}), counted: true };
    } catch (error) {
      const failed = failedCondition(error);
      if (!failed) throw error;
      return { ...startFailuresOf(failed.item ? (unmarshall(failed.item) as Item) : {}), counted: false };
    }
  }

  async markFailing(endpointId: string, problem: EndpointProblem): Promise<void> {
    await this.table.doc.send(
      new UpdateCommand({
        TableName: this.table.name,
        Key: startFailuresKey(endpointId),
        UpdateExpression: 'SET problem = :problem',
        ExpressionAttributeValues: { ':problem': JSON.stringify(problem) },
      }),
    );
  }

  async clearStartFailures(endpointId: string): Promise<void> {
    await this.delete(startFailuresKey(endpointId).pk, 'STARTS');
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
    await this.clearStartFailures(id);
  }

  async putApiKey(key: ApiKeyRecord): Promise<void> {
    const idKey = { pk: `KEYID#${enc(key.id)}`, sk: 'KEY' };
    const previous = await this.table.getItem(idKey);
    const previousHash = previous?.hash as string | undefined;
    const body = JSON.stringify(key);
    try {
      // transact: a cancellation that wrote nothing (a conflict, throttling) is sent again.
      await transact(this.table.doc, [
        {
          Put: {
            TableName: this.table.name,
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
            TableName: this.table.name,
            Item: { pk: `KEY#${key.hash}`, sk: 'KEY', keyId: key.id, body },
            // The same hash under another id is a conflict.
            ConditionExpression: 'attribute_not_exists(pk) OR keyId = :id',
            ExpressionAttributeValues: { ':id': key.id },
          },
        },
        ...(previousHash !== undefined && previousHash !== key.hash
          ? [{ Delete: { TableName: this.table.name, Key: { pk: `KEY#${previousHash}`, sk: 'KEY' } } }]
          : []),
      ]);
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
    const item = await this.table.getItem(idKey);
    if (!item) return;
    await transact(this.table.doc, [
      { Delete: { TableName: this.table.name, Key: idKey } },
      {
        Delete: {
          TableName: this.table.name,
          Key: { pk: `KEY#${item.hash as string}`, sk: 'KEY' },
          // Only while it still belongs to this id.
          ConditionExpression: 'attribute_not_exists(pk) OR keyId = :id',
          ExpressionAttributeValues: { ':id': id },
        },
      },
    ]);
  }

  async close(): Promise<void> {}

  private async put(pk: string, sk: string, record: object, kind: string, kindSort: string): Promise<void> {
    await this.table.put({ pk, sk, kind, kindSort, body: JSON.stringify(record) });
  }

  private getBody<T>(pk: string, sk: string): Promise<T | undefined> {
    return this.table.getBody<T>({ pk, sk });
  }

  private async delete(pk: string, sk: string): Promise<void> {
    await this.table.delete({ pk, sk });
  }

  private list<T>(kind: string, sortPrefix?: string): Promise<T[]> {
    return this.table.queryBodies<T>({
      IndexName: dynamoSchema.control.indexes.byKind.indexName,
      KeyConditionExpression:
        sortPrefix === undefined ? 'kind = :kind' : 'kind = :kind AND begins_with(kindSort, :prefix)',
      ExpressionAttributeValues: {
        ':kind': kind,
        ...(sortPrefix === undefined ? {} : { ':prefix': sortPrefix }),
      },
    });
  }
}
