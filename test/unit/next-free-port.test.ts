/**
 * nextFreePort (cli/serve.ts): how `ferry dev` picks its port, and how a local deploy picks the port
 * of the `ferry serve --detach` it starts when none runs, so a deploy beside a running `ferry dev`
 * (which holds the default port) starts on the next one instead of failing. requestedPort and
 * portToListenOn (cli/providers/local.ts) are the rule both follow: --port, else FERRY_PORT (taken
 * exactly, and refused before anything starts when it is in use), else 8888 or the next free port.
 */
import { createServer, type Server } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { portToListenOn, requestedPort } from '../../cli/providers/local.js';
import { listenFailure, nextFreePort } from '../../cli/serve.js';
import { pickChildPort } from '../../core/child-port.js';
import { exitCode, FerryError } from '../../core/errors.js';
import { defaultPort } from '../../core/limits.js';

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

/**
 * A port held by this test whose next one is free, picked where nothing else picks (below the
 * ephemeral range).
 */
async function heldPortWithFreeNext(): Promise<number> {
  for (let tries = 0; tries < 20; tries++) {
    const candidate = await pickChildPort({ host: '127.0.0.1' });
    if ((await nextFreePort('127.0.0.1', candidate + 1)) === candidate + 1 && (await hold(candidate)))
      return candidate;
  }
  throw new Error('no port with a free next one in 20 tries');
}

afterEach(async () => {
  for (const server of held.splice(0)) await new Promise((resolve) => server.close(resolve));
});

describe('nextFreePort', () => {
  it('answers the port when it is free, else the next free one after it', async () => {
    const port = await heldPortWithFreeNext();
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

describe('requestedPort and portToListenOn', () => {
  it('takes --port over FERRY_PORT, FERRY_PORT over 8888', () => {
    expect(requestedPort({ FERRY_PORT: '9100' }, 9200)).toEqual({ port: 9200, setBy: '--port' });
    expect(requestedPort({ FERRY_PORT: ' 9100 ' })).toEqual({ port: 9100, setBy: 'FERRY_PORT' });
    expect(requestedPort({ FERRY_PORT: '0' })).toEqual({ port: 0, setBy: 'FERRY_PORT' });
    expect(requestedPort({})).toEqual({ port: defaultPort, setBy: 'default' });
    expect(requestedPort({ FERRY_PORT: '  ' })).toEqual({ port: defaultPort, setBy: 'default' });
  });

  it('refuses a FERRY_PORT that is no port, exit 2, with --port given too (as `ferry serve` does)', () => {
    for (const [value, flag] of [
      ['abc', undefined],
      ['88a8', undefined],
      ['-1', undefined],
      ['65536', undefined],
      ['1.5', undefined],
      ['abc', 9200],
    ] as const) {
      let error: unknown;
      try {
        requestedPort({ FERRY_PORT: value }, flag);
      } catch (thrown) {
        error = thrown;
      }
      expect(FerryError.is(error), value).toBe(true);
      expect((error as FerryError).message).toBe(`FERRY_PORT=${JSON.stringify(value)} is not a port`);
      expect((error as FerryError).hint).toContain('Set it to a whole number from 1 to 65535');
      expect(exitCode(error)).toBe(2);
    }
  });

  it("refuses FERRY_PORT's port when it is taken, exit 2 naming FERRY_PORT; --port's and the default's move on", async () => {
    const port = await heldPortWithFreeNext();
    const error = await portToListenOn('127.0.0.1', requestedPort({ FERRY_PORT: String(port) })).catch(
      (e: unknown) => e,
    );
    expect(FerryError.is(error)).toBe(true);
    expect((error as FerryError).message).toBe(`Port ${port} on 127.0.0.1 is in use`);
    expect((error as FerryError).hint).toContain(`Stop what listens on port ${port}, or set FERRY_PORT`);
    expect(exitCode(error)).toBe(2);
    expect(await portToListenOn('127.0.0.1', requestedPort({ FERRY_PORT: '1' }, port))).toBe(port + 1);
    expect(await portToListenOn('127.0.0.1', { port, setBy: 'default' })).toBe(port + 1);
    // Free: FERRY_PORT's is taken exactly, never moved.
    expect(await portToListenOn('127.0.0.1', requestedPort({ FERRY_PORT: String(port + 1) }))).toBe(port + 1);
    expect(await portToListenOn('127.0.0.1', requestedPort({ FERRY_PORT: '0' }))).toBe(0);
  });

  it("says a taken port is the user's to change, exit 2, naming the setting that chose it", () => {
    const inUse = Object.assign(new Error('listen EADDRINUSE'), { code: 'EADDRINUSE' });
    const fromEnv = listenFailure(inUse, '127.0.0.1', 9100, 'FERRY_PORT') as FerryError;
    expect(fromEnv.message).toBe('Port 9100 on 127.0.0.1 is in use');
    expect(fromEnv.hint).toContain('Stop what listens on port 9100, or set FERRY_PORT to another port');
    expect(exitCode(fromEnv)).toBe(2);
    const fromFlag = listenFailure(inUse, '127.0.0.1', 9100) as FerryError;
    expect(fromFlag.hint).toBe('Pass --port <n>.');
    expect(exitCode(fromFlag)).toBe(2);
  });
});
