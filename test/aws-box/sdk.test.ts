/**
 * The runpod-sdk suite (test/api/sdk.suite.ts) against AWS in a box: client → API Gateway shim →
 * authorizer and api Lambda handlers → DynamoDB Local + fauxqs, and a protocol worker on the
 * endpoint's agent sidecar (worker-image/agent).
 */
import { runSdkSuite } from '../api/sdk.suite.js';
import { ProtocolWorker } from '../support/protocolWorker.js';
import { boxApiKey, startAwsBox } from './box.js';

runSdkSuite('runpod-sdk against AWS in a box', async () => {
  // A short cap so the suite's slow runSync crosses it: the SDK must keep polling (wire compatible).
  const box = await startAwsBox({ maxWaitMs: 1_000 });
  await box.addEndpoint('echo');
  const agent = await box.agentFor('echo');
  let worker: { stop(): Promise<void> } | undefined;
  return {
    baseUrl: box.baseUrl,
    apiKey: boxApiKey,
    endpointId: 'echo',
    startWorker() {
      worker = new ProtocolWorker(agent.url, 'echo', agent.workerToken, agent.workerId).serve();
    },
    async stopWorker() {
      await worker?.stop();
      worker = undefined;
    },
    stop: () => box.stop(),
  };
});
