/**
 * The worker supervisor: the one owner of the worker lifecycle policy, of worker identity, and of the
 * record of which jobs each worker holds (docs/workers.md draws the state machine).
 *
 *   issue ──▶ starting ──first take/ping──▶ ready ◀──▶ busy (holds jobs)
 *                │                            │          │ job-done with stopPod (refresh_worker)
 *                │                            │          ▼
 *                │                            ├──────▶ retiring ──holds nothing──▶ stop
 *                │                            └─drain─▶ draining ──holds nothing──▶ stop ──drainMs──▶ kill
 *                └──────────── exit (any phase) ──▶ gone: token revoked, held jobs requeued now
 *
 * Actuators only act: the local pool spawns and signals process groups, the AWS agent talks to ECS.
 * They report exits back here, and this decides what follows: a restart after a backoff, nothing (a
 * planned stop), or, after `maxFailedStarts` workers in a row died before they ever asked for a job,
 * the endpoint is marked failing, its queued jobs end FAILED with the worker's last lines, and no more
 * workers start until it is redeployed.
 *
 * Every worker gets its own random token bound to its endpoint and worker id. A token is checked
 * here on every worker route; it dies with its worker, so a child process the worker left behind
 * (RunPod's SDK pings from one) is refused and changes nothing.
 */
import { randomBytes } from 'node:crypto';
import { hashKey, newSecret } from './auth.js';
import type { WorkerGone } from './engine.js';
import { messageOf } from './errors.js';
import type { Logger } from './log.js';
import type {
  Clock,
  EndpointProblem,
  StartFailureRecord,
  WorkerCounts,
  WorkerLedger,
  WorkerRegistry,
} from './ports.js';
import { decideScale, type ScalingDecision } from './scaling.js';

export interface WorkerIdentity {
  workerId: string;
  endpointId: string;
  /** The worker's bearer token (RUNPOD_AI_API_KEY). Only its hash is kept. */
  token: string;
}

/** What an actuator can do to a worker it started; exits come back through `supervisor.exited`. */
export interface WorkerActuator {
  /** Starts a worker with this identity (a process group locally). */
  start(identity: WorkerIdentity): void;
  /** Asks it to finish its jobs and leave (SIGTERM to its group; drain on ECS). */
  stop(workerId: string): void;
  /**
   * Ends it and everything it started, now (SIGKILL to its group; the task exits on ECS). `why` says
   * what the worker did, for the actuator's own log.
   */
  kill(workerId: string, why: string): void;
}

/** The engine moves the supervisor needs (a narrow view, so the engine can depend on the ledger). */
export interface SupervisedEngine {
  workerGone(endpointId: string, workerId: string, reason?: string, how?: WorkerGone): Promise<number>;
  jobsToStop(endpointId: string, workerId: string, waitMs: number): Promise<string[]>;
  timeOutIfOverdue(endpointId: string, jobId: string): Promise<{ timedOut: boolean; deadlineMs?: number }>;
  rejectQueued(endpointId: string, error: string): Promise<number>;
}

export interface SupervisorSettings {
  /** How long a worker may keep a job it was told to stop (cancel, timeout) before it is killed. */
  stopGraceMs: number;
  /** How long a worker asked to leave may finish its jobs before it is killed. */
  drainMs: number;
  /** Restart delays after crashes: base, doubling, capped. */
  backoffBaseMs: number;
  backoffMaxMs: number;
  /** A worker that lived this long resets the crash count. */
  healthyAfterMs: number;
  /** Workers in a row that die before their first take or ping before the endpoint is failing. */
  maxFailedStarts: number;
  /**
   * Exit codes that say the code itself cannot start (ferry.worker: 2 a config or import error, 1 an
   * exception at import or in a class's __init__): one such exit before any contact marks the
   * endpoint failing at once, since a restart runs the same code. `ferry dev` sets [1, 2], so a
   * request fails with the error instead of waiting out the backoff; default none.
   */
  startFailureCodes: readonly number[];
  /**
   * What a failing endpoint's reason tells its owner to do. A deployed endpoint runs the code it was
   * deployed with, so the fix is a redeploy; `ferry dev` reloads on save, so there it says so.
   */
  startFailureFix: string;
  /** A ping that leaves out a job taken this recently may have been composed before the take. */
  pingSettleMs: number;
  /** How long a refused job-take is held before its empty answer, so a worker does not spin. */
  refusedTakeHoldMs: number;
  /** Worker output lines kept per endpoint for `problem.lines`. */
  keptLines: number;
}

export const defaultSupervisorSettings: SupervisorSettings = {
  stopGraceMs: 5_000,
  drainMs: 30_000,
  backoffBaseMs: 1_000,
  backoffMaxMs: 30_000,
  healthyAfterMs: 60_000,
  maxFailedStarts: 3,
  startFailureCodes: [],
  startFailureFix: 'fix the code and redeploy',
  pingSettleMs: 5_000,
  refusedTakeHoldMs: 1_000,
  keptLines: 20,
};

export type WorkerPhase = 'starting' | 'ready' | 'draining' | 'retiring' | 'gone';

interface HeldJob {
  takenAt: number;
  /** When a ping last renewed its lease (leasesDue); the take set it first, at takenAt. */
  renewedAt?: number;
  /** When a stop (cancel, timeout) was first seen for it. */
  stopSeenAt?: number;
  /** When it runs past its execution timeout, as last known; undefined while not known, or none. */
  deadlineMs?: number;
}

interface WorkerEntry {
  identity: WorkerIdentity;
  tokenHash: string;
  phase: WorkerPhase;
  /** Load-balanced workers speak no worker protocol; they are ready once their /ping answers. */
  kind: 'queue' | 'lb';
  startedAt: number;
  /** How long it may go without contact before it is killed as a failed start; none: no limit. */
  startGraceMs?: number;
  /**
   * When that grace began: when it was registered, or when its container was reported started (ECS
   * pulls the worker's image after the agent starts); undefined while that report is awaited.
   */
  graceFromMs?: number;
  contactAt?: number;
  lastBusyAt: number;
  held: Map<string, HeldJob>;
  /** Requests in flight (load-balanced workers). */
  inFlight: number;
  /** When stop() was sent. */
  stopSentAt?: number;
  /**
   * Why this supervisor killed it: it overstayed (kept a stopped job, or did not leave when asked: the
   * platform's choice, `departureOf`), or it made no contact within its start grace (a failed start,
   * as if it had exited on its own). `why` is the line its kill was logged with.
   */
  killed?: { cause: 'overstayed' | 'silent-start'; why: string };
  /** Whether this supervisor's actuator started it (the agent adopts one ECS started). */
  actuated: boolean;
  /** The last registry write, to skip writes while nothing but the time changed. */
  mirrored?: { state: string; jobs: string; atMs: number };
}

interface EndpointState {
  crashes: number;
  failedStarts: number;
  nextStartAt: number;
  problem?: EndpointProblem;
  /** The last lines its workers printed, each with the worker that printed it (`linesOf`). */
  lines: { workerId: string; line: string }[];
  /** `problem` was set by `unconfigured` (what workers need is missing), not by a worker's exit. */
  unconfigured?: boolean;
}

/** What the scaling policy (core/scaling.ts) needs beside what the supervisor knows of its workers. */
export interface ScalePlan {
  /** Urgent jobs waiting (low-priority ones are left out: they never start a worker). */
  urgentQueuedJobs: number;
  /** Load-balanced requests that found no worker free. */
  waitingRequests?: number;
  min: number;
  max: number;
  maxConcurrency: number;
  idleMs: number;
  kind: 'queue' | 'lb';
  /** How long a worker started for it may go without contact before it is killed; none: no limit. */
  startGraceMs?: number;
}

/** How long an adopted worker may go without contact before it is killed as a failed start. */
export interface StartGrace {
  /** As in ScalePlan; none: no limit. */
  startGraceMs?: number;
  /**
   * Its start will be reported (`started()`: ECS task metadata, once the container runs): the grace
   * counts from then, not from its adoption, so the image pull ECS does after the agent started is
   * not part of it.
   */
  awaitStart?: boolean;
}

export interface WorkerSupervisorOptions {
  clock: Clock;
  log: Logger;
  actuator?: WorkerActuator;
  settings?: Partial<SupervisorSettings>;
  /** Mirrors live workers into the shared registry, where the API Lambda reads health (AWS). */
  registry?: WorkerRegistry;
  /** A registry record older than this is stale to readers; re-written at a sixth of it. */
  registryStaleMs?: number;
  /**
   * Where the run of failed starts is shared, when each worker has its own supervisor (one agent per
   * ECS task): the count and the failing verdict then outlive the task. Without it they live here.
   */
  starts?: StartFailureRecord;
  /**
   * Whether a job the worker holds may have to stop since the last call. The tick then reads the held
   * jobs; without it (or while a stop is already pending) it reads them on every tick. The agent
   * answers from its stop signal (core/adapters/aws/stop-signals.ts).
   */
  stopMayBeDue?: (workerId: string) => Promise<boolean>;
  /**
   * The name its log lines call an endpoint by: users read names, not internal ids (`ferry dev`: the
   * function's; `ferry serve`: the deployed record's; the AWS agents: FERRY_ENDPOINT). Undefined or
   * absent: the id.
   */
  nameOf?: (endpointId: string) => string | undefined;
}

export class WorkerSupervisor implements WorkerLedger {
  readonly settings: SupervisorSettings;
  private readonly workers = new Map<string, WorkerEntry>();
  private readonly byToken = new Map<string, string>();
  private readonly endpoints = new Map<string, EndpointState>();
  private readonly closing = new AbortController();
  /**
   * One timer for the earliest execution deadline among the held jobs. A timer per job (an
   * AbortController, an abort listener and its dispatch on every job-done) cost about 7 µs of CPU per
   * job; this one is re-armed only when a job comes with an earlier deadline than the armed one.
   */
  private deadlineTimer: { atMs: number; stop: AbortController } | undefined;
  private engine: SupervisedEngine | undefined;
  private actuator: WorkerActuator | undefined;

  constructor(private readonly options: WorkerSupervisorOptions) {
    this.settings = { ...defaultSupervisorSettings, ...options.settings };
    this.actuator = options.actuator;
  }

  /** The engine is built with this supervisor as its ledger, so it is attached afterwards. */
  attach(parts: { engine?: SupervisedEngine; actuator?: WorkerActuator }): void {
    if (parts.engine) this.engine = parts.engine;
    if (parts.actuator) this.actuator = parts.actuator;
  }

  private get clock(): Clock {
    return this.options.clock;
  }

  // ── identity ──────────────────────────────────────────────────────────────────────────────────

  /** A new worker identity: a fresh id and a random token bound to both. */
  private issue(endpointId: string): WorkerIdentity {
    const workerId = `${endpointId}-${randomBytes(6).toString('hex')}`;
    return { workerId, endpointId, token: newSecret('fyw') };
  }

  /** A new identity for a worker started outside any actuator (tests, a worker run by hand). */
  adoptNew(endpointId: string, workerId?: string): WorkerIdentity {
    const identity = { ...this.issue(endpointId), ...(workerId ? { workerId } : {}) };
    this.adopt(identity);
    return identity;
  }

  /** Registers a worker someone else started with this identity (ECS starts the agent's worker). */
  adopt(identity: WorkerIdentity, kind: 'queue' | 'lb' = 'queue', grace: StartGrace = {}): void {
    this.register(identity, kind, false, grace.startGraceMs, grace.awaitStart === true);
  }

  /** The worker's container started at `atMs` (an adopted worker's, reported by its actuator). */
  started(workerId: string, atMs: number): void {
    const entry = this.workers.get(workerId);
    if (entry?.phase === 'starting') entry.graceFromMs = atMs;
  }

  private register(
    identity: WorkerIdentity,
    kind: 'queue' | 'lb',
    actuated: boolean,
    startGraceMs: number | undefined,
    awaitStart = false,
  ): WorkerEntry {
    const now = this.clock.now();
    const entry: WorkerEntry = {
      identity,
      tokenHash: hashKey(identity.token),
      phase: 'starting',
      kind,
      startedAt: now,
      ...(startGraceMs !== undefined ? { startGraceMs } : {}),
      ...(awaitStart ? {} : { graceFromMs: now }),
      lastBusyAt: now,
      held: new Map(),
      inFlight: 0,
      actuated,
    };
    this.workers.set(identity.workerId, entry);
    this.byToken.set(entry.tokenHash, identity.workerId);
    return entry;
  }

  /**
   * Checks a worker route's credential: `ok` when the token is the live worker's own and names this
   * endpoint and worker id; `unknown` (401) when no live worker has it; `mismatch` (403) when it is
   * a live worker's token used for another endpoint or another worker id.
   */
  verify(token: string | undefined, endpointId: string, workerId: string): 'ok' | 'unknown' | 'mismatch' {
    if (!token) return 'unknown';
    const owner = this.byToken.get(hashKey(token));
    const entry = owner === undefined ? undefined : this.workers.get(owner);
    if (!entry || entry.phase === 'gone') return 'unknown';
    if (entry.identity.endpointId !== endpointId || entry.identity.workerId !== workerId) return 'mismatch';
    return 'ok';
  }

  /** The endpoint of a live worker (its call token works only meanwhile, core/auth.ts). */
  liveEndpointOf(workerId: string): string | undefined {
    const entry = this.workers.get(workerId);
    return entry && entry.phase !== 'gone' ? entry.identity.endpointId : undefined;
  }

  // ── ledger: fed by the engine's worker moves ──────────────────────────────────────────────────

  async mayTake(endpointId: string, workerId: string): Promise<boolean> {
    const entry = this.live(endpointId, workerId);
    if (!entry) return false;
    this.contact(entry);
    if (this.takesNew(workerId)) return true;
    // Draining, retiring or killed: hold the empty answer a moment, since workers ask again at once.
    await this.clock.sleep(this.settings.refusedTakeHoldMs, this.closing.signal);
    return false;
  }

  /**
   * Whether a take of the worker that is already waiting may still be given a job: a map read, asked
   * by the store for every job it would hand over. A worker drained meanwhile (a new deployment rolls
   * its workers, a scale-in) or killed gets none: a job arriving after `ferry deploy` said Deployed
   * must not go to a worker of the old code that was waiting for work.
   */
  takesNew(workerId: string): boolean {
    const entry = this.workers.get(workerId);
    // A worker this supervisor killed is on its way out: a job taken now would only be cut off.
    return entry !== undefined && entry.phase === 'ready' && !entry.killed;
  }

  async taken(
    endpointId: string,
    workerId: string,
    jobIds: string[],
    deadlinesMs?: ReadonlyMap<string, number>,
  ): Promise<void> {
    const entry = this.live(endpointId, workerId);
    if (!entry) return;
    const now = this.clock.now();
    for (const jobId of jobIds) {
      if (entry.held.has(jobId)) continue;
      const held: HeldJob = { takenAt: now, deadlineMs: deadlinesMs?.get(jobId) };
      entry.held.set(jobId, held);
      // A deadline the taker wrote needs no read of the job until it comes (one read per job saved).
      if (held.deadlineMs === undefined) void this.checkDeadline(entry, jobId, held);
      else this.armDeadline(held.deadlineMs);
    }
    entry.lastBusyAt = now;
    await this.mirror(entry);
  }

  async released(
    endpointId: string,
    workerId: string,
    jobId: string,
    options: { refresh: boolean },
  ): Promise<void> {
    const entry = this.live(endpointId, workerId);
    if (!entry) return;
    this.letGo(entry, jobId);
    if (options.refresh && entry.phase !== 'draining') {
      // RunPod's refresh_worker: the result is saved, then a fresh worker takes the next job.
      entry.phase = 'retiring';
      this.options.log.info(`worker ${workerId} asked for a refresh after job ${jobId}`);
    }
    await this.mirror(entry);
  }

  async pinged(endpointId: string, workerId: string, jobIds: string[]): Promise<void> {
    const entry = this.live(endpointId, workerId);
    if (!entry) return;
    this.contact(entry);
    const listed = new Set(jobIds);
    const now = this.clock.now();
    for (const [jobId, held] of entry.held) {
      if (!listed.has(jobId) && now - held.takenAt >= this.settings.pingSettleMs) this.letGo(entry, jobId);
    }
    // A listed job that is not on record is not added back: the ping may have left before that
    // job's job-done, and a finished job must not count as held (busy, protected, drained for).
    if (entry.held.size > 0) entry.lastBusyAt = now;
    await this.mirror(entry);
  }

  async held(workerId: string): Promise<string[]> {
    return this.heldBy(workerId);
  }

  async leasesDue(
    workerId: string,
    listed: ReadonlySet<string>,
    nowMs: number,
    gapMs: number,
  ): Promise<string[]> {
    const due: string[] = [];
    for (const [jobId, held] of this.workers.get(workerId)?.held ?? []) {
      if (!listed.has(jobId) || nowMs - (held.renewedAt ?? held.takenAt) < gapMs) continue;
      held.renewedAt = nowMs;
      due.push(jobId);
    }
    return due;
  }

  heldBy(workerId: string): string[] {
    return [...(this.workers.get(workerId)?.held.keys() ?? [])];
  }

  async gone(_endpointId: string, workerId: string): Promise<void> {
    const entry = this.workers.get(workerId);
    if (!entry) return;
    this.bury(entry);
    await this.options.registry?.remove(workerId).catch((error) => {
      this.options.log.warn(`registry remove ${workerId}: ${messageOf(error)}`);
    });
  }

  async counts(endpointId: string): Promise<WorkerCounts> {
    let idle = 0;
    let running = 0;
    for (const entry of this.workers.values()) {
      if (entry.identity.endpointId !== endpointId || entry.phase === 'gone' || entry.phase === 'starting')
        continue;
      if (entry.held.size > 0 || entry.inFlight > 0) running++;
      else idle++;
    }
    return { idle, running, problem: this.endpoints.get(endpointId)?.problem };
  }

  // ── lifecycle: what actuators report and ask ──────────────────────────────────────────────────

  /**
   * Starts one worker now unless the endpoint is failing, backing off, or at its cap (`plan`'s kind,
   * max and start grace).
   */
  startOne(
    endpointId: string,
    plan: Pick<ScalePlan, 'kind' | 'max' | 'startGraceMs'>,
  ): WorkerIdentity | undefined {
    const state = this.endpoint(endpointId);
    if (state.problem?.state === 'failing' || this.clock.now() < state.nextStartAt) return undefined;
    if (this.liveOf(endpointId).length >= plan.max) return undefined;
    const identity = this.issue(endpointId);
    this.register(identity, plan.kind, true, plan.startGraceMs);
    this.actuator?.start(identity);
    return identity;
  }

  /** A load-balanced worker answered its readiness check. */
  ready(workerId: string): void {
    const entry = this.workers.get(workerId);
    if (entry) this.contact(entry);
  }

  /** A load-balanced request begins (+1) or ends (-1) on this worker. */
  request(workerId: string, delta: 1 | -1): void {
    const entry = this.workers.get(workerId);
    if (!entry) return;
    entry.inFlight = Math.max(0, entry.inFlight + delta);
    entry.lastBusyAt = this.clock.now();
    // The scaler reads in-flight requests from the registry (load-balanced agents on AWS).
    void this.mirror(entry).catch((error) => {
      this.options.log.warn(`registry write ${workerId}: ${messageOf(error)}`);
    });
  }

  /** Asks a worker to finish what it holds and leave (scale-in, a new deployment, SIGTERM). */
  drain(workerId: string): void {
    const entry = this.workers.get(workerId);
    if (!entry || entry.phase === 'gone' || entry.phase === 'draining') return;
    entry.phase = 'draining';
    if (entry.held.size === 0 && entry.inFlight === 0) this.sendStop(entry);
  }

  /**
   * The platform is shutting down: the worker is asked to leave now (SIGTERM to its leader), busy or
   * not, so its runtime finishes its jobs or leaves them within its grace period (docs/workers.md);
   * its exit is a planned one, never a crash or a failed start, and the jobs it still holds go back
   * to the queue. The actuator kills what is left once its shutdown grace is over.
   */
  shutdown(workerId: string): void {
    const entry = this.workers.get(workerId);
    if (!entry || entry.phase === 'gone') return;
    entry.phase = 'draining';
    this.sendStop(entry);
  }

  phase(workerId: string): WorkerPhase | undefined {
    return this.workers.get(workerId)?.phase;
  }

  /** Workers of an endpoint that are not gone, oldest first. */
  liveOf(endpointId: string): WorkerIdentity[] {
    return [...this.workers.values()]
      .filter((e) => e.identity.endpointId === endpointId && e.phase !== 'gone')
      .map((e) => e.identity);
  }

  /** Workers that take new work (not draining, retiring or gone). */
  servingOf(endpointId: string): WorkerIdentity[] {
    return [...this.workers.values()]
      .filter((e) => e.identity.endpointId === endpointId && (e.phase === 'starting' || e.phase === 'ready'))
      .map((e) => e.identity);
  }

  /** A line the worker printed; the last few explain a crash or a failed start. */
  output(endpointId: string, workerId: string, line: string): void {
    const state = this.endpoint(endpointId);
    state.lines.push({ workerId, line });
    if (state.lines.length > this.settings.keptLines) state.lines.shift();
  }

  /**
   * The last lines `workerId` printed, for the report of its exit: not a sibling's, nor those of the
   * worker before it (a healthy one's "stopped" read as the cause of the next one's failed start).
   */
  private linesOf(endpointId: string, workerId: string): string[] {
    return this.endpoint(endpointId)
      .lines.filter((l) => l.workerId === workerId)
      .map((l) => l.line);
  }

  /**
   * Whose choice a worker's exit was, the one rule `exited` derives everything from:
   * - `asked`: the platform asked it to leave (its stop was sent, or `how.asked`: ECS stopped the
   *   task). Not the endpoint's trouble, and its jobs use no attempt.
   * - `overstayed`: this supervisor killed it for keeping a stopped job past stopGraceMs or not
   *   leaving within drainMs of its stop. The kill was the platform's, so the same as `asked`.
   * - `retired`: it asked for a refresh (refresh_worker) and exited before its stop was sent. Leaving
   *   was its plan, so no backoff; but jobs it still ran were cut by its own exit, and each used an
   *   attempt.
   * - `own`: anything else (a crash, an OOM kill, a segfault; a kill for no contact within its start
   *   grace, a failed start as if it had exited): backoff or a failed start, and an attempt each.
   * A stop sent comes before a kill for silence: a worker drained while starting that never made
   * contact was still asked to go.
   */
  private departureOf(
    entry: WorkerEntry,
    how: { asked?: boolean },
  ): 'asked' | 'overstayed' | 'retired' | 'own' {
    if (entry.killed?.cause === 'overstayed') return 'overstayed';
    if (how.asked === true || entry.stopSentAt !== undefined) return 'asked';
    if (entry.phase === 'retiring') return 'retired';
    return 'own';
  }

  /**
   * The worker's process (group) ended. Its token dies, its jobs go back to the queue now, and an
   * exit nobody asked for counts towards backoff or, before any contact, towards failing. `asked`:
   * its stop was asked for outside this supervisor (ECS stopping the whole task, worker-image/agent).
   */
  async exited(
    workerId: string,
    how: { code: number | null; signal: string | null; asked?: boolean },
  ): Promise<void> {
    const entry = this.workers.get(workerId);
    // Reported once: a second report (the drain after the container's exit) changes nothing.
    if (!entry || entry.phase === 'gone') return;
    const endpointId = entry.identity.endpointId;
    const departure = this.departureOf(entry, how);
    const contacted = entry.contactAt !== undefined;
    const now = this.clock.now();
    this.bury(entry);
    const cause = how.signal ? `signal ${how.signal}` : `code ${how.code}`;
    // Only an exit of its own says something is wrong with the endpoint; after any other a
    // replacement may start at once.
    const planned = departure !== 'own';
    // An exit nobody asked for backs off before its jobs go back: the requeue wakes the pool, whose
    // tick started the replacement at once while the next start time was set only after it.
    if (!planned) this.backOff(endpointId, workerId, cause, now, entry.startedAt);
    if (entry.kind === 'queue' && this.engine) {
      // A job that later fails for its attempts shows the last of these in its error.
      const reason =
        departure === 'overstayed'
          ? `Worker ${workerId} was stopped: ${entry.killed?.why}`
          : departure === 'asked'
            ? `Worker ${workerId} was stopped`
            : departure === 'retired'
              ? `Worker ${workerId} exited (${cause}) after asking to be replaced (refresh_worker), while running the job`
              : `Worker ${workerId} exited (${cause}) while running the job`;
      // The platform ended the worker, so the jobs it still ran did not fail: they go back without
      // using an attempt. This cannot loop on the job an overstaying worker kept: that job is
      // CANCELLED or TIMED_OUT (or another worker's) by then, and workerGone moves only the jobs
      // IN_PROGRESS on this worker, so each such kill ends a stopped job for good.
      const stopped = departure === 'asked' || departure === 'overstayed';
      await this.engine.workerGone(endpointId, workerId, reason, { stopped }).catch((error) => {
        this.options.log.warn(`requeueing the jobs of ${workerId}: ${messageOf(error)}`);
      });
    }
    await this.options.registry?.remove(workerId).catch(() => {});
    if (planned) return;
    const state = this.endpoint(endpointId);
    const lines = this.linesOf(endpointId, workerId);
    if (!contacted) {
      state.failedStarts = await this.countFailedStart(endpointId, state.failedStarts);
      const cannotStart = how.code !== null && this.settings.startFailureCodes.includes(how.code);
      if (cannotStart || state.failedStarts >= this.settings.maxFailedStarts) {
        state.problem = {
          state: 'failing',
          reason: cannotStart
            ? `its worker could not start (exit ${cause}); ${this.settings.startFailureFix}`
            : `${state.failedStarts} workers in a row exited (${cause}) before taking a job; ${this.settings.startFailureFix}`,
          lines,
          sinceMs: now,
        };
        const tail = lines.length > 0 ? `; its last lines:\n${lines.map((l) => `  ${l}`).join('\n')}` : '';
        this.options.log.error(
          `endpoint ${this.nameOf(endpointId)} is failing: ${state.problem.reason}${tail}`,
        );
        await this.options.starts
          ?.markFailing(endpointId, state.problem)
          .catch((error) =>
            this.options.log.warn(
              `recording that ${this.nameOf(endpointId)} is failing: ${messageOf(error)}`,
            ),
          );
        await this.rejectQueued(endpointId);
        return;
      }
    }
    if (state.problem?.state === 'backoff')
      this.options.log.warn(`endpoint ${this.nameOf(endpointId)}: ${state.problem.reason}`);
  }

  /**
   * A worker exited unasked (a crash, or a failed start short of failing): the next start waits
   * 1 s, 2 s, 4 s… (up to backoffMaxMs). Health says why; `exited` logs it once it knows the exit
   * did not make the endpoint failing.
   */
  private backOff(endpointId: string, workerId: string, cause: string, now: number, startedAt: number): void {
    const state = this.endpoint(endpointId);
    const lines = this.linesOf(endpointId, workerId);
    state.crashes = now - startedAt >= this.settings.healthyAfterMs ? 1 : state.crashes + 1;
    const backoffMs = Math.min(
      this.settings.backoffMaxMs,
      this.settings.backoffBaseMs * 2 ** (state.crashes - 1),
    );
    state.nextStartAt = now + backoffMs;
    state.problem = {
      state: 'backoff',
      reason: `worker ${workerId} exited (${cause}); ${state.crashes} crash(es) in a row, next start in ${backoffMs} ms`,
      lines,
      sinceMs: now,
      retryAtMs: state.nextStartAt,
    };
  }

  /**
   * Picks up the run of failed starts other supervisors shared (an agent's task before this one), so
   * the count goes on across tasks and the first contact knows whether there is a run to clear.
   */
  async resumeStarts(endpointId: string): Promise<void> {
    const shared = await this.options.starts?.startFailures(endpointId);
    if (shared) this.endpoint(endpointId).failedStarts = shared.failedStarts;
  }

  /** A new deployment: whatever made the endpoint fail or back off may be fixed. */
  redeployed(endpointId: string): void {
    this.endpoints.delete(endpointId);
  }

  /**
   * What the endpoint's workers need to start cannot be given them (a `secrets=` name with no value,
   * core/adapters/local/pool.ts): no worker is started, so it is failing as if none could start.
   * Health says why and queued jobs end FAILED at once rather than wait out their TTL (called again
   * on every pass while it lasts, for jobs that arrived since). `undefined`: the configuration is
   * complete again, and a failing state set here is cleared.
   */
  async unconfigured(endpointId: string, reason: string | undefined): Promise<void> {
    if (reason === undefined) {
      if (this.endpoints.get(endpointId)?.unconfigured) this.endpoints.delete(endpointId);
      return;
    }
    const state = this.endpoint(endpointId);
    if (!state.unconfigured || state.problem?.reason !== reason) {
      state.unconfigured = true;
      state.problem = { state: 'failing', reason, lines: [], sinceMs: this.clock.now() };
      this.options.log.error(`endpoint ${this.nameOf(endpointId)} is failing: ${reason}`);
    }
    await this.rejectQueued(endpointId);
  }

  /** What log lines call the endpoint (WorkerSupervisorOptions.nameOf). */
  private nameOf(endpointId: string): string {
    return this.options.nameOf?.(endpointId) ?? endpointId;
  }

  problem(endpointId: string): EndpointProblem | undefined {
    return this.endpoints.get(endpointId)?.problem;
  }

  /**
   * One pass of the policy for an endpoint: stops that were ignored past their grace end in a kill,
   * drains past their deadline end in a kill, retiring and draining workers that hold nothing are
   * told to leave, and (with a plan) workers start up to the desired count or idle ones drain.
   */
  async tick(endpointId: string, plan?: ScalePlan): Promise<void> {
    const now = this.clock.now();
    const state = this.endpoint(endpointId);
    if (state.problem?.state === 'failing') {
      // Nothing can run: jobs that arrive meanwhile fail at once rather than wait for their TTL.
      await this.rejectQueued(endpointId);
    } else if (
      state.problem?.state === 'backoff' &&
      this.anyContactSince(endpointId, state.problem.sinceMs)
    ) {
      state.problem = undefined;
    }
    for (const entry of [...this.workers.values()]) {
      if (entry.identity.endpointId !== endpointId || entry.phase === 'gone') continue;
      await this.enforce(entry, now);
    }
    if (plan) this.scale(endpointId, plan);
  }

  private async enforce(entry: WorkerEntry, now: number): Promise<void> {
    if (entry.killed) return;
    const { workerId, endpointId } = entry.identity;
    const grace = entry.startGraceMs;
    const from = entry.graceFromMs;
    if (entry.phase === 'starting' && grace !== undefined && from !== undefined && now - from >= grace) {
      // A hung import or model load, or a server that never listens: it would never exit on its own.
      const graceSec = Math.round(grace / 1000);
      const line =
        entry.kind === 'lb'
          ? `the worker did not answer GET /ping within its health check grace (${graceSec} s): is its server listening on FERRY_PORT?`
          : `the worker made no contact (no job-take or ping) within its start grace (${graceSec} s): is its import or model load stuck?`;
      this.output(endpointId, entry.identity.workerId, line);
      this.kill(entry, line, 'silent-start');
      return;
    }
    if ((entry.phase === 'retiring' || entry.phase === 'draining') && entry.held.size === 0) {
      if (entry.inFlight === 0 && entry.stopSentAt === undefined) this.sendStop(entry);
    }
    if (entry.stopSentAt !== undefined && now - entry.stopSentAt >= this.settings.drainMs) {
      this.kill(entry, `it did not leave within ${this.settings.drainMs} ms of being asked to`, 'overstayed');
      return;
    }
    if (entry.held.size === 0 || !this.engine || entry.kind !== 'queue') return;
    const pending = [...entry.held.values()].some((held) => held.stopSeenAt !== undefined);
    if (!pending && this.options.stopMayBeDue && !(await this.options.stopMayBeDue(workerId))) return;
    const stop = new Set(await this.engine.jobsToStop(endpointId, workerId, 0));
    for (const [jobId, held] of entry.held) {
      if (!stop.has(jobId)) {
        held.stopSeenAt = undefined;
        continue;
      }
      held.stopSeenAt ??= now;
      if (now - held.stopSeenAt >= this.settings.stopGraceMs) {
        this.kill(entry, `it kept stopped job ${jobId} for ${this.settings.stopGraceMs} ms`, 'overstayed');
        return;
      }
    }
  }

  /**
   * The scaling policy's answer for an endpoint now, over the workers that take new work (the same
   * function the AWS scaler applies to ECS; docs/scaling.md).
   */
  decide(endpointId: string, plan: ScalePlan): ScalingDecision {
    return decideScale({
      urgentQueuedJobs: plan.urgentQueuedJobs,
      waitingRequests: plan.waitingRequests ?? 0,
      workers: this.serving(endpointId).map((e) => ({
        workerId: e.identity.workerId,
        heldJobs: e.held.size,
        inFlightRequests: e.inFlight,
        lastBusyAtMs: e.lastBusyAt,
      })),
      min: plan.min,
      max: plan.max,
      maxConcurrency: plan.maxConcurrency,
      idleTimeoutMs: plan.idleMs,
      nowMs: this.clock.now(),
    });
  }

  /** Starts workers up to the policy's count, and drains the idle ones it lets go. */
  private scale(endpointId: string, plan: ScalePlan): void {
    const decision = this.decide(endpointId, plan);
    for (let i = this.serving(endpointId).length; i < decision.desired; i++) {
      if (!this.startOne(endpointId, plan)) break;
    }
    for (const workerId of decision.mayStop) this.drain(workerId);
  }

  private serving(endpointId: string): WorkerEntry[] {
    return [...this.workers.values()].filter(
      (e) => e.identity.endpointId === endpointId && (e.phase === 'starting' || e.phase === 'ready'),
    );
  }

  close(): void {
    this.closing.abort();
    this.deadlineTimer?.stop.abort();
  }

  // ── helpers ───────────────────────────────────────────────────────────────────────────────────

  private live(endpointId: string, workerId: string): WorkerEntry | undefined {
    const entry = this.workers.get(workerId);
    if (!entry || entry.phase === 'gone' || entry.identity.endpointId !== endpointId) return undefined;
    return entry;
  }

  private endpoint(endpointId: string): EndpointState {
    let state = this.endpoints.get(endpointId);
    if (!state) {
      state = { crashes: 0, failedStarts: 0, nextStartAt: 0, lines: [] };
      this.endpoints.set(endpointId, state);
    }
    return state;
  }

  private contact(entry: WorkerEntry): void {
    if (entry.contactAt !== undefined) return;
    entry.contactAt = this.clock.now();
    if (entry.phase === 'starting') entry.phase = 'ready';
    const endpointId = entry.identity.endpointId;
    const state = this.endpoint(endpointId);
    // Only a run on record is cleared: a healthy endpoint's workers make no extra write.
    if (state.failedStarts > 0) {
      void this.options.starts
        ?.clearStartFailures(endpointId)
        .catch((error) =>
          this.options.log.warn(
            `clearing the failed starts of ${this.nameOf(endpointId)}: ${messageOf(error)}`,
          ),
        );
    }
    state.failedStarts = 0;
  }

  /** One more worker died before contact: the run so far, shared across tasks where it can be. */
  private async countFailedStart(endpointId: string, local: number): Promise<number> {
    const starts = this.options.starts;
    if (!starts) return local + 1;
    try {
      return await starts.addFailedStart(endpointId);
    } catch (error) {
      this.options.log.warn(`counting a failed start of ${this.nameOf(endpointId)}: ${messageOf(error)}`);
      return local + 1;
    }
  }

  private anyContactSince(endpointId: string, sinceMs: number): boolean {
    for (const entry of this.workers.values()) {
      if (entry.identity.endpointId === endpointId && entry.phase !== 'gone') {
        if (entry.contactAt !== undefined && entry.contactAt >= sinceMs) return true;
      }
    }
    return false;
  }

  private letGo(entry: WorkerEntry, jobId: string): void {
    const held = entry.held.get(jobId);
    if (!held) return;
    entry.held.delete(jobId);
    entry.lastBusyAt = this.clock.now();
  }

  private sendStop(entry: WorkerEntry): void {
    if (entry.stopSentAt !== undefined) return;
    entry.stopSentAt = this.clock.now();
    this.actuator?.stop(entry.identity.workerId);
  }

  private kill(entry: WorkerEntry, why: string, cause: NonNullable<WorkerEntry['killed']>['cause']): void {
    if (entry.killed) return;
    entry.killed = { cause, why };
    this.options.log.warn(`killing worker ${entry.identity.workerId}: ${why}`);
    this.actuator?.kill(entry.identity.workerId, why);
  }

  private bury(entry: WorkerEntry): void {
    if (entry.phase === 'gone') return;
    entry.phase = 'gone';
    this.byToken.delete(entry.tokenHash);
    entry.held.clear();
    // Keep buried entries only briefly: they exist so a late report about them is recognised.
    setTimeout(() => {
      if (this.workers.get(entry.identity.workerId) === entry) this.workers.delete(entry.identity.workerId);
    }, 60_000).unref();
  }

  private async rejectQueued(endpointId: string): Promise<void> {
    const problem = this.endpoints.get(endpointId)?.problem;
    if (!this.engine || problem?.state !== 'failing') return;
    await this.engine
      .rejectQueued(endpointId, queuedJobsFailure(problem))
      .catch((error) =>
        this.options.log.warn(`failing queued jobs of ${this.nameOf(endpointId)}: ${messageOf(error)}`),
      );
  }

  /**
   * Held jobs are timed out at startedAt + executionTimeout by this timer, without waiting for the
   * sweeper. Arms it for `atMs` when that comes before the armed time (or nothing is armed).
   */
  private armDeadline(atMs: number): void {
    const armed = this.deadlineTimer;
    if (this.closing.signal.aborted || (armed && armed.atMs <= atMs)) return;
    armed?.stop.abort();
    const stop = new AbortController();
    this.deadlineTimer = { atMs, stop };
    void this.clock.sleep(Math.max(1, atMs - this.clock.now()), stop.signal).then(() => {
      if (stop.signal.aborted) return;
      this.deadlineTimer = undefined;
      this.deadlinesDue();
    });
  }

  /** Reads every held job whose deadline has come, and arms the timer for the next one. */
  private deadlinesDue(): void {
    const now = this.clock.now();
    let next = Number.POSITIVE_INFINITY;
    for (const entry of this.workers.values()) {
      for (const [jobId, held] of entry.held) {
        if (held.deadlineMs === undefined) continue;
        if (held.deadlineMs > now) next = Math.min(next, held.deadlineMs);
        else {
          held.deadlineMs = undefined;
          void this.checkDeadline(entry, jobId, held);
        }
      }
    }
    if (next !== Number.POSITIVE_INFINITY) this.armDeadline(next);
  }

  /** Times the job out if it is overdue; otherwise learns its deadline (none: nothing to watch). */
  private async checkDeadline(entry: WorkerEntry, jobId: string, held: HeldJob): Promise<void> {
    const engine = this.engine;
    if (!engine || this.closing.signal.aborted) return;
    try {
      const outcome = await engine.timeOutIfOverdue(entry.identity.endpointId, jobId);
      // Let go of meanwhile (its job-done, the worker's exit): nothing left to watch.
      if (entry.held.get(jobId) !== held) return;
      if (outcome.timedOut) {
        this.options.log.info(`job ${jobId} ran past its execution timeout: TIMED_OUT`);
        held.stopSeenAt ??= this.clock.now();
      } else if (outcome.deadlineMs !== undefined) {
        held.deadlineMs = outcome.deadlineMs;
        this.armDeadline(outcome.deadlineMs);
      }
    } catch (error) {
      this.options.log.warn(`execution timeout of job ${jobId}: ${messageOf(error)}`);
    }
  }

  /** Writes the worker to the shared registry when what readers see changed, or before it goes stale. */
  private async mirror(entry: WorkerEntry): Promise<void> {
    const registry = this.options.registry;
    if (!registry || entry.phase === 'gone') return;
    const now = this.clock.now();
    const jobIds = [...entry.held.keys()];
    const state = jobIds.length > 0 || entry.inFlight > 0 ? 'running' : 'idle';
    // What the scaler reads: held jobs, requests in flight (0 or not), and when it was last busy.
    const jobs = `${jobIds.join(',')}|${entry.inFlight > 0 ? 'serving' : ''}`;
    const staleMs = this.options.registryStaleMs ?? 180_000;
    const last = entry.mirrored;
    if (last && last.state === state && last.jobs === jobs && now - last.atMs < staleMs / 6) return;
    entry.mirrored = { state, jobs, atMs: now };
    await registry.heartbeat({
      workerId: entry.identity.workerId,
      endpointId: entry.identity.endpointId,
      state,
      jobIds,
      lastSeenAt: now,
      lastBusyAt: entry.lastBusyAt,
      ...(entry.kind === 'lb' ? { inFlight: entry.inFlight } : {}),
    });
  }
}

/** The error a queued job of a failing endpoint ends with (the AWS scaler ends them with it too). */
export function queuedJobsFailure(problem: EndpointProblem): string {
  const tail = problem.lines.length > 0 ? `\n${problem.lines.join('\n')}` : '';
  return `The endpoint's workers cannot start: ${problem.reason}${tail}`;
}
