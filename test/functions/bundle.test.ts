/**
 * The Lambda bundles: esbuild writes one .mjs per function (functionEntries) into a temp folder, and
 * each one imports on its own (outside the repo, so no node_modules to lean on) and exports `handler`.
 * With a cache file, a run on the same sources keeps the bundles it finds (the CLI's deploys). The
 * bundles, source maps included, do not depend on where they are written, so the platform's Lambda
 * code keeps its S3 key whatever project folder a deploy runs from.
 */
import { spawnSync } from 'node:child_process';
import { appendFileSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { App } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  bundleFunctions,
  bundleInputsKey,
  bundlesAreCurrent,
  functionEntries,
} from '../../functions/bundle.js';
import { PlatformStack } from '../../infra/platform-stack.js';

let dir: string;
let outdir: string;
let cacheFile: string;
let files: Record<string, string>;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'ferry-bundle-'));
  outdir = join(dir, 'functions');
  cacheFile = join(dir, 'functions.inputs.json');
  files = await bundleFunctions(outdir, { cacheFile });
}, 120_000);

afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

/**
 * Runs `body` (an async function's body, given `files` and `pathToFileURL`) in a plain `node` in the
 * temp folder, as Lambda's runtime imports a bundle, and returns what it returned (as JSON). An
 * import() in the test itself would push each multi-MB bundle through vitest's module transform
 * first, which took most of this file's time.
 */
function inNode(body: string): unknown {
  const script = `import { pathToFileURL } from 'node:url';
const files = ${JSON.stringify(files)};
const out = await (async () => {${body}})();
process.stdout.write(JSON.stringify(out));`;
  const run = spawnSync(process.execPath, ['--input-type=module', '-e', script], {
    cwd: dir,
    encoding: 'utf8',
  });
  expect(run.status, run.stderr).toBe(0);
  return JSON.parse(run.stdout) as unknown;
}

describe('bundleFunctions', () => {
  it('writes one .mjs with a source map per documented entry', () => {
    expect(Object.keys(files).sort()).toEqual(['api', 'authorizer', 'scaler', 'sweeper', 'webhooks']);
    expect(functionEntries).toEqual({
      api: 'api.handler',
      authorizer: 'authorizer.handler',
      sweeper: 'sweeper.handler',
      scaler: 'scaler.handler',
      webhooks: 'webhooks.handler',
    });
    for (const name of Object.keys(functionEntries)) {
      expect(statSync(join(outdir, `${name}.mjs`)).size).toBeGreaterThan(1000);
      expect(statSync(join(outdir, `${name}.mjs.map`)).size).toBeGreaterThan(1000);
    }
  });

  it('each bundle imports standalone and exports a handler function', () => {
    const types = inNode(`
      const types = {};
      for (const [name, file] of Object.entries(files)) types[name] = typeof (await import(pathToFileURL(file).href)).handler;
      return types;
    `) as Record<string, string>;
    for (const name of Object.keys(functionEntries)) {
      expect(types[name]).toBe('function');
    }
  });

  it('the bundled authorizer refuses a request without a key with "Unauthorized" (no AWS call needed)', () => {
    const outcome = inNode(`
      const { handler } = await import(pathToFileURL(files.authorizer).href);
      const result = handler({
        type: 'REQUEST',
        methodArn: 'arn:aws:execute-api:us-east-1:123456789012:abc/prod/GET/v2/ep/health',
        headers: {},
      });
      return result.then(
        () => ({ rejected: false }),
        (error) => ({ rejected: true, message: error instanceof Error ? error.message : String(error) }),
      );
    `) as { rejected: boolean; message?: string };
    // The exact message API Gateway answers with 401 (its UNAUTHORIZED gateway response).
    expect(outcome).toEqual({ rejected: true, message: expect.stringMatching(/^Unauthorized$/) });
  });
});

describe('bundleFunctions with a cache file', () => {
  const bundleFiles = () =>
    Object.keys(functionEntries).flatMap((name) => [
      join(outdir, `${name}.mjs`),
      join(outdir, `${name}.mjs.map`),
    ]);

  it('records every source esbuild read, and a second run on them writes nothing', async () => {
    const record = JSON.parse(readFileSync(cacheFile, 'utf8')) as { inputs: string[] };
    expect(record.inputs).toContain('functions/api.ts');
    expect(record.inputs).toContain('core/errors.ts');
    expect(record.inputs.some((input) => input.includes('node_modules/@aws-sdk/'))).toBe(true);
    expect(await bundlesAreCurrent(outdir, cacheFile)).toBe(true);
    const written = bundleFiles().map((file) => statSync(file).mtimeMs);
    expect(await bundleFunctions(outdir, { cacheFile })).toEqual(files);
    expect(bundleFiles().map((file) => statSync(file).mtimeMs)).toEqual(written);
  });

  it('is out of date when recorded before the source maps were written from the Ferry root', async () => {
    const text = readFileSync(cacheFile, 'utf8');
    const record = JSON.parse(text) as { key: string };
    expect(await bundlesAreCurrent(outdir, cacheFile)).toBe(true);
    // The key an older Ferry wrote: esbuild's version, the options and the fingerprint, nothing on
    // the maps, whose `sources` then depended on the folder they were written to.
    const { maps: _, ...older } = JSON.parse(record.key) as Record<string, unknown>;
    writeFileSync(cacheFile, JSON.stringify({ ...record, key: JSON.stringify(older) }));
    expect(await bundlesAreCurrent(outdir, cacheFile)).toBe(false);
    writeFileSync(cacheFile, text);
  });

  it('is out of date once a recorded source reads differently, or a bundle was changed', async () => {
    const record = JSON.parse(readFileSync(cacheFile, 'utf8')) as {
      root: string;
      inputs: string[];
      key: string;
    };
    // A source of our own among the recorded ones: current while it reads the same, not after.
    const source = join(dir, 'extra-source.ts');
    writeFileSync(source, 'export const a = 1;\n');
    const inputs = [...record.inputs, relative(record.root, source)];
    writeFileSync(
      cacheFile,
      JSON.stringify({ ...record, inputs, key: await bundleInputsKey(record.root, inputs) }),
    );
    expect(await bundlesAreCurrent(outdir, cacheFile)).toBe(true);
    writeFileSync(source, 'export const a = 2;\n');
    expect(await bundlesAreCurrent(outdir, cacheFile)).toBe(false);
    writeFileSync(source, 'export const a = 1;\n');
    expect(await bundlesAreCurrent(outdir, cacheFile)).toBe(true);
    // A bundle edited since the build; put back after, as the depth test reads the bundles.
    const api = join(outdir, 'api.mjs');
    const bundled = readFileSync(api);
    try {
      appendFileSync(api, '\n// edited\n');
      expect(await bundlesAreCurrent(outdir, cacheFile)).toBe(false);
    } finally {
      writeFileSync(api, bundled);
    }
  });
});

describe('bundles written at another path depth', () => {
  /** Each platform function's handler → its Code.S3Key, from a platform synthesized on `codeDir`. */
  const codeKeys = (codeDir: string) => {
    const stack = new PlatformStack(new App(), 'FerryPlatform', { functionsCodeDir: codeDir });
    const handlers = new Set<string>(Object.values(functionEntries));
    const keys: Record<string, unknown> = {};
    for (const fn of Object.values(Template.fromStack(stack).findResources('AWS::Lambda::Function'))) {
      const { Handler, Code } = fn.Properties as { Handler: string; Code: { S3Key: unknown } };
      if (handlers.has(Handler)) keys[Handler] = Code.S3Key;
    }
    return keys;
  };

  it('give the platform the same Lambda code (S3Key), source maps included', async () => {
    // Bundles at two depths, as two projects' `.ferry/aws/functions`: esbuild writes the maps'
    // `sources` relative to the output folder. The shallow ones are the file's (`<dir>/functions`).
    const shallow = outdir;
    const deeper = join(dir, 'team', 'other', 'app', '.ferry', 'aws', 'functions');
    await bundleFunctions(deeper);
    const keys = codeKeys(shallow);
    expect(Object.keys(keys).sort()).toEqual(Object.values(functionEntries).sort());
    expect(codeKeys(deeper)).toEqual(keys);
    // The sources read from the Ferry root, where functions/ lives.
    const map = JSON.parse(readFileSync(join(shallow, 'api.mjs.map'), 'utf8')) as { sources: string[] };
    expect(map.sources).toContain('functions/api.ts');
  }, 300_000);
});
