/**
 * job-done-batch through the queue agent, with a real Python worker running 8 jobs at once on
 * DynamoDB Local + fauxqs: results that finish together reach the agent in one request, each job
 * ends with its own output, and the agent's job metrics name each job once (as with job-done).
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AwsFixture, startAwsFixture } from '../support/emulators.js';
import {
  agentOn,
  apiEngine,
  completeNaps,
  eventually,
  memoryLog,
  type PythonWorker,
  startPythonWorker,
  watchAgentApi,
} from './helpers.js';

const endpointId = `batch-${randomUUID().slice(0, 8)}`;
const log = memoryLog();
const metrics: string[] = [];
const routes: string[] = [];
let aws: AwsFixture;
let agentHandle: Awaited<ReturnType<typeof agentOn>>;
let api: ReturnType<typeof apiEngine>;
let worker: PythonWorker;

beforeAll(async () => {
  aws = await startAwsFixture();
  agentHandle = await agentOn(aws, endpointId, { log, metricsOut: (line) => metrics.push(line) });
  // Which worker routes the agent served.
  watchAgentApi(agentHandle.agent, (req) => routes.push(req.path.split('/')[3] ?? ''));
  api = apiEngine(aws);
  worker = startPythonWorker(agentHandle.agent, 'Fixture', { env: { FERRY_MAX_CONCURRENCY: '8' } });
});

afterAll(async () => {
  await worker?.stop();
  await agentHandle?.close();
  api?.close();
  await aws?.stop();
});

describe('job-done-batch through the agent', () => {
  it('hands the worker the batch route beside job-done', () => {
    const env = agentHandle.agent.workerEnv();
    expect(env.FERRY_WEBHOOK_POST_OUTPUT_BATCH).toBe(
      `${agentHandle.agent.url}/v2/${endpointId}/job-done-batch/${agentHandle.agent.workerId}?agent=1`,
    );
  });

  it('ends every job with its own output, in fewer requests than jobs, one metrics line each', async () => {
    const jobs = await completeNaps(
      api,
      endpointId,
      8,
      0.2,
      () => `${log.lines.join('\n')}\n${worker.output.join('')}`,
    );
    const done = routes.filter((route) => route.startsWith('job-done'));
    expect(done).toContain('job-done-batch');
    expect(done.length).toBeLessThan(jobs.length);
    const ended = await eventually('a metrics line per job', () =>
      metrics.length >= jobs.length ? metrics.map((line) => JSON.parse(line).jobId) : undefined,
    );
    expect(ended.sort()).toEqual(jobs.map((job) => job.id).sort());
  });
});
