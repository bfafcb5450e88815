/**
 * The embedded platform as a child process, for benchmarks and fault tests that must measure it from
 * outside or kill it with SIGKILL:
 *
 *   node dist/bench/serve-child.js <dataDir> [port=0] [apiKey]
 *
 * Env: FERRY_BENCH_LEASE_MS, FERRY_BENCH_WORKER_WAIT_MS, FERRY_BENCH_SWEEP_MS, FERRY_BENCH_ENDPOINTS
 * (comma-separated queue endpoint ids to create), FERRY_BENCH_PROJECT (JSON `{dir, ferryPythonPath,
 * resources}`: run that Python project's endpoints in worker pools), FERRY_BENCH_WEBHOOK_RETRY_MS.
 *
 * Prints one JSON line `{url, port, workers, pid}` once it listens (`workers`: per endpoint of
 * FERRY_BENCH_ENDPOINTS, the identity `{workerId, token}` of one protocol worker run from outside), then reads JSON commands on
 * stdin, one per line, answering each with one JSON line:
 *   {"cmd":"submit","endpoint":"e","n":100000}  → {"submitted":n,"ms":…}   (engine directly, no HTTP)
 *   {"cmd":"purge","endpoint":"e"}              → {"removed":n,"ms":…}
 *   {"cmd":"mem"}                               → {"rss":…,"heapUsed":…}   (after gc with --expose-gc)
 * SIGTERM/SIGINT close the platform and exit 0.
 *
 *   node dist/bench/serve-child.js --floor      (a bare Fastify POST /echo, for the latency floor)
 */
import type { AddressInfo } from 'node:net';
import { createInterface } from 'node:readline';
import Fastify from 'fastify';
import { startLocalPlatform } from '../core/adapters/local/platform.js';
import { projectRecords } from './lib/project.js';

const intEnv = (name: string, fallback: number) => {
  const value = Number(process.env[name]);
  return Number.isInteger(value) && value >= 0 ? value : fallback;
};

/** `--floor`: a bare Fastify echo route, the floor the runsync latency bench is measured against. */
async function floor(): Promise<void> {
  const app = Fastify({ logger: false });
  app.post('/echo', async (request) => request.body);
  await app.listen({ host: '127.0.0.1', port: 0 });
  const { port } = app.server.address() as AddressInfo;
  process.on('SIGTERM', () => void app.close().then(() => process.exit(0)));
  process.stdout.write(
    `${JSON.stringify({ url: `http://127.0.0.1:${port}`, port, workers: {}, pid: process.pid })}\n`,
  );
}

async function main(): Promise<void> {
  if (process.argv[2] === '--floor') return floor();
  const [dataDir, portText = '0', apiKey] = process.argv.slice(2);
  if (!dataDir) {
    process.stderr.write('usage: node dist/bench/serve-child.js <dataDir> [port] [apiKey]\n');
    process.exit(2);
  }
  const project = process.env.FERRY_BENCH_PROJECT
    ? (JSON.parse(process.env.FERRY_BENCH_PROJECT) as {
        dir: string;
        ferryPythonPath: string;
        resources?: Record<string, Record<string, number>>;
      })
    : undefined;
  const platform = await startLocalPlatform({
    dataDir,
    port: Number(portText),
    apiKey,
    workerWaitMs: intEnv('FERRY_BENCH_WORKER_WAIT_MS', 5_000),
    sweepIntervalMs: intEnv('FERRY_BENCH_SWEEP_MS', 1_000),
    settings: { leaseMs: intEnv('FERRY_BENCH_LEASE_MS', 60_000) },
    webhookRetryDelayMs: intEnv('FERRY_BENCH_WEBHOOK_RETRY_MS', 10_000),
    // The fault bench's receivers listen on loopback, which webhooks may only reach when allowed.
    webhookAllow: ['127.0.0.1'],
    // Benchmarks push one key far past the per-key rate limit on purpose: they measure the platform.
    // So does the TypeScript protocol worker (FERRY_BENCH_ENDPOINTS): 16 jobs at once on one token and
    // two requests a job, 25 000 a window, past any worker of the ferry runtime, whose Python pools
    // keep the default worker limit.
    frontDoor: {
      rateLimitRequests: Number.MAX_SAFE_INTEGER,
      ...(process.env.FERRY_BENCH_ENDPOINTS ? { workerRateLimitRequests: Number.MAX_SAFE_INTEGER } : {}),
    },
    workers: project
      ? { ferryPythonPath: project.ferryPythonPath, tickMs: 100, reconcileIntervalMs: 500, drainMs: 3_000 }
      : undefined,
  });
  const now = Date.now();
  const workers: Record<string, { workerId: string; token: string }> = {};
  for (const id of (process.env.FERRY_BENCH_ENDPOINTS ?? '').split(',').filter(Boolean)) {
    await platform.db.control.putEndpoint({
      id,
      app: 'bench',
      env: 'production',
      name: id,
      kind: 'queue',
      config: {},
      fingerprint: 'bench',
      createdAt: now,
      updatedAt: now,
    });
    // Same id across restarts of the child: a restart gives the worker a new token, not a new id.
    const { workerId, token } = platform.adoptWorker(id, `bench-${id}`);
    workers[id] = { workerId, token };
  }
  if (project) {
    for (const record of await projectRecords(project.dir, project.resources)) {
      await platform.db.control.putEndpoint(record);
    }
    await platform.workers?.reconcile();
  }

  let closing = false;
  const shutdown = async () => {
    if (closing) return;
    closing = true;
    await platform.close();
    process.exit(0);
  };
  process.on('SIGTERM', shutdown);
  process.on('SIGINT', shutdown);

  const reply = (value: unknown) => process.stdout.write(`${JSON.stringify(value)}\n`);
  reply({ url: platform.url, port: platform.port, workers, pid: process.pid });

  // Commands run one at a time, in order, so answers come back in the order asked.
  let chain = Promise.resolve();
  createInterface({ input: process.stdin }).on('line', (line) => {
    chain = chain.then(async () => {
      try {
        const cmd = JSON.parse(line) as { cmd: string; endpoint?: string; n?: number };
        const started = performance.now();
        if (cmd.cmd === 'submit') {
          const n = cmd.n ?? 1;
          for (let i = 0; i < n; i++) {
            await platform.engine.submit(cmd.endpoint ?? 'bench', { input: { i } }, { sync: false });
          }
          reply({ submitted: n, ms: Math.round(performance.now() - started) });
        } else if (cmd.cmd === 'purge') {
          const result = await platform.engine.purge(cmd.endpoint ?? 'bench');
          reply({ removed: result.removed, ms: Math.round(performance.now() - started) });
        } else if (cmd.cmd === 'mem') {
          (globalThis as { gc?: () => void }).gc?.();
          const mem = process.memoryUsage();
          reply({ rss: mem.rss, heapUsed: mem.heapUsed, external: mem.external });
        } else {
          reply({ error: `unknown command ${cmd.cmd}` });
        }
      } catch (error) {
        reply({ error: (error as Error).message });
      }
    });
  });
}

main().catch((error) => {
  process.stderr.write(`serve-child: ${(error as Error).stack ?? error}\n`);
  process.exit(1);
});
