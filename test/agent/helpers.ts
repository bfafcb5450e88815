/**
 * Shared parts of the agent tests: the agent wired to the emulators of one AwsFixture, a "client
 * side" engine standing in for the Lambda handlers (/run writes the job to DynamoDB and sends the SQS
 * message; cancel is a conditional write), and a real Python worker started with agent.workerEnv().
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect } from 'vitest';
import type { SqsJobQueue } from '../../core/adapters/aws/sqs.js';
import { StopSignallingChangeFeed } from '../../core/adapters/aws/stop-signals.js';
import type { ApiRequest, ApiResponse, V2Api } from '../../core/api.js';
import { PollingChangeFeed } from '../../core/changes.js';
import { systemClock } from '../../core/clock.js';
import { JobEngine } from '../../core/engine.js';
import type { Logger } from '../../core/log.js';
import type { WorkerSupervisor } from '../../core/supervisor.js';
import { type Agent, type AgentOptions, startAgent } from '../../worker-image/agent/agent.js';
import { type AwsFixture, dynamoClientFor } from '../support/emulators.js';

const here = dirname(fileURLToPath(import.meta.url));
const repo = join(here, '..', '..');
export const fixtureApp = join(here, 'fixtures');

/** Collects the agent's log lines; tests print them when something fails. */
export function memoryLog(): Logger & { lines: string[] } {
  const lines: string[] = [];
  return {
    lines,
    info: (m) => lines.push(`info ${m}`),
    warn: (m) => lines.push(`warn ${m}`),
    error: (m) => lines.push(`error ${m}`),
  };
}

export async function agentOn(
  aws: AwsFixture,
  endpointId: string,
  extra: Partial<AgentOptions> = {},
): Promise<{ agent: Agent; close(): Promise<void> }> {
  const dynamo = dynamoClientFor(aws.dynamo.endpoint);
  const agent = await startAgent({
    endpointId,
    clients: { dynamo, sqs: aws.sqs, s3: aws.s3 },
    tables: aws.tables,
    queueUrlFor: aws.queueUrlFor,
    bucket: aws.bucket,
    // The fixture's job stores keep payloads under 'ferry/'; the agent must agree (as with the Lambdas).
    blobPrefix: 'ferry/',
    port: 0,
    workerWaitMs: 4_000,
    pollMs: 200,
    pingIntervalMs: 500,
    tickMs: 200,
    log: memoryLog(),
    ...extra,
  });
  return {
    agent,
    async close() {
      await agent.close();
      dynamo.destroy();
    },
  };
}

/** The API side (what the Lambda handlers run): same adapters, a separate engine and change feed. */
export function apiEngine(aws: AwsFixture): { engine: JobEngine; close(): void } {
  const polling = new PollingChangeFeed(systemClock, 200);
  const workers = aws.workers();
  // As in functions/wiring.ts: a cancel or timeout bumps the holder's stop signal, which its agent polls.
  const changes = new StopSignallingChangeFeed({ inner: polling, signals: workers, clock: systemClock });
  const engine = new JobEngine({
    jobs: aws.jobs(),
    queue: aws.queue(),
    workers,
    changes,
    clock: systemClock,
  });
  return { engine, close: () => polling.close() };
}

/**
 * Calls `seen` with each request the agent's API answered, and its answer. The agent's V2Api is
 * private: a test that counts the worker routes it served wraps that one object.
 */
export function watchAgentApi(agent: Agent, seen: (req: ApiRequest, response: ApiResponse) => void): void {
  const agentApi = (agent as unknown as { api: V2Api }).api;
  const handle = agentApi.handle.bind(agentApi);
  agentApi.handle = async (req: ApiRequest) => {
    const response = await handle(req);
    seen(req, response);
    return response;
  };
}

/**
 * The receives the agent asks of its queue, each recorded (its endpoint id) as it starts. The agent's
 * SqsJobQueue is private: a test that checks whether a take reached the queue wraps that one object.
 */
export function watchAgentQueue(agent: Agent): string[] {
  const queue = (agent as unknown as { queue: SqsJobQueue }).queue;
  const receive = queue.receive.bind(queue);
  const receives: string[] = [];
  queue.receive = (endpointId, options) => {
    receives.push(endpointId);
    return receive(endpointId, options);
  };
  return receives;
}

/**
 * When each of the agent's checks of held jobs (its supervisor's tick, where a stopped job kept past
 * the grace period ends the worker) began (Date.now()), recorded once it has finished. The agent's
 * WorkerSupervisor is private: a test that waits for a check wraps that one object.
 */
export function watchAgentTicks(agent: Agent): number[] {
  const supervisor = (agent as unknown as { supervisor: WorkerSupervisor }).supervisor;
  const tick = supervisor.tick.bind(supervisor);
  const ticks: number[] = [];
  supervisor.tick = async (endpointId, plan) => {
    const began = Date.now();
    await tick(endpointId, plan);
    ticks.push(began);
  };
  return ticks;
}

/**
 * Submits `count` jobs of the fixture's `nap`, the i-th for `seconds + i / 1000` s (so each output
 * names its own job), and waits for each to end COMPLETED with that output; `diagnostics` is what a
 * failure prints (the agent's log, the worker's output). The jobs, in order.
 */
export async function completeNaps(
  api: ReturnType<typeof apiEngine>,
  endpointId: string,
  count: number,
  seconds: number,
  diagnostics: () => string,
): Promise<Array<{ id: string }>> {
  const jobs = await Promise.all(
    Array.from({ length: count }, (_, i) =>
      api.engine.submit(
        endpointId,
        { input: { method: 'nap', seconds: seconds + i / 1000 } },
        { sync: false },
      ),
    ),
  );
  for (const [i, job] of jobs.entries()) {
    const view = await api.engine.statusSync(endpointId, job.id, 30_000);
    expect(view.status, diagnostics()).toBe('COMPLETED');
    expect(view.output).toEqual({ rested: seconds + i / 1000 });
  }
  return jobs;
}

export interface PythonWorker {
  child: ChildProcess;
  output: string[];
  stop(): Promise<void>;
}

/**
 * `python3 -m ferry.worker` on the fixture project (or `options.app`), with the env the agent hands
 * its worker plus `options.env`. It runs in its own process group, and stop() ends the group. With
 * `reportExit`, the test plays ECS's part: the worker container's exit reaches agent.workerExited.
 */
export function startPythonWorker(
  agent: Agent,
  target = 'Fixture',
  options: {
    reportExit?: boolean;
    app?: { dir: string; module: string };
    env?: Record<string, string>;
  } = {},
): PythonWorker {
  const output: string[] = [];
  const appDir = options.app?.dir ?? fixtureApp;
  const child = spawn('python3', ['-m', 'ferry.worker'], {
    cwd: appDir,
    detached: true,
    env: {
      PATH: process.env.PATH ?? '',
      HOME: process.env.HOME ?? '',
      PYTHONPATH: join(repo, 'worker-image', 'python'),
      PYTHONUNBUFFERED: '1',
      FERRY_APP_DIR: appDir,
      FERRY_MODULE: options.app?.module ?? 'agent_app',
      FERRY_TARGET: target,
      FERRY_GRACE_MS: '2000',
      // The worker exits if the test process dies: no orphans.
      FERRY_PARENT_PID: String(process.pid),
      ...agent.workerEnv(),
      ...options.env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  for (const stream of [child.stdout, child.stderr]) {
    stream?.setEncoding('utf8');
    stream?.on('data', (data: string) => output.push(data));
  }
  const exited = once(child, 'exit');
  if (options.reportExit) {
    child.on('exit', (code, signal) => void agent.workerExited({ code, signal }).catch(() => {}));
  }
  const signalGroup = (signal: NodeJS.Signals) => {
    try {
      process.kill(-child.pid!, signal);
    } catch {
      // The group is already gone.
    }
  };
  return {
    child,
    output,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) {
        signalGroup('SIGKILL');
        return;
      }
      signalGroup('SIGTERM');
      const timer = setTimeout(() => signalGroup('SIGKILL'), 5_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Polls `check` until it returns a value other than undefined, or fails after `timeoutMs`. */
export async function eventually<T>(
  what: string,
  check: () => Promise<T | undefined> | T | undefined,
  timeoutMs = 20_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

/**
 * eventually(), for a child process that serves on a port it was handed: its exit first fails at once
 * with what it printed (a port taken before it bound it: each child then exits, and
 * startOnChildPort starts it again on another), and a timeout kills it before the throw, so the port
 * it may hold is not taken for someone else's.
 */
export async function untilServing(
  child: ChildProcess,
  what: string,
  serving: () => Promise<boolean> | boolean,
  output: () => string,
  timeoutMs = 20_000,
): Promise<void> {
  const ended = () => child.exitCode !== null || child.signalCode !== null;
  try {
    await eventually(
      what,
      async () => {
        if (ended())
          throw new Error(`${what}: it exited first (${child.signalCode ?? `code ${child.exitCode}`})`);
        return (await serving()) ? true : undefined;
      },
      timeoutMs,
    );
  } catch (error) {
    if (!ended()) {
      const exited = once(child, 'exit');
      child.kill('SIGKILL');
      await exited;
    }
    // The exit can come before the last of its output has been read.
    if (![child.stdout, child.stderr].every((stream) => !stream || stream.readableEnded))
      await Promise.race([once(child, 'close'), sleep(2_000)]);
    throw new Error(`${(error as Error).message}\n${output()}`, { cause: error });
  }
}
