/**
 * Where the CLI keeps things, and which settings win:
 *   platform home  FERRY_HOME (default ~/.ferry): ferry.db, blobs/, api-key, server.json, serve.log
 *   project state  <project>/.ferry/: config.json (provider), build output, dev state
 *   API key        FERRY_API_KEY in the environment, then the project's .env, then FERRY_HOME/api-key
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { FerryError } from '../core/errors.js';

export const providerNames = ['local', 'aws'] as const;
export type ProviderName = (typeof providerNames)[number];

export function ferryHome(env: NodeJS.ProcessEnv): string {
  return path.resolve(env.FERRY_HOME || path.join(homedir(), '.ferry'));
}

/** KEY=value lines; `#` comments, optional `export`, single or double quotes. No interpolation. */
export function parseDotEnv(text: string): Record<string, string> {
  const result: Record<string, string> = {};
  for (const raw of text.split(/\r?\n/)) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) continue;
    const match = /^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)$/.exec(line);
    if (!match) continue;
    let value = match[2]!.trim();
    if ((value.startsWith('"') && value.endsWith('"')) || (value.startsWith("'") && value.endsWith("'"))) {
      value = value.slice(1, -1);
    } else {
      value = value.replace(/\s+#.*$/, '');
    }
    result[match[1]!] = value;
  }
  return result;
}

export function readDotEnv(projectDir: string): Record<string, string> {
  const file = path.join(projectDir, '.env');
  return existsSync(file) ? parseDotEnv(readFileSync(file, 'utf8')) : {};
}

export interface KeyFromUser {
  key: string;
  source: 'environment' | '.env';
}

/** A .env value left as the template wrote it (`...`, `your-key`), which is no key. */
export const isPlaceholderKey = (value: string): boolean => /^your[_-]/i.test(value) || value === '...';

/** FERRY_API_KEY from the environment, then the project's .env; undefined when neither has one. */
export function apiKeyFromUser(env: NodeJS.ProcessEnv, projectDir: string): KeyFromUser | undefined {
  const fromEnv = env.FERRY_API_KEY?.trim();
  if (fromEnv) return { key: fromEnv, source: 'environment' };
  const fromFile = readDotEnv(projectDir).FERRY_API_KEY?.trim();
  if (fromFile && !isPlaceholderKey(fromFile)) return { key: fromFile, source: '.env' };
  return undefined;
}

/** `text` as one POSIX shell word, exactly (single quotes; a quote inside as '\\''). */
export const shellQuote = (text: string): string => `'${text.replace(/'/g, `'\\''`)}'`;

/** argv → a shell line for people to read (single-quoted where needed). */
export function shellLine(argv: readonly string[]): string {
  return argv.map((arg) => (/^[A-Za-z0-9_./:=@%+-]+$/.test(arg) ? arg : shellQuote(arg))).join(' ');
}

/**
 * The shell word a printed curl line sends as the key, so the line works where it is pasted with
 * the key the CLI uses (apiKeyFromUser, then `keyFile`) and never prints the key: $FERRY_API_KEY when
 * the environment has it; from the project's .env, the line read with sed (keys hold no quotes or
 * spaces, which are dropped); otherwise
 * `keyFile` read (the local provider's FERRY_HOME/api-key). With none of them (AWS, no key yet),
 * $FERRY_API_KEY, the name `ferry keys create` tells the user to set.
 */
export function apiKeyInShell(env: NodeJS.ProcessEnv, projectDir: string, keyFile?: string): string {
  const fromUser = apiKeyFromUser(env, projectDir);
  if (fromUser?.source === '.env') {
    // Read, never run: a .env is not always valid shell (`NAME=two words` would run `words`).
    const dotEnv = shellQuote(path.join(path.resolve(projectDir), '.env'));
    return `$(sed -nE 's/[[:space:]]+#.*$//; s/^[[:space:]]*(export[[:space:]]+)?FERRY_API_KEY=//p' ${dotEnv} | tail -n 1 | tr -d '\\042\\047 \\r')`;
  }
  if (!fromUser && keyFile) return `$(cat ${shellQuote(keyFile)})`;
  return '$FERRY_API_KEY';
}

/**
 * The app name from a folder: its base name, made a valid app name (core/deployment.ts
 * checkRecordName) that also ends in a letter or digit, so `ferry init` can write it into
 * pyproject.toml as a name pip accepts (PEP 508) and every command calls the app the same ("ünï" is
 * `n`, never `n-`). The `ferry` Python package derives the same (worker-image/python/ferry/client.py
 * app_name_of), so a script in the folder calls the app the CLI deployed.
 */
export function appNameOf(dir: string): string {
  const name = path
    .basename(path.resolve(dir))
    .replace(/[^A-Za-z0-9_-]+/g, '-')
    .replace(/^[-_]+/, '')
    .slice(0, 63)
    .replace(/[-_]+$/, '');
  return name || 'app';
}

/**
 * Whether `dir` looks like a project folder: it has `.ferry/config.json`, a pyproject.toml or
 * requirements.txt, or a Python file. A command that defaults to the folder's app (projectAppName)
 * where that is safe, and otherwise looks across apps, asks this (`ferry undeploy NAME`).
 */
export function looksLikeProject(dir: string): boolean {
  if (['pyproject.toml', 'requirements.txt'].some((f) => existsSync(path.join(dir, f)))) return true;
  if (existsSync(path.join(dir, '.ferry', 'config.json'))) return true;
  try {
    return readdirSync(dir).some((f) => f.endsWith('.py'));
  } catch {
    return false;
  }
}

/** The repository root of this Ferry install (works from cli/ sources and from dist/cli/). */
export function installRoot(): string {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 5; i++) {
    const pkg = path.join(dir, 'package.json');
    if (existsSync(pkg)) {
      try {
        if ((JSON.parse(readFileSync(pkg, 'utf8')) as { name?: string }).name === 'ferry') return dir;
      } catch {
        // keep looking upward
      }
    }
    dir = path.dirname(dir);
  }
  throw new FerryError('failed', 'Cannot find the Ferry install folder (package.json named "ferry")');
}

/** Ferry's version (it tags the worker images), from the install's package.json. */
export function ferryVersion(): string {
  try {
    const pkg = JSON.parse(readFileSync(path.join(installRoot(), 'package.json'), 'utf8')) as {
      version?: unknown;
    };
    if (typeof pkg.version === 'string') return pkg.version;
  } catch {
    // a damaged install still names images by the version this code shipped as
  }
  return '0.1.0';
}

export const templatesDir = () => path.join(installRoot(), 'cli', 'templates');
/** The `ferry` Python package that workers import (put on their PYTHONPATH). */
export const ferryPythonPath = () => path.join(installRoot(), 'worker-image', 'python');
export const ferryBin = () => path.join(installRoot(), 'bin', 'ferry.js');
