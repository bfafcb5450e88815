/**
 * The local job store writes only the query columns a move changed (SQLite rewrites every index
 * holding an assigned column). This checks that after every kind of move the columns the queries
 * filter on still say what the stored job says, read back through a second connection to the file;
 * and that a job's input is written once, in job_inputs, never again in the row every move rewrites.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { type LocalDatabase, openLocalDatabase } from '../../core/adapters/local/sqlite.js';
import { FakeClock } from '../../core/clock.js';
import type { JobEngine } from '../../core/engine.js';
import { type Job, runDeadlineOf } from '../../core/job.js';
import { localEngine } from '../support/localEngine.js';

const ep = 'ep';
let dir: string;
let clock: FakeClock;
let db: LocalDatabase;
let engine: JobEngine;
let raw: Database.Database;

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'ferry-columns-'));
  clock = new FakeClock();
  db = openLocalDatabase(join(dir, 'ferry.db'), { clock });
  engine = localEngine(db, clock, { leaseMs: 30_000, maxAttempts: 3 });
  raw = new Database(join(dir, 'ferry.db'), { readonly: true });
});
afterEach(async () => {
  raw.close();
  await db.close();
  rmSync(dir, { recursive: true, force: true });
});

interface Row {
  status: string;
  created_at: number;
  expires_at: number;
  lease_until: number | null;
  started_at: number | null;
  run_deadline: number | null;
  retries: number;
  version: number;
  body: string;
}

/** The row's columns, and the same columns as the stored body says they should be. */
function columnsOf(jobId: string) {
  const row = raw
    .prepare<[string], Row>(
      `SELECT status, created_at, expires_at, lease_until, started_at, run_deadline, retries, version, body
         FROM jobs WHERE id = ?`,
    )
    .get(jobId)!;
  const job = JSON.parse(row.body) as Job;
  const { body: _body, ...columns } = row;
  const expected = {
    status: job.status,
    created_at: job.createdAt,
    expires_at: job.expiresAt,
    lease_until: job.leaseUntil ?? null,
    started_at: job.startedAt ?? null,
    run_deadline: runDeadlineOf(job) ?? null,
    retries: job.retries,
    version: job.version,
  };
  return { columns, expected };
}

it('after every move the query columns match the stored job', async () => {
  const { id } = await engine.submit(ep, { input: { n: 1 } }, { sync: false, executionTimeoutMs: 60_000 });
  const check = (step: string) => {
    const { columns, expected } = columnsOf(id);
    expect({ step, ...columns }).toEqual({ step, ...expected });
  };
  check('submit');
  clock.advance(1_000);
  await engine.take(ep, 'w1', 1, 0);
  check('take');
  clock.advance(1_000);
  await engine.ping(ep, 'w1', [id]);
  check('ping');
  clock.advance(30_000);
  await engine.sweep();
  check('lease lapsed: requeued');
  await engine.take(ep, 'w2', 1, 0);
  check('taken again');
  await engine.done(ep, 'w2', id, { status: 'IN_PROGRESS', output: 'half' });
  check('progress');
  await engine.done(ep, 'w2', id, { error: 'boom' });
  check('failed');
  await engine.status(ep, id, 5_000);
  check('?ttl');
  clock.advance(1_000);
  await engine.retry(ep, id);
  check('retry');
  await engine.cancel(ep, id);
  check('cancel');
  expect(columnsOf(id).columns).toMatchObject({ status: 'CANCELLED', retries: 1, lease_until: null });
});

const inputRows = (jobId: string) =>
  raw.prepare<[string], { input: string }>('SELECT input FROM job_inputs WHERE job_id = ?').all(jobId);
const bodyOf = (jobId: string) =>
  JSON.parse(raw.prepare<[string], { body: string }>('SELECT body FROM jobs WHERE id = ?').get(jobId)!.body);

it('keeps the input out of the row every move rewrites: written once, read back with the job, deleted with it', async () => {
  const input = { prompt: 'x'.repeat(70_000), n: 1 };
  const { id } = await engine.submit(ep, { input }, { sync: false, executionTimeoutMs: 60_000 });
  const [taken] = await engine.take(ep, 'w1', 1, 0);
  expect(taken).toMatchObject({ id, input });
  await engine.done(ep, 'w1', id, { output: { ok: true } });
  expect(bodyOf(id)).not.toHaveProperty('input');
  expect(bodyOf(id)).toMatchObject({ id, status: 'COMPLETED', version: 3 });
  expect(inputRows(id)).toEqual([{ input: JSON.stringify(input) }]);
  expect((await db.jobs.get(id, clock.now()))?.input).toEqual(input);
  expect((await db.jobs.listByStatus(ep, 'COMPLETED', clock.now(), 10)).map((j) => j.input)).toEqual([input]);

  clock.advance(24 * 3600_000);
  expect(await db.jobs.deleteExpired(clock.now(), 10)).toBe(1);
  expect(inputRows(id)).toEqual([]);
});

it('moves the inputs of a schema-1 file (input inside jobs.body) into job_inputs when it opens', async () => {
  const { id } = await engine.submit(ep, { input: { n: 7 } }, { sync: false, executionTimeoutMs: 60_000 });
  const file = join(dir, 'ferry.db');
  await db.close();
  // What schema 1 left on disk: the input inside the body, no job_inputs rows, user_version 1.
  const old = new Database(file);
  old.prepare(`UPDATE jobs SET body = json_set(body, '$.input', json('{"n":7}')) WHERE id = ?`).run(id);
  old.exec('DELETE FROM job_inputs');
  old.pragma('user_version = 1');
  old.close();

  db = openLocalDatabase(file, { clock });
  expect((await db.jobs.get(id, clock.now()))?.input).toEqual({ n: 7 });
  expect(bodyOf(id)).not.toHaveProperty('input');
  expect(inputRows(id)).toEqual([{ input: '{"n":7}' }]);
  expect(raw.pragma('user_version', { simple: true })).toBe(2);
});
