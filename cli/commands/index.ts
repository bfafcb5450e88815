/** The one command table. `ferry --help` lists what is here, in this order. */
import type { CommandModule } from 'yargs';
import type { CliContext } from '../context.js';
import { buildCommand } from './build.js';
import { consoleCommand } from './console.js';
import { deployCommand } from './deploy.js';
import { devCommand, runAliasCommand } from './dev.js';
import { imagesCommand } from './images.js';
import { initCommand } from './init.js';
import { logsCommand } from './logs.js';
import { appCommand, envCommand, keysCommand, undeployCommand } from './records.js';
import { sdkCommand } from './sdk.js';
import { secretsCommand } from './secrets.js';
import { quickstartCommand, serveCommand } from './serve.js';

export function commandTable(ctx: CliContext): CommandModule[] {
  return [
    initCommand(ctx),
    devCommand(ctx),
    runAliasCommand(ctx),
    buildCommand(ctx),
    deployCommand(ctx),
    envCommand(ctx),
    appCommand(ctx),
    undeployCommand(ctx),
    imagesCommand(ctx),
    logsCommand(ctx),
    consoleCommand(ctx),
    serveCommand(ctx),
    keysCommand(ctx),
    secretsCommand(ctx),
    sdkCommand(ctx),
    quickstartCommand(ctx),
  ];
}
