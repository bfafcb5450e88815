/**
 * The local job store keeps each field a move changes in a column of its own and writes only the
 * columns a move changed (SQLite rewrites every index holding an assigned column); the job's JSON
 * body holds what it keeps from its submit and is not written again by a take, a ping or a done.
 * This checks, through a second connection to the file, that after every kind of move the columns
 * say what the store reads back, that the body holds none of those fields and is rewritten only by a
 * move that changes one of its own (?ttl), that a job's input is written once, in job_inputs, and
 * that files written by the earlier layouts open with every job as it was.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { type LocalDatabase, openLocalDatabase } from '../../core/adapters/local/sqlite.js';
import { FakeClock } from '../../core/clock.js';
import type { JobEngine } from '../../core/engine.js';
import { FerryError } from '../../core/errors.js';
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
  finished_at: number | null;
  worker_id: string | null;
  attempt: number;
  run_deadline: number | null;
  retries: number;
  version: number;
  output: string | null;
  error: string | null;
  body: string;
}

/** The fields stored in columns, so never in the body. */
const movingFields = [
  'status',
  'createdAt',
  'expiresAt',
  'leaseUntil',
  'startedAt',
  'finishedAt',
  'workerId',
  'attempt',
  'retries',
  'version',
  'output',
  'error',
  'input',
];

const rowOf = (jobId: string) =>
  raw
    .prepare<[string], Row>(
      `SELECT status, created_at, expires_at, lease_until, started_at, finished_at, worker_id, attempt,
         run_deadline, retries, version, output, error, body FROM jobs WHERE id = ?`,
    )
    .get(jobId)!;

/** The row's columns, and the same columns as the job the store reads back says they should be. */
async function columnsOf(jobId: string) {
  const { body, ...columns } = rowOf(jobId);
  const job = (await db.jobs.get(jobId, 0))!;
  const expected = {
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
    output: job.output === undefined ? null : JSON.stringify(job.output),
    error: job.error ?? null,
  };
  return { columns, expected, body };
}

it('after every move the columns match the stored job, and only a move of a body field rewrites the body', async () => {
  const { id } = await engine.submit(ep, { input: { n: 1 } }, { sync: false, executionTimeoutMs: 60_000 });
  const submitted = rowOf(id).body;
  const check = async (step: string, bodyAs = submitted) => {
    const { columns, expected, body } = await columnsOf(id);
    expect({ step, ...columns }).toEqual({ step, ...expected });
    expect({ step, fields: Object.keys(JSON.parse(body)).filter((f) => movingFields.includes(f)) }).toEqual({
      step,
      fields: [],
    });
    expect({ step, body }).toEqual({ step, body: bodyAs });
  };
  await check('submit');
  clock.advance(1_000);
  await engine.take(ep, 'w1', 1, 0);
  await check('take');
  clock.advance(1_000);
  await engine.ping(ep, 'w1', [id]);
  await check('ping');
  clock.advance(30_000);
  await engine.sweep();
  await check('lease lapsed: requeued');
  await engine.take(ep, 'w2', 1, 0);
  await check('taken again');
  await engine.done(ep, 'w2', id, { status: 'IN_PROGRESS', output: 'half' });
  await check('progress');
  await engine.done(ep, 'w2', id, { error: 'boom' });
  await check('failed');
  // ?ttl changes the job's retention, a field of the body.
  await engine.status(ep, id, 5_000);
  const afterTtl = rowOf(id).body;
  expect(JSON.parse(afterTtl)).toMatchObject({ retentionMs: 5_000 });
  await check('?ttl', afterTtl);
  clock.advance(1_000);
  await engine.retry(ep, id);
  await check('retry', afterTtl);
  await engine.cancel(ep, id);
  await check('cancel', afterTtl);
  expect(rowOf(id)).toMatchObject({ status: 'CANCELLED', retries: 1, lease_until: null, output: null });
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
  expect(rowOf(id)).toMatchObject({ status: 'COMPLETED', version: 3, output: '{"ok":true}' });
  expect(inputRows(id)).toEqual([{ input: JSON.stringify(input) }]);
  expect((await db.jobs.get(id, clock.now()))?.input).toEqual(input);
  expect((await db.jobs.listByStatus(ep, 'COMPLETED', clock.now(), 10)).map((j) => j.input)).toEqual([input]);

  clock.advance(24 * 3600_000);
  expect(await db.jobs.deleteExpired(clock.now(), 10)).toBe(1);
  expect(inputRows(id)).toEqual([]);
});

/**
 * The jobs table as schemas 1 and 2 wrote it: the query columns, and the whole job in the body
 * (schema 1 with its input in it too).
 */
function writeOldLayout(file: string, schema: 1 | 2, job: Job): void {
  const old = new Database(file);
  old.exec(`CREATE TABLE jobs (id TEXT PRIMARY KEY, endpoint_id TEXT NOT NULL, status TEXT NOT NULL,
    created_at INTEGER NOT NULL, expires_at INTEGER NOT NULL, lease_until INTEGER, started_at INTEGER,
    run_deadline INTEGER, retries INTEGER NOT NULL, version INTEGER NOT NULL, body TEXT NOT NULL)`);
  if (schema === 2)
    old.exec('CREATE TABLE job_inputs (job_id TEXT PRIMARY KEY, input TEXT NOT NULL) WITHOUT ROWID');
  const { input, ...rest } = job;
  old
    .prepare(
      `INSERT INTO jobs VALUES (@id, @endpointId, @status, @createdAt, @expiresAt, @leaseUntil, @startedAt,
         @runDeadline, @retries, @version, @body)`,
    )
    .run({
      ...job,
      input: undefined,
      leaseUntil: job.leaseUntil ?? null,
      startedAt: job.startedAt ?? null,
      runDeadline: runDeadlineOf(job) ?? null,
      body: JSON.stringify(schema === 1 ? job : rest),
    });
  if (schema === 2) old.prepare('INSERT INTO job_inputs VALUES (?, ?)').run(job.id, JSON.stringify(input));
  old.pragma(`user_version = ${schema}`);
  old.close();
}

const oldJob = (id: string): Job => ({
  id,
  endpointId: ep,
  status: 'COMPLETED',
  input: { n: 7, seed: '\u0000ferry-int:18446744073709551615' },
  webhook: 'https://example.test/hook',
  policy: { executionTimeoutMs: 60_000, ttlMs: 86_400_000, lowPriority: false },
  sync: false,
  retentionMs: 1_800_000,
  createdAt: 1_000,
  startedAt: 2_000,
  finishedAt: 3_000,
  expiresAt: 1_803_000,
  // An integer beyond 2^53 as its marker, a float and an escaped quote: kept as written.
  output: { seed: '\u0000ferry-int:18446744073709551615', f: 0.1, e: 1.5e300, s: 'a "q"' },
  error: 'partly "failed"',
  workerId: 'w-9',
  attempt: 2,
  retries: 1,
  version: 4,
});

for (const schema of [1, 2] as const) {
  it(`opens a schema-${schema} file with each job as it was, its moving fields in columns`, async () => {
    await db.close();
    raw.close();
    const file = join(dir, `schema-${schema}.db`);
    const job = oldJob('old-1');
    writeOldLayout(file, schema, job);

    db = openLocalDatabase(file, { clock });
    raw = new Database(file, { readonly: true });
    expect(await db.jobs.get(job.id, 0)).toEqual(job);
    expect(Object.keys(bodyOf(job.id)).sort()).toEqual(
      ['endpointId', 'id', 'policy', 'retentionMs', 'sync', 'webhook'].sort(),
    );
    expect(rowOf(job.id)).toMatchObject({
      finished_at: 3_000,
      worker_id: 'w-9',
      attempt: 2,
      output: JSON.stringify(job.output),
      error: 'partly "failed"',
    });
    expect(inputRows(job.id)).toEqual([{ input: JSON.stringify(job.input) }]);
    expect(raw.pragma('user_version', { simple: true })).toBe(3);
    // The columns it gained are a move's to write like any other's; its body stays as it was moved.
    const body = rowOf(job.id).body;
    const moved = await db.jobs.update(job, { status: 'IN_QUEUE', output: undefined, error: undefined });
    expect(moved.ok).toBe(true);
    expect(rowOf(job.id)).toMatchObject({ status: 'IN_QUEUE', output: null, error: null, version: 5, body });
  });
}

it('refuses a file a newer Ferry wrote as the user’s error (exit 2) with the way on, and leaves it as it was', async () => {
  await db.close();
  raw.close();
  const file = join(dir, 'newer.db');
  const newer = new Database(file);
  newer.pragma('user_version = 99');
  newer.close();
  let refused: unknown;
  try {
    openLocalDatabase(file, { clock });
  } catch (error) {
    refused = error;
  }
  expect(refused).toBeInstanceOf(FerryError);
  expect(refused).toMatchObject({ code: 'usage', hint: expect.stringContaining('Upgrade Ferry') });
  expect((refused as Error).message).toContain('schema 99; this one reads up to 3');
  raw = new Database(file, { readonly: true });
  expect(raw.pragma('user_version', { simple: true })).toBe(99);
  db = openLocalDatabase(join(dir, 'other.db'), { clock });
});
