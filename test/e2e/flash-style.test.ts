/**
 * A project written for runpod_flash runs on Ferry with only its imports changed: Flash's GpuType,
 * GpuGroup, CpuInstanceType constants and "cpu3c-1-2" strings build, deploy and serve (local
 * provider). The ferry Python package installs into a fresh venv (`ferry sdk install`), and the
 * project's own `python gpu_worker.py` then calls its endpoint remotely. `ferry init` prints the
 * install command.
 */
import { execFile } from 'node:child_process';
import { cpSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { CliSandbox, repoRoot } from './cli-support.js';

const run = promisify(execFile);
const apiKey = 'fy_flash_style_key';
const sandbox = new CliSandbox();
afterAll(() => sandbox.cleanup());

describe('a Flash-style project', () => {
  it('builds, deploys and serves with only runpod_flash → ferry changed', async () => {
    const project = path.join(sandbox.root, 'flashy');
    cpSync(path.join(repoRoot, 'test', 'e2e', 'fixtures', 'flash-style'), project, { recursive: true });
    for (const file of readdirSync(project).filter((f) => f.endsWith('.py'))) {
      const source = readFileSync(path.join(project, file), 'utf8');
      writeFileSync(
        path.join(project, file),
        source.replaceAll('from runpod_flash import', 'from ferry import'),
      );
    }

    const build = await sandbox.run(['build'], { cwd: project });
    expect(build.code, build.stderr).toBe(0);
    // Consumer GPUs map to the nearest AWS model, with a note.
    expect(build.stderr).toMatch(/gpu_worker.*RTX 4090 is a consumer GPU; nearest AWS model: L4/);
    const manifest = JSON.parse(
      readFileSync(path.join(project, '.ferry', 'build', 'ferry_manifest.json'), 'utf8'),
    );
    const resources = Object.fromEntries(
      manifest.endpoints.map((e: any) => [e.name, { gpu: e.resources.gpu, cpu: e.resources.cpu }]),
    );
    expect(resources).toEqual({
      gpu_worker: { gpu: ['L4'] },
      big_gpu: { gpu: ['L4', 'A100'] },
      cpu_worker: { cpu: '1-2' },
      cpu_const: { cpu: '2-4' },
      lb_worker: { cpu: '1-2' },
    });

    const deploy = await sandbox.run(['deploy'], { cwd: project, env: { FERRY_API_KEY: apiKey } });
    expect(deploy.code, deploy.stderr).toBe(0);
    const apiUrl = /(http:\/\/127\.0\.0\.1:\d+)\/lb\//.exec(deploy.stdout)![1]!;
    const lbUrl = /lb_worker\s+(\S+)/.exec(deploy.stdout)![1]!;
    const response = await fetch(`${lbUrl}/process`, {
      method: 'POST',
      headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ input_data: { n: 1 } }),
    });
    expect(await response.json()).toEqual({ status: 'success', echo: { n: 1 } });

    // The ferry package into a fresh venv, then the project's own __main__ block calls its endpoint.
    const venv = path.join(sandbox.root, 'venv');
    await run('python3', ['-m', 'venv', venv]);
    const python = path.join(venv, 'bin', 'python');
    const install = await sandbox.run(['sdk', 'install', '--python', python], {
      cwd: project,
      timeoutMs: 240_000,
    });
    expect(install.code, install.stderr).toBe(0);
    const { stdout } = await run(python, ['gpu_worker.py'], {
      cwd: project,
      timeout: 120_000,
      env: { PATH: process.env.PATH, HOME: sandbox.root, FERRY_API_URL: apiUrl, FERRY_API_KEY: apiKey },
    });
    const out = JSON.parse(stdout.trim().split('\n').pop()!);
    expect(out.result.message).toBe('gpu says from main');
    expect(out.result.pid).not.toBe(out.script_pid);
  }, 400_000);

  it('ferry init prints the one command that installs the package; sdk path prints where it is', async () => {
    const init = await sandbox.run(['init', 'fresh']);
    expect(init.code).toBe(0);
    expect(init.stdout + init.stderr).toContain('ferry sdk install');
    const where = await sandbox.run(['sdk', 'path']);
    expect(where.stdout.trim()).toBe(path.join(repoRoot, 'worker-image', 'python'));
  });
});
