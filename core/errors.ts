/**
 * Typed errors. Each has a `code`; `httpStatus` and `exitCode` map codes to the two places errors
 * leave Ferry (the HTTP API and the CLI), once each.
 */
export type ErrorCode =
  | 'bad_request'
  | 'unauthorized'
  | 'forbidden'
  | 'not_found'
  | 'conflict'
  | 'too_large'
  | 'too_many_requests'
  | 'usage'
  | 'failed';

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
};

/** CLI exit codes: 2 for what the user can fix by typing something else, 1 for everything else. */
const exitCodeByCode: Record<ErrorCode, number> = {
  bad_request: 2,
  unauthorized: 1,
  forbidden: 1,
  not_found: 1,
  conflict: 1,
  too_large: 1,
  too_many_requests: 1,
  usage: 2,
  failed: 1,
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
export const notFound = (message: string) => new FerryError('not_found', message);
export const conflict = (message: string) => new FerryError('conflict', message);
export const unauthorized = (message = 'Missing or invalid API key') =>
  new FerryError('unauthorized', message);
export const forbidden = (message: string) => new FerryError('forbidden', message);
export const tooLarge = (message: string, hint?: string) => new FerryError('too_large', message, { hint });
export const usage = (message: string, hint?: string) => new FerryError('usage', message, { hint });

export function httpStatus(error: unknown): number {
  return FerryError.is(error) ? httpStatusByCode[error.code] : 500;
}

export function exitCode(error: unknown): number {
  return FerryError.is(error) ? exitCodeByCode[error.code] : 1;
}

/** The one error body of the HTTP API. Unexpected errors never leak their message or stack. */
export function errorBody(error: unknown): { error: string } {
  return { error: FerryError.is(error) ? error.message : 'Internal error' };
}
