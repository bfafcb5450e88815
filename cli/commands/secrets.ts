/**
 * `ferry secrets set|list|delete`: values for the names endpoints list in `secrets=`
 * (docs/security.md). A value is read from stdin or a prompt that does not echo — never from argv,
 * where it would land in shell history and `ps` — and no command ever prints one.
 */
import type { ECSClient } from '@aws-sdk/client-ecs';
import type { SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import type { Argv, CommandModule } from 'yargs';
import type { ControlStore, StartFailureRecord } from '../../core/ports.js';
import type { CliContext } from '../context.js';
import { examples, jsonFlag } from './shared.js';

/** The records `secrets` reads on AWS: the app's environments, and failing verdicts to clear. */
export type FailingVerdicts = Pick<ControlStore, 'listEndpoints' | 'listEnvironments'> &
  Pick<StartFailureRecord, 'startFailures' | 'clearStartFailures'>;

export interface SecretsCommandOptions {
  /** The Secrets Manager client for `--provider aws` (tests inject one). */
  awsClient?: () => Pick<SecretsManagerClient, 'send'>;
  /** The platform's control records for `--provider aws` (tests inject DynamoDB Local's). */
  awsControl?: () => FailingVerdicts;
  /** The ECS client that restarts tasks after `secrets set --provider aws` (tests inject one). */
  awsEcs?: () => Pick<ECSClient, 'send'>;
}

function scopeFlags<T>(y: Argv<T>) {
  return y
    .option('app', { alias: 'a', type: 'string', describe: 'App name (default: this folder’s app)' })
    .option('env', {
      alias: 'e',
      type: 'string',
      describe:
        'Environment (default: the one `ferry deploy` would pick: the app’s only one, else production)',
    });
}

export const secretsCommand = (ctx: CliContext, options: SecretsCommandOptions = {}): CommandModule => ({
  command: 'secrets <command>',
  describe: 'Manage endpoint secrets (values never printed)',
  builder: (y) =>
    y
      .command({
        command: 'set <name>',
        describe: 'Set a secret from stdin or a prompt (never from the command line)',
        builder: (y2) =>
          scopeFlags(y2.positional('name', { type: 'string', demandOption: true }))
            .option('restart', {
              type: 'boolean',
              default: true,
              describe:
                'On AWS, restart the tasks of endpoints that use the secret so they read the new value (--no-restart: they read it when they next start)',
            })
            .option('json', jsonFlag),
        handler: async (argv) => (await import('./secrets-run.js')).secretsSet(ctx, argv, options),
      })
      .command({
        command: 'list',
        describe:
          'List secret names (never values); on AWS a set or delete may take up to five minutes to show (ListSecrets is eventually consistent)',
        builder: (y2) => scopeFlags(y2).option('json', jsonFlag),
        handler: async (argv) => (await import('./secrets-run.js')).secretsList(ctx, argv, options),
      })
      .command({
        command: 'delete <name>',
        describe: 'Delete a secret',
        builder: (y2) =>
          scopeFlags(y2.positional('name', { type: 'string', demandOption: true })).option('json', jsonFlag),
        handler: async (argv) => (await import('./secrets-run.js')).secretsDelete(ctx, argv, options),
      })
      .demandCommand(1, 'Choose a command: set, list or delete')
      .epilogue(
        examples([
          ['printf %s "$HF_TOKEN" | $0 secrets set HF_TOKEN --env prod', 'Set a secret from stdin'],
          ['$0 secrets list --env prod', 'Names only'],
        ]),
      ),
  handler: () => {},
});
