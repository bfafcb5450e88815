/** Flags that several commands share, declared once. */
import type { Argv, CommandModule } from 'yargs';
import { type FerryError, usage } from '../../core/errors.js';
import { pythonVersions } from '../../core/python-versions.js';
import type { BuildOptions } from '../build/index.js';
import { allowedOrigin } from '../dev/site-guard.js';

export function buildFlags<T>(y: Argv<T>) {
  // yargs reads `--no-deps` as `deps: false` (boolean negation), so `deps` must be a known option too,
  // or .strict() (cli/main.ts) rejects `--no-deps` as "Unknown argument: deps". Hidden: help documents
  // `--no-deps`; buildOptionsFrom reads both.
  return y
    .option('no-deps', {
      type: 'boolean',
      default: false,
      describe: 'Skip transitive dependencies during install',
    })
    .option('deps', { type: 'boolean', hidden: true })
    .option('exclude', {
      type: 'string',
      describe: 'Packages to leave out of the artifact (comma-separated)',
    })
    .option('output', {
      alias: 'o',
      type: 'string',
      default: 'artifact.tar.gz',
      describe: 'Artifact archive name (.tar.gz or .tgz; a bare name goes under .ferry/)',
    })
    .option('python-version', {
      type: 'string',
      choices: pythonVersions as unknown as string[],
      describe: 'Worker Python version; overrides python_version declarations and local detection',
    })
    .option('pip-arg', {
      type: 'string',
      array: true,
      hidden: true,
      describe: 'Extra pip argument (repeatable)',
    })
    .option('max-artifact-bytes', { type: 'number', hidden: true, describe: 'Artifact size limit (tests)' });
}

/** The flags of buildFlags as a handler's argv holds them (plus `deps`, from `--no-deps`). */
export interface BuildArgv {
  'no-deps'?: boolean | undefined;
  deps?: boolean | undefined;
  exclude?: string | undefined;
  output?: string | undefined;
  'python-version'?: string | undefined;
  'pip-arg'?: string[] | undefined;
  'max-artifact-bytes'?: number | undefined;
}

/** yargs turns `--no-deps` into `deps: false`; both spellings are read. */
export function buildOptionsFrom(argv: BuildArgv, env: NodeJS.ProcessEnv): Omit<BuildOptions, 'projectDir'> {
  const exclude =
    typeof argv.exclude === 'string'
      ? argv.exclude
          .split(',')
          .map((s) => s.trim())
          .filter(Boolean)
      : [];
  const fromEnv = env.FERRY_MAX_ARTIFACT_BYTES;
  let maxArtifactBytes = argv['max-artifact-bytes'];
  if (maxArtifactBytes === undefined && fromEnv !== undefined) maxArtifactBytes = Number(fromEnv);
  if (maxArtifactBytes !== undefined && (!Number.isFinite(maxArtifactBytes) || maxArtifactBytes <= 0)) {
    throw usage(
      `The artifact size limit must be a positive number of bytes, got ${String(maxArtifactBytes)}`,
    );
  }
  const pipArgs = argv['pip-arg'] ?? [];
  return {
    noDeps: argv['no-deps'] === true || argv.deps === false,
    ...(exclude.length > 0 ? { exclude } : {}),
    output: argv.output ?? 'artifact.tar.gz',
    ...(typeof argv['python-version'] === 'string' ? { pythonVersion: argv['python-version'] } : {}),
    ...(pipArgs.length > 0 ? { pipArgs: pipArgs.flatMap((a) => a.split(/\s+/).filter(Boolean)) } : {}),
    ...(maxArtifactBytes !== undefined ? { maxArtifactBytes } : {}),
  };
}

/**
 * What a flag's coerce threw, by message. yargs hands on only the message of what a coerce throws
 * (as a YError); cli/main.ts looks the message up here, so the user sees the hint too.
 */
const flagErrors = new Map<string, FerryError>();

/** Throws a usage error from a flag's coerce, hint and all (see flagErrors). */
function flagError(message: string, hint: string): never {
  const error = usage(message, hint);
  flagErrors.set(message, error);
  throw error;
}

/** The usage error a flag's coerce threw with this message, if one did. */
export function flagErrorOf(message: string): FerryError | undefined {
  return flagErrors.get(message);
}

/**
 * A flag's one value, trimmed (a number as its digits): given twice, or empty or blank, it is a usage
 * error with `hint`. What every flag coerce here checks first.
 */
function oneValue(name: string, value: unknown, hint: string): string {
  if (Array.isArray(value)) flagError(`--${name} is given more than once`, hint);
  const text = typeof value === 'number' ? String(value) : typeof value === 'string' ? value.trim() : '';
  if (text === '') flagError(`--${name} is empty`, hint);
  return text;
}

const portHint = 'Give a whole number from 1 to 65535, or 0 for any free port: --port 8888.';

/**
 * A port to listen on: a whole number from 0 (the OS picks a free one) to 65535. Anything else is a
 * usage error (exit 2) here, where yargs reads it, not a listen() failure reported as Ferry's bug.
 * Read as a string: yargs' number type turns an empty `--port ""` or `--port=` into 0, any free
 * port, which must be asked for with 0 itself. Without a default the flag is undefined when not
 * given (`ferry dev` then reads FERRY_PORT).
 */
export function portFlag<Options extends { default?: number; describe: string; defaultDescription?: string }>(
  options: Options,
) {
  return {
    alias: 'p',
    type: 'string',
    // `--port` with nothing after it is a mistake, not "the default".
    requiresArg: true,
    ...options,
    coerce: (value: unknown): number => {
      const text = oneValue('port', value, portHint);
      if (!/^\d+$/.test(text)) flagError(`--port ${String(value)} is not a port`, portHint);
      const port = Number(text);
      if (port > 65_535) flagError(`--port ${text} is not a port`, portHint);
      return port;
    },
  } as const;
}

/**
 * A string flag that names something (an address, a file, a program): empty or blank is a mistake
 * (an unset variable in a script), not "the default" nor a name to try. The value is trimmed.
 */
export function nonBlankFlag<Options extends { describe: string; default?: string; type?: 'string' }>(
  name: string,
  hint: string,
  options: Options,
) {
  return {
    type: 'string',
    requiresArg: true,
    ...options,
    coerce: (value: unknown): string => oneValue(name, value, hint),
  } as const;
}

/**
 * An address to listen on. An empty or blank one is a mistake: listen() reads it as every interface
 * (0.0.0.0), which must be asked for by name, not reached by an empty variable in a script.
 */
export function hostFlag(options: { default: string; describe: string }) {
  return nonBlankFlag(
    'host',
    'Give the address to listen on: --host 127.0.0.1 for this machine only, or --host 0.0.0.0 for every interface.',
    options,
  );
}

const allowOriginHint =
  'Give an origin as the browser shows it, scheme, name and port: --allow-origin http://devbox.lan:8888.';

/**
 * `ferry dev --allow-origin ORIGIN` (repeatable): web pages of ORIGIN may call the dev server, and its
 * name may reach it (cli/dev/site-guard.ts). Each value is an origin, nothing more: a path or a bare
 * name is a usage error, not a rule that would never match.
 */
export const allowOriginFlag = {
  type: 'string',
  array: true,
  requiresArg: true,
  describe:
    'Let web pages of this origin call the dev server, and its host name reach it (repeatable); by default only its own pages (/docs) and clients that are not browsers may',
  coerce: (values: unknown[]): string[] =>
    values.map((value) => {
      const text = typeof value === 'string' ? value.trim() : String(value);
      const origin = allowedOrigin(text);
      if (origin === undefined) flagError(`--allow-origin ${text} is not an origin`, allowOriginHint);
      return origin;
    }),
} as const;

/**
 * `--yes`: approves the IAM and security changes a stack deploy brings (AWS), as a terminal prompt
 * would; without a terminal, the only way on.
 */
export const approveFlag = {
  alias: 'y',
  type: 'boolean',
  default: false,
  describe: 'AWS: approve IAM/security changes without asking (needed without a terminal)',
} as const;

export const jsonFlag = {
  type: 'boolean',
  default: false,
  describe: 'Print the result as JSON on stdout',
} as const;

/** The flags every command sees (declared global in cli/main.ts). */
export interface GlobalFlags {
  provider?: string | undefined;
}

/**
 * A command whose handler's argv is typed from its builder and the global flags, so handlers read
 * flags without casts. The command table holds them as plain CommandModules.
 */
export function defineCommand<U>(module: CommandModule<GlobalFlags, U>): CommandModule {
  return module as unknown as CommandModule;
}

/**
 * A command's "Examples:" section for its --help, given to yargs as an epilogue: each description
 * as a `#` line above its command, which stands on a line of its own. yargs' own .example() sets
 * them side by side with the command column capped at half the terminal, so at 80 columns a longer
 * command wrapped into the description column and its last word read as a command of its own.
 */
export function examples(rows: ReadonlyArray<readonly [command: string, description: string]>): string {
  return [
    'Examples:',
    ...rows.flatMap(([command, description]) => [`  # ${description}`, `  ${command}`]),
  ].join('\n');
}
