/** `ferry build`: buildProject with its progress on stderr, the result on stdout. */
import type { CliContext } from '../context.js';
import { buildFlags, defineCommand, examples, jsonFlag } from './shared.js';

export const buildCommand = (ctx: CliContext) =>
  defineCommand({
    command: 'build',
    describe: 'Build the deployment artifact (no upload)',
    builder: (y) =>
      buildFlags(y)
        .option('app', {
          alias: 'a',
          type: 'string',
          describe: 'App name',
          defaultDescription: 'the folder name',
        })
        .option('json', jsonFlag)
        .epilogue(
          examples([
            ['$0 build --exclude scipy,pandas', 'Leave two packages out of the artifact'],
            ['$0 build --python-version 3.12 --json', 'Build for Python 3.12 and print the manifest'],
          ]),
        ),
    handler: async (argv) => (await import('./build-run.js')).runBuild(ctx, argv),
  });
