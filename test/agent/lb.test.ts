/**
 * The agent in load-balanced mode (FERRY_AGENT_MODE=lb) in front of a real Python LB worker
 * (`python3 -m ferry.worker`, FERRY_MODE=lb), with API keys in DynamoDB Local's control table, and
 * the artifact download of the init mode against fauxqs S3.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { createServer, Agent as HttpAgent, request as httpRequest } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { PutObjectCommand } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashKey } from '../../core/auth.js';
import { startOnChildPort } from '../../core/child-port.js';
import { FerryError } from '../../core/errors.js';
import { limits } from '../../core/limits.js';
import type { ControlStore } from '../../core/ports.js';
import { downloadArtifact, readTaskSecret, writeLbSecret } from '../../worker-image/agent/artifact.js';
import { type LbAgent, startLbAgent } from '../../worker-image/agent/lb.js';
import { type AwsFixture, freePort, s3ClientFor, startAwsFixture } from '../support/emulators.js';
import { arnOf, IamGate, Policy } from '../support/iam-gate.js';
import { eventually, memoryLog, untilServing } from './helpers.js';

const here = dirname(fileURLToPath(import.meta.url));
const repo = join(here, '..', '..');
const apiKey = 'fy_lb-test-key-0123456789';

let aws: AwsFixture;
let worker: ChildProcess;
let workerPort: number;
let agent: LbAgent;
const log = memoryLog();
const workerOutput: string[] = [];
let scratch: string;
let secretFile: string;
/** The task's secret as the agent reads it from the init container's file. */
let workerSecret: string;

function startWorker(port: number): ChildProcess {
  const child = spawn('python3', ['-m', 'ferry.worker'], {
    cwd: join(here, 'fixtures'),
    env: {
      PATH: process.env.PATH ?? '',
      HOME: process.env.HOME ?? '',
      PYTHONPATH: join(repo, 'worker-image', 'python'),
      PYTHONUNBUFFERED: '1',
      FERRY_APP_DIR: join(here, 'fixtures'),
      FERRY_MODE: 'lb',
      FERRY_MODULE: 'lb_app',
      FERRY_VARIABLE: 'api',
      FERRY_HOST: '127.0.0.1',
      FERRY_PORT: String(port),
      // As on ECS: the file the task's init container drew (artifact mode).
      FERRY_LB_SECRET_FILE: secretFile,
      FERRY_PARENT_PID: String(process.pid),
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  for (const stream of [child.stdout, child.stderr]) {
    stream?.setEncoding('utf8');
    stream?.on('data', (data: string) => workerOutput.push(data));
  }
  return child;
}

async function stopWorker(child: ChildProcess | undefined): Promise<void> {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, 'exit');
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
  await exited;
  clearTimeout(timer);
}

/** [id, key, app, env]: keys scoped to this endpoint's app (shop/prod) and to others. */
const scopedKeys: [string, string, string, string | undefined][] = [
  ['k-shop', 'fy_scope_app_shop', 'shop', undefined],
  ['k-shop-prod', 'fy_scope_shop_prod', 'shop', 'prod'],
  ['k-blog', 'fy_scope_app_blog', 'blog', undefined],
  ['k-shop-staging', 'fy_scope_shop_staging', 'shop', 'staging'],
];

beforeAll(async () => {
  scratch = mkdtempSync(join(tmpdir(), 'ferry-agent-lb-'));
  aws = await startAwsFixture();
  await aws.control().putApiKey({ id: 'k1', name: 'test', hash: hashKey(apiKey), createdAt: Date.now() });
  for (const [id, key, app, env] of scopedKeys) {
    await aws.control().putApiKey({ id, name: id, hash: hashKey(key), createdAt: Date.now(), app, env });
  }
  secretFile = join(scratch, 'lb-secret');
  await writeLbSecret(secretFile);
  workerSecret = await readTaskSecret(secretFile, 'FERRY_LB_SECRET_FILE');
}, 90_000);

/** The agent under test, in front of a worker to be on `port`. */
const startAgentFor = (port: number) =>
  startLbAgent({
    endpointId: 'lbep',
    app: 'shop',
    env: 'prod',
    control: aws.control(),
    workerPort: port,
    host: '127.0.0.1',
    port: 0,
    keyCacheMs: 60_000,
    pingTimeoutMs: 1_000,
    workerSecret,
    log,
  });

afterAll(async () => {
  await agent?.close(1_000);
  await stopWorker(worker);
  await aws?.stop();
  rmSync(scratch, { recursive: true, force: true });
});

const call = (path: string, init: RequestInit = {}) => fetch(`${agent.url}${path}`, init);

describe('load-balanced agent', () => {
  it('answers /ping 503 until the worker answers its own /ping, then 200', async () => {
    // The worker binds a port picked here, free but not held: should another server take it first,
    // the worker exits, and both start again on another port.
    await startOnChildPort(async (port) => {
      agent = await startAgentFor(port);
      const before = await call('/ping');
      expect(before.status).toBe(503);
      expect(await before.json()).toEqual({ error: 'The worker is not ready' });
      // A keyed request meanwhile (the ALB fails open to a booting target): 503 with Retry-After,
      // as with no target at all, not the 502 of a worker that does not listen yet.
      const early = await call('/process', {
        method: 'POST',
        headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
        body: '{}',
      });
      expect(early.status).toBe(503);
      expect(early.headers.get('retry-after')).toBe('5');
      expect(await early.json()).toEqual({ error: 'The worker is starting; retry shortly' });
      expect(agent.serving).toBe(0);

      worker = startWorker(port);
      await untilServing(
        worker,
        'the worker to become healthy',
        async () => (await call('/ping')).status === 200,
        () => workerOutput.join(''),
        30_000,
      ).catch(async (error) => {
        await agent.close(1_000);
        throw error;
      });
      workerPort = port;
    });
  }, 40_000);

  it("refuses calls to the worker's port that come around the agent (another task on the bridge)", async () => {
    for (const headers of [{}, { 'x-ferry-lb-secret': 'guessed' }] as Record<string, string>[]) {
      const direct = await fetch(`http://127.0.0.1:${workerPort}/process`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body: JSON.stringify({ input_data: { n: 1 } }),
      });
      expect(direct.status).toBe(403);
      expect(await direct.json()).toEqual({ error: 'requests reach this worker through the platform only' });
      expect((await fetch(`http://127.0.0.1:${workerPort}/ping`, { headers })).status).toBe(403);
    }
    // The secret file is world-readable in the task's own volume, and nowhere else.
    expect(statSync(secretFile).mode & 0o777).toBe(0o644);
    // A client's own value for the header is replaced by the task's: the call goes through.
    const through = await call('/process', {
      method: 'POST',
      headers: {
        authorization: `Bearer ${apiKey}`,
        'content-type': 'application/json',
        'x-ferry-lb-secret': 'x',
      },
      body: JSON.stringify({ input_data: { n: 2 } }),
    });
    expect(await through.json()).toEqual({ got: { n: 2 } });
  });

  it('proxies a POST route with a Bearer key and a GET route with the bare key', async () => {
    const post = await call('/process', {
      method: 'POST',
      headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ input_data: { n: 7 } }),
    });
    expect(post.status).toBe(200);
    expect(await post.json()).toEqual({ got: { n: 7 } });

    const get = await call('/items/42?q=x', { headers: { authorization: apiKey } });
    expect(get.status).toBe(200);
    expect(await get.json()).toEqual({ id: '42', q: 'x' });
  });

  it('sends a chunked body (no Content-Length) to the worker with its Content-Length', async () => {
    // Ferry's Python LB runtime answers 411 to a body without a Content-Length.
    const text = JSON.stringify({ input_data: { n: 'chunked' } });
    const post = await call('/process', {
      method: 'POST',
      headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
      body: new ReadableStream({
        start(controller) {
          controller.enqueue(new TextEncoder().encode(text.slice(0, 10)));
          controller.enqueue(new TextEncoder().encode(text.slice(10)));
          controller.close();
        },
      }),
      duplex: 'half',
    } as RequestInit);
    expect(post.status).toBe(200);
    expect(await post.json()).toEqual({ got: { n: 'chunked' } });
  });

  it('answers 413 naming the limit to a body over limits.lbBodyBytes; the worker never sees it', async () => {
    const seen: { method: string; url: string; headers: Record<string, unknown>; bytes: number }[] = [];
    const standIn = createServer((req, res) => {
      let bytes = 0;
      req.on('data', (chunk: Buffer) => {
        bytes += chunk.length;
      });
      req.on('end', () => {
        if (req.url !== '/ping')
          seen.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, bytes });
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ bytes }));
      });
    });
    standIn.listen(0, '127.0.0.1');
    await once(standIn, 'listening');
    const limited = await startLbAgent({
      endpointId: 'lbep',
      control: aws.control(),
      workerPort: (standIn.address() as AddressInfo).port,
      host: '127.0.0.1',
      port: 0,
      readyProbeMs: 100,
      log,
    });
    try {
      await eventually('the stand-in worker to be up', async () =>
        (await fetch(`${limited.url}/ping`)).status === 200 ? true : undefined,
      );
      const headers = { authorization: `Bearer ${apiKey}`, 'content-type': 'application/octet-stream' };
      const over = await fetch(`${limited.url}/upload`, {
        method: 'POST',
        headers,
        body: Buffer.alloc(25 * 1024 * 1024, 1),
      });
      expect(over.status).toBe(413);
      expect(((await over.json()) as { error: string }).error).toBe(
        `Request body is over the limit of POST /upload: it takes at most ${limits.lbBodyBytes} bytes`,
      );
      // Chunked, so only counting tells.
      const chunk = Buffer.alloc(1024 * 1024, 2);
      let sent = 0;
      const overChunked = await fetch(`${limited.url}/upload`, {
        method: 'POST',
        headers,
        body: new ReadableStream({
          pull(controller) {
            if (sent >= limits.lbBodyBytes + chunk.length) controller.close();
            else controller.enqueue(chunk);
            sent += chunk.length;
          },
        }),
        duplex: 'half',
      } as RequestInit);
      expect(overChunked.status).toBe(413);
      expect(seen).toEqual([]);

      // Within the limit, chunked: buffered and sent with its Content-Length.
      const within = await fetch(`${limited.url}/upload?x=1`, {
        method: 'POST',
        headers,
        body: new ReadableStream({
          start(controller) {
            controller.enqueue(chunk);
            controller.enqueue(chunk);
            controller.close();
          },
        }),
        duplex: 'half',
      } as RequestInit);
      expect(within.status).toBe(200);
      expect(await within.json()).toEqual({ bytes: 2 * chunk.length });
      // At the limit with a Content-Length: streamed through as before.
      const atLimit = await fetch(`${limited.url}/upload`, {
        method: 'PUT',
        headers,
        body: Buffer.alloc(limits.lbBodyBytes, 3),
      });
      expect(await atLimit.json()).toEqual({ bytes: limits.lbBodyBytes });
      expect(
        seen.map(({ method, url, headers, bytes }) => [
          method,
          url,
          headers['content-length'],
          headers['transfer-encoding'],
          bytes,
        ]),
      ).toEqual([
        ['POST', '/upload?x=1', String(2 * chunk.length), undefined, 2 * chunk.length],
        ['PUT', '/upload', String(limits.lbBodyBytes), undefined, limits.lbBodyBytes],
      ]);
    } finally {
      await limited.close(1_000);
      standIn.close();
    }
  });

  it("gives the client the worker's own answer when the worker refuses an upload unread and resets the connection", async () => {
    // A custom image's server that answers 413 from the headers alone, then closes with the body unread.
    const port = await freePort();
    const early = spawn('python3', [join(repo, 'test', 'fixtures', 'early-answer', 'server.py')], {
      env: { PATH: process.env.PATH ?? '', FERRY_HOST: '127.0.0.1', FERRY_PORT: String(port) },
      stdio: 'ignore',
    });
    const limited = await startLbAgent({
      endpointId: 'lbep',
      control: aws.control(),
      workerPort: port,
      host: '127.0.0.1',
      port: 0,
      readyProbeMs: 100,
      log,
    });
    try {
      await eventually('the early-answer worker to be up', async () =>
        (await fetch(`${limited.url}/ping`)).status === 200 ? true : undefined,
      );
      // Within limits.lbBodyBytes, and more than the loopback buffers hold: still being sent at the reset.
      const answer = await fetch(`${limited.url}/upload`, {
        method: 'POST',
        headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/octet-stream' },
        body: Buffer.alloc(15 * 1024 * 1024, 1),
      });
      expect(answer.status).toBe(413);
      expect(answer.headers.get('x-worker')).toBe('early-answer');
      expect(await answer.json()).toEqual({ error: 'this worker takes at most 1 MiB' });
    } finally {
      await limited.close(1_000);
      await stopWorker(early);
    }
  });

  it('reports its load to the workers table: busy while a request runs, idle with lastBusyAt after', async () => {
    const registry = aws.workers();
    const reporting = await startLbAgent({
      workerSecret,
      endpointId: 'lbload',
      control: aws.control(),
      workerPort,
      host: '127.0.0.1',
      port: 0,
      log,
      registry,
      workerId: 'lbload-task1',
    });
    try {
      // Written once the worker first answers /ping (a worker loading its model is not idle).
      const first = await eventually('the first record', async () => {
        await reporting.reported();
        return registry.get('lbload-task1');
      });
      expect(first).toMatchObject({ state: 'idle', inFlight: 0 });
      const started = Date.now();
      const slow = fetch(`${reporting.url}/nap`, {
        method: 'POST',
        headers: { authorization: apiKey, 'content-type': 'application/json' },
        body: JSON.stringify({ seconds: 1.5 }),
      });
      const busy = await eventually('the busy record', async () => {
        await reporting.reported();
        const r = await registry.get('lbload-task1');
        return r?.state === 'running' ? r : undefined;
      });
      expect(busy).toMatchObject({ endpointId: 'lbload', inFlight: 1, jobIds: [] });
      expect((await slow).status).toBe(200);
      const idle = await eventually('the idle record', async () => {
        await reporting.reported();
        const r = await registry.get('lbload-task1');
        return r?.state === 'idle' ? r : undefined;
      });
      expect(idle.inFlight).toBe(0);
      expect(idle.lastBusyAt).toBeGreaterThanOrEqual(started);
    } finally {
      await reporting.close(1_000);
    }
    // A task that leaves takes its record with it.
    expect(await registry.get('lbload-task1')).toBeUndefined();
  });

  it('writes no record while its worker has not answered yet: the scaler counts the task as booting', async () => {
    const registry = aws.workers();
    const port = await freePort();
    const loading = await startLbAgent({
      workerSecret,
      endpointId: 'lbload',
      control: aws.control(),
      workerPort: port, // nothing listens: the worker is still loading
      host: '127.0.0.1',
      port: 0,
      log,
      registry,
      workerId: 'lbload-loading',
      readyProbeMs: 20,
      reportEveryMs: 20,
    });
    try {
      await new Promise((resolve) => setTimeout(resolve, 300));
      await loading.reported();
      expect(await registry.get('lbload-loading')).toBeUndefined();
    } finally {
      await loading.close(1_000);
    }
  });

  it('passes the worker’s own errors through (404 for an unknown route)', async () => {
    const missing = await call('/nope', { headers: { authorization: apiKey } });
    expect(missing.status).toBe(404);
    expect(await missing.json()).toHaveProperty('error');
  });

  it('takes keys scoped to its app or its app+environment, and answers 403 to keys scoped elsewhere', async () => {
    const status = async (key: string) =>
      (await call('/items/1', { headers: { authorization: `Bearer ${key}` } })).status;
    expect(await status('fy_scope_app_shop')).toBe(200);
    expect(await status('fy_scope_shop_prod')).toBe(200);
    const other = await call('/items/1', { headers: { authorization: 'Bearer fy_scope_app_blog' } });
    expect(other.status).toBe(403);
    expect(await other.json()).toEqual({ error: expect.stringContaining('app blog') });
    expect(await status('fy_scope_shop_staging')).toBe(403);
  });

  it('answers 401 {"error"} without a key or with a wrong one', async () => {
    const attempts: Record<string, string>[] = [
      {},
      { authorization: 'Bearer fy_wrong-key-000000000' },
      { authorization: '' },
    ];
    for (const headers of attempts) {
      const response = await call('/process', {
        method: 'POST',
        headers,
        body: JSON.stringify({ input_data: {} }),
      });
      expect(response.status).toBe(401);
      expect(await response.json()).toEqual({ error: 'Missing or invalid API key' });
    }
  });

  it('caches key lookups: one DynamoDB read for many requests with the same key', async () => {
    let lookups = 0;
    const control = aws.control();
    const counting: Pick<ControlStore, 'findApiKeyByHash'> = {
      findApiKeyByHash: (hash) => {
        lookups++;
        return control.findApiKeyByHash(hash);
      },
    };
    const cached = await startLbAgent({
      workerSecret,
      endpointId: 'lbep',
      control: counting,
      workerPort,
      host: '127.0.0.1',
      port: 0,
      log,
    });
    try {
      // Ready before the first request (its /ping heard the worker; no key, no lookup): until then a
      // new agent answers 503 "starting", and its own probe may not have run yet.
      expect((await fetch(`${cached.url}/ping`)).status).toBe(200);
      for (let i = 0; i < 3; i++) {
        const r = await fetch(`${cached.url}/items/1`, { headers: { authorization: `Bearer ${apiKey}` } });
        expect(r.status).toBe(200);
      }
      expect(lookups).toBe(1);
    } finally {
      await cached.close(1_000);
    }
  });

  it('fails closed with 503 when the key cannot be checked', async () => {
    const broken = await startLbAgent({
      workerSecret,
      endpointId: 'lbep',
      control: { findApiKeyByHash: async () => Promise.reject(new Error('ProvisionedThroughputExceeded')) },
      workerPort,
      host: '127.0.0.1',
      port: 0,
      log,
    });
    try {
      const r = await fetch(`${broken.url}/items/1`, { headers: { authorization: apiKey } });
      expect(r.status).toBe(503);
      expect(await r.json()).toHaveProperty('error');
    } finally {
      await broken.close(1_000);
    }
  });

  it('once ECS stops its task, closes idle keep-alive connections and each answer closes its own, so the ALB drain ends with the last request', async () => {
    const draining = await startAgentFor(workerPort);
    const keepAlive = new HttpAgent({ keepAlive: true, maxSockets: 1 });
    const get = () =>
      new Promise<{ status: number; connection: string | undefined; socket: Socket }>((resolve, reject) => {
        const req = httpRequest(`${draining.url}/items/7`, {
          agent: keepAlive,
          headers: { authorization: apiKey },
        });
        req.on('response', (res) => {
          res.resume();
          res.on('end', () =>
            resolve({ status: res.statusCode ?? 0, connection: res.headers.connection, socket: req.socket! }),
          );
        });
        req.on('error', reject);
        req.end();
      });
    try {
      // Ready first (its /ping heard the worker): until then a new agent answers 503 "starting".
      expect((await fetch(`${draining.url}/ping`)).status).toBe(200);
      const before = await get();
      expect(before.status).toBe(200);
      expect(before.connection).toBe('keep-alive');
      // The ALB's connection, idle between requests: it stays open until the agent is told.
      const closed = once(before.socket, 'close');
      await new Promise((resolve) => setTimeout(resolve, 100));
      expect(before.socket.destroyed).toBe(false);
      await draining.drain();
      await closed;
      // A request already on its way (or a health check) is still answered, and closes its connection.
      const during = await get();
      expect(during.status).toBe(200);
      expect(during.connection).toBe('close');
      await once(during.socket, 'close');
    } finally {
      keepAlive.destroy();
      await draining.close(1_000);
    }
  });
});

describe('artifact download (init container)', () => {
  it('writes the S3 object to the path, whole and readable, leaving no part file', async () => {
    const bytes = Buffer.from('not really a tarball, but bytes are bytes\n'.repeat(1000));
    await aws.s3.send(
      new PutObjectCommand({ Bucket: aws.bucket, Key: 'artifacts/demo/dev/a.tar.gz', Body: bytes }),
    );
    const path = join(scratch, 'ferry', 'artifact.tar.gz');
    const size = await downloadArtifact({
      s3: aws.s3,
      bucket: aws.bucket,
      key: 'artifacts/demo/dev/a.tar.gz',
      path,
    });
    expect(size).toBe(bytes.length);
    expect(readFileSync(path).equals(bytes)).toBe(true);
    expect(statSync(path).mode & 0o777).toBe(0o644);
    expect(readdirSync(dirname(path))).toEqual(['artifact.tar.gz']);
  });

  it('names a missing artifact with a FerryError and writes nothing', async () => {
    const path = join(scratch, 'missing', 'artifact.tar.gz');
    const failure = await downloadArtifact({
      s3: aws.s3,
      bucket: aws.bucket,
      key: 'artifacts/nope.tar.gz',
      path,
    }).catch((error: unknown) => error);
    expect(FerryError.is(failure)).toBe(true);
    expect((failure as Error).message).toContain('artifacts/nope.tar.gz');
    expect(readdirSync(dirname(path))).toEqual([]);
  });

  it("behind the task role's grant (its one key, no listing) a missing artifact reads as missing or unreadable, not as a bare denial", async () => {
    const key = 'artifacts/demo/dev/gone.tar.gz';
    // The task role's rule (test/infra/app-stack.test.ts: one s3:GetObject on the artifact's key, no
    // s3:ListBucket), so S3 answers the missing key with 403 as it does on AWS.
    const gate = new IamGate(
      new Policy([{ Effect: 'Allow', Action: 's3:GetObject', Resource: arnOf.object(aws.bucket, key) }]),
    );
    const s3 = gate.s3(s3ClientFor(aws.fauxqs.endpoint));
    try {
      const path = join(scratch, 'denied', 'artifact.tar.gz');
      const failure = await downloadArtifact({ s3, bucket: aws.bucket, key, path }).catch(
        (error: unknown) => error,
      );
      expect(FerryError.is(failure)).toBe(true);
      expect((failure as Error).message).toMatch(
        /gone\.tar\.gz does not exist, or this task's role may not read it/,
      );
      expect((failure as FerryError).hint).toMatch(/ferry deploy/);
      expect(gate.decisions.map((d) => d.allowed)).toEqual([true]);
      expect(readdirSync(dirname(path))).toEqual([]);
    } finally {
      s3.destroy();
    }
  });
});
