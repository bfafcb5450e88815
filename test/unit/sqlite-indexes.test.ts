/**
 * Indexes of the local database that decide what a query costs, and their migration from a database
 * an older Ferry wrote. The queries name their index (INDEXED BY), so a missing one fails them.
 *
 * - The log store's two kinds of lines: a job's (read by job, deleted with the job) and a worker's own
 *   (read by endpoint, deleted by age), each with its partial index.
 * - Health's counts read the jobs' status index alone (it carries expires_at and retries).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { type LocalDatabase, openLocalDatabase } from '../../core/adapters/local/sqlite.js';
import type { LogLine } from '../../core/ports.js';

let dir: string;
let db: LocalDatabase;

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'ferry-logs-'));
  db = openLocalDatabase(join(dir, 'ferry.db'));
});
afterEach(async () => {
  await db.close();
  rmSync(dir, { recursive: true, force: true });
});

const line = (text: string, atMs: number, jobId?: string): LogLine => ({
  endpointId: 'ep',
  workerId: 'w1',
  atMs,
  stream: 'stderr',
  text,
  ...(jobId ? { jobId } : {}),
});

it("reads one job's lines in order, a page at a time, among other jobs' and the worker's own", async () => {
  const lines: LogLine[] = [];
  for (let i = 0; i < 50; i++) {
    lines.push(line(`worker ${i}`, 1_000 + i));
    lines.push(line(`a ${i}`, 1_000 + i, 'job-a'));
    lines.push(line(`b ${i}`, 1_000 + i, 'job-b'));
  }
  await db.logs.append(lines);
  const first = await db.logs.read({ endpointId: 'ep', jobId: 'job-a', limit: 30 });
  expect(first.lines.map((l) => l.text)).toEqual(Array.from({ length: 30 }, (_, i) => `a ${i}`));
  const rest = await db.logs.read({ endpointId: 'ep', jobId: 'job-a', after: first.next, limit: 30 });
  expect(rest.lines.map((l) => l.text)).toEqual(Array.from({ length: 20 }, (_, i) => `a ${i + 30}`));
  // Another endpoint's reader sees none of them.
  expect((await db.logs.read({ endpointId: 'other', jobId: 'job-a', limit: 10 })).lines).toEqual([]);
  // The endpoint's view has all three kinds, in the order they were written.
  const all = await db.logs.read({ endpointId: 'ep', limit: 6 });
  expect(all.lines.map((l) => l.text)).toEqual(['worker 0', 'a 0', 'b 0', 'worker 1', 'a 1', 'b 1']);
});

it("drops the worker's own lines by age and leaves every job's lines to their job", async () => {
  await db.logs.append([
    line('old worker line', 1_000),
    line('new worker line', 5_000),
    line('old job line', 1_000, 'job-a'),
  ]);
  expect(await db.logs.deleteWorkerLinesBefore(2_000)).toBe(1);
  const left = await db.logs.read({ endpointId: 'ep', limit: 10 });
  expect(left.lines.map((l) => l.text)).toEqual(['new worker line', 'old job line']);
});

/** The indexes of `table` (not the automatic ones of keys), by name. */
function indexesOf(table: string): string[] {
  const check = new Database(join(dir, 'ferry.db'), { readonly: true });
  try {
    return check
      .prepare<[string], { name: string }>(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ? AND sql IS NOT NULL ORDER BY name",
      )
      .all(table)
      .map((r) => r.name);
  } finally {
    check.close();
  }
}

it("replaces an older database's indexes: two partial ones for logs, a covering one for job counts", async () => {
  await db.close();
  const raw = new Database(join(dir, 'ferry.db'));
  raw.exec(`DROP INDEX logs_of_jobs; DROP INDEX logs_of_workers; DROP INDEX jobs_of_endpoint_by_status;
    CREATE INDEX logs_by_job ON logs (job_id, seq); CREATE INDEX logs_by_time ON logs (at_ms);
    CREATE INDEX jobs_by_endpoint_status ON jobs (endpoint_id, status, created_at);`);
  raw.close();
  db = openLocalDatabase(join(dir, 'ferry.db'));
  expect(indexesOf('logs')).toEqual(['logs_by_endpoint', 'logs_of_jobs', 'logs_of_workers']);
  expect(indexesOf('jobs')).toContain('jobs_of_endpoint_by_status');
  expect(indexesOf('jobs')).not.toContain('jobs_by_endpoint_status');
  // The counts still read right after the migration.
  expect(await db.jobs.counts('ep', 0)).toEqual({
    completed: 0,
    failed: 0,
    inProgress: 0,
    inQueue: 0,
    retried: 0,
  });
});
