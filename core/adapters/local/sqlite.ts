/**
 * The local provider's state: ONE SQLite database (better-sqlite3, WAL) in `.ferry/` holding jobs,
 * stream chunks, the dispatch queue, control records and workers.
 *
 * Durability: WAL with `synchronous=NORMAL` (the default here). A commit is written to the WAL file
 * before the call returns, so it lives in the OS page cache and survives kill -9 of this process (the
 * case that matters: a job that got an id is never lost when `ferry dev` is killed). Only a power
 * loss or kernel crash can drop the last commits; pass `{ synchronous: 'FULL' }` to fsync every
 * commit when that matters more than write speed (an fsync per stream chunk is slow on laptops).
 *
 * Group commit: the hot writes (create-and-queue, job updates, queue receive/ack/send) that arrive in
 * the same event-loop turn share one transaction (`GroupCommit`), and each caller's promise settles
 * only after that COMMIT — so nothing is answered before it is durable, and one failing write rolls
 * back only itself (the turn runs again with a savepoint per write).
 *
 * Several processes may open the same file (the dev server and a CLI command): writes that read
 * then write run in `BEGIN IMMEDIATE` transactions, and `busy_timeout` makes a second writer wait
 * instead of failing.
 */
import { randomUUID } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import Database from 'better-sqlite3';
import { systemClock } from '../../clock.js';
import { conflict, FerryError, internal, usage } from '../../errors.js';
import {
  decodeJobCursor,
  encodeJobCursor,
  finalStatusList,
  healthCountOf,
  type Job,
  type JobStatus,
  jobStatuses,
  readsInput,
  runDeadlineOf,
} from '../../job.js';
import { JsonText } from '../../json.js';
import { limits } from '../../limits.js';
import type {
  ApiKeyRecord,
  AppRecord,
  Clock,
  ControlStore,
  EndpointRecord,
  EnvironmentRecord,
  JobChange,
  JobCounts,
  JobPatch,
  JobQueue,
  JobReadOptions,
  JobStore,
  JobUpdate,
  LeaseRenewal,
  ListByStatusOptions,
  QueueMessage,
  ReceiveOptions,
  RecentJobsQuery,
  StreamRead,
  TakenJob,
  TakeQueuedOptions,
  WorkerRecord,
  WorkerRegistry,
} from '../../ports.js';
import { WalCheckpointer } from './checkpointer.js';
import { createPrivateFile } from './home.js';
import { SqliteWebhookOutbox } from './outbox.js';
import { LocalSecretStore } from './secrets.js';

/** The final statuses as an SQL list (they are fixed words, never user input). */
const finalStatusSql = finalStatusList.map((status) => `'${status}'`).join(', ');

import { SqliteLogStore } from './logs.js';

type Db = Database.Database;

/**
 * Writes queued during one event-loop turn, committed together at its end (setImmediate runs after
 * the turn's I/O callbacks, so every request parsed in that turn joins). They run in order in one
 * transaction, so compare-and-set updates see each other exactly as they would one by one. A write
 * that throws rolls back alone and its caller gets the error; the others commit: when one throws,
 * the whole transaction is rolled back and the turn's writes run again, each in a savepoint of its
 * own. A savepoint costs its write a copy of every page it changes (the statement journal), about
 * 7 % of a /run's CPU (bench/results.md, nineteenth pass), so only a turn with a failure pays it.
 *
 * So a write may run twice: its work must be SQL only, or undo what it did outside the database
 * when it runs again (createQueued's hand-off).
 *
 * While the group is held (hold(): the WAL checkpointer's finish step, checkpointer.ts), writes wait
 * and are committed together after release().
 */
export class GroupCommit {
  #pending: { work: () => unknown; resolve: (value: unknown) => void; reject: (error: unknown) => void }[] =
    [];
  readonly #plain;
  readonly #one;
  readonly #all;

  /** Called after each commit (the WAL checkpointer counts them). */
  readonly #committed: (() => void) | undefined;
  #held = false;

  constructor(db: Db, committed?: () => void) {
    this.#committed = committed;
    this.#plain = db.transaction((batch: { work: () => unknown }[]) =>
      batch.map((item) => {
        try {
          return { ok: true as const, value: item.work() };
        } catch {
          // better-sqlite3 rolls the transaction back as this leaves it.
          throw new WriteFailed();
        }
      }),
    );
    // Called inside #all, a better-sqlite3 transaction function opens a SAVEPOINT.
    this.#one = db.transaction((work: () => unknown) => work());
    this.#all = db.transaction((batch: { work: () => unknown }[]) =>
      batch.map((item) => {
        try {
          return { ok: true as const, value: this.#one(item.work) };
        } catch (error) {
          return { ok: false as const, error };
        }
      }),
    );
  }

  run<T>(work: () => T): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      if (this.#pending.length === 0 && !this.#held) setImmediate(() => this.flush());
      this.#pending.push({ work, resolve: resolve as (value: unknown) => void, reject });
    });
  }

  /** Commits nothing until release(): writes keep joining the group. */
  hold(): void {
    this.#held = true;
  }

  /** Commits what was held (in the next turn), and each turn's writes after that as before. */
  release(): void {
    this.#held = false;
    if (this.#pending.length > 0) setImmediate(() => this.flush());
  }

  /** Commits what is queued now (also called before the database closes), unless held. */
  flush(): void {
    const batch = this.#pending;
    if (batch.length === 0 || this.#held) return;
    this.#pending = [];
    let outcomes: { ok: boolean; value?: unknown; error?: unknown }[];
    try {
      try {
        outcomes = this.#plain.immediate(batch);
      } catch (error) {
        if (!(error instanceof WriteFailed)) throw error;
        // A write threw and took the batch with it: again, each write in a savepoint of its own.
        outcomes = this.#all.immediate(batch);
      }
    } catch (error) {
      // BEGIN or COMMIT failed: nothing of the batch is written.
      for (const item of batch) item.reject(error);
      return;
    }
    this.#committed?.();
    batch.forEach((item, i) => {
      const outcome = outcomes[i]!;
      if (outcome.ok) item.resolve(outcome.value);
      else item.reject(outcome.error);
    });
  }
}

/**
 * Marks that a write of a group threw, in the run without savepoints (GroupCommit). Its error is not
 * kept: the run with savepoints meets it again and hands it to that write's caller.
 */
class WriteFailed {}

/**
 * Statements prepared once per connection: better-sqlite3 compiles SQL on every `prepare`, which
 * showed up as a hot spot on the job path.
 */
const statements = new WeakMap<Db, Map<string, Database.Statement>>();
function prepared<P extends unknown[] = unknown[], R = unknown>(
  db: Db,
  sql: string,
): Database.Statement<P, R> {
  let byText = statements.get(db);
  if (!byText) {
    byText = new Map();
    statements.set(db, byText);
  }
  let statement = byText.get(sql);
  if (!statement) {
    statement = db.prepare(sql);
    byText.set(sql, statement);
  }
  return statement as unknown as Database.Statement<P, R>;
}

/** The reason a napping receive is woken with (abort() without one builds a DOMException). */
const woken = Object.freeze({ reason: 'a message arrived' });

/**
 * 2: inputs moved out of `jobs.body` into `job_inputs` (migrateInputsApart). 3: the fields moves
 * change moved out of `jobs.body` into columns of their own (migrateMovingFieldsApart).
 */
const schemaVersion = 3;

const schema = `
CREATE TABLE IF NOT EXISTS jobs (
  id TEXT PRIMARY KEY,
  endpoint_id TEXT NOT NULL,
  status TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  expires_at INTEGER NOT NULL,
  lease_until INTEGER,
  started_at INTEGER,
  -- started_at + policy.executionTimeoutMs, so the overdue query can use an index.
  run_deadline INTEGER,
  retries INTEGER NOT NULL,
  version INTEGER NOT NULL,
  -- The fields a job keeps from its submit (id, endpoint, policy, webhook...) as JSON. Every field a
  -- move changes has a column (jobFieldColumns), so a take or a done writes columns only.
  body TEXT NOT NULL,
  finished_at INTEGER,
  worker_id TEXT,
  attempt INTEGER NOT NULL DEFAULT 0,
  -- JSON text.
  output TEXT,
  error TEXT
);
-- By endpoint and status, oldest first; expires_at and retries ride along so health's counts read the
-- index alone (a covering index) instead of each job's row: 100 000 retained jobs took about 70 ms of
-- blocked event loop per health call. Every move that changes either also changes the status, so
-- carrying them adds no index write.
DROP INDEX IF EXISTS jobs_by_endpoint_status;
CREATE INDEX IF NOT EXISTS jobs_of_endpoint_by_status ON jobs (endpoint_id, status, created_at, expires_at, retries);
-- The running jobs, oldest first: all the sweep's overdue query (lapsed lease or run deadline) reads.
-- Partial, so a job enters it when taken and leaves it when it ends, and nothing else a job does
-- (its submit, a lease renewal, its retention) writes to it. It replaces two indexes over every job,
-- (status, lease_until) and (status, run_deadline), which each submit, take, ping and done rewrote.
DROP INDEX IF EXISTS jobs_by_status_lease;
DROP INDEX IF EXISTS jobs_by_status_deadline;
CREATE INDEX IF NOT EXISTS jobs_running ON jobs (created_at) WHERE status = 'IN_PROGRESS';
CREATE INDEX IF NOT EXISTS jobs_by_expiry ON jobs (expires_at);
-- The management API's job list: newest first per endpoint (core/manage.ts).
CREATE INDEX IF NOT EXISTS jobs_by_endpoint_created ON jobs (endpoint_id, created_at);

-- A job's input, written once when the job is created and deleted with it. Kept out of jobs.body
-- because SQLite writes a whole row on every UPDATE: with the input inside, each move of a job (take,
-- done, retry) wrote the input again, and a 64 KB input made a job cost three 64 KB row writes.
-- WITHOUT ROWID: one b-tree keyed by job id (a rowid table would add an index for the key).
CREATE TABLE IF NOT EXISTS job_inputs (
  job_id TEXT PRIMARY KEY,
  input TEXT NOT NULL
) WITHOUT ROWID;

-- Job and worker output (logs.ts); a job's lines go when the job does (deleteExpired).
CREATE TABLE IF NOT EXISTS logs (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  endpoint_id TEXT NOT NULL,
  worker_id TEXT NOT NULL,
  job_id TEXT,
  at_ms INTEGER NOT NULL,
  stream TEXT NOT NULL,
  text TEXT NOT NULL
);
-- A job's lines, and a worker's own lines by time (for their retention): each line is in one of the
-- two partial indexes, not both, and the queries name theirs (logs.ts), so reading one job's lines
-- walks that job's lines, where the planner had picked the endpoint's index and walked all of them.
DROP INDEX IF EXISTS logs_by_job;
DROP INDEX IF EXISTS logs_by_time;
CREATE INDEX IF NOT EXISTS logs_of_jobs ON logs (job_id, seq) WHERE job_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS logs_of_workers ON logs (at_ms) WHERE job_id IS NULL;
CREATE INDEX IF NOT EXISTS logs_by_endpoint ON logs (endpoint_id, seq);

CREATE TABLE IF NOT EXISTS stream_chunks (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  job_id TEXT NOT NULL,
  output TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS stream_chunks_by_job ON stream_chunks (job_id, seq);
-- The last chunk a drain handed out, per job: handed-out chunks stay (readStream shows them) until
-- the stream is cleared or the job goes. A job without a row has handed out none.
CREATE TABLE IF NOT EXISTS stream_cursors (
  job_id TEXT PRIMARY KEY,
  seq INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS queue (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  endpoint_id TEXT NOT NULL,
  job_id TEXT NOT NULL,
  low_priority INTEGER NOT NULL,
  visible_at INTEGER NOT NULL,
  -- Changes on every delivery, so the receipt of an earlier delivery cannot ack a later one.
  token TEXT NOT NULL
);
-- In send order per endpoint: a receive walks from the oldest message and stops after \`max\` visible
-- ones, instead of sorting every visible message (which made each receive cost O(queue length)).
-- It also carries visible_at and low_priority, so receive, depth and the next-visible lookup read the
-- index alone; one index keeps sends, receives and acks cheap.
DROP INDEX IF EXISTS queue_by_endpoint;
CREATE INDEX IF NOT EXISTS queue_in_order ON queue (endpoint_id, seq, visible_at, low_priority);

CREATE TABLE IF NOT EXISTS apps (name TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS environments (
  app TEXT NOT NULL, name TEXT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (app, name)
);
CREATE TABLE IF NOT EXISTS endpoints (
  id TEXT PRIMARY KEY, app TEXT NOT NULL, env TEXT NOT NULL, name TEXT NOT NULL, body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS endpoints_by_app_env ON endpoints (app, env, name);
CREATE TABLE IF NOT EXISTS api_keys (
  id TEXT PRIMARY KEY, hash TEXT NOT NULL UNIQUE, created_at INTEGER NOT NULL, body TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS workers (
  worker_id TEXT PRIMARY KEY,
  endpoint_id TEXT NOT NULL,
  last_seen_at INTEGER NOT NULL,
  body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS workers_by_endpoint ON workers (endpoint_id, last_seen_at);

-- Each endpoint's own OS user for its workers (\`ferry serve --worker-uids\`, LocalDatabase.workerUid).
-- Never given to another endpoint, even once this one is gone: files it left stay out of reach.
CREATE TABLE IF NOT EXISTS worker_uids (
  endpoint_id TEXT PRIMARY KEY,
  uid INTEGER NOT NULL UNIQUE
);
`;

export interface LocalDatabaseOptions {
  /** Time for queue visibility and long polls. */
  clock?: Clock;
  synchronous?: 'NORMAL' | 'FULL';
  /**
   * Longest a queue long poll sleeps before looking at the table again. Sends from this process wake
   * it at once; this bounds how late it hears a send from another process sharing the file.
   */
  crossProcessPollMs?: number;
  /**
   * Checkpoints on a thread of their own (checkpointer.ts), not inside the commits: for the
   * connection that serves the platform. A file only; ignored for `:memory:`.
   */
  checkpointOnThread?: boolean;
}

export interface LocalDatabase {
  jobs: JobStore;
  logs: SqliteLogStore;
  queue: JobQueue;
  control: ControlStore;
  workers: WorkerRegistry;
  /** Endpoint secrets, encrypted with the key in `keyFile` (core/adapters/local/secrets.ts). */
  openSecrets(keyFile: string): LocalSecretStore;
  /** Gives up to `maxPages` free pages back to the file system (incremental vacuum). */
  reclaimSpace(maxPages?: number): void;
  /**
   * The uid of the endpoint's workers within `range` (`ferry serve --worker-uids`): the one it was
   * given before, else the next never given out. Throws when the range is used up.
   */
  workerUid(endpointId: string, range: { first: number; last: number }): number;
  /** A new job and its queue message in one transaction (EngineDeps.createQueued). */
  createQueued(job: Job): Promise<void>;
  /** Receive, claim and acknowledge in one transaction, as a long poll (EngineDeps.takeQueued). */
  takeQueued(endpointId: string, options: TakeQueuedOptions): Promise<TakenJob[]>;
  /**
   * A move back to IN_QUEUE, the clear of the job's stream chunks and its queue message in one
   * transaction (EngineDeps.requeueQueued): the message is written only when the move is, and
   * neither when either fails.
   */
  requeueQueued(current: Job, patch: JobPatch): Promise<JobUpdate>;
  /**
   * Queues again every unexpired IN_QUEUE job of the endpoint that has no queue message, and answers
   * their ids. Nothing takes such a job, so it waited for its time-to-live: a platform before
   * requeueQueued could leave one when it was stopped while a worker's exit was being handled. The
   * platform calls it at start.
   */
  requeueStranded(endpointId: string, nowMs: number): Promise<string[]>;
  /** Pending webhook deliveries (core/webhooks.ts). */
  outbox: SqliteWebhookOutbox;
  /** Closes the connection (the stores' own `close` do not). Closing twice is fine. */
  close(): Promise<void>;
}

/**
 * Deleted jobs, chunks and records free pages that SQLite otherwise keeps in the file forever; with
 * incremental auto-vacuum the platform gives them back on a schedule (reclaimSpace). The mode takes
 * effect through one VACUUM (instant on a new file; best effort on an older one: a second process
 * holding the file makes it wait for the next start).
 */
function enableIncrementalVacuum(db: Db): void {
  const incremental = 2;
  if (db.pragma('auto_vacuum', { simple: true }) === incremental) return;
  db.pragma('auto_vacuum = INCREMENTAL');
  // Even a new file needs the VACUUM: switching to WAL has already written its first page.
  try {
    db.exec('VACUUM');
  } catch {
    // Busy: stays in the old mode until a start that has the file alone.
  }
}

/**
 * Schema 1 kept each job's input inside jobs.body; schema 2 keeps it in job_inputs. Moves the inputs
 * of the jobs a schema-1 file holds, in the transaction that sets the new version.
 */
function migrateInputsApart(db: Db): void {
  db.exec(`INSERT OR IGNORE INTO job_inputs (job_id, input)
             SELECT id, body -> '$.input' FROM jobs WHERE body -> '$.input' IS NOT NULL;
           UPDATE jobs SET body = json_remove(body, '$.input') WHERE body -> '$.input' IS NOT NULL;`);
}

/**
 * Schema 2 kept the whole job but its input in jobs.body; schema 3 keeps the fields moves change in
 * columns (jobFieldColumns). Adds the columns a schema-2 file lacks and moves those fields out of
 * each body, in the transaction that sets the new version. SQLite's `->` hands a value back as the
 * JSON text it was written as (integer markers and number spellings included).
 */
function migrateMovingFieldsApart(db: Db): void {
  const present = new Set(db.prepare("SELECT name FROM pragma_table_info('jobs')").pluck().all());
  const added = [
    ['finished_at', 'INTEGER'],
    ['worker_id', 'TEXT'],
    ['attempt', 'INTEGER NOT NULL DEFAULT 0'],
    ['output', 'TEXT'],
    ['error', 'TEXT'],
  ];
  for (const [column, type] of added) {
    if (!present.has(column)) db.exec(`ALTER TABLE jobs ADD COLUMN ${column} ${type}`);
  }
  const movingPaths = Object.keys(jobFieldColumns).map((field) => `'$.${field}'`);
  db.exec(`UPDATE jobs SET finished_at = body ->> '$.finishedAt', worker_id = body ->> '$.workerId',
             attempt = coalesce(body ->> '$.attempt', 0), output = body -> '$.output', error = body ->> '$.error',
             body = json_remove(body, ${movingPaths.join(', ')})`);
}

/** How every connection of the platform's database is set up (openLocalDatabase). */
export function configureConnection(
  db: Db,
  synchronous: LocalDatabaseOptions['synchronous'] = 'NORMAL',
): void {
  db.pragma('journal_mode = WAL');
  db.pragma(`synchronous = ${synchronous === 'FULL' ? 'FULL' : 'NORMAL'}`);
  db.pragma('busy_timeout = 5000');
  // A checkpoint (WAL pages copied into the file, two fsyncs) runs inside the commit that crosses
  // the threshold and blocks the event loop. At the default 1000 pages that was every few dozen
  // jobs under load; 10 000 pages (about 40 MB of WAL) makes it ten times rarer, and hot pages
  // written many times in between are copied once. Durability is the same: commits are in the WAL.
  // https://www.sqlite.org/pragma.html#pragma_wal_autocheckpoint
  // The serving platform's connection hands its checkpoints to a thread instead (checkpointPace).
  db.pragma('wal_autocheckpoint = 10000');
  db.pragma('foreign_keys = ON');
}

/**
 * How often the serving platform's checkpoint thread is asked (checkpointer.ts): every 250 group
 * commits, and every ten seconds in which rows changed otherwise. Under load a commit writes some 37
 * pages (bench/results.md, twentieth pass), so 250 is about the 10 000 pages above; a trickle of
 * writes, and writes outside the group commit (a worker's registration, stream chunks), are
 * checkpointed within ten seconds. The copy step stops when a pass finds under 64 new frames (two
 * commits' worth), or after twenty passes; the finish step holds the writes for a second at most.
 */
const checkpointPace = {
  everyCommits: 250,
  maxPasses: 20,
  tailFrames: 64,
  holdLimitMs: 1_000,
  sweepMs: 10_000,
};

/**
 * GroupCommit runs each write in its own savepoint when a turn's write failed (and SQL statements
 * that may fail halfway open one of their own), and SQLite keeps what a savepoint would roll
 * back in a statement journal, a temporary file that lives until the transaction ends and spills from
 * memory to disk past 64 KiB (https://www.sqlite.org/tempfiles.html: statement journals, and
 * SQLITE_STMTJRNL_SPILL under "Other Temporary File Optimizations"). A group of a dozen job writes
 * passes that: each commit then opened and deleted a file in the temporary directory and wrote every
 * journalled page to it, two writes a page, about half the platform's write calls on a burst of
 * submits. temp_store = MEMORY keeps temporary files, statement journals among them, in memory
 * (https://www.sqlite.org/pragma.html#pragma_temp_store); they hold only the pages one group's
 * writes change, and nothing in them is needed after a crash (the WAL is). A sort the planner cannot
 * read from an index is held in memory too: the job, log and queue queries take their order from
 * indexes, and the others sort a handful of rows (keys, workers, apps).
 */
export function keepStatementJournalsInMemory(db: Db): void {
  db.pragma('temp_store = MEMORY');
}

/** Opens (creating if needed) the database at `path`; `:memory:` gives a private in-memory one. */
export function openLocalDatabase(path: string, options: LocalDatabaseOptions = {}): LocalDatabase {
  if (path !== ':memory:') {
    mkdirSync(dirname(path), { recursive: true });
    createPrivateFile(path);
  }
  const db = new Database(path);
  try {
    configureConnection(db, options.synchronous);
    const version = db.pragma('user_version', { simple: true }) as number;
    if (version > schemaVersion) {
      // The user's situation, not a bug: an older Ferry run on a FERRY_HOME a newer one has migrated.
      throw usage(
        `The database ${path} was written by a newer Ferry (schema ${version}; this one reads up to ${schemaVersion})`,
        'Upgrade Ferry to the version that wrote it, or point FERRY_HOME at another folder.',
      );
    }
    enableIncrementalVacuum(db);
    // After the VACUUM above: with temp_store = MEMORY its copy of the whole file would be in memory.
    keepStatementJournalsInMemory(db);
    db.transaction(() => {
      db.exec(schema);
      if (version < 2) migrateInputsApart(db);
      if (version < 3) migrateMovingFieldsApart(db);
      db.pragma(`user_version = ${schemaVersion}`);
    }).immediate();
  } catch (error) {
    db.close();
    throw error;
  }
  const clock = options.clock ?? systemClock;
  const onThread = options.checkpointOnThread === true && path !== ':memory:';
  let checkpointer: WalCheckpointer | undefined;
  const group = new GroupCommit(db, onThread ? () => checkpointer!.committed() : undefined);
  if (onThread) {
    checkpointer = new WalCheckpointer(db, group, {
      path,
      synchronous: options.synchronous ?? 'NORMAL',
      ...checkpointPace,
    });
  }
  const queue = new SqliteJobQueue(db, clock, options.crossProcessPollMs ?? 500, group);
  const jobs = new SqliteJobStore(db, group);
  // Plain functions, not db.transaction: GroupCommit already makes each write one unit (a
  // transaction shared with its turn, or a savepoint), and a nested one per write showed up in profiles.
  const parked = new ParkedTakes();
  /**
   * The job, and its queue message, or its hand-off: when a take of the endpoint is waiting with
   * room, the job is claimed for it here, in the create's own transaction, and never queued (the
   * take's answer goes out after this commit, with no queue row written, read or deleted).
   */
  const createQueuedSync = (job: Job): HandedJob | undefined => {
    const created = { ...job, version: 1 };
    const take = parked.first(job.endpointId);
    const patch = take?.options.claim(created);
    if (take && patch) {
      // Stored claimed at once, as version 2: what an insert then the take's update would leave.
      const claimed = patched(created, patch);
      jobs.insertSync(claimed);
      return parked.hand(take, { before: created, after: claimed });
    }
    jobs.insertSync(created);
    queue.insertSync(job.endpointId, job.id, job.policy.lowPriority);
    return undefined;
  };
  /**
   * Receive + claim + acknowledge as one write: the oldest visible messages of the endpoint, each job
   * still claimable moved by `claim` (the engine's decision) and its message deleted, until `max` are
   * claimed or none are left. Stale messages (job gone, expired, elsewhere, no longer queued) go too.
   */
  const takeSync = (endpointId: string, nowMs: number, options: TakeQueuedOptions): TakenJob[] => {
    const taken: TakenJob[] = [];
    // Checked before a message is consumed: a refused claim below would drop the job's message.
    if (options.open?.() === false) return taken;
    for (;;) {
      const want = options.max - taken.length;
      const messages = queue.visibleSync(endpointId, nowMs, want);
      for (const message of messages) {
        queue.deleteSync(message.seq);
        const before = jobs.getSync(message.jobId, true, options.inputAsText);
        if (!before || before.endpointId !== endpointId || before.expiresAt <= nowMs) continue;
        const patch = options.claim(before);
        if (!patch) continue;
        const written = jobs.writeSync(before, patch);
        // Inside this write transaction nothing else can have moved the job since the read above.
        if (written.ok) taken.push({ before, after: written.job });
      }
      if (taken.length >= options.max || messages.length < want) return taken;
    }
  };
  const strandedJobs = db.prepare<[string, number, string], { id: string; low_priority: number | null }>(
    `SELECT id, json_extract(body, '$.policy.lowPriority') AS low_priority
       FROM jobs INDEXED BY jobs_of_endpoint_by_status
       WHERE endpoint_id = ? AND status = 'IN_QUEUE' AND expires_at > ?
         AND id NOT IN (SELECT job_id FROM queue WHERE endpoint_id = ?)
       ORDER BY created_at, rowid`,
  );
  const givenUid = db.prepare<[string], { uid: number }>('SELECT uid FROM worker_uids WHERE endpoint_id = ?');
  const lastUid = db.prepare<[number, number], { uid: number | null }>(
    'SELECT MAX(uid) AS uid FROM worker_uids WHERE uid BETWEEN ? AND ?',
  );
  const giveUid = db.prepare('INSERT INTO worker_uids (endpoint_id, uid) VALUES (?, ?)');
  const allocateWorkerUid = db.transaction((endpointId: string, range: { first: number; last: number }) => {
    const given = givenUid.get(endpointId);
    if (given) return given.uid;
    const last = lastUid.get(range.first, range.last)?.uid;
    const uid = last === null || last === undefined ? range.first : last + 1;
    if (uid > range.last) {
      throw new FerryError(
        'failed',
        `Every uid of the worker range ${range.first}-${range.last} is given out`,
        {
          hint: 'Restart `ferry serve` with a larger --worker-uids range',
        },
      );
    }
    giveUid.run(endpointId, uid);
    return uid;
  });
  let closed = false;
  return {
    jobs,
    openSecrets(keyFile: string) {
      return new LocalSecretStore(db, keyFile);
    },
    reclaimSpace(maxPages = 2_000) {
      db.pragma(`incremental_vacuum(${Math.max(1, Math.floor(maxPages))})`);
    },
    workerUid: allocateWorkerUid,
    async createQueued(job: Job) {
      let handed: HandedJob | undefined;
      try {
        await group.run(() => {
          // Run again after a write beside it failed (GroupCommit): the first hand-off was rolled back.
          handed?.settle(false);
          handed = createQueuedSync(job);
        });
      } catch (error) {
        handed?.settle(false);
        throw error;
      }
      if (handed) handed.settle(true);
      else queue.wake(job.endpointId);
    },
    async requeueQueued(current: Job, patch: JobPatch) {
      const result = await group.run(() => {
        const written = jobs.writeSync(current, patch);
        if (written.ok && written.job.status === 'IN_QUEUE') {
          // The next attempt streams from the start: chunks of this one must not reach the client twice.
          jobs.clearStreamSync(current.id);
          queue.insertSync(current.endpointId, current.id, current.policy.lowPriority === true);
        }
        return written;
      });
      if (result.ok) queue.wake(current.endpointId);
      return result;
    },
    async requeueStranded(endpointId: string, nowMs: number) {
      const ids = await group.run(() =>
        strandedJobs.all(endpointId, nowMs, endpointId).map((row) => {
          queue.insertSync(endpointId, row.id, row.low_priority === 1);
          return row.id;
        }),
      );
      if (ids.length > 0) queue.wake(endpointId);
      return ids;
    },
    async takeQueued(endpointId: string, options: TakeQueuedOptions) {
      const take: ParkedTake = { options, handed: [], wake: () => {} };
      const attempt = async (nowMs: number): Promise<TakenJob[]> => {
        parked.leave(endpointId, take);
        const handed = await ParkedTakes.collect(take);
        if (handed.length > 0) return handed;
        const found = await group.run(() => takeSync(endpointId, nowMs, options));
        if (found.length === 0 && !options.signal?.aborted && options.open?.() !== false)
          parked.join(endpointId, take);
        return found;
      };
      let found: TakenJob[];
      try {
        found = await queue.poll(endpointId, options.waitMs, options.signal, attempt, (wake) => {
          take.wake = wake;
        });
      } finally {
        parked.leave(endpointId, take);
      }
      // Jobs handed over after the last attempt (the wait ran out, or the caller left: the engine
      // queues those again) are the caller's too: they are claimed for it.
      return found.concat(await ParkedTakes.collect(take));
    },
    queue,
    control: new SqliteControlStore(db),
    workers: new SqliteWorkerRegistry(db),
    logs: new SqliteLogStore(db, group),
    outbox: new SqliteWebhookOutbox(db),
    async close() {
      if (closed) return;
      closed = true;
      await queue.close();
      await checkpointer?.close();
      group.flush();
      db.close();
    },
  };
}

/** A job claimed for a waiting take by the create that made it. */
interface HandedJob {
  taken: TakenJob;
  /** Whether the create's transaction committed; the take hands out only committed jobs. */
  committed: Promise<boolean>;
  settle(committed: boolean): void;
}

interface ParkedTake {
  options: TakeQueuedOptions;
  handed: HandedJob[];
  /** Ends the take's current nap. */
  wake: () => void;
}

/**
 * Takes that found nothing and wait (between an empty attempt and the next), per endpoint, oldest
 * first. A waiting take sleeps in SqliteJobQueue.poll; a create that finds one here claims its job
 * for it (createQueuedSync) and wakes that take after the commit, so the job skips the queue: at low
 * load, where workers wait for work, a job costs one transaction less and no queue row.
 */
class ParkedTakes {
  readonly #byEndpoint = new Map<string, ParkedTake[]>();

  /** The longest-waiting take of the endpoint with room left (takes whose caller left are dropped). */
  first(endpointId: string): ParkedTake | undefined {
    const takes = this.#byEndpoint.get(endpointId) ?? [];
    for (let i = 0; i < takes.length; ) {
      const take = takes[i]!;
      // Its caller left, or its worker may take nothing more (drained while it waited).
      if (take.options.signal?.aborted || take.options.open?.() === false) this.leave(endpointId, take);
      else if (take.handed.length < take.options.max) return take;
      else i++;
    }
    return undefined;
  }

  join(endpointId: string, take: ParkedTake): void {
    const takes = this.#byEndpoint.get(endpointId);
    if (takes) takes.push(take);
    else this.#byEndpoint.set(endpointId, [take]);
  }

  leave(endpointId: string, take: ParkedTake): void {
    const takes = this.#byEndpoint.get(endpointId);
    const at = takes?.indexOf(take) ?? -1;
    if (at < 0) return;
    takes!.splice(at, 1);
    if (takes!.length === 0) this.#byEndpoint.delete(endpointId);
  }

  /** Gives `taken` to `take` (inside the create's write); the create settles it after its commit. */
  hand(take: ParkedTake, taken: TakenJob): HandedJob {
    let settle!: (committed: boolean) => void;
    const committed = new Promise<boolean>((resolve) => {
      settle = resolve;
    });
    const handed: HandedJob = {
      taken,
      committed,
      settle: (ok) => {
        settle(ok);
        take.wake();
      },
    };
    take.handed.push(handed);
    return handed;
  }

  /** The jobs handed to `take` whose creates committed; empties its list. */
  static async collect(take: ParkedTake): Promise<TakenJob[]> {
    if (take.handed.length === 0) return [];
    const handed = take.handed;
    take.handed = [];
    const committed = await Promise.all(handed.map((h) => h.committed));
    return handed.filter((_, i) => committed[i]).map((h) => h.taken);
  }
}

// ── jobs ──────────────────────────────────────────────────────────────────────────────────────────

/**
 * The job's fields that moves change, each in a column of its own (output as JSON text): a take or a
 * done then writes a few columns instead of the job's whole JSON body again (with a 64 KB output in
 * it, at every later move). The body holds the rest, fixed since the submit, except for a patch
 * that names one of them (jobBodyOf). A JobRow holds them in this order.
 */
const jobFieldColumns = {
  status: 'status',
  createdAt: 'created_at',
  expiresAt: 'expires_at',
  leaseUntil: 'lease_until',
  startedAt: 'started_at',
  finishedAt: 'finished_at',
  workerId: 'worker_id',
  attempt: 'attempt',
  retries: 'retries',
  version: 'version',
  output: 'output',
  error: 'error',
} as const satisfies Partial<Record<keyof Job, string>>;

/**
 * A job as it is read, a row of `jobRowColumns` (the order of jobFieldColumns, which this follows)
 * then (LEFT JOIN job_inputs) its input: null for a job stored without one, absent when not read.
 * Rows come as arrays (`readsJobs`): as objects, better-sqlite3 built every row a property at a time
 * by name, a V8 lookup and a hidden-class transition per column of every job read.
 */
type JobRow = [
  body: string,
  status: JobStatus,
  createdAt: number,
  expiresAt: number,
  leaseUntil: number | null,
  startedAt: number | null,
  finishedAt: number | null,
  workerId: string | null,
  attempt: number,
  retries: number,
  version: number,
  output: string | null,
  error: string | null,
  input?: string | null,
];

/** The columns of a JobRow: the body, then the moving fields' in jobFieldColumns' order. */
const jobRowColumns = ['body', ...Object.values(jobFieldColumns)]
  .map((column) => `jobs.${column}`)
  .join(', ');

/** A statement that reads JobRows (`selectJobs`, #getBody), prepared once, its rows as arrays. */
function readsJobs<P extends unknown[]>(db: Db, sql: string): Database.Statement<P, JobRow> {
  return prepared<P, JobRow>(db, sql).raw(true);
}

/**
 * The start of every query that reads jobs: the row and its input in one statement. Conditions,
 * INDEXED BY and ORDER BY name jobs' own columns (job_inputs has only job_id and input, no rowid).
 */
const selectJobs = (indexedBy = '') =>
  `SELECT ${jobRowColumns}, job_inputs.input FROM jobs ${indexedBy ? `INDEXED BY ${indexedBy} ` : ''}` +
  'LEFT JOIN job_inputs ON job_inputs.job_id = jobs.id';

function checkLimit(limit: number): number {
  if (!Number.isInteger(limit) || limit < 1) throw internal(`limit must be a positive integer, got ${limit}`);
  return limit;
}

/** Whether `field` is kept in the job's body rather than a column of its own (input is in neither). */
const inBody = (field: string) => field !== 'input' && !(field in jobFieldColumns);

/** Whether a patch changes a field of the body (the identity is not a patch's to change: patched). */
function patchesBody(patch: JobPatch): boolean {
  for (const field in patch) if (inBody(field) && field !== 'id' && field !== 'endpointId') return true;
  return false;
}

/** The job's body: its fields without a column of their own, as JSON (the input is in job_inputs). */
function jobBodyOf(job: Job): string {
  const fixed: Record<string, unknown> = {};
  for (const [field, value] of Object.entries(job)) if (inBody(field)) fixed[field] = value;
  return JSON.stringify(fixed);
}

/** The columns of `jobs` an insert writes, in the order of its values (jobValues). */
const insertedColumns = [
  'id',
  'endpoint_id',
  'status',
  'created_at',
  'expires_at',
  'lease_until',
  'started_at',
  'finished_at',
  'worker_id',
  'attempt',
  'run_deadline',
  'retries',
  'version',
  'output',
  'error',
  'body',
] as const;

/**
 * The row of `jobs` for an insert, as positional values: bound by name, better-sqlite3 looked each
 * of the sixteen up on an object.
 */
function jobValues(job: Job): unknown[] {
  const columns = { ...queryColumns(job), output: outputText(job.output), body: jobBodyOf(job) };
  return insertedColumns.map((column) => columns[column]);
}

/** `current` with `patch` applied and the next version (what a compare-and-set writes). */
function patched(current: Job, patch: JobPatch): Job {
  // Built field by field, with a field the patch clears (undefined) left out: the former copy then
  // `delete` turned every moved job into a slow dictionary-mode object, and this function and the
  // body's stringify after it were 10 % of the platform's CPU in a profiled bench run (3x faster now).
  const from = current as unknown as Record<string, unknown>;
  const changes = patch as Record<string, unknown>;
  const next: Record<string, unknown> = {};
  for (const key in from) {
    const value = key in changes ? changes[key] : from[key];
    if (value !== undefined) next[key] = value;
  }
  for (const key in changes) {
    if (!(key in from) && changes[key] !== undefined) next[key] = changes[key];
  }
  // The identity and the version are not the caller's to write.
  next.id = current.id;
  next.endpointId = current.endpointId;
  next.version = current.version + 1;
  return next as unknown as Job;
}

/** The row's columns but its body, copied out of the job (output as the value: outputText writes it). */
function queryColumns(job: Job) {
  return {
    id: job.id,
    endpoint_id: job.endpointId,
    status: job.status,
    created_at: job.createdAt,
    expires_at: job.expiresAt,
    lease_until: job.leaseUntil ?? null,
    started_at: job.startedAt ?? null,
    finished_at: job.finishedAt ?? null,
    worker_id: job.workerId ?? null,
    attempt: job.attempt,
    run_deadline: runDeadlineOf(job) ?? null,
    retries: job.retries,
    version: job.version,
    output: job.output,
    error: job.error ?? null,
  };
}

/** The output column: the output as JSON text, null when the job has none. */
const outputText = (output: unknown) => (output === undefined ? null : JSON.stringify(output));

/** The column of each moving field (jobFieldColumns). */
type FieldColumn = (typeof jobFieldColumns)[keyof typeof jobFieldColumns];

/**
 * The columns a move may change: every moving field's but version (always written), and run_deadline
 * (started_at + the policy's timeout). Derived, so a field added to jobFieldColumns is written too.
 */
const movableColumns: readonly (Exclude<FieldColumn, 'version'> | 'run_deadline')[] = [
  ...Object.values(jobFieldColumns).filter(
    (column): column is Exclude<FieldColumn, 'version'> => column !== 'version',
  ),
  'run_deadline',
];

class SqliteJobStore implements JobStore {
  readonly #insert;
  readonly #insertInput;
  readonly #get;
  readonly #getBody;
  readonly #renew;
  readonly #appendTx;
  readonly #drainTx;

  constructor(
    private readonly db: Db,
    private readonly group: GroupCommit,
  ) {
    this.#insert = db.prepare<unknown[]>(
      `INSERT OR IGNORE INTO jobs (${insertedColumns.join(', ')})
       VALUES (${insertedColumns.map(() => '?').join(', ')})`,
    );
    this.#insertInput = db.prepare('INSERT OR REPLACE INTO job_inputs (job_id, input) VALUES (?, ?)');
    this.#get = readsJobs<[string]>(db, `${selectJobs()} WHERE jobs.id = ?`);
    this.#getBody = readsJobs<[string]>(db, `SELECT ${jobRowColumns} FROM jobs WHERE id = ?`);
    this.#renew = db.prepare(
      `UPDATE jobs SET lease_until = @lease, version = version + 1
       WHERE id = @id AND endpoint_id = @endpoint AND status = 'IN_PROGRESS' AND expires_at > @now
         AND worker_id = @worker`,
    );
    const insertChunk = db.prepare('INSERT INTO stream_chunks (job_id, output) VALUES (?, ?)');
    this.#appendTx = db.transaction((jobId: string, outputs: unknown[]) => {
      for (const output of outputs) insertChunk.run(jobId, JSON.stringify(output ?? null));
    });
    const selectChunks = db.prepare<[string, string], { seq: number; output: string }>(
      `SELECT seq, output FROM stream_chunks WHERE job_id = ?
         AND seq > coalesce((SELECT seq FROM stream_cursors WHERE job_id = ?), 0) ORDER BY seq`,
    );
    const moveCursor = db.prepare(
      'INSERT INTO stream_cursors (job_id, seq) VALUES (?, ?) ON CONFLICT (job_id) DO UPDATE SET seq = excluded.seq',
    );
    // Handing out = moving the job's cursor past the chunks, in one transaction: two drains never see
    // the same chunk.
    this.#drainTx = db.transaction((jobId: string): unknown[] => {
      const rows = selectChunks.all(jobId, jobId);
      const last = rows.at(-1);
      if (last) moveCursor.run(jobId, last.seq);
      return rows.map((r) => JSON.parse(r.output) as unknown);
    });
  }

  async create(job: Job): Promise<void> {
    await this.group.run(() => this.insertSync({ ...job, version: 1 }));
  }

  /** The insert itself, for callers that wrap it in a transaction with other writes; `job.version` is kept. */
  insertSync(job: Job): void {
    const result = this.#insert.run(jobValues(job));
    if (result.changes === 0) throw conflict(`A job with id ${job.id} already exists`);
    if (job.input !== undefined) this.#insertInput.run(job.id, JSON.stringify(job.input));
  }

  /**
   * A stored row as the job it holds, with its input when `input` (JobReadOptions.input) wants it:
   * parsed, or as the stored text when `asText` (TakeQueuedOptions.inputAsText, JobReadOptions.inputAsText).
   */
  #jobOf(row: JobRow, input: JobReadOptions['input'] = true, asText = false): Job {
    const [
      body,
      status,
      createdAt,
      expiresAt,
      leaseUntil,
      startedAt,
      finishedAt,
      workerId,
      attempt,
      retries,
      version,
      output,
      error,
      storedInput,
    ] = row;
    const job = JSON.parse(body) as Job;
    job.status = status;
    job.createdAt = createdAt;
    job.expiresAt = expiresAt;
    if (leaseUntil !== null) job.leaseUntil = leaseUntil;
    if (startedAt !== null) job.startedAt = startedAt;
    if (finishedAt !== null) job.finishedAt = finishedAt;
    if (workerId !== null) job.workerId = workerId;
    job.attempt = attempt;
    job.retries = retries;
    job.version = version;
    if (output !== null) job.output = JSON.parse(output);
    if (error !== null) job.error = error;
    if (storedInput != null && readsInput(input, job.status)) {
      job.input = asText ? new JsonText(storedInput) : JSON.parse(storedInput);
    }
    return job;
  }

  async get(jobId: string, nowMs: number, options?: JobReadOptions): Promise<Job | undefined> {
    const job =
      options?.input === false
        ? this.#bodyOf(jobId)
        : this.getSync(jobId, options?.input, options?.inputAsText);
    return job && job.expiresAt > nowMs ? job : undefined;
  }

  /** The stored job without its input: job_inputs is not read (writeSync leaves it as it is). */
  #bodyOf(jobId: string): Job | undefined {
    const row = this.#getBody.get(jobId);
    return row ? this.#jobOf(row, false) : undefined;
  }

  /** The stored job, expired or not; its input as `input` and `asText` want it (#jobOf). */
  getSync(jobId: string, input: JobReadOptions['input'] = true, asText = false): Job | undefined {
    const row = this.#get.get(jobId);
    return row ? this.#jobOf(row, input, asText) : undefined;
  }

  async update(current: Job, patch: JobPatch): Promise<JobUpdate> {
    return this.group.run(() => this.writeSync(current, patch));
  }

  /** One write of the group: every change in one transaction (each still its own compare-and-set). */
  async updateMany(changes: readonly JobChange[]): Promise<JobUpdate[]> {
    return this.group.run(() => changes.map(({ current, patch }) => this.writeSync(current, patch)));
  }

  /**
   * The UPDATE for the columns that changed (version always does), and the body only when the patch
   * names a field kept there. SQLite rewrites every index that holds a column the statement assigns,
   * changed or not: assigning them all rewrote all five indexes on every move. One prepared statement
   * per set of changed columns.
   */
  #updateOf(changed: readonly string[], rewritesBody: boolean) {
    const columns = [...changed, 'version', ...(rewritesBody ? ['body'] : [])];
    const sets = columns.map((column) => `${column} = ?`).join(', ');
    return prepared<unknown[]>(this.db, `UPDATE jobs SET ${sets} WHERE id = ? AND version = ?`);
  }

  /** The compare-and-set itself, for callers already inside a write (GroupCommit's). */
  writeSync(current: Job, patch: JobPatch): JobUpdate {
    const written = patched(current, patch);
    const before = queryColumns(current);
    const after = queryColumns(written);
    const changed = movableColumns.filter((column) => before[column] !== after[column]);
    const rewritesBody = patchesBody(patch);
    // Positional, in #updateOf's order: by name, better-sqlite3 looked each value up on an object.
    const values: unknown[] = changed.map((column) =>
      column === 'output' ? outputText(after.output) : after[column],
    );
    values.push(after.version);
    if (rewritesBody) values.push(jobBodyOf(written));
    values.push(current.id, current.version);
    const result = this.#updateOf(changed, rewritesBody).run(values);
    if (result.changes !== 1) return { ok: false, current: this.getSync(current.id) };
    // No move changes an input; a patch that did would write it here, in the same write.
    if (patch.input !== undefined) this.#insertInput.run(current.id, JSON.stringify(patch.input));
    return { ok: true, job: written };
  }

  async renewLease(lease: LeaseRenewal): Promise<boolean> {
    const { jobId, endpointId, workerId, leaseUntil, nowMs } = lease;
    const result = this.#renew.run({
      id: jobId,
      endpoint: endpointId,
      worker: workerId,
      lease: leaseUntil,
      now: nowMs,
    });
    return result.changes === 1;
  }

  async listByStatus(
    endpointId: string,
    status: JobStatus,
    nowMs: number,
    limit: number,
    options?: ListByStatusOptions,
  ): Promise<Job[]> {
    const rows = readsJobs<[string, string, number, number, number]>(
      this.db,
      `${selectJobs('jobs_of_endpoint_by_status')} WHERE endpoint_id = ? AND status = ? AND created_at >= ?
         AND expires_at > ? ORDER BY created_at, rowid LIMIT ?`,
    ).all(endpointId, status, options?.createdFrom ?? 0, nowMs, checkLimit(limit));
    return rows.map((row) => this.#jobOf(row, options?.input));
  }

  async listRecent(endpointId: string, query: RecentJobsQuery): Promise<{ jobs: Job[]; next?: string }> {
    const limit = checkLimit(query.limit);
    const statuses = query.statuses.length > 0 ? query.statuses : jobStatuses;
    const [beforeMs, beforeId] = decodeJobCursor(query.cursor) ?? [query.toMs, ''];
    const rows = readsJobs<[Record<string, unknown>]>(
      this.db,
      `${selectJobs('jobs_by_endpoint_created')}
         WHERE endpoint_id = @endpoint AND created_at >= @from AND expires_at > @now
           AND (created_at < @before OR (created_at = @before AND id < @beforeId))
           AND status IN (SELECT value FROM json_each(@statuses))
         ORDER BY created_at DESC, id DESC LIMIT @limit`,
    ).all({
      endpoint: endpointId,
      from: query.fromMs,
      now: query.nowMs,
      before: beforeMs,
      beforeId: beforeId === '' ? '\uffff' : beforeId,
      statuses: JSON.stringify(statuses),
      limit: limit + 1,
    });
    const jobs = rows.slice(0, limit).map((row) => this.#jobOf(row));
    const last = jobs.at(-1);
    return rows.length > limit && last ? { jobs, next: encodeJobCursor(last) } : { jobs };
  }

  async listOverdue(nowMs: number, limit: number, options?: Pick<JobReadOptions, 'input'>): Promise<Job[]> {
    const rows = readsJobs<[{ now: number; limit: number }]>(
      this.db,
      `${selectJobs('jobs_running')}
         WHERE status = 'IN_PROGRESS' AND (lease_until <= @now OR run_deadline <= @now)
         ORDER BY created_at, rowid LIMIT @limit`,
    ).all({ now: nowMs, limit: checkLimit(limit) });
    return rows.map((row) => this.#jobOf(row, options?.input));
  }

  /**
   * Not-final jobs whose expiresAt passed (policy.ttl ran out before they ended). `get` already hides
   * them, so this is how the engine still finds them to stop and finalise them.
   */
  async listExpiredUnfinished(
    nowMs: number,
    limit: number,
    options?: Pick<JobReadOptions, 'input'>,
  ): Promise<Job[]> {
    const rows = readsJobs<[number, number]>(
      this.db,
      `${selectJobs()} WHERE status IN ('IN_QUEUE', 'IN_PROGRESS') AND expires_at <= ?
         ORDER BY expires_at, rowid LIMIT ?`,
    ).all(nowMs, checkLimit(limit));
    return rows.map((row) => this.#jobOf(row, options?.input));
  }

  async appendStream(jobId: string, outputs: unknown[]): Promise<void> {
    if (outputs.length > 0) this.#appendTx.immediate(jobId, outputs);
  }

  async drainStream(jobId: string): Promise<unknown[]> {
    return this.#drainTx.immediate(jobId);
  }

  async readStream(jobId: string, afterSeq: number): Promise<StreamRead> {
    const chunks: unknown[] = [];
    let next = afterSeq;
    let bytes = 0;
    for (const row of prepared<[string, number], { seq: number; output: string }>(
      this.db,
      'SELECT seq, output FROM stream_chunks WHERE job_id = ? AND seq > ? ORDER BY seq LIMIT 1000',
    ).iterate(jobId, afterSeq)) {
      bytes += row.output.length;
      if (chunks.length > 0 && bytes > limits.streamReadBytes) break;
      chunks.push(JSON.parse(row.output));
      next = row.seq;
    }
    return { chunks, next };
  }

  async hasStream(jobId: string): Promise<boolean> {
    return (
      prepared<[string], { one: number }>(
        this.db,
        'SELECT 1 AS one FROM stream_chunks WHERE job_id = ? LIMIT 1',
      ).get(jobId) !== undefined
    );
  }

  async clearStream(jobId: string): Promise<void> {
    this.clearStreamSync(jobId);
  }

  /** The delete itself, for callers that wrap it in a transaction with other writes. */
  clearStreamSync(jobId: string): void {
    prepared(this.db, 'DELETE FROM stream_chunks WHERE job_id = ?').run(jobId);
    prepared(this.db, 'DELETE FROM stream_cursors WHERE job_id = ?').run(jobId);
  }

  /** The unexpired jobs by status, counted as core/job.ts healthCountOf says. */
  async counts(endpointId: string, nowMs: number): Promise<JobCounts> {
    const rows = prepared<[string, number], { status: JobStatus; n: number; retried: number }>(
      this.db,
      `SELECT status, COUNT(*) AS n, SUM(retries > 0) AS retried FROM jobs INDEXED BY jobs_of_endpoint_by_status
         WHERE endpoint_id = ? AND expires_at > ? GROUP BY status`,
    ).all(endpointId, nowMs);
    const counts: JobCounts = { completed: 0, failed: 0, inProgress: 0, inQueue: 0, retried: 0 };
    for (const row of rows) {
      counts.retried += row.retried;
      const field = healthCountOf[row.status];
      if (field) counts[field] += row.n;
    }
    return counts;
  }

  /**
   * Deletes expired jobs in a final status, with their chunks. Expired jobs that never ended stay
   * until the engine finalises them (found by `listExpiredUnfinished`, then deleted on a later pass):
   * deleting them here would leave a worker running a job nobody can stop.
   */
  async deleteExpired(nowMs: number, limit: number): Promise<number> {
    return this.db
      .transaction(() => {
        // The oldest `limit` expired jobs; their logs and chunks go with them.
        const ids = prepared<[number, number], { id: string }>(
          this.db,
          `SELECT id FROM jobs WHERE expires_at <= ? AND status IN (${finalStatusSql})
             ORDER BY expires_at LIMIT ?`,
        )
          .all(nowMs, checkLimit(limit))
          .map((row) => row.id);
        const batch = JSON.stringify(ids);
        const inBatch = 'IN (SELECT value FROM json_each(?))';
        prepared(this.db, `DELETE FROM logs INDEXED BY logs_of_jobs WHERE job_id ${inBatch}`).run(batch);
        prepared(this.db, `DELETE FROM stream_chunks WHERE job_id ${inBatch}`).run(batch);
        prepared(this.db, `DELETE FROM stream_cursors WHERE job_id ${inBatch}`).run(batch);
        prepared(this.db, `DELETE FROM job_inputs WHERE job_id ${inBatch}`).run(batch);
        return prepared(this.db, `DELETE FROM jobs WHERE id ${inBatch}`).run(batch).changes;
      })
      .immediate();
  }

  async close(): Promise<void> {
    // The connection belongs to the LocalDatabase; see its close().
  }
}

// ── queue ─────────────────────────────────────────────────────────────────────────────────────────

/**
 * SQS semantics on a table: a received message turns invisible until now + visibilityMs and comes
 * back if nobody acks it; each delivery gets a fresh token inside its receipt (`<seq>:<token>`).
 *
 *   send ──▶ visible ──receive──▶ invisible (token t1) ──ack(seq:t1)──▶ deleted
 *               ▲                      │
 *               └── visibility lapses ─┘  (next receive hands out token t2; seq:t1 no longer acks)
 */
class SqliteJobQueue implements JobQueue {
  /** Long polls waiting per endpoint, oldest first; a send wakes one (see `wake`). */
  readonly #waiters = new Map<string, Set<() => void>>();
  #closed = false;
  readonly #send;
  readonly #hide;
  readonly #delete;
  readonly #nextVisible;
  readonly #ack;
  readonly #depth;

  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
    private readonly crossProcessPollMs: number,
    private readonly group: GroupCommit,
  ) {
    this.#send = db.prepare(
      'INSERT INTO queue (endpoint_id, job_id, low_priority, visible_at, token) VALUES (?, ?, ?, ?, ?)',
    );
    this.#hide = db.prepare('UPDATE queue SET visible_at = ?, token = ? WHERE seq = ?');
    this.#delete = db.prepare('DELETE FROM queue WHERE seq = ?');
    this.#nextVisible = db.prepare<[string, number], { at: number | null }>(
      'SELECT MIN(visible_at) AS at FROM queue WHERE endpoint_id = ? AND visible_at > ?',
    );
    this.#ack = db.prepare('DELETE FROM queue WHERE endpoint_id = ? AND seq = ? AND token = ?');
    this.#depth = db.prepare<
      { endpoint: string; now: number; limit: number },
      { visible: number; urgent: number | null }
    >(
      `SELECT
         (SELECT COUNT(*) FROM (SELECT 1 FROM queue
            WHERE endpoint_id = @endpoint AND visible_at <= @now LIMIT @limit)) AS visible,
         (SELECT COUNT(*) FROM (SELECT 1 FROM queue
            WHERE endpoint_id = @endpoint AND visible_at <= @now AND low_priority = 0 LIMIT @limit)) AS urgent`,
    );
  }

  async send(endpointId: string, jobId: string, options: { lowPriority: boolean }): Promise<void> {
    await this.group.run(() => this.insertSync(endpointId, jobId, options.lowPriority));
    this.wake(endpointId);
  }

  /** The insert itself, for callers that wrap it in a transaction; call wake() after the commit. */
  insertSync(endpointId: string, jobId: string, lowPriority: boolean): void {
    this.#assertOpen();
    this.#send.run(endpointId, jobId, lowPriority ? 1 : 0, this.clock.now(), randomUUID());
  }

  /** Up to `max` visible messages, oldest first, left as they are (for a caller inside a write). */
  visibleSync(endpointId: string, nowMs: number, max: number): { seq: number; jobId: string }[] {
    return this.#visibleStatement(max)
      .all(endpointId, nowMs)
      .map((row) => ({ seq: row.seq, jobId: row.job_id }));
  }

  /**
   * The limit is written into the statement (one statement per limit, prepared once). A bound LIMIT
   * is a value SQLite's planner reads, so binding it marks the statement expired and each take
   * compiled the query again (sqlite3Reprepare under every receive in profiles; 12.5 → 8.4 µs a call).
   */
  #visibleStatement(max: number) {
    if (!Number.isSafeInteger(max) || max < 1) throw internal(`max must be a positive integer, got ${max}`);
    return prepared<[string, number], { seq: number; job_id: string }>(
      this.db,
      `SELECT seq, job_id FROM queue INDEXED BY queue_in_order WHERE endpoint_id = ? AND visible_at <= ?
         ORDER BY seq LIMIT ${max}`,
    );
  }

  /** Deletes a message by its sequence number (for a caller inside a write that consumed it). */
  deleteSync(seq: number): void {
    this.#delete.run(seq);
  }

  /**
   * One message arrived: wakes the longest-waiting poll of the endpoint, not all of them. Waking
   * every poll per send had each of them run a receive that found nothing (one send, one message).
   * A woken poll that takes nothing (it was leaving anyway) leaves the message to the next send's
   * wake-up or the cross-process poll.
   */
  wake(endpointId: string): void {
    const set = this.#waiters.get(endpointId);
    if (!set) return;
    for (const wake of set) {
      set.delete(wake);
      wake();
      return;
    }
  }

  async receive(endpointId: string, options: ReceiveOptions): Promise<QueueMessage[]> {
    const { max, visibilityMs, waitMs, signal } = options;
    if (!Number.isInteger(max) || max < 1) throw internal(`max must be a positive integer, got ${max}`);
    if (!(visibilityMs >= 0)) throw internal(`visibilityMs must be >= 0, got ${visibilityMs}`);
    return this.poll(endpointId, waitMs, signal, (nowMs) =>
      this.group.run(() =>
        this.visibleSync(endpointId, nowMs, max).map((message) => {
          const token = randomUUID();
          this.#hide.run(nowMs + visibilityMs, token, message.seq);
          return { jobId: message.jobId, receipt: `${message.seq}:${token}` };
        }),
      ),
    );
  }

  /**
   * A long poll over `attempt` (a receive, or a take that claims too): tries at once, then sleeps
   * until a send here wakes it, a hidden message turns visible again, the cross-process poll comes
   * round, the wait ends, or the caller wakes it itself (the take's hand-off, through `onNap`). No busy loop. [] when the wait ran out, the caller left or the queue closed.
   */
  async poll<T>(
    endpointId: string,
    waitMs: number,
    signal: AbortSignal | undefined,
    attempt: (nowMs: number) => Promise<T[]>,
    /** Gets the function that ends the nap about to begin (a hand-off wakes its own take with it). */
    onNap?: (wake: () => void) => void,
  ): Promise<T[]> {
    const deadlineMs = this.clock.now() + Math.max(0, waitMs);
    for (;;) {
      if (this.#closed || signal?.aborted) return [];
      const nowMs = this.clock.now();
      const found = await attempt(nowMs);
      if (found.length > 0 || nowMs >= deadlineMs) return found;
      const nextVisibleMs = this.#nextVisible.get(endpointId, nowMs)?.at ?? Number.POSITIVE_INFINITY;
      const napMs = Math.min(deadlineMs, nextVisibleMs) - nowMs;
      await this.#nap(endpointId, Math.min(napMs, this.crossProcessPollMs), signal, onNap);
    }
  }

  async ack(endpointId: string, receipt: string): Promise<void> {
    this.#assertOpen();
    const match = /^(\d+):([0-9a-f-]+)$/.exec(receipt);
    if (!match) throw internal('Malformed queue receipt');
    await this.group.run(() => this.#ack.run(endpointId, Number(match[1]), match[2]));
  }

  async depth(
    endpointId: string,
    options: { atMost?: number } = {},
  ): Promise<{ visible: number; urgent: number }> {
    this.#assertOpen();
    // LIMIT -1 is no limit in SQLite.
    const row = this.#depth.get({ endpoint: endpointId, now: this.clock.now(), limit: options.atMost ?? -1 });
    return { visible: row?.visible ?? 0, urgent: row?.urgent ?? 0 };
  }

  /** Ends every long poll (they answer []); the database closes the connection. */
  async close(): Promise<void> {
    this.#closed = true;
    for (const set of this.#waiters.values()) for (const wake of set) wake();
    this.#waiters.clear();
  }

  async #nap(
    endpointId: string,
    ms: number,
    signal: AbortSignal | undefined,
    onNap: ((wake: () => void) => void) | undefined,
  ): Promise<void> {
    const stop = new AbortController();
    const wake = (): void => stop.abort(woken);
    onNap?.(wake);
    let set = this.#waiters.get(endpointId);
    if (!set) {
      set = new Set();
      this.#waiters.set(endpointId, set);
    }
    set.add(wake);
    signal?.addEventListener('abort', wake, { once: true });
    try {
      await this.clock.sleep(ms, stop.signal);
    } finally {
      signal?.removeEventListener('abort', wake);
      set.delete(wake);
      if (set.size === 0 && this.#waiters.get(endpointId) === set) this.#waiters.delete(endpointId);
    }
  }

  #assertOpen(): void {
    if (this.#closed) throw new Error('The queue is closed');
  }
}

// ── control ───────────────────────────────────────────────────────────────────────────────────────

/**
 * Upserts keyed by each record's identity. Deleting an app or environment does not cascade: the CLI
 * removes an app's endpoints and environments first, so that it can stop their workers on the way.
 */
class SqliteControlStore implements ControlStore {
  constructor(private readonly db: Db) {}

  async putApp(app: AppRecord): Promise<void> {
    prepared(
      this.db,
      'INSERT INTO apps (name, body) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET body = excluded.body',
    ).run(app.name, JSON.stringify(app));
  }

  async getApp(name: string): Promise<AppRecord | undefined> {
    return this.#one<AppRecord>('SELECT body FROM apps WHERE name = ?', name);
  }

  async listApps(): Promise<AppRecord[]> {
    return this.#many<AppRecord>('SELECT body FROM apps ORDER BY name');
  }

  async deleteApp(name: string): Promise<void> {
    prepared(this.db, 'DELETE FROM apps WHERE name = ?').run(name);
  }

  async putEnvironment(env: EnvironmentRecord): Promise<void> {
    prepared(
      this.db,
      `INSERT INTO environments (app, name, body) VALUES (?, ?, ?)
         ON CONFLICT (app, name) DO UPDATE SET body = excluded.body`,
    ).run(env.app, env.name, JSON.stringify(env));
  }

  async getEnvironment(app: string, name: string): Promise<EnvironmentRecord | undefined> {
    return this.#one<EnvironmentRecord>(
      'SELECT body FROM environments WHERE app = ? AND name = ?',
      app,
      name,
    );
  }

  async listEnvironments(app: string): Promise<EnvironmentRecord[]> {
    return this.#many<EnvironmentRecord>('SELECT body FROM environments WHERE app = ? ORDER BY name', app);
  }

  async deleteEnvironment(app: string, name: string): Promise<void> {
    prepared(this.db, 'DELETE FROM environments WHERE app = ? AND name = ?').run(app, name);
  }

  async putEndpoint(endpoint: EndpointRecord): Promise<void> {
    prepared(
      this.db,
      `INSERT INTO endpoints (id, app, env, name, body) VALUES (?, ?, ?, ?, ?)
         ON CONFLICT (id) DO UPDATE SET app = excluded.app, env = excluded.env, name = excluded.name, body = excluded.body`,
    ).run(endpoint.id, endpoint.app, endpoint.env, endpoint.name, JSON.stringify(endpoint));
  }

  async getEndpoint(id: string): Promise<EndpointRecord | undefined> {
    return this.#one<EndpointRecord>('SELECT body FROM endpoints WHERE id = ?', id);
  }

  async listEndpoints(filter: { app?: string; env?: string } = {}): Promise<EndpointRecord[]> {
    return this.#many<EndpointRecord>(
      `SELECT body FROM endpoints WHERE (@app IS NULL OR app = @app) AND (@env IS NULL OR env = @env)
       ORDER BY app, env, name, id`,
      { app: filter.app ?? null, env: filter.env ?? null },
    );
  }

  async deleteEndpoint(id: string): Promise<void> {
    prepared(this.db, 'DELETE FROM endpoints WHERE id = ?').run(id);
  }

  async putApiKey(key: ApiKeyRecord): Promise<void> {
    try {
      prepared(
        this.db,
        `INSERT INTO api_keys (id, hash, created_at, body) VALUES (?, ?, ?, ?)
           ON CONFLICT (id) DO UPDATE SET hash = excluded.hash, created_at = excluded.created_at, body = excluded.body`,
      ).run(key.id, key.hash, key.createdAt, JSON.stringify(key));
    } catch (error) {
      // The only other constraint: the same key hash under a different id.
      if ((error as { code?: string }).code === 'SQLITE_CONSTRAINT_UNIQUE') {
        throw conflict('An API key with the same hash already exists');
      }
      throw error;
    }
  }

  async findApiKeyByHash(hash: string): Promise<ApiKeyRecord | undefined> {
    return this.#one<ApiKeyRecord>('SELECT body FROM api_keys WHERE hash = ?', hash);
  }

  async listApiKeys(): Promise<ApiKeyRecord[]> {
    return this.#many<ApiKeyRecord>('SELECT body FROM api_keys ORDER BY created_at, id');
  }

  async deleteApiKey(id: string): Promise<void> {
    prepared(this.db, 'DELETE FROM api_keys WHERE id = ?').run(id);
  }

  async close(): Promise<void> {
    // The connection belongs to the LocalDatabase.
  }

  #one<T>(sql: string, ...params: unknown[]): T | undefined {
    const row = prepared<unknown[], { body: string }>(this.db, sql).get(...params);
    return row ? (JSON.parse(row.body) as T) : undefined;
  }

  #many<T>(sql: string, ...params: unknown[]): T[] {
    return prepared<unknown[], { body: string }>(this.db, sql)
      .all(...params)
      .map((row) => JSON.parse(row.body) as T);
  }
}

// ── workers ───────────────────────────────────────────────────────────────────────────────────────

class SqliteWorkerRegistry implements WorkerRegistry {
  constructor(private readonly db: Db) {}

  async heartbeat(worker: WorkerRecord): Promise<void> {
    prepared(
      this.db,
      `INSERT INTO workers (worker_id, endpoint_id, last_seen_at, body) VALUES (?, ?, ?, ?)
         ON CONFLICT (worker_id) DO UPDATE SET endpoint_id = excluded.endpoint_id,
           last_seen_at = excluded.last_seen_at, body = excluded.body`,
    ).run(worker.workerId, worker.endpointId, worker.lastSeenAt, JSON.stringify(worker));
  }

  async get(workerId: string): Promise<WorkerRecord | undefined> {
    const row = prepared<[string], { body: string }>(
      this.db,
      'SELECT body FROM workers WHERE worker_id = ?',
    ).get(workerId);
    return row ? (JSON.parse(row.body) as WorkerRecord) : undefined;
  }

  async list(endpointId: string, sinceMs: number): Promise<WorkerRecord[]> {
    return prepared<[string, number], { body: string }>(
      this.db,
      'SELECT body FROM workers WHERE endpoint_id = ? AND last_seen_at >= ? ORDER BY worker_id',
    )
      .all(endpointId, sinceMs)
      .map((row) => JSON.parse(row.body) as WorkerRecord);
  }

  async remove(workerId: string): Promise<void> {
    prepared(this.db, 'DELETE FROM workers WHERE worker_id = ?').run(workerId);
  }
}
