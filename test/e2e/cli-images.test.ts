/**
 * `ferry images build|push --dry-run` from the BUILT package (bin/ferry.js runs dist/), and the agent
 * bundle it prints, run for real in a clean copy of the repository (tracked and unignored files only,
 * the bundle script compiled afresh): the copy has no dist/ and no agent bundle until the printed
 * commands make them.
 * No docker engine here: the docker lines are checked against the files they name.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { CliSandbox } from './cli-support.js';

const repo = path.resolve(import.meta.dirname, '../..');

describe('ferry images --dry-run', () => {
  const sandbox = new CliSandbox();
  const clean = mkdtempSync(path.join(tmpdir(), 'ferry-clean-'));
  afterAll(async () => {
    await sandbox.cleanup();
    rmSync(clean, { recursive: true, force: true });
  });

  it('build prints cd + agent bundle + docker builds (agent, cpu, gpu), and the bundle builds in a clean copy', async () => {
    const result = await sandbox.run(['images', 'build', '--dry-run']);
    expect(result.code, result.stderr).toBe(0);
    const lines = result.stdout.trim().split('\n');
    expect(lines[0]).toBe(`cd ${repo}`);
    expect(lines[1]).toBe('node dist/worker-image/agent/bundle.js worker-image/agent/dist');
    expect(lines.slice(2)).toEqual([
      'docker build --platform linux/amd64 --file worker-image/Dockerfile.agent --tag ferry/agent:0.1.0 .',
      'docker build --platform linux/amd64 --file worker-image/Dockerfile.cpu --build-arg PYTHON_VERSION=3.12 --tag ferry/worker-base-cpu:0.1.0-py3.12 .',
      'docker build --platform linux/amd64 --file worker-image/Dockerfile.gpu --build-arg PYTHON_VERSION=3.12 --build-arg CUDA_WHEELS=cu124 --tag ferry/worker-base-gpu:0.1.0-py3.12 .',
    ]);

    // A clean copy: the files git would ship, node_modules linked, the bundle script compiled with
    // the project's tsc and options. Only the script and what it imports: the whole project's compile
    // is `npm run build`'s (npm test runs it on a clean checkout), and took most of this test's time.
    const files = execFileSync('git', ['ls-files', '-co', '--exclude-standard', '-z'], { cwd: repo })
      .toString()
      .split('\0')
      // A worktree's node_modules may be a symlink git lists as untracked: it is linked below.
      .filter((f) => f !== '' && f !== 'node_modules' && existsSync(path.join(repo, f)));
    for (const file of files) {
      mkdirSync(path.dirname(path.join(clean, file)), { recursive: true });
      cpSync(path.join(repo, file), path.join(clean, file));
    }
    symlinkSync(path.join(repo, 'node_modules'), path.join(clean, 'node_modules'));
    expect(existsSync(path.join(clean, 'dist'))).toBe(false);
    expect(existsSync(path.join(clean, 'worker-image/agent/dist/agent.mjs'))).toBe(false);
    const [bundle, ...rest] = lines[1]!.split(' ');
    const script = path.relative('dist', rest[0]!).replace(/\.js$/, '.ts');
    writeFileSync(
      path.join(clean, 'tsconfig.bundle.json'),
      JSON.stringify({ extends: './tsconfig.json', include: [], files: [script] }),
    );
    execFileSync(
      process.execPath,
      [path.join(repo, 'node_modules/typescript/bin/tsc'), '-p', 'tsconfig.bundle.json'],
      {
        cwd: clean,
      },
    );
    const bundled = spawnSync(bundle === 'node' ? process.execPath : bundle!, rest, {
      cwd: clean,
      encoding: 'utf8',
    });
    expect(bundled.status, bundled.stderr).toBe(0);
    const agent = path.join(clean, 'worker-image/agent/dist/agent.mjs');
    expect(existsSync(agent)).toBe(true);
    // The same bytes from another working directory: on AWS the images' tags are a hash of this file
    // (worker-image/images.ts imageContentHashes), and esbuild writes module paths relative to its
    // working directory into the bundle.
    const elsewhere = mkdtempSync(path.join(tmpdir(), 'ferry-bundle-cwd-'));
    try {
      const cwd = path.join(elsewhere, 'a', 'b');
      mkdirSync(cwd, { recursive: true });
      const again = spawnSync(process.execPath, [path.join(clean, rest[0]!), path.join(elsewhere, 'out')], {
        cwd,
        encoding: 'utf8',
      });
      expect(again.status, again.stderr).toBe(0);
      expect(readFileSync(path.join(elsewhere, 'out', 'agent.mjs')).equals(readFileSync(agent))).toBe(true);
    } finally {
      rmSync(elsewhere, { recursive: true, force: true });
    }
    // The bundle runs: with no configuration the agent exits 2 and names what is missing.
    const ran = spawnSync(process.execPath, [agent], { env: { PATH: process.env.PATH }, encoding: 'utf8' });
    expect(ran.status).toBe(2);
    expect(ran.stderr).toMatch(/FERRY_/);
    // Every Dockerfile a docker line names is in the copy, and the build context is its root.
    for (const line of lines.slice(2)) {
      const words = line.split(' ');
      expect(words.at(-1)).toBe('.');
      expect(existsSync(path.join(clean, words[words.indexOf('--file') + 1]!))).toBe(true);
    }
  }, 300_000);

  it('push prints the ECR login pipeline, then tag + push per image', async () => {
    const registry = '123456789012.dkr.ecr.eu-west-1.amazonaws.com';
    const result = await sandbox.run([
      'images',
      'push',
      '--dry-run',
      '--registry',
      registry,
      '--kind',
      'agent',
    ]);
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout.trim().split('\n')).toEqual([
      `aws ecr get-login-password --region eu-west-1 | docker login --username AWS --password-stdin ${registry}`,
      `docker tag ferry/agent:0.1.0 ${registry}/ferry/agent:0.1.0`,
      `docker push ${registry}/ferry/agent:0.1.0`,
    ]);
  });

  it('push without a registry, or with one that is not ECR, exits 2 with the fix', async () => {
    const none = await sandbox.run(['images', 'push', '--dry-run'], {
      env: { FERRY_AWS_IMAGE_REGISTRY: undefined },
    });
    expect(none.code).toBe(2);
    expect(none.stderr).toContain('--registry');
    const bad = await sandbox.run(['images', 'push', '--dry-run', '--registry', 'docker.io/me']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('not an ECR registry');
  });
});
