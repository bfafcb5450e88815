/** `ferry init` through the real binary: files, the overwrite prompt answered on stdin, --force, exit codes. */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { CliSandbox } from './cli-support.js';

const sandbox = new CliSandbox();
afterAll(() => sandbox.cleanup());

const templateFiles = [
  'lb_worker.py',
  'gpu_worker.py',
  'cpu_worker.py',
  '.env.example',
  '.gitignore',
  'pyproject.toml',
  'requirements.txt',
  'README.md',
];

describe('ferry init', () => {
  it('writes the template with the project name substituted', async () => {
    const result = await sandbox.run(['init', 'my-app']);
    expect(result.code).toBe(0);
    const dir = path.join(sandbox.root, 'my-app');
    for (const file of templateFiles) expect(existsSync(path.join(dir, file)), file).toBe(true);
    expect(readFileSync(path.join(dir, 'pyproject.toml'), 'utf8')).toContain('name = "my-app"');
    expect(readFileSync(path.join(dir, '.env.example'), 'utf8')).toMatch(/^FERRY_API_KEY=/m);
    expect(readFileSync(path.join(dir, '.gitignore'), 'utf8')).toMatch(/^\.ferry\/$/m);
    expect(readFileSync(path.join(dir, 'lb_worker.py'), 'utf8')).toContain('@api.post("/process")');
    expect(readFileSync(path.join(dir, 'gpu_worker.py'), 'utf8')).toContain('except ImportError');
    expect(result.stdout).toBe('');
    expect(result.stderr).toContain('ferry dev');
    // The next steps are commands to copy, their comments in one column.
    const steps = result.stderr
      .slice(result.stderr.indexOf('Next steps:'))
      .split('\n')
      .filter((l) => l.includes(' # '));
    expect(steps.map((l) => l.slice(0, l.indexOf('# ')).trimEnd())).toEqual([
      '  cp .env.example .env',
      '  ferry sdk install',
      '  ferry dev',
      '  ferry deploy',
    ]);
    expect(new Set(steps.map((l) => l.indexOf('# '))).size).toBe(1);
  });

  it('lists conflicts and keeps every file when the answer is n (or an empty line), or when none comes', async () => {
    const dir = path.join(sandbox.root, 'my-app');
    writeFileSync(path.join(dir, 'cpu_worker.py'), 'mine\n');
    for (const input of ['n\n', '\n']) {
      const result = await sandbox.run(['init', 'my-app'], { input });
      expect(result.code).toBe(1);
      expect(result.stderr).toContain('cpu_worker.py');
      expect(result.stderr).toContain('[y/N]');
      expect(result.stderr).toContain('Error: Nothing written');
      expect(readFileSync(path.join(dir, 'cpu_worker.py'), 'utf8')).toBe('mine\n');
    }
    // No answer at all and no terminal (stdin closed): the user's to fix with --force, exit 2.
    const unanswered = await sandbox.run(['init', 'my-app'], { input: '' });
    expect(unanswered.code).toBe(2);
    expect(unanswered.stderr).toContain('cpu_worker.py');
    expect(unanswered.stderr).toContain('--force');
    expect(readFileSync(path.join(dir, 'cpu_worker.py'), 'utf8')).toBe('mine\n');
  });

  it('overwrites after y, and with --force / -f without asking', async () => {
    const dir = path.join(sandbox.root, 'my-app');
    const yes = await sandbox.run(['init', 'my-app'], { input: 'y\n' });
    expect(yes.code).toBe(0);
    expect(readFileSync(path.join(dir, 'cpu_worker.py'), 'utf8')).toContain('from ferry import Endpoint');
    for (const flag of ['--force', '-f']) {
      writeFileSync(path.join(dir, 'cpu_worker.py'), 'mine\n');
      const forced = await sandbox.run(['init', 'my-app', flag]);
      expect(forced.code).toBe(0);
      expect(forced.stderr).not.toContain('[y/N]');
      expect(readFileSync(path.join(dir, 'cpu_worker.py'), 'utf8')).toContain('from ferry import Endpoint');
    }
  });

  it('`.` is the current folder, named after it', async () => {
    const dir = path.join(sandbox.root, 'here-proj');
    mkdirSync(dir);
    const result = await sandbox.run(['init', '.'], { cwd: dir });
    expect(result.code).toBe(0);
    expect(readFileSync(path.join(dir, 'pyproject.toml'), 'utf8')).toContain('name = "here-proj"');
  });

  it('a folder name that is no app or package name: the files get the app name a deploy takes', async () => {
    const result = await sandbox.run(['init', 'My Project!']);
    expect(result.code, result.stderr).toBe(0);
    expect(result.stderr).toContain('named My-Project in its files');
    // pip takes it (PEP 508: letters, digits, . _ -, ending in a letter or digit).
    const toml = readFileSync(path.join(sandbox.root, 'My Project!', 'pyproject.toml'), 'utf8');
    expect(toml).toContain('name = "My-Project"');
    expect(readFileSync(path.join(sandbox.root, 'My Project!', 'README.md'), 'utf8')).toMatch(
      /^# My-Project\n/,
    );
  });

  it('the name it gives in the files is the app every other command takes in the folder', async () => {
    const result = await sandbox.run(['init', 'ünï']);
    expect(result.code, result.stderr).toBe(0);
    expect(result.stderr).toContain('named n in its files');
    const dir = path.join(sandbox.root, 'ünï');
    expect(readFileSync(path.join(dir, 'pyproject.toml'), 'utf8')).toContain('name = "n"');
    // Nothing deployed yet: the command names the app it looked for, `n` (it was `n-`).
    const envs = await sandbox.run(['env', 'list'], { cwd: dir });
    expect(envs.code).toBe(2);
    expect(envs.stderr).toContain("No app named 'n'\n");
  });

  it('without a name is a usage error (exit 2) with a hint', async () => {
    const result = await sandbox.run(['init']);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('Error: ferry init needs a project name');
    expect(result.stderr).toContain('hint:');
    expect(result.stderr).not.toMatch(/\n\s+at /);
  });

  it('into a path through a file is a usage error (exit 2) that says so, not a bug report', async () => {
    writeFileSync(path.join(sandbox.root, 'a-file'), 'x');
    for (const name of ['a-file', 'a-file/sub']) {
      const result = await sandbox.run(['init', name]);
      expect(result.code, name).toBe(2);
      expect(result.stderr).toMatch(
        /^Error: (a-file is not a folder|Cannot create a-file\/sub: a part of its path is a file)/,
      );
      expect(result.stderr).not.toContain('looks like a bug');
    }
  });
});
