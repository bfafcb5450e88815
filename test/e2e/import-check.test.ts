/**
 * The build-time import check through the real CLI: a module that cannot import fails `ferry build`
 * and `ferry deploy` with its own error before anything is uploaded or recorded; a package the base
 * images ship (torch) may be missing locally; a module importing a declared dependency passes. Ferry
 * stopped during the check (Ctrl+C, SIGTERM) takes what the check started with it.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { expectGone, killedAfterEach, pidWritten, startsSleeper } from '../support/processes.js';
import { writeWheel } from '../support/wheels.js';
import { CliSandbox } from './cli-support.js';

const sandbox = new CliSandbox();
afterAll(() => sandbox.cleanup());

function project(name: string, files: Record<string, string>): string {
  const dir = path.join(sandbox.root, name);
  mkdirSync(dir, { recursive: true });
  for (const [file, text] of Object.entries(files)) writeFileSync(path.join(dir, file), text);
  return dir;
}

const endpoint = (imports: string, extra = '') =>
  `${imports}\nfrom ferry import Endpoint\n\n\n@Endpoint(name="work", cpu="1-2"${extra})\ndef work():\n    return 1\n`;

describe('import check at build time', () => {
  it('fails build and deploy with the module error; nothing is deployed', async () => {
    const dir = project('broken', {
      'work.py': endpoint('import helper'),
      'helper.py': 'VALUE = 1 / 0\n',
    });
    const build = await sandbox.run(['build'], { cwd: dir });
    expect(build.code).not.toBe(0);
    expect(build.stderr).toContain('An endpoint module cannot be imported');
    expect(build.stderr).toContain('ZeroDivisionError');
    expect(build.stderr).toContain('helper.py');
    // The user's frames, each file by its path in the project (the file to edit, not its staged copy
    // under .ferry/build), from the endpoint module down to the line that raised; not importlib's.
    expect(build.stderr).toContain('File "work.py", line 1, in <module>\n    import helper\n');
    expect(build.stderr).toContain('File "helper.py", line 1, in <module>\n    VALUE = 1 / 0\n');
    expect(build.stderr).not.toContain('.ferry');
    expect(build.stderr).not.toContain('importlib');
    expect(build.stderr).not.toContain('import_check.py');
    const deploy = await sandbox.run(['deploy', '--no-serve'], { cwd: dir });
    expect(deploy.code).not.toBe(0);
    expect(deploy.stderr).toContain('ZeroDivisionError');
    const list = await sandbox.run(['undeploy', 'list', '--json'], { cwd: dir });
    expect(JSON.parse(list.stdout)).toEqual([]);
  });

  it('a package that is not installed anywhere fails; one the base image ships only warns', async () => {
    const missing = project('missing', { 'work.py': endpoint('import package_nobody_has_xyz') });
    const failed = await sandbox.run(['build'], { cwd: missing });
    expect(failed.code).not.toBe(0);
    expect(failed.stderr).toContain("No module named 'package_nobody_has_xyz'");

    const torch = project('torchy', { 'work.py': endpoint('import torch  # provided by the base image') });
    const built = await sandbox.run(['build'], { cwd: torch });
    expect(built.code, built.stderr).toBe(0);
    expect(built.stderr).toContain(
      'work imports torch, which is not installed here; the base image provides it',
    );
  });

  it('imports declared dependencies from the staged artifact', async () => {
    const wheels = path.join(sandbox.root, 'wheels');
    mkdirSync(wheels, { recursive: true });
    writeWheel(wheels, { name: 'tinycheck' });
    const dir = project('withdep', {
      'work.py': endpoint('import tinycheck', ', dependencies=["tinycheck"]'),
    });
    const built = await sandbox.run(['build'], {
      cwd: dir,
      env: { PIP_NO_INDEX: '1', PIP_FIND_LINKS: wheels },
    });
    expect(built.code, built.stderr).toBe(0);
  });

  describe('ferry stopped during the check', () => {
    /** The checkers and their leftovers: killed whatever the test saw, so none outlives a failed one. */
    const leftovers = killedAfterEach();

    // SIGTERM to ferry alone, as a CI runner or a supervisor stops it: the checker and what its module
    // started used to stay, in ferry's process group but never signalled. Ctrl+C, to the terminal's
    // foreground group (ferry's; the checker has its own now), reaches the checker through ferry.
    it.each([
      ['SIGTERM to ferry', 'SIGTERM', false],
      ['Ctrl+C (SIGINT to its group)', 'SIGINT', true],
    ] as const)('%s ends the build and what the module started', async (_, signal, toGroup) => {
      const pidFile = path.join(sandbox.root, `sleeper-${signal}.pid`);
      const dir = project(`stopped-${signal}`, {
        // The checker's own pid too: on a ferry that leaves it running, afterEach ends it.
        'work.py': endpoint(
          `import os\nopen(${JSON.stringify(`${pidFile}.checker`)}, "w").write(str(os.getpid()))\n` +
            `${startsSleeper(pidFile)}import threading\nthreading.Event().wait()`,
        ),
      });
      let ferryPid: number | undefined;
      const built = sandbox.run(['build'], { cwd: dir, onSpawn: (child) => (ferryPid = child.pid) });
      const pid = await pidWritten(pidFile);
      leftovers.push(pid, await pidWritten(`${pidFile}.checker`));
      process.kill(toGroup ? -ferryPid! : ferryPid!, signal);
      const result = await built;
      // Ended by the signal, as it asks: no exit code of its own.
      expect(result.code, result.stderr).toBeNull();
      await expectGone(pid);
    });
  });
});
