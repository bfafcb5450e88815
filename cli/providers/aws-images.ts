/**
 * Which worker and agent images a deploy uses, and making sure they exist (docs/aws.md "Images"):
 *
 *  1. FERRY_AWS_GPU_IMAGE / FERRY_AWS_CPU_IMAGE / FERRY_AWS_AGENT_IMAGE, or FERRY_AWS_IMAGE_REGISTRY:
 *     the user's own images, used as given.
 *  2. Otherwise the platform's ECR registry (its ImageRegistry output). Each tag the app needs is
 *     looked up (ecr:DescribeImages); missing ones are built by the platform's CodeBuild project
 *     from a build context this machine uploads, with progress, unless FERRY_AWS_IMAGE_BUILD=never.
 *  3. Neither possible: exit 2 with the ways to fix it. Never a deploy whose tasks cannot pull.
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
import { imageBuildPrefix } from '../../infra/names.js';
import {
  agentBundleDir,
  agentImage,
  baseImageFor,
  dockerBuildCommands,
  findImageKind,
  registryImage,
} from '../../worker-image/images.js';
import { shellLine } from '../deploy/plan.js';
import type { Reporter } from '../io.js';

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

/** The kinds an app needs: the agent always, a base per accelerator its endpoints use. */
export function neededImages(
  accelerators: ReadonlySet<'cpu' | 'gpu'>,
  version: string,
  pythonVersion: string,
): NeededImage[] {
  const split = (image: string, kind: string): NeededImage => {
    const [repository, tag] = image.split(':') as [string, string];
    return { kind, repository, tag };
  };
  const out = [split(agentImage(version), 'agent')];
  if (accelerators.has('cpu')) out.push(split(baseImageFor('cpu', version, pythonVersion), 'base-cpu'));
  if (accelerators.has('gpu')) out.push(split(baseImageFor('gpu', version, pythonVersion), 'base-gpu'));
  return out;
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
          {
            cause: error,
          },
        );
    }
  }
  return missing;
}

/**
 * The shell script CodeBuild runs in the unpacked context: build, tag and push each missing image,
 * from worker-image/images.ts's commands (one owner of how an image is built).
 */
export function buildScript(missing: readonly NeededImage[], version: string, pythonVersion: string): string {
  const lines = ['#!/bin/sh', 'set -eu', 'REGISTRY="$1"'];
  for (const command of dockerBuildCommands(version, pythonVersion, { kinds: missing.map((m) => m.kind) })) {
    lines.push(shellLine(command));
    const local = command[command.indexOf('--tag') + 1]!;
    lines.push(`docker tag ${local} "$REGISTRY/${local}"`, `docker push "$REGISTRY/${local}"`);
  }
  return `${lines.join('\n')}\n`;
}

/**
 * The build context as a .tar.gz: the Dockerfiles' inputs (worker-image/ with the agent bundle) and
 * ferry-build-images.sh. `root` is the Ferry install; the agent bundle must be there already.
 */
export async function writeBuildContext(
  root: string,
  file: string,
  missing: readonly NeededImage[],
  version: string,
  pythonVersion: string,
): Promise<void> {
  const staging = mkdtempSync(path.join(tmpdir(), 'ferry-image-context-'));
  try {
    for (const part of ['worker-image/python/ferry', agentBundleDir]) {
      cpSync(path.join(root, part), path.join(staging, part), { recursive: true });
    }
    for (const image of missing) {
      const dockerfile = findImageKind(image.kind).dockerfile;
      mkdirSync(path.dirname(path.join(staging, dockerfile)), { recursive: true });
      cpSync(path.join(root, dockerfile), path.join(staging, dockerfile));
    }
    for (const script of ['entrypoint.sh', 'unpack_artifact.py', 'healthcheck.sh']) {
      cpSync(path.join(root, 'worker-image', script), path.join(staging, 'worker-image', script));
    }
    writeFileSync(path.join(staging, 'ferry-build-images.sh'), buildScript(missing, version, pythonVersion), {
      mode: 0o755,
    });
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

/** Starts the build and follows it: a line per phase, an error with the log link when it fails. */
export async function runImageBuild(run: CodeBuildRun): Promise<void> {
  const started = await run.codebuild.send(
    new StartBuildCommand({
      projectName: run.project,
      environmentVariablesOverride: [{ name: 'FERRY_CONTEXT_KEY', value: run.contextKey, type: 'PLAINTEXT' }],
    }),
  );
  const id = started.build?.id;
  if (!id) throw new FerryError('failed', `CodeBuild did not start a build of ${run.project}`);
  run.reporter.line(`  building images in CodeBuild (${id}); this takes 20-40 minutes the first time`);
  let phase = '';
  for (;;) {
    const { builds } = await run.codebuild.send(new BatchGetBuildsCommand({ ids: [id] }));
    const build = builds?.[0];
    if (build?.currentPhase && build.currentPhase !== phase) {
      phase = build.currentPhase;
      run.reporter.line(`    image build: ${phase.toLowerCase()}`);
    }
    const status = build?.buildStatus;
    if (status === 'SUCCEEDED') {
      run.reporter.line('  ✓ images built and pushed');
      return;
    }
    if (status && status !== 'IN_PROGRESS') {
      throw new FerryError('failed', `The image build ${id} ended ${status}`, {
        hint: build?.logs?.deepLink
          ? `Its log: ${build.logs.deepLink}`
          : 'Its log is in CloudWatch Logs under the CodeBuild project.',
      });
    }
    await run.clock.sleep(run.pollMs ?? 15_000);
  }
}

/** Where an uploaded build context goes in the platform bucket. */
export function buildContextKey(version: string, pythonVersion: string, nowMs: number): string {
  return `${imageBuildPrefix}${version}-py${pythonVersion}-${nowMs}.tar.gz`;
}

/** `<registry>/<repository>:<tag>` for each of the three images a stack names. */
export function imagesAt(registry: string, version: string, pythonVersion: string) {
  return {
    gpuWorker: registryImage(registry, baseImageFor('gpu', version, pythonVersion)),
    cpuWorker: registryImage(registry, baseImageFor('cpu', version, pythonVersion)),
    agent: registryImage(registry, agentImage(version)),
  };
}
