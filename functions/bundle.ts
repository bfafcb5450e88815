/**
 * Bundles the Lambda entry points with esbuild: one self-contained ESM file per function, the AWS SDK
 * included (the runtime's copy is whatever version Lambda ships; ours is the one we test).
 *
 *   api.mjs         handler `api.handler`         the v2 client API (API Gateway proxy)
 *   authorizer.mjs  handler `authorizer.handler`  the API-key REQUEST authorizer
 *   sweeper.mjs     handler `sweeper.handler`     the scheduled sweeper
 *   scaler.mjs      handler `scaler.handler`      sets ECS desiredCount (schedule + nudges)
 *   webhooks.mjs    handler `webhooks.handler`    delivers final-status webhooks (webhook queue)
 *
 * Runtime `nodejs24.x` (infra/platform-stack.ts). infra/ points each function's code at `outdir` with these handler names.
 */
import { existsSync } from 'node:fs';
import { mkdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type BuildOptions, build, version as esbuildVersion } from 'esbuild';
import { sourceFingerprint } from '../cli/build/fingerprint.js';

export const functionEntries = {
  api: 'api.handler',
  authorizer: 'authorizer.handler',
  sweeper: 'sweeper.handler',
  scaler: 'scaler.handler',
  webhooks: 'webhooks.handler',
} as const;

export type FunctionName = keyof typeof functionEntries;

/** Some bundled dependencies are CommonJS and call require(): give ESM output one. */
const requireShim =
  "import { createRequire as __ferryCreateRequire } from 'node:module';\nconst require = __ferryCreateRequire(import.meta.url);";

/** The folder of the .ts sources, also when this module runs compiled from `dist/functions/`. */
function sourceDir(): string {
  const here = dirname(fileURLToPath(import.meta.url));
  if (existsSync(join(here, 'api.ts'))) return here;
  return join(here, '..', '..', 'functions');
}

/** Writes `<name>.mjs` (+ `.mjs.map`) for each function into `outdir`; returns the file paths. */
export async function bundleFunctions(
  outdir: string,
  options: {
    /**
     * Where to record what the bundles were built from (outside `outdir`, which is the Lambda
     * asset). When it says `outdir` holds the bundles of the current sources, esbuild is skipped:
     * the bundles would come out the same (bundlesAreCurrent).
     */
    cacheFile?: string;
  } = {},
): Promise<Record<FunctionName, string>> {
  const names = Object.keys(functionEntries) as FunctionName[];
  const files = Object.fromEntries(names.map((name) => [name, `${outdir}/${name}.mjs`])) as Record<
    FunctionName,
    string
  >;
  const { cacheFile } = options;
  if (cacheFile && (await bundlesAreCurrent(outdir, cacheFile))) return files;
  if (cacheFile) await rm(cacheFile, { force: true });
  const root = dirname(sourceDir());
  const result = await build({
    ...bundleOptions,
    entryPoints: Object.fromEntries(names.map((name) => [name, join(sourceDir(), `${name}.ts`)])),
    outdir,
    // Paths in the bundles' comments and the metafile are from the Ferry root, not from wherever
    // the command runs; rootRelativeMap does the same for the source maps, so the same sources give
    // the same bundles in every project.
    absWorkingDir: root,
    metafile: true,
    write: false,
  });
  await mkdir(outdir, { recursive: true });
  for (const file of result.outputFiles) {
    await writeFile(
      file.path,
      file.path.endsWith('.map') ? rootRelativeMap(file.text, file.path, root) : file.contents,
    );
  }
  if (cacheFile) await recordInputs(cacheFile, root, outdir, Object.keys(result.metafile.inputs).sort());
  return files;
}

/**
 * A source map whose `sources` are from the Ferry root instead of from the map's folder. esbuild
 * writes them relative to the output folder whatever `absWorkingDir` says, so a bundle written under
 * another project (another depth) got another map, and the platform's Lambda code, which is hashed
 * from the folder's content (Code.fromAsset, AssetHashType SOURCE:
 * https://docs.aws.amazon.com/cdk/api/v2/docs/aws-cdk-lib.AssetHashType.html), another S3 key:
 * every deploy from another folder updated FerryPlatform. Rewriting the map, not hashing around it,
 * keeps the asset hash honest (it still covers the map) and the stack traces readable: the sources
 * are embedded (`sourcesContent`), and on Lambda they read as `/var/task/functions/api.ts`.
 */
function rootRelativeMap(text: string, mapFile: string, root: string): string {
  const map = JSON.parse(text) as { sources: string[] };
  map.sources = map.sources.map((source) =>
    relative(root, resolve(dirname(mapFile), source))
      .split(sep)
      .join('/'),
  );
  return JSON.stringify(map);
}

/** Everything but the paths: part of the cache key, so a change of any option rebuilds. */
const bundleOptions = {
  outExtension: { '.js': '.mjs' },
  bundle: true,
  platform: 'node',
  target: 'node24',
  format: 'esm',
  minify: false,
  sourcemap: true,
  banner: { js: requireShim },
  logLevel: 'silent',
} as const satisfies BuildOptions;

/** What `bundleFunctions` records in its cache file. */
interface BundleStamp {
  /** esbuild's version, the options, the maps' form and the content of every input (bundleInputsKey). */
  key: string;
  /** The Ferry root the inputs are relative to, and the folder the bundles went to. */
  root: string;
  outdir: string;
  /** Every file esbuild read, from its metafile. */
  inputs: string[];
  /** Size and mtime of each file written, to notice bundles changed since. */
  outputs: Record<string, { size: number; mtimeMs: number }>;
}

/**
 * The files esbuild reads but its metafile does not list: the root's package.json and tsconfig.json,
 * and the npm lockfile of each node_modules tree an input came from (npm rewrites it on every
 * install, so a package that moved in the tree or changed its package.json rebuilds the bundles).
 */
function settingsFiles(root: string, inputs: readonly string[]): string[] {
  const trees = new Set<string>();
  for (const input of inputs) {
    const at = input.split('/').indexOf('node_modules');
    if (at >= 0)
      trees.add(
        `${input
          .split('/')
          .slice(0, at + 1)
          .join('/')}/.package-lock.json`,
      );
  }
  return ['package.json', 'tsconfig.json', ...trees].filter((file) => existsSync(resolve(root, file)));
}

/**
 * How the maps' `sources` are written (rootRelativeMap), in the cache key: bundles a Ferry before it
 * cached have maps that depend on their folder, and are rebuilt.
 */
const mapSources = 'from the Ferry root';

/**
 * esbuild's version, the options, how the maps are written, and the sha256 of the paths and contents
 * of the files read.
 */
export async function bundleInputsKey(root: string, inputs: readonly string[]): Promise<string> {
  const fingerprint = await sourceFingerprint(root, [...inputs, ...settingsFiles(root, inputs)]);
  return JSON.stringify({ esbuild: esbuildVersion, options: bundleOptions, fingerprint, maps: mapSources });
}

async function outputStats(outdir: string): Promise<BundleStamp['outputs']> {
  const out: BundleStamp['outputs'] = {};
  for (const name of Object.keys(functionEntries)) {
    for (const file of [`${name}.mjs`, `${name}.mjs.map`]) {
      const { size, mtimeMs } = await stat(join(outdir, file));
      out[file] = { size, mtimeMs };
    }
  }
  return out;
}

/** Writes the cache file; an input it cannot read again means no record (the next run rebuilds). */
async function recordInputs(
  cacheFile: string,
  root: string,
  outdir: string,
  inputs: string[],
): Promise<void> {
  let stamp: BundleStamp;
  try {
    const outputs = await outputStats(outdir);
    stamp = { key: await bundleInputsKey(root, inputs), root, outdir: resolve(outdir), inputs, outputs };
  } catch {
    return;
  }
  await writeFile(cacheFile, `${JSON.stringify(stamp)}\n`);
}

/**
 * Whether `outdir` holds what esbuild would write now: the cache file's inputs (every file the last
 * build read, read again) give its key (bundleInputsKey), for the same Ferry root and esbuild version, and the bundles
 * are the ones that build wrote. Any doubt (no record, a file gone, a read error) is false.
 */
export async function bundlesAreCurrent(outdir: string, cacheFile: string): Promise<boolean> {
  try {
    const stamp = JSON.parse(await readFile(cacheFile, 'utf8')) as BundleStamp;
    const root = dirname(sourceDir());
    if (stamp.root !== root || stamp.outdir !== resolve(outdir)) return false;
    if (!Array.isArray(stamp.inputs) || stamp.inputs.length === 0) return false;
    if (JSON.stringify(await outputStats(outdir)) !== JSON.stringify(stamp.outputs)) return false;
    return (await bundleInputsKey(root, stamp.inputs)) === stamp.key;
  } catch {
    return false;
  }
}
