/**
 * The control-record commands through the real binary on the local provider, where several apps are
 * deployed from copies of one project: `ferry undeploy NAME` acts on the folder's app (as its --help
 * says), never on another app's endpoint of the same name; `keys create --name` and `env list --app`
 * refuse the user's mistakes with exit 2 and a hint that fits.
 */
import { cpSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CliSandbox } from './cli-support.js';

const sandbox = new CliSandbox();
afterAll(() => sandbox.cleanup());

const noStack = (stderr: string) => expect(stderr).not.toMatch(/\n\s+at .+:\d+:\d+/);

interface Listed {
  id: string;
  name: string;
  app: string;
  env: string;
}

describe('ferry undeploy NAME with the same project deployed as two apps', () => {
  const x1 = path.join(sandbox.root, 'x1');
  const x2 = path.join(sandbox.root, 'x2');
  /** A folder that is no project. */
  const outside = path.join(sandbox.root, 'elsewhere');
  const list = async (): Promise<Listed[]> => {
    const result = await sandbox.run(['undeploy', 'list', '--json'], { cwd: outside });
    expect(result.code, result.stderr).toBe(0);
    return JSON.parse(result.stdout) as Listed[];
  };
  const idOf = async (app: string, name: string) =>
    (await list()).find((e) => e.app === app && e.name === name)?.id;

  beforeAll(async () => {
    expect((await sandbox.run(['init', 'x1'])).code).toBe(0);
    cpSync(x1, x2, { recursive: true });
    mkdirSync(outside);
    for (const dir of [x1, x2]) {
      const deploy = await sandbox.run(['deploy', '--no-serve'], { cwd: dir });
      expect(deploy.code, deploy.stderr).toBe(0);
    }
  }, 120_000);

  it("in a project folder, a name is looked up in the folder's app only: another app's endpoint stays", async () => {
    const x2Gpu = (await idOf('x2', 'gpu_worker'))!;
    const byId = await sandbox.run(['undeploy', x2Gpu, '--force'], { cwd: outside });
    expect(byId.code, byId.stderr).toBe(0);

    const gone = await sandbox.run(['undeploy', 'gpu_worker', '--force'], { cwd: x2 });
    expect(gone.code).toBe(2);
    expect(gone.stderr).toContain("Error: No endpoint named 'gpu_worker' in app 'x2'\n");
    expect(gone.stderr).toMatch(
      /hint: 'gpu_worker' is deployed in x1\/production \(gpu-worker-\S+\): pass --app x1/,
    );
    expect(gone.stdout).toBe('');
    noStack(gone.stderr);
    expect(await idOf('x1', 'gpu_worker')).toBeDefined();

    // --env alone narrows within the folder's app: x2's, not a choice between x1 and x2.
    const x2Cpu = (await idOf('x2', 'cpu_worker'))!;
    const one = await sandbox.run(['undeploy', 'cpu_worker', '--env', 'production', '--force'], { cwd: x2 });
    expect(one.code, one.stderr).toBe(0);
    expect(one.stdout).toBe(`✓ Removed cpu_worker (${x2Cpu})\n`);
    expect(await idOf('x1', 'cpu_worker')).toBeDefined();

    // --app names another app explicitly, and an id addresses any endpoint.
    const x1Cpu = (await idOf('x1', 'cpu_worker'))!;
    const other = await sandbox.run(['undeploy', x1Cpu, '--force'], { cwd: x2 });
    expect(other.code, other.stderr).toBe(0);
    expect(other.stdout).toBe(`✓ Removed cpu_worker (${x1Cpu})\n`);
    const x1Gpu = (await idOf('x1', 'gpu_worker'))!;
    const named = await sandbox.run(['undeploy', 'gpu_worker', '--app', 'x1', '--force'], { cwd: x2 });
    expect(named.code, named.stderr).toBe(0);
    expect(named.stdout).toBe(`✓ Removed gpu_worker (${x1Gpu})\n`);
  });

  it('outside a project, a name is looked up in every app, and one that several apps have is refused (exit 2)', async () => {
    const help = await sandbox.run(['undeploy', '--help'], { cwd: outside });
    expect(help.stdout).toContain('[default: the folder name; for a NAME outside a project, every app]');
    const twice = await sandbox.run(['undeploy', 'lb_worker', '--force'], { cwd: outside });
    expect(twice.code).toBe(2);
    expect(twice.stderr).toMatch(
      /Error: 'lb_worker' is deployed in several places: x1\/production \(lb-worker-\S+\), x2\/production \(lb-worker-\S+\)\n/,
    );
    expect(twice.stderr).toContain('hint: Choose with --app (and --env), or give an id.');
    noStack(twice.stderr);
    expect((await list()).filter((e) => e.name === 'lb_worker')).toHaveLength(2);
    const x2Lb = (await idOf('x2', 'lb_worker'))!;
    const chosen = await sandbox.run(['undeploy', 'lb_worker', '--app', 'x2', '--force'], { cwd: outside });
    expect(chosen.code, chosen.stderr).toBe(0);
    expect(chosen.stdout).toBe(`✓ Removed lb_worker (${x2Lb})\n`);
    // Now only x1 has one: a name that one app has is found there, as before.
    const x1Lb = (await idOf('x1', 'lb_worker'))!;
    const only = await sandbox.run(['undeploy', 'lb_worker', '--force'], { cwd: outside });
    expect(only.code, only.stderr).toBe(0);
    expect(only.stdout).toBe(`✓ Removed lb_worker (${x1Lb})\n`);
  });

  it("keys create in a project folder says the key reaches every app and gives the folder app's line", async () => {
    // Keys of a FERRY_HOME of their own: another test counts the sandbox's keys.
    const env = { FERRY_HOME: path.join(sandbox.root, 'keys-home') };
    const wide = await sandbox.run(['keys', 'create', '--name', 'wide', '--json'], { cwd: x1, env });
    expect(wide.code, wide.stderr).toBe(0);
    expect(wide.stderr).toContain(
      "This key reaches the endpoints of every app. A key for app 'x1' only: ferry keys create --app x1\n",
    );
    // stdout stays the data a script reads.
    expect(JSON.parse(wide.stdout)).toMatchObject({ name: 'wide', scope: {} });

    // The line it gives makes a key of that app only (what such a key reaches: test/security/key-scope.test.ts).
    const narrow = await sandbox.run(['keys', 'create', '--app', 'x1', '--name', 'narrow'], { cwd: x1, env });
    expect(narrow.code, narrow.stderr).toBe(0);
    expect(narrow.stderr).toContain('(narrow, app x1)');
    expect(narrow.stderr).not.toContain('every app');

    // Outside a project there is no narrower line to give.
    const elsewhere = await sandbox.run(['keys', 'create', '--name', 'elsewhere'], { cwd: outside, env });
    expect(elsewhere.code, elsewhere.stderr).toBe(0);
    expect(elsewhere.stderr).toContain('(elsewhere, all apps)');
    expect(elsewhere.stderr).not.toContain('every app');
  });
});

describe('record commands refuse the user’s mistakes with a hint that fits', () => {
  it('keys create --name: blank, bare, too long or with a newline is exit 2; the label is kept trimmed', async () => {
    for (const [args, message] of [
      [['--name', ''], 'Error: --name needs a label: it was empty\n'],
      [['--name', '   '], 'Error: --name needs a label: it was empty\n'],
      [['--name'], 'Error: --name needs a label: it was empty\n'],
      [['--name', 'x'.repeat(5000)], 'Error: --name is 5000 characters long: at most 63\n'],
      [['--name', 'two\nlines'], 'holds a tab, newline or other control character\n'],
    ] as const) {
      const result = await sandbox.run(['keys', 'create', ...args]);
      expect(result.code, args.join(' ')).toBe(2);
      expect(result.stderr).toContain(message);
      expect(result.stderr).toContain('hint: Give a label of 1 to 63 characters, e.g. --name ci.');
      expect(result.stdout).toBe('');
      noStack(result.stderr);
    }
    const listed = async () =>
      JSON.parse((await sandbox.run(['keys', 'list', '--json'])).stdout) as Array<{ name: string }>;
    // Only the default key of FERRY_HOME (made on first use): none of the above was stored.
    expect((await listed()).map((k) => k.name).filter((n) => !n.startsWith('default'))).toEqual([]);
    for (const args of [['--name', '  ci deploys  '], ['--name', 'y'.repeat(63)], []]) {
      const result = await sandbox.run(['keys', 'create', ...args]);
      expect(result.code, result.stderr).toBe(0);
    }
    expect(
      (await listed())
        .map((k) => k.name)
        .filter((n) => !n.startsWith('default'))
        .sort(),
    ).toEqual(['ci deploys', 'cli', 'y'.repeat(63)]);
  });

  it('env list --app NAME of no app: the hint lists the apps rather than saying to pass --app', async () => {
    const result = await sandbox.run(['env', 'list', '--app', 'bad name']);
    expect(result.code).toBe(2);
    expect(result.stderr).toBe(
      "Error: No app named 'bad name'\n  hint: See the apps with `ferry app list`.\n",
    );
    // Without --app (the folder's app): deploy it, or name another.
    const folder = await sandbox.run(['env', 'list']);
    expect(folder.code).toBe(2);
    expect(folder.stderr).toContain('hint: Run `ferry deploy` to create it, or pass --app.');
  });
});

/**
 * Where each column of a table line starts: the first character after a run of two or more spaces
 * (cells hold at most single spaces: `(queue, gpu_worker.py)`).
 */
const columnStarts = (line: string) => [...line.matchAll(/ {2,}(?=\S)/g)].map((m) => m.index + m[0].length);

/** The lines of `text` whose first cell is one of `firsts` (after the indent). */
const rowsOf = (text: string, firsts: readonly string[]) =>
  text.split('\n').filter((line) => firsts.includes(line.trim().split(/\s+/)[0] ?? ''));

/** Every row has as many columns as the first, each starting where the first row's does. */
function expectAligned(rows: string[], columns: number): void {
  expect(rows.length, rows.join('\n')).toBeGreaterThan(1);
  for (const row of rows) {
    expect(columnStarts(row), rows.join('\n')).toEqual(columnStarts(rows[0]!));
    expect(columnStarts(row)).toHaveLength(columns);
  }
}

describe('app get, env get and the build summary print their columns aligned', () => {
  const project = path.join(sandbox.root, 'cols');
  // The names `ferry init` gives the example endpoints: of two lengths, lb (load-balanced) and queue.
  const endpoints = ['lb_worker', 'gpu_worker', 'cpu_worker'];

  beforeAll(async () => {
    expect((await sandbox.run(['init', 'cols'])).code).toBe(0);
    const deploy = await sandbox.run(['deploy', '--no-serve'], { cwd: project });
    expect(deploy.code, deploy.stderr).toBe(0);
    // A second environment with a shorter name and no build.
    expect((await sandbox.run(['env', 'create', 'qa', '--app', 'cols'])).code).toBe(0);
  }, 120_000);

  it('ferry build: the endpoint rows', async () => {
    const build = await sandbox.run(['build'], { cwd: project });
    expect(build.code, build.stderr).toBe(0);
    expectAligned(rowsOf(build.stdout, endpoints), 2);
  }, 120_000);

  it('ferry env get: the build and deployed rows, and the endpoint rows under their header', async () => {
    const env = await sandbox.run(['env', 'get', 'production', '--app', 'cols']);
    expect(env.code, env.stderr).toBe(0);
    expectAligned(rowsOf(env.stdout, ['build', 'deployed']), 2);
    expectAligned(rowsOf(env.stdout, ['ENDPOINT', ...endpoints]), 3);
  });

  it('ferry app get: the environment rows and the endpoint rows, each under their header', async () => {
    const app = await sandbox.run(['app', 'get', 'cols']);
    expect(app.code, app.stderr).toBe(0);
    expectAligned(rowsOf(app.stdout, ['ENVIRONMENT', 'production', 'qa']), 3);
    expectAligned(rowsOf(app.stdout, ['ENDPOINT', ...endpoints]), 4);
  });
});
