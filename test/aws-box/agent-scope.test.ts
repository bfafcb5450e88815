/**
 * An endpoint's agent, holding only its endpoint's role, cannot touch another endpoint's jobs.
 *
 * DynamoDB Local does not evaluate IAM, so this test puts the policy in front of it: the agent role's
 * statements come from a synthesized template (infra/isolation.ts), and every request the agent's
 * DynamoDB client sends (the real wire request: X-Amz-Target and JSON body) is checked against them
 * before it reaches DynamoDB Local. The check covers exactly what these statements use, as AWS
 * documents it: action, resource ARN, `ForAllValues:StringLike` on `dynamodb:LeadingKeys` (the
 * request's partition key values) and `Null` on it
 * (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/specifying-conditions.html,
 * https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_condition-single-vs-multi-valued-context-keys.html).
 * Anything else (another operator, an operation it cannot read the keys of) is denied. What the test
 * does NOT show: that AWS evaluates these conditions the same way; that needs a real account
 * (docs/security-aws.md).
 */
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { GetObjectCommand, ListObjectsV2Command } from '@aws-sdk/client-s3';
import { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { App, Stack } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import * as iam from 'aws-cdk-lib/aws-iam';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  DynamoControlStore,
  DynamoJobStore,
  type DynamoTable,
  DynamoWorkerRegistry,
  dynamoSchema,
} from '../../core/adapters/aws/dynamo.js';
import { S3BlobStore } from '../../core/adapters/aws/s3.js';
import { queueUrls } from '../../functions/wiring.js';
import { EndpointAgentAccess } from '../../infra/isolation.js';
import type { Agent } from '../../worker-image/agent/agent.js';
import { makeJob } from '../contract/helpers.js';
import { type Statement, statementsOf } from '../infra/iam.js';
import { fakeAwsConfig, s3ClientFor, sqsClientFor } from '../support/emulators.js';
import { ProtocolWorker } from '../support/protocolWorker.js';
import { type AwsBox, boxApiKey, startAwsBox } from './box.js';

const account = '123456789012';
const region = fakeAwsConfig.region;
const arnOf = (table: string, index?: string) =>
  `arn:aws:dynamodb:${region}:${account}:table/${table}${index ? `/index/${index}` : ''}`;

// Endpoint ids as endpointIdFor makes them: 14 lowercase letters and digits.
const mine = 'mineaaaaaaaaa1';
const theirs = 'theirsbbbbbbb2';

/** The agent role's statements for `endpointId`, from a synthesized template. */
function agentPolicy(endpointId: string, tables: Record<DynamoTable, string>, bucket: string): Statement[] {
  const stack = new Stack(new App(), 'Scope');
  const taskRole = new iam.Role(stack, 'TaskRole', {
    assumedBy: new iam.ServicePrincipal('ecs-tasks.amazonaws.com'),
  });
  const ref = (role: DynamoTable) => ({ tableName: tables[role], tableArn: arnOf(tables[role]) });
  const access = new EndpointAgentAccess(stack, 'Access', {
    appName: 'box',
    envName: 'production',
    endpointName: endpointId,
    endpointId,
    kind: 'queue',
    taskRole,
    tables: { jobs: ref('jobs'), chunks: ref('chunks'), workers: ref('workers'), control: ref('control') },
    bucketName: bucket,
    bucketFindingName: bucket,
    queues: [],
  });
  return statementsOf(Template.fromStack(stack), access.role);
}

// ── the check ─────────────────────────────────────────────────────────────────────────────────────

type AttributeValue = Record<string, unknown>;
interface Access {
  action: string;
  resource: string;
  /** The partition key values of the request, as `dynamodb:LeadingKeys` carries them. */
  leadingKeys: string[];
}

/** IAM's StringLike: `*` any run of characters, `?` one character, everything else literal. */
const stringLike = (pattern: string, value: string): boolean =>
  new RegExp(
    `^${pattern
      .replace(/[.+^${}()|[\]\\]/g, '\\$&')
      .replace(/\*/g, '.*')
      .replace(/\?/g, '.')}$`,
  ).test(value);

const list = <T>(v: T | T[]): T[] => (Array.isArray(v) ? v : [v]);

function conditionHolds(
  condition: Record<string, Record<string, unknown>> | undefined,
  access: Access,
): boolean {
  for (const [operator, keys] of Object.entries(condition ?? {})) {
    for (const [key, expected] of Object.entries(keys)) {
      if (key !== 'dynamodb:LeadingKeys') return false;
      if (operator === 'ForAllValues:StringLike') {
        const patterns = list(expected as string | string[]);
        if (!access.leadingKeys.every((k) => patterns.some((p) => stringLike(p, k)))) return false;
      } else if (operator === 'Null') {
        const isNull = access.leadingKeys.length === 0;
        if (String(isNull) !== String(expected)) return false;
      } else {
        return false;
      }
    }
  }
  return true;
}

/** A template's resource as text: `Fn::Join` with the partition filled in, as on AWS. */
function resolve(value: unknown): string | undefined {
  if (typeof value === 'string') return value;
  const join = (value as { 'Fn::Join'?: [string, unknown[]] })['Fn::Join'];
  if (join) {
    const parts = join[1].map((part) =>
      JSON.stringify(part) === JSON.stringify({ Ref: 'AWS::Partition' }) ? 'aws' : resolve(part),
    );
    return parts.every((p) => p !== undefined) ? parts.join(join[0]) : undefined;
  }
  return undefined;
}

function allowed(statements: Statement[], access: Access): boolean {
  return statements.some(
    (s) =>
      s.Effect === 'Allow' &&
      list(s.Action).includes(access.action) &&
      list(s.Resource).some((r) => {
        const arn = resolve(r);
        return arn !== undefined && stringLike(arn, access.resource);
      }) &&
      conditionHolds(s.Condition as Record<string, Record<string, unknown>> | undefined, access),
  );
}

/** The table role behind a physical table name. */
const roleOf = (tables: Record<DynamoTable, string>, name: string): DynamoTable =>
  (Object.keys(tables) as DynamoTable[]).find((role) => tables[role] === name)!;

const scalar = (value: AttributeValue | undefined): string => String(value?.S ?? value?.N ?? '');

/** What IAM would authorize for one wire request; undefined when the request cannot be read. */
function accessesOf(
  tables: Record<DynamoTable, string>,
  operation: string,
  body: Record<string, any>,
): Access[] | undefined {
  const action = `dynamodb:${operation}`;
  const pk = (table: string) => dynamoSchema[roleOf(tables, table)].partitionKey.name;
  switch (operation) {
    case 'GetItem':
    case 'DeleteItem':
    case 'UpdateItem':
      return [
        { action, resource: arnOf(body.TableName), leadingKeys: [scalar(body.Key[pk(body.TableName)])] },
      ];
    case 'PutItem':
      return [
        { action, resource: arnOf(body.TableName), leadingKeys: [scalar(body.Item[pk(body.TableName)])] },
      ];
    case 'BatchWriteItem':
      return Object.entries(body.RequestItems as Record<string, any[]>).map(([table, requests]) => ({
        action,
        resource: arnOf(table),
        leadingKeys: requests.map((r) => scalar((r.PutRequest?.Item ?? r.DeleteRequest?.Key)?.[pk(table)])),
      }));
    case 'BatchGetItem':
      return Object.entries(body.RequestItems as Record<string, { Keys: any[] }>).map(
        ([table, { Keys }]) => ({
          action,
          resource: arnOf(table),
          leadingKeys: Keys.map((key) => scalar(key[pk(table)])),
        }),
      );
    // A transaction is authorized action by action, each as its own operation
    // (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis-iam.html).
    case 'TransactWriteItems':
      return (body.TransactItems as Record<string, any>[]).map((item) => {
        const [kind, request] = Object.entries(item)[0]!;
        const key = request.Key ?? request.Item;
        const operation =
          { Put: 'PutItem', Update: 'UpdateItem', Delete: 'DeleteItem' }[kind] ?? 'ConditionCheckItem';
        return {
          action: `dynamodb:${operation}`,
          resource: arnOf(request.TableName),
          leadingKeys: [scalar(key[pk(request.TableName)])],
        };
      });
    case 'Query': {
      const spec = dynamoSchema[roleOf(tables, body.TableName)];
      const index = body.IndexName
        ? Object.values(
            spec.indexes as Record<string, { indexName: string; partitionKey: { name: string } }>,
          ).find((i) => i.indexName === body.IndexName)
        : undefined;
      const keyName = index ? index.partitionKey.name : spec.partitionKey.name;
      const names: Record<string, string> = body.ExpressionAttributeNames ?? {};
      const keys: string[] = [];
      for (const [, left, placeholder] of String(body.KeyConditionExpression).matchAll(
        /([#\w]+)\s*=\s*(:\w+)/g,
      )) {
        if ((names[left!] ?? left) === keyName)
          keys.push(scalar(body.ExpressionAttributeValues[placeholder!]));
      }
      return [{ action, resource: arnOf(body.TableName, body.IndexName), leadingKeys: keys }];
    }
    default:
      return undefined;
  }
}

class AccessDenied extends Error {
  override name = 'AccessDeniedException';
}

/** A DynamoDB client whose requests must pass `statements` first; it records every decision. */
function gatedDynamo(endpoint: string, tables: Record<DynamoTable, string>, statements: Statement[]) {
  const client = new DynamoDBClient({ ...fakeAwsConfig, endpoint });
  const decisions: { operation: string; keys: string[]; allowed: boolean }[] = [];
  client.middlewareStack.add(
    (next) => async (args) => {
      const request = args.request as { headers: Record<string, string>; body: string | Uint8Array };
      const body = typeof request.body === 'string' ? request.body : new TextDecoder().decode(request.body);
      const operation = String(request.headers['x-amz-target']).split('.')[1]!;
      const accesses = accessesOf(tables, operation, JSON.parse(body));
      const ok = accesses?.every((a) => allowed(statements, a)) ?? false;
      decisions.push({ operation, keys: (accesses ?? []).flatMap((a) => a.leadingKeys), allowed: ok });
      if (!ok) throw new AccessDenied(`not authorized to perform dynamodb:${operation}`);
      return next(args);
    },
    { step: 'build', name: 'iamGate' },
  );
  return { client, decisions };
}

/** An S3 client whose object calls must pass `statements` first (no condition keys involved). */
function gatedS3(endpoint: string, statements: Statement[]) {
  const client = s3ClientFor(endpoint);
  const decisions: { operation: string; key: string; allowed: boolean }[] = [];
  client.middlewareStack.add(
    (next, context) => async (args) => {
      const operation = String(context.commandName).replace(/Command$/, '');
      const input = args.input as { Bucket?: string; Key?: string };
      const access: Access = {
        action: `s3:${operation}`,
        resource: `arn:aws:s3:::${input.Bucket}/${input.Key}`,
        leadingKeys: [],
      };
      const ok = input.Key !== undefined && allowed(statements, access);
      decisions.push({ operation, key: input.Key ?? '', allowed: ok });
      if (!ok) throw new AccessDenied(`not authorized to perform s3:${operation}`);
      return next(args);
    },
    { step: 'initialize', name: 'iamGate' },
  );
  return { client, decisions };
}

// ── the test ──────────────────────────────────────────────────────────────────────────────────────

let box: AwsBox;
let gate: ReturnType<typeof gatedDynamo>;
let agent: Agent;
let sqsClient: ReturnType<typeof sqsClientFor>;
let s3Gate: ReturnType<typeof gatedS3>;

beforeAll(async () => {
  // The deployed stacks' blob prefix (''), which the agent role's S3 grant is written for.
  box = await startAwsBox({ workerWaitMs: 1_000, blobPrefix: '' });
  await box.addEndpoint(mine);
  await box.addEndpoint(theirs);
  const { tables, bucket } = box.fixture;
  const policy = agentPolicy(mine, tables, bucket);
  gate = gatedDynamo(box.fixture.dynamo.endpoint, tables, policy);
  s3Gate = gatedS3(box.fixture.fauxqs.endpoint, policy);
  sqsClient = sqsClientFor(box.fixture.fauxqs.endpoint);
  // The box's agent settings, with clients that see only what the agent role allows.
  agent = await box.newAgent(mine, {
    clients: { dynamo: gate.client, sqs: sqsClient, s3: s3Gate.client },
    queueUrlFor: queueUrls(sqsClient, box.env.FERRY_QUEUE_NAME_PREFIX),
    exit: () => {},
  });
}, 120_000);

afterAll(async () => {
  await agent?.close();
  for (const c of [gate?.client, sqsClient, s3Gate?.client]) c?.destroy();
  await box?.stop();
});

const submit = async (endpointId: string, input: unknown) => {
  const response = await fetch(`${box.baseUrl}/${endpointId}/run`, {
    method: 'POST',
    headers: { authorization: `Bearer ${boxApiKey}`, 'content-type': 'application/json' },
    body: JSON.stringify({ input }),
  });
  expect(response.status).toBe(200);
  return ((await response.json()) as { id: string }).id;
};

const statusOf = async (endpointId: string, id: string) => {
  const response = await fetch(`${box.baseUrl}/${endpointId}/status/${id}`, {
    headers: { authorization: `Bearer ${boxApiKey}` },
  });
  return (await response.json()) as { status: string; output?: unknown };
};

describe("an agent with its endpoint's role", () => {
  it("counts, marks and clears its own endpoint's failed starts (one STARTS# key), every call allowed", async () => {
    const doc = DynamoDBDocumentClient.from(gate.client, {
      marshallOptions: { removeUndefinedValues: true },
    });
    const control = new DynamoControlStore({ doc, table: box.fixture.tables.control });
    const before = gate.decisions.length;
    expect(await control.addFailedStart(mine)).toBe(1);
    expect(await control.addFailedStart(mine)).toBe(2);
    await control.markFailing(mine, { state: 'failing', reason: 'r', lines: ['l'], sinceMs: 1 });
    expect(await control.startFailures(mine)).toMatchObject({ failedStarts: 2, problem: { reason: 'r' } });
    await control.clearStartFailures(mine);
    expect(await control.startFailures(mine)).toBeUndefined();
    const made = gate.decisions.slice(before);
    expect(made.filter((d) => !d.allowed)).toEqual([]);
    expect(new Set(made.flatMap((d) => d.keys))).toEqual(new Set([`STARTS#${mine}`]));
  });

  it('gets job ids from the API that lead with their endpoint id', async () => {
    expect(await submit(mine, { n: 0 })).toMatch(new RegExp(`^${mine}-[0-9a-f-]{36}-u1$`));
  });

  it("runs its own endpoint's jobs end to end (big payloads, streams), every call allowed by the policy", async () => {
    const small = await submit(mine, { n: 1 });
    // Over the item's inline budget: the input goes to S3 (API) and the output too (agent).
    const big = await submit(mine, { echo: 'x'.repeat(200 * 1024) });
    const streamed = await submit(mine, { chunks: ['a', 'b', 'c'] });
    const worker = new ProtocolWorker(agent.url, mine, agent.workerToken, agent.workerId).serve();
    try {
      for (const id of [small, big, streamed]) {
        await expect
          .poll(async () => (await statusOf(mine, id)).status, { timeout: 30_000, interval: 200 })
          .toBe('COMPLETED');
      }
    } finally {
      await worker.stop();
    }
    expect(gate.decisions.filter((d) => !d.allowed)).toEqual([]);
    expect(s3Gate.decisions.filter((d) => !d.allowed)).toEqual([]);
    // The policy was exercised, not bypassed: job items, chunks and payload objects went through it.
    // Status moves write the job and its endpoint's count items in one transaction.
    expect(gate.decisions.some((d) => d.operation === 'TransactWriteItems' && d.keys.includes(small))).toBe(
      true,
    );
    expect(
      gate.decisions.some(
        (d) => d.operation === 'TransactWriteItems' && d.keys.some((key) => key.includes('-#counts#')),
      ),
    ).toBe(true);
    const touched = (operation: string, id: string) =>
      s3Gate.decisions.some((d) => d.operation === operation && d.key.startsWith(`payloads/${id}/`));
    expect(
      gate.decisions.some(
        (d) =>
          d.keys.includes(streamed) &&
          !['GetItem', 'PutItem', 'TransactWriteItems', 'BatchGetItem'].includes(d.operation),
      ),
    ).toBe(true);
    expect(touched('GetObject', big)).toBe(true);
    expect(touched('PutObject', big)).toBe(true);
  });

  it("is refused every read and write of another endpoint's job, chunks and workers; the job is unchanged", async () => {
    const victim = await submit(theirs, { secret: 'their input' });
    const before = await box.fixture.jobs().get(victim, Date.now());
    expect(before?.status).toBe('IN_QUEUE');

    const doc = DynamoDBDocumentClient.from(gate.client, {
      marshallOptions: { removeUndefinedValues: true },
    });
    const blobs = new S3BlobStore({
      client: s3Gate.client,
      bucket: box.fixture.bucket,
      prefix: box.env.FERRY_BLOB_PREFIX,
    });
    const store = new DynamoJobStore({ doc, tables: box.fixture.tables, blobs });
    const registry = new DynamoWorkerRegistry({ doc, table: box.fixture.tables.workers });
    const denied = { name: 'AccessDeniedException' };

    await expect(store.get(victim, Date.now())).rejects.toMatchObject(denied);
    await expect(store.listByStatus(theirs, 'IN_QUEUE', Date.now(), 10)).rejects.toMatchObject(denied);
    await expect(store.update(before!, { status: 'COMPLETED', output: 'forged' })).rejects.toMatchObject(
      denied,
    );
    await expect(store.appendStream(victim, ['forged chunk'])).rejects.toMatchObject(denied);
    // A forged id that merely contains this endpoint's id does not help: the key must start with it.
    await expect(store.get(`${theirs}-${mine}-x`, Date.now())).rejects.toMatchObject(denied);
    await expect(
      registry.heartbeat({
        workerId: `${theirs}-w1`,
        endpointId: theirs,
        state: 'idle',
        jobIds: [victim],
        lastSeenAt: Date.now(),
      }),
    ).rejects.toMatchObject(denied);
    // Nor their workers' stop signals (core/adapters/aws/stop-signals.ts): it can neither read one
    // nor bump one to make their agent look again. Its own it reads (its job-stop poll), and it
    // cannot bump even that: only the api and sweeper functions signal.
    await expect(registry.stopSignal(`${theirs}-w1`)).rejects.toMatchObject(denied);
    await expect(registry.signalStop(`${theirs}-w1`, Date.now())).rejects.toMatchObject(denied);
    expect(await registry.stopSignal(`${mine}-w1`)).toBe(0);
    await expect(registry.signalStop(`${mine}-w1`, Date.now())).rejects.toMatchObject(denied);
    // Nor their health: a job under its own id that claims their endpoint would move their count
    // items (`<theirs>-#counts#…`), so the whole transaction is refused; and it cannot read them.
    const countsBefore = await box.fixture.jobs().counts(theirs, Date.now());
    const forged = makeJob({ id: `${mine}-forged`, endpointId: theirs, createdAt: Date.now() });
    await expect(store.create(forged)).rejects.toMatchObject(denied);
    await expect(store.counts(theirs, Date.now())).rejects.toMatchObject(denied);
    expect(await box.fixture.jobs().counts(theirs, Date.now())).toEqual(countsBefore);
    expect(await box.fixture.jobs().get(forged.id, 0)).toBeUndefined();

    const after = await box.fixture.jobs().get(victim, Date.now());
    expect(after).toEqual(before);

    // Their run of failed worker starts: it can neither read, count, mark nor clear it, and no
    // endpoint record (its own included) is reachable, though both live in the control table.
    const control = new DynamoControlStore({ doc, table: box.fixture.tables.control });
    const admin = box.lambda.control;
    await admin.addFailedStart(theirs);
    const problem = { state: 'failing' as const, reason: 'forged', lines: [], sinceMs: 0 };
    await expect(control.startFailures(theirs)).rejects.toMatchObject(denied);
    await expect(control.addFailedStart(theirs)).rejects.toMatchObject(denied);
    await expect(control.markFailing(theirs, problem)).rejects.toMatchObject(denied);
    await expect(control.clearStartFailures(theirs)).rejects.toMatchObject(denied);
    expect(await admin.startFailures(theirs)).toEqual({ failedStarts: 1 });
    await admin.clearStartFailures(theirs);
    await expect(control.getEndpoint(mine)).rejects.toMatchObject(denied);
    await expect(control.getEndpoint(theirs)).rejects.toMatchObject(denied);
    const theirRecord = (await admin.getEndpoint(theirs))!;
    await expect(control.putEndpoint({ ...theirRecord, config: { forged: true } })).rejects.toMatchObject(
      denied,
    );
    await expect(control.deleteEndpoint(theirs)).rejects.toMatchObject(denied);
    expect(await admin.getEndpoint(theirs)).toEqual(theirRecord);

    // Their big input sits in S3 under their job id: out of reach too.
    const bigVictim = await submit(theirs, { secret: 'y'.repeat(200 * 1024) });
    const listed = await box.fixture.s3.send(
      new ListObjectsV2Command({ Bucket: box.fixture.bucket, Prefix: `payloads/${bigVictim}/` }),
    );
    const key = listed.Contents?.[0]?.Key;
    expect(key).toBeDefined();
    await expect(
      s3Gate.client.send(new GetObjectCommand({ Bucket: box.fixture.bucket, Key: key })),
    ).rejects.toMatchObject(denied);
  });
});
