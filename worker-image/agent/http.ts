/**
 * The agent's HTTP transport: request bodies in (by the shared rule of core/request-body.ts), API
 * responses out.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { ApiResponse } from '../../core/api.js';
import { FerryError } from '../../core/errors.js';
import { stringifyJsonExact } from '../../core/json.js';
import { limits } from '../../core/limits.js';
import { readLimitedBody } from '../../core/request-body.js';

/**
 * The limit of the worker routes other than job-done (which has limits.jobDoneBodyBytes): above each
 * of their own, so the API answers with its own message.
 */
export const workerBodyLimitBytes = limits.jobDoneBodyBytes + 1024 * 1024;

/**
 * A worker request's body under `limitBytes`. Over it, the body is read through and dropped
 * (overLimitReadBytes, core/limits.ts): with `dropped`, its size is handed over (job-done fails its
 * job with the reason, core/api.ts), otherwise it is a 413. Past overLimitReadBytes it is a 413 at
 * once; the body is left unread, and send() closes the connection.
 */
export async function readBody(
  req: IncomingMessage,
  limitBytes = workerBodyLimitBytes,
  dropped = false,
): Promise<{ body: Buffer | undefined; droppedBodyBytes?: number }> {
  const read = await readLimitedBody(req, req.headers, limitBytes);
  if (read.kind === 'body') return { body: read.body };
  if (read.kind === 'over' && dropped) return { body: undefined, droppedBodyBytes: read.bytes };
  throw new FerryError('too_large', `Request body is over the ${limitBytes}-byte limit`);
}

/**
 * Writes the answer. One given before the request's body was read to its end (a 401 to an unknown
 * token, a 404, a body past overLimitReadBytes) closes the connection, so the rest is never read.
 */
export function send(res: ServerResponse, response: ApiResponse): void {
  if (res.headersSent || res.destroyed) return;
  if (!res.req.complete) res.setHeader('connection', 'close');
  if (response.statusCode === 204 || response.body === undefined) {
    res.writeHead(response.statusCode, response.headers).end();
    return;
  }
  // The RunPod SDK insists on exactly application/json for job-take.
  const text = stringifyJsonExact(response.body);
  res
    .writeHead(response.statusCode, {
      ...response.headers,
      'content-type': 'application/json',
      'content-length': Buffer.byteLength(text),
    })
    .end(text);
}

export function safeDecode(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
}
