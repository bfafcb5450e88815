/**
 * The local job store alone (`node dist/bench/store.js`, after a build): CPU per job for the writes
 * the platform makes for each job, as the front door drives them under load, against a bare
 * better-sqlite3 floor in the same process doing the least a durable job needs (its row inserted,
 * then updated when taken and when done) in as many transactions.
 *
 * Why a store-only figure: the platform's CPU per job in part (a) of bench/run.ts moves by 10 to 20 %
 * between two runs of the same build (batch sizes follow the host's speed, and with them the requests
 * per job), so a change of a few percent in the store cannot be seen there. Here there is no HTTP, no
 * worker and no batching that depends on timing: each round is 16 creates in one group commit, two
 * takes of 8 (inputs as text, as the take answer wants them), then for each job a read without its
 * input and the done's compare-and-set, 8 to a group.
 *
 * Knobs: FERRY_BENCH_STORE_ROUNDS (2000 rounds of 16 jobs, after 300 untimed), FERRY_BENCH_STORE_BYTES
 * (the echo text's size; 0 is a short text).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { configureConnection, openLocalDatabase } from '../core/adapters/local/sqlite.js';
import type { Job } from '../core/job.js';
import { envInt, round, say } from './lib/util.js';

const rounds = envInt('FERRY_BENCH_STORE_ROUNDS', 2000);
const textBytes = envInt('FERRY_BENCH_STORE_BYTES', 0);
const warmUpRounds = 300;
const perRound = 16;
const perTake = 8;
const text = textBytes > 0 ? 'x'.repeat(textBytes) : 'echo me';

/** µs of this process's CPU per job over `rounds` rounds of `one`, after the warm-up rounds. */
async function cpuPerJob(one: (round: number) => Promise<void> | void): Promise<number> {
  for (let r = 0; r < warmUpRounds; r++) await one(r);
  const before = process.cpuUsage();
  for (let r = 0; r < rounds; r++) await one(warmUpRounds + r);
  const used = process.cpuUsage(before);
  return round((used.user + used.system) / (rounds * perRound));
}

/** A job id as the engine makes them: time-ordered, so the key index grows at its end. */
const jobId = (round: number, i: number) =>
  `${String(round * perRound + i).padStart(12, '0')}-0000-4000-8000-000000000000-u1`;

async function ferryStore(dir: string): Promise<number> {
  const db = openLocalDatabase(join(dir, 'ferry.db'));
  const jobOf = (r: number, i: number): Job => {
    const now = Date.now();
    return {
      id: jobId(r, i),
      endpointId: 'echo',
      status: 'IN_QUEUE',
      input: { i, text },
      policy: { executionTimeoutMs: 600_000, ttlMs: 86_400_000, lowPriority: false },
      sync: false,
      retentionMs: 1_800_000,
      createdAt: now,
      expiresAt: now + 86_400_000,
      attempt: 0,
      retries: 0,
      version: 1,
    };
  };
  try {
    return await cpuPerJob(async (r) => {
      await Promise.all(Array.from({ length: perRound }, (_, i) => db.createQueued(jobOf(r, i))));
      for (const workerId of ['w1', 'w2']) {
        const now = Date.now();
        const taken = await db.takeQueued('echo', {
          max: perTake,
          waitMs: 0,
          inputAsText: true,
          claim: (job) => ({
            status: 'IN_PROGRESS',
            workerId,
            startedAt: now,
            leaseUntil: now + 30_000,
            attempt: job.attempt + 1,
          }),
        });
        await Promise.all(
          taken.map(async ({ after }) => {
            const job = await db.jobs.get(after.id, Date.now(), { input: false });
            if (!job) throw new Error(`job ${after.id} vanished`);
            const finishedAt = Date.now();
            const done = await db.jobs.update(job, {
              status: 'COMPLETED',
              finishedAt,
              leaseUntil: undefined,
              output: { i: r, text },
              error: undefined,
              expiresAt: finishedAt + 1_800_000,
            });
            if (!done.ok) throw new Error(`job ${after.id} lost its compare-and-set`);
          }),
        );
      }
    });
  } finally {
    await db.close();
  }
}

/** The floor: one table, the job as JSON, inserted then updated twice, in as many transactions. */
async function bareSqlite(dir: string): Promise<number> {
  const db = new Database(join(dir, 'bare.db'));
  configureConnection(db);
  db.exec('CREATE TABLE jobs (id TEXT PRIMARY KEY, status TEXT NOT NULL, body TEXT NOT NULL)');
  const insert = db.prepare('INSERT INTO jobs (id, status, body) VALUES (?, ?, ?)');
  const next = db.prepare<[], { id: string; body: string }>(
    `SELECT id, body FROM jobs WHERE status = 'IN_QUEUE' ORDER BY id LIMIT ${perTake}`,
  );
  const claim = db.prepare("UPDATE jobs SET status = 'IN_PROGRESS' WHERE id = ?");
  const finish = db.prepare("UPDATE jobs SET status = 'COMPLETED', body = ? WHERE id = ?");
  db.exec("CREATE INDEX jobs_queued ON jobs (status, id) WHERE status = 'IN_QUEUE'");
  const create = db.transaction((r: number) => {
    for (let i = 0; i < perRound; i++)
      insert.run(jobId(r, i), 'IN_QUEUE', JSON.stringify({ input: { i, text } }));
  });
  const take = db.transaction(() => {
    const rows = next.all();
    for (const row of rows) claim.run(row.id);
    return rows;
  });
  const complete = db.transaction((ids: string[], r: number) => {
    for (const id of ids) finish.run(JSON.stringify({ output: { i: r, text } }), id);
  });
  try {
    return await cpuPerJob((r) => {
      create(r);
      for (let t = 0; t < perRound / perTake; t++) {
        complete(
          take().map((row) => row.id),
          r,
        );
      }
    });
  } finally {
    db.close();
  }
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'ferry-bench-store-'));
  try {
    say(`store bench: ${rounds} rounds of ${perRound} jobs, echo text ${text.length} bytes`);
    const floor = await bareSqlite(dir);
    const ferry = await ferryStore(dir);
    process.stdout.write(
      `${JSON.stringify({ rounds, jobsPerRound: perRound, textBytes: text.length, ferryStoreUsPerJob: ferry, bareSqliteUsPerJob: floor, ratio: round(ferry / floor, 2) })}\n`,
    );
    say(
      `Ferry's local store ${ferry} µs of CPU per job, bare SQLite ${floor} µs: ${round(ferry / floor, 2)}× the floor`,
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
