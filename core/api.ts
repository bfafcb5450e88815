/**
 * The v2 job API and the worker protocol as framework-free handlers: a request in, a status and a
 * JSON body out. The local Fastify server and the AWS Lambda handlers both call `handle`, so both
 * providers answer byte for byte alike (docs/api.md, docs/architecture.md#worker-protocol).
 */
import { randomUUID } from 'node:crypto';
import {
  type Authenticator,
  credentialOf,
  endpointNotFound,
  endpointWithinScope,
  hashKey,
  type KeyScope,
  scopeCovers,
} from './auth.js';
import { awsInfoOf, endpointConfigSchema } from './deployment.js';
import type { JobEngine } from './engine.js';
import { badRequest, FerryError, forbidden, notFound, toHttpResponse, unauthorized } from './errors.js';
import { parseJsonExact } from './json.js';
import { limits } from './limits.js';
import { type Logger, stderrLogger } from './log.js';
import { anyEnv, byNameSegment, resolveByName } from './names.js';
import type { EndpointDirectory, EndpointRecord, LogStore } from './ports.js';
import {
  jobDoneBatchSchema,
  jobDoneSchema,
  jobLogSchema,
  jobStreamSchema,
  parseOr400,
  queryInt,
  type RunRequest,
  runRequestSchema,
  uploadRequestSchema,
} from './schemas.js';
import type { WorkerWindows } from './worker-rate.js';

export interface ApiRequest {
  method: string;
  /** The path without the query string, e.g. `/v2/abc/status/123`. */
  path: string;
  query: Record<string, string | undefined>;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer | undefined;
  /**
   * The size of a body over its route's limit that the front door read through and dropped (`body` is
   * then undefined). Only job-done gets one: it fails the job with the reason instead of leaving it to
   * run again (core/adapters/local/http.ts).
   */
  droppedBodyBytes?: number;
  /** Aborts when the client goes away, so long polls stop early. */
  signal?: AbortSignal;
  /** The edge's id for this request (API Gateway's, or one it made up); a fresh uuid when absent. */
  requestId?: string;
}

export interface ApiResponse {
  statusCode: number;
  /** Undefined for 204. */
  body?: unknown;
  /** Extra response headers (Retry-After on 429). */
  headers?: Record<string, string>;
}

/**
 * Big bodies through an object store, for front doors with payload caps (AWS: API Gateway 10 MB,
 * Lambda 6 MB per request and response; docs/api.md#aws-front-door). Optional: without it the API
 * has no `uploads` route, `inputRef` is an unknown field and responses go out as they are.
 */
export interface PayloadStore {
  /**
   * A presigned PUT for a JSON input of exactly `sizeBytes` bytes, and the `inputRef` that names it in
   * a later /run or /runsync.
   */
  createUpload(
    endpointId: string,
    sizeBytes: number,
  ): Promise<{ uploadUrl: string; inputRef: string; expiresInSec: number; sizeBytes: number }>;
  /** The JSON object stored at `inputRef`: 400 when missing or not an object, 413 over `maxBytes`. */
  readInput(inputRef: string, maxBytes: number): Promise<Record<string, unknown>>;
  /** A client answer made to fit the front door's response cap (big outputs become presigned URLs). */
  fitResponse(body: unknown): Promise<unknown>;
}

export interface ApiOptions {
  engine: JobEngine;
  control: EndpointDirectory;
  auth: Authenticator;
  payloads?: PayloadStore;
  /** Where job-log lines go; without it there is no job-log route (404, which the runtime tolerates). */
  logs?: LogStore;
  /**
   * The worker rate limit's windows of the front door in front of this API (core/worker-rate.ts),
   * which counted each worker request once before its body was read: a job-log batch is counted
   * there again by the store reads it causes, once its jobs are known.
   */
  workerWindows?: WorkerWindows;
  /**
   * Upper bound on any wait (runsync, status-sync, stream, job-take) and on the time a purge-queue
   * starts batches (Engine.purge). Unbounded locally; on AWS it
   * stays under API Gateway's 29 s integration timeout and clients keep polling (docs/api.md#aws-front-door).
   */
  maxWaitMs?: number;
  /** How long worker long polls (job-take, job-stop) are held. */
  workerWaitMs?: number;
  /**
   * The AWS agent: its endpoint's max_concurrency (FERRY_MAX_CONCURRENCY), which its pinned record
   * (worker-image/agent/ports.ts) does not carry. Elsewhere the endpoint's record says.
   */
  workerMaxConcurrency?: number;
  streamWaitMs?: number;
  /** How long an endpoint lookup is remembered. */
  endpointCacheMs?: number;
  /** Where internal failures are logged with their request id (default stderr). */
  log?: Logger;
  /** Runs before a by-name lookup: `ferry dev` provisions a live endpoint on its first call. */
  beforeResolve?: (app: string, env: string, name: string) => Promise<void>;
  /**
   * Why no request may run an endpoint's code now, else undefined: while it gives a reason, run,
   * runsync and retry (by id and by name) answer 503 {"error": reason}, whoever calls, once the key
   * is checked; a job's other routes still answer, so what runs can be followed and stopped. `ferry
   * dev` after a failed reload (docs/api.md#the-dev-server): its workers still hold the code from
   * before the change. Asked on every such request, so it reads nothing.
   */
  runsRefusedBecause?: () => string | undefined;
}

type Handler = (ctx: RouteContext) => Promise<ApiResponse>;

interface RouteContext {
  req: ApiRequest;
  endpointId: string;
  endpoint: EndpointRecord;
  params: string[];
  /** A worker's call token calls (KeyScope.callFrom): the endpoint whose workers hold it. */
  callFrom?: string | undefined;
}

/**
 * What a worker's call token (KeyScope.callFrom) may do on a client route. User code holds it, so it
 * reaches what a remote call needs (docs/python.md#remote-calls) and no more (docs/security.md):
 * `allowed`, the route as a client key has it (a submit records who made it, Job.submittedBy);
 * `own-job`, only a job its own endpoint submitted, any other reading as unknown (404); absent, 403.
 */
type CallTokenRule = 'allowed' | 'own-job';

interface Route {
  methods: string[];
  /** The path after `/v2/<endpointId>/`, split on '/': literal segments and ':' placeholders. */
  pattern: string[];
  caller: 'client' | 'worker';
  handler: Handler;
  /** Client routes only: what a call token may do here; absent, nothing (403). */
  callToken?: CallTokenRule;
  /** It runs the endpoint's code (a job): refused while ApiOptions.runsRefusedBecause gives a reason. */
  runsCode?: true;
}

/** A route a request asks for, and its params (decoded). */
interface Matched {
  route: Route;
  params: string[];
}

const ok = (body: unknown): ApiResponse => ({ statusCode: 200, body });

/**
 * The methods of a GET that only reads (the endpoint lookups by id and by name, status, health): HEAD
 * answers as that GET does, and the HTTP edge sends no body (RFC 9110 §9.3.2). Never job-take(-batch),
 * whose GET claims jobs a HEAD would drop, nor stream, whose GET drains the chunks it answers with.
 */
const readMethods = ['GET', 'HEAD'];

export class V2Api {
  private readonly routes: Route[];
  private readonly endpoints = new Map<string, { record: EndpointRecord | undefined; untilMs: number }>();

  constructor(private readonly options: ApiOptions) {
    const get = ['GET'];
    const post = ['POST'];
    const readOrPost = [...readMethods, 'POST'];
    const either = ['GET', 'POST'];
    this.routes = [
      {
        methods: post,
        pattern: ['run'],
        caller: 'client',
        handler: (c) => this.run(c),
        callToken: 'allowed',
        runsCode: true,
      },
      {
        methods: post,
        pattern: ['runsync'],
        caller: 'client',
        handler: (c) => this.runSync(c),
        callToken: 'allowed',
        runsCode: true,
      },
      {
        methods: readOrPost,
        pattern: ['status', ':id'],
        caller: 'client',
        handler: (c) => this.status(c),
        callToken: 'own-job',
      },
      {
        methods: readOrPost,
        pattern: ['status-sync', ':id'],
        caller: 'client',
        handler: (c) => this.statusSync(c),
        callToken: 'own-job',
      },
      {
        methods: either,
        pattern: ['stream', ':id'],
        caller: 'client',
        handler: (c) => this.stream(c),
        callToken: 'own-job',
      },
      {
        methods: post,
        pattern: ['cancel', ':id'],
        caller: 'client',
        handler: (c) => this.cancel(c),
        callToken: 'own-job',
      },
      // Retry runs another caller's input again, purge-queue cancels every caller's queued jobs: a
      // call token has neither (callTokenRefusal).
      {
        methods: post,
        pattern: ['retry', ':id'],
        caller: 'client',
        handler: (c) => this.retry(c),
        runsCode: true,
      },
      { methods: post, pattern: ['purge-queue'], caller: 'client', handler: (c) => this.purge(c) },
      // Counts of jobs and workers only, no job's data: the Python client's EndpointClient.health.
      {
        methods: readMethods,
        pattern: ['health'],
        caller: 'client',
        handler: (c) => this.health(c),
        callToken: 'allowed',
      },
      ...(options.payloads
        ? [
            {
              methods: post,
              pattern: ['uploads'],
              caller: 'client' as const,
              handler: (c: RouteContext) => this.upload(c),
              // A big input's upload, which only a later submit (with this token) reads.
              callToken: 'allowed' as const,
            },
          ]
        : []),
      {
        methods: get,
        pattern: ['job-take', ':worker'],
        caller: 'worker',
        handler: (c) => this.take(c, false),
      },
      {
        methods: get,
        pattern: ['job-take-batch', ':worker'],
        caller: 'worker',
        handler: (c) => this.take(c, true),
      },
      { methods: get, pattern: ['job-stop', ':worker'], caller: 'worker', handler: (c) => this.jobStop(c) },
      {
        methods: post,
        pattern: ['job-done', ':worker', ':id'],
        caller: 'worker',
        handler: (c) => this.jobDone(c),
      },
      {
        methods: post,
        pattern: ['job-done-batch', ':worker'],
        caller: 'worker',
        handler: (c) => this.jobDoneBatch(c),
      },
      {
        methods: post,
        pattern: ['job-stream', ':worker', ':id'],
        caller: 'worker',
        handler: (c) => this.jobStream(c),
      },
      { methods: either, pattern: ['ping', ':worker'], caller: 'worker', handler: (c) => this.ping(c) },
      ...(options.logs
        ? [
            {
              methods: post,
              pattern: ['job-log', ':worker'],
              caller: 'worker' as const,
              handler: this.jobLog,
            },
          ]
        : []),
    ];
  }

  /**
   * Who calls a route (`job-take` → worker, `run` → client), or undefined when this API has no such
   * route: a front door that serves one kind of caller (the queue agent) asks rather than keep a list.
   */
  callerOf(route: string): 'client' | 'worker' | undefined {
    return this.routes.find((r) => r.pattern[0] === route)?.caller;
  }

  /** Never throws: every failure becomes the error answer of docs/api.md#errors. */
  async handle(req: ApiRequest): Promise<ApiResponse> {
    try {
      return await this.dispatch(req);
    } catch (error) {
      return this.errorAnswer(req, error, `${req.method} ${req.path}`);
    }
  }

  /** The error answer of docs/api.md#errors for a failure while serving `req` (5xx logged, no internals). */
  private errorAnswer(req: ApiRequest, error: unknown, what: string) {
    return toHttpResponse(error, {
      requestId: req.requestId ?? randomUUID(),
      log: this.options.log ?? stderrLogger,
      what,
    });
  }

  private async dispatch(req: ApiRequest): Promise<ApiResponse> {
    const segments = req.path.split('/').filter((s) => s.length > 0);
    const method = req.method.toUpperCase();
    if (
      segments[0] === 'v2' &&
      segments.length === 2 &&
      segments[1] !== byNameSegment &&
      readMethods.includes(method)
    ) {
      return this.byId(req, decodeURIComponent(segments[1]!));
    }
    if (segments[0] !== 'v2' || segments.length < 3) throw notFound(`No route for ${req.method} ${req.path}`);
    if (segments[1] === byNameSegment) return this.byName(req, method, segments.slice(2));
    return this.route(req, decodeURIComponent(segments[1]!), this.matching(method, segments.slice(2)));
  }

  /**
   * `/v2/by-name/<app>/<env>/<endpoint>[/<route>]` (core/names.ts, docs/python.md): GET without a
   * route answers the resolution (id, kind); with one, that client route of the resolved endpoint.
   * The key is checked first, and its scope against the endpoint found (outside it, the 404 of an
   * unknown endpoint: endpointWithinScope).
   */
  private async byName(req: ApiRequest, method: string, segments: string[]): Promise<ApiResponse> {
    if (segments.length < 3) throw notFound(`No route for ${req.method} ${req.path}`);
    const [app, env, name] = segments.slice(0, 3).map((s) => decodeURIComponent(s)) as [
      string,
      string,
      string,
    ];
    const scope = await this.clientScope(req);
    // '-' with a key bound to one environment of this app (a worker's call token) means that one.
    const wanted = env === anyEnv && scope.app === app && scope.env !== undefined ? scope.env : env;
    // A key scoped elsewhere is refused before the lookup, which could provision (`ferry dev`) and
    // would tell whether the endpoint exists. With '-' left, only the app is known until the record
    // is found (checked again below), so only the app is checked here.
    const asked = `${app}/${env}/${name}`;
    if (!scopeCovers(scope, { app, env: wanted === anyEnv ? (scope.env ?? anyEnv) : wanted })) {
      throw endpointNotFound(scope, asked);
    }
    const rest = segments.slice(3);
    // Matched once, here: refused before the lookup, which provisions under `ferry dev` (not for a
    // run it would refuse), then served (route) by what this found.
    const matched = this.matching(method, rest);
    const refused = this.refusedRun(matched?.route);
    if (refused !== undefined) return refused;
    await this.options.beforeResolve?.(app, wanted, name);
    const record = endpointWithinScope(
      scope,
      asked,
      await resolveByName(this.options.control, app, wanted, name),
    );
    if (rest.length > 0) return this.route(req, record.id, matched, scope);
    if (!readMethods.includes(method)) throw notFound(`No route for ${req.method} ${req.path}`);
    return ok(resolutionOf(record));
  }

  /**
   * `GET /v2/<endpointId>`: the answer by-name gives, for a caller that has the id (the SDK's
   * `Endpoint(id=…)`): above all where a load-balanced endpoint's routes are. Key first (401), then
   * the endpoint as the key may see it (404), as on the endpoint's other routes.
   */
  private async byId(req: ApiRequest, endpointId: string): Promise<ApiResponse> {
    const scope = await this.clientScope(req);
    return ok(resolutionOf(endpointWithinScope(scope, endpointId, await this.endpointRecord(endpointId))));
  }

  /** The scope of the request's client key; 401 when it carries none (checked before any lookup). */
  private async clientScope(req: ApiRequest): Promise<KeyScope> {
    const scope = await this.options.auth.clientKeyScope(credentialOf(req.headers.authorization));
    if (!scope) throw unauthorized();
    return scope;
  }

  private async route(
    req: ApiRequest,
    endpointId: string,
    /** The route the method and the path after the endpoint ask for (matching), if any. */
    matched: Matched | undefined,
    /** The client key's scope, when the caller has looked it up already (by-name). */
    knownScope?: KeyScope,
  ): Promise<ApiResponse> {
    if (!matched) throw notFound(`No route for ${req.method} ${req.path}`);
    const { route, params } = matched;
    // A client key is checked (401) before the endpoint is looked up (a refused run answers then),
    // and one outside the key's scope answers as an unknown one (404), before its kind (400) or any
    // job is read.
    let scope: KeyScope | undefined;
    if (route.caller === 'client') {
      scope = knownScope ?? (await this.clientScope(req));
      const refused = this.refusedRun(route);
      if (refused !== undefined) return refused;
    } else {
      // A worker token opens only its own endpoint's routes, under its own worker id (params[0]).
      const key = credentialOf(req.headers.authorization);
      const access = await this.options.auth.workerAccess(key, endpointId, params[0]!);
      if (access === 'unknown') throw unauthorized();
      if (access === 'mismatch') throw forbidden('This worker token is not for this endpoint and worker');
    }
    const endpoint = queueEndpoint(
      endpointWithinScope(scope ?? {}, endpointId, await this.endpointRecord(endpointId)),
    );
    const callFrom = scope?.callFrom;
    if (callFrom !== undefined) {
      const refusal = callTokenRefusal(route, req);
      if (refusal !== undefined) throw forbidden(refusal);
      // Another caller's job (a client key's, another endpoint's call token's) reads as unknown.
      if (route.callToken === 'own-job') {
        await this.options.engine.mustBeSubmittedBy(endpointId, params[0]!, callFrom);
      }
    }
    return route.handler({ req, endpointId, endpoint, params, callFrom });
  }

  /** The route `method` and the path after the endpoint (`rest`, split on '/') ask for, and its params. */
  private matching(method: string, rest: string[]): Matched | undefined {
    const route = this.routes.find(
      (r) =>
        r.pattern.length === rest.length &&
        r.pattern.every((p, i) => p.startsWith(':') || p === rest[i]) &&
        r.methods.includes(method),
    );
    if (!route) return undefined;
    const params = route.pattern.flatMap((p, i) => (p.startsWith(':') ? [decodeURIComponent(rest[i]!)] : []));
    return { route, params };
  }

  /**
   * The 503 of a route that runs the endpoint's code while ApiOptions.runsRefusedBecause gives a
   * reason; its message is the reason as it is (a 5xx FerryError would be masked: core/errors.ts).
   */
  private refusedRun(route: Route | undefined): ApiResponse | undefined {
    if (!route?.runsCode) return undefined;
    const reason = this.options.runsRefusedBecause?.();
    return reason === undefined ? undefined : { statusCode: 503, body: { error: reason } };
  }

  /** The endpoint's record, held for endpointCacheMs (2 s) between reads; undefined when there is none. */
  private async endpointRecord(endpointId: string): Promise<EndpointRecord | undefined> {
    const now = Date.now();
    let cached = this.endpoints.get(endpointId);
    if (!cached || cached.untilMs <= now) {
      cached = {
        record: await this.options.control.getEndpoint(endpointId),
        untilMs: now + (this.options.endpointCacheMs ?? 2_000),
      };
      if (this.endpoints.size > 10_000) this.endpoints.clear();
      this.endpoints.set(endpointId, cached);
    }
    return cached.record;
  }

  private capWait(waitMs: number): number {
    return Math.min(waitMs, this.options.maxWaitMs ?? Number.POSITIVE_INFINITY);
  }

  private endpointTimeoutMs(record: EndpointRecord): number | undefined {
    return settingsOf(record).executionTimeoutMs;
  }

  /**
   * The endpoint's max_concurrency, which job-take holds each worker to (JobEngine.take): the agent's
   * own (ApiOptions.workerMaxConcurrency), else the record's; undefined when neither says.
   */
  private maxConcurrencyOf(record: EndpointRecord): number | undefined {
    return this.options.workerMaxConcurrency ?? settingsOf(record).maxConcurrency;
  }

  // ── client routes ─────────────────────────────────────────────────────────────────────────────

  private async run({ req, endpointId, endpoint, callFrom }: RouteContext): Promise<ApiResponse> {
    const request = await this.runRequest(req, limits.runBodyBytes);
    const job = await this.options.engine.submit(endpointId, request, {
      sync: false,
      executionTimeoutMs: this.endpointTimeoutMs(endpoint),
      submittedBy: callFrom,
    });
    return ok({ id: job.id, status: job.status });
  }

  private async runSync({ req, endpointId, endpoint, callFrom }: RouteContext): Promise<ApiResponse> {
    const waitMs = syncWaitMs(req.query.wait);
    const request = await this.runRequest(req, limits.runsyncBodyBytes);
    const view = await this.options.engine.runSync(endpointId, request, this.capWait(waitMs), req.signal, {
      executionTimeoutMs: this.endpointTimeoutMs(endpoint),
      submittedBy: callFrom,
    });
    return this.fitted(view);
  }

  /**
   * The /run or /runsync body; with a payload store, `{"inputRef": ...}` stands for `input`, and
   * `maxBytes` (the route's limit) bounds what it names.
   */
  private async runRequest(req: ApiRequest, maxBytes: number): Promise<RunRequest> {
    const body = jsonBody(req);
    const payloads = this.options.payloads;
    if (!payloads || typeof body !== 'object' || body === null || !('inputRef' in body)) {
      return parseOr400(runRequestSchema, body, 'request body');
    }
    const { inputRef, ...rest } = body as Record<string, unknown>;
    if ('input' in rest) throw badRequest('Send either input or inputRef, not both');
    if (typeof inputRef !== 'string')
      throw badRequest("Invalid request body at 'inputRef': expected a string");
    const input = await payloads.readInput(inputRef, maxBytes);
    return parseOr400(runRequestSchema, { ...rest, input }, 'request body');
  }

  /** A client answer, shrunk to the front door's response cap when a payload store is configured. */
  private async fitted(body: unknown): Promise<ApiResponse> {
    return ok(this.options.payloads ? await this.options.payloads.fitResponse(body) : body);
  }

  private async upload({ req, endpointId }: RouteContext): Promise<ApiResponse> {
    // No body is the old call (before sizeBytes): the schema's answer says what to send.
    const body = req.body && req.body.length > 0 ? parseJsonExact(req.body, 'Request body') : undefined;
    const { sizeBytes } = parseOr400(uploadRequestSchema, body, 'POST uploads body');
    return ok(await this.options.payloads!.createUpload(endpointId, sizeBytes));
  }

  private async status({ req, endpointId, params }: RouteContext): Promise<ApiResponse> {
    const ttlMs = queryInt(req.query.ttl, 'ttl', 1, limits.ttlMaxMs);
    // Views go out through stringifyJsonExact, which puts an input held as the store's text (JsonText)
    // in as it is. Only the SQLite store keeps such text; DynamoDB's inputs come parsed, as before.
    return this.fitted(await this.options.engine.status(endpointId, params[0]!, ttlMs, true));
  }

  private async statusSync({ req, endpointId, params }: RouteContext): Promise<ApiResponse> {
    const waitMs = syncWaitMs(req.query.wait);
    return this.fitted(
      await this.options.engine.statusSync(endpointId, params[0]!, this.capWait(waitMs), req.signal, true),
    );
  }

  private async stream({ req, endpointId, params }: RouteContext): Promise<ApiResponse> {
    const waitMs =
      queryInt(req.query.wait, 'wait', 0, limits.waitMaxMs) ??
      this.options.streamWaitMs ??
      limits.streamWaitMs;
    return this.fitted(
      await this.options.engine.stream(endpointId, params[0]!, this.capWait(waitMs), req.signal),
    );
  }

  private async cancel({ endpointId, params }: RouteContext): Promise<ApiResponse> {
    return ok(await this.options.engine.cancel(endpointId, params[0]!));
  }

  private async retry({ endpointId, params }: RouteContext): Promise<ApiResponse> {
    return ok(await this.options.engine.retry(endpointId, params[0]!));
  }

  private async purge({ endpointId }: RouteContext): Promise<ApiResponse> {
    // Bounded like every wait on AWS (maxWaitMs, inside the integration timeout); unbounded locally.
    const budgetMs = this.options.maxWaitMs;
    return ok(await this.options.engine.purge(endpointId, budgetMs === undefined ? {} : { budgetMs }));
  }

  private async health({ endpointId, callFrom }: RouteContext): Promise<ApiResponse> {
    const health = await this.options.engine.health(endpointId);
    if (callFrom === undefined || !health.problem) return ok(health);
    // A call token reads counts (docs/security.md): the last lines an endpoint's workers printed
    // may hold its jobs' data (a handler that printed a client's input before it crashed).
    const { lines: _lines, ...problem } = health.problem;
    return ok({ ...health, problem });
  }

  // ── worker routes (docs/architecture.md#worker-protocol) ─────────────────────────────────────────────────

  private workerWaitMs(): number {
    return this.capWait(this.options.workerWaitMs ?? limits.workerPollWaitMs);
  }

  private async take(
    { req, endpointId, endpoint, params }: RouteContext,
    batch: boolean,
  ): Promise<ApiResponse> {
    const max = batch ? (queryInt(req.query.batch_size, 'batch_size', 1, 100) ?? 1) : 1;
    // Written out by stringifyJsonExact, which puts each input in as the text the store holds.
    const jobs = await this.options.engine.take(
      endpointId,
      params[0]!,
      max,
      this.workerWaitMs(),
      req.signal,
      true,
      this.maxConcurrencyOf(endpoint),
    );
    if (jobs.length === 0) return { statusCode: 204 };
    return ok(batch ? jobs : jobs[0]);
  }

  private async jobStop({ req, endpointId, params }: RouteContext): Promise<ApiResponse> {
    const ids = await this.options.engine.jobsToStop(endpointId, params[0]!, this.workerWaitMs(), req.signal);
    return ids.length === 0 ? { statusCode: 204 } : ok({ jobsToStop: ids });
  }

  private async jobDone({ req, endpointId, params }: RouteContext): Promise<ApiResponse> {
    const size = req.droppedBodyBytes ?? req.body?.length ?? 0;
    if (size > limits.jobDoneBodyBytes) {
      // The job fails now, with the reason: left running it would be retried and end as "stopped
      // responding" (issue 13).
      const message = `Result of ${size} bytes is over the ${limits.jobDoneBodyBytes}-byte limit`;
      await this.options.engine.done(endpointId, params[0]!, params[1]!, { error: message });
      throw badRequest(message, 'Return large outputs as a URL (upload them from the handler)');
    }
    // RunPod's SDK posts JSON labelled application/x-www-form-urlencoded: parse JSON whatever the type.
    const body = parseOr400(jobDoneSchema, workerBody(req), 'job-done body');
    return ok(await this.options.engine.done(endpointId, params[0]!, params[1]!, body));
  }

  /**
   * job-done-batch (a Ferry route; RunPod workers never call it): the results of several jobs at once,
   * each handled as its own job-done would be, all in the same turn so the store commits them
   * together. One job's refusal does not touch the others: the answer lists each job's status code,
   * and its error when it was refused.
   */
  private async jobDoneBatch({ req, endpointId, params }: RouteContext): Promise<ApiResponse> {
    const { jobs } = parseOr400(jobDoneBatchSchema, workerBody(req), 'job-done-batch body');
    const answers = await Promise.all(
      jobs.map(async ({ id, result }) => {
        try {
          const body = parseOr400(jobDoneSchema, result, `result of job ${id}`);
          const { status } = await this.options.engine.done(endpointId, params[0]!, id, body);
          return { id, statusCode: 200, status };
        } catch (error) {
          const answer = this.errorAnswer(req, error, `job-done-batch of job ${id}`);
          return { id, statusCode: answer.statusCode, error: answer.body.error };
        }
      }),
    );
    return ok({ jobs: answers });
  }

  private async jobStream({ req, endpointId, params }: RouteContext): Promise<ApiResponse> {
    const chunk = parseOr400(jobStreamSchema, workerBody(req), 'job-stream body');
    await this.options.engine.streamChunk(endpointId, params[0]!, params[1]!, chunk);
    return ok({});
  }

  /**
   * A batch of output lines (docs/observability.md); each job must be one this worker ran (holds, or
   * held when it ended): a worker token writes into no other job's log, not even its endpoint's.
   */
  private readonly jobLog = async ({ req, endpointId, params }: RouteContext): Promise<ApiResponse> => {
    const { lines } = parseOr400(jobLogSchema, workerBody(req), 'job-log body');
    const workerId = params[0]!;
    const jobIds = new Set(lines.map((line) => line.jobId));
    // Each job is a read in the store (on AWS a DynamoDB GetItem): a worker ships the lines of the
    // few jobs it runs, never a thousand.
    if (jobIds.size > limits.logBatchJobs) {
      throw badRequest(
        `A job-log request carries the lines of at most ${limits.logBatchJobs} jobs; this one names ${jobIds.size}`,
      );
    }
    // Each job is also counted against the worker's rate window: within its request limit, a
    // worker naming 500 jobs a batch would otherwise cost the store 500 reads per request counted.
    const refused = this.options.workerWindows?.readsRefusal(
      hashKey(credentialOf(req.headers.authorization) ?? ''),
      jobIds.size,
    );
    if (refused !== undefined) {
      return {
        statusCode: 429,
        headers: { 'retry-after': String(refused.retryAfterSec) },
        body: { error: refused.error },
      };
    }
    for (const jobId of jobIds) {
      await this.options.engine.mustHaveRun(endpointId, jobId, workerId).catch((error: unknown) => {
        throw FerryError.is(error) && error.code === 'not_found'
          ? badRequest(
              `Job ${jobId} is not a job that worker ${workerId} of endpoint ${endpointId} runs or ran`,
            )
          : error;
      });
    }
    await this.options.logs!.append(
      lines.map((line) => ({
        ...line,
        endpointId,
        workerId,
        text: line.text.slice(0, limits.logLineChars),
      })),
    );
    return ok({});
  };

  private async ping({ req, endpointId, params }: RouteContext): Promise<ApiResponse> {
    const ids = (req.query.job_id ?? '').split(',').filter((id) => id.length > 0);
    // Each id is a lease renewal in the store: a worker lists the jobs it holds, never thousands.
    if (ids.length > limits.pingJobIds) {
      throw badRequest(
        `A ping lists at most ${limits.pingJobIds} job ids (the jobs the worker holds); this one lists ${ids.length}`,
      );
    }
    await this.options.engine.ping(endpointId, params[0]!, ids);
    return ok({});
  }
}

/**
 * Why a worker's call token may not call `route` as `req` asks (the 403's message), or undefined when
 * it may. Decided before any job is read, so a refusal says nothing about the job it names.
 */
function callTokenRefusal(route: Route, req: ApiRequest): string | undefined {
  const what =
    route.callToken === undefined
      ? `call ${route.pattern[0]}`
      : route.pattern[0] === 'status' && req.query.ttl !== undefined
        ? "set how long a job's result is kept (status ?ttl=)"
        : undefined;
  return what === undefined
    ? undefined
    : `A worker's call token may not ${what}: it may submit jobs to the endpoints of its app and environment and follow the jobs it submitted; use a client API key`;
}

/** What the API reads of an endpoint's configuration; undefined where the record does not say. */
interface RecordSettings {
  executionTimeoutMs: number | undefined;
  maxConcurrency: number | undefined;
}

/** RecordSettings by record object (records are not changed in place). */
const settingsOfRecord = new WeakMap<EndpointRecord, RecordSettings>();

/** The endpoint a /v2 route names: queue-based only (load-balanced ones are called on their URL). */
function queueEndpoint(record: EndpointRecord): EndpointRecord {
  if (record.kind !== 'queue') {
    throw badRequest(`Endpoint ${record.id} is load-balanced: call its routes on its own URL, not /v2/`);
  }
  return record;
}

/** Parsed once per record the endpoint cache holds, not on every /run or job-take. */
function settingsOf(record: EndpointRecord): RecordSettings {
  let settings = settingsOfRecord.get(record);
  if (!settings) {
    const parsed = endpointConfigSchema.safeParse(record.config);
    const resources = parsed.success ? parsed.data.endpoint.resources : undefined;
    settings = {
      executionTimeoutMs:
        resources && resources.executionTimeoutMs > 0 ? resources.executionTimeoutMs : undefined,
      maxConcurrency: resources?.maxConcurrency,
    };
    settingsOfRecord.set(record, settings);
  }
  return settings;
}

/**
 * What a lookup of an endpoint answers (by name or by id): who it is, its kind, and for a
 * load-balanced endpoint deployed on AWS the HTTPS front its routes are called on, with the same key
 * (queue endpoints, and local load-balanced ones at /lb/<id>, have none).
 */
function resolutionOf(record: EndpointRecord) {
  const url = record.kind === 'lb' ? awsInfoOf(record)?.url : undefined;
  const { id, kind, app, env, name } = record;
  return { id, kind, app, env, name, ...(url ? { url } : {}) };
}

/**
 * `?wait=` of runsync and status-sync (default 90 s). RunPod documents 1000–300000 ms, yet its clients
 * send numbers outside it: runpod's Go SDK asks `wait=<timeout s × 1000>`, so wait=0 for a 0 s
 * timeout, and takes any answer but 200 as a failure. A whole number outside the range is brought
 * into it, as runpod-sdk (JS) does before it sends; anything else (`-5`, `1.5`, `abc`) is a 400.
 */
function syncWaitMs(value: string | undefined): number {
  const asked = queryInt(value, 'wait', 0, Number.POSITIVE_INFINITY);
  if (asked === undefined) return limits.runsyncDefaultWaitMs;
  return Math.min(Math.max(asked, limits.waitMinMs), limits.waitMaxMs);
}

/**
 * The request body as JSON. Its size limit (docs/api.md#limits) is the front door's: the local one
 * refuses a body over its route's limit before the API sees it (core/adapters/local/http.ts), and on
 * AWS nothing over 6 MB reaches the function (docs/api.md#aws-front-door).
 */
function jsonBody(req: ApiRequest): unknown {
  const body = req.body;
  if (!body || body.length === 0)
    throw badRequest('Request body must be a JSON object like {"input": {...}}');
  return parseJsonExact(body, 'Request body');
}

function workerBody(req: ApiRequest): unknown {
  if (req.body && req.body.length > limits.jobDoneBodyBytes) {
    throw badRequest(`Result of ${req.body.length} bytes is over the ${limits.jobDoneBodyBytes}-byte limit`);
  }
  if (!req.body || req.body.length === 0) throw badRequest('Request body must be a JSON object');
  return parseJsonExact(req.body, 'Request body');
}
