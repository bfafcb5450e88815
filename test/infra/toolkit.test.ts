/** The CLI's path: toolkit-lib synthesizes our assembly offline, with no credentials. */

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { StackSelectionStrategy, Toolkit } from '@aws-cdk/toolkit-lib';
import { afterAll, describe, expect, it } from 'vitest';
import { synthesize } from '../../infra/app.js';
import { appStackName } from '../../infra/names.js';
import { sampleImages, sampleManifest, stubFunctionsDir } from './fixtures.js';

const cleanups: (() => void)[] = [];
afterAll(() => {
  for (const cleanup of cleanups) cleanup();
});

describe('toolkit-lib', () => {
  it('synthesizes both stacks through fromAssemblyBuilder', async () => {
    const fns = stubFunctionsDir();
    const outdir = mkdtempSync(join(tmpdir(), 'ferry-infra-toolkit-'));
    cleanups.push(fns.cleanup, () => rmSync(outdir, { recursive: true, force: true }));
    const messages: string[] = [];
    const toolkit = new Toolkit({
      ioHost: {
        notify: async (message) => {
          messages.push(`${message.level} ${message.code ?? ''} ${message.message}`);
        },
        requestResponse: async (message) => message.defaultResponse,
      },
    });
    const cx = await toolkit.fromAssemblyBuilder(
      async ({ outdir: builderOutdir, context }) =>
        synthesize({
          manifest: sampleManifest,
          env: 'dev',
          functionsCodeDir: fns.dir,
          artifact: { key: 'artifacts/demo/dev/fff.tar.gz' },
          images: sampleImages,
          ...(builderOutdir ? { outdir: builderOutdir } : {}),
          ...(context ? { context } : {}),
        }),
      { outdir },
    );
    const assembly = await toolkit.synth(cx, { stacks: { strategy: StackSelectionStrategy.ALL_STACKS } });
    try {
      const names = assembly.cloudAssembly.stacks.map((s) => s.stackName).sort();
      expect(names).toEqual([appStackName('demo', 'dev'), 'FerryPlatform']);
      expect(messages.filter((m) => m.startsWith('error') || m.startsWith('warn'))).toEqual([]);
    } finally {
      await assembly.dispose();
    }
  });
});
