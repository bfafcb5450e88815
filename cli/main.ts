/**
 * The `ferry` entry point. Errors are caught here, once: `Error: <message>` and `  hint: <hint>` on
 * stderr, exit code from core/errors.ts (2 usage, 1 failure) — never a stack trace, unless
 * FERRY_DEBUG is set.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';
import { exitCode, FerryError, usage } from '../core/errors.js';
import { commandTable } from './commands/index.js';
import { flagErrorOf } from './commands/shared.js';
import { installRoot, providerNames } from './config.js';
import { createContext } from './context.js';
import { shellLine } from './deploy/plan.js';
import { type CliIo, processIo } from './io.js';
import { awsAccessHint, isAwsSdkError } from './providers/aws/access.js';

function version(): string {
  try {
    return (JSON.parse(readFileSync(path.join(installRoot(), 'package.json'), 'utf8')) as { version: string })
      .version;
  } catch {
    return 'unknown';
  }
}

/**
 * What yargs hands a .fail() handler as its third argument: its usage instance (typed as Argv in
 * @types/yargs), which holds the failing command's usage line and subcommands. Read defensively.
 */
interface FailContext {
  getUsage?: () => Array<[string, string]>;
  getCommands?: () => Array<[string, ...unknown[]]>;
}

/**
 * yargs' "Not enough non-option arguments: got 0, need at least 1" names neither the command nor what
 * it lacks. The usage line yargs builds from the command's definition ("$0 env create <name>") names
 * both, so the error can say "`ferry env create` needs <name>". Undefined when the message is another
 * one (or yargs', localized) or the usage line does not tell, so the caller keeps yargs' own message.
 */
function missingPositional(message: string, context: unknown): FerryError | undefined {
  const counts = /^Not enough non-option arguments: got (\d+), need at least \d+$/.exec(message);
  const words = usageWords(context);
  if (!counts || !words) return undefined;
  const command = failingCommand(context).join(' ');
  const missing = words.filter((w) => w.startsWith('<')).slice(Number(counts[1]));
  if (command === '' || missing.length === 0) return undefined;
  const help = helpHint(context);
  // A command group (`env <command>`): its subcommands are the choices.
  const subcommands = subcommandsOf(context);
  if (subcommands.length > 0 && missing.length === 1 && missing[0] === '<command>') {
    return usage(`\`ferry ${command}\` needs a command: ${subcommands.join(', ')}`, help);
  }
  return usage(`\`ferry ${command}\` needs ${missing.join(' ')}`, help);
}

/**
 * A word that is not a command of the group it was typed in. yargs says only "Did you mean list?"
 * (or the group's own "Choose a command" line), and the first word of the command line is not the
 * unknown one in `ferry env lst`: the group's usage line ("$0 env <command>") tells how many words
 * named the group, and the next positional (a word no option took as its value: wordsOf) is the
 * unknown one, `lst` in `ferry env --app shop lst` too. Undefined when that word is a command
 * of the group, or the failing command has no subcommands (a leaf's "Unknown argument").
 */
function unknownCommand(message: string, context: unknown, args: readonly string[]): FerryError | undefined {
  const choices = subcommandsOf(context);
  if (choices.length === 0) return undefined;
  const group = failingCommand(context);
  const words = wordsOf(args)
    .filter((w) => w.option === undefined)
    .map((w) => w.word);
  if (group.some((w, i) => words[i] !== w)) return undefined;
  const word = words[group.length];
  if (word === undefined || choices.includes(word)) return undefined;
  const where = group.length > 0 ? ` for \`ferry ${group.join(' ')}\`` : '';
  const suggestion = message.startsWith('Did you mean') ? `${message} ` : '';
  return usage(`Unknown command '${word}'${where}`, `${suggestion}${helpHint(context)}`);
}

/**
 * A command of the failing group that yargs took as the value of an option typed before it:
 * `ferry app --json list` is `json: 'list'` and no command, since the group does not know that its
 * commands' --json takes no value (each command declares its own options; yargs reads an option it
 * does not know as taking the next word). Nor can anything here know it, so the command line is
 * refused, naming the form that works: the command first, then its options (`ferry app list --json`).
 * Undefined when no command word was taken so.
 */
function commandTakenAsValue(context: unknown, args: readonly string[]): FerryError | undefined {
  const choices = subcommandsOf(context);
  const group = failingCommand(context);
  const words = wordsOf(args);
  const free = words.filter((w) => w.option === undefined);
  if (choices.length === 0 || group.some((w, i) => free[i]?.word !== w)) return undefined;
  // The words between the group's own and the next word no option took: where its command goes.
  const afterGroup = words.slice(group.length === 0 ? 0 : words.indexOf(free[group.length - 1]!) + 1);
  const next = afterGroup.findIndex((w) => w.option === undefined);
  const taken = afterGroup
    .slice(0, next < 0 ? undefined : next)
    .find((w) => w.option !== undefined && choices.includes(w.word));
  if (!taken?.option) return undefined;
  // The form that works: every word no option took, the command among them, then the options.
  const first = new Set(words.filter((w) => w === taken || w.option === undefined).map((w) => w.index));
  const reordered = [...args.filter((_, i) => first.has(i)), ...args.filter((_, i) => !first.has(i))];
  const where = group.length > 0 ? ` of \`ferry ${group.join(' ')}\`` : '';
  return usage(
    `'${taken.word}' after ${taken.option} was read as the value of ${taken.option}, not as the command${where}`,
    `Give the command before its options: \`ferry ${shellLine(reordered)}\`. ${helpHint(context)}`,
  );
}

/** The options yargs knows everywhere that take no value. */
const noValue = new Set(['--help', '-h', '--version']);

/**
 * The words of a command line that are no option, as yargs reads them where a command group fails:
 * there it knows only the global options, and an option it does not know takes the next word as its
 * value (`--app shop`), unless written `--app=shop` or `--no-app`, or it is --help or --version. Each
 * word with its index in `args`, and the option that took it, if one did.
 */
function wordsOf(args: readonly string[]): Array<{ word: string; index: number; option?: string }> {
  const isOption = (arg: string | undefined) => arg !== undefined && /^-./.test(arg);
  return args.flatMap((word, index) => {
    if (isOption(word)) return [];
    const before = args[index - 1];
    const takes = isOption(before) && !/=|^--no-/.test(before!) && !noValue.has(before!);
    return [takes ? { word, index, option: before! } : { word, index }];
  });
}

/**
 * The words of the failing command's usage line after `$0` (`['env', 'create', '<name>']`): the
 * command's name and its positionals. Undefined when yargs gives no such line.
 */
function usageWords(context: unknown): string[] | undefined {
  const ctx = context as FailContext | undefined;
  const usageLine = typeof ctx?.getUsage === 'function' ? ctx.getUsage()[0]?.[0] : undefined;
  if (typeof usageLine !== 'string' || !usageLine.startsWith('$0 ')) return undefined;
  return (usageLine.slice(3).split('\n')[0] ?? '')
    .trim()
    .split(/\s+/)
    .filter((w) => w !== '');
}

/** The words that name the failing command (`['env', 'create']`), from its usage line; [] at the top. */
function failingCommand(context: unknown): string[] {
  return (usageWords(context) ?? []).filter((w) => !/^[<[]/.test(w));
}

/** The failing command's subcommands (`ferry env`'s list, create, ...); [] for a leaf. */
function subcommandsOf(context: unknown): string[] {
  const ctx = context as FailContext | undefined;
  return typeof ctx?.getCommands === 'function' ? ctx.getCommands().map(([c]) => c.split(' ')[0]!) : [];
}

/** The hint of a usage error: the failing command's own help. */
function helpHint(context: unknown): string {
  const command = failingCommand(context);
  return `Run \`ferry ${[...command, '--help'].join(' ')}\`.`;
}

/**
 * yargs' "Unknown argument: bogus" (or "Unknown arguments: a, b") with each flag as it was typed
 * (`--bogus`, `-b`); other messages as they are.
 */
function withFlagsAsTyped(message: string, args: readonly string[]): string {
  const unknown = /^(Unknown arguments?): (.*)$/s.exec(message);
  if (!unknown) return message;
  const typed = unknown[2]!.split(', ').map((name) => {
    const kebab = name.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
    const found = args.find((a) =>
      [name, kebab].some((n) => a === `--${n}` || a.startsWith(`--${n}=`) || a === `-${n}`),
    );
    return found ? found.split('=')[0]! : name;
  });
  return `${unknown[1]}: ${typed.join(', ')}`;
}

/** Runs the CLI; resolves with the exit code instead of exiting (tests call it in-process). */
export async function run(args: string[], io: CliIo = processIo()): Promise<number> {
  const ctx = createContext(io);
  const parser = yargs(args)
    .scriptName('ferry')
    .usage(
      '$0 <command> [options]\n\nRun Python functions as serverless endpoints: on this machine, or in your AWS account.',
    )
    .option('provider', {
      type: 'string',
      choices: providerNames as unknown as string[],
      global: true,
      describe: 'Where endpoints live',
      defaultDescription: 'local (or "provider" in .ferry/config.json)',
    })
    .command(commandTable(ctx))
    .demandCommand(1, 'Choose a command')
    .strict()
    .recommendCommands()
    .example('$0 init my-project', 'Create a project with example endpoints')
    .example('$0 dev', 'Serve the project at http://localhost:8888 with Swagger UI at /docs')
    .example('$0 deploy --env staging', 'Build and deploy to the staging environment')
    .example('$0 undeploy list', 'Show deployed endpoints')
    .epilogue('Exit codes: 0 ok, 1 failure, 2 usage. stdout carries data (--json), stderr progress.')
    .help()
    .alias('h', 'help')
    .version(version())
    .wrap(Math.min(110, process.stdout.columns || 100))
    .exitProcess(false)
    .fail((message, error, context) => {
      // yargs's own errors (a coerce that threw, cli/commands/shared.ts portFlag) are the user's to fix.
      if (error?.name === 'YError')
        throw flagErrorOf(error.message) ?? usage(error.message, helpHint(context));
      if (error) throw error;
      const taken = commandTakenAsValue(context, args);
      if (taken) throw taken;
      const missing = message ? missingPositional(message, context) : undefined;
      if (missing) throw missing;
      const unknown = message ? unknownCommand(message, context, args) : undefined;
      if (unknown) throw unknown;
      throw usage(message ? withFlagsAsTyped(message, args) : 'Invalid command line', helpHint(context));
    });
  try {
    await parser.parseAsync();
    return 0;
  } catch (error) {
    const code = exitCode(error);
    if (FerryError.is(error)) {
      io.stderr.write(`Error: ${error.message}\n`);
      if (error.hint) io.stderr.write(`  hint: ${error.hint}\n`);
    } else {
      io.stderr.write(`Error: ${(error as Error)?.message ?? String(error)}\n`);
      // An AWS call that never reached AWS, or was refused its credentials, is the machine's or the
      // account's to fix, not a bug of Ferry's.
      const awsHint = isAwsSdkError(error) ? awsAccessHint(error) : undefined;
      if (awsHint) io.stderr.write(`  hint: ${awsHint}\n`);
      else if (io.env.FERRY_DEBUG) io.stderr.write(`${(error as Error)?.stack ?? ''}\n`);
      else io.stderr.write('  hint: this looks like a bug in Ferry; set FERRY_DEBUG=1 for details.\n');
    }
    return code;
  }
}

export async function main(): Promise<void> {
  const code = await run(hideBin(process.argv));
  process.exitCode = code;
  // Long-running commands resolve only after their servers closed, so the process normally ends here
  // by itself. A stray timer or socket (an SDK's keep-alive) must not keep it alive: past a grace
  // period it is ended anyway. unref: the grace timer itself keeps nothing alive.
  setTimeout(() => process.exit(code), 1_000).unref();
}
