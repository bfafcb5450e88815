/**
 * Runs a child process to completion and collects its output. The build runs the user's python3
 * (scanner, import check) and pip through this one helper so a missing interpreter or a hang gives a
 * clear FerryError instead of a crash.
 */
import { spawn } from 'node:child_process';
import { FerryError } from '../../core/errors.js';
import { killGroup } from '../../core/process-group.js';

export interface RunResult {
  exitCode: number | null;
  stdout: string;
  stderr: string;
  /**
   * A process the child started still held its stdout or stderr once the child had exited and
   * outputDrainMs had passed: one that left the child's process group (`setsid`, Python's
   * `start_new_session=True`, a daemon), so it was not killed with the group and may still run.
   * The run ended without it; the caller tells the user, naming its step.
   */
  outputHeld: boolean;
}

/**
 * How long, once the child has exited, its stdout and stderr may still bring what it wrote before
 * the run ends without them. Node emits 'exit' when the process ends, when "child process stdio
 * streams might still be open", and 'close' only once they are closed, "since multiple processes
 * might share the same stdio streams" (https://nodejs.org/api/child_process.html#event-exit,
 * https://nodejs.org/api/child_process.html#event-close): a process that left the child's group
 * keeps them open for as long as it runs, for ever for a server. What the child wrote before it
 * exited is in the pipe already (a write returns once the kernel has it), so reading it takes an
 * event-loop turn, not a wait on anyone: a second covers a busy machine, and the window ends only
 * after one more poll of the pipes (see the 'exit' listener). In the usual run, where nothing holds
 * them, 'close' comes at once and this window is never waited out.
 */
export const outputDrainMs = 1_000;

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
    // A group of its own, killed whole once the run ends (on time, past its time, aborted, or with
    // ferry on Ctrl-C / SIGTERM): what the child started and left running (a server an imported
    // endpoint module starts, a compiler pip runs) does not outlive the build, holding its pipes.
    // One that left the group is not killed, and the run ends without its pipes: see outputDrainMs.
    const child = spawn(command, args, {
      cwd: options.cwd,
      stdio: ['pipe', 'pipe', 'pipe'],
      detached: true,
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
    let aborted = false;
    const timer =
      options.timeoutMs === undefined
        ? undefined
        : setTimeout(() => {
            timedOut = true;
            killGroup(child);
            // A process that left the group (setsid) may still hold the pipes: 'close' would wait for
            // that one too, for ever for a server, so the run ends here.
            child.stdout.destroy();
            child.stderr.destroy();
          }, options.timeoutMs);
    // Out of the terminal's foreground group, the child no longer gets the user's Ctrl-C itself: ferry
    // kills its group and then ends as the signal asks (re-raised once no other listener is left:
    // with one, a command that handles it, such as ferry dev, decides). Prepended, so a `once`
    // listener of that command still counts when this one runs.
    const onSignal = (signal: NodeJS.Signals) => {
      killGroup(child);
      release();
      if (process.listenerCount(signal) === 0) process.kill(process.pid, signal);
    };
    const onInterrupt = () => onSignal('SIGINT');
    const onTerminate = () => onSignal('SIGTERM');
    const onAbort = () => {
      aborted = true;
      killGroup(child);
    };
    const release = () => {
      if (timer) clearTimeout(timer);
      process.off('SIGINT', onInterrupt);
      process.off('SIGTERM', onTerminate);
      options.signal?.removeEventListener('abort', onAbort);
    };
    process.prependListener('SIGINT', onInterrupt);
    process.prependListener('SIGTERM', onTerminate);
    if (options.signal?.aborted) onAbort();
    else options.signal?.addEventListener('abort', onAbort, { once: true });
    // The child's own exit ends the run: what it left running in its group goes with it, and with
    // them the last holders of its pipes, so 'close' comes. One that left the group still holds
    // them: after outputDrainMs the run stops reading (the destroyed streams close, so 'close'
    // comes) and keeps what it read. setImmediate: the check phase follows a poll of the pipes, so
    // what they hold is read even where the event loop was busy for the whole window.
    let outputHeld = false;
    let drain: NodeJS.Timeout | undefined;
    child.on('exit', () => {
      killGroup(child);
      drain = setTimeout(
        () =>
          setImmediate(() => {
            const open = [child.stdout, child.stderr].filter((s) => !s.destroyed && !s.readableEnded);
            if (open.length === 0) return;
            outputHeld = true;
            for (const stream of open) stream.destroy();
          }),
        outputDrainMs,
      );
    });
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
      release();
      killGroup(child);
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
      release();
      clearTimeout(drain);
      if (timedOut) {
        reject(
          options.timeoutError?.() ??
            new FerryError('failed', `${command} ${args[0] ?? ''} took longer than ${options.timeoutMs} ms`),
        );
        return;
      }
      if (aborted) {
        reject(
          new FerryError('failed', `Cannot run ${command}: the operation was aborted`, {
            cause: options.signal?.reason,
          }),
        );
        return;
      }
      resolve({
        exitCode,
        stdout: Buffer.concat(out).toString('utf8'),
        stderr: Buffer.concat(err).toString('utf8'),
        outputHeld,
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
