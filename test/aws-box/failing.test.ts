/**
 * An endpoint whose code cannot start, on AWS in a box (docs/aws.md#failing-endpoints): each "task" is
 * a fresh agent (box.newAgent, as ECS starts one per task) beside a real Python worker
 * (`python -m ferry.worker`) whose module fails to import. The test plays ECS's part: it starts the
 * worker with the agent's environment and reports the container's exit to the agent, as the task
 * metadata watch does (worker-image/agent/ecsWorker.ts), then stops the task and starts the next.
 * The run of failed starts lives in DynamoDB Local, so it outlives each task; at the supervisor's
 * maxFailedStarts the endpoint is failing for every reader: /health through the api Lambda, the
 * queued job's error, the scaler's decision, the sweeper for jobs sent afterwards. putEndpoint (what
 * `ferry deploy` writes) clears it.
 */
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ManifestEndpoint } from '../../core/manifest.js';
import type { EndpointRecord } from '../../core/ports.js';
import { defaultSupervisorSettings } from '../../core/supervisor.js';
import { createSweeper } from '../../functions/sweeper.js';
import { startPythonWorker } from '../agent/helpers.js';
import { sampleResources } from '../infra/fixtures.js';
import { recordFor } from '../support/endpoints.js';
import { type AwsBox, boxApiKey, scalerDecision, startAwsBox } from './box.js';

const project = mkdtempSync(path.join(tmpdir(), 'ferry-failing-'));
writeFileSync(
  path.join(project, 'broken_app.py'),
  `import ferry_no_such_package_xyz
from ferry import Endpoint


@Endpoint(name="broken")
def handler(x: int):
    return x
`,
);

// A model load that never ends: the worker never takes a job or pings.
writeFileSync(
  path.join(project, 'hung_app.py'),
  `import time

time.sleep(600)
from ferry import Endpoint


@Endpoint(name="hung")
def handler(x: int):
    return x
`,
);

const endpointId = 'brokenaaaaaaa1';
const threshold = defaultSupervisorSettings.maxFailedStarts;

function queueEndpoint(name: string): ManifestEndpoint {
  return {
    name,
    kind: 'queue',
    file: 'broken_app.py',
    module: 'broken_app',
    target: { name: 'handler', type: 'function', isAsync: false, isGenerator: false, params: ['x'] },
    resources: { ...sampleResources, workersMin: 1 },
    configHash: 'h',
  };
}

let box: AwsBox;
let record: EndpointRecord;

beforeAll(async () => {
  box = await startAwsBox({ workerWaitMs: 1_000 });
  record = await box.addEndpoint(endpointId, recordFor(queueEndpoint('broken'), project, endpointId).config);
}, 120_000);

afterAll(async () => {
  await box?.stop();
  rmSync(project, { recursive: true, force: true });
});

/** One ECS task: a new agent, its worker run to its exit, the exit reported, the task gone. */
async function oneTask(): Promise<{ code: number | null; output: string }> {
  const agent = await box.newAgent(endpointId, { exit: () => {} });
  try {
    // Its own process group, ended below if it outlives the test.
    const worker = startPythonWorker(agent, 'handler', { app: { dir: project, module: 'broken_app' } });
    const { child, output } = worker;
    try {
      const [code] = (await once(child, 'exit')) as [number | null];
      // What the task metadata watch reports once the worker container is STOPPED.
      await agent.workerExited({ code, signal: null });
      expect(await agent.leaving).toBe(1);
      return { code, output: output.join('') };
    } finally {
      await worker.stop();
    }
  } finally {
    await agent.close();
  }
}

const call = async (method: string, route: string, body?: unknown) => {
  const response = await fetch(`${box.baseUrl}/${endpointId}/${route}`, {
    method,
    headers: { authorization: `Bearer ${boxApiKey}`, 'content-type': 'application/json' },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: response.status, body: (await response.json()) as Record<string, any> };
};

describe('the startup-failure route of the agent', () => {
  it("hears only its worker's token and a list of lines; it is not contact", async () => {
    const agent = await box.newAgent('otheraaaaaaaa2', { exit: () => {} });
    try {
      const url = agent.workerEnv().FERRY_WEBHOOK_POST_STARTUP!;
      const post = (token: string, body: string) =>
        fetch(url, { method: 'POST', headers: { authorization: token }, body }).then(async (r) => ({
          status: r.status,
          text: await r.text(),
        }));
      expect((await post('fyw_not_the_token', '{"lines":["x"]}')).status).toBe(401);
      const bad = await post(agent.workerToken, '{"lines":"not a list"}');
      expect(bad.status).toBe(400);
      expect(JSON.parse(bad.text)).toEqual({ error: expect.any(String) });
      expect((await post(agent.workerToken, 'not json')).status).toBe(400);
      expect((await post(agent.workerToken, '{"lines":["ImportError: x"]}')).status).toBe(204);
      // Still no contact: the exit that follows counts as a failed start.
      await agent.workerExited({ code: 2, signal: null });
      expect(await box.lambda.control.startFailures('otheraaaaaaaa2')).toEqual({ failedStarts: 1 });
    } finally {
      await agent.close();
      await box.lambda.control.clearStartFailures('otheraaaaaaaa2');
    }
  });
});

describe('a worker stopped with its task', () => {
  it('before its first contact (scale-in of a task still starting) is no failed start; the agent leaves with 0', async () => {
    // ECS stops a task by setting its desired status, then its containers, the worker first (it
    // depends on the agent): the task metadata shows the worker STOPPED in a STOPPED task.
    const agent = await box.newAgent('otheraaaaaaaa3', { exit: () => {} });
    try {
      await agent.workerExited({ code: 143, signal: null, taskStopping: true });
      expect(await agent.leaving).toBe(0);
      expect(await box.lambda.control.startFailures('otheraaaaaaaa3')).toBeUndefined();
    } finally {
      await agent.close();
    }
    // The same exit in a task that is not stopping is one.
    const crashed = await box.newAgent('otheraaaaaaaa3', { exit: () => {} });
    try {
      await crashed.workerExited({ code: 143, signal: null, taskStopping: false });
      expect(await crashed.leaving).toBe(1);
      expect(await box.lambda.control.startFailures('otheraaaaaaaa3')).toEqual({ failedStarts: 1 });
    } finally {
      await crashed.close();
      await box.lambda.control.clearStartFailures('otheraaaaaaaa3');
    }
  });
});

describe('a worker with no contact within its start grace (FERRY_HEALTH_CHECK_GRACE_SEC)', () => {
  it('is killed: the agent counts a failed start and exits 1, so ECS replaces the task', async () => {
    const exits: number[] = [];
    const agent = await box.newAgent('hungaaaaaaaaa4', {
      startGrace: { startGraceMs: 1_000 },
      exit: (code) => {
        exits.push(code);
      },
    });
    const worker = startPythonWorker(agent, 'handler', { app: { dir: project, module: 'hung_app' } });
    try {
      expect(await agent.leaving).toBe(1);
      expect(exits).toEqual([1]);
      expect(await box.lambda.control.startFailures('hungaaaaaaaaa4')).toEqual({ failedStarts: 1 });
      // It was still loading: only the task's end (ECS stopping its containers) ends it.
      expect(worker.child.exitCode).toBeNull();
    } finally {
      await worker.stop();
      await agent.close();
      await box.lambda.control.clearStartFailures('hungaaaaaaaaa4');
    }
  });
});

describe('a worker that cannot import, task after task', () => {
  let queued: string;

  it(`is counted across tasks; the endpoint is failing after ${threshold}, with the import error`, async () => {
    queued = (await call('POST', 'run', { input: { x: 1 } })).body.id;
    // Before anything failed, the policy keeps min (1) workers.
    expect((await scalerDecision(box, endpointId)).desired).toBe(1);
    for (let task = 1; task <= threshold; task++) {
      const { code, output } = await oneTask();
      expect(code).toBe(2);
      expect(output).toMatch(/No module named 'ferry_no_such_package_xyz'/);
      const health = (await call('GET', 'health')).body;
      if (task < threshold) {
        expect(health.problem).toBeUndefined();
        expect((await call('GET', `status/${queued}`)).body.status).toBe('IN_QUEUE');
        expect(await box.lambda.control.startFailures(endpointId)).toEqual({ failedStarts: task });
      } else {
        expect(health.problem).toMatchObject({
          state: 'failing',
          reason: expect.stringContaining(`${threshold} workers in a row exited (code 2)`),
        });
        // The lines the worker handed its agent before it exited (the agent cannot read its output).
        expect(health.problem.lines.join('\n')).toMatch(/No module named 'ferry_no_such_package_xyz'/);
      }
    }
    const status = (await call('GET', `status/${queued}`)).body;
    expect(status.status).toBe('FAILED');
    expect(status.error).toMatch(/cannot start/);
    expect(status.error).toMatch(/No module named 'ferry_no_such_package_xyz'/);
  }, 120_000);

  it('the scaler wants no worker, despite min 1 and a job waiting', async () => {
    expect((await call('POST', 'run', { input: { x: 2 } })).status).toBe(200);
    const { desired, updates } = await scalerDecision(box, endpointId);
    expect(desired).toBe(0);
    expect(updates).toEqual([0]);
  });

  it('jobs sent while it is failing end FAILED with the reason at the next sweep', async () => {
    const late = (await call('POST', 'run', { input: { x: 3 } })).body.id;
    const report = await createSweeper(() => box.lambda)();
    expect(report.notStartable).toBeGreaterThanOrEqual(1);
    const status = (await call('GET', `status/${late}`)).body;
    expect(status.status).toBe('FAILED');
    expect(status.error).toMatch(/No module named 'ferry_no_such_package_xyz'/);
  });

  it('a deploy (the endpoint record written again) clears it: health, the count and the scaler', async () => {
    await box.lambda.control.putEndpoint({ ...record, updatedAt: Date.now() });
    expect((await call('GET', 'health')).body.problem).toBeUndefined();
    expect(await box.lambda.control.startFailures(endpointId)).toBeUndefined();
    // The policy follows demand again: min (1). The failed jobs' messages are still in SQS (a worker's
    // take drops them), but no job is behind them, so they do not ask for up to max tasks.
    expect((await scalerDecision(box, endpointId)).desired).toBe(1);
  });
});
