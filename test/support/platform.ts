/**
 * Starts the embedded platform for a test: a temp state folder, a free loopback port, one queue
 * endpoint and a client API key. `stop()` closes the server and removes the folder.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type LocalPlatformOptions, startLocalPlatform } from '../../core/adapters/local/platform.js';
import type { EndpointRecord } from '../../core/ports.js';
import { ProtocolWorker } from './protocolWorker.js';

export const testApiKey = 'fy_test_key_for_loopback_only';

export async function startTestPlatform(options: Partial<LocalPlatformOptions> = {}) {
  const dataDir = options.dataDir ?? mkdtempSync(join(tmpdir(), 'ferry-test-'));
  const platform = await startLocalPlatform({
    port: 0,
    apiKey: testApiKey,
    workerWaitMs: 2_000,
    ...options,
    dataDir,
  });
  /**
   * A queue endpoint whose workers the test plays (protocolWorker). Its record is no configuration a
   * pool can run: on a platform started with `workers`, the pools' reconcile marks it failing and
   * fails its queued jobs, racing the test's takes; use a platform without pools for it.
   */
  const addEndpoint = async (id: string, config: Record<string, unknown> = {}) => {
    const record: EndpointRecord = {
      id,
      app: 'test',
      env: 'production',
      name: id,
      kind: 'queue',
      config,
      fingerprint: 'test',
      createdAt: Date.now(),
      updatedAt: Date.now(),
    };
    await platform.db.control.putEndpoint(record);
    return record;
  };
  return {
    ...platform,
    /** A protocol-speaking test worker with its own identity, issued by the platform's supervisor. */
    protocolWorker(endpointId: string, workerId?: string) {
      const identity = platform.adoptWorker(endpointId, workerId);
      return new ProtocolWorker(platform.url, endpointId, identity.token, identity.workerId);
    },
    dataDir,
    baseUrl: `${platform.url}/v2`,
    addEndpoint,
    async stop(removeData = true) {
      await platform.close();
      if (removeData && !options.dataDir) rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

export type TestPlatform = Awaited<ReturnType<typeof startTestPlatform>>;

/** A client call with the test key; returns the status and the parsed body. */
export async function call(
  baseUrl: string,
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: any }> {
  const response = await fetch(`${baseUrl}${path}`, {
    method,
    headers: { authorization: `Bearer ${testApiKey}`, 'content-type': 'application/json', ...headers },
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, body: text.length > 0 ? JSON.parse(text) : undefined };
}
