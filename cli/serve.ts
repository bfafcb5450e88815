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
import { ferryBin } from './config.js';

const serverInfoSchema = z.object({ pid: z.number().int(), url: z.string(), startedAt: z.number() }).strict();
export type ServerInfo = z.infer<typeof serverInfoSchema>;

export const serverInfoPath = (home: string) => path.join(home, 'server.json');

export function readServerInfo(home: string): ServerInfo | undefined {
  const file = serverInfoPath(home);
  if (!existsSync(file)) return undefined;
  try {
    return serverInfoSchema.parse(JSON.parse(readFileSync(file, 'utf8')));
  } catch {
    return undefined;
  }
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

/** The URL of a platform serving FERRY_HOME, or undefined. */
export async function runningServer(home: string): Promise<string | undefined> {
  const info = readServerInfo(home);
  if (!info) return undefined;
  return (await answers(info.url)) ? info.url : undefined;
}

export interface DetachOptions {
  home: string;
  host?: string;
  port: number;
  env: NodeJS.ProcessEnv;
  /** More `ferry serve` flags for the background server (worker isolation). */
  serveArgs?: string[];
  /** How long to wait for the platform to answer. */
  waitMs?: number;
}

/** Starts `ferry serve` in its own process group, logging to FERRY_HOME/serve.log; resolves with its URL. */
export async function startDetached(options: DetachOptions): Promise<ServerInfo> {
  securePrivateDir(options.home);
  const logPath = path.join(options.home, 'serve.log');
  // Where this start's lines begin: the log keeps earlier runs, whose errors are not this one's.
  const logStart = existsSync(logPath) ? statSync(logPath).size : 0;
  rmSync(serverInfoPath(options.home), { force: true });
  const log = openSync(logPath, 'a', privateFileMode);
  const args = [ferryBin(), 'serve', '--port', String(options.port)];
  if (options.host) args.push('--host', options.host);
  args.push(...(options.serveArgs ?? []));
  const child = spawn(process.execPath, args, {
    detached: true,
    stdio: ['ignore', log, log],
    env: { ...options.env, FERRY_HOME: options.home },
  });
  let exited: number | null | undefined;
  child.once('exit', (code) => {
    exited = code;
  });
  child.unref();
  const deadline = Date.now() + (options.waitMs ?? 30_000);
  while (Date.now() < deadline) {
    if (exited !== undefined) break;
    const info = readServerInfo(options.home);
    if (info && info.pid === child.pid && (await answers(info.url))) return info;
    await new Promise((resolve) => setTimeout(resolve, 150));
  }
  if (exited === undefined && child.pid) {
    try {
      process.kill(-child.pid, 'SIGTERM');
    } catch {
      // already gone
    }
  }
  const tail = existsSync(logPath)
    ? readFileSync(logPath).subarray(logStart).toString('utf8').trim().split('\n').slice(-8).join('\n')
    : '';
  throw new FerryError('failed', `ferry serve did not start${tail ? `:\n${tail}` : ''}`, {
    hint: `See ${logPath}, or run \`ferry serve\` in another terminal.`,
  });
}

/** What named a port: the user's FERRY_PORT, the --port flag, or nothing (8888). */
export type PortSetting = 'FERRY_PORT' | '--port' | 'default';

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
        ? `Stop what listens on port ${port}, or set FERRY_PORT to another port (unset, 8888 or the next free one is used).`
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

/** `port` if it is free on `host`, else the next free one (up to 20 tries); 0 stays 0. */
export async function nextFreePort(host: string, port: number): Promise<number> {
  if (port === 0) return 0;
  for (let candidate = port; candidate < port + 20; candidate++) {
    const free = await new Promise<boolean>((resolve, reject) => {
      const probe = createServer();
      // Only a taken port means "try the next one"; a bad host or a privileged port is final.
      probe.once('error', (error: NodeJS.ErrnoException) =>
        error.code === 'EADDRINUSE' ? resolve(false) : reject(listenFailure(error, host, candidate)),
      );
      probe.listen({ host, port: candidate }, () => probe.close(() => resolve(true)));
    });
    if (free) return candidate;
  }
  throw new FerryError('failed', `No free port between ${port} and ${port + 19} on ${host}`, {
    hint: 'Pass --port <n>.',
  });
}
