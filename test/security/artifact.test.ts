/**
 * Artifacts are unpacked strictly (core/adapters/local/artifact.ts): setuid bits are dropped, and an
 * archive with a `..` entry, an absolute path, a link or a device node is refused, not half-unpacked
 * silently. Archives are written by Python's tarfile, which can write what node-tar will not.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { extractArtifact } from '../../core/adapters/local/artifact.js';

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** Writes a .tar.gz whose entries are given as Python tarfile calls. */
function archive(entries: string): { file: string; out: string; root: string } {
  const root = mkdtempSync(join(tmpdir(), 'ferry-tar-'));
  dirs.push(root);
  const file = join(root, 'a.tar.gz');
  const out = join(root, 'out');
  mkdirSync(out);
  const script = `
import io, tarfile, sys
t = tarfile.open(sys.argv[1], 'w:gz')
def add(name, data=b'x', mode=0o644, type=tarfile.REGTYPE, link=''):
    info = tarfile.TarInfo(name); info.mode = mode; info.type = type; info.linkname = link
    info.size = len(data) if type == tarfile.REGTYPE else 0
    t.addfile(info, io.BytesIO(data) if type == tarfile.REGTYPE else None)
${entries}
t.close()
`;
  execFileSync('python3', ['-c', script, file]);
  return { file, out, root };
}

describe('artifact extraction', () => {
  it('unpacks files and folders and drops setuid, setgid and sticky bits', async () => {
    const a = archive(`add('app', type=tarfile.DIRTYPE, mode=0o1777)\nadd('app/run.sh', mode=0o6755)`);
    await extractArtifact(a.file, a.out);
    expect(statSync(join(a.out, 'app/run.sh')).mode & 0o7777).toBe(0o755 & ~process.umask());
    expect(statSync(join(a.out, 'app')).mode & 0o7000).toBe(0);
  });

  it('keeps a relative link inside the artifact', async () => {
    const a = archive(`add('lib/real.py')\nadd('lib/alias.py', type=tarfile.SYMTYPE, link='real.py')`);
    await extractArtifact(a.file, a.out);
    expect(statSync(join(a.out, 'lib/alias.py')).isFile()).toBe(true);
  });

  it.each([
    ['a .. entry', `add('../escape')`],
    ['an absolute path', `add('/tmp/ferry-absolute-escape')`],
    ['a symlink out of the artifact', `add('link', type=tarfile.SYMTYPE, link='/etc/passwd')`],
    ['a relative symlink that climbs out', `add('d/link', type=tarfile.SYMTYPE, link='../../etc')`],
    ['a hard link', `add('a')\nadd('hard', type=tarfile.LNKTYPE, link='a')`],
    ['a device node', `add('dev', type=tarfile.CHRTYPE)`],
  ])('refuses an archive with %s', async (_name, entries) => {
    const a = archive(entries);
    await expect(extractArtifact(a.file, a.out)).rejects.toThrow();
    expect(existsSync(join(a.root, 'escape'))).toBe(false);
    expect(existsSync('/tmp/ferry-absolute-escape')).toBe(false);
  });
});
