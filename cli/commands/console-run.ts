/** What `ferry console` runs (cli/commands/console.ts defines the command): loaded when it runs. */
import path from 'node:path';
import { FerryError } from '../../core/errors.js';
import { installRoot } from '../config.js';
import type { CliContext } from '../context.js';
import { runningDevAbove } from '../dev/lock.js';
import { ManageClient } from '../manage-client.js';
import { providerName, withProvider } from '../providers/index.js';
import { untilStopped } from './serve-run.js';

export interface ConsoleArgs {
  provider?: string;
  host: string;
  port: number;
}

export async function consoleCommandHandler(ctx: CliContext, args: ConsoleArgs): Promise<void> {
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
