/**
 * `ferry --help`, `ferry <cmd> --help` and every usage mistake load only the command definitions
 * (cli/commands/index.ts): a command's implementation, the providers, the build pipeline and zod are
 * loaded when its handler runs. The binary runs with a module loader hook (node:module register) that
 * writes every module it loads to a file, and the test reads what was loaded. No timing: which
 * modules, not how long.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { CliSandbox } from './cli-support.js';

const sandbox = new CliSandbox();
afterAll(() => sandbox.cleanup());

const hooks = path.join(sandbox.root, 'hooks.mjs');
const register = path.join(sandbox.root, 'register.mjs');
writeFileSync(
  hooks,
  `import { appendFileSync } from 'node:fs';
export async function load(url, context, next) {
  if (process.env.FERRY_TEST_LOADED) appendFileSync(process.env.FERRY_TEST_LOADED, url + '\\n');
  return next(url, context);
}
`,
);
writeFileSync(
  register,
  `import { register } from 'node:module';\nregister(${JSON.stringify(pathToFileURL(hooks).href)});\n`,
);

let runs = 0;

/** Runs ferry with the hook; its exit code and the URLs of the modules it loaded. */
async function loadedBy(args: string[]): Promise<{ code: number | null; stderr: string; loaded: string[] }> {
  const file = path.join(sandbox.root, `loaded-${runs++}.txt`);
  writeFileSync(file, '');
  const result = await sandbox.run(args, {
    env: { NODE_OPTIONS: `--import=${pathToFileURL(register).href}`, FERRY_TEST_LOADED: file },
  });
  return { code: result.code, stderr: result.stderr, loaded: readFileSync(file, 'utf8').split('\n') };
}

/** What only a command's handler needs: none of it is loaded to print help or refuse a command line. */
const heavy = [
  '/node_modules/zod/',
  '/dist/cli/providers/index.js',
  '/dist/cli/providers/local.js',
  '/dist/cli/build/index.js',
  '/dist/cli/deploy/run.js',
  '/dist/core/schemas.js',
  '/dist/cli/commands/records-run.js',
];

const heavyIn = (loaded: string[]) => heavy.filter((part) => loaded.some((url) => url.includes(part)));

describe('ferry loads a command implementation only when it runs', () => {
  it.each([
    [['--help'], 0],
    [['--version'], 0],
    [['env', '--help'], 0],
    [['deploy', '--help'], 0],
    [['env', 'lst'], 2],
    [['env', 'create'], 2],
    [['app', 'list', '--bogus'], 2],
  ])('ferry %j loads no implementation', async (args, exitCode) => {
    const { code, loaded } = await loadedBy(args);
    expect(code).toBe(exitCode);
    // The hook saw the CLI itself: an empty list would pass for the wrong reason.
    expect(loaded.some((url) => url.endsWith('/dist/cli/main.js'))).toBe(true);
    expect(heavyIn(loaded)).toEqual([]);
  });

  it('ferry app list loads what it runs, and runs', async () => {
    const { code, stderr, loaded } = await loadedBy(['app', 'list', '--json']);
    expect(stderr).toBe('');
    expect(code).toBe(0);
    expect(heavyIn(loaded)).toEqual(expect.arrayContaining(['/dist/cli/commands/records-run.js']));
  });
});
