/**
 * `ferry serve` plumbing: server.json (pid, url) in FERRY_HOME says where a platform runs; deploy
 * probes it and, when nothing answers, starts `ferry serve --detach`, which returns once /v2 answers.
 */
import { spawn } from 'node:child_process';
import { existsSync, openSync, readFileSync, rmSync, statSync } from 'node:fs';
import { createServer } from 'node:net';
import path from 'node:path';
import { z } from 'zod';
import { privateFileMode, securePrivateDir } from '../core/adapters/local/home.js';
import { FerryError, usage } from '../core/errors.js';
import { signalGroup } from '../core/process-group.js';
import { ferryBin } from './config.js';

const serverInfoSchema = z.object({ pid: z.number().int(), url: z.string(), startedAt: z.number() }).strict();
export type ServerInfo = z.infer<typeof serverInfoSchema>;

export const serverInfoPath = (home: string) => path.join(home, 'server.json');

/** A small state file (server.json, .ferry/dev.json): undefined when it is missing or not what it should be. */
export function readStateFile<T>(file: string, schema: z.ZodType<T>): T | undefined {
  if (!existsSync(file)) return undefined;
  try {
    return schema.parse(JSON.parse(readFileSync(file, 'utf8')));
  } catch {
    return undefined;
  }
}

export function readServerInfo(home: string): ServerInfo | undefined {
  return readStateFile(serverInfoPath(home), serverInfoSchema);
}

/** True when an HTTP server answers at `url` (any status: the v2 API answers 401/404 without a key). */
export async function answers(url: string, timeoutMs = 1_500): Promise<boolean> {
  try {
    const response = await fetch(`${url}/v2/`, { signal: AbortSignal.timeout(timeoutMs) });
    await response.arrayBuffer();
    return true;
  } catch {
    return false;
  }
}

/**
 * Whether a process is still there (signal 0 asks, sending nothing). The rule for every pid a Ferry
 * file records (server.json, a project's .ferry/dev.json): EPERM is another user's live process.
 */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Whether the command line of `pid` has one of `words` as an argument (Linux: /proc/<pid>/cmdline),
 * e.g. `serve`: a recorded pid that is alive may be another process's by now. Undefined where the
 * command line cannot be read (no /proc, or the process is gone).
 */
export function commandLineHas(pid: number, words: readonly string[]): boolean | undefined {
  try {
    const args = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
    return words.some((word) => args.includes(word));
  } catch {
    return undefined;
  }
}

/** The URL of a platform serving FERRY_HOME, or undefined. */
export async function runningServer(home: string): Promise<string | undefined> {
  const info = readServerInfo(home);
  if (!info) return undefined;
  return (await answers(info.url)) ? info.url : undefined;
}

export interface DetachOptions {
  home: string;
  host?: string;
  /**
   * The port and what named it. FERRY_PORT's is handed on as FERRY_PORT rather than --port, so the
   * server names the setting the user actually used when the port is taken.
   */
  port: PortChoice;
  env: NodeJS.ProcessEnv;
  /** More `ferry serve` flags for the background server (worker isolation). */
  serveArgs?: string[];
  /** How long to wait for the platform to answer. */
  waitMs?: number;
}

/**
 * Starts `ferry serve` in its own process group, logging to FERRY_HOME/serve.log; resolves with its
 * URL. A server that exits 2 refused what it was given (a port taken since it was checked, a --host
 * not on this machine): its error and hint are the user's, rethrown as the usage error they are.
 */
export async function startDetached(options: DetachOptions): Promise<ServerInfo> {
  securePrivateDir(options.home);
  const logPath = path.join(options.home, 'serve.log');
  // Where this start's lines begin: the log keeps earlier runs, whose errors are not this one's.
  const logStart = existsSync(logPath) ? statSync(logPath).size : 0;
  rmSync(serverInfoPath(options.home), { force: true });
  const log = openSync(logPath, 'a', privateFileMode);
  const fromEnv = options.port.setBy === 'FERRY_PORT';
  const args = [ferryBin(), 'serve', ...(fromEnv ? [] : ['--port', String(options.port.port)])];
  if (options.host) args.push('--host', options.host);
  args.push(...(options.serveArgs ?? []));
  const child = spawn(process.execPath, args, {
    detached: true,
    stdio: ['ignore', log, log],
    env: {
      ...options.env,
      FERRY_HOME: options.home,
      ...(fromEnv ? { FERRY_PORT: String(options.port.port) } : {}),
    },
  });
  let exited: number | null | undefined;
  const exit = new Promise<void>((resolve) =>
    child.once('exit', (code) => {
      exited = code;
      resolve();
    }),
  );
  child.unref();
  const deadline = Date.now() + (options.waitMs ?? 30_000);
  while (Date.now() < deadline) {
    if (exited !== undefined) break;
    const info = readServerInfo(options.home);
    if (info && info.pid === child.pid && (await answers(info.url))) return info;
    await Promise.race([exit, new Promise((resolve) => setTimeout(resolve, 150))]);
  }
  if (exited === undefined) signalGroup(child.pid, 'SIGTERM');
  const lines = existsSync(logPath)
    ? readFileSync(logPath).subarray(logStart).toString('utf8').trim().split('\n')
    : [];
  // Exit 2: the user's mistake (cli/main.ts), said in its last lines.
  const refused = exited === 2 ? usageErrorIn(lines) : undefined;
  if (refused) throw refused;
  const tail = lines.slice(-8).join('\n');
  throw new FerryError('failed', `ferry serve did not start${tail ? `:\n${tail}` : ''}`, {
    hint: `See ${logPath}, or run \`ferry serve\` in another terminal.`,
  });
}

/**
 * The usage error a `ferry` process printed (cli/main.ts: `Error: <message>`, then `  hint: <hint>`),
 * from the last `Error: ` line of its output; undefined when there is none.
 */
function usageErrorIn(lines: string[]): FerryError | undefined {
  const start = lines.findLastIndex((line) => line.startsWith('Error: '));
  if (start < 0) return undefined;
  const rest = lines.slice(start);
  const hintAt = rest.findIndex((line) => line.startsWith('  hint: '));
  const message = (hintAt < 0 ? rest : rest.slice(0, hintAt)).join('\n').slice('Error: '.length);
  const hint = hintAt < 0 ? undefined : rest.slice(hintAt).join('\n').slice('  hint: '.length);
  return usage(message, hint);
}

/** What named a port: the user's FERRY_PORT, the --port flag, or nothing (8888). */
export type PortSetting = 'FERRY_PORT' | '--port' | 'default';

/** The port a platform started here asks for, and what named it (which says whether it may move). */
export interface PortChoice {
  port: number;
  setBy: PortSetting;
}

/**
 * A listen failure, as the person who picked the address can fix it: a port in use, a --host that is
 * no address of this machine (a typo, another machine's), a low port without privileges. Each is a
 * usage error (exit 2): another port or host fixes it. `portSetBy` is where the port came from, so
 * the hint names the setting to change. Anything else is returned as it is.
 */
export function listenFailure(
  error: unknown,
  host: string,
  port: number,
  portSetBy: PortSetting = '--port',
): unknown {
  const code = (error as NodeJS.ErrnoException).code;
  if (code === 'EADDRINUSE')
    return usage(
      `Port ${port} on ${host} is in use`,
      portSetBy === 'FERRY_PORT'
        ? `Stop what listens on port ${port}, or set FERRY_PORT to another port (or unset it for the default, 8888).`
        : 'Pass --port <n>.',
    );
  if (code === 'EADDRNOTAVAIL' || code === 'ENOTFOUND' || code === 'EAI_AGAIN')
    return usage(
      `Cannot listen on ${host}: it is not an address of this machine`,
      'Pass --host 127.0.0.1 (this machine only) or --host 0.0.0.0 (every interface).',
    );
  if (code === 'EACCES')
    return usage(
      `Listening on port ${port} needs privileges this process lacks`,
      portSetBy === 'FERRY_PORT' ? 'Set FERRY_PORT to 1024 or above.' : 'Pass --port 1024 or above.',
    );
  return error;
}

/**
 * Whether `port` on `host` can be listened on now: undefined when it can (0 always can), else the
 * listen's error. A check only: another process may still take the port before it is listened on.
 */
function listenError(host: string, port: number): Promise<NodeJS.ErrnoException | undefined> {
  if (port === 0) return Promise.resolve(undefined);
  return new Promise((resolve) => {
    const probe = createServer();
    probe.once('error', (error: NodeJS.ErrnoException) => resolve(error));
    probe.listen({ host, port }, () => probe.close(() => resolve(undefined)));
  });
}

/**
 * Refuses, before anything expensive starts, a port that cannot be listened on now, with the error
 * the listen would give (listenFailure, naming the setting in `choice`).
 */
export async function checkListenable(host: string, choice: PortChoice): Promise<void> {
  const error = await listenError(host, choice.port);
  if (error) throw listenFailure(error, host, choice.port, choice.setBy);
}

/** `port` if it is free on `host`, else the next free one (up to 20 tries); 0 stays 0. */
export async function nextFreePort(host: string, port: number): Promise<number> {
  if (port === 0) return 0;
  for (let candidate = port; candidate < port + 20; candidate++) {
    const error = await listenError(host, candidate);
    if (!error) return candidate;
    // Only a taken port means "try the next one"; a bad host or a privileged port is final.
    if (error.code !== 'EADDRINUSE') throw listenFailure(error, host, candidate);
  }
  throw new FerryError('failed', `No free port between ${port} and ${port + 19} on ${host}`, {
    hint: 'Pass --port <n>.',
  });
}
