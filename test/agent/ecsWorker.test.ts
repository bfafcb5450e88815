/**
 * The agent sees its worker container exit through the ECS task metadata endpoint v4 (shape from
 * https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-metadata-endpoint-v4-response.html),
 * served here by a local HTTP server standing in for the ECS agent.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, expect, it } from 'vitest';
import { systemClock } from '../../core/clock.js';
import {
  type WorkerContainerWatch,
  type WorkerExit,
  watchWorkerContainer,
} from '../../worker-image/agent/ecsWorker.js';

const closers: (() => void)[] = [];
afterEach(() => {
  for (const close of closers.splice(0)) close();
});

async function metadataServer(answers: (() => { status: number; body: unknown })[]) {
  let calls = 0;
  const server = createServer((req, res) => {
    const answer = answers[Math.min(calls++, answers.length - 1)]!();
    expect(req.url).toBe('/v4/abc/task');
    res.writeHead(answer.status, { 'content-type': 'application/json' }).end(JSON.stringify(answer.body));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  closers.push(() => server.close());
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/v4/abc`;
}

const task = (status: string, exitCode?: number, taskDesired = 'RUNNING') => ({
  status: 200,
  body: {
    TaskARN: 'arn:aws:ecs:us-east-1:111122223333:task/c/1',
    DesiredStatus: taskDesired,
    Containers: [
      { Name: 'agent', KnownStatus: 'RUNNING' },
      { Name: 'worker', KnownStatus: status, ...(exitCode === undefined ? {} : { ExitCode: exitCode }) },
    ],
  },
});

/**
 * Watches until the worker container is seen STOPPED: the exits reported and the warnings. `hooks`:
 * the watch's other callbacks (its start, the task stopping), or an `onExit` of the test's own.
 */
async function watchToTheEnd(
  metadataUri: string,
  hooks: Partial<Pick<WorkerContainerWatch, 'onStarted' | 'onTaskStopping' | 'onExit'>> = {},
) {
  const exits: WorkerExit[] = [];
  const warnings: string[] = [];
  await watchWorkerContainer({
    metadataUri,
    containerName: 'worker',
    clock: systemClock,
    signal: new AbortController().signal,
    pollMs: 20,
    onExit: (how) => void exits.push(how),
    warn: (m) => warnings.push(m),
    ...hooks,
  });
  return { exits, warnings };
}

/** Watches for `watchMs`, runs `beforeAbort`, then aborts the watch: the exits reported. */
async function watchThenAbort(metadataUri: string, pollMs: number, watchMs: number, beforeAbort = () => {}) {
  const abort = new AbortController();
  const exits: unknown[] = [];
  const watching = watchWorkerContainer({
    metadataUri,
    containerName: 'worker',
    clock: systemClock,
    signal: abort.signal,
    pollMs,
    onExit: (how) => void exits.push(how),
    warn: () => {},
  });
  await new Promise((resolve) => setTimeout(resolve, watchMs));
  beforeAbort();
  abort.abort();
  await watching;
  return exits;
}

it('reports the worker container’s exit code once it is STOPPED, past a failing poll', async () => {
  const uri = await metadataServer([
    () => task('RUNNING'),
    () => ({ status: 500, body: { error: 'busy' } }),
    () => task('RUNNING'),
    () => task('STOPPED', 137),
  ]);
  const { exits, warnings } = await watchToTheEnd(uri);
  expect(exits).toEqual([{ code: 137, signal: null, taskStopping: false }]);
  expect(warnings).toEqual(['task metadata: HTTP 500']);
});

it('stops watching when aborted, without reporting an exit', async () => {
  const uri = await metadataServer([() => task('RUNNING')]);
  expect(await watchThenAbort(uri, 20, 100)).toEqual([]);
});

it('takes one last look when aborted: a worker that exited inside the poll interval is reported', async () => {
  // ECS stops the worker first, then SIGTERMs the agent (the reverse of their start order,
  // https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_ContainerDependency.html): the
  // exit lands between two polls, and the agent must know before it drains.
  let stopped = false;
  const uri = await metadataServer([() => (stopped ? task('STOPPED', 0, 'STOPPED') : task('RUNNING'))]);
  const exits = await watchThenAbort(uri, 60_000, 100, () => {
    stopped = true;
  });
  expect(exits).toEqual([{ code: 0, signal: null, taskStopping: true }]);
});

it('says the exit came with the task when ECS was stopping the whole task (its DesiredStatus STOPPED)', async () => {
  // Scale-in or a deployment: ECS sets the task's desired status, then stops its containers, the
  // worker first (it depends on the agent), so the agent sees a stopped worker in a stopping task.
  const uri = await metadataServer([() => task('RUNNING'), () => task('STOPPED', 0, 'STOPPED')]);
  expect((await watchToTheEnd(uri)).exits).toEqual([{ code: 0, signal: null, taskStopping: true }]);
});

it('reports the worker container’s start once, at its StartedAt (its image may have been pulling until then)', async () => {
  const startedAt = '2026-11-25T00:10:00.123Z';
  const running = () => {
    const answer = task('RUNNING');
    (answer.body.Containers[1] as Record<string, unknown>).StartedAt = startedAt;
    return answer;
  };
  const uri = await metadataServer([
    () => task('PULLED'),
    () => task('CREATED'),
    running,
    running,
    () => task('STOPPED', 0),
  ]);
  const starts: number[] = [];
  await watchToTheEnd(uri, { onStarted: (atMs) => void starts.push(atMs) });
  expect(starts).toEqual([Date.parse(startedAt)]);
});

it('says once that ECS is stopping the task while the worker still runs, so the agent stops handing out jobs', async () => {
  // ECS signals the worker first (it depends on the agent), and a worker that ignores SIGTERM would
  // go on taking jobs its stopTimeout then cuts off.
  const uri = await metadataServer([
    () => task('RUNNING'),
    () => task('RUNNING', undefined, 'STOPPED'),
    () => task('RUNNING', undefined, 'STOPPED'),
    () => task('STOPPED', 0, 'STOPPED'),
  ]);
  const events: string[] = [];
  await watchToTheEnd(uri, {
    onTaskStopping: () => void events.push('task stopping'),
    onExit: (how) => void events.push(`exit ${how.code} taskStopping=${how.taskStopping}`),
  });
  expect(events).toEqual(['task stopping', 'exit 0 taskStopping=true']);
});
