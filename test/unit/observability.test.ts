/**
 * The pure parts of observability: PutLogEvents batching within AWS's limits, the CloudWatch read
 * cursor (no line twice, even at the same millisecond), the job-metrics line, the time-series
 * buckets and percentiles, and the CLI's --since and endpoint-name rules.
 */
import { describe, expect, it, vi } from 'vitest';
import { formatLine, resolveEndpoint, sinceMs } from '../../cli/manage-client.js';
import {
  batchesOf,
  CloudWatchLogStore,
  containerStreamRegex,
  filterCallsPerRead,
  followSettleMs,
  putLogEventsLimits,
  streamOf,
} from '../../core/adapters/aws/cloudwatch-logs.js';
import type { ApiRequest } from '../../core/api.js';
import type { Authenticator } from '../../core/auth.js';
import type { Job } from '../../core/job.js';
import { stderrLogger } from '../../core/log.js';
import {
  jobLogClockMarginMs,
  ManageApi,
  type ManageApiOptions,
  metricsOf,
  percentile,
} from '../../core/manage.js';
import type { ManifestEndpoint } from '../../core/manifest.js';
import { jobMetricsLine, metricsLineKey, serviceTasksFields } from '../../core/metrics.js';
import type { EndpointRecord, LogLine, LogQuery, LogStore } from '../../core/ports.js';
import { sampleResources } from '../infra/fixtures.js';
import { FakeCloudWatchLogs } from '../support/cloudwatchLogs.js';

const line = (atMs: number, text = 'x', jobId = 'job-1'): LogLine => ({
  atMs,
  endpointId: 'ep',
  workerId: 'w',
  jobId,
  stream: 'stdout',
  text,
});

describe('PutLogEvents batches', () => {
  it('are in time order whatever order lines came in', () => {
    const [batch] = batchesOf([line(3), line(1), line(2)]);
    expect(batch!.map((e) => e.timestamp)).toEqual([1, 2, 3]);
  });

  it('split at 10,000 events, at 1 MiB counting 26 bytes per event, and at 24 h', () => {
    expect(
      batchesOf(Array.from({ length: 10_001 }, (_, i) => ({ ...line(i), jobId: undefined }))).map(
        (b) => b.length,
      ),
    ).toEqual([10_000, 1]);
    const big = 'y'.repeat(300_000);
    const sized = batchesOf([line(1, big), line(2, big), line(3, big), line(4, big)]);
    expect(sized.length).toBe(2);
    for (const batch of sized) {
      const bytes = batch.reduce((n, e) => n + Buffer.byteLength(e.message ?? '') + 26, 0);
      expect(bytes).toBeLessThanOrEqual(putLogEventsLimits.bytes);
    }
    const day = 24 * 3_600_000;
    expect(batchesOf([line(0), line(day), line(day + 1)]).map((b) => b.length)).toEqual([2, 1]);
  });
});

describe('CloudWatchLogStore', () => {
  it('writes JSON events into its own stream and reads a job back, resuming without repeats', async () => {
    const fake = new FakeCloudWatchLogs(['/g']);
    const writer = new CloudWatchLogStore({ client: fake.asClient(), logGroup: '/g', logStream: 'ep/1' });
    const reader = new CloudWatchLogStore({ client: fake.asClient(), logGroup: '/g' });
    await writer.append([line(5, 'a'), line(5, 'b'), line(5, 'other', 'job-2')]);
    const first = await reader.read({ endpointId: 'ep', jobId: 'job-1', limit: 1 });
    expect(first.lines.map((l) => l.text)).toEqual(['a']);
    await writer.append([line(5, 'c'), line(6, 'd')]);
    const rest = await reader.read({ endpointId: 'ep', jobId: 'job-1', after: first.next, limit: 100 });
    expect(rest.lines.map((l) => l.text)).toEqual(['b', 'c', 'd']);
    const none = await reader.read({ endpointId: 'ep', jobId: 'job-1', after: rest.next, limit: 100 });
    expect(none.lines).toEqual([]);
    expect(fake.calls.filter((c) => c === 'CreateLogStream')).toHaveLength(1);
  });

  it("reads an endpoint's lines from its own streams only: a line that names another endpoint is not that endpoint's", async () => {
    const fake = new FakeCloudWatchLogs(['/g']);
    // The attacker's agent may write only its own streams (`attacker/…`), but the event is its to shape.
    const attacker = new CloudWatchLogStore({
      client: fake.asClient(),
      logGroup: '/g',
      logStream: 'attacker/1',
    });
    const victim = new CloudWatchLogStore({ client: fake.asClient(), logGroup: '/g', logStream: 'victim/1' });
    await victim.append([{ ...line(5, 'real'), endpointId: 'victim' }]);
    await attacker.append([{ ...line(6, 'forged'), endpointId: 'victim' }]);
    const reader = new CloudWatchLogStore({ client: fake.asClient(), logGroup: '/g' });
    const read = await reader.read({ endpointId: 'victim', jobId: 'job-1', limit: 10 });
    expect(read.lines.map((l) => l.text)).toEqual(['real']);
  });

  it('never puts a quote or backslash of an id into a filter pattern', async () => {
    const fake = new FakeCloudWatchLogs(['/g']);
    const reader = new CloudWatchLogStore({ client: fake.asClient(), logGroup: '/g' });
    expect((await reader.read({ endpointId: 'ep', jobId: 'x" || $.a = "', limit: 5 })).lines).toEqual([]);
    expect(fake.calls).toEqual([]);
    await expect(reader.read({ endpointId: 'ep', after: 'not-a-cursor', limit: 5 })).rejects.toThrow(
      /cursor/,
    );
  });
});

describe("an endpoint's containers' own output (the ECS awslogs driver, into the same group)", () => {
  // What ECS names the streams (`<awslogs-stream-prefix = endpoint id>/<container>/<task id>`).
  const task = '0123456789abcdef0123456789abcdef';
  const agentJobStream = 'ep/8b1f4a2e-7c3d-4e5f-9a0b-1c2d3e4f5a6b';
  const jobLine = (atMs: number, text: string, jobId = 'job-1'): LogLine => ({
    atMs,
    endpointId: 'ep',
    workerId: 'ep-a1b2c3',
    jobId,
    stream: 'stdout',
    text,
  });
  const metricsLine = jobMetricsLine('ep', {
    id: 'job-1',
    status: 'COMPLETED',
    delayTime: 3,
    executionTime: 4,
  } as Parameters<typeof jobMetricsLine>[1])!;
  // A worker whose handler prints what looks like one of its agent's job lines, for job-1.
  const lookalike = JSON.stringify({
    endpointId: 'ep',
    workerId: 'ep-a1b2c3',
    jobId: 'job-1',
    stream: 'stdout',
    text: 'not a job line',
  });

  async function seeded() {
    const fake = new FakeCloudWatchLogs(['/g']);
    const agent = new CloudWatchLogStore({
      client: fake.asClient(),
      logGroup: '/g',
      logStream: agentJobStream,
    });
    await agent.append([jobLine(5, 'job says hi'), jobLine(9, 'job says bye')]);
    await fake.awslogs('/g', `ep/worker/${task}`, [
      { atMs: 6, text: 'Traceback (most recent call last):' },
      { atMs: 6, text: '  File "/ferry/app/main.py", line 1, in <module>' },
      { atMs: 7, text: "ModuleNotFoundError: No module named 'torchh'" },
      { atMs: 8, text: lookalike },
      { atMs: 8, text: '{"_aws": {"a user": "printed this"}}' },
    ]);
    await fake.awslogs('/g', `ep/agent/${task}`, [
      { atMs: 10, text: metricsLine },
      { atMs: 11, text: 'ferry-agent: the worker exited with code 1 before it took a job' },
    ]);
    await fake.awslogs('/g', `ep/artifact/${task}`, [{ atMs: 4, text: 'ferry-agent: artifact ready' }]);
    return {
      fake,
      reader: new CloudWatchLogStore({ client: fake.asClient(), logGroup: '/g', now: () => 60_000 }),
    };
  }

  it("an endpoint's read has its jobs' lines and its containers' raw lines, in time order, each with its container and task", async () => {
    const { reader } = await seeded();
    const { lines } = await readAll(reader, { endpointId: 'ep', limit: 100 });
    expect(lines).toEqual([
      {
        atMs: 4,
        endpointId: 'ep',
        workerId: task,
        stream: 'stdout',
        container: 'artifact',
        text: 'ferry-agent: artifact ready',
      },
      { ...jobLine(5, 'job says hi') },
      {
        atMs: 6,
        endpointId: 'ep',
        workerId: task,
        stream: 'stdout',
        container: 'worker',
        text: 'Traceback (most recent call last):',
      },
      {
        atMs: 6,
        endpointId: 'ep',
        workerId: task,
        stream: 'stdout',
        container: 'worker',
        text: '  File "/ferry/app/main.py", line 1, in <module>',
      },
      {
        atMs: 7,
        endpointId: 'ep',
        workerId: task,
        stream: 'stdout',
        container: 'worker',
        text: "ModuleNotFoundError: No module named 'torchh'",
      },
      // The worker's JSON is its own output, shown as printed: not a job line, however it looks.
      { atMs: 8, endpointId: 'ep', workerId: task, stream: 'stdout', container: 'worker', text: lookalike },
      // Only the agent's metric lines are left out: a worker's output is never hidden by its content.
      {
        atMs: 8,
        endpointId: 'ep',
        workerId: task,
        stream: 'stdout',
        container: 'worker',
        text: '{"_aws": {"a user": "printed this"}}',
      },
      { ...jobLine(9, 'job says bye') },
      {
        atMs: 11,
        endpointId: 'ep',
        workerId: task,
        stream: 'stdout',
        container: 'agent',
        text: 'ferry-agent: the worker exited with code 1 before it took a job',
      },
    ]);
  });

  it("a job's read has only its agent's lines: a worker's JSON with that job id and the agent's metric line are not", async () => {
    const { reader, fake } = await seeded();
    const { lines } = await readAll(reader, { endpointId: 'ep', jobId: 'job-1', limit: 100 });
    expect(lines.map((l) => l.text)).toEqual(['job says hi', 'job says bye']);
    expect(lines.every((l) => l.jobId === 'job-1' && l.container === undefined)).toBe(true);
    // The JSON filter pattern matched the worker's look-alike; its stream left it out.
    expect(fake.filterInputs.at(-1)?.filterPattern).toContain('$.jobId = "job-1"');
  });

  it("another endpoint's streams are never read, nor a stream of the endpoint that neither writer names so", async () => {
    const { fake } = await seeded();
    // `ep2` shares the letters `ep`; `other` is another endpoint, whose agent claims to be `ep`.
    await fake.awslogs('/g', `ep2/worker/${task}`, [{ atMs: 5, text: 'ep2 worker' }]);
    await fake.awslogs('/g', `other/worker/${task}`, [{ atMs: 5, text: 'other worker' }]);
    const other = new CloudWatchLogStore({ client: fake.asClient(), logGroup: '/g', logStream: 'other/1' });
    await other.append([{ ...jobLine(5, 'other forged'), endpointId: 'ep' }]);
    await fake.awslogs('/g', `ep/sidecar/${task}`, [{ atMs: 5, text: 'unknown container' }]);
    await fake.awslogs('/g', `ep/worker/${task}/x`, [{ atMs: 5, text: 'too deep' }]);
    const reader = new CloudWatchLogStore({ client: fake.asClient(), logGroup: '/g', now: () => 60_000 });
    const { lines } = await readAll(reader, { endpointId: 'ep', limit: 100 });
    expect(lines).toHaveLength(9);
    for (const text of ['ep2 worker', 'other worker', 'other forged', 'unknown container', 'too deep'])
      expect(lines.map((l) => l.text)).not.toContain(text);
    expect(fake.filterInputs.every((input) => input.logStreamNamePrefix === 'ep/')).toBe(true);
    const theirs = await readAll(reader, { endpointId: 'ep2', limit: 100 });
    expect(theirs.lines.map((l) => l.text)).toEqual(['ep2 worker']);
  });

  it("ferry logs prints a container line as it prints a local worker's own: `[<endpoint> worker <id>]`", () => {
    expect(
      formatLine({ atMs: 0, workerId: task, stream: 'stdout', container: 'worker', text: 'boom' }, 'hello'),
    ).toBe(`00:00:00.000 [hello worker ${task}] boom`);
    expect(
      formatLine({ atMs: 0, workerId: task, stream: 'stdout', container: 'agent', text: 'x' }, 'hello'),
    ).toBe(`00:00:00.000 [hello agent ${task}] x`);
    expect(formatLine({ atMs: 0, workerId: 'w-1', stream: 'stderr', text: 'local' }, 'hello')).toBe(
      '00:00:00.000 [hello worker w-1] local',
    );
  });
});

describe("user code's lines on the operator's terminal (ferry logs, ferry serve's stderr)", () => {
  // What a handler can print: colours, a window title, a carriage return that rewrites the line as
  // if another endpoint had printed it.
  const hostile = 'a\u001b[2J\u001b]0;title\u0007\r[victim 6059a69f] forged\u009b\tend';
  const shown = 'a\\x1b[2J\\x1b]0;title\\x07\\x0d[victim 6059a69f] forged\\x9b\tend';

  it('ferry logs writes control characters out, the tab kept', () => {
    expect(
      formatLine({ atMs: 0, workerId: 'w-1', jobId: 'j-1', stream: 'stdout', text: hostile }, 'spy'),
    ).toBe(`00:00:00.000 [spy j-1] ${shown}`);
  });

  it("ferry serve's log lines write them out too, each line still ending the line", () => {
    const written: string[] = [];
    const write = vi.spyOn(process.stderr, 'write').mockImplementation((chunk) => {
      written.push(String(chunk));
      return true;
    });
    try {
      stderrLogger.info(`[spy 6ee46701] ${hostile}`);
      stderrLogger.error(`endpoint spy is failing; its last lines:\n  ${hostile}`);
    } finally {
      write.mockRestore();
    }
    expect(written).toEqual([
      `[spy 6ee46701] ${shown}\n`,
      `error: endpoint spy is failing; its last lines:\n  ${shown}\n`,
    ]);
  });
});

/** Reads on with `next` while the store says `more`, as `ferry logs` does; fails instead of looping. */
async function readAll(store: LogStore, query: Omit<LogQuery, 'after'>, after?: string) {
  const lines: LogLine[] = [];
  let next = after;
  for (let reads = 1; ; reads++) {
    if (reads > 50) throw new Error(`still reading after 50 reads (${lines.length} lines so far)`);
    const page = await store.read({ ...query, after: next });
    lines.push(...page.lines);
    next = page.next;
    // A store from before `more` is read on while its pages are full, as `ferry logs` did.
    if (!(page.more ?? page.lines.length === query.limit)) return { lines, next, reads };
  }
}

describe('CloudWatchLogStore cursor', () => {
  it('hands out every line of a millisecond with 1500 lines exactly once, and the paging ends', async () => {
    // One print() of many lines: the runtime stamps each with the same millisecond (ferry/logs.py).
    const fake = new FakeCloudWatchLogs(['/g']);
    const writer = new CloudWatchLogStore({ client: fake.asClient(), logGroup: '/g', logStream: 'ep/1' });
    await writer.append(Array.from({ length: 1500 }, (_, i) => line(5, `line ${i}`)));
    await writer.append([line(6, 'after')]);
    const reader = new CloudWatchLogStore({ client: fake.asClient(), logGroup: '/g', now: () => 60_000 });
    for (const follow of [false, true]) {
      const { lines } = await readAll(reader, { endpointId: 'ep', jobId: 'job-1', limit: 1000, follow });
      expect(lines.map((l) => l.text)).toEqual([
        ...Array.from({ length: 1500 }, (_, i) => `line ${i}`),
        'after',
      ]);
    }
  });

  it('a page that ends inside a millisecond resumes there by count, also from a cursor of the old format', async () => {
    const fake = new FakeCloudWatchLogs(['/g']);
    const writer = new CloudWatchLogStore({ client: fake.asClient(), logGroup: '/g', logStream: 'ep/1' });
    await writer.append(Array.from({ length: 150 }, (_, i) => line(5, `line ${i}`)));
    const reader = new CloudWatchLogStore({ client: fake.asClient(), logGroup: '/g', now: () => 60_000 });
    // The cursor the store handed out before: `{t, ids}` with the last 100 ids of the first 120 lines.
    const ids = fake
      .events('/g')
      .slice(20, 120)
      .map((e) => e.eventId);
    const old = Buffer.from(JSON.stringify({ t: 5, ids })).toString('base64url');
    const rest = await reader.read({ endpointId: 'ep', jobId: 'job-1', after: old, limit: 1000 });
    // 100 ids read as "the first 100 of that millisecond": lines 100..149 (20 of them twice, none lost).
    expect(rest.lines.map((l) => l.text)).toEqual(Array.from({ length: 50 }, (_, i) => `line ${100 + i}`));
    const none = await reader.read({ endpointId: 'ep', jobId: 'job-1', after: rest.next, limit: 1000 });
    expect(none.lines).toEqual([]);
  });

  it('a follower hands out a line only once it has settled, so a late one from another stream is not passed over', async () => {
    const fake = new FakeCloudWatchLogs(['/g']);
    const a = new CloudWatchLogStore({ client: fake.asClient(), logGroup: '/g', logStream: 'ep/a' });
    const b = new CloudWatchLogStore({ client: fake.asClient(), logGroup: '/g', logStream: 'ep/b' });
    let now = 1_500;
    const reader = new CloudWatchLogStore({ client: fake.asClient(), logGroup: '/g', now: () => now });
    // Task B's batch lands first; task A's, stamped earlier, a moment later (each task batches).
    await b.append([line(1_000, 'B@1000')]);
    const first = await reader.read({ endpointId: 'ep', limit: 100, follow: true });
    await a.append([line(400, 'A@400'), line(900, 'A@900')]);
    now = 1_000 + followSettleMs + 1;
    const second = await reader.read({ endpointId: 'ep', after: first.next, limit: 100, follow: true });
    expect([...first.lines, ...second.lines].map((l) => l.text)).toEqual(['A@400', 'A@900', 'B@1000']);
    // Nothing newer than the settle margin was asked for.
    for (const input of fake.filterInputs) expect(input.endTime).toBeLessThanOrEqual(now - followSettleMs);
    // A one-shot read shows the newest lines at once.
    const shot = await reader.read({ endpointId: 'ep', limit: 100 });
    expect(shot.lines.map((l) => l.text)).toEqual(['A@400', 'A@900', 'B@1000']);
  });

  it('caps the FilterLogEvents calls of one read and goes on where the scan stopped', async () => {
    const fake = new FakeCloudWatchLogs(['/g']);
    const writer = new CloudWatchLogStore({ client: fake.asClient(), logGroup: '/g', logStream: 'ep/1' });
    await writer.append(Array.from({ length: 30 }, (_, i) => line(i, `l${i}`)));
    const reader = new CloudWatchLogStore({ client: fake.asClient(), logGroup: '/g', now: () => 60_000 });
    // A stand-in for a long scan: every FilterLogEvents page holds one event, 30 pages in all.
    const client = fake.asClient();
    const send = client.send.bind(client);
    (client as { send: unknown }).send = (command: { input: { limit?: number } }) => {
      command.input.limit = 1;
      return send(command as never);
    };
    const sparse = new CloudWatchLogStore({ client, logGroup: '/g', now: () => 60_000 });
    const before = fake.calls.length;
    const first = await sparse.read({ endpointId: 'ep', limit: 1000 });
    expect(fake.calls.length - before).toBe(filterCallsPerRead);
    expect(first.more).toBe(true);
    const { lines } = await readAll(sparse, { endpointId: 'ep', limit: 1000 }, first.next);
    expect([...first.lines, ...lines].map((l) => l.text)).toEqual(
      (await reader.read({ endpointId: 'ep', limit: 1000 })).lines.map((l) => l.text),
    );
    expect(first.lines.length + lines.length).toBe(30);
  });
});

describe("a job's logs through the management API", () => {
  const createdAt = 1_000_000;
  const job = (over: Partial<Job> = {}) =>
    ({
      id: 'job-1',
      endpointId: 'ep',
      status: 'IN_PROGRESS',
      createdAt,
      startedAt: createdAt + 10,
      expiresAt: createdAt + 3_600_000,
      attempt: 1,
      retries: 0,
      ...over,
    }) as Job;

  function manageWith(fake: FakeCloudWatchLogs, current: Job, nowMs: number) {
    const options = {
      logs: new CloudWatchLogStore({ client: fake.asClient(), logGroup: '/g', now: () => nowMs }),
      jobs: { get: async () => current },
      control: { getEndpoint: async (id: string) => ({ id }) },
      auth: { clientKeyScope: async () => ({}) } as unknown as Authenticator,
      now: () => nowMs,
      log: { info: () => {}, warn: () => {}, error: () => {} },
    } as unknown as ManageApiOptions;
    return new ManageApi(options);
  }
  const get = (url: string): ApiRequest => ({
    method: 'GET',
    path: url.split('?')[0]!,
    query: Object.fromEntries(new URL(url, 'http://x').searchParams),
    headers: { authorization: 'Bearer fy_any' },
    body: undefined,
  });

  it("reads only from the job's creation on, and up to its end once it has ended", async () => {
    const fake = new FakeCloudWatchLogs(['/g']);
    const writer = new CloudWatchLogStore({ client: fake.asClient(), logGroup: '/g', logStream: 'ep/1' });
    await writer.append([line(createdAt + 20, 'during')]);
    const running = manageWith(fake, job(), createdAt + 60_000);
    const detail = await running.handle(get('/manage/v1/endpoints/ep/jobs/job-1'));
    expect(detail.statusCode).toBe(200);
    expect(detail.body).toMatchObject({ logs: [{ text: 'during' }], logsEnded: false });
    const logs = await running.handle(get('/manage/v1/endpoints/ep/logs?job=job-1&follow=1'));
    expect((logs.body as { lines: { text: string }[] }).lines.map((l) => l.text)).toEqual(['during']);
    const finishedAt = createdAt + 30_000;
    const ended = manageWith(fake, job({ status: 'COMPLETED', finishedAt }), finishedAt + 60_000);
    const done = await ended.handle(get('/manage/v1/endpoints/ep/logs?job=job-1&follow=1'));
    expect(done.body).toMatchObject({ lines: [{ text: 'during' }], more: false, ended: true });
    expect(fake.filterInputs.length).toBeGreaterThan(0);
    for (const input of fake.filterInputs) {
      expect(input.startTime).toBeGreaterThanOrEqual(createdAt - jobLogClockMarginMs);
    }
    expect(fake.filterInputs.at(-1)!.endTime).toBe(finishedAt + jobLogClockMarginMs);
  });

  it('a throttled FilterLogEvents answers 429 with Retry-After and no internals, not a 500', async () => {
    const fake = new FakeCloudWatchLogs(['/g']);
    const manage = manageWith(fake, job(), createdAt + 60_000);
    fake.throttleFilter = 1;
    const answer = await manage.handle(get('/manage/v1/endpoints/ep/logs?job=job-1'));
    expect(answer.statusCode).toBe(429);
    expect(answer.headers).toEqual({ 'retry-after': '5' });
    expect(answer.body).toEqual({ error: expect.stringMatching(/^Too many log reads.*try again in 5 s$/) });
    expect(JSON.stringify(answer.body)).not.toMatch(/ThrottlingException|\/g|Rate exceeded/);
  });
});

describe("whether a job streams (its detail's `streams`, which the console reads the stream by)", () => {
  const callable = { isAsync: false, params: [] };
  const method = (name: string, isGenerator: boolean) => ({ ...callable, name, isGenerator });
  const endpoint = (over: Partial<ManifestEndpoint>, command?: string[]): EndpointRecord => ({
    id: 'ep',
    app: 'a',
    env: 'e',
    name: 'ep',
    kind: 'queue',
    config: {
      endpoint: {
        name: 'ep',
        kind: 'queue',
        file: 'ep.py',
        module: 'ep',
        resources: sampleResources,
        configHash: 'a'.repeat(64),
        ...over,
      },
      pythonVersion: '3.11',
      ...(command ? { command } : {}),
    },
    fingerprint: 'x',
    createdAt: 1,
    updatedAt: 1,
  });
  const fn = (isGenerator: boolean) => ({
    target: { ...method('f', isGenerator), type: 'function' as const },
  });
  const cls = (...methods: ReturnType<typeof method>[]) => ({
    target: { ...method('C', false), type: 'class' as const, methods },
  });

  async function streams(record: EndpointRecord | undefined, input: unknown, chunks: unknown[] = []) {
    const streamChecks: number[] = [];
    const options = {
      logs: { read: async () => ({ lines: [], next: undefined, more: false, ended: true }) },
      jobs: {
        get: async () => ({
          id: 'job-1',
          endpointId: 'ep',
          status: 'IN_PROGRESS',
          input,
          attempt: 1,
          retries: 0,
        }),
        // Whether it has chunks is one small read; their values are never read here (they can
        // be 2 MB on each poll of the page).
        readStream: async () => {
          throw new Error('the detail read the chunks');
        },
        hasStream: async () => {
          streamChecks.push(0);
          return chunks.length > 0;
        },
      },
      control: { getEndpoint: async () => record },
      auth: { clientKeyScope: async () => ({}) } as unknown as Authenticator,
      log: { info: () => {}, warn: () => {}, error: () => {} },
    } as unknown as ManageApiOptions;
    const answer = await new ManageApi(options).handle({
      method: 'GET',
      path: '/manage/v1/endpoints/ep/jobs/job-1',
      query: {},
      headers: { authorization: 'Bearer fy_any' },
      body: undefined,
    });
    expect(answer.statusCode).toBe(200);
    return { streams: (answer.body as { streams: boolean }).streams, streamChecks };
  }

  it('a generator handler streams, by its declaration alone: no look at its chunks', async () => {
    expect(await streams(endpoint(fn(true)), {})).toEqual({ streams: true, streamChecks: [] });
  });

  it('any other handler streams only once it has chunks (a plain def may return a generator)', async () => {
    expect(await streams(endpoint(fn(false)), {})).toEqual({ streams: false, streamChecks: [0] });
    expect((await streams(endpoint(fn(false)), {}, [{ output: 'x' }])).streams).toBe(true);
  });

  it("a class endpoint's job streams as the method it calls: the only one, or the one its input names", async () => {
    expect((await streams(endpoint(cls(method('gen', true))), {})).streams).toBe(true);
    const two = endpoint(cls(method('gen', true), method('plain', false)));
    expect((await streams(two, { method: 'gen' })).streams).toBe(true);
    expect((await streams(two, { method: 'plain' })).streams).toBe(false);
    // No method named (the job fails on it): nothing streams.
    expect((await streams(two, { prompt: 'x' })).streams).toBe(false);
  });

  it('where the declaration does not show the handler (an image, a command of its own, no record), it may stream', async () => {
    for (const record of [
      endpoint({ image: 'runpod/worker-v1-vllm:v2.0.0' }),
      endpoint(fn(false), ['python3', '-u', 'handler.py']),
      undefined,
    ]) {
      expect(await streams(record, {})).toEqual({ streams: true, streamChecks: [] });
    }
  });
});

describe('job metrics', () => {
  it('one line per ended job with delay and execution, by EndpointId', () => {
    const doc = JSON.parse(
      jobMetricsLine('ep', { id: 'j', status: 'FAILED', delayTime: 12, executionTime: 340 })!,
    );
    expect(doc).toEqual({
      [metricsLineKey]: 'job',
      EndpointId: 'ep',
      jobId: 'j',
      status: 'FAILED',
      JobsEnded: 1,
      JobsFailed: 1,
      DelayMs: 12,
      ExecutionMs: 340,
    });
    expect(jobMetricsLine('ep', { id: 'j', status: 'IN_PROGRESS' })).toBeUndefined();
  });

  // CloudWatch Logs makes a metric of any event of the job-log group shaped as an embedded metric
  // format document, whoever printed it (core/metrics.ts): a worker's line would count as much as
  // the agent's. Ferry's lines are plain JSON, read by the dashboard from the agent's streams only.
  it('is no embedded-metric-format document: CloudWatch makes no metric of it', () => {
    const doc = JSON.parse(jobMetricsLine('ep', { id: 'j', status: 'COMPLETED' })!);
    expect(doc).not.toHaveProperty('_aws');
    expect(JSON.stringify(doc)).not.toContain('CloudWatchMetrics');
  });

  // The scaler's service counts are read from its own log group; were they an embedded-metric
  // document, they would be a metric again, in a namespace a worker's printed line can add to.
  it('the scaler’s service counts are plain JSON marked as Ferry’s metrics, no embedded-metric-format document', () => {
    const fields = serviceTasksFields('ep', { desired: 3, running: 2, pending: 1 });
    expect(fields).toEqual({
      [metricsLineKey]: 'serviceTasks',
      EndpointId: 'ep',
      DesiredTasks: 3,
      RunningTasks: 2,
      PendingTasks: 1,
    });
    const doc = JSON.parse(JSON.stringify({ msg: 'ferry scale', endpointId: 'ep', ...fields }));
    expect(doc).not.toHaveProperty('_aws');
    expect(JSON.stringify(doc)).not.toContain('CloudWatchMetrics');
  });

  it("the dashboard's agent streams are the agent container's of that endpoint, never its worker's or another endpoint's", () => {
    const agent = new RegExp(containerStreamRegex('ep', 'agent'));
    expect(agent.test('ep/agent/0123abcd')).toBe(true);
    expect(agent.test('ep/worker/0123abcd')).toBe(false);
    expect(agent.test('xep/agent/0123abcd')).toBe(false);
    expect(agent.test('ep/0d9c2c1e-agent')).toBe(false);
    // The same names streamOf reads as the agent container's.
    expect(streamOf('ep', 'ep/agent/0123abcd')).toEqual({
      kind: 'container',
      container: 'agent',
      taskId: '0123abcd',
    });
  });
});

describe('time series', () => {
  it('nearest-rank percentiles', () => {
    expect(percentile([], 0.5)).toBeUndefined();
    expect(percentile([1, 2, 3, 4], 0.5)).toBe(2);
    expect(percentile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 0.95)).toBe(10);
  });

  it('buckets finished jobs by when they finished', () => {
    const job = (finishedAt: number, status: Job['status'] = 'COMPLETED') =>
      ({ status, createdAt: finishedAt - 30, startedAt: finishedAt - 20, finishedAt }) as Job;
    const m = metricsOf([job(5_000), job(15_000), job(16_000, 'FAILED'), job(99_000)], [], 0, 20_000, 10);
    expect(m.t).toEqual([0, 10]);
    expect(m.jobsPerSec).toEqual([0.1, 0.2]);
    expect(m.failedPerSec).toEqual([0, 0.1]);
    expect(m.executionP50Ms).toEqual([20, 20]);
    expect(m.delayP95Ms).toEqual([10, 10]);
  });
});

describe('CLI rules', () => {
  it('--since takes durations and dates; anything else is a usage error', () => {
    expect(sinceMs('10m', 1_000_000)).toBe(400_000);
    expect(sinceMs('2h', 10_000_000)).toBe(10_000_000 - 7_200_000);
    expect(sinceMs('2026-01-01T00:00:00Z', 0)).toBe(Date.parse('2026-01-01T00:00:00Z'));
    expect(() => sinceMs('soon', 0)).toThrow(/--since/);
  });

  it('an endpoint by id, by name, by its live- name; repeated names need --app/--env', () => {
    const record = (id: string, name: string, app = 'a', env = 'production') =>
      ({ id, name, app, env }) as EndpointRecord;
    const records = [
      record('e1', 'hello'),
      record('e2', 'live-dev'),
      record('e3', 'twin', 'a'),
      record('e4', 'twin', 'b'),
    ];
    expect(resolveEndpoint(records, 'e1').id).toBe('e1');
    expect(resolveEndpoint(records, 'hello').id).toBe('e1');
    expect(resolveEndpoint(records, 'dev').id).toBe('e2');
    expect(() => resolveEndpoint(records, 'twin')).toThrow(/Several/);
    expect(resolveEndpoint(records, 'twin', { app: 'b' }).id).toBe('e4');
    expect(() => resolveEndpoint(records, 'nope')).toThrow(/No endpoint/);
    // The name is right, --app is not: said so, and where the name is.
    expect(() => resolveEndpoint(records, 'hello', { app: 'zz' })).toThrow(
      "No endpoint named 'hello' in app 'zz'",
    );
  });
});
