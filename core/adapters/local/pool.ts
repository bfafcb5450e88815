/**
 * Local worker pools: per endpoint, Python worker processes (`python -m ferry.worker`, or any image
 * entrypoint speaking the RunPod worker protocol) started with the endpoint's environment.
 *
 * Queue-based endpoints scale between workers min and max on their backlog (low-priority jobs do not
 * count), down to min after idle_timeout, and a crashed worker is restarted with backoff while its jobs
 * go straight back to the queue. A worker that does not let go of a cancelled or timed-out job within
 * a grace period is killed: Python cannot interrupt a handler stuck in C code.
 *
 * Load-balanced endpoints run workers that serve HTTP on a port the pool picks; requests are proxied
 * to them round robin, a worker is started on the first request and stopped after idle_timeout.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { delimiter, join } from 'node:path';
import { extract } from 'tar';
import { type EndpointConfig, endpointConfigOf } from '../../deployment.js';
import { endpointKey, type JobEngine } from '../../engine.js';
import { FerryError } from '../../errors.js';
import type { Logger } from '../../log.js';
import type {
  BlobStore,
  ChangeFeed,
  ControlStore,
  EndpointRecord,
  JobQueue,
  JobStore,
  LogStore,
  WorkerRegistry,
} from '../../ports.js';

export interface LocalWorkersOptions {
  engine: JobEngine;
  jobs: JobStore;
  queue: JobQueue;
  workers: WorkerRegistry;
  control: ControlStore;
  blobs: BlobStore;
  changes: ChangeFeed;
  /** Where workers reach the worker protocol. */
  platformUrl: string;
  workerToken: string;
  /** The folder holding the `ferry` Python package. */
  ferryPythonPath: string;
  /** Where artifacts are unpacked. */
  runtimeDir: string;
  log: Logger;
  python?: string;
  tickMs?: number;
  /** How long a worker may keep a job it was told to stop before it is killed. */
  stopGraceMs?: number;
  /** How long a worker asked to exit (SIGTERM) may finish its jobs before SIGKILL. */
  drainMs?: number;
  /** How often workers ping; short locally so stopped jobs are noticed fast. */
  pingIntervalMs?: number;
  /** Where each worker's own output goes (its stdout/stderr, line by line); jobs' lines come by job-log. */
  logs?: LogStore;
  /** GPUs on this machine; detected with nvidia-smi when not given. */
  gpuCount?: number;
}

interface WorkerProcess {
  workerId: string;
  child: ChildProcess;
  /** The spec version it runs; a newer one rolls it. */
  generation: number;
  startedAt: number;
  lastBusyAt: number;
  exited: Promise<void>;
  stopping: boolean;
  stopSeenAt?: number;
  gpus: number[];
  /** Load-balanced workers: where they serve, and whether /ping answered. */
  port?: number;
  ready?: Promise<void>;
  inFlight: number;
}

/** What a pool runs; a change of any field rolls its workers. */
interface PoolSpec {
  record: EndpointRecord;
  config: EndpointConfig;
  codeDir: string;
  key: string;
}

export class LocalWorkers {
  private readonly pools = new Map<string, EndpointPool>();
  private readonly gpus: number;
  private reconciling: Promise<void> | undefined;
  private timer: NodeJS.Timeout | undefined;
  private closed = false;

  private readonly options: LocalWorkersOptions;

  constructor(options: LocalWorkersOptions) {
    this.gpus = options.gpuCount ?? detectGpus();
    // Resolved once: a version-manager shim in front of python3 (pyenv) costs ~100 ms per start.
    this.options = { ...options, python: options.python ?? resolvePython() };
  }

  /** Starts reconciling on a timer. */
  start(intervalMs = 1_000): void {
    this.timer = setInterval(
      () => void this.reconcile().catch((e) => this.options.log.error(String(e))),
      intervalMs,
    );
    this.timer.unref();
  }

  /** Brings the pools in line with the endpoints in the control store. */
  reconcile(): Promise<void> {
    this.reconciling ??= this.doReconcile().finally(() => {
      this.reconciling = undefined;
    });
    return this.reconciling;
  }

  private async doReconcile(): Promise<void> {
    if (this.closed) return;
    const records = await this.options.control.listEndpoints();
    const seen = new Set<string>();
    for (const record of records) {
      seen.add(record.id);
      let spec: PoolSpec;
      try {
        spec = await this.specOf(record);
      } catch (error) {
        this.options.log.error(`endpoint ${record.name} (${record.id}): ${(error as Error).message}`);
        continue;
      }
      const pool = this.pools.get(record.id);
      if (!pool) {
        const created = new EndpointPool(spec, this.options, this.gpus);
        this.pools.set(record.id, created);
        created.start();
      } else if (pool.spec.key !== spec.key) {
        pool.roll(spec);
      }
    }
    for (const [id, pool] of this.pools) {
      if (!seen.has(id)) {
        this.pools.delete(id);
        await pool.close();
      }
    }
  }

  pool(endpointId: string): EndpointPool | undefined {
    return this.pools.get(endpointId);
  }

  /** Proxies one request to a load-balanced endpoint's workers. */
  async forward(endpointId: string, request: LbRequest): Promise<LbResponse> {
    await this.reconcile();
    const pool = this.pools.get(endpointId);
    if (!pool) throw new FerryError('not_found', `Endpoint ${endpointId} not found`);
    return pool.forward(request);
  }

  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.timer);
    await this.reconciling?.catch(() => {});
    await Promise.all([...this.pools.values()].map((p) => p.close()));
    this.pools.clear();
  }

  private async specOf(record: EndpointRecord): Promise<PoolSpec> {
    const config = endpointConfigOf(record);
    const codeDir = config.codeDir ?? (await this.unpack(record));
    const key = JSON.stringify([
      record.fingerprint,
      config.endpoint.configHash,
      codeDir,
      config.endpoint.resources,
      config.command,
    ]);
    return { record, config, codeDir, key };
  }

  /** Unpacks the endpoint's artifact once per fingerprint into the runtime folder. */
  private async unpack(record: EndpointRecord): Promise<string> {
    if (!record.artifactKey) throw new FerryError('failed', 'it has neither an artifact nor a code folder');
    const dir = join(this.options.runtimeDir, record.id, record.fingerprint);
    if (existsSync(join(dir, '.ready'))) return dir;
    const bytes = await this.options.blobs.get(record.artifactKey);
    if (!bytes) throw new FerryError('failed', `its artifact ${record.artifactKey} is missing`);
    const staging = `${dir}.tmp-${randomBytes(4).toString('hex')}`;
    mkdirSync(staging, { recursive: true });
    const archive = join(staging, '.artifact.tar.gz');
    writeFileSync(archive, bytes);
    // tar refuses absolute paths and `..` entries by default, so an artifact cannot write outside.
    await extract({ file: archive, cwd: staging });
    rmSync(archive);
    writeFileSync(join(staging, '.ready'), '');
    rmSync(dir, { recursive: true, force: true });
    renameSync(staging, dir);
    return dir;
  }
}

export interface LbRequest {
  method: string;
  /** Path after the endpoint prefix, with the query string. */
  path: string;
  headers: Record<string, string>;
  body: Buffer | undefined;
  signal?: AbortSignal;
}

export interface LbResponse {
  statusCode: number;
  headers: Record<string, string>;
  body: Buffer;
}

export class EndpointPool {
  private readonly procs = new Map<string, WorkerProcess>();
  private generation = 0;
  private crashes = 0;
  private nextStartAt = 0;
  private readonly abort = new AbortController();
  private loop: Promise<void> | undefined;
  private rr = 0;
  private readonly recent: string[] = [];

  constructor(
    public spec: PoolSpec,
    private readonly options: LocalWorkersOptions,
    private readonly gpuTotal: number,
  ) {}

  get endpointId(): string {
    return this.spec.record.id;
  }

  private get resources() {
    return this.spec.config.endpoint.resources;
  }

  private get isLb(): boolean {
    return this.spec.config.endpoint.kind === 'lb';
  }

  /** Live (not stopping) workers. */
  get size(): number {
    return [...this.procs.values()].filter((p) => !p.stopping).length;
  }

  /** The last lines the workers printed (for errors and tests). */
  recentLogs(): string[] {
    return [...this.recent];
  }

  start(): void {
    const watch = this.options.changes.watch(endpointKey(this.endpointId));
    const tickMs = this.options.tickMs ?? 500;
    this.loop = (async () => {
      while (!this.abort.signal.aborted) {
        try {
          await this.tick();
        } catch (error) {
          this.options.log.error(`pool ${this.spec.record.name}: ${(error as Error).message}`);
        }
        await watch.changed(tickMs, this.abort.signal);
      }
      watch.close();
    })();
  }

  /** A new spec: old workers drain (finish what they run) while new ones take the queue. */
  roll(spec: PoolSpec): void {
    this.spec = spec;
    this.generation++;
    this.crashes = 0;
    this.nextStartAt = 0;
    for (const proc of this.procs.values()) if (proc.generation < this.generation) this.stop(proc);
    this.options.changes.notify(endpointKey(this.endpointId));
  }

  async close(): Promise<void> {
    this.abort.abort();
    await this.loop;
    await Promise.all([...this.procs.values()].map((p) => this.stop(p)));
  }

  private async tick(): Promise<void> {
    const now = Date.now();
    const min = this.resources.workersMin;
    const max = this.resources.workersMax;
    const idleMs = this.resources.idleTimeoutSec * 1000;
    let desired: number;
    if (this.isLb) {
      const busy = [...this.procs.values()].filter((p) => !p.stopping && p.inFlight > 0).length;
      desired = Math.min(max, Math.max(min, busy));
    } else {
      // Demand = urgent queued jobs + jobs our workers hold. Both are cheap reads (the queue and the
      // worker registry), unlike counting the jobs table, which grows with retention.
      const depth = await this.options.queue.depth(this.endpointId, {
        atMost: max * this.resources.maxConcurrency,
      });
      const held = await this.markBusy(now);
      desired = Math.min(
        max,
        Math.max(min, Math.ceil((depth.urgent + held) / this.resources.maxConcurrency)),
      );
      await this.enforceStops(now);
    }
    const live = [...this.procs.values()].filter((p) => !p.stopping);
    for (let i = live.length; i < desired && now >= this.nextStartAt; i++) this.launch();
    // Scale in: the longest-idle workers beyond the desired count, once idle_timeout has passed.
    const idle = live
      .filter((p) => now - p.lastBusyAt >= idleMs && p.inFlight === 0)
      .sort((a, b) => a.lastBusyAt - b.lastBusyAt);
    let surplus = live.length - Math.max(min, desired);
    for (const proc of idle) {
      if (surplus-- <= 0) break;
      void this.stop(proc);
    }
  }

  /** Queue workers count as busy while the registry says they hold jobs. */
  /** Marks the workers holding jobs as busy now; returns how many jobs this pool's workers hold. */
  private async markBusy(now: number): Promise<number> {
    const records = await this.options.workers.list(this.endpointId, 0);
    let held = 0;
    for (const record of records) {
      const proc = this.procs.get(record.workerId);
      if (!proc) continue;
      held += record.jobIds.length;
      if (record.state === 'running') proc.lastBusyAt = now;
    }
    return held;
  }

  /** Kills workers that keep a stopped (cancelled, timed-out) job past the grace period. */
  private async enforceStops(now: number): Promise<void> {
    const graceMs = this.options.stopGraceMs ?? 5_000;
    for (const proc of this.procs.values()) {
      if (proc.stopping) continue;
      const stop = await this.options.engine.jobsToStop(this.endpointId, proc.workerId, 0);
      if (stop.length === 0) {
        proc.stopSeenAt = undefined;
        continue;
      }
      proc.stopSeenAt ??= now;
      if (now - proc.stopSeenAt >= graceMs) {
        this.note(`killing ${proc.workerId}: it kept stopped job(s) ${stop.join(', ')} for ${graceMs} ms`);
        proc.child.kill('SIGKILL');
      }
    }
  }

  private launch(): WorkerProcess {
    const workerId = `${this.endpointId}-${randomBytes(4).toString('hex')}`;
    const endpoint = this.spec.config.endpoint;
    const gpus = this.claimGpus();
    const base = `${this.options.platformUrl}/v2/${encodeURIComponent(this.endpointId)}`;
    const env: NodeJS.ProcessEnv = {
      ...withoutSecrets(process.env),
      ...this.resources.env,
      PYTHONPATH: [this.spec.codeDir, this.options.ferryPythonPath, process.env.PYTHONPATH]
        .filter(Boolean)
        .join(delimiter),
      PYTHONUNBUFFERED: '1',
      // Without a GPU (or with too few free) the worker runs on CPU.
      CUDA_VISIBLE_DEVICES: gpus.join(','),
      RUNPOD_WEBHOOK_GET_JOB: `${base}/job-take/${workerId}?gpu=${gpus.length > 0 ? 'local' : 'none'}`,
      RUNPOD_WEBHOOK_POST_OUTPUT: `${base}/job-done/${workerId}/$ID?gpu=none`,
      RUNPOD_WEBHOOK_POST_STREAM: `${base}/job-stream/${workerId}/$ID?gpu=none`,
      RUNPOD_WEBHOOK_PING: `${base}/ping/${workerId}?gpu=none`,
      RUNPOD_AI_API_KEY: this.options.workerToken,
      RUNPOD_POD_ID: workerId,
      RUNPOD_ENDPOINT_ID: this.endpointId,
      RUNPOD_PING_INTERVAL: String(this.options.pingIntervalMs ?? 1_000),
      // The ferry runtime ships each job's output lines here (docs/observability.md).
      ...(this.options.logs ? { FERRY_WEBHOOK_POST_LOG: `${base}/job-log/${workerId}` } : {}),
      FERRY_APP_DIR: this.spec.codeDir,
      FERRY_MODULE: endpoint.module,
      FERRY_MAX_CONCURRENCY: String(this.resources.maxConcurrency),
      // The worker exits when this process dies, so a killed platform leaves no orphans behind.
      FERRY_PARENT_PID: String(process.pid),
    };
    const proc: WorkerProcess = {
      workerId,
      generation: this.generation,
      startedAt: Date.now(),
      lastBusyAt: Date.now(),
      stopping: false,
      gpus,
      inFlight: 0,
      child: undefined as unknown as ChildProcess,
      exited: Promise.resolve(),
    };
    if (endpoint.kind === 'lb') {
      env.FERRY_MODE = 'lb';
      env.FERRY_VARIABLE = endpoint.variable ?? '';
    } else {
      env.FERRY_MODE = 'queue';
      env.FERRY_TARGET = endpoint.target?.name ?? '';
    }
    const launchWith = (port?: number) => {
      if (port !== undefined) {
        env.FERRY_HOST = '127.0.0.1';
        env.FERRY_PORT = String(port);
        proc.port = port;
      }
      const [command, ...args] = this.spec.config.command ?? [
        this.options.python ?? 'python3',
        '-m',
        'ferry.worker',
      ];
      const child = spawn(command!, args, {
        cwd: this.spec.codeDir,
        env,
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      proc.child = child;
      const prefix = `[${this.spec.record.name} ${workerId.slice(-8)}]`;
      for (const [name, stream] of [
        ['stdout', child.stdout],
        ['stderr', child.stderr],
      ] as const) {
        let partial = '';
        stream?.setEncoding('utf8');
        stream?.on('data', (data: string) => {
          const lines = (partial + data).split('\n');
          partial = lines.pop() ?? '';
          for (const line of lines) this.note(`${prefix} ${line}`);
          const atMs = Date.now();
          void this.options.logs
            ?.append(
              lines.map((text) => ({ atMs, endpointId: this.endpointId, workerId, stream: name, text })),
            )
            .catch(() => {});
        });
      }
      proc.exited = new Promise<void>((resolve) => {
        child.on('error', (error) => {
          this.note(`${prefix} could not start: ${error.message}`);
        });
        child.on('exit', (code, signal) => {
          resolve();
          void this.onExit(proc, code, signal);
        });
      });
    };
    if (endpoint.kind === 'lb') {
      proc.ready = (async () => {
        const port = await freePort();
        launchWith(port);
        await waitReady(`http://127.0.0.1:${port}/ping`, proc, 120_000);
      })();
      proc.ready.catch(() => {});
    } else {
      launchWith();
    }
    this.procs.set(workerId, proc);
    return proc;
  }

  private async onExit(
    proc: WorkerProcess,
    code: number | null,
    signal: NodeJS.Signals | null,
  ): Promise<void> {
    this.procs.delete(proc.workerId);
    if (!this.isLb) await this.options.engine.workerGone(this.endpointId, proc.workerId).catch(() => 0);
    if (proc.stopping) return;
    // An unplanned exit: restart with backoff (1 s, 2 s, 4 s … 30 s), reset after a minute of health.
    const livedMs = Date.now() - proc.startedAt;
    this.crashes = livedMs > 60_000 ? 1 : this.crashes + 1;
    const backoffMs = Math.min(30_000, 1_000 * 2 ** (this.crashes - 1));
    this.nextStartAt = Date.now() + backoffMs;
    this.note(
      `[${this.spec.record.name}] worker ${proc.workerId} exited (${signal ?? `code ${code}`}); restarting in ${backoffMs} ms if still needed`,
    );
    this.options.changes.notify(endpointKey(this.endpointId));
  }

  /** SIGTERM lets the worker finish its jobs; SIGKILL after the drain period. */
  private async stop(proc: WorkerProcess): Promise<void> {
    if (!proc.stopping) {
      proc.stopping = true;
      if (proc.child.exitCode === null && proc.child.signalCode === null) proc.child.kill('SIGTERM');
      const timer = setTimeout(() => proc.child.kill('SIGKILL'), this.options.drainMs ?? 30_000);
      timer.unref();
      void proc.exited.then(() => clearTimeout(timer));
    }
    await proc.exited;
  }

  private claimGpus(): number[] {
    const wanted = this.resources.gpu ? this.resources.gpuCount : 0;
    if (wanted === 0 || this.gpuTotal === 0) return [];
    const taken = new Set([...this.procs.values()].flatMap((p) => p.gpus));
    const free = Array.from({ length: this.gpuTotal }, (_, i) => i).filter((i) => !taken.has(i));
    return free.length >= wanted ? free.slice(0, wanted) : [];
  }

  async forward(request: LbRequest): Promise<LbResponse> {
    let candidates = [...this.procs.values()].filter((p) => !p.stopping);
    const max = this.resources.workersMax;
    const allBusy = candidates.every((p) => p.inFlight >= this.resources.maxConcurrency);
    if (candidates.length === 0 || (allBusy && candidates.length < max)) {
      candidates = [...candidates, this.launch()];
    }
    const proc = candidates[this.rr++ % candidates.length]!;
    proc.inFlight++;
    proc.lastBusyAt = Date.now();
    try {
      await proc.ready;
      const response = await fetch(`http://127.0.0.1:${proc.port}${request.path}`, {
        method: request.method,
        headers: request.headers,
        body: request.body && request.body.length > 0 && request.method !== 'GET' ? request.body : undefined,
        signal: request.signal,
      });
      const headers: Record<string, string> = {};
      const type = response.headers.get('content-type');
      if (type) headers['content-type'] = type;
      return { statusCode: response.status, headers, body: Buffer.from(await response.arrayBuffer()) };
    } catch (error) {
      throw new FerryError('failed', `The endpoint's worker did not answer: ${(error as Error).message}`);
    } finally {
      proc.inFlight--;
      proc.lastBusyAt = Date.now();
    }
  }

  private note(line: string): void {
    this.recent.push(line);
    if (this.recent.length > 200) this.recent.shift();
    this.options.log.info(line);
  }
}

/** Keys of the platform's own callers never reach user code. */
function withoutSecrets(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const copy = { ...env };
  for (const key of ['FERRY_API_KEY', 'RUNPOD_API_KEY', 'AWS_SECRET_ACCESS_KEY', 'AWS_SESSION_TOKEN'])
    delete copy[key];
  return copy;
}

/** The real interpreter behind `python3` on PATH, or `python3` itself when that cannot be told. */
function resolvePython(): string {
  try {
    const out = execFileSync('python3', ['-c', 'import sys; print(sys.executable)'], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
      timeout: 10_000,
    }).trim();
    return out.length > 0 ? out : 'python3';
  } catch {
    return 'python3';
  }
}

function detectGpus(): number {
  try {
    const out = execFileSync('nvidia-smi', ['-L'], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
      timeout: 5_000,
    });
    return out.split('\n').filter((line) => line.startsWith('GPU ')).length;
  } catch {
    return 0;
  }
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

async function waitReady(url: string, proc: WorkerProcess, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let exited = false;
  void proc.exited.then(() => {
    exited = true;
  });
  while (Date.now() < deadline) {
    if (exited) throw new FerryError('failed', 'the worker exited before it was ready');
    try {
      const response = await fetch(url, { signal: AbortSignal.timeout(1_000) });
      if (response.ok) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new FerryError('failed', `the worker was not ready after ${timeoutMs} ms`);
}
