/**
 * `transact`, `singleWrite` and `writeAtomically` (core/adapters/aws/dynamo/client.ts): a write
 * DynamoDB refused for a reason that wrote nothing is sent again; any other refusal (a failed
 * condition: a lost race) goes to the caller at once, untouched. The reasons come from AWS's
 * documentation and DynamoDB Local never gives them, so a scripted document client stands in:
 *  - a transaction cancelled with reasons TransactionConflict, ThrottlingError or
 *    ProvisionedThroughputExceeded (the others None) wrote nothing
 *    (https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html,
 *    "Cancellation reason codes");
 *  - a single write on an item an ongoing transaction holds fails with TransactionConflictException
 *    and wrote nothing
 *    (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html#transaction-conflict-handling).
 * The SDK retries neither (its retryable codes:
 * node_modules/@smithy/core/dist-es/submodules/retry/service-error-classification/constants.js).
 */
import type { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { describe, expect, it, vi } from 'vitest';
import { itemOf } from '../../core/adapters/aws/dynamo/job-item.js';
import {
  backoffDelayMs,
  batchWrite,
  cancellationReasons,
  DynamoJobStore,
  failedCondition,
  singleWrite,
  transact,
  writeAtomically,
} from '../../core/adapters/aws/dynamo.js';
import type { BlobStore } from '../../core/ports.js';
import { makeJob } from '../contract/helpers.js';

const cancelled = (...codes: string[]) =>
  Object.assign(new Error('Transaction cancelled'), {
    name: 'TransactionCanceledException',
    CancellationReasons: codes.map((Code) => ({ Code })),
  });

const conflictingWrite = () =>
  Object.assign(new Error('Transaction is ongoing for the item'), { name: 'TransactionConflictException' });

/**
 * A document client that throws the given errors in turn, then succeeds; counts the sends and
 * records the command of each (its class name).
 */
function scripted(...errors: Error[]) {
  let sends = 0;
  const commands: string[] = [];
  const doc = {
    send: async (command: object) => {
      commands.push(command.constructor.name);
      const error = errors[sends++];
      if (error) throw error;
      return {};
    },
  } as unknown as DynamoDBDocumentClient;
  return { doc, sends: () => sends, commands };
}

const items = [{ ConditionCheck: { TableName: 't', Key: { id: 'a' }, ConditionExpression: 'x' } }];

describe('transact', () => {
  it('sends again while the only reason is a conflict with another transaction', async () => {
    const client = scripted(
      cancelled('None', 'TransactionConflict'),
      cancelled('TransactionConflict', 'None'),
    );
    await transact(client.doc, items);
    expect(client.sends()).toBe(3);
  });

  it('hands a failed condition to the caller at once, even beside a conflict', async () => {
    const lost = cancelled('ConditionalCheckFailed', 'TransactionConflict');
    const client = scripted(lost);
    await expect(transact(client.doc, items)).rejects.toBe(lost);
    expect(client.sends()).toBe(1);
    expect(cancellationReasons(lost)?.[0]?.Code).toBe('ConditionalCheckFailed');
  });

  it('sends again a transaction cancelled for throughput (ThrottlingError, ProvisionedThroughputExceeded)', async () => {
    const throttled = scripted(cancelled('ThrottlingError', 'None'));
    await transact(throttled.doc, items);
    expect(throttled.sends()).toBe(2);
    const overProvisioned = scripted(cancelled('None', 'ProvisionedThroughputExceeded'));
    await transact(overProvisioned.doc, items);
    expect(overProvisioned.sends()).toBe(2);
  });

  it('hands a failed condition to the caller at once', async () => {
    const lost = cancelled('ConditionalCheckFailed');
    const client = scripted(lost);
    await expect(transact(client.doc, items)).rejects.toBe(lost);
    expect(client.sends()).toBe(1);
  });

  it('hands a cancellation with no retryable reason, or an unknown one, to the caller at once', async () => {
    for (const codes of [['None'], ['ThrottlingError', 'ValidationError']]) {
      const odd = cancelled(...codes);
      const client = scripted(odd);
      await expect(transact(client.doc, items)).rejects.toBe(odd);
      expect(client.sends()).toBe(1);
    }
  });

  it('hands any other error to the caller at once', async () => {
    const throttled = Object.assign(new Error('slow down'), { name: 'ThrottlingException' });
    const client = scripted(throttled);
    await expect(transact(client.doc, items)).rejects.toBe(throttled);
    expect(client.sends()).toBe(1);
    expect(cancellationReasons(throttled)).toBeUndefined();
  });
});

describe('the wait before a resend', () => {
  it('is a random share of an exponential ceiling, so writers refused together do not return together', () => {
    expect(backoffDelayMs(1, () => 0)).toBe(0);
    expect(backoffDelayMs(1, () => 0.999)).toBe(99);
    expect(backoffDelayMs(8, () => 0.999)).toBe(12_787);
    // Two writers refused in the same moment draw different waits.
    expect(backoffDelayMs(3, () => 0.2)).not.toBe(backoffDelayMs(3, () => 0.7));
  });
});

describe('batchWrite', () => {
  // BatchWriteItem answers the writes it could not make (throttling) as UnprocessedItems, with no
  // error: "If DynamoDB returns any unprocessed items, you should retry the batch operation on those
  // items ... we strongly recommend that you use an exponential backoff algorithm"
  // (https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_BatchWriteItem.html).
  const deletes = Array.from({ length: 30 }, (_, seq) => ({ DeleteRequest: { Key: { jobId: 'j', seq } } }));
  /** A document client that leaves the last `left(n)` writes of its nth BatchWriteItem unprocessed. */
  function leaving(left: (n: number) => number) {
    const sent: unknown[][] = [];
    const doc = {
      send: async (command: { input: { RequestItems: Record<string, unknown[]> } }) => {
        const requests = command.input.RequestItems.t ?? [];
        sent.push(requests);
        const kept = requests.slice(requests.length - Math.min(left(sent.length), requests.length));
        return kept.length > 0 ? { UnprocessedItems: { t: kept } } : {};
      },
    } as unknown as DynamoDBDocumentClient;
    return { doc, sent };
  }

  it('sends again what was left unprocessed, and only that, until nothing is left', async () => {
    const client = leaving((n) => [10, 4][n - 1] ?? 0);
    await batchWrite(client.doc, 't', deletes);
    expect(client.sent.map((requests) => requests.length)).toEqual([25, 10, 4, 5]);
    expect(client.sent[1]).toEqual(deletes.slice(15, 25));
    expect(client.sent[2]).toEqual(deletes.slice(21, 25));
  });

  it('throws, naming the table, when DynamoDB keeps leaving writes unprocessed: none is dropped quietly', async () => {
    vi.useFakeTimers();
    try {
      const client = leaving(() => 1);
      const done = expect(batchWrite(client.doc, 't', deletes)).rejects.toThrow(
        'DynamoDB kept refusing writes to t',
      );
      // The backoff's waits, up to 12.8 s each, on the fake clock.
      await vi.runAllTimersAsync();
      await done;
      // The first send and eight resends of its last write; the second group is never sent.
      expect(client.sent).toHaveLength(9);
    } finally {
      vi.useRealTimers();
    }
  });
});

describe('singleWrite and writeAtomically', () => {
  const put = { Put: { TableName: 't', Item: { id: 'a' }, ConditionExpression: 'attribute_not_exists(id)' } };
  const count = { Update: { TableName: 't', Key: { id: 'n' }, UpdateExpression: 'ADD n :one' } };

  it('sends a single write again while a transaction holds its item (TransactionConflictException)', async () => {
    const client = scripted(conflictingWrite(), conflictingWrite());
    expect(await singleWrite(() => client.doc.send({} as never))).toEqual({});
    expect(client.sends()).toBe(3);
  });

  it('a write alone is one PutItem, sent again after a TransactionConflictException', async () => {
    const client = scripted(conflictingWrite());
    await writeAtomically(client.doc, put, []);
    expect(client.commands).toEqual(['PutCommand', 'PutCommand']);
  });

  it('a write with count items is one TransactWriteItems, sent again after a throttled cancellation', async () => {
    const client = scripted(cancelled('ThrottlingError', 'None'));
    await writeAtomically(client.doc, put, [count]);
    expect(client.commands).toEqual(['TransactWriteCommand', 'TransactWriteCommand']);
  });

  it('hands a failed condition to the caller at once, with the item as it is now (ALL_OLD)', async () => {
    const item = { id: { S: 'a' } };
    const single = Object.assign(new Error('The conditional request failed'), {
      name: 'ConditionalCheckFailedException',
      Item: item,
    });
    const client = scripted(single);
    await expect(writeAtomically(client.doc, put, [])).rejects.toBe(single);
    expect(client.sends()).toBe(1);
    expect(failedCondition(single)).toEqual({ item });
    const inTransaction = Object.assign(cancelled('ConditionalCheckFailed', 'None'), {
      CancellationReasons: [{ Code: 'ConditionalCheckFailed', Item: item }, { Code: 'None' }],
    });
    expect(failedCondition(inTransaction)).toEqual({ item });
    expect(failedCondition(inTransaction, 1)).toBeUndefined();
    expect(failedCondition(conflictingWrite())).toBeUndefined();
  });
});

describe('DynamoJobStore: single writes on a job a transaction holds', () => {
  const now = Date.now();
  const running = makeJob({
    endpointId: 'ep',
    createdAt: now,
    status: 'IN_PROGRESS',
    workerId: 'w1',
    leaseUntil: now,
  });
  const blobs = {} as BlobStore; // nothing here is over an inline budget

  /** A job store on a client that answers GetItem with `running` and refuses the first `refused` command. */
  function storeRefusing(refused: string) {
    const commands: string[] = [];
    let refusedOnce = false;
    const doc = {
      send: async (command: object) => {
        const name = command.constructor.name;
        commands.push(name);
        if (name === 'GetCommand') return { Item: itemOf(running, {}) };
        if (name === refused && !refusedOnce) {
          refusedOnce = true;
          throw conflictingWrite();
        }
        return {};
      },
    } as unknown as DynamoDBDocumentClient;
    return { jobs: new DynamoJobStore({ doc, tables: { jobs: 'jobs', chunks: 'chunks' }, blobs }), commands };
  }

  it('update() that changes no count (one PutItem) is sent again', async () => {
    const store = storeRefusing('PutCommand');
    const result = await store.jobs.update(running, { output: { step: 1 } });
    expect(result).toMatchObject({ ok: true, job: { output: { step: 1 }, version: running.version + 1 } });
    expect(store.commands).toEqual(['GetCommand', 'PutCommand', 'PutCommand']);
  });

  it("renewLease's UpdateItem is sent again", async () => {
    const store = storeRefusing('UpdateCommand');
    const renewed = await store.jobs.renewLease({
      jobId: running.id,
      endpointId: running.endpointId,
      workerId: 'w1',
      leaseUntil: now + 60_000,
      nowMs: now,
    });
    expect(renewed).toBe(true);
    expect(store.commands).toEqual(['UpdateCommand', 'UpdateCommand']);
  });
});
