/**
 * Request bodies under a limit, shared by every Node front door: the local
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
import type { IncomingHttpHeaders } from 'node:http';
import { overLimitReadBytes } from './limits.js';

export type LimitedBody =
  /** Within the limit; undefined when there was none. */
  | { kind: 'body'; body: Buffer | undefined }
  /** Over the limit: read through and dropped. */
  | { kind: 'over'; bytes: number }
  /** Past overLimitReadBytes: left unread; the socket must be closed. */
  | { kind: 'cut' };

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
