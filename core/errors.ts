/**
 * Typed errors. Each has a `code`; `httpStatus` and `exitCode` map codes to the two places errors
 * leave Ferry (the HTTP API and the CLI), once each, and `toHttpResponse` is the one way an error
 * leaves over HTTP (docs/api.md#errors).
 *
 * 4xx codes are the client's mistakes: their message is for the client and is sent as it is. Every
 * other failure is ours and answers 5xx `{"error": "internal error", "requestId": ...}`; the detail
 * (which may name tables, queue URLs, object keys) goes only to the log, under the same request id.
 * A check of our own arguments is a programmer error: `internal`, never `badRequest`.
 */
import type { Logger } from './log.js';

export type ErrorCode =
  | 'bad_request'
  | 'unauthorized'
  | 'forbidden'
  | 'not_found'
  | 'conflict'
  | 'too_large'
  | 'too_many_requests'
  | 'usage'
  | 'failed'
  /** A bug or a broken dependency on our side (a bad argument between our own modules, an AWS outage). */
  | 'internal'
  /** What we forwarded to (a worker, a function) failed or gave no usable answer. */
  | 'bad_gateway'
  /** A dependency we need to answer is unavailable for now (the key store is throttled). */
  | 'unavailable'
  /**
   * No worker can serve a load-balanced request now: the endpoint is failing, allows no worker, or
   * none came free while the request was held. The endpoint's state, not our failure: a 503 whose
   * message is for the client, with Retry-After, as the ALB and the agent answer it on AWS.
   */
  | 'no_worker'
  /** What we forwarded to did not answer in time. */
  | 'gateway_timeout';

const httpStatusByCode: Record<ErrorCode, number> = {
  bad_request: 400,
  unauthorized: 401,
  forbidden: 403,
  not_found: 404,
  conflict: 409,
  too_large: 413,
  too_many_requests: 429,
  usage: 400,
  failed: 500,
  internal: 500,
  bad_gateway: 502,
  unavailable: 503,
  no_worker: 503,
  gateway_timeout: 504,
};

/**
 * CLI exit codes: 2 for what the user can fix by typing something else (a malformed argument, a key
 * that is missing or not the one, a name that names nothing, a name already taken), 1 for everything
 * else (a failure on the way, a refusal the user did not cause).
 */
const exitCodeByCode: Record<ErrorCode, number> = {
  bad_request: 2,
  unauthorized: 2,
  forbidden: 2,
  not_found: 2,
  conflict: 2,
  too_large: 1,
  too_many_requests: 1,
  usage: 2,
  failed: 1,
  internal: 1,
  bad_gateway: 1,
  unavailable: 1,
  no_worker: 1,
  gateway_timeout: 1,
};

export class FerryError extends Error {
  readonly code: ErrorCode;
  /** A next step for the person reading the message, printed by the CLI under the message. */
  readonly hint: string | undefined;

  constructor(code: ErrorCode, message: string, options: { hint?: string; cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'FerryError';
    this.code = code;
    this.hint = options.hint;
  }

  /** Works across duplicate copies of this module (bundles, child processes), where instanceof may not. */
  static is(value: unknown): value is FerryError {
    return value instanceof Error && value.name === 'FerryError' && 'code' in value;
  }
}

export const badRequest = (message: string, hint?: string) =>
  new FerryError('bad_request', message, { hint });
export const notFound = (message: string, hint?: string) => new FerryError('not_found', message, { hint });
export const conflict = (message: string, hint?: string) => new FerryError('conflict', message, { hint });
/** The 401 of a missing or unknown key, on every front door (the local API, API Gateway, the shim). */
export const missingKeyMessage = 'Missing or invalid API key';
/** What API Gateway answers (404) for a path outside the API's two roots, which it routes nowhere. */
export const noRouteMessage =
  'No such route: the job API is under /v2/, the management API under /manage/v1/';
/**
 * A body too big for the AWS front door to hand the function: the whole Lambda event, the body in
 * it as an escaped JSON string, must fit Lambda's 6 MB. API Gateway's REQUEST_TOO_LARGE answer and
 * the local shim that stands in for it say the same (docs/api.md#aws-front-door).
 */
export const inlineBodyTooLargeMessage =
  'Request body is over what the API takes inline on AWS (6 MB for the whole request, its JSON ' +
  'escaping included): upload big inputs with POST /v2/<endpoint>/uploads and send ' +
  '{"inputRef": ...} in place of "input"';
export const unauthorized = (message = missingKeyMessage) => new FerryError('unauthorized', message);
export const forbidden = (message: string) => new FerryError('forbidden', message);
export const tooLarge = (message: string, hint?: string) => new FerryError('too_large', message, { hint });
export const usage = (message: string, hint?: string) => new FerryError('usage', message, { hint });
/** A programmer error or a broken dependency: the client sees only "internal error" and a request id. */
export const internal = (message: string, cause?: unknown) => new FerryError('internal', message, { cause });

export function httpStatus(error: unknown): number {
  return FerryError.is(error) ? httpStatusByCode[error.code] : 500;
}

export function exitCode(error: unknown): number {
  return FerryError.is(error) ? exitCodeByCode[error.code] : 1;
}

/** Seconds a client is told to wait after a 429 (docs/api.md#errors). */
export const retryAfterSec = 5;

/** An error answer of the HTTP API: `{"error"}` for 4xx, `{"error": "internal error", "requestId"}` for 5xx. */
export interface ErrorResponse {
  statusCode: number;
  body: { error: string; requestId?: string };
  /** `retry-after` on a 429: when to come back (docs/api.md#errors). */
  headers?: Record<string, string>;
}

export interface ErrorEdge {
  /** The id the client sees and the log line carries (API Gateway's, Lambda's, or a fresh uuid). */
  requestId: string;
  log: Logger;
  /** What was being served, for the log line (`GET /v2/ep/status/1`); never the headers (they carry keys). */
  what?: string;
}

/**
 * The one way an error leaves over HTTP, used by every edge (the local Fastify server, the API Lambda,
 * the agent, the load-balanced proxy, the API Gateway shim). 4xx: the message, which is written for the
 * client. 5xx: nothing but "internal error" and the request id; the detail is logged with that id.
 * The one 5xx with a message is no_worker's 503: the endpoint's state, said to whoever may call it.
 */
export function toHttpResponse(error: unknown, edge: ErrorEdge): ErrorResponse {
  const statusCode = httpStatus(error);
  // A 429, and a 503 for want of a worker, tell the client when to come back (docs/api.md#errors),
  // whichever API answers them; both messages are written for the client.
  if (statusCode === 429 || (FerryError.is(error) && error.code === 'no_worker'))
    return {
      statusCode,
      body: { error: (error as FerryError).message },
      headers: { 'retry-after': String(retryAfterSec) },
    };
  if (statusCode < 500) return { statusCode, body: { error: (error as FerryError).message } };
  edge.log.error(`request ${edge.requestId}${edge.what ? ` (${edge.what})` : ''} failed: ${detailOf(error)}`);
  return { statusCode, body: { error: 'internal error', requestId: edge.requestId } };
}

/** The message of a thrown value, for a short log line or a CLI message (detailOf for the whole story). */
export const messageOf = (error: unknown): string => (error instanceof Error ? error.message : String(error));

/** One log line: name, message, the chain of causes and where it was thrown. */
export function detailOf(error: unknown): string {
  const parts: string[] = [];
  let current: unknown = error;
  for (let depth = 0; current !== undefined && depth < 5; depth++) {
    if (current instanceof Error) {
      const code = FerryError.is(current) ? ` [${current.code}]` : '';
      parts.push(`${current.name}${code}: ${current.message}`);
      current = current.cause;
    } else {
      parts.push(String(current));
      current = undefined;
    }
  }
  const frame =
    error instanceof Error ? error.stack?.split('\n').find((l) => l.trim().startsWith('at ')) : undefined;
  return `${parts.join(' <- caused by ')}${frame ? ` ${frame.trim()}` : ''}`;
}
