/**
 * The WAL checkpointer (core/adapters/local/checkpointer.ts), on real SQLite files and a real worker
 * thread. What the platform relies on:
 * - its connection never checkpoints in a commit (wal_autocheckpoint 0) and the thread does: the
 *   pages reach the database file, and the WAL starts over instead of growing with every commit;
 *   writes outside the group commit are checkpointed too (the sweep);
 * - no commit lands while the finish step holds the writes (GroupCommit.hold), and every held write
 *   commits once after it;
 * - a thread that ends without close() gives the connection its own checkpoints back and leaves no
 *   write held;
 * - openLocalDatabase starts it for the serving platform only (checkpointOnThread).
 */
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  type CheckpointOutcome,
  type HeldWrites,
  WalCheckpointer,
} from '../../core/adapters/local/checkpointer.js';
import { configureConnection, GroupCommit, openLocalDatabase } from '../../core/adapters/local/sqlite.js';
import { makeJob } from '../contract/helpers.js';
import { until } from '../support/until.js';

let dir: string;
let path: string;
let db: Database.Database;
let checkpointer: WalCheckpointer | undefined;
/** The last row id written (write()). */
let lastId = 0;

beforeEach(() => {
  lastId = 0;
  dir = mkdtempSync(join(tmpdir(), 'ferry-checkpoints-'));
  path = join(dir, 'ferry.db');
  db = new Database(path);
  configureConnection(db);
  db.exec('CREATE TABLE items (id INTEGER PRIMARY KEY, label TEXT NOT NULL, body TEXT NOT NULL)');
  db.exec('CREATE INDEX items_by_label ON items (label)');
});
afterEach(async () => {
  await checkpointer?.close();
  checkpointer = undefined;
  if (db.open) db.close();
  rmSync(dir, { recursive: true, force: true });
});

const pace = { everyCommits: 20, maxPasses: 20, tailFrames: 64, holdLimitMs: 1_000, sweepMs: 60_000 };
const walBytes = () => statSync(`${path}-wal`).size;
const fileBytes = () => statSync(path).size;

/**
 * A group commit whose hold and release go through a spy, and a checkpointer on it: `seen` counts
 * the holds, the releases and the commits that landed while the writes were held.
 */
function started(options = pace) {
  const seen = { heldCommits: 0, holds: 0, releases: 0, held: false };
  let group: GroupCommit | undefined;
  const spy: HeldWrites = {
    hold() {
      seen.holds++;
      seen.held = true;
      group!.hold();
    },
    release() {
      seen.releases++;
      seen.held = false;
      group!.release();
    },
  };
  group = new GroupCommit(db, () => {
    if (seen.held) seen.heldCommits++;
    checkpointer!.committed();
  });
  checkpointer = new WalCheckpointer(db, spy, { path, synchronous: 'NORMAL', ...options });
  const outcomes: CheckpointOutcome[] = [];
  checkpointer.onOutcome((outcome) => outcomes.push(outcome));
  return { group, seen, outcomes };
}

/**
 * 16 writers, each inserting a row at a time through the group, until `rows` are written or, when
 * given, `enough()` holds; answers the ids written (numbered on from the last call's).
 */
async function write(group: GroupCommit, rows: number, enough = () => false): Promise<number[]> {
  const ids: number[] = [];
  let started = 0;
  const insert = db.prepare('INSERT INTO items (id, label, body) VALUES (?, ?, ?)');
  await Promise.all(
    Array.from({ length: 16 }, async () => {
      while (started < rows && !enough()) {
        started++;
        const id = ++lastId;
        await group.run(() => insert.run(id, `label-${(id * 7919) % 1000}`, 'x'.repeat(300)));
        ids.push(id);
      }
    }),
  );
  return ids;
}

describe('WalCheckpointer', () => {
  it('checkpoints on its thread: the pages reach the file, and the WAL starts over', async () => {
    const fileBefore = fileBytes();
    const { group, seen, outcomes } = started();
    expect(db.pragma('wal_autocheckpoint', { simple: true })).toBe(0);
    const finished = () => outcomes.filter((o) => o.step === 'finish');
    // The first checkpoint, then the WAL's frames written after it, until they are four times the
    // WAL file as it was then (as large as it had ever been).
    const first = await write(group, 200_000, () => finished().length >= 1);
    const walAfterFirst = walBytes();
    const framesSince = () =>
      finished()
        .slice(1)
        .reduce((sum, o) => sum + o.log, 0);
    const more = await write(group, 400_000, () => framesSince() * 4_096 > 4 * walAfterFirst);
    expect(framesSince() * 4_096).toBeGreaterThan(4 * walAfterFirst);
    // Every finish step copied every frame (no commit landed during it).
    for (const outcome of finished()) expect(outcome.checkpointed).toBe(outcome.log);
    // Each finish step held the writes (and released them); no commit landed while they were held.
    expect(seen.holds).toBeGreaterThanOrEqual(finished().length);
    expect(seen.releases).toBeGreaterThanOrEqual(seen.holds);
    expect(seen.heldCommits).toBe(0);
    // The WAL started over after each finish step: the WAL file holds less than the frames written
    // since the first checkpoint, which a WAL that never starts over would hold on top of the rest.
    expect(walBytes()).toBeLessThan(framesSince() * 4_096);
    // The rows are in the database file itself, not only in the WAL.
    expect(fileBytes()).toBeGreaterThan(fileBefore + 1_000_000);
    const ids = [...first, ...more];
    expect(db.prepare('SELECT count(*) AS n FROM items').get()).toEqual({ n: ids.length });
  });

  it('GroupCommit.hold keeps writes queued, uncommitted, until release commits them in one turn', async () => {
    const commits: number[] = [];
    const group = new GroupCommit(db, () => commits.push(Date.now()));
    const insert = db.prepare('INSERT INTO items (id, label, body) VALUES (?, ?, ?)');
    group.hold();
    const writes = [1, 2, 3].map((id) => group.run(() => insert.run(id, 'held', 'x').changes));
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(commits).toEqual([]);
    expect(db.prepare('SELECT count(*) AS n FROM items').get()).toEqual({ n: 0 });
    group.release();
    await expect(Promise.all(writes)).resolves.toEqual([1, 1, 1]);
    expect(commits).toHaveLength(1);
    expect(db.prepare('SELECT count(*) AS n FROM items').get()).toEqual({ n: 3 });
  });

  it('checkpoints writes made outside the group commit too', async () => {
    const fileBefore = fileBytes();
    const { outcomes } = started({ ...pace, everyCommits: 1_000_000, sweepMs: 50 });
    const insert = db.prepare('INSERT INTO items (id, label, body) VALUES (?, ?, ?)');
    for (let id = 1; id <= 2_000; id++) insert.run(id, `label-${id % 97}`, 'x'.repeat(300));
    await until('a finish step', () => outcomes.some((o) => o.step === 'finish'), Boolean, 10_000);
    expect(fileBytes()).toBeGreaterThan(fileBefore + 500_000);
    // Nothing changed since: the sweeps start no other checkpoint.
    const steps = outcomes.length;
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(outcomes).toHaveLength(steps);
  });

  it('gives the connection its own checkpoints back when the thread ends without close(), holding nothing', async () => {
    const { group, seen } = started();
    // Killed right after the copy step, while its finish step holds the writes.
    const killed = new Promise<void>((resolve) =>
      checkpointer!.onOutcome((outcome) => {
        if (outcome.step === 'copy') void checkpointer!.kill().then(resolve);
      }),
    );
    await Promise.all([write(group, 1_000), killed]);
    expect(db.pragma('wal_autocheckpoint', { simple: true })).toBe(10_000);
    expect(seen.held).toBe(false);
    await expect(group.run(() => db.prepare('SELECT count(*) AS n FROM items').get())).resolves.toEqual({
      n: 1_000,
    });
  });

  it('is started by openLocalDatabase for the serving platform only', async () => {
    const servingDir = mkdtempSync(join(tmpdir(), 'ferry-checkpoints-serving-'));
    try {
      // 600 creates, each committed in a turn of its own: a few thousand WAL frames, under the
      // 10 000 at which a connection checkpoints itself.
      const filled = async (file: string, checkpointOnThread: boolean) => {
        const local = openLocalDatabase(file, { checkpointOnThread });
        const before = statSync(file).size;
        for (let i = 0; i < 600; i++)
          await local.jobs.create(makeJob({ id: `job-${i}`, endpointId: 'ep', createdAt: 1_000 + i }));
        await new Promise((resolve) => setTimeout(resolve, 500));
        const grown = statSync(file).size - before;
        await local.close();
        return grown;
      };
      expect(await filled(join(servingDir, 'serving.db'), true)).toBeGreaterThan(100_000);
      expect(await filled(join(servingDir, 'cli.db'), false)).toBe(0);
    } finally {
      rmSync(servingDir, { recursive: true, force: true });
    }
  });
});
