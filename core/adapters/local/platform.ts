/**
 * The embedded platform: one SQLite database and a blob folder under `.ferry/`, the job engine, the
 * v2 API and worker protocol on Fastify, and the sweeper that expires leases and timeouts. This is
 * what `ferry serve`, `ferry dev` and `npm start` run.
 */
import { mkdirSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { V2Api } from '../../api.js';
import { hashKey, KeyAuthenticator, newSecret } from '../../auth.js';
import { LocalChangeFeed } from '../../changes.js';
import { systemClock } from '../../clock.js';
import { type EngineSettings, JobEngine } from '../../engine.js';
import { FerryError } from '../../errors.js';
import { defaultPort, limits } from '../../limits.js';
import { type Logger, silentLogger } from '../../log.js';
import { GaugeHistory, ManageApi } from '../../manage.js';
import type { Clock, LogLine, LogStore } from '../../ports.js';
import { HttpWebhookSender } from '../../webhooks.js';
import { FileBlobStore } from './files.js';
import { createHttpServer } from './http.js';
import { LocalWorkers, type LocalWorkersOptions } from './pool.js';
import { openLocalDatabase } from './sqlite.js';

export interface LocalPlatformOptions {
  /** The state folder, usually `<project>/.ferry`. */
  dataDir: string;
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
  /** Run worker pools for the endpoints in the control store. */
  workers?: Omit<
    LocalWorkersOptions,
    | 'engine'
    | 'jobs'
    | 'queue'
    | 'workers'
    | 'control'
    | 'blobs'
    | 'changes'
    | 'platformUrl'
    | 'workerToken'
    | 'runtimeDir'
    | 'log'
  > & { reconcileIntervalMs?: number };
}

export type LocalPlatform = Awaited<ReturnType<typeof startLocalPlatform>>;

export async function startLocalPlatform(options: LocalPlatformOptions) {
  const clock = options.clock ?? systemClock;
  const log = options.log ?? silentLogger;
  mkdirSync(options.dataDir, { recursive: true });
  const db = openLocalDatabase(join(options.dataDir, 'ferry.db'), { clock });
  const blobs = new FileBlobStore(join(options.dataDir, 'blobs'));
  const changes = new LocalChangeFeed(clock);
  const webhooks = new HttpWebhookSender({ clock, log, retryDelayMs: options.webhookRetryDelayMs });
  const engine = new JobEngine({
    jobs: db.jobs,
    queue: db.queue,
    workers: db.workers,
    changes,
    clock,
    webhooks,
    settings: options.settings,
  });
  // Handed to the workers this platform starts as RUNPOD_AI_API_KEY; it only opens worker routes.
  const workerToken = newSecret('fyw');
  const auth = new KeyAuthenticator({
    control: db.control,
    staticKeyHashes: options.apiKey ? [hashKey(options.apiKey)] : [],
    workerTokenHashes: [hashKey(workerToken)],
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
  const api = new V2Api({ engine, control: db.control, auth, workerWaitMs: options.workerWaitMs, logs });
  const gauges = new GaugeHistory();
  const manage = new ManageApi({
    engine,
    jobs: db.jobs,
    queue: db.queue,
    control: db.control,
    workers: db.workers,
    logs,
    auth,
    gauges,
    now: () => clock.now(),
  });
  let pools: LocalWorkers | undefined;
  const server = createHttpServer({
    api,
    manage,
    consoleDir: options.consoleDir,
    lb: {
      auth,
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
    const { reconcileIntervalMs, ...workerOptions } = options.workers;
    pools = new LocalWorkers({
      ...workerOptions,
      engine,
      jobs: db.jobs,
      queue: db.queue,
      workers: db.workers,
      control: db.control,
      blobs,
      changes,
      platformUrl: host === '127.0.0.1' || host === '0.0.0.0' || host === 'localhost' ? loopbackUrl : url,
      workerToken,
      runtimeDir: join(options.dataDir, 'runtime'),
      log,
      logs,
    });
    await pools.reconcile();
    pools.start(reconcileIntervalMs);
  }

  let sweeping = false;
  let sampledAt = 0;
  const sweep = async () => {
    if (sweeping) return;
    sweeping = true;
    try {
      await engine.sweep();
      await db.jobs.deleteExpired(clock.now());
      // Every 10 s: the console's queue-depth and worker charts, and old worker log lines.
      if (clock.now() - sampledAt >= 10_000) {
        sampledAt = clock.now();
        await manage.sampleGauges();
        await db.logs.deleteWorkerLinesBefore(clock.now() - limits.workerLogRetentionMs);
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
    workerToken,
    workers: pools,
    sweep,
    /** Stops serving and closes the database; calling it twice is fine. */
    close(): Promise<void> {
      closed ??= (async () => {
        clearInterval(sweeper);
        await pools?.close();
        webhooks.close();
        await server.close();
        await blobs.close();
        await db.close();
      })();
      return closed;
    },
  };
}
