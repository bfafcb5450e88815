/**
 * Runs the real `ferry` binary (node bin/ferry.js; needs `npm run build` — `npm test` does it) in a
 * temp folder with its own FERRY_HOME, and cleans up every process group and folder it made.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const ferryBin = path.join(repoRoot, 'bin', 'ferry.js');

export interface RunResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

export class CliSandbox {
  readonly root = mkdtempSync(path.join(tmpdir(), 'ferry-cli-'));
  readonly home = path.join(this.root, 'home');
  readonly children = new Set<ChildProcess>();

  env(extra: Record<string, string | undefined> = {}): NodeJS.ProcessEnv {
    const env: NodeJS.ProcessEnv = { ...process.env, FERRY_HOME: this.home, FERRY_PORT: '0', ...extra };
    if (!('FERRY_API_KEY' in extra)) delete env.FERRY_API_KEY;
    for (const [k, v] of Object.entries(extra)) if (v === undefined) delete env[k];
    return env;
  }

  /** Runs ferry to completion; `input` is written to stdin, then stdin closes. */
  run(
    args: string[],
    options: {
      cwd?: string;
      input?: string;
      env?: Record<string, string | undefined>;
      timeoutMs?: number;
      /** Hears of the process once started (its pid leads its process group). */
      onSpawn?: (child: ChildProcess) => void;
    } = {},
  ): Promise<RunResult> {
    const child = spawn(process.execPath, [ferryBin, ...args], {
      cwd: options.cwd ?? this.root,
      env: this.env(options.env),
      stdio: ['pipe', 'pipe', 'pipe'],
      detached: true,
    });
    this.children.add(child);
    options.onSpawn?.(child);
    let stdout = '';
    let stderr = '';
    child.stdout!.on('data', (d) => {
      stdout += d;
    });
    child.stderr!.on('data', (d) => {
      stderr += d;
    });
    child.stdin!.end(options.input ?? '');
    const timer = setTimeout(() => killGroup(child), options.timeoutMs ?? 90_000);
    return new Promise((resolve) => {
      child.on('close', (code) => {
        clearTimeout(timer);
        this.children.delete(child);
        resolve({ code, stdout, stderr });
      });
    });
  }

  /** Starts a long-running ferry command; resolves once stdout matches `ready`. */
  start(
    args: string[],
    ready: RegExp,
    options: { cwd?: string; env?: Record<string, string | undefined>; timeoutMs?: number } = {},
  ): Promise<{
    child: ChildProcess;
    match: RegExpMatchArray;
    output: () => { stdout: string; stderr: string };
  }> {
    const child = spawn(process.execPath, [ferryBin, ...args], {
      cwd: options.cwd ?? this.root,
      env: this.env(options.env),
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    this.children.add(child);
    let stdout = '';
    let stderr = '';
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        killGroup(child);
        reject(new Error(`ferry ${args.join(' ')} not ready:\n${stdout}\n${stderr}`));
      }, options.timeoutMs ?? 60_000);
      child.stdout!.on('data', (d) => {
        stdout += d;
        const match = stdout.match(ready);
        if (match) {
          clearTimeout(timer);
          resolve({ child, match, output: () => ({ stdout, stderr }) });
        }
      });
      child.stderr!.on('data', (d) => {
        stderr += d;
      });
      child.on('close', (code) => {
        this.children.delete(child);
        clearTimeout(timer);
        reject(new Error(`ferry ${args.join(' ')} exited ${code}:\n${stdout}\n${stderr}`));
      });
    });
  }

  /** Stops processes started here, any `ferry serve --detach` of this FERRY_HOME, and removes the folder. */
  async cleanup(): Promise<void> {
    let signalled = this.children.size > 0;
    const serverJson = path.join(this.home, 'server.json');
    if (existsSync(serverJson)) {
      try {
        const { pid } = JSON.parse(readFileSync(serverJson, 'utf8')) as { pid: number };
        process.kill(-pid, 'SIGTERM');
        signalled = true;
      } catch {
        // already gone
      }
    }
    await Promise.all([...this.children].map((child) => stopChild(child)));
    // A grace period for what was just signalled (a server's workers) to let go of the folder; with
    // nothing signalled (every command ran to completion) there is nothing to wait for.
    if (signalled) await new Promise((r) => setTimeout(r, 300));
    rmSync(this.root, { recursive: true, force: true });
  }
}

/**
 * POSTs `body` as JSON (a string is sent as it is, for bodies a test writes by hand) and reads the
 * JSON answer: the dev server's routes, the platform's.
 */
export async function postJson(url: string, body: unknown) {
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return { status: response.status, body: (await response.json()) as Record<string, any> };
}

/**
 * Resolves when `child` prints `pattern` (text, or a RegExp over all it printed since) on stderr from
 * now on: on the output's own event, never a poll. Registered before the action whose line it awaits.
 */
export function printedOn(child: ChildProcess, pattern: string | RegExp): Promise<void> {
  return new Promise((resolve) => {
    // Bytes, so a character split between two chunks is still found.
    let seen = Buffer.alloc(0);
    const listen = (chunk: Buffer) => {
      seen = Buffer.concat([seen, chunk]);
      if (typeof pattern === 'string' ? !seen.includes(pattern) : !pattern.test(seen.toString())) return;
      child.stderr!.off('data', listen);
      resolve();
    };
    child.stderr!.on('data', listen);
  });
}

export function killGroup(child: ChildProcess, signal: NodeJS.Signals = 'SIGKILL'): void {
  try {
    if (child.pid) process.kill(-child.pid, signal);
  } catch {
    // already gone
  }
}

/**
 * SIGINT (Ctrl+C) the group; SIGKILL if it is still there after 10 s. Resolves with the exit code
 * once what it printed has been read too: callers check its last lines.
 */
export async function stopChild(
  child: ChildProcess,
  signal: NodeJS.Signals = 'SIGINT',
): Promise<number | null> {
  if (child.exitCode === null && child.signalCode === null) {
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    const timer = setTimeout(() => killGroup(child), 10_000);
    killGroup(child, signal);
    await exited;
    clearTimeout(timer);
  }
  // 'exit' can come before the last of its output has been read, 'close' comes after. Bounded: a
  // process it started outside its group could hold its stdout or stderr open.
  const drained = [child.stdout, child.stderr].every(
    (stream) => !stream || stream.readableEnded || stream.destroyed,
  );
  if (!drained) {
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, 2_000);
      child.once('close', () => {
        clearTimeout(timer);
        resolve();
      });
    });
  }
  return child.exitCode;
}

/** The five deploy stages (docs/architecture.md#the-cli), as `ferry deploy` prints them on stderr. */
export const deployStages = [
  '[1/5] Build',
  '[2/5] Environment resolution',
  '[3/5] Upload',
  '[4/5] Provisioning',
  '[5/5] Configuration',
] as const;
