/**
 * The contract suites against the local provider: a real SQLite file (better-sqlite3, WAL) and a
 * real folder, in temp directories removed after each test.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, rm, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { build } from 'esbuild';
import { describe, expect, it, vi } from 'vitest';
import { FileBlobStore } from '../../core/adapters/local/files.js';
import { openLocalDatabase } from '../../core/adapters/local/sqlite.js';
import { FakeClock, systemClock } from '../../core/clock.js';
import { describeBlobStoreContract } from './blobStore.contract.js';
import { describeControlStoreContract } from './controlStore.contract.js';
import { expectFerryError, makeJob } from './helpers.js';
import { describeJobQueueContract } from './jobQueue.contract.js';
import { describeJobStoreContract } from './jobStore.contract.js';
import { describeWorkerRegistryContract } from './workerRegistry.contract.js';

async function openTemp(clock = new FakeClock() as FakeClock | typeof systemClock) {
  const dir = await mkdtemp(join(tmpdir(), 'ferry-local-contract-'));
  const db = openLocalDatabase(join(dir, 'state', 'ferry.db'), { clock });
  return {
    db,
    dir,
    async close() {
      await db.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

describeJobStoreContract('sqlite', async () => {
  const t = await openTemp();
  return { jobs: t.db.jobs, close: t.close };
});

describeJobQueueContract('sqlite on a fake clock', async () => {
  const clock = new FakeClock();
  const t = await openTemp(clock);
  return { queue: t.db.queue, clock, close: t.close };
});

// The same suite on wall time, the way it runs against an SQS emulator (short waits: ~1 s in all).
describeJobQueueContract(
  'sqlite on the system clock',
  async () => {
    const t = await openTemp(systemClock);
    return { queue: t.db.queue, close: t.close };
  },
  { visibilityMs: 100, longPollMs: 250 },
);

describeControlStoreContract('sqlite', async () => {
  const t = await openTemp();
  return { control: t.db.control, close: t.close };
});

describeWorkerRegistryContract('sqlite', async () => {
  const t = await openTemp();
  return { workers: t.db.workers, close: t.close };
});

describeBlobStoreContract('files', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'ferry-blobs-'));
  const blobs = new FileBlobStore(join(dir, 'blobs'));
  return {
    blobs,
    async close() {
      await blobs.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
});

// ── SQLite specifics (not part of any contract) ────────────────────────────────────────────────────

describe('local SQLite database', () => {
  it('works in memory and closes twice without error', async () => {
    const db = openLocalDatabase(':memory:');
    await db.jobs.create(makeJob({ id: 'mem-1', createdAt: 1_000 }));
    expect((await db.jobs.get('mem-1', 1_000))?.id).toBe('mem-1');
    await db.close();
    await db.close();
  });

  it('ends a waiting long poll with [] when the database closes', async () => {
    const clock = new FakeClock();
    const db = openLocalDatabase(':memory:', { clock });
    const waiting = db.queue.receive('ep', { max: 1, visibilityMs: 1_000, waitMs: 60_000 });
    await vi.waitFor(() => expect(clock.pendingSleeps()).toBe(1));
    await db.close();
    expect(await waiting).toEqual([]);
  });

  it('refuses malformed receipts and limits as internal errors (our own arguments)', async () => {
    const db = openLocalDatabase(':memory:');
    try {
      await expectFerryError(db.queue.ack('ep', 'not-a-receipt'), 'internal');
      await expectFerryError(db.queue.receive('ep', { max: 0, visibilityMs: 1_000, waitMs: 0 }), 'internal');
      await expectFerryError(db.jobs.listByStatus('ep', 'IN_QUEUE', 0, 0), 'internal');
    } finally {
      await db.close();
    }
  });

  it('keeps expired jobs that never ended until the engine finalises them', async () => {
    const db = openLocalDatabase(':memory:');
    try {
      await db.jobs.create(makeJob({ id: 'stuck', createdAt: 0, expiresAt: 100 }));
      expect(await db.jobs.deleteExpired(1_000, 100)).toBe(0);
      expect((await db.jobs.listExpiredUnfinished(1_000, 10)).map((j) => j.id)).toEqual(['stuck']);
      await db.jobs.update((await db.jobs.get('stuck', 0))!, { status: 'CANCELLED' });
      expect(await db.jobs.deleteExpired(1_000, 100)).toBe(1);
    } finally {
      await db.close();
    }
  });

  it('keeps a job, its chunks and its queue message when the process is killed with SIGKILL', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'ferry-kill9-'));
    const child = { process: undefined as ChildProcess | undefined };
    try {
      // Bundle a tiny writer around the real adapter, run it in its own process, kill -9 it once it
      // has written, then read the file back from here.
      const script = join(dir, 'writer.mjs');
      await build({
        stdin: {
          contents: `
            import { openLocalDatabase } from './core/adapters/local/sqlite.ts';
            const db = openLocalDatabase(process.argv[2]);
            const job = ${JSON.stringify(makeJob({ id: 'kill9-job', endpointId: 'ep-k', createdAt: 1_000 }))};
            await db.jobs.create(job);
            await db.jobs.appendStream(job.id, [{ n: 1 }, { n: 2 }]);
            await db.queue.send('ep-k', job.id, { lowPriority: false });
            process.stdout.write('written\\n');
            setInterval(() => {}, 1000);
          `,
          resolveDir: process.cwd(),
          loader: 'ts',
        },
        bundle: true,
        platform: 'node',
        format: 'esm',
        target: 'node20',
        external: ['better-sqlite3'],
        outfile: script,
        logLevel: 'silent',
      });
      const dbPath = join(dir, 'state', 'ferry.db');
      // The ESM bundle resolves better-sqlite3 from the project's node_modules through a symlink.
      await symlink(join(process.cwd(), 'node_modules'), join(dir, 'node_modules'), 'dir');
      const proc = spawn(process.execPath, [script, dbPath], {
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      child.process = proc;
      let stderr = '';
      proc.stderr.on('data', (d) => {
        stderr += String(d);
      });
      await new Promise<void>((resolve, reject) => {
        proc.stdout.on('data', (d) => {
          if (String(d).includes('written')) resolve();
        });
        proc.on('exit', (code) => reject(new Error(`writer exited early (${code}): ${stderr}`)));
      });
      const exited = new Promise((resolve) => proc.on('exit', resolve));
      proc.kill('SIGKILL');
      await exited;

      const db = openLocalDatabase(dbPath);
      try {
        expect((await db.jobs.get('kill9-job', 1_000))?.status).toBe('IN_QUEUE');
        expect(await db.jobs.drainStream('kill9-job')).toEqual([{ n: 1 }, { n: 2 }]);
        const got = await db.queue.receive('ep-k', { max: 10, visibilityMs: 1_000, waitMs: 0 });
        expect(got.map((m) => m.jobId)).toEqual(['kill9-job']);
      } finally {
        await db.close();
      }
    } finally {
      if (child.process && child.process.exitCode === null) child.process.kill('SIGKILL');
      await rm(dir, { recursive: true, force: true });
    }
  });
});
