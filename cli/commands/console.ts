/**
 * `ferry console`: where the web console is (docs/observability.md). Locally `ferry serve` and
 * `ferry dev` serve it themselves, so this prints its URL (in the folder where `ferry dev` runs, its
 * console's); with `--provider aws` it serves the same console on localhost against the platform in
 * your AWS account until Ctrl+C.
 */
import type { CommandModule } from 'yargs';
import type { CliContext } from '../context.js';
import type { ConsoleArgs } from './console-run.js';
import { examples, hostFlag, portFlag } from './shared.js';

export const consoleCommand = (ctx: CliContext): CommandModule => ({
  command: 'console',
  describe: 'Open the web console (endpoints, jobs, logs, workers, charts)',
  builder: (y) =>
    y
      .option('host', hostFlag({ default: '127.0.0.1', describe: 'Bind address (--provider aws)' }))
      .option('port', portFlag({ default: 8787, describe: 'Port (--provider aws; 0 picks one)' }))
      .epilogue(
        examples([
          ['$0 console', "The local platform's console URL"],
          ['$0 console --provider aws', 'Serve the console for your AWS platform on localhost'],
        ]),
      ),
  handler: async (argv) =>
    (await import('./console-run.js')).consoleCommandHandler(ctx, argv as unknown as ConsoleArgs),
});
