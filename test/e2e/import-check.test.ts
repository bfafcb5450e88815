/**
 * The build-time import check through the real CLI: a module that cannot import fails `ferry build`
 * and `ferry deploy` with its own error before anything is uploaded or recorded; a package the base
 * images ship (torch) may be missing locally; a module importing a declared dependency passes.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
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
});
