/** Picks the provider: `--provider`, then the project's .ferry/config.json, then local. */
import { FerryError } from '../../core/errors.js';
import { ferryHome, type ProviderName } from '../config.js';
import { LocalProvider } from './local.js';
import type { Provider } from './types.js';

export function openProvider(
  name: ProviderName,
  options: { env: NodeJS.ProcessEnv; projectDir: string },
): Provider {
  if (name === 'aws') {
    throw new FerryError('failed', 'The AWS provider is not available in this version of Ferry', {
      hint: 'It arrives with the infra work (CDK stacks); use --provider local meanwhile.',
    });
  }
  return new LocalProvider({
    home: ferryHome(options.env),
    env: options.env,
    projectDir: options.projectDir,
  });
}
