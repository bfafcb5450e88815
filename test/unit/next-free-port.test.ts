/**
 * nextFreePort (cli/serve.ts): how `ferry dev` picks its port, and how a local deploy picks the port
 * of the `ferry serve --detach` it starts when none runs, so a deploy beside a running `ferry dev`
 * (which holds the default port) starts on the next one instead of failing.
 */
import { createServer, type Server } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { nextFreePort } from '../../cli/serve.js';
import { pickChildPort } from '../../core/child-port.js';
import { exitCode, FerryError } from '../../core/errors.js';

const held: Server[] = [];

async function hold(port: number): Promise<boolean> {
  const server = createServer();
  const bound = await new Promise<boolean>((resolve) => {
    server.once('error', () => resolve(false));
    server.listen({ host: '127.0.0.1', port }, () => resolve(true));
  });
  if (bound) held.push(server);
  return bound;
}

afterEach(async () => {
  for (const server of held.splice(0)) await new Promise((resolve) => server.close(resolve));
});

describe('nextFreePort', () => {
  it('answers the port when it is free, else the next free one after it', async () => {
    // A port whose next one is free too, picked where nothing else picks (below the ephemeral range).
    let port = 0;
    for (let tries = 0; tries < 20 && port === 0; tries++) {
      const candidate = await pickChildPort({ host: '127.0.0.1' });
      if ((await nextFreePort('127.0.0.1', candidate + 1)) === candidate + 1 && (await hold(candidate)))
        port = candidate;
    }
    expect(port).toBeGreaterThan(0);
    expect(await nextFreePort('127.0.0.1', port)).toBe(port + 1);
    await Promise.all(held.splice(0).map((server) => new Promise((resolve) => server.close(resolve))));
    expect(await nextFreePort('127.0.0.1', port)).toBe(port);
    expect(await nextFreePort('127.0.0.1', 0)).toBe(0);
  });

  it('refuses a host that is no address of this machine, exit 2, rather than calling every port busy', async () => {
    // 203.0.113.1 is TEST-NET-3 (RFC 5737): never an address of this machine.
    for (const host of ['203.0.113.1', 'nosuch.invalid']) {
      const error = await nextFreePort(host, 20_000).catch((e: unknown) => e);
      expect(FerryError.is(error), host).toBe(true);
      expect((error as FerryError).message).toBe(
        `Cannot listen on ${host}: it is not an address of this machine`,
      );
      expect(exitCode(error)).toBe(2);
    }
  });
});
