/** What `ferry sdk` runs (cli/commands/sdk.ts defines the command): loaded when it runs. */
import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { FerryError, usage } from '../../core/errors.js';
import { runProcess } from '../build/process.js';
import { ferryPythonPath } from '../config.js';
import type { CliContext } from '../context.js';
import { pythonHint } from './sdk.js';

/** The interpreter a user means by "my Python": the active virtualenv's, else python3 on PATH. */
export function activePython(env: NodeJS.ProcessEnv): string {
  return env.VIRTUAL_ENV ? path.join(env.VIRTUAL_ENV, 'bin', 'python') : 'python3';
}

/** runProcess's error for a program that does not exist (ENOENT). */
const isNotFound = (error: unknown): boolean =>
  FerryError.is(error) && (error.cause as NodeJS.ErrnoException | undefined)?.code === 'ENOENT';

async function install(ctx: CliContext, python: string, offline: boolean): Promise<void> {
  const staging = mkdtempSync(path.join(tmpdir(), 'ferry-sdk-'));
  try {
    const source = ferryPythonPath();
    for (const item of ['pyproject.toml', 'README.md', 'ferry'])
      cpSync(path.join(source, item), path.join(staging, item), {
        recursive: true,
        filter: (file) => !file.includes('__pycache__'),
      });
    ctx.reporter.line(`Installing the ferry Python package into ${python} …`);
    // --no-build-isolation uses the interpreter's own setuptools: no package index needed.
    const args = [
      '-m',
      'pip',
      'install',
      '--no-deps',
      '--upgrade',
      ...(offline ? ['--no-build-isolation'] : []),
      staging,
    ];
    const result = await runProcess(python, args, { timeoutMs: 300_000 });
    if (result.exitCode !== 0) {
      throw new FerryError('failed', `pip could not install the ferry package:\n${result.stderr.trim()}`, {
        hint: offline
          ? 'The interpreter needs setuptools and wheel for --offline; or run without --offline.'
          : 'Check that pip can reach a package index for setuptools, or use --offline.',
      });
    }
    const check = await runProcess(python, ['-c', 'import ferry, sys; print(ferry.__version__, sys.prefix)']);
    ctx.reporter.out(check.stdout.trim());
    ctx.reporter.line(`✓ ${python} can import ferry`);
  } finally {
    rmSync(staging, { recursive: true, force: true });
  }
}

export async function runSdk(ctx: CliContext, argv: Record<string, unknown>): Promise<void> {
  if (argv.action === 'path') {
    ctx.reporter.out(ferryPythonPath());
    return;
  }
  const given = argv.python as string | undefined;
  await install(ctx, given ?? activePython(ctx.io.env), Boolean(argv.offline)).catch((error: unknown) => {
    // An interpreter named with --python that is not there is the user's path to fix.
    if (given !== undefined && isNotFound(error)) throw usage(`--python ${given} was not found`, pythonHint);
    throw error;
  });
}
