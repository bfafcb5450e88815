/**
 * A local stand-in for API Gateway (REST API, Lambda proxy integration) in front of the Lambda
 * handlers: a dev and test tool, not a production server. Each HTTP request goes the way it would on
 * AWS:
 *
 *   path outside /v2/ and /manage/v1/ ────────▶ 404 {"error": noRouteMessage} (no resource there)
 *   body > 10 MB ─────────────────────────────▶ 413 (API Gateway's payload cap)
 *   proxy event > 6 MB ───────────────────────▶ 413 (Lambda's invocation cap)
 *   no Authorization header ──────────────────▶ 401 (the authorizer's identity source is missing)
 *   authorizer: throws "Unauthorized" ─────────▶ 401 {"error": "Missing or invalid API key"}
 *   its policy does not allow the route ──────▶ 403 {"error": outOfScopeMessage}
 *   authorizer fails otherwise ───────────────▶ 500
 *   api handler: throws ──────────────────────▶ 502 · takes > 29 s ─▶ 504 · result > 6 MB ─▶ 502
 *   (every 5xx: {"error": "internal error", "requestId"}, the detail in the log; docs/api.md#errors)
 *   otherwise ────────────────────────────────▶ the handler's statusCode, headers and body
 *
 * API Gateway itself answers these with `{"message": ...}`; the platform stack gives its
 * UNAUTHORIZED and ACCESS_DENIED gateway responses the API's one error shape, `{"error": ...}`, and
 * the shim answers what the stack answers. Every answer the shim makes itself is `{"error": "..."}`
 * for the same reason.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type {
  APIGatewayAuthorizerResult,
  APIGatewayProxyEvent,
  APIGatewayProxyResult,
  APIGatewayRequestAuthorizerEvent,
  Context,
} from 'aws-lambda';
import { outOfScopeMessage } from '../core/auth.js';
import {
  FerryError,
  inlineBodyTooLargeMessage,
  internal,
  missingKeyMessage,
  noRouteMessage,
  toHttpResponse,
} from '../core/errors.js';
import { type Logger, stderrLogger } from '../core/log.js';
import type { ApiHandler } from './api.js';
import type { AuthorizerHandler } from './authorizer.js';
import { lambdaPayloadBytes } from './payloads.js';

/** API Gateway's request payload cap (REST and HTTP APIs; not adjustable). */
export const apiGatewayPayloadBytes = 10 * 1024 * 1024;
/** API Gateway REST's default integration timeout. */
export const integrationTimeoutMs = 29_000;

export interface ShimOptions {
  api: ApiHandler;
  authorizer: AuthorizerHandler;
  host?: string;
  /** 0 (the default) picks a free port. */
  port?: number;
  stage?: string;
  /** The api function's configured timeout; its context counts down from here. */
  functionTimeoutMs?: number;
  integrationTimeoutMs?: number;
  /** Where the shim's own 5xx answers are logged with their request id (default stderr). */
  log?: Logger;
}

export interface Shim {
  /** `http://host:port`; clients use `${url}/v2`. */
  url: string;
  close(): Promise<void>;
}

const region = 'local';
const accountId = '000000000000';
const apiId = 'ferrylocal';

const errorJson = (res: ServerResponse, statusCode: number, error: string): void => {
  writeJson(res, statusCode, { error });
};

const writeJson = (res: ServerResponse, statusCode: number, answer: unknown): void => {
  const body = JSON.stringify(answer);
  res.writeHead(statusCode, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(body),
  });
  res.end(body);
};

/** A failure on the gateway's side, answered like every edge answers one (docs/api.md#errors). */
const failed = (res: ServerResponse, options: ShimOptions, requestId: string, error: FerryError): void => {
  const answer = toHttpResponse(error, { requestId, log: options.log ?? stderrLogger, what: 'shim' });
  writeJson(res, answer.statusCode, answer.body);
};

export async function startShim(options: ShimOptions): Promise<Shim> {
  const server = createServer((req, res) => {
    serve(req, res, options).catch((error: unknown) => {
      if (!res.headersSent) failed(res, options, randomUUID(), internal('The shim failed', error));
      else res.destroy();
    });
  });
  server.listen(options.port ?? 0, options.host ?? '127.0.0.1');
  await new Promise<void>((resolve, reject) => {
    server.once('listening', resolve);
    server.once('error', reject);
  });
  const { address, port } = server.address() as AddressInfo;
  const host = address.includes(':') ? `[${address}]` : address;
  let closed: Promise<void> | undefined;
  return {
    url: `http://${host}:${port}`,
    close() {
      closed ??= new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      return closed;
    },
  };
}

async function serve(req: IncomingMessage, res: ServerResponse, options: ShimOptions): Promise<void> {
  // The stack's only resources are /v2/{proxy+} and /manage/v1/{proxy+} (infra/platform-stack.ts).
  const path = (req.url ?? '/').split('?')[0]!;
  if (!path.startsWith('/v2/') && !path.startsWith('/manage/v1/')) {
    req.resume();
    errorJson(res, 404, noRouteMessage);
    return;
  }
  const body = await readBody(req, apiGatewayPayloadBytes);
  if (body === 'too large') {
    errorJson(res, 413, `Request body is over the ${apiGatewayPayloadBytes} bytes API Gateway takes`);
    return;
  }
  const event = proxyEvent(req, body, options.stage ?? 'local');
  const eventBytes = Buffer.byteLength(JSON.stringify(event));
  if (eventBytes > lambdaPayloadBytes) {
    errorJson(res, 413, inlineBodyTooLargeMessage);
    return;
  }

  const authorization = Object.entries(event.headers).find(
    ([name]) => name.toLowerCase() === 'authorization',
  )?.[1];
  if (!authorization) {
    errorJson(res, 401, missingKeyMessage);
    return;
  }
  let decision: APIGatewayAuthorizerResult;
  try {
    decision = await options.authorizer(authorizerEvent(event));
  } catch (error) {
    if ((error as Error)?.message === 'Unauthorized') errorJson(res, 401, missingKeyMessage);
    else failed(res, options, event.requestContext.requestId, internal('The authorizer failed', error));
    return;
  }
  const methodArn = authorizerEvent(event).methodArn;
  if (!allows(decision, methodArn)) {
    errorJson(res, 403, outOfScopeMessage);
    return;
  }
  event.requestContext.authorizer = { principalId: decision.principalId, ...(decision.context ?? {}) };

  const timeoutMs = options.integrationTimeoutMs ?? integrationTimeoutMs;
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<'timeout'>((resolve) => {
    timer = setTimeout(() => resolve('timeout'), timeoutMs);
  });
  let result: APIGatewayProxyResult | 'timeout';
  try {
    result = await Promise.race([
      options.api(event, lambdaContext(options.functionTimeoutMs ?? 30_000)),
      timedOut,
    ]);
  } catch (error) {
    const cause = new FerryError('bad_gateway', 'The api function failed', { cause: error });
    failed(res, options, event.requestContext.requestId, cause);
    return;
  } finally {
    clearTimeout(timer);
  }
  if (result === 'timeout') {
    const late = new FerryError('gateway_timeout', `The api function took over ${timeoutMs} ms`);
    failed(res, options, event.requestContext.requestId, late);
    return;
  }
  const resultBytes = Buffer.byteLength(JSON.stringify(result));
  if (resultBytes > lambdaPayloadBytes) {
    const big = new FerryError(
      'bad_gateway',
      `The api function's response of ${resultBytes} bytes is over 6 MB`,
    );
    failed(res, options, event.requestContext.requestId, big);
    return;
  }
  writeResult(res, result);
}

/** The body, or 'too large' once it passes `maxBytes` (the rest is read and dropped, so the client sees the 413). */
async function readBody(req: IncomingMessage, maxBytes: number): Promise<Buffer | 'too large'> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size <= maxBytes) chunks.push(chunk as Buffer);
  }
  return size > maxBytes ? 'too large' : Buffer.concat(chunks);
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

/** API Gateway REST proxy event, format 1.0. Text bodies go as they are; anything else as base64. */
function proxyEvent(req: IncomingMessage, body: Buffer, stage: string): APIGatewayProxyEvent {
  const url = new URL(req.url ?? '/', 'http://shim.local');
  const method = (req.method ?? 'GET').toUpperCase();
  const headers: Record<string, string> = {};
  const multiValueHeaders: Record<string, string[]> = {};
  for (let i = 0; i < req.rawHeaders.length; i += 2) {
    const name = req.rawHeaders[i]!;
    const value = req.rawHeaders[i + 1]!;
    headers[name] = value;
    multiValueHeaders[name] = [...(multiValueHeaders[name] ?? []), value];
  }
  const query: Record<string, string> = {};
  const multiQuery: Record<string, string[]> = {};
  for (const [name, value] of url.searchParams) {
    query[name] = value;
    multiQuery[name] = [...(multiQuery[name] ?? []), value];
  }
  const hasQuery = Object.keys(query).length > 0;
  let text: string | null = null;
  let isBase64Encoded = false;
  if (body.length > 0) {
    try {
      text = utf8.decode(body);
    } catch {
      text = body.toString('base64');
      isBase64Encoded = true;
    }
  }
  const path = url.pathname;
  return {
    resource: '/v2/{proxy+}',
    path,
    httpMethod: method,
    headers,
    multiValueHeaders,
    queryStringParameters: hasQuery ? query : null,
    multiValueQueryStringParameters: hasQuery ? multiQuery : null,
    pathParameters: path.startsWith('/v2/') ? { proxy: path.slice('/v2/'.length) } : null,
    stageVariables: null,
    body: text,
    isBase64Encoded,
    requestContext: {
      accountId,
      apiId,
      authorizer: undefined,
      protocol: 'HTTP/1.1',
      httpMethod: method,
      identity: {
        sourceIp: req.socket.remoteAddress ?? '127.0.0.1',
        userAgent: headers['user-agent'] ?? null,
      } as APIGatewayProxyEvent['requestContext']['identity'],
      path: `/${stage}${path}`,
      stage,
      requestId: randomUUID(),
      requestTimeEpoch: Date.now(),
      resourceId: 'proxy',
      resourcePath: '/v2/{proxy+}',
    },
  };
}

function authorizerEvent(event: APIGatewayProxyEvent): APIGatewayRequestAuthorizerEvent {
  const { stage } = event.requestContext;
  return {
    type: 'REQUEST',
    methodArn: `arn:aws:execute-api:${region}:${accountId}:${apiId}/${stage}/${event.httpMethod}${event.path}`,
    resource: event.resource,
    path: event.path,
    httpMethod: event.httpMethod,
    headers: event.headers as Record<string, string>,
    multiValueHeaders: event.multiValueHeaders as Record<string, string[]>,
    pathParameters: event.pathParameters,
    queryStringParameters: event.queryStringParameters,
    multiValueQueryStringParameters: event.multiValueQueryStringParameters,
    stageVariables: null,
    requestContext: event.requestContext,
  } as APIGatewayRequestAuthorizerEvent;
}

/** IAM evaluation, reduced to what an authorizer policy holds: an explicit Deny wins, then any Allow. */
export function allows(decision: APIGatewayAuthorizerResult, methodArn: string): boolean {
  const statements = (decision.policyDocument?.Statement ?? []) as {
    Effect?: string;
    Resource?: string | string[];
  }[];
  const matching = statements.filter((s) =>
    [s.Resource ?? []].flat().some((resource) => arnMatches(resource, methodArn)),
  );
  if (matching.some((s) => s.Effect === 'Deny')) return false;
  return matching.some((s) => s.Effect === 'Allow');
}

function arnMatches(pattern: string, arn: string): boolean {
  const regex = new RegExp(`^${pattern.split('*').map(escapeRegex).join('.*')}$`);
  return regex.test(arn);
}

const escapeRegex = (text: string): string => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

function lambdaContext(functionTimeoutMs: number): Context {
  const deadline = Date.now() + functionTimeoutMs;
  return {
    callbackWaitsForEmptyEventLoop: false,
    functionName: 'ferry-api',
    functionVersion: '$LATEST',
    invokedFunctionArn: `arn:aws:lambda:${region}:${accountId}:function:ferry-api`,
    memoryLimitInMB: '1024',
    awsRequestId: randomUUID(),
    logGroupName: '/aws/lambda/ferry-api',
    logStreamName: 'local',
    getRemainingTimeInMillis: () => Math.max(0, deadline - Date.now()),
    done: () => {},
    fail: () => {},
    succeed: () => {},
  };
}

function writeResult(res: ServerResponse, result: APIGatewayProxyResult): void {
  const headers: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(result.headers ?? {})) headers[name] = String(value);
  for (const [name, values] of Object.entries(result.multiValueHeaders ?? {})) {
    headers[name] = values.map(String);
  }
  const body = Buffer.from(result.body ?? '', result.isBase64Encoded ? 'base64' : 'utf8');
  res.writeHead(result.statusCode, { ...headers, 'content-length': String(body.length) });
  res.end(body);
}
