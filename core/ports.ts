/**
 * The ports: small role-named interfaces that the job engine, the API and the CLI use, and that each
 * provider implements (local: SQLite + files; aws: DynamoDB + SQS + S3). Adapters only translate I/O
 * and vendor errors. One contract suite per port (test/contract/) runs against every adapter.
 */
import type { Job, JobStatus } from './job.js';

/** Fields to write. A key that is present with the value `undefined` removes that field. */
export type JobPatch = Partial<Omit<Job, 'id' | 'endpointId' | 'version'>>;

/** What a compare-and-set answers: the job as written, or the job as it is now. */
export type JobUpdate = { ok: true; job: Job } | { ok: false; current: Job | undefined };

/** One compare-and-set of JobStore.updateMany. */
export interface JobChange {
  current: Job;
  patch: JobPatch;
}

export interface JobCounts {
  completed: number;
  failed: number;
  inProgress: number;
  inQueue: number;
  retried: number;
}

/** What a read of a job may leave out (JobStore.get). */
export interface JobReadOptions {
  /**
   * false: the job without its input (job-done never needs it). 'unfinished': the input only when the
   * job has not ended (a finished job's view shows none, docs/api.md). Default true.
   */
  input?: boolean | 'unfinished';
  /**
   * The input as the JSON text the store holds (a JsonText, core/json.ts), for a caller that writes
   * the job's view straight out (the /status routes); a store that keeps no such text parses as ever.
   */
  inputAsText?: boolean;
}

export interface JobStore {
  /** Stores a new job at version 1. Throws a `conflict` FerryError when the id exists. */
  create(job: Job): Promise<void>;
  /**
   * The job, or undefined when there is none or it has expired at `nowMs` (expired jobs read as absent).
   * With `{ input: false }` the input is left out (not read: on AWS a big one is an S3 object); an
   * update of that job keeps the stored input.
   */
  get(jobId: string, nowMs: number, options?: JobReadOptions): Promise<Job | undefined>;
  /**
   * Compare-and-set: applies `patch` to `current` (a job as this store handed it out) and bumps the
   * version, only while the stored job is still at `current.version`. The store does not read the job
   * again first. On a lost race it answers the job as stored now (`undefined` when it is gone; expiry
   * is the caller's to check), so the caller decides again without another read.
   */
  update(current: Job, patch: JobPatch): Promise<JobUpdate>;
  /**
   * Many compare-and-sets, each as `update` does it, answered in the same order: a change whose job
   * moved on meanwhile answers the job as stored now, and the others still apply. Not atomic as a
   * whole. For moves of a whole backlog (purge): DynamoDB writes up to 100 jobs per transaction
   * where `update` takes one each.
   */
  updateMany(changes: readonly JobChange[]): Promise<JobUpdate[]>;
  /**
   * Renews a lease without reading the job: sets leaseUntil and bumps the version, only while the job
   * is IN_PROGRESS on `endpointId`, held by `workerId` and unexpired at `nowMs`. Answers whether it
   * renewed. The version bump makes a transition decided on the job as it was before (a requeue of
   * a lapsed lease) lose its compare-and-set.
   */
  renewLease(lease: LeaseRenewal): Promise<boolean>;
  /** Unexpired jobs of one endpoint in one status, oldest first; `options` as ListByStatusOptions says. */
  listByStatus(
    endpointId: string,
    status: JobStatus,
    nowMs: number,
    limit: number,
    options?: ListByStatusOptions,
  ): Promise<Job[]>;
  /**
   * IN_PROGRESS jobs (any endpoint) whose lease lapsed or whose execution timeout passed at `nowMs`;
   * `options.input` as in `get`.
   */
  listOverdue(nowMs: number, limit: number, options?: Pick<JobReadOptions, 'input'>): Promise<Job[]>;
  /**
   * Jobs not in a final status whose expiresAt has passed (get hides them); the engine stops them.
   * `options.input` as in `get`.
   */
  listExpiredUnfinished(
    nowMs: number,
    limit: number,
    options?: Pick<JobReadOptions, 'input'>,
  ): Promise<Job[]>;
  /** Appends stream chunk outputs in order. */
  appendStream(jobId: string, outputs: unknown[]): Promise<void>;
  /**
   * The chunks not handed out before, oldest first; each chunk is handed out once. A store whose
   * answers have a size bound (AWS: one Lambda response) hands out a bounded part of a long backlog
   * and says with `streamPending` that more is there.
   */
  drainStream(jobId: string): Promise<unknown[]>;
  /**
   * The chunks after `afterSeq` (0: from the first), oldest first, handed out by a drain or not, and
   * handing none out: what a reader beside the job's client (the console) may show without taking a
   * chunk from it. A bounded part of a long stream; `next` is the `afterSeq` of the next read. A
   * handed-out chunk stays readable until the stream is cleared or its job goes.
   */
  readStream(jobId: string, afterSeq: number): Promise<StreamRead>;
  /** Whether the job has chunks since its stream was last cleared (readStream would show some): one small read. */
  hasStream(jobId: string): Promise<boolean>;
  /** Whether chunks are left that a drain has not handed out (only where a drain is bounded). */
  streamPending?(jobId: string): Promise<boolean>;
  /**
   * Clears a job's stream (retry starts a clean run): no chunk appended so far is handed out or read
   * again. A store may delete them later: DynamoDB deletes the first few at once, the rest with the
   * expired job (DynamoJobStore's clearDropChunks says why).
   */
  clearStream(jobId: string): Promise<void>;
  counts(endpointId: string, nowMs: number): Promise<JobCounts>;
  /**
   * Unexpired jobs of one endpoint, newest first, created in [fromMs, toMs), in the given statuses
   * (all when empty), a page at a time: `cursor` is the previous page's `next` (opaque).
   */
  listRecent(endpointId: string, query: RecentJobsQuery): Promise<{ jobs: Job[]; next?: string | undefined }>;
  /**
   * Deletes up to `limit` jobs that expired before `nowMs` (oldest first, so a backlog drains over
   * several runs); returns how many went. (DynamoDB's TTL does this itself.) A store may leave a job
   * with a long stream for later calls (DynamoJobStore deletes a bounded number of chunks a call),
   * and starts no job and no page of a stream once `deadline` has passed.
   */
  deleteExpired(nowMs: number, limit: number, deadline?: Deadline): Promise<number>;
  close(): Promise<void>;
}

/** A part of a job's stream as JobStore.readStream reads it. */
export interface StreamRead {
  chunks: unknown[];
  next: number;
}

export interface LeaseRenewal {
  jobId: string;
  endpointId: string;
  workerId: string;
  leaseUntil: number;
  nowMs: number;
}

export interface RecentJobsQuery {
  statuses: readonly JobStatus[];
  fromMs: number;
  toMs: number;
  nowMs: number;
  limit: number;
  cursor?: string | undefined;
}

export interface QueueMessage {
  jobId: string;
  /** Opaque handle that acknowledges this delivery. */
  receipt: string;
}

export interface ReceiveOptions {
  max: number;
  /** How long a received message stays hidden from other receivers before it is delivered again. */
  visibilityMs: number;
  /** Long poll: how long to wait for a message when none is there. 0 answers at once. */
  waitMs: number;
  signal?: AbortSignal | undefined;
}

export interface ListByStatusOptions extends Pick<JobReadOptions, 'input'> {
  /**
   * Only jobs created at or after this time (ms). A caller that walks a backlog in batches (purge)
   * starts each listing where the last one ended: DynamoDB's index may still list the jobs the last
   * batch just moved (a global secondary index is eventually consistent), and a listing from the
   * start could then be nothing but those.
   */
  createdFrom?: number;
}

/** Upper bounds of an endpoint's IN_QUEUE jobs: all of them, and the urgent ones (not policy.lowPriority). */
export interface QueuedCounts {
  all: number;
  urgent: number;
}

/**
 * How many jobs of an endpoint are IN_QUEUE at most, from the job store's records: read beside the
 * queue's depth, whose messages outlive cancelled and purged jobs. The AWS scaler caps the urgent
 * queue's depth with `urgent`, the engine's queue cap the whole depth with `all`.
 */
export interface QueuedJobCount {
  queuedAtMost(endpointId: string, nowMs: number): Promise<QueuedCounts>;
}

/** Dispatch only: the JobStore is the source of truth, a message is a hint that a job may be ready. */
export interface JobQueue {
  send(endpointId: string, jobId: string, options: { lowPriority: boolean }): Promise<void>;
  receive(endpointId: string, options: ReceiveOptions): Promise<QueueMessage[]>;
  /** Deletes a delivered message. Acknowledging twice is fine. */
  ack(endpointId: string, receipt: string): Promise<void>;
  /**
   * Messages waiting, as far as the queue knows; `urgent` leaves out low-priority ones (they don't
   * scale). With `atMost`, counting may stop there (a pool only needs enough to size itself).
   */
  depth(endpointId: string, options?: { atMost?: number }): Promise<{ visible: number; urgent: number }>;
  close(): Promise<void>;
}

/**
 * What `EngineDeps.takeQueued` gets: a long poll for up to `max` jobs, each claimed by `claim` (the
 * engine's move, or undefined when the job may not be taken) in the same write that consumes its
 * message.
 */
export interface TakeQueuedOptions {
  max: number;
  waitMs: number;
  signal?: AbortSignal | undefined;
  claim: (job: Job) => JobPatch | undefined;
  /**
   * Whether the taker may still be given jobs, asked before each is claimed for it: once false (its
   * worker was drained while the take waited) the take gets no more and waits out its time empty.
   * Called on the job path, so it must answer from memory.
   */
  open?: () => boolean;
  /**
   * The taken jobs' inputs as the JSON text the store holds (a JsonText, core/json.ts), for a caller
   * that writes them straight out (the take answer); a store that keeps no such text parses as ever.
   */
  inputAsText?: boolean;
}

/** A job a take moved: as it was read and as it was written. */
export interface TakenJob {
  before: Job;
  after: Job;
}

export interface BlobStore {
  put(key: string, body: Uint8Array): Promise<void>;
  /** Uploads a file without loading it whole; `onProgress` gets bytes sent so far. */
  putFile(key: string, filePath: string, onProgress?: (sentBytes: number) => void): Promise<void>;
  get(key: string): Promise<Uint8Array | undefined>;
  /**
   * Writes `toKey` with the bytes of `fromKey` where they are stored (S3 CopyObject: none pass through
   * the caller); false when `fromKey` is missing. The copy is a new object, its age counted anew.
   */
  copy(fromKey: string, toKey: string): Promise<boolean>;
  exists(key: string): Promise<boolean>;
  delete(key: string): Promise<void>;
  close(): Promise<void>;
}

export type EndpointKind = 'queue' | 'lb';

export interface AppRecord {
  name: string;
  createdAt: number;
}

export interface EnvironmentRecord {
  app: string;
  name: string;
  createdAt: number;
  /** The build deployed last, by its source fingerprint. */
  fingerprint?: string | undefined;
  artifactKey?: string | undefined;
  deployedAt?: number | undefined;
}

export interface EndpointRecord {
  /** The id in `/v2/<id>/…`. */
  id: string;
  app: string;
  env: string;
  name: string;
  kind: EndpointKind;
  /** The endpoint's resource configuration as the build manifest has it. */
  config: Record<string, unknown>;
  /** Source fingerprint of the code it runs; a change rolls its workers. */
  fingerprint: string;
  artifactKey?: string | undefined;
  createdAt: number;
  updatedAt: number;
}

export interface ApiKeyRecord {
  id: string;
  name: string;
  /** sha256 of the key, hex. The key itself is never stored. */
  hash: string;
  createdAt: number;
  /** Scope (docs/security.md): absent = every app; `app` alone = that app; `app` + `env` = one environment. */
  app?: string | undefined;
  env?: string | undefined;
  /** A call key (core/call-keys.ts): the endpoint whose workers hold it, minted and revoked by deploys. */
  endpointId?: string | undefined;
}

/** What serving a request needs of the control plane: the endpoint it names (V2Api, the agent). */
export interface EndpointLookup {
  getEndpoint(id: string): Promise<EndpointRecord | undefined>;
}

/** What the name route needs (`/v2/by-name/<app>/<env>/<name>`): the endpoints of an app. */
export interface EndpointDirectory extends EndpointLookup {
  listEndpoints(filter?: { app?: string; env?: string }): Promise<EndpointRecord[]>;
}

/** What checking a client key needs (KeyAuthenticator, the load-balanced agent). */
export interface ApiKeyLookup {
  findApiKeyByHash(hash: string): Promise<ApiKeyRecord | undefined>;
}

/**
 * Apps, environments, endpoints and API keys: where every machine of a team sees them. The CLI and
 * deploys use all of it; request paths take only the role they need (EndpointLookup, ApiKeyLookup).
 */
export interface ControlStore extends EndpointLookup, ApiKeyLookup {
  putApp(app: AppRecord): Promise<void>;
  getApp(name: string): Promise<AppRecord | undefined>;
  listApps(): Promise<AppRecord[]>;
  deleteApp(name: string): Promise<void>;
  putEnvironment(env: EnvironmentRecord): Promise<void>;
  getEnvironment(app: string, name: string): Promise<EnvironmentRecord | undefined>;
  listEnvironments(app: string): Promise<EnvironmentRecord[]>;
  deleteEnvironment(app: string, name: string): Promise<void>;
  putEndpoint(endpoint: EndpointRecord): Promise<void>;
  getEndpoint(id: string): Promise<EndpointRecord | undefined>;
  listEndpoints(filter?: { app?: string; env?: string }): Promise<EndpointRecord[]>;
  deleteEndpoint(id: string): Promise<void>;
  putApiKey(key: ApiKeyRecord): Promise<void>;
  findApiKeyByHash(hash: string): Promise<ApiKeyRecord | undefined>;
  listApiKeys(): Promise<ApiKeyRecord[]>;
  deleteApiKey(id: string): Promise<void>;
  close(): Promise<void>;
}

export type WorkerState = 'idle' | 'running';

export interface WorkerRecord {
  workerId: string;
  endpointId: string;
  state: WorkerState;
  /** The jobs the worker said it holds (take, ping). */
  jobIds: string[];
  lastSeenAt: number;
  /** When it last held a job or request; idle_timeout counts from here (core/scaling.ts). */
  lastBusyAt?: number | undefined;
  /** Load-balanced workers: requests in flight, as their agent reports them. */
  inFlight?: number | undefined;
}

/** Who is pulling work; health counts come from here, and the stop channel reads the jobs they hold. */
export interface WorkerRegistry {
  heartbeat(worker: WorkerRecord): Promise<void>;
  get(workerId: string): Promise<WorkerRecord | undefined>;
  /** Workers of an endpoint seen since `sinceMs`. */
  list(endpointId: string, sinceMs: number): Promise<WorkerRecord[]>;
  remove(workerId: string): Promise<void>;
}

/** Live workers of an endpoint as health reports them, and why it has none when it cannot start any. */
export interface WorkerCounts {
  idle: number;
  running: number;
  /** Set while workers keep failing (backoff) or cannot start at all (failing); see docs/workers.md. */
  problem?: EndpointProblem | undefined;
}

export interface EndpointProblem {
  /** `backoff`: workers crash and restarts are delayed; `failing`: no worker could start at all. */
  state: 'backoff' | 'failing';
  reason: string;
  /** The last lines the worker printed before it exited. */
  lines: string[];
  sinceMs: number;
  /** When the next start is allowed (backoff only). */
  retryAtMs?: number | undefined;
}

/** An endpoint's run of worker starts that failed, as every task's agent sees it. */
export interface StartFailures {
  /** Workers in a row that died before their first take or ping. */
  failedStarts: number;
  /** Set once the run made the endpoint failing (reason and the last worker's lines). */
  problem?: EndpointProblem | undefined;
}

/**
 * Where the run of failed starts lives when each worker has its own supervisor (one agent per ECS
 * task on AWS): the count must outlive the task, or a broken image crash-loops forever. The worker
 * supervisor (core/supervisor.ts) still owns the rule; this only keeps the count and the verdict.
 * A deploy of the endpoint clears it (`putEndpoint`).
 */
export interface StartFailureRecord {
  startFailures(endpointId: string): Promise<StartFailures | undefined>;
  /** Adds one failed start atomically across tasks; answers the run including it. */
  addFailedStart(endpointId: string): Promise<number>;
  markFailing(endpointId: string, problem: EndpointProblem): Promise<void>;
  /** A worker made contact (or a deploy): the run is over. */
  clearStartFailures(endpointId: string): Promise<void>;
}

/** What counting one ECS task's failed start did (`TaskStartFailureRecord`): the run as it is now. */
export interface TaskStartCount extends StartFailures {
  /**
   * Whether this call added the task. False when the task was counted before (another copy of its
   * event, or a write of this call the SDK sent again after it landed) or the run had already
   * reached `atMost`: nothing changed, and `failedStarts` and `problem` are the item as it is.
   */
  counted: boolean;
}

/**
 * The failed starts the scaler counts from ECS's task events (functions/scaler.ts
 * `recordTaskStartFailure`), on the same run the agents keep (`StartFailureRecord`). ECS sends its
 * events at least once and Lambda may hand one event to the function more than once, so the run
 * remembers which tasks it counted and counts each task once. A deploy or a worker's contact clears
 * the run (`clearStartFailures`), the tasks it remembered with it.
 */
export interface TaskStartFailureRecord {
  /** Adds the task's failed start once, while the run is below `atMost`; answers the run. */
  addTaskStartFailure(endpointId: string, taskArn: string, atMost: number): Promise<TaskStartCount>;
}

/**
 * The one record of which jobs each worker holds, fed by the engine's worker moves. The worker
 * supervisor (core/supervisor.ts) is the real one; `RegistryLedger` only reads and writes the shared
 * registry, for processes that start no workers (the API Lambda reports health from it).
 */
export interface WorkerLedger {
  /** Whether the worker may take jobs now: false while it drains, retires after a job, or is gone. */
  mayTake(endpointId: string, workerId: string): Promise<boolean>;
  /**
   * The same answer at once, from memory, for a take that is already waiting (TakeQueuedOptions.open);
   * absent where a waiting take is never cut short (the registry ledger: every worker may take).
   */
  takesNew?(workerId: string): boolean;
  /**
   * The worker took these jobs. `deadlinesMs`: when each must end (startedAt + execution timeout),
   * as the taker wrote it, so the ledger need not read the job again to time it out.
   */
  taken(
    endpointId: string,
    workerId: string,
    jobIds: string[],
    deadlinesMs?: ReadonlyMap<string, number>,
  ): Promise<void>;
  /** The worker finished a job; `refresh` (RunPod's stopPod) asks for a fresh worker before the next. */
  released(endpointId: string, workerId: string, jobId: string, options: { refresh: boolean }): Promise<void>;
  /** The jobs the worker listed in its ping. */
  pinged(endpointId: string, workerId: string, jobIds: string[]): Promise<void>;
  held(workerId: string): Promise<string[]>;
  /**
   * Of the jobs a ping lists, those the worker holds whose lease is due a renewal (not taken or
   * renewed in the last `gapMs`), each then counted as renewed at `nowMs`.
   */
  leasesDue(workerId: string, listed: ReadonlySet<string>, nowMs: number, gapMs: number): Promise<string[]>;
  gone(endpointId: string, workerId: string): Promise<void>;
  counts(endpointId: string): Promise<WorkerCounts>;
}

/**
 * When a run with a time limit must start no more work (the AWS sweeper's run, functions/sweeper.ts):
 * a step checks it before each unit of work (a job, a page of chunks, a message) and leaves the rest
 * for the next run. It answers for the whole run; a step never adds margins of its own.
 */
export interface Deadline {
  passed(): boolean;
}

/** Time, injected so tests drive it. */
export interface Clock {
  now(): number;
  /** Resolves after `ms` (as this clock counts), or at once when `signal` aborts. */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

/**
 * Wake-ups for waiting requests (runsync, status-sync, stream, job-take, job-stop). Watch first, then
 * read, then wait: a change between the read and the wait is not lost.
 */
export interface ChangeFeed {
  watch(key: string): Watch;
  /** `key` changed; `detail` says how, for a feed that acts on it (the AWS scaler nudge). */
  notify(key: string, detail?: ChangeDetail): void;
}

/** What a notify says beyond its key. */
export interface ChangeDetail {
  /** A job was queued, of this priority (the AWS scaler nudge). */
  queuedLowPriority?: boolean;
  /**
   * A job-end notify's job as its final write left it: a wait in the same process answers with it
   * instead of reading the job back (Engine.waitForEnd). Another process's waits still read.
   */
  ended?: Job;
}

export interface Watch {
  /** True as soon as the key changed since the watch began (or since the last call); false after `waitMs`. */
  changed(waitMs: number, signal?: AbortSignal): Promise<boolean>;
  /** The detail of the latest notify of this process the watch heard, when it carried one. */
  readonly detail?: ChangeDetail | undefined;
  close(): void;
}

/** One line of output: a job's (the handler's stdout/stderr) or a worker's own (no jobId). */
export interface LogLine {
  /** When the line was written, epoch ms. */
  atMs: number;
  endpointId: string;
  /** The worker that wrote it; a container's own line on AWS: its ECS task id. */
  workerId: string;
  jobId?: string | undefined;
  stream: 'stdout' | 'stderr';
  /**
   * A line a container of an ECS task printed outside any job (AWS: what its `awslogs` driver ships,
   * core/adapters/aws/cloudwatch-logs.ts): which of the task's containers. Absent on job lines and
   * on a local worker's own lines, which are the worker's.
   */
  container?: TaskContainer | undefined;
  text: string;
}

/** The containers of an endpoint's ECS task (infra/constructs/service.ts). */
export type TaskContainer = 'artifact' | 'agent' | 'worker';

export interface LogQuery {
  endpointId: string;
  /** Only this job's lines; otherwise every line of the endpoint (jobs and workers). */
  jobId?: string | undefined;
  /** Lines written at or after this moment. */
  sinceMs?: number | undefined;
  /** Lines written at or before this moment: the read has an end (a finished job's lines). */
  untilMs?: number | undefined;
  /** The `next` of an earlier read: only lines stored after it (for --follow). Opaque. */
  after?: string | undefined;
  /**
   * The caller reads on with `next` (`ferry logs --follow`, the console). A store whose lines can
   * arrive out of order (CloudWatch: each task writes its own stream, late) then hands out only
   * lines whose place is final, so `next` never passes a line that is still on its way; a one-shot
   * read gets every line up to now instead, and its `next` may pass such a line.
   */
  follow?: boolean | undefined;
  limit: number;
}

export interface LogPage {
  lines: LogLine[];
  /** Where the next read resumes (opaque). */
  next: string;
  /** The read stopped before the end of what it could hand out now (page full, work capped): read on at once. */
  more: boolean;
  /** The query has an end (`untilMs`) and every line up to it was handed out: reading on finds nothing. */
  ended: boolean;
}

/**
 * Per-job and per-worker logs (docs/observability.md). Lines come back oldest first; `next` resumes
 * after the last one, so a follower polls with it and never sees a line twice.
 */
export interface LogStore {
  append(lines: readonly LogLine[]): Promise<void>;
  read(query: LogQuery): Promise<LogPage>;
}
