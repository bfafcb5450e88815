/**
 * Runs a child process to completion and collects its output. The build runs the user's python3
 * (scanner, import check) and pip through this one helper so a missing interpreter or a hang gives a
 * clear FerryError instead of a crash.
 */
import { spawn } from 'node:child_process';
import { FerryError } from '../../core/errors.js';

export interface RunResult {
  exitCode: number | null;
  stdout: string;
  stderr: string;
}

export interface RunOptions {
  stdin?: string;
  cwd?: string;
  timeoutMs?: number;
  /** The error a run past timeoutMs rejects with, where the caller can say more than the default. */
  timeoutError?: () => Error;
  signal?: AbortSignal | undefined;
  /** Variables added to (or, as '', cleared from) the inherited environment. */
  env?: Record<string, string>;
  /** Each output line (stdout and stderr) as it arrives: progress for long installs. */
  onLine?: (line: string) => void;
}

export function runProcess(command: string, args: string[], options: RunOptions = {}): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, {
      cwd: options.cwd,
      stdio: ['pipe', 'pipe', 'pipe'],
      signal: options.signal,
      // No __pycache__ left in the project or the build dir; no pip self-update nag in the output.
      env: {
        ...process.env,
        PYTHONDONTWRITEBYTECODE: '1',
        PIP_DISABLE_PIP_VERSION_CHECK: '1',
        ...options.env,
      },
    });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let timedOut = false;
    const timer =
      options.timeoutMs === undefined
        ? undefined
        : setTimeout(() => {
            timedOut = true;
            child.kill('SIGKILL');
            // A process the child started may hold its pipes (a server an imported module starts):
            // 'close' would wait for that one too, for ever, so the run ends with the child's exit.
            child.stdout.destroy();
            child.stderr.destroy();
          }, options.timeoutMs);
    child.stdout.on('data', (chunk: Buffer) => out.push(chunk));
    child.stderr.on('data', (chunk: Buffer) => err.push(chunk));
    const onLine = options.onLine;
    if (onLine) {
      for (const stream of [child.stdout, child.stderr]) {
        let partial = '';
        stream.on('data', (chunk: Buffer) => {
          const lines = (partial + chunk.toString('utf8')).split('\n');
          partial = lines.pop() ?? '';
          for (const line of lines) if (line.trim()) onLine(line);
        });
      }
    }
    child.on('error', (error: NodeJS.ErrnoException) => {
      if (timer) clearTimeout(timer);
      if (error.code === 'ENOENT') {
        reject(
          new FerryError('failed', `Cannot run ${command}: it was not found`, {
            hint: 'Install Python 3.10+, or name an interpreter that exists (`--python PATH` on the commands that take it).',
            cause: error,
          }),
        );
      } else {
        reject(new FerryError('failed', `Cannot run ${command}: ${error.message}`, { cause: error }));
      }
    });
    child.on('close', (exitCode) => {
      if (timer) clearTimeout(timer);
      if (timedOut) {
        reject(
          options.timeoutError?.() ??
            new FerryError('failed', `${command} ${args[0] ?? ''} took longer than ${options.timeoutMs} ms`),
        );
        return;
      }
      resolve({
        exitCode,
        stdout: Buffer.concat(out).toString('utf8'),
        stderr: Buffer.concat(err).toString('utf8'),
      });
    });
    // A child that exits before reading stdin must not crash us with EPIPE.
    child.stdin.on('error', () => {});
    child.stdin.end(options.stdin ?? '');
  });
}

/** The last `lines` non-empty lines of a tool's output: enough to see why it failed. */
export function tail(text: string, lines = 15): string {
  return text
    .split('\n')
    .filter((line) => line.trim() !== '')
    .slice(-lines)
    .join('\n');
}
