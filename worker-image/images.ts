/**
 * The worker images, in one table: kind, Dockerfile, repository, build args. The CLI and the release
 * pipeline generate `docker build` commands from it; nothing here runs docker.
 *
 * Names follow docs/architecture.md#worker-images (kinds "base" and "with a model preinstalled", a `<version>` placeholder):
 *   ferry/worker-base-cpu:<version>-py<python>     Dockerfile.cpu
 *   ferry/worker-base-gpu:<version>-py<python>     Dockerfile.gpu
 *   ferry/worker-sdxl-turbo:<version>-py<python>   Dockerfile.model-sdxl-turbo  (FROM the gpu base)
 *   ferry/agent:<version>                          Dockerfile.agent  (Node and agent.mjs only; the
 *                                                  agent, artifact-init and LB-proxy containers)
 *
 * Those are the local names (`ferry images build`, `ferry deploy --preview`). The platform's ECR
 * registry names content instead: `<version>-<hash>[-py<python>]`, the hash over everything that goes
 * into the image (imageContentHashes), so a change to the agent or the runtime is a new tag that a
 * deploy builds, while the version alone stayed 0.1.0 through hundreds of such changes.
 *
 * Every command runs from the repository root: the Dockerfiles COPY worker-image/python/ferry and the
 * agent bundle by their repository paths.
 */
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { FerryError } from '../core/errors.js';
import { pythonVersions } from '../core/python-versions.js';

export type PythonVersion = (typeof pythonVersions)[number];

export const defaultPythonVersion: PythonVersion = '3.12';

export interface WorkerImageKind {
  kind: string;
  /** Repository-relative path of the Dockerfile. */
  dockerfile: string;
  repository: string;
  /** Base images run user code; model images add weights on top of a base; the agent runs no user code. */
  category: 'base' | 'model' | 'agent';
  accelerator: 'cpu' | 'gpu';
  /** The kind this one is built FROM (passed as BASE_IMAGE): it must be built first. */
  from?: string;
  /** Build args other than PYTHON_VERSION and BASE_IMAGE, which are derived. */
  buildArgs: Readonly<Record<string, string>>;
  /**
   * What its Dockerfile COPYs from the build context (repository paths; a folder is taken whole).
   * The build context CodeBuild gets and the content hash of the image's tag are both made of these
   * and the Dockerfile (imageInputFiles), and test/unit/dockerfiles.test.ts holds them to the COPY lines.
   */
  copies: readonly string[];
  description: string;
}

/** What the base images COPY: the runtime, the agent bundle, the entrypoint and its helpers. */
const baseCopies = [
  'worker-image/python/ferry',
  'worker-image/agent/dist/agent.mjs',
  'worker-image/entrypoint.sh',
  'worker-image/unpack_artifact.py',
  'worker-image/healthcheck.sh',
] as const;

export const workerImages: readonly WorkerImageKind[] = [
  {
    kind: 'agent',
    dockerfile: 'worker-image/Dockerfile.agent',
    repository: 'ferry/agent',
    category: 'agent',
    accelerator: 'cpu',
    buildArgs: {},
    copies: ['worker-image/agent/dist/agent.mjs'],
    description:
      'The agent alone (Node 22 and agent.mjs, tens of MB): queue sidecar, LB key check, artifact init',
  },
  {
    kind: 'base-cpu',
    dockerfile: 'worker-image/Dockerfile.cpu',
    repository: 'ferry/worker-base-cpu',
    category: 'base',
    accelerator: 'cpu',
    buildArgs: {},
    copies: baseCopies,
    description:
      'CPU workers: torch/torchvision/torchaudio CPU wheels, numpy, triton (amd64), ferry runtime, agent',
  },
  {
    kind: 'base-gpu',
    dockerfile: 'worker-image/Dockerfile.gpu',
    repository: 'ferry/worker-base-gpu',
    category: 'base',
    accelerator: 'gpu',
    buildArgs: { CUDA_WHEELS: 'cu124' },
    copies: baseCopies,
    description: 'GPU workers: CUDA 12.4 runtime, torch cu124 wheels, numpy, triton, ferry runtime, agent',
  },
  {
    kind: 'sdxl-turbo',
    dockerfile: 'worker-image/Dockerfile.model-sdxl-turbo',
    repository: 'ferry/worker-sdxl-turbo',
    category: 'model',
    accelerator: 'gpu',
    from: 'base-gpu',
    buildArgs: { MODEL_ID: 'stabilityai/sdxl-turbo', MODEL_REVISION: 'main' },
    copies: [],
    description: 'The GPU base with SDXL-Turbo (fp16) in the Hugging Face cache at HF_HOME',
  },
];

/** Docker tags: up to 128 of [A-Za-z0-9_.-], not starting with '.' or '-'. */
const tagPart = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,110}$/;

export function checkVersion(version: string): string {
  if (!tagPart.test(version)) {
    throw new FerryError(
      'usage',
      `Image version must be a docker tag such as 0.1.0, got ${JSON.stringify(version)}`,
    );
  }
  return version;
}

export function checkPythonVersion(pythonVersion: string): PythonVersion {
  const found = pythonVersions.find((v) => v === pythonVersion);
  if (found === undefined) {
    throw new FerryError(
      'usage',
      `Python version must be one of ${pythonVersions.join(', ')}, got ${JSON.stringify(pythonVersion)}`,
    );
  }
  return found;
}

export function findImageKind(kind: string): WorkerImageKind {
  const found = workerImages.find((image) => image.kind === kind);
  if (found === undefined) {
    throw new FerryError(
      'usage',
      `Unknown worker image kind ${JSON.stringify(kind)}; known: ${workerImages.map((i) => i.kind).join(', ')}`,
      { hint: 'Pass one or more of the known kinds, comma-separated: --kind base-cpu,agent.' },
    );
  }
  return found;
}

/**
 * Each kind's content hash (imageContentHashes): given, a tag names its image's content,
 * `<version>-<hash>[-py<python>]`; absent, the local version-only name.
 */
export type ContentHashes = Readonly<Record<string, string>>;

/**
 * `ferry/worker-base-gpu:0.1.0-py3.12`; the agent has no Python: `ferry/agent:0.1.0`. With the
 * content hashes: `ferry/worker-base-gpu:0.1.0-3f9c2a7d41b0-py3.12`, `ferry/agent:0.1.0-8e1d…`. The one
 * function that names a tag: the deploy's lookups, the build script and the stack's image URIs all
 * come through here.
 */
export function imageTag(
  kind: string,
  version: string,
  pythonVersion: string,
  content?: ContentHashes,
): string {
  const image = findImageKind(kind);
  let tag = checkVersion(version);
  if (content !== undefined) {
    const hash = content[kind];
    if (hash === undefined || !/^[0-9a-f]{12}$/.test(hash)) {
      throw new FerryError('failed', `No content hash for the ${kind} image`);
    }
    tag += `-${hash}`;
  }
  if (image.category !== 'agent') tag += `-py${checkPythonVersion(pythonVersion)}`;
  if (tag.length > 128) {
    throw new FerryError(
      'usage',
      `Image tag ${tag} is longer than docker's 128 characters: use a shorter version`,
    );
  }
  return `${image.repository}:${tag}`;
}

/** The agent's image (the same for every Python version). */
export function agentImage(version: string, content?: ContentHashes): string {
  return imageTag('agent', version, defaultPythonVersion, content);
}

/** Where the agent bundle must be before any docker build (the Dockerfiles COPY it). */
export const agentBundleDir = 'worker-image/agent/dist';

/** The base image a worker of this accelerator runs on (the image the CLI deploys user code into). */
export function baseImageFor(
  accelerator: 'cpu' | 'gpu',
  version: string,
  pythonVersion: string,
  content?: ContentHashes,
): string {
  return imageTag(accelerator === 'cpu' ? 'base-cpu' : 'base-gpu', version, pythonVersion, content);
}

/**
 * The platform every image is built for, whatever machine builds it. Ferry's ECS hosts are all
 * x86-64: the instance types of infra/gpu.ts (g4dn, g5, g6, g6e, p4d, p5; c7i, m7i, r7i; no
 * Graviton) on the STANDARD and GPU ECS-optimized AMIs, and the CodeBuild project that builds the
 * images is x86-64 too. Without `--platform` docker builds the host's architecture, so `ferry images
 * build && ferry images push` on an Apple-silicon machine would push arm64 images that no host can
 * run, under tags ECR keeps immutable
 * (https://docs.aws.amazon.com/AmazonECR/latest/userguide/image-tag-mutability.html), while a deploy
 * checks only that a tag exists. The platform is part of every content hash. The same tag runs locally under `ferry deploy --preview`
 * (emulated on arm64): one tag, one architecture.
 * https://docs.docker.com/reference/cli/docker/buildx/build/#platform
 */
export const imagePlatform = 'linux/amd64';

export interface BuildOptions {
  /** Only these kinds (their `from` kinds are not added: build those first yourself). */
  kinds?: readonly string[];
  /** Extra `--build-arg`s per kind, e.g. a pinned MODEL_REVISION. */
  buildArgs?: Readonly<Record<string, Readonly<Record<string, string>>>>;
  /** The docker executable. */
  docker?: string;
  /** Content-addressed tags (imageContentHashes) instead of the version-only local names. */
  content?: ContentHashes;
}

/** The build args of `image`, BASE_IMAGE named as `content` names it: one owner for the command and the hash. */
function buildArgsOf(
  image: WorkerImageKind,
  version: string,
  pythonVersion: string,
  content?: ContentHashes,
): Record<string, string> {
  const args: Record<string, string> =
    image.category === 'agent'
      ? { ...image.buildArgs }
      : { PYTHON_VERSION: pythonVersion, ...image.buildArgs };
  if (image.from !== undefined) args.BASE_IMAGE = imageTag(image.from, version, pythonVersion, content);
  return args;
}

/**
 * One argv per image, bases before the images built FROM them:
 *   ['docker', 'build', '--platform', 'linux/amd64', '--file', 'worker-image/Dockerfile.cpu',
 *    '--build-arg', 'PYTHON_VERSION=3.12', '--tag', 'ferry/worker-base-cpu:0.1.0-py3.12', '.']
 */
export function dockerBuildCommands(
  version: string,
  pythonVersion: string = defaultPythonVersion,
  options: BuildOptions = {},
): string[][] {
  checkVersion(version);
  checkPythonVersion(pythonVersion);
  if (options.content !== undefined && options.buildArgs !== undefined) {
    // A content tag covers the table's build args only: extra ones would build other content under it.
    throw new FerryError('usage', 'Extra build args cannot be combined with content-addressed tags');
  }
  const selected = options.kinds === undefined ? workerImages : options.kinds.map(findImageKind);
  return buildOrder(selected).map((image) => {
    const args = buildArgsOf(image, version, pythonVersion, options.content);
    Object.assign(args, options.buildArgs?.[image.kind] ?? {});
    const argv = [
      options.docker ?? 'docker',
      'build',
      '--platform',
      imagePlatform,
      '--file',
      image.dockerfile,
    ];
    for (const [name, value] of Object.entries(args)) argv.push('--build-arg', `${name}=${value}`);
    argv.push('--tag', imageTag(image.kind, version, pythonVersion, options.content), '.');
    return argv;
  });
}

/** Stable order with every `from` kind before its dependants (the table is tiny: repeat until placed). */
function buildOrder(images: readonly WorkerImageKind[]): WorkerImageKind[] {
  const ordered: WorkerImageKind[] = [];
  const pending = [...new Set(images)];
  while (pending.length > 0) {
    const index = pending.findIndex(
      (image) => image.from === undefined || !pending.some((other) => other.kind === image.from),
    );
    if (index === -1) throw new FerryError('failed', 'worker image table has a FROM cycle');
    ordered.push(...pending.splice(index, 1));
  }
  return ordered;
}

/** Caches Python writes beside the runtime when it runs locally: never image content. */
const notContent = (name: string) => name === '__pycache__' || name.endsWith('.pyc');

/**
 * The repository-relative files that go into `kind`'s image: its Dockerfile and what it COPYs, each
 * folder expanded to its files (no `__pycache__`, no `.pyc`), sorted. The one list both the CodeBuild
 * context (cli/providers/aws-images.ts writeBuildContext) and the content hash are made of.
 */
export function imageInputFiles(root: string, kind: string): string[] {
  const image = findImageKind(kind);
  const files: string[] = [];
  const add = (relative: string): void => {
    const absolute = path.join(root, relative);
    let stat: ReturnType<typeof statSync>;
    try {
      stat = statSync(absolute);
    } catch (error) {
      throw new FerryError(
        'failed',
        `${relative}, which the ${kind} image is built from, is missing in ${root}`,
        {
          hint:
            relative === `${agentBundleDir}/agent.mjs`
              ? 'Bundle the agent first (`ferry images build` does; a deploy does itself).'
              : 'This Ferry install is incomplete: check out or install it again.',
          cause: error,
        },
      );
    }
    if (!stat.isDirectory()) {
      files.push(relative);
      return;
    }
    for (const entry of readdirSync(absolute)) {
      if (!notContent(entry)) add(path.posix.join(relative, entry));
    }
  };
  add(image.dockerfile);
  for (const copied of image.copies) add(copied);
  return [...new Set(files)].sort();
}

/**
 * Each kind's content hash: the first 12 hex digits of a SHA-256 over exactly what goes into its
 * image: the platform, its build args (BASE_IMAGE names the base by its own content tag, so a model
 * image follows its base), and the path and bytes of every file of imageInputFiles in sorted order.
 * Never mtimes, modes or the order a folder lists its files in: the same checkout gives the same
 * tags on every machine, and one changed byte a new tag.
 */
export function imageContentHashes(root: string, version: string, pythonVersion: string): ContentHashes {
  checkVersion(version);
  checkPythonVersion(pythonVersion);
  const hashes: Record<string, string> = {};
  for (const image of buildOrder(workerImages)) {
    const hash = createHash('sha256');
    const field = (value: unknown) => hash.update(`${JSON.stringify(value)}\n`);
    field(['ferry-image-content', 1]);
    field(['platform', imagePlatform]);
    const args = buildArgsOf(image, version, pythonVersion, hashes);
    field(['args', Object.entries(args).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))]);
    for (const file of imageInputFiles(root, image.kind)) {
      const bytes = readFileSync(path.join(root, file));
      field(['file', file, bytes.length]);
      hash.update(bytes);
    }
    hashes[image.kind] = hash.digest('hex').slice(0, 12);
  }
  return hashes;
}

/** `<registry>/<image>`, e.g. `123456789012.dkr.ecr.us-east-1.amazonaws.com/ferry/agent:0.1.0`. */
export function registryImage(registry: string, image: string): string {
  return `${registry.replace(/\/+$/, '')}/${image}`;
}

/**
 * The commands that push built images to an ECR registry: log docker in with a token from
 * `aws ecr get-login-password` (https://docs.aws.amazon.com/AmazonECR/latest/userguide/registry_auth.html),
 * then tag and push each image (https://docs.aws.amazon.com/AmazonECR/latest/userguide/docker-push-ecr-image.html).
 * The first entry is a shell pipeline (one string); the rest are argv.
 */
export function dockerPushCommands(
  registry: string,
  version: string,
  pythonVersion: string = defaultPythonVersion,
  options: { kinds?: readonly string[]; docker?: string } = {},
): { login: string; commands: string[][] } {
  const ecr = /^\d{12}\.dkr\.ecr\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?$/.exec(registry.replace(/\/+$/, ''));
  if (!ecr) {
    throw new FerryError('usage', `${JSON.stringify(registry)} is not an ECR registry`, {
      hint: 'Pass --registry <account>.dkr.ecr.<region>.amazonaws.com (the platform stack prints it as ImageRegistry).',
    });
  }
  const docker = options.docker ?? 'docker';
  const selected = options.kinds === undefined ? workerImages : options.kinds.map(findImageKind);
  const commands: string[][] = [];
  for (const image of buildOrder(selected)) {
    const local = imageTag(image.kind, version, pythonVersion);
    const remote = registryImage(registry, local);
    commands.push([docker, 'tag', local, remote], [docker, 'push', remote]);
  }
  return {
    login: `aws ecr get-login-password --region ${ecr[1]} | ${docker} login --username AWS --password-stdin ${registry.replace(/\/+$/, '')}`,
    commands,
  };
}
