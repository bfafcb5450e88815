/**
 * Scale from zero through the Lambda handlers (AWS in a box): a client's /run reaches the api Lambda,
 * whose change feed nudges the scaler (an async Lambda invoke, answered here by running the scaler
 * handler in process over the same DynamoDB Local and fauxqs) before /run answers; the scaler sets the
 * endpoint's ECS desiredCount through an injected ECS client. ECS itself is modelled in
 * test/unit/scaling-sim.test.ts.
 */
import { DescribeServicesCommand, UpdateServiceCommand } from '@aws-sdk/client-ecs';
import { InvokeCommand, type LambdaClient } from '@aws-sdk/client-lambda';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { systemClock } from '../../core/clock.js';
import type { ManifestEndpoint } from '../../core/manifest.js';
import { createScaler, type ScalerDeps } from '../../functions/scaler.js';
import { sampleResources } from '../infra/fixtures.js';
import { recordFor } from '../support/endpoints.js';
import { type AwsBox, boxApiKey, startAwsBox } from './box.js';

const services = new Map<string, number>();
const updates: { service: string; desiredCount: number }[] = [];
const invokes: unknown[] = [];
const ecs = {
  async send(command: unknown): Promise<unknown> {
    if (command instanceof DescribeServicesCommand) {
      return {
        services: (command.input.services ?? [])
          .filter((n) => services.has(n))
          .map((n) => ({ serviceName: n, status: 'ACTIVE', desiredCount: services.get(n) })),
      };
    }
    if (command instanceof UpdateServiceCommand) {
      updates.push({ service: command.input.service!, desiredCount: command.input.desiredCount! });
      services.set(command.input.service!, command.input.desiredCount!);
      return {};
    }
    throw new Error('unexpected ECS command');
  },
};

let box: AwsBox;
let scalerDeps: ScalerDeps;
/** Lambda as the api function sees it: an Event invoke of the scaler runs it here. */
const lambda = {
  async send(command: unknown): Promise<unknown> {
    if (!(command instanceof InvokeCommand)) throw new Error('unexpected Lambda command');
    expect(command.input).toMatchObject({ FunctionName: 'ferry-scaler', InvocationType: 'Event' });
    const payload = JSON.parse(Buffer.from(command.input.Payload as Uint8Array).toString('utf8'));
    invokes.push(payload);
    await createScaler(() => scalerDeps)(payload);
    return { StatusCode: 202 };
  },
  destroy() {},
} as unknown as LambdaClient;

function queueEndpoint(name: string): ManifestEndpoint {
  return {
    name,
    kind: 'queue',
    file: 'main.py',
    module: 'main',
    target: { name: 'handler', type: 'function', isAsync: false, isGenerator: false, params: ['job'] },
    resources: { ...sampleResources },
    configHash: 'h',
  };
}

beforeAll(async () => {
  box = await startAwsBox({ scaler: { functionName: 'ferry-scaler', lambda } });
  scalerDeps = {
    control: box.lambda.control,
    queue: box.lambda.queue,
    jobs: box.lambda.jobs,
    workers: box.lambda.workers,
    ecs,
    cluster: 'ferry',
    serviceNamePrefix: 'ferry-',
    clock: systemClock,
    workerStaleMs: box.lambda.engine.settings.workerStaleMs,
  };
}, 120_000);
afterAll(async () => {
  await box?.stop();
});

const run = (endpointId: string, body: unknown) =>
  fetch(`${box.baseUrl}/${endpointId}/run`, {
    method: 'POST',
    headers: { authorization: `Bearer ${boxApiKey}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });

describe('scale from zero through the api Lambda', () => {
  it('a /run to an endpoint with no worker has asked ECS for one worker by the time it answers', async () => {
    await box.addEndpoint('zero', recordFor(queueEndpoint('zero'), '/nowhere', 'zero').config);
    services.set('ferry-zero', 0);
    const response = await run('zero', { input: { n: 1 } });
    expect(response.status).toBe(200);
    expect(invokes).toContainEqual({ endpointId: 'zero', urgentJob: true });
    expect(updates).toEqual([{ service: 'ferry-zero', desiredCount: 1 }]);
    // More jobs right after: the nudge is not repeated within its quiet period, and a second one
    // would ask for the same absolute count anyway.
    for (let i = 0; i < 3; i++) expect((await run('zero', { input: { n: i } })).status).toBe(200);
    expect(
      invokes.filter((p) => JSON.stringify(p) === '{"endpointId":"zero","urgentJob":true}'),
    ).toHaveLength(1);
  });

  it('low-priority work nudges nothing and starts nothing (such jobs never scale up)', async () => {
    await box.addEndpoint('lowonly', recordFor(queueEndpoint('lowonly'), '/nowhere', 'lowonly').config);
    services.set('ferry-lowonly', 0);
    expect((await run('lowonly', { input: {}, policy: { lowPriority: true } })).status).toBe(200);
    expect(invokes.filter((p) => (p as { endpointId?: string }).endpointId === 'lowonly')).toEqual([]);
    expect(updates.filter((u) => u.service === 'ferry-lowonly')).toEqual([]);
  });
});
