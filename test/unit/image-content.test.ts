/**
 * The platform registry's tags name the images' content (worker-image/images.ts imageContentHashes):
 * one changed byte of the agent bundle, the runtime or a Dockerfile is a new tag; mtimes, the order
 * files were written in and Python's caches are not. Roots here are copies of the repository's image
 * inputs with a stand-in agent bundle (the real one is tested in test/agent/bundle.test.ts).
 */
import {
  cpSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  agentBundleDir,
  agentImage,
  baseImageFor,
  dockerBuildCommands,
  imageContentHashes,
  imageInputFiles,
  imageTag,
  workerImages,
} from '../../worker-image/images.js';

const repo = path.resolve(import.meta.dirname, '../..');
const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** A root holding what the images are built from, the runtime's files copied in `order`. */
function rootWith(agent = 'export const agent = 1;\n', order: 'sorted' | 'reversed' = 'sorted'): string {
  const root = mkdtempSync(path.join(tmpdir(), 'ferry-image-content-'));
  dirs.push(root);
  for (const image of workerImages) {
    mkdirSync(path.join(root, 'worker-image'), { recursive: true });
    cpSync(path.join(repo, image.dockerfile), path.join(root, image.dockerfile));
  }
  for (const script of ['entrypoint.sh', 'unpack_artifact.py', 'healthcheck.sh']) {
    cpSync(path.join(repo, 'worker-image', script), path.join(root, 'worker-image', script));
  }
  const runtime = 'worker-image/python/ferry';
  const files = (readdirSync(path.join(repo, runtime), { recursive: true }) as string[])
    .filter((f) => !f.includes('__pycache__') && !f.endsWith('.pyc'))
    .map((f) => `${runtime}/${f}`)
    .filter((f) => statSync(path.join(repo, f)).isFile());
  expect(files.length).toBeGreaterThan(5);
  for (const file of order === 'sorted' ? files : [...files].reverse()) {
    mkdirSync(path.dirname(path.join(root, file)), { recursive: true });
    writeFileSync(path.join(root, file), readFileSync(path.join(repo, file)));
  }
  mkdirSync(path.join(root, agentBundleDir), { recursive: true });
  writeFileSync(path.join(root, agentBundleDir, 'agent.mjs'), agent);
  return root;
}

const hashes = (root: string) => imageContentHashes(root, '0.1.0', '3.12');

describe('content-addressed image tags', () => {
  it('are <version>-<12 hex>[-py<python>], the same for the same files', () => {
    const content = hashes(rootWith());
    expect(Object.keys(content).sort()).toEqual(workerImages.map((i) => i.kind).sort());
    for (const hash of Object.values(content)) expect(hash).toMatch(/^[0-9a-f]{12}$/);
    expect(agentImage('0.1.0', content)).toBe(`ferry/agent:0.1.0-${content.agent}`);
    expect(baseImageFor('gpu', '0.1.0', '3.12', content)).toBe(
      `ferry/worker-base-gpu:0.1.0-${content['base-gpu']}-py3.12`,
    );
    expect(hashes(rootWith())).toEqual(content);
    // Locally nothing changes: no content, the version-only names.
    expect(agentImage('0.1.0')).toBe('ferry/agent:0.1.0');
    expect(baseImageFor('cpu', '0.1.0', '3.12')).toBe('ferry/worker-base-cpu:0.1.0-py3.12');
  });

  it('one changed byte of the agent bundle changes the agent tag and every image that ships the agent', () => {
    const before = hashes(rootWith('export const agent = 1;\n'));
    const after = hashes(rootWith('export const agent = 2;\n'));
    expect(after.agent).not.toBe(before.agent);
    expect(after['base-cpu']).not.toBe(before['base-cpu']);
    expect(after['base-gpu']).not.toBe(before['base-gpu']);
    // The model image is built FROM the gpu base: its BASE_IMAGE names the base's new tag.
    expect(after['sdxl-turbo']).not.toBe(before['sdxl-turbo']);
  });

  it('one changed byte of a runtime file changes the base tags, not the agent tag', () => {
    const root = rootWith();
    const before = hashes(root);
    const file = path.join(root, 'worker-image/python/ferry/worker.py');
    const text = readFileSync(file);
    text.writeUInt8(text.readUInt8(text.length - 1) ^ 1, text.length - 1);
    writeFileSync(file, text);
    const after = hashes(root);
    expect(after.agent).toBe(before.agent);
    expect(after['base-cpu']).not.toBe(before['base-cpu']);
    expect(after['base-gpu']).not.toBe(before['base-gpu']);
    // A new file in the runtime folder is content too.
    writeFileSync(path.join(root, 'worker-image/python/ferry/extra.py'), '');
    expect(hashes(root)['base-cpu']).not.toBe(after['base-cpu']);
  });

  it('a changed Dockerfile or Python version changes only its own images', () => {
    const root = rootWith();
    const before = hashes(root);
    writeFileSync(
      path.join(root, 'worker-image/Dockerfile.cpu'),
      `${readFileSync(path.join(root, 'worker-image/Dockerfile.cpu'), 'utf8')}\n`,
    );
    const after = hashes(root);
    expect(after['base-cpu']).not.toBe(before['base-cpu']);
    expect({ ...after, 'base-cpu': '' }).toEqual({ ...before, 'base-cpu': '' });
    const py311 = imageContentHashes(root, '0.1.0', '3.11');
    expect(py311.agent).toBe(after.agent);
    expect(py311['base-gpu']).not.toBe(after['base-gpu']);
  });

  it('ignores mtimes, the order files were written in, and Python caches', () => {
    const sorted = rootWith();
    const reversed = rootWith(undefined, 'reversed');
    const content = hashes(sorted);
    expect(hashes(reversed)).toEqual(content);
    const old = new Date('2001-01-01T00:00:00Z');
    for (const file of imageInputFiles(reversed, 'base-gpu')) utimesSync(path.join(reversed, file), old, old);
    expect(hashes(reversed)).toEqual(content);
    const cache = path.join(sorted, 'worker-image/python/ferry/__pycache__');
    mkdirSync(cache);
    writeFileSync(path.join(cache, 'worker.cpython-312.pyc'), 'bytecode');
    writeFileSync(path.join(sorted, 'worker-image/python/ferry/stray.pyc'), 'bytecode');
    expect(hashes(sorted)).toEqual(content);
    expect(imageInputFiles(sorted, 'base-cpu').some((f) => f.includes('pycache') || f.endsWith('.pyc'))).toBe(
      false,
    );
  });

  it("hashes exactly each image's inputs: its Dockerfile and what it COPYs, sorted", () => {
    const root = rootWith();
    expect(imageInputFiles(root, 'agent')).toEqual([
      'worker-image/Dockerfile.agent',
      'worker-image/agent/dist/agent.mjs',
    ]);
    const base = imageInputFiles(root, 'base-cpu');
    expect(base).toEqual([...base].sort());
    expect(base).toEqual(
      expect.arrayContaining([
        'worker-image/Dockerfile.cpu',
        'worker-image/agent/dist/agent.mjs',
        'worker-image/entrypoint.sh',
        'worker-image/healthcheck.sh',
        'worker-image/unpack_artifact.py',
        'worker-image/python/ferry/__init__.py',
      ]),
    );
    expect(base.some((f) => f.includes('Dockerfile.gpu'))).toBe(false);
  });

  it('names build commands with the content tags, BASE_IMAGE included, and takes no extra build args with them', () => {
    const content = hashes(rootWith());
    const [base, model] = dockerBuildCommands('0.1.0', '3.12', {
      kinds: ['sdxl-turbo', 'base-gpu'],
      content,
    });
    expect(base!.at(-2)).toBe(imageTag('base-gpu', '0.1.0', '3.12', content));
    expect(model).toContain(`BASE_IMAGE=${imageTag('base-gpu', '0.1.0', '3.12', content)}`);
    expect(() =>
      dockerBuildCommands('0.1.0', '3.12', { content, buildArgs: { 'sdxl-turbo': { MODEL_REVISION: 'x' } } }),
    ).toThrow(/content/);
    expect(() => imageTag('agent', '0.1.0', '3.12', {})).toThrow(/content hash/);
  });
});
