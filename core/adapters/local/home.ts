/**
 * FERRY_HOME's file modes (docs/security.md): the folder is 0700 and the database and key files in it
 * are 0600, so neither another OS user nor a worker run as another user (`ferry serve --worker-user`)
 * can read the client key, the encrypted secrets' key or any endpoint's jobs. Modes are set when the
 * files are created and tightened on every start when something (an older Ferry, a copy, a umask)
 * left them looser.
 */
import { chmodSync, closeSync, existsSync, lstatSync, mkdirSync, openSync, statSync } from 'node:fs';
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

/** A folder of Ferry's that cannot be made or made private, and what to do about it. */
export type UnusableFolder = (dir: string, reason: string) => FerryError;

/** FERRY_HOME (or ~/.ferry): a path the user chose, so choosing another is the way out. */
export const unusableFerryHome: UnusableFolder = (dir, reason) =>
  usage(
    `Cannot use ${dir} as Ferry's folder: ${reason}`,
    'Set FERRY_HOME to a folder you can write (and own), or unset it to use ~/.ferry.',
  );

/**
 * A project's .ferry folder (builds, `ferry dev`'s state): FERRY_HOME has nothing to do with it; the
 * project folder's permissions do.
 */
export const unusableProjectFolder: UnusableFolder = (dir, reason) =>
  usage(
    `Cannot write ${dir}: ${reason}`,
    `Fix the permissions of ${dirname(dir)} so that you can write it, or run Ferry from a copy of the project that you own.`,
  );

/**
 * Creates `dir` as 0700 (or tightens it) and tightens the private files already in it. A folder that
 * cannot be made, or made private (one of another user's: only its owner may chmod it), is the
 * user's to fix: `unusable` says how (by default: FERRY_HOME's way).
 */
export function securePrivateDir(dir: string, unusable: UnusableFolder = unusableFerryHome): void {
  try {
    mkdirSync(dir, { recursive: true, mode: privateDirMode });
    tighten(dir, privateDirMode);
    for (const name of privateFiles) {
      const file = join(dir, name);
      if (existsSync(file)) tighten(file, privateFileMode);
    }
  } catch (error) {
    const code = (error as NodeJS.ErrnoException)?.code;
    const notOwner = code === 'EPERM' && (error as NodeJS.ErrnoException).syscall === 'chmod';
    const where = (error as NodeJS.ErrnoException).path ?? dir;
    const reason = notOwner
      ? `${where === dir ? 'it' : where} belongs to another user, and only its owner may make it private (chmod)`
      : unusableFolderReason(error);
    if (reason) throw unusable(dir, reason);
    throw error;
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

/**
 * The folder of the endpoints' own folders (FERRY_HOME-runtime, with a worker user): the platform's,
 * 0711, so workers pass through to their own folder but list no other endpoint's (their ids and
 * names, other apps' too). One another user made first is refused, not used: whoever owns it could
 * swap an endpoint's folder in it for a link that the platform then follows as root.
 */
export function secureRuntimeDir(dir: string): void {
  mkdirSync(dir, { recursive: true, mode: 0o711 });
  const found = lstatSync(dir);
  if (!found.isDirectory() || found.uid !== process.getuid?.()) {
    throw new FerryError(
      'usage',
      `Workers' folders cannot be kept in ${dir}: it is ${found.isDirectory() ? "another user's folder" : 'not a folder'}`,
      { hint: `Remove ${dir} (the platform makes it), or put FERRY_HOME elsewhere` },
    );
  }
  chmodSync(dir, 0o711);
}
