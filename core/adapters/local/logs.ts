/**
 * Job and worker logs in the local database (the `logs` table of sqlite.ts). A job's lines are
 * deleted with the job (its retention, in SqliteJobStore.deleteExpired); a worker's own lines after
 * `limits.workerLogRetentionMs` (deleteWorkerLinesBefore, from the platform's sweep).
 */
import type Database from 'better-sqlite3';
import { badRequest } from '../../errors.js';
import type { LogLine, LogPage, LogQuery, LogStore } from '../../ports.js';

interface LogRow {
  seq: number;
  endpoint_id: string;
  worker_id: string;
  job_id: string | null;
  at_ms: number;
  stream: 'stdout' | 'stderr';
  text: string;
}

export class SqliteLogStore implements LogStore {
  readonly #insert;
  readonly #insertMany;
  readonly #byJob;
  readonly #byEndpoint;
  readonly #last;

  /**
   * `group` is the database's group commit (sqlite.ts): a worker prints a line per job, and a
   * transaction of its own per line was one more commit per job.
   */
  constructor(
    private readonly db: Database.Database,
    private readonly group?: { run<T>(work: () => T): Promise<T> },
  ) {
    this.#insert = db.prepare(
      'INSERT INTO logs (endpoint_id, worker_id, job_id, at_ms, stream, text) VALUES (?, ?, ?, ?, ?, ?)',
    );
    this.#insertMany = db.transaction((lines: readonly LogLine[]) => this.#insertLines(lines));
    this.#byJob = db.prepare<[string, string, number, number, number, number], LogRow>(
      `SELECT * FROM logs INDEXED BY logs_of_jobs
       WHERE job_id = ? AND endpoint_id = ? AND seq > ? AND at_ms >= ? AND at_ms <= ? ORDER BY seq LIMIT ?`,
    );
    this.#byEndpoint = db.prepare<[string, number, number, number, number], LogRow>(
      `SELECT * FROM logs WHERE endpoint_id = ? AND seq > ? AND at_ms >= ? AND at_ms <= ? ORDER BY seq LIMIT ?`,
    );
    this.#last = db.prepare<[], { seq: number | null }>('SELECT MAX(seq) AS seq FROM logs');
  }

  #insertLines(lines: readonly LogLine[]): void {
    for (const l of lines)
      this.#insert.run(l.endpointId, l.workerId, l.jobId ?? null, l.atMs, l.stream, l.text);
  }

  async append(lines: readonly LogLine[]): Promise<void> {
    if (lines.length === 0) return;
    // In the turn's transaction (GroupCommit); alone, a BEGIN IMMEDIATE of its own.
    if (this.group) await this.group.run(() => this.#insertLines(lines));
    else this.#insertMany.immediate(lines);
  }

  /**
   * `follow` changes nothing here: lines are numbered (`seq`) as they are stored, so a cursor past
   * one line is past every line stored before it, whatever their timestamps.
   */
  async read(query: LogQuery): Promise<LogPage> {
    const after = cursorOf(query.after);
    const since = query.sinceMs ?? 0;
    const until = query.untilMs ?? Number.MAX_SAFE_INTEGER;
    const rows =
      query.jobId !== undefined
        ? this.#byJob.all(query.jobId, query.endpointId, after, since, until, query.limit)
        : this.#byEndpoint.all(query.endpointId, after, since, until, query.limit);
    const lastSeq = rows.at(-1)?.seq ?? after;
    const more = rows.length === query.limit;
    return {
      lines: rows.map(lineOf),
      next: String(lastSeq),
      more,
      ended: query.untilMs !== undefined && !more,
    };
  }

  /** The cursor of "from now on" (`ferry logs --follow` with no history wanted). */
  async tail(): Promise<string> {
    return String(this.#last.get()?.seq ?? 0);
  }

  /** Drops worker lines written before `beforeMs`; job lines go with their job. */
  async deleteWorkerLinesBefore(beforeMs: number): Promise<number> {
    return this.db
      .prepare('DELETE FROM logs INDEXED BY logs_of_workers WHERE job_id IS NULL AND at_ms < ?')
      .run(beforeMs).changes;
  }
}

function cursorOf(after: string | undefined): number {
  if (after === undefined || after === '') return 0;
  if (!/^\d{1,15}$/.test(after)) throw badRequest('after is not a cursor this API handed out');
  return Number(after);
}

function lineOf(row: LogRow): LogLine {
  return {
    atMs: row.at_ms,
    endpointId: row.endpoint_id,
    workerId: row.worker_id,
    ...(row.job_id !== null ? { jobId: row.job_id } : {}),
    stream: row.stream,
    text: row.text,
  };
}
