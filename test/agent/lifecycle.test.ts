/**
 * The agent's task lifecycle on DynamoDB Local + fauxqs: ECS task scale-in protection (against a fake
 * ECS agent endpoint that records requests), drain on SIGTERM, and the exit when a worker will not let
 * go of a stopped job. Workers here are a real Python worker, or plain fetch calls where the test
 * needs a worker that misbehaves on purpose.
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ReceiveMessageCommand } from '@aws-sdk/client-sqs';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startOnChildPort } from '../../core/child-port.js';
import { type Agent, placeholderWorkerId } from '../../worker-image/agent/agent.js';
import { bundleAgent } from '../../worker-image/agent/bundle.js';
import { type AwsFixture, fakeAwsConfig, startAwsFixture } from '../support/emulators.js';
import {
  agentOn,
  apiEngine,
  eventually,
  memoryLog,
  type PythonWorker,
  sleep,
  startPythonWorker,
  untilServing,
  watchAgentQueue,
  watchAgentTicks,
} from './helpers.js';

let aws: AwsFixture;
let api: ReturnType<typeof apiEngine>;
const cleanups: (() => Promise<void> | void)[] = [];

beforeAll(async () => {
  aws = await startAwsFixture();
  api = apiEngine(aws);
});

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

afterAll(async () => {
  api?.close();
  await aws?.stop();
});

const newEndpoint = () => `agent-${randomUUID().slice(0, 8)}`;

async function startAgent(endpointId: string, extra: Parameters<typeof agentOn>[2] = {}) {
  const handle = await agentOn(aws, endpointId, extra);
  cleanups.push(() => handle.close());
  return handle.agent;
}

function pythonWorker(agent: Agent): PythonWorker {
  const worker = startPythonWorker(agent);
  cleanups.push(() => worker.stop());
  return worker;
}

/** A worker speaking the protocol by hand. */
function handWorker(agent: Agent, endpointId: string) {
  const base = `${agent.url}/v2/${endpointId}`;
  const headers = { authorization: agent.workerToken };
  const id = encodeURIComponent(agent.workerId);
  return {
    async take(): Promise<{ status: number; job?: { id: string }; ms: number }> {
      const started = Date.now();
      const response = await fetch(`${base}/job-take/${id}?agent=1`, { headers });
      const ms = Date.now() - started;
      if (response.status !== 200) return { status: response.status, ms };
      return { status: 200, job: (await response.json()) as { id: string }, ms };
    },
    /** The jobs its job-stop poll says to stop (what the runtime waits on before it lets go). */
    async stops(): Promise<string[]> {
      const response = await fetch(`${base}/job-stop/${id}?agent=1`, { headers });
      if (response.status !== 200) return [];
      return ((await response.json()) as { jobsToStop: string[] }).jobsToStop;
    },
    async ping(jobIds: string[]): Promise<number> {
      const response = await fetch(`${base}/ping/${id}?job_id=${jobIds.join(',')}`, { headers });
      await response.arrayBuffer();
      return response.status;
    },
  };
}

interface Recorded {
  method: string;
  url: string;
  body: unknown;
  /** When it arrived (Date.now()); not part of what the tests compare with toEqual. */
  at?: number;
}

/** A stand-in for the ECS agent's task-protection endpoint. `failFirst` answers 500 to the first PUT. */
async function fakeEcsAgent(options: { failFirst?: boolean } = {}) {
  const requests: Recorded[] = [];
  let failNext = options.failFirst ?? false;
  const server: Server = createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => {
      body += chunk;
    });
    req.on('end', () => {
      const recorded: Recorded = {
        method: req.method ?? '',
        url: req.url ?? '',
        body: body ? JSON.parse(body) : undefined,
      };
      Object.defineProperty(recorded, 'at', { value: Date.now(), enumerable: false });
      requests.push(recorded);
      if (failNext) {
        failNext = false;
        res
          .writeHead(500, { 'content-type': 'application/json' })
          .end('{"error":{"Code":"ServerException"}}');
        return;
      }
      // The ECS agent's answer: the state it set (task-scale-in-protection-endpoint.html).
      const asked = recorded.body as { ProtectionEnabled: boolean };
      const protection = { ProtectionEnabled: asked.ProtectionEnabled, TaskArn: 'arn:aws:ecs:task/ferry/1' };
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ protection }));
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const uri = `http://127.0.0.1:${(server.address() as AddressInfo).port}/api/task-1`;
  cleanups.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return { uri, requests };
}

describe('ECS task scale-in protection', () => {
  it('is on while the worker holds a job and off once it is idle; failures are not fatal', async () => {
    const endpointId = newEndpoint();
    const ecs = await fakeEcsAgent({ failFirst: true });
    const log = memoryLog();
    const agent = await startAgent(endpointId, {
      log,
      ecs: { agentUri: ecs.uri, protectionMinutes: 30, protectionOffAfterMs: 0 },
    });
    pythonWorker(agent);
    expect(ecs.requests).toEqual([]); // idle from the start: nothing to protect

    const job = await api.engine.submit(
      endpointId,
      { input: { method: 'nap', seconds: 2 } },
      { sync: false },
    );
    // The first PUT fails (500); the next tick tries again while the job still runs.
    const on = await eventually('protection to be turned on', () =>
      ecs.requests.length >= 2 ? ecs.requests.slice(0, 2) : undefined,
    );
    for (const request of on) {
      expect(request.method).toBe('PUT');
      expect(request.url).toBe('/api/task-1/task-protection/v1/state');
      expect(request.body).toEqual({ ProtectionEnabled: true, ExpiresInMinutes: 30 });
    }
    expect(log.lines.join('\n')).toMatch(/task protection on: HTTP 500/);
    expect((await api.engine.status(endpointId, job.id)).status).toBe('IN_PROGRESS');

    const view = await api.engine.statusSync(endpointId, job.id, 20_000);
    expect(view.status).toBe('COMPLETED');
    const off = await eventually('protection to be turned off', () =>
      ecs.requests.find((r) => (r.body as { ProtectionEnabled?: boolean }).ProtectionEnabled === false),
    );
    expect(off).toEqual({
      method: 'PUT',
      url: '/api/task-1/task-protection/v1/state',
      body: { ProtectionEnabled: false },
    });
    // Exactly one successful "on" while busy: no flapping between ticks.
    const ons = ecs.requests.filter((r) => (r.body as { ProtectionEnabled?: boolean }).ProtectionEnabled);
    expect(ons).toHaveLength(2);
  });
});

describe('task protection at the take', () => {
  it('is on before the worker gets its first job, not at the next tick', async () => {
    const endpointId = newEndpoint();
    const ecs = await fakeEcsAgent();
    // Ticks far apart: only the take itself can have asked.
    const agent = await startAgent(endpointId, {
      tickMs: 60_000,
      ecs: { agentUri: ecs.uri, protectionMinutes: 30, protectionOffAfterMs: 0 },
    });
    const worker = handWorker(agent, endpointId);
    const job = await api.engine.submit(endpointId, { input: { method: 'echo' } }, { sync: false });
    const taken = await worker.take();
    expect(taken.job?.id).toBe(job.id);
    expect(ecs.requests.map((r) => r.body)).toEqual([{ ProtectionEnabled: true, ExpiresInMinutes: 30 }]);
  });
});

describe('task protection through idle_timeout', () => {
  it('stays on after the last job until the worker has been idle for protectionOffAfterMs', async () => {
    const endpointId = newEndpoint();
    const ecs = await fakeEcsAgent();
    const offAfterMs = 3_000;
    const agent = await startAgent(endpointId, {
      ecs: { agentUri: ecs.uri, protectionMinutes: 30, protectionOffAfterMs: offAfterMs },
    });
    pythonWorker(agent);
    const job = await api.engine.submit(
      endpointId,
      { input: { method: 'nap', seconds: 1 } },
      { sync: false },
    );
    await eventually('protection to be turned on', () => (ecs.requests.length > 0 ? true : undefined));
    const view = await api.engine.statusSync(endpointId, job.id, 20_000);
    expect(view.status).toBe('COMPLETED');
    // When the job ended by the record, not when the status poll above woke (up to its interval later).
    const { finishedAt } = (await aws.jobs().get(job.id, Date.now()))!;
    const off = await eventually('protection to be turned off', () =>
      ecs.requests.find((r) => (r.body as { ProtectionEnabled?: boolean }).ProtectionEnabled === false),
    );
    // Not before the idle window is over (the scaling policy keeps the worker that long), whatever
    // the machine's speed: a slow machine only makes the gap longer. The idle window starts when the
    // agent lets go of the job, which is just before it stamps finishedAt (a registry write apart).
    expect(off.at! - finishedAt!).toBeGreaterThanOrEqual(offAfterMs - 500);
  });
});

describe('drain (SIGTERM)', () => {
  it('refuses new takes without asking the queue and lets the running job finish', async () => {
    const endpointId = newEndpoint();
    const log = memoryLog();
    const agent = await startAgent(endpointId, { drainMs: 20_000, log });
    const receives = watchAgentQueue(agent);
    pythonWorker(agent);
    const running = await api.engine.submit(
      endpointId,
      { input: { method: 'nap', seconds: 2 } },
      { sync: false },
    );
    await eventually('the job to be taken', () => (agent.held().includes(running.id) ? true : undefined));

    const drained = agent.drain();
    expect(agent.drain()).toBe(drained); // one drain, however many signals
    const waiting = await api.engine.submit(endpointId, { input: { method: 'echo' } }, { sync: false });
    const receivedBefore = receives.length;
    const take = await handWorker(agent, endpointId).take();
    expect(take.status).toBe(204);
    expect(take.ms).toBeGreaterThanOrEqual(900); // held briefly so a worker does not spin
    // Refused before the queue: no receive (let alone the long poll), though a job waits there.
    expect(receives.length).toBe(receivedBefore);

    await drained;
    // It waited for the job: at the drain's end the job had finished, not gone back to the queue.
    expect(log.lines).toContain('info draining: no new jobs; waiting up to 20000 ms for 1 held job(s)');
    expect(log.lines.join('\n')).not.toMatch(/went back to the queue/);
    expect((await api.engine.status(endpointId, running.id)).status).toBe('COMPLETED');
    await sleep(500);
    expect((await api.engine.status(endpointId, waiting.id)).status).toBe('IN_QUEUE');
    const health = await api.engine.health(endpointId);
    expect(health.workers).toEqual({ idle: 0, running: 0 }); // the registry forgot this task
  });

  it('retire (a deploy replaced the task definition): no new take, the held job runs to its end, then it leaves 0', async () => {
    const endpointId = newEndpoint();
    // A drain period shorter than the job: retiring has no deadline of its own, the job's end is it.
    const agent = await startAgent(endpointId, { drainMs: 500 });
    const worker = handWorker(agent, endpointId);
    const running = await api.engine.submit(endpointId, { input: { method: 'echo' } }, { sync: false });
    expect((await worker.take()).job?.id).toBe(running.id);
    let left: number | undefined;
    void agent.leaving.then((code) => {
      left = code;
    });

    agent.retire('a deploy replaced this task definition');
    const waiting = await api.engine.submit(endpointId, { input: { method: 'echo' } }, { sync: false });
    expect((await worker.take()).status).toBe(204);
    await sleep(1_500);
    expect(left).toBeUndefined(); // still running its job, past the drain period
    expect((await api.engine.status(endpointId, running.id)).status).toBe('IN_PROGRESS');
    expect(await worker.ping([running.id])).toBe(200);

    const done = await fetch(
      `${agent.url}/v2/${endpointId}/job-done/${encodeURIComponent(agent.workerId)}/${running.id}?isStream=false`,
      {
        method: 'POST',
        headers: { authorization: agent.workerToken, 'content-type': 'application/json' },
        body: JSON.stringify({ output: 'finished' }),
      },
    );
    expect(done.status).toBe(200);
    expect(await agent.leaving).toBe(0);
    expect((await api.engine.status(endpointId, running.id)).status).toBe('COMPLETED');
    expect((await api.engine.status(endpointId, waiting.id)).status).toBe('IN_QUEUE');
  });

  it('requeues what is still held at the drain deadline, using none of its attempts', async () => {
    const endpointId = newEndpoint();
    const log = memoryLog();
    const agent = await startAgent(endpointId, { drainMs: 1_000, log });
    const worker = handWorker(agent, endpointId);
    const job = await api.engine.submit(endpointId, { input: { method: 'echo' } }, { sync: false });
    const taken = await worker.take();
    expect(taken.job?.id).toBe(job.id);
    expect((await api.engine.status(endpointId, job.id)).status).toBe('IN_PROGRESS');

    const started = Date.now();
    await agent.drain();
    expect(Date.now() - started).toBeGreaterThanOrEqual(900);
    // Its own deadline requeued the job: not the supervisor's backstop behind it (a kill), nor the
    // job's lease.
    expect(log.lines).toContain('warn drain deadline: 1 job(s) went back to the queue');
    expect(log.lines.join('\n')).not.toMatch(/killing worker/);
    expect((await api.engine.status(endpointId, job.id)).status).toBe('IN_QUEUE');
    // The drain is the platform's stop (ECS stopping the task, a deploy), not the job's failure: the
    // attempt its take counted is given back.
    expect((await aws.jobs().get(job.id, Date.now()))?.attempt).toBe(0);
    expect(agent.held()).toEqual([]);
  });
});

describe('a worker that keeps a stopped job', () => {
  it('makes the agent exit 1 after the grace period, requeueing its other jobs', async () => {
    const endpointId = newEndpoint();
    const exits: number[] = [];
    const log = memoryLog();
    const agent = await startAgent(endpointId, { stopGraceMs: 1_000, exit: (code) => exits.push(code), log });
    const worker = handWorker(agent, endpointId);
    const stuck = await api.engine.submit(endpointId, { input: { method: 'echo' } }, { sync: false });
    const other = await api.engine.submit(endpointId, { input: { method: 'echo' } }, { sync: false });
    const first = await worker.take();
    const second = await worker.take();
    expect([first.job?.id, second.job?.id].sort()).toEqual([stuck.id, other.id].sort());

    await api.engine.cancel(endpointId, stuck.id);
    // The worker ignores the stop and keeps saying it holds both jobs.
    const started = Date.now();
    let refused = 0;
    await eventually('the agent to exit', async () => {
      // 200 while it lives; once killed its identity is buried and its pings are refused.
      const status = await worker.ping([stuck.id, other.id]);
      if (status === 401) refused++;
      else expect(status).toBe(200);
      return exits.length > 0 ? true : undefined;
    });
    expect(exits).toEqual([1]);
    expect(refused === 0 || (await worker.ping([other.id])) === 401).toBe(true);
    // A buried worker's ping changes nothing.
    expect(await worker.ping([other.id])).toBe(401);
    expect(Date.now() - started).toBeGreaterThanOrEqual(900);
    expect(log.lines.join('\n')).toContain(`kept stopped job ${stuck.id}`);
    expect((await api.engine.status(endpointId, stuck.id)).status).toBe('CANCELLED');
    expect((await api.engine.status(endpointId, other.id)).status).toBe('IN_QUEUE');
  });

  it('does not exit while the worker lets go within the grace period', async () => {
    const endpointId = newEndpoint();
    const exits: number[] = [];
    const stopGraceMs = 1_500;
    const agent = await startAgent(endpointId, { stopGraceMs, exit: (code) => exits.push(code) });
    const ticks = watchAgentTicks(agent);
    const worker = handWorker(agent, endpointId);
    const job = await api.engine.submit(endpointId, { input: { method: 'echo' } }, { sync: false });
    expect((await worker.take()).job?.id).toBe(job.id);
    await api.engine.cancel(endpointId, job.id);
    // The worker lets go once the agent tells it to stop, as the runtime does: no pause of its own,
    // which a loaded machine could stretch past the grace period.
    const stops = await eventually('the agent to tell the worker to stop', async () => {
      const ids = await worker.stops();
      return ids.length > 0 ? ids : undefined;
    });
    expect(stops).toEqual([job.id]);
    const letGo = Date.now();
    // A late job-done for a stopped job is refused (409) and lets the agent forget it.
    const done = await fetch(`${agent.url}/v2/${endpointId}/job-done/${agent.workerId}/${job.id}?agent=1`, {
      method: 'POST',
      headers: { authorization: agent.workerToken },
      body: JSON.stringify({ output: 'too late' }),
    });
    expect(done.status).toBe(409);
    expect(agent.held()).toEqual([]);
    // Had it kept the job, a check of held jobs would have ended the worker a grace period after the
    // check that first saw the stop, which can come after the let-go (on the tick after the agent's
    // next stop-signal poll): a check that began two grace periods after the let-go is past that.
    await eventually('a check of held jobs past the grace period', () =>
      ticks.some((began) => began >= letGo + 2 * stopGraceMs) ? true : undefined,
    );
    expect(exits).toEqual([]);
  });
});

describe('the bundled agent (main.ts)', () => {
  it('reads its env, serves the worker, hands a webhook to the webhook queue, and on SIGTERM drains, requeues and exits 0', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'ferry-agent-main-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const file = await bundleAgent(dir);
    const endpointId = newEndpoint();
    const token = `fyw_${randomUUID()}`;
    const queueUrl = await aws.queueUrlFor(endpointId);
    const lowQueueUrl = await aws.queueUrlFor(endpointId, { lowPriority: true });
    let stderr = '';
    // The agent binds a port picked here, free but not held: should another server take it first,
    // the agent exits (EADDRINUSE) and starts again on another.
    const { child, port } = await startOnChildPort(async (port) => {
      const child = spawn(process.execPath, [file], {
        env: {
          PATH: process.env.PATH ?? '',
          FERRY_ENDPOINT_ID: endpointId,
          FERRY_JOBS_TABLE: aws.tables.jobs,
          FERRY_CHUNKS_TABLE: aws.tables.chunks,
          FERRY_WORKERS_TABLE: aws.tables.workers,
          FERRY_BUCKET: aws.bucket,
          FERRY_BLOB_PREFIX: 'ferry/',
          FERRY_QUEUE_URL: queueUrl,
          FERRY_QUEUE_URL_LOW: lowQueueUrl,
          FERRY_WEBHOOK_QUEUE_URL: aws.webhookQueueUrl,
          FERRY_WORKER_TOKEN: token,
          FERRY_AGENT_PORT: String(port),
          FERRY_DRAIN_MS: '1000',
          AWS_REGION: fakeAwsConfig.region,
          AWS_ACCESS_KEY_ID: fakeAwsConfig.credentials.accessKeyId,
          AWS_SECRET_ACCESS_KEY: fakeAwsConfig.credentials.secretAccessKey,
          // The SDK's service-specific endpoint variables point the clients at the emulators.
          AWS_ENDPOINT_URL_DYNAMODB: aws.dynamo.endpoint,
          AWS_ENDPOINT_URL_SQS: aws.fauxqs.endpoint,
          AWS_ENDPOINT_URL_S3: aws.fauxqs.endpoint,
          FERRY_APP: 'shared with the worker; ignored',
        },
        stdio: ['ignore', 'ignore', 'pipe'],
      });
      stderr = '';
      child.stderr.setEncoding('utf8');
      child.stderr.on('data', (data: string) => {
        stderr += data;
      });
      cleanups.push(() => {
        if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      });
      await untilServing(
        child,
        'the agent to listen',
        () => stderr.includes('serving the worker protocol'),
        () => stderr,
      );
      return { child, port };
    });
    // 'close', not 'exit': stderr is read below, and only 'close' comes after it has all been read.
    const exited = once(child, 'close') as Promise<[number | null, string | null]>;

    const job = await api.engine.submit(endpointId, { input: { method: 'echo' } }, { sync: false });
    const base = `http://127.0.0.1:${port}/v2/${endpointId}`;
    const wrong = await fetch(`${base}/job-take/${placeholderWorkerId(endpointId)}?agent=1`, {
      headers: { authorization: 'fyw_wrong-token-123' },
    });
    expect(wrong.status).toBe(401);
    // The right token under a worker id that is neither the task's nor the stack's placeholder.
    const forged = await fetch(`${base}/job-take/someone-else?agent=1`, {
      headers: { authorization: token },
    });
    expect(forged.status).toBe(403);
    // The stack writes the placeholder id into the worker's RUNPOD_WEBHOOK_* (it cannot know the task's).
    const taken = await fetch(`${base}/job-take/${placeholderWorkerId(endpointId)}?agent=1`, {
      headers: { authorization: token },
    });
    expect(taken.status, stderr).toBe(200);
    expect(((await taken.json()) as { id: string }).id).toBe(job.id);

    // A job with a webhook, completed: its webhook goes to FERRY_WEBHOOK_QUEUE_URL, not to the receiver.
    const hooked = await api.engine.submit(
      endpointId,
      { input: { method: 'echo' }, webhook: 'https://hooks.example.com/done' },
      { sync: false },
    );
    const second = await fetch(`${base}/job-take/${placeholderWorkerId(endpointId)}?agent=1`, {
      headers: { authorization: token },
    });
    expect(((await second.json()) as { id: string }).id).toBe(hooked.id);
    const done = await fetch(`${base}/job-done/${placeholderWorkerId(endpointId)}/${hooked.id}?agent=1`, {
      method: 'POST',
      headers: { authorization: token },
      body: JSON.stringify({ output: 'ok' }),
    });
    expect(done.status, stderr).toBe(200);
    const message = await eventually('the webhook on its queue', async () => {
      const { Messages } = await aws.sqs.send(
        new ReceiveMessageCommand({ QueueUrl: aws.webhookQueueUrl, MessageAttributeNames: ['All'] }),
      );
      return Messages?.[0];
    });
    expect(message.MessageAttributes?.url?.StringValue).toBe('https://hooks.example.com/done');
    expect(JSON.parse(message.Body!)).toMatchObject({ id: hooked.id, status: 'COMPLETED', output: 'ok' });

    child.kill('SIGTERM');
    const [code] = await exited;
    expect(code, stderr).toBe(0);
    expect(stderr).toContain('drain deadline: 1 job(s) went back to the queue');
    expect((await api.engine.status(endpointId, job.id)).status).toBe('IN_QUEUE');
  });
});
