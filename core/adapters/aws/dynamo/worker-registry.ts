/** WorkerRegistry on DynamoDB: the `workers` table of `dynamoSchema`. */
import { GetCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import type { WorkerRecord, WorkerRegistry } from '../../../ports.js';
import { BodyTableAdapter, compare, type TableOptions, toSec } from './client.js';
import { dynamoSchema } from './schema.js';

/** Workers not seen for a day are garbage. */
const workerLifeSec = 24 * 3600;

export type DynamoWorkerRegistryOptions = TableOptions;

/**
 * The key of a worker's stop-signal item: a sibling of its registry item, not an attribute on it,
 * because heartbeats are whole-item PutItems, which replace every attribute and would erase a
 * counter kept beside the record (https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_PutItem.html).
 * It starts with the workerId, so the agent's LeadingKeys fence (`<endpointId>-*`, infra/isolation.ts)
 * covers it; it has no endpointId, so the byEndpoint index (sparse) never lists it.
 */
export const stopSignalKey = (workerId: string) => `${workerId}#stop`;

/** One item per worker; `byEndpoint` (endpointId, lastSeenAt) answers "who was seen since". */
export class DynamoWorkerRegistry extends BodyTableAdapter implements WorkerRegistry {
  async heartbeat(worker: WorkerRecord): Promise<void> {
    await this.table.put({
      workerId: worker.workerId,
      endpointId: worker.endpointId,
      lastSeenAt: worker.lastSeenAt,
      body: JSON.stringify(worker),
      expiresAtSec: toSec(worker.lastSeenAt) + workerLifeSec,
    });
  }

  get(workerId: string): Promise<WorkerRecord | undefined> {
    return this.table.getBody<WorkerRecord>({ workerId });
  }

  async list(endpointId: string, sinceMs: number): Promise<WorkerRecord[]> {
    const workers = await this.table.queryBodies<WorkerRecord>({
      IndexName: dynamoSchema.workers.indexes.byEndpoint.indexName,
      KeyConditionExpression: 'endpointId = :ep AND lastSeenAt >= :since',
      ExpressionAttributeValues: { ':ep': endpointId, ':since': sinceMs },
    });
    return workers.sort((a, b) => compare(a.workerId, b.workerId));
  }

  /**
   * Tells the worker's agent that a job it holds may have to stop (core/adapters/aws/stop-signals.ts):
   * one small UpdateItem that bumps a counter. TTL drops the item a day after the last signal.
   */
  async signalStop(workerId: string, nowMs: number): Promise<void> {
    await this.table.doc.send(
      new UpdateCommand({
        TableName: this.table.name,
        Key: { workerId: stopSignalKey(workerId) },
        UpdateExpression: 'ADD stopSignal :one SET expiresAtSec = :expires',
        ExpressionAttributeValues: { ':one': 1, ':expires': toSec(nowMs) + workerLifeSec },
      }),
    );
  }

  /** The worker's stop-signal counter (0 before the first signal), read strongly consistent. */
  async stopSignal(workerId: string): Promise<number> {
    const { Item } = await this.table.doc.send(
      new GetCommand({
        TableName: this.table.name,
        Key: { workerId: stopSignalKey(workerId) },
        ConsistentRead: true,
        ProjectionExpression: 'stopSignal',
      }),
    );
    return typeof Item?.stopSignal === 'number' ? Item.stopSignal : 0;
  }

  async remove(workerId: string): Promise<void> {
    await this.table.delete({ workerId });
  }
}
