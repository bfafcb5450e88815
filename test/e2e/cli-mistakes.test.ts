/**
 * A user's mistakes on the command line, through the real binary: flags given empty, folders Ferry
 * cannot write, prompts without a terminal, `--json` that must print only JSON. Each is exit 2 with a
 * one-line hint (docs/architecture.md#the-cli), never "a bug in Ferry" nor a stack trace.
 */
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CliSandbox, type RunResult } from './cli-support.js';

const sandbox = new CliSandbox();
let project = '';

beforeAll(async () => {
  const init = await sandbox.run(['init', 'mistakes']);
  expect(init.code, init.stderr).toBe(0);
  project = path.join(sandbox.root, 'mistakes');
}, 60_000);
afterAll(() => sandbox.cleanup());

/** Exit 2, `Error: <message>`, a hint line, and nothing that reads as Ferry's own failure. */
function expectUsage(result: RunResult, message: string | RegExp, hint?: string | RegExp): void {
  expect(result.code, result.stderr).toBe(2);
  if (typeof message === 'string') expect(result.stderr).toContain(`Error: ${message}`);
  else expect(result.stderr).toMatch(message);
  expect(result.stderr).toMatch(/\n {2}hint: \S/);
  if (typeof hint === 'string') expect(result.stderr).toContain(hint);
  else if (hint) expect(result.stderr).toMatch(hint);
  expect(result.stderr).not.toContain('looks like a bug');
  expect(result.stderr).not.toMatch(/\n\s+at .+:\d+:\d+/);
}

describe('--no-deps on build and deploy', () => {
  it('is accepted (yargs reads it as deps: false) and is what --help documents', async () => {
    const build = await sandbox.run(['build', '--no-deps'], { cwd: project });
    expect(build.code, build.stderr).toBe(0);
    expect(build.stderr).not.toContain('Unknown argument');
    const deploy = await sandbox.run(['deploy', '--no-deps', '--no-serve'], { cwd: project });
    expect(deploy.code, deploy.stderr).toBe(0);
    for (const command of ['build', 'deploy']) {
      const help = await sandbox.run([command, '--help']);
      expect(help.stdout).toContain('--no-deps');
      expect(help.stdout).not.toMatch(/ --deps\b/);
    }
  }, 120_000);
});
