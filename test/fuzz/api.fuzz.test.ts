/**
 * Bad-input suite: property-based fuzzing (fast-check) of every v2 route and every worker-protocol
 * route of a real embedded platform on loopback, over raw HTTP (node:http, a fresh connection per
 * request so a dropped connection shows up as an error, and no client-side URL normalisation).
 *
 * Properties, for every generated request:
 *   - the server answers (no reset, no hang) and never with a 5xx;
 *   - a 4xx carries a JSON body `{"error": "<non-empty string>"}`;
 *   - a 2xx is one the contract documents for that route (valid-by-chance input);
 *   - a rejected request changes nothing: health counts and the seeded jobs are as before;
 *   - the server still answers health afterwards.
 */
import { request } from 'node:http';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { credentialOf } from '../../core/auth.js';
import { limits } from '../../core/limits.js';
import { call, startTestPlatform, type TestPlatform, testApiKey } from '../support/platform.js';

interface Answer {
  status: number;
  text: string;
  body: any;
}

let platform: TestPlatform;
let port: number;
let served: { stop(): Promise<void> };
/** Seeded jobs on endpoint `fz`: one queued, one completed. On `fzw`: one held by worker `holder`. */
const seeded = { queued: '', completed: '', held: '' };
const holder = 'holder-worker';
/** Each worker has its own token (core/supervisor.ts): the holder's, and a live intruder's on `fzw`. */
let holderToken = '';
let intruderToken = '';
/** A live worker's token on another endpoint (`fz`), for the wrong-credential property. */
let otherEndpointToken = '';

const clientAuth = { authorization: `Bearer ${testApiKey}` };
const workerAuth = () => ({ authorization: holderToken });

/** One request on its own connection; rejects if the connection drops or nothing comes in 20 s. */
function send(
  method: string,
  path: string,
  headers: Record<string, string> = {},
  body?: string | Buffer,
): Promise<Answer> {
  // Node frames a GET/OPTIONS body only with an explicit length (else it would read as a second request).
  const framed =
    body === undefined ? headers : { ...headers, 'content-length': String(Buffer.byteLength(body)) };
  return new Promise((resolve, reject) => {
    const req = request(
      { host: '127.0.0.1', port, method, path, headers: framed, agent: false, timeout: 20_000 },
      (res) => {
        const parts: Buffer[] = [];
        res.on('data', (d: Buffer) => parts.push(d));
        res.on('error', reject);
        res.on('end', () => {
          const text = Buffer.concat(parts).toString('utf8');
          let parsed: unknown;
          try {
            parsed = text.length > 0 ? JSON.parse(text) : undefined;
          } catch {
            parsed = Symbol('not json');
          }
          resolve({ status: res.statusCode ?? 0, text, body: parsed });
        });
      },
    );
    req.on('timeout', () => req.destroy(new Error(`no answer to ${method} ${path.slice(0, 80)} in 20 s`)));
    req.on('error', (e) =>
      reject(new Error(`${method} ${path.slice(0, 80)}: connection failed: ${e.message}`)),
    );
    if (body !== undefined) req.end(body);
    else req.end();
  });
}

function isRejection(a: Answer): boolean {
  return a.status >= 400 && a.status < 500;
}

/** A 4xx with the one error shape of the API. */
function expectRejected(a: Answer, what: string): void {
  expect(a.status, `${what}: ${a.text.slice(0, 300)}`).toBeGreaterThanOrEqual(400);
  expect(a.status, `${what}: ${a.text.slice(0, 300)}`).toBeLessThan(500);
  expect(typeof a.body?.error, `${what}: body ${a.text.slice(0, 300)}`).toBe('string');
  expect(a.body.error.length, what).toBeGreaterThan(0);
}

/** Never a 5xx; a 4xx has the error shape; a 2xx must satisfy the route's documented shape. */
function expectAnswered(a: Answer, what: string, success?: (body: any, status: number) => void): void {
  expect(a.status, `${what}: ${a.text.slice(0, 300)}`).toBeLessThan(500);
  if (isRejection(a)) {
    expectRejected(a, what);
    return;
  }
  expect(a.status, `${what}: unexpected status`).toBeGreaterThanOrEqual(200);
  expect(a.status, `${what}: unexpected status`).toBeLessThan(300);
  expect(
    success,
    `${what}: a 2xx (${a.status} ${a.text.slice(0, 200)}) where only a rejection fits`,
  ).toBeDefined();
  success!(a.body, a.status);
}

/** Everything a rejected request must leave as it was. */
async function snapshot() {
  const now = Date.now();
  const [fz, fzw, fzp] = await Promise.all(['fz', 'fzw', 'fzp'].map((e) => platform.engine.health(e)));
  const statuses = await Promise.all(
    Object.values(seeded).map(async (id) => {
      const job = await platform.db.jobs.get(id, now);
      return job ? { status: job.status, workerId: job.workerId, version: job.version } : 'gone';
    }),
  );
  return { jobs: [fz!.jobs, fzw!.jobs, fzp!.jobs], statuses };
}

/** Sends, checks the answer, and for a rejection checks that nothing changed. */
async function probe(
  what: string,
  method: string,
  path: string,
  headers: Record<string, string>,
  body: string | Buffer | undefined,
  success?: (body: any, status: number) => void,
): Promise<Answer> {
  const before = await snapshot();
  const answer = await send(method, path, headers, body);
  expectAnswered(answer, `${method} ${path.slice(0, 120)} (${what})`, success);
  if (isRejection(answer)) expect(await snapshot(), `state after rejected ${method} ${path}`).toEqual(before);
  return answer;
}

// ── arbitraries ─────────────────────────────────────────────────────────────────────────────────

const oddChars = [
  '\ud800',
  '\udfff',
  '\u0000',
  '\u202e',
  '\u200f',
  '😀',
  '\ufeff',
  '\uffff',
  '"',
  '\\',
  '\n',
];
/** Strings with lone surrogates, NUL, RTL marks, emoji and JSON metacharacters mixed in. */
const oddString = fc
  .array(fc.oneof(fc.string({ unit: 'binary', maxLength: 6 }), fc.constantFrom(...oddChars)), {
    maxLength: 8,
  })
  .map((parts) => parts.join(''));

const deepBody = fc
  .integer({ min: 1, max: 12_000 })
  .map((n) => `{"input":{"a":${'['.repeat(n)}${']'.repeat(n)}}}`);
const deepObjectBody = fc
  .integer({ min: 400, max: 12_000 })
  .map((n) => `{"input":${'{"a":'.repeat(n)}1${'}'.repeat(n)}}`);

/** Bodies for /run and /runsync: mostly wrong, sometimes valid by chance. */
const runBody: fc.Arbitrary<string | Buffer> = fc.oneof(
  fc.string({ maxLength: 40 }),
  fc.json({ maxDepth: 3 }),
  oddString.map((s) => JSON.stringify({ input: { s } })),
  oddString,
  fc.jsonValue({ maxDepth: 3 }).map((input) => JSON.stringify({ input })),
  fc
    .record(
      {
        input: fc.oneof(fc.dictionary(fc.string(), fc.jsonValue({ maxDepth: 2 })), fc.anything()),
        webhook: fc.oneof(fc.string(), fc.anything(), fc.constant('ftp://x'), fc.constant('http://')),
        policy: fc.oneof(
          fc.record(
            { ttl: fc.anything(), executionTimeout: fc.integer(), lowPriority: fc.anything() },
            { requiredKeys: [] },
          ),
          fc.anything(),
        ),
        s3Config: fc.anything(),
        extra: fc.anything(),
      },
      { requiredKeys: [] },
    )
    .map((v) => {
      try {
        return JSON.stringify(v) ?? 'undefined';
      } catch {
        return '{"input":';
      }
    }),
  fc
    .tuple(fc.constant(JSON.stringify({ input: { prompt: 'a cat', steps: 4 } })), fc.nat())
    .map(([text, cut]) => text.slice(0, cut % text.length)),
  fc.uint8Array({ maxLength: 64 }).map((bytes) => Buffer.from(bytes)),
  deepBody,
  deepObjectBody,
);

/** Worker bodies: like run bodies plus job-done shapes with wrong types. */
const workerBody: fc.Arbitrary<string | Buffer> = fc.oneof(
  runBody,
  fc
    .record(
      {
        output: fc.anything(),
        error: fc.anything(),
        status: fc.oneof(fc.constant('IN_PROGRESS'), fc.string(), fc.anything()),
        stopPod: fc.anything(),
      },
      { requiredKeys: [] },
    )
    .map((v) => {
      try {
        return JSON.stringify(v) ?? 'null';
      } catch {
        return '{';
      }
    }),
  deepBody.map((b) => b.replace('"input"', '"output"')),
);

/** Path segments: percent-encoded odd strings, traversal and broken encodings, very long ids. */
const junkSegments = [
  '..',
  '.',
  '%2e%2e',
  '..%2F..%2Fetc%2Fpasswd',
  '%2F',
  '%',
  '%zz',
  '%E0%A4%A',
  '%ED%A0%80',
  '%C0%AE%C0%AE',
  '%00',
  '%0A',
  '%FF%FE',
  '%25',
  '%u202e',
  'a'.repeat(4_000),
  'x'.repeat(20_000),
];
const encodable = fc.string({ unit: 'binary', maxLength: 30 }).filter((s) => {
  try {
    encodeURIComponent(s);
    return s.length > 0;
  } catch {
    return false;
  }
});
const idSegment = fc.oneof(
  encodable.map((s) => encodeURIComponent(s)),
  fc.constantFrom(...junkSegments),
  fc.stringMatching(/^[A-Za-z0-9._~-]{1,40}$/),
);

/** Query values for wait/ttl/batch_size: numbers out of range, junk, repeats. */
const queryValue = fc
  .oneof(
    fc.integer({ min: -1e6, max: 1e9 }).map(String),
    fc.constantFrom(
      '',
      '-1',
      '0',
      '1e3',
      '1.5',
      '0x10',
      '999999999999999999999',
      'NaN',
      ' 1000',
      '1000 ',
      'ten',
    ),
    encodable.map((s) => encodeURIComponent(s)),
    fc.constantFrom('%ZZ', '%', '%00', '1000&wait=2000'),
  )
  .map((v) => v.replace(/ /g, '%20'));

const authHeader = fc.oneof(
  fc.constant(undefined),
  fc.constantFrom(
    '',
    'Bearer',
    'Bearer ',
    'Basic abc',
    `Bearer ${testApiKey}x`,
    `${testApiKey.slice(0, -1)}`,
  ),
  fc.stringMatching(/^[\x21-\x7e ]{0,60}$/),
  fc.stringMatching(/^[\x21-\x7e]{1,40}$/).map((s) => `Bearer ${s}`),
);

const ok200 = (check: (body: any) => void) => (body: any, status: number) => {
  expect(status).toBe(200);
  check(body);
};
const isQueued = ok200((b) => {
  expect(typeof b.id).toBe('string');
  expect(b.status).toBe('IN_QUEUE');
});

// ── setup ─────────────────────────────────────────────────────────────────────────────────────────

beforeAll(async () => {
  // Thousands of requests with one key: the rate limit (tested in test/security) must not answer first.
  platform = await startTestPlatform({
    workerWaitMs: 1_000,
    frontDoor: { rateLimitRequests: Number.MAX_SAFE_INTEGER },
  });
  port = platform.port;
  for (const id of ['fz', 'fzw', 'fzp', 'fzsync']) await platform.addEndpoint(id);
  const engine = platform.engine;
  otherEndpointToken = platform.adoptWorker('fz', 'seed-worker').token;
  holderToken = platform.adoptWorker('fzw', holder).token;
  intruderToken = platform.adoptWorker('fzw', 'intruder').token;
  // A completed job: submitted, taken and finished through the engine.
  const completed = await engine.submit('fz', { input: { seed: 'completed' } }, { sync: false });
  const [taken] = await engine.take('fz', 'seed-worker', 1, 0);
  await engine.done('fz', 'seed-worker', taken!.id, { output: { ok: true } });
  seeded.completed = completed.id;
  seeded.queued = (await engine.submit('fz', { input: { seed: 'queued' } }, { sync: false })).id;
  seeded.held = (await engine.submit('fzw', { input: { seed: 'held' } }, { sync: false })).id;
  await engine.take('fzw', holder, 1, 0);
  // /runsync bodies that are valid by chance complete at once instead of waiting out `wait`.
  served = platform.protocolWorker('fzsync').serve();
  expect((await snapshot()).statuses.map((s) => (s === 'gone' ? s : s.status))).toEqual([
    'IN_QUEUE',
    'COMPLETED',
    'IN_PROGRESS',
  ]);
});

afterAll(async () => {
  await served?.stop();
  await platform?.stop();
});

const runs = (n: number) => ({ numRuns: n, endOnFailure: true });

async function stillServing(): Promise<void> {
  const health = await call(platform.baseUrl, 'GET', '/fz/health');
  expect(health.status).toBe(200);
  expect(health.body.jobs).toBeDefined();
}

// ── client routes ───────────────────────────────────────────────────────────────────────────────

describe('v2 client routes', () => {
  it('/run: any body is a 200 IN_QUEUE or a 4xx, never a 500', async () => {
    await fc.assert(
      fc.asyncProperty(runBody, fc.boolean(), async (body, typed) => {
        const headers = typed ? { ...clientAuth, 'content-type': 'application/json' } : clientAuth;
        await probe('run body', 'POST', '/v2/fz/run', headers, body, isQueued);
      }),
      runs(200),
    );
    await stillServing();
  });

  it('/runsync: any body and wait is a documented 200 or a 4xx', async () => {
    await fc.assert(
      fc.asyncProperty(runBody, fc.option(queryValue, { nil: undefined }), async (body, wait) => {
        // Without a wait (default 90 s) a valid body must still end fast: fzsync has a worker.
        const q = wait === undefined ? '' : `?wait=${wait}`;
        await probe(
          'runsync',
          'POST',
          `/v2/fzsync/runsync${q}`,
          clientAuth,
          body,
          ok200((b) => {
            expect(typeof b.id).toBe('string');
            expect(b.id.startsWith('sync-')).toBe(true);
            expect(['COMPLETED', 'IN_QUEUE', 'IN_PROGRESS']).toContain(b.status);
          }),
        );
      }),
      runs(120),
    );
    await stillServing();
  });

  it('status, status-sync, stream, cancel, retry: junk ids are 4xx (GET and POST)', async () => {
    const routes = ['status', 'status-sync', 'stream', 'cancel', 'retry'];
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...routes),
        fc.constantFrom('GET', 'POST'),
        idSegment,
        fc.option(runBody, { nil: undefined }),
        async (route, method, id, body) => {
          // No fuzzed id names a real job, so every answer is a rejection (404, or 400 for a bad URL).
          const a = await probe(`${route} id`, method, `/v2/fz/${route}/${id}`, clientAuth, body);
          expectRejected(a, `${method} ${route}/${id.slice(0, 40)}`);
        },
      ),
      runs(200),
    );
    await stillServing();
  });

  it('bad wait / ttl query values are 400 (or a documented 200 on a finished job)', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom('status-sync', 'stream', 'status', 'runsync'),
        fc.constantFrom('GET', 'POST'),
        queryValue,
        async (route, method, value) => {
          if (route === 'runsync') {
            // A valid wait with a bad body is still a 400 for the body; a bad wait is a 400 for the wait.
            const a = await probe('runsync wait', 'POST', `/v2/fz/runsync?wait=${value}`, clientAuth, '{');
            expectRejected(a, `runsync wait=${value}`);
          } else if (route === 'status') {
            // ttl on an unknown job: a bad ttl is a 400, a good one reaches the lookup and is a 404.
            const a = await probe('ttl', method, `/v2/fz/status/nope?ttl=${value}`, clientAuth, undefined);
            expectRejected(a, `status ttl=${value}`);
          } else {
            // On a finished job a valid wait answers at once.
            await probe(
              `${route} wait`,
              method,
              `/v2/fz/${route}/${seeded.completed}?wait=${value}`,
              clientAuth,
              undefined,
              ok200((b) => {
                expect(b.id).toBe(seeded.completed);
                expect(b.status).toBe('COMPLETED');
                if (route === 'stream') expect(Array.isArray(b.stream)).toBe(true);
              }),
            );
          }
        },
      ),
      runs(150),
    );
    await stillServing();
  });

  it('cancel and retry refuse jobs in the wrong status; wrong methods find no route', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(
          ['POST', `retry/${seeded.completed}`],
          ['POST', `retry/${seeded.queued}`],
          ['GET', `cancel/${seeded.queued}`],
          ['GET', `retry/${seeded.completed}`],
          ['PUT', `status/${seeded.queued}`],
          ['DELETE', `status/${seeded.queued}`],
          ['PATCH', 'run'],
          ['GET', 'run'],
          ['GET', 'runsync'],
          ['GET', 'purge-queue'],
          ['POST', 'health'],
          ['DELETE', 'purge-queue'],
          ['POST', 'nope'],
          ['GET', 'status'],
          ['GET', `status/${seeded.queued}/extra`],
          ['OPTIONS', 'health'],
        ),
        fc.option(runBody, { nil: undefined }),
        async ([method, path], body) => {
          const a = await probe('wrong status or method', method, `/v2/fz/${path}`, clientAuth, body);
          expectRejected(a, `${method} ${path}`);
        },
      ),
      runs(100),
    );
  });

  it('purge-queue and health: any body is ignored, the answer is documented', async () => {
    await fc.assert(
      fc.asyncProperty(fc.option(runBody, { nil: undefined }), async (body) => {
        await probe(
          'purge',
          'POST',
          '/v2/fzp/purge-queue',
          clientAuth,
          body,
          ok200((b) => expect(b).toEqual({ removed: 0, status: 'completed' })),
        );
        await probe(
          'health',
          'GET',
          '/v2/fz/health',
          clientAuth,
          body,
          ok200((b) => {
            expect(Object.keys(b.jobs).sort()).toEqual([
              'completed',
              'failed',
              'inProgress',
              'inQueue',
              'retried',
            ]);
            expect(b.workers).toBeDefined();
          }),
        );
      }),
      runs(60),
    );
  });

  it('unknown or junk endpoint ids are a 4xx on every route', async () => {
    const routes = [
      'run',
      'runsync',
      'status/x',
      'status-sync/x',
      'stream/x',
      'cancel/x',
      'retry/x',
      'purge-queue',
    ];
    await fc.assert(
      fc.asyncProperty(
        idSegment.filter((s) => !['fz', 'fzw', 'fzp', 'fzsync'].includes(s)),
        fc.constantFrom(...routes, 'health'),
        async (endpoint, route) => {
          const method = route === 'health' ? 'GET' : 'POST';
          const a = await probe(
            'endpoint id',
            method,
            `/v2/${endpoint}/${route}`,
            clientAuth,
            '{"input":{}}',
          );
          expectRejected(a, `${method} /v2/${endpoint.slice(0, 40)}/${route}`);
        },
      ),
      runs(100),
    );
  });
});

// ── auth ─────────────────────────────────────────────────────────────────────────────────────────

describe('auth', () => {
  const clientRoutes: [string, string][] = [
    ['POST', 'run'],
    ['POST', 'runsync?wait=1000'],
    ['GET', 'status/ID'],
    ['POST', 'status/ID'],
    ['GET', 'status-sync/ID?wait=1000'],
    ['POST', 'stream/ID'],
    ['POST', 'cancel/ID'],
    ['POST', 'retry/ID'],
    ['POST', 'purge-queue'],
    ['GET', 'health'],
  ];
  const workerRoutes: [string, string][] = [
    ['GET', 'job-take/w1?gpu=none'],
    ['GET', 'job-take-batch/w1?batch_size=3'],
    ['GET', 'job-stop/w1'],
    ['POST', 'job-done/holder-worker/ID?isStream=false'],
    ['POST', 'job-done-batch/holder-worker'],
    ['POST', 'job-stream/holder-worker/ID'],
    ['GET', 'ping/holder-worker?job_id=ID'],
    ['POST', 'ping/holder-worker?job_id=ID'],
  ];

  it('missing, wrong or cross-role credentials are a 401 and change nothing', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(
          ...clientRoutes.map((r) => ['client', ...r] as const),
          ...workerRoutes.map((r) => ['worker', ...r] as const),
        ),
        fc.oneof(
          authHeader,
          // The other role's credential, in both header forms.
          fc.constantFrom('cross-bare', 'cross-bearer'),
        ),
        async ([caller, method, route], header) => {
          const crossKey = caller === 'client' ? holderToken : testApiKey;
          const value =
            header === 'cross-bare' ? crossKey : header === 'cross-bearer' ? `Bearer ${crossKey}` : header;
          const valid = caller === 'client' ? testApiKey : holderToken;
          fc.pre(credentialOf(value) !== valid);
          const endpoint = caller === 'client' ? 'fz' : 'fzw';
          const jobId = caller === 'client' ? seeded.queued : seeded.held;
          const path = `/v2/${endpoint}/${route.replace('ID', jobId)}`;
          const headers: Record<string, string> = value === undefined ? {} : { authorization: value };
          const body = method === 'POST' ? '{"input":{"x":1},"output":"stolen"}' : undefined;
          const a = await probe('auth', method, path, headers, body);
          expect(a.status, `${method} ${path} with ${JSON.stringify(value)}`).toBe(401);
        },
      ),
      runs(200),
    );
    await stillServing();
  });
});

// ── worker protocol ───────────────────────────────────────────────────────────────────────────────

describe('worker protocol', () => {
  it('job-done and job-stream bodies: junk is a 400, an intruder is a 409, the held job is untouched', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom('job-done', 'job-stream'),
        fc.constantFrom('intruder', 'unknown-job'),
        workerBody,
        async (route, target, body) => {
          // An intruder posting for the held job, or the holder posting for a job that does not exist.
          const path =
            target === 'intruder'
              ? `/v2/fzw/${route}/intruder/${seeded.held}?isStream=false`
              : `/v2/fzw/${route}/${holder}/no-such-job?isStream=false`;
          const token = target === 'intruder' ? intruderToken : holderToken;
          const headers = { authorization: token, 'content-type': 'application/x-www-form-urlencoded' };
          const a = await probe(route, 'POST', path, headers, body);
          expectRejected(a, `${route} ${target}`);
        },
      ),
      runs(200),
    );
    await stillServing();
  });

  it("job-done-batch: junk is a 400; an intruder's results are each refused and the held job is untouched", async () => {
    await fc.assert(
      fc.asyncProperty(workerBody, fc.boolean(), async (result, wrapped) => {
        const headers = { authorization: intruderToken, 'content-type': 'application/json' };
        // The result as a batch of the held job (and a job that does not exist), or the raw body as is.
        const body = wrapped
          ? `{"jobs":[{"id":${JSON.stringify(seeded.held)},"result":${result}},{"id":"no-such-job","result":${result}}]}`
          : result;
        const before = await snapshot();
        // A batch that parsed answers 200, with every job refused on its own.
        const eachRefused = (answer: { jobs: { statusCode: number; error: string }[] }) => {
          expect(answer.jobs.map((job) => job.statusCode >= 400 && job.statusCode < 500)).toEqual([
            true,
            true,
          ]);
          for (const job of answer.jobs) expect(job.error.length).toBeGreaterThan(0);
        };
        const a = await probe(
          'job-done-batch',
          'POST',
          '/v2/fzw/job-done-batch/intruder',
          headers,
          body,
          eachRefused,
        );
        if (a.status === 200) expect(await snapshot(), 'state after a refused batch').toEqual(before);
      }),
      runs(150),
    );
    await stillServing();
  });

  it('every worker route refuses another endpoint’s token, a forged worker id, the client key and no key (401/403), changing nothing', async () => {
    const routes = [
      ['GET', 'job-take', ''],
      ['GET', 'job-take-batch', '?batch_size=2'],
      ['GET', 'job-stop', ''],
      ['POST', 'job-done', `/${'HELD'}?isStream=false`],
      ['POST', 'job-done-batch', ''],
      ['POST', 'job-stream', `/${'HELD'}?isStream=false`],
      ['GET', 'ping', `?job_id=${'HELD'}`],
    ] as const;
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...routes),
        fc.constantFrom('other-endpoint', 'forged-worker', 'client-key', 'none', 'junk'),
        idSegment,
        async ([method, route, tail], credential, forged) => {
          // Another endpoint's live token under its own worker id; the holder's token under any other
          // worker id; the client key; no header; a made-up worker token.
          const workerId =
            credential === 'other-endpoint'
              ? 'seed-worker'
              : credential === 'forged-worker'
                ? forged
                : holder;
          if (credential === 'forged-worker' && decodeSafe(workerId) === holder) return;
          const authorization = {
            'other-endpoint': otherEndpointToken,
            'forged-worker': holderToken,
            'client-key': `Bearer ${testApiKey}`,
            none: undefined,
            junk: 'fyw_not_a_real_token',
          }[credential];
          const headers: Record<string, string> = {
            'content-type': 'application/x-www-form-urlencoded',
            ...(authorization ? { authorization } : {}),
          };
          const path = `/v2/fzw/${route}/${workerId}${tail.replace('HELD', seeded.held!)}`;
          const body = method === 'POST' ? JSON.stringify({ output: 'forged' }) : undefined;
          const a = await probe(`${route} ${credential}`, method, path, headers, body);
          // A worker id that does not percent-decode is a 400 before anyone looks at the credential.
          let decodes = true;
          try {
            decodeURIComponent(workerId);
          } catch {
            decodes = false;
          }
          // A worker id too long for an HTTP request line is refused by Node itself (431/414).
          const allowed = decodes && workerId.length < 4_000 ? [401, 403] : [400, 401, 403, 414, 431];
          expect(allowed, `${route} with ${credential}: ${a.status} ${a.text.slice(0, 200)}`).toContain(
            a.status,
          );
        },
      ),
      runs(150),
    );
    await stillServing();
  });

  it('job-take-batch: a bad batch_size is a 400 and takes nothing', async () => {
    const valid = (v: string) => /^\d+$/.test(v) && Number(v) >= 1 && Number(v) <= 100;
    await fc.assert(
      fc.asyncProperty(
        queryValue.filter((v) => v !== '' && !valid(decodeSafe(v))),
        idSegment,
        async (size, worker) => {
          const a = await probe(
            'batch_size',
            'GET',
            `/v2/fz/job-take-batch/${worker}?batch_size=${size}&job_in_progress=0`,
            workerAuth(),
            undefined,
          );
          expectRejected(a, `batch_size=${size}`);
        },
      ),
      runs(100),
    );
  });

  it('ping: any job_id list is a 200 and renews nothing it does not hold', async () => {
    const before = await platform.db.jobs.get(seeded.held, Date.now());
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.oneof(idSegment, fc.constant(seeded.held), fc.constant(',')), { maxLength: 5 }),
        fc.constantFrom('GET', 'POST'),
        async (ids, method) => {
          const a = await send(method, `/v2/fzw/ping/intruder?job_id=${ids.join(',')}`, {
            authorization: intruderToken,
          });
          expectAnswered(
            a,
            `ping ${ids.join(',').slice(0, 80)}`,
            ok200((b) => expect(b).toEqual({})),
          );
        },
      ),
      runs(80),
    );
    const after = await platform.db.jobs.get(seeded.held, Date.now());
    expect(after?.leaseUntil).toBe(before?.leaseUntil);
    expect(after?.workerId).toBe(holder);
  });

  it('worker routes with wrong methods or shapes find no route', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(
          ['POST', 'job-take/w1'],
          ['POST', 'job-take-batch/w1'],
          ['POST', 'job-stop/w1'],
          ['GET', `job-done/${holder}/${seeded.held}`],
          ['GET', `job-stream/${holder}/${seeded.held}`],
          ['POST', `job-done/${holder}`],
          ['POST', 'job-take/w1/extra'],
          ['PUT', 'ping/w1'],
          ['GET', 'job-take'],
        ),
        fc.option(workerBody, { nil: undefined }),
        async ([method, path], body) => {
          const a = await probe('worker shape', method, `/v2/fzw/${path}`, workerAuth(), body);
          expectRejected(a, `${method} ${path}`);
        },
      ),
      runs(60),
    );
  });
});

// ── sizes ─────────────────────────────────────────────────────────────────────────────────────────

describe('body sizes near and over the limits', () => {
  const bodyOfSize = (bytes: number, key = 'input') => {
    const head = `{"${key}":{"s":"`;
    const tail = '"}}';
    return head + 'x'.repeat(bytes - head.length - tail.length) + tail;
  };

  it('/run at the limit is taken, one byte over is a 413', async () => {
    await probe('run at limit', 'POST', '/v2/fz/run', clientAuth, bodyOfSize(limits.runBodyBytes), isQueued);
    const over = await probe(
      'run over',
      'POST',
      '/v2/fz/run',
      clientAuth,
      bodyOfSize(limits.runBodyBytes + 1),
    );
    expect(over.status).toBe(413);
  });

  it('/runsync one byte over its limit and a body over the server cap are 413', async () => {
    const over = await probe(
      'runsync over',
      'POST',
      '/v2/fzsync/runsync?wait=1000',
      clientAuth,
      bodyOfSize(limits.runsyncBodyBytes + 1),
    );
    expect(over.status).toBe(413);
    const huge = await probe(
      'huge',
      'POST',
      '/v2/fz/run',
      clientAuth,
      bodyOfSize(limits.runsyncBodyBytes + 3 * 1024 * 1024),
    );
    expect(huge.status).toBe(413);
  });

  // Last, because it ends the held job: an over-limit result fails it at once (docs/security.md).
  it('a job-done result over its limit is a 400 and fails the held job with the reason', async () => {
    const a = await send(
      'POST',
      `/v2/fzw/job-done/${holder}/${seeded.held}?isStream=false`,
      workerAuth(),
      bodyOfSize(limits.jobDoneBodyBytes + 1, 'output'),
    );
    expect(a.status).toBe(400);
    const job = await platform.db.jobs.get(seeded.held, Date.now());
    expect(job).toMatchObject({ status: 'FAILED', error: expect.stringMatching(/over the .*-byte limit/) });
    await stillServing();
  });
});

function decodeSafe(value: string): string {
  try {
    return decodeURIComponent(value);
  } catch {
    return value;
  }
}

// ── management API (core/manage.ts) ────────────────────────────────────────────────────────────────

describe('management API', () => {
  /** Lone surrogates cannot be percent-encoded: they go as U+FFFD, as a browser would send them. */
  const enc = (value: string) => encodeURIComponent(Buffer.from(value, 'utf8').toString('utf8'));
  const manageRoutes = [
    '/manage/v1/endpoints',
    '/manage/v1/endpoints/fz',
    '/manage/v1/endpoints/fz/jobs',
    '/manage/v1/endpoints/fz/jobs/ID',
    '/manage/v1/endpoints/fz/logs',
    '/manage/v1/endpoints/fz/workers',
    '/manage/v1/endpoints/fz/metrics',
  ];
  const queryNames = [
    'status',
    'from',
    'to',
    'limit',
    'cursor',
    'job',
    'since',
    'after',
    'hours',
    'step',
    'x',
  ];
  const success = (body: any) =>
    expect(body !== null && typeof body === 'object', JSON.stringify(body)).toBe(true);

  it('missing, wrong or worker credentials are a 401 on every route and change nothing', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...manageRoutes),
        fc.oneof(authHeader, fc.constantFrom('worker-bare', 'worker-bearer')),
        async (route, header) => {
          const value =
            header === 'worker-bare'
              ? holderToken
              : header === 'worker-bearer'
                ? `Bearer ${holderToken}`
                : header;
          fc.pre(credentialOf(value) !== testApiKey);
          const path = route.replace('ID', seeded.completed);
          const a = await probe(
            'manage auth',
            'GET',
            path,
            value === undefined ? {} : { authorization: value },
            undefined,
          );
          expect(a.status, `${path} with ${JSON.stringify(value)}`).toBe(401);
        },
      ),
      runs(150),
    );
    await stillServing();
  });

  it('any query, id or method is a documented 200 or a 4xx with the error shape, never a 5xx', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...manageRoutes),
        fc.array(fc.tuple(fc.constantFrom(...queryNames), fc.oneof(oddString, fc.integer().map(String))), {
          maxLength: 4,
        }),
        fc.oneof(fc.constant(undefined), oddString),
        fc.constantFrom('GET', 'GET', 'GET', 'POST', 'DELETE', 'PUT'),
        async (route, query, id, method) => {
          const jobId = id === undefined ? seeded.completed : enc(id);
          const qs = query.map(([k, v]) => `${k}=${enc(v)}`).join('&');
          const path = `${route.replace('ID', jobId)}${qs ? `?${qs}` : ''}`;
          const a = await probe(
            'manage',
            method,
            path,
            clientAuth,
            method === 'GET' ? undefined : '{}',
            success,
          );
          if (method !== 'GET') expect(a.status).toBe(404);
        },
      ),
      runs(300),
    );
    await stillServing();
  });

  it('junk endpoint ids and path segments are a 4xx', async () => {
    await fc.assert(
      fc.asyncProperty(
        oddString,
        fc.constantFrom('', '/jobs', '/logs', '/workers', '/metrics', '/jobs/x'),
        async (id, tail) => {
          fc.pre(id.length > 0); // `/endpoints/` is the list itself
          const path = `/manage/v1/endpoints/${enc(id)}${tail}`;
          const a = await probe('manage junk', 'GET', path, clientAuth, undefined, success);
          // A raw malformed escape is a 400 too (not a 500 from decoding).
          expectRejected(await send('GET', `/manage/v1/endpoints/%E0%A4%A${tail}`, clientAuth), 'malformed');
          if (id !== 'fz' && id !== 'fzw' && id !== 'fzp' && id !== 'fzsync')
            expect(isRejection(a), path).toBe(true);
        },
      ),
      runs(150),
    );
  });
});
