/**
 * FERRY_HOME's file modes (docs/security.md): the folder is 0700 and the database and key files in it
 * are 0600, so neither another OS user nor a worker run as another user (`ferry serve --worker-user`)
 * can read the client key, the encrypted secrets' key or any endpoint's jobs. Modes are set when the
 * files are created and tightened on every start when something (an older Ferry, a copy, a umask)
 * left them looser.
 */
import { chmodSync, closeSync, existsSync, mkdirSync, openSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { FerryError, usage } from '../../errors.js';

export const privateDirMode = 0o700;
export const privateFileMode = 0o600;

/** Files under FERRY_HOME that hold secrets or every tenant's data. */
const privateFiles = ['ferry.db', 'ferry.db-wal', 'ferry.db-shm', 'api-key', 'secrets.key'];

/**
 * Why a folder could not be made or written, when that is for the person who chose its path to fix
 * (a file in the way, no permission, a read-only file system); undefined for anything else.
 */
export function unusableFolderReason(error: unknown): string | undefined {
  const why: Record<string, string> = {
    EEXIST: 'a file is in the way',
    ENOTDIR: 'a part of its path is a file, not a folder',
    EACCES: 'permission denied',
    EPERM: 'permission denied',
    EROFS: 'the file system is read-only',
  };
  return why[(error as NodeJS.ErrnoException)?.code ?? ''];
}

/** Creates `dir` as 0700 (or tightens it) and tightens the private files already in it. */
export function securePrivateDir(dir: string): void {
  try {
    mkdirSync(dir, { recursive: true, mode: privateDirMode });
  } catch (error) {
    // A path the user chose (FERRY_HOME): theirs to fix, not a bug of ours.
    const reason = unusableFolderReason(error);
    if (reason)
      throw usage(
        `Cannot use ${dir} as Ferry's folder: ${reason}`,
        'Set FERRY_HOME to a folder you can write, or unset it to use ~/.ferry.',
      );
    throw error;
  }
  tighten(dir, privateDirMode);
  for (const name of privateFiles) {
    const file = join(dir, name);
    if (existsSync(file)) tighten(file, privateFileMode);
  }
}

/**
 * Makes sure `file` exists with mode 0600 before anything writes to it. SQLite gives its -wal and -shm
 * files the mode of the database file, so creating ferry.db this way covers all three.
 */
export function createPrivateFile(file: string): void {
  if (!existsSync(file)) closeSync(openSync(file, 'a', privateFileMode));
  tighten(file, privateFileMode);
}

/** Drops any permission bit beyond `mode` (never widens). */
function tighten(path: string, mode: number): void {
  const current = statSync(path).mode & 0o777;
  if ((current & ~mode) !== 0) chmodSync(path, current & mode);
}

/**
 * Workers run as other OS users (`ferry serve --worker-user` / `--worker-uids`) read their code from
 * `dir` (FERRY_HOME-runtime): every folder above it must let others through (the x bit for others),
 * or no deployed endpoint's worker can start. Checked at start, with the folder that stops them.
 */
export function assertReachableByWorkers(dir: string): void {
  for (let folder = dirname(dir); ; folder = dirname(folder)) {
    if (existsSync(folder) && (statSync(folder).mode & 0o001) === 0) {
      throw new FerryError(
        'usage',
        `Workers run as other users cannot reach ${dir}: ${folder} does not let other users through`,
        {
          hint: `Put FERRY_HOME in a folder other users may enter (e.g. FERRY_HOME=/var/lib/ferry/home), or chmod o+x ${folder}`,
        },
      );
    }
    if (dirname(folder) === folder) return;
  }
}
