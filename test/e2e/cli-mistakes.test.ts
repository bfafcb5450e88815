/**
 * A user's mistakes on the command line, through the real binary: flags given empty, folders Ferry
 * cannot write, prompts without a terminal, `--json` that must print only JSON. Each is exit 2 with a
 * one-line hint (docs/architecture.md#the-cli), never "a bug in Ferry" nor a stack trace.
 */
import { execFileSync, spawn } from 'node:child_process';
import {
  chmodSync,
  chownSync,
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CliSandbox, ferryBin, type RunResult } from './cli-support.js';

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

describe('flags given empty', () => {
  it('--host "" (serve, dev) is refused: it would listen on every interface', async () => {
    for (const args of [
      ['serve', '--host', ''],
      ['serve', '--host', '  '],
      ['dev', '--host', ''],
    ]) {
      const result = await sandbox.run(args, {
        cwd: project,
        env: { FERRY_API_KEY: 'k' },
        timeoutMs: 20_000,
      });
      expectUsage(result, '--host is empty', '--host 127.0.0.1');
      expect(result.stderr).toContain('--host 0.0.0.0');
    }
  });

  it('--port "" and --port= are refused, not read as 0 (any free port)', async () => {
    for (const args of [
      ['dev', '--port', ''],
      ['serve', '--port='],
    ]) {
      const result = await sandbox.run(args, {
        cwd: project,
        env: { FERRY_API_KEY: 'k' },
        timeoutMs: 20_000,
      });
      expectUsage(result, '--port is empty', 'or 0 for any free port');
    }
    const word = await sandbox.run(['serve', '--port', 'abc'], { timeoutMs: 20_000 });
    expectUsage(word, '--port abc is not a port', 'from 1 to 65535');
  });

  it('sdk install --python "" and images build --docker "" are usage errors; a --python that is not there too', async () => {
    expectUsage(await sandbox.run(['sdk', 'install', '--python', '']), '--python is empty', '--python');
    expectUsage(
      await sandbox.run(['images', 'build', '--docker', '', '--dry-run']),
      '--docker is empty',
      '--docker docker',
    );
    expectUsage(
      await sandbox.run(['sdk', 'install', '--python', '/nonexistent/python']),
      '--python /nonexistent/python was not found',
      'leave --python out',
    );
  });
});

describe('flags that do nothing where they are given', () => {
  it('the AWS-only deploy flags on the local provider or --preview, and serve --stop with other flags', async () => {
    for (const [args, flag] of [
      [['deploy', '--bootstrap'], 'bootstrap'],
      [['deploy', '--refresh-zones'], 'refresh-zones'],
      [['deploy', '--alarm-email', 'ops@example.com'], 'alarm-email'],
      [['deploy', '--provider', 'local', '--alarm-email', 'ops@example.com'], 'alarm-email'],
    ] as const) {
      const result = await sandbox.run([...args, '--no-serve'], { cwd: project, timeoutMs: 20_000 });
      expectUsage(result, `--${flag} is for --provider aws`, 'Add --provider aws');
      expect(result.stderr).not.toContain('Deploying');
    }
    const preview = await sandbox.run(['deploy', '--preview', '--provider', 'aws', '--bootstrap'], {
      cwd: project,
      timeoutMs: 20_000,
    });
    expectUsage(preview, '--bootstrap is for --provider aws', 'A --preview runs containers');
    for (const flag of [['--detach'], ['--worker-user', 'nobody'], ['--port', '9999']]) {
      const result = await sandbox.run(['serve', '--stop', ...flag], { timeoutMs: 20_000 });
      expectUsage(result, `--stop takes no ${flag[0]}`, 'ferry serve --stop');
    }
  });
});

describe('--json prints only JSON on stdout', () => {
  it('deploy --preview --json: the plan as one JSON document, even when Docker is missing', async () => {
    // A PATH with python3 only (the build needs it): no docker.
    const bin = path.join(sandbox.root, 'bin-python-only');
    mkdirSync(bin);
    const python = execFileSync('python3', ['-c', 'import sys; print(sys.executable)'], { encoding: 'utf8' });
    symlinkSync(python.trim(), path.join(bin, 'python3'));
    const result = await sandbox.run(['deploy', '--preview', '--json'], { cwd: project, env: { PATH: bin } });
    expect(result.code, result.stderr).toBe(1);
    expect(result.stderr).toContain('--preview needs Docker');
    const plan = JSON.parse(result.stdout) as { commands: string[][]; endpoints: { url: string }[] };
    expect(plan.commands[0]?.slice(0, 3)).toEqual(['docker', 'network', 'create']);
    expect(plan.commands.length).toBeGreaterThan(1);
    expect(plan.endpoints.length).toBeGreaterThan(0);
  }, 120_000);

  it('logs --help says --json prints JSON Lines', async () => {
    const help = await sandbox.run(['logs', '--help']);
    expect(help.stdout).toContain('JSON Lines (one object per line)');
  });
});

describe('prompts without a terminal', () => {
  it('init over existing files, undeploy NAME, undeploy --all and app delete need --force when nothing answers', async () => {
    const init = await sandbox.run(['init', 'mistakes']);
    expectUsage(init, /Error: .*needs confirmation/, '--force');
    expect(init.stderr).not.toContain('Cancelled');
    expect((await sandbox.run(['deploy', '--no-serve'], { cwd: project })).code).toBe(0);
    for (const args of [
      ['undeploy', 'cpu_worker'],
      ['undeploy', '--all'],
      ['app', 'delete', 'mistakes'],
    ]) {
      const result = await sandbox.run(args, { cwd: project });
      expectUsage(result, /Error: .*needs confirmation/, '--force');
    }
    // An answer piped in is still an answer: "n" declines (exit 1), nothing removed.
    const declined = await sandbox.run(['undeploy', 'cpu_worker'], { cwd: project, input: 'n\n' });
    expect(declined.code).toBe(1);
    expect(declined.stderr).toContain('Cancelled');
  }, 120_000);
});

describe('usage errors carry a hint', () => {
  it('secrets set with a reserved prefix, or a value over 64 KiB', async () => {
    expectUsage(
      await sandbox.run(['secrets', 'set', 'FERRY_X', '--app', 'mistakes', '--env', 'production'], {
        input: 'v',
      }),
      "Secret name 'FERRY_X' uses a reserved prefix",
      'MY_FERRY_X',
    );
    expectUsage(
      await sandbox.run(['secrets', 'set', 'BIG', '--app', 'mistakes', '--env', 'production'], {
        input: 'x'.repeat(65 * 1024),
      }),
      'A secret value is at most 65536 bytes',
    );
  });

  it('images build --kind nope, undeploy NAME --all, init on a file', async () => {
    expectUsage(
      await sandbox.run(['images', 'build', '--kind', 'nope', '--dry-run']),
      'Unknown worker image kind "nope"',
      '--kind base-cpu',
    );
    expectUsage(
      await sandbox.run(['undeploy', 'cpu_worker', '--all'], { cwd: project }),
      'Give an endpoint name or --all, not both',
    );
    writeFileSync(path.join(sandbox.root, 'afile'), '');
    expectUsage(await sandbox.run(['init', 'afile']), 'afile is not a folder', 'ferry init my-project');
  });
});

describe('a ":" in the project path', () => {
  it('builds a project whose folder has a ":" in its name (PYTHONPATH cannot hold it)', async () => {
    const colon = path.join(sandbox.root, 'with:colon');
    cpSync(project, colon, { recursive: true });
    rmSync(path.join(colon, '.ferry'), { recursive: true, force: true });
    const build = await sandbox.run(['build'], { cwd: colon });
    expect(build.code, build.stderr).toBe(0);
    expect(build.stderr).not.toContain('ModuleNotFoundError');
  }, 120_000);
});

describe('folders Ferry cannot write', () => {
  /**
   * Runs ferry as another user (nobody): as root, through setpriv, since root may write anything;
   * as anyone else, as that user (a folder of mode 0555 is then unwritable already).
   */
  const isRoot = process.getuid?.() === 0;
  const setpriv = ['/usr/bin/setpriv', '/bin/setpriv'].find((p) => existsSync(p));
  const nobody = 65_534;
  function runAsOther(args: string[], cwd: string, env: Record<string, string>): Promise<RunResult> {
    const command = isRoot ? setpriv! : process.execPath;
    const argv = isRoot
      ? [`--reuid=${nobody}`, `--regid=${nobody}`, '--clear-groups', process.execPath, ferryBin, ...args]
      : [ferryBin, ...args];
    // nobody may not reach root's own interpreters (pyenv under /root): the system's come first.
    const pathVar = isRoot
      ? `/usr/local/bin:/usr/bin:/bin:${process.env.PATH ?? ''}`
      : (process.env.PATH ?? '');
    return new Promise((resolve) => {
      const child = spawn(command, argv, {
        cwd,
        env: { ...process.env, FERRY_PORT: '0', PATH: pathVar, HOME: cwd, ...env },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (d) => {
        stdout += d;
      });
      child.stderr.on('data', (d) => {
        stderr += d;
      });
      child.on('close', (code) => resolve({ code, stdout, stderr }));
    });
  }

  it.skipIf(isRoot && !setpriv)(
    'build, deploy and dev in a project folder the user cannot write: "Cannot write <project>/.ferry", exit 2',
    async () => {
      const base = mkdtempSync(path.join(tmpdir(), 'ferry-readonly-'));
      try {
        chmodSync(base, 0o755);
        const readOnly = path.join(base, 'readonly');
        cpSync(project, readOnly, { recursive: true });
        rmSync(path.join(readOnly, '.ferry'), { recursive: true, force: true });
        const home = path.join(base, 'home');
        mkdirSync(home);
        if (isRoot) chownSync(home, nobody, nobody);
        else chmodSync(readOnly, 0o555);
        const env = { FERRY_HOME: home, FERRY_API_KEY: 'k' };
        for (const args of [['build'], ['deploy', '--no-serve'], ['dev', '--port', '0']]) {
          const result = await runAsOther(args, readOnly, env);
          expectUsage(result, `Cannot write ${path.join(readOnly, '.ferry')}`, /permissions/);
          // FERRY_HOME is fine: the hint is the project folder's.
          expect(result.stderr).not.toContain('FERRY_HOME');
        }
      } finally {
        chmodSync(base, 0o700);
        rmSync(base, { recursive: true, force: true });
      }
    },
    120_000,
  );

  it.skipIf(!isRoot || !setpriv)(
    "a FERRY_HOME the user can write but does not own (root's, mode 0777): a usage error, not a failed chmod",
    async () => {
      const base = mkdtempSync(path.join(tmpdir(), 'ferry-foreign-home-'));
      try {
        chmodSync(base, 0o755);
        const home = path.join(base, 'home');
        mkdirSync(home);
        chmodSync(home, 0o777);
        const own = path.join(base, 'project');
        cpSync(project, own, { recursive: true });
        rmSync(path.join(own, '.ferry'), { recursive: true, force: true });
        execFileSync('chown', ['-R', `${nobody}:${nobody}`, own]);
        const result = await runAsOther(['deploy', '--no-serve'], own, { FERRY_HOME: home });
        expectUsage(result, `Cannot use ${home} as Ferry's folder`, 'FERRY_HOME');
        expect(result.stderr).toContain('belongs to another user');
      } finally {
        rmSync(base, { recursive: true, force: true });
      }
    },
    120_000,
  );
});
