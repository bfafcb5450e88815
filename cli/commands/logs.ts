/**
 * `ferry logs ENDPOINT [--job ID] [--follow] [--since 10m] [--json]`: an endpoint's log lines (its
 * jobs' and its workers' own), or one job's, through the management API (docs/observability.md): of
 * the `ferry dev` running in this folder, or of the platform serving FERRY_HOME (AWS: the account's).
 * stdout carries the lines (JSON lines with --json); --follow polls for new ones until Ctrl+C.
 */
import type { CommandModule } from 'yargs';
import type { CliContext } from '../context.js';
import type { LogsArgs } from './logs-run.js';
import { examples, jsonFlag } from './shared.js';

export const logsCommand = (ctx: CliContext): CommandModule => ({
  command: 'logs <endpoint>',
  describe: "Show an endpoint's log lines (its jobs' output and its workers' own)",
  builder: (y) =>
    y
      .positional('endpoint', { type: 'string', describe: 'Endpoint id or name' })
      .option('job', { type: 'string', describe: "Only this job's lines" })
      .option('follow', { alias: 'f', type: 'boolean', default: false, describe: 'Keep printing new lines' })
      .option('since', {
        type: 'string',
        // `--since -5m` is read as its value (5m ago), not as the flags -5 and -m.
        requiresArg: true,
        describe: 'Only lines from this far back (10m, 2h, 1d) or this date',
      })
      .option('app', { type: 'string', describe: 'Pick the endpoint of this app when names repeat' })
      .option('env', { type: 'string', describe: 'Pick the endpoint of this environment when names repeat' })
      .option('poll-ms', { type: 'number', default: 2_000, hidden: true })
      .option('json', {
        ...jsonFlag,
        // A stream: one object per log line, printed as it comes (--follow), not one document.
        describe: 'Print JSON Lines (one object per line) on stdout',
      })
      .epilogue(
        examples([
          ['$0 logs hello --job 3f2a…', "One job's output"],
          ['$0 logs hello -f --since 10m', 'The last ten minutes, then follow'],
        ]),
      ),
  handler: async (argv) => (await import('./logs-run.js')).logs(ctx, argv as unknown as LogsArgs),
});
