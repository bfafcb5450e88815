/**
 * The job and its state machine (docs/architecture.md#jobs).
 *
 *            run / retry                 take (worker)             done / error / timeout
 *   (none) ───────────────▶ IN_QUEUE ─────────────────▶ IN_PROGRESS ─────────────────▶ COMPLETED | FAILED | TIMED_OUT
 *                             │  ▲                          │   │                                      │
 *                             │  └──── lease lapsed ────────┘   │                                      │
 *             cancel / purge  ▼        (attempt + 1)            │ cancel                     retry     │
 *                          CANCELLED ◀──────────────────────────┘     (FAILED, TIMED_OUT) ─────────────┘
 *
 * Every move is a compare-and-set on the current status, so cancel, completion, lease expiry and purge
 * never lose a race: whichever write lands first wins and the other finds the status changed.
 */
import { badRequest } from './errors.js';

export const jobStatuses = [
  'IN_QUEUE',
  'IN_PROGRESS',
  'COMPLETED',
  'FAILED',
  'CANCELLED',
  'TIMED_OUT',
] as const;
export type JobStatus = (typeof jobStatuses)[number];

/** The statuses a job never leaves (but by retry); stores use the list in their indexes and deletes. */
export const finalStatusList = [
  'COMPLETED',
  'FAILED',
  'CANCELLED',
  'TIMED_OUT',
] as const satisfies JobStatus[];
export const finalStatuses: ReadonlySet<JobStatus> = new Set(finalStatusList);
/** Also takes a status read off the wire (a string), as clients of the API do. */
export const isFinal = (status: string): boolean => finalStatuses.has(status as JobStatus);

/** Whether a job's view (viewOf) shows its input: only while the job has not ended (docs/api.md). */
const viewShowsInput = (status: string): boolean => !isFinal(status);

/**
 * Whether a read asked for with `input` (JobReadOptions.input) hands out the input of a job in
 * `status`: 'unfinished' reads it only when the job's view shows it.
 */
export const readsInput = (input: boolean | 'unfinished' | undefined, status: string): boolean =>
  input === 'unfinished' ? viewShowsInput(status) : input !== false;

/**
 * Which count of an endpoint's health an unexpired job adds one to, by its status: failed takes
 * FAILED and TIMED_OUT (runs that did not succeed), CANCELLED counts in none. (Any status with
 * retries > 0 also counts in `retried`.) Every JobStore's `counts` follows this table.
 */
export const healthCountOf = {
  IN_QUEUE: 'inQueue',
  IN_PROGRESS: 'inProgress',
  COMPLETED: 'completed',
  FAILED: 'failed',
  TIMED_OUT: 'failed',
  CANCELLED: undefined,
} as const satisfies Record<JobStatus, 'inQueue' | 'inProgress' | 'completed' | 'failed' | undefined>;

/**
 * When a running job's execution timeout passes, for the engine and for the stores' overdue indexes.
 * A timeout of 0 (or none) means none: the job runs as long as its worker renews the lease.
 */
export function runDeadlineOf(job: Pick<Job, 'startedAt' | 'policy'>): number | undefined {
  const timeoutMs = job.policy?.executionTimeoutMs;
  return job.startedAt !== undefined && timeoutMs !== undefined && timeoutMs > 0
    ? job.startedAt + timeoutMs
    : undefined;
}

/**
 * Job ids that carry their endpoint. On AWS the jobs, chunks and payloads of every endpoint share
 * one table and one bucket, and IAM can fence an endpoint's agent off the others' items only by the
 * partition key (`dynamodb:LeadingKeys`) and the object key (S3 ARNs): so the id starts with the
 * endpoint id, and /runsync's `sync-` marker goes before it (docs/security-aws.md). Endpoint ids
 * contain no '-', so `<endpointId>-` can never be the start of another endpoint's id.
 */
export const endpointScopedJobId = (endpointId: string, unique: string): string => `${endpointId}-${unique}`;

/** Every id `endpointScopedJobId` can produce for the endpoint, as IAM StringLike patterns. */
export const endpointJobIdPatterns = (endpointId: string): [string, string] => [
  `${endpointId}-*`,
  `sync-${endpointId}-*`,
];

/** The legal moves, and the only place that says which status each starts from and ends in. */
export const moves = {
  /** A worker takes a queued job. */
  take: { from: ['IN_QUEUE'], to: 'IN_PROGRESS' },
  /** A worker posts a progress update; the status stays. */
  progress: { from: ['IN_PROGRESS'], to: 'IN_PROGRESS' },
  complete: { from: ['IN_PROGRESS'], to: 'COMPLETED' },
  fail: { from: ['IN_PROGRESS'], to: 'FAILED' },
  timeOut: { from: ['IN_PROGRESS'], to: 'TIMED_OUT' },
  /** A lapsed lease: the worker died, the job goes back to the queue. */
  requeue: { from: ['IN_PROGRESS'], to: 'IN_QUEUE' },
  cancel: { from: ['IN_QUEUE', 'IN_PROGRESS'], to: 'CANCELLED' },
  purge: { from: ['IN_QUEUE'], to: 'CANCELLED' },
  /** The endpoint cannot start a worker at all (docs/workers.md): queued jobs fail with the cause. */
  reject: { from: ['IN_QUEUE'], to: 'FAILED' },
  /** AWS: the job's message went to the dead-letter queue; no worker will ever take it. */
  deadLetter: { from: ['IN_QUEUE'], to: 'FAILED' },
  retry: { from: ['FAILED', 'TIMED_OUT'], to: 'IN_QUEUE' },
} as const satisfies Record<string, { from: readonly JobStatus[]; to: JobStatus }>;

export type Move = keyof typeof moves;

export const canMove = (move: Move, status: JobStatus): boolean =>
  (moves[move].from as readonly JobStatus[]).includes(status);

export interface JobPolicy {
  executionTimeoutMs: number;
  ttlMs: number;
  lowPriority: boolean;
}

/** A job as the store keeps it. Times are epoch milliseconds. */
export interface Job {
  id: string;
  endpointId: string;
  status: JobStatus;
  /** The request's `input`, kept as sent: retry runs the original input again. */
  input: unknown;
  webhook?: string | undefined;
  /** RunPod passes s3Config through to the handler; so do we. */
  s3Config?: Record<string, unknown> | undefined;
  policy: JobPolicy;
  /** Submitted through /runsync. */
  sync: boolean;
  /**
   * The endpoint whose workers submitted it with their call token (a remote call, docs/python.md),
   * absent for a client key's submit. Set at the submit and never changed by a move (retry keeps it):
   * a call token may read and cancel only the jobs its own endpoint submitted (core/api.ts). Not in
   * the job's view.
   */
  submittedBy?: string | undefined;
  /** How long results stay readable after the job ends. */
  retentionMs: number;
  createdAt: number;
  /** When a worker last took it; delayTime is measured up to here. */
  startedAt?: number | undefined;
  finishedAt?: number | undefined;
  /** From this moment the job reads as 404 (policy.ttl before it ends, retention after). */
  expiresAt: number;
  output?: unknown;
  error?: string | undefined;
  workerId?: string | undefined;
  /** The taking worker must ping before this moment or the job goes back to the queue. */
  leaseUntil?: number | undefined;
  /** How many times a worker has taken it in the current run (lapsed leases count). */
  attempt: number;
  /** How many times /retry re-queued it. */
  retries: number;
  /** A strictly increasing version, bumped on every write; it makes each move a compare-and-set. */
  version: number;
}

/** The job as the v2 API shows it (docs/api.md#the-job). */
export interface JobView {
  id: string;
  status: JobStatus;
  delayTime?: number;
  executionTime?: number;
  input?: unknown;
  output?: unknown;
  error?: string;
  workerId?: string;
  retries?: number;
}

export function viewOf(job: Job, now: number): JobView {
  const view: JobView = { id: job.id, status: job.status };
  if (job.startedAt !== undefined) view.delayTime = Math.max(0, job.startedAt - job.createdAt);
  else if (job.status === 'IN_QUEUE') view.delayTime = Math.max(0, now - job.createdAt);
  if (job.startedAt !== undefined && job.status !== 'IN_QUEUE') {
    view.executionTime = Math.max(0, (job.finishedAt ?? now) - job.startedAt);
  }
  if (viewShowsInput(job.status)) view.input = job.input;
  if (job.output !== undefined) view.output = job.output;
  if (job.error !== undefined) view.error = job.error;
  if (job.workerId !== undefined) view.workerId = job.workerId;
  if (job.retries > 0) view.retries = job.retries;
  return view;
}

/**
 * A page cursor for job lists (newest first): the last job's createdAt and id, so the next page
 * starts strictly after it whatever the store. Opaque to callers.
 */
export function encodeJobCursor(job: Pick<Job, 'createdAt' | 'id'>): string {
  return Buffer.from(JSON.stringify([job.createdAt, job.id])).toString('base64url');
}

/** The position a cursor names; a `bad_request` FerryError when it is not one we handed out. */
export function decodeJobCursor(cursor: string | undefined): [number, string] | undefined {
  if (cursor === undefined) return undefined;
  try {
    const value = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8')) as unknown;
    if (Array.isArray(value) && Number.isSafeInteger(value[0]) && typeof value[1] === 'string')
      return [value[0] as number, value[1] as string];
  } catch {
    // fall through
  }
  throw badRequest('cursor is not one this API handed out');
}

/** Whether `job` comes after the cursor position in newest-first order. */
export const isBeforeCursor = (job: Pick<Job, 'createdAt' | 'id'>, [atMs, id]: [number, string]): boolean =>
  job.createdAt < atMs || (job.createdAt === atMs && job.id < id);
