/**
 * Local worker pools: per endpoint, Python worker processes (`python -m ferry.worker`, or any image
 * entrypoint speaking the RunPod worker protocol) started with the endpoint's environment.
 *
 * This is the local actuator of the worker supervisor (core/supervisor.ts, docs/workers.md): it
 * spawns, signals and watches processes, and reads the one input the supervisor lacks (the urgent
 * queue's depth). How many workers an endpoint wants is the scaling policy's (core/scaling.ts, the
 * same function the AWS scaler applies); when to start, restart, back off, drain, refresh or kill is
 * the supervisor's.
 *
 * Each worker runs in its own process group (spawned detached): RunPod's SDK pings from a child
 * process, and a worker killed or crashed must not leave it behind pinging with a dead identity. A
 * stop signals the group leader (it drains); a kill, and any exit of the leader, kill the group.
 *
 * Workers get an environment built from an allow-list (`workerBaseEnv`), never the platform's own:
 * no API keys, no FERRY_HOME, no cloud credentials reach user code.
 *
 * Load-balanced endpoints run workers that serve HTTP on a port the pool picks; requests are proxied
 * to them round robin, a worker is started on the first request and stopped after idle_timeout.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import {
  chmodSync,
  existsSync,
  lchownSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs';
import { delimiter, join } from 'node:path';
import { lbSecretHeader } from '../../auth.js';
import { loopbackListenerUids, startOnChildPort } from '../../child-port.js';
import { type EndpointConfig, endpointConfigOf } from '../../deployment.js';
import { endpointKey } from '../../engine.js';
import { FerryError } from '../../errors.js';
import type { Logger } from '../../log.js';
import type { BlobStore, ChangeFeed, ControlStore, EndpointRecord, JobQueue, LogStore } from '../../ports.js';
import { killGroup } from '../../process-group.js';
import type { ScalePlan, WorkerActuator, WorkerIdentity, WorkerSupervisor } from '../../supervisor.js';
import { extractArtifact } from './artifact.js';
import { JobLineBackup } from './line-backup.js';
import type { RolloutReport } from './rollout.js';

/** The shortest time between two pool ticks that submits woke (see start()). */
const minTickGapMs = 50;

/**
 * How long a load-balanced request may wait for a worker that cannot start yet, and how often it
 * asks again (EndpointPool.workerFor). A draining worker finishes its requests before it leaves; a
 * worker itself may take two minutes to become ready (startGrace).
 */
const lbHoldMs = 60_000;
const lbHoldPollMs = 50;

/** What health and failed jobs say of a configuration the pool cannot give its workers: the error and its next step. */
const reasonOf = (error: FerryError): string =>
  error.hint ? `${error.message} (${error.hint})` : error.message;

/** Resolves after `ms`, or at once when `signal` aborts. */
const pauseFor = (ms: number, signal: AbortSignal): Promise<void> =>
  new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const done = (): void => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
  });

export interface LocalWorkersOptions {
  supervisor: WorkerSupervisor;
  queue: JobQueue;
  control: ControlStore;
  blobs: BlobStore;
  changes: ChangeFeed;
  /** Where workers reach the worker protocol. */
  platformUrl: string;
  /** The folder holding the `ferry` Python package. */
  ferryPythonPath: string;
  /** Where artifacts are unpacked. */
  runtimeDir: string;
  log: Logger;
  python?: string;
  tickMs?: number;
  /** How often workers ping; short locally so stopped jobs are noticed fast. */
  pingIntervalMs?: number;
  /** Where each worker's own output goes (its stdout/stderr, line by line); jobs' lines come by job-log. */
  logs?: LogStore;
  /** GPUs on this machine; detected with nvidia-smi when not given. */
  gpuCount?: number;
  /**
   * The OS user an endpoint's workers run as (`ferry serve --worker-user` / `--worker-uids`,
   * docs/security.md): FERRY_HOME's 0600 files are then out of their reach, and with a user per
   * endpoint so are other endpoints' processes. Needs the platform to run as root.
   */
  workerUserOf?: (endpointId: string) => { uid: number; gid: number };
  /** The values of an endpoint's `secrets=` names, for its workers only (docs/security.md). */
  secrets?: (record: EndpointRecord, names: readonly string[]) => Promise<Record<string, string>>;
  /** The call token (core/names.ts) the worker `workerId` uses for remote calls by name. */
  callToken?: (workerId: string) => string;
  /**
   * How long a worker told to leave at shutdown (the platform closing, its endpoint removed) may
   * finish before its group is killed; 5 s by default.
   */
  shutdownGraceMs?: number;
  /**
   * Where a load-balanced worker's ports come from (core/child-port.ts's pickChildPort by default); a
   * test hands out one that is taken.
   */
  pickPort?: () => Promise<number>;
}

/** How a worker's process group leader ended. */
interface ChildExit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

interface WorkerProcess {
  identity: WorkerIdentity;
  child: ChildProcess;
  /** The spec version it runs; a newer one rolls it. */
  generation: number;
  /** Resolves once its leader exited and the supervisor has handled the exit (its jobs requeued). */
  exited: Promise<void>;
  gpus: number[];
  /** Load-balanced workers: where they serve, and whether /ping answered. */
  port?: number;
  /** Load-balanced workers: what every request to them carries in lbSecretHeader (core/auth.ts). */
  lbSecret?: string;
  ready?: Promise<void>;
  /** Load-balanced workers: aborted once the worker is asked to stop, so its start is not retried. */
  starting?: AbortController;
  inFlight: number;
}

/** What a pool runs; a change of any field rolls its workers. */
interface PoolSpec {
  record: EndpointRecord;
  config: EndpointConfig;
  codeDir: string;
  key: string;
  /** `secrets=` values, resolved when the spec is built; a changed value rolls the workers. */
  secrets: Record<string, string>;
  /** The OS user its workers run as (LocalWorkersOptions.workerUserOf); the platform's own without. */
  user?: { uid: number; gid: number };
  /** With a user: the endpoint's own HOME and TMPDIR (the platform's HOME is not theirs to write). */
  home?: { HOME: string; TMPDIR: string };
}

export class LocalWorkers {
  private readonly pools = new Map<string, EndpointPool>();
  /** Pools of removed endpoints while they close: their workers still get their signals (procOf). */
  private readonly closing = new Set<EndpointPool>();
  /** Per endpoint: the OS user its workers run as, with their folders prepared (runAsOf). */
  private readonly runAs = new Map<string, Pick<PoolSpec, 'user' | 'home'>>();
  /** Each endpoint's name, from the records the last pass read (nameOf). */
  private names = new Map<string, string>();
  /** Why the last pass could not give an endpoint's workers its record as it is (reconcileNow). */
  private readonly specProblems = new Map<string, string>();
  /** Endpoints failing because a secret their running pool's workers were given was deleted (secretGone). */
  private readonly secretsGone = new Set<string>();
  private readonly gpus: GpuSlots;
  private reconciling: Promise<void> | undefined;
  private timer: NodeJS.Timeout | undefined;
  private closed = false;

  private readonly options: LocalWorkersOptions;

  constructor(options: LocalWorkersOptions) {
    this.gpus = new GpuSlots(options.gpuCount ?? detectGpus());
    // Resolved once: a version-manager shim in front of python3 (pyenv) costs ~100 ms per start.
    this.options = { ...options, python: options.python ?? resolvePython() };
    options.supervisor.attach({ actuator: this.actuator });
  }

  /** The supervisor's hands: spawn a process group, SIGTERM its leader, SIGKILL the group. */
  readonly actuator: WorkerActuator = {
    start: (identity) => void this.pools.get(identity.endpointId)?.launch(identity),
    stop: (workerId) => this.procOf(workerId)?.signalLeader('SIGTERM'),
    kill: (workerId) => this.procOf(workerId)?.killGroup(),
  };

  private procOf(workerId: string) {
    for (const pool of [...this.pools.values(), ...this.closing]) {
      const proc = pool.proc(workerId);
      if (proc) return proc;
    }
    return undefined;
  }

  /** Starts reconciling on a timer. */
  start(intervalMs = 1_000): void {
    this.timer = setInterval(
      () => void this.reconcile().catch((e) => this.options.log.error(String(e))),
      intervalMs,
    );
    this.timer.unref();
  }

  /**
   * A pass that reads the records as they are now, for a caller that just wrote one (`ferry deploy`
   * through the running serve, `ferry dev` after a reload): the pass in flight may have read them
   * before that write, so it is waited out and another starts (or one begun since is joined). Once it
   * resolves, the workers of a changed endpoint are drained: they take no job from then on.
   */
  async reconcileNow(): Promise<RolloutReport> {
    await this.reconciling?.catch(() => {});
    await this.reconcile();
    return {
      endpoints: [...this.names.keys()].map((id) => {
        const problem = this.specProblems.get(id);
        return { id, running: this.pools.has(id), ...(problem ? { problem } : {}) };
      }),
    };
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
    this.names = new Map(records.map((record) => [record.id, record.name]));
    const seen = new Set<string>();
    for (const record of records) {
      seen.add(record.id);
      let spec: PoolSpec;
      const pool = this.pools.get(record.id);
      try {
        spec = await this.specOf(record);
      } catch (error) {
        const message = (error as Error).message;
        const why = FerryError.is(error) ? reasonOf(error) : message;
        this.specProblems.set(record.id, why);
        // Never started: nothing serves it until the user completes it (a secret, say), and health
        // and its queued jobs say so. A running pool keeps its last complete spec meanwhile (a
        // deploy that adds a secret with no value leaves the previous deployment serving), unless a
        // secret that spec holds was deleted since: then it is failing the same way.
        const gone = pool && FerryError.is(error) ? await this.secretGone(pool) : undefined;
        if (!pool && FerryError.is(error)) {
          await this.options.supervisor.unconfigured(record.id, why);
        } else if (pool && gone) {
          await this.options.supervisor.unconfigured(record.id, reasonOf(gone));
          if (!this.secretsGone.has(record.id)) {
            this.secretsGone.add(record.id);
            pool.drainAll();
          }
        } else {
          this.options.log.error(`endpoint ${record.name} (${record.id}): ${message}`);
        }
        continue;
      }
      this.specProblems.delete(record.id);
      // Complete again (the secret set again, or a deploy without it): the failing state set above ends.
      if (this.secretsGone.delete(record.id))
        await this.options.supervisor.unconfigured(record.id, undefined);
      if (!pool) {
        await this.options.supervisor.unconfigured(record.id, undefined);
        const created = new EndpointPool(spec, this.options, this.gpus);
        this.pools.set(record.id, created);
        created.start();
      } else if (pool.spec.key !== spec.key) {
        this.options.supervisor.redeployed(record.id);
        pool.roll(spec);
      }
    }
    for (const id of this.specProblems.keys()) if (!seen.has(id)) this.specProblems.delete(id);
    for (const id of this.secretsGone) if (!seen.has(id)) this.secretsGone.delete(id);
    for (const [id, pool] of this.pools) {
      if (!seen.has(id)) {
        // No new worker starts for it (actuator.start reads `pools`), but its workers are still found
        // while it closes: removed from both first, they were never sent SIGTERM and were killed.
        this.pools.delete(id);
        this.runAs.delete(id);
        this.closing.add(pool);
        try {
          await pool.close();
        } finally {
          this.closing.delete(pool);
        }
      }
    }
  }

  pool(endpointId: string): EndpointPool | undefined {
    return this.pools.get(endpointId);
  }

  /** The endpoint's name as its owner deployed it (what the supervisor's lines call it). */
  nameOf(endpointId: string): string | undefined {
    return this.names.get(endpointId);
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
    // The folder first: the code is unpacked into it, out of other users' reach from the start.
    const runAs = this.runAsOf(record.id);
    const codeDir = config.codeDir ?? (await this.unpack(record));
    const names = config.endpoint.resources.secrets ?? [];
    const secrets = names.length > 0 && this.options.secrets ? await this.options.secrets(record, names) : {};
    const key = JSON.stringify([
      record.fingerprint,
      config.endpoint.configHash,
      codeDir,
      config.endpoint.resources,
      config.command,
      // A digest, so the key (which may be logged or compared) never holds a value.
      createHash('sha256').update(JSON.stringify(secrets)).digest('hex'),
      runAs.user,
    ]);
    return { record, config, codeDir, key, secrets, ...runAs };
  }

  /**
   * Why the pool's workers may not keep the secrets its spec holds: one was deleted (`ferry secrets
   * delete`), so no worker may be started with it any more, and the ones running finish what they
   * hold and leave, as when a value changes. Undefined while every one still has a value.
   */
  private async secretGone(pool: EndpointPool): Promise<FerryError | undefined> {
    const held = Object.keys(pool.spec.secrets);
    if (held.length === 0 || !this.options.secrets) return undefined;
    try {
      await this.options.secrets(pool.spec.record, held);
      return undefined;
    } catch (error) {
      return FerryError.is(error) ? error : undefined;
    }
  }

  /**
   * The OS user an endpoint's workers run as and their folders, resolved and prepared once per
   * endpoint: reconcile runs every second and before every load-balanced request.
   */
  private runAsOf(endpointId: string): Pick<PoolSpec, 'user' | 'home'> {
    let runAs = this.runAs.get(endpointId);
    if (!runAs) {
      const user = this.options.workerUserOf?.(endpointId);
      runAs = user ? { user, home: this.ownFolder(endpointId, user) } : {};
      this.runAs.set(endpointId, runAs);
    }
    return runAs;
  }

  /** Unpacks the endpoint's artifact once per fingerprint into the runtime folder. */
  private async unpack(record: EndpointRecord): Promise<string> {
    if (!record.artifactKey) throw new FerryError('failed', 'it has neither an artifact nor a code folder');
    const dir = join(this.options.runtimeDir, record.id, record.fingerprint);
    if (!existsSync(join(dir, '.ready'))) await this.unpackInto(record.artifactKey, dir);
    return dir;
  }

  /**
   * With a worker user, the endpoint's runtime folder holds its unpacked code, and a home and a temp
   * folder for its workers (/tmp, where other users can list what a worker left, is not used). The
   * folder is root's, open to the worker's group only (0750; with --worker-uids a group of the
   * endpoint's own): no other endpoint reads its code or files, and its own code can put nothing in
   * it. Root unpacks code and prepares `home` and `tmp` in it, and a link the code left there would be
   * followed: `home` made a link to FERRY_HOME had root chown FERRY_HOME to the endpoint's user at the
   * next start. `home` and `tmp` are the user's alone (0700).
   */
  private ownFolder(
    endpointId: string,
    user: { uid: number; gid: number },
  ): { HOME: string; TMPDIR: string } {
    const own = join(this.options.runtimeDir, endpointId);
    mkdirSync(own, { recursive: true });
    // Root's before anything in it is looked at: an earlier Ferry gave it to the worker user.
    ownedFolder(own, { uid: 0, gid: user.gid }, 0o750);
    const folders = { HOME: join(own, 'home'), TMPDIR: join(own, 'tmp') };
    for (const dir of [folders.HOME, folders.TMPDIR]) {
      // A link (or a file) the endpoint's code left in its place is removed, never followed.
      const found = lstatSync(dir, { throwIfNoEntry: false });
      if (found && !found.isDirectory()) unlinkSync(dir);
      mkdirSync(dir, { recursive: true });
      ownedFolder(dir, user, 0o700);
    }
    return folders;
  }

  private async unpackInto(artifactKey: string, dir: string): Promise<void> {
    const bytes = await this.options.blobs.get(artifactKey);
    if (!bytes) throw new FerryError('failed', `its artifact ${artifactKey} is missing`);
    const staging = `${dir}.tmp-${randomBytes(4).toString('hex')}`;
    mkdirSync(staging, { recursive: true });
    const archive = join(staging, '.artifact.tar.gz');
    writeFileSync(archive, bytes);
    await extractArtifact(archive, staging);
    rmSync(archive);
    writeFileSync(join(staging, '.ready'), '');
    rmSync(dir, { recursive: true, force: true });
    renameSync(staging, dir);
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
  private readonly abort = new AbortController();
  private loop: Promise<void> | undefined;
  private rr = 0;
  private readonly recent: string[] = [];
  /** Exits the supervisor is still handling (their workers are no longer in `procs`). */
  private readonly reports = new Set<Promise<void>>();

  constructor(
    public spec: PoolSpec,
    private readonly options: LocalWorkersOptions,
    private readonly gpus: GpuSlots,
  ) {
    gpus.join(this);
  }

  get endpointId(): string {
    return this.spec.record.id;
  }

  private get resources() {
    return this.spec.config.endpoint.resources;
  }

  private get isLb(): boolean {
    return this.spec.config.endpoint.kind === 'lb';
  }

  private get supervisor(): WorkerSupervisor {
    return this.options.supervisor;
  }

  /** Workers that take new work (not draining, retiring or gone). */
  get size(): number {
    return this.supervisor.servingOf(this.endpointId).length;
  }

  /** The process of a worker, with the two signals the actuator sends. */
  proc(workerId: string) {
    const proc = this.procs.get(workerId);
    if (!proc) return undefined;
    return {
      // A load-balanced worker has no process while its port is being picked: it will not get one.
      signalLeader: (signal: NodeJS.Signals) => {
        proc.starting?.abort();
        if (proc.child) signalLeader(proc.child, signal);
      },
      killGroup: () => {
        proc.starting?.abort();
        if (proc.child) killGroup(proc.child);
      },
    };
  }

  /** Process group ids of the workers running now (tests check none is left behind). */
  processGroups(): number[] {
    return [...this.procs.values()].flatMap((p) => (p.child.pid ? [p.child.pid] : []));
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
        const tickedAt = performance.now();
        try {
          await this.tick();
        } catch (error) {
          this.options.log.error(`pool ${this.spec.record.name}: ${(error as Error).message}`);
        }
        const woken = await watch.changed(tickMs, this.abort.signal);
        // Every submit wakes the pool; under load that was a tick (a queue count, and a job-stop
        // read of every held job per worker) on every loop turn. The first submit after a quiet
        // spell still ticks at once (scale from zero); a burst is looked at once per minTickGapMs.
        const sinceMs = performance.now() - tickedAt;
        if (woken && sinceMs < minTickGapMs) await pauseFor(minTickGapMs - sinceMs, this.abort.signal);
      }
      watch.close();
    })();
  }

  /** A new spec: old workers drain (finish what they run) while new ones take the queue. */
  roll(spec: PoolSpec): void {
    this.spec = spec;
    this.generation++;
    for (const proc of this.procs.values()) {
      if (proc.generation < this.generation) this.supervisor.drain(proc.identity.workerId);
    }
    this.options.changes.notify(endpointKey(this.endpointId));
  }

  /**
   * Every worker drains (finishes what it holds, takes nothing more) with no spec to roll to: what
   * they were given may not be handed on (LocalWorkers.secretGone), and the supervisor, which the
   * endpoint's failing state stops from starting any, starts new ones once it is complete again.
   */
  drainAll(): void {
    for (const proc of this.procs.values()) this.supervisor.drain(proc.identity.workerId);
    this.options.changes.notify(endpointKey(this.endpointId));
  }

  /**
   * Stops every worker: SIGTERM now, busy or not, so the ferry runtime finishes its jobs or leaves
   * them within its grace; SIGKILL to what is left after shutdownGraceMs (closing does not wait out a
   * long drain). Resolves once every exit was handled by the supervisor, its jobs back in the queue:
   * the platform closes the database after this.
   */
  async close(): Promise<void> {
    this.abort.abort();
    await this.loop;
    for (const proc of this.procs.values()) this.supervisor.shutdown(proc.identity.workerId);
    const deadline = setTimeout(() => {
      for (const proc of this.procs.values()) {
        this.note(`[${this.spec.record.name} ${proc.identity.workerId.slice(-8)}] still running: killing it`);
        killGroup(proc.child);
      }
    }, this.options.shutdownGraceMs ?? 5_000);
    await Promise.all([...this.procs.values()].map((p) => p.exited));
    clearTimeout(deadline);
    await Promise.all(this.reports);
  }

  private async tick(): Promise<void> {
    const tooMany = this.gpuShortfall();
    // Never satisfiable on this machine: failing, with the reason in health, rather than on the CPU.
    if (tooMany) await this.supervisor.unconfigured(this.endpointId, tooMany);
    const { workersMax: max, maxConcurrency } = this.resources;
    // The queue is the one input the supervisor does not know; counting stops where it no longer
    // changes the answer.
    const urgent = this.isLb
      ? 0
      : (await this.options.queue.depth(this.endpointId, { atMost: max * maxConcurrency })).urgent;
    await this.supervisor.tick(this.endpointId, this.plan(urgent));
  }

  /** What the scaling policy (core/scaling.ts, applied by the supervisor) reads for this endpoint. */
  private plan(urgentQueuedJobs: number, waitingRequests = 0): ScalePlan {
    const r = this.resources;
    const room = this.gpuRoom();
    return {
      urgentQueuedJobs,
      waitingRequests,
      min: Math.min(r.workersMin, room),
      max: Math.min(r.workersMax, room),
      maxConcurrency: r.maxConcurrency,
      idleMs: r.idleTimeoutSec * 1000,
      kind: this.isLb ? 'lb' : 'queue',
      ...this.startGrace(),
    };
  }

  /**
   * How long a worker may take to make contact before the supervisor kills it as a failed start: the
   * endpoint's health_check_grace, as on AWS (docs/aws.md). A load-balanced worker gets two minutes
   * without one; a queue worker no limit (a model download may take longer than any default).
   */
  private startGrace(): { startGraceMs?: number } {
    const seconds = this.resources.healthCheckGraceSec || (this.isLb ? 120 : 0);
    return seconds > 0 ? { startGraceMs: seconds * 1000 } : {};
  }

  /** Spawns the worker the supervisor issued, in its own process group. */
  launch(identity: WorkerIdentity): WorkerProcess {
    const { workerId } = identity;
    const endpoint = this.spec.config.endpoint;
    const gpus = this.claimGpus();
    const base = `${this.options.platformUrl}/v2/${encodeURIComponent(this.endpointId)}`;
    const env: NodeJS.ProcessEnv = {
      ...workerBaseEnv(process.env),
      ...this.spec.home,
      ...this.resources.env,
      ...this.spec.secrets,
      PYTHONPATH: [this.spec.codeDir, this.options.ferryPythonPath, process.env.PYTHONPATH]
        .filter(Boolean)
        .join(delimiter),
      PYTHONUNBUFFERED: '1',
      // Its gpu_count GPUs (plan() starts it only when they are free); none on a machine without GPUs.
      CUDA_VISIBLE_DEVICES: gpus.join(','),
      RUNPOD_WEBHOOK_GET_JOB: `${base}/job-take/${workerId}?gpu=${gpus.length > 0 ? 'local' : 'none'}`,
      RUNPOD_WEBHOOK_POST_OUTPUT: `${base}/job-done/${workerId}/$ID?gpu=none`,
      RUNPOD_WEBHOOK_POST_STREAM: `${base}/job-stream/${workerId}/$ID?gpu=none`,
      RUNPOD_WEBHOOK_PING: `${base}/ping/${workerId}?gpu=none`,
      // The ferry runtime's results of several jobs in one request (a Ferry route).
      FERRY_WEBHOOK_POST_OUTPUT_BATCH: `${base}/job-done-batch/${workerId}`,
      RUNPOD_AI_API_KEY: identity.token,
      RUNPOD_POD_ID: workerId,
      // As the agent's (worker-image/agent/protocol.ts): RunPod's SDK reports it in error records.
      RUNPOD_POD_HOSTNAME: workerId,
      RUNPOD_ENDPOINT_ID: this.endpointId,
      RUNPOD_PING_INTERVAL: String(this.options.pingIntervalMs ?? 1_000),
      // The ferry runtime ships each job's output lines here (docs/observability.md), and keeps a
      // copy on its stderr until they are sent, which the pool records if it dies first (line-backup.ts).
      ...(this.options.logs
        ? { FERRY_WEBHOOK_POST_LOG: `${base}/job-log/${workerId}`, FERRY_LOG_BACKUP: 'stderr' }
        : {}),
      FERRY_APP_DIR: this.spec.codeDir,
      FERRY_MODULE: endpoint.module,
      FERRY_MAX_CONCURRENCY: String(this.resources.maxConcurrency),
      // The worker exits when this process dies, so a killed platform leaves no orphans behind.
      FERRY_PARENT_PID: String(process.pid),
      // Remote calls from user code (docs/python.md): by name, within this app and environment.
      FERRY_API_URL: this.options.platformUrl,
      FERRY_APP: this.spec.record.app,
      FERRY_ENV: this.spec.record.env,
      FERRY_ENDPOINT_NAME: endpoint.name,
      ...(this.options.callToken ? { FERRY_CALL_TOKEN: this.options.callToken(workerId) } : {}),
    };
    const prefix = `[${this.spec.record.name} ${workerId.slice(-8)}]`;
    let gone!: () => void;
    const proc: WorkerProcess = {
      identity,
      generation: this.generation,
      gpus,
      inFlight: 0,
      child: undefined as unknown as ChildProcess,
      exited: new Promise<void>((resolve) => {
        gone = resolve;
      }),
    };
    if (endpoint.kind === 'lb') {
      env.FERRY_MODE = 'lb';
      env.FERRY_VARIABLE = endpoint.variable ?? '';
    } else {
      env.FERRY_MODE = 'queue';
      env.FERRY_TARGET = endpoint.target?.name ?? '';
    }
    /** The worker is gone for good: the supervisor hears of it, and decides what follows. */
    const reportGone = ({ code, signal }: ChildExit): void => {
      this.procs.delete(workerId);
      this.note(`${prefix} exited (${signal ?? `code ${code}`})`);
      // `exited` resolves only once the supervisor is done (its jobs requeued): close() awaits it, and
      // the platform closed the database under a requeue that had not finished.
      const report = this.supervisor
        .exited(workerId, { code, signal })
        .catch((error) => this.options.log.error(`worker ${workerId}'s exit: ${(error as Error).message}`))
        .finally(() => {
          this.reports.delete(report);
          gone();
          this.options.changes.notify(endpointKey(this.endpointId));
        });
      this.reports.add(report);
    };
    /** Spawns the worker's process group; resolves when its leader exits (its group killed with it). */
    const launchWith = (port?: number): Promise<ChildExit> => {
      if (port !== undefined) {
        env.FERRY_HOST = '127.0.0.1';
        env.FERRY_PORT = String(port);
        proc.port = port;
        // A secret of its own for each try: one a squatter heard despite waitReady's check (a race
        // with a try's exit) opens no later try's worker.
        proc.lbSecret = randomBytes(24).toString('base64url');
        env.FERRY_LB_SECRET = proc.lbSecret;
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
        // Its own process group: a kill reaches whatever it started (RunPod's heartbeat process).
        detached: true,
        ...this.spec.user,
      });
      proc.child = child;
      const backup = new JobLineBackup();
      // After 'exit', once its pipes are read to the end: the worker's last lines are all in.
      const drained = new Promise<void>((resolve) => child.once('close', () => resolve()));
      for (const [name, stream] of [
        ['stdout', child.stdout],
        ['stderr', child.stderr],
      ] as const) {
        let partial = '';
        stream?.setEncoding('utf8');
        stream?.on('data', (data: string) => {
          const all = (partial + data).split('\n');
          partial = all.pop() ?? '';
          // Job lines the runtime keeps here until they are sent are no lines of the worker's own.
          const lines = name === 'stderr' ? all.filter((line) => !backup.take(line)) : all;
          for (const line of lines) {
            this.note(`${prefix} ${line}`);
            this.supervisor.output(this.endpointId, workerId, line);
          }
          const atMs = Date.now();
          void this.options.logs
            ?.append(
              lines.map((text) => ({ atMs, endpointId: this.endpointId, workerId, stream: name, text })),
            )
            .catch(() => {});
        });
      }
      return new Promise<ChildExit>((resolve) => {
        child.on('error', (error) => {
          const line = `could not start: ${error.message}`;
          this.note(`${prefix} ${line}`);
          // A process that never started (no such program, or one its user may not run) emits no
          // 'exit': its failed start is reported here, with the reason as its last line, or the
          // supervisor waited for it for ever and the platform's close never ended.
          if (child.pid === undefined) {
            this.supervisor.output(this.endpointId, workerId, line);
            resolve({ code: null, signal: null });
          }
        });
        child.on('exit', (code, signal) => {
          // Whatever the leader left behind in its group goes with it.
          killGroup(child);
          // Job lines it printed but never sent (a crash) are recorded before its exit is reported,
          // so the job's log and the endpoint's last lines hold them when the job fails or retries.
          const late = new Promise<void>((r) => setTimeout(r, 1_000).unref());
          void Promise.race([drained, late])
            .then(() => this.recordUnsent(backup, workerId))
            .finally(() => resolve({ code, signal }));
        });
      });
    };
    if (endpoint.kind === 'lb') {
      const starting = new AbortController();
      proc.starting = starting;
      proc.ready = (async () => {
        let exit: Promise<ChildExit> | undefined;
        try {
          // The port is picked free but not held until the worker binds it: a server bound meanwhile
          // makes the worker exit ("cannot listen", exit 2), a failed start to the supervisor (under
          // `ferry dev` the endpoint would be failing at once). That exit is the pool's: the worker
          // starts again on a new port, and only the last try's exit counts.
          await startOnChildPort(
            async (port) => {
              if (starting.signal.aborted) throw new FerryError('failed', 'stopped before it started');
              exit = launchWith(port);
              // Until it answers or exits: one silent past its start grace is the supervisor's to kill.
              await waitReady(port, proc, exit, {
                uid: this.spec.user?.uid ?? process.getuid?.(),
                say: (line) => this.note(`${prefix} ${line}`),
              });
            },
            {
              pick: this.options.pickPort,
              signal: starting.signal,
              onTaken: (port) =>
                this.note(`${prefix} port ${port} was taken before it bound it: starting again on another`),
            },
          );
          this.supervisor.ready(workerId);
        } finally {
          // Undefined when it was stopped, or no port could be picked, before a process started.
          if (exit) void exit.then(reportGone);
          else reportGone({ code: null, signal: null });
        }
      })();
      proc.ready.catch(() => {});
    } else {
      void launchWith().then(reportGone);
    }
    this.procs.set(workerId, proc);
    return proc;
  }

  /** The job lines a worker that is gone printed and never sent (line-backup.ts): stored once, here. */
  private async recordUnsent(backup: JobLineBackup, workerId: string): Promise<void> {
    const lines = backup.unsent(this.endpointId, workerId, new Set(this.supervisor.heldBy(workerId)));
    if (lines.length === 0) return;
    for (const line of lines)
      this.supervisor.output(this.endpointId, workerId, `[${line.jobId}] ${line.text}`);
    await this.options.logs?.append(lines).catch(() => {});
  }

  /** The GPUs one worker needs here: gpu_count on a machine with GPUs, else none (it runs on the CPU). */
  private get gpusNeeded(): number {
    return this.resources.gpu && this.gpus.total > 0 ? this.resources.gpuCount : 0;
  }

  /** Why no worker of this endpoint can ever get its GPUs here, or undefined. */
  private gpuShortfall(): string | undefined {
    const needed = this.gpusNeeded;
    if (needed <= this.gpus.total) return undefined;
    return (
      `it needs gpu_count=${needed} GPUs per worker and this machine has ${this.gpus.total} ` +
      '(nvidia-smi -L); lower gpu_count or run it on a machine with enough GPUs'
    );
  }

  /**
   * How many workers of this endpoint may serve now: as on a GPU pool, a worker starts only when its
   * gpu_count GPUs are free (of every endpoint's workers on this machine), and jobs wait in the queue
   * meanwhile. Unbounded when it needs no GPU.
   */
  private gpuRoom(): number {
    const needed = this.gpusNeeded;
    if (needed === 0) return Number.POSITIVE_INFINITY;
    if (needed > this.gpus.total) return 0;
    return this.size + Math.floor(this.gpus.free().length / needed);
  }

  /** The GPUs this pool's live workers hold; undefined once it is closed and none is left. */
  gpusHeld(): number[] | undefined {
    if (this.abort.signal.aborted && this.procs.size === 0) return undefined;
    return [...this.procs.values()].flatMap((p) => p.gpus);
  }

  private claimGpus(): number[] {
    const wanted = this.gpusNeeded;
    if (wanted === 0) return [];
    const free = this.gpus.free();
    if (free.length < wanted) {
      // plan() starts none without its GPUs free; should one start anyway, it is said, not hidden.
      this.options.log.warn(
        `endpoint ${this.spec.record.name}: a worker starts with ${free.length} of the ${wanted} GPUs it needs (the others are in use)`,
      );
    }
    return free.slice(0, wanted);
  }

  async forward(request: LbRequest): Promise<LbResponse> {
    const proc = await this.workerFor(request.signal);
    proc.inFlight++;
    this.supervisor.request(proc.identity.workerId, 1);
    try {
      await proc.ready;
      // Its port is free again once it exited, for anyone to bind: nothing more goes there (its exit
      // reaches the supervisor only once its output is read, up to a second later).
      if (hasExited(proc.child)) throw new Error('it has exited');
      const response = await fetch(`http://127.0.0.1:${proc.port}${request.path}`, {
        method: request.method,
        headers: { ...request.headers, ...lbSecretOf(proc) },
        body: request.body && request.body.length > 0 && request.method !== 'GET' ? request.body : undefined,
        signal: request.signal,
      });
      const headers: Record<string, string> = {};
      const type = response.headers.get('content-type');
      if (type) headers['content-type'] = type;
      // A HEAD answer has no body to measure: the length is the worker's (its GET body's, RFC 9110).
      const length = request.method === 'HEAD' ? response.headers.get('content-length') : null;
      if (length) headers['content-length'] = length;
      // A 405's methods (RFC 9110: a 405 must carry Allow), as the AWS agent passes them on too.
      const allow = response.status === 405 ? response.headers.get('allow') : null;
      if (allow) headers.allow = allow;
      return { statusCode: response.status, headers, body: Buffer.from(await response.arrayBuffer()) };
    } catch (error) {
      throw new FerryError(
        'bad_gateway',
        `The endpoint's worker did not answer: ${(error as Error).message}`,
      );
    } finally {
      proc.inFlight--;
      this.supervisor.request(proc.identity.workerId, -1);
    }
  }

  /**
   * The worker a request goes to: a serving one, round robin, or one started for it. The local front
   * door holds a request until a worker is ready; a request no worker can take now counts as waiting,
   * and the policy says whether that is worth one more worker. When no worker serves and none may
   * start yet (the endpoint is at its max while workers of an earlier deployment finish their
   * requests and leave, a start backoff, GPUs another endpoint's workers hold), the request is held
   * and asked about again every lbHoldPollMs, as a job waits in the queue, for up to lbHoldMs: it
   * failed at once, a 500 to a request sent just after a `ferry dev` reload. A failing endpoint, or
   * one with no worker allowed, answers at once. Each such answer is a 503 saying why, with
   * Retry-After (no_worker), as the ALB answers with no target on AWS.
   */
  private async workerFor(signal: AbortSignal | undefined): Promise<WorkerProcess> {
    const holdUntil = performance.now() + lbHoldMs;
    // Made once a request has to wait: most never do.
    let stop: AbortSignal | undefined;
    for (;;) {
      const serving = new Set(this.supervisor.servingOf(this.endpointId).map((w) => w.workerId));
      let candidates = [...this.procs.values()].filter((p) => serving.has(p.identity.workerId));
      const allBusy = candidates.every((p) => p.inFlight >= this.resources.maxConcurrency);
      const plan = this.plan(0, 1);
      const wanted = allBusy ? this.supervisor.decide(this.endpointId, plan).desired : 0;
      if (candidates.length < wanted) {
        const started = this.supervisor.startOne(this.endpointId, plan);
        const proc = started && this.procs.get(started.workerId);
        if (proc) candidates = [...candidates, proc];
      }
      if (candidates.length > 0) return candidates[this.rr++ % candidates.length]!;
      const problem = this.supervisor.problem(this.endpointId);
      const mayStartLater = problem?.state !== 'failing' && this.resources.workersMax > 0;
      stop ??= signal ? AbortSignal.any([signal, this.abort.signal]) : this.abort.signal;
      if (!mayStartLater || stop.aborted || performance.now() >= holdUntil) {
        const why = problem
          ? `: ${problem.reason}`
          : mayStartLater && !stop.aborted
            ? `: none came free in ${lbHoldMs / 1000} s`
            : '';
        throw new FerryError(
          'no_worker',
          `Endpoint ${this.spec.record.name} has no worker to serve this request${why}`,
        );
      }
      await pauseFor(lbHoldPollMs, stop);
    }
  }

  private note(line: string): void {
    this.recent.push(line);
    if (this.recent.length > 200) this.recent.shift();
    this.options.log.info(line);
  }
}

/**
 * Gives the folder `dir` (never what a link there points to) to `owner` with `mode`. Its parent must
 * be root's, so nobody swaps it for a link between the check and the chmod.
 */
function ownedFolder(dir: string, owner: { uid: number; gid: number }, mode: number): void {
  if (!lstatSync(dir).isDirectory()) throw new FerryError('failed', `${dir} is not a folder`);
  lchownSync(dir, owner.uid, owner.gid);
  chmodSync(dir, mode);
}

/**
 * What a worker inherits from the platform's environment: an allow-list of what a Python process
 * needs to find itself, its libraries, its locale and its GPUs. Nothing else: not the platform's
 * keys (FERRY_API_KEY), its state folder (FERRY_HOME), other FERRY_* or RUNPOD_* settings, nor cloud
 * credentials. The endpoint's own `env=` and the runtime's variables are added on top.
 */
export function workerBaseEnv(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const allowed = new Set([
    'PATH',
    'HOME',
    'USER',
    'LOGNAME',
    'SHELL',
    'LANG',
    'LANGUAGE',
    'TZ',
    'TMPDIR',
    'TEMP',
    'TMP',
    'PYTHONPATH',
    'VIRTUAL_ENV',
    'CONDA_PREFIX',
    'LD_LIBRARY_PATH',
    'SSL_CERT_FILE',
    'SSL_CERT_DIR',
    'REQUESTS_CA_BUNDLE',
    'HF_HOME',
    'XDG_CACHE_HOME',
    'SYSTEMROOT',
  ]);
  const allowedPrefixes = ['LC_', 'NVIDIA_', 'CUDA_'];
  const out: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(env)) {
    if (value === undefined) continue;
    if (allowed.has(key) || allowedPrefixes.some((prefix) => key.startsWith(prefix))) out[key] = value;
  }
  return out;
}

/**
 * The machine's GPUs, shared by every endpoint's pool: a worker holds its gpu_count of them from its
 * start until its process is gone (it is then out of its pool's workers).
 */
export class GpuSlots {
  private readonly pools = new Set<EndpointPool>();

  constructor(readonly total: number) {}

  join(pool: EndpointPool): void {
    this.pools.add(pool);
  }

  /** The GPUs no live worker holds, lowest first. */
  free(): number[] {
    const taken = new Set<number>();
    for (const pool of this.pools) {
      const held = pool.gpusHeld();
      if (held === undefined) this.pools.delete(pool);
      else for (const gpu of held) taken.add(gpu);
    }
    return Array.from({ length: this.total }, (_, i) => i).filter((gpu) => !taken.has(gpu));
  }
}

/** SIGTERM (or another signal) to the group leader only: it drains, its helpers keep running meanwhile. */
function signalLeader(child: ChildProcess, signal: NodeJS.Signals): void {
  if (child.exitCode === null && child.signalCode === null) child.kill(signal);
}

/**
 * SIGKILL to every process whose uid is in `range` (`ferry serve --worker-uids`: uids no account
 * uses, each an endpoint's). A process a handler started in a session of its own (`setsid`) leaves
 * its worker's group, so killGroup misses it; the platform calls this when no worker of its own runs
 * (at start, and once its workers are stopped), so such a process does not outlive the platform,
 * holding its port for clients' keys while it is down. Without /proc (not Linux) it kills nothing.
 */
export function killUidRange(range: { first: number; last: number }): number[] {
  const killed: number[] = [];
  let pids: string[];
  try {
    pids = readdirSync('/proc').filter((name) => /^\d+$/.test(name));
  } catch {
    return killed;
  }
  for (const pid of pids) {
    try {
      // "Uid:\treal\teffective\tsaved\tfs": any of them in the range is a worker's process.
      const uids = /^Uid:\s+(.*)$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]?.split(/\s+/);
      if (!uids?.some((uid) => Number(uid) >= range.first && Number(uid) <= range.last)) continue;
      process.kill(Number(pid), 'SIGKILL');
      killed.push(Number(pid));
    } catch {
      // Gone meanwhile.
    }
  }
  return killed;
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

/** The header a load-balanced worker wants on every request (it answers 403 without it). */
const lbSecretOf = (proc: WorkerProcess): Record<string, string> =>
  proc.lbSecret ? { [lbSecretHeader]: proc.lbSecret } : {};

/** Whether a worker's group leader has exited (its port may be anyone's now). */
const hasExited = (child: ChildProcess | undefined): boolean =>
  child !== undefined && (child.exitCode !== null || child.signalCode !== null);

/**
 * Probes the worker's /ping until it answers; throws once the worker has exited.
 *
 * The port was picked free and handed over, but nothing holds it until the worker binds it, so
 * another process may have bound it first (under `--worker-uids`, another endpoint's code): /ping,
 * with the worker's secret, and then clients' requests would go to that process. So no probe goes
 * out until every socket that takes 127.0.0.1:port is the worker's uid's (loopbackListenerUids,
 * /proc/net/tcp): one of another uid is a squatter, and the worker is stopped, its try failed, so
 * startOnChildPort starts it again on another port. Once the worker's socket listens, no other uid
 * can bind the port until it is closed (the kernel allows a second listener, SO_REUSEPORT, to the
 * same uid only), and forward() sends nothing to a worker that has exited. The uid, not the
 * worker's process: under --worker-uids a uid is one endpoint's alone; with one uid for several
 * endpoints (--worker-user, or none) each can read the others' environment, secret included,
 * anyway. And /proc/net/tcp is readable by any user, where another uid's /proc/<pid>/fd needs
 * CAP_SYS_PTRACE, which a container's root often lacks. Without /proc (not Linux) the worker is
 * probed unchecked.
 */
async function waitReady(
  port: number,
  proc: WorkerProcess,
  exit: Promise<ChildExit>,
  owner: { uid: number | undefined; say: (line: string) => void },
): Promise<void> {
  let exited = false;
  void exit.then(() => {
    exited = true;
  });
  /** Who listens there: the worker's uid alone ('own'), no one yet ('none'), or another uid. */
  const listener = (): 'own' | 'none' | number => {
    const uids = loopbackListenerUids(port);
    if (uids === undefined || owner.uid === undefined) return 'own';
    return uids.find((uid) => uid !== owner.uid) ?? (uids.length > 0 ? 'own' : 'none');
  };
  while (!exited) {
    const found = listener();
    if (typeof found === 'number') {
      owner.say(
        `port ${port} is held by a process of another user (uid ${found}): it gets neither the worker's secret nor a request, and this try of the worker is stopped`,
      );
      killGroup(proc.child);
      await exit;
      throw new FerryError('failed', `port ${port} was taken by a process of another user (uid ${found})`);
    }
    if (found === 'own') {
      try {
        const response = await fetch(`http://127.0.0.1:${port}/ping`, {
          headers: lbSecretOf(proc),
          signal: AbortSignal.timeout(1_000),
        });
        // Still the worker's after the answer: it did not exit (and another bind the port) meanwhile.
        if (response.ok && !exited && listener() === 'own') return;
      } catch {
        // not listening yet
      }
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new FerryError('failed', 'the worker exited before it was ready');
}
