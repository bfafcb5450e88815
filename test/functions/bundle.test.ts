/**
 * The Lambda bundles: esbuild writes one .mjs per function (functionEntries) into a temp folder, and
 * each one imports on its own (outside the repo, so no node_modules to lean on) and exports `handler`.
 * With a cache file, a run on the same sources keeps the bundles it finds (the CLI's deploys).
 */
import { appendFileSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  bundleFunctions,
  bundleInputsKey,
  bundlesAreCurrent,
  functionEntries,
} from '../../functions/bundle.js';

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

  it('each bundle imports standalone and exports a handler function', async () => {
    for (const name of Object.keys(functionEntries)) {
      const module = (await import(pathToFileURL(files[name]!).href)) as { handler?: unknown };
      expect(typeof module.handler).toBe('function');
    }
  });

  it('the bundled authorizer refuses a request without a key with "Unauthorized" (no AWS call needed)', async () => {
    const { handler } = (await import(pathToFileURL(files.authorizer!).href)) as {
      handler: (event: unknown) => Promise<unknown>;
    };
    const result = handler({
      type: 'REQUEST',
      methodArn: 'arn:aws:execute-api:us-east-1:123456789012:abc/prod/GET/v2/ep/health',
      headers: {},
    });
    // The exact message API Gateway answers with 401 (its UNAUTHORIZED gateway response).
    await expect(result).rejects.toThrow(/^Unauthorized$/);
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
    // A bundle edited since the build.
    appendFileSync(join(outdir, 'api.mjs'), '\n// edited\n');
    expect(await bundlesAreCurrent(outdir, cacheFile)).toBe(false);
  });
});
