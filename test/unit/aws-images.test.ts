/**
 * The images of an AWS deploy (cli/providers/aws-images.ts) up to the SDK calls: ECR DescribeImages
 * per needed tag, CodeBuild StartBuild + BatchGetBuilds with progress, a failed build whose images
 * another deploy pushed, CodeBuild's build quota, the build context and script.
 * ECR and CodeBuild are injected stand-ins recording the exact commands; the clock is fake.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import {
  chmodSync,
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
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
  imagesAt,
  missingImages,
  neededImages,
  platformImageContent,
  runImageBuild,
  writeBuildContext,
} from '../../cli/providers/aws-images.js';
import { FerryError } from '../../core/errors.js';
import { imageBuildQueuedMinutes } from '../../infra/names.js';
import { type ContentHashes, imageContentHashes, imageInputFiles } from '../../worker-image/images.js';
import { sampleResources } from '../infra/fixtures.js';

/** Stand-in content hashes: each image's tag is `<version>-<hash>[-py<python>]`. */
const content: ContentHashes = {
  agent: 'a9e17c00a9e1',
  'base-cpu': 'c0c0c0c0c0c0',
  'base-gpu': '96a096a096a0',
  'sdxl-turbo': '5d115d115d11',
};
const agentTag = 'ferry/agent:0.1.0-a9e17c00a9e1';
const gpuTag = 'ferry/worker-base-gpu:0.1.0-96a096a096a0-py3.12';

const repo = path.resolve(import.meta.dirname, '../..');
const lines: string[] = [];
const reporter = { line: (t: string) => lines.push(t) } as never;
const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

describe('neededImages / missingImages', () => {
  it('needs the agent always and a base per accelerator used', () => {
    expect(
      neededImages(new Set(['gpu']), '0.1.0', '3.12', content).map((i) => `${i.repository}:${i.tag}`),
    ).toEqual([agentTag, gpuTag]);
    expect(neededImages(new Set(['cpu', 'gpu']), '0.1.0', '3.11', content).map((i) => i.kind)).toEqual([
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
    expect(neededImages(onlyImages, '0.1.0', '3.12', content).map((i) => `${i.repository}:${i.tag}`)).toEqual(
      [agentTag],
    );
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
    const needed = neededImages(new Set(['gpu']), '0.1.0', '3.12', content);
    expect((await missingImages(ecr, needed)).map((m) => m.kind)).toEqual(['base-gpu']);
    expect(sent.map((c) => c.input)).toEqual([
      { repositoryName: 'ferry/agent', imageIds: [{ imageTag: '0.1.0-a9e17c00a9e1' }] },
      { repositoryName: 'ferry/worker-base-gpu', imageIds: [{ imageTag: '0.1.0-96a096a096a0-py3.12' }] },
    ]);
    expect(sent[0]).toBeInstanceOf(DescribeImagesCommand);
    const denied: EcrLike = {
      send: async () => {
        throw Object.assign(new Error('no'), { name: 'AccessDeniedException' });
      },
    };
    await expect(missingImages(denied, needed)).rejects.toThrow(FerryError);
    const offline: EcrLike = {
      send: async () => {
        throw Object.assign(new Error('getaddrinfo ENOTFOUND api.ecr.us-east-1.amazonaws.com'), {
          code: 'ENOTFOUND',
        });
      },
    };
    const unreachable = await missingImages(offline, needed).catch((e: unknown) => e);
    expect((unreachable as FerryError).hint).toContain("AWS did not answer: check this machine's network");
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
  const needed = neededImages(new Set(['gpu']), '0.1.0', '3.12', content);
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
    expect(asked).toEqual([agentTag, gpuTag]);
    expect(lines.at(-1)).toContain('every image it was to push is in ECR now');
  });

  it("fails with the build's log link and what is still missing otherwise", async () => {
    const { ecr } = ecrWith(new Set([agentTag]));
    const error = await run(ecr).catch((e: unknown) => e);
    expect(FerryError.is(error)).toBe(true);
    expect((error as FerryError).message).toContain('ended FAILED');
    expect((error as FerryError).message).toContain(`still missing: ${gpuTag}`);
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
  it('holds the files the missing images are made of and a script that builds, tags and pushes them', async () => {
    const hashes = await platformImageContent(repo, '0.1.0', '3.12');
    const dir = mkdtempSync(path.join(tmpdir(), 'ferry-ctx-'));
    dirs.push(dir);
    const missing = neededImages(new Set(['cpu']), '0.1.0', '3.12', hashes);
    const file = path.join(dir, 'context.tar.gz');
    await writeBuildContext(repo, file, missing, '0.1.0', '3.12', hashes);
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
    // Exactly the files the tags hash, and those files hash to the same tags in the context.
    const listed = execFileSync('tar', ['-tzf', file], { encoding: 'utf8' })
      .split('\n')
      .map((l) => l.replace(/^\.\//, ''))
      .filter((l) => l !== '' && !l.endsWith('/') && l !== 'ferry-build-images.sh');
    expect(listed.sort()).toEqual(
      [...new Set([...imageInputFiles(repo, 'agent'), ...imageInputFiles(repo, 'base-cpu')])].sort(),
    );
    // The other kinds' Dockerfiles, so every hash can be taken; the agent's and the CPU base's read none of them.
    for (const other of ['Dockerfile.gpu', 'Dockerfile.model-sdxl-turbo']) {
      cpSync(path.join(repo, 'worker-image', other), path.join(out, 'worker-image', other));
    }
    const inContext = imageContentHashes(out, '0.1.0', '3.12');
    expect([inContext.agent, inContext['base-cpu']]).toEqual([hashes.agent, hashes['base-cpu']]);
    const script = readFileSync(path.join(out, 'ferry-build-images.sh'), 'utf8');
    expect(script).toBe(buildScript(missing, '0.1.0', '3.12', hashes));
    const agent = `ferry/agent:0.1.0-${hashes.agent}`;
    const cpu = `ferry/worker-base-cpu:0.1.0-${hashes['base-cpu']}-py3.12`;
    expect(script).toContain(
      `  docker build --platform linux/amd64 --file worker-image/Dockerfile.agent --tag ${agent} .\n  push ${agent} ferry/agent 0.1.0-${hashes.agent}\n`,
    );
    expect(script).toContain(
      `  docker build --platform linux/amd64 --file worker-image/Dockerfile.cpu --build-arg PYTHON_VERSION=3.12 --tag ${cpu} .\n`,
    );
    // The script is valid sh.
    execFileSync('sh', ['-n', path.join(out, 'ferry-build-images.sh')]);
  }, 60_000);

  it("names in the script the tags the deploy looks up and the stack's image URIs name", () => {
    const registry = '123456789012.dkr.ecr.us-east-1.amazonaws.com';
    const needed = neededImages(new Set(['cpu', 'gpu']), '0.1.0', '3.12', content);
    const script = buildScript(needed, '0.1.0', '3.12', content);
    const pushed = [...script.matchAll(/^ {2}push (\S+) (\S+) (\S+)$/gm)].map((m) => {
      expect(m[1]).toBe(`${m[2]}:${m[3]}`);
      return `${registry}/${m[1]}`;
    });
    const built = [...script.matchAll(/--tag (\S+) \.$/gm)].map((m) => `${registry}/${m[1]}`);
    const at = imagesAt(registry, '0.1.0', '3.12', content);
    expect(pushed).toEqual([at.agent, at.cpuWorker, at.gpuWorker]);
    expect(built).toEqual(pushed);
    expect(needed.map((n) => `${registry}/${n.repository}:${n.tag}`)).toEqual(pushed);
  });
});

/**
 * The generated script, run by sh with a fake `docker` and `aws` first on PATH. ECR is a file of
 * `repository:tag` lines; the fake docker records its calls and, for a push listed in `conflict`,
 * does what ECR does when another build's push of the same tag won: the tag is there now, and this
 * push is refused.
 */
describe('the build script under sh', () => {
  function runScript(options: { inEcr?: string[]; conflict?: string[]; failPush?: string[] }) {
    const dir = mkdtempSync(path.join(tmpdir(), 'ferry-script-'));
    dirs.push(dir);
    const bin = path.join(dir, 'bin');
    mkdirSync(bin);
    const ecrFile = path.join(dir, 'ecr');
    const calls = path.join(dir, 'calls');
    writeFileSync(ecrFile, (options.inEcr ?? []).map((i) => `${i}\n`).join(''));
    writeFileSync(path.join(dir, 'conflict'), (options.conflict ?? []).map((i) => `${i}\n`).join(''));
    writeFileSync(path.join(dir, 'fail'), (options.failPush ?? []).map((i) => `${i}\n`).join(''));
    writeFileSync(calls, '');
    writeFileSync(
      path.join(bin, 'aws'),
      `#!/bin/sh
echo "aws $*" >> "${calls}"
# aws ecr describe-images --repository-name R --image-ids imageTag=T
[ "$1 $2" = "ecr describe-images" ] || exit 2
repo="$4"; tag="\${6#imageTag=}"
grep -qx "$repo:$tag" "${ecrFile}" && { echo '{"imageDetails":[{}]}'; exit 0; }
echo "An error occurred (ImageNotFoundException) when calling the DescribeImages operation" >&2
exit 254
`,
    );
    writeFileSync(
      path.join(bin, 'docker'),
      `#!/bin/sh
echo "docker $*" >> "${calls}"
if [ "$1" = push ]; then
  image="\${2#REG/}"
  if grep -qx "$image" "${path.join(dir, 'conflict')}"; then
    echo "$image" >> "${ecrFile}"
    echo "tag invalid: The image tag already exists in the repository and cannot be overwritten because the repository is immutable." >&2
    exit 1
  fi
  if grep -qx "$image" "${path.join(dir, 'fail')}"; then echo "connection reset" >&2; exit 1; fi
  echo "$image" >> "${ecrFile}"
fi
exit 0
`,
    );
    chmodSync(path.join(bin, 'aws'), 0o755);
    chmodSync(path.join(bin, 'docker'), 0o755);
    const needed = neededImages(new Set(['cpu', 'gpu']), '0.1.0', '3.12', content);
    const script = path.join(dir, 'ferry-build-images.sh');
    writeFileSync(script, buildScript(needed, '0.1.0', '3.12', content));
    const result = spawnSync('sh', [script, 'REG'], {
      cwd: dir,
      encoding: 'utf8',
      env: { PATH: `${bin}:${process.env.PATH ?? ''}` },
      timeout: 20_000,
    });
    const lines = readFileSync(calls, 'utf8').split('\n').filter(Boolean);
    return {
      status: result.status,
      output: `${result.stdout}${result.stderr}`,
      built: lines.filter((l) => l.startsWith('docker build')).map((l) => /--tag (\S+)/.exec(l)![1]),
      pushed: lines.filter((l) => l.startsWith('docker push')).map((l) => l.slice('docker push REG/'.length)),
      ecr: readFileSync(ecrFile, 'utf8').split('\n').filter(Boolean),
    };
  }
  const cpuTag = 'ferry/worker-base-cpu:0.1.0-c0c0c0c0c0c0-py3.12';

  it('builds and pushes every image that is not in ECR', () => {
    const run = runScript({});
    expect(run.status, run.output).toBe(0);
    expect(run.built).toEqual([agentTag, cpuTag, gpuTag]);
    expect(run.pushed).toEqual([agentTag, cpuTag, gpuTag]);
  });

  it('skips the agent another deploy pushed since this one looked, and still builds the base images', () => {
    const run = runScript({ inEcr: [agentTag] });
    expect(run.status, run.output).toBe(0);
    expect(run.built).toEqual([cpuTag, gpuTag]);
    expect(run.pushed).toEqual([cpuTag, gpuTag]);
    expect(run.output).toContain(`REG/${agentTag} is in ECR already: not built`);
  });

  it('goes on to the base images when the agent push is refused because the tag is there now (ImageTagAlreadyExists)', () => {
    const run = runScript({ conflict: [agentTag] });
    expect(run.status, run.output).toBe(0);
    expect(run.built).toEqual([agentTag, cpuTag, gpuTag]);
    expect(run.pushed).toEqual([agentTag, cpuTag, gpuTag]);
    expect(run.ecr.sort()).toEqual([agentTag, cpuTag, gpuTag].sort());
    expect(run.output).toContain('was pushed by another build meanwhile');
  });

  it('fails on a push that fails while the tag is still not in ECR', () => {
    const run = runScript({ failPush: [cpuTag] });
    expect(run.status).not.toBe(0);
    expect(run.pushed).toEqual([agentTag, cpuTag]);
    expect(run.built).toEqual([agentTag, cpuTag]);
  });
});

describe('following the build', () => {
  it('fails clearly when CodeBuild answers that it has no such build (buildsNotFound)', async () => {
    let polls = 0;
    const client: CodeBuildLike = {
      send: (async (command: unknown) => {
        if (command instanceof StartBuildCommand) return { build: { id: 'ferry-images:9' } };
        // A cap, so the loop that never ends shows as a failure rather than a hung test.
        if (++polls > 20) throw new Error('still polling a build CodeBuild does not know');
        return { builds: [], buildsNotFound: ['ferry-images:9'] };
      }) as never,
    };
    const error = await runImageBuild({
      codebuild: client,
      project: 'p',
      contextKey: 'k',
      reporter,
      clock: { sleep: async () => {} },
    }).catch((e: unknown) => e);
    expect(FerryError.is(error), String(error)).toBe(true);
    expect((error as FerryError).message).toContain('CodeBuild has no build ferry-images:9');
    expect(polls).toBe(1);
  });

  it('says after a minute in the queue why the deploy waits and what to do, once', async () => {
    lines.length = 0;
    const statuses = [
      ...Array.from({ length: 8 }, () => ({ currentPhase: 'QUEUED', buildStatus: 'IN_PROGRESS' })),
      { currentPhase: 'COMPLETED', buildStatus: 'SUCCEEDED' },
    ];
    let polls = 0;
    const client: CodeBuildLike = {
      send: (async (command: unknown) => {
        if (command instanceof StartBuildCommand) return { build: { id: 'ferry-images:3' } };
        return { builds: [{ id: 'ferry-images:3', ...statuses[Math.min(polls++, statuses.length - 1)] }] };
      }) as never,
    };
    const slept: number[] = [];
    await runImageBuild({
      codebuild: client,
      project: 'p',
      contextKey: 'k',
      reporter,
      clock: { sleep: async (ms) => void slept.push(ms) },
      pollMs: 15_000,
    });
    const hints = lines.filter((l) => l.includes('still queued'));
    expect(hints).toHaveLength(1);
    expect(hints[0]).toContain('concurrently running builds');
    expect(hints[0]).toContain(`${imageBuildQueuedMinutes} min`);
    // Said once 60 s of polls had passed queued: after the fourth sleep.
    const at = lines.indexOf(hints[0]!);
    expect(lines.slice(0, at).filter((l) => l.includes('image build: queued'))).toHaveLength(1);
    expect(slept.length).toBe(8);
  });

  it('a build that timed out in the queue says it never left it, with what to do', async () => {
    const client: CodeBuildLike = {
      send: (async (command: unknown) => {
        if (command instanceof StartBuildCommand) return { build: { id: 'ferry-images:4' } };
        return { builds: [{ id: 'ferry-images:4', currentPhase: 'QUEUED', buildStatus: 'TIMED_OUT' }] };
      }) as never,
    };
    const error = await runImageBuild({
      codebuild: client,
      project: 'p',
      contextKey: 'k',
      reporter,
      clock: { sleep: async () => {} },
    }).catch((e: unknown) => e);
    expect((error as FerryError).message).toContain('ended TIMED_OUT');
    expect((error as FerryError).hint).toContain('never left the queue');
    expect((error as FerryError).hint).toContain('concurrently running builds');
  });
});
