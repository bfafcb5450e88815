/**
 * The worker supervisor contract through the AWS agent on DynamoDB Local + fauxqs. The harness plays
 * ECS: a task is an agent and its Python worker; when the agent leaves, a new task starts.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, expect } from 'vitest';
import type { Agent } from '../../worker-image/agent/agent.js';
import { agentOn, apiEngine, memoryLog, startPythonWorker } from '../agent/helpers.js';
import { type AwsFixture, startAwsFixture } from '../support/emulators.js';
import { describeSupervisorContract } from './supervisor.contract.js';

const maxAttempts = 2;
let aws: AwsFixture;

beforeAll(async () => {
  aws = await startAwsFixture();
});
afterAll(async () => {
  await aws?.stop();
});

describeSupervisorContract('aws agent', async () => {
  const endpointId = `contract-${randomUUID().slice(0, 8)}`;
  const api = apiEngine(aws);
  const tasks: { agent: Agent; stop(): Promise<void> }[] = [];
  const startTask = async () => {
    const handle = await agentOn(aws, endpointId, {
      log: memoryLog(),
      maxAttempts,
      exit: () => {},
    });
    const worker = startPythonWorker(handle.agent, 'Fixture', { reportExit: true });
    const task = {
      agent: handle.agent,
      async stop() {
        await handle.agent.drain();
        await worker.stop();
        await handle.close();
      },
    };
    tasks.push(task);
    return task;
  };
  let current = await startTask();
  const other = await agentOn(aws, `contract-other-${randomUUID().slice(0, 8)}`, { log: memoryLog() });
  return {
    maxAttempts,
    submit: async (input) => (await api.engine.submit(endpointId, { input }, { sync: false })).id,
    final: (jobId) => api.engine.statusSync(endpointId, jobId, 30_000),
    status: (jobId) => api.engine.status(endpointId, jobId),
    async afterExit(code) {
      // The agent leaves with the code ECS would see; the service then starts a fresh task.
      expect(await current.agent.leaving).toBe(code);
      await current.stop();
      current = await startTask();
    },
    async liveWorker() {
      return {
        base: `${current.agent.url}/v2/${endpointId}`,
        workerId: current.agent.workerId,
        token: current.agent.workerToken,
        otherToken: other.agent.workerToken,
      };
    },
    async close() {
      for (const task of tasks) await task.stop().catch(() => {});
      await other.close();
      api.close();
    },
  };
});
