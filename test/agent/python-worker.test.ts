/**
 * The agent with a real Python worker (`python3 -m ferry.worker`, env from agent.workerEnv()) on
 * DynamoDB Local + fauxqs. Jobs are submitted the way the /run Lambda does (JobEngine.submit over the
 * AWS adapters: a job item in DynamoDB and a message in SQS); the agent alone connects them to the
 * worker.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { QueryCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { JobEngine } from '../../core/engine.js';
import { type AwsFixture, startAwsFixture } from '../support/emulators.js';
import {
  agentOn,
  apiEngine,
  eventually,
  memoryLog,
  type PythonWorker,
  sleep,
  startPythonWorker,
} from './helpers.js';

const endpointId = `agent-${randomUUID().slice(0, 8)}`;
const log = memoryLog();
let aws: AwsFixture;
let agentHandle: Awaited<ReturnType<typeof agentOn>>;
let api: ReturnType<typeof apiEngine>;
let engine: JobEngine;
let worker: PythonWorker;
const scratch = mkdtempSync(join(tmpdir(), 'ferry-agent-test-'));

beforeAll(async () => {
  aws = await startAwsFixture();
  agentHandle = await agentOn(aws, endpointId, { log });
  api = apiEngine(aws);
  engine = api.engine;
  worker = startPythonWorker(agentHandle.agent);
});

afterAll(async () => {
  await worker?.stop();
  await agentHandle?.close();
  api?.close();
  await aws?.stop();
  rmSync(scratch, { recursive: true, force: true });
});

const diagnostics = () => `agent log:\n${log.lines.join('\n')}\nworker output:\n${worker.output.join('')}`;

async function finalOf(jobId: string, waitMs = 30_000) {
  const view = await engine.statusSync(endpointId, jobId, waitMs);
  return view;
}

describe('agent with a Python worker', () => {
  it('runs a job submitted through DynamoDB + SQS to COMPLETED', async () => {
    const job = await engine.submit(
      endpointId,
      { input: { method: 'echo', text: 'over the water' } },
      { sync: false },
    );
    const view = await finalOf(job.id);
    expect(view.status, diagnostics()).toBe('COMPLETED');
    expect(view.output).toEqual({ echo: 'over the water' });
    // The agent lets go once job-done has answered the worker (a moment after the status is final).
    await eventually('the agent to let go', () => (agentHandle.agent.held().length === 0 ? true : undefined));
  });

  it('writes a streaming job’s chunks to the chunks table', async () => {
    const job = await engine.submit(endpointId, { input: { method: 'tokens', n: 4 } }, { sync: false });
    const view = await finalOf(job.id);
    expect(view.status, diagnostics()).toBe('COMPLETED');
    const items = await aws.doc.send(
      new QueryCommand({
        TableName: aws.tables.chunks,
        KeyConditionExpression: 'jobId = :id AND seq > :zero',
        ExpressionAttributeValues: { ':id': job.id, ':zero': 0 },
      }),
    );
    const chunks = (items.Items ?? []).map((item) => JSON.parse(item.chunkJson as string));
    expect(chunks.map((c) => c.output ?? c)).toEqual([
      { text: ['tok0'], index: 0 },
      { text: ['tok1'], index: 1 },
      { text: ['tok2'], index: 2 },
      { text: ['tok3'], index: 3 },
    ]);
    // And a client's /stream reads them back through the API side.
    const stream = await engine.stream(endpointId, job.id, 1_000);
    expect(stream.stream).toHaveLength(4);
  });

  it('stops a running handler when the API side cancels the job', async () => {
    const tickFile = join(scratch, 'ticks-cancel');
    const job = await engine.submit(
      endpointId,
      { input: { method: 'ticker', tick_file: tickFile, seconds: 60 } },
      { sync: false },
    );
    await eventually('the handler to tick', () => {
      try {
        return readFileSync(tickFile, 'utf8').length > 3 ? true : undefined;
      } catch {
        return undefined;
      }
    });
    expect(agentHandle.agent.held()).toEqual([job.id]);
    const cancelled = await engine.cancel(endpointId, job.id);
    expect(cancelled.status).toBe('CANCELLED');
    // The worker hears it through job-stop (a DynamoDB read by the agent) and stops the handler.
    await eventually('the handler to stop ticking', async () => {
      const before = readFileSync(tickFile, 'utf8').length;
      await sleep(400);
      return readFileSync(tickFile, 'utf8').length === before ? true : undefined;
    });
    // It lets go of the job (its ping leaves it out), so the agent holds nothing.
    await eventually('the agent to see the job let go', () =>
      agentHandle.agent.held().length === 0 ? true : undefined,
    );
    expect((await engine.status(endpointId, job.id)).status).toBe('CANCELLED');
  });

  it('times a job out at its execution timeout without the sweeper', async () => {
    const tickFile = join(scratch, 'ticks-timeout');
    const job = await engine.submit(
      endpointId,
      { input: { method: 'ticker', tick_file: tickFile, seconds: 60 } },
      { sync: false, executionTimeoutMs: 2_000 },
    );
    const view = await finalOf(job.id, 20_000);
    // Nobody runs engine.sweep here: the agent's own deadline watch timed it out.
    expect(view.status, diagnostics()).toBe('TIMED_OUT');
    await eventually('the handler to stop ticking', async () => {
      const before = readFileSync(tickFile, 'utf8').length;
      await sleep(400);
      return readFileSync(tickFile, 'utf8').length === before ? true : undefined;
    });
    expect(log.lines.join('\n')).toContain(`job ${job.id} ran past its execution timeout`);
  });

  it('runs the next job after a stop (the worker is still healthy)', async () => {
    const job = await engine.submit(
      endpointId,
      { input: { method: 'echo', text: 'again' } },
      { sync: false },
    );
    const view = await finalOf(job.id);
    expect(view.status, diagnostics()).toBe('COMPLETED');
    expect(worker.child.exitCode).toBeNull();
  });
});

describe('agent routes', () => {
  const base = () => `${agentHandle.agent.url}/v2/${endpointId}`;

  it('refuses worker routes with a wrong token (401)', async () => {
    const wrong = await fetch(`${base()}/job-take/w1?agent=1`, {
      headers: { authorization: 'fyw_not-the-token' },
    });
    expect(wrong.status).toBe(401);
    expect(await wrong.json()).toHaveProperty('error');
    const none = await fetch(`${base()}/ping/w1`);
    expect(none.status).toBe(401);
  });

  it('refuses client routes, even with the worker token', async () => {
    const token = agentHandle.agent.workerToken;
    const run = await fetch(`${base()}/run`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ input: { method: 'echo' } }),
    });
    expect(run.status).toBe(401);
    const health = await fetch(`${base()}/health`, { headers: { authorization: token } });
    expect(health.status).toBe(401);
  });

  it('serves only its own endpoint', async () => {
    const other = await fetch(`${agentHandle.agent.url}/v2/someone-else/job-take/w1?agent=1`, {
      headers: { authorization: agentHandle.agent.workerToken },
    });
    expect(other.status).toBe(404);
  });

  it('answers 404 to a route the API does not have (the API, not a list in the agent, says which are worker routes)', async () => {
    const unknown = await fetch(`${base()}/job-juggle/w1?agent=1`, {
      headers: { authorization: agentHandle.agent.workerToken },
    });
    expect(unknown.status).toBe(404);
    expect(await unknown.json()).toEqual({ error: expect.stringContaining('No route') });
  });

  it('hands the worker a complete RunPod environment', () => {
    const env = agentHandle.agent.workerEnv();
    expect(env.RUNPOD_WEBHOOK_GET_JOB).toBe(`${base()}/job-take/${agentHandle.agent.workerId}?agent=1`);
    expect(env.RUNPOD_WEBHOOK_POST_OUTPUT).toContain('/job-done/');
    expect(env.RUNPOD_WEBHOOK_POST_OUTPUT).toContain('$ID?');
    expect(env.RUNPOD_AI_API_KEY).toBe(agentHandle.agent.workerToken);
    expect(env.RUNPOD_POD_ID).toBe(agentHandle.agent.workerId);
    // Left unset: the ferry runtime then reports the container's own hostname.
    expect(env.RUNPOD_POD_HOSTNAME).toBeUndefined();
    expect(env.RUNPOD_ENDPOINT_ID).toBe(endpointId);
  });
});
