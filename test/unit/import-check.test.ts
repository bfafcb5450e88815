/**
 * checkImports (cli/build/importCheck.ts) with a real python3: an endpoint module whose import never
 * finishes is the project's to fix, so the build stops with exit 2 naming that module and what to
 * move, not with the checker's path and a timeout in ms (exit 1). The CLI's other import-check
 * cases (a broken import, a missing package) are in test/e2e/import-check.test.ts.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
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

describe('checkImports', () => {
  it('names the module whose import never finishes, with exit 2 and a hint', async () => {
    const staged = mkdtempSync(path.join(tmpdir(), 'import-check-'));
    dirs.push(staged);
    writeFileSync(path.join(staged, 'quick.py'), 'VALUE = 1\n');
    // Blocks forever at import: a stand-in for a model load that outlasts the check.
    writeFileSync(path.join(staged, 'stuck.py'), 'import threading\nthreading.Event().wait()\n');
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
    expect(FerryError.is(failure)).toBe(true);
    const error = failure as FerryError;
    expect(exitCode(error)).toBe(2);
    expect(error.message).toContain('Importing endpoint module stuck did not finish within 2 s');
    expect(error.message).not.toContain('import_check.py');
    expect(error.hint).toContain("into the handler or a class endpoint's __init__");
  });
});
