/**
 * The artifact: the build dir (sources, installed packages, ferry_manifest.json) as a gzip tar with
 * entries at the archive root. Excluded packages are filtered here, at tar time, by top-level entry:
 * pip may pull them in transitively, and constraining pip instead would break its resolution.
 */
import { mkdir, readdir, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { create } from 'tar';
import { FerryError } from '../../core/errors.js';
import { limits } from '../../core/limits.js';
import { type Manifest, manifestFileName, manifestSchema } from '../../core/manifest.js';

export interface PackOptions {
  buildDir: string;
  outputPath: string;
  manifest: Manifest;
  /** Top-level entries of the build dir to leave out (excluded packages and their dist-info). */
  skipTopLevel?: ReadonlySet<string>;
  /** Defaults to the 1.5 GB of docs/api.md#limits; tests set a tiny one. */
  maxBytes?: number;
}

export async function packArtifact(options: PackOptions): Promise<{ artifactBytes: number }> {
  const manifest = manifestSchema.parse(options.manifest);
  await writeFile(path.join(options.buildDir, manifestFileName), `${JSON.stringify(manifest, null, 2)}\n`);
  const skip = options.skipTopLevel ?? new Set<string>();
  const entries = (await readdir(options.buildDir)).filter((entry) => !skip.has(entry)).sort();
  await mkdir(path.dirname(options.outputPath), { recursive: true });
  await rm(options.outputPath, { force: true });
  await create(
    {
      gzip: true,
      file: options.outputPath,
      cwd: options.buildDir,
      // No local uid/gid/user names in the archive.
      portable: true,
      filter: (entryPath) =>
        !entryPath.split('/').some((part) => part === '__pycache__') && !entryPath.endsWith('.pyc'),
    },
    entries,
  );
  const artifactBytes = (await stat(options.outputPath)).size;
  const maxBytes = options.maxBytes ?? limits.artifactBytes;
  if (artifactBytes > maxBytes) {
    await rm(options.outputPath, { force: true });
    throw new FerryError(
      'too_large',
      `The deployment is too large: ${formatMb(artifactBytes)} MB (limit ${formatMb(maxBytes)} MB)`,
      { hint: 'Leave packages out with --exclude <packages>' },
    );
  }
  return { artifactBytes };
}

function formatMb(bytes: number): string {
  const mb = bytes / (1024 * 1024);
  return mb >= 10 || Number.isInteger(mb) ? String(Math.round(mb)) : mb.toFixed(2);
}
