/**
 * HEAD on the v2 API (docs/api.md, "HEAD") over real HTTP against the real SQLite store: every GET
 * that only reads answers HEAD with the GET's status and headers and no body (RFC 9110 §9.3.2), its
 * errors included; the GETs with side effects (job-take and job-take-batch claim jobs, stream drains
 * chunks) have no HEAD, and a HEAD there claims nothing.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FakeClock } from '../../core/clock.js';
import { call, startTestPlatform, type TestPlatform, testApiKey } from '../support/platform.js';

let platform: TestPlatform;
let base: string;
const endpointId = 'heads';

beforeAll(async () => {
  platform = await startTestPlatform();
  base = platform.baseUrl;
  await platform.addEndpoint(endpointId);
});
afterAll(async () => {
  await platform.stop();
});

async function send(method: 'GET' | 'HEAD', path: string, authorization = `Bearer ${testApiKey}`) {
  const response = await fetch(`${base}${path}`, { method, headers: { authorization } });
  return {
    status: response.status,
    type: response.headers.get('content-type'),
    length: response.headers.get('content-length'),
    text: await response.text(),
  };
}

/** HEAD answers as GET does, without the body. */
async function expectHeadAsGet(path: string, authorization?: string) {
  const get = await send('GET', path, authorization);
  const head = await send('HEAD', path, authorization);
  expect(head, path).toEqual({ ...get, text: '' });
  expect(get.text.length, path).toBeGreaterThan(0);
  return get;
}

describe('HEAD on the read-only GETs', () => {
  it('by id, by name, health, status and status-sync: the GET status and headers, no body', async () => {
    const job = await call(base, 'POST', `/${endpointId}/run`, { input: { x: 1 } });
    expect(job.status).toBe(200);
    // A final job, so its view (and so its length) holds still between the GET and the HEAD.
    expect((await call(base, 'POST', `/${endpointId}/cancel/${job.body.id}`)).status).toBe(200);

    expect((await expectHeadAsGet(`/${endpointId}`)).status).toBe(200);
    expect((await expectHeadAsGet(`/by-name/test/production/${endpointId}`)).status).toBe(200);
    expect((await expectHeadAsGet(`/by-name/test/-/${endpointId}/health`)).status).toBe(200);
    expect((await expectHeadAsGet(`/${endpointId}/health`)).status).toBe(200);
    expect((await expectHeadAsGet(`/${endpointId}/status/${job.body.id}`)).status).toBe(200);
    expect((await expectHeadAsGet(`/${endpointId}/status-sync/${job.body.id}`)).status).toBe(200);
  });

  it('their errors too: an unknown job or endpoint 404, no key 401', async () => {
    expect((await expectHeadAsGet(`/${endpointId}/status/no-such-job`)).status).toBe(404);
    expect((await expectHeadAsGet('/no-such-endpoint')).status).toBe(404);
    expect((await expectHeadAsGet('/by-name/test/production/nothing')).status).toBe(404);
    expect((await expectHeadAsGet(`/${endpointId}/health`, 'Bearer wrong')).status).toBe(401);
  });
});

describe('no HEAD where a GET has side effects', () => {
  it('job-take and job-take-batch: 404, and the queued job is still there for the next take', async () => {
    const worker = platform.adoptWorker(endpointId);
    const job = await call(base, 'POST', `/${endpointId}/run`, { input: { y: 2 } });
    const authorization = `Bearer ${worker.token}`;
    for (const path of [
      `/${endpointId}/job-take/${worker.workerId}?gpu=none&job_in_progress=0`,
      `/${endpointId}/job-take-batch/${worker.workerId}?gpu=none&batch_size=5&job_in_progress=0`,
    ]) {
      const head = await send('HEAD', path, authorization);
      expect(head.status, path).toBe(404);
      expect(head.text).toBe('');
    }
    expect((await call(base, 'GET', `/${endpointId}/status/${job.body.id}`)).body.status).toBe('IN_QUEUE');
    // The GET still claims it.
    const take = await send(
      'GET',
      `/${endpointId}/job-take/${worker.workerId}?gpu=none&job_in_progress=0`,
      authorization,
    );
    expect(take.status).toBe(200);
    expect(JSON.parse(take.text)).toMatchObject({ id: job.body.id });
  });

  it('stream (its GET drains the chunks it answers with): 404', async () => {
    const job = await call(base, 'POST', `/${endpointId}/run`, { input: { z: 3 } });
    const head = await send('HEAD', `/${endpointId}/stream/${job.body.id}`);
    expect(head.status).toBe(404);
    // And on the other methods a GET-only route has, as before.
    expect((await send('GET', `/${endpointId}/stream/${job.body.id}?wait=0`)).status).toBe(200);
  });
});

describe('status ?ttl= on HEAD', () => {
  it('sets how long the result is kept, as the GET does (docs/api.md: HEAD is the GET without its body)', async () => {
    const clock = new FakeClock();
    const timed = await startTestPlatform({ clock });
    try {
      await timed.addEndpoint(endpointId);
      const url = (path: string) => `${timed.baseUrl}/${endpointId}${path}`;
      const cancelled = async () => {
        const job = await call(timed.baseUrl, 'POST', `/${endpointId}/run`, { input: {} });
        expect((await call(timed.baseUrl, 'POST', `/${endpointId}/cancel/${job.body.id}`)).status).toBe(200);
        return job.body.id as string;
      };
      const kept = await cancelled();
      const left = await cancelled();
      const hour = 3_600_000;
      const head = await fetch(url(`/status/${kept}?ttl=${2 * hour}`), {
        method: 'HEAD',
        headers: { authorization: `Bearer ${testApiKey}` },
      });
      expect(head.status).toBe(200);
      // Past a /run result's own retention (limits.runRetentionMs, 30 minutes), short of the two hours.
      clock.advance(hour);
      expect((await call(timed.baseUrl, 'GET', `/${endpointId}/status/${kept}`)).body.status).toBe(
        'CANCELLED',
      );
      expect((await call(timed.baseUrl, 'GET', `/${endpointId}/status/${left}`)).status).toBe(404);
    } finally {
      await timed.stop();
    }
  });
});
