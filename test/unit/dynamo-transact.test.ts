/**
 * `transact` (core/adapters/aws/dynamo/client.ts): a transaction DynamoDB cancelled only because
 * another transaction held one of its items wrote nothing, so it is sent again; a cancellation for any
 * other reason (a failed condition: a lost race) goes to the caller at once, untouched.
 */
import type { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { describe, expect, it } from 'vitest';
import { cancellationReasons, transact } from '../../core/adapters/aws/dynamo.js';

const cancelled = (...codes: string[]) =>
  Object.assign(new Error('Transaction cancelled'), {
    name: 'TransactionCanceledException',
    CancellationReasons: codes.map((Code) => ({ Code })),
  });

/** A document client that throws the given errors in turn, then succeeds; counts the sends. */
function scripted(...errors: Error[]) {
  let sends = 0;
  const doc = {
    send: async () => {
      const error = errors[sends++];
      if (error) throw error;
      return {};
    },
  } as unknown as DynamoDBDocumentClient;
  return { doc, sends: () => sends };
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

  it('hands any other error to the caller at once', async () => {
    const throttled = Object.assign(new Error('slow down'), { name: 'ThrottlingException' });
    const client = scripted(throttled);
    await expect(transact(client.doc, items)).rejects.toBe(throttled);
    expect(client.sends()).toBe(1);
    expect(cancellationReasons(throttled)).toBeUndefined();
  });
});
