/**
 * checkImports (cli/build/importCheck.ts) with a real python3: an endpoint module whose import never
 * finishes is the project's to fix, so the build stops with exit 2 naming that module and what to
 * move, not with the checker's path and a timeout in ms (exit 1). A process a module starts at import
 * (a server) ends with the check, however the check ends. The CLI's other import-check cases (a
 * broken import, a missing package, ferry itself stopped during the check) are in
 * test/e2e/import-check.test.ts.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { BuildEvent } from '../../cli/build/events.js';
import { checkImports } from '../../cli/build/importCheck.js';
import { exitCode, FerryError } from '../../core/errors.js';
import type { ManifestEndpoint } from '../../core/manifest.js';
import { expectGone, killedAfterEach, pidWritten, startsSleeper } from '../support/processes.js';

const dirs: string[] = [];
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

/** The sleepers the modules started: killed whatever a test saw, so none outlives a failed one. */
const sleepers = killedAfterEach();

/**
 * checkImports of `quick.py` and `stuck.py` (which holds `source`) with a 2 s limit: what it threw,
 * and the events it emitted.
 */
async function checkStuck(
  source: string,
  options: { timeoutMs?: number; staged?: string } = {},
): Promise<{ failure: unknown; staged: string; events: BuildEvent[] }> {
  const staged = options.staged ?? stagedDir();
  writeFileSync(path.join(staged, 'quick.py'), 'VALUE = 1\n');
  writeFileSync(path.join(staged, 'stuck.py'), source);
  const endpoints = [{ module: 'quick' }, { module: 'stuck' }] as unknown as ManifestEndpoint[];
  const events: BuildEvent[] = [];
  const failure = await checkImports({
    stagedDir: staged,
    endpoints,
    projectFiles: ['quick.py', 'stuck.py'],
    pythonVersion: 'none',
    python: { version: 'none', executable: 'python3' },
    noDeps: false,
    emit: (event) => events.push(event),
    timeoutMs: options.timeoutMs ?? 2_000,
  }).then(
    () => undefined,
    (error: unknown) => error,
  );
  return { failure, staged, events };
}

function stagedDir(): string {
  const staged = mkdtempSync(path.join(tmpdir(), 'wd-import-check-'));
  dirs.push(staged);
  return staged;
}

/** The sleeper a module started, once it wrote its pid (sleeper.pid in `staged`); killed after each test. */
async function sleeperPid(staged: string): Promise<number> {
  const pid = await pidWritten(path.join(staged, 'sleeper.pid'));
  sleepers.push(pid);
  return pid;
}

/** `stuck.py` for `staged`: starts a sleeper at import (its own session: `ownSession`), then `rest`. */
const sleeperModule = (staged: string, rest: string, options: { ownSession?: boolean } = {}) =>
  startsSleeper(path.join(staged, 'sleeper.pid'), options) + rest;

const blocks = 'import threading\nthreading.Event().wait()\n';

describe('checkImports', () => {
  it('names the module whose import never finishes, with exit 2 and a hint', async () => {
    // Blocks forever at import: a stand-in for a model load that outlasts the check.
    const { failure } = await checkStuck('import threading\nthreading.Event().wait()\n');
    expect(FerryError.is(failure)).toBe(true);
    const error = failure as FerryError;
    expect(exitCode(error)).toBe(2);
    expect(error.message).toContain('Importing endpoint module stuck did not finish within 2 s');
    expect(error.message).not.toContain('import_check.py');
    expect(error.hint).toContain("into the handler or a class endpoint's __init__");
  });

  it('ends with the checker, though a process the module started still holds its output; that process is killed', async () => {
    // A server started at import inherits the checker's stdout and stderr: the build used to wait
    // for it to exit too (for ever, for a server), long after the checker was killed; then it left
    // it running after ferry build had exited.
    const staged = stagedDir();
    const { failure } = await checkStuck(sleeperModule(staged, blocks), {
      staged,
    });
    const pid = await sleeperPid(staged);
    expect(FerryError.is(failure) && exitCode(failure)).toBe(2);
    expect((failure as FerryError).message).toContain('Importing endpoint module stuck did not finish');
    await expectGone(pid);
  });

  it('kills what a module started once the check finishes, and finishes though it holds the output', async () => {
    // Imports fine, but leaves its server running: nothing may outlive the build.
    const staged = stagedDir();
    const { failure, events } = await checkStuck(sleeperModule(staged, 'VALUE = 2\n'), {
      staged,
      timeoutMs: 30_000,
    });
    const pid = await sleeperPid(staged);
    expect(failure).toBeUndefined();
    // Killed with the group, it let go of the output: nothing to warn about.
    expect(events.filter((event) => event.type === 'warning')).toEqual([]);
    await expectGone(pid);
  });

  it('finishes though a process the module started in a session of its own still holds its output, and warns', async () => {
    // start_new_session=True (setsid, a daemon) leaves the checker's process group, so the group's
    // kill misses it, and it keeps the checker's stdout and stderr: the check waited for them to
    // close until its own time was up, then failed. This test's limit is well under the check's.
    const staged = mkdtempSync(path.join(tmpdir(), 'wc-import-check-'));
    dirs.push(staged);
    const checked = checkStuck(sleeperModule(staged, 'VALUE = 2\n', { ownSession: true }), {
      staged,
      timeoutMs: 120_000,
    });
    await sleeperPid(staged);
    const { failure, events } = await checked;
    expect(failure).toBeUndefined();
    const warnings = events.flatMap((event) => (event.type === 'warning' ? [event.message] : []));
    expect(warnings).toEqual([
      expect.stringContaining(
        'the import check of quick, stuck ended, but a process started while importing still held its output',
      ),
    ]);
  }, 30_000);

  it("kills the checker's process group when ferry gets SIGINT or SIGTERM during the check", async () => {
    for (const signal of ['SIGINT', 'SIGTERM'] as const) {
      // Another listener (a command that handles the signal itself, as ferry dev does) decides what
      // ferry does next, so the signal is not raised again at this test's process.
      const command = () => {};
      process.on(signal, command);
      try {
        const staged = stagedDir();
        const checked = checkStuck(sleeperModule(staged, blocks), {
          staged,
          timeoutMs: 30_000,
        });
        const pid = await sleeperPid(staged);
        process.emit(signal, signal);
        const { failure } = await checked;
        expect(FerryError.is(failure), signal).toBe(true);
        await expectGone(pid);
      } finally {
        process.off(signal, command);
      }
    }
  });
});
