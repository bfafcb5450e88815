/**
 * The Lambda bundles: esbuild writes one .mjs per function (functionEntries) into a temp folder, and
 * each one imports on its own (outside the repo, so no node_modules to lean on) and exports `handler`.
 */
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bundleFunctions, functionEntries } from '../../functions/bundle.js';

let outdir: string;
let files: Record<string, string>;

beforeAll(async () => {
  outdir = mkdtempSync(join(tmpdir(), 'ferry-bundle-'));
  files = await bundleFunctions(outdir);
}, 120_000);

afterAll(() => {
  rmSync(outdir, { recursive: true, force: true });
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
