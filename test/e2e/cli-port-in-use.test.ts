/**
 * A port in use is the user's to change, through the real binary, whichever command met it: exit 2,
 * `Error: Port N on HOST is in use`, and a hint naming the setting that chose the port (FERRY_PORT,
 * or --port). A local deploy finds it before it builds anything; a detached server that loses the
 * port anyway exits 2 and its caller says the same; `ferry dev` finds it before its platform starts.
 * Each port is held by a listener of this test's own, picked free at run time.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';
import { pickChildPort } from '../../core/child-port.js';
import { CliSandbox, type RunResult } from './cli-support.js';

const sandbox = new CliSandbox();
let project = '';
const held: Server[] = [];

beforeAll(async () => {
  const init = await sandbox.run(['init', 'ports']);
  expect(init.code, init.stderr).toBe(0);
  project = path.join(sandbox.root, 'ports');
});
afterEach(async () => {
  for (const server of held.splice(0)) await new Promise((resolve) => server.close(resolve));
});
afterAll(() => sandbox.cleanup());

/** A port free a moment ago, now held by a listener of this test's own until the test ends. */
async function busyPort(): Promise<number> {
  const port = await pickChildPort({ host: '127.0.0.1' });
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  held.push(server);
  return port;
}

const fromFerryPort = (port: number) =>
  `  hint: Stop what listens on port ${port}, or set FERRY_PORT to another port (or unset it for the default, 8888).\n`;

/** The usage error of a taken port, and nothing else on stderr after it: no stack, no log dump. */
function refusedTaken(result: RunResult, port: number, hint: string): void {
  expect(result.code, result.stderr).toBe(2);
  expect(result.stderr).toContain(`Error: Port ${port} on 127.0.0.1 is in use\n${hint}`);
  expect(result.stderr.endsWith(hint), result.stderr).toBe(true);
  expect(result.stderr).not.toContain('ferry serve did not start');
  expect(result.stderr).not.toContain('looks like a bug');
  expect(result.stderr).not.toMatch(/\n\s+at .+:\d+:\d+/);
}

/** Whether any process of the group `pid` led is still there. */
function groupAlive(pid: number): boolean {
  try {
    process.kill(-pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

it('a local deploy finds a taken FERRY_PORT before it builds anything: exit 2, FERRY_PORT named', async () => {
  const port = await busyPort();
  mkdirSync(sandbox.home, { recursive: true });
  const serveLog = path.join(sandbox.home, 'serve.log');
  writeFileSync(serveLog, 'Error: an old failure of another day\n  hint: an old hint\n');
  const result = await sandbox.run(['deploy', '--env', 'dev'], {
    cwd: project,
    env: { FERRY_PORT: String(port) },
  });
  refusedTaken(result, port, fromFerryPort(port));
  expect(result.stderr).not.toContain('an old');
  // Found before the build: nothing was built, uploaded or recorded first.
  expect(result.stderr).not.toContain('[1/5] Build');
  expect(existsSync(path.join(project, '.ferry', 'artifact.tar.gz'))).toBe(false);
  // No server was detached: none wrote to the log or recorded itself.
  expect(readFileSync(serveLog, 'utf8')).toBe('Error: an old failure of another day\n  hint: an old hint\n');
  expect(existsSync(path.join(sandbox.home, 'server.json'))).toBe(false);
}, 120_000);

it('`ferry serve` names what chose the taken port: FERRY_PORT, or --port', async () => {
  const port = await busyPort();
  const viaEnv = await sandbox.run(['serve'], { cwd: project, env: { FERRY_PORT: String(port) } });
  refusedTaken(viaEnv, port, fromFerryPort(port));
  expect(viaEnv.stderr).not.toContain('--port');
  const viaFlag = await sandbox.run(['serve', '--port', String(port)], {
    cwd: project,
    env: { FERRY_PORT: '1' },
  });
  refusedTaken(viaFlag, port, '  hint: Pass --port <n>.\n');
});

it("a detached server that finds its port taken exits 2, and `ferry serve --detach` says its error, this start's only", async () => {
  // serve --detach checks nothing itself: the background server meets the taken port at its listen,
  // as a deploy's server does when the port is taken between the deploy's check and that listen.
  const port = await busyPort();
  const serveLog = path.join(sandbox.home, 'serve.log');
  mkdirSync(sandbox.home, { recursive: true });
  writeFileSync(serveLog, 'Error: an old failure of another day\n  hint: an old hint\n');
  const viaEnv = await sandbox.run(['serve', '--detach'], {
    cwd: project,
    env: { FERRY_PORT: String(port) },
  });
  refusedTaken(viaEnv, port, fromFerryPort(port));
  expect(viaEnv.stderr).not.toContain('an old');
  const viaFlag = await sandbox.run(['serve', '--detach', '--port', String(port)], { cwd: project });
  refusedTaken(viaFlag, port, '  hint: Pass --port <n>.\n');
  expect(existsSync(path.join(sandbox.home, 'server.json'))).toBe(false);
  // Any other failure is still Ferry's to report with the log lines of this start: here a FERRY_HOME
  // whose database is a folder (a home of its own: the sandbox's has a real database by now), and a
  // log holding the old failure and the two refusals above.
  const home = path.join(sandbox.root, 'home-with-broken-db');
  mkdirSync(path.join(home, 'ferry.db'), { recursive: true });
  writeFileSync(path.join(home, 'serve.log'), readFileSync(serveLog));
  const broken = await sandbox.run(['serve', '--detach'], { cwd: project, env: { FERRY_HOME: home } });
  expect(broken.code, broken.stderr).toBe(1);
  expect(broken.stderr).toContain('ferry serve did not start:\nError: ');
  expect(broken.stderr).not.toContain('an old');
  expect(broken.stderr).not.toContain('is in use');
});

it('`ferry dev` finds a taken FERRY_PORT before its platform starts: exit 2, nothing started or left', async () => {
  const dir = path.join(sandbox.root, 'dev-busy');
  mkdirSync(dir);
  writeFileSync(
    path.join(dir, 'one.py'),
    'from ferry import Endpoint\n\n\n@Endpoint(name="one", cpu="1-2")\ndef one(x=0):\n    return x\n',
  );
  writeFileSync(path.join(dir, '.env'), 'FERRY_API_KEY=fy_dev_local\n');
  const port = await busyPort();
  let pid: number | undefined;
  const result = await sandbox.run(['dev', '--host', '127.0.0.1', '--auto-provision', '--no-reload'], {
    cwd: dir,
    env: { FERRY_PORT: String(port) },
    timeoutMs: 30_000,
    onSpawn: (child) => {
      pid = child.pid;
    },
  });
  refusedTaken(result, port, fromFerryPort(port));
  expect(result.stdout).toBe('');
  // No platform: it would have made its database in .ferry/ and provisioned (--auto-provision) the
  // endpoint, whose workers and venv come next.
  expect(result.stderr).not.toContain('provision');
  expect(existsSync(path.join(dir, '.ferry', 'ferry.db'))).toBe(false);
  expect(existsSync(path.join(dir, '.ferry', 'resources.json'))).toBe(false);
  expect(existsSync(path.join(dir, '.ferry', 'venvs'))).toBe(false);
  // Nothing of its process group is left running (or listening).
  expect(pid).toBeGreaterThan(0);
  expect(groupAlive(pid!)).toBe(false);
});
