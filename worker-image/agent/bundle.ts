/**
 * Bundles the agent into one ESM file, `agent.mjs`, with its dependencies (AWS SDK, zod) inlined, so
 * the image needs Node and this file only. Target node22: the images ship Node 22.
 *
 * The same install gives the same bytes wherever it is run from: the images' tags on AWS are a hash
 * of this file (worker-image/images.ts imageContentHashes), and esbuild writes each module's path,
 * relative to its working directory, as a comment above its code. So the working directory is the
 * install root, not the caller's.
 */
import { existsSync, mkdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
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

/**
 * Writes `<outdir>/agent.mjs` and returns its path. Written whole under another name and renamed:
 * two deploys bundling at once never read (hash, pack) a half-written file.
 */
export async function bundleAgent(outdir: string): Promise<string> {
  mkdirSync(outdir, { recursive: true });
  const outfile = join(outdir, 'agent.mjs');
  const result = await build({
    entryPoints: [join(agentSourceDir(), 'main.ts')],
    absWorkingDir: resolve(agentSourceDir(), '..', '..'),
    outfile,
    write: false,
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
  const output = result.outputFiles.find((file) => resolve(file.path) === resolve(outfile));
  if (output === undefined) throw new Error(`esbuild produced no ${outfile}`);
  const partial = `${outfile}.${process.pid}.${Date.now()}.partial`;
  try {
    writeFileSync(partial, output.contents);
    renameSync(partial, outfile);
  } finally {
    rmSync(partial, { force: true });
  }
  return outfile;
}

// `node dist/worker-image/agent/bundle.js <outdir>`: what `ferry images build --dry-run` prints.
if (process.argv[1] && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) {
  const outdir = process.argv[2];
  if (!outdir) {
    process.stderr.write('usage: node bundle.js <output folder>\n');
    process.exitCode = 2;
  } else {
    bundleAgent(resolve(outdir)).then(
      (file) => process.stdout.write(`${file}\n`),
      (error: unknown) => {
        process.stderr.write(`Error: ${(error as Error).message}\n`);
        process.exitCode = 1;
      },
    );
  }
}
