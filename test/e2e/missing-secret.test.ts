/**
 * An endpoint deployed with a `secrets=` name that has no value yet (docs/security.md, "Secrets"):
 * the pool cannot give its workers what they need, so none starts. The endpoint is failing until the
 * value is set: health says which secret and how to set it, and a job ends FAILED with that at once
 * instead of waiting out its TTL in the queue (the pool used to log the error every second and leave
 * jobs IN_QUEUE). Setting the value is enough: the next pass starts a worker that sees it. Deleting a
 * value a running endpoint holds makes it failing the same way, and `ferry secrets delete` has the
 * running platform do so before it answers. A real platform, a real static scan and a real Python
 * worker; for `ferry secrets delete` and under `ferry dev`, the real CLI.
 */
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { scanProject } from '../../cli/build/scan.js';
import { serverInfoPath } from '../../cli/serve.js';
import { type RolloutReport, reconcilePath } from '../../core/adapters/local/rollout.js';
import { hashKey } from '../../core/auth.js';
import { recordFor } from '../support/endpoints.js';
import { call, startTestPlatform, type TestPlatform, testApiKey } from '../support/platform.js';
import { CliSandbox } from './cli-support.js';

const project = mkdtempSync(join(tmpdir(), 'ferry-missing-secret-'));
writeFileSync(
  join(project, 'app.py'),
  [
    'import os',
    'from ferry import Endpoint',
    '',
    '@Endpoint(name="needs", cpu="1-2", workers=(0, 1), secrets=["HF_TOKEN"])',
    'def needs(x=1):',
    '    return {"token": os.environ.get("HF_TOKEN")}',
    '',
  ].join('\n'),
);

let platform: TestPlatform;
const scope = { app: 'test', env: 'production' };
const hint = 'ferry secrets set HF_TOKEN --app test --env production';

beforeAll(async () => {
  platform = await startTestPlatform({
    workers: { ferryPythonPath: resolve('worker-image/python'), tickMs: 100, reconcileIntervalMs: 200 },
  });
  const { endpoints } = await scanProject({ projectDir: project });
  await platform.db.control.putEndpoint(recordFor(endpoints[0]!, project));
  await platform.workers!.reconcile();
}, 60_000);

afterAll(async () => {
  await platform?.stop();
  rmSync(project, { recursive: true, force: true });
});

describe('a secret the endpoint declares has no value', () => {
  it('the endpoint is failing: health names the secret and the command, a job ends FAILED at once', async () => {
    const health = await call(platform.baseUrl, 'GET', '/needs/health');
    expect(health.body.problem).toMatchObject({ state: 'failing' });
    expect(health.body.problem.reason).toContain('secrets not set: HF_TOKEN');
    expect(health.body.problem.reason).toContain(hint);
    const started = Date.now();
    const job = await call(platform.baseUrl, 'POST', '/needs/runsync?wait=30000', { input: {} });
    expect(job.body.status).toBe('FAILED');
    expect(job.body.error).toContain('secrets not set: HF_TOKEN');
    // Ended by the endpoint's state, not by the 30 s wait running out.
    expect(Date.now() - started).toBeLessThan(15_000);
  }, 60_000);

  it("the platform's roll-now route (what ferry deploy asks) says why the endpoint starts no worker", async () => {
    const url = `${platform.baseUrl.replace(/\/v2$/, '')}${reconcilePath}`;
    const keyless = await fetch(url, { method: 'POST' });
    expect(keyless.status).toBe(401);
    expect(await keyless.json()).toEqual({ error: expect.any(String) });
    const response = await fetch(url, { method: 'POST', headers: { authorization: `Bearer ${testApiKey}` } });
    expect(response.status).toBe(200);
    const { endpoints } = (await response.json()) as RolloutReport;
    expect(endpoints).toEqual([
      { id: 'needs', running: false, problem: expect.stringContaining('secrets not set: HF_TOKEN') },
    ]);
    expect(endpoints[0]!.problem).toContain(hint);
  });

  it('setting the value is enough: the next job runs in a worker that sees it, and health is clear', async () => {
    const secrets = platform.db.openSecrets(join(platform.dataDir, 'secrets.key'));
    await secrets.set(scope, 'HF_TOKEN', 'hf_value');
    const job = await call(platform.baseUrl, 'POST', '/needs/runsync?wait=60000', { input: {} });
    expect(job.body).toMatchObject({ status: 'COMPLETED', output: { token: 'hf_value' } });
    const health = await call(platform.baseUrl, 'GET', '/needs/health');
    expect(health.body.problem).toBeUndefined();
  }, 90_000);
});

describe('a secret a running endpoint holds is deleted (ferry secrets delete)', () => {
  const held = mkdtempSync(join(tmpdir(), 'ferry-held-secret-'));
  afterAll(() => rmSync(held, { recursive: true, force: true }));

  it('its workers drain and no new one starts with the deleted value: health names the secret, a job ends FAILED; set again, it runs', async () => {
    writeFileSync(
      join(held, 'app.py'),
      [
        'import os',
        'from ferry import Endpoint',
        '',
        '@Endpoint(name="held", cpu="1-2", workers=(1, 1), secrets=["KEEP"])',
        'def held(x=1):',
        '    return {"token": os.environ.get("KEEP")}',
        '',
      ].join('\n'),
    );
    const secrets = platform.db.openSecrets(join(platform.dataDir, 'secrets.key'));
    await secrets.set(scope, 'KEEP', 'leaked');
    const { endpoints } = await scanProject({ projectDir: held });
    await platform.db.control.putEndpoint(recordFor(endpoints[0]!, held));
    await platform.workers!.reconcile();
    const before = await call(platform.baseUrl, 'POST', '/held/runsync?wait=60000', { input: {} });
    expect(before.body).toMatchObject({ status: 'COMPLETED', output: { token: 'leaked' } });

    expect(await secrets.delete(scope, 'KEEP')).toBe(true);
    await platform.workers!.reconcileNow();
    const health = await call(platform.baseUrl, 'GET', '/held/health');
    expect(health.body.problem).toMatchObject({ state: 'failing' });
    expect(health.body.problem.reason).toContain('secrets not set: KEEP');
    expect(health.body.problem.reason).toContain('ferry secrets set KEEP --app test --env production');
    // The running worker was given the deleted value: it takes no job, and no new one starts with it.
    const after = await call(platform.baseUrl, 'POST', '/held/runsync?wait=30000', { input: {} });
    expect(after.body.status).toBe('FAILED');
    expect(after.body.error).toContain('secrets not set: KEEP');

    // As `ferry secrets set` does with the running serve: it asks for a pass now (reconcileNow).
    await secrets.set(scope, 'KEEP', 'rotated');
    await platform.workers!.reconcileNow();
    const again = await call(platform.baseUrl, 'POST', '/held/runsync?wait=60000', { input: {} });
    expect(again.body).toMatchObject({ status: 'COMPLETED', output: { token: 'rotated' } });
    expect((await call(platform.baseUrl, 'GET', '/held/health')).body.problem).toBeUndefined();
  }, 120_000);
});

describe('ferry secrets delete with a ferry serve running', () => {
  const sandbox = new CliSandbox();
  const held = mkdtempSync(join(tmpdir(), 'wf-drained-secret-'));
  const dataDir = mkdtempSync(join(tmpdir(), 'wf-drained-serve-'));
  let serve: TestPlatform | undefined;
  afterAll(async () => {
    await serve?.stop();
    await sandbox.cleanup();
    for (const dir of [held, dataDir]) rmSync(dir, { recursive: true, force: true });
  });

  it('has the serve drain the workers before it answers: health is failing at once and the next job ends FAILED', async () => {
    // This serve's pools read the records only when asked (an hour apart on their own), so nothing
    // the delete did not ask for happens before the test looks: it read them once a second, and for
    // up to that second after the delete answered, the idle worker took the next job with the value.
    serve = await startTestPlatform({
      dataDir,
      workers: {
        ferryPythonPath: resolve('worker-image/python'),
        tickMs: 100,
        reconcileIntervalMs: 3_600_000,
      },
    });
    // What `ferry serve` writes, so the CLI of this FERRY_HOME finds the platform running.
    writeFileSync(
      serverInfoPath(dataDir),
      JSON.stringify({ pid: process.pid, url: serve.url, startedAt: Date.now() }),
    );
    writeFileSync(
      join(held, 'app.py'),
      [
        'import os',
        'from ferry import Endpoint',
        '',
        '@Endpoint(name="drained", cpu="1-2", workers=(1, 1), secrets=["KEEP"])',
        'def drained(x=1):',
        '    return {"token": os.environ.get("KEEP")}',
        '',
      ].join('\n'),
    );
    await serve.db.openSecrets(join(dataDir, 'secrets.key')).set(scope, 'KEEP', 'leaked');
    const { endpoints } = await scanProject({ projectDir: held });
    await serve.db.control.putEndpoint(recordFor(endpoints[0]!, held));
    await serve.workers!.reconcile();
    // Its worker ran with the value and now waits, idle, for the next job.
    const before = await call(serve.baseUrl, 'POST', '/drained/runsync?wait=60000', { input: {} });
    expect(before.body).toMatchObject({ status: 'COMPLETED', output: { token: 'leaked' } });

    const deleted = await sandbox.run(['secrets', 'delete', 'KEEP', '--app', 'test', '--env', 'production'], {
      cwd: held,
      env: { FERRY_HOME: dataDir, FERRY_API_KEY: testApiKey },
    });
    expect(deleted.code, deleted.stderr).toBe(0);
    // The first read of each, right after the delete answered: no polling that would wait out a pass.
    const health = await call(serve.baseUrl, 'GET', '/drained/health');
    expect(health.body.problem).toMatchObject({ state: 'failing' });
    expect(health.body.problem.reason).toContain('secrets not set: KEEP');
    const after = await call(serve.baseUrl, 'POST', '/drained/runsync?wait=30000', { input: {} });
    expect(after.body.status).toBe('FAILED');
    expect(after.body.error).toContain('secrets not set: KEEP');

    // Its lines are a delete's, not a deploy's, between the warning and the hint.
    const lines = deleted.stderr.split('\n');
    const at = (text: string) => lines.findIndex((line) => line.includes(text));
    expect(at('warning: drained lists KEEP in secrets=')).toBeGreaterThanOrEqual(0);
    expect(at('the running platform drains the workers of drained now…')).toBeGreaterThan(
      at('warning: drained lists KEEP'),
    );
    expect(at('✓ drained failing now: no worker given the deleted KEEP takes another job')).toBeGreaterThan(
      at('the running platform drains the workers of drained now…'),
    );
    expect(at('hint: printf %s "$VALUE" | ferry secrets set KEEP')).toBeGreaterThan(
      at('✓ drained failing now'),
    );
    expect(deleted.stderr).not.toContain('deployment');
    expect(deleted.stdout).toContain('✓ Deleted KEEP of test/production');
  }, 120_000);

  it("with a key of one app, the delete still answers, and says in a delete's words that the serve drains them later", async () => {
    // Set again, then deleted with a key the serve's reconcile route refuses (it takes a key of every app).
    await serve!.db.openSecrets(join(dataDir, 'secrets.key')).set(scope, 'KEEP', 'again');
    const appKey = 'fy_one_app_key_for_the_delete';
    await serve!.db.control.putApiKey({
      id: 'key-one-app',
      name: 'one app',
      hash: hashKey(appKey),
      createdAt: Date.now(),
      app: 'test',
    });
    const deleted = await sandbox.run(['secrets', 'delete', 'KEEP', '--app', 'test', '--env', 'production'], {
      cwd: held,
      env: { FERRY_HOME: dataDir, FERRY_API_KEY: appKey },
    });
    expect(deleted.code, deleted.stderr).toBe(0);
    expect(deleted.stdout).toContain('✓ Deleted KEEP of test/production');
    const lines = deleted.stderr.split('\n');
    const at = (text: string) => lines.findIndex((line) => line.includes(text));
    const unasked = at(
      `warning: could not ask the platform at ${serve!.url} to drain the workers of drained now (`,
    );
    expect(unasked, deleted.stderr).toBeGreaterThan(at('warning: drained lists KEEP in secrets='));
    expect(lines[unasked]).toContain('it drains them when it next reads the records, within a second or two');
    expect(at('hint: printf %s "$VALUE" | ferry secrets set KEEP')).toBeGreaterThan(unasked);
    expect(deleted.stderr).not.toContain('failing now');
    expect(deleted.stderr).not.toContain('deployment');
  }, 60_000);
});

describe('under ferry dev', () => {
  const sandbox = new CliSandbox();
  afterAll(() => sandbox.cleanup());

  it('a call answers at once with the secret to set, not a blank start failure', async () => {
    const dev = join(sandbox.root, 'devsecret');
    mkdirSync(dev);
    copyFileSync(join(project, 'app.py'), join(dev, 'app.py'));
    writeFileSync(join(dev, '.env'), 'FERRY_API_KEY=fy_dev_key\n');
    const started = await sandbox.start(
      ['dev', '--host', '127.0.0.1', '--port', '0', '--no-reload'],
      /Ferry dev server at (http:\/\/\S+)/,
      { cwd: dev },
    );
    const response = await fetch(`${started.match[1]}/app/runsync`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ input: {} }),
      signal: AbortSignal.timeout(30_000),
    });
    expect(response.status).toBe(502);
    const { error } = (await response.json()) as { error: string };
    expect(error).toContain('The worker of needs failed to start');
    expect(error).toContain('secrets not set: HF_TOKEN');
    expect(error).toContain('ferry secrets set HF_TOKEN --app devsecret --env dev');
  }, 120_000);
});
