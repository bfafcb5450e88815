/**
 * The local store's one-write requeue (EngineDeps.requeueQueued): a job goes back to IN_QUEUE with
 * its queue message in the same transaction, so a failed message write (a queue or database closed
 * under it, as when the platform stopped while a worker's exit was being handled) leaves the job as
 * it was, never IN_QUEUE with no message, which nothing ever takes. And a database already in that
 * state is repaired when the platform starts. Real SQLite, fake clock for the engine.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type LocalDatabase, openLocalDatabase } from '../../core/adapters/local/sqlite.js';
import { FakeClock } from '../../core/clock.js';
import { localEngine } from '../support/localEngine.js';
import { startTestPlatform } from '../support/platform.js';

const ep = 'ep';
let dir: string;
let db: LocalDatabase;
let clock: FakeClock;

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'ferry-requeue-'));
  clock = new FakeClock(Date.now());
  db = openLocalDatabase(join(dir, 'ferry.db'), { clock });
});
afterEach(async () => {
  await db.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('one-write requeue', () => {
  it('a requeue whose message cannot be written leaves the job running, not IN_QUEUE without a message', async () => {
    const engine = localEngine(db, clock, { leaseMs: 30_000, maxAttempts: 3 });
    const { id } = await engine.submit(ep, { input: {} }, { sync: false });
    expect(await engine.take(ep, 'w1', 1, 0)).toMatchObject([{ id }]);
    // What the platform's close did under a worker's exit: the queue (and database) closed first.
    await db.queue.close();
    await expect(engine.workerGone(ep, 'w1', 'Worker w1 was stopped')).rejects.toThrow();
    // Still IN_PROGRESS: the next start requeues it (requeueOrphans), as any job a worker held.
    expect((await db.jobs.get(id, clock.now()))?.status).toBe('IN_PROGRESS');
  });

  it('a requeue writes the move, the message and the clear of the old chunks together', async () => {
    const engine = localEngine(db, clock, { leaseMs: 30_000, maxAttempts: 3 });
    const { id } = await engine.submit(ep, { input: {} }, { sync: false });
    await engine.take(ep, 'w1', 1, 0);
    await db.jobs.appendStream(id, [{ n: 1 }]);
    expect(await engine.workerGone(ep, 'w1')).toBe(1);
    expect((await db.jobs.get(id, clock.now()))?.status).toBe('IN_QUEUE');
    expect((await db.queue.depth(ep)).visible).toBe(1);
    expect(await db.jobs.drainStream(id)).toEqual([]);
    expect(await engine.take(ep, 'w2', 1, 0)).toMatchObject([{ id }]);
  });
});

describe('repair at start', () => {
  it('an IN_QUEUE job with no queue message is queued again when the platform starts', async () => {
    // The state an earlier Ferry left: its move back to the queue written, its message not (the
    // engine composed of separate writes, as before requeueQueued).
    const composed = localEngine(db, clock, { leaseMs: 30_000, maxAttempts: 3 }, { composedTake: true });
    const { id } = await composed.submit(ep, { input: { n: 1 } }, { sync: false });
    await composed.take(ep, 'w1', 1, 0);
    await db.queue.close();
    await expect(composed.workerGone(ep, 'w1')).rejects.toThrow();
    expect((await db.jobs.get(id, clock.now()))?.status).toBe('IN_QUEUE');
    await db.control.putEndpoint({
      id: ep,
      app: 'test',
      env: 'production',
      name: ep,
      kind: 'queue',
      config: {},
      fingerprint: 'test',
      createdAt: clock.now(),
      updatedAt: clock.now(),
    });
    await db.close();

    const platform = await startTestPlatform({ dataDir: dir });
    try {
      const worker = platform.protocolWorker(ep);
      expect(await worker.take()).toMatchObject({ id, input: { n: 1 } });
    } finally {
      await platform.stop(false);
    }
  });
});
