/**
 * checkImports (cli/build/importCheck.ts) with a real python3: an endpoint module whose import never
 * finishes is the project's to fix, so the build stops with exit 2 naming that module and what to
 * move, not with the checker's path and a timeout in ms (exit 1). The CLI's other import-check
 * cases (a broken import, a missing package) are in test/e2e/import-check.test.ts.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { checkImports } from '../../cli/build/importCheck.js';
import { exitCode, FerryError } from '../../core/errors.js';
import type { ManifestEndpoint } from '../../core/manifest.js';

const dirs: string[] = [];
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

/** checkImports of `quick.py` and `stuck.py` (which holds `source`) with a 2 s limit: what it threw. */
async function checkStuck(source: string): Promise<{ failure: unknown; staged: string }> {
  const staged = mkdtempSync(path.join(tmpdir(), 'import-check-'));
  dirs.push(staged);
  writeFileSync(path.join(staged, 'quick.py'), 'VALUE = 1\n');
  writeFileSync(path.join(staged, 'stuck.py'), source);
  const endpoints = [{ module: 'quick' }, { module: 'stuck' }] as unknown as ManifestEndpoint[];
  const failure = await checkImports({
    stagedDir: staged,
    endpoints,
    projectFiles: ['quick.py', 'stuck.py'],
    pythonVersion: 'none',
    python: { version: 'none', executable: 'python3' },
    noDeps: false,
    emit: () => {},
    timeoutMs: 2_000,
  }).then(
    () => undefined,
    (error: unknown) => error,
  );
  return { failure, staged };
}

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

  it('ends with the checker, though a process the module started still holds its output', async () => {
    // A server started at import inherits the checker's stdout and stderr: the build used to wait
    // for it to exit too (for ever, for a server), long after the checker was killed.
    const { failure, staged } = await checkStuck(
      'import os, subprocess, sys, threading\n' +
        'server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])\n' +
        'open(os.path.join(os.path.dirname(__file__), "server.pid"), "w").write(str(server.pid))\n' +
        'threading.Event().wait()\n',
    );
    try {
      expect(FerryError.is(failure) && exitCode(failure)).toBe(2);
      expect((failure as FerryError).message).toContain('Importing endpoint module stuck did not finish');
    } finally {
      process.kill(Number(readFileSync(path.join(staged, 'server.pid'), 'utf8')), 'SIGKILL');
    }
  });
});
