/**
 * The real `runpod-sdk` npm client against the embedded platform on loopback, with a worker that
 * completes jobs through the worker protocol over HTTP (the suite itself is in sdk.suite.ts).
 */
import { startTestPlatform, testApiKey } from '../support/platform.js';
import { runSdkSuite } from './sdk.suite.js';

runSdkSuite('runpod-sdk against the embedded platform', async () => {
  const platform = await startTestPlatform();
  await platform.addEndpoint('echo');
  let worker: { stop(): Promise<void> } | undefined;
  return {
    baseUrl: platform.baseUrl,
    apiKey: testApiKey,
    endpointId: 'echo',
    startWorker() {
      worker = platform.protocolWorker('echo').serve();
    },
    async stopWorker() {
      await worker?.stop();
      worker = undefined;
    },
    stop: () => platform.stop(),
  };
});
