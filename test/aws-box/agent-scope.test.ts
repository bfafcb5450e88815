/**
 * An endpoint's agent, holding only its endpoint's role, cannot touch another endpoint's jobs.
 *
 * DynamoDB Local does not evaluate IAM, so this test puts the policy in front of it
 * (test/support/iam-gate.ts): the agent role's statements come from a synthesized template
 * (infra/isolation.ts), and every request the agent's clients send is checked against them before it
 * reaches the emulators. What the test does NOT show: that AWS evaluates these conditions the same
 * way; that needs a real account (docs/security-aws.md).
 */
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import { GetObjectCommand, ListObjectsV2Command, type S3Client } from '@aws-sdk/client-s3';
import {
  ChangeMessageVisibilityBatchCommand,
  DeleteMessageCommand,
  ReceiveMessageCommand,
  SendMessageCommand,
} from '@aws-sdk/client-sqs';
import { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { App, Stack } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  DynamoControlStore,
  DynamoJobStore,
  type DynamoTable,
  DynamoWorkerRegistry,
} from '../../core/adapters/aws/dynamo.js';
import { S3BlobStore } from '../../core/adapters/aws/s3.js';
import { EndpointAgentAccess } from '../../infra/isolation.js';
import type { Agent } from '../../worker-image/agent/agent.js';
import { startLbAgent } from '../../worker-image/agent/lb.js';
import { listen } from '../../worker-image/agent/listen.js';
import { makeJob } from '../contract/helpers.js';
import { actionsOf, type Statement, statementsOf } from '../infra/iam.js';
import { dynamoClientFor, s3ClientFor, sqsClientFor } from '../support/emulators.js';
import { arnOf, IamGate, Policy, s3Denied } from '../support/iam-gate.js';
import { ProtocolWorker } from '../support/protocolWorker.js';
import { type AwsBox, boxApiKey, startAwsBox } from './box.js';

// Endpoint ids as endpointIdFor makes them: 14 lowercase letters and digits.
const mine = 'mineaaaaaaaaa1';
const theirs = 'theirsbbbbbbb2';

/** The agent role's statements for `endpointId` of `kind`, from a synthesized template. */
function agentStatements(
  endpointId: string,
  kind: 'queue' | 'lb',
  tables: Record<DynamoTable, string>,
  bucket: string,
  webhookQueueUrl: string,
): Statement[] {
  const stack = new Stack(new App(), 'Scope');
  const taskRole = new iam.Role(stack, 'TaskRole', {
    assumedBy: new iam.ServicePrincipal('ecs-tasks.amazonaws.com'),
  });
  const ref = (role: DynamoTable) => ({ tableName: tables[role], tableArn: arnOf.table(tables[role]) });
  // Its own two queues, as the app stack creates them (`ferry-<id>`, `ferry-<id>-low`).
  const queues =
    kind === 'queue'
      ? [`ferry-${endpointId}`, `ferry-${endpointId}-low`].map((name) =>
          sqs.Queue.fromQueueArn(stack, name, arnOf.queue(name)),
        )
      : [];
  const access = new EndpointAgentAccess(stack, 'Access', {
    appName: 'box',
    envName: 'production',
    endpointName: endpointId,
    endpointId,
    kind,
    taskRole,
    tables: { jobs: ref('jobs'), chunks: ref('chunks'), workers: ref('workers'), control: ref('control') },
    bucketName: bucket,
    bucketFindingName: bucket,
    queues,
    // The platform's webhook queue, as the app stack imports it (queue endpoints only).
    ...(kind === 'queue' ? { webhookQueueArn: arnOf.queueAt(webhookQueueUrl) } : {}),
  });
  return statementsOf(Template.fromStack(stack), access.role);
}

/** The agent role's policy for `endpointId` of `kind`. */
const agentPolicy = (...args: Parameters<typeof agentStatements>): Policy =>
  new Policy(agentStatements(...args));

let box: AwsBox;
/** The queue agent's role in front of its DynamoDB, SQS and S3 clients. */
let gate: IamGate;
let agent: Agent;
const clients = {
  dynamo: undefined as ReturnType<typeof dynamoClientFor> | undefined,
  sqs: undefined as ReturnType<typeof sqsClientFor> | undefined,
  s3: undefined as ReturnType<typeof s3ClientFor> | undefined,
};

beforeAll(async () => {
  // The deployed stacks' blob prefix (''), which the agent role's S3 grant is written for.
  box = await startAwsBox({ workerWaitMs: 1_000, blobPrefix: '' });
  await box.addEndpoint(mine);
  await box.addEndpoint(theirs);
  const { tables, bucket, dynamo, fauxqs } = box.fixture;
  gate = new IamGate(agentPolicy(mine, 'queue', tables, bucket, box.fixture.webhookQueueUrl));
  clients.dynamo = gate.dynamo(dynamoClientFor(dynamo.endpoint), tables);
  clients.sqs = gate.sqs(sqsClientFor(fauxqs.endpoint));
  clients.s3 = gate.s3(s3ClientFor(fauxqs.endpoint));
  // On ECS the agent has its queues' URLs from its environment (FERRY_QUEUE_URL, no GetQueueUrl).
  const urls = {
    urgent: await box.fixture.queueUrlFor(mine),
    low: await box.fixture.queueUrlFor(mine, { lowPriority: true }),
  };
  // The box's agent settings, with clients that see only what the agent role allows.
  agent = await box.newAgent(mine, {
    clients: { dynamo: clients.dynamo, sqs: clients.sqs, s3: clients.s3 },
    queueUrlFor: async (_id, options) => (options?.lowPriority ? urls.low : urls.urgent),
    exit: () => {},
  });
}, 120_000);

afterAll(async () => {
  await agent?.close();
  for (const c of Object.values(clients)) c?.destroy();
  await box?.stop();
});

const submit = async (endpointId: string, input: unknown, webhook?: string) => {
  const response = await fetch(`${box.baseUrl}/${endpointId}/run`, {
    method: 'POST',
    headers: { authorization: `Bearer ${boxApiKey}`, 'content-type': 'application/json' },
    body: JSON.stringify({ input, ...(webhook ? { webhook } : {}) }),
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
  it('may describe its own ECS service (superseded.ts) and no other, and update none', () => {
    const access = (action: string, service: string) => ({
      action,
      resource: arnOf.service('ferry', `ferry-${service}`),
      leadingKeys: [],
    });
    expect(gate.policy.allows(access('ecs:DescribeServices', mine))).toBe(true);
    expect(gate.policy.allows(access('ecs:DescribeServices', theirs))).toBe(false);
    expect(gate.policy.allows(access('ecs:UpdateService', mine))).toBe(false);
    // The load-balanced agent watches its deployment the same way.
    const lb = agentPolicy(mine, 'lb', box.fixture.tables, box.fixture.bucket, box.fixture.webhookQueueUrl);
    expect(lb.allows(access('ecs:DescribeServices', mine))).toBe(true);
    expect(lb.allows(access('ecs:DescribeServices', theirs))).toBe(false);
  });

  it("counts, marks and clears its own endpoint's failed starts (one STARTS# key), every call allowed", async () => {
    const doc = DynamoDBDocumentClient.from(clients.dynamo!, {
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
    // With a webhook: the agent hands it to the platform's webhook queue, a big body through S3.
    const small = await submit(mine, { n: 1 }, 'https://hooks.example.com/small');
    // Over the item's inline budget: the input goes to S3 (API) and the output too (agent).
    const big = await submit(mine, { echo: 'x'.repeat(200 * 1024) }, 'https://hooks.example.com/big');
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
    // The two webhooks leave in the background after the job-dones: wait until both were sent.
    const webhookQueue = arnOf.queueAt(box.fixture.webhookQueueUrl);
    await expect
      .poll(
        () =>
          gate.decisions.filter(
            (d) => d.operation === 'sqs:SendMessage' && d.resources.includes(webhookQueue),
          ).length,
      )
      .toBe(2);
    expect(gate.denied()).toEqual([]);
    // The policy was exercised, not bypassed: job items, chunks, payload objects and its queues went
    // through it. Status moves write the job and its endpoint's count items in one transaction.
    const transact = 'dynamodb:TransactWriteItems';
    expect(gate.decisions.some((d) => d.operation === transact && d.keys.includes(small))).toBe(true);
    expect(
      gate.decisions.some((d) => d.operation === transact && d.keys.some((key) => key.includes('-#counts#'))),
    ).toBe(true);
    const touched = (operation: string, id: string) =>
      gate.decisions.some(
        (d) => d.operation === `s3:${operation}` && d.resources.some((r) => r.includes(`/payloads/${id}/`)),
      );
    expect(
      gate.decisions.some(
        (d) =>
          d.keys.includes(streamed) &&
          !['GetItem', 'PutItem', 'TransactWriteItems', 'BatchGetItem']
            .map((o) => `dynamodb:${o}`)
            .includes(d.operation),
      ),
    ).toBe(true);
    for (const operation of ['ReceiveMessage', 'DeleteMessage']) {
      expect(gate.decisions.some((d) => d.operation === `sqs:${operation}` && d.allowed)).toBe(true);
    }
    expect(touched('GetObject', big)).toBe(true);
    expect(touched('PutObject', big)).toBe(true);
    expect(
      gate.decisions.some(
        (d) =>
          d.operation === 's3:PutObject' && d.resources.some((r) => r.includes(`/payloads/webhooks/${big}/`)),
      ),
    ).toBe(true);
  });

  it('releases messages it received on its own queue (a batch, authorized as ChangeMessageVisibility), not on theirs', async () => {
    const own = await box.fixture.queueUrlFor(mine, { lowPriority: true });
    await box.fixture.sqs.send(new SendMessageCommand({ QueueUrl: own, MessageBody: 'released' }));
    const { Messages = [] } = await clients.sqs!.send(
      new ReceiveMessageCommand({ QueueUrl: own, WaitTimeSeconds: 1, VisibilityTimeout: 30 }),
    );
    expect(Messages).toHaveLength(1);
    const release = (QueueUrl: string) =>
      clients.sqs!.send(
        new ChangeMessageVisibilityBatchCommand({
          QueueUrl,
          Entries: [{ Id: '0', ReceiptHandle: Messages[0]!.ReceiptHandle!, VisibilityTimeout: 0 }],
        }),
      );
    await release(own);
    await expect(release(await box.fixture.queueUrlFor(theirs))).rejects.toMatchObject({
      name: 'AccessDeniedException',
    });
    // Visible again at once: the box's client takes it back off the queue.
    const again = await box.fixture.sqs.send(
      new ReceiveMessageCommand({ QueueUrl: own, WaitTimeSeconds: 1 }),
    );
    expect(again.Messages?.[0]?.Body).toBe('released');
    await box.fixture.sqs.send(
      new DeleteMessageCommand({ QueueUrl: own, ReceiptHandle: again.Messages![0]!.ReceiptHandle! }),
    );
  });

  it("is refused every read and write of another endpoint's job, chunks and workers; the job is unchanged", async () => {
    const victim = await submit(theirs, { secret: 'their input' });
    const before = await box.fixture.jobs().get(victim, Date.now());
    expect(before?.status).toBe('IN_QUEUE');

    const doc = DynamoDBDocumentClient.from(clients.dynamo!, {
      marshallOptions: { removeUndefinedValues: true },
    });
    const blobs = new S3BlobStore({
      client: clients.s3!,
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

    // The webhook queue: it sends, never receives (the webhook function does); and a body it writes
    // goes under its own jobs' keys only.
    await expect(
      clients.sqs!.send(new ReceiveMessageCommand({ QueueUrl: box.fixture.webhookQueueUrl })),
    ).rejects.toMatchObject(denied);
    await expect(
      blobs.put(`payloads/webhooks/${victim}/forged.json`, Buffer.from('{}')),
    ).rejects.toMatchObject(s3Denied);
    await expect(blobs.get(`payloads/webhooks/${mine}-x/any.json`)).rejects.toMatchObject(s3Denied);

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
      clients.s3!.send(new GetObjectCommand({ Bucket: box.fixture.bucket, Key: key })),
    ).rejects.toMatchObject(s3Denied);

    // Their queues: it can neither take their messages nor forge one that would wake their workers.
    for (const lowPriority of [false, true]) {
      const QueueUrl = await box.fixture.queueUrlFor(theirs, { lowPriority });
      await expect(clients.sqs!.send(new ReceiveMessageCommand({ QueueUrl }))).rejects.toMatchObject(denied);
      await expect(
        clients.sqs!.send(new SendMessageCommand({ QueueUrl, MessageBody: victim })),
      ).rejects.toMatchObject(denied);
    }
  });

  it("reads its own blob that is gone as missing, not refused, so a read that raced a writer reads again; lists only its own jobs' key names", async () => {
    const { bucket, tables } = box.fixture;
    const prefix = box.env.FERRY_BLOB_PREFIX;
    // S3 answers a missing key 404 only to a role that may list the bucket, else 403
    // (https://docs.aws.amazon.com/AmazonS3/latest/API/API_GetObject.html): the role lists its own
    // jobs' key names (s3:prefix), so its own gone blob reads as missing.
    const blobs = new S3BlobStore({ client: clients.s3!, bucket, prefix });
    const gone = `payloads/${mine}-${randomUUID()}-u1/output-0`;
    expect(await blobs.get(gone)).toBeUndefined();
    expect(await blobs.exists(gone)).toBe(false);
    expect(await blobs.get(`payloads/sync-${mine}-${randomUUID()}-u1/output-0`)).toBeUndefined();
    // Another endpoint's key stays refused, there or not.
    await expect(blobs.get(`payloads/${theirs}-${randomUUID()}-u1/output-0`)).rejects.toMatchObject(s3Denied);

    // Listing: its own jobs' prefixes only. Another endpoint's, one that merely contains its id, the
    // whole payloads/ folder and a listing with no prefix (no s3:prefix at all) are refused
    // (https://docs.aws.amazon.com/AmazonS3/latest/userguide/amazon-s3-policy-keys.html).
    const list = (Prefix?: string) =>
      clients.s3!.send(
        new ListObjectsV2Command({ Bucket: bucket, ...(Prefix === undefined ? {} : { Prefix }) }),
      );
    const kept = `payloads/${mine}-${randomUUID()}-u1/input-0`;
    await blobs.put(kept, Buffer.from('{}'));
    const own = await list(`payloads/${mine}-`);
    // A real listing, of its own keys only.
    expect(own.Contents?.map((object) => object.Key)).toContain(kept);
    for (const object of own.Contents ?? []) expect(object.Key).toMatch(new RegExp(`^payloads/${mine}-`));
    await blobs.delete(kept);
    await list(`payloads/sync-${mine}-`);
    for (const Prefix of [
      `payloads/${theirs}-`,
      `payloads/sync-${theirs}-`,
      `payloads/${theirs}-${mine}-`,
      'payloads/',
      'payloads/webhooks/',
      '',
      undefined,
    ]) {
      await expect(list(Prefix), `prefix ${String(Prefix)}`).rejects.toMatchObject(s3Denied);
    }
    // Their big input sits under their job id: refused by name and by listing.
    const theirBig = await submit(theirs, { secret: 'z'.repeat(200 * 1024) });
    await expect(list(`payloads/${theirBig}/`)).rejects.toMatchObject(s3Denied);

    // The race: the agent's store read a job's item; before it reads the item's output blob, a
    // writer replaces that output and deletes the old blob (DynamoJobStore: "a reader holding the
    // older item may find a blob gone, and reads again").
    const writer = new DynamoJobStore({ doc: box.fixture.doc, tables, blobs: box.fixture.blobs(prefix) });
    const raced = async (s3: S3Client, dynamo: typeof clients.dynamo) => {
      const job = makeJob({
        id: `${mine}-${randomUUID()}-u1`,
        endpointId: mine,
        status: 'COMPLETED',
        createdAt: Date.now(),
        output: { v: 'first'.padEnd(200 * 1024, '.') },
      });
      await writer.create(job);
      const replace = async () => {
        const current = (await writer.get(job.id, Date.now()))!;
        expect((await writer.update(current, { output: { v: 'second'.padEnd(200 * 1024, '.') } })).ok).toBe(
          true,
        );
      };
      let race: (() => Promise<void>) | undefined = replace;
      const agentBlobs = new S3BlobStore({ client: s3, bucket, prefix });
      const get = agentBlobs.get.bind(agentBlobs);
      Object.assign(agentBlobs, {
        get: async (key: string) => {
          const now = race;
          race = undefined;
          await now?.();
          return get(key);
        },
      });
      const doc = DynamoDBDocumentClient.from(dynamo!, { marshallOptions: { removeUndefinedValues: true } });
      const store = new DynamoJobStore({ doc, tables, blobs: agentBlobs, warn: () => {} });
      return { job, read: () => store.get(job.id, Date.now()), raced: () => race === undefined };
    };
    const before = gate.decisions.length;
    const withRole = await raced(clients.s3!, clients.dynamo);
    const read = await withRole.read();
    expect(withRole.raced()).toBe(true);
    expect(read?.output).toEqual({ v: 'second'.padEnd(200 * 1024, '.') });
    expect(gate.decisions.slice(before).filter((d) => !d.allowed)).toEqual([]);

    // The template before this grant (the same statements without s3:ListBucket) fails all of it:
    // the gone blob reads as refused, so the store's read fails instead of reading again.
    const statements = agentStatements(mine, 'queue', tables, bucket, box.fixture.webhookQueueUrl);
    const withoutListing = statements.filter((s) => !actionsOf([s]).includes('s3:ListBucket'));
    expect(statements.length - withoutListing.length).toBe(1);
    const oldGate = new IamGate(new Policy(withoutListing));
    const oldS3 = oldGate.s3(s3ClientFor(box.fixture.fauxqs.endpoint));
    const oldDynamo = oldGate.dynamo(dynamoClientFor(box.fixture.dynamo.endpoint), tables);
    try {
      const oldBlobs = new S3BlobStore({ client: oldS3, bucket, prefix });
      await expect(oldBlobs.get(gone)).rejects.toMatchObject(s3Denied);
      await expect(
        oldS3.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: `payloads/${mine}-` })),
      ).rejects.toMatchObject(s3Denied);
      const withOldRole = await raced(oldS3, oldDynamo);
      await expect(withOldRole.read()).rejects.toMatchObject(s3Denied);
      expect(withOldRole.raced()).toBe(true);
    } finally {
      oldS3.destroy();
      oldDynamo.destroy();
    }
  });

  it('requeues a streamed job when its worker exits: the old chunks cleared, its message sent, every call allowed', async () => {
    // A streamed job goes back to the queue from the agent (JobEngine.workerGone), whose clear of
    // the old attempt's chunks Queries the chunks table: a grant of its own, as IAM authorizes each
    // action alone (https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazondynamodb.html).
    // Without it the refused Query left the job IN_QUEUE with no message.
    const id = await submit(mine, { n: 'streams, then its worker exits' });
    const worker = new ProtocolWorker(agent.url, mine, agent.workerToken, agent.workerId);
    // Earlier cases may have left a job queued: the worker holds whatever comes before this one too.
    let taken = await worker.take();
    for (let tries = 0; taken?.id !== id && tries < 10; tries++) taken = await worker.take();
    expect(taken?.id).toBe(id);
    expect((await worker.stream(id, 'token of the first attempt')).status).toBe(200);

    const before = gate.decisions.length;
    await agent.workerExited({ code: 137, signal: null });
    const made = gate.decisions.slice(before);
    expect(made.filter((d) => !d.allowed)).toEqual([]);
    // The clear went through the policy: a Query on the job's own chunk partition.
    expect(
      made.some(
        (d) =>
          d.operation === 'dynamodb:Query' &&
          d.resources.includes(arnOf.table(box.fixture.tables.chunks)) &&
          d.keys.includes(id),
      ),
    ).toBe(true);
    expect((await statusOf(mine, id)).status).toBe('IN_QUEUE');

    // Exactly one message for it on its endpoint's queue (urgent: the job is not low priority).
    const QueueUrl = await box.fixture.queueUrlFor(mine);
    const bodies: { jobId: string }[] = [];
    for (;;) {
      const { Messages = [] } = await box.fixture.sqs.send(
        new ReceiveMessageCommand({ QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 1 }),
      );
      if (Messages.length === 0) break;
      for (const m of Messages) {
        bodies.push(JSON.parse(m.Body!));
        await box.fixture.sqs.send(new DeleteMessageCommand({ QueueUrl, ReceiptHandle: m.ReceiptHandle! }));
      }
    }
    expect(bodies.filter((b) => b.jobId === id)).toHaveLength(1);
  });
});

describe("a load-balanced endpoint's agent with its endpoint's role", () => {
  it('checks keys, reports its load and counts its failed starts, every call allowed; nothing else is reachable', async () => {
    const { tables, bucket, dynamo } = box.fixture;
    const lbGate = new IamGate(agentPolicy(mine, 'lb', tables, bucket, box.fixture.webhookQueueUrl));
    const client = lbGate.dynamo(dynamoClientFor(dynamo.endpoint), tables);
    const doc = DynamoDBDocumentClient.from(client, { marshallOptions: { removeUndefinedValues: true } });
    const control = new DynamoControlStore({ doc, table: tables.control });
    const registry = new DynamoWorkerRegistry({ doc, table: tables.workers });
    const admin = box.lambda.control;
    const quiet = { info: () => {}, warn: () => {}, error: () => {} };
    const lbAgent = (workerId: string, workerPort: number) =>
      startLbAgent({
        endpointId: mine,
        control,
        registry,
        starts: control,
        workerId,
        workerPort,
        host: '127.0.0.1',
        port: 0,
        readyProbeMs: 50,
        log: quiet,
      });
    // An earlier task's worker failed to start: the run this task's first contact ends.
    await admin.addFailedStart(mine);
    // The worker: a server that answers its /ping and echoes a request's path.
    const worker = createServer((req, res) => res.end(req.url === '/ping' ? 'ok' : `echo ${req.url}`));
    const { port: workerPort } = await listen(worker, '127.0.0.1', 0);
    const healthy = await lbAgent(`${mine}-lb1`, workerPort);
    try {
      // Ready before the first request: until the worker's first answer, a request gets 503 "starting".
      expect((await fetch(`${healthy.url}/ping`)).status).toBe(200);
      const answer = await fetch(`${healthy.url}/hello`, {
        headers: { authorization: `Bearer ${boxApiKey}` },
      });
      expect(await answer.text()).toBe('echo /hello');
      await expect.poll(() => admin.startFailures(mine), { timeout: 5_000 }).toBeUndefined();
      await healthy.reported();
    } finally {
      await healthy.close(1_000);
      await new Promise((resolve) => worker.close(resolve));
    }
    // Another task's worker exits before it ever answered: counted on the endpoint's own STARTS#.
    const crashing = await lbAgent(`${mine}-lb2`, workerPort);
    try {
      await crashing.workerExited({ code: 1, signal: null });
      expect(await crashing.leaving).toBe(1);
    } finally {
      await crashing.close(1_000);
    }
    expect(await admin.startFailures(mine)).toEqual({ failedStarts: 1 });
    await admin.clearStartFailures(mine);
    expect(lbGate.denied()).toEqual([]);
    // Each kind of call went through the policy: the key lookup, the load report, the run's read,
    // clear and count.
    const made = (operation: string, key: (k: string) => boolean) =>
      lbGate.decisions.some((d) => d.operation === `dynamodb:${operation}` && d.keys.some(key));
    expect(made('GetItem', (k) => k.startsWith('KEY#'))).toBe(true);
    expect(made('PutItem', (k) => k === `${mine}-lb1`)).toBe(true);
    expect(made('GetItem', (k) => k === `STARTS#${mine}`)).toBe(true);
    expect(made('DeleteItem', (k) => k === `STARTS#${mine}`)).toBe(true);
    expect(made('UpdateItem', (k) => k === `STARTS#${mine}`)).toBe(true);

    // No job of any endpoint, its own included (a load-balanced endpoint has none); no other
    // endpoint's run of failed starts or worker records; no endpoint record.
    const denied = { name: 'AccessDeniedException' };
    const ownJob = await submit(mine, { n: 'lb' });
    const store = new DynamoJobStore({ doc, tables, blobs: box.fixture.blobs('') });
    await expect(store.get(ownJob, Date.now())).rejects.toMatchObject(denied);
    await expect(store.listByStatus(mine, 'IN_QUEUE', Date.now(), 10)).rejects.toMatchObject(denied);
    await expect(store.counts(mine, Date.now())).rejects.toMatchObject(denied);
    await expect(control.startFailures(theirs)).rejects.toMatchObject(denied);
    await expect(control.addFailedStart(theirs)).rejects.toMatchObject(denied);
    await expect(control.getEndpoint(mine)).rejects.toMatchObject(denied);
    await expect(
      registry.heartbeat({
        workerId: `${theirs}-lb1`,
        endpointId: theirs,
        state: 'idle',
        jobIds: [],
        lastSeenAt: Date.now(),
      }),
    ).rejects.toMatchObject(denied);
    await expect(registry.signalStop(`${mine}-lb1`, Date.now())).rejects.toMatchObject(denied);
    client.destroy();
  });
});
