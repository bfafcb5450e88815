/** The agent's HTTP transport: request bodies in (with the job-done size cap), API responses out. */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { ApiResponse } from '../../core/api.js';
import { FerryError } from '../../core/errors.js';
import { stringifyJsonExact } from '../../core/json.js';
import { limits } from '../../core/limits.js';

/** Above every worker-route limit, so the API answers with its own message. */
const bodyLimitBytes = limits.jobDoneBodyBytes + 1024 * 1024;

export async function readBody(req: IncomingMessage): Promise<Buffer | undefined> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > bodyLimitBytes) {
      throw new FerryError('too_large', `Request body is over the ${limits.jobDoneBodyBytes}-byte limit`);
    }
    chunks.push(chunk as Buffer);
  }
  return chunks.length > 0 ? Buffer.concat(chunks) : undefined;
}

export function send(res: ServerResponse, response: ApiResponse): void {
  if (res.headersSent || res.destroyed) return;
  if (response.statusCode === 204 || response.body === undefined) {
    res.writeHead(response.statusCode).end();
    return;
  }
  // The RunPod SDK insists on exactly application/json for job-take.
  const text = stringifyJsonExact(response.body);
  res
    .writeHead(response.statusCode, {
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
