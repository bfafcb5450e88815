/**
 * The emulator fixture itself: a port picked free can be taken before DynamoDB Local binds it (CI saw
 * "DynamoDB Local exited with code 1" when another server took it); the fixture starts again on a new
 * port, and any other early exit names the JVM's own error.
 */
import { once } from 'node:events';
import { createServer } from 'node:net';
import { DescribeTableCommand, ListTablesCommand } from '@aws-sdk/client-dynamodb';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { dynamoClientFor, type Emulator, startAwsFixture, startDynamoLocal } from '../support/emulators.js';

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

describe("the run's shared DynamoDB Local", () => {
  it('gives each fixture tables of its own in one JVM, and a fixture that stops deletes only its own', async () => {
    // Under vitest.config.ts's global setup; without it each fixture would start a JVM of its own.
    expect(inject('ferryRunDir')).toEqual(expect.any(String));
    const [a, b] = await Promise.all([startAwsFixture(), startAwsFixture()]);
    const client = dynamoClientFor(a.dynamo.endpoint);
    const exists = (TableName: string) =>
      client.send(new DescribeTableCommand({ TableName })).then(
        () => true,
        (error: Error) => (error.name === 'ResourceNotFoundException' ? false : Promise.reject(error)),
      );
    try {
      expect(b.dynamo.endpoint).toBe(a.dynamo.endpoint);
      expect(b.tables.jobs).not.toBe(a.tables.jobs);
      await a.stop();
      expect(await exists(a.tables.jobs)).toBe(false);
      expect(await exists(b.tables.jobs)).toBe(true);
      // The shared emulator outlives a fixture's stop: b still works.
      expect(await b.jobs().get('nothing-here', Date.now())).toBeUndefined();
    } finally {
      await Promise.all([a.stop(), b.stop()]);
      client.destroy();
    }
  }, 120_000);
});
