/** The worker supervisor contract on the local pool: real Python worker processes. */
import { resolve } from 'node:path';
import { scanProject } from '../../cli/build/scan.js';
import { recordFor } from '../support/endpoints.js';
import { call, startTestPlatform } from '../support/platform.js';
import { describeSupervisorContract } from './supervisor.contract.js';

const projectDir = resolve('test/agent/fixtures');
const maxAttempts = 2;

describeSupervisorContract('local pool', async () => {
  const platform = await startTestPlatform({
    workerWaitMs: 2_000,
    settings: { maxAttempts },
    supervisor: { backoffBaseMs: 100, backoffMaxMs: 500 },
    workers: {
      ferryPythonPath: resolve('worker-image/python'),
      tickMs: 100,
      stopGraceMs: 1_000,
      drainMs: 2_000,
      reconcileIntervalMs: 300,
    },
  });
  const { endpoints } = await scanProject({ projectDir });
  const endpoint = endpoints.find((e) => e.name === 'agent-fixture')!;
  await platform.db.control.putEndpoint(recordFor(endpoint, projectDir, 'fixture'));
  await platform.addEndpoint('other');
  await platform.workers!.reconcile();
  const base = platform.baseUrl;
  return {
    maxAttempts,
    async submit(input) {
      return (await call(base, 'POST', '/fixture/run', { input })).body.id;
    },
    async final(jobId) {
      return (await call(base, 'POST', `/fixture/status-sync/${jobId}?wait=30000`)).body;
    },
    async status(jobId) {
      return (await call(base, 'GET', `/fixture/status/${jobId}`)).body;
    },
    // The pool restarts workers by itself.
    async afterExit() {},
    async liveWorker() {
      const own = platform.adoptWorker('fixture');
      return {
        base: `${base}/fixture`,
        workerId: own.workerId,
        token: own.token,
        otherToken: platform.adoptWorker('other').token,
      };
    },
    close: () => platform.stop(),
  };
});
