/**
 * The queue agent's job metrics (core/metrics.ts jobMetricsLine, the dashboard's JobsEnded) count each
 * job once, on DynamoDB Local + fauxqs. A progress update (job-done with status IN_PROGRESS) is
 * answered 200 like a result; the agent reads the job's status after answering, so when the final
 * job-done lands in between, that read finds the job ended. Counting progress updates as endings made
 * that one job two lines. Here the race is forced, not waited for: the status read that follows the
 * progress update is held until the final job-done has been answered.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { JobEngine } from '../../core/engine.js';
import { type AwsFixture, startAwsFixture } from '../support/emulators.js';
import { agentOn, apiEngine, eventually, memoryLog } from './helpers.js';

const endpointId = `metrics-${randomUUID().slice(0, 8)}`;
const log = memoryLog();
const metrics: string[] = [];
let aws: AwsFixture;
let agentHandle: Awaited<ReturnType<typeof agentOn>>;
let api: ReturnType<typeof apiEngine>;

beforeAll(async () => {
  aws = await startAwsFixture();
  agentHandle = await agentOn(aws, endpointId, { log, metricsOut: (line) => metrics.push(line) });
  api = apiEngine(aws);
});

afterAll(async () => {
  await agentHandle?.close();
  api?.close();
  await aws?.stop();
});

describe('job metrics through the agent', () => {
  it('counts a job once when a progress update races its final job-done', async () => {
    // The agent's engine is private; the test wraps its one status method to hold every read until
    // the final job-done has been answered, and to know when each read it started has finished.
    const engine = (agentHandle.agent as unknown as { engine: JobEngine }).engine;
    const status = engine.status.bind(engine);
    let finalAnswered!: () => void;
    const gate = new Promise<void>((resolve) => {
      finalAnswered = resolve;
    });
    const reads: Promise<unknown>[] = [];
    engine.status = (...args: Parameters<JobEngine['status']>) => {
      const read = gate.then(() => status(...args));
      reads.push(read.catch(() => undefined));
      return read;
    };

    const job = await api.engine.submit(endpointId, { input: { n: 1 } }, { sync: false });
    const base = `${agentHandle.agent.url}/v2/${endpointId}`;
    const worker = encodeURIComponent(agentHandle.agent.workerId);
    const headers = { authorization: agentHandle.agent.workerToken, 'content-type': 'application/json' };
    const taken = await fetch(`${base}/job-take/${worker}?agent=1`, { headers });
    expect(taken.status, log.lines.join('\n')).toBe(200);
    expect(((await taken.json()) as { id: string }).id).toBe(job.id);

    const post = (body: unknown) =>
      fetch(`${base}/job-done/${worker}/${job.id}?agent=1`, {
        method: 'POST',
        headers,
        body: JSON.stringify(body),
      });
    const progress = await post({ status: 'IN_PROGRESS', output: { step: 1 } });
    expect(progress.status, log.lines.join('\n')).toBe(200);
    expect(((await progress.json()) as { status: string }).status).toBe('IN_PROGRESS');
    const final = await post({ output: { done: true } });
    expect(final.status, log.lines.join('\n')).toBe(200);
    expect(((await final.json()) as { status: string }).status).toBe('COMPLETED');
    finalAnswered();

    // Every status read the two answers started has finished, so every line they write is written.
    await eventually('the final job-done’s metrics line', () => (metrics.length > 0 ? true : undefined));
    await Promise.all(reads);
    const lines = metrics.map((line) => JSON.parse(line) as { jobId: string; status: string });
    expect(lines, log.lines.join('\n')).toEqual([
      expect.objectContaining({ jobId: job.id, status: 'COMPLETED' }),
    ]);
    engine.status = status;
  });
});
