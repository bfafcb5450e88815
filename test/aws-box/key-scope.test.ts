/**
 * A key scoped to one app on the AWS path (docs/security.md#api-key-scopes), through the API Gateway
 * shim, the authorizer and the api Lambda on DynamoDB Local and fauxqs: another app's endpoint, by id
 * or by name, and its jobs answer exactly as ones that do not exist, as on the local server
 * (test/security/key-scope.test.ts asks it the same pairs); the management API stays a 403.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashKey, outOfScopeMessage } from '../../core/auth.js';
import type { EndpointRecord } from '../../core/ports.js';
import { hiddenPairs, rawAnswer } from '../support/key-scope.js';
import { type AwsBox, shimCall, startAwsBox } from './box.js';

const scopedKey = 'fy_aws_box_scoped_to_box';
let box: AwsBox;
let other: EndpointRecord;
let jobId: string;

beforeAll(async () => {
  box = await startAwsBox({ maxWaitMs: 1_000 });
  await box.addEndpoint('mine');
  other = { ...(await box.addEndpoint('theirs')), app: 'other', name: 'resize' };
  await box.lambda.control.putEndpoint(other);
  await box.lambda.control.putApiKey({
    id: 'key-box-only',
    name: 'box only',
    hash: hashKey(scopedKey),
    createdAt: Date.now(),
    app: 'box',
  });
  const job = await shimCall(box, 'POST', `/v2/${other.id}/run`, { input: { n: 1 } });
  expect(job.status).toBe(200);
  jobId = job.body.id;
}, 120_000);

afterAll(async () => {
  await box?.stop();
});

describe('a scoped key on the AWS path', () => {
  it('gets the same 404 for an endpoint of another app, by id and by name, and its jobs, as for none', async () => {
    for (const { label, existing, unknown, swap } of hiddenPairs(other, jobId)) {
      const seen = await rawAnswer(box.shim.url, scopedKey, existing);
      const none = await rawAnswer(box.shim.url, scopedKey, unknown);
      expect(seen.status, label).toBe(404);
      expect(JSON.parse(seen.text).error, label).toContain("not found within this API key's scope (app box)");
      expect(seen, label).toEqual(swap ? { ...none, text: none.text.replaceAll(swap[0], swap[1]) } : none);
    }
    // Its own app's endpoint answers; the other app's job is still queued, untouched.
    expect((await shimCall(box, 'GET', '/v2/mine/health', undefined, scopedKey)).status).toBe(200);
    expect((await shimCall(box, 'GET', `/v2/${other.id}/status/${jobId}`)).body.status).toBe('IN_QUEUE');
  });

  it('is refused the management API (403), which tells it nothing about endpoints', async () => {
    expect(await shimCall(box, 'GET', '/manage/v1/endpoints', undefined, scopedKey)).toEqual({
      status: 403,
      body: { error: outOfScopeMessage },
    });
  });
});
