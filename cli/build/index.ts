/**
 * `ferry build` as a library: files → scan → dependencies → artifact.
 *
 *   project ──files.ts──▶ shipped files ──scan.py──▶ endpoints ──deps.ts──▶ pip into .ferry/build/
 *                                    │                  │                       │
 *                                    └── fingerprint ───┴──── manifest ─────────┴──artifact.ts──▶ .tar.gz
 *
 * The CLI command wraps this and prints the progress events; every problem is a FerryError.
 */
import { createHash } from 'node:crypto';
import { existsSync, statSync } from 'node:fs';
import { copyFile, mkdir, rm, stat } from 'node:fs/promises';
import path from 'node:path';
import { unusableFolderReason, unusableProjectFolder } from '../../core/adapters/local/home.js';
import { FerryError, messageOf, usage } from '../../core/errors.js';
import { type Manifest, type ManifestEndpoint, manifestSchema, pythonVersions } from '../../core/manifest.js';
import { countOf } from '../io.js';
import { packArtifact } from './artifact.js';
import {
  baseImageReason,
  installDependencies,
  listInstalled,
  normalizeName,
  pipCouldNotFind,
  type ResolveOptions,
  requirementName,
  resolveDependencies,
  workersLack,
} from './deps.js';
import { type BuildEvent, type NowMs, type ProgressSink, stage } from './events.js';
import { checkLocalImports, listShippedFiles } from './files.js';
import { sourceFingerprint } from './fingerprint.js';
import { checkImports } from './importCheck.js';
import { noEndpointsFound, scanProject, withConfigHash } from './scan.js';

export type { BuildEvent, BuildStage, ProgressSink } from './events.js';

export type PythonVersion = (typeof pythonVersions)[number];

export interface BuildOptions {
  projectDir: string;
  /** App name; defaults to the project folder's name. */
  app?: string;
  /** Artifact path. A bare file name goes into `.ferry/`; other relative paths are from the project. */
  output?: string;
  /**
   * Scratch folder where pip installs and sources are staged before packing (emptied first); default
   * `<project>/.ferry/build`. Relative paths are from the project. Lets a caller build a project it must
   * not write into (`npm start` builds the bundled examples/hello under FERRY_HOME).
   */
  buildDir?: string;
  /** `--python-version`: overrides endpoint declarations and local detection. */
  pythonVersion?: string;
  noDeps?: boolean;
  /** `--exclude` package names. */
  exclude?: string[];
  /** Extra pip arguments. */
  pipArgs?: string[];
  /**
   * The interpreter for the scanner, version detection, the import check and pip (default `python3`).
   * It is started once, for the scan; the later steps start the binary it reports (`sys.executable`).
   */
  python?: string;
  /**
   * The Python the workers will run this artifact on where no base image stands behind them (the
   * local provider: python3). What the base images ship and it lacks (numpy, not the torch stack) is
   * installed into the artifact, asked for or pulled in by another package; without it (AWS, `ferry
   * build`), left to the image.
   */
  workersPython?: string;
  maxArtifactBytes?: number;
  onProgress?: (event: BuildEvent) => void;
  /** Injected clock (durations and generatedAt). */
  nowMs?: NowMs;
  signal?: AbortSignal;
}

export interface BuildResult {
  manifest: Manifest;
  artifactPath: string;
  artifactBytes: number;
  buildDir: string;
  /** Project-relative paths of the shipped source files. */
  files: string[];
}

export const defaultArtifactName = 'artifact.tar.gz';

function withBundled(fingerprint: string, bundled: readonly string[]): string {
  if (bundled.length === 0) return fingerprint;
  return createHash('sha256')
    .update(`${fingerprint}\0${[...bundled].sort().join('\0')}`)
    .digest('hex');
}

/** The last line of an error's message: pip's own reason, without its whole output. */
function lastLineOf(error: unknown): string {
  const lines = messageOf(error).trim().split('\n');
  return lines[lines.length - 1]!.trim();
}

export async function buildProject(options: BuildOptions): Promise<BuildResult> {
  const projectDir = path.resolve(options.projectDir);
  const info = await stat(projectDir).catch(() => undefined);
  if (!info?.isDirectory()) throw usage(`The project folder ${options.projectDir} does not exist`);
  if (options.pythonVersion !== undefined && !isPythonVersion(options.pythonVersion)) {
    throw usage(
      `--python-version ${options.pythonVersion} is not supported`,
      `Choose one of ${pythonVersions.join(', ')}.`,
    );
  }
  const emit: ProgressSink = options.onProgress ?? (() => {});
  const nowMs = options.nowMs ?? Date.now;
  const python = options.python ?? 'python3';
  const app = options.app ?? path.basename(projectDir);
  const stateDir = path.join(projectDir, '.ferry');
  const buildDir = resolveBuildDir(projectDir, stateDir, options.buildDir);
  const artifactPath = resolveOutput(projectDir, stateDir, options.output);
  const outputRel = path.relative(projectDir, artifactPath).split(path.sep).join('/');
  const buildRel = path.relative(projectDir, buildDir).split(path.sep).join('/');

  const shipped = await stage(
    'files',
    emit,
    nowMs,
    async () => {
      const result = await listShippedFiles({ projectDir, alsoExclude: [outputRel, buildRel] });
      for (const message of result.warnings) emit({ type: 'warning', message });
      const pythonCount = result.files.filter((f) => f.endsWith('.py')).length;
      emit({ type: 'files', shippedCount: result.files.length, pythonCount });
      if (pythonCount === 0) {
        throw new FerryError('bad_request', `No Python files to ship in ${projectDir}`, {
          hint: 'Run the build in a project folder (see `ferry init`).',
        });
      }
      return result;
    },
    (result) => `${result.files.length} files`,
  );

  const scanned = await stage(
    'scan',
    emit,
    nowMs,
    async () => {
      const result = await scanProject({
        projectDir,
        files: shipped.files.filter((f) => f.endsWith('.py')),
        python,
        ...(options.signal ? { signal: options.signal } : {}),
      });
      for (const message of result.warnings) emit({ type: 'warning', message });
      if (result.endpoints.length === 0) {
        throw noEndpointsFound(
          result.files,
          'No endpoints found: nothing would be deployed',
          'Mark a function with @Endpoint(name=...) (from ferry import Endpoint), or check that its file is not ignored.',
        );
      }
      checkLocalImports({
        projectDir,
        shipped,
        scanned: result.files,
        entryFiles: [...new Set(result.endpoints.map((e) => e.file))],
      });
      emit({ type: 'endpoints', names: result.endpoints.map((e) => e.name) });
      return result;
    },
    (result) => countOf(result.endpoints.length, 'endpoint'),
  );

  const pythonVersion = resolvePythonVersion(
    options.pythonVersion,
    scanned.endpoints,
    scanned.lines,
    scanned.python,
    emit,
  );
  // The binary the scan resolved `python` to: pip and the import check start it directly.
  const interpreter = scanned.python.executable;
  const endpoints = scanned.endpoints.map((endpoint) =>
    endpoint.resources.pythonVersion && endpoint.resources.pythonVersion !== pythonVersion
      ? withConfigHash({ ...endpoint, resources: { ...endpoint.resources, pythonVersion } })
      : endpoint,
  );

  try {
    await rm(buildDir, { recursive: true, force: true });
    await mkdir(buildDir, { recursive: true });
  } catch (error) {
    // A project folder this user may not write (another's checkout, a read-only mount): theirs to fix.
    const reason = unusableFolderReason(error);
    if (reason) throw unusableProjectFolder((error as NodeJS.ErrnoException).path ?? buildDir, reason);
    throw error;
  }

  const deps = await stage(
    'dependencies',
    emit,
    nowMs,
    async () => {
      const resolveOptions: ResolveOptions = {
        projectDir,
        endpoints,
        ...(options.exclude ? { exclude: options.exclude } : {}),
        onProgress: emit,
      };
      const workersPython = options.workersPython;
      const noDeps = options.noDeps ?? false;
      // Resolved as for an image first (quietly: the build's own resolution below says it all): what
      // it leaves to the base images is what the workers' Python is asked about, and it is what the
      // build installs when those cannot be installed after all.
      const forImage =
        workersPython === undefined
          ? undefined
          : resolveDependencies({ ...resolveOptions, onProgress: () => {} });
      let noImage: ResolveOptions['noImage'];
      if (workersPython !== undefined && forImage !== undefined) {
        // Asked of the Python the workers run on (the binary the scan found, when it is the same one).
        const asked = workersPython === python ? interpreter : workersPython;
        noImage = { python: workersPython, lacking: await workersLack(asked, forImage, { noDeps }) };
      }
      let resolved = resolveDependencies({ ...resolveOptions, ...(noImage ? { noImage } : {}) });
      const install = (requirements: readonly string[]) =>
        installDependencies({
          buildDir,
          requirements,
          pythonVersion,
          noDeps,
          pipArgs: [...resolved.pipArgs, ...(options.pipArgs ?? [])],
          python: interpreter,
          ...(options.signal ? { signal: options.signal } : {}),
          onProgress: (text) => emit({ type: 'dependency-progress', text }),
        });
      const added = resolved.install.filter((spec) => noImage?.lacking.has(requirementName(spec)));
      try {
        await install(resolved.install);
      } catch (error) {
        // What the workers' Python lacks is a convenience, not what the deploy is for: without it
        // (no package index, a pip that fails) the build goes on as for an image, and the deploy
        // says how to put it into that Python instead. Unless pip names another requirement it could
        // not find (pipCouldNotFind: `No matching distribution found for nosuchpkg`): without numpy
        // pip would fail on that one again, so its error is the build's at once. A failure that
        // names none (no pip, a conflict) may be numpy's, and gets the build without it.
        const unfound = pipCouldNotFind(messageOf(error));
        const addedNames = new Set(added.map(requirementName));
        const another = unfound.length > 0 && !unfound.some((name) => addedNames.has(name));
        if (added.length === 0 || forImage === undefined || another || options.signal?.aborted) throw error;
        emit({
          type: 'warning',
          message: `could not install ${added.join(', ')} into the artifact for the local workers (${lastLineOf(error)}); building without it`,
        });
        resolved = forImage;
        for (const spec of added)
          emit({ type: 'package-excluded', name: requirementName(spec), reason: baseImageReason });
        await rm(buildDir, { recursive: true, force: true });
        await mkdir(buildDir, { recursive: true });
        await install(resolved.install);
      }
      // pip ran into an empty build dir, so every top-level entry now is pip's; sources come after.
      const installed = await listInstalled(buildDir);
      const skipTopLevel = new Set<string>();
      const excluded = [...resolved.excluded];
      for (const pkg of installed) {
        const name = normalizeName(pkg.name);
        if (!resolved.excludeNames.has(name)) continue;
        for (const entry of pkg.entries) skipTopLevel.add(entry);
        if (!excluded.some((e) => e.name === name)) {
          const reason = (options.exclude ?? []).some((n) => normalizeName(n) === name)
            ? '--exclude'
            : 'base image';
          excluded.push({ name, reason });
          emit({ type: 'package-excluded', name, reason: `${reason} (pulled in by another package)` });
        }
      }
      const kept = installed.filter((pkg) => !resolved.excludeNames.has(normalizeName(pkg.name)));
      const named = new Set(resolved.install.map(requirementName));
      for (const pkg of kept) {
        const name = normalizeName(pkg.name);
        // Pulled in by another package and kept for the workers' Python (workersLack); one named
        // in the requirements had its note from resolveDependencies.
        if (!noImage?.lacking.has(name) || named.has(name)) continue;
        const by = kept.filter((other) => other.requires.includes(name)).map((other) => other.name);
        emit({
          type: 'note',
          message: `${by.length > 0 ? by.join(', ') : 'another package'} needs ${name}, which the base images ship; ${noImage.python}, which runs the local workers, has none: it is installed into the artifact (on AWS the image's copy is used)`,
        });
      }
      emit({ type: 'packages-installed', packages: kept.map(({ name, version }) => ({ name, version })) });
      for (const name of new Set((options.exclude ?? []).map(normalizeName))) {
        if (name !== '' && !excluded.some((e) => e.name === name)) {
          emit({
            type: 'warning',
            message: `--exclude ${name}: no package by that name was going to be installed`,
          });
        }
      }
      // In the artifact although a base image ships it (see BuildOptions.workersPython).
      const bundled = kept
        .filter((pkg) => noImage?.lacking.has(normalizeName(pkg.name)))
        .map((pkg) => `${normalizeName(pkg.name)}==${pkg.version}`);
      return { install: resolved.install, excluded, skipTopLevel, kept, bundled };
    },
    (result) => `${result.kept.length} packages installed, ${result.excluded.length} excluded`,
  );

  const packed = await stage(
    'artifact',
    emit,
    nowMs,
    async () => {
      for (const rel of shipped.files) {
        const target = path.join(buildDir, rel);
        await mkdir(path.dirname(target), { recursive: true });
        await copyFile(path.join(projectDir, rel), target);
      }
      // Before anything is packed or uploaded: each endpoint module imports from what will ship.
      await checkImports({
        stagedDir: buildDir,
        endpoints,
        projectFiles: shipped.files,
        pythonVersion,
        python: scanned.python,
        noDeps: options.noDeps ?? false,
        emit,
        signal: options.signal,
      });
      const manifest = manifestSchema.parse({
        version: 1,
        app,
        pythonVersion,
        generatedAt: new Date(nowMs()).toISOString(),
        // With numpy bundled for the local workers the artifact is another one than the same sources
        // make without it (numpy found in python3, or not installable before): another fingerprint,
        // so the workers roll to it and unpack it rather than keep the runtime folder they have.
        sourceFingerprint: withBundled(await sourceFingerprint(projectDir, shipped.files), deps.bundled),
        endpoints,
        dependencies: { installed: deps.install, excluded: deps.excluded },
      } satisfies Manifest);
      const { artifactBytes } = await packArtifact({
        buildDir,
        outputPath: artifactPath,
        manifest,
        skipTopLevel: deps.skipTopLevel,
        ...(options.maxArtifactBytes !== undefined ? { maxBytes: options.maxArtifactBytes } : {}),
      });
      return { manifest, artifactBytes };
    },
    (result) => `${(result.artifactBytes / (1024 * 1024)).toFixed(1)} MB`,
  );

  return {
    manifest: packed.manifest,
    artifactPath,
    artifactBytes: packed.artifactBytes,
    buildDir,
    files: shipped.files,
  };
}

function isPythonVersion(value: string): value is PythonVersion {
  return (pythonVersions as readonly string[]).includes(value);
}

/** The build dir is emptied with `rm -rf`: never the project itself or a folder holding it. */
function resolveBuildDir(projectDir: string, stateDir: string, buildDir: string | undefined): string {
  if (buildDir === undefined) return path.join(stateDir, 'build');
  const resolved = path.resolve(projectDir, buildDir);
  const fromBuild = path.relative(resolved, projectDir);
  const outside = fromBuild === '..' || fromBuild.startsWith(`..${path.sep}`) || path.isAbsolute(fromBuild);
  if (!outside) {
    throw usage(
      `The build folder ${buildDir} is the project or contains it, and the build empties it first`,
      'Choose a folder of its own, such as .ferry/build or one under FERRY_HOME.',
    );
  }
  return resolved;
}

/**
 * Where the artifact goes: a bare name under .ferry/, a path from the project folder, or an absolute
 * one. The build first removes what is there, so the name must be an archive's (`.tar.gz`, `.tgz`):
 * `-o app.py` or `-o ./cpu_worker.py` would otherwise replace a source file with the archive, and
 * `-o .` named the .ferry folder itself.
 */
function resolveOutput(projectDir: string, stateDir: string, output: string | undefined): string {
  if (output === undefined) return path.join(stateDir, defaultArtifactName);
  const resolved = path.isAbsolute(output)
    ? output
    : !output.includes('/') && !output.includes(path.sep)
      ? path.join(stateDir, output)
      : path.resolve(projectDir, output);
  const archive = /\.(tar\.gz|tgz)$/.test(output);
  if (!archive || (existsSync(resolved) && statSync(resolved).isDirectory())) {
    throw usage(
      `--output ${JSON.stringify(output)} does not name an archive file: the artifact is a gzipped tar, written over what is there`,
      'Give a file name ending in .tar.gz (or .tgz), such as artifact.tar.gz or dist/app.tar.gz.',
    );
  }
  return resolved;
}

/**
 * One artifact has one Python ABI: the option wins, then the endpoints' single declared version, then
 * the local interpreter (the one the scan ran on, `ScanResult.python`) clamped into the supported range.
 */
export function resolvePythonVersion(
  option: string | undefined,
  endpoints: readonly ManifestEndpoint[],
  lines: Map<string, { file: string; line: number }>,
  interpreter: { version: string; executable: string },
  emit: ProgressSink,
): PythonVersion {
  const declared = endpoints.filter((e) => e.resources.pythonVersion !== undefined);
  const distinct = [...new Set(declared.map((e) => e.resources.pythonVersion!))];
  if (option !== undefined && isPythonVersion(option)) {
    for (const endpoint of declared) {
      if (endpoint.resources.pythonVersion !== option) {
        emit({
          type: 'warning',
          message: `--python-version ${option} overrides python_version="${endpoint.resources.pythonVersion}" of endpoint '${endpoint.name}'`,
        });
      }
    }
    return option;
  }
  if (distinct.length > 1) {
    const where = declared.map((e) => {
      const at = lines.get(e.name);
      return `  ${at ? `${at.file}:${at.line}` : e.file}: '${e.name}' python_version="${e.resources.pythonVersion}"`;
    });
    throw new FerryError('bad_request', `Endpoints declare different Python versions:\n${where.join('\n')}`, {
      hint: 'One deployment has one Python version: make them agree, or pass --python-version.',
    });
  }
  if (distinct.length === 1) return distinct[0]!;
  const match = /^(\d+)\.(\d+)$/.exec(interpreter.version);
  if (!match) {
    throw new FerryError('failed', `Cannot tell the version of ${interpreter.executable}`, {
      hint: 'Pass --python-version (3.10 to 3.13).',
    });
  }
  const major = Number(match[1]);
  const minor = Number(match[2]);
  const local = `${major}.${minor}`;
  const clamped: PythonVersion =
    major < 3 || (major === 3 && minor < 10)
      ? '3.10'
      : major > 3 || minor > 13
        ? '3.13'
        : (local as PythonVersion);
  if (clamped !== local) {
    emit({
      type: 'warning',
      message: `Local Python is ${local}; workers run ${clamped} (supported: ${pythonVersions.join(', ')}). Pass --python-version to choose.`,
    });
  }
  return clamped;
}
