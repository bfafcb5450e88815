/**
 * `ferry dev` startup: --auto-provision (docs/api.md#limits) provisions every endpoint at startup, and
 * more than five ask for confirmation first (no answer means no: each starts on its first call
 * instead); without --port the dev server listens on FERRY_PORT exactly, as a local deploy does. A
 * project route at a path the dev server serves itself stops it before anything starts.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import path from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { pickChildPort } from '../../core/child-port.js';
import { CliSandbox, stopChild } from './cli-support.js';

const sandbox = new CliSandbox();
afterAll(() => sandbox.cleanup());

function project(name: string, endpoints: number): string {
  const dir = path.join(sandbox.root, name);
  mkdirSync(dir, { recursive: true });
  const functions = Array.from(
    { length: endpoints },
    (_, i) => `@Endpoint(name="e${i}", cpu="1-2")\ndef f${i}(x=0):\n    return x + ${i}\n`,
  );
  writeFileSync(path.join(dir, 'many.py'), `from ferry import Endpoint\n\n\n${functions.join('\n\n')}`);
  writeFileSync(path.join(dir, '.env'), 'FERRY_API_KEY=fy_dev_local\n');
  return dir;
}

const resources = (dir: string) => {
  const file = path.join(dir, '.ferry', 'resources.json');
  return existsSync(file) ? Object.keys(JSON.parse(readFileSync(file, 'utf8'))).sort() : [];
};

it('provisions every endpoint at startup', async () => {
  const dir = project('three', 3);
  const { child } = await sandbox.start(
    ['dev', '--host', '127.0.0.1', '--port', '0', '--auto-provision', '--no-reload'],
    /Ferry dev server at (http:\/\/\S+)/,
    { cwd: dir },
  );
  expect(resources(dir)).toEqual(['e0', 'e1', 'e2']);
  await stopChild(child);
});

it('asks before provisioning more than five, and no answer means no', async () => {
  const dir = project('six', 6);
  const started = await sandbox.start(
    ['dev', '--host', '127.0.0.1', '--port', '0', '--auto-provision', '--no-reload'],
    /Ferry dev server at (http:\/\/\S+)/,
    { cwd: dir },
  );
  const { stderr } = started.output();
  expect(stderr).toContain('Provision all 6 endpoints now?');
  expect(stderr).toContain('each endpoint starts on its first call');
  expect(resources(dir)).toEqual([]);
  await stopChild(started.child);
});

const noStack = (stderr: string) => expect(stderr).not.toMatch(/\n\s+at .+:\d+:\d+/);

it('listens on the port FERRY_PORT names when no --port is given', async () => {
  const dir = project('ferry-port', 1);
  const port = await pickChildPort({ host: '127.0.0.1' });
  const started = await sandbox.start(
    ['dev', '--host', '127.0.0.1', '--no-reload'],
    /Ferry dev server at (http:\/\/\S+)/,
    { cwd: dir, env: { FERRY_PORT: String(port) } },
  );
  expect(started.match[1]).toBe(`http://127.0.0.1:${port}`);
  expect((await fetch(`http://127.0.0.1:${port}/`)).status).toBe(200);
  await stopChild(started.child);
});

it('refuses a FERRY_PORT that is taken, or no port: exit 2 with a hint, no stack', async () => {
  const dir = project('ferry-port-bad', 1);
  const taken = createServer();
  const port = await pickChildPort({ host: '127.0.0.1' });
  await new Promise<void>((resolve) => taken.listen(port, '127.0.0.1', resolve));
  try {
    const busy = await sandbox.run(['dev', '--host', '127.0.0.1', '--no-reload'], {
      cwd: dir,
      env: { FERRY_PORT: String(port) },
      timeoutMs: 30_000,
    });
    expect(busy.code, busy.stderr).toBe(2);
    expect(busy.stderr).toContain(`Error: Port ${port} on 127.0.0.1 is in use`);
    expect(busy.stderr).toContain(
      `hint: Stop what listens on port ${port}, or set FERRY_PORT to another port`,
    );
    expect(busy.stdout).not.toContain('Ferry dev server at');
    noStack(busy.stderr);
  } finally {
    await new Promise((resolve) => taken.close(resolve));
  }
  const bad = await sandbox.run(['dev', '--no-reload'], {
    cwd: dir,
    env: { FERRY_PORT: 'abc' },
    timeoutMs: 30_000,
  });
  expect(bad.code, bad.stderr).toBe(2);
  expect(bad.stderr).toBe(
    'Error: FERRY_PORT="abc" is not a port\n  hint: Set it to a whole number from 1 to 65535 (0 picks any free port), or unset it for 8888.\n',
  );
});

it("refuses a route at a path ferry dev serves itself (Swagger UI's /docs/json): exit 2 naming the route, with a hint, no stack", async () => {
  const dir = path.join(sandbox.root, 'own-path');
  mkdirSync(dir);
  // A root __init__.py's routes are at their own paths.
  writeFileSync(
    path.join(dir, '__init__.py'),
    'from ferry import Endpoint\n\napi = Endpoint(name="api", cpu="1-2")\n\n\n@api.get("/docs/json")\ndef spec():\n    return {}\n',
  );
  writeFileSync(path.join(dir, '.env'), 'FERRY_API_KEY=fy_dev_local\n');
  const refused = await sandbox.run(['dev', '--host', '127.0.0.1', '--port', '0', '--no-reload'], {
    cwd: dir,
    timeoutMs: 30_000,
  });
  expect(refused.code, refused.stderr).toBe(2);
  expect(refused.stderr).toContain(
    'Error: @api.get("/docs/json") of __init__.py is GET /docs/json, a path ferry dev serves itself ' +
      "(Swagger UI's OpenAPI document, at /docs/json). Rename the route or its module: ferry dev serves " +
      '/, /ping, /openapi.json, /docs, /docs/, /docs/json, /docs/yaml, /docs/static/*, /manage/v1/*, /v2/* and /lb/* itself\n',
  );
  expect(refused.stderr).toContain('hint: Rename the route or its module, then run ferry dev again.');
  expect(refused.stdout).not.toContain('Ferry dev server at');
  noStack(refused.stderr);
});
