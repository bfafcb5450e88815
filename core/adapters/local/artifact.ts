/**
 * Unpacking a deployment artifact, which is user-supplied (docs/security.md): only plain files,
 * folders and relative links that stay inside, every warning an error (an absolute path, a `..` entry, a truncated archive), owners never
 * taken from the archive, and permission bits limited to rwx — no setuid, setgid or sticky bits.
 */
import { posix } from 'node:path';
import { extract, type ReadEntry } from 'tar';
import { FerryError } from '../../errors.js';

const allowedTypes = new Set(['File', 'OldFile', 'ContiguousFile', 'Directory']);

/** A relative link whose target stays inside the artifact (installed packages may carry these). */
function linkStaysInside(entryPath: string, target: string): boolean {
  if (target.length === 0 || posix.isAbsolute(target)) return false;
  const resolved = posix.normalize(posix.join(posix.dirname(entryPath), target));
  return resolved !== '..' && !resolved.startsWith('../');
}

export async function extractArtifact(file: string, cwd: string): Promise<void> {
  const refused: string[] = [];
  await extract({
    file,
    cwd,
    strict: true,
    preserveOwner: false,
    filter: (path, entry) => {
      const e = entry as ReadEntry;
      if (e.type === 'SymbolicLink' && !linkStaysInside(path, e.linkpath ?? '')) {
        refused.push(`${path} -> ${e.linkpath} (a link out of the artifact)`);
        return false;
      }
      if (!allowedTypes.has(e.type) && e.type !== 'SymbolicLink') {
        refused.push(`${path} (${e.type})`);
        return false;
      }
      // Mutated before the entry is written: unpack reads the mode after the filter.
      if (e.mode !== undefined) e.mode &= 0o777;
      return true;
    },
  });
  if (refused.length > 0) {
    throw new FerryError(
      'failed',
      `the artifact holds entries that are neither files nor folders: ${refused.slice(0, 5).join(', ')}`,
    );
  }
}
