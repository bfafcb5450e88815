/**
 * The REQUEST authorizer with API Gateway events, over an in-memory control store (unit level).
 */
import type { APIGatewayRequestAuthorizerEvent } from 'aws-lambda';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { MemoryCallTokens } from '../../core/adapters/aws/secrets.js';
import { hashKey } from '../../core/auth.js';
import {
  callKeyRotationMinAgeMs,
  callTokenSecretName,
  issueCallKey,
  prepareCallKeys,
  retireCallKeys,
  revokeCallKeys,
} from '../../core/call-keys.js';
import type { ApiKeyRecord, ControlStore } from '../../core/ports.js';
import { createAuthorizer, stageWildcard } from '../../functions/authorizer.js';
import { allows } from '../../functions/shim.js';

const key = 'fy_authorizer_unit_key';
const record: ApiKeyRecord = { id: 'key-1', name: 'ci', hash: hashKey(key), createdAt: 1 };
const methodArn = 'arn:aws:execute-api:eu-west-1:123456789012:abc123/prod/POST/v2/ep/run';

function storeWith(records: ApiKeyRecord[]) {
  const lookups: string[] = [];
  const store = {
    findApiKeyByHash: async (hash: string) => {
      lookups.push(hash);
      return records.find((r) => r.hash === hash);
    },
  } as unknown as ControlStore;
  return { store, lookups };
}

const event = (headers: Record<string, string>, arn = methodArn): APIGatewayRequestAuthorizerEvent =>
  ({ type: 'REQUEST', methodArn: arn, headers }) as unknown as APIGatewayRequestAuthorizerEvent;

afterEach(() => vi.restoreAllMocks());

describe('authorizer', () => {
  it.each([
    ['Bearer', `Bearer ${key}`],
    ['bare', key],
    ['lower-case bearer', `bearer ${key}`],
  ])('allows a stored key (%s) for the whole stage, cacheable per key', async (_name, authorization) => {
    const { store, lookups } = storeWith([record]);
    const result = await createAuthorizer(() => store)(event({ Authorization: authorization }));
    expect(result.principalId).toBe('key-1');
    expect(result.policyDocument.Statement).toEqual([
      {
        Action: 'execute-api:Invoke',
        Effect: 'Allow',
        Resource: 'arn:aws:execute-api:eu-west-1:123456789012:abc123/prod/*',
      },
    ]);
    expect(result.context).toEqual({ keyId: 'key-1', keyName: 'ci' });
    expect(lookups).toEqual([hashKey(key)]);
  });

  it('reads the header whatever its case', async () => {
    const { store } = storeWith([record]);
    const result = await createAuthorizer(() => store)(event({ authorization: key }));
    expect((result.policyDocument.Statement[0] as { Effect: string }).Effect).toBe('Allow');
  });

  it.each([
    ['an unknown key', { Authorization: 'Bearer fy_wrong' }],
    ['no header', {}],
    ['an empty Bearer', { Authorization: 'Bearer ' }],
  ])('rejects %s with exactly "Unauthorized" (API Gateway answers 401)', async (_name, headers) => {
    const { store } = storeWith([record]);
    // API Gateway answers 401 only for this exact message; any other error is a 500.
    await expect(createAuthorizer(() => store)(event(headers))).rejects.toThrow(/^Unauthorized$/);
  });

  it('rejects a stored key with "Unauthorized" when the method ARN is not one (no stage to allow)', async () => {
    const { store } = storeWith([record]);
    await expect(createAuthorizer(() => store)(event({ Authorization: key }, 'not-an-arn'))).rejects.toThrow(
      /^Unauthorized$/,
    );
  });

  it('never logs the key, allowed or refused', async () => {
    const spies = (['log', 'info', 'warn', 'error', 'debug'] as const).map((m) =>
      vi.spyOn(console, m).mockImplementation(() => {}),
    );
    const { store } = storeWith([record]);
    const authorize = createAuthorizer(() => store);
    const allowed = await authorize(event({ Authorization: key }));
    const refused = await authorize(event({ Authorization: 'fy_not_stored_secret' })).catch(
      (error: unknown) => error as Error,
    );
    expect(refused).toBeInstanceOf(Error);
    const logged = spies
      .flatMap((spy) => spy.mock.calls.flat())
      .map(String)
      .join('\n');
    expect(logged).not.toContain(key);
    expect(logged).not.toContain('fy_not_stored_secret');
    // Neither the policy and context of the allowed key nor the refusal carries a key.
    expect(JSON.stringify(allowed)).not.toContain(key);
    expect(`${(refused as Error).message} ${(refused as Error).stack}`).not.toContain('fy_not_stored_secret');
  });

  it('fails closed when the lookup fails (API Gateway answers 500)', async () => {
    const store = {
      findApiKeyByHash: async () => Promise.reject(new Error('throttled')),
    } as unknown as ControlStore;
    await expect(createAuthorizer(() => store)(event({ Authorization: key }))).rejects.toThrow('throttled');
  });

  it('stageWildcard keeps api and stage, and refuses what is not a method ARN', () => {
    expect(stageWildcard(methodArn)).toBe('arn:aws:execute-api:eu-west-1:123456789012:abc123/prod/*');
    expect(stageWildcard('not-an-arn')).toBeUndefined();
  });
});

describe('call keys (core/call-keys.ts): what a worker may call with its key', () => {
  const endpoints = [
    { id: 'callerid1', app: 'shop', env: 'prod', name: 'caller' },
    { id: 'calleeid2', app: 'shop', env: 'prod', name: 'callee' },
    { id: 'stagingid3', app: 'shop', env: 'staging', name: 'callee' },
    { id: 'otherid4', app: 'blog', env: 'prod', name: 'callee' },
  ].map((e) => ({ ...e, kind: 'queue' as const, config: {}, fingerprint: 'f', createdAt: 1, updatedAt: 1 }));
  const keys: ApiKeyRecord[] = [];
  const secrets = new MemoryCallTokens();
  const store = {
    putApiKey: async (k: ApiKeyRecord) => void keys.push(k),
    listApiKeys: async () => [...keys],
    deleteApiKey: async (id: string) =>
      void keys.splice(
        keys.findIndex((k) => k.id === id),
        1,
      ),
    findApiKeyByHash: async (hash: string) => keys.find((k) => k.hash === hash),
    listEndpoints: async (filter: { app?: string; env?: string } = {}) =>
      endpoints.filter((e) => (!filter.app || e.app === filter.app) && (!filter.env || e.env === filter.env)),
  } as unknown as ControlStore;
  const arn = (method: string, path: string) =>
    `arn:aws:execute-api:eu-west-1:123456789012:abc123/prod/${method}/${path}`;

  async function decide(path: string, method = 'POST') {
    const token = secrets.values.get(callTokenSecretName(endpoints[0]!))!;
    const methodArn = arn(method, path);
    const decision = await createAuthorizer(() => store)(
      event({ Authorization: `Bearer ${token}` }, methodArn),
    );
    return allows(decision, methodArn);
  }

  it('is minted scoped to the caller endpoint’s app and environment, and stored only hashed', async () => {
    const record = await issueCallKey({ control: store, secrets, nowMs: () => 5 }, endpoints[0]!);
    expect(record).toMatchObject({ app: 'shop', env: 'prod', endpointId: 'callerid1', createdAt: 5 });
    const token = secrets.values.get(callTokenSecretName(endpoints[0]!))!;
    expect(token).toMatch(/^fy_/);
    expect(JSON.stringify(keys)).not.toContain(token);
    // The context names the endpoint whose workers hold it (the API reads it off the key's record).
    const decision = await createAuthorizer(() => store)(
      event({ Authorization: `Bearer ${token}` }, arn('POST', 'v2/calleeid2/run')),
    );
    expect(decision.context).toMatchObject({ keyId: record.id, callFrom: 'callerid1' });
  });

  // Every v2 route reaches the API, which answers an endpoint outside the key's scope as one that
  // does not exist (core/auth.ts endpointWithinScope): a 403 here would tell the two apart.
  it.each([
    ['by id', 'v2/calleeid2/run'],
    ['by id, its own endpoint', 'v2/callerid1/runsync'],
    ['by name', 'v2/by-name/shop/prod/callee/run'],
    ['by name, env "-"', 'v2/by-name/shop/-/callee/runsync'],
    ['status by name', 'v2/by-name/shop/prod/callee/status/j1'],
    ['the lookup by id', 'v2/calleeid2'],
    ['another environment, by id', 'v2/stagingid3/run'],
    ['another app, by name', 'v2/by-name/blog/prod/callee/run'],
    ['another app, the lookup by id', 'v2/otherid4'],
    ['an endpoint that does not exist', 'v2/nosuchid/run'],
  ])('lets the API answer %s', async (_name, path) => {
    expect(await decide(path)).toBe(true);
  });

  it.each([
    ['management: endpoints', 'manage/v1/endpoints'],
    ['management: keys', 'manage/v1/keys'],
    ['a path that only starts like v2', 'v2x/calleeid2/run'],
  ])('leaves out %s (a known key: API Gateway answers 403)', async (_name, path) => {
    expect(await decide(path)).toBe(false);
    expect(await decide(path, 'GET')).toBe(false);
  });

  it('stops working when the endpoint is undeployed, and after a rotation only the new key works', async () => {
    // Past the 10 minutes a key is kept through changes (callKeyRotationMinAgeMs): it was issued at 5.
    const deps = { control: store, secrets, nowMs: () => 5 + callKeyRotationMinAgeMs };
    const old = secrets.values.get(callTokenSecretName(endpoints[0]!))!;
    const ids = await prepareCallKeys(deps, [endpoints[0]!], new Set(['callerid1']));
    const fresh = secrets.values.get(callTokenSecretName(endpoints[0]!))!;
    expect(fresh).not.toBe(old);
    // Until the stack is deployed both work: running tasks still hold the old one.
    // What API Gateway answers: the route, 403 outside the policy, 401 for a key no longer stored.
    const answer = async (token: string) => {
      const methodArn = arn('POST', 'v2/calleeid2/run');
      try {
        const decision = await createAuthorizer(() => store)(event({ Authorization: token }, methodArn));
        return allows(decision, methodArn) ? 'allowed' : 403;
      } catch (error) {
        if ((error as Error).message === 'Unauthorized') return 401;
        throw error;
      }
    };
    expect(await answer(old)).toBe('allowed');
    await retireCallKeys(store, 'callerid1', ids.caller!);
    expect(await answer(old)).toBe(401);
    expect(await answer(fresh)).toBe('allowed');
    // An unchanged endpoint keeps its key.
    expect(await prepareCallKeys(deps, [endpoints[0]!], new Set())).toEqual(ids);
    await revokeCallKeys(deps, endpoints[0]!);
    expect(await answer(fresh)).toBe(401);
    expect(secrets.values.has(callTokenSecretName(endpoints[0]!))).toBe(false);
  });
});
