/**
 * Which project files ship in the artifact: everything minus the project's .gitignore rules and the
 * built-in excludes. `.env` never ships, whatever .gitignore says (flash #280 leaked secrets that way).
 * A shipped endpoint file that imports a local module the rules dropped fails the build (flash #352).
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { readdir } from 'node:fs/promises';
import path from 'node:path';
import { FerryError } from '../../core/errors.js';
import { type IgnoreRule, matchRules, parseIgnoreFile } from './ignore.js';
import type { ScannedFile } from './scan.js';

/** Folders left out at the project root only (a nested `build/` may be a real package). */
const rootOnlyDirs = new Set(['.ferry', '.venv', 'venv', 'env', 'node_modules', 'dist', 'build']);
/** Folders left out at any depth. */
const anyDepthDirs = new Set(['.git', '__pycache__', 'tests']);

/** Why a built-in rule leaves this path out, or undefined. Not negatable by .gitignore. */
export function builtinExclusion(relPath: string, isDirectory: boolean): string | undefined {
  const name = relPath.slice(relPath.lastIndexOf('/') + 1);
  if (isDirectory) {
    if (anyDepthDirs.has(name)) return `built-in rule: ${name}/`;
    if (!relPath.includes('/') && rootOnlyDirs.has(name)) return `built-in rule: ${name}/`;
    return undefined;
  }
  if (name === '.env' || (name.startsWith('.env.') && name !== '.env.example')) {
    return 'built-in rule: .env files never ship (set variables with Endpoint(env={...}))';
  }
  if (name.endsWith('.pyc')) return 'built-in rule: *.pyc';
  if (name.endsWith('.tar.gz')) return 'built-in rule: *.tar.gz';
  if (name.startsWith('test_') && name.endsWith('.py')) return 'built-in rule: test_*.py';
  return undefined;
}

export interface ShippedFiles {
  /** Project-relative POSIX paths, sorted. */
  files: string[];
  /** Why a project path does not ship (built-in rule or the .gitignore line), or undefined when it ships. */
  whyExcluded(relPath: string): string | undefined;
  warnings: string[];
}

export interface ListFilesOptions {
  projectDir: string;
  /** Extra project-relative paths to leave out (the artifact itself when written inside the project). */
  alsoExclude?: string[];
}

export async function listShippedFiles(options: ListFilesOptions): Promise<ShippedFiles> {
  const root = path.resolve(options.projectDir);
  const alsoExclude = new Set(options.alsoExclude ?? []);
  const rulesByDir = new Map<string, IgnoreRule[]>();
  const files: string[] = [];
  const warnings: string[] = [];

  const loadRules = (dirRel: string): void => {
    const file = path.join(root, dirRel, '.gitignore');
    if (!existsSync(file)) return;
    const origin = dirRel === '' ? '.gitignore' : `${dirRel}/.gitignore`;
    rulesByDir.set(dirRel, parseIgnoreFile(readFileSync(file, 'utf8'), dirRel, origin));
  };
  /** Rules that apply inside `dirRel`: its own .gitignore and those of every folder above it. */
  const rulesFor = (dirRel: string): IgnoreRule[] => {
    const chain: IgnoreRule[] = [...(rulesByDir.get('') ?? [])];
    let prefix = '';
    for (const part of dirRel === '' ? [] : dirRel.split('/')) {
      prefix = prefix === '' ? part : `${prefix}/${part}`;
      chain.push(...(rulesByDir.get(prefix) ?? []));
    }
    return chain;
  };
  const excludedBy = (relPath: string, isDirectory: boolean): string | undefined => {
    const builtin = builtinExclusion(relPath, isDirectory);
    if (builtin) return builtin;
    if (alsoExclude.has(relPath)) return 'the build output';
    if (isDirectory && existsSync(path.join(root, relPath, 'pyvenv.cfg')))
      return 'built-in rule: a virtualenv';
    const parent = relPath.includes('/') ? relPath.slice(0, relPath.lastIndexOf('/')) : '';
    const rule = matchRules(rulesFor(parent), relPath, isDirectory);
    return rule && !rule.negated ? rule.source : undefined;
  };

  const walk = async (dirRel: string): Promise<void> => {
    loadRules(dirRel);
    const entries = await readdir(path.join(root, dirRel), { withFileTypes: true });
    for (const entry of entries) {
      const rel = dirRel === '' ? entry.name : `${dirRel}/${entry.name}`;
      let isDirectory = entry.isDirectory();
      if (entry.isSymbolicLink()) {
        const target = statSync(path.join(root, rel), { throwIfNoEntry: false });
        if (!target) continue;
        if (target.isDirectory()) {
          if (!excludedBy(rel, true))
            warnings.push(`${rel}/ is a symbolic link to a folder; it is not shipped`);
          continue;
        }
        isDirectory = false;
      } else if (!isDirectory && !entry.isFile()) {
        continue; // sockets, fifos
      }
      if (excludedBy(rel, isDirectory)) continue;
      if (isDirectory) await walk(rel);
      else files.push(rel);
    }
  };
  await walk('');
  files.sort(comparePaths);

  const whyExcluded = (relPath: string): string | undefined => {
    const parts = relPath.split('/');
    for (let i = 1; i < parts.length; i++) {
      const reason = excludedBy(parts.slice(0, i).join('/'), true);
      if (reason) return reason;
    }
    return excludedBy(relPath, false);
  };
  return { files, whyExcluded, warnings };
}

/** Byte order of the UTF-8 paths, so the order (and the fingerprint) never depends on the locale. */
export function comparePaths(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'));
}

export interface ImportClosureOptions {
  projectDir: string;
  shipped: ShippedFiles;
  /** Every shipped .py file the scanner parsed, with its imports. */
  scanned: ScannedFile[];
  /** Files that declare endpoints: where the closure starts. */
  entryFiles: string[];
}

/**
 * Follows local imports from the endpoint files through the shipped files. A module that exists in
 * the project but does not ship would be an ImportError on the worker, so it fails the build here.
 */
export function checkLocalImports(options: ImportClosureOptions): void {
  const root = path.resolve(options.projectDir);
  const shippedSet = new Set(options.shipped.files);
  const importsOf = new Map(options.scanned.map((file) => [file.path, file.imports]));
  const problems: string[] = [];
  const seen = new Set<string>();
  const queue = [...options.entryFiles];
  while (queue.length > 0) {
    const file = queue.shift()!;
    if (seen.has(file)) continue;
    seen.add(file);
    for (const name of importsOf.get(file) ?? []) {
      const parts = name.split('.');
      for (let i = 1; i <= parts.length; i++) {
        const base = parts.slice(0, i).join('/');
        for (const candidate of [`${base}.py`, `${base}/__init__.py`]) {
          if (!existsSync(path.join(root, candidate))) continue;
          if (shippedSet.has(candidate)) {
            queue.push(candidate);
          } else {
            const reason = options.shipped.whyExcluded(candidate) ?? 'not shipped';
            const problem = `${file} imports ${parts.slice(0, i).join('.')}, but ${candidate} is left out (${reason})`;
            if (!problems.includes(problem)) problems.push(problem);
          }
        }
      }
    }
  }
  if (problems.length > 0) {
    throw new FerryError(
      'bad_request',
      `Local modules your endpoints import would be missing on the workers:\n${problems.map((p) => `  ${p}`).join('\n')}`,
      { hint: 'Stop ignoring those files (.gitignore), or move the code into a shipped module.' },
    );
  }
}
