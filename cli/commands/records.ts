/**
 * `ferry env`, `ferry app`, `ferry undeploy`, `ferry keys`: the provider's control records — the
 * same for everyone sharing the provider, never a file on one laptop (flash kept them in
 * .flash/resources.pkl). Deleting an app or environment removes its endpoints first; if one stays,
 * the command says which and exits 1, and the app/environment record stays (flash#367).
 */
import type { Argv, CommandModule } from 'yargs';
import type { CliContext } from '../context.js';
import { approveFlag, defineCommand, examples, jsonFlag } from './shared.js';

function appFlag<T>(y: Argv<T>) {
  return y.option('app', {
    alias: 'a',
    type: 'string',
    describe: 'App name',
    defaultDescription: 'the folder name',
  });
}

const forceFlag = {
  alias: 'f',
  type: 'boolean',
  default: false,
  describe: 'Do not ask for confirmation',
} as const;

export const envCommand = (ctx: CliContext): CommandModule =>
  defineCommand({
    command: 'env <command>',
    describe: 'Manage environments of an app',
    builder: (y) =>
      y
        .command({
          command: 'list',
          describe: 'List environments',
          builder: (y2) => appFlag(y2).option('json', jsonFlag),
          handler: async (argv) => (await import('./records-run.js')).envList(ctx, argv),
        })
        .command({
          command: 'create <name>',
          describe: 'Create an environment (and the app if missing)',
          builder: (y2) => appFlag(y2).positional('name', { type: 'string', demandOption: true }),
          handler: async (argv) => (await import('./records-run.js')).envCreate(ctx, argv),
        })
        .command({
          command: 'get <name>',
          describe: 'Show an environment and its endpoints',
          builder: (y2) =>
            appFlag(y2).positional('name', { type: 'string', demandOption: true }).option('json', jsonFlag),
          handler: async (argv) => (await import('./records-run.js')).envGet(ctx, argv),
        })
        .command({
          command: 'delete <name>',
          describe: 'Delete an environment and its endpoints',
          builder: (y2) =>
            appFlag(y2).positional('name', { type: 'string', demandOption: true }).option('force', forceFlag),
          handler: async (argv) => (await import('./records-run.js')).envDelete(ctx, argv),
        })
        .demandCommand(1, 'Choose a command: list, create, get or delete')
        .epilogue(
          examples([
            ['$0 env list --json', 'Environments of this folder’s app'],
            ['$0 env delete staging --force', 'Remove staging and its endpoints'],
          ]),
        ),
    handler: () => {},
  });

export const appCommand = (ctx: CliContext): CommandModule =>
  defineCommand({
    command: 'app <command>',
    describe: 'Manage apps',
    builder: (y) =>
      y
        .command({
          command: 'list',
          describe: 'List apps',
          builder: (y2) => y2.option('json', jsonFlag),
          handler: async (argv) => (await import('./records-run.js')).appList(ctx, argv),
        })
        .command({
          command: 'create <name>',
          describe: 'Create an app',
          builder: (y2) => y2.positional('name', { type: 'string', demandOption: true }),
          handler: async (argv) => (await import('./records-run.js')).appCreate(ctx, argv),
        })
        .command({
          command: 'get <name>',
          describe: 'Show an app, its environments and endpoints',
          builder: (y2) =>
            y2.positional('name', { type: 'string', demandOption: true }).option('json', jsonFlag),
          handler: async (argv) => (await import('./records-run.js')).appGet(ctx, argv),
        })
        .command({
          command: 'delete <name>',
          describe: 'Delete an app, its environments and endpoints',
          builder: (y2) =>
            y2.positional('name', { type: 'string', demandOption: true }).option('force', forceFlag),
          handler: async (argv) => (await import('./records-run.js')).appDelete(ctx, argv),
        })
        .demandCommand(1, 'Choose a command: list, create, get or delete')
        .epilogue(
          examples([
            ['$0 app list', 'All apps with their environments'],
            ['$0 app delete old-app --force', 'Remove an app and everything in it'],
          ]),
        ),
    handler: () => {},
  });

export const undeployCommand = (ctx: CliContext): CommandModule =>
  defineCommand({
    command: 'undeploy [name]',
    describe: 'Remove deployed endpoints (`undeploy list` lists them)',
    builder: (y) =>
      y
        // Where a name is looked up (undeployApp); --all outside a project: the folder name's app.
        .option('app', {
          alias: 'a',
          type: 'string',
          describe: 'App name',
          defaultDescription: 'the folder name; for a NAME outside a project, every app',
        })
        .positional('name', { type: 'string', describe: 'Endpoint name or id, or `list`' })
        .option('env', { alias: 'e', type: 'string', describe: 'Environment (when the name is in several)' })
        .option('all', {
          type: 'boolean',
          default: false,
          describe: 'Remove every endpoint (asks you to type DELETE ALL)',
        })
        .option('everywhere', {
          type: 'boolean',
          default: false,
          describe: "With --all: every app's endpoints, not only this folder's app",
        })
        .option('force', forceFlag)
        // Removing some of an environment's endpoints deploys its stack again, with this Ferry's
        // templates: IAM changes they bring need approval as in `ferry deploy`.
        .option('yes', approveFlag)
        .option('json', jsonFlag)
        .epilogue(
          examples([
            ['$0 undeploy list', 'Endpoints of every app'],
            ['$0 undeploy cpu_worker --env staging', 'Remove one endpoint'],
            ['$0 undeploy --all --force', "Remove this folder's app's endpoints without asking"],
            ['$0 undeploy --all --everywhere', 'Remove the endpoints of every app'],
            ['$0 undeploy old_ep --env prod --force --yes', 'Remove one endpoint from CI, no terminal'],
          ]),
        ),
    handler: async (argv) => (await import('./records-run.js')).undeploy(ctx, argv),
  });

export const keysCommand = (ctx: CliContext): CommandModule =>
  defineCommand({
    command: 'keys <command>',
    describe: 'Manage API keys',
    builder: (y) =>
      y
        .command({
          command: 'create',
          describe: 'Create an API key (printed once)',
          builder: (y2) =>
            y2
              // No yargs default: with one, a bare `--name` silently became it.
              .option('name', { type: 'string', describe: 'A label', defaultDescription: 'cli' })
              .option('app', { type: 'string', describe: 'Only this app’s endpoints (default: every app)' })
              .option('env', { type: 'string', describe: 'Only this environment of --app' })
              .option('json', jsonFlag),
          handler: async (argv) => (await import('./records-run.js')).keysCreate(ctx, argv),
        })
        .command({
          command: 'list',
          describe: 'List API keys (never the keys themselves)',
          builder: (y2) => y2.option('json', jsonFlag),
          handler: async (argv) => (await import('./records-run.js')).keysList(ctx, argv),
        })
        .command({
          command: 'revoke <id>',
          describe: 'Revoke an API key',
          builder: (y2) =>
            y2.positional('id', { type: 'string', demandOption: true }).option('json', jsonFlag),
          handler: async (argv) => (await import('./records-run.js')).keysRevoke(ctx, argv),
        })
        .demandCommand(1, 'Choose a command: create, list or revoke')
        .epilogue(
          examples([
            ['$0 keys create --name ci', 'A key for CI, printed once on stdout'],
            ['$0 keys create --name shop-prod --app shop --env prod', 'A key for one app environment only'],
          ]),
        ),
    handler: () => {},
  });
