/**
 * Every package in the lockfile that has an install script is approved in package.json's
 * `allowScripts`, by name. npm 11 warns about an unapproved one on every install; npm 12 skips it
 * ("Dependency install scripts are blocked by default",
 * https://docs.npmjs.com/cli/v12/commands/npm-install-scripts), and better-sqlite3's is what fetches
 * or builds its native module: without it `npm ci && npm start` would install and then fail to open
 * the job store.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const readJson = (file: string) => JSON.parse(readFileSync(path.join(root, file), 'utf8'));

/** The package name of a lockfile key: `node_modules/a/node_modules/@s/b` → `@s/b`. */
const nameOf = (key: string) => key.slice(key.lastIndexOf('node_modules/') + 'node_modules/'.length);

describe('install scripts', () => {
  const lock = readJson('package-lock.json') as {
    packages: Record<string, { hasInstallScript?: boolean }>;
  };
  const allowed = (readJson('package.json') as { allowScripts?: Record<string, boolean> }).allowScripts ?? {};
  const withScripts = Object.entries(lock.packages)
    .filter(([key, entry]) => key !== '' && entry.hasInstallScript)
    .map(([key]) => nameOf(key));

  it('are approved for every package of the lockfile that has one', () => {
    // The lockfile names the native module the job store needs: if it stops doing so, this test
    // reads nothing and must say so.
    expect(withScripts).toContain('better-sqlite3');
    expect(withScripts.filter((name) => allowed[name] !== true)).toEqual([]);
  });

  it('are approved for nothing the lockfile no longer holds', () => {
    expect(Object.keys(allowed).filter((name) => !withScripts.includes(name))).toEqual([]);
  });
});
