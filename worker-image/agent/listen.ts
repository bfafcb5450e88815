/**
 * Starts an HTTP server and says where a process on this host reaches it: a wildcard bind address
 * is reached on loopback.
 */
import { once } from 'node:events';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export async function listen(
  server: Server,
  host: string,
  port: number,
): Promise<{ url: string; port: number }> {
  server.listen(port, host);
  await once(server, 'listening');
  const bound = (server.address() as AddressInfo).port;
  const reachable = host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host;
  return { url: `http://${reachable.includes(':') ? `[${reachable}]` : reachable}:${bound}`, port: bound };
}
