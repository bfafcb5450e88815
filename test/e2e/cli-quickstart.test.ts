/**
 * `ferry quickstart` (what `npm start` runs) through the real binary: it builds and deploys the
 * bundled examples/hello, and every file it makes lands under FERRY_HOME — the repository's
 * examples/hello is left exactly as it was.
 */
import { existsSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { CliSandbox, repoRoot, stopChild } from './cli-support.js';

/** Every path under `dir` with its size and mtime: any write shows up as a difference. */
function snapshot(dir: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const entry of readdirSync(dir, { recursive: true, withFileTypes: true })) {
    const full = path.join(entry.parentPath, entry.name);
    const info = statSync(full);
    out[path.relative(dir, full)] = `${info.isDirectory() ? 'dir' : info.size} ${info.mtimeMs}`;
  }
  return out;
}

describe('ferry quickstart', () => {
  const sandbox = new CliSandbox();
  afterAll(() => sandbox.cleanup());

  it('builds examples/hello under FERRY_HOME/build and writes nothing into the repository', async () => {
    const example = path.join(repoRoot, 'examples', 'hello');
    const before = snapshot(example);
    const started = await sandbox.start(['quickstart', '--port', '0'], /Ctrl\+C stops the platform/, {
      timeoutMs: 90_000,
    });
    expect(existsSync(path.join(sandbox.home, 'build', 'hello.tar.gz'))).toBe(true);
    expect(existsSync(path.join(sandbox.home, 'build', 'hello', 'hello.py'))).toBe(true);
    expect(snapshot(example)).toEqual(before);
    expect(await stopChild(started.child)).toBe(0);
  });
});
