/**
 * Raw HTTP for tests of what a server answers to bytes no HTTP client would send (malformed
 * requests, oversized headers): Node's parser refuses them before any route runs.
 */
import { connect } from 'node:net';

/** Sends `request` as raw bytes and reads until the server closes the socket (rejects if it stays open). */
export function rawExchange(port: number, request: Buffer): Promise<{ status: number; body: unknown }> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no close within 5 s; got: ${Buffer.concat(chunks).toString('latin1')}`));
    }, 5_000);
    socket.on('data', (data: Buffer) => chunks.push(data));
    socket.on('error', () => undefined);
    socket.once('connect', () => socket.write(request));
    socket.once('close', () => {
      clearTimeout(timer);
      const text = Buffer.concat(chunks).toString('utf8');
      const [head, body] = text.split('\r\n\r\n', 2) as [string, string | undefined];
      const status = Number(/^HTTP\/1\.1 (\d{3}) /.exec(head)?.[1] ?? 0);
      let parsed: unknown = body;
      try {
        parsed = JSON.parse(body ?? '');
      } catch {}
      resolve({ status, body: parsed });
    });
  });
}
