/** What every command gets: its I/O, a progress reporter, and the provider it was pointed at. */
import { usage } from '../core/errors.js';
import { type ProviderName, providerNames, readProjectConfig } from './config.js';
import { type CliIo, Reporter } from './io.js';
import { type OpenProviderOptions, openProvider } from './providers/index.js';
import type { Provider } from './providers/types.js';

export interface CliContext {
  io: CliIo;
  reporter: Reporter;
}

export function createContext(io: CliIo): CliContext {
  return { io, reporter: new Reporter(io) };
}

export function providerName(ctx: CliContext, flag: string | undefined): ProviderName {
  const name = flag ?? readProjectConfig(ctx.io.cwd).provider ?? 'local';
  if (!(providerNames as readonly string[]).includes(name)) {
    throw usage(`Unknown provider '${name}'`, `Choose one of ${providerNames.join(', ')}.`);
  }
  return name as ProviderName;
}

/** Opens the provider, runs `fn`, and closes it whatever happens. */
export async function withProvider<T>(
  ctx: CliContext,
  flag: string | undefined,
  fn: (provider: Provider) => Promise<T>,
  options: Pick<OpenProviderOptions, 'yes' | 'bootstrap' | 'alarmEmail' | 'refreshZones' | 'offline'> = {},
): Promise<T> {
  const provider = await openProvider(providerName(ctx, flag), {
    env: ctx.io.env,
    projectDir: ctx.io.cwd,
    reporter: ctx.reporter,
    io: ctx.io,
    ...options,
  });
  try {
    return await fn(provider);
  } finally {
    await provider.close();
  }
}
