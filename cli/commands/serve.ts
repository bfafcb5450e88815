/**
 * `ferry serve`: the embedded platform on FERRY_HOME with worker pools for every deployed queue and
 * load-balanced endpoint, until Ctrl+C. `--detach` runs it in the background (serve.log) and returns
 * once /v2 answers. `ferry quickstart` (what `npm start` runs) also deploys examples/hello into it.
 */
import type { CommandModule } from 'yargs';
import type { CliContext } from '../context.js';
import { defineCommand, examples, hostFlag, portFlag } from './shared.js';

export const serveCommand = (ctx: CliContext): CommandModule =>
  defineCommand({
    command: 'serve',
    describe: 'Run the local platform (API, queue, workers) for deployed endpoints',
    builder: (y) =>
      y
        .option('host', hostFlag({ default: '127.0.0.1', describe: 'Bind address' }))
        .option(
          'port',
          portFlag({
            defaultDescription: 'FERRY_PORT, else 8888',
            describe: 'Port (0 picks a free one)',
          }),
        )
        .option('detach', {
          type: 'boolean',
          default: false,
          describe: 'Run in the background; logs in FERRY_HOME/serve.log',
        })
        .option('stop', {
          type: 'boolean',
          default: false,
          describe: 'Stop the platform running in the background for this FERRY_HOME',
        })
        .option('worker-user', {
          type: 'string',
          describe: 'Run workers as this OS user, out of reach of FERRY_HOME (needs root)',
        })
        .option('worker-uids', {
          type: 'string',
          describe:
            'Run each endpoint as a uid of its own from FIRST-LAST, out of reach of FERRY_HOME and of each other (needs root)',
        })
        .epilogue(
          examples([
            ['$0 serve', 'Serve on 127.0.0.1:8888 until Ctrl+C'],
            ['sudo $0 serve --worker-user ferry-worker', 'Workers as their own OS user'],
            ['sudo $0 serve --worker-uids 200000-265535', 'Each endpoint as its own OS user'],
            ['$0 serve --detach', 'Start it in the background'],
            ['$0 serve --stop', 'Stop the one in the background'],
          ]),
        ),
    handler: async (argv) => (await import('./serve-run.js')).serve(ctx, argv),
  });

export const quickstartCommand = (ctx: CliContext): CommandModule =>
  defineCommand({
    command: 'quickstart',
    describe: false,
    builder: (y) =>
      y
        .option('host', hostFlag({ default: '127.0.0.1', describe: 'Bind address' }))
        .option(
          'port',
          portFlag({ defaultDescription: 'FERRY_PORT, else 8888', describe: 'Port (0 picks a free one)' }),
        ),
    handler: async (argv) => (await import('./serve-run.js')).quickstart(ctx, argv),
  });
