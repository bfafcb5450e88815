/**
 * The api Lambda's event translation (API Gateway REST proxy event v1 ⇄ V2Api), over a recording
 * stand-in for the platform (unit level; the real platform runs in test/aws-box/).
 */
import type { APIGatewayProxyEvent, APIGatewayProxyResult, Context } from 'aws-lambda';
import { describe, expect, it, vi } from 'vitest';
import type { ApiRequest, ApiResponse } from '../../core/api.js';
import { badRequest } from '../../core/errors.js';
import { handler as bundledHandler, createApiHandler, timeLeft } from '../../functions/api.js';
import type { Platform } from '../../functions/wiring.js';

function recording(
  answer: (req: ApiRequest) => Promise<ApiResponse> = async () => ({ statusCode: 200, body: { ok: true } }),
  idle: () => Promise<void> = async () => {},
) {
  const seen: ApiRequest[] = [];
  const platform = {
    api: {
      handle: async (req: ApiRequest) => {
        seen.push(req);
        return answer(req);
      },
    },
    webhooks: { idle },
  } as unknown as Platform;
  return { seen, handler: createApiHandler(() => platform) };
}

const event = (overrides: Partial<APIGatewayProxyEvent> = {}): APIGatewayProxyEvent =>
  ({
    httpMethod: 'POST',
    path: '/v2/ep/run',
    resource: '/v2/{proxy+}',
    headers: { Authorization: 'Bearer k', 'Content-Type': 'application/json' },
    multiValueHeaders: {},
    queryStringParameters: null,
    multiValueQueryStringParameters: null,
    pathParameters: { proxy: 'ep/run' },
    body: '{"input":{}}',
    isBase64Encoded: false,
    requestContext: { authorizer: { principalId: 'key-1' } },
    ...overrides,
  }) as unknown as APIGatewayProxyEvent;

const context = (remainingMs?: number) =>
  (remainingMs === undefined ? {} : { getRemainingTimeInMillis: () => remainingMs }) as unknown as Context;

describe('api handler', () => {
  it('answers only after the webhooks the request started were delivered (Lambda freezes after returning)', async () => {
    const events: string[] = [];
    let deliver: () => void = () => {};
    const delivered = new Promise<void>((resolve) => {
      deliver = resolve;
    });
    const { handler } = recording(
      async () => {
        events.push('handled');
        return { statusCode: 200, body: { id: 'j', status: 'CANCELLED' } };
      },
      async () => {
        await delivered;
        events.push('webhook delivered');
      },
    );
    const answered = handler(
      event({ path: '/v2/ep/cancel/j', pathParameters: { proxy: 'ep/cancel/j' } }),
      context(20_000),
    ).then((r) => {
      events.push('answered');
      return r;
    });
    await new Promise((resolve) => setImmediate(resolve));
    expect(events).toEqual(['handled']);
    deliver();
    expect((await answered).statusCode).toBe(200);
    expect(events).toEqual(['handled', 'webhook delivered', 'answered']);
  });

  it('answers a run whose scaler nudge never settles within the time the context gives it', async () => {
    // The nudge was awaited with no bound: one that hung held a job already made until API Gateway
    // answered 504 (https://docs.aws.amazon.com/apigateway/latest/developerguide/limits.html) or the
    // function timed out. A stop signal and a webhook that settle still go out meanwhile.
    vi.useFakeTimers();
    const warn = vi.spyOn(console, 'warn').mockImplementation(() => {});
    try {
      const idle = vi.fn(async () => {});
      const signalled = vi.fn(async () => {});
      const platform = {
        api: { handle: async () => ({ statusCode: 200, body: { id: 'j', status: 'IN_QUEUE' } }) },
        webhooks: { idle },
        nudges: { settled: () => new Promise<void>(() => {}) },
        stopSignals: { settled: signalled },
      } as unknown as Platform;
      let answer: APIGatewayProxyResult | undefined;
      const answered = createApiHandler(() => platform)(event(), context(20_000)).then((r) => {
        answer = r;
      });
      // 1.5 s of the 20 s are kept to return: the nudge is waited for 18.5 s, not a moment more.
      await vi.advanceTimersByTimeAsync(18_499);
      expect(answer).toBeUndefined();
      await vi.advanceTimersByTimeAsync(1);
      await answered;
      expect(answer).toMatchObject({ statusCode: 200 });
      expect(JSON.parse(answer!.body)).toEqual({ id: 'j', status: 'IN_QUEUE' });
      expect(idle).toHaveBeenCalled();
      expect(signalled).toHaveBeenCalled();
      expect(warn.mock.calls.map((call) => String(call[0]))).toEqual([
        'ferry: scaler nudges still being sent when the function had to return',
      ]);
    } finally {
      warn.mockRestore();
      vi.useRealTimers();
    }
  });

  it("ends its wait and its settles by API Gateway's timeout when a cold start took part of it", async () => {
    // The Init phase (up to 10 s) runs before the function's timeout starts but inside the gateway's
    // (https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtime-environment.html): 10 s of it,
    // and a context that still shows 28 s would have waited past the 29 s into a 504.
    vi.useFakeTimers();
    const warn = vi.spyOn(console, 'warn').mockImplementation(() => {});
    const timeouts = vi.spyOn(AbortSignal, 'timeout').mockImplementation(() => new AbortController().signal);
    try {
      const platform = {
        env: { FERRY_INTEGRATION_TIMEOUT_MS: 29_000 },
        api: { handle: async () => ({ statusCode: 200, body: { id: 'j', status: 'IN_QUEUE' } }) },
        webhooks: { idle: async () => {} },
        nudges: { settled: () => new Promise<void>(() => {}) },
      } as unknown as Platform;
      const received = event({
        requestContext: { requestTimeEpoch: Date.now() - 10_000 },
      } as unknown as Partial<APIGatewayProxyEvent>);
      let answer: APIGatewayProxyResult | undefined;
      const answered = createApiHandler(() => platform)(received, context(28_000)).then((r) => {
        answer = r;
      });
      await vi.advanceTimersByTimeAsync(0);
      // 29 s from the request, 10 s gone, 1.5 s kept to answer: the wait's timer, and the settles'.
      expect(timeouts).toHaveBeenCalledWith(17_500);
      await vi.advanceTimersByTimeAsync(17_499);
      expect(answer).toBeUndefined();
      await vi.advanceTimersByTimeAsync(1);
      await answered;
      expect(answer).toMatchObject({ statusCode: 200 });
    } finally {
      timeouts.mockRestore();
      warn.mockRestore();
      vi.useRealTimers();
    }
  });

  it("counts its time left from the function's and the gateway's, whichever ends first", () => {
    const left = (epoch: number | undefined, integrationMs: number | undefined) =>
      timeLeft(
        { requestContext: { requestTimeEpoch: epoch } } as unknown as APIGatewayProxyEvent,
        context(28_000),
        integrationMs,
        () => 50_000,
      )?.getRemainingTimeInMillis();
    expect(left(50_000 - 3_000, 29_000)).toBe(26_000); // a cold start of 3 s
    expect(left(50_000 - 200, 29_000)).toBe(28_000); // warm: the function's timeout comes first
    expect(left(50_000 - 3_000, 120_000)).toBe(28_000); // a raised integration timeout
    expect(left(undefined, 29_000)).toBe(28_000); // a direct invoke: no gateway
    expect(left(50_000 - 3_000, undefined)).toBe(28_000);
    expect(timeLeft(undefined, context(), 29_000)).toBeUndefined();
  });

  it('hands method, path, lower-cased headers, joined query values and the body to V2Api', async () => {
    const { seen, handler } = recording();
    const result = await handler(
      event({
        queryStringParameters: { wait: '2000', job_id: 'b' },
        multiValueQueryStringParameters: { wait: ['2000'], job_id: ['a', 'b'] },
      }),
      context(),
    );
    expect(result).toEqual({
      statusCode: 200,
      headers: { 'content-type': 'application/json' },
      body: '{"ok":true}',
    });
    const req = seen[0]!;
    expect(req).toMatchObject({ method: 'POST', path: '/v2/ep/run', query: { wait: '2000', job_id: 'a,b' } });
    expect(req.headers.authorization).toBe('Bearer k');
    expect(req.body?.toString()).toBe('{"input":{}}');
  });

  it('decodes a base64 body; malformed base64 is a 400 {error} that never reaches the API', async () => {
    const { seen, handler } = recording();
    await handler(
      event({ body: Buffer.from('{"input":{"a":1}}').toString('base64'), isBase64Encoded: true }),
      context(),
    );
    expect(seen[0]!.body?.toString()).toBe('{"input":{"a":1}}');
    const bad = await handler(event({ body: '%%%not base64', isBase64Encoded: true }), context());
    expect(bad.statusCode).toBe(400);
    expect(JSON.parse(bad.body)).toEqual({ error: expect.stringMatching(/base64/) });
    expect(seen).toHaveLength(1);
  });

  it('a path that does not percent-decode is a 400', async () => {
    const { handler } = recording();
    const r = await handler(
      event({ httpMethod: 'GET', path: '/v2/ep/status/%E0%A4%A', body: null }),
      context(),
    );
    expect(r.statusCode).toBe(400);
    expect(JSON.parse(r.body).error).toMatch(/percent-encoding/);
  });

  it('finds /v2/ behind a custom-domain base path, or from {proxy+}', async () => {
    const { seen, handler } = recording();
    await handler(event({ path: '/ferry/v2/ep/health', httpMethod: 'GET', body: null }), context());
    await handler(
      event({ path: '/', pathParameters: { proxy: 'ep/health' }, httpMethod: 'GET', body: null }),
      context(),
    );
    expect(seen.map((r) => r.path)).toEqual(['/v2/ep/health', '/v2/ep/health']);
  });

  it('maps 204 to an empty body and API errors to their status with {error}', async () => {
    const { handler: empty } = recording(async () => ({ statusCode: 204 }));
    expect(await empty(event(), context())).toMatchObject({ statusCode: 204, body: '' });
    const { handler: failing } = recording(async () => {
      throw badRequest('nope');
    });
    const r = await failing(event(), context());
    expect(r.statusCode).toBe(400);
    expect(JSON.parse(r.body)).toEqual({ error: 'nope' });
  });

  it('an unexpected failure is a masked 500 with a request id; the detail is only in the log', async () => {
    const lines: string[] = [];
    const spy = vi.spyOn(process.stderr, 'write').mockImplementation((chunk) => {
      lines.push(String(chunk));
      return true;
    });
    const { handler } = recording(async () => {
      throw new Error('DynamoDB is down at 10.0.0.1');
    });
    const r = await handler(event(), context());
    expect(r.statusCode).toBe(500);
    expect(JSON.parse(r.body)).toEqual({ error: 'internal error', requestId: expect.any(String) });
    expect(r.body).not.toContain('10.0.0.1');
    // The bundled handler with no configuration: same shape, the variable names stay in the log.
    const unconfigured = await bundledHandler(event(), context());
    expect(unconfigured.statusCode).toBe(500);
    const { requestId } = JSON.parse(unconfigured.body) as { requestId: string };
    expect(JSON.parse(unconfigured.body)).toEqual({ error: 'internal error', requestId });
    spy.mockRestore();
    expect(lines.find((l) => l.includes(requestId))).toMatch(/FERRY_/);
    expect(lines.join('')).toContain('10.0.0.1');
  });

  it('measures an answer as Lambda carries it, escaped inside the response: a 4 MB body of quotes is over 6 MB', async () => {
    const spy = vi.spyOn(process.stderr, 'write').mockImplementation(() => true);
    try {
      // 2 M quotes: a 4 MB body (`\"` each), 8 MB once escaped again as the response document's body
      // string. Lambda would refuse it, and API Gateway answer its bare 502: the API's own 500 instead.
      const quotes = { logs: '"'.repeat(2 * 1024 * 1024) };
      const { handler } = recording(async () => ({ statusCode: 200, body: quotes }));
      const r = await handler(event(), context());
      expect(r.statusCode).toBe(500);
      expect(JSON.parse(r.body)).toEqual({ error: 'internal error', requestId: expect.any(String) });
      // As much plain text fits, and goes out whole.
      const plain = { logs: 'a'.repeat(4 * 1024 * 1024) };
      const { handler: fine } = recording(async () => ({ statusCode: 200, body: plain }));
      const ok = await fine(event(), context());
      expect(ok.statusCode).toBe(200);
      expect(JSON.parse(ok.body)).toEqual(plain);
    } finally {
      spy.mockRestore();
    }
  });

  it('aborts the wait 1.5 s before the function would time out', async () => {
    const { seen, handler } = recording(
      async (req) =>
        new Promise((resolve) => {
          req.signal?.addEventListener('abort', () =>
            resolve({ statusCode: 200, body: { id: 'j', status: 'IN_QUEUE' } }),
          );
        }),
    );
    // The timer it arms, not the wall clock (a shared machine can run a 200 ms timer late).
    const timeouts = vi.spyOn(AbortSignal, 'timeout');
    try {
      const r = await handler(event(), context(1_700));
      expect(timeouts).toHaveBeenCalledWith(200);
      expect(JSON.parse(r.body)).toEqual({ id: 'j', status: 'IN_QUEUE' });
      expect(seen[0]!.signal?.aborted).toBe(true);
      expect((seen[0]!.signal!.reason as Error).name).toBe('TimeoutError');
    } finally {
      timeouts.mockRestore();
    }
  });
});
