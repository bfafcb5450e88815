/**
 * Request bodies under a limit, and the Node server limits, shared by every Node front door: the local
 * one (core/adapters/local/http.ts, guard.ts) and the AWS agent (worker-image/agent). One rule for a
 * body over its route's limit (docs/security.md):
 *
 *   within the limit             → the bytes
 *   over it, up to overLimitRead → read through and dropped (never kept): the size, so the client,
 *                                  still sending, hears the answer (413, or job-done's 400)
 *   past overLimitReadBytes      → 'cut': not read through; the caller answers and closes the socket
 *
 * No dependency beyond node: the agent's bundle includes this file.
 */
import type { IncomingHttpHeaders, Server } from 'node:http';
import { limits, overLimitReadBytes } from './limits.js';

export type LimitedBody =
  /** Within the limit; undefined when there was none. */
  | { kind: 'body'; body: Buffer | undefined }
  /** Over the limit: read through and dropped. */
  | { kind: 'over'; bytes: number }
  /** Past overLimitReadBytes: left unread; the socket must be closed. */
  | { kind: 'cut' };

/** The 413's message for a body over its route's limit, the same from every front door. */
export function overLimitMessage(
  method: string | undefined,
  url: string | undefined,
  limitBytes: number,
): string {
  return `Request body is over the limit of ${method} ${(url ?? '/').split('?', 1)[0]}: it takes at most ${limitBytes} bytes`;
}

/** Whether a request carries a body (a Content-Length other than 0, or any Transfer-Encoding). */
export function hasBody(headers: IncomingHttpHeaders): boolean {
  return (
    (headers['content-length'] !== undefined && headers['content-length'] !== '0') ||
    headers['transfer-encoding'] !== undefined
  );
}

/** Reads `stream` (a request, or Fastify's payload) under `limitBytes`, by the rule above. */
export function readLimitedBody(
  stream: NodeJS.ReadableStream,
  headers: IncomingHttpHeaders,
  limitBytes: number,
): Promise<LimitedBody> {
  if (Number(headers['content-length']) > overLimitReadBytes) return Promise.resolve({ kind: 'cut' });
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer | string): void => {
      const bytes = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
      size += bytes.length;
      if (size <= limitBytes) {
        chunks.push(bytes);
        return;
      }
      chunks.length = 0;
      if (size > overLimitReadBytes) finish(null, { kind: 'cut' });
    };
    const onEnd = (): void =>
      finish(
        null,
        size > limitBytes
          ? { kind: 'over', bytes: size }
          : { kind: 'body', body: size > 0 ? Buffer.concat(chunks, size) : undefined },
      );
    const onError = (error: Error): void => finish(error);
    // A client gone before the end (a request emits 'error' then; a stream may only close).
    const onClose = (): void => finish(new Error('The request ended before its body'));
    const finish = (error: Error | null, result?: LimitedBody): void => {
      stream.removeListener('data', onData);
      stream.removeListener('end', onEnd);
      stream.removeListener('error', onError);
      stream.removeListener('close', onClose);
      if (error) reject(error);
      else resolve(result!);
    };
    stream.on('data', onData);
    stream.on('end', onEnd);
    stream.on('error', onError);
    stream.on('close', onClose);
    stream.resume();
  });
}

/**
 * How long a client may take to send its headers and its whole request, how long an idle keep-alive
 * socket stays open, inactivity on a socket, and how many sockets are open at once (core/limits.ts).
 * Waiting for an answer is not sending, so long polls are unaffected.
 */
export interface ServerLimits {
  headersTimeoutMs: number;
  requestTimeoutMs: number;
  keepAliveTimeoutMs: number;
  socketIdleTimeoutMs: number;
  maxConnections: number;
}

export const defaultServerLimits: ServerLimits = {
  headersTimeoutMs: limits.headersTimeoutMs,
  requestTimeoutMs: limits.requestTimeoutMs,
  keepAliveTimeoutMs: limits.keepAliveTimeoutMs,
  socketIdleTimeoutMs: limits.socketIdleTimeoutMs,
  maxConnections: limits.maxConnections,
};

/**
 * Node checks header and request deadlines on this interval (30 s by default), so it bounds how late
 * a timeout closes a socket. Only settable when the server is built.
 */
export function connectionsCheckingIntervalMs(l: Pick<ServerLimits, 'headersTimeoutMs'>): number {
  return Math.max(100, Math.min(1_000, l.headersTimeoutMs / 2));
}

/**
 * The options of node:http createServer for these limits; `applyServerLimits` sets the rest on the
 * server it made.
 */
export function nodeServerOptions(l: ServerLimits = defaultServerLimits): {
  headersTimeout: number;
  requestTimeout: number;
  keepAliveTimeout: number;
  connectionsCheckingInterval: number;
} {
  return {
    headersTimeout: l.headersTimeoutMs,
    requestTimeout: l.requestTimeoutMs,
    keepAliveTimeout: l.keepAliveTimeoutMs,
    connectionsCheckingInterval: connectionsCheckingIntervalMs(l),
  };
}

/** Sets the limits a node:http server takes after it is built: the socket idle timeout and the cap. */
export function applyServerLimits(server: Server, l: ServerLimits = defaultServerLimits): void {
  server.timeout = l.socketIdleTimeoutMs;
  server.maxConnections = l.maxConnections;
}
