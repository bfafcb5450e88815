/**
 * Which worker and agent images a deploy uses, and making sure they exist (docs/aws.md "Images"):
 *
 *  1. FERRY_AWS_GPU_IMAGE / FERRY_AWS_CPU_IMAGE / FERRY_AWS_AGENT_IMAGE, or FERRY_AWS_IMAGE_REGISTRY:
 *     the user's own images, used as given.
 *  2. Otherwise the platform's ECR registry (its ImageRegistry output), under tags that name the
 *     images' content (`<version>-<hash>[-py<python>]`, worker-image/images.ts imageContentHashes):
 *     this install's agent bundle, runtime, Dockerfiles and build args. Each tag the app needs is
 *     looked up (ecr:DescribeImages); missing ones are built by the platform's CodeBuild project
 *     from a build context this machine uploads, with progress, unless FERRY_AWS_IMAGE_BUILD=never.
 *     A version-only tag was never rebuilt: once `ferry/agent:0.1.0` existed, every later agent and
 *     runtime change deployed new platform code beside the old agent.
 *  3. Neither possible: exit 2 with the ways to fix it. Never a deploy whose tasks cannot pull.
 *
 * Two deploys at once may both find a tag missing and both build it. ECR's tags are immutable: "After
 * tag immutability is turned on, the ImageTagAlreadyExistsException error is returned if you push an
 * image with a tag that is already in the repository"
 * (https://docs.aws.amazon.com/AmazonECR/latest/userguide/image-tag-mutability.html). The build
 * script skips an image whose tag is there by the time it gets to it, and takes a refused push of a
 * tag that is there now as done (the tag names the same content), then goes on with the next image
 * (buildScript). Should a build still fail, the deploy looks again and goes on when nothing is
 * missing (buildMissingImages).
 */
import { cpSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import {
  BatchGetBuildsCommand,
  type BatchGetBuildsCommandOutput,
  StartBuildCommand,
  type StartBuildCommandOutput,
} from '@aws-sdk/client-codebuild';
import { DescribeImagesCommand, type DescribeImagesCommandOutput } from '@aws-sdk/client-ecr';
import * as tar from 'tar';
import { FerryError } from '../../core/errors.js';
import type { ManifestEndpoint } from '../../core/manifest.js';
import type { WorkerImages } from '../../infra/app-stack.js';
import { placementFor } from '../../infra/gpu.js';
import { imageBuildPrefix, imageBuildQueuedMinutes } from '../../infra/names.js';
import {
  agentBundleDir,
  agentImage,
  baseImageFor,
  type ContentHashes,
  dockerBuildCommands,
  imageContentHashes,
  imageInputFiles,
  registryImage,
} from '../../worker-image/images.js';
import { shellLine } from '../config.js';
import type { Reporter } from '../io.js';
import { awsAccessHint } from './aws/access.js';

export interface EcrLike {
  send(command: DescribeImagesCommand): Promise<DescribeImagesCommandOutput>;
}
export interface CodeBuildLike {
  send(command: StartBuildCommand): Promise<StartBuildCommandOutput>;
  send(command: BatchGetBuildsCommand): Promise<BatchGetBuildsCommandOutput>;
}

/** One image a deploy needs: its kind, repository and tag. */
export interface NeededImage {
  kind: string;
  repository: string;
  tag: string;
}

/**
 * The accelerators whose Ferry base image `endpoints` run on. An image endpoint (`Endpoint(image=...)`)
 * runs its own image in the worker container (infra/constructs/service.ts), so it needs no base: only
 * the agent, which every endpoint has. A project of image endpoints alone then neither looks up nor
 * builds the multi-GB bases.
 */
export function acceleratorsOf(
  endpoints: readonly Pick<ManifestEndpoint, 'image' | 'resources'>[],
): Set<'cpu' | 'gpu'> {
  return new Set(endpoints.filter((e) => e.image === undefined).map((e) => placementFor(e.resources).kind));
}

/**
 * What the platform registry's tags are made of: this install's agent bundled afresh (the images COPY
 * it, and a stale bundle left by an earlier `ferry images build` would name old code), then every
 * image's inputs hashed (worker-image/images.ts imageContentHashes). `root` is the Ferry install.
 */
export async function platformImageContent(
  root: string,
  version: string,
  pythonVersion: string,
): Promise<ContentHashes> {
  const { bundleAgent } = await import('../../worker-image/agent/bundle.js');
  await bundleAgent(path.join(root, agentBundleDir));
  return imageContentHashes(root, version, pythonVersion);
}

/** The kinds an app needs: the agent always, a base per accelerator its endpoints use. */
export function neededImages(
  accelerators: ReadonlySet<'cpu' | 'gpu'>,
  version: string,
  pythonVersion: string,
  content: ContentHashes,
): NeededImage[] {
  const split = (image: string, kind: string): NeededImage => {
    const [repository, tag] = image.split(':') as [string, string];
    return { kind, repository, tag };
  };
  const out = [split(agentImage(version, content), 'agent')];
  if (accelerators.has('cpu'))
    out.push(split(baseImageFor('cpu', version, pythonVersion, content), 'base-cpu'));
  if (accelerators.has('gpu'))
    out.push(split(baseImageFor('gpu', version, pythonVersion, content), 'base-gpu'));
  return out;
}

/**
 * The images a stack of these accelerators pulls from `registry`, as ECR repository and tag, out of
 * `images` as an earlier deploy resolved them (aws/records.ts): the agent always, a worker per
 * accelerator used. Images elsewhere (the user's own registry) are left out, as a deploy leaves them.
 */
export function imagesIn(
  registry: string,
  images: WorkerImages,
  accelerators: ReadonlySet<'cpu' | 'gpu'>,
): NeededImage[] {
  const used: Array<[kind: string, image: string]> = [['agent', images.agent]];
  if (accelerators.has('cpu')) used.push(['base-cpu', images.cpuWorker]);
  if (accelerators.has('gpu')) used.push(['base-gpu', images.gpuWorker]);
  const prefix = registryImage(registry, '');
  return used.flatMap(([kind, image]) => {
    if (!image.startsWith(prefix)) return [];
    const name = image.slice(prefix.length);
    const colon = name.lastIndexOf(':');
    return colon > 0 ? [{ kind, repository: name.slice(0, colon), tag: name.slice(colon + 1) }] : [];
  });
}

/** The images of `needed` whose tag is not in ECR (DescribeImages answers ImageNotFoundException). */
export async function missingImages(ecr: EcrLike, needed: readonly NeededImage[]): Promise<NeededImage[]> {
  const missing: NeededImage[] = [];
  for (const image of needed) {
    try {
      await ecr.send(
        new DescribeImagesCommand({ repositoryName: image.repository, imageIds: [{ imageTag: image.tag }] }),
      );
    } catch (error) {
      const name = (error as { name?: string }).name;
      if (name === 'ImageNotFoundException' || name === 'RepositoryNotFoundException') missing.push(image);
      else
        throw new FerryError(
          'failed',
          `Cannot look up ${image.repository}:${image.tag} in ECR: ${(error as Error).message}`,
          { hint: awsAccessHint(error), cause: error },
        );
    }
  }
  return missing;
}

/**
 * The shell script CodeBuild runs in the unpacked context: per missing image, from
 * worker-image/images.ts's commands (one owner of how an image is built and named),
 *
 *   - skip it when its tag is in ECR by now (`aws ecr describe-images`: another deploy built it since
 *     this one looked);
 *   - else build, tag and push it; a refused push of a tag that is in ECR now is not a failure: the
 *     other build's push won the race to the immutable tag
 *     (https://docs.aws.amazon.com/AmazonECR/latest/userguide/image-tag-mutability.html), and the tag
 *     names the same content;
 *
 * so one deploy's agent push racing another's never stops it before its own base images. An image
 * built FROM another whose build was skipped pulls that one from the registry first.
 */
export function buildScript(
  missing: readonly NeededImage[],
  version: string,
  pythonVersion: string,
  content: ContentHashes,
): string {
  const lines = [
    '#!/bin/sh',
    'set -eu',
    'REGISTRY="$1"',
    '# in_ecr REPOSITORY TAG: whether the tag is in ECR (ecr:DescribeImages)',
    'in_ecr() { aws ecr describe-images --repository-name "$1" --image-ids "imageTag=$2" >/dev/null 2>&1; }',
    '# push IMAGE REPOSITORY TAG',
    'push() {',
    '  docker tag "$1" "$REGISTRY/$1"',
    '  if ! docker push "$REGISTRY/$1"; then',
    '    in_ecr "$2" "$3" || return 1',
    '    echo "ferry: $REGISTRY/$1 was pushed by another build meanwhile (the same content): going on"',
    '  fi',
    '}',
  ];
  const commands = dockerBuildCommands(version, pythonVersion, {
    kinds: missing.map((m) => m.kind),
    content,
  });
  for (const command of commands) {
    const local = command[command.indexOf('--tag') + 1]!;
    const [repository, tag] = local.split(':') as [string, string];
    const base = command.find((arg) => arg.startsWith('BASE_IMAGE='))?.slice('BASE_IMAGE='.length);
    lines.push(
      `if in_ecr ${repository} ${tag}; then`,
      `  echo "ferry: $REGISTRY/${local} is in ECR already: not built"`,
      'else',
    );
    if (base !== undefined) {
      lines.push(
        `  docker image inspect ${base} >/dev/null 2>&1 || { docker pull "$REGISTRY/${base}" && docker tag "$REGISTRY/${base}" ${base}; }`,
      );
    }
    lines.push(`  ${shellLine(command)}`, `  push ${local} ${repository} ${tag}`, 'fi');
  }
  return `${lines.join('\n')}\n`;
}

/**
 * The build context as a .tar.gz: the files the missing images are made of (worker-image/images.ts
 * imageInputFiles, the same list their tags hash: Dockerfiles, the agent bundle, the runtime, the
 * entrypoint scripts) and ferry-build-images.sh. `root` is the Ferry install; the agent bundle must
 * be there already (platformImageContent).
 */
export async function writeBuildContext(
  root: string,
  file: string,
  missing: readonly NeededImage[],
  version: string,
  pythonVersion: string,
  content: ContentHashes,
): Promise<void> {
  const staging = mkdtempSync(path.join(tmpdir(), 'ferry-image-context-'));
  try {
    const inputs = new Set(missing.flatMap((image) => imageInputFiles(root, image.kind)));
    for (const input of [...inputs].sort()) {
      mkdirSync(path.dirname(path.join(staging, input)), { recursive: true });
      cpSync(path.join(root, input), path.join(staging, input));
    }
    writeFileSync(
      path.join(staging, 'ferry-build-images.sh'),
      buildScript(missing, version, pythonVersion, content),
      { mode: 0o755 },
    );
    await tar.c({ gzip: true, file, cwd: staging, portable: true }, ['.']);
  } finally {
    rmSync(staging, { recursive: true, force: true });
  }
}

export interface CodeBuildRun {
  codebuild: CodeBuildLike;
  project: string;
  contextKey: string;
  reporter: Reporter;
  clock: { sleep(ms: number): Promise<void> };
  /** How often to ask CodeBuild how the build is going. */
  pollMs?: number;
}

/**
 * StartBuild. A new account's CodeBuild quota may be 0 ("Cannot have more than 0 builds in queue
 * for the account", AccountLimitExceededException: "An AWS service limit was exceeded for the
 * calling AWS account", https://docs.aws.amazon.com/codebuild/latest/APIReference/API_StartBuild.html);
 * only a quota increase or a local build gets past it
 * (https://docs.aws.amazon.com/codebuild/latest/userguide/limits.html).
 */
async function startBuild(run: CodeBuildRun): Promise<StartBuildCommandOutput> {
  try {
    return await run.codebuild.send(
      new StartBuildCommand({
        projectName: run.project,
        environmentVariablesOverride: [
          { name: 'FERRY_CONTEXT_KEY', value: run.contextKey, type: 'PLAINTEXT' },
        ],
      }),
    );
  } catch (error) {
    if ((error as { name?: string }).name !== 'AccountLimitExceededException') throw error;
    throw new FerryError(
      'failed',
      `CodeBuild refused to start the image build: ${(error as Error).message}`,
      {
        hint:
          "This account's CodeBuild quota allows no (more) builds; new accounts often start at 0. Request a higher " +
          '"Concurrently running builds" quota for CodeBuild in Service Quotas ' +
          '(https://docs.aws.amazon.com/codebuild/latest/userguide/limits.html), or build and push the images ' +
          'yourself: `ferry images build && ferry images push --registry <the platform ImageRegistry>`, and set ' +
          'FERRY_AWS_IMAGE_REGISTRY to that registry (images pushed by hand are named by version, not content).',
        cause: error,
      },
    );
  }
}

/**
 * After this long QUEUED the deploy says why it waits and what to do; the project gives up after
 * imageBuildQueuedMinutes (infra/names.ts).
 */
export const queuedHintAfterMs = 60_000;

const quotaAdvice =
  "Check the account's CodeBuild quota for concurrently running builds (Service Quotas, CodeBuild: " +
  'https://docs.aws.amazon.com/codebuild/latest/userguide/limits.html), wait for the builds that hold it, ' +
  'or build and push the images yourself (`ferry images build && ferry images push --registry <the platform ImageRegistry>`, ' +
  'then set FERRY_AWS_IMAGE_REGISTRY to that registry).';

/**
 * Starts the build and follows it: a line per phase, a hint when it stays queued, an error with the
 * log link when it fails, and an error when CodeBuild no longer knows it (BatchGetBuilds answers
 * `builds: []` and the id under `buildsNotFound`).
 */
export async function runImageBuild(run: CodeBuildRun): Promise<void> {
  const started = await startBuild(run);
  const id = started.build?.id;
  if (!id) throw new FerryError('failed', `CodeBuild did not start a build of ${run.project}`);
  run.reporter.line(`  building images in CodeBuild (${id}); this takes 20-40 minutes the first time`);
  const pollMs = run.pollMs ?? 15_000;
  let phase = '';
  let queuedMs = 0;
  let hinted = false;
  for (;;) {
    const { builds, buildsNotFound } = await run.codebuild.send(new BatchGetBuildsCommand({ ids: [id] }));
    const build = builds?.find((b) => b.id === id) ?? builds?.[0];
    if (build === undefined) {
      throw new FerryError(
        'failed',
        `CodeBuild has no build ${id}${buildsNotFound?.includes(id) ? ' (BatchGetBuilds: buildsNotFound)' : ''}`,
        {
          hint: `Look for it in the CodeBuild console under the project ${run.project}, then deploy again to start a new build.`,
        },
      );
    }
    if (build.currentPhase && build.currentPhase !== phase) {
      phase = build.currentPhase;
      run.reporter.line(`    image build: ${phase.toLowerCase()}`);
    }
    const status = build.buildStatus;
    if (status === 'SUCCEEDED') {
      run.reporter.line('  ✓ images built and pushed');
      return;
    }
    if (status && status !== 'IN_PROGRESS') {
      const log = build.logs?.deepLink
        ? `Its log: ${build.logs.deepLink}`
        : 'Its log is in CloudWatch Logs under the CodeBuild project.';
      throw new FerryError('failed', `The image build ${id} ended ${status}`, {
        hint:
          phase === 'QUEUED'
            ? `It never left the queue (the project gives up after ${imageBuildQueuedMinutes} minutes queued). ${quotaAdvice}`
            : log,
      });
    }
    if (phase === 'QUEUED' && queuedMs >= queuedHintAfterMs && !hinted) {
      hinted = true;
      run.reporter.line(
        `    the build is still queued after ${Math.round(queuedMs / 60_000)} min: CodeBuild starts it when one of the account's ` +
          `concurrent builds ends, and gives up after ${imageBuildQueuedMinutes} min queued. ${quotaAdvice}`,
      );
    }
    await run.clock.sleep(pollMs);
    if (phase === 'QUEUED') queuedMs += pollMs;
  }
}

/**
 * Builds `missing` in CodeBuild. When the build fails, looks in ECR again: another deploy may have
 * pushed the same tags meanwhile (and made this build's push fail on the immutable tag). Nothing
 * missing then: says so and goes on. Still missing: the build's error, naming what is missing.
 */
export async function buildMissingImages(
  run: CodeBuildRun & { ecr: EcrLike; missing: readonly NeededImage[] },
): Promise<void> {
  try {
    await runImageBuild(run);
  } catch (error) {
    const still = await missingImages(run.ecr, run.missing).catch(() => undefined);
    if (still === undefined) throw error;
    if (still.length === 0) {
      run.reporter.line(
        '  the image build failed, but every image it was to push is in ECR now (another deploy built them at the same time): going on',
      );
      return;
    }
    const failure = FerryError.is(error)
      ? error
      : new FerryError('failed', `The image build failed: ${(error as Error).message}`, { cause: error });
    throw new FerryError(
      failure.code,
      `${failure.message}; still missing: ${still.map((m) => `${m.repository}:${m.tag}`).join(', ')}`,
      {
        hint:
          `${failure.hint ? `${failure.hint}. ` : ''}If another deploy of this Ferry version is building the same ` +
          'images now, wait for it to finish and deploy again.',
        cause: error,
      },
    );
  }
}

/** Where an uploaded build context goes in the platform bucket. */
export function buildContextKey(version: string, pythonVersion: string, nowMs: number): string {
  return `${imageBuildPrefix}${version}-py${pythonVersion}-${nowMs}.tar.gz`;
}

/** `<registry>/<repository>:<tag>` for each of the three images a stack names. */
export function imagesAt(registry: string, version: string, pythonVersion: string, content: ContentHashes) {
  return {
    gpuWorker: registryImage(registry, baseImageFor('gpu', version, pythonVersion, content)),
    cpuWorker: registryImage(registry, baseImageFor('cpu', version, pythonVersion, content)),
    agent: registryImage(registry, agentImage(version, content)),
  };
}
