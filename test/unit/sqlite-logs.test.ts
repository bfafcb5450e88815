/**
 * The local log store's two kinds of lines: a job's (read by job, deleted with the job) and a worker's
 * own (read by endpoint, deleted by age). Each kind has its partial index, which the queries name
 * (a missing one fails the query), and a database written by an older Ferry loses the two indexes
 * every line was written to before.
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

it('replaces the indexes of an older database with the two partial ones', async () => {
  await db.close();
  const raw = new Database(join(dir, 'ferry.db'));
  raw.exec('CREATE INDEX logs_by_job ON logs (job_id, seq); CREATE INDEX logs_by_time ON logs (at_ms);');
  raw.close();
  db = openLocalDatabase(join(dir, 'ferry.db'));
  const check = new Database(join(dir, 'ferry.db'), { readonly: true });
  const names = check
    .prepare<[], { name: string }>(
      "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'logs' AND sql IS NOT NULL ORDER BY name",
    )
    .all()
    .map((r) => r.name);
  check.close();
  expect(names).toEqual(['logs_by_endpoint', 'logs_of_jobs', 'logs_of_workers']);
});
