/**
 * A load-balanced endpoint whose code cannot start, on AWS in a box (docs/aws.md#failing-endpoints).
 * Each "ECS task" is the bundled agent run as ECS runs it (agent.mjs, FERRY_AGENT_MODE=lb, its
 * configuration from the environment) beside a real Python LB worker (`python3 -m ferry.worker`,
 * FERRY_MODE=lb). The test plays the ECS agent's part: a task metadata endpoint v4 whose worker
 * container follows the real worker process (RUNNING while it lives, then STOPPED with its exit code),
 * and the task's DesiredStatus (STOPPED when "ECS" stops the task). The run of failed starts lives in
 * DynamoDB Local's control table, so it outlives each task; at the supervisor's maxFailedStarts the
 * scaler keeps the endpoint at 0 tasks even when a request was turned away (the wake-up alarm), until
 * a deploy writes the endpoint record again.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startOnChildPort } from '../../core/child-port.js';
import { defaultSupervisorSettings } from '../../core/supervisor.js';
import { bundleAgent } from '../../worker-image/agent/bundle.js';
import { eventually } from '../agent/helpers.js';
import { lbEndpoint } from '../infra/fixtures.js';
import { fakeAwsConfig, freePorts } from '../support/emulators.js';
import { recordFor } from '../support/endpoints.js';
import { type AwsBox, scalerDecision, startAwsBox } from './box.js';

const here = dirname(fileURLToPath(import.meta.url));
const repo = join(here, '..', '..');
const fixtures = join(repo, 'test', 'agent', 'fixtures');
const endpointId = 'brokenlbaaaaa1';
const threshold = defaultSupervisorSettings.maxFailedStarts;

let box: AwsBox;
let scratch: string;
let agentFile: string;
const cleanups: (() => void)[] = [];

beforeAll(async () => {
  scratch = mkdtempSync(join(tmpdir(), 'ferry-lb-failing-'));
  writeFileSync(
    join(scratch, 'broken_lb.py'),
    'import ferry_no_such_package_xyz\nfrom ferry import Endpoint\n\napi = Endpoint(name="broken-api")\n',
  );
  // Never answers: its import outlasts the test (a model still loading).
  writeFileSync(join(scratch, 'slow_lb.py'), 'import time\n\ntime.sleep(600)\n');
  [box, agentFile] = await Promise.all([startAwsBox(), bundleAgent(scratch)]);
  const record = recordFor({ ...lbEndpoint, resources: { ...lbEndpoint.resources, workersMin: 1 } }, scratch);
  await box.lambda.control.putEndpoint({ ...record, id: endpointId, app: 'box', env: 'production' });
}, 120_000);

afterAll(async () => {
  for (const cleanup of cleanups.splice(0)) cleanup();
  await box?.stop();
  rmSync(scratch, { recursive: true, force: true });
});

/**
 * What the agent's metadata poll sees: the worker container follows `task.worker` (PULLED while it
 * has not started: its image still pulling); the task `desired`.
 */
async function metadataEndpoint(task: { desired: string; worker?: ChildProcess }): Promise<string> {
  const server = createServer((_req, res) => {
    const worker = task.worker;
    const live = worker !== undefined && worker.exitCode === null && worker.signalCode === null;
    // Docker reports a container killed by a signal as 128 + its number.
    const code = worker?.exitCode ?? (worker?.signalCode === 'SIGTERM' ? 143 : 137);
    const status = worker === undefined ? 'PULLED' : live ? 'RUNNING' : 'STOPPED';
    res.writeHead(200, { 'content-type': 'application/json' }).end(
      JSON.stringify({
        TaskARN: 'arn:aws:ecs:us-east-1:111122223333:task/ferry/1',
        DesiredStatus: task.desired,
        Containers: [
          { Name: 'agent', KnownStatus: 'RUNNING' },
          { Name: 'worker', KnownStatus: status, ...(status === 'STOPPED' ? { ExitCode: code } : {}) },
        ],
      }),
    );
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  cleanups.push(() => server.close());
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/v4/task-1`;
}

function startWorker(app: { dir: string; module: string }, port: number): ChildProcess {
  const child = spawn('python3', ['-m', 'ferry.worker'], {
    cwd: app.dir,
    // Its own process group, ended below if it outlives the test.
    detached: true,
    env: {
      PATH: process.env.PATH ?? '',
      HOME: process.env.HOME ?? '',
      PYTHONPATH: join(repo, 'worker-image', 'python'),
      FERRY_APP_DIR: app.dir,
      FERRY_MODE: 'lb',
      FERRY_MODULE: app.module,
      FERRY_VARIABLE: 'api',
      FERRY_HOST: '127.0.0.1',
      FERRY_PORT: String(port),
      FERRY_PARENT_PID: String(process.pid),
    },
    stdio: 'ignore',
  });
  cleanups.push(() => {
    try {
      process.kill(-child.pid!, 'SIGKILL');
    } catch {
      // Already gone.
    }
  });
  return child;
}

/**
 * One ECS task: the agent process and its worker. Once `stopWhen` holds, the test plays ECS stopping
 * the task: its desired status STOPPED, then SIGTERM to the worker first, or to the agent first with
 * `agentFirst`; without `stopWhen` the task ends when the agent leaves. `graceSec`: the service's
 * health check grace, as the app stack sets it. `pullMs`: how long the worker container's image pulls
 * (the agent already running, as ECS pulls it) before the worker starts.
 * Resolves with the agent's exit code, what it printed, and when the worker started.
 */
async function oneTask(
  app: { dir: string; module: string },
  stopWhen?: (agentOutput: string) => Promise<boolean> | boolean,
  options: { graceSec?: number; agentFirst?: boolean; pullMs?: number } = {},
): Promise<{ code: number | null; stderr: string; workerStartedAt: number }> {
  const [workerPort] = (await freePorts(1)) as [number];
  const task: { desired: string; worker?: ChildProcess } = { desired: 'RUNNING' };
  let workerStartedAt = Date.now();
  const startTheWorker = () => {
    workerStartedAt = Date.now();
    task.worker = startWorker(app, workerPort);
    return task.worker;
  };
  const pulled = options.pullMs
    ? new Promise<ChildProcess>((resolve) => setTimeout(() => resolve(startTheWorker()), options.pullMs))
    : Promise.resolve(startTheWorker());
  const metadataUri = await metadataEndpoint(task);
  let stderr = '';
  // The agent binds a port picked here, free but not held: should another server take it first, the
  // agent exits before it serves (EADDRINUSE, having counted nothing) and starts again on another.
  const { agent, exited } = await startOnChildPort(async (agentPort) => {
    const agent = spawn(process.execPath, [agentFile], {
      env: {
        PATH: process.env.PATH ?? '',
        FERRY_AGENT_MODE: 'lb',
        FERRY_ENDPOINT_ID: endpointId,
        // As the app stack sets it: the agent's supervisor lines name the endpoint by it.
        FERRY_ENDPOINT: lbEndpoint.name,
        FERRY_APP: 'box',
        FERRY_ENV: 'production',
        FERRY_CONTROL_TABLE: box.fixture.tables.control,
        FERRY_WORKERS_TABLE: box.fixture.tables.workers,
        FERRY_PORT: String(workerPort),
        FERRY_WORKER_HOST: '127.0.0.1',
        FERRY_AGENT_HOST: '127.0.0.1',
        FERRY_AGENT_PORT: String(agentPort),
        FERRY_DRAIN_MS: '1000',
        ECS_CONTAINER_METADATA_URI_V4: metadataUri,
        AWS_REGION: fakeAwsConfig.region,
        AWS_ACCESS_KEY_ID: fakeAwsConfig.credentials.accessKeyId,
        AWS_SECRET_ACCESS_KEY: fakeAwsConfig.credentials.secretAccessKey,
        AWS_ENDPOINT_URL_DYNAMODB: box.fixture.dynamo.endpoint,
        ...(options.graceSec ? { FERRY_HEALTH_CHECK_GRACE_SEC: String(options.graceSec) } : {}),
      },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    cleanups.push(() => {
      if (agent.exitCode === null && agent.signalCode === null) agent.kill('SIGKILL');
    });
    stderr = '';
    agent.stderr.setEncoding('utf8');
    agent.stderr.on('data', (data: string) => {
      stderr += data;
    });
    // 'close', not 'exit': what it printed is read from `stderr`, and only 'close' comes after all of
    // it. Listened for from the start: a broken worker can make the agent leave right after it serves.
    const exited = once(agent, 'close') as Promise<[number | null]>;
    await new Promise<void>((resolve, reject) => {
      const served = () => stderr.includes('serving load-balanced endpoint');
      agent.stderr.on('data', () => {
        if (served()) resolve();
      });
      void exited.then(([code]) => {
        if (served()) resolve();
        else reject(new Error(`the agent exited (code ${code}) before it served:\n${stderr}`));
      });
    });
    return { agent, exited };
  });
  if (stopWhen) {
    await eventually(
      'the moment to stop the task',
      async () => ((await stopWhen(stderr)) ? true : undefined),
      30_000,
    );
    task.desired = 'STOPPED';
    (options.agentFirst ? agent : await pulled).kill('SIGTERM');
  }
  const [code] = await exited;
  (await pulled).kill('SIGKILL');
  return { code, stderr, workerStartedAt };
}

const broken = () => ({ dir: scratch, module: 'broken_lb' });
const runs = () => box.lambda.control.startFailures(endpointId);
/** The scaler's answer after a request found no task (the ALB's wake-up alarm nudging it). */
const afterTurnedAway = async () =>
  (await scalerDecision(box, endpointId, { endpointId, waitingRequests: 1 })).desired;

describe('a load-balanced worker that cannot start, task after task', () => {
  it.each([
    ['the worker first', false],
    ['the agent first', true],
  ])(
    'stopped with its task before it ever answered (a task still starting), %s: no failed start, exit 0',
    async (_order, agentFirst) => {
      // Once the agent has read the (empty) run and listens, "ECS" stops the task, well within its
      // health check grace.
      const { code, stderr } = await oneTask(
        { dir: scratch, module: 'slow_lb' },
        (output) => output.includes('serving load-balanced endpoint'),
        { graceSec: 60, agentFirst },
      );
      expect(code, stderr).toBe(0);
      expect(await runs()).toBeUndefined();
    },
    60_000,
  );

  it(`each exit before an answer is counted across tasks; after ${threshold} the endpoint is failing`, async () => {
    expect(await afterTurnedAway()).toBe(1);
    for (let n = 1; n <= threshold; n++) {
      const { code, stderr } = await oneTask(broken());
      // The agent leaves so ECS replaces the task (the worker container is not essential).
      expect(code, stderr).toBe(1);
      expect(stderr).toContain('the worker exited (code 2)');
      if (n < threshold) expect(await runs()).toEqual({ failedStarts: n });
      // Its log names the endpoint as its owner does, not by the id.
      else expect(stderr).toContain(`endpoint ${lbEndpoint.name} is failing: ${threshold} workers in a row`);
    }
    expect((await runs())?.problem).toMatchObject({
      state: 'failing',
      reason: expect.stringContaining(`${threshold} workers in a row exited (code 2)`),
    });
  }, 120_000);

  it('the scaler then wants no task, despite min 1 and a request turned away', async () => {
    const { desired, updates } = await scalerDecision(box, endpointId, { endpointId, waitingRequests: 1 });
    expect(desired).toBe(0);
    expect(updates).toEqual([0]);
  });

  it('a deploy clears it; a worker that answers its /ping ends a run of failed starts', async () => {
    await box.lambda.control.putEndpoint({
      ...(await box.lambda.control.getEndpoint(endpointId))!,
      updatedAt: Date.now(),
    });
    expect(await runs()).toBeUndefined();
    expect(await afterTurnedAway()).toBe(1);
    expect((await oneTask(broken())).code).toBe(1);
    expect(await runs()).toEqual({ failedStarts: 1 });
    // A fixed image: the agent's probe of /ping gets its first 200 and deletes the run; then the task
    // is stopped (scale-in) and leaves with 0, counting nothing.
    const { code, stderr } = await oneTask(
      { dir: fixtures, module: 'lb_app' },
      async () => (await runs()) === undefined,
    );
    expect(code, stderr).toBe(0);
    expect(await runs()).toBeUndefined();
  }, 120_000);

  it('a worker that never answers (a server on the wrong port) is killed as a failed start once its grace is over', async () => {
    expect(await runs()).toBeUndefined();
    // The agent does not wait for the ALB's failed checks to stop the task: past the grace it leaves
    // with 1 itself, which stops the task and the silent worker with it.
    for (let n = 1; n <= threshold; n++) {
      const { code, stderr } = await oneTask({ dir: scratch, module: 'slow_lb' }, undefined, { graceSec: 1 });
      expect(code, stderr).toBe(1);
      expect(stderr).toContain('did not answer GET /ping within its health check grace (1 s)');
      if (n < threshold) expect(await runs()).toEqual({ failedStarts: n });
    }
    expect((await runs())?.problem).toMatchObject({
      state: 'failing',
      lines: [expect.stringContaining('is its server listening on FERRY_PORT?')],
    });
    expect(await afterTurnedAway()).toBe(0);
  }, 120_000);

  it("counts the grace from the worker container's start, not while its image pulls", async () => {
    await box.lambda.control.putEndpoint({
      ...(await box.lambda.control.getEndpoint(endpointId))!,
      updatedAt: Date.now(),
    });
    // The image pulls for 3 s, three times the grace: the agent waits for the container to start,
    // then gives it the whole grace.
    const { code, stderr, workerStartedAt } = await oneTask({ dir: scratch, module: 'slow_lb' }, undefined, {
      graceSec: 1,
      pullMs: 3_000,
    });
    const killedAt = Date.now();
    expect(code, stderr).toBe(1);
    expect(stderr).toContain('did not answer GET /ping within its health check grace (1 s)');
    expect(killedAt - workerStartedAt).toBeGreaterThanOrEqual(1_000);
    expect(await runs()).toEqual({ failedStarts: 1 });
  }, 60_000);
});
