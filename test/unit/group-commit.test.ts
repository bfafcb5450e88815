/**
 * GroupCommit (core/adapters/local/sqlite.ts): writes queued in one event-loop turn share one
 * transaction. What its callers rely on:
 * - every write of a turn commits, in the order queued, and later writes see earlier ones;
 * - a write that throws rolls back alone (its own changes too) and its caller gets the error: the
 *   turn runs again with a savepoint per write, which a turn without a failure does not pay for;
 * - the savepoints' statement journal stays in memory on the platform's connection (no temporary
 *   file per commit), shown against a connection without the setting, which does open one.
 */
import { mkdtempSync, readdirSync, readlinkSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  configureConnection,
  GroupCommit,
  keepStatementJournalsInMemory,
  openLocalDatabase,
} from '../../core/adapters/local/sqlite.js';

let dir: string;
let db: Database.Database;

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'ferry-group-'));
  db = new Database(join(dir, 'ferry.db'));
  configureConnection(db);
  db.exec('CREATE TABLE items (id INTEGER PRIMARY KEY, label TEXT NOT NULL, body TEXT)');
});
afterEach(() => {
  db.close();
  rmSync(dir, { recursive: true, force: true });
});

const insert =
  (id: number, label: string, body: string | null = null) =>
  () =>
    db.prepare('INSERT INTO items (id, label, body) VALUES (?, ?, ?)').run(id, label, body).changes;
const labels = () => db.prepare('SELECT id, label FROM items ORDER BY id').all();

describe('GroupCommit', () => {
  it('commits every write of a turn in one transaction, in order, each seeing the ones before it', async () => {
    const group = new GroupCommit(db);
    const before = db.prepare('SELECT count(*) AS n FROM items');
    const first = group.run(insert(1, 'a'));
    // Queued in the same turn: sees row 1, which is not committed yet.
    const second = group.run(() => (before.get() as { n: number }).n);
    const third = group.run(insert(2, 'b'));
    expect(labels()).toEqual([]); // nothing is written before the turn ends
    await expect(Promise.all([first, second, third])).resolves.toEqual([1, 1, 1]);
    expect(labels()).toEqual([
      { id: 1, label: 'a' },
      { id: 2, label: 'b' },
    ]);
  });

  it('rolls a write that throws back alone, its own changes included; the others commit', async () => {
    const group = new GroupCommit(db);
    const ok1 = group.run(insert(1, 'kept'));
    const failing = group.run(() => {
      insert(2, 'undone')();
      throw new Error('the write failed after changing a row');
    });
    const duplicate = group.run(insert(1, 'same id again'));
    const ok2 = group.run(insert(3, 'kept too'));
    await expect(ok1).resolves.toBe(1);
    await expect(failing).rejects.toThrow('the write failed after changing a row');
    await expect(duplicate).rejects.toThrow(/UNIQUE constraint failed/);
    await expect(ok2).resolves.toBe(1);
    expect(labels()).toEqual([
      { id: 1, label: 'kept' },
      { id: 3, label: 'kept too' },
    ]);
  });

  it('runs each write once in a turn without a failure; after a failure, the others again, once committed', async () => {
    const group = new GroupCommit(db);
    const runs = new Map<number, number>();
    const counted = (id: number) => () => {
      runs.set(id, (runs.get(id) ?? 0) + 1);
      return insert(id, `row ${id}`)();
    };
    await Promise.all([group.run(counted(1)), group.run(counted(2))]);
    expect([...runs]).toEqual([
      [1, 1],
      [2, 1],
    ]);
    const written = [group.run(counted(3)), group.run(counted(1)), group.run(counted(4))];
    await expect(written[0]).resolves.toBe(1);
    await expect(written[1]).rejects.toThrow(/UNIQUE constraint failed/);
    await expect(written[2]).resolves.toBe(1);
    // The turn ran without savepoints up to the failure (then rolled back), then again with them:
    // the write before the failing one ran twice, the one after it once.
    expect([...runs]).toEqual([
      [1, 3],
      [2, 1],
      [3, 2],
      [4, 1],
    ]);
    expect(labels()).toEqual([1, 2, 3, 4].map((id) => ({ id, label: `row ${id}` })));
  });

  /** Links of this process's open files that are SQLite temporary files (unlinked "etilqs_" files). */
  const openTemporaryFiles = () =>
    readdirSync('/proc/self/fd').flatMap((fd) => {
      try {
        const target = readlinkSync(join('/proc/self/fd', fd));
        return target.includes('etilqs_') ? [target] : [];
      } catch {
        return []; // closed since the listing
      }
    });

  /**
   * A turn of writes whose savepoints journal more than SQLite's 64 KiB in-memory spill limit (each
   * updates every row, 40 rows of 8 KB), and what temporary files are open at its last write.
   */
  async function temporaryFilesOfABigGroup(group: GroupCommit) {
    const body = 'x'.repeat(8_000);
    db.transaction(() => {
      for (let id = 1; id <= 40; id++) insert(id, 'row', body)();
    })();
    const writes = Array.from({ length: 4 }, (_, i) =>
      group.run(() => db.prepare('UPDATE items SET label = ?').run(`pass ${i}`)),
    );
    const seen = group.run(openTemporaryFiles);
    await Promise.all(writes);
    return seen;
  }

  it.runIf(process.platform === 'linux')(
    'keeps the savepoints’ statement journal in memory: no temporary file is opened',
    async () => {
      keepStatementJournalsInMemory(db);
      expect(db.pragma('temp_store', { simple: true })).toBe(2); // MEMORY
      await expect(temporaryFilesOfABigGroup(new GroupCommit(db))).resolves.toEqual([]);
      expect(db.prepare("SELECT count(*) AS n FROM items WHERE label = 'pass 3'").get()).toEqual({ n: 40 });
    },
  );

  it.runIf(process.platform === 'linux')(
    'opens no savepoint for a turn without a failure: its statement journal is never written',
    async () => {
      // The default temp_store: a journal past 64 KiB would be a file. Each write changes 40 rows of
      // 8 KB in a column no constraint guards, so only a savepoint would journal them.
      const body = 'x'.repeat(8_000);
      db.transaction(() => {
        for (let id = 1; id <= 40; id++) insert(id, 'row', body)();
      })();
      const commit = new GroupCommit(db);
      const group = <T>(work: () => T) => commit.run(work);
      const rewrite = (i: number) => () => db.prepare('UPDATE items SET body = ?').run(`${i}${body}`).changes;
      const clean = [group(rewrite(1)), group(rewrite(2)), group(openTemporaryFiles)];
      await expect(Promise.all(clean)).resolves.toEqual([40, 40, []]);
      // The same turn with a failing write in it runs again, each write in a savepoint: journalled.
      const failing = () => {
        throw new Error('failed');
      };
      const rerun = [group(rewrite(3)), group(failing), group(rewrite(4)), group(openTemporaryFiles)];
      const settled = await Promise.allSettled(rerun);
      expect(settled.map((outcome) => outcome.status)).toEqual([
        'fulfilled',
        'rejected',
        'fulfilled',
        'fulfilled',
      ]);
      expect((settled[3] as PromiseFulfilledResult<string[]>).value.length).toBeGreaterThan(0);
      expect(db.prepare('SELECT count(*) AS n FROM items WHERE body = ?').get(`4${body}`)).toEqual({ n: 40 });
    },
  );

  it('is how the platform opens its database', async () => {
    const local = openLocalDatabase(join(dir, 'platform.db'));
    try {
      // The store's connection (private to it): the setting belongs to a connection, not to the file.
      const connection = (local.jobs as unknown as { db: Database.Database }).db;
      expect(connection.pragma('temp_store', { simple: true })).toBe(2);
    } finally {
      await local.close();
    }
  });

  it.runIf(process.platform === 'linux')(
    'the in-memory check can fail: with the default temp_store the same group spills its journal to a file',
    async () => {
      expect(db.pragma('temp_store', { simple: true })).toBe(0); // DEFAULT: files
      const seen = await temporaryFilesOfABigGroup(new GroupCommit(db));
      expect(seen.length).toBeGreaterThan(0);
    },
  );
});
