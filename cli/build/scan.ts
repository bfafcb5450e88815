/**
 * Runs the static scanner (scan.py, with the user's python3) and maps what it found to manifest
 * endpoints. User code is parsed, never imported: a project builds without its heavy deps installed.
 */
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { FerryError } from '../../core/errors.js';
import {
  gpuModels,
  type ManifestEndpoint,
  pythonVersions,
  type Resources,
  resourcesSchema,
  routeSchema,
  targetSchema,
} from '../../core/manifest.js';
import { countOf } from '../io.js';
import { projectRequirements } from './deps.js';
import { runProcess, tail } from './process.js';

const locationSchema = z.object({ file: z.string(), line: z.number().int(), message: z.string() }).strict();

const configSchema = z
  .object({
    name: z.string(),
    gpu: z.array(z.union([z.enum(gpuModels), z.literal('any')])).nullable(),
    cpu: z.string().nullable(),
    gpuCount: z.number().int(),
    workersMin: z.number().int(),
    workersMax: z.number().int(),
    idleTimeoutSec: z.number().int(),
    executionTimeoutMs: z.number().int(),
    maxConcurrency: z.number().int(),
    healthCheckGraceSec: z.number().int(),
    env: z.record(z.string(), z.string()),
    secrets: z.array(z.string()).default([]),
    dependencies: z.array(z.string()),
    systemDependencies: z.array(z.string()),
    pythonVersion: z.enum(pythonVersions).nullable(),
  })
  .strict();

const scannedEndpointSchema = z.discriminatedUnion('kind', [
  z
    .object({
      kind: z.literal('queue'),
      file: z.string(),
      line: z.number().int(),
      target: targetSchema,
      config: configSchema,
    })
    .strict(),
  z
    .object({
      kind: z.literal('image'),
      file: z.string(),
      line: z.number().int(),
      image: z.string(),
      config: configSchema,
    })
    .strict(),
  z
    .object({
      kind: z.literal('lb'),
      file: z.string(),
      line: z.number().int(),
      variable: z.string(),
      routes: z.array(routeSchema),
      config: configSchema,
    })
    .strict(),
]);

/** The interpreter that ran scan.py: `sys.version_info` as "3.11" and `sys.executable` (None when unknown). */
const interpreterSchema = z.object({ version: z.string(), executable: z.string().nullable() }).strict();

const scanOutputSchema = z.discriminatedUnion('ok', [
  z
    .object({
      ok: z.literal(true),
      files: z.array(
        z.object({ path: z.string(), module: z.string(), imports: z.array(z.string()) }).strict(),
      ),
      endpoints: z.array(scannedEndpointSchema),
      warnings: z.array(locationSchema),
      python: interpreterSchema,
    })
    .strict(),
  z.object({ ok: z.literal(false), errors: z.array(locationSchema), python: interpreterSchema }).strict(),
]);

export type ScannedEndpoint = z.infer<typeof scannedEndpointSchema>;

export interface ScannedFile {
  path: string;
  module: string;
  imports: string[];
}

export interface ScanResult {
  endpoints: ManifestEndpoint[];
  /** Declaration line of each endpoint by name, for messages that point at the source. */
  lines: Map<string, { file: string; line: number }>;
  files: ScannedFile[];
  warnings: string[];
  /**
   * The interpreter the scan ran on: its version ("3.11") and the binary itself (`sys.executable`, or
   * the command the scan was given when Python cannot tell). The build's later Python steps use both,
   * so `python3` (a pyenv shim, say) is resolved once per build, not once per step.
   */
  python: { version: string; executable: string };
}

export interface ScanOptions {
  projectDir: string;
  /** Project-relative POSIX paths of the .py files to scan; without it scan.py walks the project. */
  files?: string[];
  python?: string;
  signal?: AbortSignal;
}

/** scan.py next to this module, or, from the compiled dist/ tree, the source copy (tsc copies no .py). */
export function scannerPath(): string {
  const candidates = ['./scan.py', '../../../cli/build/scan.py'].map((rel) =>
    fileURLToPath(new URL(rel, import.meta.url)),
  );
  const found = candidates.find((candidate) => existsSync(candidate));
  if (!found)
    throw new FerryError('failed', `The endpoint scanner (scan.py) is missing from this Ferry install`);
  return found;
}

/**
 * Scans the project's endpoints, and checks its requirements.txt lines with the PEP 508 rule scan.py
 * applies to dependencies=[...]: one rule, in one place, and no second Python start for the build.
 * This file reads the lines (comments, options, -r includes); scan.py judges each requirement.
 */
export async function scanProject(options: ScanOptions): Promise<ScanResult> {
  const python = options.python ?? 'python3';
  const requirements = projectRequirements(options.projectDir).requirements.flatMap((requirement) =>
    requirement.source ? [{ ...requirement.source, spec: requirement.spec }] : [],
  );
  const input = { ...(options.files ? { files: options.files } : {}), requirements };
  const result = await runProcess(python, [scannerPath(), options.projectDir, '--input', '-'], {
    stdin: JSON.stringify(input),
    timeoutMs: 120_000,
    signal: options.signal,
  });
  if (result.exitCode !== 0) {
    throw new FerryError('failed', `The endpoint scanner failed (${python}):\n${tail(result.stderr)}`, {
      hint: 'Ferry needs Python 3.8 or newer locally to scan the project.',
    });
  }
  let parsed: z.infer<typeof scanOutputSchema>;
  try {
    parsed = scanOutputSchema.parse(JSON.parse(result.stdout));
  } catch (error) {
    throw new FerryError('failed', 'The endpoint scanner printed output Ferry cannot read', { cause: error });
  }
  if (!parsed.ok) {
    const lines = parsed.errors.map((e) => `  ${e.file}:${e.line}: ${e.message}`);
    const noun = parsed.errors.length === 1 ? 'a problem' : `${parsed.errors.length} problems`;
    throw new FerryError('bad_request', `The project has ${noun}:\n${lines.join('\n')}`, {
      hint: 'Fix the code at the places shown, then build again.',
    });
  }
  const lines = new Map<string, { file: string; line: number }>();
  for (const endpoint of parsed.endpoints)
    lines.set(endpoint.config.name, { file: endpoint.file, line: endpoint.line });
  return {
    endpoints: parsed.endpoints.map(toManifestEndpoint),
    lines,
    files: parsed.files,
    warnings: parsed.warnings.map((w) => `${w.file}:${w.line}: ${w.message}`),
    python: { version: parsed.python.version, executable: parsed.python.executable || python },
  };
}

/** Flash's package, under its name now and its old one: a file that imports it declares Flash's endpoints. */
const flashPackages = ['runpod_flash', 'tetra_rp'];

/**
 * The error for a project where the scan found no endpoint (`ferry build`'s and `ferry dev`'s
 * `message`). When scanned files import Flash's package instead of ferry (`from runpod_flash import
 * Endpoint`), that is the reason, and the message and hint say so: the scan only sees ferry's Endpoint.
 */
export function noEndpointsFound(files: readonly ScannedFile[], message: string, hint: string): FerryError {
  const importers = files.flatMap((file) => {
    const flash = flashPackages.find((pkg) => file.imports.some((i) => i === pkg || i.startsWith(`${pkg}.`)));
    return flash ? [{ file: file.path, flash }] : [];
  });
  if (importers.length === 0) return new FerryError('bad_request', message, { hint });
  const named = importers.slice(0, 3).map((i) => i.file);
  const more = importers.length - named.length;
  const which = more > 0 ? `${named.join(', ')} and ${countOf(more, 'more file')}` : named.join(', ');
  const packages = [...new Set(importers.map((i) => i.flash))].join(' and ');
  return new FerryError(
    'bad_request',
    `${message}: ${which} ${importers.length === 1 ? 'imports' : 'import'} from ${packages}, not ferry`,
    {
      hint: `Change the import to \`from ferry import Endpoint\`: Ferry finds the endpoints that ferry's Endpoint declares.`,
    },
  );
}

export function moduleOf(file: string): string {
  const parts = file.replace(/\.py$/, '').split('/');
  if (parts[parts.length - 1] === '__init__') parts.pop();
  return parts.join('.');
}

export function toManifestEndpoint(scanned: ScannedEndpoint): ManifestEndpoint {
  const { config } = scanned;
  const resources: Resources = resourcesSchema.parse({
    ...(config.gpu ? { gpu: config.gpu } : {}),
    ...(config.cpu !== null ? { cpu: config.cpu } : {}),
    gpuCount: config.gpuCount,
    workersMin: config.workersMin,
    workersMax: config.workersMax,
    idleTimeoutSec: config.idleTimeoutSec,
    executionTimeoutMs: config.executionTimeoutMs,
    maxConcurrency: config.maxConcurrency,
    // 0 (the default) is left out, so endpoints that never set it keep their config hash.
    ...(config.healthCheckGraceSec > 0 ? { healthCheckGraceSec: config.healthCheckGraceSec } : {}),
    env: config.env,
    // Only when named, so endpoints without secrets keep their config hash (no needless rolls).
    ...(config.secrets.length > 0 ? { secrets: config.secrets } : {}),
    dependencies: config.dependencies,
    systemDependencies: config.systemDependencies,
    ...(config.pythonVersion !== null ? { pythonVersion: config.pythonVersion } : {}),
  });
  const common = { name: config.name, file: scanned.file, module: moduleOf(scanned.file), resources };
  const endpoint: ManifestEndpoint =
    scanned.kind === 'queue'
      ? { ...common, kind: 'queue', target: scanned.target, configHash: '' }
      : scanned.kind === 'image'
        ? // A queue endpoint whose worker is the user's prebuilt image: no target of ours runs.
          { ...common, kind: 'queue', image: scanned.image, configHash: '' }
        : { ...common, kind: 'lb', variable: scanned.variable, routes: scanned.routes, configHash: '' };
  return withConfigHash(endpoint);
}

/** Recomputes configHash from the endpoint's resources (call again after changing them). */
export function withConfigHash(endpoint: ManifestEndpoint): ManifestEndpoint {
  // The image is part of the user's configuration: a new tag must roll the workers.
  const hash = configHash(endpoint.resources);
  return {
    ...endpoint,
    configHash: endpoint.image
      ? createHash('sha256').update(`${hash}\n${endpoint.image}`).digest('hex')
      : hash,
  };
}

/**
 * sha256 over a canonical JSON of the user-owned resource configuration only. Platform-injected values
 * (fingerprint, endpoint ids, keys) never enter it, so an unchanged config never looks drifted
 * (flash PR #319 / #236).
 */
export function configHash(resources: Resources): string {
  return createHash('sha256').update(canonicalJson(resources)).digest('hex');
}

export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
  }
  return JSON.stringify(value);
}
