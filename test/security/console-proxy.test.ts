/**
 * `ferry console --provider aws`'s proxy (cli/console-proxy.ts) in front of a real local platform:
 * what never reaches a route (bytes Node's parser refuses, a URL that does not percent-decode, a path
 * it does not serve) gets the API's one error shape, `{"error": "..."}`, as on the front door
 * (docs/api.md#errors), and the proxied routes still answer as the platform does.
 */
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ConsoleProxy, startConsoleProxy } from '../../cli/console-proxy.js';
import { startTestPlatform, type TestPlatform, testApiKey } from '../support/platform.js';
import { rawExchange } from '../support/raw-http.js';

let platform: TestPlatform;
let proxy: ConsoleProxy;
let port: number;

beforeAll(async () => {
  platform = await startTestPlatform();
  await platform.addEndpoint('quiet');
  proxy = await startConsoleProxy({
    origin: platform.url,
    consoleDir: path.resolve('console'),
    host: '127.0.0.1',
    port: 0,
  });
  port = Number(new URL(proxy.url).port);
});

afterAll(async () => {
  await proxy?.close();
  await platform?.stop();
});

describe('the console proxy', () => {
  it('answers what the HTTP parser refuses with one {"error"} field', async () => {
    for (const [name, request] of [
      ['a control character in a header', 'GET /v2/quiet/health HTTP/1.1\r\nHost: x\r\nX-A: a\x01b\r\n\r\n'],
      [
        'a duplicate Content-Length',
        'POST /v2/quiet/run HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}',
      ],
    ] as const) {
      const answer = await rawExchange(port, Buffer.from(request, 'latin1'));
      expect({ name, status: answer.status }).toEqual({ name, status: 400 });
      expect(answer.body, name).toEqual({ error: expect.stringMatching(/Malformed HTTP request/) });
    }
  });

  it('answers a URL that does not percent-decode, and a path it does not serve, the same way', async () => {
    const badUrl = await fetch(`${proxy.url}/v2/quiet/status/%E0%A4%A`);
    expect(badUrl.status).toBe(400);
    expect(await badUrl.json()).toEqual({ error: expect.stringMatching(/^Bad request: /) });
    const nowhere = await fetch(`${proxy.url}/nothing`);
    expect(nowhere.status).toBe(404);
    expect(await nowhere.json()).toEqual({ error: 'No route for GET /nothing' });
  });

  it('still passes the API through', async () => {
    const health = await fetch(`${proxy.url}/v2/quiet/health`, {
      headers: { authorization: `Bearer ${testApiKey}` },
    });
    expect(health.status).toBe(200);
    expect(await health.json()).toMatchObject({ jobs: expect.any(Object) });
  });
});
