/**
 * `ferry serve` as root with neither --worker-uids nor --worker-user warns that endpoint code runs as
 * root (docs/security.md): it was silent, and a handler could read every key in FERRY_HOME. With
 * --worker-uids it warns of GPU device files every user can open, which the uids do not separate.
 */
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { gpuDevicesOpenToAll, rootWithoutIsolation } from '../../cli/commands/serve-run.js';

describe('serving as root', () => {
  it('warns without an isolation flag, naming --worker-uids', () => {
    expect(rootWithoutIsolation(0, [])).toMatch(/^warning: serving as root .*--worker-uids \d+-\d+/);
  });

  it('says nothing with a flag, or as another user', () => {
    expect(rootWithoutIsolation(0, ['--worker-uids', '200000-200100'])).toBeUndefined();
    expect(rootWithoutIsolation(0, ['--worker-user', 'ferry'])).toBeUndefined();
    expect(rootWithoutIsolation(1000, [])).toBeUndefined();
    expect(rootWithoutIsolation(undefined, [])).toBeUndefined();
  });
});

describe('GPU devices under --worker-uids', () => {
  const dirs: string[] = [];
  afterEach(() => {
    for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  });
  /** A stand-in for /dev: plain files with the modes given (the check reads modes only). */
  const devices = (modes: Record<string, number>): string => {
    const dir = mkdtempSync(join(tmpdir(), 'ferry-dev-'));
    dirs.push(dir);
    for (const [name, mode] of Object.entries(modes)) {
      writeFileSync(join(dir, name), '');
      chmodSync(join(dir, name), mode);
    }
    return dir;
  };

  it('warns in one line naming the devices every user can open, and the fix', () => {
    const dev = devices({
      nvidia0: 0o666,
      nvidiactl: 0o666,
      'nvidia-uvm': 0o666,
      nvidia1: 0o660,
      null: 0o666,
    });
    const warning = gpuDevicesOpenToAll(true, dev);
    expect(warning).toMatch(/^warning: /);
    expect(warning).not.toContain('\n');
    expect(warning).toContain(
      `${join(dev, 'nvidia-uvm')}, ${join(dev, 'nvidia0')}, ${join(dev, 'nvidiactl')} `,
    );
    expect(warning).not.toMatch(/nvidia1|null/);
    expect(warning).toMatch(/container of its own.*device cgroup.*docs\/security\.md/);
  });

  it('counts the devices past three, and a device only others may write is open too', () => {
    const dev = devices({ nvidia0: 0o662, nvidia1: 0o666, nvidia2: 0o666, nvidia3: 0o666, nvidiactl: 0o666 });
    expect(gpuDevicesOpenToAll(true, dev)).toContain(`${join(dev, 'nvidia2')} and 2 more can be opened`);
  });

  it('says nothing when the devices are closed to others, absent, or --worker-uids was not given', () => {
    expect(gpuDevicesOpenToAll(true, devices({ nvidia0: 0o660, nvidiactl: 0o660 }))).toBeUndefined();
    expect(gpuDevicesOpenToAll(true, devices({}))).toBeUndefined();
    expect(gpuDevicesOpenToAll(true, join(tmpdir(), 'ferry-no-such-dev'))).toBeUndefined();
    expect(gpuDevicesOpenToAll(false, devices({ nvidia0: 0o666 }))).toBeUndefined();
  });
});
