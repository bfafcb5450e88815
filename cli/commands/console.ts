/**
 * `ferry console`: where the web console is (docs/observability.md). Locally `ferry serve` and
 * `ferry dev` serve it themselves, so this prints its URL (in the folder where `ferry dev` runs, its
 * console's); with `--provider aws` it serves the same console on localhost against the platform in
 * your AWS account until Ctrl+C.
 */
import path from 'node:path';
import type { CommandModule } from 'yargs';
import { FerryError } from '../../core/errors.js';
import { installRoot } from '../config.js';
import { type CliContext, providerName, withProvider } from '../context.js';
import { runningDevAbove } from '../dev/lock.js';
import { ManageClient } from '../manage-client.js';
import { untilStopped } from './serve.js';
import { examples, hostFlag, portFlag } from './shared.js';

interface ConsoleArgs {
  provider?: string;
  host: string;
  port: number;
}

async function consoleCommandHandler(ctx: CliContext, args: ConsoleArgs): Promise<void> {
  // `ferry dev` serves the console of its own platform (state in the project's .ferry): in the folder
  // where it runs, or below it, that is the one meant.
  const dev = providerName(ctx, args.provider) === 'local' ? runningDevAbove(ctx.io.cwd) : undefined;
  if (dev?.platformUrl) {
    ctx.reporter.out(`${dev.platformUrl}/console`);
    ctx.reporter.line(`The console of \`ferry dev\` in ${dev.projectDir}; sign in with its FERRY_API_KEY.`);
    return;
  }
  await withProvider(ctx, args.provider, async (provider) => {
    const url = await provider.serving();
    if (!url) {
      throw new FerryError('failed', 'Nothing serves these endpoints right now', {
        hint:
          provider.name === 'local'
            ? "Start it with `ferry serve`; for `ferry dev`'s console, run this in the folder where it runs (or below it)."
            : 'Deploy first.',
      });
    }
    if (provider.name === 'local') {
      ctx.reporter.out(`${url}/console`);
      ctx.reporter.line('Sign in with your API key (FERRY_API_KEY, or one from `ferry keys create`).');
      return;
    }
    // Loaded only here (Fastify): the local console needs no proxy, and no other command does.
    const { startConsoleProxy } = await import('../console-proxy.js');
    const proxy = await startConsoleProxy({
      origin: ManageClient.originOf(url),
      consoleDir: path.join(installRoot(), 'console'),
      host: args.host,
      port: args.port,
    });
    ctx.reporter.out(`${proxy.url}/console`);
    ctx.reporter.line(`Console for ${ManageClient.originOf(url)}; sign in with an API key. Ctrl+C stops it.`);
    await untilStopped();
    await proxy.close();
  });
}

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
  handler: (argv) => consoleCommandHandler(ctx, argv as unknown as ConsoleArgs),
});
