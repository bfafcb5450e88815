/**
 * runProcess (cli/build/process.ts) with a real python3: the run ends once the child has exited and
 * what it wrote is read, though a process it started in a session of its own (setsid, a daemon)
 * still holds its stdout and stderr; nothing the child wrote is cut short, and its exit code is
 * kept. The import check's side of it (the warning) is in test/unit/import-check.test.ts.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { runProcess } from '../../cli/build/process.js';
import { killedAfterEach, pidWritten, startsSleeper } from '../support/processes.js';

const dir = mkdtempSync(path.join(tmpdir(), 'wc-run-process-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The sleepers the children started, killed whatever a test saw. */
const sleepers = killedAfterEach();

/** Python that writes `stdoutBytes` x's and `stderrBytes` y's, then exits with `code`. */
const writes = (stdoutBytes: number, stderrBytes: number, code: number) =>
  'import sys\n' +
  `sys.stdout.write("x" * ${stdoutBytes})\n` +
  'sys.stdout.flush()\n' +
  `sys.stderr.write("y" * ${stderrBytes})\n` +
  `sys.exit(${code})\n`;

describe('runProcess', () => {
  it('ends once the child exits though a process it started in a session of its own holds its output', async () => {
    // Several MiB, more than a pipe holds: the child exits only once most of it was read, and the
    // rest waits in the pipe, where the drain after 'exit' reads it. This test's limit is well
    // under the run's: the old runProcess waited for the sleeper to let go of the pipes.
    const pidFile = path.join(dir, 'held.pid');
    const run = runProcess(
      'python3',
      ['-c', startsSleeper(pidFile, { ownSession: true }) + writes(3_000_000, 1_000_000, 3)],
      {
        timeoutMs: 120_000,
      },
    );
    const pid = await pidWritten(pidFile);
    sleepers.push(pid);
    const result = await run;
    expect(result.exitCode).toBe(3);
    expect(result.stdout).toBe('x'.repeat(3_000_000));
    expect(result.stderr).toBe('y'.repeat(1_000_000));
    expect(result.outputHeld).toBe(true);
  }, 30_000);

  it('gives all of a large output and the exit code when nothing else holds the pipes', async () => {
    const result = await runProcess('python3', ['-c', writes(5_000_000, 2_000_000, 0)], {
      timeoutMs: 120_000,
    });
    expect(result).toEqual({
      exitCode: 0,
      stdout: 'x'.repeat(5_000_000),
      stderr: 'y'.repeat(2_000_000),
      outputHeld: false,
    });
  });

  it('gives a null exit code for a child a signal ended', async () => {
    const result = await runProcess(
      'python3',
      ['-c', 'import os, signal\nos.kill(os.getpid(), signal.SIGKILL)'],
      {
        timeoutMs: 120_000,
      },
    );
    expect(result.exitCode).toBeNull();
    expect(result.outputHeld).toBe(false);
  });
});
