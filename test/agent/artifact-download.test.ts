/**
 * The init container's download on a bad connection (worker-image/agent/artifact.ts): a body that
 * stalls or is reset mid-way is resumed with a ranged GET from where the file ends, tied to the first
 * answer's ETag by If-Match; one that stalls every time, or an object replaced between attempts, fails
 * with a clear error within a bounded time. Against a local HTTP server that speaks the part of S3's
 * GetObject the SDK needs (Range, If-Match, 206 with Content-Range, 412 PreconditionFailed), with a
 * small stall timeout in place of the container's 30 s; last, the bundled agent in artifact mode.
 */
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { S3Client } from '@aws-sdk/client-s3';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { FerryError } from '../../core/errors.js';
import { artifactS3Config, downloadArtifact } from '../../worker-image/agent/artifact.js';
import { bundleAgent } from '../../worker-image/agent/bundle.js';
import { fakeAwsConfig } from '../support/emulators.js';

const bucket = 'ferry-artifacts';
const key = 'artifacts/demo/dev/0123abcd.tar.gz';
/** The test's stall timeout: long enough for loopback under load, short enough to wait for. */
const stallMs = 300;

/**
 * What the server does with one GET: serve it; send `after` bytes of it and then stall or reset; or
 * never answer at all (silent: not even the status line).
 */
type Behaviour = { kind: 'serve' } | { kind: 'silent' } | { kind: 'stall' | 'reset'; after: number };

interface Seen {
  range: string | undefined;
  ifMatch: string | undefined;
  status: number;
}

/** One object at `/<bucket>/<key>`, and a script of what to do with each GET (then: serve). */
class FakeS3 {
  readonly requests: Seen[] = [];
  body: Buffer = Buffer.alloc(0);
  etag = '';
  script: Behaviour[] = [];
  private readonly server: Server;

  constructor() {
    this.server = createServer((req, res) => this.handle(req, res));
  }

  put(body: Buffer): void {
    this.body = body;
    this.etag = `"${createHash('md5').update(body).digest('hex')}"`;
  }

  async start(): Promise<string> {
    this.server.listen(0, '127.0.0.1');
    await once(this.server, 'listening');
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  async stop(): Promise<void> {
    this.server.closeAllConnections();
    this.server.close();
    await once(this.server, 'close');
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    const range = req.headers.range;
    const ifMatch = req.headers['if-match'];
    const seen: Seen = { range, ifMatch, status: 0 };
    this.requests.push(seen);
    const reply = (status: number, headers: Record<string, string>, body?: Buffer | string) => {
      seen.status = status;
      res.writeHead(status, headers);
      res.end(body);
    };
    if (req.method !== 'GET' || req.url?.split('?')[0] !== `/${bucket}/${key}`) {
      reply(
        404,
        { 'content-type': 'application/xml' },
        s3Error('NoSuchKey', 'The specified key does not exist.'),
      );
      return;
    }
    if (ifMatch !== undefined && ifMatch !== this.etag) {
      reply(
        412,
        { 'content-type': 'application/xml' },
        s3Error('PreconditionFailed', 'At least one of the pre-conditions you specified did not hold'),
      );
      return;
    }
    const start = range === undefined ? 0 : Number(/^bytes=(\d+)-$/.exec(range)?.[1] ?? Number.NaN);
    if (!(start >= 0 && start < this.body.length)) {
      reply(
        416,
        { 'content-type': 'application/xml' },
        s3Error('InvalidRange', 'The requested range is not satisfiable'),
      );
      return;
    }
    const behaviour: Behaviour = this.script.shift() ?? { kind: 'serve' };
    if (behaviour.kind === 'silent') return;
    const part = this.body.subarray(start);
    seen.status = range === undefined ? 200 : 206;
    res.writeHead(seen.status, {
      'content-length': String(part.length),
      'content-type': 'application/octet-stream',
      etag: this.etag,
      'accept-ranges': 'bytes',
      ...(range === undefined
        ? {}
        : { 'content-range': `bytes ${start}-${this.body.length - 1}/${this.body.length}` }),
    });
    if (behaviour.kind === 'serve') {
      res.end(part);
      return;
    }
    res.write(part.subarray(0, behaviour.after));
    // Stall: keep the connection open and send nothing more. Reset: a TCP RST once the bytes are out.
    if (behaviour.kind === 'reset') setTimeout(() => res.socket?.resetAndDestroy(), 200);
  }
}

const s3Error = (code: string, message: string) =>
  `<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>${code}</Code><Message>${message}</Message><RequestId>test</RequestId></Error>`;

let fake: FakeS3;
let endpoint: string;
let s3: S3Client;
const scratch = mkdtempSync(join(tmpdir(), 'ferry-artifact-download-'));

beforeAll(async () => {
  fake = new FakeS3();
  endpoint = await fake.start();
  s3 = new S3Client({ ...fakeAwsConfig, endpoint, forcePathStyle: true, ...artifactS3Config(stallMs) });
});

afterEach(() => {
  fake.requests.length = 0;
  fake.script = [];
});

afterAll(async () => {
  s3?.destroy();
  await fake?.stop();
  rmSync(scratch, { recursive: true, force: true });
});

/** 3 MiB: more than the socket buffers hold, so a stall is mid-body. */
const object = () => randomBytes(3 * 1024 * 1024);
const fileIn = (name: string) => join(scratch, name, 'artifact.tar.gz');
const firstRequest = async () => {
  while (fake.requests.length === 0) await new Promise((resolve) => setTimeout(resolve, 20));
};

describe('artifact download on a bad connection', () => {
  it('resumes a body that stalls mid-way with a ranged GET tied to the ETag, and the file is whole', async () => {
    const bytes = object();
    fake.put(bytes);
    fake.script = [{ kind: 'stall', after: 1024 * 1024 }];
    const lines: string[] = [];
    const path = fileIn('stall');
    const size = await downloadArtifact({ s3, bucket, key, path, backoffMs: 10, log: (l) => lines.push(l) });
    expect(size).toBe(bytes.length);
    expect(readFileSync(path).equals(bytes)).toBe(true);
    expect(readdirSync(dirname(path))).toEqual(['artifact.tar.gz']);
    expect(fake.requests).toEqual([
      { range: undefined, ifMatch: undefined, status: 200 },
      { range: `bytes=${1024 * 1024}-`, ifMatch: fake.etag, status: 206 },
    ]);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/attempt 1 of 5 failed at 1048576 of 3145728 bytes \(.*timed out.*\); resuming/);
  }, 20_000);

  it('resumes a body whose connection is reset mid-way', async () => {
    const bytes = object();
    fake.put(bytes);
    fake.script = [{ kind: 'reset', after: 512 * 1024 }];
    const path = fileIn('reset');
    const size = await downloadArtifact({ s3, bucket, key, path, backoffMs: 10 });
    expect(size).toBe(bytes.length);
    expect(readFileSync(path).equals(bytes)).toBe(true);
    expect(fake.requests).toHaveLength(2);
    const [first, second] = fake.requests;
    expect(first).toMatchObject({ range: undefined, status: 200 });
    // Where it resumes is what reached the file before the reset: on loopback, all that was sent.
    const from = Number(/^bytes=(\d+)-$/.exec(second?.range ?? '')?.[1]);
    expect(from).toBeGreaterThan(0);
    expect(from).toBeLessThanOrEqual(512 * 1024);
    expect(second).toMatchObject({ ifMatch: fake.etag, status: 206 });
    expect(readdirSync(dirname(path))).toEqual(['artifact.tar.gz']);
  }, 20_000);

  it('fails with a clear error when every attempt stalls, each ended by the stall timer, and leaves no file', async () => {
    fake.put(object());
    fake.script = [1, 2, 3].map(() => ({ kind: 'stall', after: 64 * 1024 }) as const);
    const path = fileIn('always-stalls');
    // A stall the timer missed would wait for ever (the test's timeout); the message says the timer
    // ended the last attempt, and the requests that each earlier one did.
    const failure = await downloadArtifact({ s3, bucket, key, path, attempts: 3, backoffMs: 10 }).catch(
      (error: unknown) => error,
    );
    expect(FerryError.is(failure)).toBe(true);
    expect((failure as Error).message).toMatch(
      new RegExp(
        `^Cannot download the artifact s3://${bucket}/${key}: 3 attempts failed, the last at \\d+ of 3145728 bytes: .*timed out after ${stallMs} ms`,
      ),
    );
    expect((failure as FerryError).hint).toMatch(/ECS replaces the task/);
    expect(fake.requests.map((r) => r.range === undefined)).toEqual([true, false, false]);
    expect(existsSync(path)).toBe(false);
    expect(readdirSync(dirname(path))).toEqual([]);
  }, 20_000);

  it('gives up on a server that never answers: the SDK retries each request, then this download its own', async () => {
    fake.put(object());
    fake.script = Array.from({ length: 6 }, () => ({ kind: 'silent' }) as const);
    const path = fileIn('silent');
    const failure = await downloadArtifact({ s3, bucket, key, path, attempts: 2, backoffMs: 10 }).catch(
      (error: unknown) => error,
    );
    expect((failure as Error).message).toMatch(
      /^Cannot download the artifact .*: 2 attempts failed, the last at before any answer: .*timed out after 300 ms/,
    );
    // The SDK's 3 attempts of each GET (its standard retry mode), two GETs.
    expect(fake.requests).toHaveLength(6);
    expect(readdirSync(dirname(path))).toEqual([]);
  }, 20_000);

  it('fails rather than splice two objects when the key is replaced between attempts (412 on If-Match)', async () => {
    const first = object();
    fake.put(first);
    const etag = fake.etag;
    fake.script = [{ kind: 'reset', after: 256 * 1024 }];
    const path = fileIn('replaced');
    const failure = downloadArtifact({ s3, bucket, key, path, backoffMs: 10 }).catch(
      (error: unknown) => error,
    );
    // Replaced once the first GET is being answered (its body stays the first object's).
    await firstRequest();
    fake.put(object());
    const error = await failure;
    expect(FerryError.is(error)).toBe(true);
    expect((error as Error).message).toMatch(
      new RegExp(`^The artifact s3://${bucket}/${key} changed while it was being downloaded`),
    );
    expect(fake.requests).toHaveLength(2);
    expect(fake.requests[1]).toMatchObject({ ifMatch: etag, status: 412 });
    expect(readdirSync(dirname(path))).toEqual([]);
  }, 20_000);
});

/** The bundled agent in artifact mode, against the fake S3: its exit code and its last lines. */
describe('the init container (bundled agent, artifact mode)', () => {
  let dir: string | undefined;
  let agent: string;
  /** Preloaded into the agent: says when its event loop empties by itself (never on process.exit()). */
  let loopWatch: string;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'ferry-artifact-agent-'));
    agent = await bundleAgent(dir);
    loopWatch = join(dir, 'loop-watch.cjs');
    writeFileSync(
      loopWatch,
      "process.once('beforeExit', () => process.stderr.write('test: the event loop emptied\\n'));\n",
    );
  }, 60_000);
  afterAll(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const run = async (path: string) => {
    const child = spawn(process.execPath, ['--require', loopWatch, agent], {
      env: {
        PATH: process.env.PATH ?? '',
        FERRY_AGENT_MODE: 'artifact',
        FERRY_ENDPOINT_ID: 'ep1',
        AWS_REGION: fakeAwsConfig.region,
        AWS_ACCESS_KEY_ID: fakeAwsConfig.credentials.accessKeyId,
        AWS_SECRET_ACCESS_KEY: fakeAwsConfig.credentials.secretAccessKey,
        // The SDK's service-specific endpoint variable; an IP endpoint is addressed path-style.
        AWS_ENDPOINT_URL_S3: endpoint,
        FERRY_ARTIFACT_BUCKET: bucket,
        FERRY_ARTIFACT_KEY: key,
        FERRY_ARTIFACT_PATH: path,
        FERRY_ARTIFACT_STALL_MS: String(stallMs),
      },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    child.stderr.setEncoding('utf8').on('data', (text: string) => {
      stderr += text;
    });
    const killer = setTimeout(() => child.kill('SIGKILL'), 30_000);
    // 'close', not 'exit': stderr is read below, and only 'close' comes after it has all been read.
    const [code] = (await once(child, 'close')) as [number | null];
    clearTimeout(killer);
    return { code, stderr };
  };

  it('resumes after a stall and exits 0 with the whole file', async () => {
    const bytes = object();
    fake.put(bytes);
    fake.script = [{ kind: 'stall', after: 1024 * 1024 }];
    const path = fileIn('agent-ok');
    const { code, stderr } = await run(path);
    expect(code, stderr).toBe(0);
    expect(stderr).toMatch(
      /ferry-agent: artifact download attempt 1 of 5 failed at 1048576 of 3145728 bytes/,
    );
    expect(stderr).toContain(`ferry-agent: artifact ready at ${path} (3145728 bytes)`);
    expect(readFileSync(path).equals(bytes)).toBe(true);
    expect(fake.requests.map((r) => r.status)).toEqual([200, 206]);
  }, 40_000);

  it('exits 1 at once, with the reason in its log, when the object changed under a stalled download', async () => {
    fake.put(object());
    fake.script = [{ kind: 'stall', after: 64 * 1024 }];
    const path = fileIn('agent-changed');
    // Replace the object once the first GET is in (before the stall is noticed and resumed).
    const replaced = firstRequest().then(() => fake.put(object()));
    const { code, stderr } = await run(path);
    await replaced;
    expect(code, stderr).toBe(1);
    expect(stderr).toMatch(/ferry-agent: The artifact s3:\/\/.* changed while it was being downloaded/);
    expect(stderr).not.toMatch(/\n\s+at /);
    // Nothing left open: the event loop empties by itself, not main.ts's 5 s backstop (process.exit).
    expect(stderr).toContain('test: the event loop emptied');
    expect(readdirSync(dirname(path))).toEqual([]);
    expect(fake.requests.map((r) => r.status)).toEqual([200, 412]);
  }, 40_000);
});
