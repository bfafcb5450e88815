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
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

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
export async function bundleFunctions(outdir: string): Promise<Record<FunctionName, string>> {
  const names = Object.keys(functionEntries) as FunctionName[];
  const entryPoints = Object.fromEntries(names.map((name) => [name, join(sourceDir(), `${name}.ts`)]));
  await build({
    entryPoints,
    outdir,
    outExtension: { '.js': '.mjs' },
    bundle: true,
    platform: 'node',
    target: 'node24',
    format: 'esm',
    minify: false,
    sourcemap: true,
    banner: { js: requireShim },
    logLevel: 'silent',
  });
  return Object.fromEntries(names.map((name) => [name, `${outdir}/${name}.mjs`])) as Record<
    FunctionName,
    string
  >;
}
