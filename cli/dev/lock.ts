/**
 * One `ferry dev` per project: .ferry/dev.json says which process runs it and where (its dev server's
 * URL, and its platform's, which `ferry logs` and `ferry console` in the project folder use). Two
 * would share .ferry/ferry.db, and the second's start requeues the first's running jobs as orphans,
 * so they would run twice. A lock whose process is gone (killed, a crash) is taken over.
 */
import { linkSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { z } from 'zod';
import { securePrivateDir, unusableProjectFolder } from '../../core/adapters/local/home.js';
import { usage } from '../../core/errors.js';
import { commandLineHas, processAlive, readStateFile } from '../serve.js';

const devLockSchema = z
  .object({
    pid: z.number().int(),
    startedAt: z.number(),
    /** The dev server's URL, once it listens. */
    url: z.string().optional(),
    /** The in-process platform's URL (its API, management API and console), once it listens. */
    platformUrl: z.string().optional(),
  })
  .strict();
export type DevLockInfo = z.infer<typeof devLockSchema>;

export const devLockPath = (projectDir: string) => path.join(projectDir, '.ferry', 'dev.json');

function readDevLock(projectDir: string): DevLockInfo | undefined {
  return readStateFile(devLockPath(projectDir), devLockSchema);
}

/**
 * The `ferry dev` running for this project, from its lock: undefined when there is no lock, or its
 * process is gone, or (Linux) the pid is another program's by now (`ferry dev`, or its alias `run`).
 */
export function runningDev(projectDir: string): DevLockInfo | undefined {
  const lock = readDevLock(projectDir);
  if (!lock || !processAlive(lock.pid)) return undefined;
  if (lock.pid !== process.pid && commandLineHas(lock.pid, ['dev', 'run']) === false) return undefined;
  return lock;
}

/**
 * The `ferry dev` serving the project that `dir` is in: the nearest folder from `dir` up whose lock
 * names a running one, and that folder. `ferry logs` and `ferry console` run from a subfolder of the
 * project (its package, its tests) mean the dev running at the project's root, as a shell prompt in
 * a subfolder of a git repository means the repository.
 */
export function runningDevAbove(dir: string): (DevLockInfo & { projectDir: string }) | undefined {
  for (let folder = path.resolve(dir); ; folder = path.dirname(folder)) {
    const dev = runningDev(folder);
    if (dev) return { ...dev, projectDir: folder };
    if (path.dirname(folder) === folder) return undefined;
  }
}

export interface DevLock {
  /** Records where the dev server and its platform listen. */
  listening(urls: { url: string; platformUrl: string }): void;
  /** Removes the lock (when it is still this process's). Safe to call twice. */
  release(): void;
}

/**
 * Takes the project's lock, before anything opens .ferry/ferry.db; a usage error (exit 2) naming
 * the running one when another `ferry dev` holds it. Released on `release()`, and when the process
 * exits without it.
 */
export function takeDevLock(projectDir: string): DevLock {
  securePrivateDir(path.join(projectDir, '.ferry'), unusableProjectFolder);
  const file = devLockPath(projectDir);
  const info: DevLockInfo = { pid: process.pid, startedAt: Date.now() };
  const write = (target: string) =>
    writeFileSync(target, `${JSON.stringify(info)}\n`, { mode: 0o600, flag: 'w' });
  const temp = `${file}.${process.pid}.tmp`;
  write(temp);
  try {
    // link(2) creates the lock with its content in one step, and fails when one is there.
    for (let attempt = 0; ; attempt++) {
      try {
        linkSync(temp, file);
        break;
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'EEXIST' || attempt >= 3) throw error;
      }
      const holder = runningDev(projectDir);
      if (holder) throw alreadyRunning(holder);
      // Stale: its process is gone (or the file is unreadable). Take it over.
      rmSync(file, { force: true });
    }
  } finally {
    rmSync(temp, { force: true });
  }
  let released = false;
  const release = () => {
    if (released) return;
    released = true;
    process.off('exit', release);
    if (readDevLock(projectDir)?.pid === process.pid) rmSync(file, { force: true });
  };
  // A way out that skips `release()` (an uncaught error, process.exit) still lets go of the lock.
  process.on('exit', release);
  return {
    listening: (urls) => {
      if (released || readDevLock(projectDir)?.pid !== process.pid) return;
      Object.assign(info, urls);
      // Replaced in one step: a reader never sees half a file.
      write(temp);
      renameSync(temp, file);
    },
    release,
  };
}

function alreadyRunning(holder: DevLockInfo) {
  return usage(
    holder.url
      ? `ferry dev is already running for this project at ${holder.url} (pid ${holder.pid})`
      : `ferry dev is already starting for this project (pid ${holder.pid})`,
    'Use that one, or stop it (Ctrl+C in its terminal) before starting another: two would share .ferry/ferry.db and run its jobs twice.',
  );
}
