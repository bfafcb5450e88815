/**
 * `buildProject` end to end with real python3 (scanner), real pip (from local wheels: no PyPI here)
 * and a real gzip tar, read back with the `tar` package.
 */
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { list } from 'tar';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listShippedFiles } from '../../cli/build/files.js';
import { sourceFingerprint } from '../../cli/build/fingerprint.js';
import { type BuildEvent, type BuildOptions, buildProject } from '../../cli/build/index.js';
import { FerryError } from '../../core/errors.js';
import { manifestSchema } from '../../core/manifest.js';
import { writeWheel } from '../support/wheels.js';

const tempDirs: string[] = [];
let wheelDir = '';

function tempDir(prefix: string): string {
  const dir = mkdtempSync(path.join(tmpdir(), prefix));
  tempDirs.push(dir);
  return dir;
}

function writeFiles(root: string, files: Record<string, string>): void {
  for (const [rel, content] of Object.entries(files)) {
    mkdirSync(path.dirname(path.join(root, rel)), { recursive: true });
    writeFileSync(path.join(root, rel), content);
  }
}

const projectFiles: Record<string, string> = {
  'gpu_worker.py': `from ferry import Endpoint
from helpers import shout

@Endpoint(name="gpu-worker", gpu=["A100", "H100"], workers=(0, 3), env={"MODE": "fast"})
async def generate(prompt: str, steps: int = 4):
    """Generate text from a prompt."""
    for _ in range(steps):
        yield shout(prompt)
`,
  'cpu_worker.py': `import ferry

@ferry.Endpoint(name="cpu-worker", cpu="2-8", workers=2, dependencies=["tinydep"])
def add(a, b):
    return a + b
`,
  'lb_worker.py': `from ferry import Endpoint

api = Endpoint(name="api", cpu="1-2", workers=(1, 5))

@api.post("/process")
async def process(input_data):
    """Process the input."""
    return {"ok": True}

@api.get("/items/{item_id}")
def get_item(item_id: str):
    return {"id": item_id}
`,
  'helpers.py': 'def shout(text):\n    return text.upper()\n',
  'requirements.txt': '# runtime deps\ntinydep==1.0.0\ntorch  # big, in the base image\nferry>=0.1\n',
  '.env': 'FERRY_API_KEY=secret\n',
  '.env.example': 'FERRY_API_KEY=\n',
  '.gitignore': 'notes.txt\n',
  'notes.txt': 'ignored\n',
  'tests/test_workers.py': 'def test_x():\n    assert True\n',
  'test_top.py': 'raise SystemExit(1)\n',
};

function makeProject(extra: Record<string, string> = {}, name = 'proj-'): string {
  const root = tempDir(name);
  writeFiles(root, { ...projectFiles, ...extra });
  return root;
}

function options(
  projectDir: string,
  more: Partial<BuildOptions> = {},
): BuildOptions & { events: BuildEvent[] } {
  const events: BuildEvent[] = [];
  return {
    projectDir,
    pipArgs: ['--no-index', '--find-links', wheelDir],
    onProgress: (event) => events.push(event),
    events,
    ...more,
  };
}

async function archiveEntries(file: string): Promise<Map<string, string>> {
  const entries = new Map<string, string>();
  await list({
    file,
    onReadEntry: (entry) => {
      const chunks: Buffer[] = [];
      entry.on('data', (chunk: Buffer) => chunks.push(chunk));
      entry.on('end', () =>
        entries.set(entry.path.replace(/\/$/, ''), Buffer.concat(chunks).toString('utf8')),
      );
    },
  });
  return entries;
}

beforeAll(() => {
  wheelDir = tempDir('wheels-');
  writeWheel(wheelDir, { name: 'tinydep', requires: ['numpy'] });
  writeWheel(wheelDir, { name: 'numpy', version: '2.0.0' });
  writeWheel(wheelDir, { name: 'torch', version: '2.5.0' });
  writeWheel(wheelDir, { name: 'torchvision', version: '0.20.0' });
});

afterAll(() => {
  for (const dir of tempDirs) rmSync(dir, { recursive: true, force: true });
});

describe('buildProject', () => {
  it('builds an artifact with the manifest, sources and dependencies, and leaves out what must not ship', async () => {
    const projectDir = makeProject({}, 'my-app-');
    const opts = options(projectDir);
    const result = await buildProject(opts);

    expect(result.artifactPath).toBe(path.join(projectDir, '.ferry', 'artifact.tar.gz'));
    expect(result.buildDir).toBe(path.join(projectDir, '.ferry', 'build'));
    const entries = await archiveEntries(result.artifactPath);

    const manifest = manifestSchema.parse(JSON.parse(entries.get('ferry_manifest.json')!));
    expect(manifest).toEqual(result.manifest);
    expect(manifest.app).toBe(path.basename(projectDir));
    expect(manifest.pythonVersion).toMatch(/^3\.1[0-3]$/);
    expect(manifest.sourceFingerprint).toMatch(/^[0-9a-f]{64}$/);
    expect(manifest.endpoints.map((e) => e.name).sort()).toEqual(['api', 'cpu-worker', 'gpu-worker']);

    const gpu = manifest.endpoints.find((e) => e.name === 'gpu-worker')!;
    expect(gpu).toMatchObject({
      kind: 'queue',
      file: 'gpu_worker.py',
      module: 'gpu_worker',
      target: {
        name: 'generate',
        type: 'function',
        isAsync: true,
        isGenerator: true,
        params: ['prompt', 'steps'],
        summary: 'Generate text from a prompt.',
      },
    });
    expect(gpu.resources).toMatchObject({
      gpu: ['A100', 'H100'],
      workersMin: 0,
      workersMax: 3,
      env: { MODE: 'fast' },
    });
    expect(gpu.resources.cpu).toBeUndefined();
    expect(gpu.configHash).toMatch(/^[0-9a-f]{64}$/);

    const cpu = manifest.endpoints.find((e) => e.name === 'cpu-worker')!;
    expect(cpu.resources).toMatchObject({
      cpu: '2-8',
      workersMin: 0,
      workersMax: 2,
      dependencies: ['tinydep'],
    });
    expect(cpu.resources.gpu).toBeUndefined();
    expect(cpu.configHash).not.toBe(gpu.configHash);

    const api = manifest.endpoints.find((e) => e.name === 'api')!;
    expect(api).toMatchObject({ kind: 'lb', variable: 'api', module: 'lb_worker' });
    expect(api.routes!.map((r) => `${r.method} ${r.path}`)).toEqual([
      'POST /process',
      'GET /items/{item_id}',
    ]);
    expect(api.routes![1]!.params).toEqual(['item_id']);

    // Sources: the endpoints and the local helper they import; never .env, tests or ignored files.
    expect(entries.get('helpers.py')).toContain('def shout');
    expect(entries.has('gpu_worker.py')).toBe(true);
    expect(entries.has('.env.example')).toBe(true);
    expect(entries.has('.env')).toBe(false);
    expect([...entries.keys()].some((e) => e.startsWith('tests'))).toBe(false);
    expect(entries.has('test_top.py')).toBe(false);
    expect(entries.has('notes.txt')).toBe(false);
    expect(result.files).toContain('helpers.py');
    expect(result.files).not.toContain('.env');

    // Dependencies: tinydep installed; torch (requirements.txt) and numpy (pulled in by tinydep) are not.
    expect(entries.has('tinydep/__init__.py')).toBe(true);
    expect(entries.has('tinydep-1.0.0.dist-info/METADATA')).toBe(true);
    expect([...entries.keys()].some((e) => e.startsWith('torch'))).toBe(false);
    expect([...entries.keys()].some((e) => e.startsWith('numpy'))).toBe(false);
    expect([...entries.keys()].some((e) => e.startsWith('ferry/') || e.startsWith('ferry-'))).toBe(false);
    expect(manifest.dependencies.installed).toEqual(['tinydep==1.0.0']);
    expect(manifest.dependencies.excluded).toEqual(
      expect.arrayContaining([
        { name: 'torch', reason: 'base image' },
        { name: 'numpy', reason: 'base image' },
        { name: 'ferry', reason: 'base image' },
      ]),
    );

    const excludedEvents = opts.events.filter((e) => e.type === 'package-excluded');
    expect(excludedEvents).toEqual(
      expect.arrayContaining([
        { type: 'package-excluded', name: 'torch', reason: 'base image' },
        expect.objectContaining({ name: 'numpy' }),
      ]),
    );
    const installed = opts.events.find((e) => e.type === 'packages-installed');
    expect(installed).toEqual({
      type: 'packages-installed',
      packages: [{ name: 'tinydep', version: '1.0.0' }],
    });
    const finished = opts.events.filter((e) => e.type === 'stage-finished').map((e) => e.stage);
    expect(finished).toEqual(['files', 'scan', 'dependencies', 'artifact']);
    // pip's steps are shown while it runs, inside the dependencies stage, not only its result after.
    const pip = opts.events.flatMap((e, i) =>
      e.type === 'dependency-progress' ? [{ text: e.text, i }] : [],
    );
    expect(pip.map((p) => p.text)).toEqual(
      expect.arrayContaining([expect.stringMatching(/^Processing .*tinydep-1\.0\.0.*\.whl/)]),
    );
    const installedAt = opts.events.findIndex((e) => e.type === 'packages-installed');
    for (const { i } of pip) expect(i).toBeLessThan(installedAt);
  });

  it('changes the fingerprint when a shipped file changes, not when an ignored one does', async () => {
    const projectDir = makeProject({ 'requirements.txt': '' });
    const first = await buildProject(options(projectDir));
    writeFileSync(path.join(projectDir, 'notes.txt'), 'changed\n');
    writeFileSync(path.join(projectDir, '.env'), 'FERRY_API_KEY=other\n');
    writeFileSync(path.join(projectDir, 'tests', 'test_workers.py'), 'changed = 1\n');
    const second = await buildProject(options(projectDir));
    expect(second.manifest.sourceFingerprint).toBe(first.manifest.sourceFingerprint);
    expect(second.manifest.endpoints.map((e) => e.configHash)).toEqual(
      first.manifest.endpoints.map((e) => e.configHash),
    );
    writeFileSync(path.join(projectDir, 'helpers.py'), 'def shout(text):\n    return text.lower()\n');
    const third = await buildProject(options(projectDir));
    expect(third.manifest.sourceFingerprint).not.toBe(first.manifest.sourceFingerprint);
    expect(third.manifest.endpoints.map((e) => e.configHash)).toEqual(
      first.manifest.endpoints.map((e) => e.configHash),
    );
  });

  it('fails over the size limit, with the hint, and leaves no archive behind', async () => {
    const projectDir = makeProject();
    const error = await buildProject(options(projectDir, { maxArtifactBytes: 200 })).catch((e: unknown) => e);
    expect(FerryError.is(error)).toBe(true);
    const ferryError = error as FerryError;
    expect(ferryError.code).toBe('too_large');
    expect(ferryError.message).toMatch(/^The deployment is too large: [\d.]+ MB \(limit [\d.]+ MB\)$/);
    expect(ferryError.hint).toBe('Leave packages out with --exclude <packages>');
    expect(existsSync(path.join(projectDir, '.ferry', 'artifact.tar.gz'))).toBe(false);
  });

  it('installs only the named packages with noDeps, and honours --exclude and output', async () => {
    const projectDir = makeProject({ 'requirements.txt': 'tinydep\n' });
    const opts = options(projectDir, {
      noDeps: true,
      exclude: ['numpy', 'nothing-like-this'],
      output: 'out.tar.gz',
    });
    const result = await buildProject(opts);
    expect(result.artifactPath).toBe(path.join(projectDir, '.ferry', 'out.tar.gz'));
    expect(existsSync(path.join(result.buildDir, 'numpy'))).toBe(false);
    const entries = await archiveEntries(result.artifactPath);
    expect(entries.has('tinydep/__init__.py')).toBe(true);
    expect(opts.events).toContainEqual({
      type: 'warning',
      message: '--exclude nothing-like-this: no package by that name was going to be installed',
    });

    const excludeTiny = options(makeProject(), { exclude: ['TinyDep'] });
    const second = await buildProject(excludeTiny);
    expect(second.manifest.dependencies.installed).toEqual([]);
    expect(second.manifest.dependencies.excluded).toContainEqual({ name: 'tinydep', reason: '--exclude' });
    expect(excludeTiny.events).toContainEqual({
      type: 'package-excluded',
      name: 'tinydep',
      reason: '--exclude',
    });
  });

  it('refuses an output that is not an archive name (exit 2) before it writes anything, leaving sources as they were', async () => {
    const projectDir = makeProject();
    const source = readFileSync(path.join(projectDir, 'cpu_worker.py'), 'utf8');
    for (const output of ['./cpu_worker.py', 'cpu_worker.py', '.', '..', '', 'dist/']) {
      const error = await buildProject(options(projectDir, { output })).catch((e: unknown) => e);
      expect(FerryError.is(error), output).toBe(true);
      expect((error as FerryError).code).toBe('usage');
      expect((error as FerryError).message).toContain(
        `--output ${JSON.stringify(output)} does not name an archive file`,
      );
    }
    // A folder named like an archive is no file to write over either.
    mkdirSync(path.join(projectDir, 'looks.tar.gz'));
    const folder = await buildProject(options(projectDir, { output: './looks.tar.gz' })).catch(
      (e: unknown) => e,
    );
    expect((folder as FerryError).code).toBe('usage');
    expect(readFileSync(path.join(projectDir, 'cpu_worker.py'), 'utf8')).toBe(source);
    expect(existsSync(path.join(projectDir, '.ferry', 'build'))).toBe(false);
    const tgz = await buildProject(options(projectDir, { output: 'dist/app.tgz' }));
    expect(tgz.artifactPath).toBe(path.join(projectDir, 'dist', 'app.tgz'));
  });

  it('stages in buildDir and writes nothing into the project when buildDir and output are outside it', async () => {
    const projectDir = makeProject();
    const before = (await listShippedFiles({ projectDir })).files;
    const outside = tempDir('ferry-home-');
    const result = await buildProject(
      options(projectDir, {
        buildDir: path.join(outside, 'build', 'proj'),
        output: path.join(outside, 'build', 'proj.tar.gz'),
      }),
    );
    expect(result.buildDir).toBe(path.join(outside, 'build', 'proj'));
    expect(result.artifactPath).toBe(path.join(outside, 'build', 'proj.tar.gz'));
    expect(existsSync(path.join(projectDir, '.ferry'))).toBe(false);
    expect((await listShippedFiles({ projectDir })).files).toEqual(before);
    expect(existsSync(path.join(result.buildDir, 'tinydep', '__init__.py'))).toBe(true);
    const entries = await archiveEntries(result.artifactPath);
    expect(entries.has('gpu_worker.py')).toBe(true);
    expect(entries.has('tinydep/__init__.py')).toBe(true);

    // A relative buildDir inside the project is from the project, and never ships itself (built twice:
    // the second build lists files while the first one's staging folder is there).
    await buildProject(options(projectDir, { buildDir: 'staging' }));
    expect(existsSync(path.join(projectDir, 'staging', 'gpu_worker.py'))).toBe(true);
    const second = await buildProject(options(projectDir, { buildDir: 'staging' }));
    expect(second.buildDir).toBe(path.join(projectDir, 'staging'));
    expect(second.files.some((f) => f.startsWith('staging/'))).toBe(false);

    // The build dir is emptied first: the project, or a folder holding it, is refused.
    for (const buildDir of ['.', '..', projectDir]) {
      const error = await buildProject(options(projectDir, { buildDir })).catch((e: unknown) => e);
      expect(FerryError.is(error) && error.code).toBe('usage');
      expect((error as FerryError).message).toContain('is the project or contains it');
    }
    expect(existsSync(path.join(projectDir, 'gpu_worker.py'))).toBe(true);
  });

  it('warns when an endpoint declares a package the base image provides', async () => {
    const projectDir = makeProject({
      'requirements.txt': '',
      'vision.py': `from ferry import Endpoint

@Endpoint(name="vision", dependencies=["torchvision"])
def classify(image):
    return image
`,
    });
    const opts = options(projectDir);
    const result = await buildProject(opts);
    const warnings = opts.events
      .filter((e) => e.type === 'warning')
      .map((e) => (e as { message: string }).message);
    expect(
      warnings.some(
        (m) => m.includes("endpoint 'vision'") && m.includes('the base image provides torchvision'),
      ),
    ).toBe(true);
    expect(result.manifest.dependencies.excluded).toContainEqual({
      name: 'torchvision',
      reason: 'base image',
    });
    const vision = result.manifest.endpoints.find((e) => e.name === 'vision')!;
    expect(vision.resources.dependencies).toEqual(['torchvision']);
  });

  it('fails when an endpoint imports a local module that .gitignore drops', async () => {
    const projectDir = makeProject({ '.gitignore': 'helpers.py\n' });
    const error = await buildProject(options(projectDir)).catch((e: unknown) => e);
    expect(FerryError.is(error)).toBe(true);
    expect((error as FerryError).code).toBe('bad_request');
    expect((error as FerryError).message).toContain(
      'gpu_worker.py imports helpers, but helpers.py is left out',
    );
    expect((error as FerryError).message).toContain('.gitignore:1: helpers.py');
    expect(existsSync(path.join(projectDir, '.ferry', 'artifact.tar.gz'))).toBe(false);
  });

  it('ships .env never, even when .gitignore re-includes it', async () => {
    const projectDir = makeProject({ '.gitignore': '!.env\n', 'requirements.txt': '' });
    const result = await buildProject(options(projectDir));
    const entries = await archiveEntries(result.artifactPath);
    expect(entries.has('.env')).toBe(false);
    expect(readFileSync(path.join(projectDir, '.env'), 'utf8')).toContain('secret');
  });

  it('resolves the Python version: option, then declarations; conflicts are an error', async () => {
    const declared = makeProject({
      'requirements.txt': '',
      'old.py':
        'from ferry import Endpoint\n\n@Endpoint(name="old", python_version="3.10")\ndef f():\n    pass\n',
    });
    const fromDeclaration = await buildProject(options(declared));
    expect(fromDeclaration.manifest.pythonVersion).toBe('3.10');
    const overridden = options(declared, { pythonVersion: '3.12' });
    const fromOption = await buildProject(overridden);
    expect(fromOption.manifest.pythonVersion).toBe('3.12');
    expect(fromOption.manifest.endpoints.find((e) => e.name === 'old')!.resources.pythonVersion).toBe('3.12');
    expect(
      overridden.events.some((e) => e.type === 'warning' && e.message.includes('overrides python_version')),
    ).toBe(true);

    const bad = await buildProject(options(declared, { pythonVersion: '3.9' })).catch((e: unknown) => e);
    expect((bad as FerryError).code).toBe('usage');

    writeFileSync(
      path.join(declared, 'new.py'),
      'from ferry import Endpoint\n\n@Endpoint(name="new", python_version="3.13")\ndef g():\n    pass\n',
    );
    const conflict = await buildProject(options(declared)).catch((e: unknown) => e);
    expect((conflict as FerryError).message).toMatch(
      /different Python versions[\s\S]*new\.py:3[\s\S]*old\.py:3/,
    );
  });

  it('reports a pip failure with its output and a hint', async () => {
    const projectDir = makeProject({ 'requirements.txt': 'no-such-package==9.9\n' });
    const error = await buildProject(options(projectDir)).catch((e: unknown) => e);
    expect((error as FerryError).code).toBe('failed');
    expect((error as FerryError).message).toContain('pip could not install the dependencies');
    expect((error as FerryError).message).toMatch(/no-such-package/i);
    expect((error as FerryError).hint).toContain('--exclude');
  });

  it('starts the given interpreter once, for the scan: pip and the import check run the binary it reported', async () => {
    // A stand-in interpreter that logs each start, then runs python3: a command such as pyenv's shim
    // costs a start of its own each time, and the build should pay it once.
    const bin = tempDir('python-starts-');
    const log = path.join(bin, 'starts.log');
    const python = path.join(bin, 'python-logged');
    writeFileSync(python, `#!/bin/sh\nprintf '%s\\n' "$*" >> '${log}'\nexec python3 "$@"\n`, { mode: 0o755 });
    const starts = () => readFileSync(log, 'utf8').trim().split('\n');

    const result = await buildProject(options(makeProject(), { python }));
    expect(starts()).toEqual([expect.stringMatching(/scan\.py /)]);
    // pip ran (on the reported binary): tinydep is in the artifact.
    expect((await archiveEntries(result.artifactPath)).has('tinydep/__init__.py')).toBe(true);

    // The import check ran too (on the reported binary): a module that cannot import still fails the build.
    const broken = makeProject({
      'broken.py':
        'import not_a_module_anywhere\nfrom ferry import Endpoint\n\n@Endpoint(name="broken")\ndef f():\n    pass\n',
    });
    const error = await buildProject(options(broken, { python })).catch((e: unknown) => e);
    expect((error as FerryError).message).toContain('An endpoint module cannot be imported');
    expect((error as FerryError).message).toContain('not_a_module_anywhere');
    expect(starts()).toEqual([expect.stringMatching(/scan\.py /), expect.stringMatching(/scan\.py /)]);
  });

  it('refuses a project with no endpoints', async () => {
    const projectDir = tempDir('empty-');
    writeFiles(projectDir, { 'main.py': 'print("hi")\n' });
    const error = await buildProject(options(projectDir)).catch((e: unknown) => e);
    expect((error as FerryError).message).toContain('No endpoints found');
  });

  it("names the files that import Flash's package instead of ferry, and the fix", async () => {
    const projectDir = tempDir('flash-');
    writeFiles(projectDir, {
      'gpu_worker.py':
        'from runpod_flash import Endpoint, GpuType\n\n@Endpoint(name="w", gpu=GpuType.L4)\ndef f(x):\n    return x\n',
      'old.py': 'import tetra_rp\n',
      'main.py': 'print("hi")\n',
    });
    const error = (await buildProject(options(projectDir)).catch((e: unknown) => e)) as FerryError;
    expect(error.message).toBe(
      'No endpoints found: nothing would be deployed: gpu_worker.py, old.py import from runpod_flash and tetra_rp, not ferry',
    );
    expect(error.hint).toBe(
      "Change the import to `from ferry import Endpoint`: Ferry finds the endpoints that ferry's Endpoint declares.",
    );
  });
});

describe('listShippedFiles and sourceFingerprint', () => {
  it('applies the .gitignore subset (globs, dir/, anchors, **, negation, nested files) and the built-ins', async () => {
    const root = tempDir('ignore-');
    writeFiles(root, {
      '.gitignore':
        '# comment\n*.log\n!keep.log\ndata/\n/root_only.txt\ndocs/**/*.md\nscratch_?.py\n[ab].txt\n',
      'app.py': '',
      'a.log': '',
      'keep.log': '',
      'sub/b.log': '',
      'data/big.bin': '',
      'sub/data/x.bin': '',
      'root_only.txt': '',
      'sub/root_only.txt': '',
      'docs/guide.md': '',
      'docs/deep/more/page.md': '',
      'docs/deep/image.png': '',
      'scratch_1.py': '',
      'scratch_10.py': '',
      'a.txt': '',
      'c.txt': '',
      'pkg/.gitignore': 'local.cfg\n',
      'pkg/local.cfg': '',
      'pkg/__init__.py': '',
      'other/local.cfg': '',
      'pkg/build/gen.py': '',
      'build/out.py': '',
      'myenv/pyvenv.cfg': '',
      'myenv/lib/x.py': '',
      'pkg/__pycache__/m.pyc': '',
      'pkg/tests/t.py': '',
      'pkg/test_m.py': '',
      '.env.local': '',
      '.env.example': '',
      'old.tar.gz': '',
    });
    const shipped = await listShippedFiles({ projectDir: root });
    expect(shipped.files).toEqual([
      '.env.example',
      '.gitignore',
      'app.py',
      'c.txt',
      'docs/deep/image.png',
      'keep.log',
      'other/local.cfg',
      'pkg/.gitignore',
      'pkg/__init__.py',
      'pkg/build/gen.py',
      'scratch_10.py',
      'sub/root_only.txt',
    ]);
    expect(shipped.whyExcluded('data/big.bin')).toBe('.gitignore:4: data/');
    expect(shipped.whyExcluded('pkg/local.cfg')).toBe('pkg/.gitignore:1: local.cfg');
    expect(shipped.whyExcluded('.env.local')).toContain('.env files never ship');
    expect(shipped.whyExcluded('app.py')).toBeUndefined();
  });

  it('frames paths and contents so moving bytes between them changes the fingerprint', async () => {
    const one = tempDir('fp-');
    const two = tempDir('fp-');
    writeFiles(one, { ab: 'c' });
    writeFiles(two, { a: 'bc' });
    const first = await sourceFingerprint(one, ['ab']);
    expect(first).not.toBe(await sourceFingerprint(two, ['a']));
    expect(first).toBe(await sourceFingerprint(one, ['ab']));
  });
});
