/**
 * The REQUEST authorizer with API Gateway events, over an in-memory control store (unit level).
 */
import type { APIGatewayRequestAuthorizerEvent } from 'aws-lambda';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { hashKey } from '../../core/auth.js';
import type { ApiKeyRecord, ControlStore } from '../../core/ports.js';
import { createAuthorizer, stageWildcard } from '../../functions/authorizer.js';

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
  ])('denies %s', async (_name, headers) => {
    const { store } = storeWith([record]);
    const result = await createAuthorizer(() => store)(event(headers));
    expect(result.principalId).toBe('anonymous');
    expect(result.policyDocument.Statement).toEqual([
      expect.objectContaining({
        Effect: 'Deny',
        Resource: 'arn:aws:execute-api:eu-west-1:123456789012:abc123/prod/*',
      }),
    ]);
    expect(result.context).toBeUndefined();
  });

  it('never logs the key, allowed or denied', async () => {
    const spies = (['log', 'info', 'warn', 'error', 'debug'] as const).map((m) =>
      vi.spyOn(console, m).mockImplementation(() => {}),
    );
    const { store } = storeWith([record]);
    const authorize = createAuthorizer(() => store);
    const allowed = await authorize(event({ Authorization: key }));
    const denied = await authorize(event({ Authorization: 'fy_not_stored_secret' }));
    const logged = spies
      .flatMap((spy) => spy.mock.calls.flat())
      .map(String)
      .join('\n');
    expect(logged).not.toContain(key);
    expect(logged).not.toContain('fy_not_stored_secret');
    expect(JSON.stringify([allowed, denied])).not.toContain(key);
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
