/**
 * The agent sidecar: one per ECS task, beside the worker container, sharing its network namespace.
 * It serves the RunPod worker protocol on localhost to the worker (the `ferry` runtime or any image
 * built on RunPod's worker SDK, unchanged), backed by SQS + DynamoDB through the same JobEngine and
 * V2Api worker routes as every other front door: nothing here speaks the protocol itself.
 *
 *   worker ──RUNPOD_WEBHOOK_*──▶ agent :port /v2/<endpointId>/{job-take,job-take-batch,job-stop,
 *                                       job-done,job-done-batch,job-stream,ping}/<worker>[/<job>]
 *                                  │
 *                                  └─▶ V2Api ─▶ JobEngine ─▶ SqsJobQueue · DynamoJobStore · DynamoWorkerRegistry
 *
 * ── Public contract (kept stable: the Lambda handlers' "AWS in a box" test uses it) ─────────────────
 *
 *   const agent = await startAgent({ endpointId, clients: { dynamo, sqs, s3 }, tables, queueUrlFor, bucket });
 *   agent.url            http://127.0.0.1:<port>
 *   agent.workerId       the one worker identity of this task (registry, leases, job-stop)
 *   agent.workerToken    what the worker sends as Authorization (RUNPOD_AI_API_KEY)
 *   agent.workerEnv()    RUNPOD_* and FERRY_MODE for the worker container, pointing at this agent
 *   agent.drain()        SIGTERM: stop handing out jobs, let held jobs finish, requeue the rest
 *   agent.close()        stop serving (twice is fine); injected clients stay open (their owner's)
 *
 * ── Leases and visibility (why there is no ChangeMessageVisibility heartbeat) ──────────────────────
 *
 *   receive (hidden for leaseMs) ─▶ conditional claim in DynamoDB ─▶ DeleteMessage ─▶ … job runs …
 *          └─────────── a few ms: one GetItem, one conditional Put ───────────┘
 *
 * SQS only dispatches; DynamoDB is the truth (docs/api.md#aws-front-door: visibility caps at 12 h, so
 * a GPU job may outlive any message). The engine claims the job with a conditional write, then deletes
 * the message at once. From then on the job is guarded by its lease in DynamoDB, which the worker's
 * ping renews (engine.ping). No message stays in flight while the job runs, so there is nothing whose
 * visibility could need extending. If this task dies, the lease lapses and the sweeper (a scheduled
 * Lambda running engine.sweep) requeues the job with a new message, or fails it after maxAttempts.
 * The only window where visibility matters is between receive and claim: if the agent dies there, the
 * message comes back after the receive's visibility (leaseMs) and the next taker claims it; if it dies
 * after the claim but before the delete, the message comes back, the next taker's claim finds the job
 * IN_PROGRESS and drops the message, and the lapsed lease requeues the job.
 *
 * ── The worker supervisor ──────────────────────────────────────────────────────────────────────────
 *
 * The lifecycle policy and the record of held jobs are core/supervisor.ts's (docs/workers.md), the
 * same as in the local pool. The agent adopts the one worker ECS started beside it and acts for the
 * supervisor: `stop` (the worker asked for refresh_worker, or must drain) makes the agent leave with
 * exit 0, `kill` (it kept a stopped job past `stopGraceMs`, Python cannot interrupt a handler stuck in
 * C code; or it made no contact within `startGrace`, a hung model load) with exit 1. The agent
 * container is essential, so ECS stops the task, which ends the worker, and the service starts a
 * fresh task. Whatever the worker held goes back to the queue first.
 * Cancel (a Lambda) and timeouts reach the worker through job-stop: the Lambda cannot notify this
 * process, so it bumps the worker's stop-signal item and the agent polls that small item every
 * `pollMs`, reading the held jobs only when it moved (core/adapters/aws/stop-signals.ts); the supervisor times out
 * held jobs at startedAt + policy.executionTimeoutMs rather than waiting for the minute-level sweeper.
 *
 * ── ECS task scale-in protection (protection.ts) ──────────────────────────────────────────────────
 *
 * While the worker holds a job, `PUT $ECS_AGENT_URI/task-protection/v1/state`
 * `{"ProtectionEnabled": true, "ExpiresInMinutes": N}` keeps scale-in from killing it (renewed at half
 * of N); once idle for `protectionOffAfterMs`, `{"ProtectionEnabled": false}`. Failures are logged and
 * retried on the next tick, never fatal: losing protection only risks a requeue. On ECS that period is
 * the endpoint's idle_timeout (FERRY_IDLE_TIMEOUT_SEC): the scaling policy keeps a worker that long
 * after its last job, and protection makes sure ECS, which picks the tasks a lower desiredCount stops,
 * takes one the policy let go (docs/scaling.md).
 *
 * ── Drain (SIGTERM) and deadlines ──────────────────────────────────────────────────────────────────
 *
 * drain.ts: on SIGTERM, no new jobs, held jobs may finish within the drain period, then what is left
 * goes back to the queue. deadlines.ts: every tick, stopped jobs kept past their grace and task
 * protection. This file only wires them, the engine and the HTTP server together.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import type { S3Client } from '@aws-sdk/client-s3';
import type { SQSClient } from '@aws-sdk/client-sqs';
import type { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { z } from 'zod';
import {
  DynamoControlStore,
  DynamoJobStore,
  type DynamoTableNames,
  DynamoWorkerRegistry,
  documentClient,
} from '../../core/adapters/aws/dynamo.js';
import { S3BlobStore } from '../../core/adapters/aws/s3.js';
import { type QueueUrlFor, SqsJobQueue } from '../../core/adapters/aws/sqs.js';
import { StopSignalChangeFeed } from '../../core/adapters/aws/stop-signals.js';
import { type ApiRequest, type ApiResponse, V2Api } from '../../core/api.js';
import { type Authenticator, credentialOf, hashKey, newSecret } from '../../core/auth.js';
import { systemClock } from '../../core/clock.js';
import { JobEngine, type WebhookSender, workerKey } from '../../core/engine.js';
import { messageOf, missingKeyMessage, toHttpResponse } from '../../core/errors.js';
import { isFinal } from '../../core/job.js';
import { limits } from '../../core/limits.js';
import type { Logger } from '../../core/log.js';
import { jobMetricsLine } from '../../core/metrics.js';
import type { Clock, LogStore, Watch } from '../../core/ports.js';
import { applyServerLimits, nodeServerOptions } from '../../core/request-body.js';
import { type StartGrace, WorkerSupervisor } from '../../core/supervisor.js';
import { HttpWebhookSender } from '../../core/webhooks.js';
import { WorkerWindows } from '../../core/worker-rate.js';
import { drainMs as taskDrainMs } from '../../infra/task-layout.js';
import { watchDeadlines } from './deadlines.js';
import { Drain } from './drain.js';
import type { WorkerExit } from './ecsWorker.js';
import { readBody, safeDecode, send } from './http.js';
import { listen } from './listen.js';
import { agentLog } from './log.js';
import { logged, pinnedEndpoint } from './ports.js';
import { type EcsProtectionOptions, TaskProtection } from './protection.js';
import { placeholderWorkerId, startupFailureRoute, workerProtocolEnv } from './protocol.js';

// The protocol environment lives in protocol.ts (infra reads it without the agent's AWS adapters).
export { placeholderWorkerId, workerProtocolEnv };

/**
 * The tables the agent reads and writes (dynamoSchema naming). Of the control table it touches only
 * its endpoint's STARTS# item, the run of failed worker starts shared across tasks; without it that
 * run lives and dies with the task.
 */
export type AgentTables = Pick<DynamoTableNames, 'jobs' | 'chunks' | 'workers'> &
  Partial<Pick<DynamoTableNames, 'control'>>;

export interface AgentOptions {
  endpointId: string;
  /** The endpoint's name (FERRY_ENDPOINT): what the supervisor's log lines call it; absent: its id. */
  endpointName?: string;
  /** Injected so tests use the emulators; the agent never destroys them. */
  clients: { dynamo: DynamoDBClient; sqs: SQSClient; s3: S3Client };
  tables: AgentTables;
  /** The endpoint's urgent queue, or its low-priority one (as SqsJobQueue expects). */
  queueUrlFor: QueueUrlFor;
  /** Where job payloads too big for a DynamoDB item live. */
  bucket: string;
  /** Key prefix of those payloads in the bucket; must match the Lambda handlers' (default ''). */
  blobPrefix?: string;
  /** Default 127.0.0.1: the worker shares the task's network namespace. */
  host?: string;
  /** Default 8080; 0 picks a free port. */
  port?: number;
  /** Default: env FERRY_WORKER_TOKEN, else a new random token. */
  workerToken?: string;
  /** Default `<endpointId>-<random>`; unique per task. */
  workerId?: string;
  /** A taken job's lease, renewed by the worker's ping (default limits.leaseMs). */
  leaseMs?: number;
  maxAttempts?: number;
  /** How long job-take and job-stop are held (default and max 20 s). */
  workerWaitMs?: number;
  /**
   * The endpoint's max_concurrency (FERRY_MAX_CONCURRENCY): the worker holds at most this many jobs at
   * once, whatever batch it asks for (core/engine.ts take); absent, no cap.
   */
  maxConcurrency?: number;
  /** How often waits re-read DynamoDB for changes made elsewhere (cancel from a Lambda); 500 ms. */
  pollMs?: number;
  /** How often held jobs are re-read even when no stop signal came (StopSignalChangeFeed; 15 s). */
  stopSafetyMs?: number;
  /** RUNPOD_PING_INTERVAL handed to the worker (default 10 s, the RunPod SDK's). */
  pingIntervalMs?: number;
  /** How long the worker may keep a job it was told to stop before the agent exits 1 (30 s). */
  stopGraceMs?: number;
  /**
   * How long the worker may go without contact (its first job-take or ping) before the agent exits 1
   * and counts a failed start: the endpoint's health_check_grace (FERRY_HEALTH_CHECK_GRACE_SEC), from
   * the worker container's reported start (workerStarted) with `awaitStart`. Without it, no limit: a
   * worker whose model load hangs holds its task.
   */
  startGrace?: StartGrace;
  /**
   * The worker rate limit (core/worker-rate.ts, as on the local front door): requests per
   * `rateLimitWindowMs` before a 429; defaults limits.workerRateLimitRequests per limits.rateLimitWindowMs.
   */
  workerRateLimitRequests?: number;
  rateLimitWindowMs?: number;
  /** How long drain() lets held jobs finish (default env FERRY_DRAIN_MS, else 110 s). */
  drainMs?: number;
  /** While draining, how long a job-take is held before its 204 (default 1 s; avoids a busy loop). */
  drainTakeHoldMs?: number;
  /** How often held jobs are checked (stops, protection). Default 1 s. */
  tickMs?: number;
  ecs?: EcsProtectionOptions;
  /**
   * Final-status webhooks of jobs this agent ends (job-done, its own timeouts): on AWS the platform's
   * webhook queue (main.ts); without one the agent posts them itself. A drain waits for `idle()`.
   */
  webhooks?: WebhookSender & { idle(): Promise<void> };
  /** Where the worker's job-log lines go (CloudWatch Logs on AWS); without it job-log is a 404. */
  logs?: LogStore;
  /** Where each ended job's metrics line goes (core/metrics.ts); main.ts passes stdout. */
  metricsOut?: (line: string) => void;
  clock?: Clock;
  log?: Logger;
  /** What a stuck stopped job leads to; default process.exit. */
  exit?: (code: number) => void;
}

export interface Agent {
  readonly url: string;
  readonly workerId: string;
  readonly workerToken: string;
  /** The RUNPOD_* / FERRY_* environment the worker container needs. */
  workerEnv(): Record<string, string>;
  /** The job ids the worker holds (the supervisor's record). */
  held(): string[];
  /**
   * Resolves with the exit code the agent should leave with once the supervisor wants this task gone:
   * 0 after a refresh_worker job or a drain, 1 after a kill (a stopped job kept past its grace, or
   * no contact within the start grace).
   */
  readonly leaving: Promise<number>;
  /** The worker container started at `atMs` (ECS task metadata): its start grace counts from then. */
  workerStarted(atMs: number): void;
  /**
   * The worker container (or process) ended: its jobs go back to the queue now. `taskStopping`: ECS was stopping the whole task, so the
   * exit was asked for (ecsWorker.ts); otherwise it counts as a crash, or a failed start before contact.
   */
  workerExited(how: WorkerExit): Promise<void>;
  /** A deploy replaced this task's definition: no new job; leaves with 0 once the held ones end. */
  retire(why: string): void;
  /** Resolves once held jobs finished or were requeued; the same promise when called again. */
  drain(): Promise<void>;
  close(): Promise<void>;
}

const startupFailureSchema = z.object({ lines: z.array(z.string()).max(50) }).strict();

/** SQS long polls are at most 20 s; a longer job-take would only add a second receive. */
const maxWorkerWaitMs = 20_000;

export async function startAgent(options: AgentOptions): Promise<Agent> {
  const agent = new AgentServer(options);
  await agent.listen();
  return agent;
}

class AgentServer implements Agent {
  readonly workerId: string;
  readonly workerToken: string;
  url = '';

  private readonly endpointId: string;
  private readonly clock: Clock;
  private readonly log: Logger;
  private readonly doc: DynamoDBDocumentClient;
  private readonly queue: SqsJobQueue;
  private readonly changes: StopSignalChangeFeed;
  /** The supervisor tick's watch on this worker's stop signal, kept for the agent's life. */
  private stopWatch: Watch | undefined;
  private readonly engine: JobEngine;
  private readonly api: V2Api;
  private readonly auth: Authenticator;
  /**
   * The worker's requests per window (core/worker-rate.ts): past the limit its takes, stops, pings
   * and log batches are answered 429 before they reach SQS or DynamoDB, and a log batch counts as
   * the GetItems it causes, one per distinct job it names (the API counts it, V2Api's jobLog).
   * Neither slows a looping worker down on its own: a standard queue takes "a nearly unlimited number of API calls per
   * second" (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/DistributedQueues.html),
   * an on-demand table bills every request (https://aws.amazon.com/dynamodb/pricing/on-demand/) and
   * throttles only at the per-table quota shared by every endpoint
   * (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/TroubleshootingThrottlingOnDemand.html).
   * What the limit leaves: docs/security-aws.md, "What is left".
   */
  private readonly rate: WorkerWindows;
  private readonly webhooks: WebhookSender & { idle(): Promise<void> };
  private readonly ownWebhooks: HttpWebhookSender | undefined;
  /**
   * Node's header, request and idle timeouts and the connection cap of the local front door
   * (core/limits.ts): slow or silent sockets on the Docker bridge are closed, and their number bounded.
   */
  private readonly server = createServer(nodeServerOptions(), (req, res) => void this.serve(req, res));
  private readonly supervisor: WorkerSupervisor;
  private leave: (code: number) => void = () => {};
  readonly leaving: Promise<number>;
  /** Aborts every long poll and timer on close. */
  private readonly closing = new AbortController();
  private readonly protection: TaskProtection | undefined;
  private readonly drainer: Drain;
  private closed: Promise<void> | undefined;
  private fatal = false;
  private ticking: Promise<void> | undefined;

  constructor(private readonly options: AgentOptions) {
    this.endpointId = options.endpointId;
    this.clock = options.clock ?? systemClock;
    this.log = options.log ?? agentLog;
    this.workerToken = options.workerToken ?? process.env.FERRY_WORKER_TOKEN ?? newSecret('fyw');
    this.workerId = options.workerId ?? `${options.endpointId}-${randomBytes(6).toString('hex')}`;
    applyServerLimits(this.server);
    this.rate = new WorkerWindows(
      options.workerRateLimitRequests ?? limits.workerRateLimitRequests,
      options.rateLimitWindowMs ?? limits.rateLimitWindowMs,
      () => this.clock.now(),
    );
    const leaseMs = options.leaseMs ?? limits.leaseMs;
    this.protection = options.ecs
      ? new TaskProtection(options.ecs, this.clock, this.log, () => this.held().length > 0)
      : undefined;

    this.doc = documentClient(options.clients.dynamo);
    const blobs = new S3BlobStore({
      client: options.clients.s3,
      bucket: options.bucket,
      prefix: options.blobPrefix ?? '',
    });
    const warn = (message: string) => this.log.warn(message);
    // The API answers unexpected errors with a masked 500 and logs the detail; the adapters also say
    // here which port failed, so a throttled table or a missing permission shows in the agent's log.
    const jobs = logged(
      'jobs',
      new DynamoJobStore({ doc: this.doc, tables: options.tables, blobs, warn }),
      this.log,
    );
    this.queue = new SqsJobQueue({ client: options.clients.sqs, queueUrlFor: options.queueUrlFor, warn });
    const queue = logged('queue', this.queue, this.log);
    const workers = logged(
      'workers',
      new DynamoWorkerRegistry({ doc: this.doc, table: options.tables.workers }),
      this.log,
    );
    const drainMs = options.drainMs ?? envMs('FERRY_DRAIN_MS') ?? taskDrainMs;
    this.leaving = new Promise<number>((resolve) => {
      this.leave = resolve;
    });
    // The registry mirror is what the API Lambda's health reads. Failed starts are counted on the
    // endpoint, not in this task: ECS replaces a task whose worker died, and a broken image must
    // still reach maxFailedStarts and mark the endpoint failing (docs/aws.md#failing-endpoints).
    const starts = options.tables.control
      ? logged('starts', new DynamoControlStore({ doc: this.doc, table: options.tables.control }), this.log)
      : undefined;
    this.supervisor = new WorkerSupervisor({
      clock: this.clock,
      log: this.log,
      nameOf: () => options.endpointName,
      registry: workers,
      ...(starts ? { starts } : {}),
      // The tick reads the held jobs only when the stop signal moved (or a stop is already pending).
      stopMayBeDue: () => {
        this.stopWatch ??= this.changes.watch(workerKey(this.workerId));
        return this.stopWatch.changed(0);
      },
      settings: {
        stopGraceMs: options.stopGraceMs ?? 30_000,
        // drain() keeps its own deadline; the supervisor's is only a backstop behind it.
        drainMs: drainMs + 5_000,
        refusedTakeHoldMs: options.drainTakeHoldMs ?? 1_000,
      },
    });
    // Waits on this worker's key poll its small stop-signal item, not the held jobs
    // (core/adapters/aws/stop-signals.ts); other waits re-read DynamoDB every pollMs.
    this.changes = new StopSignalChangeFeed({
      workerId: this.workerId,
      signals: workers,
      clock: this.clock,
      pollMs: options.pollMs ?? 500,
      ...(options.stopSafetyMs ? { safetyMs: options.stopSafetyMs } : {}),
    });
    if (options.webhooks) {
      this.webhooks = options.webhooks;
    } else {
      this.ownWebhooks = new HttpWebhookSender({ clock: this.clock, log: this.log });
      this.webhooks = this.ownWebhooks;
    }
    this.engine = new JobEngine({
      jobs,
      queue,
      workers,
      ledger: this.supervisor,
      changes: this.changes,
      clock: this.clock,
      webhooks: this.webhooks,
      settings: { leaseMs, ...(options.maxAttempts ? { maxAttempts: options.maxAttempts } : {}) },
    });
    this.drainer = new Drain({
      supervisor: this.supervisor,
      workerId: this.workerId,
      clock: this.clock,
      log: this.log,
      drainMs,
      closing: this.closing.signal,
      protection: this.protection,
      webhooks: this.webhooks,
    });
    this.supervisor.attach({
      engine: this.engine,
      actuator: {
        // ECS starts the worker container; the supervisor only adopts it.
        start: () => {},
        stop: () => this.leave(0),
        kill: (_workerId, why) => void this.killed(why),
      },
    });
    this.supervisor.adopt(
      { workerId: this.workerId, endpointId: this.endpointId, token: this.workerToken },
      'queue',
      options.startGrace,
    );
    // Worker routes only: no client key is ever valid here, so /run, /status… answer 401.
    this.auth = {
      isClientKey: async () => false,
      clientKeyScope: async () => undefined,
      workerAccess: async (key, endpointId, workerId) => this.supervisor.verify(key, endpointId, workerId),
    };
    const waitMs = Math.min(options.workerWaitMs ?? maxWorkerWaitMs, maxWorkerWaitMs);
    this.api = new V2Api({
      engine: this.engine,
      control: pinnedEndpoint(this.endpointId),
      auth: this.auth,
      workerWaitMs: waitMs,
      maxWaitMs: waitMs,
      ...(options.maxConcurrency ? { workerMaxConcurrency: options.maxConcurrency } : {}),
      ...(options.logs ? { logs: options.logs } : {}),
      workerWindows: this.rate,
      log: this.log,
    });
  }

  async listen(): Promise<void> {
    // Before the worker can make contact: the count of earlier tasks' failed starts goes on here.
    await this.supervisor.resumeStarts(this.endpointId).catch((error) => {
      this.log.warn(`reading the failed starts of ${this.endpointId}: ${messageOf(error)}`);
    });
    const host = this.options.host ?? '127.0.0.1';
    this.url = (await listen(this.server, host, this.options.port ?? 8080)).url;
    this.ticking = watchDeadlines({
      supervisor: this.supervisor,
      endpointId: this.endpointId,
      protection: this.protection,
      clock: this.clock,
      tickMs: this.options.tickMs,
      signal: this.closing.signal,
      log: this.log,
    });
    this.log.info(`serving the worker protocol of ${this.endpointId} on ${this.url} as ${this.workerId}`);
  }

  workerEnv(): Record<string, string> {
    return workerProtocolEnv({
      agentUrl: this.url,
      endpointId: this.endpointId,
      workerId: this.workerId,
      workerToken: this.workerToken,
      pingIntervalMs: this.options.pingIntervalMs ?? 10_000,
    });
  }

  held(): string[] {
    return this.supervisor.heldBy(this.workerId);
  }

  workerStarted(atMs: number): void {
    this.supervisor.started(this.workerId, atMs);
  }

  async workerExited(how: WorkerExit): Promise<void> {
    const phase = this.supervisor.phase(this.workerId);
    if (phase === 'gone') return;
    // Leaving after a refresh_worker job, a drain or with the task is the plan; any other exit is a failure.
    const planned = phase === 'retiring' || phase === 'draining' || how.taskStopping === true;
    const exit = how.signal ?? `code ${how.code}`;
    if (planned) this.log.info(`the worker exited (${exit}) as asked`);
    else this.log.warn(`the worker exited (${exit}); its jobs go back to the queue`);
    await this.supervisor.exited(this.workerId, { ...how, asked: how.taskStopping === true });
    this.leave(planned ? 0 : 1);
  }

  /**
   * The supervisor killed the worker (a stopped job kept past its grace, or no contact within its
   * start grace): requeue, then exit 1.
   */
  private async killed(why: string): Promise<void> {
    if (this.fatal) return;
    this.fatal = true;
    this.log.error(`${why}; exiting so ECS replaces this task`);
    try {
      await this.supervisor.exited(this.workerId, { code: null, signal: 'SIGKILL' });
    } catch (error) {
      this.log.warn(`requeueing held jobs: ${messageOf(error)}`);
    }
    this.leave(1);
    // A hard exit, not process.exitCode: the worker may hold a handler stuck in C code (or hang in its
    // model load), and main.ts would otherwise drain first (up to the drain period) for nothing. Its jobs
    // are requeued above, so leaving at once loses nothing and lets ECS replace the task sooner.
    (this.options.exit ?? ((code: number) => process.exit(code)))(1);
  }

  // ── HTTP ──────────────────────────────────────────────────────────────────────────────────────

  private async serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const abort = new AbortController();
    res.on('close', () => {
      if (!res.writableFinished) abort.abort();
    });
    try {
      const response = await this.route(req, abort.signal);
      send(res, response);
    } catch (error) {
      send(
        res,
        toHttpResponse(error, { requestId: randomUUID(), log: this.log, what: `${req.method} ${req.url}` }),
      );
    }
  }

  private async route(req: IncomingMessage, signal: AbortSignal): Promise<ApiResponse> {
    const url = new URL(req.url ?? '/', 'http://agent');
    const segments = url.pathname.split('/');
    // ['', 'v2', endpointId, route, worker, job?]
    const route = segments[3] ?? '';
    let ownEndpoint = false;
    try {
      ownEndpoint = segments[1] === 'v2' && decodeURIComponent(segments[2] ?? '') === this.endpointId;
    } catch {
      // A malformed escape is simply not our endpoint.
    }
    if (ownEndpoint && route === startupFailureRoute && req.method === 'POST' && segments.length === 5) {
      return this.startupFailure(req, safeDecode(segments[4] ?? ''));
    }
    const caller = ownEndpoint ? this.api.callerOf(route) : undefined;
    if (caller !== 'worker' || segments.length < 5) {
      // Client routes (run, status, cancel…) exist only in the API front door; the API would answer
      // 401 to any key here anyway, since no client key is valid on the agent.
      if (caller === 'client') {
        return { statusCode: 401, body: { error: 'The agent serves worker routes only' } };
      }
      return { statusCode: 404, body: { error: `No route for ${req.method} ${url.pathname}` } };
    }
    // The stack's placeholder id stands for this task's runtime worker id (see placeholderWorkerId);
    // any other id is checked as it is, and refused unless it is this worker's.
    if (safeDecode(segments[4] ?? '') === placeholderWorkerId(this.endpointId)) {
      segments[4] = encodeURIComponent(this.workerId);
    }
    // The token before the body: an unknown caller (anything on the Docker bridge can reach this
    // port) is answered 401 without one byte of its body read, and its connection closed (send).
    const token = credentialOf(req.headers.authorization);
    if (this.supervisor.verify(token, this.endpointId, this.workerId) === 'unknown') {
      return { statusCode: 401, body: { error: missingKeyMessage } };
    }
    // Counted once the token is known, before the body is read: a refused request costs no read,
    // no SQS receive and no DynamoDB request.
    const refused = this.rate.refusal(hashKey(token!), url.pathname);
    if (refused !== undefined) {
      return {
        statusCode: 429,
        headers: { 'retry-after': String(refused.retryAfterSec) },
        body: { error: refused.error },
      };
    }
    const isTake = route === 'job-take' || route === 'job-take-batch';
    // job-done over its limit still reaches the API, which fails the job with the reason (core/api.ts).
    const { body, droppedBodyBytes } =
      route === 'job-done' ? await readBody(req, limits.jobDoneBodyBytes, true) : await readBody(req);
    const query: Record<string, string | undefined> = {};
    for (const key of new Set(url.searchParams.keys())) query[key] = url.searchParams.getAll(key).join(',');
    const apiRequest: ApiRequest = {
      method: req.method ?? 'GET',
      path: segments.join('/'),
      query,
      headers: req.headers,
      body,
      ...(droppedBodyBytes === undefined ? {} : { droppedBodyBytes }),
      signal: isTake
        ? AbortSignal.any([signal, this.drainer.signal, this.closing.signal])
        : AbortSignal.any([signal, this.closing.signal]),
    };
    // A drain waits for the takes that may still reach the queue (drain.ts).
    const response = isTake
      ? await this.drainer.take(() => this.api.handle(apiRequest))
      : await this.api.handle(apiRequest);
    if (isTake && response.statusCode === 200 && this.protection) {
      // Protected before the worker has the job, not at the next tick: a scale-in in between picked
      // this task as unprotected and cut the job it had just claimed ("a protected task" is never
      // chosen, https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-scale-in-protection.html).
      // A task already protected asks nothing.
      this.protection.tick();
      await this.protection.settled();
    }
    if (response.statusCode === 200 && this.options.metricsOut) {
      for (const jobId of endedJobs(route, segments, response)) void this.reportEnded(jobId);
    }
    return response;
  }

  /**
   * The ferry runtime says why it cannot start, just before it exits: the lines become the worker's
   * last lines, which a failing verdict carries (health, the queued jobs' error). Only the live
   * worker's token is heard, and it is not contact: the exit that follows still counts as a failed
   * start.
   */
  private async startupFailure(req: IncomingMessage, rawWorkerId: string): Promise<ApiResponse> {
    const workerId = rawWorkerId === placeholderWorkerId(this.endpointId) ? this.workerId : rawWorkerId;
    const access = this.supervisor.verify(credentialOf(req.headers.authorization), this.endpointId, workerId);
    if (access !== 'ok') {
      return access === 'unknown'
        ? { statusCode: 401, body: { error: 'Unknown worker token' } }
        : { statusCode: 403, body: { error: 'This token belongs to another worker' } };
    }
    let body: unknown;
    try {
      body = JSON.parse((await readBody(req)).body?.toString('utf8') ?? '');
    } catch {
      body = undefined;
    }
    const parsed = startupFailureSchema.safeParse(body);
    if (!parsed.success) {
      return { statusCode: 400, body: { error: 'Expected {"lines": [string, ...]} (at most 50 lines)' } };
    }
    for (const line of parsed.data.lines)
      this.supervisor.output(this.endpointId, this.workerId, line.slice(0, 2_000));
    return { statusCode: 204, body: undefined };
  }

  /** The ended job's delay and execution time as metrics (the CloudWatch dashboard's source). */
  private async reportEnded(jobId: string): Promise<void> {
    try {
      const line = jobMetricsLine(this.endpointId, await this.engine.status(this.endpointId, jobId));
      if (line) this.options.metricsOut?.(line);
    } catch (error) {
      this.log.warn(`job metrics for ${jobId}: ${messageOf(error)}`);
    }
  }

  // ── drain and close ───────────────────────────────────────────────────────────────────────────

  /**
   * A deploy replaced this task's definition (superseded.ts): no new job; the ones held run to their
   * end, then the agent leaves with 0 (the supervisor's stop once the worker holds nothing), its
   * protection goes off with the drain, and ECS starts a task of the new definition.
   */
  retire(why: string): void {
    this.log.info(`${why}: taking no new job; leaving once the ${this.held().length} held finish`);
    this.supervisor.drain(this.workerId);
  }

  drain(): Promise<void> {
    return this.drainer.start();
  }

  close(): Promise<void> {
    this.closed ??= (async () => {
      this.closing.abort();
      this.drainer.stopTakes();
      this.supervisor.close();
      this.stopWatch?.close();
      this.changes.close();
      await this.queue.close();
      this.ownWebhooks?.close();
      this.server.closeAllConnections();
      await new Promise<void>((resolve) => this.server.close(() => resolve()));
      await this.ticking;
      await this.protection?.settled();
      this.doc.destroy();
    })();
    return this.closed;
  }
}

/**
 * The jobs a worker request answered 200 ended: job-done's own, or each job-done-batch job taken,
 * when the answer's status is final. A progress update (job-done with status IN_PROGRESS) is answered
 * 200 too, with IN_PROGRESS; counted as well, its metrics line was written whenever the status read
 * that follows found the job ended, which a final job-done racing it made true: one job, two lines.
 * The final move is conditional (a second one is a 409), so only one answer per job says final.
 */
function endedJobs(route: string, segments: string[], response: ApiResponse): string[] {
  if (route === 'job-done') {
    const { status } = (response.body ?? {}) as { status?: string };
    return status !== undefined && isFinal(status) ? [safeDecode(segments[5] ?? '')] : [];
  }
  if (route !== 'job-done-batch') return [];
  const { jobs } = response.body as { jobs: { id: string; statusCode: number; status?: string }[] };
  return jobs
    .filter((job) => job.statusCode === 200 && job.status !== undefined && isFinal(job.status))
    .map((job) => job.id);
}

function envMs(name: string): number | undefined {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return undefined;
  const value = Number(raw);
  return Number.isInteger(value) && value >= 0 ? value : undefined;
}
