/**
 * The local front door against `ferry quickstart` (examples/hello: the `hello` queue endpoint and the
 * load-balanced `hello-api`, served by Ferry's Python LB runtime), through the real binary:
 *
 * - A load-balanced body just over the limit is the front door's 413, every time, never a 502 from
 *   a worker that refused the upload unread.
 * - A key revoked with `ferry keys revoke` (another process, the same SQLite file) is refused on the
 *   very next request.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { limits } from '../../core/limits.js';
import { CliSandbox, stopChild } from './cli-support.js';

describe('the front door of ferry quickstart', () => {
  const sandbox = new CliSandbox();
  let stop: () => Promise<unknown> = async () => undefined;
  let key = '';
  let lbUrl = '';
  let queueUrl = '';

  beforeAll(async () => {
    const started = await sandbox.start(['quickstart', '--port', '0'], /Ctrl\+C stops the platform/, {
      timeoutMs: 120_000,
    });
    stop = () => stopChild(started.child);
    const out = started.output().stdout;
    key = /API key:\s+(\S+)/.exec(out)![1]!;
    lbUrl = /curl -X POST (\S+)\/echo /.exec(out)![1]!;
    queueUrl = /curl -X POST (\S+)\/runsync /.exec(out)![1]!;
  }, 150_000);
  afterAll(async () => {
    await stop();
    sandbox.cleanup();
  });

  it('answers a load-balanced body over the limit with its 413, every time', async () => {
    const post = (body: string) =>
      fetch(`${lbUrl}/echo`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body,
      });
    // The worker is up and answers a body under the limit.
    const small = await post(JSON.stringify({ text: 'hi' }));
    expect(small.status, await small.clone().text()).toBe(200);
    const head = '{"text":"';
    const tail = '"}';
    const over = head + 'x'.repeat(limits.lbBodyBytes + 10 - head.length - tail.length) + tail;
    for (let i = 0; i < 3; i++) {
      const answer = await post(over);
      expect(answer.status).toBe(413);
      const body = (await answer.json()) as Record<string, string>;
      expect(Object.keys(body)).toEqual(['error']);
      expect(body.error).toMatch(new RegExp(`takes at most ${limits.lbBodyBytes} bytes`));
    }
  }, 60_000);

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
