/** WorkerRegistry on DynamoDB: the `workers` table of `dynamoSchema`. */
import type { WorkerRecord, WorkerRegistry } from '../../../ports.js';
import { BodyTableAdapter, compare, type TableOptions, toSec } from './client.js';
import { dynamoSchema } from './schema.js';

/** Workers not seen for a day are garbage. */
const workerLifeSec = 24 * 3600;

export type DynamoWorkerRegistryOptions = TableOptions;

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

  async remove(workerId: string): Promise<void> {
    await this.table.delete({ workerId });
  }
}
