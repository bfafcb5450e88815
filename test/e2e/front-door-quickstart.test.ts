/**
 * The local front door against `ferry quickstart` (examples/hello: the `hello` queue endpoint and the
 * load-balanced `hello-api`, served by Ferry's Python LB runtime), through the real binary:
 *
 * - A key revoked with `ferry keys revoke` (another process, the same SQLite file) is refused on the
 *   very next request.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CliSandbox, stopChild } from './cli-support.js';

describe('the front door of ferry quickstart', () => {
  const sandbox = new CliSandbox();
  let stop: () => Promise<unknown> = async () => undefined;
  let queueUrl = '';

  beforeAll(async () => {
    const started = await sandbox.start(['quickstart', '--port', '0'], /Ctrl\+C stops the platform/, {
      timeoutMs: 120_000,
    });
    stop = () => stopChild(started.child);
    const out = started.output().stdout;
    queueUrl = /curl -X POST (\S+)\/runsync /.exec(out)![1]!;
  }, 150_000);
  afterAll(async () => {
    await stop();
    sandbox.cleanup();
  });

  it('refuses a key revoked with ferry keys revoke on the next request', async () => {
    const created = await sandbox.run(['keys', 'create', '--name', 'short-lived']);
    expect(created.code, created.stderr).toBe(0);
    const fresh = created.stdout.trim();
    const list = JSON.parse((await sandbox.run(['keys', 'list', '--json'])).stdout) as {
      id: string;
      name: string;
    }[];
    const id = list.find((k) => k.name === 'short-lived')!.id;
    const health = () => fetch(`${queueUrl}/health`, { headers: { authorization: `Bearer ${fresh}` } });
    expect((await health()).status).toBe(200);
    expect((await sandbox.run(['keys', 'revoke', id])).code).toBe(0);
    const refused = await health();
    expect(refused.status).toBe(401);
    expect(Object.keys((await refused.json()) as object)).toEqual(['error']);
  }, 60_000);
});
