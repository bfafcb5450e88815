/**
 * Bundles the agent into one ESM file, `agent.mjs`, with its dependencies (AWS SDK, zod) inlined, so
 * the image needs Node and this file only. Target node22: the images ship Node 22.
 */
import { existsSync, mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

/**
 * The folder of the agent's .ts sources. From the sources it is this module's own folder; from the
 * built package (dist/worker-image/agent/bundle.js) esbuild must still start at the .ts entry, which
 * the package ships at worker-image/agent/main.ts beside dist/.
 */
export function agentSourceDir(): string {
  const here = dirname(fileURLToPath(import.meta.url));
  if (existsSync(join(here, 'main.ts'))) return here;
  return join(here, '..', '..', '..', 'worker-image', 'agent');
}

/** Writes `<outdir>/agent.mjs` and returns its path. */
export async function bundleAgent(outdir: string): Promise<string> {
  mkdirSync(outdir, { recursive: true });
  const outfile = join(outdir, 'agent.mjs');
  await build({
    entryPoints: [join(agentSourceDir(), 'main.ts')],
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
