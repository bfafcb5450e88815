/**
 * `ferry dev --auto-provision` (docs/api.md#limits): every endpoint is provisioned at startup, and more than
 * five ask for confirmation first (no answer means no: each starts on its first call instead).
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, expect, it } from 'vitest';
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
