/**
 * `ferry serve` as root with neither --worker-uids nor --worker-user warns that endpoint code runs as
 * root (docs/security.md): it was silent, and a handler could read every key in FERRY_HOME.
 */
import { describe, expect, it } from 'vitest';
import { rootWithoutIsolation } from '../../cli/commands/serve.js';

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
