/**
 * `ferry dev` (hidden alias `run`): an in-process platform with state in the project's .ferry/,
 * worker pools running the code on disk, and the dev server (docs/api.md#the-dev-server) in front of it.
 */
import type { CommandModule } from 'yargs';
import type { CliContext } from '../context.js';
import { allowOriginFlag, approveFlag, defineCommand, examples, hostFlag, portFlag } from './shared.js';

export const devCommand = (ctx: CliContext): CommandModule =>
  defineCommand({
    command: 'dev',
    aliases: [],
    describe: 'Run the project locally with a dev server and Swagger UI',
    builder: (y) =>
      y
        .option('host', hostFlag({ default: 'localhost', describe: 'Bind address' }))
        .option(
          'port',
          portFlag({
            defaultDescription: 'FERRY_PORT (exactly), else 8888',
            describe: 'Port; the next free one when taken',
          }),
        )
        .option('allow-origin', allowOriginFlag)
        .option('reload', {
          type: 'boolean',
          default: true,
          describe: 'Restart workers when a .py file changes (--no-reload)',
        })
        .option('auto-provision', {
          type: 'boolean',
          default: false,
          describe: 'Provision every endpoint at startup',
        })
        .option('deps', {
          type: 'boolean',
          default: true,
          describe:
            "Install each endpoint's dependencies=[...] into a venv under .ferry/venvs (--no-deps: use your Python as it is)",
        })
        .option('yes', approveFlag)
        .epilogue(
          examples([
            ['$0 dev', 'http://localhost:8888, Swagger UI at /docs'],
            ['$0 dev --port 9000 --auto-provision', 'Start every endpoint at once'],
            [
              '$0 dev --host 0.0.0.0 --allow-origin http://devbox.lan:8888',
              'Reachable from other machines, by address or as devbox.lan',
            ],
          ]),
        ),
    handler: async (argv) => (await import('./dev-run.js')).runDev(ctx, argv),
  });

/** `ferry run`: the hidden alias of dev (a separate hidden entry so help does not list it). */
export const runAliasCommand = (ctx: CliContext): CommandModule => ({
  ...devCommand(ctx),
  command: 'run',
  describe: false,
});
