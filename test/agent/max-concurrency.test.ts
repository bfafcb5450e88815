/**
 * max_concurrency through the queue agent, with a real Python worker on DynamoDB Local + fauxqs: a
 * worker whose own concurrency is above the endpoint's (here the ferry runtime told 8, as a RunPod-SDK
 * worker's concurrency_modifier may say anything) asks job-take-batch for 8 and is handed at most the
 * endpoint's 2 at once (FERRY_MAX_CONCURRENCY, core/engine.ts take), yet runs every job to its end.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AwsFixture, startAwsFixture } from '../support/emulators.js';
import {
  agentOn,
  apiEngine,
  completeNaps,
  memoryLog,
  type PythonWorker,
  startPythonWorker,
  watchAgentApi,
} from './helpers.js';

const endpointId = `cap-${randomUUID().slice(0, 8)}`;
const log = memoryLog();
/** After each job-take(-batch) the agent answered: the jobs it handed out, and what the worker then held. */
const takes: { handed: number; held: number }[] = [];
let aws: AwsFixture;
let agentHandle: Awaited<ReturnType<typeof agentOn>>;
let api: ReturnType<typeof apiEngine>;
let worker: PythonWorker;

beforeAll(async () => {
  aws = await startAwsFixture();
  agentHandle = await agentOn(aws, endpointId, { log, maxConcurrency: 2 });
  const agent = agentHandle.agent;
  watchAgentApi(agent, (req, response) => {
    if ((req.path.split('/')[3] ?? '').startsWith('job-take')) {
      const body = response.body;
      const handed = response.statusCode === 200 ? (Array.isArray(body) ? body.length : 1) : 0;
      takes.push({ handed, held: agent.held().length });
    }
  });
  api = apiEngine(aws);
  worker = startPythonWorker(agent, 'Fixture', { env: { FERRY_MAX_CONCURRENCY: '8' } });
});

afterAll(async () => {
  await worker?.stop();
  await agentHandle?.close();
  api?.close();
  await aws?.stop();
});

describe("the endpoint's max_concurrency on AWS", () => {
  it('a worker asking for 8 holds at most 2 at once, and every job completes', async () => {
    const jobs = await completeNaps(
      api,
      endpointId,
      6,
      0.3,
      () => `${log.lines.join('\n')}\n${worker.output.join('')}`,
    );
    const handedOut = takes.filter((take) => take.handed > 0);
    expect(handedOut.reduce((sum, take) => sum + take.handed, 0)).toBe(jobs.length);
    expect(Math.max(...handedOut.map((take) => take.held))).toBeLessThanOrEqual(2);
    expect(Math.max(...handedOut.map((take) => take.handed))).toBeLessThanOrEqual(2);
  });
});
