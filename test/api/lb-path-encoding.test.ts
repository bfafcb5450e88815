/**
 * The local front door's load-balanced routes (core/adapters/local/http.ts) pass a path to the worker
 * as the client sent it, whatever its percent-encoding: the runtime decodes it
 * (worker-image/python/ferry/endpoint.py split_path, test_invoke.py), as the AWS agent, which
 * forwards req.url, lets it. Fastify's router answered `/lb/<id>/items/x%` 400 before the worker
 * heard of it. Real HTTP on loopback; the worker is a fake that records what it was asked.
 */
import { request } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHttpServer } from '../../core/adapters/local/http.js';
import type { V2Api } from '../../core/api.js';
import type { Logger } from '../../core/log.js';
import type { EndpointRecord } from '../../core/ports.js';

const allowClients = {
  isClientKey: async () => true,
  clientKeyScope: async () => ({}),
  workerAccess: async () => 'unknown' as const,
};
const quiet: Logger = { info: () => {}, warn: () => {}, error: () => {} };
const asked: { endpointId: string; path: string }[] = [];

let app: FastifyInstance;
let port: number;
beforeAll(async () => {
  app = await createHttpServer({
    api: {} as V2Api,
    log: quiet,
    lb: {
      auth: allowClients,
      endpoint: async (id) => ({ id, app: 'a', env: 'e', name: 'n', kind: 'lb' }) as EndpointRecord,
      forward: async (endpointId, lbRequest) => {
        asked.push({ endpointId, path: lbRequest.path });
        return { statusCode: 200, headers: { 'content-type': 'application/json' }, body: Buffer.from('{}') };
      },
    },
  });
  await app.listen({ host: '127.0.0.1', port: 0 });
  port = (app.server.address() as AddressInfo).port;
});
afterAll(() => app?.close());

/** A GET of `path` exactly as written (fetch would normalise some of it). */
function get(path: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const sent = request(
      { host: '127.0.0.1', port, path, headers: { authorization: 'Bearer k' } },
      (response) => {
        const chunks: Buffer[] = [];
        response.on('data', (chunk: Buffer) => chunks.push(chunk));
        response.on('end', () =>
          resolve({ status: response.statusCode ?? 0, body: Buffer.concat(chunks).toString() }),
        );
      },
    );
    sent.on('error', reject);
    sent.end();
  });
}

describe("the local front door's load-balanced routes", () => {
  it('forward a path as it was sent, a badly encoded one too, to the endpoint its encoded id names', async () => {
    for (const path of [
      '/items/x%',
      '/items/a%zz',
      '/items/%FF',
      '/items/a%20b',
      '/items/a%2Fb?q=%zz',
      '/it%65ms/7',
    ]) {
      asked.length = 0;
      const answer = await get(`/lb/ep%31${path}`);
      expect(answer, path).toEqual({ status: 200, body: '{}' });
      expect(asked, path).toEqual([{ endpointId: 'ep1', path }]);
    }
  });

  it('leave every other route to answer a URL that does not decode as before: a 400 naming it', async () => {
    const answer = await get('/v2/ep/status/%E0%A4%A');
    expect(answer.status).toBe(400);
    expect(JSON.parse(answer.body)).toEqual({ error: expect.stringContaining('Bad request') });
  });
});
