/**
 * `ferry serve --stop` (README, "The local provider"): stops the platform `ferry serve --detach` (or
 * a deploy) left running for this FERRY_HOME, through the real binary; says so when none runs; and
 * never signals a process that merely took over a stale server.json's pid.
 */
import { spawn } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { CliSandbox } from './cli-support.js';

const sandbox = new CliSandbox();
afterAll(() => sandbox.cleanup());

const answers = (url: string) =>
  fetch(url, { signal: AbortSignal.timeout(2_000) }).then(
    () => true,
    () => false,
  );

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

describe('ferry serve --stop', () => {
  it('stops the background platform of this FERRY_HOME, and then has nothing to stop', async () => {
    const started = await sandbox.run(['serve', '--detach', '--port', '0']);
    expect(started.code, started.stderr).toBe(0);
    const url = started.stdout.trim();
    expect(await answers(url)).toBe(true);
    const serverJson = path.join(sandbox.home, 'server.json');
    const { pid } = JSON.parse(readFileSync(serverJson, 'utf8')) as { pid: number };

    const stop = await sandbox.run(['serve', '--stop']);
    expect(stop.code, stop.stderr).toBe(0);
    expect(stop.stderr).toContain(`✓ Stopped ferry serve (pid ${pid})`);
    expect(alive(pid)).toBe(false);
    expect(await answers(url)).toBe(false);
    expect(existsSync(serverJson)).toBe(false);

    const again = await sandbox.run(['serve', '--stop']);
    expect(again.code).toBe(0);
    expect(again.stderr).toContain(`No platform serves ${sandbox.home}`);
  }, 60_000);

  it('leaves alone a process that now has a stale server.json pid', async () => {
    const bystander = spawn('sleep', ['60'], { detached: true, stdio: 'ignore' });
    try {
      writeFileSync(
        path.join(sandbox.home, 'server.json'),
        JSON.stringify({ pid: bystander.pid, url: 'http://127.0.0.1:9/', startedAt: Date.now() }),
      );
      const stop = await sandbox.run(['serve', '--stop']);
      expect(stop.code).toBe(0);
      expect(stop.stderr).toContain('No platform serves');
      expect(alive(bystander.pid!)).toBe(true);
    } finally {
      process.kill(-bystander.pid!, 'SIGKILL');
    }
  }, 30_000);
});
