/**
 * The job engine: every move of docs/architecture.md#jobs, on the ports only. The v2 API, the worker
 * protocol, the Lambda handlers and the AWS agent all call it; none of them touches a store directly.
 *
 * Each move reads the job, checks the move is legal from its status (job.ts owns that table), and
 * writes with compare-and-set on the version. When the write loses a race it reads again and decides
 * again, so cancel against completion or lease expiry against job-done always ends in one answer.
 */
import { randomFillSync } from 'node:crypto';
import { v7 as timeOrderedUuid } from 'uuid';
import { mapAtMost } from './concurrency.js';
import { conflict, FerryError, messageOf, notFound } from './errors.js';
import {
  canMove,
  isFinal,
  type Job,
  type JobStatus,
  type JobView,
  type Move,
  runDeadlineOf,
  viewOf,
} from './job.js';
import { stringifyJsonExact } from './json.js';
import { RegistryLedger } from './ledger.js';
import { limits } from './limits.js';
import type {
  ChangeFeed,
  Clock,
  Deadline,
  EndpointProblem,
  JobPatch,
  JobQueue,
  JobReadOptions,
  JobStore,
  JobUpdate,
  QueuedJobCount,
  StartFailureRecord,
  TakenJob,
  TakeQueuedOptions,
  Watch,
  WorkerCounts,
  WorkerLedger,
  WorkerRegistry,
} from './ports.js';
import type { JobDoneBody, RunRequest } from './schemas.js';

export interface EngineSettings {
  leaseMs: number;
  maxAttempts: number;
  /** A worker not heard from for this long no longer counts in health. */
  workerStaleMs: number;
  /** Jobs waiting per endpoint; a submit above it is refused with 429 (docs/security.md). */
  queueCapJobs: number;
}

export interface WebhookSender {
  /** Delivers in the background; never throws. */
  send(url: string, body: unknown): void;
}

export interface EngineDeps {
  jobs: JobStore;
  queue: JobQueue;
  workers: WorkerRegistry;
  /** Who holds which jobs: the worker supervisor where this process runs workers (core/supervisor.ts). */
  ledger?: WorkerLedger;
  /** Without a ledger: where agents record an endpoint that cannot start workers (health's problem). */
  starts?: Pick<StartFailureRecord, 'startFailures'>;
  changes: ChangeFeed;
  clock: Clock;
  webhooks?: WebhookSender;
  /**
   * Writes a new job and its queue message in one transaction where the stores share a database
   * (SQLite), so a crash between the two cannot leave a job nobody will ever take.
   */
  createQueued?: (job: Job) => Promise<void>;
  /**
   * A move back to IN_QUEUE (a compare-and-set, as JobStore.update), the clear of the job's stream
   * chunks and its queue message in one transaction where the stores share a database (SQLite). Two
   * writes left a window: a closed database or a crash between them (a platform stopped while a
   * worker's exit was being handled) left the job IN_QUEUE with no message, which locally nothing
   * ever takes. Without it the engine composes the move, JobStore.clearStream and JobQueue.send
   * (AWS, whose sweeper sends a lost message again: resendWaiting).
   */
  requeueQueued?: (current: Job, patch: JobPatch) => Promise<JobUpdate>;
  /**
   * Receives, claims and acknowledges in one write where the stores share a database (SQLite): one
   * commit per take instead of three. Without it `take` composes queue.receive, a compare-and-set
   * per job and queue.ack (AWS).
   */
  takeQueued?: (endpointId: string, options: TakeQueuedOptions) => Promise<TakenJob[]>;
  /** A new job id; gets the endpoint so AWS can scope ids to it (core/job.ts endpointScopedJobId). */
  newId?: (endpointId: string) => string;
  /**
   * Where the queue's depth can count messages of jobs that already ended (SQS keeps a cancelled or
   * purged job's message until a worker receives and drops it, and an endpoint scaled to zero has no
   * worker to do so): the store's own count of queued jobs, which the queue cap believes when the
   * depth alone would refuse a submit.
   */
  queued?: QueuedJobCount;
  /**
   * Where a job whose queue message could not be sent is reported (it is stored; see `enqueue`), and
   * a job a sweep could not move (`sweepOne`).
   */
  warn?: (line: string) => void;
  settings?: Partial<EngineSettings>;
}

/** What one sweep moved, and the jobs it left because their move threw (`sweepOne`). */
export interface SweepTally {
  requeued: number;
  failed: number;
  timedOut: number;
  expired: number;
  left: number;
}

export interface SubmitOptions {
  sync: boolean;
  /** The runsync wait, which decides how long a sync job's result is kept. */
  waitMs?: number;
  /** The endpoint's own execution timeout; 0 or absent means the platform default. */
  executionTimeoutMs?: number;
  /** A call token's submit: the endpoint whose workers hold it (Job.submittedBy). */
  submittedBy?: string | undefined;
}

/** How a worker went (JobEngine.workerGone). */
export interface WorkerGone {
  /**
   * The platform stopped it (`ferry dev` reloading, `ferry serve` or `ferry dev` shutting down, its
   * endpoint removed, a scale-in or drain, or a kill for keeping a job it was told to stop): the jobs
   * it held go back to the queue without counting an attempt. A worker that exited on its own (a
   * crash, a segfault, an OOM kill) leaves this unset: each of its jobs used an attempt. The
   * supervisor decides which (`WorkerSupervisor.departureOf`).
   */
  stopped?: boolean;
}

/** What a worker receives from job-take (RunPod passes the job dict to the handler as it is). */
export interface WorkerJob {
  id: string;
  input: unknown;
  webhook?: string;
  s3Config?: Record<string, unknown>;
}

export interface StreamAnswer {
  id: string;
  status: Job['status'];
  stream: unknown[];
}

export interface Health {
  jobs: { completed: number; failed: number; inProgress: number; inQueue: number; retried: number };
  workers: { idle: number; running: number };
  /** Only while the endpoint's workers crash or cannot start (docs/workers.md). */
  problem?: EndpointProblem;
}

export const jobKey = (jobId: string) => `job:${jobId}`;
/**
 * Notified only when a job reaches a final status: what runsync and status-sync wait for. On the
 * job's own key they woke, and read the job again, at every step on the way (taken, progress, a
 * stream chunk) for nothing.
 */
export const jobEndKey = (jobId: string) => `job-end:${jobId}`;
export const workerKey = (workerId: string) => `worker:${workerId}`;
/**
 * Notified when a worker may have room under its max_concurrency again (a job let go): what its take
 * waits on at the cap. Not `workerKey`, whose every notify is a stop signal (on AWS a write).
 */
export const workerRoomKey = (workerId: string) => `worker-room:${workerId}`;
/** Notified whenever an endpoint's queue grows, so local worker pools can scale. */
export const endpointKey = (endpointId: string) => `endpoint:${endpointId}`;

/** A read of a job that leaves its input out (JobStore.get): worker routes never look at it. */
const noInput = { input: false } as const;
/**
 * A read for a job's view: the input only while the job is unfinished, as only then the view shows
 * it; with `inputAsText`, as the store's text (JsonText) for a view written straight out.
 */
const viewRead = (inputAsText: boolean): JobReadOptions => ({ input: 'unfinished', inputAsText });

/** 1 minute; a wait longer than the default keeps results as long as the wait, up to 5 minutes (docs/api.md#retention). */
const runsyncRetentionMs = (waitMs: number) =>
  waitMs > limits.runsyncDefaultWaitMs
    ? Math.min(limits.runsyncMaxRetentionMs, waitMs)
    : limits.runsyncRetentionMs;

/**
 * When a finished job goes: what its retention asks for, but never past limits.jobLifetimeMaxMs
 * from its submission (docs/api.md#retention).
 */
const keptUntil = (job: Pick<Job, 'createdAt'>, askedMs: number): number =>
  Math.min(askedMs, job.createdAt + limits.jobLifetimeMaxMs);

export class JobEngine {
  readonly settings: EngineSettings;
  private readonly jobs: JobStore;
  private readonly queue: JobQueue;
  private readonly ledger: WorkerLedger;
  private readonly changes: ChangeFeed;
  private readonly clock: Clock;
  private readonly webhooks: WebhookSender | undefined;
  private readonly createQueued: ((job: Job) => Promise<void>) | undefined;
  private readonly requeueQueued: EngineDeps['requeueQueued'];
  private readonly warn: ((line: string) => void) | undefined;
  private readonly takeQueued: EngineDeps['takeQueued'];
  private readonly newId: (endpointId: string) => string;
  private readonly queued: QueuedJobCount | undefined;
  /** Per endpoint, submits admitted without counting the backlog again (see `admit`). */
  readonly #capRoom = new Map<string, number>();
  /** Workers with a take under a max_concurrency counting its room or claiming (`roomFor`). */
  readonly #taking = new Set<string>();

  constructor(deps: EngineDeps) {
    this.jobs = deps.jobs;
    this.queue = deps.queue;
    this.changes = deps.changes;
    this.clock = deps.clock;
    this.webhooks = deps.webhooks;
    this.createQueued = deps.createQueued;
    this.requeueQueued = deps.requeueQueued;
    this.warn = deps.warn;
    this.takeQueued = deps.takeQueued;
    this.queued = deps.queued;
    // Time-ordered (UUID v7: a millisecond timestamp, then random bits), so a store keyed by job id
    // appends new jobs at the end of its index instead of at random places: SQLite then writes one
    // or two index pages per commit for a burst of submits, not one page per job.
    this.newId = deps.newId ?? (() => `${timeOrderedUuid({ random: randomBytes16() })}-u1`);
    this.settings = {
      leaseMs: limits.leaseMs,
      maxAttempts: limits.maxAttempts,
      workerStaleMs: 3 * limits.leaseMs,
      queueCapJobs: limits.queueCapJobs,
      ...deps.settings,
    };
    this.ledger =
      deps.ledger ?? new RegistryLedger(deps.workers, this.clock, this.settings.workerStaleMs, deps.starts);
  }

  // ── client side ──────────────────────────────────────────────────────────────────────────────

  async submit(endpointId: string, request: RunRequest, options: SubmitOptions): Promise<Job> {
    const job = await this.admitted(endpointId, request, options);
    await this.enqueue(job);
    return job;
  }

  /** The new job, once the queue cap lets it in; not stored yet (`enqueue`). */
  private async admitted(endpointId: string, request: RunRequest, options: SubmitOptions): Promise<Job> {
    await this.admit(endpointId);
    const now = this.clock.now();
    const ttlMs = request.policy?.ttl ?? limits.ttlDefaultMs;
    const job: Job = {
      id: options.sync ? `sync-${this.newId(endpointId)}` : this.newId(endpointId),
      endpointId,
      status: 'IN_QUEUE',
      input: request.input,
      webhook: request.webhook,
      s3Config: request.s3Config,
      policy: {
        executionTimeoutMs:
          request.policy?.executionTimeout || options.executionTimeoutMs || limits.executionTimeoutDefaultMs,
        ttlMs,
        lowPriority: request.policy?.lowPriority ?? false,
      },
      sync: options.sync,
      retentionMs: options.sync
        ? runsyncRetentionMs(options.waitMs ?? limits.runsyncDefaultWaitMs)
        : limits.runRetentionMs,
      createdAt: now,
      expiresAt: now + ttlMs,
      attempt: 0,
      retries: 0,
      version: 1,
    };
    if (options.submittedBy !== undefined) job.submittedBy = options.submittedBy;
    return job;
  }

  /**
   * Stores the job and queues it (or hands it to a waiting take). Where the two are separate stores
   * (AWS: DynamoDB, then SQS) the stored job is the promise: a message that cannot be sent (the SDK's
   * own retries spent) is sent again by the sweeper once the job has waited `staleQueuedMs`
   * (resendWaiting). Answering 5xx for it told the client the call failed while the job still ran
   * later, and the client's retry ran it twice.
   */
  private async enqueue(job: Job): Promise<void> {
    if (this.createQueued) await this.createQueued(job);
    else {
      await this.jobs.create(job);
      try {
        await this.queue.send(job.endpointId, job.id, { lowPriority: job.policy.lowPriority });
      } catch (error) {
        this.warn?.(
          `job ${job.id} is stored but its queue message was not sent (${messageOf(error)}); the sweeper sends it again`,
        );
      }
    }
    this.changes.notify(endpointKey(job.endpointId), { queuedLowPriority: job.policy.lowPriority === true });
  }

  /** Waits until the job ends or `waitMs` runs out; an unfinished job answers `{id, status}`. */
  async runSync(
    endpointId: string,
    request: RunRequest,
    waitMs: number,
    signal: AbortSignal | undefined,
    options: Omit<SubmitOptions, 'sync' | 'waitMs'> = {},
  ): Promise<JobView> {
    const job = await this.admitted(endpointId, request, { ...options, sync: true, waitMs });
    // Watched before it is stored, so no end can slip between the store and the wait: the wait
    // starts without reading back the job it just wrote.
    const watch = this.changes.watch(jobEndKey(job.id));
    let settled: Job;
    try {
      await this.enqueue(job);
      settled = await this.waitForEnd(endpointId, job.id, waitMs, signal, watch);
    } finally {
      watch.close();
    }
    const now = this.clock.now();
    return isFinal(settled.status) ? viewOf(settled, now) : { id: settled.id, status: settled.status };
  }

  /**
   * The job's view. `inputAsText`: an unfinished job's input may come as the store's JSON text
   * (JsonText, JobReadOptions.inputAsText), for a caller that only writes the view out: polling a
   * queued job with a big input then costs no parse and no second write of it.
   */
  async status(endpointId: string, jobId: string, ttlMs?: number, inputAsText = false): Promise<JobView> {
    // A finished job's view has no input: it is not read (on AWS a big one is an S3 object).
    let job = await this.mustGet(endpointId, jobId, viewRead(inputAsText));
    if (ttlMs !== undefined) {
      // `?ttl=` sets how long the result is kept (docs/api.md#retention), never how long the job may
      // run: a finished job now expires ttl from now; an unfinished one keeps its result that long
      // once it ends.
      job = await this.change(
        job,
        (current) =>
          isFinal(current.status)
            ? { expiresAt: keptUntil(current, this.clock.now() + ttlMs), retentionMs: ttlMs }
            : { retentionMs: ttlMs },
        'ttl',
      );
    }
    return viewOf(job, this.clock.now());
  }

  /**
   * The queue cap (too_many_requests). Counting the backlog up to the cap on every submit scanned the
   * whole queue per /run, a top frame in profiles under load; so after each count this engine admits
   * half the room that count left (at most 1000) before it counts again. On its own it never passes
   * the cap; jobs requeued meanwhile drop the allowance (`forgetRoom`), and other processes' submits
   * are seen at the next count.
   */
  private async admit(endpointId: string): Promise<void> {
    const room = this.#capRoom.get(endpointId) ?? 0;
    if (room > 0) {
      this.#capRoom.set(endpointId, room - 1);
      return;
    }
    const cap = this.settings.queueCapJobs;
    const visible = await this.waiting(endpointId, cap);
    if (visible >= cap) {
      throw new FerryError('too_many_requests', `Endpoint ${endpointId} has ${cap} jobs waiting already`, {
        hint: "Retry later, or raise the endpoint's worker count",
      });
    }
    this.#capRoom.set(endpointId, Math.min(1000, Math.floor((cap - visible - 1) / 2)));
  }

  /**
   * Jobs waiting, counted up to `cap`: the queue's depth, or, when that reaches the cap and the store
   * counts its queued jobs itself (`queued`), the smaller of the two, so messages left by ended jobs
   * never hold the endpoint at 429. Both count jobs of either priority: the cap holds for all.
   */
  private async waiting(endpointId: string, cap: number): Promise<number> {
    const depth = (await this.queue.depth(endpointId, { atMost: cap })).visible;
    if (depth < cap || !this.queued) return depth;
    return Math.min(depth, (await this.queued.queuedAtMost(endpointId, this.clock.now())).all);
  }

  /** A job went back to the queue outside `submit`: the next submit counts the backlog again. */
  private forgetRoom(endpointId: string): void {
    this.#capRoom.delete(endpointId);
  }

  /**
   * 404 unless `jobId` is an unexpired job of this endpoint that `workerId` took and still has, or had
   * when the job ended (job-log's check): a worker adds lines to the jobs it ran, never to another
   * job of its endpoint. Not only IN_PROGRESS: a handler that is cancelled or times out prints until
   * it is stopped, and the runtime ships those last lines after the job ended. A job taken from the
   * worker (requeued, or failed once its lease lapsed) has no workerId and reads as unknown, as do
   * other workers' jobs. Reads no input.
   */
  async mustHaveRun(endpointId: string, jobId: string, workerId: string): Promise<void> {
    const job = await this.jobs.get(jobId, this.clock.now(), noInput);
    this.ofEndpoint(endpointId, jobId, job?.workerId === workerId ? job : undefined);
  }

  /**
   * 404 unless `jobId` is an unexpired job of this endpoint that the call token of `submitter`'s
   * workers submitted (Job.submittedBy): another caller's job reads as unknown, so a call token
   * learns nothing of it, not even that it exists. Reads no input. A job's submitter never changes,
   * so checking before the route's own read leaves no race.
   */
  async mustBeSubmittedBy(endpointId: string, jobId: string, submitter: string): Promise<void> {
    const job = await this.jobs.get(jobId, this.clock.now(), noInput);
    this.ofEndpoint(endpointId, jobId, job?.submittedBy === submitter ? job : undefined);
  }

  /**
   * Long poll: answers as soon as the job ends, or with its current state when `waitMs` runs out.
   * `inputAsText` as in status.
   */
  async statusSync(
    endpointId: string,
    jobId: string,
    waitMs: number,
    signal?: AbortSignal,
    inputAsText = false,
  ): Promise<JobView> {
    const job = await this.waitForEnd(endpointId, jobId, waitMs, signal);
    // The view of an unfinished job shows its input (viewOf): read it only then.
    return viewOf(
      isFinal(job.status) ? job : await this.mustGet(endpointId, jobId, viewRead(inputAsText)),
      this.clock.now(),
    );
  }

  /**
   * Hands out the chunks not handed out before (each once). Holds the request until there is a chunk
   * or the job ends, so clients that poll with no sleep (runpod-sdk) don't spin. `stream` is always
   * present: clients break on a missing key.
   */
  async stream(
    endpointId: string,
    jobId: string,
    waitMs: number,
    signal?: AbortSignal,
  ): Promise<StreamAnswer> {
    const watch = this.changes.watch(jobKey(jobId));
    try {
      const deadline = this.clock.now() + waitMs;
      for (;;) {
        // The answer names the job and its status only: its input is not read (see waitForEnd).
        const job = await this.mustGet(endpointId, jobId, noInput);
        const chunks = await this.jobs.drainStream(jobId);
        const remaining = deadline - this.clock.now();
        if (chunks.length > 0 || isFinal(job.status) || remaining <= 0 || signal?.aborted) {
          // Clients stop polling at a final status: while a bounded drain left chunks, the job still
          // streams, whatever its own status.
          const more =
            isFinal(job.status) && chunks.length > 0 && (await this.jobs.streamPending?.(jobId)) === true;
          return { id: job.id, status: more ? 'IN_PROGRESS' : job.status, stream: chunks };
        }
        await watch.changed(remaining, signal);
      }
    } finally {
      watch.close();
    }
  }

  /**
   * A job that has already ended (before the cancel, or while it raced one) answers with the status
   * it ended in, not a 409: a client that gave up waiting cancels as the job completes, and
   * runpod-python, runpod-sdk and runpod's Go SDK all raise on a 409 to a cancel (docs/api.md#cancel).
   */
  async cancel(endpointId: string, jobId: string): Promise<JobView> {
    const job = this.ofEndpoint(endpointId, jobId, await this.readForMove(jobId));
    const done = await this.move(job, 'cancel', () => this.finalPatch('CANCELLED'), { endedAnswers: true });
    return { id: done.id, status: done.status };
  }

  async retry(endpointId: string, jobId: string): Promise<JobView> {
    // The store keeps the input the job was created with; the answer does not show it.
    const job = await this.mustGet(endpointId, jobId, noInput);
    const now = this.clock.now();
    const queued = await this.move(job, 'retry', (current) => ({
      status: 'IN_QUEUE',
      output: undefined,
      error: undefined,
      startedAt: undefined,
      finishedAt: undefined,
      workerId: undefined,
      leaseUntil: undefined,
      createdAt: now,
      expiresAt: now + current.policy.ttlMs,
      attempt: 0,
      retries: current.retries + 1,
    }));
    await this.requeued(queued);
    return { id: queued.id, status: queued.status };
  }

  /**
   * Removes every queued job of the endpoint (as CANCELLED); running jobs keep running. With
   * `budgetMs` (on AWS the API's longest wait, inside API Gateway's integration timeout) it starts
   * no batch after that long, and answers `in_progress` when jobs may remain: a purge of a deep
   * backlog answered 504 after 29 s, with no count of what it had removed. The next purge goes on.
   */
  async purge(
    endpointId: string,
    options: { budgetMs?: number } = {},
  ): Promise<{ removed: number; status: 'completed' | 'in_progress' }> {
    const until = options.budgetMs === undefined ? undefined : this.clock.now() + options.budgetMs;
    const { ended, more } = await this.endQueued(
      endpointId,
      () => ({ ...this.finalPatch('CANCELLED'), error: 'Removed from the queue by purge-queue' }),
      until,
    );
    return { removed: ended, status: more ? 'in_progress' : 'completed' };
  }

  async health(endpointId: string): Promise<Health> {
    const now = this.clock.now();
    const [jobs, workers] = await Promise.all([
      this.jobs.counts(endpointId, now),
      this.ledger.counts(endpointId),
    ]);
    const health: Health = { jobs, workers: { idle: workers.idle, running: workers.running } };
    if (workers.problem) health.problem = workers.problem;
    return health;
  }

  /**
   * Health without its job counts, for an endpoint that has no jobs (a load-balanced one): its
   * workers, idle and running (serving a request), and why they cannot start (backoff, failing), if
   * they cannot.
   */
  workerCounts(endpointId: string): Promise<WorkerCounts> {
    return this.ledger.counts(endpointId);
  }

  // ── worker side (docs/architecture.md#worker-protocol) ───────────────────────────────────────────────────

  /**
   * Long poll for up to `max` jobs; [] when `waitMs` runs out. `inputAsText`: inputs may come as the
   * store's JSON text (JsonText, TakeQueuedOptions.inputAsText), for a caller that only writes them out.
   * `maxConcurrency`: the endpoint's max_concurrency, which caps what the worker holds at once, the
   * jobs it holds already included (`roomFor`); absent, no cap.
   */
  async take(
    endpointId: string,
    workerId: string,
    max: number,
    waitMs: number,
    signal?: AbortSignal,
    inputAsText = false,
    maxConcurrency?: number,
  ): Promise<WorkerJob[]> {
    const deadline = this.clock.now() + waitMs;
    // A draining or retiring worker gets nothing new (the ledger holds the answer a moment).
    if (!(await this.ledger.mayTake(endpointId, workerId))) return [];
    if (maxConcurrency === undefined)
      return this.takeUpTo(endpointId, workerId, max, deadline, signal, inputAsText);
    const room = await this.roomFor(
      endpointId,
      workerId,
      Math.min(max, maxConcurrency),
      maxConcurrency,
      deadline,
      signal,
    );
    if (room === 0) return [];
    try {
      return await this.takeUpTo(endpointId, workerId, room, deadline, signal, inputAsText);
    } finally {
      // What it claimed is in the ledger now: another take of this worker may count its room.
      this.#taking.delete(workerId);
      this.changes.notify(workerRoomKey(workerId));
    }
  }

  /**
   * How many of `max` jobs the worker may take now under its endpoint's max_concurrency: those it
   * holds count (the ledger's; one whose result is on its way counts until its job-done lands). At
   * the cap it waits until the worker lets a job go (job-done, or a ping that no longer lists it): a
   * worker that asks again at once on an empty answer (RunPod's SDK asks for as many as its own
   * concurrency_modifier says) must not spin, and one whose result is on its way gets its next job as
   * soon as that result lands, not a long poll later. 0 when `deadline` passes (or the caller leaves)
   * first, or once the worker may take no more (draining, retiring). Above 0 the worker is marked as
   * taking (#taking) until the caller's claim is in the ledger: a second take of the same worker
   * meanwhile waits, so two takes never both count the same free room.
   */
  private async roomFor(
    endpointId: string,
    workerId: string,
    max: number,
    maxConcurrency: number,
    deadline: number,
    signal: AbortSignal | undefined,
  ): Promise<number> {
    let watch: Watch | undefined;
    try {
      for (;;) {
        if (!this.#taking.has(workerId)) {
          this.#taking.add(workerId);
          let free = 0;
          try {
            free = maxConcurrency - (await this.ledger.held(workerId)).length;
          } finally {
            if (free <= 0) this.#taking.delete(workerId);
          }
          if (free > 0) return Math.min(max, free);
        }
        const remaining = deadline - this.clock.now();
        if (remaining <= 0 || signal?.aborted) return 0;
        // Watch, then look again, then wait: a job let go in between is not missed.
        if (!watch) {
          watch = this.changes.watch(workerRoomKey(workerId));
          continue;
        }
        await watch.changed(remaining, signal);
        // Told to drain or retire while it waited (a reload, a scale-in): it takes nothing more.
        if (!(await this.ledger.mayTake(endpointId, workerId))) return 0;
      }
    } finally {
      watch?.close();
    }
  }

  /** `take` past its checks: long polls until up to `max` jobs are claimed for the worker, or `deadline`. */
  private async takeUpTo(
    endpointId: string,
    workerId: string,
    max: number,
    deadline: number,
    signal: AbortSignal | undefined,
    inputAsText: boolean,
  ): Promise<WorkerJob[]> {
    for (;;) {
      const remaining = Math.max(0, deadline - this.clock.now());
      const taken = await this.receiveAndClaim(endpointId, workerId, max, remaining, signal, inputAsText);
      // The queue waited for us: nothing means the wait ran out, the caller left, or the queue closed.
      if (taken === undefined) return [];
      if (taken.length > 0 && signal?.aborted) {
        // The worker hung up while we claimed: nobody will run these, so queue them again now
        // rather than after a lease lapses.
        for (const job of taken) await this.release(job);
        return [];
      }
      if (taken.length > 0) {
        const deadlinesMs = new Map<string, number>();
        for (const job of taken) {
          const deadlineMs = runDeadlineOf(job);
          if (deadlineMs !== undefined) deadlinesMs.set(job.id, deadlineMs);
        }
        await this.ledger.taken(
          endpointId,
          workerId,
          taken.map((j) => j.id),
          deadlinesMs,
        );
        return taken.map(workerJobOf);
      }
      // Only stale messages this time (cancelled, purged or taken meanwhile): wait again.
      if (remaining <= 0 || signal?.aborted) return [];
    }
  }

  /**
   * One long poll of the queue and the claims of what it delivered; undefined when nothing came
   * (the wait ran out, the caller left, the queue closed), [] when only stale messages came.
   */
  private async receiveAndClaim(
    endpointId: string,
    workerId: string,
    max: number,
    waitMs: number,
    signal: AbortSignal | undefined,
    inputAsText: boolean,
  ): Promise<Job[] | undefined> {
    if (this.takeQueued) {
      const moved = await this.takeQueued(endpointId, {
        max,
        waitMs,
        signal,
        inputAsText,
        claim: (job) => (canMove('take', job.status) ? this.claimPatch(job, workerId) : undefined),
        // A worker drained while its take waits (a new deployment rolled it) is handed nothing more.
        ...(this.ledger.takesNew ? { open: () => this.ledger.takesNew!(workerId) } : {}),
      });
      for (const { before, after } of moved) this.afterWrite(before, after);
      // The store keeps polling past stale messages itself, so nothing claimed means nothing came.
      return moved.length > 0 ? moved.map((m) => m.after) : undefined;
    }
    const messages = await this.queue.receive(endpointId, {
      max,
      visibilityMs: this.settings.leaseMs,
      waitMs,
      signal,
    });
    if (messages.length === 0) return undefined;
    const taken: Job[] = [];
    for (const message of messages) {
      const job = await this.claim(endpointId, message.jobId, workerId);
      // Acknowledge either way: a claimed job is now guarded by its lease, a stale message
      // (cancelled, purged, expired, already taken) has nothing left to deliver.
      await this.queue.ack(endpointId, message.receipt);
      if (job) taken.push(job);
    }
    return taken;
  }

  /** job-done: a progress update, a result or an error from the worker holding the job. */
  async done(
    endpointId: string,
    workerId: string,
    jobId: string,
    body: JobDoneBody,
  ): Promise<{ status: Job['status'] }> {
    const job = this.ofEndpoint(endpointId, jobId, await this.readForMove(jobId));
    if (body.status === 'IN_PROGRESS') {
      // Never let a late progress update overwrite a final state (runpod-python#250).
      const updated = await this.move(job, 'progress', () => ({ output: body.output }), { workerId });
      this.changes.notify(jobKey(jobId));
      return { status: updated.status };
    }
    const failed = body.error !== undefined && body.error !== null && body.error !== '';
    const patch = (): JobPatch => ({
      ...this.finalPatch(failed ? 'FAILED' : 'COMPLETED'),
      output: body.output,
      error: failed ? errorText(body.error) : undefined,
    });
    // Let go of the job in the registry first: a job-stop poll that wakes meanwhile must not find the
    // job it just finished still listed and tell the worker to stop it.
    await this.ledger.released(endpointId, workerId, jobId, { refresh: body.stopPod === true });
    // A take of this worker waiting at its max_concurrency may go on (roomFor).
    this.changes.notify(workerRoomKey(workerId));
    const ended = await this.move(job, failed ? 'fail' : 'complete', patch, { workerId });
    return { status: ended.status };
  }

  /** job-stream: appends one chunk (split when over 1 MB) for the worker holding the job. */
  async streamChunk(endpointId: string, workerId: string, jobId: string, chunk: { output: unknown }) {
    // Who holds it is all a chunk needs: the input is not read (a chunk per token, on AWS maybe an S3 GET each).
    const job = await this.mustGet(endpointId, jobId, noInput);
    if (!(job.status === 'IN_PROGRESS' && job.workerId === workerId)) {
      throw conflict(`Job ${jobId} is ${job.status} and not held by worker ${workerId}`);
    }
    await this.jobs.appendStream(jobId, splitChunk(chunk));
    this.changes.notify(jobKey(jobId));
  }

  /**
   * ping: renews the leases of the listed jobs that the ledger says the worker holds; it ignores the
   * other ids, as the store's check would (RunPod's SDK lists the jobs it believes it runs). And only
   * a lease not taken or renewed in the last twelfth of its length: a worker pings every few seconds
   * (RunPod's SDK every 10 s), and one pinging in a loop still renews each job once per 5 s of a
   * 60 s lease, which then never has less than 55 s left. So pings cost the store at most one write
   * per held job per 5 s, whatever and however often they list: on AWS each is an UpdateItem on the
   * jobs table every endpoint shares, and an id outside the endpoint's form one its agent's role may
   * not write (docs/security-aws.md, "What is left").
   */
  async ping(endpointId: string, workerId: string, jobIds: string[]): Promise<void> {
    const now = this.clock.now();
    const leaseUntil = now + this.settings.leaseMs;
    const due = await this.ledger.leasesDue(workerId, new Set(jobIds), now, this.settings.leaseMs / 12);
    // No read first: the store checks that the worker still holds the job (docs/aws.md).
    for (const jobId of due)
      await this.jobs.renewLease({ jobId, endpointId, workerId, leaseUntil, nowMs: now });
    await this.ledger.pinged(endpointId, workerId, jobIds);
    // The ledger lets go of held jobs the ping no longer lists: room for a waiting take (roomFor).
    this.changes.notify(workerRoomKey(workerId));
  }

  /** job-stop long poll: the jobs this worker holds that it must stop (cancelled, timed out, expired). */
  async jobsToStop(
    endpointId: string,
    workerId: string,
    waitMs: number,
    signal?: AbortSignal,
  ): Promise<string[]> {
    const watch = this.changes.watch(workerKey(workerId));
    try {
      const deadline = this.clock.now() + waitMs;
      for (;;) {
        const now = this.clock.now();
        const held = await this.ledger.held(workerId);
        const stop: string[] = [];
        for (const jobId of held) {
          const job = await this.jobs.get(jobId, now, noInput);
          if (mustStop(job, workerId, endpointId)) stop.push(jobId);
        }
        const remaining = deadline - now;
        if (stop.length > 0 || remaining <= 0 || signal?.aborted) return stop;
        await watch.changed(remaining, signal);
      }
    } finally {
      watch.close();
    }
  }

  /**
   * Housekeeping, run on a timer by the platform (and by a scheduled Lambda on AWS): lapsed leases go
   * back to the queue (or fail after maxAttempts), overrunning jobs time out, jobs past policy.ttl stop.
   *
   * The jobs are listed without their inputs, and one that a move ends is read whole just before it
   * only when it has a webhook (`asListed`): listing 500 jobs with their inputs (on AWS an S3 GET each
   * for a big one) ran the sweeper Lambda out of memory on a backlog of 10 MB inputs, every run, and
   * then no lease lapsed and no job expired anywhere.
   *
   * With a `deadline` (the AWS sweeper's run) no job's move starts once it has passed: the jobs not
   * moved are still overdue or expired, and the next sweep lists them again.
   */
  async sweep(options: { deadline?: Deadline } = {}): Promise<SweepTally> {
    const now = this.clock.now();
    const tally: SweepTally = { requeued: 0, failed: 0, timedOut: 0, expired: 0, left: 0 };
    const passed = () => options.deadline?.passed() === true;
    if (passed()) return tally;
    for (const listed of await this.jobs.listOverdue(now, 500, noInput)) {
      if (passed()) return tally;
      tally.left += await this.sweepOne(listed, async () => {
        if (overran(listed, now)) {
          const job = await this.asListed(listed);
          const moved = job && (await this.tryMove(job, 'timeOut', () => this.timedOutPatch(job)));
          if (moved) tally.timedOut++;
        } else {
          const outcome = await this.lapse(listed);
          if (outcome) tally[outcome]++;
        }
      });
    }
    if (passed()) return tally;
    for (const listed of await this.jobs.listExpiredUnfinished(now, 500, noInput)) {
      if (passed()) return tally;
      tally.left += await this.sweepOne(listed, async () => {
        const job = await this.asListed(listed);
        if (!job) return;
        // Past policy.ttl the job reads as 404 already, and stays so: this stops its worker, frees
        // the queue slot and sends its webhook. It keeps its expiresAt (withRetention gives a final
        // move without one a retention from now), so it never reads again as CANCELLED or TIMED_OUT
        // after a 404, and deleteExpired removes it.
        const move: Move = job.status === 'IN_QUEUE' ? 'purge' : 'timeOut';
        const moved = await this.tryMove(job, move, () => ({
          status: move === 'purge' ? 'CANCELLED' : 'TIMED_OUT',
          error: `The job's time-to-live of ${job.policy.ttlMs} ms ran out`,
          finishedAt: now,
          leaseUntil: undefined,
          expiresAt: job.expiresAt,
        }));
        if (moved) tally.expired++;
      });
    }
    return tally;
  }

  /**
   * One job's step of a sweep. A job whose step throws (a payload removed outside Ferry, a write
   * refused) is reported and left for the next sweep: one such job must not stop the sweep of all the
   * others, nor, on AWS, the rest of the sweeper's run, which hands the webhooks of the jobs it
   * ended to their queue. Answers 1 for a job left, 0 otherwise (the sweep's `left`).
   */
  private async sweepOne(job: Job, step: () => Promise<void>): Promise<0 | 1> {
    try {
      await step();
      return 0;
    } catch (error) {
      this.warn?.(`job ${job.id} left for the next sweep: ${messageOf(error)}`);
      return 1;
    }
  }

  /**
   * AWS (the sweeper): re-sends the queue message of jobs that have waited IN_QUEUE for `staleMs` or
   * more. A job is written before its message is sent, so a failed send (or a lost message) would
   * leave it waiting forever; a second message is harmless, because a take is a conditional write and
   * a message whose job is no longer IN_QUEUE is dropped. Each job is re-sent once per `staleMs` of
   * waiting (when its age crosses a multiple of `staleMs` within the last `periodMs`, the sweep
   * period), so a long but healthy backlog does not grow a message per job per sweep.
   * Once `deadline` has passed no listing and no send starts: a job a run had no time for gets its
   * message at its next window, `staleMs` later.
   */
  async resendWaiting(
    endpointIds: readonly string[],
    options: { staleMs: number; periodMs: number; limit: number; deadline?: Deadline },
  ): Promise<number> {
    const now = this.clock.now();
    const passed = () => options.deadline?.passed() === true;
    let sent = 0;
    for (const endpointId of endpointIds) {
      if (passed()) return sent;
      for (const job of await this.jobs.listByStatus(endpointId, 'IN_QUEUE', now, options.limit, noInput)) {
        if (passed()) return sent;
        const age = now - job.createdAt;
        if (age < options.staleMs) continue;
        if (Math.floor(age / options.staleMs) === Math.floor((age - options.periodMs) / options.staleMs))
          continue;
        await this.queue.send(endpointId, job.id, { lowPriority: job.policy.lowPriority });
        sent++;
      }
    }
    return sent;
  }

  /** AWS (the sweeper): a job whose message was dead-lettered ends FAILED with `reason`. */
  async failDeadLettered(jobId: string, reason: string): Promise<boolean> {
    const now = this.clock.now();
    const job = await this.jobs.get(jobId, now);
    if (!job) return false;
    const moved = await this.tryMove(job, 'deadLetter', () => ({
      status: 'FAILED',
      error: reason,
      finishedAt: now,
      leaseUntil: undefined,
    }));
    return moved !== undefined;
  }

  /**
   * Ends a running job as TIMED_OUT if its execution timeout has passed. The AWS agent calls it for
   * each job its worker holds, so a timeout does not wait for the minute-level sweeper. Answers
   * `timedOut: true` when this call moved the job, else the deadline while the job still runs
   * (absent once it is no longer running).
   */
  async timeOutIfOverdue(
    endpointId: string,
    jobId: string,
  ): Promise<{ timedOut: boolean; deadlineMs?: number }> {
    let job = await this.readForMove(jobId);
    while (
      job &&
      job.endpointId === endpointId &&
      job.status === 'IN_PROGRESS' &&
      job.startedAt !== undefined
    ) {
      const current = job;
      const deadlineMs = runDeadlineOf(job);
      if (deadlineMs === undefined || deadlineMs > this.clock.now()) return { timedOut: false, deadlineMs };
      if (await this.tryMove(current, 'timeOut', () => this.timedOutPatch(current)))
        return { timedOut: true };
      // Lost a race (a ping renewed the lease, or the job ended): read again and decide again.
      job = await this.readForMove(jobId);
    }
    return { timedOut: false };
  }

  /**
   * A worker process is known to be gone (the local pool saw it exit): its jobs go back to the queue
   * now instead of when their leases lapse. Each such requeue counts an attempt, unless `how.stopped`.
   */
  async workerGone(
    endpointId: string,
    workerId: string,
    reason?: string,
    how: WorkerGone = {},
  ): Promise<number> {
    let moved = 0;
    const failures: unknown[] = [];
    // Without inputs: lapse reads a job whole only when failing it sends a webhook.
    const running = await this.jobs.listByStatus(
      endpointId,
      'IN_PROGRESS',
      this.clock.now(),
      10_000,
      noInput,
    );
    for (const listed of running) {
      // A ping racing this (it renews the lease, bumping the version) must not keep the job held.
      let job: Job | undefined = listed;
      try {
        while (job?.status === 'IN_PROGRESS' && job.workerId === workerId) {
          if (await this.lapse(job, reason, how.stopped === true)) {
            moved++;
            break;
          }
          job = await this.jobs.get(listed.id, this.clock.now(), noInput);
        }
      } catch (error) {
        // One job's failure must not leave the worker's other jobs held until their leases lapse.
        failures.push(error);
      }
    }
    await this.ledger.gone(endpointId, workerId);
    // The caller logs it (the supervisor's `exited`); the first stands for the rest.
    if (failures.length > 0) throw failures[0];
    return moved;
  }

  /**
   * Fails every queued job of an endpoint that cannot start a worker (the supervisor decides). With
   * `budgetMs` (the AWS sweeper's share of its run) it starts no batch after that long; the next run
   * fails the rest.
   */
  async rejectQueued(
    endpointId: string,
    error: string,
    options: { budgetMs?: number } = {},
  ): Promise<number> {
    const until = options.budgetMs === undefined ? undefined : this.clock.now() + options.budgetMs;
    return (await this.endQueued(endpointId, () => ({ ...this.finalPatch('FAILED'), error }), until)).ended;
  }

  /**
   * Ends every queued job of the endpoint with `patch`, 500 at a time, each batch in one
   * JobStore.updateMany (on DynamoDB a few transactions, not 500 writes: a deep backlog must be
   * purged within API Gateway's 29 s). A job taken or cancelled meanwhile is skipped; jobs queued
   * while it runs may be ended too. Answers how many it ended, and whether it stopped at `until`
   * (clock time; no batch starts after it) with a full batch just ended, so that more may remain.
   */
  private async endQueued(
    endpointId: string,
    patch: () => JobPatch,
    until?: number,
  ): Promise<{ ended: number; more: boolean }> {
    const batchSize = 500;
    let ended = 0;
    // Each listing starts at the newest job the last batch ended (ListByStatusOptions.createdFrom):
    // DynamoDB's index may still list that batch for a moment, and a listing from the start was then
    // nothing but jobs already ended, which ended the purge after its first 500. A job sent back to
    // the queue meanwhile with an older submit time is left for the next purge.
    let createdFrom: number | undefined;
    for (;;) {
      const batch = await this.listForMoves(endpointId, 'IN_QUEUE', batchSize, createdFrom);
      const results = await this.jobs.updateMany(
        batch.map((job) => ({ current: job, patch: this.withRetention(job, patch()) })),
      );
      let endedNow = 0;
      results.forEach((result, i) => {
        if (!result.ok) return;
        this.afterWrite(batch[i] as Job, result.job);
        endedNow++;
      });
      ended += endedNow;
      // Not `batch.length < batchSize`: a webhook job that expired as it was read again shortens a batch.
      if (endedNow === 0) return { ended, more: false };
      // A short batch was the end of the listing: one more (empty) listing says so, even past `until`.
      if (until !== undefined && batch.length === batchSize && this.clock.now() >= until)
        return { ended, more: true };
      createdFrom = Math.max(...batch.map((job) => job.createdAt));
      // A synchronous store (SQLite) never yields on its own: let other requests in between batches,
      // so ending a deep queue does not stall the whole API.
      await new Promise((resolve) => setImmediate(resolve));
    }
  }

  // ── helpers ───────────────────────────────────────────────────────────────────────────────────

  /** The job, read with `options`, when it is this endpoint's; else 404. */
  private async mustGet(endpointId: string, jobId: string, options: JobReadOptions): Promise<Job> {
    return this.ofEndpoint(endpointId, jobId, await this.jobs.get(jobId, this.clock.now(), options));
  }

  /** `job` when it is this endpoint's, else 404 (absent and expired jobs read as undefined). */
  private ofEndpoint(endpointId: string, jobId: string, job: Job | undefined): Job {
    if (!job || job.endpointId !== endpointId)
      throw notFound(`Job ${jobId} not found (or its results expired)`);
    return job;
  }

  /**
   * A job as a move that may end it needs it: without its input (job-done, a timeout, a cancel; on
   * AWS a big input is an S3 object, and a 5 MB image would be read back for every result), unless a
   * webhook may carry the input when the move ends the job.
   */
  private async readForMove(jobId: string): Promise<Job | undefined> {
    const now = this.clock.now();
    const job = await this.jobs.get(jobId, now, noInput);
    return job?.webhook ? this.jobs.get(jobId, now) : job;
  }

  /**
   * A job a list handed out without its input, as a move that ends it needs it (readForMove for a
   * listed job): read again whole when it has a webhook, which carries the input; undefined when it
   * is gone or moved on since it was listed. The move was decided on the listing, so a job that
   * changed meanwhile (taken, its lease renewed) is left out, as the listing's own compare-and-set
   * would have lost. Read as of a moment before it expired: `get` hides a job past its expiresAt,
   * and listExpiredUnfinished lists exactly those.
   */
  private async asListed(listed: Job): Promise<Job | undefined> {
    if (!listed.webhook) return listed;
    const job = await this.jobs.get(listed.id, listed.expiresAt - 1);
    return job?.version === listed.version ? job : undefined;
  }

  /**
   * The jobs of a batch move (endQueued) as `asListed` reads them: listed without their inputs (a
   * purge of 500 queued image jobs fetched 500 S3 objects it never used), those with a webhook read
   * again whole, `wholeReadsAtOnce` at a time: a batch of 500 webhook jobs with big inputs started
   * 500 S3 GETs at once.
   */
  private async listForMoves(
    endpointId: string,
    status: JobStatus,
    limit: number,
    createdFrom?: number,
  ): Promise<Job[]> {
    const now = this.clock.now();
    const listed = await this.jobs.listByStatus(endpointId, status, now, limit, { ...noInput, createdFrom });
    const jobs = await mapAtMost(listed, wholeReadsAtOnce, (job) => this.asListed(job));
    return jobs.filter((job): job is Job => job !== undefined);
  }

  private finalPatch(status: 'COMPLETED' | 'FAILED' | 'CANCELLED' | 'TIMED_OUT') {
    const now = this.clock.now();
    return { status, finishedAt: now, leaseUntil: undefined } satisfies JobPatch;
  }

  private timedOutPatch(job: Job): JobPatch {
    return {
      ...this.finalPatch('TIMED_OUT'),
      error: `Execution timeout of ${job.policy.executionTimeoutMs} ms exceeded`,
    };
  }

  /** Final moves also set the retention clock; computed here so every final move gets it. */
  private withRetention(job: Job, patch: JobPatch): JobPatch {
    if (patch.status && isFinal(patch.status) && patch.expiresAt === undefined) {
      return {
        ...patch,
        expiresAt: keptUntil(job, (patch.finishedAt ?? this.clock.now()) + job.retentionMs),
      };
    }
    return patch;
  }

  /**
   * Applies a legal move with compare-and-set, re-reading after a lost race. Throws 409 when the
   * job's status (or its holder, `workerId`, for worker moves) no longer allows the move; with
   * `endedAnswers`, a job that has ended is returned as it is instead.
   */
  private async move(
    job: Job,
    move: Move,
    patch: (current: Job) => JobPatch,
    { workerId, endedAnswers = false }: { workerId?: string; endedAnswers?: boolean } = {},
  ): Promise<Job> {
    let current: Job | undefined = job;
    for (;;) {
      if (!current) throw notFound(`Job ${job.id} not found (or its results expired)`);
      if (endedAnswers && isFinal(current.status)) return current;
      if (!canMove(move, current.status)) {
        throw conflict(`Job ${job.id} is ${current.status}; ${describeMove(move)}`);
      }
      if (workerId !== undefined && current.workerId !== workerId) {
        throw conflict(`Job ${job.id} is no longer held by worker ${workerId}`);
      }
      const result = await this.write(current, this.withRetention(current, patch(current)));
      if (result.ok) {
        this.afterWrite(current, result.job);
        return result.job;
      }
      current = this.unexpired(result.current);
    }
  }

  /** Like move, but a job that moved on meanwhile is simply skipped (sweeps and purge). */
  private async tryMove(job: Job, move: Move, patch: (current: Job) => JobPatch): Promise<Job | undefined> {
    if (!canMove(move, job.status)) return undefined;
    const result = await this.write(job, this.withRetention(job, patch(job)));
    if (!result.ok) return undefined;
    this.afterWrite(job, result.job);
    return result.job;
  }

  /**
   * JobStore.update, except that a move back to IN_QUEUE goes with its queue message (and the clear
   * of the old attempt's chunks) in the same transaction where the store can (requeueQueued); the
   * caller then calls `requeued`, which sends them itself only where it cannot.
   */
  private write(current: Job, patch: JobPatch): Promise<JobUpdate> {
    return patch.status === 'IN_QUEUE' && this.requeueQueued
      ? this.requeueQueued(current, patch)
      : this.jobs.update(current, patch);
  }

  /** A change that is not a status move (e.g. `?ttl=`), retried on lost races. */
  private async change(job: Job, patch: (current: Job) => JobPatch, what: string): Promise<Job> {
    let current: Job | undefined = job;
    while (current) {
      const result = await this.jobs.update(current, patch(current));
      if (result.ok) return result.job;
      current = this.unexpired(result.current);
    }
    throw notFound(`Job ${job.id} not found while setting its ${what}`);
  }

  /** A job a lost race handed back, as `get` would answer it now (expired jobs read as absent). */
  private unexpired(job: Job | undefined): Job | undefined {
    return job && job.expiresAt > this.clock.now() ? job : undefined;
  }

  private afterWrite(before: Job, after: Job): void {
    this.changes.notify(jobKey(after.id));
    if (isFinal(after.status)) this.changes.notify(jobEndKey(after.id), { ended: after });
    // Wake the holder's job-stop poll only when this change means it must let go: its own job-done
    // (COMPLETED or FAILED, still its own) woke it to re-read every job it holds, for nothing.
    if (
      before.workerId &&
      before.status === 'IN_PROGRESS' &&
      after.status !== 'IN_PROGRESS' &&
      mustStop(after, before.workerId, before.endpointId)
    ) {
      this.changes.notify(workerKey(before.workerId));
    }
    if (after.webhook && isFinal(after.status) && !isFinal(before.status)) {
      this.webhooks?.send(after.webhook, {
        ...viewOf(after, this.clock.now()),
        input: after.input,
        webhook: after.webhook,
      });
    }
  }

  /**
   * The holder of a running job is gone: queue it again, or fail it once it used its attempts. `job`
   * as a list hands it out, without its input: only failing it may send a webhook (`asListed`).
   * `stopped`: the platform stopped the holder (WorkerGone.stopped), which is not the job's failure:
   * it goes back to the queue with the attempt its take counted given back, however many it used.
   */
  private async lapse(
    job: Job,
    reason?: string,
    stopped = false,
  ): Promise<'requeued' | 'failed' | undefined> {
    if (!stopped && job.attempt >= this.settings.maxAttempts) {
      const whole = await this.asListed(job);
      if (!whole) return undefined;
      const moved = await this.tryMove(whole, 'fail', () => ({
        ...this.finalPatch('FAILED'),
        // No worker holds it any more; should the silent one come back, job-stop tells it to let go.
        workerId: undefined,
        error: `${reason ?? `Worker ${job.workerId} stopped responding`}; the job was tried ${job.attempt} times`,
      }));
      return moved ? 'failed' : undefined;
    }
    const moved = await this.tryMove(job, 'requeue', () => this.requeuePatch(job, !stopped));
    if (!moved) return undefined;
    await this.requeued(job);
    return 'requeued';
  }

  /**
   * A running job back to IN_QUEUE. `counted`: the attempt its take counted stays counted (its
   * holder stopped responding or crashed); otherwise it is given back, as nothing the job did ended
   * it (a take nobody received, a worker the platform stopped), so its next take is the same attempt.
   */
  private requeuePatch(job: Job, counted: boolean): JobPatch {
    return {
      status: 'IN_QUEUE',
      workerId: undefined,
      leaseUntil: undefined,
      startedAt: undefined,
      ...(counted ? {} : { attempt: Math.max(0, job.attempt - 1) }),
    };
  }

  /**
   * After a move back to IN_QUEUE: the old attempt's chunks go, then the job's message. With
   * requeueQueued both were written with the move, in its transaction (`write`). Otherwise clear
   * first: once the message is out a worker may take the job and stream, and a clear landing after
   * that would drop the new attempt's chunks (on DynamoDB it moves the read cursor past everything
   * appended so far). Send in `finally`: the job is IN_QUEUE already, and without its message it
   * would wait for the sweeper's resend on AWS (functions/sweeper.ts); a failed clear costs at most
   * old chunks reaching the client twice, and its error still reaches the caller after the send.
   */
  private async requeued(job: Job): Promise<void> {
    try {
      // The next attempt streams from the start: chunks of this one must not reach the client twice.
      if (!this.requeueQueued) await this.jobs.clearStream(job.id);
    } finally {
      if (!this.requeueQueued) {
        await this.queue.send(job.endpointId, job.id, { lowPriority: job.policy.lowPriority });
      }
      this.forgetRoom(job.endpointId);
      this.changes.notify(endpointKey(job.endpointId), {
        queuedLowPriority: job.policy.lowPriority === true,
      });
    }
  }

  private async release(job: Job): Promise<void> {
    const back = await this.tryMove(job, 'requeue', () => this.requeuePatch(job, false));
    if (back) {
      // With requeueQueued the message went with the move (`write`).
      if (!this.requeueQueued) {
        await this.queue.send(job.endpointId, job.id, { lowPriority: job.policy.lowPriority });
      }
      this.forgetRoom(job.endpointId);
    }
  }

  private async claim(endpointId: string, jobId: string, workerId: string): Promise<Job | undefined> {
    const job = await this.jobs.get(jobId, this.clock.now());
    if (!job || job.endpointId !== endpointId || job.status !== 'IN_QUEUE') return undefined;
    return this.tryMove(job, 'take', () => this.claimPatch(job, workerId));
  }

  /** What taking a queued job writes: running on `workerId`, leased, one more attempt. */
  private claimPatch(job: Job, workerId: string): JobPatch {
    const now = this.clock.now();
    return {
      status: 'IN_PROGRESS',
      startedAt: now,
      workerId,
      leaseUntil: now + this.settings.leaseMs,
      attempt: job.attempt + 1,
    };
  }

  /**
   * The job once it is final, or as it is when `waitMs` runs out, read without its input: a final
   * job's view has none, and on AWS a polling wait would fetch a big input from S3 at every poll.
   * 404 at the first read when the job is not this endpoint's (or is gone). A job that ended in this
   * process comes with its notify (ChangeDetail.ended) and is not read back: the final write that
   * woke the wait just wrote it. A wait woken otherwise (another process's write, a poll) reads.
   */
  private async waitForEnd(
    endpointId: string,
    jobId: string,
    waitMs: number,
    signal: AbortSignal | undefined,
    openedBeforeStored?: Watch,
  ): Promise<Job> {
    const watch = openedBeforeStored ?? this.changes.watch(jobEndKey(jobId));
    try {
      const deadline = this.clock.now() + waitMs;
      // The caller stored the job after opening the watch: it is unfinished unless the watch says otherwise.
      let heard = openedBeforeStored ? await watch.changed(waitMs, signal) : false;
      for (;;) {
        const ended = heard ? watch.detail?.ended : undefined;
        const job = ended
          ? this.ofEndpoint(endpointId, jobId, ended)
          : await this.mustGet(endpointId, jobId, noInput);
        const remaining = deadline - this.clock.now();
        if (isFinal(job.status) || remaining <= 0 || signal?.aborted) return job;
        heard = await watch.changed(remaining, signal);
      }
    } finally {
      if (!openedBeforeStored) watch.close();
    }
  }
}

/**
 * Whether a worker must stop a job it says it holds: the job is gone (expired), belongs elsewhere,
 * was taken from the worker (requeued, or failed after its lease lapsed — those moves clear
 * workerId), or was ended for it (cancelled, timed out). A job the worker finished itself is not one
 * to stop: a ping sent while its job-done was on the way still lists it, and answering "stop it"
 * would send the worker straight back into the stop poll, over and over, until the next ping.
 */
function mustStop(job: Job | undefined, workerId: string, endpointId: string): boolean {
  if (!job || job.endpointId !== endpointId || job.workerId !== workerId) return true;
  return job.status !== 'IN_PROGRESS' && job.status !== 'COMPLETED' && job.status !== 'FAILED';
}

/**
 * How many jobs of a batch move are read whole at once (listForMoves): each may carry an input of
 * megabytes (on AWS an S3 GET).
 */
const wholeReadsAtOnce = 8;

/** A running job whose execution timeout has passed at `nowMs`. */
const overran = (job: Job, nowMs: number): boolean =>
  job.status === 'IN_PROGRESS' &&
  job.startedAt !== undefined &&
  job.startedAt + job.policy.executionTimeoutMs <= nowMs;

function workerJobOf(job: Job): WorkerJob {
  const out: WorkerJob = { id: job.id, input: job.input };
  if (job.webhook) out.webhook = job.webhook;
  if (job.s3Config) out.s3Config = job.s3Config;
  return out;
}

function describeMove(move: Move): string {
  switch (move) {
    case 'retry':
      return 'only FAILED or TIMED_OUT jobs can be retried';
    default:
      return 'it is no longer running';
  }
}

/** `error` must reach clients as a string (runpod-python#299): an object as its JSON text, exactly. */
function errorText(error: unknown): string {
  return typeof error === 'string' ? error : stringifyJsonExact(error);
}

/**
 * A chunk over 1 MB (docs/api.md#limits) is split: a string output into string pieces, anything else into pieces
 * of its JSON text. Pieces are cut on code point boundaries so each stays valid UTF-8.
 */
export function splitChunk(chunk: { output: unknown }): unknown[] {
  const size = Buffer.byteLength(JSON.stringify(chunk));
  if (size <= limits.streamChunkBytes) return [chunk];
  const text = typeof chunk.output === 'string' ? chunk.output : stringifyJsonExact(chunk.output);
  // Leave room for JSON escaping and the {"output": …} envelope.
  const pieceBytes = Math.floor(limits.streamChunkBytes / 2);
  const pieces: unknown[] = [];
  let piece = '';
  let pieceSize = 0;
  for (const char of text) {
    const charBytes = Buffer.byteLength(char);
    if (pieceSize + charBytes > pieceBytes) {
      pieces.push({ output: piece });
      piece = '';
      pieceSize = 0;
    }
    piece += char;
    pieceSize += charBytes;
  }
  if (piece.length > 0) pieces.push({ output: piece });
  return pieces;
}

/**
 * 16 random bytes for a job id, from a pool refilled 256 ids at a time. uuid's own source asks
 * crypto.getRandomValues for each id, about 2 µs a call: a few per cent of the platform's CPU per job.
 */
const randomPool = Buffer.alloc(16 * 256);
let randomUsed = randomPool.length;
function randomBytes16(): Uint8Array {
  if (randomUsed === randomPool.length) {
    randomFillSync(randomPool);
    randomUsed = 0;
  }
  randomUsed += 16;
  return randomPool.subarray(randomUsed - 16, randomUsed);
}
