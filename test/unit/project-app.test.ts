/**
 * Which app a project folder is (cli/project-config.ts projectAppName, cli/config.ts appNameOf) and which names an app or
 * environment may have (core/deployment.ts checkRecordName). The CLI records endpoints under the app
 * it derives and the `ferry` Python package calls them by the app it derives
 * (worker-image/python/ferry/client.py app_name_of): the two must agree on every folder name, or a
 * script in the folder finds its endpoints "not deployed" (as `ferry dev` once recorded the raw folder
 * name, `my.demo`, where the script asked for `my-demo`).
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { appNameOf } from '../../cli/config.js';
import { devApp } from '../../cli/dev/state.js';
import { projectAppName } from '../../cli/project-config.js';
import { checkRecordName } from '../../core/deployment.js';
import { exitCode, FerryError } from '../../core/errors.js';

const repo = path.resolve(import.meta.dirname, '..', '..');
const scratch = mkdtempSync(path.join(tmpdir(), 'ferry-project-app-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

const folders = [
  'shop',
  'my.demo',
  'my project',
  'Ünïcode-app',
  '__private',
  '-dash-first',
  '...',
  'a'.repeat(100),
  `x${'.'.repeat(70)}y`,
  'ünï',
  'shop_',
  `${'a'.repeat(62)}.b`,
  'my app!',
  '__x__',
  '123',
  '!!!',
];

/** What the Python package answers for each folder, from one python3 run. */
function pythonAppNames(dirs: string[]): string[] {
  const script = [
    'import json, sys',
    'from ferry.client import app_name_of',
    'print(json.dumps([app_name_of(d) for d in json.load(sys.stdin)]))',
  ].join('\n');
  const out = execFileSync('python3', ['-c', script], {
    input: JSON.stringify(dirs),
    env: { ...process.env, PYTHONPATH: path.join(repo, 'worker-image', 'python') },
    encoding: 'utf8',
  });
  return JSON.parse(out) as string[];
}

describe('the app of a project folder', () => {
  const dirs = folders.map((name) => path.join(scratch, name));

  it('is the same in the CLI and in the Python package, and always a valid app name', () => {
    const fromCli = dirs.map(appNameOf);
    expect(pythonAppNames(dirs)).toEqual(fromCli);
    expect(fromCli.slice(0, 3)).toEqual(['shop', 'my-demo', 'my-project']);
    // Ending in a letter or digit, as `ferry init` names the project in its files: "ünï" is `n`
    // there and to `ferry build`/`deploy` alike, never `n-`.
    expect(fromCli.slice(-7, -4)).toEqual(['n', 'shop', 'a'.repeat(62)]);
    // Punctuation, underscores around the name, digits only, and nothing usable at all.
    expect(fromCli.slice(-4)).toEqual(['my-app', 'x', '123', 'app']);
    for (const name of fromCli) {
      expect(checkRecordName('app', name)).toBe(name);
      expect(name).toMatch(/[A-Za-z0-9]$/);
    }
  });

  it('is --app first, then .ferry/config.json, then the folder; ferry dev uses the same', () => {
    const project = path.join(scratch, 'my.demo');
    mkdirSync(project, { recursive: true });
    expect(projectAppName(project)).toBe('my-demo');
    expect(devApp(project)).toBe('my-demo');
    mkdirSync(path.join(project, '.ferry'), { recursive: true });
    writeFileSync(path.join(project, '.ferry', 'config.json'), JSON.stringify({ app: 'shop' }));
    expect(projectAppName(project)).toBe('shop');
    expect(devApp(project)).toBe('shop');
    expect(projectAppName(project, 'other')).toBe('other');
  });
});

describe('app and environment names', () => {
  it('take 1 to 63 letters, digits, _ and - (environments also .), starting with a letter or digit', () => {
    for (const name of ['production', 'staging-2', 'dev_x', 'A', '9lives', 'x'.repeat(63)]) {
      expect(checkRecordName('app', name)).toBe(name);
      expect(checkRecordName('environment', name)).toBe(name);
    }
    expect(checkRecordName('environment', 'prod.1')).toBe('prod.1');
  });

  const refusal = (what: 'app' | 'environment', name: string): FerryError => {
    try {
      checkRecordName(what, name);
    } catch (error) {
      expect(FerryError.is(error), name).toBe(true);
      return error as FerryError;
    }
    throw new Error(`${what} name ${JSON.stringify(name)} was accepted`);
  };

  it('refuse anything else with a usage error (exit 2) that says what and how', () => {
    for (const name of ['', 'bad env', 'a/b', '-x', '_x', '.hidden', 'x'.repeat(64), 'tab\there']) {
      const error = refusal('environment', name);
      expect(exitCode(error)).toBe(2);
      expect(error.message).toBe(`${JSON.stringify(name)} is not a valid environment name`);
      expect(error.hint).toContain('1 to 63 letters, digits, ., _ and -');
    }
    const app = refusal('app', 'shop.v2');
    expect(app.message).toBe('"shop.v2" is not a valid app name');
    expect(app.hint).toContain('.ferry/config.json');
  });
});
