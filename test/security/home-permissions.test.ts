/**
 * FERRY_HOME is 0700 and its database and key files 0600: created that way, and tightened on start
 * when something left them looser (docs/security.md).
 */
import { chmodSync, mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { LocalProvider, localApiKey } from '../../cli/providers/local.js';
import { startLocalPlatform } from '../../core/adapters/local/platform.js';

const modeOf = (path: string) => statSync(path).mode & 0o777;
const dirs: string[] = [];
const tempDir = () => {
  const dir = mkdtempSync(join(tmpdir(), 'ferry-home-'));
  dirs.push(dir);
  return dir;
};
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

describe('FERRY_HOME file modes', () => {
  it('creates the home 0700 and the database and key file 0600', async () => {
    const home = join(tempDir(), 'home');
    const provider = new LocalProvider({ home, env: {}, projectDir: tempDir() });
    await localApiKey(home, provider.control, {}, tempDir());
    await provider.close();
    expect(modeOf(home)).toBe(0o700);
    expect(modeOf(join(home, 'ferry.db'))).toBe(0o600);
    expect(modeOf(join(home, 'api-key'))).toBe(0o600);
  });

  it('tightens a home and files left readable by others when the platform starts', async () => {
    const home = join(tempDir(), 'home');
    mkdirSync(home, { mode: 0o755 });
    chmodSync(home, 0o755);
    for (const name of ['ferry.db', 'api-key', 'secrets.key']) {
      writeFileSync(join(home, name), '');
      chmodSync(join(home, name), 0o644);
    }
    const platform = await startLocalPlatform({ dataDir: home, port: 0 });
    try {
      expect(modeOf(home)).toBe(0o700);
      for (const name of ['ferry.db', 'ferry.db-wal', 'ferry.db-shm', 'api-key', 'secrets.key']) {
        expect([name, modeOf(join(home, name))]).toEqual([name, 0o600]);
      }
    } finally {
      await platform.close();
    }
  });
});
