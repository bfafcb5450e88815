/**
 * The management API beside the v2 API (docs/observability.md): what the console, `ferry logs` and
 * scripts read about endpoints, jobs, workers, logs and recent performance. Framework-free like
 * V2Api (a request in, a status and a JSON body out); the local Fastify server and the API Lambda
 * both call `handle`. Same client API keys as /v2; read-only except nothing (runs go through /v2).
 *
 *   GET /manage/v1/endpoints                                 every endpoint with health and scaling
 *   GET /manage/v1/endpoints/{id}                            one endpoint
 *   GET /manage/v1/endpoints/{id}/jobs?status=&from=&to=&limit=&cursor=   newest first, paged
 *   GET /manage/v1/endpoints/{id}/jobs/{jobId}               input, output, timings, streams, first log lines
 *   GET /manage/v1/endpoints/{id}/jobs/{jobId}/stream?after=            its stream chunks, none taken
 *   GET /manage/v1/endpoints/{id}/logs?job=&since=&after=&limit=          oldest first, resumable
 *   GET /manage/v1/endpoints/{id}/workers                    workers and the jobs each holds
 *   GET /manage/v1/endpoints/{id}/metrics?hours=&step=       time series
 *   GET /manage/v1/openapi.json                              this API as OpenAPI 3 (no key needed)
 */
import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import type { ApiRequest, ApiResponse, PayloadStore } from './api.js';
import { type Authenticator, authorizeOperator } from './auth.js';
import { declaredStreaming, endpointConfigSchema } from './deployment.js';
import type { JobEngine } from './engine.js';
import { badRequest, notFound, toHttpResponse } from './errors.js';
import { isFinal, type Job, type JobStatus, jobStatuses } from './job.js';
import { type Logger, stderrLogger } from './log.js';
import type {
  ControlStore,
  EndpointRecord,
  JobQueue,
  JobStore,
  LogLine,
  LogStore,
  WorkerRecord,
} from './ports.js';
import { parseOr400 } from './schemas.js';

export const managePrefix = '/manage/v1';

/**
 * Who is working for an endpoint and which jobs each holds. Today the WorkerRegistry answers this;
 * the supervisor's record can stand in without the API changing.
 */
export interface WorkerSource {
  list(endpointId: string, sinceMs: number): Promise<WorkerRecord[]>;
}

/** One sample of what only the present can tell: queue depth and workers. */
export interface GaugeSample {
  atMs: number;
  queueDepth: number;
  workersRunning: number;
  workersIdle: number;
}

/**
 * Queue depth and worker counts over time, per endpoint, in memory. Job-derived series (throughput,
 * latency) come from the job records instead, so they survive restarts; these do not, and a
 * provider without a long-lived process (the API Lambda) has only the current value.
 */
export class GaugeHistory {
  private readonly byEndpoint = new Map<string, GaugeSample[]>();
  constructor(private readonly keepMs = 6 * 3_600_000) {}

  add(endpointId: string, sample: GaugeSample): void {
    const samples = this.byEndpoint.get(endpointId) ?? [];
    samples.push(sample);
    while (samples.length > 0 && samples[0]!.atMs < sample.atMs - this.keepMs) samples.shift();
    this.byEndpoint.set(endpointId, samples);
  }

  since(endpointId: string, fromMs: number): GaugeSample[] {
    return (this.byEndpoint.get(endpointId) ?? []).filter((s) => s.atMs >= fromMs);
  }
}

export interface ManageApiOptions {
  engine: JobEngine;
  jobs: JobStore;
  queue: JobQueue;
  control: ControlStore;
  workers: WorkerSource;
  logs: LogStore;
  auth: Authenticator;
  gauges?: GaugeHistory;
  now?: () => number;
  /** A worker not heard from for this long is not listed. */
  workerStaleMs?: number;
  log?: Logger;
  /**
   * Where a job's detail is made to fit a capped response (AWS: 6 MB per Lambda answer), as the v2
   * routes' answers are: a big input or output becomes a presigned URL.
   */
  payloads?: Pick<PayloadStore, 'fitResponse'>;
}

const statusList = z
  .string()
  .transform((value) => value.split(',').filter((s) => s.length > 0))
  .pipe(z.array(z.enum(jobStatuses)).max(jobStatuses.length));
const epochMs = z.coerce.number().int().nonnegative().max(8.64e15);

const jobsQuerySchema = z
  .object({
    status: statusList.optional(),
    from: epochMs.optional(),
    to: epochMs.optional(),
    limit: z.coerce.number().int().min(1).max(200).optional(),
    cursor: z.string().max(1000).optional(),
  })
  .strict();

const logsQuerySchema = z
  .object({
    job: z.string().min(1).max(256).optional(),
    since: epochMs.optional(),
    after: z.string().max(4096).optional(),
    limit: z.coerce.number().int().min(1).max(5000).optional(),
    follow: z.enum(['0', '1']).optional(),
  })
  .strict();

/**
 * How far a job's log read reaches before its createdAt and past its finishedAt. Its lines are
 * stamped by the worker's clock, its times by the API's and the agent's; the runtime flushes a job's
 * lines before it posts the result (docs/observability.md), so a line outside the job's life is
 * only a clock's error. Without the bounds a read of a job that has printed nothing yet scanned
 * every stored line of the endpoint (two weeks on AWS), once a second per open console page.
 */
export const jobLogClockMarginMs = 5_000;

/** The time range of a job's lines: its life, with the margin above; open-ended while it runs. */
function jobLogWindow(job: Job): { sinceMs: number; untilMs: number | undefined } {
  return {
    sinceMs: Math.max(0, job.createdAt - jobLogClockMarginMs),
    untilMs:
      isFinal(job.status) && job.finishedAt !== undefined ? job.finishedAt + jobLogClockMarginMs : undefined,
  };
}

const metricsQuerySchema = z
  .object({
    hours: z.coerce.number().min(0.05).max(24).optional(),
    step: z.coerce.number().int().min(10).max(3600).optional(),
  })
  .strict();

const streamQuerySchema = z
  .object({
    after: z.coerce.number().int().min(0).max(Number.MAX_SAFE_INTEGER).optional(),
  })
  .strict();

const noQuerySchema = z.object({}).strict();

/** The job as the management API shows it: everything the v2 view has, plus when and where. */
export interface JobDetail {
  id: string;
  endpointId: string;
  status: JobStatus;
  createdAt: number;
  startedAt?: number | undefined;
  finishedAt?: number | undefined;
  expiresAt: number;
  delayMs?: number | undefined;
  executionMs?: number | undefined;
  workerId?: string | undefined;
  attempt: number;
  retries: number;
  input?: unknown;
  output?: unknown;
  error?: string | undefined;
}

export function jobDetailOf(job: Job, nowMs: number, withPayloads: boolean): JobDetail {
  const delayEnd = job.startedAt ?? (job.status === 'IN_QUEUE' ? nowMs : job.finishedAt);
  return {
    id: job.id,
    endpointId: job.endpointId,
    status: job.status,
    createdAt: job.createdAt,
    startedAt: job.startedAt,
    finishedAt: job.finishedAt,
    expiresAt: job.expiresAt,
    delayMs: delayEnd !== undefined ? Math.max(0, delayEnd - job.createdAt) : undefined,
    executionMs:
      job.startedAt !== undefined && job.status !== 'IN_QUEUE'
        ? Math.max(0, (job.finishedAt ?? nowMs) - job.startedAt)
        : undefined,
    workerId: job.workerId,
    attempt: job.attempt,
    retries: job.retries,
    ...(withPayloads ? { input: job.input, output: job.output } : {}),
    error: job.error,
  };
}

/** The p-th percentile (0..1) of sorted values, nearest rank; undefined for none. */
export function percentile(sorted: readonly number[], p: number): number | undefined {
  if (sorted.length === 0) return undefined;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))];
}

export interface MetricsSeries {
  fromMs: number;
  stepSec: number;
  /** Bucket start times, epoch seconds (what uPlot takes). */
  t: number[];
  jobsPerSec: number[];
  failedPerSec: number[];
  executionP50Ms: (number | null)[];
  executionP95Ms: (number | null)[];
  delayP50Ms: (number | null)[];
  delayP95Ms: (number | null)[];
  queueDepth: (number | null)[];
  workers: (number | null)[];
  /** True when more jobs ended in the window than were read (the series undercount). */
  truncated: boolean;
}

/** Buckets finished jobs by finishedAt, and gauge samples by time (the last sample of a bucket). */
export function metricsOf(
  jobs: readonly Job[],
  gauges: readonly GaugeSample[],
  fromMs: number,
  toMs: number,
  stepSec: number,
): Omit<MetricsSeries, 'truncated'> {
  const stepMs = stepSec * 1000;
  const count = Math.max(1, Math.ceil((toMs - fromMs) / stepMs));
  const buckets = Array.from({ length: count }, () => ({
    done: 0,
    failed: 0,
    exec: [] as number[],
    delay: [] as number[],
    gauge: undefined as GaugeSample | undefined,
  }));
  // `toMs` itself (the present's gauge sample, a job that just finished) belongs to the last bucket.
  const at = (ms: number) => (ms > toMs ? count : Math.min(count - 1, Math.floor((ms - fromMs) / stepMs)));
  for (const job of jobs) {
    if (!isFinal(job.status) || job.finishedAt === undefined) continue;
    const bucket = buckets[at(job.finishedAt)];
    if (!bucket) continue;
    bucket.done++;
    if (job.status === 'FAILED' || job.status === 'TIMED_OUT') bucket.failed++;
    if (job.startedAt !== undefined) {
      bucket.exec.push(job.finishedAt - job.startedAt);
      bucket.delay.push(job.startedAt - job.createdAt);
    }
  }
  for (const sample of gauges) {
    const bucket = buckets[at(sample.atMs)];
    if (bucket) bucket.gauge = sample;
  }
  const sorted = (values: number[]) => values.sort((a, b) => a - b);
  return {
    fromMs,
    stepSec,
    t: buckets.map((_, i) => Math.floor((fromMs + i * stepMs) / 1000)),
    jobsPerSec: buckets.map((b) => b.done / stepSec),
    failedPerSec: buckets.map((b) => b.failed / stepSec),
    executionP50Ms: buckets.map((b) => percentile(sorted(b.exec), 0.5) ?? null),
    executionP95Ms: buckets.map((b) => percentile(sorted(b.exec), 0.95) ?? null),
    delayP50Ms: buckets.map((b) => percentile(sorted(b.delay), 0.5) ?? null),
    delayP95Ms: buckets.map((b) => percentile(sorted(b.delay), 0.95) ?? null),
    queueDepth: buckets.map((b) => b.gauge?.queueDepth ?? null),
    workers: buckets.map((b) => (b.gauge ? b.gauge.workersRunning + b.gauge.workersIdle : null)),
  };
}

type Handler = (req: ApiRequest, params: string[]) => Promise<unknown>;

const ok = (body: unknown): ApiResponse => ({ statusCode: 200, body });

/** How many finished jobs a metrics request reads at most (pages of 200). */
const metricsJobCap = 5_000;

export class ManageApi {
  private readonly routes: { pattern: string[]; handler: Handler }[];
  private readonly now: () => number;

  constructor(private readonly options: ManageApiOptions) {
    this.now = options.now ?? Date.now;
    this.routes = [
      { pattern: ['endpoints'], handler: (r) => this.endpoints(r) },
      { pattern: ['endpoints', ':id'], handler: (r, p) => this.endpoint(r, p[0]!) },
      { pattern: ['endpoints', ':id', 'jobs'], handler: (r, p) => this.jobList(r, p[0]!) },
      { pattern: ['endpoints', ':id', 'jobs', ':job'], handler: (r, p) => this.job(r, p[0]!, p[1]!) },
      {
        pattern: ['endpoints', ':id', 'jobs', ':job', 'stream'],
        handler: (r, p) => this.jobStream(r, p[0]!, p[1]!),
      },
      { pattern: ['endpoints', ':id', 'logs'], handler: (r, p) => this.logs(r, p[0]!) },
      { pattern: ['endpoints', ':id', 'workers'], handler: (r, p) => this.workerList(r, p[0]!) },
      { pattern: ['endpoints', ':id', 'metrics'], handler: (r, p) => this.metrics(r, p[0]!) },
    ];
  }

  /** Never throws: every failure becomes `{"error": "..."}` with its status (5xx without internals). */
  async handle(req: ApiRequest): Promise<ApiResponse> {
    try {
      return await this.dispatch(req);
    } catch (error) {
      // 5xx: "internal error" and a request id, the detail only in the log (core/errors.ts).
      return toHttpResponse(error, {
        requestId: req.requestId ?? randomUUID(),
        log: this.options.log ?? stderrLogger,
      });
    }
  }

  private async dispatch(req: ApiRequest): Promise<ApiResponse> {
    if (!req.path.startsWith(`${managePrefix}/`)) throw notFound(`No route for ${req.method} ${req.path}`);
    const rest = req.path
      .slice(managePrefix.length)
      .split('/')
      .filter((s) => s.length > 0)
      .map((s) => {
        try {
          return decodeURIComponent(s);
        } catch {
          throw badRequest(
            `Bad request: the path ${JSON.stringify(req.path.slice(0, 200))} is not valid percent-encoding`,
          );
        }
      });
    const method = req.method.toUpperCase();
    if (rest.length === 1 && rest[0] === 'openapi.json' && method === 'GET') return ok(manageOpenApi);
    for (const route of this.routes) {
      if (route.pattern.length !== rest.length) continue;
      if (!route.pattern.every((p, i) => p.startsWith(':') || p === rest[i])) continue;
      await authorizeOperator(this.options.auth, req.headers.authorization);
      if (method !== 'GET') break;
      const params = route.pattern.flatMap((p, i) => (p.startsWith(':') ? [rest[i]!] : []));
      return ok(await route.handler(req, params));
    }
    throw notFound(`No route for ${req.method} ${req.path}`);
  }

  private async record(endpointId: string): Promise<EndpointRecord> {
    const record = await this.options.control.getEndpoint(endpointId);
    if (!record) throw notFound(`Endpoint ${endpointId} not found`);
    return record;
  }

  private async summary(record: EndpointRecord) {
    const parsed = endpointConfigSchema.safeParse(record.config);
    const resources = parsed.success ? parsed.data.endpoint.resources : undefined;
    const base = {
      id: record.id,
      name: record.name,
      app: record.app,
      env: record.env,
      kind: record.kind,
      fingerprint: record.fingerprint,
      createdAt: record.createdAt,
      updatedAt: record.updatedAt,
      scaling: resources
        ? {
            workersMin: resources.workersMin,
            workersMax: resources.workersMax,
            idleTimeoutSec: resources.idleTimeoutSec,
          }
        : undefined,
    };
    if (record.kind !== 'queue') {
      // A load-balanced endpoint has no jobs, so no health: its workers beside its summary, and why
      // they cannot start when they cannot (docs/workers.md).
      const { idle, running, problem } = await this.options.engine.workerCounts(record.id);
      return { ...base, health: undefined, workers: { idle, running }, ...(problem ? { problem } : {}) };
    }
    const [health, depth] = await Promise.all([
      this.options.engine.health(record.id),
      this.options.queue.depth(record.id),
    ]);
    return { ...base, health, queue: { visible: depth.visible, urgent: depth.urgent } };
  }

  private async endpoints(req: ApiRequest) {
    parseOr400(noQuerySchema, req.query, 'query');
    const records = await this.options.control.listEndpoints();
    return { endpoints: await Promise.all(records.map((r) => this.summary(r))) };
  }

  private async endpoint(req: ApiRequest, endpointId: string) {
    parseOr400(noQuerySchema, req.query, 'query');
    return this.summary(await this.record(endpointId));
  }

  private async jobList(req: ApiRequest, endpointId: string) {
    const q = parseOr400(jobsQuerySchema, req.query, 'query');
    await this.record(endpointId);
    const now = this.now();
    const page = await this.options.jobs.listRecent(endpointId, {
      statuses: q.status ?? [],
      fromMs: q.from ?? 0,
      toMs: q.to ?? now + 1,
      nowMs: now,
      limit: q.limit ?? 50,
      cursor: q.cursor,
    });
    return { jobs: page.jobs.map((job) => jobDetailOf(job, now, false)), next: page.next };
  }

  private async job(req: ApiRequest, endpointId: string, jobId: string) {
    parseOr400(noQuerySchema, req.query, 'query');
    const now = this.now();
    const job = await this.options.jobs.get(jobId, now);
    if (!job || job.endpointId !== endpointId)
      throw notFound(`Job ${jobId} not found (or its results expired)`);
    const [logs, streams] = await Promise.all([
      // Read as a follower would: the console follows a running job's lines from `logsNext`.
      this.options.logs.read({ endpointId, jobId, ...jobLogWindow(job), follow: true, limit: 1000 }),
      this.streams(job),
    ]);
    const detail = {
      ...jobDetailOf(job, now, true),
      streams,
      logs: logs.lines.map(wireLine),
      logsNext: logs.next,
      logsEnded: logs.ended,
    };
    return this.options.payloads ? this.options.payloads.fitResponse(detail) : detail;
  }

  /**
   * Whether the job streams chunks, so the console reads its stream route only then (a read per poll
   * of every open page of a running job otherwise): by its endpoint's declaration (a generator), and
   * where the declaration does not show the handler (an image, a command of its own) it may. A
   * handler declared otherwise streams when it has chunks all the same: a plain def may return a
   * generator (ferry/queue_runtime.py drains it).
   */
  private async streams(job: Job): Promise<boolean> {
    const record = await this.options.control.getEndpoint(job.endpointId);
    const config = record && endpointConfigSchema.safeParse(record.config);
    if ((config?.success ? declaredStreaming(config.data, job.input) : undefined) !== false) return true;
    return this.options.jobs.hasStream(job.id);
  }

  /**
   * A job's stream chunks so far, after the previous read's `next`, without handing any out: /v2's
   * stream hands each chunk out once, to the job's client, and a read here must never take one
   * from it (JobStore.readStream).
   */
  private async jobStream(req: ApiRequest, endpointId: string, jobId: string) {
    const q = parseOr400(streamQuerySchema, req.query, 'query');
    const job = await this.options.jobs.get(jobId, this.now());
    if (!job || job.endpointId !== endpointId)
      throw notFound(`Job ${jobId} not found (or its results expired)`);
    const read = await this.options.jobs.readStream(jobId, q.after ?? 0);
    const answer = { status: job.status, stream: read.chunks, next: read.next };
    return this.options.payloads ? this.options.payloads.fitResponse(answer) : answer;
  }

  private async logs(req: ApiRequest, endpointId: string) {
    const q = parseOr400(logsQuerySchema, req.query, 'query');
    await this.record(endpointId);
    let window: { sinceMs?: number | undefined; untilMs?: number | undefined } = {};
    if (q.job !== undefined) {
      const job = await this.options.jobs.get(q.job, this.now());
      // A job's lines live as long as the job: an expired or foreign job has none to show.
      if (!job || job.endpointId !== endpointId)
        throw notFound(`Job ${q.job} not found (or its results expired)`);
      window = jobLogWindow(job);
    }
    const page = await this.options.logs.read({
      endpointId,
      jobId: q.job,
      sinceMs: Math.max(q.since ?? 0, window.sinceMs ?? 0) || undefined,
      untilMs: window.untilMs,
      after: q.after,
      follow: q.follow === '1',
      limit: q.limit ?? 500,
    });
    return { lines: page.lines.map(wireLine), next: page.next, more: page.more, ended: page.ended };
  }

  private async workerList(req: ApiRequest, endpointId: string) {
    parseOr400(noQuerySchema, req.query, 'query');
    await this.record(endpointId);
    const now = this.now();
    const workers = await this.options.workers.list(endpointId, now - (this.options.workerStaleMs ?? 60_000));
    return {
      workers: workers.map((w) => ({
        workerId: w.workerId,
        state: w.state,
        jobIds: w.jobIds,
        lastSeenAt: w.lastSeenAt,
      })),
    };
  }

  private async metrics(req: ApiRequest, endpointId: string) {
    const q = parseOr400(metricsQuerySchema, req.query, 'query');
    const record = await this.record(endpointId);
    const now = this.now();
    const hours = q.hours ?? 3;
    const stepSec = q.step ?? Math.max(10, Math.round((hours * 3600) / 120));
    const fromMs = now - hours * 3_600_000;
    const jobs: Job[] = [];
    let cursor: string | undefined;
    let truncated = false;
    if (record.kind === 'queue') {
      do {
        const page = await this.options.jobs.listRecent(endpointId, {
          statuses: ['COMPLETED', 'FAILED', 'TIMED_OUT'],
          fromMs,
          toMs: now + 1,
          nowMs: now,
          limit: 200,
          cursor,
        });
        jobs.push(...page.jobs);
        cursor = page.next;
        truncated = cursor !== undefined && jobs.length >= metricsJobCap;
      } while (cursor && !truncated);
    }
    const gauges = [...(this.options.gauges?.since(endpointId, fromMs) ?? [])];
    if (record.kind === 'queue') gauges.push(await this.gauge(endpointId, now));
    return { ...metricsOf(jobs, gauges, fromMs, now, stepSec), truncated };
  }

  /** Queue depth and worker counts now (also what a platform's sampler records). */
  async gauge(endpointId: string, nowMs = this.now()): Promise<GaugeSample> {
    const [health, depth] = await Promise.all([
      this.options.engine.health(endpointId),
      this.options.queue.depth(endpointId),
    ]);
    return {
      atMs: nowMs,
      // The queue's messages outlive cancelled and purged jobs (a worker skips each when it gets
      // there): counted alone, the chart showed queued work that the endpoint's inQueue did not.
      queueDepth: Math.min(depth.visible, health.jobs.inQueue),
      workersRunning: health.workers.running,
      workersIdle: health.workers.idle,
    };
  }

  /** Records a gauge sample of every queue endpoint into `gauges` (the local platform calls it). */
  async sampleGauges(): Promise<void> {
    const gauges = this.options.gauges;
    if (!gauges) return;
    for (const record of await this.options.control.listEndpoints()) {
      if (record.kind === 'queue') gauges.add(record.id, await this.gauge(record.id));
    }
  }
}

/** A log line on the wire: the endpoint is implied by the route. */
export function wireLine(line: LogLine) {
  return {
    atMs: line.atMs,
    workerId: line.workerId,
    ...(line.jobId !== undefined ? { jobId: line.jobId } : {}),
    stream: line.stream,
    ...(line.container !== undefined ? { container: line.container } : {}),
    text: line.text,
  };
}
export type WireLogLine = ReturnType<typeof wireLine>;

// ── OpenAPI ───────────────────────────────────────────────────────────────────────────────────────

const idParam = {
  name: 'id',
  in: 'path',
  required: true,
  schema: { type: 'string' },
  description: 'Endpoint id',
};
const err = {
  description: 'Error',
  content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } },
};
const answers = (description: string) => ({
  '200': { description, content: { 'application/json': { schema: { type: 'object' } } } },
  '400': err,
  '401': err,
  '404': err,
  '429': err,
});
const q = (name: string, description: string, type = 'string') => ({
  name,
  in: 'query',
  required: false,
  schema: { type },
  description,
});
const op = (summary: string, parameters: unknown[], description: string) => ({
  tags: ['management'],
  summary,
  security: [{ apiKey: [] }],
  parameters,
  responses: answers(description),
});

/** The management API as OpenAPI 3 paths; the dev server's /docs and /manage/v1/openapi.json show it. */
export const manageOpenApi = {
  openapi: '3.0.3',
  info: { title: 'Ferry management API', version: '1' },
  components: {
    securitySchemes: { apiKey: { type: 'http', scheme: 'bearer' } },
    schemas: { Error: { type: 'object', properties: { error: { type: 'string' } }, required: ['error'] } },
  },
  paths: {
    [`${managePrefix}/endpoints`]: {
      get: op('Endpoints with health and scaling state', [], '{endpoints: [...]}'),
    },
    [`${managePrefix}/endpoints/{id}`]: { get: op('One endpoint', [idParam], 'The endpoint') },
    [`${managePrefix}/endpoints/{id}/jobs`]: {
      get: op(
        'Jobs of an endpoint, newest first, a page at a time',
        [
          idParam,
          q(
            'status',
            'Comma-separated statuses (IN_QUEUE, IN_PROGRESS, COMPLETED, FAILED, CANCELLED, TIMED_OUT)',
          ),
          q('from', 'Created at or after (epoch ms)', 'integer'),
          q('to', 'Created before (epoch ms)', 'integer'),
          q('limit', 'Page size, 1-200 (50)', 'integer'),
          q('cursor', "The previous page's `next`"),
        ],
        '{jobs: [...], next?}',
      ),
    },
    [`${managePrefix}/endpoints/{id}/jobs/{jobId}`]: {
      get: op(
        'One job: input, output, timings, whether it streams (read its stream route only then) and its first log lines',
        [idParam, { name: 'jobId', in: 'path', required: true, schema: { type: 'string' } }],
        'The job',
      ),
    },
    [`${managePrefix}/endpoints/{id}/jobs/{jobId}/stream`]: {
      get: op(
        "A job's stream chunks so far, oldest first, without taking them from the job's client (/v2 stream hands each out once)",
        [
          idParam,
          { name: 'jobId', in: 'path', required: true, schema: { type: 'string' } },
          q('after', "The previous read's `next`: only newer chunks", 'integer'),
        ],
        '{status, stream: [chunks], next}',
      ),
    },
    [`${managePrefix}/endpoints/{id}/logs`]: {
      get: op(
        "An endpoint's log lines (or one job's), oldest first",
        [
          idParam,
          q('job', 'Only this job'),
          q('since', 'Written at or after (epoch ms)', 'integer'),
          q('after', "The previous read's `next`: only newer lines (follow)"),
          q('limit', 'At most this many lines, 1-5000 (500)', 'integer'),
          q(
            'follow',
            '1 when you will read on with `next`: on AWS only lines older than 10 s, so none arriving late is passed over',
          ),
        ],
        '{lines: [...], next, more (read on at once), ended (a finished job: no line can follow)}',
      ),
    },
    [`${managePrefix}/endpoints/{id}/workers`]: {
      get: op('Workers and the jobs each holds', [idParam], '{workers: [...]}'),
    },
    [`${managePrefix}/endpoints/{id}/metrics`]: {
      get: op(
        'Time series: jobs/s, p50/p95 execution and delay, queue depth, workers',
        [
          idParam,
          q('hours', 'Window, 0.05-24 (3)', 'number'),
          q('step', 'Bucket seconds, 10-3600', 'integer'),
        ],
        'Series aligned on t (epoch seconds)',
      ),
    },
  },
} as const;
