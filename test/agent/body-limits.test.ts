/**
 * Request bodies on the queue agent (worker-image/agent/agent.ts, http.ts), on DynamoDB Local +
 * fauxqs, by the rule the local front door follows too (core/request-body.ts, docs/security.md):
 *
 * - job-done over limits.jobDoneBodyBytes fails its job at once with the size (400), read through
 *   and dropped, instead of a 413 that left the job running until its lease lapsed, three times;
 * - a request without a known worker token is answered 401 before one byte of its body is read, and
 *   its connection closed: anything on the Docker bridge can reach the agent's port;
 * - past overLimitReadBytes even the worker's own body is not read: 413 at once, connection closed;
 * - Node's header/request/idle timeouts and the connection cap are the local front door's.
 */
import { randomUUID } from 'node:crypto';
import type { Server } from 'node:http';
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { limits, overLimitReadBytes } from '../../core/limits.js';
import { startupFailureRoute } from '../../worker-image/agent/protocol.js';
import { type AwsFixture, startAwsFixture } from '../support/emulators.js';
import { agentOn, apiEngine, memoryLog } from './helpers.js';

const endpointId = `body-${randomUUID().slice(0, 8)}`;
const log = memoryLog();
let aws: AwsFixture;
let agentHandle: Awaited<ReturnType<typeof agentOn>>;
let api: ReturnType<typeof apiEngine>;

beforeAll(async () => {
  aws = await startAwsFixture();
  agentHandle = await agentOn(aws, endpointId, { log });
  api = apiEngine(aws);
});

afterAll(async () => {
  await agentHandle?.close();
  api?.close();
  await aws?.stop();
});

const base = () => `${agentHandle.agent.url}/v2/${endpointId}`;
const worker = () => encodeURIComponent(agentHandle.agent.workerId);

/**
 * Sends a request's line and headers only, never a byte of the body its Content-Length announces,
 * and waits for the answer and the server closing the connection. An answer at all proves the
 * server did not wait for the body; `timeoutMs` fails a server that does.
 */
function headersOnly(
  path: string,
  headers: Record<string, string>,
  timeoutMs = 5_000,
): Promise<{ status: number; head: string; body: string }> {
  const url = new URL(agentHandle.agent.url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(url.port), url.hostname);
    let received = '';
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no answer within ${timeoutMs} ms: the server waits for the body (${path})`));
    }, timeoutMs);
    socket.setEncoding('utf8');
    socket.on('data', (data: string) => {
      received += data;
    });
    socket.on('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
    socket.on('end', () => {
      clearTimeout(timer);
      socket.destroy();
      const [head = '', body = ''] = received.split('\r\n\r\n');
      resolve({ status: Number(head.split(' ')[1]), head: head.toLowerCase(), body });
    });
    const lines = Object.entries({ host: url.host, ...headers }).map(([k, v]) => `${k}: ${v}`);
    socket.write(`POST ${path} HTTP/1.1\r\n${lines.join('\r\n')}\r\n\r\n`);
  });
}

/** A job-done body of `bytes` bytes, JSON as the RunPod SDK posts it. */
function resultOf(bytes: number): string {
  const wrapper = '{"output":""}';
  return `{"output":"${'x'.repeat(bytes - wrapper.length)}"}`;
}

describe('request bodies on the queue agent', () => {
  it('fails a job whose job-done is over the limit at once: 400 with the size, nothing held', async () => {
    const job = await api.engine.submit(endpointId, { input: { n: 1 } }, { sync: false });
    const headers = { authorization: agentHandle.agent.workerToken };
    const taken = await fetch(`${base()}/job-take/${worker()}?agent=1`, { headers });
    expect(taken.status, log.lines.join('\n')).toBe(200);
    expect(((await taken.json()) as { id: string }).id).toBe(job.id);
    expect(agentHandle.agent.held()).toEqual([job.id]);

    const size = 22 * 1024 * 1024;
    const done = await fetch(`${base()}/job-done/${worker()}/${job.id}?agent=1`, {
      method: 'POST',
      headers: { ...headers, 'content-type': 'application/x-www-form-urlencoded' },
      body: resultOf(size),
    });
    expect(done.status, log.lines.join('\n')).toBe(400);
    const answer = (await done.json()) as { error: string };
    expect(answer.error).toContain(`${size} bytes`);
    expect(answer.error).toContain(`${limits.jobDoneBodyBytes}-byte limit`);

    const view = await api.engine.status(endpointId, job.id);
    expect(view.status).toBe('FAILED');
    expect(String(view.error)).toContain(`Result of ${size} bytes`);
    expect(agentHandle.agent.held()).toEqual([]);
  });

  it('still takes a job-done within the limit', async () => {
    const job = await api.engine.submit(endpointId, { input: { n: 2 } }, { sync: false });
    const headers = { authorization: agentHandle.agent.workerToken };
    const taken = await fetch(`${base()}/job-take/${worker()}?agent=1`, { headers });
    expect(((await taken.json()) as { id: string }).id).toBe(job.id);
    const done = await fetch(`${base()}/job-done/${worker()}/${job.id}?agent=1`, {
      method: 'POST',
      headers,
      // (fauxqs's S3 refuses a result near the limit; the size check is the same either way.)
      body: resultOf(100_000),
    });
    expect(done.status, log.lines.join('\n')).toBe(200);
    expect((await api.engine.status(endpointId, job.id)).status).toBe('COMPLETED');
    expect(agentHandle.agent.held()).toEqual([]);
  });

  it('answers 401 to large bodies without a known worker token before reading them, and closes', async () => {
    const size = String(20 * 1024 * 1024);
    const callers: Record<string, string>[] = [{}, { authorization: 'fyw_not-this-task-0123456789' }];
    const answers = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        headersOnly(
          i % 2 === 0
            ? `/v2/${endpointId}/job-done/${worker()}/job-${i}?agent=1`
            : `/v2/${endpointId}/job-stream/${worker()}/job-${i}?agent=1`,
          { 'content-length': size, 'content-type': 'application/json', ...callers[i % 2] },
        ),
      ),
    );
    for (const answer of answers) {
      expect(answer.status).toBe(401);
      expect(answer.head).toContain('connection: close');
      expect(JSON.parse(answer.body)).toEqual({ error: 'Missing or invalid API key' });
    }
    // The startup-failure route checks the token first too.
    const startup = await headersOnly(`/v2/${endpointId}/${startupFailureRoute}/${worker()}`, {
      'content-length': size,
    });
    expect(startup.status).toBe(401);
  });

  it("cuts even the worker's own body past overLimitReadBytes: 413 at once, connection closed", async () => {
    const answer = await headersOnly(`/v2/${endpointId}/job-done/${worker()}/some-job?agent=1`, {
      authorization: agentHandle.agent.workerToken,
      'content-length': String(overLimitReadBytes + 1),
    });
    expect(answer.status).toBe(413);
    expect(answer.head).toContain('connection: close');
  });

  it("sets the local front door's timeouts and connection cap", () => {
    const server = (agentHandle.agent as unknown as { server: Server }).server;
    expect(server.headersTimeout).toBe(limits.headersTimeoutMs);
    expect(server.requestTimeout).toBe(limits.requestTimeoutMs);
    expect(server.keepAliveTimeout).toBe(limits.keepAliveTimeoutMs);
    expect(server.timeout).toBe(limits.socketIdleTimeoutMs);
    expect(server.maxConnections).toBe(limits.maxConnections);
  });
});
