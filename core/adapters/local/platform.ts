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
import { defaultPort } from '../../limits.js';
import { type Logger, silentLogger } from '../../log.js';
import { callerOfToken } from '../../names.js';
import type { Clock } from '../../ports.js';
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
  /** Before a by-name lookup (`ferry dev` provisions live endpoints there). */
  beforeResolve?: (app: string, env: string, name: string) => Promise<void>;
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
  const api = new V2Api({
    engine,
    control: db.control,
    auth,
    workerWaitMs: options.workerWaitMs,
    // Workers' call tokens are derived from the worker secret (core/names.ts).
    callTokenSecret: workerToken,
    beforeResolve: options.beforeResolve,
  });
  let pools: LocalWorkers | undefined;
  const server = createHttpServer({
    api,
    lb: {
      auth,
      allowsCall: async (key, endpointId) => {
        const caller = callerOfToken(workerToken, key);
        if (caller === undefined) return false;
        const [own, target] = [
          await db.control.getEndpoint(caller),
          await db.control.getEndpoint(endpointId),
        ];
        return own !== undefined && target !== undefined && own.app === target.app && own.env === target.env;
      },
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
    });
    await pools.reconcile();
    pools.start(reconcileIntervalMs);
  }

  let sweeping = false;
  const sweep = async () => {
    if (sweeping) return;
    sweeping = true;
    try {
      await engine.sweep();
      await db.jobs.deleteExpired(clock.now());
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
