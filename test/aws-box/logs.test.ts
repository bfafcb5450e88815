/**
 * Job logs and the management API on AWS in a box: a real Python worker's print() lines go through
 * the agent's job-log route into CloudWatch Logs (in memory, reached through the AWS SDK's commands),
 * one JSON event per line with the job id as a field; `ferry logs --job` (printLogs over the
 * management API of the API Lambda, behind the API Gateway shim and its authorizer) prints them.
 * Job lists come from DynamoDB Local through the byEndpointStatus index.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { printLogs } from '../../cli/commands/logs.js';
import { ManageClient } from '../../cli/manage-client.js';
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
