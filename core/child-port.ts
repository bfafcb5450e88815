/**
 * Ports for servers that another process binds: a load-balanced worker the local pool starts
 * (core/adapters/local/pool.ts), and the emulators, agents and peers that tests and the bench start.
 * This process picks the port and hands it over; the child binds it later, after its own start-up
 * (a Python import, a JVM). Between the two nothing holds the port, and something else can take it.
 *
 * Picks come from below the machine's ephemeral range (net.ipv4.ip_local_port_range, 32768–60999
 * by default on Linux). A port the OS picks with listen(0) is an ephemeral one, and so is the local
 * port of every outgoing connection the machine makes meanwhile: any of them could be given the
 * port before the child binds it (CI failed once on that: "DynamoDB Local exited with code 1").
 * Only an explicit bind can take a port from below the range, and the random pick makes two
 * pickers' choices (two pools, two test files) meeting unlikely. What is left of the race, a child
 * that finds its port taken all the same, is startOnChildPort's: it starts again on a new port.
 */
import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { FerryError } from './errors.js';

/** Ports from `from` to `to`, both included. */
export interface PortRange {
  from: number;
  to: number;
}

/**
 * Where picks start: above the ports services are commonly configured on (3000, 5432, 8000, 8080,
 * `ferry serve`'s 8888), so a worker does not sit on the port of a server the user starts later.
 */
const lowestPick = 20_000;

/** Fewer ports than this to pick from, and two pickers' random choices would meet too often. */
const leastSpan = 1_000;

/**
 * Where the ephemeral range is assumed to start when the machine does not say (no /proc: macOS,
 * Windows): Linux's default; macOS and Windows start theirs higher, at 49152 (IANA's dynamic ports).
 */
const assumedEphemeralFrom = 32_768;

/** The machine's ephemeral port range, from /proc on Linux; undefined where it cannot be read. */
export function ephemeralPortRange(
  read: () => string = () => readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8'),
): PortRange | undefined {
  let text: string;
  try {
    text = read();
  } catch {
    return undefined;
  }
  const match = /^\s*(\d+)\s+(\d+)\s*$/.exec(text);
  if (!match) return undefined;
  const [from, to] = [Number(match[1]), Number(match[2])];
  return from >= 1 && from <= to && to <= 65_535 ? { from, to } : undefined;
}

/**
 * The ports to pick from, given the ephemeral range: from lowestPick to just below it; above it when
 * a tuned machine leaves no room below (`1024 30000`). Where it leaves room on neither side
 * (`1024 65535`) every port is ephemeral: picks then come from lowestPick up, an outgoing connection
 * can take one, and the retry of startOnChildPort is all that is left.
 */
export function childPortRange(ephemeral: PortRange | undefined = ephemeralPortRange()): PortRange {
  const below = { from: lowestPick, to: (ephemeral?.from ?? assumedEphemeralFrom) - 1 };
  if (below.to - below.from + 1 >= leastSpan) return below;
  const above = { from: Math.max(lowestPick, (ephemeral?.to ?? 0) + 1), to: 65_535 };
  if (above.to - above.from + 1 >= leastSpan) return above;
  return { from: lowestPick, to: 65_535 };
}

export interface PickOptions {
  /** Where to pick from; childPortRange() of this machine by default. */
  range?: PortRange;
  /** Where the child will listen (a port free there now). */
  host?: string;
}

/**
 * `count` different ports free on `host` now, for servers other processes bind later. All are held
 * open until all are picked, since a port picked and released could be picked again by the next try.
 */
export async function pickChildPorts(count: number, options: PickOptions = {}): Promise<number[]> {
  const range = options.range ?? childPortRange();
  const host = options.host ?? '127.0.0.1';
  const span = range.to - range.from + 1;
  const held: Server[] = [];
  try {
    // Bounded: a range with (almost) nothing free fails instead of spinning.
    for (let tries = 0; held.length < count; tries++) {
      if (tries >= 100 * count)
        throw new FerryError(
          'unavailable',
          `no free port on ${host} between ${range.from} and ${range.to} after ${tries} tries`,
        );
      const server = await hold(range.from + Math.floor(Math.random() * span), host);
      if (server) held.push(server);
    }
    return held.map((server) => (server.address() as { port: number }).port);
  } finally {
    await Promise.all(held.map((server) => new Promise<void>((resolve) => server.close(() => resolve()))));
  }
}

/** One port free on `host` now, for a server another process binds later (pickChildPorts). */
export async function pickChildPort(options: PickOptions = {}): Promise<number> {
  return (await pickChildPorts(1, options))[0]!;
}

/**
 * Whether another socket holds `port` on `host` now: a bind there fails with EADDRINUSE. Asked once
 * the child that was to bind it has exited, so that child's own socket is gone by then.
 */
export async function portTaken(port: number, host = '127.0.0.1'): Promise<boolean> {
  let failure: NodeJS.ErrnoException | undefined;
  const server = await hold(port, host, (error) => {
    failure = error;
  });
  if (!server) return failure?.code === 'EADDRINUSE';
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return false;
}

/** A server listening on `port` now, or undefined when it cannot (the port is taken, or refused). */
function hold(
  port: number,
  host: string,
  failed: (error: NodeJS.ErrnoException) => void = () => {},
): Promise<Server | undefined> {
  const server = createServer();
  // A picker never keeps this process alive.
  server.unref();
  return new Promise((resolve) => {
    server.once('error', (error: NodeJS.ErrnoException) => {
      failed(error);
      resolve(undefined);
    });
    server.listen(port, host, () => resolve(server));
  });
}

export interface StartOnChildPortOptions {
  /** Tries in all, each on a new port. */
  attempts?: number;
  /** The port of the first try (a test hands it one that is taken). */
  firstPort?: number;
  /** Where the ports of the other tries come from; pickChildPort() by default. */
  pick?: () => Promise<number>;
  /** Where the child will listen, for the check that its port was taken. */
  host?: string;
  /** Once aborted, a failed try is not tried again (the child was stopped on purpose). */
  signal?: AbortSignal;
  /** Hears of each port found taken before the next try (for the caller's log). */
  onTaken?: (port: number) => void;
}

/**
 * Starts a server that another process binds on a port picked here: `start(port)` launches it and
 * resolves once it serves, or throws (after it is gone, and whatever it bound with it) when it
 * exited or gave up. A port picked free is not held until the child binds it; when the try failed
 * and another socket holds the port now, the child found it taken (each child says so in its own
 * words: EADDRINUSE, BindException, "Address already in use"), and it starts again on a new port.
 * Any other failure, and the last try's, is thrown: the last names the taken port.
 */
export async function startOnChildPort<T>(
  start: (port: number) => Promise<T>,
  options: StartOnChildPortOptions = {},
): Promise<T> {
  const attempts = options.attempts ?? 3;
  const host = options.host ?? '127.0.0.1';
  const pick = options.pick ?? (() => pickChildPort({ host }));
  for (let attempt = 1; ; attempt++) {
    const port = attempt === 1 && options.firstPort !== undefined ? options.firstPort : await pick();
    try {
      return await start(port);
    } catch (error) {
      if (options.signal?.aborted || !(await portTaken(port, host))) throw error;
      if (attempt >= attempts)
        throw new FerryError(
          'unavailable',
          `${(error as Error).message} (port ${port} was taken by another process before it bound it, as were the ports of the ${attempts - 1} tries before)`,
          { cause: error },
        );
      options.onTaken?.(port);
    }
  }
}

/** Where a listening socket takes connections to 127.0.0.1, as /proc/net/tcp{,6} print it. */
const loopbackAddresses = new Set([
  // IPv4 any and 127.0.0.1 (printed in host byte order: little-endian first).
  '00000000',
  '0100007F',
  '7F000001',
  // IPv6 any (dual-stack) and the v4-mapped any and 127.0.0.1, little- and big-endian.
  '00000000000000000000000000000000',
  '0000000000000000FFFF000000000000',
  '0000000000000000FFFF00000100007F',
  '00000000000000000000FFFF00000000',
  '00000000000000000000FFFF7F000001',
]);

/**
 * The uids of the sockets listening where a connection to 127.0.0.1:`port` lands (each LISTEN row of
 * /proc/net/tcp and tcp6 on that port, bound to 127.0.0.1 or any address); empty when none listens.
 * Undefined where /proc/net/tcp cannot be read (not Linux). A port's listener cannot be told apart
 * from its pick by anything else: whoever binds first gets it.
 */
export function loopbackListenerUids(
  port: number,
  read: (path: string) => string = (path) => readFileSync(path, 'utf8'),
): number[] | undefined {
  const tables: string[] = [];
  for (const path of ['/proc/net/tcp', '/proc/net/tcp6']) {
    try {
      tables.push(read(path));
    } catch {
      // No tcp6 is a machine without IPv6; no tcp is one without /proc.
      if (path === '/proc/net/tcp') return undefined;
    }
  }
  const uids: number[] = [];
  for (const line of tables.flatMap((table) => table.split('\n').slice(1))) {
    // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
    const fields = line.trim().split(/\s+/);
    const [address, hexPort] = (fields[1] ?? '').split(':');
    if (fields[3] !== '0A' || Number.parseInt(hexPort ?? '', 16) !== port) continue;
    if (loopbackAddresses.has(address ?? '')) uids.push(Number(fields[7]));
  }
  return uids;
}
