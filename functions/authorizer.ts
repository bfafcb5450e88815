/**
 * The API Gateway REQUEST authorizer: the `Authorization` header (`Bearer <key>` or the bare key, spec
 * §5) is hashed with sha256 and looked up in the control table. A known key gets an Allow policy for
 * what it may call (the whole stage, `<api>/<stage>/*`, or a scoped key's routes), so the answer API
 * Gateway caches per key (identity source `method.request.header.Authorization`) is right for every
 * route. A missing or unknown key throws "Unauthorized", which API Gateway answers with 401 (its
 * UNAUTHORIZED gateway response); a route outside a known key's Allow is an implicit deny, which it
 * answers with 403 (ACCESS_DENIED): a scoped key on the management API, as the local API answers
 * (https://docs.aws.amazon.com/apigateway/latest/developerguide/apigateway-use-lambda-authorizer.html,
 * https://repost.aws/knowledge-center/api-gateway-403-error-lambda-authorizer). The first page says
 * API Gateway caches a returned policy for the authorizer's TTL; it does not say whether a thrown
 * "Unauthorized" is cached. Nothing here relies on either: a new key is a fresh random value.
 *
 * The key is never logged, nor put in the context: only the key's id travels on, as `principalId` and
 * `context.keyId` (and a call key's endpoint, `context.callFrom`). A key scoped to an app or
 * environment gets the v2 routes only (allowedResources); the API checks its scope on every call.
 * A failed lookup throws, which API Gateway answers with a 500 (fail closed).
 *
 * The stack gives both gateway responses the API's one error shape, `{"error": ...}`
 * (missingKeyMessage, outOfScopeMessage); the local shim answers the same.
 */
import type { APIGatewayAuthorizerResult, APIGatewayRequestAuthorizerEvent } from 'aws-lambda';
import { credentialOf, describeScope, hashKey, type KeyScope, sameSecret, scopeOf } from '../core/auth.js';
import type { ControlStore } from '../core/ports.js';
import { platformFromEnv } from './wiring.js';

/** `arn:aws:execute-api:<region>:<account>:<api>/<stage>/<METHOD>/<path>` → `…:<api>/<stage>/*`. */
export function stageWildcard(methodArn: string): string | undefined {
  const match = /^(arn:[^:]+:execute-api:[^:]*:[^:]*:[^/]+\/[^/]+)\//.exec(methodArn);
  return match ? `${match[1]}/*` : undefined;
}

function allow(resource: string): APIGatewayAuthorizerResult['policyDocument'] {
  return {
    Version: '2012-10-17',
    Statement: [{ Action: 'execute-api:Invoke', Effect: 'Allow', Resource: resource }],
  };
}

/**
 * What a key may invoke. An unscoped key: the whole stage. A scoped key (docs/security.md): every v2
 * route, and nothing outside /v2/ (the management API spans apps: API Gateway answers 403 there). The
 * API decides which endpoints a scoped key sees, with the one rule both front doors apply
 * (core/auth.ts endpointWithinScope): outside the scope, the same 404 as an endpoint that does not
 * exist. A policy that listed the key's endpoints would have API Gateway answer 403 for those
 * outside it and for unknown ones, where the local API answers 404, and would keep an endpoint
 * deployed since the key's policy was cached out of reach until the cache entry expired. API Gateway
 * matches the policy against the request's method ARN, whose path is the request's own
 * (https://docs.aws.amazon.com/apigateway/latest/developerguide/api-gateway-lambda-authorizer-output.html).
 */
export function allowedResources(stage: string, scope: KeyScope): string {
  return scope.app === undefined ? stage : `${stage.slice(0, -1)}*/v2/*`;
}

function headerOf(event: APIGatewayRequestAuthorizerEvent, name: string): string | undefined {
  for (const [key, value] of Object.entries(event.headers ?? {})) {
    if (key.toLowerCase() === name && value) return value;
  }
  return undefined;
}

export type AuthorizerHandler = (
  event: APIGatewayRequestAuthorizerEvent,
) => Promise<APIGatewayAuthorizerResult>;

export function createAuthorizer(control: () => ControlStore): AuthorizerHandler {
  return async (event) => {
    const stage = stageWildcard(event.methodArn ?? '');
    const key = credentialOf(headerOf(event, 'authorization'));
    // The exact message API Gateway reads as "answer 401".
    if (!key || !stage) throw new Error('Unauthorized');
    const record = await control().findApiKeyByHash(hashKey(key));
    if (!record || !sameSecret(key, record.hash)) throw new Error('Unauthorized');
    const scope = scopeOf(record);
    return {
      principalId: record.id,
      policyDocument: allow(allowedResources(stage, scope)),
      context: {
        keyId: record.id,
        keyName: record.name,
        ...(scope.app !== undefined ? { keyScope: describeScope(scope) } : {}),
        // A worker's call key (core/call-keys.ts): the endpoint whose workers hold it. For the logs;
        // the API reads it again off the key's record (KeyScope.callFrom), never off this context.
        ...(scope.callFrom !== undefined ? { callFrom: scope.callFrom } : {}),
      },
    };
  };
}

/** `authorizer.handler` in the bundle (functions/bundle.ts). */
export const handler: AuthorizerHandler = createAuthorizer(() => platformFromEnv().control);
