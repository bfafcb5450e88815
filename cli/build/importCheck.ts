/**
 * The import check of `ferry build` (and so of `ferry deploy`, before anything is uploaded): every
 * endpoint module is imported from the staged artifact (its sources and the installed
 * dependencies), in a subprocess of the target Python, the way a worker will import it. A module
 * that cannot import fails the build with its own error instead of failing every worker later.
 *
 * Not fatal: a missing package that the base images ship (torch, numpy, ...: not installed into
 * the artifact) and, with --no-deps, any missing package (the transitive ones were left out on
 * purpose); a failure inside an installed package's own code (a Linux wheel on a Mac) is a warning.
 */
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { FerryError } from '../../core/errors.js';
import { baseImagePackages } from '../../core/limits.js';
import type { ManifestEndpoint } from '../../core/manifest.js';
import { ferryPythonPath } from '../config.js';
import { normalizeName } from './deps.js';
import type { ProgressSink } from './events.js';
import { runProcess } from './process.js';

/** How long the import check of all the endpoint modules may take. */
export const importCheckTimeoutMs = 180_000;
/** What import_check.py writes to stderr before each import (its STARTED). */
const startedMarker = 'ferry-import-check: importing ';

const withoutMarkers = (stderr: string): string =>
  stderr
    .split('\n')
    .filter((line) => !line.startsWith(startedMarker))
    .join('\n');

const reportSchema = z.object({
  results: z.array(
    z.object({
      module: z.string(),
      ok: z.boolean(),
      type: z.string().optional(),
      message: z.string().optional(),
      missing: z.string().optional(),
      inPackage: z.boolean().optional(),
      traceback: z.string().optional(),
    }),
  ),
});

function checkerPath(): string {
  const candidates = ['./import_check.py', '../../../cli/build/import_check.py'].map((rel) =>
    fileURLToPath(new URL(rel, import.meta.url)),
  );
  const found = candidates.find((candidate) => existsSync(candidate));
  if (!found)
    throw new FerryError('failed', 'The import checker (import_check.py) is missing from this Ferry install');
  return found;
}

/**
 * The build's own interpreter when it is the workers' version; else `python3.12` (say) when that is
 * installed; else the build's own interpreter. The first case needs no probe: the scan reported it.
 */
async function targetPython(
  pythonVersion: string,
  build: { version: string; executable: string },
): Promise<string> {
  if (build.version === pythonVersion) return build.executable;
  const named = `python${pythonVersion}`;
  try {
    const probe = await runProcess(named, ['-c', 'import sys'], { timeoutMs: 20_000 });
    if (probe.exitCode === 0) return named;
  } catch {
    // not installed
  }
  return build.executable;
}

export async function checkImports(options: {
  stagedDir: string;
  endpoints: readonly ManifestEndpoint[];
  projectFiles: readonly string[];
  pythonVersion: string;
  /** The interpreter the build's scan ran on (`ScanResult.python`). */
  python: { version: string; executable: string };
  noDeps: boolean;
  emit: ProgressSink;
  signal?: AbortSignal | undefined;
  /** How long the imports may take in all (default importCheckTimeoutMs). */
  timeoutMs?: number;
}): Promise<void> {
  const modules = [...new Set(options.endpoints.map((e) => e.module))];
  const python = await targetPython(options.pythonVersion, options.python);
  const timeoutMs = options.timeoutMs ?? importCheckTimeoutMs;
  let importing: string | undefined;
  const result = await runProcess(python, [checkerPath(), ...modules], {
    cwd: options.stagedDir,
    timeoutMs,
    onLine: (line) => {
      if (line.startsWith(startedMarker)) importing = line.slice(startedMarker.length).trim();
    },
    // Module-level code that blocks or runs long is the project's to change: exit 2 naming the
    // module, not the checker's path and a timeout in ms (exit 1).
    timeoutError: () =>
      new FerryError(
        'bad_request',
        `Importing ${importing === undefined ? 'the endpoint modules' : `endpoint module ${importing}`} did not finish within ${Math.round(timeoutMs / 1000)} s: ferry build imports each endpoint module once, as a worker would, and its module-level code runs then`,
        {
          hint: "Move slow or blocking work (a model download or load, a server, input()) out of module level, into the handler or a class endpoint's __init__, which the check does not call.",
        },
      ),
    ...(options.signal ? { signal: options.signal } : {}),
    env: {
      // The checker puts these first on sys.path itself: joined into PYTHONPATH, a folder with the
      // path delimiter (':') in its name would split into two that do not exist. The user's own
      // PYTHONPATH is cleared: a worker does not have it.
      PYTHONPATH: '',
      FERRY_CHECK_PATH: JSON.stringify([options.stagedDir, ferryPythonPath()]),
      FERRY_CHECK_ROOT: options.stagedDir,
      FERRY_CHECK_PROJECT_FILES: JSON.stringify(options.projectFiles),
      // Not inside a worker: decorators return remote wrappers, nothing is called.
      FERRY_ENDPOINT_NAME: '',
    },
  });
  // Before the report is read: a check that failed on it still had a process outlive it.
  if (result.outputHeld) {
    options.emit({
      type: 'warning',
      message:
        `the import check of ${modules.join(', ')} ended, but a process started while importing ` +
        "still held its output: it left the check's process group (setsid, start_new_session=True, " +
        'a daemon), so the build could not stop it and it may still be running. Start servers and ' +
        "background processes in the handler or a class endpoint's __init__, not at module level",
    });
  }
  let parsed: z.infer<typeof reportSchema>;
  try {
    parsed = reportSchema.parse(JSON.parse(result.stdout.trim().split('\n').pop() ?? ''));
  } catch {
    throw new FerryError(
      'failed',
      `The import check did not finish:\n${withoutMarkers(result.stderr).trim().slice(-2000)}`,
      {
        hint: 'A module that exits or blocks at import time cannot be served either; move that code into the handler.',
      },
    );
  }
  const shipped = new Set(baseImagePackages.map((n) => normalizeName(n)));
  const fatal: string[] = [];
  for (const r of parsed.results) {
    if (r.ok) continue;
    const missing = r.missing ? normalizeName(r.missing) : undefined;
    const where = `${r.module}: ${r.type}: ${r.message}`;
    if (missing && shipped.has(missing)) {
      options.emit({
        type: 'warning',
        message: `${r.module} imports ${r.missing}, which is not installed here; the base image provides it`,
      });
    } else if (missing && options.noDeps) {
      options.emit({ type: 'warning', message: `${where} (--no-deps: not checked further)` });
    } else if (r.inPackage && !missing) {
      options.emit({
        type: 'warning',
        message: `${where} (inside an installed package; it may import on the worker)`,
      });
    } else {
      fatal.push(`${where}\n${(r.traceback ?? '').trimEnd()}`);
    }
  }
  if (fatal.length > 0) {
    throw new FerryError('bad_request', `An endpoint module cannot be imported:\n${fatal.join('\n\n')}`, {
      hint: "Fix the import, or add the missing package to the endpoint's dependencies=[...] or requirements.txt.",
    });
  }
}
