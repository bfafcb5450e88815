/**
 * The API Lambda: one middy handler behind an API Gateway REST API (`/v2/{proxy+}`, Lambda proxy
 * integration, event format 1.0) for every v2 client route. It only translates: the event becomes an
 * ApiRequest for V2Api.handle (the same code the local Fastify server runs), and its answer becomes
 * the proxy result.
 *
 * Trust boundary. The REQUEST authorizer (authorizer.ts) already checked the key, and API Gateway only
 * invokes this function for allowed requests. V2Api still checks the key itself, through the same
 * control-table lookup (cached 5 s per container): a method wired without the authorizer, a Function
 * URL or a direct invoke then cannot skip authentication, and a key revoked while the authorizer's
 * cache still allows it stops working within seconds here. One GetItem per key per container per 5 s
 * is the price. Worker routes answer 401 here: workers talk to their agent sidecar, never to this API.
 *
 * Waits: runsync, status-sync and stream hold a request at most FERRY_MAX_WAIT_MS (default 25 s), and
 * never past the time the request has left (timeLeft: the function's, or API Gateway's when a cold
 * start took part of it), then answer as RunPod does for an unfinished job
 * (`200 {id, status}`); clients poll again — wire compatible, and under API Gateway's 29 s timeout.
 */
import { randomUUID } from 'node:crypto';
import middy from '@middy/core';
import type { APIGatewayProxyEvent, APIGatewayProxyResult, Context } from 'aws-lambda';
import type { ApiRequest, ApiResponse } from '../core/api.js';
import { badRequest, type ErrorEdge, internal, toHttpResponse } from '../core/errors.js';
import { stringifyJsonExact } from '../core/json.js';
import { type Logger, stderrLogger } from '../core/log.js';
import { managePrefix } from '../core/manage.js';
import { envelopeBytes, fitsLambdaResponse, lambdaPayloadBytes } from './payloads.js';
import { deadlineSignal, type Platform, platformFromEnv, settleSends } from './wiring.js';

/** Answer this long before the function's timeout, so a capped wait still gets its 200 out. */
const answerMarginMs = 1_500;

const jsonHeaders = { 'content-type': 'application/json' };

/** Strict base64 (the alphabet API Gateway uses), so garbage is a 400 and not silently dropped bytes. */
const base64Pattern = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/** The proxy event as the framework-free request V2Api takes. Throws 400 for what cannot be read. */
export function requestOf(event: APIGatewayProxyEvent, signal?: AbortSignal): ApiRequest {
  const path = apiPath(event);
  for (const segment of path.split('/')) {
    try {
      decodeURIComponent(segment);
    } catch {
      throw badRequest(
        `Bad request: the path ${JSON.stringify(path.slice(0, 200))} is not valid percent-encoding`,
      );
    }
  }
  const headers: Record<string, string | undefined> = {};
  for (const [name, values] of Object.entries(event.multiValueHeaders ?? {})) {
    if (values && values.length > 0) headers[name.toLowerCase()] = values.join(',');
  }
  for (const [name, value] of Object.entries(event.headers ?? {})) {
    if (value !== undefined) headers[name.toLowerCase()] = value;
  }
  // A repeated parameter is joined with commas, as the local server does (`?job_id=a&job_id=b`).
  const query: Record<string, string | undefined> = { ...(event.queryStringParameters ?? {}) };
  for (const [name, values] of Object.entries(event.multiValueQueryStringParameters ?? {})) {
    if (values && values.length > 0) query[name] = values.join(',');
  }
  return {
    method: event.httpMethod,
    path,
    query,
    headers,
    body: bodyOf(event),
    signal,
    requestId: event.requestContext?.requestId,
  };
}

/**
 * `/v2/...` from the event. With a custom domain's base path mapping `event.path` carries the base
 * path first; the `{proxy+}` parameter is the reliable part then.
 */
function apiPath(event: APIGatewayProxyEvent): string {
  const path = event.path ?? '';
  // The management API (core/manage.ts), possibly behind a custom domain's base path.
  const manageAt = path.indexOf(`${managePrefix}/`);
  if (manageAt >= 0) return path.slice(manageAt);
  if (path.startsWith('/v2/') || path === '/v2') return path;
  const at = path.indexOf('/v2/');
  if (at >= 0) return path.slice(at);
  const proxy = event.pathParameters?.proxy;
  return proxy ? `/v2/${proxy}` : path;
}

function bodyOf(event: APIGatewayProxyEvent): Buffer | undefined {
  if (event.body === null || event.body === undefined) return undefined;
  if (!event.isBase64Encoded) return Buffer.from(event.body, 'utf8');
  const text = event.body.replace(/\s+/g, '');
  if (!base64Pattern.test(text))
    throw badRequest('Bad request: the body is marked base64 but is not valid base64');
  return Buffer.from(text, 'base64');
}

/** The API's answer as the proxy result; 204 has no body. */
export function resultOf(response: ApiResponse, edge: ErrorEdge): APIGatewayProxyResult {
  if (response.statusCode === 204 || response.body === undefined) {
    return { statusCode: response.statusCode, headers: {}, body: '' };
  }
  const body = stringifyJsonExact(response.body);
  // Last line of defence: the payload store shrinks outputs, but a response Lambda cannot return
  // would reach the client as API Gateway's bare 502: answer in the API's error shape instead.
  if (!fitsLambdaResponse(body, lambdaPayloadBytes - envelopeBytes)) {
    const size = Buffer.byteLength(JSON.stringify(body));
    return errorResult(
      internal(`The answer is ${size} bytes, more than a Lambda response may carry (6 MB)`),
      edge,
    );
  }
  return { statusCode: response.statusCode, headers: { ...jsonHeaders, ...response.headers }, body };
}

function errorResult(error: unknown, edge: ErrorEdge): APIGatewayProxyResult {
  const answer = toHttpResponse(error, edge);
  return {
    statusCode: answer.statusCode,
    headers: { ...jsonHeaders, ...answer.headers },
    body: JSON.stringify(answer.body),
  };
}

/** The id clients see in a 5xx: API Gateway's request id, else the invocation's. */
const requestIdOf = (event: APIGatewayProxyEvent | undefined, context: Context | undefined): string =>
  event?.requestContext?.requestId ?? context?.awsRequestId ?? randomUUID();

/**
 * The time the request has left: the function's (the context's getRemainingTimeInMillis(),
 * https://docs.aws.amazon.com/lambda/latest/dg/nodejs-context.html), and no more than API Gateway's.
 * The stack sets the function's timeout 1 s under the integration timeout (infra integrationTiming;
 * 29 s by default, https://docs.aws.amazon.com/apigateway/latest/developerguide/limits.html), but a
 * cold start's Init phase, up to 10 s, runs before the function's timeout starts and inside the
 * gateway's (https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtime-environment.html). The
 * gateway's is counted from `requestTimeEpoch`, when it received the request: a little earlier than
 * its integration request (the authorizer runs between), so it errs on the early side. Undefined
 * without a context (a handler called directly); the function's alone without a gateway's time.
 */
export function timeLeft(
  event: Pick<APIGatewayProxyEvent, 'requestContext'> | undefined,
  context: Pick<Context, 'getRemainingTimeInMillis'> | undefined,
  integrationTimeoutMs: number | undefined,
  nowMs: () => number = Date.now,
): Pick<Context, 'getRemainingTimeInMillis'> | undefined {
  const functionLeft = context?.getRemainingTimeInMillis?.bind(context);
  if (!functionLeft) return undefined;
  const received = event?.requestContext?.requestTimeEpoch;
  if (typeof received !== 'number' || !Number.isFinite(received) || integrationTimeoutMs === undefined)
    return { getRemainingTimeInMillis: functionLeft };
  return {
    getRemainingTimeInMillis: () => Math.min(functionLeft(), received + integrationTimeoutMs - nowMs()),
  };
}

export type ApiHandler = (event: APIGatewayProxyEvent, context: Context) => Promise<APIGatewayProxyResult>;

/**
 * The handler over a platform; `platform` is called per request and builds it once (module scope).
 * `log` is where internal failures go with their request id (stderr: CloudWatch Logs on Lambda).
 */
export function createApiHandler(platform: () => Platform, log: Logger = stderrLogger): ApiHandler {
  return middy<APIGatewayProxyEvent, APIGatewayProxyResult>()
    .use({
      // Anything that escapes (bad configuration, an AWS outage) answers in the API's one error shape;
      // the log line names the error and the request id but never the request (it carries the key).
      onError: async (request) => {
        const edge = { requestId: requestIdOf(request.event, request.context), log };
        request.response = errorResult(request.error, edge);
      },
    })
    .handler(async (event, context, options) => {
      const { api, manage, env } = platform();
      // `env?.`: a platform assembled by hand around an engine (tests) may have none.
      const left = timeLeft(event, context, env?.FERRY_INTEGRATION_TIMEOUT_MS);
      const request = requestOf(event, deadlineSignal(left, answerMarginMs, options?.signal));
      const edge = { requestId: requestIdOf(event, context), log };
      const response = await (request.path.startsWith(`${managePrefix}/`) ? manage : api).handle(request);
      // A submit to an endpoint with no worker nudged the scaler, and a cancel or a final transition
      // started a webhook, and a cancel signals the agent of the worker holding the job (stop
      // signals): send them before the sandbox freezes
      // (https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtime-environment.html), but only
      // within the time the waits have too (timeLeft, less answerMarginMs). The request's own work
      // (a job written, a cancel) is done: a send that hangs must not turn its answer into the
      // gateway's 504 or the function's timeout (settleSends). What giving up loses is made up
      // later, though not by the sweeper: a nudge by the scaler's run every minute
      // (ScaleEveryMinute), a stop signal by the agent's safety re-read of its held jobs (safetyMs,
      // 15 s, core/adapters/aws/stop-signals.ts); only a webhook's hand-over has no later sender.
      await settleSends(platform(), (left?.getRemainingTimeInMillis() ?? 10_000) - answerMarginMs);
      return resultOf(response, edge);
    }) as unknown as ApiHandler;
}

/** `api.handler` in the bundle (functions/bundle.ts). */
export const handler: ApiHandler = createApiHandler(platformFromEnv);
