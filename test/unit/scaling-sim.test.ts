/**
 * A scripted day of traffic through the scaling policy and a model of the AWS actuator, on a fake
 * clock (one step = one second). Real ECS cannot run here, so the model copies what AWS documents:
 *
 * - UpdateService sets desiredCount; the service scheduler starts tasks up to it and, when it is
 *   lowered, stops tasks: ones not yet running first, then running ones without scale-in protection.
 *   https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_UpdateService.html
 * - A task with scale-in protection is not stopped by a scale-in; it is stopped once the protection
 *   is turned off (or expires) and the service is still above its desired count.
 *   https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-scale-in-protection.html
 *   Ferry's agent turns protection on while its worker holds a job and off once idle for
 *   idle_timeout (worker-image/agent/agent.ts).
 * - A task placed when no instance has room waits (PROVISIONING/PENDING) while managed scaling adds
 *   an instance; with a GPU instance from zero, image pull and model load that is minutes: the day
 *   uses 6 minutes. https://docs.aws.amazon.com/AmazonECS/latest/developerguide/managed-scaling-behavior.html
 * - The scaler runs once a minute (EventBridge rates are whole minutes:
 *   https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-rate-expressions.html) and at once when
 *   /run finds an endpoint with no worker (the nudge).
 *
 * For contrast the same day runs through the step alarms Ferry used before (a CloudWatch alarm on
 * SQS ApproximateNumberOfMessagesVisible ≥ 1 adding one task per minute, and an idle alarm setting
 * the count to min when nothing is visible): one job waiting through a cold start ramps it to max.
 */
import {
  DescribeServicesCommand,
  DescribeTasksCommand,
  ListTasksCommand,
  UpdateServiceCommand,
} from '@aws-sdk/client-ecs';
import { describe, expect, it } from 'vitest';
import { FakeClock } from '../../core/clock.js';
import type { ManifestEndpoint } from '../../core/manifest.js';
import type { WorkerRecord } from '../../core/ports.js';
import { decideScale, type WorkerLoad } from '../../core/scaling.js';
import { type ScalerDeps, scaleEndpoints, scalerEventOf } from '../../functions/scaler.js';
import { wakeAlarmName } from '../../infra/names.js';
import { sampleResources } from '../infra/fixtures.js';
import { recordFor } from '../support/endpoints.js';

const second = 1_000;
const minute = 60 * second;

interface Settings {
  min: number;
  max: number;
  maxConcurrency: number;
  idleTimeoutMs: number;
  coldStartMs: number;
  tickMs: number;
  leaseMs: number;
}

const settings: Settings = {
  min: 0,
  max: 3,
  maxConcurrency: 1,
  idleTimeoutMs: 5 * minute,
  coldStartMs: 6 * minute,
  tickMs: 1 * minute,
  leaseMs: 30 * second,
};

interface SimJob {
  id: number;
  urgent: boolean;
  durationMs: number;
  submittedAt: number;
  state: 'queued' | 'held' | 'done' | 'lost';
  taskId?: number;
  startedAt?: number;
  /** When a crashed worker's job comes back to the queue (its lease lapses). */
  requeueAt?: number;
}

interface SimTask {
  id: number;
  state: 'pending' | 'running' | 'stopped';
  readyAt: number;
  startedAt: number;
  lastBusyAt: number;
  held: Set<number>;
  stoppedBy?: 'scale-in' | 'crash';
  stoppedAt?: number;
}

type Script = Map<number, (sim: Sim) => void>;

type Controller = 'policy' | 'step-alarms';

class Sim {
  readonly clock = new FakeClock(0);
  readonly jobs: SimJob[] = [];
  readonly tasks: SimTask[] = [];
  desired = 0;
  /** Every desired count the actuator set, with when. */
  readonly desiredLog: { atMs: number; desired: number }[] = [];
  /** Problems the invariants found (empty on a good day). */
  readonly violations: string[] = [];
  /** Largest number of tasks (pending or running) at once. */
  peakTasks = 0;
  private nextTaskId = 1;
  private nextScalerTickAt = 0;
  private nudged = false;
  private lastVisibleAt = 0;

  constructor(
    readonly s: Settings,
    readonly controller: Controller,
    readonly nudge: boolean,
  ) {}

  get now(): number {
    return this.clock.now();
  }

  live(): SimTask[] {
    return this.tasks.filter((t) => t.state !== 'stopped');
  }

  running(): SimTask[] {
    return this.tasks.filter((t) => t.state === 'running');
  }

  submit(count: number, options: { urgent?: boolean; durationMs?: number } = {}): void {
    for (let i = 0; i < count; i++) {
      this.jobs.push({
        id: this.jobs.length,
        urgent: options.urgent ?? true,
        durationMs: options.durationMs ?? 20 * second,
        submittedAt: this.now,
        state: 'queued',
      });
    }
    // The API's nudge: a submit to an endpoint with no worker invokes the scaler at once.
    if (this.nudge && this.running().length === 0) this.nudged = true;
  }

  /** A running worker dies with what it holds (the ECS service will replace the task). */
  crash(): void {
    const victim = this.running().find((t) => t.held.size > 0) ?? this.running()[0];
    if (!victim) return;
    victim.state = 'stopped';
    victim.stoppedBy = 'crash';
    victim.stoppedAt = this.now;
    for (const id of victim.held) {
      const job = this.jobs[id]!;
      job.state = 'lost';
      job.requeueAt = this.now + this.s.leaseMs;
    }
    victim.held.clear();
  }

  run(untilMs: number, script: Script): void {
    while (this.now <= untilMs) {
      script.get(this.now)?.(this);
      this.step();
      this.clock.advance(second);
    }
  }

  private step(): void {
    const now = this.now;
    // Leases lapse: the sweeper puts a crashed worker's jobs back.
    for (const job of this.jobs) {
      if (job.state === 'lost' && job.requeueAt !== undefined && now >= job.requeueAt) job.state = 'queued';
    }
    // Jobs finish.
    for (const task of this.running()) {
      for (const id of [...task.held]) {
        const job = this.jobs[id]!;
        if (now - job.startedAt! >= job.durationMs) {
          job.state = 'done';
          task.held.delete(id);
          task.lastBusyAt = now;
        }
      }
    }
    // Cold starts end.
    for (const task of this.tasks) {
      if (task.state === 'pending' && now >= task.readyAt) {
        task.state = 'running';
        task.lastBusyAt = now;
      }
    }
    // Workers take jobs: urgent first, then low priority (a running worker takes those too).
    const queued = () =>
      this.jobs
        .filter((j) => j.state === 'queued')
        .sort((a, b) => Number(b.urgent) - Number(a.urgent) || a.id - b.id);
    for (const task of this.running()) {
      while (task.held.size < this.s.maxConcurrency) {
        const job = queued()[0];
        if (!job) break;
        job.state = 'held';
        job.taskId = task.id;
        job.startedAt = now;
        task.held.add(job.id);
        task.lastBusyAt = now;
      }
    }
    // The controller.
    if (this.controller === 'policy') {
      if (now >= this.nextScalerTickAt || this.nudged) {
        if (now >= this.nextScalerTickAt) this.nextScalerTickAt += this.s.tickMs;
        this.nudged = false;
        this.setDesired(this.decide());
      }
    } else if (now >= this.nextScalerTickAt) {
      this.nextScalerTickAt += this.s.tickMs;
      // The old alarms, evaluated once a minute on SQS's visible count.
      const visible = this.jobs.filter((j) => j.state === 'queued').length;
      if (visible >= 1) {
        this.lastVisibleAt = now;
        this.setDesired(Math.min(this.s.max, this.desired + 1));
      } else if (now - this.lastVisibleAt >= this.s.idleTimeoutMs) {
        this.setDesired(this.s.min);
      }
    }
    this.reconcileService();
    this.checkInvariants();
  }

  /** What the scaler Lambda does: read the store, ask the policy. */
  private decide(): number {
    const workers: WorkerLoad[] = this.running().map((t) => ({
      workerId: String(t.id),
      heldJobs: t.held.size,
      inFlightRequests: 0,
      lastBusyAtMs: t.lastBusyAt,
    }));
    return decideScale({
      urgentQueuedJobs: this.jobs.filter((j) => j.state === 'queued' && j.urgent).length,
      workers,
      min: this.s.min,
      max: this.s.max,
      maxConcurrency: this.s.maxConcurrency,
      idleTimeoutMs: this.s.idleTimeoutMs,
      nowMs: this.now,
    }).desired;
  }

  private setDesired(desired: number): void {
    if (desired !== this.desired) this.desiredLog.push({ atMs: this.now, desired });
    this.desired = desired;
  }

  /** The ECS service scheduler, as documented (see the file comment). */
  private reconcileService(): void {
    const now = this.now;
    let live = this.live();
    for (let i = live.length; i < this.desired; i++) {
      this.tasks.push({
        id: this.nextTaskId++,
        state: 'pending',
        readyAt: now + this.s.coldStartMs,
        startedAt: now,
        lastBusyAt: now,
        held: new Set(),
      });
    }
    live = this.live();
    let surplus = live.length - this.desired;
    if (surplus <= 0) return;
    // Protection as the agent keeps it: on while busy, and until idle for idle_timeout (policy
    // runs only); the old setup kept it off (its alarms scaled in whatever ECS picked).
    const protectedTask = (t: SimTask) =>
      this.controller === 'policy' && (t.held.size > 0 || now - t.lastBusyAt < this.s.idleTimeoutMs);
    const candidates = [
      ...live.filter((t) => t.state === 'pending'),
      ...live.filter((t) => t.state === 'running' && !protectedTask(t)),
    ];
    for (const task of candidates) {
      if (surplus-- <= 0) break;
      if (task.held.size > 0) this.violations.push(`${now}: task ${task.id} stopped while holding a job`);
      if (task.state === 'running' && now - task.lastBusyAt < this.s.idleTimeoutMs) {
        this.violations.push(`${now}: task ${task.id} stopped after ${now - task.lastBusyAt} ms idle`);
      }
      task.state = 'stopped';
      task.stoppedBy = 'scale-in';
      task.stoppedAt = now;
      for (const id of task.held) {
        const job = this.jobs[id]!;
        job.state = 'lost';
        job.requeueAt = now + this.s.leaseMs;
      }
      task.held.clear();
    }
  }

  private checkInvariants(): void {
    const live = this.live().length;
    this.peakTasks = Math.max(this.peakTasks, live);
    if (this.desired > this.s.max) this.violations.push(`${this.now}: desired ${this.desired} > max`);
    if (live > this.s.max) this.violations.push(`${this.now}: ${live} tasks > max`);
  }
}

/** Peak tasks while `from` ≤ t < `to`, from the desired log and task lifetimes. */
function peakBetween(sim: Sim, from: number, to: number): number {
  let peak = 0;
  for (let t = from; t < to; t += second) {
    const live = sim.tasks.filter((k) => k.startedAt <= t && (k.stoppedAt === undefined || k.stoppedAt > t));
    peak = Math.max(peak, live.length);
  }
  return peak;
}

/** The day. Times are when things happen, in ms since midnight. */
const at = (h: number, m = 0, s = 0) => h * 3_600_000 + m * minute + s * second;

function day(): Script {
  const script: Script = new Map();
  const on = (t: number, f: (sim: Sim) => void) => script.set(t, f);
  // 00:00–02:00 silence. 02:00:30 one job on an endpoint at zero, through a 6-minute cold start.
  on(at(2, 0, 30), (sim) => sim.submit(1));
  // 03:00 low-priority work only: it never scales up an endpoint at zero.
  on(at(3), (sim) => sim.submit(5, { urgent: false }));
  // 04:00 a burst of 50 jobs.
  on(at(4), (sim) => sim.submit(50));
  // 04:08 a worker crashes holding a job (its job comes back when the lease lapses).
  on(at(4, 8), (sim) => sim.crash());
  // 06:00–08:00 a trickle: one job every 4 minutes, under idle_timeout apart.
  for (let t = at(6); t < at(8); t += 4 * minute) on(t, (sim) => sim.submit(1, { durationMs: 10 * second }));
  // 10:00–10:40 a sparse trickle: one job every 20 minutes (each pays a cold start).
  for (let t = at(10); t <= at(10, 40); t += 20 * minute) on(t, (sim) => sim.submit(1));
  // 12:00 two long jobs (10 minutes each, longer than idle_timeout).
  on(at(12), (sim) => sim.submit(2, { durationMs: 10 * minute }));
  return script;
}

describe('a scripted day through the policy and the ECS model', () => {
  for (const nudge of [false, true]) {
    describe(nudge ? 'with the /run nudge' : 'on the one-minute schedule alone', () => {
      const sim = new Sim(settings, 'policy', nudge);
      sim.run(at(14), day());

      it('keeps every invariant all day: never above max, never stops a worker holding a job, never one idle for less than idle_timeout', () => {
        expect(sim.violations).toEqual([]);
        expect(sim.peakTasks).toBe(settings.max);
      });

      it('runs every job to the end', () => {
        expect(sim.jobs.filter((j) => j.state !== 'done').map((j) => j.id)).toEqual([]);
      });

      it('one job on an endpoint at zero starts one worker, however long it boots', () => {
        expect(peakBetween(sim, at(2), at(3))).toBe(1);
        // The sparse trickle: each job alone, one worker each time.
        expect(peakBetween(sim, at(10), at(11))).toBe(1);
      });

      it('decides scale-from-zero within one scaler tick of the submit', () => {
        for (const submitAt of [at(2, 0, 30), at(4), at(10), at(10, 20), at(10, 40), at(12)]) {
          const decided = sim.desiredLog.find((e) => e.atMs >= submitAt && e.desired > 0);
          expect(decided, `decision after ${submitAt}`).toBeDefined();
          expect(decided!.atMs - submitAt).toBeLessThanOrEqual(nudge ? 0 : settings.tickMs);
        }
      });

      it('low-priority jobs alone never scale up', () => {
        expect(sim.desiredLog.filter((e) => e.atMs >= at(3) && e.atMs < at(4))).toEqual([]);
        // They ran when the burst brought workers (checked by "runs every job").
      });

      it('a burst of 50 goes to exactly max and the crashed worker is replaced', () => {
        expect(peakBetween(sim, at(4), at(5))).toBe(settings.max);
        const crashed = sim.tasks.filter((t) => t.stoppedBy === 'crash');
        expect(crashed).toHaveLength(1);
        const replacement = sim.tasks.find(
          (t) => t.startedAt >= crashed[0]!.stoppedAt! && t.id !== crashed[0]!.id && t.startedAt < at(5),
        );
        expect(replacement).toBeDefined();
      });

      it('a trickle under idle_timeout keeps one worker; idle workers stop after idle_timeout', () => {
        // Jobs 4 minutes apart: the second arrives while the first still waits for its cold start,
        // so two workers start; after that the trickle never pays a cold start again.
        expect(peakBetween(sim, at(6), at(8))).toBeLessThanOrEqual(2);
        const lateStarts = sim.tasks.filter((t) => t.startedAt >= at(6, 10) && t.startedAt < at(8));
        expect(lateStarts).toEqual([]);
        for (const task of sim.tasks.filter((t) => t.stoppedBy === 'scale-in' && t.state === 'stopped')) {
          // Stopped while pending (never ran) or after idle_timeout.
          expect(task.stoppedAt! - task.lastBusyAt).toBeGreaterThanOrEqual(
            task.readyAt > task.stoppedAt! ? 0 : settings.idleTimeoutMs,
          );
        }
      });

      it('silence brings the endpoint back to min within idle_timeout plus one tick', () => {
        const lastDone = Math.max(
          ...sim.jobs.map((j) => (j.startedAt ?? 0) + j.durationMs).filter((t) => t < at(13)),
        );
        const backToMin = sim.desiredLog.find((e) => e.atMs > lastDone && e.desired === settings.min);
        expect(backToMin).toBeDefined();
        expect(backToMin!.atMs - lastDone).toBeLessThanOrEqual(settings.idleTimeoutMs + settings.tickMs);
        expect(sim.live()).toHaveLength(settings.min);
      });
    });
  }

  it('the step alarms it replaces ramp one job to max through a cold start, and scale in busy workers', () => {
    const old = new Sim(settings, 'step-alarms', false);
    old.run(at(14), day());
    expect(peakBetween(old, at(2), at(3))).toBe(settings.max);
    // Its idle alarm sees only visible messages: with every job taken, it scales in busy workers.
    expect(old.violations.some((v) => v.includes('holding a job'))).toBe(true);
    const policy = new Sim(settings, 'policy', true);
    policy.run(at(14), day());
    expect(peakBetween(policy, at(2), at(3))).toBe(1);
  });
});

// ── a load-balanced day ──────────────────────────────────────────────────────────────────────────
//
// A load-balanced endpoint at zero, through the real scaler (scaleEndpoints, on a model of ECS, the
// ALB and the wake-up alarm). What the model copies from AWS's documentation:
//
// - With no healthy target the ALB answers 503 itself; a request reaches a task only once the task's
//   worker answers its health check (here: once its agent has reported; the model load is folded into
//   the cold start).
// - The wake-up alarm (HTTPCode_ELB_503_Count >= 1 over one minute, missing data not breaching:
//   infra/constructs/load-balancer.ts) invokes the scaler only when it goes to ALARM: "the actions happen
//   only on state transitions, and are not performed again if the condition persists"
//   (https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/alarm-actions.html). A client that
//   keeps retrying keeps it in ALARM, so it wakes the scaler once.
// - ECS as in the queue day above: a raised count creates tasks that wait for an instance (the cold
//   start), a lowered one stops tasks not yet running first, then running ones without scale-in
//   protection; ListTasks/DescribeTasks report each task's createdAt and startedAt
//   (https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_DescribeTasks.html).
// - The agent (worker-image/agent/lb.ts) writes its worker record a moment after its task starts, then
//   on every busy/idle change, and protects its task from its first request until idle for idle_timeout.

interface LbTask {
  id: number;
  state: 'pending' | 'running' | 'stopped';
  createdAt: number;
  readyAt: number;
  startedAt?: number;
  /** When its agent's first record is written. */
  reportsAt?: number;
  /** End times of the requests it serves now. */
  inFlight: number[];
  lastBusyAt: number;
  served: number;
  stoppedAt?: number;
}

interface LbClient {
  id: number;
  firstAt: number;
  nextAt: number;
  /** How long it keeps retrying a 503 (every `retryMs`); 0: it never retries. */
  patienceMs: number;
  servedAt?: number;
  gaveUp?: boolean;
}

const lbSettings = {
  max: 2,
  idleTimeoutMs: 1 * minute,
  coldStartMs: 5 * minute,
  reportDelayMs: 2 * second,
  requestMs: 5 * second,
  retryMs: 15 * second,
  patienceMs: 15 * minute,
};

/** What the simulated ECS reads and sets of a simulated day: its desired count, and its live tasks' times. */
interface EcsSide {
  desired: number;
  readonly desiredLog: { atMs: number; desired: number }[];
  readonly now: number;
  /** False refuses ListTasks, as ECS does to a role without ecs:ListTasks. */
  readonly tasksReadable?: boolean;
  live(): { id: number; createdAt: number; startedAt?: number }[];
}

/** The ECS calls the scaler makes, answered from a simulated day's service and tasks (both days use it). */
function simulatedEcs(side: EcsSide, service: string): ScalerDeps['ecs'] {
  return {
    send: (async (command: unknown) => {
      if (command instanceof DescribeServicesCommand) {
        return { services: [{ serviceName: service, status: 'ACTIVE', desiredCount: side.desired }] };
      }
      if (command instanceof UpdateServiceCommand) {
        side.desired = command.input.desiredCount!;
        side.desiredLog.push({ atMs: side.now, desired: side.desired });
        return {};
      }
      if (command instanceof ListTasksCommand) {
        if (side.tasksReadable === false) throw new Error('AccessDeniedException: ecs:ListTasks');
        return { taskArns: side.live().map((t) => `task/ferry/${t.id}`) };
      }
      if (command instanceof DescribeTasksCommand) {
        const ids = new Set(command.input.tasks);
        return {
          tasks: side
            .live()
            .filter((t) => ids.has(`task/ferry/${t.id}`))
            .map((t) => ({
              createdAt: new Date(t.createdAt),
              ...(t.startedAt !== undefined ? { startedAt: new Date(t.startedAt) } : {}),
            })),
        };
      }
      throw new Error('unexpected ECS command');
    }) as ScalerDeps['ecs']['send'],
  };
}

class LbSim {
  readonly clock = new FakeClock(0);
  readonly tasks: LbTask[] = [];
  readonly clients: LbClient[] = [];
  desired = 0;
  readonly desiredLog: { atMs: number; desired: number }[] = [];
  readonly violations: string[] = [];
  readonly errors: string[] = [];
  private nextTaskId = 1;
  private turnedAwayThisMinute = 0;
  private alarm: 'OK' | 'ALARM' = 'OK';
  private readonly endpoint = recordFor(
    {
      name: 'lb',
      kind: 'lb',
      file: 'main.py',
      module: 'main',
      variable: 'app',
      routes: [],
      resources: {
        ...sampleResources,
        workersMin: 0,
        workersMax: lbSettings.max,
        idleTimeoutSec: lbSettings.idleTimeoutMs / second,
      },
      configHash: 'h',
    } as ManifestEndpoint,
    '/nowhere',
    'lb',
  );
  private readonly service = 'ferry-lb';

  /** `tasksReadable: false` refuses ListTasks, as ECS does to a role without ecs:ListTasks. */
  constructor(readonly tasksReadable: boolean) {}

  get now(): number {
    return this.clock.now();
  }

  live(): LbTask[] {
    return this.tasks.filter((t) => t.state !== 'stopped');
  }

  request(count: number, patienceMs = lbSettings.patienceMs): void {
    for (let i = 0; i < count; i++) {
      this.clients.push({ id: this.clients.length, firstAt: this.now, nextAt: this.now, patienceMs });
    }
  }

  async run(untilMs: number, script: Map<number, (sim: LbSim) => void>): Promise<void> {
    while (this.now <= untilMs) {
      script.get(this.now)?.(this);
      await this.step();
      this.clock.advance(second);
    }
  }

  private reported(t: LbTask): boolean {
    return t.state === 'running' && t.reportsAt !== undefined && this.now >= t.reportsAt;
  }

  private async step(): Promise<void> {
    const now = this.now;
    for (const task of this.live()) {
      const before = task.inFlight.length;
      task.inFlight = task.inFlight.filter((end) => end > now);
      if (task.inFlight.length < before) task.lastBusyAt = now;
      if (task.state === 'pending' && now >= task.readyAt) {
        task.state = 'running';
        task.startedAt = now;
        task.lastBusyAt = now; // the agent's idle clock starts with it
        task.reportsAt = now + lbSettings.reportDelayMs;
      }
    }
    // The alarm, evaluated on each whole minute over the minute before.
    if (now % minute === 0 && now > 0) {
      const breaching = this.turnedAwayThisMinute >= 1;
      this.turnedAwayThisMinute = 0;
      const was = this.alarm;
      this.alarm = breaching ? 'ALARM' : 'OK';
      if (was === 'OK' && this.alarm === 'ALARM') {
        await this.scale({
          source: 'aws.cloudwatch',
          alarmData: { alarmName: wakeAlarmName(this.endpoint.id), state: { value: 'ALARM' } },
        });
      }
    }
    // Clients: the ALB routes to a reported task, or answers 503.
    for (const client of this.clients) {
      if (client.servedAt !== undefined || client.gaveUp || client.nextAt !== now) continue;
      const targets = this.live().filter((t) => this.reported(t));
      if (targets.length > 0) {
        const target = targets.sort((a, b) => a.inFlight.length - b.inFlight.length)[0]!;
        target.inFlight.push(now + lbSettings.requestMs);
        target.lastBusyAt = now;
        target.served++;
        client.servedAt = now;
      } else {
        this.turnedAwayThisMinute++;
        if (now + lbSettings.retryMs - client.firstAt > client.patienceMs) client.gaveUp = true;
        else client.nextAt = now + lbSettings.retryMs;
      }
    }
    // The schedule, half a minute off the alarm's evaluations.
    if (now % minute === 30 * second) {
      await this.scale({ source: 'aws.events', 'detail-type': 'Scheduled Event', detail: {} });
    }
    this.reconcile();
    if (this.desired > lbSettings.max) this.violations.push(`${now}: desired ${this.desired} > max`);
  }

  private async scale(event: unknown): Promise<void> {
    const reports = await scaleEndpoints(this.deps(), scalerEventOf(event));
    for (const r of reports) if (r.error) this.errors.push(r.error);
  }

  /** The scaler's view: the control table, the workers table, and ECS. */
  private deps(): ScalerDeps {
    return {
      control: {
        listEndpoints: async () => [this.endpoint],
        getEndpoint: async (id: string) => (id === this.endpoint.id ? this.endpoint : undefined),
      },
      queue: { depth: async () => ({ urgent: 0, visible: 0 }) },
      jobs: { queuedAtMost: async () => ({ all: 0, urgent: 0 }) },
      workers: {
        list: async (): Promise<WorkerRecord[]> =>
          this.live()
            .filter((t) => this.reported(t))
            .map((t) => ({
              workerId: `t${t.id}`,
              endpointId: this.endpoint.id,
              state: t.inFlight.length > 0 ? 'running' : 'idle',
              jobIds: [],
              inFlight: t.inFlight.length,
              lastSeenAt: this.now,
              lastBusyAt: t.inFlight.length > 0 ? this.now : t.lastBusyAt,
            })),
      },
      ecs: simulatedEcs(this, this.service),
      cluster: 'ferry',
      serviceNamePrefix: 'ferry-',
      clock: this.clock,
      workerStaleMs: 180 * second,
    };
  }

  private reconcile(): void {
    const now = this.now;
    for (let i = this.live().length; i < this.desired; i++) {
      this.tasks.push({
        id: this.nextTaskId++,
        state: 'pending',
        createdAt: now,
        readyAt: now + lbSettings.coldStartMs,
        inFlight: [],
        lastBusyAt: now,
        served: 0,
      });
    }
    let surplus = this.live().length - this.desired;
    if (surplus <= 0) return;
    // The agent protects its task from its first request until idle for idle_timeout.
    const protectedTask = (t: LbTask) =>
      t.served > 0 && (t.inFlight.length > 0 || now - t.lastBusyAt < lbSettings.idleTimeoutMs);
    const candidates = [
      ...this.live().filter((t) => t.state === 'pending'),
      ...this.live().filter((t) => t.state === 'running' && !protectedTask(t)),
    ];
    for (const task of candidates) {
      if (surplus-- <= 0) break;
      if (task.inFlight.length > 0) this.violations.push(`${now}: task ${task.id} stopped while serving`);
      task.state = 'stopped';
      task.stoppedAt = now;
    }
  }
}

function lbDay(): Map<number, (sim: LbSim) => void> {
  const script = new Map<number, (sim: LbSim) => void>();
  // 01:00 one request on the endpoint at zero; its client retries every 15 s for up to 15 minutes.
  script.set(at(1), (sim) => sim.request(1));
  // 03:00 three at once.
  script.set(at(3), (sim) => sim.request(3));
  // 05:00 one request whose client never retries: a wake-up no request follows.
  script.set(at(5), (sim) => sim.request(1, 0));
  // 07:00–07:10 a trickle, one request every 30 s.
  for (let t = at(7); t < at(7, 10); t += 30 * second) script.set(t, (sim) => sim.request(1));
  return script;
}

describe('a load-balanced day through the scaler, the ALB, the wake-up alarm and the ECS model', async () => {
  const sim = new LbSim(true);
  await sim.run(at(9), lbDay());
  const patient = sim.clients.filter((c) => c.patienceMs > 0);

  it('serves every request whose client retries through a five-minute cold start', () => {
    expect(patient.filter((c) => c.servedAt === undefined).map((c) => c.id)).toEqual([]);
    for (const wakeAt of [at(1), at(3)]) {
      const first = patient.find((c) => c.firstAt === wakeAt)!;
      // The alarm's minute, the cold start, the agent's first record and one retry period.
      expect(first.servedAt! - wakeAt).toBeLessThanOrEqual(
        minute + lbSettings.coldStartMs + lbSettings.reportDelayMs + lbSettings.retryMs,
      );
    }
    expect(sim.errors).toEqual([]);
    expect(sim.violations).toEqual([]);
  });

  it('a wake-up no request follows ends after the boot and idle_timeout', () => {
    const woke = sim.desiredLog.find((e) => e.atMs >= at(5) && e.desired === 1)!;
    const back = sim.desiredLog.find((e) => e.atMs > woke.atMs && e.desired === 0)!;
    expect(back).toBeDefined();
    // Cold start, the agent's record, idle_timeout from the agent's start, and one schedule period.
    expect(back.atMs - woke.atMs).toBeLessThanOrEqual(
      lbSettings.coldStartMs + lbSettings.reportDelayMs + lbSettings.idleTimeoutMs + minute,
    );
    expect(sim.tasks.filter((t) => t.createdAt >= at(5) && t.createdAt < at(6)).map((t) => t.served)).toEqual(
      [0],
    );
  });

  it('one worker carries the trickle, and silence brings the endpoint back to zero', () => {
    expect(sim.tasks.filter((t) => t.createdAt >= at(7) && t.createdAt < at(8))).toHaveLength(1);
    expect(sim.live()).toEqual([]);
    expect(sim.desired).toBe(0);
  });

  it('without the tasks (a scaler that cannot see them boot) the schedule undoes every wake-up and nothing is served', async () => {
    const blind = new LbSim(false);
    await blind.run(at(4), lbDay());
    expect(blind.clients.filter((c) => c.servedAt !== undefined)).toEqual([]);
    // Each wake-up lasted until the next scheduled run: the task never left its cold start.
    expect(blind.tasks.filter((t) => t.startedAt !== undefined)).toEqual([]);
    expect(blind.desiredLog.map((e) => e.desired)).toEqual([1, 0, 1, 0]);
  });
});

/**
 * A queue endpoint through the scaler itself (scaleEndpoints) while SQS's counts lag. What AWS
 * documents: ApproximateNumberOfMessages and the other Approximate* attributes "may not achieve
 * consistency until at least 1 minute after the producers stop sending messages"
 * (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_GetQueueAttributes.html),
 * and they are approximate "because of the distributed architecture of Amazon SQS". The model: the
 * depth the scaler reads is the true count of waiting messages as it was `lagMs` ago (a minute; 0
 * for what fauxqs answers). The job store's count of urgent jobs IN_QUEUE (DynamoDB count items) is
 * exact here. Workers take a waiting job the second they run (a long poll answers at once).
 */
interface LagJob {
  id: number;
  submittedAt: number;
  durationMs: number;
  state: 'queued' | 'held' | 'done';
  startedAt?: number;
}

interface LagTask {
  id: number;
  state: 'pending' | 'running' | 'stopped';
  createdAt: number;
  readyAt: number;
  startedAt?: number;
  held: Set<number>;
  lastBusyAt: number;
  stoppedAt?: number;
}

const lagSettings = { max: 3, idleTimeoutMs: 5 * minute, coldStartMs: 6 * minute };

class QueueLagSim {
  readonly clock = new FakeClock(0);
  readonly jobs: LagJob[] = [];
  readonly tasks: LagTask[] = [];
  desired = 0;
  readonly desiredLog: { atMs: number; desired: number }[] = [];
  readonly violations: string[] = [];
  readonly errors: string[] = [];
  /** The true number of waiting messages at each second, for the lagging depth. */
  private readonly waitingAt: number[] = [];
  private nextTaskId = 1;
  private nudged = false;
  private readonly endpoint = recordFor(
    {
      name: 'q',
      kind: 'queue',
      file: 'main.py',
      module: 'main',
      target: { name: 'handler', type: 'function', isAsync: false, isGenerator: false, params: ['job'] },
      resources: {
        ...sampleResources,
        workersMin: 0,
        workersMax: lagSettings.max,
        maxConcurrency: 1,
        idleTimeoutSec: lagSettings.idleTimeoutMs / second,
      },
      configHash: 'h',
    } as ManifestEndpoint,
    '/nowhere',
    'q',
  );
  private readonly service = 'ferry-q';

  constructor(readonly lagMs: number) {}

  get now(): number {
    return this.clock.now();
  }

  live(): LagTask[] {
    return this.tasks.filter((t) => t.state !== 'stopped');
  }

  running(): LagTask[] {
    return this.tasks.filter((t) => t.state === 'running');
  }

  waiting(): number {
    return this.jobs.filter((j) => j.state === 'queued').length;
  }

  submit(count: number, durationMs = 20 * second): void {
    for (let i = 0; i < count; i++) {
      this.jobs.push({ id: this.jobs.length, submittedAt: this.now, durationMs, state: 'queued' });
    }
    // The API's nudge: an urgent job for an endpoint with no worker invokes the scaler at once.
    if (this.running().length === 0) this.nudged = true;
  }

  async run(untilMs: number, script: Map<number, (sim: QueueLagSim) => void>): Promise<void> {
    while (this.now <= untilMs) {
      script.get(this.now)?.(this);
      await this.step();
      this.clock.advance(second);
    }
  }

  private async step(): Promise<void> {
    const now = this.now;
    for (const task of this.running()) {
      for (const id of [...task.held]) {
        const job = this.jobs[id]!;
        if (now - job.startedAt! >= job.durationMs) {
          job.state = 'done';
          task.held.delete(id);
          task.lastBusyAt = now;
        }
      }
    }
    for (const task of this.live()) {
      if (task.state === 'pending' && now >= task.readyAt) {
        task.state = 'running';
        task.startedAt = now;
        task.lastBusyAt = now;
      }
    }
    for (const task of this.running()) {
      const job = task.held.size === 0 ? this.jobs.find((j) => j.state === 'queued') : undefined;
      if (!job) continue;
      job.state = 'held';
      job.startedAt = now;
      task.held.add(job.id);
      task.lastBusyAt = now;
    }
    this.waitingAt[now / second] = this.waiting();
    if (this.nudged) {
      this.nudged = false;
      await this.scale({ endpointId: this.endpoint.id, urgentJob: true });
    }
    if (now % minute === 0)
      await this.scale({ source: 'aws.events', 'detail-type': 'Scheduled Event', detail: {} });
    this.reconcile();
  }

  private async scale(event: unknown): Promise<void> {
    const reports = await scaleEndpoints(this.deps(), scalerEventOf(event));
    for (const r of reports) if (r.error) this.errors.push(r.error);
  }

  /** What the scaler reads: the lagging depth, the store's exact count, the workers, ECS. */
  private deps(): ScalerDeps {
    const lagged = () => this.waitingAt[Math.max(0, (this.now - this.lagMs) / second)] ?? 0;
    return {
      control: {
        listEndpoints: async () => [this.endpoint],
        getEndpoint: async (id: string) => (id === this.endpoint.id ? this.endpoint : undefined),
      },
      queue: { depth: async () => ({ urgent: lagged(), visible: lagged() }) },
      jobs: { queuedAtMost: async () => ({ all: this.waiting(), urgent: this.waiting() }) },
      workers: {
        list: async (): Promise<WorkerRecord[]> =>
          this.running().map((t) => ({
            workerId: `t${t.id}`,
            endpointId: this.endpoint.id,
            state: t.held.size > 0 ? 'running' : 'idle',
            jobIds: [...t.held].map(String),
            lastSeenAt: this.now,
            lastBusyAt: t.held.size > 0 ? this.now : t.lastBusyAt,
          })),
      },
      ecs: simulatedEcs(this, this.service),
      cluster: 'ferry',
      serviceNamePrefix: 'ferry-',
      clock: this.clock,
      workerStaleMs: 180 * second,
    };
  }

  /** The ECS service scheduler (as in the first day's model): pending tasks go first, protected ones never. */
  private reconcile(): void {
    const now = this.now;
    for (let i = this.live().length; i < this.desired; i++) {
      this.tasks.push({
        id: this.nextTaskId++,
        state: 'pending',
        createdAt: now,
        readyAt: now + lagSettings.coldStartMs,
        held: new Set(),
        lastBusyAt: now,
      });
    }
    let surplus = this.live().length - this.desired;
    const protectedTask = (t: LagTask) => t.held.size > 0 || now - t.lastBusyAt < lagSettings.idleTimeoutMs;
    const candidates = [
      ...this.live().filter((t) => t.state === 'pending'),
      ...this.live().filter((t) => t.state === 'running' && !protectedTask(t)),
    ];
    for (const task of candidates) {
      if (surplus-- <= 0) break;
      if (task.state === 'pending' && this.waiting() > 0) {
        this.violations.push(
          `${now}: task ${task.id} stopped mid-boot while ${this.waiting()} job(s) waited`,
        );
      }
      task.state = 'stopped';
      task.stoppedAt = now;
    }
    if (this.desired > lagSettings.max) this.violations.push(`${now}: desired ${this.desired} > max`);
  }
}

function lagDay(): Map<number, (sim: QueueLagSim) => void> {
  const script = new Map<number, (sim: QueueLagSim) => void>();
  // 01:00:30 one job on the endpoint at zero: the nudge starts a task, the next run reads the depth.
  script.set(at(1, 0, 30), (sim) => sim.submit(1));
  // 03:00:30 a burst of 12: the depth keeps counting them for a minute after the workers took them.
  script.set(at(3, 0, 30), (sim) => sim.submit(12));
  return script;
}

describe('a queue endpoint through the scaler while SQS’s counts lag a minute behind', async () => {
  for (const lagMs of [0, minute]) {
    describe(lagMs === 0 ? 'exact counts (what fauxqs answers)' : 'counts a minute old', async () => {
      const sim = new QueueLagSim(lagMs);
      await sim.run(at(5), lagDay());

      it('never stops a task mid-boot while a job waits for it, and runs every job', () => {
        expect(sim.errors).toEqual([]);
        expect(sim.violations).toEqual([]);
        expect(sim.jobs.filter((j) => j.state !== 'done').map((j) => j.id)).toEqual([]);
      });

      it('one job from zero starts one task, and it starts the job one cold start after the submit', () => {
        expect(sim.tasks.filter((t) => t.createdAt >= at(1) && t.createdAt < at(2))).toHaveLength(1);
        const job = sim.jobs[0]!;
        expect(job.startedAt! - job.submittedAt).toBeLessThanOrEqual(lagSettings.coldStartMs);
      });

      it('does not thrash: rises to max for the burst and comes down once, no task started after the last job began', () => {
        const counts = sim.desiredLog.filter((e) => e.atMs >= at(3) && e.atMs < at(4)).map((e) => e.desired);
        const top = counts.indexOf(lagSettings.max);
        expect(top).toBeGreaterThanOrEqual(0);
        // Up (maybe by the nudge's 1 first), then down: never lowered and raised again.
        expect(counts.slice(0, top + 1)).toEqual([...counts.slice(0, top + 1)].sort((a, b) => a - b));
        expect(counts.slice(top)).toEqual([...counts.slice(top)].sort((a, b) => b - a));
        const lastStart = Math.max(...sim.jobs.map((j) => j.startedAt!));
        expect(sim.tasks.filter((t) => t.createdAt > lastStart)).toEqual([]);
      });

      it('goes back to zero once idle for idle_timeout', () => {
        expect(sim.desired).toBe(0);
        expect(sim.live()).toEqual([]);
      });
    });
  }
});
