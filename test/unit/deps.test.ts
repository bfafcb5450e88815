/**
 * parseRequirementsFile and projectRequirements (cli/build/deps.ts): how requirements.txt is read
 * before scan.py checks each requirement (test/unit/scan.test.ts) and pip installs them: what each
 * line hands on, and the file and line a message names; and what the build reads of pip's output.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  parseRequirementsFile,
  pipCouldNotFind,
  pipProgressOf,
  projectRequirements,
} from '../../cli/build/deps.js';
import { FerryError } from '../../core/errors.js';

const tempDirs: string[] = [];

function project(files: Record<string, string>): string {
  const root = mkdtempSync(path.join(tmpdir(), 'deps-'));
  tempDirs.push(root);
  for (const [rel, content] of Object.entries(files)) {
    mkdirSync(path.dirname(path.join(root, rel)), { recursive: true });
    writeFileSync(path.join(root, rel), content);
  }
  return root;
}

afterAll(() => {
  for (const dir of tempDirs) rmSync(dir, { recursive: true, force: true });
});

describe('parseRequirementsFile', () => {
  it('hands on each requirement with the file and line it is written on; options and comments are no requirement', () => {
    const root = project({
      'requirements.txt': [
        '# comment',
        '',
        '--index-url https://pypi.org/simple',
        '-c constraints.txt',
        '-r deps/more.txt',
        'pillow  # trailing comment',
        'numpy==2.* \\',
        '    --hash=sha256:89ab',
        'uvloop; sys_platform != "win32"',
      ].join('\n'),
      'deps/more.txt': '\ntinydep==1.0\n',
    });
    const parsed = parseRequirementsFile(path.join(root, 'requirements.txt'), 'requirements.txt');
    expect(parsed.requirements.map(({ spec, origin, source }) => ({ spec, origin, source }))).toEqual([
      {
        spec: 'tinydep==1.0',
        origin: path.join('deps', 'more.txt:2'),
        source: { file: path.join('deps', 'more.txt'), line: 2 },
      },
      { spec: 'pillow', origin: 'requirements.txt:6', source: { file: 'requirements.txt', line: 6 } },
      { spec: 'numpy==2.*', origin: 'requirements.txt:7', source: { file: 'requirements.txt', line: 7 } },
      {
        spec: 'uvloop; sys_platform != "win32"',
        origin: 'requirements.txt:9',
        source: { file: 'requirements.txt', line: 9 },
      },
    ]);
    expect(parsed.pipArgs).toEqual([
      '--index-url',
      'https://pypi.org/simple',
      '-c',
      path.join(root, 'constraints.txt'),
    ]);
  });

  it("ends a requirement where pip does, at the first word starting with '-': an option's value goes too", () => {
    const root = project({
      'requirements.txt':
        'torch==2.1.0 --hash=sha256:0123 --hash sha256:4567\nfoo @ https://example.com/foo-1.0-py3-none-any.whl --hash sha256:89\n',
    });
    const parsed = parseRequirementsFile(path.join(root, 'requirements.txt'), 'requirements.txt');
    expect(parsed.requirements.map((r) => r.spec)).toEqual([
      'torch==2.1.0',
      'foo @ https://example.com/foo-1.0-py3-none-any.whl',
    ]);
  });

  it('keeps refusing an editable install: it cannot go into an artifact', () => {
    const root = project({ 'requirements.txt': 'pillow\n-e ./local\n' });
    const error = (() => {
      try {
        parseRequirementsFile(path.join(root, 'requirements.txt'), 'requirements.txt');
      } catch (thrown) {
        return thrown;
      }
    })();
    expect(FerryError.is(error)).toBe(true);
    expect((error as FerryError).message).toBe(
      'requirements.txt:2: editable installs (-e) cannot go into a deployment artifact',
    );
  });
});

describe('projectRequirements', () => {
  it("reads the project's requirements.txt, or nothing without one", () => {
    expect(projectRequirements(project({ 'w.py': '' }))).toEqual({
      requirements: [],
      pipArgs: [],
      warnings: [],
    });
    const parsed = projectRequirements(project({ 'requirements.txt': 'pillow\n--no-binary :all:\n' }));
    expect(parsed.requirements.map((r) => r.origin)).toEqual(['requirements.txt:1']);
    expect(parsed.warnings).toEqual([
      'requirements.txt:2: ignoring the option "--no-binary :all:" (not supported in a build)',
    ]);
  });
});

describe('pipProgressOf: the pip lines a build shows while pip runs', () => {
  it('keeps the fetch and install steps, shortens a retry of the index, and drops the rest', () => {
    expect(pipProgressOf('Collecting requests')).toBe('Collecting requests');
    expect(pipProgressOf('  Downloading requests-2.34.2-py3-none-any.whl (64 kB)')).toBe(
      'Downloading requests-2.34.2-py3-none-any.whl (64 kB)',
    );
    expect(pipProgressOf('Installing collected packages: urllib3, requests')).toBe(
      'Installing collected packages: urllib3, requests',
    );
    expect(
      pipProgressOf(
        "WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f87>: Failed to establish a new connection: [Errno -2] Name or service not known')': /simple/requests/",
      ),
    ).toBe('retrying /simple/requests/: the package index did not answer');
    expect(pipProgressOf('Looking in indexes: https://pypi.org/simple')).toBeUndefined();
    expect(pipProgressOf('  Requirement already satisfied: idna in ./x')).toBeUndefined();
  });
});

describe('pipCouldNotFind: the requirement a failed pip names', () => {
  it("names the package pip could not find, a dependency's too, and none for another failure", () => {
    // pip 23's own lines (a requirement, then a dependency of brokenpkg, with no wheel for it).
    expect(
      pipCouldNotFind(
        'ERROR: Could not find a version that satisfies the requirement NumPy>=2 (from versions: none)\n' +
          'ERROR: No matching distribution found for NumPy>=2',
      ),
    ).toEqual(['numpy']);
    expect(
      pipCouldNotFind(
        'ERROR: Could not find a version that satisfies the requirement nosuchdep (from brokenpkg) (from versions: none)\n' +
          'ERROR: No matching distribution found for nosuchdep',
      ),
    ).toEqual(['nosuchdep']);
    expect(pipCouldNotFind('/tmp/venv/bin/python3: No module named pip')).toEqual([]);
  });
});
