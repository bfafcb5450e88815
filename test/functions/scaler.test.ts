/**
 * The scaler Lambda over real stores: DynamoDB Local (control and workers tables, jobs) and fauxqs
 * (SQS queue depth), with the engine taking and finishing jobs as an agent does, a fake clock, and an
 * injected ECS client that records UpdateService calls and answers DescribeServices as ECS does
 * (https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_DescribeServices.html), and
 * ListTasks/DescribeTasks with the tasks a desired count made, each created when it was asked for and
 * started when the test says its instance came up
 * (https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_ListTasks.html,
 * https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_DescribeTasks.html). ECS itself
 * (task placement, cold starts, protection) is covered by the simulation in test/unit/scaling-sim.test.ts.
 */
import {
  DescribeServicesCommand,
  DescribeTasksCommand,
  ListTasksCommand,
  UpdateServiceCommand,
} from '@aws-sdk/client-ecs';
import type { InvokeCommand } from '@aws-sdk/client-lambda';
import { GetCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { type DynamoControlStore, startFailuresKey } from '../../core/adapters/aws/dynamo.js';
import { LocalChangeFeed } from '../../core/changes.js';
import { FakeClock } from '../../core/clock.js';
import { JobEngine } from '../../core/engine.js';
import type { ManifestEndpoint } from '../../core/manifest.js';
import {
  metricsLineKey,
  serviceTasksFields,
  serviceTasksQuery,
  taskStartFailureMetricName,
} from '../../core/metrics.js';
import {
  createScaler,
  lambdaInvoker,
  NudgingChangeFeed,
  provisionAllowanceMs,
  type ScalerDeps,
  type ScalerEvent,
  scaleEndpoints,
  scalerEventOf,
  taskStartFailureOf,
  turnedAwayOf,
} from '../../functions/scaler.js';
import { poolMaxInstances } from '../../infra/gpu.js';
import { wakeAlarmName } from '../../infra/names.js';
import { defaultHealthCheckGraceSec } from '../../infra/task-layout.js';
import { sampleResources } from '../infra/fixtures.js';
import { type AwsFixture, startAwsFixture } from '../support/emulators.js';
import { recordFor } from '../support/endpoints.js';

const idleTimeoutSec = 5;
const staleMs = 180_000;

function manifestEndpoint(
  name: string,
  kind: 'queue' | 'lb' = 'queue',
  resources: Partial<ManifestEndpoint['resources']> = {},
): ManifestEndpoint {
  return {
    name,
    kind,
    file: 'main.py',
    module: 'main',
    ...(kind === 'queue'
      ? { target: { name: 'handler', type: 'function', isAsync: false, isGenerator: false, params: ['job'] } }
      : { variable: 'app', routes: [] }),
    resources: { ...sampleResources, idleTimeoutSec, ...resources },
    configHash: 'h',
  } as ManifestEndpoint;
}

interface FakeTask {
  arn: string;
  createdAt: Date;
  startedAt?: Date;
}

/**
 * ECS as the scaler sees it: services by name with a desiredCount; UpdateService calls recorded. Each
 * service holds the tasks its count asks for: a raise creates them (waiting for an instance until
 * `start`), a cut stops tasks not yet running first, as the service scheduler does
 * (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-scale-in-protection.html).
 */
class FakeEcs {
  readonly services = new Map<string, number>();
  readonly tasks = new Map<string, FakeTask[]>();
  readonly updates: { service: string; desiredCount: number }[] = [];
  readonly describeBatches: number[] = [];
  /** Services whose tasks the scaler listed. */
  readonly listed: string[] = [];
  /** Set to refuse ListTasks, as ECS does to a role without ecs:ListTasks. */
  refuseListTasks = false;
  /** Services whose UpdateService is refused (a throttle, a policy that denies it). */
  readonly refuseUpdate = new Set<string>();
  /** Each service's PRIMARY deployment (`ecs-svc/…`): a deploy that changes the service makes a new one. */
  private readonly primaries = new Map<string, string>();
  private nextTask = 0;
  private nextDeployment = 0;

  /** The ID of the service's PRIMARY deployment, which starts its tasks (their `startedBy`). */
  deploymentOf(service: string): string {
    let id = this.primaries.get(service);
    if (!id) {
      id = `ecs-svc/${9_000_000 + ++this.nextDeployment}`;
      this.primaries.set(service, id);
    }
    return id;
  }

  /** A new task definition or a forced new deployment: a new PRIMARY deployment. */
  newDeployment(service: string): string {
    this.primaries.delete(service);
    return this.deploymentOf(service);
  }

  constructor(private readonly clock: FakeClock) {}

  /** The instance came up and the service's oldest waiting task runs. */
  start(service: string): void {
    const waiting = (this.tasks.get(service) ?? []).find((t) => !t.startedAt);
    if (!waiting) throw new Error(`no task of ${service} waits to start`);
    waiting.startedAt = new Date(this.clock.now());
  }

  async send(command: unknown): Promise<unknown> {
    if (command instanceof ListTasksCommand) {
      if (this.refuseListTasks)
        throw new Error('AccessDeniedException: not authorized to perform ecs:ListTasks');
      const service = command.input.serviceName!;
      this.listed.push(service);
      return { taskArns: (this.tasks.get(service) ?? []).map((t) => t.arn) };
    }
    if (command instanceof DescribeTasksCommand) {
      const arns = new Set(command.input.tasks ?? []);
      const tasks = [...this.tasks.values()].flat().filter((t) => arns.has(t.arn));
      return {
        tasks: tasks.map((t) => ({
          taskArn: t.arn,
          createdAt: t.createdAt,
          lastStatus: t.startedAt ? 'RUNNING' : 'PROVISIONING',
          ...(t.startedAt ? { startedAt: t.startedAt } : {}),
        })),
      };
    }
    if (command instanceof DescribeServicesCommand) {
      const names = command.input.services ?? [];
      if (names.length > 10) throw new Error('InvalidParameterException: at most 10 services');
      this.describeBatches.push(names.length);
      return {
        services: names
          .filter((n) => this.services.has(n))
          .map((n) => ({
            serviceName: n,
            status: 'ACTIVE',
            desiredCount: this.services.get(n),
            // Tasks placed and started count as running; the others wait (PENDING).
            runningCount: (this.tasks.get(n) ?? []).filter((t) => t.startedAt).length,
            pendingCount: (this.tasks.get(n) ?? []).filter((t) => !t.startedAt).length,
            deployments: [{ id: this.deploymentOf(n), status: 'PRIMARY' }],
          })),
        failures: names.filter((n) => !this.services.has(n)).map((n) => ({ arn: n, reason: 'MISSING' })),
      };
    }
    if (command instanceof UpdateServiceCommand) {
      const { service, desiredCount } = command.input;
      if (this.refuseUpdate.has(service!))
        throw new Error(`AccessDeniedException: not authorized to perform ecs:UpdateService on ${service}`);
      this.updates.push({ service: service!, desiredCount: desiredCount! });
      this.services.set(service!, desiredCount!);
      const tasks = this.tasks.get(service!) ?? [];
      while (tasks.length < desiredCount!) {
        tasks.push({
          arn: `arn:aws:ecs:eu-west-1:1:task/ferry/t${++this.nextTask}`,
          createdAt: new Date(this.clock.now()),
        });
      }
      // A cut stops tasks not yet running first, the newest of them first.
      tasks.sort(
        (a, b) =>
          Number(!a.startedAt) - Number(!b.startedAt) || a.createdAt.getTime() - b.createdAt.getTime(),
      );
      tasks.splice(desiredCount!);
      this.tasks.set(service!, tasks);
      return { service: { serviceName: service, desiredCount } };
    }
    throw new Error(`unexpected command ${(command as object).constructor.name}`);
  }
}

let aws: AwsFixture;
let control: DynamoControlStore;
let clock: FakeClock;
let engine: JobEngine;
let ecs: FakeEcs;
let deps: ScalerDeps;

beforeAll(async () => {
  aws = await startAwsFixture();
  control = aws.control();
}, 120_000);
afterAll(async () => {
  await aws?.stop();
});

let n = 0;
/** A fresh endpoint id per test: queues and worker records never leak between tests. */
async function deploy(
  kind: 'queue' | 'lb' = 'queue',
  withService = true,
  resources: Partial<ManifestEndpoint['resources']> = {},
): Promise<string> {
  const id = `ep${++n}-${Math.random().toString(36).slice(2, 8)}`;
  await control.putEndpoint(recordFor(manifestEndpoint(id, kind, resources), '/nowhere', id));
  if (withService) ecs.services.set(`ferry-${id}`, 0);
  return id;
}

beforeEach(async () => {
  for (const e of await control.listEndpoints()) await control.deleteEndpoint(e.id);
  clock = new FakeClock(Date.now());
  ecs = new FakeEcs(clock);
  const workers = aws.workers();
  engine = new JobEngine({
    jobs: aws.jobs(),
    queue: aws.queue(),
    workers,
    changes: new LocalChangeFeed(clock),
    clock,
    settings: { workerStaleMs: staleMs },
  });
  deps = {
    control,
    queue: aws.queue(),
    jobs: aws.jobs(),
    workers,
    ecs: ecs as unknown as ScalerDeps['ecs'],
    cluster: 'ferry',
    serviceNamePrefix: 'ferry-',
    clock,
    workerStaleMs: staleMs,
  };
});

const desiredOf = (id: string) => ecs.services.get(`ferry-${id}`);

describe('scaler', () => {
  it('never asks for more tasks than the endpoint’s pool has instances, whatever workers= says', async () => {
    // The rest would wait in PROVISIONING for an instance the pool cannot launch (infra/gpu.ts).
    const ep = await deploy('queue', true, { workersMin: 0, workersMax: 20 });
    for (let i = 0; i < 40; i++) await engine.submit(ep, { input: { i } }, { sync: false });
    await scaleEndpoints(deps, {});
    expect(desiredOf(ep)).toBe(poolMaxInstances);
    // A record deployed before the deploy check refused such a minimum.
    const pinned = await deploy('queue', true, { workersMin: 12, workersMax: 12 });
    await scaleEndpoints(deps, {});
    expect(desiredOf(pinned)).toBe(poolMaxInstances);
  });

  it('a burst of 50 on workers=(0,3) asks for exactly 3, once, however often it runs', async () => {
    const ep = await deploy();
    for (let i = 0; i < 50; i++) await engine.submit(ep, { input: { i } }, { sync: false });
    await scaleEndpoints(deps, {});
    expect(desiredOf(ep)).toBe(3);
    // The GPU instances take minutes: the scaler runs every minute meanwhile and asks for no more.
    for (let minute = 0; minute < 6; minute++) {
      clock.advance(60_000);
      await scaleEndpoints(deps, {});
    }
    expect(ecs.updates).toEqual([{ service: `ferry-${ep}`, desiredCount: 3 }]);
  });

  it('one job on an idle endpoint: one worker through a long cold start', async () => {
    const ep = await deploy();
    await engine.submit(ep, { input: {} }, { sync: false });
    for (let minute = 0; minute < 6; minute++) {
      await scaleEndpoints(deps, { endpointId: ep });
      clock.advance(60_000);
    }
    expect(ecs.updates).toEqual([{ service: `ferry-${ep}`, desiredCount: 1 }]);
  });

  it('low-priority jobs never scale an endpoint up', async () => {
    const ep = await deploy();
    for (let i = 0; i < 5; i++) {
      await engine.submit(ep, { input: {}, policy: { lowPriority: true } }, { sync: false });
    }
    const [report] = await scaleEndpoints(deps, { endpointId: ep });
    expect(report!.decision).toMatchObject({ desired: 0, demand: 0 });
    expect(ecs.updates).toEqual([]);
  });

  it('keeps a worker holding a job past idle_timeout, and lets it go idle_timeout after it finishes', async () => {
    const ep = await deploy();
    const job = await engine.submit(ep, { input: {} }, { sync: false });
    await scaleEndpoints(deps, {});
    expect(desiredOf(ep)).toBe(1);
    // The task's agent takes the job (the registry now says it holds it; the queue is empty).
    const [taken] = await engine.take(ep, 'w1', 1, 0);
    expect(taken?.id).toBe(job.id);
    clock.advance(idleTimeoutSec * 1000 * 10);
    await engine.ping(ep, 'w1', [job.id]);
    await scaleEndpoints(deps, {});
    expect(desiredOf(ep)).toBe(1);
    await engine.done(ep, 'w1', job.id, { output: 'ok' });
    clock.advance(idleTimeoutSec * 1000 - 1);
    await scaleEndpoints(deps, {});
    expect(desiredOf(ep)).toBe(1);
    clock.advance(1);
    const [report] = await scaleEndpoints(deps, {});
    expect(desiredOf(ep)).toBe(0);
    expect(report!.decision!.mayStop).toEqual(['w1']);
  });

  it('a second endpoint at min is left alone, and a missing service is reported, not fatal', async () => {
    const busy = await deploy();
    const quiet = await deploy();
    const orphan = await deploy('queue', false);
    await engine.submit(busy, { input: {} }, { sync: false });
    await engine.submit(orphan, { input: {} }, { sync: false });
    const reports = await scaleEndpoints(deps, {});
    expect(desiredOf(busy)).toBe(1);
    expect(desiredOf(quiet)).toBe(0);
    expect(reports.find((r) => r.endpointId === orphan)?.error).toMatch(/no active ECS service/);
    expect(ecs.updates.map((u) => u.service)).toEqual([`ferry-${busy}`]);
  });

  it('the run fails after scaling the rest when an endpoint could not be scaled, so the ScalerErrors alarm sees it', async () => {
    const refused = await deploy();
    const fine = await deploy();
    const orphan = await deploy('queue', false);
    for (const ep of [refused, fine, orphan]) await engine.submit(ep, { input: {} }, { sync: false });
    ecs.refuseUpdate.add(`ferry-${refused}`);
    const logged: Array<Record<string, unknown>> = [];
    const run = createScaler(() => ({ ...deps, log: (line) => logged.push(line) }));
    await expect(run({})).rejects.toThrow(`1 endpoint(s) could not be scaled (${refused})`);
    // The others were scaled, and the refused one's reason is in its log line.
    expect(desiredOf(fine)).toBe(1);
    expect(logged.find((l) => l.endpointId === refused)?.error).toMatch(
      /not authorized to perform ecs:UpdateService/,
    );
    // A service that is not there (a stack being created or deleted) fails no run.
    ecs.refuseUpdate.clear();
    const reports = await run({});
    expect(reports.find((r) => r.endpointId === orphan)?.noService).toBe(true);
    expect(desiredOf(refused)).toBe(1);
  });

  // The dashboard's workers graph reads these lines in the scaler's own log group (core/metrics.ts),
  // not Container Insights' task counts, which a worker's printed line could add to.
  it('prints each endpoint’s service counts as DescribeServices gave them, with the desiredCount it set or left', async () => {
    const ep = await deploy();
    const refused = await deploy();
    const orphan = await deploy('queue', false);
    for (let i = 0; i < 2; i++) await engine.submit(ep, { input: { i } }, { sync: false });
    await engine.submit(refused, { input: {} }, { sync: false });
    await engine.submit(orphan, { input: {} }, { sync: false });
    ecs.refuseUpdate.add(`ferry-${refused}`);
    const logged: Array<Record<string, unknown>> = [];
    const run = (event: ScalerEvent) => scaleEndpoints({ ...deps, log: (line) => logged.push(line) }, event);
    const countsOf = (id: string) => {
      const lines = logged.filter((l) => l.endpointId === id);
      expect(lines).toHaveLength(1);
      return lines[0]!;
    };
    await run({});
    expect(countsOf(ep)).toMatchObject(serviceTasksFields(ep, { desired: 2, running: 0, pending: 0 }));
    expect(desiredOf(ep)).toBe(2);
    // UpdateService refused: the count the service kept, not the one the policy wanted.
    expect(countsOf(refused)).toMatchObject({ desired: 1, updated: false });
    expect(countsOf(refused)).toMatchObject(
      serviceTasksFields(refused, { desired: 0, running: 0, pending: 0 }),
    );
    // No service, no counts to graph.
    expect(countsOf(orphan)).not.toHaveProperty(metricsLineKey);
    // One of the two tasks found an instance: running 1, pending 1, and the count left at 2.
    ecs.start(`ferry-${ep}`);
    clock.advance(60_000);
    logged.length = 0;
    await run({ endpointId: ep });
    const line = countsOf(ep);
    expect(line).toMatchObject(serviceTasksFields(ep, { desired: 2, running: 1, pending: 1 }));
    expect(line).not.toHaveProperty('_aws');
    // The dashboard's query reads it as the scaler's function prints it (functions/wiring.ts: JSON
    // after Lambda's text prefix), for this endpoint only.
    const printed = `2026-01-01T00:00:00.000Z\t0c3f7b9e-request\tINFO\t${JSON.stringify(line)}`;
    // The regular expressions of its `filter` and `parse` lines (`/…/`; the stats line has none).
    const patterns = (id: string) =>
      serviceTasksQuery(id)
        .slice(0, 2)
        .map((q) => new RegExp(q.slice(q.indexOf('/') + 1, q.lastIndexOf('/'))));
    const [filter, parse] = patterns(ep);
    expect(filter!.test(printed)).toBe(true);
    expect(printed.match(parse!)?.groups).toEqual({
      desiredTasks: '2',
      runningTasks: '1',
      pendingTasks: '1',
    });
    expect(patterns(refused)[0]!.test(printed)).toBe(false);
  });

  it('describes services ten at a time', async () => {
    for (let i = 0; i < 12; i++) await deploy();
    await scaleEndpoints(deps, {});
    expect(ecs.describeBatches.sort()).toEqual([10, 2].sort());
  });

  it('load-balanced: the schedule wakes an endpoint whose wake-up alarm is still in ALARM (clients still turned away)', async () => {
    // The alarm acted once, when it went to ALARM; retries keep it there and it acts no more
    // (https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/alarm-actions.html).
    const waiting = await deploy('lb');
    const quiet = await deploy('lb');
    const pages = [
      { MetricAlarms: [{ AlarmName: `ferry-wake-${waiting}` }], NextToken: 't1' },
      { MetricAlarms: [{ AlarmName: 'ferry-wake-someone-else' }] },
    ];
    const asked: unknown[] = [];
    const cloudwatch = {
      send: async (command: { input: unknown }) => {
        asked.push(command.input);
        return pages.shift()!;
      },
    };
    await scaleEndpoints({ ...deps, turnedAway: turnedAwayOf(cloudwatch as never) }, {});
    expect(desiredOf(waiting)).toBe(1);
    expect(desiredOf(quiet)).toBe(0);
    expect(asked).toEqual([
      expect.objectContaining({ AlarmNamePrefix: 'ferry-wake-', StateValue: 'ALARM', NextToken: undefined }),
      expect.objectContaining({ AlarmNamePrefix: 'ferry-wake-', StateValue: 'ALARM', NextToken: 't1' }),
    ]);
    // CloudWatch out of reach: the run goes on without it.
    const failing = await deploy('lb');
    await scaleEndpoints(
      {
        ...deps,
        turnedAway: async () => {
          throw new Error('AccessDenied');
        },
      },
      {},
    );
    expect(desiredOf(failing)).toBe(0);
  });

  it('load-balanced: a waiting request scales from zero; in-flight requests keep the worker; back to min after idle', async () => {
    const ep = await deploy('lb');
    await scaleEndpoints(deps, { endpointId: ep, waitingRequests: 1 });
    expect(desiredOf(ep)).toBe(1);
    // The agent reports its in-flight requests to the workers table (worker-image/agent/lb.ts).
    await aws.workers().heartbeat({
      workerId: 'lb1',
      endpointId: ep,
      state: 'running',
      jobIds: [],
      inFlight: 1,
      lastSeenAt: clock.now(),
      lastBusyAt: clock.now(),
    });
    clock.advance(60_000);
    await scaleEndpoints(deps, {});
    expect(desiredOf(ep)).toBe(1);
    await aws.workers().heartbeat({
      workerId: 'lb1',
      endpointId: ep,
      state: 'idle',
      jobIds: [],
      inFlight: 0,
      lastSeenAt: clock.now(),
      lastBusyAt: clock.now(),
    });
    clock.advance(idleTimeoutSec * 1000);
    await scaleEndpoints(deps, {});
    expect(desiredOf(ep)).toBe(0);
  });
});

/** What a CloudWatch alarm's Lambda action sends (alarms-and-actions-Lambda.html, cited in functions/scaler.ts). */
function alarmEvent(endpointId: string) {
  return {
    source: 'aws.cloudwatch',
    alarmArn: `arn:aws:cloudwatch:eu-west-1:1:alarm:${wakeAlarmName(endpointId)}`,
    accountId: '1',
    time: new Date(clock.now()).toISOString(),
    region: 'eu-west-1',
    alarmData: {
      alarmName: wakeAlarmName(endpointId),
      state: { value: 'ALARM', reason: 'Threshold Crossed', timestamp: new Date(clock.now()).toISOString() },
      previousState: { value: 'OK' },
    },
  };
}

/** What the EventBridge schedule sends every minute. */
function scheduledEvent() {
  return {
    version: '0',
    id: 'e',
    'detail-type': 'Scheduled Event',
    source: 'aws.events',
    account: '1',
    time: new Date(clock.now()).toISOString(),
    region: 'eu-west-1',
    resources: ['arn:aws:events:eu-west-1:1:rule/ferry-scaler'],
    detail: {},
  };
}

const tick = () => scaleEndpoints(deps, scalerEventOf(scheduledEvent()));

/** What the load-balanced agent writes to the workers table (worker-image/agent/lb.ts). */
async function agentReports(
  endpointId: string,
  workerId: string,
  inFlight: number,
  lastBusyAt = clock.now(),
) {
  await aws.workers().heartbeat({
    workerId,
    endpointId,
    state: inFlight > 0 ? 'running' : 'idle',
    jobIds: [],
    inFlight,
    lastSeenAt: clock.now(),
    lastBusyAt,
  });
}

describe('a load-balanced endpoint woken from zero', () => {
  // sampleResources name no GPU model and no cpu: a GPU host, whose default grace is 900 s.
  const graceMs = defaultHealthCheckGraceSec.gpu * 1000;

  it('the alarm wakes it, the schedule 45 s later keeps the task waiting for its instance, and with no instance it goes back to 0 after the allowance', async () => {
    const ep = await deploy('lb');
    await scaleEndpoints(deps, scalerEventOf(alarmEvent(ep)));
    expect(desiredOf(ep)).toBe(1);
    const wokeAt = clock.now();
    // The next scheduled run: no waiting request (the alarm acts once), no worker (no instance yet).
    clock.advance(45_000);
    const [report] = await tick();
    expect(report).toMatchObject({ was: 1, booting: 1, updated: false });
    expect(desiredOf(ep)).toBe(1);
    // Every minute while no instance comes up: still one.
    while (clock.now() + 60_000 < wokeAt + provisionAllowanceMs) {
      clock.advance(60_000);
      await tick();
      expect(desiredOf(ep)).toBe(1);
    }
    // The task has waited its allowance: the endpoint is let go, not kept up for a request long gone.
    clock.advance(wokeAt + provisionAllowanceMs - clock.now());
    const [last] = await tick();
    expect(last).toMatchObject({ booting: 0, updated: true });
    expect(ecs.updates.map((u) => u.desiredCount)).toEqual([1, 0]);
  });

  it('a five-minute cold start: kept until its agent reports, serves the retried request, goes after idle_timeout', async () => {
    const ep = await deploy('lb');
    await scaleEndpoints(deps, scalerEventOf(alarmEvent(ep)));
    for (let minute = 1; minute <= 5; minute++) {
      clock.advance(60_000);
      await tick();
      expect(desiredOf(ep)).toBe(1);
    }
    // The instance is up and the task runs; its agent has not written its record yet.
    ecs.start(`ferry-${ep}`);
    clock.advance(1_000);
    await tick();
    expect(desiredOf(ep)).toBe(1);
    // The agent reports, with the client's retried request in flight; from here the workers table decides.
    await agentReports(ep, 'lb1', 1);
    clock.advance(30_000);
    await tick();
    expect(desiredOf(ep)).toBe(1);
    await agentReports(ep, 'lb1', 0);
    clock.advance(idleTimeoutSec * 1000 - 1);
    await tick();
    expect(desiredOf(ep)).toBe(1);
    clock.advance(1);
    await tick();
    expect(desiredOf(ep)).toBe(0);
    expect(ecs.updates.map((u) => u.desiredCount)).toEqual([1, 0]);
  });

  it('a task that runs but whose worker never reports is kept for health_check_grace, then let go', async () => {
    const ep = await deploy('lb');
    await scaleEndpoints(deps, scalerEventOf(alarmEvent(ep)));
    clock.advance(3 * 60_000);
    ecs.start(`ferry-${ep}`);
    clock.advance(graceMs - 1);
    await tick();
    expect(desiredOf(ep)).toBe(1);
    clock.advance(1);
    await tick();
    expect(desiredOf(ep)).toBe(0);
  });

  it('an endpoint the policy keeps up is left to the policy: min >= 1 and queue endpoints never read tasks', async () => {
    const lb = await deploy('lb', true, { workersMin: 1 });
    const queue = await deploy('queue');
    await scaleEndpoints(deps, { endpointId: lb });
    expect(desiredOf(lb)).toBe(1);
    // A queue endpoint with one task asked for a job since cancelled: lowered at once, as before.
    ecs.services.set(`ferry-${queue}`, 1);
    clock.advance(45_000);
    await tick();
    expect(desiredOf(lb)).toBe(1);
    expect(desiredOf(queue)).toBe(0);
    expect(ecs.listed).toEqual([]);
  });

  it('without ecs:ListTasks the policy answer stands and the report says why', async () => {
    const ep = await deploy('lb');
    await scaleEndpoints(deps, scalerEventOf(alarmEvent(ep)));
    ecs.refuseListTasks = true;
    clock.advance(45_000);
    const [report] = await tick();
    expect(report!.error).toMatch(/reading the tasks of ferry-.*AccessDenied/);
    expect(desiredOf(ep)).toBe(0);
  });
});

describe('the nudge', () => {
  function nudgeFeed(quietMs = 10_000) {
    const invoked: string[] = [];
    const feed = new NudgingChangeFeed({
      inner: new LocalChangeFeed(clock),
      workers: aws.workers(),
      clock,
      workerStaleMs: () => staleMs,
      invoke: async (endpointId) => {
        invoked.push(endpointId);
      },
      quietMs,
    });
    const nudged = new JobEngine({
      jobs: aws.jobs(),
      queue: aws.queue(),
      workers: aws.workers(),
      changes: feed,
      clock,
      settings: { workerStaleMs: staleMs },
    });
    return { invoked, feed, engine: nudged };
  }

  it('a submit to an endpoint with no worker invokes the scaler once per quiet period', async () => {
    const ep = await deploy();
    const { invoked, feed, engine: nudged } = nudgeFeed();
    for (let i = 0; i < 5; i++) await nudged.submit(ep, { input: {} }, { sync: false });
    await feed.settled();
    expect(invoked).toEqual([ep]);
    clock.advance(10_000);
    await nudged.submit(ep, { input: {} }, { sync: false });
    await feed.settled();
    expect(invoked).toEqual([ep, ep]);
  });

  it('a low-priority submit invokes nothing (such jobs never scale up), and does not hold back the urgent one after it', async () => {
    const ep = await deploy();
    const { invoked, feed, engine: nudged } = nudgeFeed();
    await nudged.submit(ep, { input: {}, policy: { lowPriority: true } }, { sync: false });
    await feed.settled();
    expect(invoked).toEqual([]);
    await nudged.submit(ep, { input: {} }, { sync: false });
    await feed.settled();
    expect(invoked).toEqual([ep]);
  });

  it('the invoke says an urgent job was queued, which the scaler counts when the queue depth lags', async () => {
    const sent: unknown[] = [];
    await lambdaInvoker(
      { send: async (command: unknown) => sent.push(command) } as never,
      'ferry-scaler',
    )('ep1');
    const input = (sent[0] as InvokeCommand).input;
    expect(input).toMatchObject({ FunctionName: 'ferry-scaler', InvocationType: 'Event' });
    expect(JSON.parse(Buffer.from(input.Payload as Uint8Array).toString())).toEqual({
      endpointId: 'ep1',
      urgentJob: true,
    });

    const ep = await deploy();
    await engine.submit(ep, { input: {} }, { sync: false });
    // The queue's attributes "may not achieve consistency until at least 1 minute after the
    // producers stop sending messages" (GetQueueAttributes): a read right after the send says 0.
    const lagging = { ...deps, queue: { ...deps.queue, depth: async () => ({ urgent: 0, visible: 0 }) } };
    await scaleEndpoints(lagging, { endpointId: ep });
    expect(ecs.updates).toEqual([]);
    await scaleEndpoints(lagging, { endpointId: ep, urgentJob: true });
    expect(desiredOf(ep)).toBe(1);
  });

  it('does not invoke the scaler while the endpoint has a live worker', async () => {
    const ep = await deploy();
    const { invoked, feed, engine: nudged } = nudgeFeed();
    await nudged.take(ep, 'w1', 1, 0);
    await nudged.submit(ep, { input: {} }, { sync: false });
    await feed.settled();
    expect(invoked).toEqual([]);
  });

  it('a failed invoke never fails the submit, and the next submit tries again', async () => {
    const ep = await deploy();
    let calls = 0;
    const feed = new NudgingChangeFeed({
      inner: new LocalChangeFeed(clock),
      workers: aws.workers(),
      clock,
      workerStaleMs: () => staleMs,
      invoke: async () => {
        calls++;
        if (calls === 1) throw new Error('TooManyRequestsException');
      },
      log: () => {},
    });
    const nudged = new JobEngine({
      jobs: aws.jobs(),
      queue: aws.queue(),
      workers: aws.workers(),
      changes: feed,
      clock,
    });
    await nudged.submit(ep, { input: {} }, { sync: false });
    await feed.settled();
    await nudged.submit(ep, { input: {} }, { sync: false });
    await feed.settled();
    expect(calls).toBe(2);
  });

  it('messages of purged jobs scale nothing: the depth counts only up to the jobs still IN_QUEUE', async () => {
    const ep = await deploy();
    for (let i = 0; i < 20; i++) await engine.submit(ep, { input: { i } }, { sync: false });
    expect((await engine.purge(ep)).removed).toBe(20);
    // SQS keeps every message (only the receipt of a receive deletes one): the depth alone says 20.
    expect((await aws.queue().depth(ep)).urgent).toBe(20);
    await scaleEndpoints(deps, {});
    expect(ecs.updates).toEqual([]);
    // A real job after them is one job's worth of demand, not 21.
    await engine.submit(ep, { input: {} }, { sync: false });
    await scaleEndpoints(deps, {});
    expect(desiredOf(ep)).toBe(1);
  });

  it('a cancelled urgent job’s message starts no worker for the low-priority jobs queued beside it', async () => {
    const ep = await deploy();
    const urgent = await engine.submit(ep, { input: {} }, { sync: false });
    for (let i = 0; i < 3; i++)
      await engine.submit(ep, { input: { i }, policy: { lowPriority: true } }, { sync: false });
    await engine.cancel(ep, urgent.id);
    // The cancelled job's message stays in the urgent queue; three jobs are IN_QUEUE, none urgent.
    expect((await aws.queue().depth(ep)).urgent).toBe(1);
    expect(await aws.jobs().queuedAtMost(ep, clock.now())).toEqual({ all: 3, urgent: 0 });
    const [report] = await scaleEndpoints(deps, {});
    expect(report!.decision).toMatchObject({ desired: 0, demand: 0 });
    expect(ecs.updates).toEqual([]);
    // An urgent job among them still starts one.
    await engine.submit(ep, { input: {} }, { sync: false });
    await scaleEndpoints(deps, {});
    expect(desiredOf(ep)).toBe(1);
  });

  it('a nudge scales from zero even when the count read has not caught up with the submit yet', async () => {
    const ep = await deploy();
    await engine.submit(ep, { input: {} }, { sync: false });
    // The count items are read from a GSI, which lags the write a little on AWS (DynamoDB Local does
    // not): a read that still says 0 IN_QUEUE.
    const lagging = { ...deps, jobs: { queuedAtMost: async () => ({ all: 0, urgent: 0 }) } };
    await scaleEndpoints(lagging, {});
    expect(ecs.updates).toEqual([]);
    await scaleEndpoints(lagging, { endpointId: ep });
    expect(desiredOf(ep)).toBe(1);
  });

  it('the nudged scaler decides from zero at once', async () => {
    const ep = await deploy();
    const feed = new NudgingChangeFeed({
      inner: new LocalChangeFeed(clock),
      workers: aws.workers(),
      clock,
      workerStaleMs: () => staleMs,
      invoke: async (endpointId) => {
        await scaleEndpoints(deps, { endpointId });
      },
    });
    const nudged = new JobEngine({
      jobs: aws.jobs(),
      queue: aws.queue(),
      workers: aws.workers(),
      changes: feed,
      clock,
    });
    await nudged.submit(ep, { input: {} }, { sync: false });
    await feed.settled();
    expect(desiredOf(ep)).toBe(1);
  });
});

describe('a task that stopped before it ran (EventBridge "ECS Task State Change")', () => {
  // The shape of https://docs.aws.amazon.com/AmazonECS/latest/developerguide/ecs_task_events.html.
  const event = (detail: Record<string, unknown>) => ({
    version: '0',
    source: 'aws.ecs',
    'detail-type': 'ECS Task State Change',
    detail: {
      clusterArn: 'arn:aws:ecs:eu-west-1:1:cluster/ferry',
      containerInstanceArn: 'arn:aws:ecs:eu-west-1:1:container-instance/ferry/0a1b2c',
      taskArn: 'arn:aws:ecs:eu-west-1:1:task/ferry/5f1e2d',
      startedBy: 'ecs-svc/9223370545345641169',
      group: 'service:ferry-ep1abc',
      lastStatus: 'STOPPED',
      stopCode: 'TaskFailedToStart',
      stoppedReason: 'CannotPullContainerError: pull image manifest has been retried 5 time(s)',
      containers: [
        { name: 'worker', reason: 'CannotPullContainerError: not found' },
        { name: 'agent', lastStatus: 'STOPPED' },
      ],
      ...detail,
    },
  });

  it('names the endpoint of the service, ECS reason and the containers’ own', () => {
    expect(taskStartFailureOf(event({}), 'ferry-')).toEqual({
      endpointId: 'ep1abc',
      taskArn: 'arn:aws:ecs:eu-west-1:1:task/ferry/5f1e2d',
      startedBy: 'ecs-svc/9223370545345641169',
      reason: 'CannotPullContainerError: pull image manifest has been retried 5 time(s)',
      lines: ['worker: CannotPullContainerError: not found'],
    });
  });

  it('is nothing for a task of no Ferry service, another stop code, or another event', () => {
    for (const other of [
      event({ group: 'service:billing' }),
      event({ group: 'family:ferry-ep1abc' }),
      event({ group: 'service:ferry-' }),
      event({ stopCode: 'EssentialContainerExited' }),
      // No task to count once: ECS always names it.
      event({ taskArn: undefined }),
      { source: 'aws.ecs', 'detail-type': 'ECS Container Instance State Change', detail: {} },
      { endpointId: 'ep1abc' },
    ]) {
      expect(taskStartFailureOf(other, 'ferry-')).toBeUndefined();
    }
  });

  // The init container (the artifact download) exited non-zero: the agent and the worker wait for its
  // SUCCESS and never start. ECS documents no stop code for this, so it may come as either.
  const initFailed = (stopCode: string, artifactExit: number, others: Record<string, unknown>[] = []) =>
    event({
      stopCode,
      stoppedReason: 'Essential container in task exited',
      containers: [
        { name: 'artifact', lastStatus: 'STOPPED', exitCode: artifactExit },
        { name: 'agent', lastStatus: 'STOPPED' },
        { name: 'worker', lastStatus: 'STOPPED' },
        ...others,
      ],
    });

  it('counts a task whose artifact download exited non-zero, under either stop code, naming the download', () => {
    for (const stopCode of ['EssentialContainerExited', 'TaskFailedToStart']) {
      expect(taskStartFailureOf(initFailed(stopCode, 1), 'ferry-'), stopCode).toMatchObject({
        endpointId: 'ep1abc',
        taskArn: 'arn:aws:ecs:eu-west-1:1:task/ferry/5f1e2d',
        reason: 'the artifact download exited 1 before the worker could start; `ferry logs` shows its output',
      });
    }
  });

  it('is nothing for a task that ran, or one the scheduler stopped during its download', () => {
    // The download succeeded, then the agent or the worker ended: the agent saw it and counted.
    const ran = event({
      stopCode: 'EssentialContainerExited',
      stoppedReason: 'Essential container in task exited',
      containers: [
        { name: 'artifact', lastStatus: 'STOPPED', exitCode: 0 },
        { name: 'agent', lastStatus: 'STOPPED', exitCode: 1 },
        { name: 'worker', lastStatus: 'STOPPED', exitCode: 137 },
      ],
    });
    expect(taskStartFailureOf(ran, 'ferry-')).toBeUndefined();
    // Scale-in or a deploy stopped the task mid-download: SIGTERM's exit is not the endpoint's fault.
    for (const stopCode of ['ServiceSchedulerInitiated', 'UserInitiated', 'SpotInterruption']) {
      expect(taskStartFailureOf(initFailed(stopCode, 143), 'ferry-'), stopCode).toBeUndefined();
    }
  });

  it('reads a container whose exit code is null as one that did not exit: a failed start still counts', () => {
    const nulls = event({
      containers: [
        { name: 'artifact', lastStatus: 'STOPPED', exitCode: null },
        { name: 'worker', reason: 'CannotPullContainerError: not found', exitCode: null },
      ],
    });
    expect(taskStartFailureOf(nulls, 'ferry-')).toMatchObject({
      reason: 'CannotPullContainerError: pull image manifest has been retried 5 time(s)',
    });
    expect(
      taskStartFailureOf(
        { ...nulls, detail: { ...nulls.detail, stopCode: 'EssentialContainerExited' } },
        'ferry-',
      ),
    ).toBeUndefined();
  });

  it('is nothing for a task ECS could not place: no capacity is not the endpoint’s fault', () => {
    // Never on an instance: it waited in PROVISIONING until ECS stopped it.
    expect(taskStartFailureOf(event({ containerInstanceArn: undefined }), 'ferry-')).toBeUndefined();
    for (const stoppedReason of [
      'TaskFailedToStart: RESOURCE:GPU',
      'TaskFailedToStart: RESOURCE:MEMORY',
      'TaskFailedToStart: AGENT',
      'TaskFailedToStart: MemberOf placement constraint unsatisfied.',
    ]) {
      expect(taskStartFailureOf(event({ stoppedReason }), 'ferry-'), stoppedReason).toBeUndefined();
    }
    // A secret that is missing is the endpoint's, on an instance like an image that cannot be pulled.
    expect(
      taskStartFailureOf(
        event({ stoppedReason: 'ResourceInitializationError: unable to pull secrets or registry auth' }),
        'ferry-',
      )?.endpointId,
    ).toBe('ep1abc');
  });

  it('is not taken for a schedule run or a nudge by scalerEventOf’s callers: the events differ', () => {
    // createScaler asks taskStartFailureOf first; the scheduled event has no detail of this shape.
    expect(
      taskStartFailureOf({ source: 'aws.events', 'detail-type': 'Scheduled Event', detail: {} }, 'ferry-'),
    ).toBeUndefined();
    expect(scalerEventOf(event({}))).toEqual({});
  });
});

describe('failed starts from ECS events, each task counted once (DynamoDB Local)', () => {
  // ECS sends its events "on an at least once basis. This means you might receive multiple copies
  // of a given event" (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/ecs_cwet_handling.html),
  // and Lambda may hand the function "the same event from Lambda multiple times"
  // (https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-error-handling.html).
  const failedTask = (
    endpointId: string,
    task: string,
    startedBy = ecs.deploymentOf(`ferry-${endpointId}`),
  ) => ({
    version: '0',
    id: `event-${task}`,
    source: 'aws.ecs',
    'detail-type': 'ECS Task State Change',
    detail: {
      clusterArn: 'arn:aws:ecs:eu-west-1:1:cluster/ferry',
      containerInstanceArn: 'arn:aws:ecs:eu-west-1:1:container-instance/ferry/0a1b2c',
      taskArn: `arn:aws:ecs:eu-west-1:1:task/ferry/${task}`,
      startedBy,
      group: `service:ferry-${endpointId}`,
      lastStatus: 'STOPPED',
      stopCode: 'TaskFailedToStart',
      stoppedReason: 'ResourceInitializationError: unable to pull secrets or registry auth',
      containers: [{ name: 'worker', lastStatus: 'STOPPED' }],
      version: 3,
    },
  });
  const lines: Record<string, unknown>[] = [];
  const scaler = () => createScaler(() => ({ ...deps, log: (line) => lines.push(line) }));
  beforeEach(() => {
    lines.length = 0;
  });

  it('three tasks whose artifact download failed make the endpoint failing, with the download named', async () => {
    const ep = await deploy();
    const run = scaler();
    for (const task of ['t1', 't2', 't3']) {
      const failed = failedTask(ep, task);
      await run({
        ...failed,
        detail: {
          ...failed.detail,
          stopCode: 'EssentialContainerExited',
          stoppedReason: 'Essential container in task exited',
          containers: [
            { name: 'artifact', lastStatus: 'STOPPED', exitCode: 1 },
            { name: 'agent', lastStatus: 'STOPPED' },
            { name: 'worker', lastStatus: 'STOPPED' },
          ],
        },
      });
    }
    const failing = await control.startFailures(ep);
    expect(failing).toMatchObject({ failedStarts: 3, problem: { state: 'failing' } });
    expect(failing?.problem?.reason).toContain('the artifact download exited 1');
    expect(desiredOf(ep)).toBe(0);
  });

  it('the same event delivered twice counts once; another task counts again', async () => {
    const ep = await deploy();
    const run = scaler();
    const copy = failedTask(ep, 't1');
    await run(copy);
    await run(structuredClone(copy));
    expect(await control.startFailures(ep)).toEqual({ failedStarts: 1 });
    expect(lines.filter((l) => l.msg === 'ferry task failed to start')).toMatchObject([
      { taskArn: copy.detail.taskArn, run: 1, counted: true },
      { taskArn: copy.detail.taskArn, run: 1, counted: false },
    ]);
    await run(failedTask(ep, 't2'));
    expect(await control.startFailures(ep)).toEqual({ failedStarts: 2 });
  });

  it('a counted task is one point of the dashboard’s failed starts (its log line); a copy adds none', async () => {
    const ep = await deploy();
    const run = scaler();
    const copy = failedTask(ep, 't1');
    await run(copy);
    await run(structuredClone(copy));
    const [counted, again] = lines.filter((l) => l.msg === 'ferry task failed to start');
    // The dashboard counts these lines in the scaler's own log group (infra/constructs/dashboard.ts);
    // plain JSON, no embedded-metric-format `_aws` directive, so CloudWatch makes no metric of it, one
    // a worker's printed line could add to (core/metrics.ts).
    expect(counted).toMatchObject({
      [metricsLineKey]: 'taskStartFailure',
      EndpointId: ep,
      [taskStartFailureMetricName]: 1,
    });
    expect(counted).not.toHaveProperty('_aws');
    expect(again).not.toHaveProperty(metricsLineKey);
    expect(again).not.toHaveProperty(taskStartFailureMetricName);
  });

  it('three tasks make the endpoint failing; a copy of the third and a fourth task change nothing', async () => {
    const ep = await deploy();
    const run = scaler();
    for (const task of ['t1', 't2', 't3']) await run(failedTask(ep, task));
    const failing = await control.startFailures(ep);
    expect(failing).toMatchObject({ failedStarts: 3, problem: { state: 'failing' } });
    expect(failing?.problem?.reason).toContain('3 tasks in a row could not start');
    expect(desiredOf(ep)).toBe(0);
    clock.advance(60_000);
    // Neither throws, neither counts, and the verdict stays as it was written (its time included).
    const [report] = await run(failedTask(ep, 't3'));
    await run(failedTask(ep, 't4'));
    expect(report?.decision?.desired).toBe(0);
    expect(await control.startFailures(ep)).toEqual(failing);
  });

  it('a copy of the third task’s event writes the verdict an earlier run counted but did not write', async () => {
    const ep = await deploy();
    // A run that counted the third task and stopped before its verdict (a timeout, a crash).
    for (const task of ['t1', 't2', 't3']) {
      await control.addTaskStartFailure(ep, `arn:aws:ecs:eu-west-1:1:task/ferry/${task}`, 3);
    }
    expect(await control.startFailures(ep)).toEqual({ failedStarts: 3 });
    await scaler()(failedTask(ep, 't3'));
    expect(await control.startFailures(ep)).toMatchObject({ failedStarts: 3, problem: { state: 'failing' } });
  });

  it('after a deploy with a new deployment, late copies of the old tasks’ events do not count again', async () => {
    const ep = await deploy();
    const service = `ferry-${ep}`;
    const run = scaler();
    const old = [failedTask(ep, 't1'), failedTask(ep, 't2')];
    for (const event of old) await run(event);
    expect(await control.startFailures(ep)).toEqual({ failedStarts: 2 });
    // The deploy: CloudFormation updates the service (a new PRIMARY deployment), then the record is
    // written, which clears the run and the tasks it had counted.
    ecs.newDeployment(service);
    await control.putEndpoint((await control.getEndpoint(ep))!);
    expect(await control.startFailures(ep)).toBeUndefined();
    // Lambda retries throttled events for hours: copies from before the deploy arrive now.
    for (const event of old) await run(structuredClone(event));
    expect(await control.startFailures(ep)).toBeUndefined();
    expect(lines.filter((l) => l.ignored)).toHaveLength(2);
    expect(String(lines.find((l) => l.ignored)?.ignored)).toContain("not the service's current one");
    // A task of the new deployment counts.
    await run(failedTask(ep, 't3'));
    expect(await control.startFailures(ep)).toEqual({ failedStarts: 1 });
  });

  it('a deploy that left the service as it was: a late copy counts, once (what the deployment cannot tell)', async () => {
    const ep = await deploy();
    const run = scaler();
    const event = failedTask(ep, 't1');
    await run(event);
    await control.putEndpoint((await control.getEndpoint(ep))!);
    await run(structuredClone(event));
    await run(structuredClone(event));
    expect(await control.startFailures(ep)).toEqual({ failedStarts: 1 });
  });

  it('a task of a service that is gone counts nothing; without startedBy or a deployment to compare, it counts', async () => {
    const run = scaler();
    const gone = await deploy('queue', false);
    await run(failedTask(gone, 't1', 'ecs-svc/1'));
    expect(await control.startFailures(gone)).toBeUndefined();
    const ep = await deploy();
    const { startedBy: _, ...detail } = failedTask(ep, 't2').detail;
    await run({ ...failedTask(ep, 't2'), detail });
    expect(await control.startFailures(ep)).toEqual({ failedStarts: 1 });
  });

  it('the store: one count per task ARN, none past the threshold, and a cleared run counts a task again', async () => {
    const ep = `store-${Math.random().toString(36).slice(2, 8)}`;
    const arn = (t: string) => `arn:aws:ecs:eu-west-1:1:task/ferry/${t}`;
    expect(await control.addTaskStartFailure(ep, arn('a'), 3)).toEqual({ failedStarts: 1, counted: true });
    expect(await control.addTaskStartFailure(ep, arn('a'), 3)).toEqual({ failedStarts: 1, counted: false });
    // The agents' own count goes on the same run (a worker that died before contact).
    expect(await control.addFailedStart(ep)).toBe(2);
    expect(await control.addTaskStartFailure(ep, arn('b'), 3)).toEqual({ failedStarts: 3, counted: true });
    expect(await control.addTaskStartFailure(ep, arn('c'), 3)).toEqual({ failedStarts: 3, counted: false });
    const problem = { state: 'failing' as const, reason: 'r', lines: [], sinceMs: 1 };
    await control.markFailing(ep, problem);
    expect(await control.addTaskStartFailure(ep, arn('b'), 3)).toEqual({
      failedStarts: 3,
      counted: false,
      problem,
    });
    // Two tasks in the set, never more than the threshold: the item stays small.
    const item = await aws.doc.send(
      new GetCommand({ TableName: aws.tables.control, Key: startFailuresKey(ep), ConsistentRead: true }),
    );
    expect([...(item.Item!.countedTasks as Set<string>)].sort()).toEqual([arn('a'), arn('b')]);
    await control.clearStartFailures(ep);
    expect(await control.addTaskStartFailure(ep, arn('a'), 3)).toEqual({ failedStarts: 1, counted: true });
    await control.clearStartFailures(ep);
  });
});
