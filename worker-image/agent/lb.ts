/**
 * The agent of a load-balanced endpoint (FERRY_AGENT_MODE=lb): the one door between the ALB and the
 * worker's own HTTP server. Every deployed endpoint needs the account API key (docs/api.md#authentication), and the
 * user's routes know nothing about keys, so the agent checks them and proxies the rest unchanged.
 *
 *   ALB :80 ──▶ agent :FERRY_AGENT_PORT ──┬─ GET /ping   answered here: 200 while the worker's /ping is
 *                                         │              200, else 503 (the ALB's health check; no key)
 *                                         ├─ no valid key  401 {"error": …}
 *                                         ├─ key scoped to another app/env  403 {"error": …}
 *                                         └─ anything else ─▶ worker 127.0.0.1:FERRY_PORT (same method,
 *                                                              path, query, body; Authorization removed)
 *
 * Keys are checked like the API's authorizer does: sha256 of `Bearer <key>` or the bare key, looked up
 * as `KEY#<hash>` in the control table (core/auth.ts KeyAuthenticator), the answer cached per hash for
 * `keyCacheMs` so a busy endpoint does not read DynamoDB on every request. A lookup that fails (throttled
 * table, missing permission) answers 503 and is logged: fail closed, never let a request through.
 *
 * The client's Authorization header is not forwarded: user code must never see the account key.
 * Every request to the worker, /ping included, carries the task's secret (`workerSecret`, from the
 * file the init container wrote, FERRY_LB_SECRET_FILE) in lbSecretHeader: the worker's port is open
 * on the host's Docker bridge, where another task's code could reach it, and the ferry runtime answers
 * only requests that carry it (ferry/lb.py). A client's own value for that header is replaced.
 *
 * Scaling (docs/scaling.md): with a `registry`, the agent records its task as a worker of the endpoint
 * in the workers table — requests in flight and when it last served one — written when it turns busy
 * or idle and refreshed every `reportEveryMs`. The scaler Lambda reads that to keep a serving task
 * and to let an idle one go after idle_timeout. The ALB's own metrics could not tell: they are
 * per minute, per load balancer, and absent while no request flows.
 *
 * Task scale-in protection (protection.ts, the queue agent's module): when the scaler lowers the
 * service's desiredCount, ECS picks which tasks stop, and the ALB's deregistration delay (30 s) would
 * cut a longer request short. With `ecs`, the agent protects its task from its first request in
 * flight until it has been idle for `protectionOffAfterMs` (the endpoint's idle_timeout on ECS, the
 * time the scaling policy keeps an idle task), renewing the protection while requests keep coming;
 * ECS never stops a protected task for a lower desiredCount
 * (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-scale-in-protection.html).
 *
 * Failed starts (docs/aws.md#failing-endpoints): a worker whose server never answers its /ping before
 * it exits is a failed start, counted on the endpoint (`starts`, the control table's STARTS# item)
 * by the same worker supervisor rule as queue workers (core/supervisor.ts). The agent probes the
 * worker's /ping every `readyProbeMs` until it first answers 200 (contact), and hears of the worker
 * container's exit from main.ts (ecsWorker.ts); at the supervisor's maxFailedStarts the endpoint is
 * failing and the scaler keeps it at 0 tasks until the next deploy, instead of a broken image
 * crash-looping GPU instances.
 */

import { randomBytes, randomUUID } from 'node:crypto';
import {
  createServer,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type OutgoingHttpHeaders,
  request,
  type ServerResponse,
} from 'node:http';
import {
  credentialOf,
  describeScope,
  KeyAuthenticator,
  type KeyScope,
  lbSecretHeader,
  scopeCovers,
} from '../../core/auth.js';
import { systemClock } from '../../core/clock.js';
import { FerryError, messageOf, toHttpResponse } from '../../core/errors.js';
import { limits } from '../../core/limits.js';
import type { Logger } from '../../core/log.js';
import type { ApiKeyLookup, Clock, StartFailureRecord, WorkerRegistry } from '../../core/ports.js';
import {
  applyServerLimits,
  hasBody,
  nodeServerOptions,
  overLimitMessage,
  readLimitedBody,
} from '../../core/request-body.js';
import { type StartGrace, WorkerSupervisor } from '../../core/supervisor.js';
import type { WorkerExit } from './ecsWorker.js';
import { listen } from './listen.js';
import { agentLog } from './log.js';
import { type EcsProtectionOptions, TaskProtection } from './protection.js';
import { tickEvery } from './ticker.js';

export interface LbAgentOptions {
  endpointId: string;
  /** The endpoint's name (FERRY_ENDPOINT): what the supervisor's log lines call it; absent: its id. */
  endpointName?: string;
  /**
   * The endpoint's app and environment (FERRY_APP, FERRY_ENV): a key scoped to another app or
   * environment answers 403 (core/auth.ts scopeCovers). Without them only unscoped keys pass.
   */
  app?: string;
  env?: string;
  /** Where API keys live: a DynamoControlStore on the platform's control table. */
  control: ApiKeyLookup;
  /** The worker's port on localhost (its FERRY_PORT). */
  workerPort: number;
  /** Default 127.0.0.1: the worker shares the task's network namespace. */
  workerHost?: string;
  /** Default 0.0.0.0: the ALB reaches the agent at the host's address. */
  host?: string;
  /** Default 8080; 0 picks a free port. */
  port?: number;
  /** How long a key lookup is remembered (default 30 s). */
  keyCacheMs?: number;
  /** How long GET /ping waits for the worker's /ping (default 2 s; the ALB check times out at 5 s). */
  pingTimeoutMs?: number;
  /** Sent to the worker in lbSecretHeader (core/auth.ts); without it, that header is not sent. */
  workerSecret?: string;
  log?: Logger;
  /** Where the scaler reads this task's load (the workers table); without it nothing is reported. */
  registry?: Pick<WorkerRegistry, 'heartbeat' | 'remove'>;
  /** This task's worker id in the registry (default `<endpointId>-<random>`). */
  workerId?: string;
  clock?: Clock;
  /** How often the record is refreshed while nothing changes (default 30 s; stale after 180 s). */
  reportEveryMs?: number;
  /** ECS task scale-in protection while requests are in flight; without it none is asked for. */
  ecs?: EcsProtectionOptions;
  /** How often protection is renewed or released, and the start grace checked (default 1 s). */
  tickMs?: number;
  /** The ALB's idle timeout: idle keep-alive connections are kept 5 s longer (Node's default is 5 s). */
  upstreamIdleMs?: number;
  /**
   * Where the endpoint's run of failed worker starts is shared by its tasks (the control table);
   * without it the run lives in this agent only, which a replaced task forgets.
   */
  starts?: StartFailureRecord;
  /** How often the worker's /ping is probed until it first answers 200 (default 1 s). */
  readyProbeMs?: number;
  /**
   * How long the worker may take to answer its first /ping: the service's health check grace, after
   * which the ALB's failed checks would make ECS stop the task. Past it the supervisor kills a silent
   * worker (a server on the wrong port, a hung model load) as a failed start and the agent leaves
   * with 1; a task stopped sooner (scale-in of a task still starting) counts nothing. Without it,
   * only the worker's own exit counts.
   */
  startGrace?: StartGrace;
}

export interface LbAgent {
  readonly url: string;
  /** Requests in flight now. */
  readonly serving: number;
  /** Settles once every load report started so far is written. */
  reported(): Promise<void>;
  /**
   * Resolves with the exit code to leave with once the worker is gone: 1 after a crash (ECS replaces
   * the task), 0 when it stopped with its task.
   */
  readonly leaving: Promise<number>;
  /** The worker container started at `atMs` (ECS task metadata): its start grace counts from then. */
  workerStarted(atMs: number): void;
  /** The worker container ended (ECS task metadata, ecsWorker.ts). */
  workerExited(how: WorkerExit): Promise<void>;
  /**
   * A deploy replaced this task's definition (superseded.ts): protection goes off and stays off, so
   * the deployment may stop the task; requests are still served until it does (the ALB drains them).
   */
  retire(why: string): void;
  /** ECS is stopping the task: connections close once their requests end (see the class). */
  drain(): Promise<void>;
  /** Stops taking connections and waits for requests in flight (at most `waitMs`); twice is fine. */
  close(waitMs?: number): Promise<void>;
}

/** RFC 9110 §7.6.1: connection-specific headers are not forwarded by a proxy. */
const hopByHop = new Set([
  'connection',
  'keep-alive',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
]);

export async function startLbAgent(options: LbAgentOptions): Promise<LbAgent> {
  const agent = new LbAgentServer(options);
  await agent.listen();
  return agent;
}

class LbAgentServer implements LbAgent {
  url = '';
  private readonly auth: KeyAuthenticator;
  private readonly log: Logger;
  private readonly workerHost: string;
  /** lbSecretHeader with the worker's secret, sent on every request to the worker. */
  private readonly secretHeader: Record<string, string>;
  /** Node's timeouts and connection cap of the local front door (core/limits.ts). */
  private readonly server = createServer(nodeServerOptions(), (req, res) => void this.serve(req, res));
  private closed: Promise<void> | undefined;
  private inFlight = 0;
  private lastBusyAt: number;
  private readonly workerId: string;
  private readonly clock: Clock;
  private reporting: Promise<void> = Promise.resolve();
  private reportTimer: NodeJS.Timeout | undefined;
  private readonly protection: TaskProtection | undefined;
  /** Superseded by a deploy: protection is never asked for again (retire). */
  private retired = false;
  /** ECS is stopping the task and the ALB draining it: no connection is kept after its answer (drain). */
  private stopping = false;
  /** Stops the protection ticks on close. */
  private readonly closing = new AbortController();
  private ticking: Promise<void> | undefined;
  /** The failed-start rule (core/supervisor.ts) for this task's one worker. */
  private readonly supervisor: WorkerSupervisor;
  private probing: Promise<void> | undefined;
  private leave: (code: number) => void = () => {};
  readonly leaving: Promise<number>;

  constructor(private readonly options: LbAgentOptions) {
    applyServerLimits(this.server);
    if (options.upstreamIdleMs !== undefined) {
      // The ALB reuses idle connections for up to its idle timeout; one the agent closed first is a 502.
      this.server.keepAliveTimeout = options.upstreamIdleMs + 5_000;
      this.server.headersTimeout = this.server.keepAliveTimeout + 1_000;
    }
    this.log = options.log ?? agentLog;
    this.clock = options.clock ?? systemClock;
    this.lastBusyAt = this.clock.now();
    this.workerId = options.workerId ?? `${options.endpointId}-${randomBytes(6).toString('hex')}`;
    this.workerHost = options.workerHost ?? '127.0.0.1';
    this.secretHeader = options.workerSecret ? { [lbSecretHeader]: options.workerSecret } : {};
    this.auth = new KeyAuthenticator({
      control: options.control,
      cacheMs: options.keyCacheMs ?? 30_000,
    });
    this.protection = options.ecs
      ? new TaskProtection(options.ecs, this.clock, this.log, () => this.inFlight > 0)
      : undefined;
    this.leaving = new Promise<number>((resolve) => {
      this.leave = resolve;
    });
    this.supervisor = new WorkerSupervisor({
      clock: this.clock,
      log: this.log,
      nameOf: () => options.endpointName,
      ...(options.starts ? { starts: options.starts } : {}),
      // ECS starts and stops the worker container; the one decision the supervisor makes here is a
      // kill for silence past the start grace, which this task carries out by leaving.
      actuator: { start: () => {}, stop: () => {}, kill: () => void this.killed() },
    });
    // The token is never used: the worker of a load-balanced endpoint calls no agent route.
    this.supervisor.adopt(
      { workerId: this.workerId, endpointId: options.endpointId, token: randomBytes(24).toString('hex') },
      'lb',
      options.startGrace,
    );
  }

  async listen(): Promise<void> {
    // Before the worker can answer: the count of earlier tasks' failed starts goes on here.
    await this.supervisor.resumeStarts(this.options.endpointId).catch((error) => {
      this.log.warn(`reading the failed starts of ${this.options.endpointId}: ${messageOf(error)}`);
    });
    const host = this.options.host ?? '0.0.0.0';
    const { url, port } = await listen(this.server, host, this.options.port ?? 8080);
    this.url = url;
    this.log.info(
      `serving load-balanced endpoint ${this.options.endpointId} on ${host}:${port}, ` +
        `proxying to ${this.workerHost}:${this.options.workerPort}`,
    );
    if (this.options.registry) {
      this.report();
      this.reportTimer = setInterval(() => this.report(), this.options.reportEveryMs ?? 30_000);
      this.reportTimer.unref();
    }
    this.probing = this.probeUntilReady();
    // The supervisor's start grace; protection renewed before it lapses, released once idle long enough.
    this.ticking = tickEvery(this.clock, this.options.tickMs ?? 1_000, this.closing.signal, async () => {
      await this.supervisor.tick(this.options.endpointId);
      if (!this.retired) this.protection?.tick();
    });
  }

  /** Probes the worker's /ping until its first 200, the contact that ends a run of failed starts. */
  private async probeUntilReady(): Promise<void> {
    while (this.supervisor.phase(this.workerId) === 'starting' && !this.closing.signal.aborted) {
      if (await this.workerHealthy()) return;
      await this.clock.sleep(this.options.readyProbeMs ?? 1_000, this.closing.signal);
    }
  }

  workerStarted(atMs: number): void {
    this.supervisor.started(this.workerId, atMs);
  }

  async workerExited(how: WorkerExit): Promise<void> {
    if (this.supervisor.phase(this.workerId) === 'gone') return;
    const withTask = how.taskStopping === true;
    const exit = how.signal ?? `code ${how.code}`;
    if (withTask) this.log.info(`the worker exited (${exit}) with its task`);
    else this.log.warn(`the worker exited (${exit}); leaving so ECS replaces this task`);
    await this.supervisor.exited(this.workerId, { ...how, asked: withTask });
    this.leave(withTask ? 0 : 1);
  }

  /**
   * The supervisor killed the worker: no answer within its start grace (the supervisor logged why and
   * counted the failed start with the exit below). Leaving ends the task, the hung worker with it.
   */
  private async killed(): Promise<void> {
    await this.supervisor.exited(this.workerId, { code: null, signal: 'SIGKILL' });
    this.leave(1);
  }

  /** Requests in flight on this task now. */
  get serving(): number {
    return this.inFlight;
  }

  /** Settles once every report started so far has been written (tests). */
  reported(): Promise<void> {
    return this.reporting;
  }

  /**
   * One request begins (+1) or ends (-1). A change between idle and busy is reported at once, and
   * protection hears of it at once: the first request must not wait for a tick to be protected.
   */
  private track(delta: 1 | -1): void {
    const before = this.inFlight;
    this.inFlight = Math.max(0, this.inFlight + delta);
    this.lastBusyAt = this.clock.now();
    if ((before === 0) !== (this.inFlight === 0)) {
      this.report();
      if (!this.retired) this.protection?.tick();
    }
  }

  retire(why: string): void {
    if (this.retired) return;
    this.retired = true;
    this.log.info(`${why}: task protection off, so the deployment may replace this task`);
    void this.protection?.release().catch((error) => {
      this.log.warn(`releasing task protection: ${messageOf(error)}`);
    });
  }

  /**
   * Writes this task's record; one write at a time, failures logged (the next report retries). None
   * before the worker first answers: a worker loading its model is not idle, and with a record it would
   * be, so the scaler could take its task away before it served the request that woke the endpoint.
   * Until then the scaler counts the task as booting, through the endpoint's health_check_grace
   * (functions/scaler.ts), which bounds the wait as the start grace does here.
   */
  private report(): void {
    const registry = this.options.registry;
    if (!registry || this.closed || this.supervisor.phase(this.workerId) === 'starting') return;
    this.reporting = this.reporting.then(async () => {
      const now = this.clock.now();
      try {
        await registry.heartbeat({
          workerId: this.workerId,
          endpointId: this.options.endpointId,
          state: this.inFlight > 0 ? 'running' : 'idle',
          jobIds: [],
          inFlight: this.inFlight,
          lastSeenAt: now,
          lastBusyAt: this.inFlight > 0 ? now : this.lastBusyAt,
        });
      } catch (error) {
        this.log.warn(`reporting load to the workers table: ${messageOf(error)}`);
      }
    });
  }

  private async serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    // Draining: this answer is the connection's last (Node closes it after a `connection: close`).
    if (this.stopping) res.setHeader('connection', 'close');
    try {
      const path = (req.url ?? '/').split('?')[0];
      if (req.method === 'GET' && path === '/ping') {
        const healthy = await this.workerHealthy();
        reply(
          res,
          healthy ? 200 : 503,
          healthy ? { status: 'healthy' } : { error: 'The worker is not ready' },
        );
        req.resume();
        return;
      }
      let scope: KeyScope | undefined;
      try {
        scope = await this.auth.clientKeyScope(credentialOf(req.headers.authorization));
      } catch (error) {
        this.fail(req, res, new FerryError('unavailable', 'Checking an API key failed', { cause: error }));
        req.resume();
        return;
      }
      if (!scope) {
        reply(res, 401, { error: 'Missing or invalid API key' });
        req.resume();
        return;
      }
      const { app, env } = this.options;
      // A scoped key must name this endpoint's app (and environment); unknown app/env fails closed.
      const covered =
        scope.app === undefined ||
        (app !== undefined && env !== undefined && scopeCovers(scope, { app, env }));
      if (!covered) {
        reply(res, 403, {
          error: `This API key (${describeScope(scope)}) may not call endpoint ${this.options.endpointId}`,
        });
        req.resume();
        return;
      }
      if (this.supervisor.phase(this.workerId) === 'starting') {
        // "If a target group contains only unhealthy registered targets, the load balancer routes
        // requests to all those targets" (https://docs.aws.amazon.com/elasticloadbalancing/latest/application/target-group-health-checks.html):
        // while the worker boots (a model load: minutes), requests reach this agent. A 503 with
        // Retry-After, as the ALB answers with no target at all, not a 502 from a worker that does not
        // listen yet; and not counted in flight, so it neither protects the task nor keeps it busy.
        res.setHeader('retry-after', String(startingRetryAfterSec));
        reply(res, 503, { error: 'The worker is starting; retry shortly' });
        req.resume();
        return;
      }
      this.track(1);
      res.on('close', () => this.track(-1));
      await this.proxy(req, res);
    } catch (error) {
      this.fail(req, res, error);
    }
  }

  /** The error answer of every edge (docs/api.md#errors): 5xx masked, the detail in the log. */
  private fail(req: IncomingMessage, res: ServerResponse, error: unknown): void {
    const what = `${req.method} ${(req.url ?? '/').split('?')[0]}`;
    const answer = toHttpResponse(error, { requestId: randomUUID(), log: this.log, what });
    reply(res, answer.statusCode, answer.body);
  }

  /**
   * Forwards the request to the worker. A body over limits.lbBodyBytes never reaches it: 413, as from
   * the local front door, once the body has been read through and dropped (so the client, still
   * sending, hears it), or at once with the connection closed past overLimitReadBytes
   * (core/request-body.ts). A body of known length within the limit streams through; one without
   * (chunked) is buffered up to the limit and sent with its Content-Length, as the local pool does:
   * Ferry's Python LB runtime answers 411 to a body without one.
   */
  private async proxy(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let body: Buffer | undefined;
    const length = req.headers['content-length'];
    if (Number(length) > limits.lbBodyBytes || (length === undefined && hasBody(req.headers))) {
      const read = await readLimitedBody(req, req.headers, limits.lbBodyBytes).catch(() => undefined);
      if (!read) {
        // The client left before its body ended: nobody to answer.
        res.destroy();
        return;
      }
      if (read.kind !== 'body') {
        if (read.kind === 'cut') res.setHeader('connection', 'close');
        reply(res, 413, { error: overLimitMessage(req.method, req.url, limits.lbBodyBytes) });
        return;
      }
      body = read.body ?? Buffer.alloc(0);
    }
    const headers = forwardable(req.headers);
    if (body) headers['content-length'] = String(body.length);
    delete headers.authorization;
    delete headers[lbSecretHeader];
    Object.assign(headers, this.secretHeader);
    const peer = req.socket.remoteAddress;
    const forwardedFor = req.headers['x-forwarded-for'];
    if (peer) headers['x-forwarded-for'] = forwardedFor ? `${forwardedFor}, ${peer}` : peer;
    const upstream = request(
      {
        host: this.workerHost,
        port: this.options.workerPort,
        method: req.method,
        path: req.url ?? '/',
        headers,
      },
      (answer) => {
        if (res.headersSent || res.destroyed) {
          answer.resume();
          return;
        }
        res.writeHead(answer.statusCode ?? 502, forwardable(answer.headers));
        answer.pipe(res);
        answer.on('error', () => res.destroy());
      },
    );
    upstream.on('error', (error) => {
      this.fail(req, res, new FerryError('bad_gateway', 'The worker is not reachable', { cause: error }));
    });
    // A client that hangs up mid-request: stop the call to the worker too.
    res.on('close', () => {
      if (!res.writableFinished) upstream.destroy();
    });
    if (body) upstream.end(body);
    else req.pipe(upstream);
  }

  /** Whether the worker's /ping answers 200 now; the first 200 is the worker's contact. */
  private async workerHealthy(): Promise<boolean> {
    try {
      const response = await fetch(`http://${this.workerHost}:${this.options.workerPort}/ping`, {
        headers: this.secretHeader,
        signal: AbortSignal.timeout(this.options.pingTimeoutMs ?? 2_000),
      });
      await response.body?.cancel();
      if (response.status !== 200) return false;
    } catch {
      return false;
    }
    // Contact once (the supervisor ignores repeats): it ends a run of failed starts on record.
    const first = this.supervisor.phase(this.workerId) === 'starting';
    this.supervisor.ready(this.workerId);
    if (first) {
      // Up now: its idle_timeout counts from here, and the scaler hears of it at once.
      this.lastBusyAt = this.clock.now();
      this.report();
    }
    return true;
  }

  /**
   * ECS is stopping this task (its DesiredStatus is STOPPED, ecsWorker.ts onTaskStopping), so the ALB
   * is draining it. ECS waits "for the load balancer to report that the keep alive connection is
   * closed (the target is in an UNUSED state)", and the ALB completes a deregistration at once only
   * for a target with "no in-flight requests and no active connections"; its idle keep-alive
   * connections otherwise last up to its idle timeout, which is also the deregistration delay
   * (infra/constructs/load-balancer.ts). So the idle ones close now and every answer from here on
   * closes its own: the drain ends with the last request, and an idle task goes at once.
   * (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/load-balancer-connection-draining.html;
   * https://docs.aws.amazon.com/elasticloadbalancing/latest/application/edit-target-group-attributes.html#deregistration-delay)
   */
  drain(): Promise<void> {
    if (!this.stopping) {
      this.stopping = true;
      this.log.info('ECS is stopping this task: connections close as their requests end');
      this.server.closeIdleConnections();
    }
    return Promise.resolve();
  }

  close(waitMs = 10_000): Promise<void> {
    this.closed ??= (async () => {
      clearInterval(this.reportTimer);
      const done = new Promise<void>((resolve) => this.server.close(() => resolve()));
      this.server.closeIdleConnections();
      const timer = setTimeout(() => this.server.closeAllConnections(), waitMs);
      await done;
      clearTimeout(timer);
      // Every request has ended: the task is leaving, nothing is left to protect.
      this.closing.abort();
      await this.ticking;
      await this.probing;
      this.supervisor.close();
      await this.protection?.release();
      await this.reporting;
      await this.options.registry?.remove(this.workerId).catch((error) => {
        this.log.warn(`removing this task from the workers table: ${messageOf(error)}`);
      });
    })();
    return this.closed;
  }
}

function forwardable(headers: IncomingHttpHeaders): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  const named = new Set(
    String(headers.connection ?? '')
      .split(',')
      .map((h) => h.trim().toLowerCase())
      .filter((h) => h.length > 0),
  );
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined || hopByHop.has(name) || named.has(name)) continue;
    out[name] = value;
  }
  return out;
}

/** What a request to a worker still starting is told to wait before it retries. */
const startingRetryAfterSec = 5;

function reply(res: ServerResponse, statusCode: number, body: unknown): void {
  if (res.headersSent || res.destroyed) {
    res.destroy();
    return;
  }
  const text = JSON.stringify(body);
  res
    .writeHead(statusCode, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) })
    .end(text);
}
