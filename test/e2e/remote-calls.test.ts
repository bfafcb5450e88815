/**
 * Remote calls (docs/python.md) through the real CLI and real Python workers: a plain script outside
 * any worker calls @Endpoint functions and an LB route by name, one endpoint's function calls
 * another's, and Endpoint(id=...) drives a job — after `ferry deploy` (local provider, `ferry serve`)
 * and under `ferry dev`. Every result says which process and endpoint computed it.
 */
import { execFile } from 'node:child_process';
import { cpSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { CliSandbox, repoRoot } from './cli-support.js';

const run = promisify(execFile);
const fixture = path.join(repoRoot, 'test', 'e2e', 'fixtures', 'remote-calls');
const apiKey = 'fy_remote_calls_key';

async function runScript(project: string, apiUrl: string, env: Record<string, string> = {}) {
  const { stdout } = await run('python3', ['script.py'], {
    cwd: project,
    timeout: 240_000,
    env: {
      ...process.env,
      PYTHONPATH: path.join(repoRoot, 'worker-image', 'python'),
      FERRY_API_URL: apiUrl,
      FERRY_API_KEY: apiKey,
      ...env,
    },
  });
  return JSON.parse(stdout.trim().split('\n').pop()!) as Record<string, any>;
}

function expectRemoteResults(out: Record<string, any>) {
  const ids = out.ids as Record<string, string>;
  // Computed in worker processes of the callee's endpoint, not in the script.
  expect(out.positional).toMatchObject({ sum: 5, endpoint: ids.callee });
  expect(out.positional.pid).not.toBe(out.script_pid);
  expect(out.keywords).toMatchObject({ sum: 5, endpoint: ids.callee });
  // caller's worker sent a job to callee's endpoint: two processes, two endpoints.
  expect(out.nested).toMatchObject({ endpoint: ids.caller, inner: { sum: 15, endpoint: ids.callee } });
  expect(out.nested.inner.pid).not.toBe(out.nested.pid);
  expect(out.nested.pid).not.toBe(out.script_pid);
  expect(out.lb).toMatchObject({ sum: 3, endpoint: ids.api });
  expect(out.lb.pid).not.toBe(out.script_pid);
  expect(out.lb_post).toMatchObject({ sum: 11, endpoint: ids.api });
  expect(out.lb_post_by_id).toMatchObject({ sum: 15, endpoint: ids.api });
  expect(out.failure).toMatchObject({ status: 'FAILED', message: 'boom: bad' });
  expect(out.failure.job).toEqual(expect.any(String));
  expect(out.stream).toEqual([{ i: 0 }, { i: 1 }, { i: 2 }]);
  expect(out.stream_status).toBe('COMPLETED');
  expect(out.runsync).toEqual([{ i: 0 }, { i: 1 }]);
  expect(out.health.jobs.completed).toBeGreaterThanOrEqual(2);
  expect(out.cancelled).toBe('CANCELLED');
  expect(out.output).toBe('done');
  expect(out.timeout).toMatchObject({ status: 'TIMED_OUT', job: expect.any(String) });
  expect(out.not_deployed).toContain("Endpoint 'nope' is not deployed");
}

describe('remote calls after ferry deploy (local provider)', () => {
  const sandbox = new CliSandbox();
  afterAll(() => sandbox.cleanup());

  it('a script and a worker call endpoints by name; Endpoint(id=...) drives jobs', async () => {
    const project = path.join(sandbox.root, 'calls');
    cpSync(fixture, project, { recursive: true });
    const deploy = await sandbox.run(['deploy'], { cwd: project, env: { FERRY_API_KEY: apiKey } });
    expect(deploy.code, deploy.stderr).toBe(0);
    const apiUrl = /(http:\/\/127\.0\.0\.1:\d+)\/lb\//.exec(deploy.stdout)![1]!;
    const out = await runScript(project, apiUrl);
    expectRemoteResults(out);
    // With neither FERRY_API_URL nor FERRY_PORT, a script finds the `ferry serve` of its FERRY_HOME
    // wherever it listens (here a port picked at start), as the CLI does: not 127.0.0.1:8888.
    const found = await run(
      'python3',
      ['-c', 'from ferry.client import Platform; print(Platform.from_environ().url)'],
      {
        cwd: project,
        env: sandbox.env({
          PYTHONPATH: path.join(repoRoot, 'worker-image', 'python'),
          FERRY_PORT: undefined,
          FERRY_API_URL: undefined,
        }),
      },
    );
    expect(found.stdout.trim()).toBe(apiUrl);
    // The callee's endpoint recorded the job the caller's worker sent it.
    const health = await fetch(`${apiUrl}/v2/${out.ids.callee}/health`, {
      headers: { authorization: `Bearer ${apiKey}` },
    });
    expect(((await health.json()) as any).jobs.completed).toBeGreaterThanOrEqual(3);
  }, 300_000);
});

describe('remote calls under ferry dev', () => {
  const sandbox = new CliSandbox();
  afterAll(() => sandbox.cleanup());

  it('the same script reaches the live endpoints through the dev server', async () => {
    // A folder name the app rule rewrites (dev.calls → dev-calls): the script and ferry dev must agree.
    const project = path.join(sandbox.root, 'dev.calls');
    cpSync(fixture, project, { recursive: true });
    writeFileSync(path.join(project, '.env'), `FERRY_API_KEY=${apiKey}\n`);
    const started = await sandbox.start(
      ['dev', '--host', '127.0.0.1', '--port', '0', '--no-reload'],
      /Ferry dev server at (http:\/\/\S+)/,
      { cwd: project },
    );
    const out = await runScript(project, started.match[1]!);
    expectRemoteResults(out);
    expect(out.ids.callee).toMatch(/^live-callee-/);
  }, 300_000);
});
