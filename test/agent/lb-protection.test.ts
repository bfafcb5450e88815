/**
 * ECS task scale-in protection of a load-balanced task (worker-image/agent/lb.ts through
 * protection.ts, the queue agent's module): on from the first request in flight, renewed before it
 * lapses while a long request runs, off once the task has been idle for `protectionOffAfterMs`, off
 * on close; a failed call to the ECS agent endpoint is logged and retried, never fatal
 * (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-scale-in-protection.html).
 *
 * Real HTTP through the agent to a stand-in worker server that holds "slow" requests until the test
 * lets them go; the ECS agent endpoint is an injected fetch that records each PUT with the fake
 * clock's time; time is a FakeClock, so the idle tail and the renewal are exact, not waited for.
 */
import { once } from 'node:events';
import { createServer, type Server, type ServerResponse } from 'node:http';
import { type AddressInfo, connect } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { hashKey } from '../../core/auth.js';
import { FakeClock } from '../../core/clock.js';
import type { ApiKeyLookup } from '../../core/ports.js';
import { type LbAgent, startLbAgent } from '../../worker-image/agent/lb.js';
import { deploymentBlockedRetryMs } from '../../worker-image/agent/protection.js';
import { eventually, memoryLog } from './helpers.js';

const apiKey = 'fy_lb-protection-key-0123456789';
const control: ApiKeyLookup = {
  findApiKeyByHash: async (hash) =>
    hash === hashKey(apiKey) ? { id: 'k1', name: 'test', hash, createdAt: 0 } : undefined,
};
const agentUri = 'http://169.254.170.2/api/task-1';
const minutes = 60;
const offAfterMs = 5 * 60_000;

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

interface Put {
  url: string;
  body: { ProtectionEnabled: boolean; ExpiresInMinutes?: number };
  /** The fake clock's time of the call. */
  atMs: number;
}

type Answer = '500' | 'throw' | 'failure' | 'blocked' | 'not json';
const taskArn = 'arn:aws:ecs:us-east-1:123456789012:task/ferry/0123456789abcdef';

/**
 * The ECS agent's task-protection endpoint: records PUTs; `answers` scripts failures first. Its
 * bodies are the ECS agent's: `{"protection": {...}}` with the state asked for, `{"failure": {...}}`
 * with HTTP 200 when UpdateTaskProtection reports a failure, `{"error": {...}}` with a 5xx
 * (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-scale-in-protection-endpoint.html).
 */
function fakeEcsAgent(clock: FakeClock, answers: Answer[] = []) {
  const puts: Put[] = [];
  const fetch = (async (url: string | URL | Request, init?: RequestInit) => {
    const body = JSON.parse(String(init?.body)) as Put['body'];
    puts.push({ url: String(url), body, atMs: clock.now() });
    const answer = answers.shift();
    if (answer === 'throw') throw new Error('connect ECONNREFUSED 169.254.170.2:80');
    if (answer === '500') {
      return new Response(`{"error":{"Arn":"${taskArn}","Code":"ServerException","Message":"boom"}}`, {
        status: 500,
      });
    }
    if (answer === 'failure') {
      // A task outside a service, among others (API_UpdateTaskProtection.html): still HTTP 200.
      const failure = { Arn: taskArn, Detail: null, Reason: 'TASK_NOT_VALID' };
      return new Response(JSON.stringify({ failure }), { status: 200 });
    }
    if (answer === 'blocked') {
      // More protected tasks than the service's desired count (task-scale-in-protection.html).
      const failure = { Arn: taskArn, Detail: null, Reason: 'DEPLOYMENT_BLOCKED' };
      return new Response(JSON.stringify({ failure }), { status: 200 });
    }
    if (answer === 'not json') return new Response('<html>gateway</html>', { status: 200 });
    const protection = {
      ExpirationDate: body.ProtectionEnabled
        ? new Date(clock.now() + (body.ExpiresInMinutes ?? 120) * 60_000).toISOString()
        : null,
      ProtectionEnabled: body.ProtectionEnabled,
      TaskArn: taskArn,
    };
    return new Response(JSON.stringify({ protection }), { status: 200 });
  }) as typeof globalThis.fetch;
  return { puts, fetch };
}

/** The worker's HTTP server: `/slow` is held until `release()`, anything else answers at once. */
async function standInWorker() {
  const held: ServerResponse[] = [];
  const server: Server = createServer((req, res) => {
    req.resume();
    if (req.url === '/slow') held.push(res);
    else res.end('fast');
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  cleanups.push(() => {
    for (const res of held.splice(0)) res.destroy();
    server.closeAllConnections();
    return new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return {
    port: (server.address() as AddressInfo).port,
    held,
    release: () => held.shift()?.end('slow done'),
  };
}

async function setup(answers: Answer[] = []) {
  const clock = new FakeClock();
  const ecs = fakeEcsAgent(clock, answers);
  const worker = await standInWorker();
  const log = memoryLog();
  const agent: LbAgent = await startLbAgent({
    endpointId: 'lbep',
    control,
    workerPort: worker.port,
    host: '127.0.0.1',
    port: 0,
    log,
    clock,
    tickMs: 1_000,
    ecs: { agentUri, fetch: ecs.fetch, protectionMinutes: minutes, protectionOffAfterMs: offAfterMs },
  });
  // Ready before the first request: until then requests are answered 503 (a worker still starting).
  expect((await fetch(`${agent.url}/ping`)).status).toBe(200);
  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    await agent.close(1_000);
  };
  cleanups.push(close);
  /** Moves time on by `ms`: one protection tick runs; resolves once the loop sleeps again. */
  const tick = async (ms: number) => {
    await eventually('the tick loop to sleep', () => (clock.pendingSleeps() === 1 ? true : undefined));
    clock.advance(ms);
    await eventually('the tick loop to sleep again', () => (clock.pendingSleeps() === 1 ? true : undefined));
  };
  const call = (path: string) =>
    fetch(`${agent.url}${path}`, { headers: { authorization: `Bearer ${apiKey}` } });
  return { clock, ecs, worker, log, agent, tick, call, close };
}

const ons = (puts: Put[]) => puts.filter((p) => p.body.ProtectionEnabled);
const offs = (puts: Put[]) => puts.filter((p) => !p.body.ProtectionEnabled);

describe('task scale-in protection of a load-balanced task', () => {
  it('asks for nothing while idle, and protects the task as its first request starts, without waiting for a tick', async () => {
    const { ecs, worker, agent, tick, call } = await setup();
    await tick(1_000);
    await tick(60_000);
    expect(ecs.puts).toEqual([]);

    const slow = call('/slow');
    await eventually('the worker to hold the request', () => (worker.held.length === 1 ? true : undefined));
    const [on] = await eventually('protection on', () => (ecs.puts.length > 0 ? ecs.puts : undefined));
    expect(on).toEqual({
      url: `${agentUri}/task-protection/v1/state`,
      body: { ProtectionEnabled: true, ExpiresInMinutes: minutes },
      atMs: expect.any(Number),
    });
    expect(agent.serving).toBe(1);

    // A second request in flight changes nothing: one protection for the task.
    const fast = await call('/fast');
    expect(fast.status).toBe(200);
    worker.release();
    expect((await slow).status).toBe(200);
    expect(ons(ecs.puts)).toHaveLength(1);
  });

  it('renews before the protection lapses while a long request runs', async () => {
    const { ecs, worker, tick, call } = await setup();
    const slow = call('/slow');
    await eventually('protection on', () => (ecs.puts.length === 1 ? true : undefined));
    const firstAt = ecs.puts[0]!.atMs;
    for (let i = 0; i < 4; i++) await tick(10 * 60_000); // 40 minutes of one request
    const renewals = await eventually('a renewal', () => (ecs.puts.length >= 2 ? ons(ecs.puts) : undefined));
    expect(renewals).toHaveLength(2);
    expect(offs(ecs.puts)).toEqual([]);
    // Renewed at half the term: after 30 minutes, well before the 60-minute protection lapses.
    expect(renewals[1]!.atMs - firstAt).toBeGreaterThanOrEqual((minutes * 60_000) / 2);
    expect(renewals[1]!.atMs - firstAt).toBeLessThan(minutes * 60_000);
    worker.release();
    expect((await slow).status).toBe(200);
  });

  it('keeps protection through the idle tail and releases it once idle for protectionOffAfterMs', async () => {
    const { clock, ecs, worker, agent, tick, call } = await setup();
    const slow = call('/slow');
    await eventually('protection on', () => (ecs.puts.length === 1 ? true : undefined));
    worker.release();
    expect((await slow).status).toBe(200);
    await eventually('the request to end', () => (agent.serving === 0 ? true : undefined));
    const endedAt = clock.now();

    await tick(offAfterMs - 60_000); // still inside the tail: the scaling policy keeps the task
    await tick(30_000);
    await tick(60_000); // now past it
    const off = await eventually('protection off', () => offs(ecs.puts)[0]);
    expect(off.url).toBe(`${agentUri}/task-protection/v1/state`);
    expect(off.body).toEqual({ ProtectionEnabled: false });
    expect(off.atMs - endedAt).toBeGreaterThanOrEqual(offAfterMs);
    expect(ons(ecs.puts)).toHaveLength(1);

    // The next request protects the task again.
    const again = call('/slow');
    await eventually('protection on again', () => (ons(ecs.puts).length === 2 ? true : undefined));
    worker.release();
    expect((await again).status).toBe(200);
  });

  it('logs a failed call and retries on the next tick; requests are served all the same', async () => {
    const { ecs, worker, log, tick, call } = await setup(['500', 'throw']);
    const slow = call('/slow');
    await eventually('the first attempt', () => (ecs.puts.length === 1 ? true : undefined));
    expect((await call('/fast')).status).toBe(200);
    await tick(1_000);
    await eventually('the second attempt', () => (ecs.puts.length === 2 ? true : undefined));
    await tick(1_000);
    await eventually('the third attempt', () => (ecs.puts.length === 3 ? true : undefined));
    expect(ons(ecs.puts)).toHaveLength(3);
    const warnings = log.lines.filter((l) => l.startsWith('warn task protection on'));
    expect(warnings[0]).toContain('HTTP 500');
    expect(warnings[1]).toContain('ECONNREFUSED');
    expect(warnings).toHaveLength(2);
    // Protected now: further ticks within the term ask nothing more.
    await tick(1_000);
    expect(ecs.puts).toHaveLength(3);
    worker.release();
    expect((await slow).status).toBe(200);
  });

  it('takes an HTTP 200 that carries a failure, or no JSON, as a failed call: logged, retried on the next tick', async () => {
    // The ECS agent answers 200 with {"failure": …} when UpdateTaskProtection reports one
    // (https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_UpdateTaskProtection.html):
    // taken as protection, the next try would wait half the term (30 minutes) unprotected.
    const { ecs, worker, log, tick, call } = await setup(['failure', 'not json']);
    const slow = call('/slow');
    await eventually('the first attempt', () => (ecs.puts.length === 1 ? true : undefined));
    await tick(1_000);
    await eventually('the second attempt', () => (ecs.puts.length === 2 ? true : undefined));
    await tick(1_000);
    await eventually('the third attempt', () => (ecs.puts.length === 3 ? true : undefined));
    expect(ons(ecs.puts)).toHaveLength(3);
    expect(ecs.puts[2]!.atMs - ecs.puts[0]!.atMs).toBe(2_000);
    const warnings = log.lines.filter((l) => l.startsWith('warn task protection on'));
    expect(warnings).toHaveLength(2);
    expect(warnings[0]).toContain('HTTP 200 with failure TASK_NOT_VALID');
    expect(warnings[0]).not.toContain(taskArn);
    expect(warnings[1]).toContain('not JSON');
    // The third answer is the ECS agent's success: protected now, nothing more within the term.
    await tick(1_000);
    await tick(10 * 60_000);
    expect(ecs.puts).toHaveLength(3);
    worker.release();
    expect((await slow).status).toBe(200);
  });

  it('DEPLOYMENT_BLOCKED: tries again every 30 s instead of every tick, and says so once', async () => {
    const { ecs, worker, log, tick, call } = await setup(['blocked', 'blocked']);
    const slow = call('/slow');
    await eventually('the first attempt', () => (ecs.puts.length === 1 ? true : undefined));
    for (let i = 0; i < 5; i++) await tick(1_000);
    expect(ecs.puts).toHaveLength(1);
    await tick(deploymentBlockedRetryMs - 5_000);
    await eventually('the second attempt', () => (ecs.puts.length === 2 ? true : undefined));
    await tick(1_000);
    expect(ecs.puts).toHaveLength(2);
    await tick(deploymentBlockedRetryMs);
    await eventually('the third attempt', () => (ecs.puts.length === 3 ? true : undefined));
    expect(ons(ecs.puts)).toHaveLength(3);
    const warnings = log.lines.filter((l) => l.startsWith('warn task protection on'));
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain('DEPLOYMENT_BLOCKED');
    expect(warnings[0]).toContain('more protected tasks than its desired count');
    // The third answer is a success: protected, and nothing more within the term.
    await tick(10 * 60_000);
    expect(ecs.puts).toHaveLength(3);
    worker.release();
    expect((await slow).status).toBe(200);
  });

  it('retire (a deploy replaced the task definition): protection goes off and stays off, requests still served', async () => {
    const { ecs, worker, agent, tick, call } = await setup();
    const slow = call('/slow');
    await eventually('the worker to hold the request', () => (worker.held.length === 1 ? true : undefined));
    await eventually('protection on', () => (ons(ecs.puts).length === 1 ? true : undefined));

    agent.retire('a deploy replaced this task definition');
    await eventually('protection off', () => (offs(ecs.puts).length === 1 ? true : undefined));
    // Busy again and again: never protected again, and the request in flight still ends well.
    const another = call('/slow');
    await eventually('the worker to hold both', () => (worker.held.length === 2 ? true : undefined));
    await tick(60_000);
    await tick(31 * 60_000);
    worker.release();
    worker.release();
    expect((await slow).status).toBe(200);
    expect((await another).status).toBe(200);
    expect((await call('/fast')).status).toBe(200);
    await tick(1_000);
    expect(ons(ecs.puts)).toHaveLength(1);
    expect(offs(ecs.puts)).toHaveLength(1);
  });

  it('keeps an idle connection open past Node’s 5 s default when told the ALB’s idle timeout', async () => {
    // "configure the idle timeout of your application to be larger than the idle timeout configured
    // for the load balancer", else the ALB reuses a closing connection and answers 502
    // (https://docs.aws.amazon.com/elasticloadbalancing/latest/application/edit-load-balancer-attributes.html).
    const worker = await standInWorker();
    const agent = await startLbAgent({
      endpointId: 'lbep',
      control,
      workerPort: worker.port,
      host: '127.0.0.1',
      port: 0,
      log: memoryLog(),
      upstreamIdleMs: 1_000,
    });
    cleanups.push(() => agent.close(1_000));
    expect((await fetch(`${agent.url}/ping`)).status).toBe(200);
    const { port } = new URL(agent.url);
    const socket = connect(Number(port), '127.0.0.1');
    cleanups.push(() => void socket.destroy());
    let answer = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => {
      answer += chunk;
    });
    let closedAt: number | undefined;
    socket.on('close', () => {
      closedAt = Date.now();
    });
    await once(socket, 'connect');
    // Before the request leaves: the agent arms its idle timer once it has answered, so later than
    // this however slow the machine (a time taken when the answer arrives could be late instead).
    const askedAt = Date.now();
    socket.write(`GET /fast HTTP/1.1\r\nHost: alb\r\nAuthorization: Bearer ${apiKey}\r\n\r\n`);
    await eventually('the answer', () => (answer.includes('fast') ? true : undefined));
    // What it tells the ALB: the server's own keep-alive limit (10 s, applyServerLimits) would say 10.
    expect(answer).toMatch(/\r\nKeep-Alive: timeout=6\r\n/i);
    await eventually(
      'the agent to close it after the ALB’s idle timeout and 5 s',
      () => (closedAt !== undefined ? true : undefined),
      15_000,
    );
    // It closes 6 s after answering (1 s + 5 s), so at least 6 s after the request left, where
    // Node's default is 5 s. The 100 ms margin is for timers and Date.now() counting whole ms.
    expect(closedAt! - askedAt, 'closed by Node’s default 5 s').toBeGreaterThanOrEqual(5_900);
  }, 20_000);

  it('releases protection when the agent closes (SIGTERM) after its requests end', async () => {
    const { ecs, worker, agent, call, close } = await setup();
    const slow = call('/slow');
    await eventually('protection on', () => (ecs.puts.length === 1 ? true : undefined));
    const closing = close();
    worker.release();
    expect((await slow).status).toBe(200);
    await closing;
    expect(agent.serving).toBe(0);
    expect(offs(ecs.puts)).toHaveLength(1);
    expect(ecs.puts.at(-1)!.body).toEqual({ ProtectionEnabled: false });
  });
});
