/**
 * The worker supervisor's contract, run against both actuators (docs/workers.md): the local pool
 * (real `python -m ferry.worker` processes) and the AWS agent on DynamoDB Local + fauxqs (the test
 * plays ECS, starting tasks). Both run the fixture class of test/agent/fixtures/agent_app.py.
 */
import { describe, expect, it } from 'vitest';
import type { JobView } from '../../core/job.js';

export interface SupervisorHarness {
  maxAttempts: number;
  submit(input: Record<string, unknown>): Promise<string>;
  final(jobId: string): Promise<JobView>;
  status(jobId: string): Promise<JobView>;
  /**
   * What follows a worker's exit with `code` on this provider: locally the pool restarts it by
   * itself; on ECS the task leaves with that code and the service starts a new one.
   */
  afterExit(code: number): Promise<void>;
  /** A live worker of the endpoint (its route base, id and token) and another endpoint's token. */
  liveWorker(): Promise<{ base: string; workerId: string; token: string; otherToken: string }>;
  close(): Promise<void>;
}

export function describeSupervisorContract(name: string, setup: () => Promise<SupervisorHarness>): void {
  describe(`worker supervisor contract: ${name}`, () => {
    it('a worker that dies mid-job: its job goes back at once and ends FAILED after maxAttempts, naming the exit', async () => {
      const h = await setup();
      try {
        const jobId = await h.submit({ method: 'crash' });
        for (let attempt = 1; attempt <= h.maxAttempts; attempt++) await h.afterExit(1);
        const view = await h.final(jobId);
        expect(view.status).toBe('FAILED');
        expect(view.error).toMatch(/exited \(code 9\)/);
        expect(view.error).toMatch(new RegExp(`tried ${h.maxAttempts} times`));
      } finally {
        await h.close();
      }
    });

    it('refresh_worker: the output is intact and the next job runs on another worker id', async () => {
      const h = await setup();
      try {
        const first = await h.final(await h.submit({ method: 'fresh', value: { keep: [1, 'two'] } }));
        expect(first.status).toBe('COMPLETED');
        expect(first.output).toMatchObject({ value: { keep: [1, 'two'] } });
        expect(first.output).not.toHaveProperty('refresh_worker');
        await h.afterExit(0);
        const second = await h.final(await h.submit({ method: 'echo', text: 'next' }));
        expect(second).toMatchObject({ status: 'COMPLETED', output: { echo: 'next' } });
        expect(second.workerId).toBeDefined();
        expect(second.workerId).not.toBe(first.workerId);
      } finally {
        await h.close();
      }
    });

    it('worker routes refuse a forged worker id, another endpoint’s token and no key; nothing changes', async () => {
      const h = await setup();
      try {
        const live = await h.liveWorker();
        const jobId = await h.submit({ method: 'nap', seconds: 30 });
        await expectRefused(`${live.base}/job-take/forged-worker`, live.token, 403);
        await expectRefused(`${live.base}/ping/forged-worker?job_id=${jobId}`, live.token, 403);
        await expectRefused(`${live.base}/job-take/${live.workerId}`, live.otherToken, [401, 403]);
        await expectRefused(`${live.base}/job-take/${live.workerId}`, undefined, 401);
        const view = await h.status(jobId);
        expect(['IN_QUEUE', 'IN_PROGRESS']).toContain(view.status);
        if (view.status === 'IN_PROGRESS') expect(view.workerId).not.toBe('forged-worker');
      } finally {
        await h.close();
      }
    });
  });
}

async function expectRefused(url: string, authorization: string | undefined, expected: number | number[]) {
  const response = await fetch(url, { headers: authorization === undefined ? {} : { authorization } });
  const body = (await response.json()) as { error?: unknown };
  expect([expected].flat(), url).toContain(response.status);
  expect(typeof body.error).toBe('string');
}
