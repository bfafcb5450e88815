/**
 * The images of an AWS deploy (cli/providers/aws-images.ts) up to the SDK calls: ECR DescribeImages
 * per needed tag, CodeBuild StartBuild + BatchGetBuilds with progress, a failed build whose images
 * another deploy pushed, CodeBuild's build quota, the build context and script.
 * ECR and CodeBuild are injected stand-ins recording the exact commands; the clock is fake.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { BatchGetBuildsCommand, StartBuildCommand } from '@aws-sdk/client-codebuild';
import { DescribeImagesCommand } from '@aws-sdk/client-ecr';
import { afterAll, describe, expect, it } from 'vitest';
import {
  acceleratorsOf,
  buildMissingImages,
  buildScript,
  type CodeBuildLike,
  type EcrLike,
  missingImages,
  neededImages,
  runImageBuild,
  writeBuildContext,
} from '../../cli/providers/aws-images.js';
import { FerryError } from '../../core/errors.js';
import { bundleAgent } from '../../worker-image/agent/bundle.js';
import { sampleResources } from '../infra/fixtures.js';

const repo = path.resolve(import.meta.dirname, '../..');
const lines: string[] = [];
const reporter = { line: (t: string) => lines.push(t) } as never;
const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

describe('neededImages / missingImages', () => {
  it('needs the agent always and a base per accelerator used', () => {
    expect(neededImages(new Set(['gpu']), '0.1.0', '3.12').map((i) => `${i.repository}:${i.tag}`)).toEqual([
      'ferry/agent:0.1.0',
      'ferry/worker-base-gpu:0.1.0-py3.12',
    ]);
    expect(neededImages(new Set(['cpu', 'gpu']), '0.1.0', '3.11').map((i) => i.kind)).toEqual([
      'agent',
      'base-cpu',
      'base-gpu',
    ]);
  });

  it("needs no base image for image endpoints: their worker container runs the endpoint's own image", () => {
    const resources = sampleResources;
    const vllm = { image: 'vllm/vllm-openai:v0.6.3', resources: { ...resources, gpu: ['A10G' as const] } };
    const tool = { image: 'example/tool:1', resources: { ...resources, cpu: '2-4' } };
    const onlyImages = acceleratorsOf([vllm, tool]);
    expect([...onlyImages]).toEqual([]);
    expect(neededImages(onlyImages, '0.1.0', '3.12').map((i) => `${i.repository}:${i.tag}`)).toEqual([
      'ferry/agent:0.1.0',
    ]);
    // An endpoint of Ferry's own runtime beside them still needs its base, and only that one.
    const cpuWorker = { resources: { ...resources, cpu: '2-4' } };
    expect([...acceleratorsOf([vllm, cpuWorker])]).toEqual(['cpu']);
    expect([...acceleratorsOf([{ resources: { ...resources, gpu: ['any' as const] } }])]).toEqual(['gpu']);
  });

  it('asks ECR for each tag; ImageNotFound and RepositoryNotFound mean missing, other errors fail', async () => {
    const sent: DescribeImagesCommand[] = [];
    const ecr: EcrLike = {
      send: async (command) => {
        sent.push(command);
        if (command.input.repositoryName === 'ferry/worker-base-gpu') {
          throw Object.assign(new Error('not found'), { name: 'ImageNotFoundException' });
        }
        return { imageDetails: [{}] } as never;
      },
    };
    const needed = neededImages(new Set(['gpu']), '0.1.0', '3.12');
    expect((await missingImages(ecr, needed)).map((m) => m.kind)).toEqual(['base-gpu']);
    expect(sent.map((c) => c.input)).toEqual([
      { repositoryName: 'ferry/agent', imageIds: [{ imageTag: '0.1.0' }] },
      { repositoryName: 'ferry/worker-base-gpu', imageIds: [{ imageTag: '0.1.0-py3.12' }] },
    ]);
    expect(sent[0]).toBeInstanceOf(DescribeImagesCommand);
    const denied: EcrLike = {
      send: async () => {
        throw Object.assign(new Error('no'), { name: 'AccessDeniedException' });
      },
    };
    await expect(missingImages(denied, needed)).rejects.toThrow(FerryError);
  });
});

describe('the CodeBuild build', () => {
  function codebuild(statuses: Array<{ phase: string; status: string }>) {
    const sent: unknown[] = [];
    let polls = 0;
    const client: CodeBuildLike = {
      send: (async (command: unknown) => {
        sent.push(command);
        if (command instanceof StartBuildCommand) return { build: { id: 'ferry-images:1' } };
        const s = statuses[Math.min(polls++, statuses.length - 1)]!;
        return {
          builds: [
            {
              id: 'ferry-images:1',
              currentPhase: s.phase,
              buildStatus: s.status,
              logs: { deepLink: 'https://logs' },
            },
          ],
        };
      }) as never,
    };
    return { client, sent };
  }

  it('starts the project with the context key and follows it phase by phase until it succeeds', async () => {
    lines.length = 0;
    const slept: number[] = [];
    const { client, sent } = codebuild([
      { phase: 'PROVISIONING', status: 'IN_PROGRESS' },
      { phase: 'BUILD', status: 'IN_PROGRESS' },
      { phase: 'BUILD', status: 'IN_PROGRESS' },
      { phase: 'COMPLETED', status: 'SUCCEEDED' },
    ]);
    await runImageBuild({
      codebuild: client,
      project: 'ImageBuild123',
      contextKey: 'image-builds/0.1.0-py3.12-1.tar.gz',
      reporter,
      clock: { sleep: async (ms) => void slept.push(ms) },
      pollMs: 10_000,
    });
    expect(sent[0]).toBeInstanceOf(StartBuildCommand);
    expect((sent[0] as StartBuildCommand).input).toEqual({
      projectName: 'ImageBuild123',
      environmentVariablesOverride: [
        { name: 'FERRY_CONTEXT_KEY', value: 'image-builds/0.1.0-py3.12-1.tar.gz', type: 'PLAINTEXT' },
      ],
    });
    expect(sent.slice(1).every((c) => c instanceof BatchGetBuildsCommand)).toBe(true);
    expect((sent[1] as BatchGetBuildsCommand).input).toEqual({ ids: ['ferry-images:1'] });
    expect(slept).toEqual([10_000, 10_000, 10_000]);
    expect(lines.filter((l) => l.includes('image build:'))).toEqual([
      '    image build: provisioning',
      '    image build: build',
      '    image build: completed',
    ]);
    expect(lines.at(-1)).toContain('images built and pushed');
  });

  it('fails with the log link when the build fails', async () => {
    const { client } = codebuild([{ phase: 'BUILD', status: 'FAILED' }]);
    const error = await runImageBuild({
      codebuild: client,
      project: 'p',
      contextKey: 'k',
      reporter,
      clock: { sleep: async () => {} },
    }).catch((e: unknown) => e);
    expect((error as FerryError).message).toContain('ended FAILED');
    expect((error as FerryError).hint).toContain('https://logs');
  });
});

describe('a failed build, and a build CodeBuild will not start', () => {
  const failing: CodeBuildLike = {
    send: (async (command: unknown) => {
      if (command instanceof StartBuildCommand) return { build: { id: 'ferry-images:2' } };
      return {
        builds: [{ id: 'ferry-images:2', buildStatus: 'FAILED', logs: { deepLink: 'https://logs' } }],
      };
    }) as never,
  };
  const needed = neededImages(new Set(['gpu']), '0.1.0', '3.12');
  /** ECR answering DescribeImages from a set of `repository:tag` that exist. */
  const ecrWith = (present: Set<string>) => {
    const asked: string[] = [];
    const ecr: EcrLike = {
      send: async (command) => {
        const image = `${command.input.repositoryName}:${command.input.imageIds?.[0]?.imageTag}`;
        asked.push(image);
        if (!present.has(image)) throw Object.assign(new Error('no'), { name: 'ImageNotFoundException' });
        return { imageDetails: [{}] } as never;
      },
    };
    return { ecr, asked };
  };
  const run = (ecr: EcrLike, codebuild: CodeBuildLike = failing) =>
    buildMissingImages({
      codebuild,
      ecr,
      missing: needed,
      project: 'p',
      contextKey: 'k',
      reporter,
      clock: { sleep: async () => {} },
    });

  it('goes on, and says so, when the images are in ECR after all (another deploy pushed them)', async () => {
    lines.length = 0;
    // The race: both deploys found the tags missing; the other one pushed first, so this push hit
    // ECR's immutable tag and the build ended FAILED.
    const { ecr, asked } = ecrWith(new Set(needed.map((m) => `${m.repository}:${m.tag}`)));
    await run(ecr);
    expect(asked).toEqual(['ferry/agent:0.1.0', 'ferry/worker-base-gpu:0.1.0-py3.12']);
    expect(lines.at(-1)).toContain('every image it was to push is in ECR now');
  });

  it("fails with the build's log link and what is still missing otherwise", async () => {
    const { ecr } = ecrWith(new Set(['ferry/agent:0.1.0']));
    const error = await run(ecr).catch((e: unknown) => e);
    expect(FerryError.is(error)).toBe(true);
    expect((error as FerryError).message).toContain('ended FAILED');
    expect((error as FerryError).message).toContain('still missing: ferry/worker-base-gpu:0.1.0-py3.12');
    expect((error as FerryError).hint).toContain('https://logs');
  });

  it("turns StartBuild's AccountLimitExceededException (a new account's 0-build quota) into a hint", async () => {
    const refused: CodeBuildLike = {
      send: (async () => {
        throw Object.assign(new Error('Cannot have more than 0 builds in queue for the account'), {
          name: 'AccountLimitExceededException',
        });
      }) as never,
    };
    const error = await runImageBuild({
      codebuild: refused,
      project: 'p',
      contextKey: 'k',
      reporter,
      clock: { sleep: async () => {} },
    }).catch((e: unknown) => e);
    expect(FerryError.is(error)).toBe(true);
    expect((error as FerryError).message).toContain('Cannot have more than 0 builds in queue');
    expect((error as FerryError).hint).toContain('quota');
    expect((error as FerryError).hint).toContain('ferry images build && ferry images push');
    // Through buildMissingImages too, when the images are still missing.
    const { ecr } = ecrWith(new Set());
    const wrapped = await run(ecr, refused).catch((e: unknown) => e);
    expect((wrapped as FerryError).hint).toContain('ferry images build && ferry images push');
  });
});

describe('the build context', () => {
  it('holds the Dockerfiles of the missing images, their inputs and a script that builds, tags and pushes them', async () => {
    await bundleAgent(path.join(repo, 'worker-image/agent/dist'));
    const dir = mkdtempSync(path.join(tmpdir(), 'ferry-ctx-'));
    dirs.push(dir);
    const missing = neededImages(new Set(['cpu']), '0.1.0', '3.12');
    const file = path.join(dir, 'context.tar.gz');
    await writeBuildContext(repo, file, missing, '0.1.0', '3.12');
    const out = path.join(dir, 'out');
    execFileSync('mkdir', ['-p', out]);
    execFileSync('tar', ['-xzf', file, '-C', out]);
    for (const f of [
      'worker-image/Dockerfile.agent',
      'worker-image/Dockerfile.cpu',
      'worker-image/agent/dist/agent.mjs',
      'worker-image/python/ferry/__init__.py',
      'worker-image/entrypoint.sh',
      'ferry-build-images.sh',
    ]) {
      expect(existsSync(path.join(out, f)), f).toBe(true);
    }
    expect(existsSync(path.join(out, 'worker-image/Dockerfile.gpu'))).toBe(false);
    const script = readFileSync(path.join(out, 'ferry-build-images.sh'), 'utf8');
    expect(script).toBe(buildScript(missing, '0.1.0', '3.12'));
    expect(script.split('\n')).toEqual([
      '#!/bin/sh',
      'set -eu',
      'REGISTRY="$1"',
      'docker build --platform linux/amd64 --file worker-image/Dockerfile.agent --tag ferry/agent:0.1.0 .',
      'docker tag ferry/agent:0.1.0 "$REGISTRY/ferry/agent:0.1.0"',
      'docker push "$REGISTRY/ferry/agent:0.1.0"',
      'docker build --platform linux/amd64 --file worker-image/Dockerfile.cpu --build-arg PYTHON_VERSION=3.12 --tag ferry/worker-base-cpu:0.1.0-py3.12 .',
      'docker tag ferry/worker-base-cpu:0.1.0-py3.12 "$REGISTRY/ferry/worker-base-cpu:0.1.0-py3.12"',
      'docker push "$REGISTRY/ferry/worker-base-cpu:0.1.0-py3.12"',
      '',
    ]);
    // The script is valid sh.
    execFileSync('sh', ['-n', path.join(out, 'ferry-build-images.sh')]);
  }, 60_000);
});
