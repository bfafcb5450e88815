/**
 * The error edge (docs/api.md#errors), once per place an error leaves Ferry over HTTP: the local
 * Fastify server (v2 and load-balanced routes), the API Lambda, the AWS agent, the load-balanced agent
 * and the API Gateway shim. In each, an internal failure whose message names a table, a queue URL and
 * an object key answers 5xx `{"error": "internal error", "requestId"}` with none of them, and the log
 * line carries both the request id and the detail. Real HTTP servers on loopback, real clients.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { S3Client } from '@aws-sdk/client-s3';
import { SQSClient } from '@aws-sdk/client-sqs';
import type { APIGatewayProxyEvent, Context } from 'aws-lambda';
import { afterEach, describe, expect, it } from 'vitest';
import { createHttpServer } from '../../core/adapters/local/http.js';
import { type ApiOptions, V2Api } from '../../core/api.js';
import { hashKey } from '../../core/auth.js';
import type { JobEngine } from '../../core/engine.js';
import { FerryError } from '../../core/errors.js';
import type { Logger } from '../../core/log.js';
import type { ControlStore, EndpointRecord } from '../../core/ports.js';
import { createApiHandler } from '../../functions/api.js';
import { startShim } from '../../functions/shim.js';
import type { Platform } from '../../functions/wiring.js';
import { startAgent } from '../../worker-image/agent/agent.js';
import { startLbAgent } from '../../worker-image/agent/lb.js';

/** What must never reach a client: a table name, a queue URL, an object key. */
const table = 'ferry-prod-jobs-7f3a';
const queueUrl = 'https://sqs.us-east-1.amazonaws.com/123456789012/ferry-secret-queue';
const objectKey = 'payloads/uploads/top-secret.json';
const internals = `DynamoDB kept refusing writes to ${table} (queue ${queueUrl}, object ${objectKey})`;

function memoryLog(): Logger & { lines: string[] } {
  const lines: string[] = [];
  return {
    lines,
    info: (m) => lines.push(`info ${m}`),
    warn: (m) => lines.push(`warn ${m}`),
    error: (m) => lines.push(`error ${m}`),
  };
}

/** The answer is the masked 5xx, and the log has a line with its request id and the detail. */
function expectMasked(status: number, text: string, log: { lines: string[] }, detail = table): string {
  expect(status).toBeGreaterThanOrEqual(500);
  for (const secret of [table, queueUrl, objectKey, 'amazonaws', 'payloads/'])
    expect(text).not.toContain(secret);
  const body = JSON.parse(text) as { error: string; requestId: string };
  expect(body).toEqual({ error: 'internal error', requestId: expect.any(String) });
  expect(body.requestId.length).toBeGreaterThan(0);
  const line = log.lines.find((l) => l.includes(body.requestId));
  expect(line, log.lines.join('\n')).toBeDefined();
  expect(line).toContain(detail);
  return body.requestId;
}

const allowClients = {
  isClientKey: async () => true,
  clientKeyScope: async () => ({}),
  workerAccess: async () => 'unknown' as const,
};

/** A control store whose lookup fails the way a throttled or misconfigured table does. */
const brokenControl = {
  getEndpoint: async () => {
    throw new Error(internals);
  },
} as unknown as ControlStore;

function brokenApi(log: Logger, extra: Partial<ApiOptions> = {}): V2Api {
  return new V2Api({ engine: {} as JobEngine, control: brokenControl, auth: allowClients, log, ...extra });
}

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!();
});

describe('the error edge', () => {
  it('local Fastify server: v2 routes and load-balanced routes', async () => {
    const log = memoryLog();
    const app = await createHttpServer({
      api: brokenApi(log),
      log,
      lb: {
        auth: allowClients,
        endpoint: async (id) => ({ id, app: 'a', env: 'e', name: 'n', kind: 'lb' }) as EndpointRecord,
        forward: async () => {
          throw new FerryError('bad_gateway', `The worker did not answer: ${internals}`);
        },
      },
    });
    await app.listen({ host: '127.0.0.1', port: 0 });
    cleanups.push(() => app.close());
    const base = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;

    const v2 = await fetch(`${base}/v2/ep/health`, { headers: { authorization: 'k' } });
    expectMasked(v2.status, await v2.text(), log);
    expect(v2.status).toBe(500);

    const lb = await fetch(`${base}/lb/ep/items`, { headers: { authorization: 'k' } });
    expect(lb.status).toBe(502);
    expectMasked(lb.status, await lb.text(), log);

    // The client's own mistakes keep their message and their 4xx.
    const bad = await fetch(`${base}/v2/ep/health?x`, { method: 'DELETE', headers: { authorization: 'k' } });
    expect(bad.status).toBe(404);
    expect(await bad.json()).toEqual({ error: expect.stringContaining('No route') });
  });

  it('API Lambda: a failure inside the API and one that escapes it', async () => {
    const log = memoryLog();
    const event = {
      httpMethod: 'GET',
      path: '/v2/ep/health',
      resource: '/v2/{proxy+}',
      headers: { Authorization: 'k' },
      multiValueHeaders: {},
      queryStringParameters: null,
      multiValueQueryStringParameters: null,
      pathParameters: { proxy: 'ep/health' },
      body: null,
      isBase64Encoded: false,
      requestContext: { requestId: 'gw-req-41' },
    } as unknown as APIGatewayProxyEvent;
    const context = { awsRequestId: 'lambda-req-9', getRemainingTimeInMillis: () => 30_000 } as Context;

    const inside = createApiHandler(() => ({ api: brokenApi(log) }) as unknown as Platform, log);
    const first = await inside(event, context);
    expect(expectMasked(first.statusCode, first.body, log)).toBe('gw-req-41');

    const escaping = createApiHandler(() => {
      throw new Error(internals);
    }, log);
    const second = await escaping({ ...event, requestContext: {} } as APIGatewayProxyEvent, context);
    expect(expectMasked(second.statusCode, second.body, log)).toBe('lambda-req-9');
  });

  it('AWS agent: the worker protocol over stores that cannot be reached', async () => {
    // Nothing listens on a port that was just closed: every AWS call fails with the queue's URL in it.
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const port = (closed.address() as AddressInfo).port;
    await new Promise((resolve) => closed.close(resolve));
    const aws = {
      region: 'us-east-1',
      endpoint: `http://127.0.0.1:${port}`,
      credentials: { accessKeyId: 'x', secretAccessKey: 'y' },
      maxAttempts: 1,
    };
    const clients = { dynamo: new DynamoDBClient(aws), sqs: new SQSClient(aws), s3: new S3Client(aws) };
    const log = memoryLog();
    const agent = await startAgent({
      endpointId: 'ep',
      clients,
      tables: { jobs: table, chunks: `${table}-chunks`, workers: `${table}-workers` },
      queueUrlFor: () => queueUrl,
      bucket: 'ferry-secret-bucket',
      port: 0,
      workerWaitMs: 1_000,
      tickMs: 60_000,
      log,
    });
    cleanups.push(async () => {
      await agent.close();
      for (const client of Object.values(clients)) client.destroy();
    });
    const take = await fetch(`${agent.url}/v2/ep/job-take/${agent.workerId}`, {
      headers: { authorization: agent.workerToken },
    });
    expect(take.status).toBe(500);
    expectMasked(take.status, await take.text(), log, `127.0.0.1:${port}`);
  });

  it('load-balanced agent: a key store that fails and a worker that is not there', async () => {
    const log = memoryLog();
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const workerPort = (closed.address() as AddressInfo).port;
    await new Promise((resolve) => closed.close(resolve));

    const failing = await startLbAgent({
      endpointId: 'lbep',
      control: { findApiKeyByHash: async () => Promise.reject(new Error(internals)) },
      workerPort,
      host: '127.0.0.1',
      port: 0,
      log,
    });
    cleanups.push(() => failing.close(1_000));
    const unavailable = await fetch(`${failing.url}/items/1`, { headers: { authorization: 'k' } });
    expect(unavailable.status).toBe(503);
    expectMasked(unavailable.status, await unavailable.text(), log);

    // A worker that was ready (its /ping answered) and is gone: the proxy's failure, masked.
    const key = { id: 'k1', name: 'k', hash: hashKey('k'), createdAt: 0 };
    const brief = createServer((_req, res) => res.end('ok'));
    await new Promise<void>((resolve) => brief.listen(0, '127.0.0.1', resolve));
    const briefPort = (brief.address() as AddressInfo).port;
    const noWorker = await startLbAgent({
      endpointId: 'lbep',
      control: { findApiKeyByHash: async () => key },
      workerPort: briefPort,
      host: '127.0.0.1',
      port: 0,
      log,
    });
    cleanups.push(() => noWorker.close(1_000));
    expect((await fetch(`${noWorker.url}/ping`)).status).toBe(200);
    brief.closeAllConnections();
    await new Promise((resolve) => brief.close(resolve));
    const gone = await fetch(`${noWorker.url}/items/1`, { headers: { authorization: 'k' } });
    expect(gone.status).toBe(502);
    expectMasked(gone.status, await gone.text(), log, String(briefPort));
  });

  it('API Gateway shim: the function throws', async () => {
    const log = memoryLog();
    const shim = await startShim({
      api: async () => {
        throw new Error(internals);
      },
      authorizer: async (event) => ({
        principalId: 'key-1',
        policyDocument: {
          Version: '2012-10-17',
          Statement: [{ Action: 'execute-api:Invoke', Effect: 'Allow', Resource: event.methodArn }],
        },
      }),
      log,
    });
    cleanups.push(() => shim.close());
    const r = await fetch(`${shim.url}/v2/ep/health`, { headers: { authorization: 'k' } });
    expect(r.status).toBe(502);
    expectMasked(r.status, await r.text(), log);
  });
});
