/**
 * The serving platform's WAL checkpoints, on a thread of their own.
 *
 * SQLite runs an automatic checkpoint inside the commit that takes the WAL past wal_autocheckpoint,
 * on the thread that committed (https://www.sqlite.org/c3ref/wal_autocheckpoint.html): for the
 * platform that is its event loop, which answers no request while the WAL is synced, its pages
 * copied into the file and the file synced. Under load that came every few seconds: /run's 99.9th
 * percentile at 16 clients was 42 ms with it and 16.9 ms with this thread (medians of alternated
 * rounds, bench/results.md, twentieth pass).
 *
 * So the platform's connection stops checkpointing itself (wal_autocheckpoint = 0), and a worker
 * thread with a connection of its own to the same file checkpoints instead, PASSIVE: a checkpoint
 * that never waits for a lock nor invokes the busy handler, so it never holds up the platform's
 * writes, and copies the frames committed when it began
 * (https://www.sqlite.org/c3ref/wal_checkpoint_v2.html). Every `everyCommits` group commits, and
 * every `sweepMs` in which rows changed since the last checkpoint started:
 *
 * 1. copy: the thread runs passes while the platform goes on committing, until a pass finds fewer
 *    than `tailFrames` new frames (each pass copies what was committed during the one before);
 * 2. finish: the platform holds its next group commits (requests are still read and answered; the
 *    writes wait in the group) while the thread runs one last pass, which therefore copies every
 *    frame and syncs the file; then the platform commits what it held.
 *
 * Why the second step: the WAL starts again from its beginning only when a write begins after a
 * checkpoint that copied every frame ("Avoiding Excessively Large WAL Files",
 * https://www.sqlite.org/wal.html). With the platform committing every few milliseconds, passes
 * alone nearly always end a few frames short, and the WAL grew without bound (to 1.8 GB in a
 * four-second write loop).
 *
 * Durability does not change: commits are in the WAL, which is synced before a checkpoint copies it
 * (the thread's connection has the platform's `synchronous`). If the thread fails or ends on its
 * own, the platform's connection checkpoints itself again, at the threshold it had, and commits
 * whatever was held.
 */
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import type Database from 'better-sqlite3';

export interface CheckpointerOptions {
  /** The database file the platform's connection has open. */
  path: string;
  /** The platform's `synchronous`, which decides the checkpoint's syncs. */
  synchronous: 'NORMAL' | 'FULL';
  /** Group commits between two checkpoint requests. */
  everyCommits: number;
  /** Passes the copy step may run while commits keep leaving frames behind. */
  maxPasses: number;
  /** New frames below which the copy step stops and the finish step holds the writes. */
  tailFrames: number;
  /** Longest the writes are held for the finish step; past it they are committed anyway. */
  holdLimitMs: number;
  /**
   * How often the connection's changed rows are looked at: a checkpoint starts when any row changed
   * since the last one started. That covers writes made outside the group commit (a worker's
   * registration, a stream's chunks, records), which committed() never hears of, and a trickle of
   * commits that would take long to reach `everyCommits`.
   */
  sweepMs: number;
}

/** The platform's group commit, as the checkpointer sees it (GroupCommit). */
export interface HeldWrites {
  /** Commits nothing until release(); writes keep joining the group. */
  hold(): void;
  /** Commits what was held, and everything after as before. */
  release(): void;
}

/** What a step's passes left: the WAL's frames and how many of them are in the file. */
export interface CheckpointOutcome {
  step: 'copy' | 'finish';
  log: number;
  checkpointed: number;
  passes: number;
}

/**
 * The thread's program, run from source text (eval): one text serves both the built JavaScript and
 * the TypeScript sources the tests load, whose transform would rewrite a function's `import()` into
 * a helper the thread does not have. It gets everything through `import()` and `workerData`.
 *
 * `copy` runs passes until one finds under `tailFrames` new frames (a pass's `log` is the WAL's
 * frame count when it began: what it grew by is what the platform committed during the pass
 * before), then syncs the file: the finish step syncs it too, with the writes held, and is left the
 * pages of the last few frames to sync. `finish` runs one pass.
 */
const threadProgram = `(async () => {
  const { workerData, parentPort } = await import('node:worker_threads');
  const { closeSync, fdatasyncSync, openSync } = await import('node:fs');
  const Sqlite = (await import(workerData.driver)).default;
  const db = new Sqlite(workerData.path, { fileMustExist: true });
  db.pragma('synchronous = ' + workerData.synchronous);
  const file = openSync(workerData.path, 'r');
  const pass = () => db.pragma('wal_checkpoint(PASSIVE)')[0];
  parentPort.on('message', (step) => {
    if (step === 'close') {
      closeSync(file);
      db.close();
      parentPort.close();
      return;
    }
    let row = pass();
    let passes = 1;
    for (let before = 0; step === 'copy' && passes < workerData.maxPasses; passes++) {
      if (row.log - before < workerData.tailFrames) break;
      before = row.log;
      row = pass();
    }
    if (step === 'copy') fdatasyncSync(file);
    parentPort.postMessage({ step, log: row.log, checkpointed: row.checkpointed, passes });
  });
})();`;

export class WalCheckpointer {
  readonly #writes: HeldWrites;
  readonly #options: CheckpointerOptions;
  readonly #thread: Worker;
  /** Resolves when the thread has ended, however it ended. */
  readonly #ended: Promise<void>;
  #commits = 0;
  /** What the thread is doing: nothing, a copy step, or the finish step (the writes held). */
  #step: 'idle' | 'copy' | 'finish' | 'ended' = 'idle';
  #holdLimit: NodeJS.Timeout | undefined;
  /** Rows the connection has changed in all (SQLite's total_changes()). */
  readonly #changes: () => number;
  /** #changes() when the last checkpoint started: the sweep starts one when it moved. */
  #changesAtStart: number;
  readonly #sweep: NodeJS.Timeout;
  #onOutcome: ((outcome: CheckpointOutcome) => void) | undefined;

  /** Starts the thread and stops `db` (the platform's connection) checkpointing by itself. */
  constructor(db: Database.Database, writes: HeldWrites, options: CheckpointerOptions) {
    this.#writes = writes;
    this.#options = options;
    const previousThreshold = db.pragma('wal_autocheckpoint', { simple: true }) as number;
    const driver = pathToFileURL(createRequire(import.meta.url).resolve('better-sqlite3')).href;
    this.#thread = new Worker(threadProgram, {
      eval: true,
      workerData: {
        driver,
        path: options.path,
        synchronous: options.synchronous,
        maxPasses: options.maxPasses,
        tailFrames: options.tailFrames,
      },
    });
    // Never what keeps the process alive: close() ends it, and a process that exits without close
    // leaves the WAL whole (a checkpoint cut short is redone from the WAL).
    this.#thread.unref();
    this.#thread.on('message', (outcome: CheckpointOutcome) => this.#stepDone(outcome));
    this.#ended = new Promise((resolve) => {
      this.#thread.once('exit', () => {
        if (this.#step !== 'ended') {
          // Ended without close(): back to checkpoints in the commits, as before the thread.
          this.#end();
          if (db.open) db.pragma(`wal_autocheckpoint = ${previousThreshold}`);
        }
        resolve();
      });
    });
    // An error ends the thread ('exit' follows); it must not become an uncaught exception here.
    this.#thread.on('error', () => {});
    const totalChanges = db.prepare('SELECT total_changes()').pluck();
    this.#changes = () => totalChanges.get() as number;
    this.#changesAtStart = this.#changes();
    this.#sweep = setInterval(() => {
      if (this.#step === 'idle' && this.#changes() !== this.#changesAtStart) this.#start();
    }, options.sweepMs);
    this.#sweep.unref();
    db.pragma('wal_autocheckpoint = 0');
  }

  /** Counts a group commit; every `everyCommits`th starts a checkpoint when none is under way. */
  committed(): void {
    if (++this.#commits >= this.#options.everyCommits && this.#step === 'idle') this.#start();
  }

  /** Called with what each step left (tests and benches watch the thread through it). */
  onOutcome(listener: ((outcome: CheckpointOutcome) => void) | undefined): void {
    this.#onOutcome = listener;
  }

  /** Ends the thread (after the step under way) and commits anything held. */
  async close(): Promise<void> {
    if (this.#step !== 'ended') {
      this.#end();
      // Kept alive until it has closed its connection: unreferenced, a process with nothing else
      // left to do would end here, its top-level await unsettled (exit code 13).
      this.#thread.ref();
      this.#thread.postMessage('close');
    }
    await this.#ended;
  }

  /** Ends the thread as a crash would (tests). */
  async kill(): Promise<void> {
    await this.#thread.terminate();
    await this.#ended;
  }

  #start(): void {
    this.#commits = 0;
    this.#changesAtStart = this.#changes();
    this.#step = 'copy';
    this.#thread.postMessage('copy');
  }

  #stepDone(outcome: CheckpointOutcome): void {
    if (this.#step === 'ended') return;
    if (outcome.step === 'copy') {
      this.#step = 'finish';
      this.#writes.hold();
      this.#holdLimit = setTimeout(() => this.#release(), this.#options.holdLimitMs);
      this.#thread.postMessage('finish');
    } else {
      this.#release();
      this.#step = 'idle';
    }
    this.#onOutcome?.(outcome);
  }

  #release(): void {
    clearTimeout(this.#holdLimit);
    this.#holdLimit = undefined;
    this.#writes.release();
  }

  /** No more steps; what the finish step held is committed. */
  #end(): void {
    clearInterval(this.#sweep);
    if (this.#step === 'finish') this.#release();
    this.#step = 'ended';
  }
}
