/**
 * Job logs and the management API on AWS in a box: a real Python worker's print() lines go through
 * the agent's job-log route into CloudWatch Logs (in memory, reached through the AWS SDK's commands),
 * one JSON event per line with the job id as a field; `ferry logs --job` (printLogs over the
 * management API of the API Lambda, behind the API Gateway shim and its authorizer) prints them.
 * What a worker container prints outside a job (a real worker's failed import), shipped into the
 * same group as the ECS awslogs driver would, `ferry logs` prints too, and `--job` does not.
 * Job lists come from DynamoDB Local through the byEndpointStatus index.
 */
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { printLogs } from '../../cli/commands/logs-run.js';
import { ManageClient } from '../../cli/manage-client.js';
import { jobMetricsLine } from '../../core/metrics.js';
import { jobLogGroupName } from '../../infra/names.js';
import { type PythonWorker, startPythonWorker } from '../agent/helpers.js';
import { type AwsBox, boxApiKey, shimCall, startAwsBox, untilFinished } from './box.js';

let box: AwsBox;
let python: PythonWorker;
let client: ManageClient;

const call = (method: string, path: string, body?: unknown, key?: string) =>
  shimCall(box, method, path, body, key);

async function runToEnd(input: unknown): Promise<{ id: string; status: string }> {
  const { body } = await call('POST', '/v2/talk/run', { input });
  return untilFinished(box, 'talk', body.id);
}

beforeAll(async () => {
  box = await startAwsBox({ maxWaitMs: 3_000 });
  await box.addEndpoint('talk');
  python = startPythonWorker(await box.agentFor('talk'));
  client = new ManageClient(box.shim.url, boxApiKey);
});

afterAll(async () => {
  await python?.stop();
  await box?.stop();
});

describe('job logs on AWS', () => {
  let jobId: string;

  it("ferry logs --job prints a /run job's print() lines", async () => {
    const job = await runToEnd({ method: 'chatty', name: 'Box' });
    expect(job.status, python.output.join('')).toBe('COMPLETED');
    jobId = job.id;
    const out: string[] = [];
    await printLogs({
      client,
      endpoint: { id: 'talk', name: 'talk' },
      job: job.id,
      follow: false,
      json: false,
      pollMs: 100,
      write: (line) => out.push(line),
    });
    expect(out).toHaveLength(2);
    expect(out[0]).toMatch(
      new RegExp(`^\\d\\d:\\d\\d:\\d\\d\\.\\d{3} \\[talk ${job.id}\\] hello from the handler, Box$`),
    );
    expect(out[1]).toContain('and a warning for Box');
  });

  it('each CloudWatch event is one JSON object with the job id as a field', () => {
    const events = box.cloudWatchLogs.events(jobLogGroupName).filter((e) => e.message.includes(jobId));
    expect(events.length).toBe(2);
    for (const event of events) {
      expect(JSON.parse(event.message)).toEqual({
        endpointId: 'talk',
        workerId: expect.any(String),
        jobId,
        stream: expect.stringMatching(/^std(out|err)$/),
        text: expect.any(String),
      });
    }
    // The agent writes to its own stream, created once.
    expect(box.cloudWatchLogs.calls.filter((c) => c === 'CreateLogStream')).toHaveLength(1);
  });

  it('--json and a follow cursor that never repeats a line', async () => {
    const out: string[] = [];
    const stop = new AbortController();
    const following = printLogs({
      client,
      endpoint: { id: 'talk', name: 'talk' },
      follow: true,
      json: true,
      pollMs: 100,
      write: (line) => {
        out.push(line);
        if (out.length >= 4) stop.abort();
      },
      signal: stop.signal,
    });
    const second = await runToEnd({ method: 'chatty', name: 'Again' });
    await following;
    const lines = out.map((l) => JSON.parse(l) as { jobId: string; text: string });
    expect(lines.map((l) => l.jobId)).toEqual([jobId, jobId, second.id, second.id]);
    expect(new Set(out).size).toBe(4);
  });

  it('ferry logs shows what a worker container printed outside any job (a failed import), as the awslogs driver ships it; --job does not', async () => {
    // A real worker whose module fails at import, after printing a look-alike of one of its agent's
    // job lines for the job above. Its start is not reported to the agent: only its output matters here.
    const app = mkdtempSync(join(tmpdir(), 'ferry-box-broken-'));
    writeFileSync(
      join(app, 'broken.py'),
      [
        'import json, os',
        'print(json.dumps({"endpointId": "talk", "workerId": "w", "jobId": os.environ["LOOKALIKE_JOB"], "stream": "stdout", "text": "not a job line"}), flush=True)',
        'raise RuntimeError("CUDA driver not found")',
        '',
      ].join('\n'),
    );
    const broken = startPythonWorker(await box.agentFor('talk'), 'Fixture', {
      app: { dir: app, module: 'broken' },
      env: { FERRY_WEBHOOK_POST_STARTUP: '', LOOKALIKE_JOB: jobId },
    });
    await once(broken.child, 'exit');
    rmSync(app, { recursive: true, force: true });
    const printed = broken.output
      .join('')
      .split('\n')
      .filter((l) => l !== '');
    expect(printed.join('\n')).toContain('RuntimeError: CUDA driver not found');
    expect(printed.some((line) => JSON.parse(line.startsWith('{') ? line : '{}').jobId === jobId)).toBe(true);
    // ECS's part: the awslogs driver, with the endpoint's id as its stream prefix
    // (infra/constructs/service.ts), ships each line of each container to `talk/<container>/<task id>`.
    const task = '0123456789abcdef0123456789abcdef';
    const at = Date.now();
    await box.cloudWatchLogs.awslogs(
      jobLogGroupName,
      `talk/worker/${task}`,
      printed.map((text) => ({ atMs: at, text })),
    );
    const metricsLine = jobMetricsLine('talk', {
      id: jobId,
      status: 'COMPLETED',
      delayTime: 1,
      executionTime: 2,
    } as Parameters<typeof jobMetricsLine>[1])!;
    await box.cloudWatchLogs.awslogs(jobLogGroupName, `talk/agent/${task}`, [
      { atMs: at, text: metricsLine },
      { atMs: at + 1, text: 'ferry-agent: the worker exited with code 2' },
    ]);

    const out: string[] = [];
    await printLogs({
      client,
      endpoint: { id: 'talk', name: 'talk' },
      sinceMs: at,
      follow: false,
      json: false,
      pollMs: 100,
      write: (line) => out.push(line),
    });
    const shown = out.map((line) => line.replace(/^\d\d:\d\d:\d\d\.\d{3} /, ''));
    expect(shown).toEqual([
      ...printed.map((text) => `[talk worker ${task}] ${text}`),
      `[talk agent ${task}] ferry-agent: the worker exited with code 2`,
    ]);

    // The job's own lines only: the worker's JSON with the job's id is not one of them.
    const jobOut: string[] = [];
    await printLogs({
      client,
      endpoint: { id: 'talk', name: 'talk' },
      job: jobId,
      follow: false,
      json: true,
      pollMs: 100,
      write: (line) => jobOut.push(line),
    });
    const jobLines = jobOut.map((l) => JSON.parse(l) as { jobId?: string; text: string; container?: string });
    expect(jobLines.map((l) => l.text)).toEqual([
      'hello from the handler, Box',
      expect.stringContaining('and a warning for Box'),
    ]);
    expect(jobLines.every((l) => l.jobId === jobId && l.container === undefined)).toBe(true);
  });

  it('the job detail carries its logs, input and output', async () => {
    const { status, body } = await call('GET', `/manage/v1/endpoints/talk/jobs/${jobId}`);
    expect(status).toBe(200);
    expect(body).toMatchObject({
      status: 'COMPLETED',
      input: { method: 'chatty', name: 'Box' },
      output: { greeting: 'Hello, Box!' },
    });
    expect(body.logs.map((l: { text: string }) => l.text)).toContain('hello from the handler, Box');
  });
});

describe('management API through the API Lambda', () => {
  it('lists jobs newest first from DynamoDB, by status and a page at a time', async () => {
    const first = await call('GET', '/manage/v1/endpoints/talk/jobs?limit=1&status=COMPLETED');
    expect(first.status).toBe(200);
    expect(first.body.jobs).toHaveLength(1);
    const second = await call(
      'GET',
      `/manage/v1/endpoints/talk/jobs?limit=1&status=COMPLETED&cursor=${first.body.next}`,
    );
    expect(second.body.jobs[0].createdAt).toBeLessThanOrEqual(first.body.jobs[0].createdAt);
    expect(second.body.jobs[0].id).not.toBe(first.body.jobs[0].id);
    expect((await call('GET', '/manage/v1/endpoints/talk/jobs?status=FAILED')).body.jobs).toEqual([]);
  });

  it('lists endpoints with health, workers the agents mirror, and time series', async () => {
    const endpoints = await call('GET', '/manage/v1/endpoints');
    expect(endpoints.body.endpoints.map((e: { id: string }) => e.id)).toContain('talk');
    const workers = await call('GET', '/manage/v1/endpoints/talk/workers');
    expect(workers.status).toBe(200);
    expect(workers.body.workers.length).toBeGreaterThanOrEqual(1);
    const metrics = await call('GET', '/manage/v1/endpoints/talk/metrics?hours=1&step=60');
    expect(Math.round(metrics.body.jobsPerSec.reduce((a: number, b: number) => a + b, 0) * 60)).toBe(2);
  });

  it('wants a client key, and bad input is a 400', async () => {
    expect((await call('GET', '/manage/v1/endpoints', undefined, 'fy_wrong')).status).toBe(401);
    expect((await call('GET', '/manage/v1/endpoints/talk/jobs?limit=-1')).status).toBe(400);
    expect((await call('GET', '/manage/v1/endpoints/talk/logs?after=%%%')).status).toBe(400);
  });
});
