/**
 * `ferry sdk install|path`: the `ferry` Python package (worker-image/python, docs/python.md) into the
 * active interpreter, so `python3 script.py` can import it and call endpoints. pip builds from a
 * copy in a temp folder: the install tree (maybe a read-only npm folder) gets no build/ or egg-info.
 */
import type { CommandModule } from 'yargs';
import type { CliContext } from '../context.js';
import { examples, nonBlankFlag } from './shared.js';

export const pythonHint =
  'Give the path of a Python 3 interpreter (--python .venv/bin/python), or leave --python out to use the active virtualenv, else python3.';

export const sdkCommand = (ctx: CliContext): CommandModule => ({
  command: 'sdk <action>',
  describe: 'The ferry Python package: install it into your Python, or print its path',
  builder: (y) =>
    y
      .positional('action', { choices: ['install', 'path'] as const, describe: 'install | path' })
      .option(
        'python',
        nonBlankFlag('python', pythonHint, {
          describe: 'Interpreter (default: the active virtualenv, else python3)',
        }),
      )
      .option('offline', {
        type: 'boolean',
        default: false,
        describe: "Build with the interpreter's own setuptools (pip --no-build-isolation)",
      })
      .epilogue(
        examples([
          ['$0 sdk install', 'pip install the package into the active Python'],
          ['$0 sdk path', 'Print the folder to pip install yourself'],
        ]),
      ),
  handler: async (argv) => (await import('./sdk-run.js')).runSdk(ctx, argv),
});
