/**
 * Dependencies: requirements.txt plus every endpoint's `dependencies`, deduplicated by PEP 503 name,
 * minus exclusions, installed with pip as manylinux x86_64 binary wheels into the build dir.
 *
 * Nothing is dropped silently (flash #353 dropped an explicit torchvision without a word): every
 * excluded package is reported, and one an endpoint asked for by name also gets a warning.
 */
import { existsSync, readFileSync } from 'node:fs';
import { readdir } from 'node:fs/promises';
import path from 'node:path';
import { FerryError } from '../../core/errors.js';
import { baseImagePackages } from '../../core/limits.js';
import type { ManifestEndpoint } from '../../core/manifest.js';
import type { ProgressSink } from './events.js';
import { runProcess, tail } from './process.js';

/** PEP 503: lowercase, runs of `-`, `_`, `.` become one `-`. */
export function normalizeName(name: string): string {
  return name.toLowerCase().replace(/[-_.]+/g, '-');
}

export interface Requirement {
  /** The requirement string handed to pip. */
  spec: string;
  /** PEP 503 name, or the whole spec for a bare URL or path. */
  name: string;
  /** Where it came from, for messages: `requirements.txt:3` or `endpoint 'gpu-worker'`. */
  origin: string;
  /** The requirements file and line it is written on; none for an endpoint's `dependencies`. */
  source?: { file: string; line: number };
  /** Declared by an endpoint's `dependencies=[...]`, that is asked for by name. */
  declared: boolean;
}

export interface RequirementsFile {
  requirements: Requirement[];
  /** Index and link options (--index-url, --find-links, ...) passed on to pip. */
  pipArgs: string[];
  warnings: string[];
}

const nameRegex = /^([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)/;
/** Options with a value that go straight to pip. */
const pipValueOptions = new Set([
  '-i',
  '--index-url',
  '--extra-index-url',
  '-f',
  '--find-links',
  '--trusted-host',
  '-c',
  '--constraint',
]);
const pipFlagOptions = new Set(['--pre', '--no-index', '--prefer-binary']);

export function parseRequirementsFile(
  file: string,
  origin: string,
  seen = new Set<string>(),
): RequirementsFile {
  const result: RequirementsFile = { requirements: [], pipArgs: [], warnings: [] };
  const absolute = path.resolve(file);
  if (seen.has(absolute)) return result;
  seen.add(absolute);
  const lines = readFileSync(absolute, 'utf8').split(/\r?\n/);
  for (let i = 0; i < lines.length; i++) {
    const lineNo = i + 1;
    let line = lines[i]!;
    while (line.endsWith('\\') && i + 1 < lines.length) line = line.slice(0, -1) + lines[++i];
    line = line.replace(/(^|\s)#.*$/, '').trim();
    if (line === '') continue;
    const where = `${origin}:${lineNo}`;
    if (line.startsWith('-')) {
      const match = /^(--?[A-Za-z-]+)(?:[=\s]\s*(.*))?$/.exec(line);
      const option = match?.[1] ?? line;
      const value = match?.[2]?.trim();
      if (option === '-r' || option === '--requirement') {
        if (!value) throw new FerryError('bad_request', `${where}: ${option} needs a file name`);
        const nested = path.resolve(path.dirname(absolute), value);
        if (!existsSync(nested)) {
          throw new FerryError(
            'bad_request',
            `${where}: the included requirements file ${value} does not exist`,
          );
        }
        const inner = parseRequirementsFile(nested, path.join(path.dirname(origin), value), seen);
        result.requirements.push(...inner.requirements);
        result.pipArgs.push(...inner.pipArgs);
        result.warnings.push(...inner.warnings);
      } else if (option === '-e' || option === '--editable') {
        throw new FerryError(
          'bad_request',
          `${where}: editable installs (-e) cannot go into a deployment artifact`,
          {
            hint: 'List the package by name and version, or put its code inside the project.',
          },
        );
      } else if (pipValueOptions.has(option) && value) {
        const resolved =
          (option === '-c' || option === '--constraint' || option === '-f' || option === '--find-links') &&
          !/^[a-z]+:\/\//i.test(value)
            ? path.resolve(path.dirname(absolute), value)
            : value;
        result.pipArgs.push(option, resolved);
      } else if (pipFlagOptions.has(option)) {
        result.pipArgs.push(option);
      } else {
        result.warnings.push(`${where}: ignoring the option "${line}" (not supported in a build)`);
      }
      continue;
    }
    // Per-requirement options such as --hash only make sense to pip's hash-checking mode; drop them.
    // pip ends the requirement where the first word starting with '-' begins (break_args_options in
    // pip/_internal/req/req_file.py), so `--hash sha256:...` goes whole, its value too.
    const optionsAt = line.search(/\s-/);
    const spec = optionsAt === -1 ? line : line.slice(0, optionsAt).trim();
    result.requirements.push({
      spec,
      name: requirementName(spec),
      origin: where,
      source: { file: origin, line: lineNo },
      declared: false,
    });
  }
  return result;
}

/**
 * What the base images ship that a worker on this machine (`ferry dev`, the local provider) is left
 * to have or lack: gigabytes, and code that asks for it may run without it (the `ferry init`
 * template's gpu_worker falls back to the CPU). numpy, the rest of baseImagePackages, is not.
 */
export const torchStack: ReadonlySet<string> = new Set(['torch', 'torchvision', 'torchaudio', 'triton']);

/**
 * Whether a package the build leaves to the base images must be in the worker's own Python where no
 * image stands behind it (`ferry dev`, the local provider): numpy; not the torch stack, nor ferry,
 * which the platform brings.
 */
export const workersPythonBrings = (name: string): boolean => name !== 'ferry' && !torchStack.has(name);

/**
 * Which of the packages the build leaves to the base images `python` lacks, where no image stands
 * behind the workers (ResolveOptions.noImage): only those workersPythonBrings; the torch stack stays
 * that Python's to have or lack. Asked about: those `resolved` leaves to the images, and, when pip
 * installs anything with its dependencies, every one of them, since a package may pull one in
 * (pandas needs numpy) and the build would keep it out (ResolvedDependencies.excludeNames) unless the
 * answer says the workers lack it. Nothing to ask, no Python started.
 */
export function workersLack(
  python: string,
  resolved: ResolvedDependencies,
  options: { noDeps: boolean },
): Promise<Set<string>> {
  const asked = resolved.leftToBaseImage.map(requirementName);
  const pulled = !options.noDeps && resolved.install.length > 0 ? baseImagePackages.map(normalizeName) : [];
  return distributionsMissing(python, [...new Set([...asked, ...pulled])].filter(workersPythonBrings));
}

/**
 * Which of `names` (distributions, as pip names them) `python` does not have installed. Where the
 * question gets no answer, none: the worker's own import error will tell.
 */
export async function distributionsMissing(python: string, names: readonly string[]): Promise<Set<string>> {
  if (names.length === 0) return new Set();
  const probe = await runProcess(
    python,
    [
      '-c',
      'import importlib.metadata as m, json, sys\n' +
        'def has(n):\n    try:\n        m.distribution(n)\n        return True\n' +
        '    except m.PackageNotFoundError:\n        return False\n' +
        'print(json.dumps({n: has(n) for n in sys.argv[1:]}))',
      ...names,
    ],
    { timeoutMs: 60_000 },
  ).catch(() => undefined);
  try {
    const found = JSON.parse(probe?.stdout.trim() ?? '') as Record<string, boolean>;
    return new Set(names.filter((name) => found[name] === false));
  } catch {
    return new Set();
  }
}

export function requirementName(spec: string): string {
  if (/^(\.|\/|[a-z+]+:\/\/)/i.test(spec)) return spec; // a path or URL: no name to dedupe on
  const match = nameRegex.exec(spec);
  return match ? normalizeName(match[1]!) : spec;
}

export interface ResolvedDependencies {
  /** Requirement strings to install, in order. */
  install: string[];
  excluded: Array<{ name: string; reason: string }>;
  /** The requirements (as written) left out because the base images ship them: torch, numpy, ... */
  leftToBaseImage: string[];
  /** Every PEP 503 name to keep out of the artifact, including ones pip pulls in transitively. */
  excludeNames: Set<string>;
  pipArgs: string[];
}

export interface ResolveOptions {
  projectDir: string;
  endpoints: readonly ManifestEndpoint[];
  /** `--exclude a,b` names. */
  exclude?: readonly string[];
  /**
   * Where no base image stands behind the workers (the local provider, which runs the artifact on
   * this Python as it is): `python` the workers run on, and which of the packages the build leaves to
   * the base images it lacks (workersLack). Those are installed into the artifact like any other
   * package, asked for or pulled in by another (they are not in excludeNames); the rest are left to
   * that Python, and the warnings say so rather than name an image.
   */
  noImage?: { python: string; lacking: ReadonlySet<string> };
  onProgress: ProgressSink;
}

/**
 * The project's requirements.txt (and the files it includes with -r), or nothing without one. The
 * scan hands each requirement to scan.py, which checks it as it checks dependencies=[...]
 * (`requirement_problem`), so a malformed line stops the build at file:line before pip sees it.
 */
export function projectRequirements(projectDir: string): RequirementsFile {
  const file = path.join(projectDir, 'requirements.txt');
  return existsSync(file)
    ? parseRequirementsFile(file, 'requirements.txt')
    : { requirements: [], pipArgs: [], warnings: [] };
}

export const baseImageReason = 'base image';
export const userExcludeReason = '--exclude';

export function resolveDependencies(options: ResolveOptions): ResolvedDependencies {
  const emit = options.onProgress;
  const fromFile = projectRequirements(options.projectDir);
  for (const message of fromFile.warnings) emit({ type: 'warning', message });

  const all: Requirement[] = [...fromFile.requirements];
  for (const endpoint of options.endpoints) {
    for (const spec of endpoint.resources.dependencies) {
      all.push({ spec, name: requirementName(spec), origin: `endpoint '${endpoint.name}'`, declared: true });
    }
  }

  const userExcludes = new Set(
    (options.exclude ?? []).map((n) => normalizeName(n.trim())).filter((n) => n !== ''),
  );
  const lacking = options.noImage?.lacking ?? new Set<string>();
  const baseNames = new Set<string>(
    [...baseImagePackages.map(normalizeName), 'ferry'].filter((name) => !lacking.has(name)),
  );
  const byName = new Map<string, Requirement[]>();
  for (const requirement of all) {
    const list = byName.get(requirement.name) ?? [];
    list.push(requirement);
    byName.set(requirement.name, list);
  }

  const install: string[] = [];
  const excluded: Array<{ name: string; reason: string }> = [];
  const leftToBaseImage: string[] = [];
  for (const [name, group] of byName) {
    const first = group[0]!;
    const declaredBy = group.filter((r) => r.declared).map((r) => r.origin);
    const reason = userExcludes.has(name)
      ? userExcludeReason
      : baseNames.has(name)
        ? baseImageReason
        : undefined;
    if (reason) {
      excluded.push({ name, reason });
      emit({ type: 'package-excluded', name, reason });
      if (reason === baseImageReason && declaredBy.length > 0 && name !== 'ferry') {
        const python = options.noImage?.python;
        emit({
          type: 'warning',
          message:
            python === undefined
              ? `${declaredBy.join(', ')} asks for "${first.spec}", but the base image provides ${name}: ` +
                `the base image's version is used and "${first.spec}" is not installed`
              : `${declaredBy.join(', ')} asks for "${first.spec}", which the base images ship: the local workers use ` +
                `the ${name} of ${python}, which runs them${workersPythonBrings(name) ? '' : ', if it has one'}, and "${first.spec}" is not installed`,
          package: name,
        });
      }
      if (reason === baseImageReason && name !== 'ferry') leftToBaseImage.push(first.spec);
      continue;
    }
    if (lacking.has(name)) {
      const who = declaredBy.length > 0 ? declaredBy.join(', ') : first.origin;
      emit({
        type: 'note',
        message: `${who} asks for ${name}, which the base images ship; ${options.noImage?.python}, which runs the local workers, has none: it is installed into the artifact (on AWS the image's copy is used)`,
      });
    }
    for (const other of group.slice(1)) {
      if (other.spec !== first.spec) {
        emit({
          type: 'warning',
          message: `"${other.spec}" (${other.origin}) is ignored in favour of "${first.spec}" (${first.origin})`,
        });
      }
    }
    install.push(first.spec);
  }
  return {
    install,
    excluded,
    leftToBaseImage,
    excludeNames: new Set([...userExcludes, ...baseNames]),
    pipArgs: fromFile.pipArgs,
  };
}

export interface InstallOptions {
  buildDir: string;
  requirements: readonly string[];
  pythonVersion: string;
  noDeps?: boolean;
  /** Extra pip arguments (tests pass `--no-index --find-links <dir>`). */
  pipArgs?: readonly string[];
  python?: string;
  timeoutMs?: number;
  signal?: AbortSignal;
  /** pip's steps as they happen (pipProgressOf), for the build's progress. */
  onProgress?: (text: string) => void;
}

/**
 * The line of pip's output worth showing while it runs, shortened; undefined for the rest. pip is
 * quiet for as long as it fetches (minutes for big wheels, and longer while it retries an index it
 * cannot reach), so without these a build sat on "dependencies…" with no sign of life.
 */
export function pipProgressOf(line: string): string | undefined {
  const text = line.trim();
  if (/^(Collecting|Downloading|Processing|Using cached|Installing collected packages)\b/.test(text))
    return text;
  const retry = /^WARNING: Retrying \(.*: (\S+)$/.exec(text);
  if (retry) return `retrying ${retry[1]}: the package index did not answer`;
  return undefined;
}

/**
 * The requirements pip's output says it could not find (`ERROR: No matching distribution found for
 * nosuchpkg`, its last word when a package, or a dependency of one, has no wheel here or no index
 * answered), as PEP 503 names; none when pip failed otherwise (no pip, a conflict, a full disk).
 */
export function pipCouldNotFind(output: string): string[] {
  return [...output.matchAll(/No matching distribution found for (\S+)/g)].map((m) => requirementName(m[1]!));
}

/** pip install of manylinux x86_64 binary wheels for the target Python into the build dir. */
export async function installDependencies(options: InstallOptions): Promise<void> {
  if (options.requirements.length === 0) return;
  const python = options.python ?? 'python3';
  const args = [
    '-m',
    'pip',
    'install',
    '--target',
    options.buildDir,
    '--python-version',
    options.pythonVersion,
    '--platform',
    'manylinux_2_28_x86_64',
    '--platform',
    'manylinux_2_17_x86_64',
    '--platform',
    'manylinux2014_x86_64',
    '--implementation',
    'cp',
    '--only-binary=:all:',
    '--upgrade',
    '--no-compile',
    '--no-input',
    '--progress-bar',
    'off',
    ...(options.noDeps ? ['--no-deps'] : []),
    ...(options.pipArgs ?? []),
    ...options.requirements,
  ];
  const onProgress = options.onProgress;
  const result = await runProcess(python, args, {
    timeoutMs: options.timeoutMs ?? 600_000,
    signal: options.signal,
    ...(onProgress
      ? {
          onLine: (line: string) => {
            const text = pipProgressOf(line);
            if (text) onProgress(text);
          },
        }
      : {}),
  });
  if (result.exitCode !== 0) {
    throw new FerryError(
      'failed',
      `pip could not install the dependencies:\n${tail(result.stderr || result.stdout)}`,
      {
        hint:
          `Only binary wheels for Linux x86_64 and Python ${options.pythonVersion} can be installed. ` +
          'Check the names and versions in requirements.txt and dependencies=[...], or leave a package out with --exclude <packages>.',
      },
    );
  }
}

export interface InstalledPackage {
  name: string;
  version: string;
  /** The dist-info folder and the top-level entries its RECORD lists. */
  entries: string[];
  /** PEP 503 names of its `Requires-Dist` (those of an extra left out): what may have pulled a package in. */
  requires: string[];
}

/** Reads the `*.dist-info` folders pip left in `dir`. */
export async function listInstalled(dir: string): Promise<InstalledPackage[]> {
  if (!existsSync(dir)) return [];
  const packages: InstalledPackage[] = [];
  for (const entry of await readdir(dir)) {
    const match = /^(.+?)-([^-]+)\.dist-info$/.exec(entry);
    if (!match) continue;
    const entries = new Set<string>([entry]);
    const infoDir = path.join(dir, entry);
    let name = match[1]!;
    let version = match[2]!;
    const metadata = readOptional(path.join(infoDir, 'METADATA'));
    name = /^Name:\s*(.+)$/m.exec(metadata)?.[1]?.trim() ?? name;
    version = /^Version:\s*(.+)$/m.exec(metadata)?.[1]?.trim() ?? version;
    const requires = [...metadata.matchAll(/^Requires-Dist:\s*(.+)$/gm)]
      .map((m) => m[1]!.trim())
      .filter((spec) => !/\bextra\s*==/.test(spec))
      .map(requirementName);
    for (const line of readOptional(path.join(infoDir, 'RECORD')).split(/\r?\n/)) {
      const file = line.split(',')[0]?.trim();
      if (!file || file.startsWith('..') || file.startsWith('/')) continue;
      entries.add(file.split('/')[0]!);
    }
    for (const line of readOptional(path.join(infoDir, 'top_level.txt')).split(/\r?\n/)) {
      const top = line.trim().split('/')[0];
      if (top) {
        entries.add(top);
        entries.add(`${top}.py`);
      }
    }
    packages.push({ name, version, entries: [...entries], requires });
  }
  return packages.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

function readOptional(file: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return '';
  }
}
