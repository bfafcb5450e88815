/**
 * The embedded platform: one SQLite database and a blob folder under `.ferry/`, the job engine, the
 * v2 API and worker protocol on Fastify, and the sweeper that expires leases and timeouts. This is
 * what `ferry serve`, `ferry dev` and `npm start` run.
 */
import { randomBytes } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { V2Api } from '../../api.js';
import { hashKey, KeyAuthenticator } from '../../auth.js';
import { LocalChangeFeed } from '../../changes.js';
import { systemClock } from '../../clock.js';
import { type EngineSettings, JobEngine } from '../../engine.js';
import { FerryError } from '../../errors.js';
import { defaultPort, limits } from '../../limits.js';
import { type Logger, silentLogger } from '../../log.js';
import { GaugeHistory, ManageApi } from '../../manage.js';
import { callTokenFor } from '../../names.js';
import type { Clock, LogLine, LogStore } from '../../ports.js';
import { type SupervisorSettings, type WorkerIdentity, WorkerSupervisor } from '../../supervisor.js';
import { HttpWebhookSender } from '../../webhooks.js';
import { FileBlobStore } from './files.js';
import { defaultFrontDoorLimits, type FrontDoorLimits, workerWindowsOf } from './guard.js';
import { assertReachableByWorkers, securePrivateDir, secureRuntimeDir, type UnusableFolder } from './home.js';
import { createHttpServer } from './http.js';
import { killUidRange, LocalWorkers, type LocalWorkersOptions } from './pool.js';
import { openLocalDatabase } from './sqlite.js';

export interface LocalPlatformOptions {
  /** The state folder, usually `<project>/.ferry`. */
  dataDir: string;
  /** What to tell the user when dataDir cannot be made or made private (default: FERRY_HOME's fix). */
  unusableDataDir?: UnusableFolder;
  host?: string;
  /** 0 picks a free port. */
  port?: number;
  /** A client API key accepted besides the ones stored with `ferry keys create`. */
  apiKey?: string;
  clock?: Clock;
  log?: Logger;
  sweepIntervalMs?: number;
  settings?: Partial<EngineSettings>;
  /** Worker long-poll hold time; tests shorten it. */
  workerWaitMs?: number;
  webhookRetryDelayMs?: number;
  /** Serve the web console at /console from this folder (the install's `console/`). */
  consoleDir?: string;
  /** Hears every log line once it is stored (`ferry dev` prints jobs' lines). */
  onLog?: (lines: readonly LogLine[]) => void;
  /** Hosts and address ranges webhooks may reach although private (local development; docs/security.md). */
  webhookAllow?: string[];
  /** Timeouts, connection cap and rate limit of the HTTP server (defaults in core/limits.ts). */
  frontDoor?: Partial<FrontDoorLimits>;
  /** Before a by-name lookup (`ferry dev` provisions live endpoints there). */
  beforeResolve?: (app: string, env: string, name: string) => Promise<void>;
  /**
   * Why no request may run an endpoint's code now, else undefined: run, runsync, retry and every /lb
   * request answer 503 with it (ApiOptions.runsRefusedBecause; `ferry dev` after a failed reload).
   */
  runsRefusedBecause?: () => string | undefined;
  /** Run worker pools for the endpoints in the control store. */
  workers?: Omit<
    LocalWorkersOptions,
    | 'supervisor'
    | 'queue'
    | 'control'
    | 'blobs'
    | 'changes'
    | 'platformUrl'
    | 'runtimeDir'
    | 'log'
    | 'callToken'
    | 'workerUserOf'
  > & {
    /** Every endpoint's workers as this OS user (`ferry serve --worker-user`). Needs root. */
    workerUser?: { uid: number; gid: number };
    /**
     * Each endpoint's workers as a user of its own, uid and gid from this range (`ferry serve
     * --worker-uids`): then no endpoint's code can read another's process environment (its
     * secrets) or signal its processes. Needs root.
     */
    workerUids?: { first: number; last: number };
    reconcileIntervalMs?: number;
    /** How long a worker may keep a job it was told to stop before it is killed. */
    stopGraceMs?: number;
    /** How long a worker asked to exit (SIGTERM) may finish its jobs before SIGKILL. */
    drainMs?: number;
  };
  /** The worker lifecycle policy's settings (backoff, failed starts…); tests shorten them. */
  supervisor?: Partial<SupervisorSettings>;
  /**
   * What the supervisor's log lines call an endpoint (WorkerSupervisorOptions.nameOf); else the name
   * it was deployed with.
   */
  endpointNameOf?: (endpointId: string) => string | undefined;
}

export type LocalPlatform = Awaited<ReturnType<typeof startLocalPlatform>>;

/**
 * The user each endpoint's workers run as (`ferry serve --worker-uids`: one of the range per
 * endpoint, from `uidOf`; `--worker-user`: that one), or undefined when they run as this process.
 */
function workerUserRule(
  workers: LocalPlatformOptions['workers'],
  uidOf: (endpointId: string, range: { first: number; last: number }) => number,
): ((endpointId: string) => { uid: number; gid: number }) | undefined {
  const range = workers?.workerUids;
  if (range) {
    return (endpointId) => {
      const uid = uidOf(endpointId, range);
      return { uid, gid: uid };
    };
  }
  const user = workers?.workerUser;
  return user && (() => user);
}

export async function startLocalPlatform(options: LocalPlatformOptions) {
  const clock = options.clock ?? systemClock;
  const log = options.log ?? silentLogger;
  // Called only once workers start, after the database below is open.
  const workerUserOf = workerUserRule(options.workers, (endpointId, range) =>
    db.workerUid(endpointId, range),
  );
  // Workers run as other users cannot enter FERRY_HOME (0700): their code is unpacked beside it.
  const runtimeDir = workerUserOf ? `${options.dataDir}-runtime` : join(options.dataDir, 'runtime');
  if (workerUserOf) {
    assertReachableByWorkers(runtimeDir);
    secureRuntimeDir(runtimeDir);
  }
  // What an earlier run's workers left running in a session of their own (killUidRange says why).
  const workerUids = options.workers?.workerUids;
  if (workerUids) killUidRange(workerUids);
  securePrivateDir(options.dataDir, options.unusableDataDir);
  const db = openLocalDatabase(join(options.dataDir, 'ferry.db'), { clock, checkpointOnThread: true });
  const blobs = new FileBlobStore(join(options.dataDir, 'blobs'));
  const secretStore = db.openSecrets(join(options.dataDir, 'secrets.key'));
  const changes = new LocalChangeFeed(clock);
  const webhooks = new HttpWebhookSender({
    clock,
    log,
    retryDelayMs: options.webhookRetryDelayMs,
    allow: options.webhookAllow,
    outbox: db.outbox,
  });
  webhooks.start(Math.min(options.webhookRetryDelayMs ?? 1_000, 1_000));
  // Started once the front door listens (below); the supervisor reads endpoint names from it.
  let pools: LocalWorkers | undefined;
  // Worker identity, the lifecycle policy and who holds which job: one owner (docs/workers.md).
  const supervisor = new WorkerSupervisor({
    clock,
    log,
    // Users read names, not ids: the caller's (`ferry dev`: the function's), else the record's.
    nameOf: (endpointId) => options.endpointNameOf?.(endpointId) ?? pools?.nameOf(endpointId),
    settings: {
      ...(options.workers?.stopGraceMs !== undefined ? { stopGraceMs: options.workers.stopGraceMs } : {}),
      ...(options.workers?.drainMs !== undefined ? { drainMs: options.workers.drainMs } : {}),
      ...options.supervisor,
    },
  });
  const engine = new JobEngine({
    jobs: db.jobs,
    queue: db.queue,
    workers: db.workers,
    ledger: supervisor,
    createQueued: (job) => db.createQueued(job),
    requeueQueued: (current, patch) => db.requeueQueued(current, patch),
    takeQueued: (endpointId, options) => db.takeQueued(endpointId, options),
    changes,
    clock,
    webhooks,
    warn: (line) => log.warn(line),
    settings: options.settings,
  });
  supervisor.attach({ engine });
  // Workers of an earlier run of this platform are gone (their tokens died with it): their jobs go
  // back to the queue now rather than when their leases lapse; and a queued job without its message
  // is queued again.
  await requeueOrphans(db, engine, log);
  // Workers' call tokens (remote calls by name, core/names.ts) are HMACs under this run's secret.
  const callTokenSecret = randomBytes(32).toString('base64url');
  const auth = new KeyAuthenticator({
    control: db.control,
    staticKeyHashes: options.apiKey ? [hashKey(options.apiKey)] : [],
    workers: supervisor,
    callTokenSecret,
    // Revoked means refused on the next request: `ferry keys revoke` deletes the key from this
    // SQLite file in another process, and the lookup is one indexed read, so nothing is remembered.
    cacheMs: 0,
  });
  const onLog = options.onLog;
  const logs: LogStore = onLog
    ? {
        append: async (lines) => {
          await db.logs.append(lines);
          onLog(lines);
        },
        read: (query) => db.logs.read(query),
      }
    : db.logs;
  const gauges = new GaugeHistory();
  const manage = new ManageApi({
    engine,
    jobs: db.jobs,
    queue: db.queue,
    control: db.control,
    // Who holds what: the supervisor's record (the registry is only mirrored on AWS).
    workers: {
      list: async (endpointId) =>
        supervisor.liveOf(endpointId).map((worker) => {
          const jobIds = supervisor.heldBy(worker.workerId);
          return {
            workerId: worker.workerId,
            endpointId,
            state: jobIds.length > 0 ? 'running' : 'idle',
            jobIds,
            lastSeenAt: clock.now(),
          };
        }),
    },
    logs,
    auth,
    gauges,
    now: () => clock.now(),
  });
  // The worker rate limit's windows: the front door counts each worker request in them, the API a
  // job-log batch's reads (core/worker-rate.ts).
  const workerWindows = workerWindowsOf({ ...defaultFrontDoorLimits, ...options.frontDoor }, () =>
    clock.now(),
  );
  const api = new V2Api({
    engine,
    control: db.control,
    auth,
    workerWaitMs: options.workerWaitMs,
    log,
    beforeResolve: options.beforeResolve,
    runsRefusedBecause: options.runsRefusedBecause,
    logs,
    workerWindows,
  });
  // Any live worker's token, whatever it is for: 'unknown' is the supervisor's answer for no worker.
  const isLiveWorkerToken = (key: string) => supervisor.verify(key, '', '') !== 'unknown';
  const server = await createHttpServer({
    api,
    manage,
    consoleDir: options.consoleDir,
    log,
    guard: {
      callerOf: async (key) =>
        isLiveWorkerToken(key) ? 'worker' : (await auth.isClientKey(key)) ? 'client' : undefined,
      limits: options.frontDoor,
      workers: workerWindows,
    },
    rollout: {
      auth,
      // Without pools (none started yet, or a platform that runs no workers) there is nothing to roll.
      reconcile: async () => (pools ? pools.reconcileNow() : { endpoints: [] }),
    },
    lb: {
      auth,
      endpoint: (id) => db.control.getEndpoint(id),
      refusedBecause: options.runsRefusedBecause,
      forward: (endpointId, request) => {
        if (!pools) throw new FerryError('not_found', `Endpoint ${endpointId} not found`);
        return pools.forward(endpointId, request);
      },
    },
  });
  const host = options.host ?? '127.0.0.1';
  await server.listen({ host, port: options.port ?? defaultPort });
  const address = server.server.address() as AddressInfo;
  const url = `http://${host.includes(':') ? `[${host}]` : host}:${address.port}`;
  // Workers always reach the platform on loopback, whatever address clients use.
  const loopbackUrl = `http://127.0.0.1:${address.port}`;

  if (options.workers) {
    const {
      reconcileIntervalMs,
      stopGraceMs: _grace,
      drainMs: _drain,
      workerUser: _user,
      workerUids: _uids,
      ...workerOptions
    } = options.workers;
    pools = new LocalWorkers({
      ...workerOptions,
      supervisor,
      queue: db.queue,
      control: db.control,
      blobs,
      changes,
      platformUrl: host === '127.0.0.1' || host === '0.0.0.0' || host === 'localhost' ? loopbackUrl : url,
      ...(workerUserOf ? { workerUserOf } : {}),
      runtimeDir,
      secrets: (record, names) => secretStore.resolve({ app: record.app, env: record.env }, names),
      log,
      logs,
      callToken: (workerId) => callTokenFor(callTokenSecret, workerId),
    });
    await pools.reconcile();
    pools.start(reconcileIntervalMs);
  }

  let sweeping = false;
  let sampledAt = 0;
  let lastVacuumMs = clock.now();
  const sweep = async () => {
    if (sweeping) return;
    sweeping = true;
    try {
      await engine.sweep();
      // Bounded, so a large backlog of expired jobs drains over several sweeps, not in one stall.
      await db.jobs.deleteExpired(clock.now(), 1_000);
      // Every 10 s: the console's queue-depth and worker charts, and old worker log lines.
      if (clock.now() - sampledAt >= 10_000) {
        sampledAt = clock.now();
        await manage.sampleGauges();
        await db.logs.deleteWorkerLinesBefore(clock.now() - limits.workerLogRetentionMs);
      }
      // Give freed pages back to the file system once a minute (docs/security.md, disk retention).
      if (clock.now() - lastVacuumMs >= 60_000) {
        lastVacuumMs = clock.now();
        db.reclaimSpace();
      }
    } catch (error) {
      log.error(`sweep failed: ${(error as Error).message}`);
    } finally {
      sweeping = false;
    }
  };
  const sweeper = setInterval(sweep, options.sweepIntervalMs ?? 1_000);
  sweeper.unref();

  let closed: Promise<void> | undefined;
  return {
    url,
    port: address.port,
    engine,
    db,
    manage,
    logs,
    blobs,
    changes,
    server,
    supervisor,
    workers: pools,
    /** The call token the worker `workerId` gets (tests mint them to try the scope). */
    callToken: (workerId: string) => callTokenFor(callTokenSecret, workerId),
    sweep,
    /**
     * A worker identity for a worker started outside the pools (tests, benchmarks, a worker run by
     * hand): its own token, bound to this endpoint; `exited` buries it and requeues what it held.
     */
    adoptWorker(endpointId: string, workerId?: string): WorkerIdentity & { exited(): Promise<void> } {
      const identity = supervisor.adoptNew(endpointId, workerId);
      return { ...identity, exited: () => supervisor.exited(identity.workerId, { code: 0, signal: null }) };
    },
    /** Stops serving and closes the database; calling it twice is fine. */
    close(): Promise<void> {
      closed ??= (async () => {
        clearInterval(sweeper);
        await pools?.close();
        if (workerUids) killUidRange(workerUids);
        supervisor.close();
        webhooks.close();
        await server.close();
        await blobs.close();
        await db.close();
      })();
      return closed;
    },
  };
}

/**
 * Every job still IN_PROGRESS at start belongs to a worker of an earlier run: requeue it now. That
 * requeue counts an attempt, unlike a stop the platform sends at a clean shutdown: a run that ended
 * without one was killed or crashed, and the job it held may be what brought it down (a worker that
 * exhausts the machine's memory can get the platform OOM-killed), so it must not come back for ever
 * (limits.maxAttempts). And an IN_QUEUE job with no queue message would never be taken (an earlier
 * Ferry stopped while a worker's exit was being handled could leave one: its move back to the queue
 * was written, the message was not): it gets its message.
 */
async function requeueOrphans(
  db: ReturnType<typeof openLocalDatabase>,
  engine: JobEngine,
  log: Logger,
): Promise<void> {
  for (const endpoint of await db.control.listEndpoints()) {
    const stranded = await db.requeueStranded(endpoint.id, Date.now());
    if (stranded.length > 0) {
      log.warn(
        `endpoint ${endpoint.name} (${endpoint.id}): ${stranded.length} queued job(s) had no queue message; queued again`,
      );
    }
    const running = await db.jobs.listByStatus(endpoint.id, 'IN_PROGRESS', Date.now(), 10_000);
    const holders = new Set(running.flatMap((job) => (job.workerId ? [job.workerId] : [])));
    for (const workerId of holders) {
      await engine.workerGone(
        endpoint.id,
        workerId,
        `Worker ${workerId} was lost when the platform restarted`,
      );
    }
  }
}
