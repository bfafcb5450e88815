/**
 * The key v2 rows and the AWS size limits, end to end through AWS in a box: client → API Gateway
 * shim (10 MB / 6 MB caps) → authorizer + api Lambda handlers → DynamoDB Local + fauxqs (SQS, S3),
 * and a protocol worker on the
 * endpoint's agent sidecar; one real Python worker at the end.
 */
import {
  type GetObjectCommand,
  type GetObjectCommandOutput,
  HeadObjectCommand,
  PutObjectCommand,
  type S3Client,
} from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { streamDrainChunks } from '../../core/adapters/aws/dynamo/job-item.js';
import { uploadMaxBytes } from '../../core/schemas.js';
import { outputCopyReuseMs, S3PayloadStore } from '../../functions/payloads.js';
import type { Agent } from '../../worker-image/agent/agent.js';
import { type PythonWorker, startPythonWorker } from '../agent/helpers.js';
import { ProtocolWorker } from '../support/protocolWorker.js';
import { type AwsBox, boxApiKey, startAwsBox } from './box.js';

const KB = 1024;
const MB = 1024 * KB;
const maxWaitMs = 3_000;

let box: AwsBox;
let mainAgent: Agent;
let serving: { stop(): Promise<void> };
let python: PythonWorker | undefined;

async function call(method: string, path: string, body?: unknown, headers: Record<string, string> = {}) {
  const response = await fetch(`${box.baseUrl}${path}`, {
    method,
    headers: { authorization: `Bearer ${boxApiKey}`, 'content-type': 'application/json', ...headers },
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await response.text();
  return {
    status: response.status,
    text,
    bytes: text.length,
    body: text.length > 0 ? JSON.parse(text) : undefined,
  };
}

async function untilFinal(endpointId: string, id: string) {
  for (let i = 0; i < 100; i++) {
    const r = await call('POST', `/${endpointId}/status-sync/${id}?wait=${maxWaitMs}`);
    if (!['IN_QUEUE', 'IN_PROGRESS'].includes(r.body.status)) return r;
  }
  throw new Error(`job ${id} never finished`);
}

beforeAll(async () => {
  box = await startAwsBox({ maxWaitMs });
  for (const id of ['main', 'idle', 'purge']) await box.addEndpoint(id);
  mainAgent = await box.agentFor('main');
  serving = new ProtocolWorker(mainAgent.url, 'main', mainAgent.workerToken, mainAgent.workerId).serve();
});

afterAll(async () => {
  expect(box?.agentExits ?? []).toEqual([]);
  await serving?.stop();
  await python?.stop();
  await box?.stop();
});

describe('v2 rows through the Lambda handlers', () => {
  it('run answers {id, status: IN_QUEUE}; status ends COMPLETED with the output', async () => {
    const run = await call('POST', '/main/run', { input: { echo: { hello: 'aws' } } });
    expect(run.status).toBe(200);
    expect(run.body).toEqual({ id: expect.stringMatching(/-u1$/), status: 'IN_QUEUE' });
    const done = await untilFinal('main', run.body.id);
    expect(done.status).toBe(200);
    expect(done.body).toMatchObject({ id: run.body.id, status: 'COMPLETED', output: { hello: 'aws' } });
    const status = await call('GET', `/main/status/${run.body.id}`);
    expect(status.body).toMatchObject({ status: 'COMPLETED', output: { hello: 'aws' } });
  });

  it('runsync longer than FERRY_MAX_WAIT_MS answers 200 {id, status} before the cap, then status-sync finishes', async () => {
    const started = Date.now();
    const r = await call('POST', '/main/runsync?wait=60000', { input: { echo: 'late', sleepMs: 4_500 } });
    const tookMs = Date.now() - started;
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ id: expect.stringMatching(/^sync-/), status: expect.stringMatching(/IN_/) });
    // Well before the 60 s asked for: the cap plus the round trips through the shim, the authorizer,
    // DynamoDB Local and SQS, which take seconds on a busy machine. That it is the cap and not the
    // job's end that answered, the status IN_ above says.
    expect(tookMs).toBeLessThan(maxWaitMs + 5_000);
    const done = await untilFinal('main', r.body.id);
    expect(done.body).toMatchObject({ status: 'COMPLETED', output: 'late' });
  });

  it('cancel, retry, purge and health', async () => {
    const queued = await call('POST', '/idle/run', { input: { echo: 'never' } });
    expect((await call('POST', `/idle/cancel/${queued.body.id}`)).body).toEqual({
      id: queued.body.id,
      status: 'CANCELLED',
    });
    expect((await call('POST', `/idle/retry/${queued.body.id}`)).status).toBe(409);

    const failing = await call('POST', '/main/run', { input: { fail: 'boom' } });
    expect((await untilFinal('main', failing.body.id)).body).toMatchObject({
      status: 'FAILED',
      error: 'boom',
    });
    const retried = await call('POST', `/main/retry/${failing.body.id}`);
    expect(retried.body).toEqual({ id: failing.body.id, status: 'IN_QUEUE' });
    expect((await untilFinal('main', failing.body.id)).body).toMatchObject({ status: 'FAILED', retries: 1 });
    // A cancel of the ended job answers the status it ended in (the DynamoDB write is never tried).
    expect(await call('POST', `/main/cancel/${failing.body.id}`)).toMatchObject({
      status: 200,
      body: { id: failing.body.id, status: 'FAILED' },
    });
    expect((await call('GET', `/main/status/${failing.body.id}`)).body).toMatchObject({ status: 'FAILED' });

    await call('POST', '/purge/run', { input: { n: 1 } });
    await call('POST', '/purge/run', { input: { n: 2 } });
    expect((await call('POST', '/purge/purge-queue')).body).toEqual({ removed: 2, status: 'completed' });
    const health = await call('GET', '/purge/health');
    expect(health.status).toBe(200);
    expect(health.body.jobs).toMatchObject({ inQueue: 0, inProgress: 0 });
    const mainHealth = await call('GET', '/main/health');
    expect(mainHealth.body.jobs.completed).toBeGreaterThanOrEqual(1);
    expect(mainHealth.body.workers.idle + mainHealth.body.workers.running).toBeGreaterThanOrEqual(1);
  });

  it('HEAD on a GET that only reads answers its status and type with no body (the ANY method routes it)', async () => {
    for (const [path, status] of [
      ['/purge/health', 200],
      ['/purge', 200],
      ['/by-name/box/-/purge', 200],
      ['/idle/status/no-such-job', 404],
    ] as const) {
      const get = await fetch(`${box.baseUrl}${path}`, { headers: { authorization: `Bearer ${boxApiKey}` } });
      const head = await fetch(`${box.baseUrl}${path}`, {
        method: 'HEAD',
        headers: { authorization: `Bearer ${boxApiKey}` },
      });
      expect([get.status, head.status], path).toEqual([status, status]);
      expect(head.headers.get('content-type'), path).toBe(get.headers.get('content-type'));
      expect(await head.text(), path).toBe('');
    }
  });

  it.each([
    ['no body', undefined, /JSON object/],
    ['invalid JSON', '{"input":', /not valid JSON/],
    ['input missing', {}, /input/],
    ['unknown field', { input: {}, surprise: 1 }, /unknown field 'surprise'/],
    ['input and inputRef', { input: {}, inputRef: 'x' }, /either input or inputRef/],
    ['an inputRef not handed out', { inputRef: 'payloads/abc/input-1' }, /Invalid inputRef/],
  ])('/run with %s is a 400 {error}', async (_name, body, message) => {
    const r = await call('POST', '/idle/run', body);
    expect(r.status).toBe(400);
    expect(r.body.error).toMatch(message);
  });

  it('a wait out of range is brought into it, one not a whole number is a 400; a bad percent-encoding is a 400', async () => {
    // runpod's Go SDK sends wait=0 for a 0 s timeout, and takes any answer but 200 as a failure.
    const zero = await call('POST', '/main/runsync?wait=0', { input: { echo: 'go' } });
    expect(zero.status).toBe(200);
    expect(zero.body.id).toMatch(/^sync-/);
    expect((await untilFinal('main', zero.body.id)).body).toMatchObject({
      status: 'COMPLETED',
      output: 'go',
    });
    const wait = await call('POST', '/idle/runsync?wait=-5', { input: {} });
    expect(wait.status).toBe(400);
    expect(wait.body.error).toMatch(/wait/);
    const path = await call('GET', '/idle/status/%E0%A4%A');
    expect(path.status).toBe(400);
    expect(typeof path.body.error).toBe('string');
  });

  it('401 for a missing, wrong or worker key; a client key cannot use worker routes', async () => {
    for (const authorization of ['', 'Bearer wrong', mainAgent.workerToken]) {
      const r = await call('GET', '/main/health', undefined, { authorization });
      expect(r.status).toBe(401);
      expect(r.body).toEqual({ error: 'Missing or invalid API key' });
    }
    expect((await call('GET', '/main/health', undefined, { authorization: boxApiKey })).status).toBe(200);
    const take = await call('GET', '/main/job-take/w1');
    // The agent takes no client key either.
    const atAgent = await fetch(`${mainAgent.url}/v2/main/job-take/w1`, {
      headers: { authorization: boxApiKey },
    });
    expect(atAgent.status).toBe(401);
    expect(take.status).toBe(401);
    expect(take.body.error).toMatch(/API key/);
  });

  it('unknown endpoint, job, route and method are 404 {error}', async () => {
    for (const path of ['/nope/health', '/main/status/no-such-job', '/main/no-such-route']) {
      const r = await call('GET', path);
      expect(r.status).toBe(404);
      expect(typeof r.body.error).toBe('string');
    }
    // A method the route does not take reaches the function too (one ANY proxy, infra/platform-stack.ts).
    for (const [method, path] of [
      ['DELETE', '/main/run'],
      ['GET', '/main/cancel/some-job'],
    ] as const) {
      const r = await call(method, path);
      expect({ status: r.status, body: r.body }).toEqual({
        status: 404,
        body: { error: `No route for ${method} /v2${path}` },
      });
    }
  });
});

describe('big bodies through the 10 MB / 6 MB front door', () => {
  it('an input, an output and a stream chunk over 400 KB pass inline', async () => {
    const big = 'i'.repeat(450 * KB);
    const run = await call('POST', '/main/run', { input: { echo: { big } } });
    expect(run.status).toBe(200);
    const done = await untilFinal('main', run.body.id);
    expect(done.body.output.big).toBe(big);

    const chunk = 's'.repeat(450 * KB);
    const streamed = await call('POST', '/main/run', { input: { chunks: [chunk, 'end'] } });
    const seen: unknown[] = [];
    for (let i = 0; i < 50; i++) {
      const r = await call('POST', `/main/stream/${streamed.body.id}`);
      expect(r.status).toBe(200);
      seen.push(...r.body.stream);
      if (['COMPLETED', 'FAILED'].includes(r.body.status)) break;
    }
    expect(seen).toEqual([{ output: chunk }, { output: 'end' }]);
  });

  it('a stream backlog longer than one answer comes in parts, and the job streams until the last', async () => {
    // The worker is done before the client reads: every chunk waits. Clients stop at a final status,
    // so the answers say IN_PROGRESS while a part is left (core/engine.ts stream).
    const chunks = Array.from({ length: streamDrainChunks + 150 }, (_, i) => `t${i}`);
    const run = await call('POST', '/main/run', { input: { chunks } });
    expect((await untilFinal('main', run.body.id)).body.status).toBe('COMPLETED');
    const answers: { status: string; count: number }[] = [];
    const seen: unknown[] = [];
    for (let i = 0; i < 10; i++) {
      const r = await call('POST', `/main/stream/${run.body.id}`);
      expect(r.status).toBe(200);
      answers.push({ status: r.body.status, count: r.body.stream.length });
      seen.push(...r.body.stream);
      if (r.body.status === 'COMPLETED') break;
    }
    expect(answers).toEqual([
      { status: 'IN_PROGRESS', count: streamDrainChunks },
      { status: 'COMPLETED', count: 150 },
    ]);
    expect(seen).toEqual(chunks.map((output) => ({ output })));
  }, 120_000);

  it('the console’s job detail of a job over 6 MB answers 200, its output a URL', async () => {
    // Input and output of 3.2 MB each: the detail carries both, over one Lambda answer.
    const big = 'd'.repeat(3.2 * MB);
    const run = await call('POST', '/main/run', { input: { echo: { big } } });
    expect(run.status).toBe(200);
    expect((await untilFinal('main', run.body.id)).body.status).toBe('COMPLETED');
    const detail = await call('GET', `/manage/v1/endpoints/main/jobs/${run.body.id}`);
    expect(detail.status, JSON.stringify(detail.body).slice(0, 300)).toBe(200);
    expect(detail.body.outputTooLarge).toBe(true);
    const fetched = await fetch(detail.body.output.outputUrl);
    expect(((await fetched.json()) as { big: string }).big).toBe(big);
  });

  it('a request over 6 MB is a 413 at the Lambda cap, over 10 MB at API Gateway', async () => {
    const six = await call('POST', '/idle/run', { input: { blob: 'x'.repeat(6 * MB + 1) } });
    expect(six.status).toBe(413);
    expect(six.body.error).toMatch(/uploads/);
    const ten = await call('POST', '/idle/runsync', { input: { blob: 'x'.repeat(10 * MB + 1) } });
    expect(ten.status).toBe(413);
    expect(typeof ten.body.error).toBe('string');
  });

  it('a 7 MB input via uploads + inputRef completes, and its 7 MB output comes back as outputUrl', async () => {
    const blob = 'b'.repeat(7 * MB);
    const input = JSON.stringify({ echo: blob });
    const upload = await call('POST', '/main/uploads', { sizeBytes: input.length });
    expect(upload.status).toBe(200);
    expect(upload.body).toEqual({
      uploadUrl: expect.stringMatching(/^http/),
      inputRef: expect.stringMatching(/^payloads\/uploads\/[0-9a-f-]{36}\.json$/),
      expiresInSec: 900,
      sizeBytes: input.length,
    });
    const put = await fetch(upload.body.uploadUrl, { method: 'PUT', body: input });
    expect(put.status).toBe(200);

    const run = await call('POST', '/main/runsync?wait=30000', { inputRef: upload.body.inputRef });
    expect(run.status).toBe(200);
    const done = run.body.status === 'COMPLETED' ? run : await untilFinal('main', run.body.id);
    expect(done.bytes).toBeLessThan(64 * KB);
    expect(done.body).toMatchObject({
      status: 'COMPLETED',
      outputTooLarge: true,
      output: { outputUrl: expect.stringMatching(/^http/), sizeBytes: blob.length + 2 },
    });
    const output = await fetch(done.body.output.outputUrl);
    expect(output.status).toBe(200);
    expect(await output.json()).toBe(blob);
  });

  it('a queued 7 MB input shows as inputUrl in status; a missing upload is a 400', async () => {
    const queued = JSON.stringify({ blob: 'q'.repeat(7 * MB) });
    const upload = await call('POST', '/idle/uploads', { sizeBytes: queued.length });
    const missing = await call('POST', '/idle/run', { inputRef: upload.body.inputRef });
    expect(missing.status).toBe(400);
    expect(missing.body.error).toMatch(/PUT the input JSON/);

    await fetch(upload.body.uploadUrl, { method: 'PUT', body: queued });
    const run = await call('POST', '/idle/run', {
      inputRef: upload.body.inputRef,
      policy: { lowPriority: true },
    });
    expect(run.body.status).toBe('IN_QUEUE');
    const status = await call('GET', `/idle/status/${run.body.id}`);
    expect(status.status).toBe(200);
    expect(status.body).toMatchObject({
      status: 'IN_QUEUE',
      inputTooLarge: true,
      input: { inputUrl: expect.any(String) },
    });
    const input = await fetch(status.body.input.inputUrl);
    expect(((await input.json()) as { blob: string }).blob).toHaveLength(7 * MB);
  });

  it('POST uploads without a body, with a size of 0 or over the largest input a route takes, or an unknown field, is a 400 naming sizeBytes', async () => {
    const asked = [
      await call('POST', '/idle/uploads'),
      await call('POST', '/idle/uploads', { sizeBytes: 0 }),
      await call('POST', '/idle/uploads', { sizeBytes: 1.5 }),
      await call('POST', '/idle/uploads', { sizeBytes: uploadMaxBytes + 1 }),
      await call('POST', '/idle/uploads', { sizeBytes: 5, surprise: 1 }),
    ];
    expect(asked.at(-1)!.body.error).toMatch(
      /unknown field 'surprise'; send \{"sizeBytes": .*from 1 to \d+$/,
    );
    for (const answer of asked) {
      expect(answer.status, answer.text).toBe(400);
      expect(answer.body.error).toMatch(/send \{"sizeBytes": <bytes of the JSON you will PUT>\}/);
    }
    expect((await call('POST', '/idle/uploads', { sizeBytes: uploadMaxBytes })).status).toBe(200);
  });

  it('an upload that is not a JSON object is a 400', async () => {
    const upload = await call('POST', '/idle/uploads', { sizeBytes: 5 });
    await fetch(upload.body.uploadUrl, { method: 'PUT', body: '[1, 2' });
    const r = await call('POST', '/idle/run', { inputRef: upload.body.inputRef });
    expect(r.status).toBe(400);
    expect(r.body.error).toMatch(/not valid JSON/);
  });

  it('an upload passes the checks a body does: __proto__ refused, a 64-bit integer and a whole float exact (core/json.ts)', async () => {
    const protoInput = '{"__proto__":{"admin":true}}';
    const proto = await call('POST', '/idle/uploads', { sizeBytes: protoInput.length });
    await fetch(proto.body.uploadUrl, { method: 'PUT', body: protoInput });
    const refused = await call('POST', '/idle/run', { inputRef: proto.body.inputRef });
    expect(refused.status).toBe(400);
    expect(refused.body.error).toBe('JSON keys named "__proto__" are not accepted');

    const seedInput = '{"seed":18446744073709551615,"scale":1.0}';
    const seed = await call('POST', '/idle/uploads', { sizeBytes: seedInput.length });
    await fetch(seed.body.uploadUrl, { method: 'PUT', body: seedInput });
    const run = await call('POST', '/idle/run', { inputRef: seed.body.inputRef });
    expect(run.body.status).toBe('IN_QUEUE');
    // Queued, so status shows the input: with every digit, and the float still a float.
    const status = await call('GET', `/idle/status/${run.body.id}`);
    expect(status.text).toContain('"input":{"seed":18446744073709551615,"scale":1.0}');
  });
});

describe('reading an upload', () => {
  // A presigned PUT may be used again until it expires
  // (https://docs.aws.amazon.com/AmazonS3/latest/userguide/using-presigned-url.html): the object read
  // may be bigger than it was a moment before.
  it('reads at most one byte past the cap, whatever size the object had when last looked at', async () => {
    const ref = `payloads/uploads/${'0'.repeat(8)}-0000-4000-8000-${'0'.repeat(12)}.json`;
    await box.fixture.s3.send(
      new PutObjectCommand({
        Bucket: box.fixture.bucket,
        Key: `ferry/${ref}`,
        Body: JSON.stringify({ blob: 'b'.repeat(64 * KB) }),
      }),
    );
    const received: number[] = [];
    const client = {
      send: async (command: unknown) => {
        // The object as it was before the client PUT it again: small.
        if (command instanceof HeadObjectCommand) return { ContentLength: 10 };
        const answer = (await box.fixture.s3.send(command as GetObjectCommand)) as GetObjectCommandOutput;
        const bytes = await answer.Body!.transformToByteArray();
        received.push(bytes.length);
        return { ...answer, Body: { transformToByteArray: async () => bytes } };
      },
    } as unknown as S3Client;
    const payloads = new S3PayloadStore({ client, bucket: box.fixture.bucket, prefix: 'ferry/' });
    await expect(payloads.readInput(ref, 4 * KB)).rejects.toThrow(
      /is \d+ bytes; this route takes at most 4096/,
    );
    expect(received).toEqual([4 * KB + 1]);
  });

  it('an empty upload is a 400 about its JSON, not an error of the ranged read', async () => {
    // S3 refuses an empty PUT to the URL, which signs a size of at least 1 (fauxqs checks no
    // signature): the empty object is written with the platform's own client, and the read must
    // still answer it with a 400.
    const upload = await call('POST', '/idle/uploads', { sizeBytes: 1 });
    await box.fixture.s3.send(
      new PutObjectCommand({ Bucket: box.fixture.bucket, Key: `ferry/${upload.body.inputRef}`, Body: '' }),
    );
    const r = await call('POST', '/idle/run', { inputRef: upload.body.inputRef });
    expect(r.status).toBe(400);
    expect(r.body.error).toMatch(/JSON/);
  });
});

describe('response fitting', () => {
  it('a stream answer over the cap has its biggest chunks replaced by outputUrl, per chunk', async () => {
    const payloads = new S3PayloadStore({
      client: box.fixture.s3,
      bucket: box.fixture.bucket,
      prefix: 'ferry/',
      maxResponseBytes: 4 * KB,
    });
    const big = 'z'.repeat(3 * KB);
    const answer = {
      id: 'job-1',
      status: 'IN_PROGRESS',
      stream: [{ output: 'small' }, { output: big }, { output: big }],
    };
    const fitted = (await payloads.fitResponse(answer)) as { stream: Record<string, any>[] };
    expect(fitted.stream[0]).toEqual({ output: 'small' });
    const replaced = fitted.stream.filter((chunk) => chunk.outputTooLarge === true);
    expect(replaced.length).toBeGreaterThanOrEqual(1);
    expect(JSON.stringify(fitted).length).toBeLessThan(4 * KB);
    const fetched = await fetch(replaced[0]!.output.outputUrl);
    expect(await fetched.json()).toBe(big);
    // Small answers are untouched (the same object comes back).
    const small = { id: 'job-2', status: 'COMPLETED', output: 'ok' };
    expect(await payloads.fitResponse(small)).toBe(small);
  });
});

describe('output copies', () => {
  it('are reused for a day, then written again before a URL is signed, so none is signed near its removal', async () => {
    const puts: string[] = [];
    const client = {
      send: (command: unknown) => {
        if (command instanceof PutObjectCommand) puts.push(String(command.input.Key));
        return box.fixture.s3.send(command as PutObjectCommand);
      },
      config: box.fixture.s3.config,
      middlewareStack: box.fixture.s3.middlewareStack,
    } as unknown as S3Client;
    let now = Date.now();
    const payloads = new S3PayloadStore({
      client,
      bucket: box.fixture.bucket,
      prefix: 'ferry/',
      maxResponseBytes: 4 * KB,
      now: () => now,
    });
    const answer = { id: `copies-${Date.now()}`, status: 'COMPLETED', output: 'c'.repeat(8 * KB) };
    const first = (await payloads.fitResponse(answer)) as { output: { outputUrl: string } };
    expect(puts).toHaveLength(1);
    // A poll an hour later re-uses the copy (content-addressed: the same key).
    now += 3_600_000;
    await payloads.fitResponse(answer);
    expect(puts).toHaveLength(1);
    // Past outputCopyReuseMs the copy is written again: its lifecycle rule counts from the new write.
    now += outputCopyReuseMs;
    const later = (await payloads.fitResponse(answer)) as { output: { outputUrl: string } };
    expect(puts).toEqual([puts[0], puts[0]]);
    expect(await (await fetch(later.output.outputUrl)).json()).toBe(answer.output);
    expect(first.output.outputUrl).toMatch(/^http/);
  });
});

describe('a real Python worker through the agent', () => {
  it('runs a /runsync sent through the shim to COMPLETED', async () => {
    await box.addEndpoint('py');
    python = startPythonWorker(await box.agentFor('py'));
    const r = await call('POST', '/py/runsync?wait=30000', { input: { method: 'echo', text: 'via lambda' } });
    const done = r.body.status === 'COMPLETED' ? r : await untilFinal('py', r.body.id);
    expect(done.body, python.output.join('')).toMatchObject({
      status: 'COMPLETED',
      output: { echo: 'via lambda' },
    });
  });

  it('keeps a 64-bit integer exact from the client to the worker and back (core/json.ts)', async () => {
    // The body as text: JSON.stringify here would round it before it left.
    const r = await call(
      'POST',
      '/py/runsync?wait=30000',
      '{"input":{"method":"next_seed","seed":18446744073709551615}}',
    );
    const done = r.body.status === 'COMPLETED' ? r : await untilFinal('py', r.body.id);
    expect(done.body.status, python?.output.join('')).toBe('COMPLETED');
    // The Python worker got every digit (it added one), and the answer's text carries them all.
    expect(done.text).toContain('"output":{"seed":18446744073709551615,"next":18446744073709551616}');
    const status = await call('GET', `/py/status/${done.body.id}`);
    expect(status.text).toContain('"seed":18446744073709551615');
  });
});
