/**
 * `ferry deploy`, `env`, `app`, `undeploy`, `keys` through the real binary on the local provider
 * (FERRY_HOME in a temp folder), and one deploy → curl of the printed runsync line against the
 * `ferry serve --detach` that deploy starts (real worker pools and Python workers).
 */
import { execFile } from 'node:child_process';
import { appendFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { curlExample, planEndpoints, previewPlan, resolveEnvironment } from '../../cli/deploy/plan.js';
import type { Manifest } from '../../core/manifest.js';
import { CliSandbox } from './cli-support.js';

const run = promisify(execFile);

describe('deploy and the control records (--no-serve)', () => {
  const sandbox = new CliSandbox();
  let project = '';
  const json = async (args: string[]) => {
    const result = await sandbox.run([...args, '--json'], { cwd: project });
    expect(result.code, `${args.join(' ')}: ${result.stderr}`).toBe(0);
    return JSON.parse(result.stdout);
  };

  beforeAll(async () => {
    expect((await sandbox.run(['init', 'shop'])).code).toBe(0);
    project = path.join(sandbox.root, 'shop');
  });
  afterAll(() => sandbox.cleanup());

  it('creates app and production env, records every endpoint, and prints the five stages', async () => {
    const result = await sandbox.run(['deploy', '--no-serve'], { cwd: project });
    expect(result.code, result.stderr).toBe(0);
    for (const stage of [
      '[1/5] Build',
      '[2/5] Environment resolution',
      '[3/5] Upload',
      '[4/5] Provisioning',
      '[5/5] Configuration',
    ])
      expect(result.stderr).toContain(stage);
    expect(result.stderr).toContain("app 'shop' not found: creating it with environment 'production'");
    expect(result.stderr).toContain('excluded torch: base image');
    expect(result.stdout).toMatch(
      /cpu_worker\s+http:\/\/127\.0\.0\.1:\d+\/v2\/cpu-worker-[0-9a-f]{8}\s+\(queue\)/,
    );
    expect(result.stdout).toMatch(/lb_worker\s+http:\/\/\S+\/lb\/lb-worker-[0-9a-f]{8}/);
    expect(result.stdout).toContain('POST /process');
    expect(result.stdout).toContain('GET /health');
    expect(result.stdout).toMatch(/curl -X POST \S+\/runsync -H "Authorization: Bearer \$FERRY_API_KEY"/);

    const apps = await json(['app', 'list']);
    expect(apps).toEqual([
      expect.objectContaining({ name: 'shop', environments: ['production'], endpoints: 3 }),
    ]);
    const envs = await json(['env', 'list']);
    expect(envs).toEqual([expect.objectContaining({ name: 'production', endpoints: 3 })]);
    const env = await json(['env', 'get', 'production']);
    expect(env.endpoints.map((e: { name: string }) => e.name).sort()).toEqual([
      'cpu_worker',
      'gpu_worker',
      'lb_worker',
    ]);
    expect(env.fingerprint).toMatch(/^[0-9a-f]{64}$/);
    const app = await json(['app', 'get', 'shop']);
    expect(app.environments[0].endpoints).toHaveLength(3);
  });

  it('a source change updates the fingerprint in place (same ids); a dropped file removes its endpoint', async () => {
    const before = await json(['env', 'get', 'production']);
    appendFileSync(path.join(project, 'cpu_worker.py'), '\n# changed\n');
    const again = await sandbox.run(['deploy', '--no-serve', '--json'], { cwd: project });
    expect(again.code, again.stderr).toBe(0);
    const result = JSON.parse(again.stdout);
    expect(result.fingerprint).not.toBe(before.fingerprint);
    expect(result.endpoints.every((e: { change: string }) => e.change === 'updated')).toBe(true);
    const after = await json(['env', 'get', 'production']);
    const ids = (x: { endpoints: Array<{ id: string }> }) => x.endpoints.map((e) => e.id).sort();
    expect(ids(after)).toEqual(ids(before));
    expect(after.endpoints.every((e: { fingerprint: string }) => e.fingerprint === result.fingerprint)).toBe(
      true,
    );

    rmSync(path.join(project, 'lb_worker.py'));
    const third = await sandbox.run(['deploy', '--no-serve'], { cwd: project });
    expect(third.code).toBe(0);
    expect(third.stderr).toMatch(/- removed lb_worker \(lb-worker-[0-9a-f]{8}\): no longer in the project/);
    expect((await json(['undeploy', 'list'])).map((e: { name: string }) => e.name).sort()).toEqual([
      'cpu_worker',
      'gpu_worker',
    ]);
  });

  it('undeploy NAME, list and --all (typed DELETE ALL)', async () => {
    const one = await sandbox.run(['undeploy', 'gpu_worker', '--force'], { cwd: project });
    expect(one.code, one.stderr).toBe(0);
    expect((await json(['undeploy', 'list'])).map((e: { name: string }) => e.name)).toEqual(['cpu_worker']);
    const missing = await sandbox.run(['undeploy', 'gpu_worker', '--force'], { cwd: project });
    expect(missing.code).toBe(1);
    const declined = await sandbox.run(['undeploy', '--all'], { cwd: project, input: 'delete all\n' });
    expect(declined.code).toBe(1);
    expect(declined.stderr).toContain('Type DELETE ALL to confirm');
    expect(await json(['undeploy', 'list'])).toHaveLength(1);
    const all = await sandbox.run(['undeploy', '--all'], { cwd: project, input: 'DELETE ALL\n' });
    expect(all.code, all.stderr).toBe(0);
    expect(await json(['undeploy', 'list'])).toEqual([]);
  });

  it('env delete and app delete remove their endpoints first', async () => {
    expect((await sandbox.run(['deploy', '--no-serve', '--env', 'staging'], { cwd: project })).code).toBe(0);
    expect((await sandbox.run(['deploy', '--no-serve', '--env', 'production'], { cwd: project })).code).toBe(
      0,
    );
    expect(await json(['undeploy', 'list'])).toHaveLength(4);
    const envDelete = await sandbox.run(['env', 'delete', 'staging', '--force'], { cwd: project });
    expect(envDelete.code, envDelete.stderr).toBe(0);
    const left = await json(['undeploy', 'list']);
    expect(left.map((e: { env: string }) => e.env)).toEqual(['production', 'production']);
    expect((await json(['env', 'list'])).map((e: { name: string }) => e.name)).toEqual(['production']);
    const appDelete = await sandbox.run(['app', 'delete', 'shop', '--force'], { cwd: project });
    expect(appDelete.code, appDelete.stderr).toBe(0);
    expect(await json(['undeploy', 'list'])).toEqual([]);
    expect(await json(['app', 'list'])).toEqual([]);
    const gone = await sandbox.run(['app', 'get', 'shop'], { cwd: project });
    expect(gone.code).toBe(1);
  });

  it('keys create (printed once), list, revoke', async () => {
    const created = await sandbox.run(['keys', 'create', '--name', 'ci']);
    expect(created.code).toBe(0);
    expect(created.stdout.trim()).toMatch(/^fy_\S{20,}$/);
    const list = await json(['keys', 'list']);
    const key = list.find((k: { name: string }) => k.name === 'ci');
    expect(key).toBeDefined();
    expect(JSON.stringify(list)).not.toContain(created.stdout.trim());
    expect((await sandbox.run(['keys', 'revoke', key.id])).code).toBe(0);
    expect((await json(['keys', 'list'])).some((k: { id: string }) => k.id === key.id)).toBe(false);
    expect((await sandbox.run(['keys', 'revoke', key.id])).code).toBe(1);
  });
});

describe('deploy → the printed curl line works against the served platform', () => {
  const sandbox = new CliSandbox();
  afterAll(() => sandbox.cleanup());

  it('starts ferry serve --detach, and the runsync curl completes the job', async () => {
    expect((await sandbox.run(['init', 'live'])).code).toBe(0);
    const project = path.join(sandbox.root, 'live');
    const apiKey = 'fy_cli_e2e_key';
    const deploy = await sandbox.run(['deploy'], { cwd: project, env: { FERRY_API_KEY: apiKey } });
    expect(deploy.code, deploy.stderr).toBe(0);
    expect(deploy.stderr).toContain('starting `ferry serve --detach`');
    const curl = deploy.stdout.split('\n').find((line) => line.trim().startsWith('curl '));
    expect(curl).toBeDefined();
    const { stdout } = await run('sh', ['-c', `${curl!.trim()} -s --max-time 60`], {
      env: { ...process.env, FERRY_API_KEY: apiKey },
    });
    const job = JSON.parse(stdout);
    expect(job.status).toBe('COMPLETED');
    expect(job.output.message).toBe('Hello from the CPU worker: hello');
    // The LB endpoint too, with the key (spec §5.1).
    const lbUrl = /lb_worker\s+(\S+)/.exec(deploy.stdout)![1]!;
    const response = await fetch(`${lbUrl}/process`, {
      method: 'POST',
      headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ input_data: { n: 1 } }),
    });
    expect(response.status).toBe(200);
    expect(await response.json()).toMatchObject({ status: 'success', echo: { n: 1 } });
    const anonymous = await fetch(`${lbUrl}/health`);
    expect(anonymous.status).toBe(401);
  });
});

describe('deploy decisions (pure)', () => {
  it('resolves the environment by spec §4.4 rules 1–3', () => {
    expect(resolveEnvironment({ appExists: false, envNames: [], requested: undefined })).toEqual({
      env: 'production',
      createApp: true,
      createEnv: true,
    });
    expect(resolveEnvironment({ appExists: false, envNames: [], requested: 'dev' }).env).toBe('dev');
    expect(resolveEnvironment({ appExists: true, envNames: ['a'], requested: 'b' })).toEqual({
      env: 'b',
      createApp: false,
      createEnv: true,
    });
    expect(resolveEnvironment({ appExists: true, envNames: ['only'], requested: undefined }).createEnv).toBe(
      false,
    );
    expect(() => resolveEnvironment({ appExists: true, envNames: ['b', 'a'], requested: undefined })).toThrow(
      'Multiple environments found: a, b',
    );
  });

  const manifest: Manifest = {
    version: 1,
    app: 'demo',
    pythonVersion: '3.11',
    generatedAt: '2026-01-01T00:00:00.000Z',
    sourceFingerprint: 'f1',
    dependencies: { installed: [], excluded: [] },
    endpoints: [
      {
        name: 'gen',
        kind: 'queue',
        file: 'gen.py',
        module: 'gen',
        target: { name: 'gen', isAsync: false, isGenerator: false, params: ['prompt'], type: 'function' },
        resources: {
          gpu: ['A100'],
          gpuCount: 1,
          workersMin: 0,
          workersMax: 1,
          idleTimeoutSec: 60,
          executionTimeoutMs: 0,
          maxConcurrency: 1,
          env: { MODE: 'x' },
          dependencies: [],
          systemDependencies: [],
        },
        configHash: 'h1',
      },
      {
        name: 'api',
        kind: 'lb',
        file: 'api.py',
        module: 'api',
        variable: 'api',
        routes: [
          {
            name: 'p',
            method: 'POST',
            path: '/process',
            isAsync: false,
            isGenerator: false,
            params: ['input_data'],
          },
        ],
        resources: {
          cpu: '1-2',
          gpuCount: 1,
          workersMin: 0,
          workersMax: 1,
          idleTimeoutSec: 60,
          executionTimeoutMs: 0,
          maxConcurrency: 1,
          env: {},
          dependencies: [],
          systemDependencies: [],
        },
        configHash: 'h2',
      },
    ],
  };

  it('plans create, update (fingerprint or config), unchanged and remove, keeping ids', () => {
    const first = planEndpoints({
      existing: [],
      endpoints: manifest.endpoints,
      app: 'demo',
      env: 'p',
      fingerprint: 'f1',
      pythonVersion: '3.11',
      nowMs: 1,
    });
    expect(first.create.map((r) => r.name)).toEqual(['gen', 'api']);
    const same = planEndpoints({
      existing: first.create,
      endpoints: manifest.endpoints,
      app: 'demo',
      env: 'p',
      fingerprint: 'f1',
      pythonVersion: '3.11',
      nowMs: 2,
    });
    expect(same.unchanged).toHaveLength(2);
    const changed = planEndpoints({
      existing: first.create,
      endpoints: manifest.endpoints.slice(0, 1),
      app: 'demo',
      env: 'p',
      fingerprint: 'f2',
      pythonVersion: '3.11',
      nowMs: 3,
    });
    expect(changed.update.map((r) => r.id)).toEqual([first.create[0]!.id]);
    expect(changed.remove.map((r) => r.name)).toEqual(['api']);
    const reconfigured = planEndpoints({
      existing: first.create,
      endpoints: [{ ...manifest.endpoints[0]!, configHash: 'h9' }, manifest.endpoints[1]!],
      app: 'demo',
      env: 'p',
      fingerprint: 'f1',
      pythonVersion: '3.11',
      nowMs: 4,
    });
    expect(reconfigured.update.map((r) => r.name)).toEqual(['gen']);
    const curl = curlExample(first.create, (r) => `http://h/v2/${r.id}`);
    expect(curl).toBe(
      `curl -X POST http://h/v2/${first.create[0]!.id}/runsync -H "Authorization: Bearer $FERRY_API_KEY" -H 'Content-Type: application/json' -d '{"input":{"prompt":"world"}}'`,
    );
    expect(curlExample(first.create.slice(1), (r) => `http://h/lb/${r.id}`)).toContain('/process');
  });

  it('--preview plans one container per endpoint on one network, with the artifact read-only', () => {
    const plan = previewPlan({ manifest, artifactPath: '/p/.ferry/artifact.tar.gz', runId: '42' });
    expect(plan.commands[0]).toEqual(['docker', 'network', 'create', 'ferry-preview-42']);
    expect(plan.commands).toHaveLength(3);
    const gen = plan.commands[1]!;
    expect(gen.slice(0, 5)).toEqual(['docker', 'run', '-d', '--name', 'ferry-preview-gen']);
    expect(gen).toContain('ferry-preview-42');
    expect(gen).toContain('/p/.ferry/artifact.tar.gz:/opt/ferry/artifact.tar.gz:ro');
    expect(gen).toContain('MODE=x');
    expect(gen.at(-1)).toBe('ferry/worker-gpu:0.1.0');
    expect(plan.commands[2]!.at(-1)).toBe('ferry/worker-cpu:0.1.0');
    expect(plan.ports).toEqual([
      { name: 'gen', kind: 'queue', hostPort: 8000 },
      { name: 'api', kind: 'lb', hostPort: 8001 },
    ]);
    expect(plan.cleanup.at(-1)).toEqual(['docker', 'network', 'rm', 'ferry-preview-42']);
  });
});
