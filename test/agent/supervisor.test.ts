/**
 * The worker supervisor through the AWS agent, on DynamoDB Local + fauxqs, with real Python workers
 * (docs/workers.md). The test plays ECS: it starts a task (an agent and its worker) and reports the
 * worker container's exit to the agent. A crash mid-job requeues the job at once, a crash loop ends
 * FAILED after maxAttempts tasks, refresh_worker ends the task after the job (the next job runs on a
 * new worker id), and the agent refuses forged worker ids and other tasks' tokens.
 */
import { randomUUID } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { JobEngine } from '../../core/engine.js';
import { type AwsFixture, startAwsFixture } from '../support/emulators.js';
import { agentOn, apiEngine, eventually, memoryLog, startPythonWorker } from './helpers.js';

const maxAttempts = 2;
let aws: AwsFixture;
let api: ReturnType<typeof apiEngine>;
let engine: JobEngine;
const cleanups: (() => Promise<void>)[] = [];
const scratch = mkdtempSync(join(tmpdir(), 'ferry-agent-supervisor-'));

beforeAll(async () => {
  aws = await startAwsFixture();
  api = apiEngine(aws);
  engine = api.engine;
});

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => {});
});

afterAll(async () => {
  api?.close();
  await aws?.stop();
  rmSync(scratch, { recursive: true, force: true });
});

/** One ECS task: an agent and its Python worker, the worker's exit reported to the agent. */
async function startTask(endpointId: string) {
  const log = memoryLog();
  const exits: number[] = [];
  const handle = await agentOn(aws, endpointId, {
    log,
    maxAttempts,
    // FERRY_ENDPOINT, as the app stack sets it: the supervisor's lines name the endpoint by it.
    endpointName: endpointNameOf(endpointId),
    exit: (code) => exits.push(code),
  });
  const worker = startPythonWorker(handle.agent, 'Fixture', { reportExit: true });
  cleanups.push(async () => {
    await worker.stop();
    await handle.close();
  });
  return { agent: handle.agent, worker, log, exits };
}

const newEndpoint = () => `sup-${randomUUID().slice(0, 8)}`;
/** The name its owner gave it, unlike its id. */
const endpointNameOf = (endpointId: string) => `named_${endpointId.slice(4)}`;
const finalOf = (endpointId: string, jobId: string, waitMs = 30_000) =>
  engine.statusSync(endpointId, jobId, waitMs);

describe('the supervisor through the agent', () => {
  it('a crash mid-job: the job is queued again at once, the task leaves with 1, health drops the worker', async () => {
    const endpointId = newEndpoint();
    const task = await startTask(endpointId);
    const pgidFile = join(scratch, `${endpointId}-pgid`);
    const job = await engine.submit(
      endpointId,
      { input: { method: 'crash', pgid_file: pgidFile } },
      { sync: false },
    );
    expect(await task.agent.leaving).toBe(1);
    // Its log names the endpoint, not its id.
    expect(task.log.lines.join('\n')).toMatch(
      new RegExp(`endpoint ${endpointNameOf(endpointId)}: worker \\S+ exited \\(code 9\\)`),
    );
    // Requeued on the exit, not after the (default one-minute) lease.
    const view = await engine.status(endpointId, job.id);
    expect(view.status).toBe('IN_QUEUE');
    expect(existsSync(pgidFile)).toBe(true);
    // Health (what the API Lambda reads from the registry) no longer counts the dead worker.
    await eventually('health to drop the worker', async () => {
      const h = await engine.health(endpointId);
      return h.workers.idle + h.workers.running === 0 ? h : undefined;
    });
    // ECS starts a fresh task; it takes the job again (and crashes again: attempt 2 of 2).
    const second = await startTask(endpointId);
    expect(await second.agent.leaving).toBe(1);
    const failed = await finalOf(endpointId, job.id);
    expect(failed.status).toBe('FAILED');
    expect(failed.error).toMatch(/exited \(code 9\)/);
    expect(failed.error).toMatch(new RegExp(`tried ${maxAttempts} times`));
  });

  it('refresh_worker: the output is saved, the task leaves with 0, and the next job runs on a new worker id', async () => {
    const endpointId = newEndpoint();
    const first = await startTask(endpointId);
    const job1 = await engine.submit(
      endpointId,
      { input: { method: 'fresh', value: { keep: [1, 2] } } },
      { sync: false },
    );
    const view1 = await finalOf(endpointId, job1.id);
    expect(view1).toMatchObject({ status: 'COMPLETED', output: { value: { keep: [1, 2] } } });
    expect(view1.output).not.toHaveProperty('refresh_worker');
    expect(view1.workerId).toBe(first.agent.workerId);
    expect(await first.agent.leaving).toBe(0);
    // The retiring worker gets nothing more, even if it asks.
    const job2 = await engine.submit(endpointId, { input: { method: 'echo', text: 'two' } }, { sync: false });
    await first.agent.drain();
    expect((await engine.status(endpointId, job2.id)).status).toBe('IN_QUEUE');

    const second = await startTask(endpointId);
    const view2 = await finalOf(endpointId, job2.id);
    expect(view2).toMatchObject({ status: 'COMPLETED', output: { echo: 'two' } });
    expect(view2.workerId).toBe(second.agent.workerId);
    expect(view2.workerId).not.toBe(view1.workerId);
  });

  it('refuses another task’s token, a forged worker id, a client key and no key; nothing changes', async () => {
    const endpointId = newEndpoint();
    const log = memoryLog();
    const a = await agentOn(aws, endpointId, { log });
    const b = await agentOn(aws, newEndpoint(), { log });
    cleanups.push(
      () => a.close(),
      () => b.close(),
    );
    const job = await engine.submit(endpointId, { input: { method: 'echo' } }, { sync: false });
    const base = `${a.agent.url}/v2/${endpointId}`;
    const attempts: [string, string | undefined, number][] = [
      [`job-take/${a.agent.workerId}`, b.agent.workerToken, 401],
      [`job-take/forged-worker`, a.agent.workerToken, 403],
      [`job-take/${b.agent.workerId}`, a.agent.workerToken, 403],
      [`job-take/${a.agent.workerId}`, 'fy_some_client_key', 401],
      [`job-take/${a.agent.workerId}`, undefined, 401],
      [`ping/forged-worker?job_id=${job.id}`, a.agent.workerToken, 403],
      [`job-stop/forged-worker`, a.agent.workerToken, 403],
    ];
    for (const [path, authorization, expected] of attempts) {
      const response = await fetch(`${base}/${path}`, {
        headers: authorization === undefined ? {} : { authorization },
      });
      expect(response.status, `${path} with ${authorization}`).toBe(expected);
      expect(typeof ((await response.json()) as { error?: unknown }).error).toBe('string');
    }
    expect((await engine.status(endpointId, job.id)).status).toBe('IN_QUEUE');
    expect(a.agent.held()).toEqual([]);
  });
});

describe('workers that keep dying', () => {
  it('a crash-looping handler ends FAILED after maxAttempts tasks', async () => {
    const endpointId = newEndpoint();
    const job = await engine.submit(endpointId, { input: { method: 'crash' } }, { sync: false });
    for (let attempt = 1; attempt <= maxAttempts; attempt++) {
      const task = await startTask(endpointId);
      expect(await task.agent.leaving).toBe(1);
    }
    const view = await finalOf(endpointId, job.id);
    expect(view.status).toBe('FAILED');
    expect(view.error).toMatch(/exited/);
  });
});
