/**
 * Bundles the agent into one ESM file, `agent.mjs`, with its dependencies (AWS SDK, zod) inlined, so
 * the image needs Node and this file only. Target node22: the images ship Node 22.
 */
import { mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const here = dirname(fileURLToPath(import.meta.url));

/** Writes `<outdir>/agent.mjs` and returns its path. */
export async function bundleAgent(outdir: string): Promise<string> {
  mkdirSync(outdir, { recursive: true });
  const outfile = join(outdir, 'agent.mjs');
  await build({
    entryPoints: [join(here, 'main.ts')],
    outfile,
    bundle: true,
    platform: 'node',
    target: 'node22',
    format: 'esm',
    logLevel: 'silent',
    legalComments: 'none',
    // Some bundled CommonJS dependencies call require() for Node built-ins; ESM has no require.
    banner: {
      js: "import { createRequire as __ferryRequire } from 'node:module'; const require = __ferryRequire(import.meta.url);",
    },
  });
  return outfile;
}
