/**
 * Makes tiny, valid py3-none-any wheels for tests: there is no PyPI here, so builds install from a
 * local folder with pip `--no-index --find-links <dir>`. Written with Python's zipfile (real python3
 * is a test dependency anyway) so the archive is exactly what pip expects.
 */
import { execFileSync } from 'node:child_process';

export interface WheelSpec {
  /** Distribution name, e.g. `tinydep`. */
  name: string;
  version?: string;
  /** Import package name; defaults to the name with `-` as `_`. */
  packageName?: string;
  /** Contents of `<package>/__init__.py`. */
  code?: string;
  /** `Requires-Dist` entries. */
  requires?: string[];
}

const writer = `
import base64, hashlib, json, os, sys, zipfile
spec = json.loads(sys.argv[1]); out_dir = sys.argv[2]
name, version, pkg = spec["name"], spec["version"], spec["packageName"]
dist = name.replace("-", "_")
info = "%s-%s.dist-info" % (dist, version)
files = {
    pkg + "/__init__.py": spec["code"],
    info + "/METADATA": "Metadata-Version: 2.1\\nName: %s\\nVersion: %s\\n%s" % (
        name, version, "".join("Requires-Dist: %s\\n" % r for r in spec["requires"])),
    info + "/WHEEL": "Wheel-Version: 1.0\\nGenerator: ferry-tests\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n",
    info + "/top_level.txt": pkg + "\\n",
}
def digest(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
record = "".join("%s,%s,%d\\n" % (p, digest(c.encode()), len(c.encode())) for p, c in files.items())
record += info + "/RECORD,,\\n"
path = os.path.join(out_dir, "%s-%s-py3-none-any.whl" % (dist, version))
with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
    for p, c in files.items():
        zf.writestr(p, c)
    zf.writestr(info + "/RECORD", record)
print(path)
`;

/** Writes the wheel into `dir` and returns its path. */
export function writeWheel(dir: string, spec: WheelSpec): string {
  const full = {
    name: spec.name,
    version: spec.version ?? '1.0.0',
    packageName: spec.packageName ?? spec.name.replace(/-/g, '_'),
    code: spec.code ?? `VALUE = ${JSON.stringify(spec.name)}\n`,
    requires: spec.requires ?? [],
  };
  return execFileSync('python3', ['-c', writer, JSON.stringify(full), dir], { encoding: 'utf8' }).trim();
}
