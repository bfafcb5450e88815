/**
 * Ports handed to servers other processes bind (core/child-port.ts): picked below the machine's
 * ephemeral range, different, free when picked; and a start that found its port taken runs again on
 * another. Real sockets on 127.0.0.1.
 */
import { once } from 'node:events';
import { createServer, type Server } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import {
  childPortRange,
  ephemeralPortRange,
  loopbackListenerUids,
  pickChildPort,
  pickChildPorts,
  portTaken,
  startOnChildPort,
} from '../../core/child-port.js';

const servers: Server[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => new Promise((resolve) => s.close(resolve))));
});

/** Listens on 127.0.0.1:`port` (0: any), kept until the test ends; resolves with the port. */
async function listen(port = 0): Promise<number> {
  const server = createServer();
  servers.push(server);
  server.listen(port, '127.0.0.1');
  await once(server, 'listening');
  return (server.address() as { port: number }).port;
}

describe('ephemeralPortRange', () => {
  it("reads Linux's ip_local_port_range (tab-separated, newline-ended)", () => {
    expect(ephemeralPortRange(() => '32768\t60999\n')).toEqual({ from: 32768, to: 60999 });
    expect(ephemeralPortRange(() => '1024 65535')).toEqual({ from: 1024, to: 65535 });
  });

  it('says nothing where the file is missing or makes no sense', () => {
    const missing = () => {
      throw Object.assign(new Error('ENOENT'), { code: 'ENOENT' });
    };
    expect(ephemeralPortRange(missing)).toBeUndefined();
    for (const text of ['', 'x y', '60999 32768', '0 100', '40000 70000', '1 2 3'])
      expect([text, ephemeralPortRange(() => text)]).toEqual([text, undefined]);
  });
});

describe('childPortRange', () => {
  it('lies just below the ephemeral range, from 20000', () => {
    expect(childPortRange({ from: 32768, to: 60999 })).toEqual({ from: 20000, to: 32767 });
    expect(childPortRange({ from: 49152, to: 65535 })).toEqual({ from: 20000, to: 49151 });
  });

  it("assumes Linux's default where the machine does not say", () => {
    expect(childPortRange(undefined)).toEqual({ from: 20000, to: 32767 });
  });

  it('lies above the ephemeral range when there is no room below it', () => {
    expect(childPortRange({ from: 10000, to: 30000 })).toEqual({ from: 30001, to: 65535 });
  });

  it('takes what is left when every unprivileged port is ephemeral', () => {
    expect(childPortRange({ from: 1024, to: 65535 })).toEqual({ from: 20000, to: 65535 });
  });

  it("on this machine, never overlaps the machine's own ephemeral range", () => {
    const ephemeral = ephemeralPortRange();
    const range = childPortRange(ephemeral);
    if (ephemeral && (ephemeral.from > 21_000 || ephemeral.to < 64_535))
      expect(range.to < ephemeral.from || range.from > ephemeral.to).toBe(true);
  });
});

describe('pickChildPorts', () => {
  it('picks different ports, in the range, each free to bind now', async () => {
    const range = childPortRange();
    const ports = await pickChildPorts(5);
    expect(new Set(ports).size).toBe(5);
    for (const port of ports) {
      expect(port).toBeGreaterThanOrEqual(range.from);
      expect(port).toBeLessThanOrEqual(range.to);
      // Released once picked: the child can bind it.
      expect(await listen(port)).toBe(port);
    }
  });

  it('stays inside a given range and passes over a port that is taken', async () => {
    const taken = await listen(await pickChildPort());
    const range = { from: taken, to: taken + 1 };
    for (let i = 0; i < 10; i++) expect(await pickChildPort({ range })).toBe(taken + 1);
  });

  it('fails rather than spin when the range has no free port', async () => {
    const taken = await listen(await pickChildPort());
    await expect(pickChildPort({ range: { from: taken, to: taken } })).rejects.toThrow(/no free port/);
  });
});

describe('portTaken', () => {
  it('is true while another socket holds the port, false once it is released', async () => {
    const server = createServer();
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const port = (server.address() as { port: number }).port;
    expect(await portTaken(port)).toBe(true);
    await new Promise((resolve) => server.close(resolve));
    expect(await portTaken(port)).toBe(false);
  });
});

describe('loopbackListenerUids', () => {
  const header =
    '  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n';
  /** A /proc/net/tcp row: `address:port` in LISTEN (0A) or another state, owned by `uid`. */
  const row = (local: string, state: string, uid: number) =>
    `   0: ${local} 00000000:0000 ${state} 00000000:00000000 00:00000000 00000000 ${uid}        0 1045 1 0 100 0 0 10 0\n`;
  const tables = (tcp: string, tcp6?: string) => (path: string) => {
    if (path === '/proc/net/tcp') return header + tcp;
    if (tcp6 === undefined) throw new Error('ENOENT');
    return header + tcp6;
  };

  it('names the uid of each socket listening on 127.0.0.1 or any address at that port', () => {
    const read = tables(
      row('0100007F:4E20', '0A', 230_001) +
        // Another port, a connection (01) and another loopback address (127.0.0.2) are not it.
        row('0100007F:4E21', '0A', 7) +
        row('0100007F:4E20', '01', 8) +
        row('0200007F:4E20', '0A', 9),
      row('00000000000000000000000000000000:4E20', '0A', 65_534) +
        row('00000000000000000000000001000000:4E20', '0A', 10),
    );
    expect(loopbackListenerUids(20_000, read)).toEqual([230_001, 65_534]);
    expect(loopbackListenerUids(20_002, read)).toEqual([]);
  });

  it('reads tcp alone on a machine without IPv6, and says nothing without /proc', () => {
    expect(loopbackListenerUids(20_000, tables(row('00000000:4E20', '0A', 0)))).toEqual([0]);
    expect(
      loopbackListenerUids(20_000, () => {
        throw new Error('ENOENT');
      }),
    ).toBeUndefined();
  });

  it("finds this process's own listener on this machine (Linux)", async () => {
    const port = await listen();
    const uids = loopbackListenerUids(port);
    if (uids !== undefined) expect(uids).toEqual([process.getuid!()]);
  });
});

describe('startOnChildPort', () => {
  /** A stand-in child: binds the port it is given, or fails as a child does when it is taken. */
  const bindOrFail = (tried: number[]) => async (port: number) => {
    tried.push(port);
    return listen(port);
  };

  it('starts again on a new port when the first was taken, and resolves with what start gave', async () => {
    const taken = await listen();
    const tried: number[] = [];
    const port = await startOnChildPort(bindOrFail(tried), { firstPort: taken });
    expect(tried[0]).toBe(taken);
    expect(tried).toHaveLength(2);
    expect(port).toBe(tried[1]);
    expect(port).not.toBe(taken);
  });

  it('tells onTaken of each port found taken', async () => {
    const taken = await listen();
    const told: number[] = [];
    await startOnChildPort(bindOrFail([]), { firstPort: taken, onTaken: (port) => told.push(port) });
    expect(told).toEqual([taken]);
  });

  it('throws any other failure at once, without a second try', async () => {
    const tried: number[] = [];
    const failing = async (port: number) => {
      tried.push(port);
      throw new Error('the child crashed at import');
    };
    await expect(startOnChildPort(failing)).rejects.toThrow('the child crashed at import');
    expect(tried).toHaveLength(1);
  });

  it('gives up after `attempts` taken ports, naming the last one', async () => {
    const taken = [await listen(), await listen()];
    const tried: number[] = [];
    const picks = [...taken];
    const error = await startOnChildPort(bindOrFail(tried), {
      attempts: 2,
      pick: async () => picks.shift()!,
      firstPort: picks.shift(),
    }).catch((e: Error) => e);
    expect(tried).toEqual(taken);
    expect((error as Error).message).toMatch(new RegExp(`port ${taken[1]} was taken by another process`));
  });

  it('does not start again once its signal is aborted (the child was stopped on purpose)', async () => {
    const taken = await listen();
    const stopped = new AbortController();
    stopped.abort();
    const tried: number[] = [];
    await expect(
      startOnChildPort(bindOrFail(tried), { firstPort: taken, signal: stopped.signal }),
    ).rejects.toThrow(/EADDRINUSE/);
    expect(tried).toEqual([taken]);
  });
});
