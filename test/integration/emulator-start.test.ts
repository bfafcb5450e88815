/**
 * The emulator fixture itself: a port picked free can be taken before DynamoDB Local binds it (CI saw
 * "DynamoDB Local exited with code 1" when another server took it); the fixture starts again on a new
 * port, and any other early exit names the JVM's own error.
 */
import { once } from 'node:events';
import { createServer } from 'node:net';
import { ListTablesCommand } from '@aws-sdk/client-dynamodb';
import { afterAll, describe, expect, it } from 'vitest';
import { dynamoClientFor, type Emulator, startDynamoLocal } from '../support/emulators.js';

describe('startDynamoLocal', () => {
  const started: Emulator[] = [];
  const taken = createServer();
  afterAll(async () => {
    await Promise.all(started.map((emulator) => emulator.stop()));
    taken.close();
  });

  it('starts on another port when the one it picked is taken before the JVM binds it', async () => {
    taken.listen(0, '0.0.0.0');
    await once(taken, 'listening');
    const takenPort = (taken.address() as { port: number }).port;
    const dynamo = await startDynamoLocal({ firstPort: takenPort });
    started.push(dynamo);
    expect(new URL(dynamo.endpoint).port).not.toBe(String(takenPort));
    const client = dynamoClientFor(dynamo.endpoint);
    try {
      const answer = await client.send(new ListTablesCommand({}));
      expect(answer.TableNames).toEqual([]);
    } finally {
      client.destroy();
    }
  }, 60_000);
});
