/**
 * The `ferry` entry point. Errors are caught here, once: `Error: <message>` and `  hint: <hint>` on
 * stderr, exit code from core/errors.ts (2 usage, 1 failure) — never a stack trace, unless
 * FERRY_DEBUG is set.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import yargs, { type Options } from 'yargs';
import { hideBin } from 'yargs/helpers';
import { exitCode, FerryError, usage } from '../core/errors.js';
import { commandTable } from './commands/index.js';
import { examples, flagErrorOf } from './commands/shared.js';
import { installRoot, providerNames, shellLine } from './config.js';
import { createContext } from './context.js';
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
  const command = failingCommand(context);
  const missing = words.filter((w) => w.startsWith('<')).slice(Number(counts[1]));
  if (missing.length === 0) return undefined;
  const help = helpHint(context);
  // A command group (`env <command>`, or `ferry` itself): its subcommands are the choices.
  const subcommands = subcommandsOf(context);
  if (subcommands.length > 0 && missing.length === 1 && missing[0] === '<command>') {
    return usage(needsCommand(command, subcommands), help);
  }
  if (command.length === 0) return undefined;
  return usage(`\`ferry ${command.join(' ')}\` needs ${missing.join(' ')}`, help);
}

/** What a group given no command says, wherever that is found: "`ferry env` needs a command: list, …". */
function needsCommand(group: readonly string[], subcommands: readonly string[]): string {
  return `\`${['ferry', ...group].join(' ')}\` needs a command: ${subcommands.join(', ')}`;
}

/**
 * A word that is not a command of the group it was typed in. yargs says only "Did you mean list?"
 * (or the group's own "Choose a command" line), and the first word of the command line is not the
 * unknown one in `ferry env lst`: the next word no option took after the group's own (afterGroup)
 * is, `lst` in `ferry env --app shop lst` and in `ferry env --json lst` too. Undefined when that word
 * is a command of the group, or the failing command has no subcommands (a leaf's "Unknown argument").
 */
function unknownCommand(
  context: unknown,
  args: readonly string[],
  rules: OptionRules,
): FerryError | undefined {
  const choices = subcommandsOf(context);
  const word = afterGroup(context, args, rules.declared)?.find((w) => w.option === undefined)?.word;
  if (choices.length === 0 || word === undefined || choices.includes(word)) return undefined;
  return notACommand(word, failingCommand(context), choices, helpHint(context));
}

/**
 * "Unknown command 'lst' for `ferry env`", with yargs' "Did you mean list?" where a command is close
 * and `hint` after it. `also` names what else is wrong on the same line (an unknown option).
 */
function notACommand(
  word: string,
  group: readonly string[],
  choices: readonly string[],
  hint: string,
  also = '',
): FerryError {
  const where = group.length > 0 ? ` for \`ferry ${group.join(' ')}\`` : '';
  const close = recommendation(word, choices);
  return usage(
    `Unknown command '${word}'${where}${also}`,
    `${close ? `Did you mean ${close}? ` : ''}${hint}`,
  );
}

/**
 * The command yargs' own "Did you mean list?" names for a word among the group's commands, asked of a
 * parser that knows only their names: the failing parse recommends nothing where it read the word as
 * an option's value (`ferry env --json lst`). Undefined when no command is close.
 */
function recommendation(word: string, choices: readonly string[]): string | undefined {
  let said: string | undefined;
  yargs([word])
    .command(choices.map((command) => ({ command, describe: false as const, handler: () => {} })))
    .recommendCommands()
    .exitProcess(false)
    .fail((message) => {
      said ??= message;
    })
    .parse();
  const close = /^Did you mean (.+)\?$/.exec(said ?? '')?.[1];
  return close !== undefined && choices.includes(close) ? close : undefined;
}

/**
 * Options that no command below the failing group declares (`--bogus` in `ferry env --bogus lst`),
 * named as yargs names them on a command that does not take them ("Unknown argument: --bogus"), so
 * the line says the same wherever the option was typed: `ferry env --bogus list` as `ferry env list
 * --bogus`. An unknown option takes no word, so the command after it is found too, and the one that
 * does not take the option is the one whose help the hint gives (`ferry app --force list`: list
 * takes no --force, app delete does). A word that is not a command is named with it (`ferry env
 * --bogus lst` as `ferry env lst --bogus`), and that word is read as the command it is close to, so an
 * option that command does not take is named too (`ferry --force env lst`: env list takes no --force,
 * though env delete does). On a command with no subcommands it comes before yargs'
 * "Not enough non-option arguments" too, which names no option (`ferry images --bogus`; in `ferry
 * images --bogus build` yargs took `build` as --bogus's value). Undefined when every option is
 * declared where it was typed.
 */
function unknownOption(
  context: unknown,
  args: readonly string[],
  rules: OptionRules,
): FerryError | undefined {
  const group = failingCommand(context);
  const after = afterGroup(context, args, (option) => rules.known(option) && rules.declared(option));
  if (!after) return undefined;
  const walked = walk(
    rules.commands,
    after.filter((w) => w.option === undefined).map((w) => w.word),
  );
  const last = walked.path.at(-1);
  const choices = last?.commands ?? rules.commands;
  // A mistyped command is read as the one it is close to (`lst` as list): with the word corrected,
  // the line would still be refused for an option that one does not take (`ferry --force env lst`).
  const close =
    walked.stray === undefined
      ? undefined
      : recommendation(
          walked.stray,
          choices.map((c) => c.words[0]!),
        );
  const meant = choices.find((c) => c.words[0] === close) ?? last;
  const scope = meant ? [meant] : rules.commands;
  const options = args.slice(0, endOfOptions(args)).filter((a) => /^-[^-\d]|^--[^-]/.test(a));
  const unknown = [...new Set(options.filter((o) => !rules.known(o, scope)).map((o) => o.split('=')[0]!))];
  if (unknown.length === 0) return undefined;
  const named = `argument${unknown.length > 1 ? 's' : ''}`;
  const command = [...group, ...walked.path.map((c) => c.words[0]!)];
  const help = `Run \`ferry ${[...command, '--help'].join(' ')}\`.`;
  if (walked.stray !== undefined) {
    const names = choices.map((c) => c.words[0]!);
    return notACommand(walked.stray, command, names, help, `, and unknown ${named} ${unknown.join(', ')}`);
  }
  return usage(`Unknown ${named}: ${unknown.join(', ')}`, help);
}

/**
 * A command typed after `--` (`ferry -- env list`, `ferry env -- list`): yargs reads every word after
 * `--` as a positional, never as a command, so the group that wants one gets none (and `ferry` itself,
 * whose demandCommand counts those words, would run nothing and exit 0). The hint gives the line with
 * `--` left out, the command first and the options typed before `--` after it, where that line names a
 * command that takes them. Undefined when a command word comes before `--`, no word after it, or the
 * failing command has no subcommands (argumentsAfterEndOfOptions).
 */
function commandAfterEndOfOptions(
  group: readonly string[],
  args: readonly string[],
  rules: OptionRules,
  help: string,
): FerryError | undefined {
  const end = endOfOptions(args);
  const after = args.slice(end + 1);
  if (after.length === 0 || rules.commands.length === 0) return undefined;
  const before = args.slice(0, end);
  const free = wordsOf(before, rules.declared).filter((w) => w.option === undefined);
  if (free.length > group.length) return undefined;
  const groupWords = new Set(free.map((w) => w.index));
  const options = before.filter((_, i) => !groupWords.has(i));
  const walked = walk(rules.commands, after);
  const last = walked.path.at(-1);
  const positionals = last?.words.slice(1) ?? [];
  const works =
    last !== undefined &&
    walked.stray === undefined &&
    last.commands.length === 0 &&
    after.every((w) => !w.startsWith('-')) &&
    (walked.rest.length <= positionals.length || positionals.some((w) => w.includes('..'))) &&
    options.every((o) => !o.startsWith('-') || rules.known(o, [last]));
  const form = works
    ? `Leave out --: \`ferry ${shown([...group, ...after, ...demandedBy(walked).map((name) => ({ fill: name.toUpperCase() })), ...options])}\`. `
    : '';
  const where = group.length > 0 ? ` of \`ferry ${group.join(' ')}\`` : '';
  return usage(`'${after[0]}' after -- was read as an argument, not as a command${where}`, `${form}${help}`);
}

/**
 * Words after `--` on a command that has no commands of its own (`ferry env create -- x`). No ferry
 * command takes any, and yargs fills no positional from them: it said `<name>` was missing though the
 * user typed one, and dropped a word after the positionals unsaid (`ferry env create staging -- prod`
 * created staging). Refused before anything runs; the hint gives the line without `--` where that
 * line works: each word fills a positional left empty, and none starts with '-' (yargs would read it
 * as an option, and no name, id or project starts with one). Undefined when no word follows `--`, help
 * was asked for, or the words before it name no such command (a group's command after `--` is
 * commandAfterEndOfOptions's; a word that names nothing is yargs').
 */
function argumentsAfterEndOfOptions(args: readonly string[], rules: OptionRules): FerryError | undefined {
  const end = endOfOptions(args);
  const after = args.slice(end + 1);
  const before = args.slice(0, end);
  if (after.length === 0 || before.some((a) => /^(-h|--help|--version)$/.test(a))) return undefined;
  const words = wordsOf(before, rules.declared);
  const walked = walk(
    rules.commands,
    words.filter((w) => w.option === undefined).map((w) => w.word),
  );
  const last = walked.path.at(-1);
  if (last === undefined || walked.stray !== undefined || last.commands.length > 0) return undefined;
  const command = walked.path.map((c) => c.words[0]!);
  const named = `\`ferry ${command.join(' ')}\``;
  const positionals = last.words.slice(1);
  const empty = positionals.slice(walked.rest.length);
  const help = `Run \`ferry ${[...command, '--help'].join(' ')}\`.`;
  if (empty.length === 0) {
    const takes =
      positionals.length === 0 ? 'takes no arguments' : `takes no more than ${positionals.join(' ')}`;
    return usage(`'${after[0]}' after -- was read as an argument, and ${named} ${takes}`, help);
  }
  const message = `'${after[0]}' after -- was read as an argument, not as the ${empty[0]} of ${named}`;
  if (after.some((w) => w.startsWith('-'))) return usage(message, `No ${empty[0]} starts with '-'. ${help}`);
  if (after.length > empty.length) return usage(message, help);
  const options = before.filter((_, i) => !words.some((w) => w.index === i && w.option === undefined));
  return usage(
    message,
    `Leave out --: \`ferry ${shown([...command, ...walked.rest, ...after, ...options])}\`. ${help}`,
  );
}

/** Where a command line's options end: at `--`, after which every word is a positional. */
function endOfOptions(args: readonly string[]): number {
  const end = args.indexOf('--');
  return end === -1 ? args.length : end;
}

/**
 * The commands `words` name from `commands` down (`env`, then `list`), the word that names none where
 * a group wants one (`lst`), and the words left for the last command's positionals.
 */
function walk(
  commands: readonly CommandDeclaration[],
  words: readonly string[],
): { path: CommandDeclaration[]; stray?: string; rest: string[] } {
  const path: CommandDeclaration[] = [];
  let choices = commands;
  for (const [i, word] of words.entries()) {
    if (choices.length === 0) return { path, rest: words.slice(i) };
    const next = choices.find((c) => c.words[0] === word);
    if (!next) return { path, stray: word, rest: words.slice(i + 1) };
    path.push(next);
    choices = next.commands;
  }
  return { path, rest: [] };
}

/**
 * A command of the failing group that yargs took as the value of an option typed before it. Where a
 * group fails yargs knows only the group's own options: it reads any other as taking the next word,
 * so `ferry app --json list` is `json: 'list'` and no command, though the group's commands declare
 * --json as taking none (OptionRules). The command line is refused, naming the form that works: the
 * command first, then its options (`ferry app list --json`). An option that does take a value keeps
 * it (`ferry env --app list lst`: the app 'list', then the command), unless no word is left for the
 * command (`ferry env --app list`): then the form that works gives the option a value to fill in, its
 * choices where it has some (`--provider local|aws`). Where the command is a group, the form names its
 * command too: the one the user meant (`ferry --json env lst`: `ferry env list --json`), or each one
 * that takes the options when none was typed (`ferry --json keys`). Undefined when no command word
 * was taken so.
 */
function commandTakenAsValue(
  context: unknown,
  args: readonly string[],
  rules: OptionRules,
): FerryError | undefined {
  const choices = subcommandsOf(context);
  const after = afterGroup(context, args, rules.declared);
  if (choices.length === 0 || !after) return undefined;
  const command = after.find((w) => w.option === undefined);
  const taken = command
    ? { ...command, option: wordsOf(args, rules.yargs).find((w) => w.index === command.index)?.option }
    : after.find((w) => w.option !== undefined && choices.includes(w.word));
  if (!taken?.option || !choices.includes(taken.word)) return undefined;
  const option = taken.option;
  const group = failingCommand(context);
  // The form that works: the words no option took, the command among them (or after them), a value
  // to fill in for each positional it demands that no word gives, then the options with their
  // values, a value to fill in where the command was one.
  const free = new Set(
    wordsOf(args, rules.declared)
      .filter((w) => w.option === undefined)
      .map((w) => w.index),
  );
  const options = args.flatMap<Shown>((arg, i) => {
    if (free.has(i)) return [];
    return command || i !== taken.index ? [arg] : [{ fill: rules.placeholder(option) }];
  });
  const words = [...args.filter((_, i) => free.has(i)), ...(command ? [] : [taken.word])];
  const walked = walk(rules.commands, words.slice(group.length));
  const formOf = (commandWords: readonly string[], demanded: readonly string[]) =>
    `\`ferry ${shown([...commandWords, ...demanded.map((name) => ({ fill: name.toUpperCase() })), ...options])}\``;
  // A form names a command that takes every option typed: one that does not would refuse it.
  const typed = options.filter((o): o is string => typeof o === 'string' && /^-/.test(o));
  const takesTyped = (c: CommandDeclaration) => typed.every((o) => rules.known(o, [c]));
  const inGroup = [...group, ...walked.path.map((c) => c.words[0]!)];
  const groupHelp = `Run \`ferry ${[...inGroup, '--help'].join(' ')}\`.`;
  const subchoices = walked.path.at(-1)!.commands.map((c) => c.words[0]!);
  if (walked.stray !== undefined) {
    // A group's command the user mistyped (`lst`): the form that works has the one it is close to.
    const stray = words.lastIndexOf(walked.stray);
    const close = recommendation(walked.stray, subchoices);
    const corrected = words.map((w, i) => (i === stray ? (close ?? w) : w));
    const meant = walk(rules.commands, corrected.slice(group.length));
    const form =
      close !== undefined && takesTyped(meant.path.at(-1)!)
        ? `Give the command before its options: ${formOf(corrected, demandedBy(meant))}. `
        : '';
    return notACommand(walked.stray, inGroup, subchoices, `${form}${groupHelp}`);
  }
  const last = walked.path.at(-1)!;
  if (last.commands.length > 0) {
    // A group and no command of it: each of its commands that takes the options typed.
    const forms = last.commands
      .filter(takesTyped)
      .map((c) => formOf([...words, c.words[0]!], demandedBy({ path: [c], rest: [] })));
    return usage(
      needsCommand(inGroup, subchoices),
      forms.length > 0 ? `Give the command before its options: ${listed(forms)}. ${groupHelp}` : groupHelp,
    );
  }
  const where = group.length > 0 ? ` of \`ferry ${group.join(' ')}\`` : '';
  const form = `Give the command before its options: ${formOf(words, demandedBy(walked))}. ${helpHint(context)}`;
  // An option that takes no value took the command only because yargs did not know it: say where
  // it goes, not that 'list' was its value.
  if (!rules.declared(option))
    return usage(`${option} came before the command '${taken.word}'${where}`, form);
  return usage(
    `'${taken.word}' after ${option} was read as the value of ${option}, not as the command${where}`,
    form,
  );
}

/** "a", "a or b", "a, b or c". */
function listed(items: readonly string[]): string {
  return items.length > 1 ? `${items.slice(0, -1).join(', ')} or ${items.at(-1)}` : (items[0] ?? '');
}

/** The positionals the last command walked demands that no word left gives (`get <name>`: `['name']`). */
function demandedBy(walked: { path: CommandDeclaration[]; rest: readonly string[] }): string[] {
  const words = walked.path.at(-1)?.words.slice(1) ?? [];
  return words.flatMap((w) => /^<([^.>]+)(\.\.)?>$/.exec(w)?.[1] ?? []).slice(walked.rest.length);
}

/** A word of a suggested command line: as typed (quoted for the shell where needed), or a value to fill in. */
type Shown = string | { fill: string };

/** A suggested command line: typed words quoted for the shell, values to fill in as they are (`local|aws`). */
function shown(words: readonly Shown[]): string {
  return words.map((w) => (typeof w === 'string' ? shellLine([w]) : w.fill)).join(' ');
}

/** A word of a command line that is no option: its index in the line, and the option that took it, if one did. */
interface Word {
  word: string;
  index: number;
  option?: string;
}

/**
 * The words after the failing group's own (`shop`, taken by --app, and `lst` in `ferry env --app shop
 * lst`), as wordsOf reads them with `takesValue`: the group's words are the first ones no option
 * took. Undefined when they are not the group's (yargs failed elsewhere than where its words say).
 */
function afterGroup(
  context: unknown,
  args: readonly string[],
  takesValue: (option: string) => boolean,
): Word[] | undefined {
  const group = failingCommand(context);
  const words = wordsOf(args, takesValue);
  const free = words.filter((w) => w.option === undefined);
  if (group.some((w, i) => free[i]?.word !== w)) return undefined;
  return group.length === 0 ? words : words.slice(words.indexOf(free[group.length - 1]!) + 1);
}

/**
 * The words of a command line that are no option, each with its index in `args` and the option that
 * took it as its value, if one did: an option takes the next word unless written `--app=shop` or
 * `--no-app`, or `takesValue` says it takes none.
 */
function wordsOf(args: readonly string[], takesValue: (option: string) => boolean): Word[] {
  const isOption = (arg: string | undefined) => arg !== undefined && /^-./.test(arg);
  return args.flatMap((word, index) => {
    if (isOption(word)) return [];
    const before = args[index - 1];
    const takes = isOption(before) && !/=|^--no-/.test(before!) && takesValue(before!);
    return [takes ? { word, index, option: before! } : { word, index }];
  });
}

/** What yargs' getOptions() holds of an instance's declared options (not in @types/yargs). */
interface DeclaredOptions {
  key: Record<string, unknown>;
  boolean: string[];
  count: string[];
  alias: Record<string, string[]>;
  choices: Record<string, unknown[]>;
}

/**
 * The parts of the yargs instance that say what the failing group's commands declare: its command
 * handlers, reached through yargs' internal methods (not in @types/yargs either). Read defensively.
 */
interface YargsInstance {
  getOptions?: () => DeclaredOptions;
  getInternalMethods?: () => {
    getCommandInstance?: () => {
      getCommandHandlers?: () => Record<string, { original?: string; builder?: unknown }>;
    };
  };
}

/** A command below the failing group: its definition's words (`['get', '<name>']`), its options and its own commands. */
interface CommandDeclaration {
  words: string[];
  options: DeclaredOptions;
  commands: CommandDeclaration[];
}

/**
 * Whether an option typed before a group's command (`--app`, `-f`) takes the next word as its value,
 * read two ways. `yargs`: as yargs read it where the group failed, knowing only the group's own
 * options (the global --provider, --help); any other takes a value. `declared`: as the group's
 * commands declare it, which is what the user meant: --json and --force take none, --app takes one.
 * An option that every declaration makes a boolean (or a count) takes none; one nothing declares is
 * read as yargs reads it. `name` is an option's long name (`-a` is app), `placeholder` the value to
 * fill in for it (its choices, `local|aws`, else its name, `APP`). `known`: whether the group's own
 * options or one of `commands` (all the group's, by default) or a command below them declares it.
 * `commands`: the group's commands, each with the commands below it.
 */
interface OptionRules {
  yargs: (option: string) => boolean;
  declared: (option: string) => boolean;
  name: (option: string) => string;
  placeholder: (option: string) => string;
  known: (option: string, commands?: readonly CommandDeclaration[]) => boolean;
  commands: CommandDeclaration[];
}

/** The OptionRules of the group that failed in `parser`, from the declarations yargs holds. */
function optionRules(parser: unknown): OptionRules {
  const instance = parser as YargsInstance;
  const own = typeof instance.getOptions === 'function' ? [instance.getOptions()] : [];
  const commands = declarationsBelow(instance);
  const below = (list: readonly CommandDeclaration[]): DeclaredOptions[] =>
    list.flatMap((c) => [c.options, ...below(c.commands)]);
  const bare = (option: string) => option.replace(/^--?/, '').split('=')[0]!;
  const takesValue = (declarations: DeclaredOptions[]) => (option: string) => {
    const name = bare(option);
    const declaring = declarations.filter((d) => Object.hasOwn(d.key, name));
    return (
      declaring.length === 0 || declaring.some((d) => !d.boolean.includes(name) && !d.count.includes(name))
    );
  };
  // yargs reads --no-app as app: false and --dry-run as dryRun too; `-fa` is -f and -a.
  const declares = (d: DeclaredOptions, option: string) => {
    const name = bare(option);
    const names = /^-[^-]/.test(option) ? [...name] : [name];
    const has = (n: string) =>
      Object.hasOwn(d.key, n) ||
      Object.hasOwn(d.alias, n) ||
      Object.values(d.alias).some((a) => a.includes(n));
    return names.every((n) =>
      [n, n.replace(/^no-/, ''), n.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)].some(has),
    );
  };
  const all = [...own, ...below(commands)];
  const long = (option: string) => {
    const name = bare(option);
    for (const { alias } of all) {
      const found = Object.keys(alias).find((key) => alias[key]!.includes(name) && key.length > 1);
      if (found) return found;
    }
    return name;
  };
  return {
    yargs: takesValue(own),
    declared: takesValue(all),
    name: long,
    placeholder: (option) => {
      const name = long(option);
      const choices = all.find((d) => Array.isArray(d.choices?.[name]))?.choices[name];
      return choices ? choices.join('|') : name.toUpperCase();
    },
    known: (option, list = commands) => [...own, ...below(list)].some((d) => declares(d, option)),
    commands,
  };
}

/**
 * The commands an instance holds, each declared as yargs declares it once the command is chosen:
 * its builder run on an instance of its own, whose commands are read the same way.
 */
function declarationsBelow(instance: YargsInstance): CommandDeclaration[] {
  const handlers = instance.getInternalMethods?.().getCommandInstance?.().getCommandHandlers?.() ?? {};
  // A command's aliases name the same handler.
  return [...new Set(Object.values(handlers))].map(({ original, builder }) => {
    const probe = yargs([]);
    if (typeof builder === 'function') builder(probe);
    else if (builder && typeof builder === 'object') probe.options(builder as Record<string, Options>);
    const declared = probe as unknown as Required<YargsInstance>;
    return {
      words: (original ?? '').split(' ').filter((w) => w !== ''),
      options: declared.getOptions(),
      commands: declarationsBelow(declared),
    };
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

/** The failing command's subcommands, each as the words of its definition (`['get', '<name>']`). */
function subcommandLines(context: unknown): string[][] {
  const ctx = context as FailContext | undefined;
  return typeof ctx?.getCommands === 'function' ? ctx.getCommands().map(([c]) => c.split(' ')) : [];
}

/** The failing command's subcommands (`ferry env`'s list, create, ...); [] for a leaf. */
function subcommandsOf(context: unknown): string[] {
  return subcommandLines(context).map(([name]) => name!);
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
    // yargs' own message, which missingPositional reads as any group's: "`ferry` needs a command: init, …".
    .demandCommand(1)
    // Reached only where yargs ran no command and failed nothing: words after `--`, which
    // demandCommand counts, were all the command line had.
    .check((argv) => {
      const error =
        argv.help || argv.version
          ? undefined
          : commandAfterEndOfOptions([], args, optionRules(parser), 'Run `ferry --help`.');
      if (error) throw error;
      return true;
    }, false)
    .strict()
    .recommendCommands()
    .epilogue(
      examples([
        ['$0 init my-project', 'Create a project with example endpoints'],
        ['$0 dev', 'Serve the project at http://localhost:8888 with Swagger UI at /docs'],
        ['$0 deploy --env staging', 'Build and deploy to the staging environment'],
        ['$0 undeploy list', 'Show deployed endpoints'],
      ]),
    )
    .epilogue('\nExit codes: 0 ok, 1 failure, 2 usage. stdout carries data (--json), stderr progress.')
    .help()
    .alias('h', 'help')
    .version(version())
    // A terminal's own width, else COLUMNS as shells set it (`COLUMNS=80 ferry deploy --help | less`).
    .wrap(Math.min(110, process.stdout.columns || Number(io.env.COLUMNS) || 100))
    .exitProcess(false)
    .fail((message, error, context) => {
      // yargs's own errors (a coerce that threw, cli/commands/shared.ts portFlag) are the user's to fix.
      if (error?.name === 'YError')
        throw flagErrorOf(error.message) ?? usage(error.message, helpHint(context));
      if (error) throw error;
      const rules = optionRules(parser);
      // The words after `--` are no command, and no option's value: none of these reads them.
      const options = args.slice(0, endOfOptions(args));
      // First: an option nothing declares would be refused by any form the others suggest.
      const option = unknownOption(context, options, rules);
      if (option) throw option;
      const taken = commandTakenAsValue(context, options, rules);
      if (taken) throw taken;
      // Before missingPositional: yargs lacks the command in `ferry env --json lst`, the user typed one.
      const unknown = unknownCommand(context, options, rules);
      if (unknown) throw unknown;
      const afterEnd = commandAfterEndOfOptions(failingCommand(context), args, rules, helpHint(context));
      if (afterEnd) throw afterEnd;
      const missing = message ? missingPositional(message, context) : undefined;
      if (missing) throw missing;
      throw usage(message ? withFlagsAsTyped(message, args) : 'Invalid command line', helpHint(context));
    });
  try {
    // Only a line with `--` pays for reading every command's declaration.
    const afterEnd = args.includes('--') ? argumentsAfterEndOfOptions(args, optionRules(parser)) : undefined;
    if (afterEnd) throw afterEnd;
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
  // A reader that stops early (`ferry undeploy list | head -1`) closes the pipe: what it did not read
  // is no failure of ours. Node ignores SIGPIPE, so each later write fails with EPIPE, and with no
  // listener that error crashed the CLI with a stack trace; here it ends the process quietly, as
  // SIGPIPE ends a Unix tool (stdout carries only data, written as a command ends or as `logs -f`
  // follows, so nothing is cut off halfway).
  process.stdout.on('error', (error: NodeJS.ErrnoException) => {
    if (error.code !== 'EPIPE') throw error;
    process.exit(0);
  });
  const code = await run(hideBin(process.argv));
  process.exitCode = code;
  // Long-running commands resolve only after their servers closed, so the process normally ends here
  // by itself. A stray timer or socket (an SDK's keep-alive) must not keep it alive: past a grace
  // period it is ended anyway. unref: the grace timer itself keeps nothing alive.
  setTimeout(() => process.exit(code), 1_000).unref();
}
