/**
 * The worker images without a docker engine: hadolint is not installable here (a Haskell binary; the
 * npm "hadolint" package only wraps it, and apt has no package), so the Dockerfiles are parsed and
 * checked for the rules we care about. The entrypoint runs for real with sh, curl and python3, with a
 * stand-in `ferry.worker` that reports what it was started with.
 */
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, readdir, rm, symlink, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FerryError } from '../../core/errors.js';
import { pythonVersions } from '../../core/manifest.js';
import { cpuInstanceFor, gpuInstanceTable } from '../../infra/gpu.js';
import { agentEntryPoint } from '../../infra/task-layout.js';
import { dockerBuildCommands, imagePlatform, imageTag, workerImages } from '../../worker-image/images.js';

const repo = path.resolve(import.meta.dirname, '../..');
const workerImageDir = path.join(repo, 'worker-image');

interface Instruction {
  keyword: string;
  args: string;
  line: number;
}

/** Dockerfile instructions: comments dropped, `\` continuations joined (comment lines inside them too). */
function parseDockerfile(text: string): Instruction[] {
  const out: Instruction[] = [];
  let pending: { text: string; line: number } | undefined;
  text.split('\n').forEach((raw, index) => {
    const line = raw.replace(/\r$/, '');
    const trimmed = line.trim();
    // Docker skips comment lines and empty lines, also inside a continuation.
    if (trimmed.startsWith('#') || trimmed === '') return;
    const continued = /\\\s*$/.test(line);
    const body = continued ? line.replace(/\\\s*$/, '') : line;
    if (pending === undefined) pending = { text: body.trim(), line: index + 1 };
    else pending.text += ` ${body.trim()}`;
    if (!continued) {
      const match = /^(\S+)\s*(.*)$/s.exec(pending.text)!;
      out.push({
        keyword: match[1]!.toUpperCase(),
        args: match[2]!.replace(/\s+/g, ' ').trim(),
        line: pending.line,
      });
      pending = undefined;
    }
  });
  if (pending !== undefined)
    throw new Error(`line ${pending.line}: continuation runs past the end of the file`);
  return out;
}

/** `ARG NAME=default` → [name, default]. */
function argOf(instruction: Instruction): [string, string | undefined] {
  const [name, ...rest] = instruction.args.split('=');
  return [name!.trim(), rest.length > 0 ? rest.join('=') : undefined];
}

function substitute(value: string, vars: Record<string, string | undefined>): string {
  return value.replace(/\$\{(\w+)\}|\$(\w+)/g, (_, a: string | undefined, b: string | undefined) => {
    const name = (a ?? b)!;
    const found = vars[name];
    if (found === undefined) throw new Error(`\${${name}} has no default`);
    return found;
  });
}

/** ARG defaults declared before the first FROM (the only ones a FROM line can use). */
function globalArgs(instructions: Instruction[]): Record<string, string | undefined> {
  const vars: Record<string, string | undefined> = {};
  for (const instruction of instructions) {
    if (instruction.keyword === 'FROM') break;
    if (instruction.keyword === 'ARG') {
      const [name, value] = argOf(instruction);
      vars[name] = value === undefined ? undefined : substitute(value, vars);
    }
  }
  return vars;
}

/**
 * The registry docker pulls `ref` from: its first component when that names a host (a `.` or a `:` in
 * it, or `localhost`), else Docker Hub: "If omitted, Docker defaults to Docker Hub (`docker.io`)"
 * (https://docs.docker.com/reference/cli/docker/image/tag/).
 */
function registryOf(ref: string): string {
  const [first, ...rest] = ref.split('/');
  if (rest.length > 0 && (/[.:]/.test(first!) || first === 'localhost')) return first!;
  return 'docker.io';
}

/** The `# syntax=` parser directive, if any: directives come only before the first comment or instruction. */
function syntaxDirective(text: string): string | undefined {
  for (const line of text.split('\n')) {
    const directive = /^#\s*(\w+)\s*=\s*(\S+)\s*$/.exec(line);
    if (!directive) return undefined;
    if (directive[1]!.toLowerCase() === 'syntax') return directive[2];
  }
  return undefined;
}

const dockerfiles = readdirSync(workerImageDir)
  .filter((name) => name.startsWith('Dockerfile'))
  .sort();
const parsed = new Map(
  dockerfiles.map((name) => [name, parseDockerfile(readFileSync(path.join(workerImageDir, name), 'utf8'))]),
);
const isBase = (name: string) =>
  workerImages.find((i) => i.dockerfile === `worker-image/${name}`)?.category === 'base';
const runs = (name: string) =>
  parsed
    .get(name)!
    .filter((i) => i.keyword === 'RUN')
    .map((i) => i.args);

describe('parseDockerfile', () => {
  it('joins continuation lines, skips comments inside them, and keeps line numbers', () => {
    const result = parseDockerfile(
      [
        '# top',
        'FROM a:1 AS b',
        '',
        'RUN apt-get update \\',
        '  # a comment',
        '  && echo hi \\',
        '  && true',
        'USER x',
      ].join('\n'),
    );
    expect(result).toEqual([
      { keyword: 'FROM', args: 'a:1 AS b', line: 2 },
      { keyword: 'RUN', args: 'apt-get update && echo hi && true', line: 4 },
      { keyword: 'USER', args: 'x', line: 8 },
    ]);
  });

  it('refuses a continuation that never ends', () => {
    expect(() => parseDockerfile('RUN a \\\n')).toThrow(/continuation/);
  });
});

describe('registryOf / syntaxDirective', () => {
  it('reads a bare name as Docker Hub and a first component with a dot, a port or localhost as a host', () => {
    expect(registryOf('node:22')).toBe('docker.io');
    expect(registryOf('nvidia/cuda:12.4.1-runtime-ubuntu22.04')).toBe('docker.io');
    expect(registryOf('docker/dockerfile:1.7')).toBe('docker.io');
    expect(registryOf('public.ecr.aws/docker/library/node:22')).toBe('public.ecr.aws');
    expect(registryOf('nvcr.io/nvidia/cuda:12.4.1-runtime-ubuntu22.04')).toBe('nvcr.io');
    expect(registryOf('localhost:5000/x:1')).toBe('localhost:5000');
    expect(registryOf('localhost/x:1')).toBe('localhost');
  });

  it('finds # syntax= among the leading directives only', () => {
    expect(syntaxDirective('# syntax=docker/dockerfile:1.7\n#\nFROM a:1\n')).toBe('docker/dockerfile:1.7');
    expect(syntaxDirective('# escape=`\n# syntax = x.io/f:1\nFROM a:1\n')).toBe('x.io/f:1');
    expect(syntaxDirective('# a comment\n# syntax=docker/dockerfile:1.7\nFROM a:1\n')).toBeUndefined();
    expect(syntaxDirective('FROM a:1\n')).toBeUndefined();
  });
});

describe('worker Dockerfiles', () => {
  it('are exactly the ones in the images table', () => {
    expect(dockerfiles.map((name) => `worker-image/${name}`)).toEqual(
      workerImages.map((i) => i.dockerfile).sort(),
    );
    expect(dockerfiles).toEqual([
      'Dockerfile.agent',
      'Dockerfile.cpu',
      'Dockerfile.gpu',
      'Dockerfile.model-sdxl-turbo',
    ]);
  });

  describe.each(dockerfiles)('%s', (name) => {
    const instructions = parsed.get(name)!;
    const text = readFileSync(path.join(workerImageDir, name), 'utf8');

    it('pins every FROM to a tag that is not latest (or to an earlier stage)', () => {
      const vars = globalArgs(instructions);
      const stages: string[] = [];
      const froms = instructions.filter((i) => i.keyword === 'FROM');
      expect(froms.length).toBeGreaterThan(0);
      for (const from of froms) {
        const [imageRef, as, alias] = from.args.split(' ');
        const image = substitute(imageRef!, vars);
        if (!stages.includes(image)) {
          const withoutRegistryPort = image.replace(/^[^/]+:\d+\//, '');
          const tag = /:([^/@]+)(@sha256:[0-9a-f]{64})?$/.exec(withoutRegistryPort)?.[1];
          expect(tag, `line ${from.line}: ${image} has no tag`).toBeDefined();
          expect(tag, `line ${from.line}: ${image}`).not.toMatch(/^latest$/i);
        }
        if (as?.toUpperCase() === 'AS' && alias !== undefined) stages.push(alias);
      }
    });

    // Docker Hub allows anonymous pulls only "100 per IPv4 address or IPv6 /64 subnet" per 6 hours
    // (https://docs.docker.com/docker-hub/usage/pulls/), and the CodeBuild hosts that build these
    // images share their addresses: worker-image/README.md, "Registries".
    it('pulls nothing from Docker Hub: every FROM and any # syntax= names another registry', () => {
      const syntax = syntaxDirective(text);
      if (syntax !== undefined) expect(registryOf(syntax), `# syntax=${syntax}`).not.toBe('docker.io');
      const vars = globalArgs(instructions);
      const stages: string[] = [];
      // Ferry's own images (a model image's BASE_IMAGE) are built first, into the local image store.
      const ownRepositories = workerImages.map((i) => i.repository);
      for (const from of instructions.filter((i) => i.keyword === 'FROM')) {
        const [imageRef, as, alias] = from.args.split(' ');
        const image = substitute(imageRef!, vars);
        const own = ownRepositories.includes(image.replace(/[:@].*$/, ''));
        if (!stages.includes(image) && !own) {
          expect(registryOf(image), `line ${from.line}: ${image}`).not.toBe('docker.io');
        }
        if (as?.toUpperCase() === 'AS' && alias !== undefined) stages.push(alias);
      }
    });

    const isAgent = name === 'Dockerfile.agent';
    it.skipIf(isAgent)('takes PYTHON_VERSION with a default in 3.10-3.13', () => {
      const arg = instructions.find((i) => i.keyword === 'ARG' && argOf(i)[0] === 'PYTHON_VERSION');
      expect(arg).toBeDefined();
      expect(pythonVersions).toContain(argOf(arg!)[1]);
    });

    it('runs as a non-root user and has an ENTRYPOINT in exec form', () => {
      const users = instructions.filter((i) => i.keyword === 'USER');
      expect(users.length).toBeGreaterThan(0);
      expect(users.at(-1)!.args).not.toMatch(/^(root|0)(:|$)/);
      const entrypoint = instructions.filter((i) => i.keyword === 'ENTRYPOINT').at(-1);
      expect(entrypoint).toBeDefined();
      expect(JSON.parse(entrypoint!.args)).toEqual(
        // The agent's is the one its task definition names too (infra/task-layout.ts).
        isAgent ? [...agentEntryPoint] : ['/usr/bin/tini', '--', '/opt/ferry/bin/entrypoint.sh'],
      );
    });

    it('has no ADD of URLs, no sudo, no curl|sh, and no secrets in ENV or ARG', () => {
      expect(instructions.filter((i) => i.keyword === 'ADD' && /https?:\/\//.test(i.args))).toEqual([]);
      expect(text).not.toMatch(/\bsudo\b/);
      expect(runs(name).filter((r) => /curl[^|]*\|\s*(ba)?sh/.test(r))).toEqual([]);
      for (const i of instructions.filter((i) => i.keyword === 'ENV' || i.keyword === 'ARG')) {
        expect(i.args, `line ${i.line}`).not.toMatch(/(SECRET|PASSWORD|TOKEN|ACCESS_KEY)\w*\s*=\s*\S/i);
      }
    });

    it('installs apt packages without recommends, in the same layer as update and the list cleanup', () => {
      for (const run of runs(name).filter((r) => /apt-get install/.test(r))) {
        expect(run).toMatch(/apt-get update/);
        expect(run).toMatch(/apt-get install -y --no-install-recommends /);
        expect(run).toMatch(/rm -rf \/var\/lib\/apt\/lists\/\*/);
      }
    });

    it('keeps no pip cache in the image', () => {
      if (runs(name).some((r) => /pip install/.test(r))) {
        const env = instructions.filter((i) => i.keyword === 'ENV').map((i) => i.args);
        const noCacheFromBase = !isBase(name); // the base images set PIP_NO_CACHE_DIR for their children
        expect(noCacheFromBase || env.some((e) => /PIP_NO_CACHE_DIR=1/.test(e))).toBe(true);
      }
    });

    it('copies only files that exist in the repository (or the agent bundle, a build output)', () => {
      for (const copy of instructions.filter((i) => i.keyword === 'COPY' && !/--from=/.test(i.args))) {
        const words = copy.args.split(' ').filter((w) => !w.startsWith('--'));
        for (const source of words.slice(0, -1)) {
          if (source === 'worker-image/agent/dist/agent.mjs') continue;
          expect(existsSync(path.join(repo, source)), `line ${copy.line}: ${source}`).toBe(true);
        }
      }
    });
  });

  describe.each(dockerfiles.filter(isBase))('base image %s', (name) => {
    const instructions = parsed.get(name)!;

    it('ships torch, torchvision, torchaudio, numpy and triton (docs/api.md#limits)', () => {
      const pip = runs(name)
        .filter((r) => /pip install/.test(r))
        .join(' ');
      for (const pkg of ['torch', 'torchvision', 'torchaudio', 'numpy', 'triton']) {
        expect(pip, pkg).toMatch(new RegExp(`"${pkg}==\\$\\{\\w+\\}"`));
      }
    });

    it('ships the ferry runtime, the agent, Node and the entrypoint, and declares a HEALTHCHECK', () => {
      const copies = instructions.filter((i) => i.keyword === 'COPY').map((i) => i.args);
      expect(copies).toContain('worker-image/python/ferry /opt/ferry/python/ferry');
      expect(copies).toContain('worker-image/agent/dist/agent.mjs /opt/ferry/agent/agent.mjs');
      expect(copies).toContain('--from=node /usr/local/bin/node /usr/local/bin/node');
      expect(copies.some((c) => c.includes('worker-image/entrypoint.sh'))).toBe(true);
      expect(
        instructions.find(
          (i) => i.keyword === 'FROM' && /^public\.ecr\.aws\/docker\/library\/node:22\./.test(i.args),
        ),
      ).toBeDefined();
      expect(instructions.some((i) => i.keyword === 'HEALTHCHECK')).toBe(true);
    });

    it('copies the small, often-changing Ferry files after the heavy package layers', () => {
      const lastPip = instructions.findLastIndex((i) => i.keyword === 'RUN' && /pip install/.test(i.args));
      const firstFerryCopy = instructions.findIndex(
        (i) => i.keyword === 'COPY' && i.args.startsWith('worker-image/'),
      );
      expect(lastPip).toBeGreaterThan(0);
      expect(firstFerryCopy).toBeGreaterThan(lastPip);
    });
  });

  it('builds the model image FROM the gpu base of the same Python version', () => {
    const instructions = parsed.get('Dockerfile.model-sdxl-turbo')!;
    const from = instructions.find((i) => i.keyword === 'FROM')!;
    expect(substitute(from.args, globalArgs(instructions))).toBe('ferry/worker-base-gpu:0.1.0-py3.12');
  });
});

describe('the image table', () => {
  it("names in `copies` exactly what each Dockerfile COPYs from the context: the build context and the content tag's hash are made of them", () => {
    for (const image of workerImages) {
      const instructions = parsed.get(path.basename(image.dockerfile))!;
      const sources = instructions
        .filter((i) => i.keyword === 'COPY' && !/--from=/.test(i.args))
        .flatMap((copy) =>
          copy.args
            .split(' ')
            .filter((w) => !w.startsWith('--'))
            .slice(0, -1),
        );
      expect([...new Set(sources)].sort(), image.kind).toEqual([...image.copies].sort());
      // Nothing else of the context reaches an image: no ADD, no bind mounts of it.
      expect(instructions.some((i) => i.keyword === 'ADD')).toBe(false);
      expect(instructions.some((i) => /--mount=type=bind/.test(i.args))).toBe(false);
    }
  });
});

describe('dockerBuildCommands', () => {
  it('builds every kind, bases first, with the tags of docs/architecture.md#worker-images', () => {
    const commands = dockerBuildCommands('0.1.0', '3.12');
    expect(commands).toEqual([
      [
        'docker',
        'build',
        '--platform',
        'linux/amd64',
        '--file',
        'worker-image/Dockerfile.agent',
        '--tag',
        'ferry/agent:0.1.0',
        '.',
      ],
      [
        'docker',
        'build',
        '--platform',
        'linux/amd64',
        '--file',
        'worker-image/Dockerfile.cpu',
        '--build-arg',
        'PYTHON_VERSION=3.12',
        '--tag',
        'ferry/worker-base-cpu:0.1.0-py3.12',
        '.',
      ],
      [
        'docker',
        'build',
        '--platform',
        'linux/amd64',
        '--file',
        'worker-image/Dockerfile.gpu',
        '--build-arg',
        'PYTHON_VERSION=3.12',
        '--build-arg',
        'CUDA_WHEELS=cu124',
        '--tag',
        'ferry/worker-base-gpu:0.1.0-py3.12',
        '.',
      ],
      [
        'docker',
        'build',
        '--platform',
        'linux/amd64',
        '--file',
        'worker-image/Dockerfile.model-sdxl-turbo',
        '--build-arg',
        'PYTHON_VERSION=3.12',
        '--build-arg',
        'MODEL_ID=stabilityai/sdxl-turbo',
        '--build-arg',
        'MODEL_REVISION=main',
        '--build-arg',
        'BASE_IMAGE=ferry/worker-base-gpu:0.1.0-py3.12',
        '--tag',
        'ferry/worker-sdxl-turbo:0.1.0-py3.12',
        '.',
      ],
    ]);
  });

  it('builds every image for linux/amd64, whatever the machine: every ECS host is x86-64', () => {
    // On Apple silicon docker would build arm64, and ECR's immutable tags would keep the mistake.
    for (const command of dockerBuildCommands('0.1.0', '3.12')) {
      expect(command.slice(1, 4)).toEqual(['build', '--platform', 'linux/amd64']);
    }
    // The hosts the images run on: no Graviton (`<family>g…`, e.g. g5g, c7g) among them.
    const hosts = [
      ...Object.values(gpuInstanceTable).flatMap((shapes) =>
        shapes.flatMap((s) => [s.instanceType, ...(s.fallbacks ?? []).map((f) => f.instanceType)]),
      ),
      ...['2-4', '2-8', '2-16', '192-1536'].map((spec) => cpuInstanceFor(spec).instanceType),
    ];
    for (const host of hosts) expect(host, host).not.toMatch(/^[a-z]+\d+[a-z]*g[a-z]*\./);
    expect(imagePlatform).toBe('linux/amd64');
  });

  it('puts a base before the model built on it even when asked in the other order', () => {
    const tags = dockerBuildCommands('1.2.3', '3.10', { kinds: ['sdxl-turbo', 'base-gpu'] }).map((c) =>
      c.at(-2),
    );
    expect(tags).toEqual(['ferry/worker-base-gpu:1.2.3-py3.10', 'ferry/worker-sdxl-turbo:1.2.3-py3.10']);
  });

  it('passes extra build args and another docker executable', () => {
    const [command] = dockerBuildCommands('0.2.0', '3.13', {
      kinds: ['sdxl-turbo'],
      buildArgs: { 'sdxl-turbo': { MODEL_REVISION: 'abc123' } },
      docker: 'podman',
    });
    expect(command![0]).toBe('podman');
    expect(command).toContain('MODEL_REVISION=abc123');
    expect(command).not.toContain('MODEL_REVISION=main');
  });

  it('only passes build args that the Dockerfile declares', () => {
    for (const command of dockerBuildCommands('0.1.0', '3.11')) {
      const dockerfile = command[command.indexOf('--file') + 1]!;
      const declared = new Set(
        parseDockerfile(readFileSync(path.join(repo, dockerfile), 'utf8'))
          .filter((i) => i.keyword === 'ARG')
          .map((i) => argOf(i)[0]),
      );
      command.forEach((word, i) => {
        if (command[i - 1] === '--build-arg')
          expect(declared, `${dockerfile}: ${word}`).toContain(word.split('=')[0]);
      });
    }
  });

  it('refuses a Python version outside 3.10-3.13, a bad version and an unknown kind with usage errors', () => {
    for (const call of [
      () => dockerBuildCommands('0.1.0', '3.9'),
      () => dockerBuildCommands('0.1.0', '3.14'),
      () => dockerBuildCommands('latest and greatest', '3.12'),
      () => dockerBuildCommands('0.1.0', '3.12', { kinds: ['base-tpu'] }),
      () => imageTag('base-cpu', '-bad', '3.12'),
    ]) {
      let error: unknown;
      try {
        call();
      } catch (caught) {
        error = caught;
      }
      expect(FerryError.is(error) && error.code === 'usage').toBe(true);
    }
    expect(() => dockerBuildCommands('0.1.0', '3.9')).toThrow(/3\.10, 3\.11, 3\.12, 3\.13/);
  });

  it('names every kind for every supported Python', () => {
    for (const version of pythonVersions) {
      expect(dockerBuildCommands('0.1.0', version).map((c) => c.at(-2))).toEqual(
        workerImages.map((image) =>
          image.category === 'agent' ? `${image.repository}:0.1.0` : `${image.repository}:0.1.0-py${version}`,
        ),
      );
    }
  });
});

describe('entrypoint.sh', () => {
  let tmp: string;
  let server: Server;
  let baseUrl: string;
  const artifacts = new Map<string, Buffer>();

  /** A gzip tar from {name: content}; symlinks as {name: {link: target}}. Built with Python's tarfile. */
  function makeTar(file: string, entries: Record<string, string | { link: string }>): void {
    const script = [
      'import io, json, sys, tarfile',
      'entries = json.loads(sys.argv[2])',
      'with tarfile.open(sys.argv[1], "w:gz") as tar:',
      '    for name, value in entries.items():',
      '        info = tarfile.TarInfo(name)',
      '        if isinstance(value, dict):',
      '            info.type, info.linkname = tarfile.SYMTYPE, value["link"]',
      '            tar.addfile(info)',
      '        else:',
      '            data = value.encode()',
      '            info.size = len(data)',
      '            tar.addfile(info, io.BytesIO(data))',
    ].join('\n');
    execFileSync('python3', ['-c', script, file, JSON.stringify(entries)]);
  }

  beforeAll(async () => {
    tmp = await mkdtemp(path.join(tmpdir(), 'ferry-entrypoint-'));
    // `python` on PATH is the machine's python3; `ferry.worker` is a stand-in that reports its start.
    await mkdir(path.join(tmp, 'bin'));
    await symlink(
      execFileSync('python3', ['-c', 'import sys; print(sys.executable)']).toString().trim(),
      path.join(tmp, 'bin', 'python'),
    );
    await mkdir(path.join(tmp, 'fake', 'ferry'), { recursive: true });
    await writeFile(path.join(tmp, 'fake', 'ferry', '__init__.py'), '');
    await writeFile(
      path.join(tmp, 'fake', 'ferry', 'worker.py'),
      [
        'import json, os, sys',
        'print(json.dumps({"cwd": os.getcwd(), "app_dir": os.environ.get("FERRY_APP_DIR"),',
        '                  "argv": sys.argv[1:], "files": sorted(os.listdir("."))}))',
      ].join('\n'),
    );
    makeTar(path.join(tmp, 'good.tar.gz'), { 'app.py': 'print(1)\n', 'pkg/mod.py': 'x = 1\n' });
    artifacts.set('/good.tar.gz?X-Amz-Signature=sekrit', readFileSync(path.join(tmp, 'good.tar.gz')));
    server = createServer((req, res) => {
      const body = artifacts.get(req.url ?? '');
      res.writeHead(body === undefined ? 404 : 200);
      res.end(body);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });

  afterAll(async () => {
    await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
    if (tmp) await rm(tmp, { recursive: true, force: true });
  });

  async function runEntrypoint(env: Record<string, string>, args: string[] = []) {
    const appDir = await mkdtemp(path.join(tmp, 'app-'));
    const child = spawn('sh', [path.join(workerImageDir, 'entrypoint.sh'), ...args], {
      env: {
        PATH: `${path.join(tmp, 'bin')}:${process.env.PATH ?? ''}`,
        PYTHONPATH: path.join(tmp, 'fake'),
        TMPDIR: tmp,
        FERRY_APP_DIR: appDir,
        FERRY_ARTIFACT_PATH: path.join(tmp, 'none.tar.gz'),
        ...env,
      },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
    return { code, stdout, stderr, appDir };
  }

  it('unpacks a mounted artifact into the app dir and execs python -m ferry.worker there', async () => {
    const result = await runEntrypoint({ FERRY_ARTIFACT_PATH: path.join(tmp, 'good.tar.gz') }, ['--flag']);
    expect(result.stderr).not.toMatch(/Traceback/);
    expect(result.code).toBe(0);
    const report = JSON.parse(result.stdout);
    expect(report).toEqual({
      cwd: result.appDir,
      app_dir: result.appDir,
      argv: ['--flag'],
      files: ['app.py', 'pkg'],
    });
  });

  it('downloads FERRY_ARTIFACT_URL with curl, without printing the URL, and removes the download', async () => {
    const ok = await runEntrypoint({ FERRY_ARTIFACT_URL: `${baseUrl}/good.tar.gz?X-Amz-Signature=sekrit` });
    expect(ok.code).toBe(0);
    expect(JSON.parse(ok.stdout).files).toEqual(['app.py', 'pkg']);
    expect((await readdir(tmp)).filter((name) => name.startsWith('ferry-artifact.'))).toEqual([]);

    const missing = await runEntrypoint({
      FERRY_ARTIFACT_URL: `${baseUrl}/gone.tar.gz?X-Amz-Signature=sekrit`,
    });
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/artifact download failed/);
    expect(missing.stderr).not.toMatch(/sekrit/);
    expect(missing.stdout).toBe('');
  });

  it.each([
    ['a path with ..', { '../escape.txt': 'x' }],
    ['an absolute path', { '/tmp/ferry-absolute-escape.txt': 'x' }],
    ['a symlink out of the app dir', { link: { link: '/etc' } }],
  ])('refuses an archive with %s and starts nothing', async (_, entries) => {
    const file = path.join(tmp, `bad-${Math.random().toString(36).slice(2)}.tar.gz`);
    makeTar(file, { 'ok.py': 'x\n', ...entries });
    const result = await runEntrypoint({ FERRY_ARTIFACT_PATH: file });
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/cannot unpack the artifact/);
    expect(result.stdout).toBe('');
    expect(await readdir(result.appDir)).toEqual([]);
    expect(existsSync(path.join(path.dirname(result.appDir), 'escape.txt'))).toBe(false);
  });

  it('fails with exit 2 when there is no artifact and no app, and runs a baked-in app as is', async () => {
    const none = await runEntrypoint({});
    expect(none.code).toBe(2);
    expect(none.stderr).toMatch(/no artifact: set FERRY_ARTIFACT_URL or mount one at/);

    const baked = await mkdtemp(path.join(tmp, 'baked-'));
    await writeFile(path.join(baked, 'handler.py'), '');
    await chmod(baked, 0o755);
    const result = await runEntrypoint({ FERRY_APP_DIR: baked });
    expect(result.code).toBe(0);
    expect(JSON.parse(result.stdout).files).toEqual(['handler.py']);
  });
});
