/** What `ferry dev` runs (cli/commands/dev.ts defines the command): loaded when it runs. */
import type { Server } from 'node:http';
import path from 'node:path';
import type { FSWatcher } from 'chokidar';
import type { FastifyInstance } from 'fastify';
import { unusableProjectFolder } from '../../core/adapters/local/home.js';
import type { LocalPlatformOptions } from '../../core/adapters/local/platform.js';
import { checkRecordName, livePrefix } from '../../core/deployment.js';
import { FerryError } from '../../core/errors.js';
import { noEndpointsFound } from '../build/scan.js';
import {
  apiKeyFromUser,
  ferryPythonPath,
  installRoot,
  isPlaceholderKey,
  type KeyFromUser,
  readDotEnv,
} from '../config.js';
import type { CliContext } from '../context.js';
import { deployProject, printDeploySummary } from '../deploy/run.js';
import {
  devStartFailureCodes,
  devStartFailureFix,
  reloadFailureMessage,
  startFailureOf,
} from '../dev/failures.js';
import { type DevLock, takeDevLock } from '../dev/lock.js';
import {
  DevResourcesFile,
  devApp,
  imageNotInDev,
  LiveEndpoints,
  type ScanSnapshot,
  scanForDev,
} from '../dev/state.js';
import { DevVenvs } from '../dev/venvs.js';
import { confirm, countOf } from '../io.js';
import { providerName, withProvider } from '../providers/index.js';
import { portToListenOn, requestedPort } from '../providers/local.js';
import { listenFailure, type PortChoice } from '../serve.js';
import { untilStopped } from './serve-run.js';
import { buildOptionsFrom } from './shared.js';

/**
 * `ferry dev --provider aws`: the project's endpoints as `live-` endpoints of the app's `dev`
 * environment, through the same path as `ferry deploy` (build, upload, stacks, records). The local
 * dev server does not front them yet: the command prints their URLs and exits.
 */
async function devOnAws(ctx: CliContext, yes: boolean): Promise<void> {
  const projectDir = ctx.io.cwd;
  const app = checkRecordName('app', devApp(projectDir));
  ctx.reporter.line(`Provisioning ${livePrefix}endpoints of ${app} in environment 'dev' on AWS`);
  await withProvider(
    ctx,
    'aws',
    async (provider) => {
      const result = await deployProject({
        provider,
        reporter: ctx.reporter,
        projectDir,
        app,
        env: 'dev',
        build: buildOptionsFrom({}, ctx.io.env),
        serve: true,
        namePrefix: livePrefix,
      });
      printDeploySummary(ctx.reporter, result, false);
      ctx.reporter.line(
        'The local dev server (Swagger UI, /<module>/runsync) does not front AWS endpoints yet: call the URLs above with your FERRY_API_KEY.',
      );
      ctx.reporter.line(
        'Run `ferry dev --provider aws` again after a change; `ferry env delete dev --provider aws` removes them.',
      );
    },
    { yes },
  );
}

interface DevArgs {
  host: string;
  /** --allow-origin: web pages of these origins may call the dev server, and their names reach it. */
  allowOrigins: string[];
  /** --port, when given: it wins over FERRY_PORT. */
  port: number | undefined;
  reload: boolean;
  autoProvision: boolean;
  deps: boolean;
}

async function dev(ctx: CliContext, args: DevArgs): Promise<void> {
  const projectDir = ctx.io.cwd;
  const say = (line: string) => ctx.reporter.line(line);
  // Read before anything starts: a FERRY_PORT that is no port is the first thing to fix.
  const portChoice = requestedPort(ctx.io.env, args.port);
  // The live endpoints are recorded in this app, read once: a name no app may have stops here.
  const liveApp = checkRecordName('app', devApp(projectDir));
  const snapshot = await scanForDev(projectDir);
  for (const warning of snapshot.warnings) say(`warning: ${warning}`);
  if (snapshot.endpoints.length === 0) {
    throw noEndpointsFound(
      snapshot.files,
      'No endpoints found in this folder',
      'Mark a function with @Endpoint(name=...) (from ferry import Endpoint), or run `ferry init`.',
    );
  }
  // After the scan: in a folder that is no project, that is what to fix first.
  const key = apiKeyFromUser(ctx.io.env, projectDir);
  if (!key) {
    // A copied .env.example still holds the template's placeholder: "not set" would send the user
    // looking for a line that is there.
    const inDotEnv = readDotEnv(projectDir).FERRY_API_KEY?.trim();
    if (inDotEnv && isPlaceholderKey(inDotEnv)) {
      throw new FerryError('unauthorized', `FERRY_API_KEY in .env is still the placeholder '${inDotEnv}'`, {
        hint: 'Set it to a key of your own in .env (any value works locally), or export FERRY_API_KEY.',
      });
    }
    throw new FerryError('unauthorized', 'FERRY_API_KEY is not set: `ferry dev` requires it', {
      hint: 'Copy .env.example to .env and set FERRY_API_KEY (any value works locally), or export FERRY_API_KEY.',
    });
  }

  // One dev per project, taken before anything opens .ferry/ferry.db: a second one's platform would
  // requeue the first's running jobs as orphans at its start, and they would run twice.
  const lock = takeDevLock(projectDir);
  try {
    await serveDev(ctx, args, { projectDir, portChoice, liveApp, snapshot, key, lock });
  } finally {
    lock.release();
  }
}

/** `ferry dev` once it holds the project's lock: the platform, the dev server, the watcher. */
async function serveDev(
  ctx: CliContext,
  args: DevArgs,
  started: {
    projectDir: string;
    portChoice: PortChoice;
    liveApp: string;
    snapshot: ScanSnapshot;
    key: KeyFromUser;
    lock: DevLock;
  },
): Promise<void> {
  const { projectDir, portChoice, liveApp, key, lock } = started;
  let snapshot = started.snapshot;
  const say = (line: string) => ctx.reporter.line(line);
  // Loaded here rather than at the top: every command loads this module (the command table), and the
  // platform, the dev server (Fastify, Swagger) and the watcher would add their load time to each one.
  const [
    { startLocalPlatform },
    { webhookAllowFromEnv },
    { createDevListener, createDevServer },
    { default: chokidar },
  ] = await Promise.all([
    import('../../core/adapters/local/platform.js'),
    import('../../core/webhooks.js'),
    import('../dev/server.js'),
    import('chokidar'),
  ]);

  // Before the platform starts (workers, builds): a taken FERRY_PORT exits 2 with nothing started;
  // --port's and the default's move to the next free one. A port taken after this is said at listen.
  const port = await portToListenOn(args.host, portChoice);
  if (port !== portChoice.port && portChoice.port !== 0)
    say(`Port ${portChoice.port} is in use; using ${port}`);

  // Set once the live records exist; a by-name call (a script, or one worker calling another
  // endpoint's function) provisions its endpoint first, like the dev server's own routes do.
  let liveRef: LiveEndpoints | undefined;
  // Set while the code on disk does not load (a reload failed: failures.ts reloadFailureMessage),
  // until a reload succeeds. The platform refuses every run with it, whoever calls (the dev server's
  // routes, a script, a worker calling another endpoint), rather than run the code from before the
  // change, which the workers still hold.
  let reloadFailure: string | undefined;
  const platformOptions: LocalPlatformOptions = {
    beforeResolve: async (app, _env, name) => {
      if (liveRef && app === liveApp && liveRef.endpoint(name)) await liveRef.ensure(name);
    },
    runsRefusedBecause: () => reloadFailure,
    dataDir: path.join(projectDir, '.ferry'),
    unusableDataDir: unusableProjectFolder,
    host: '127.0.0.1',
    port: 0,
    apiKey: key.key,
    consoleDir: path.join(installRoot(), 'console'),
    // Each job's output as it happens, prefixed by endpoint and job (docs/observability.md).
    onLog: (lines) => {
      for (const line of lines)
        if (line.jobId)
          say(`[${endpointNames.get(line.endpointId) ?? line.endpointId} ${line.jobId}] ${line.text}`);
    },
    workers: {
      ferryPythonPath: ferryPythonPath(),
    },
    // A worker that cannot start (import error, missing package) fails its endpoint at the first
    // exit, so the request answers with the error at once (cli/dev/failures.ts). A save reloads the
    // code, so that is the fix to tell; and the endpoint is the function's name, not its id.
    supervisor: { startFailureCodes: devStartFailureCodes, startFailureFix: devStartFailureFix },
    endpointNameOf: (endpointId) => endpointNames.get(endpointId),
    webhookAllow: webhookAllowFromEnv(ctx.io.env),
    // info carries the workers' own output (print() lines), prefixed by endpoint and worker.
    log: { info: say, warn: (m) => say(`warning: ${m}`), error: (m) => say(`error: ${m}`) },
  };
  const endpointNames = new Map<string, string>();
  const platform = await startLocalPlatform(platformOptions);
  const venvs = new DevVenvs({ projectDir, say });
  if (!args.deps) say('--no-deps: workers use your Python as it is; dependencies=[...] are not installed.');
  const pools = platform.workers;
  let server: FastifyInstance | undefined;
  let listener: Server | undefined;
  let watcher: FSWatcher | undefined;
  try {
    const live = new LiveEndpoints({
      projectDir,
      control: platform.db.control,
      file: new DevResourcesFile(projectDir),
      snapshot,
      // A pass that reads the record just written (one in flight may not): the reloaded endpoint's
      // old workers are drained before the reload is reported, so no job goes to the old code.
      reconcile: async () => {
        await pools?.reconcileNow();
      },
      ...(args.deps ? { workerCommand: (endpoint) => venvs.commandFor(endpoint) } : {}),
      onChange: (name, outcome, record) => {
        endpointNames.set(record.id, name);
        if (outcome !== 'unchanged')
          say(`${outcome === 'created' ? '+ provisioned' : '~ updated'} live-${name} (${record.id})`);
      },
    });
    liveRef = live;

    if (args.autoProvision) {
      const count = snapshot.endpoints.length;
      if (
        count > 5 &&
        !(await confirm(ctx.io, `Provision all ${count} endpoints now?`, { unanswered: 'decline' }))
      ) {
        say('Not provisioning at startup: each endpoint starts on its first call.');
      } else {
        say(`Provisioning ${count} endpoints (at most 3 at a time)…`);
        for (const result of await live.ensureAll(3)) {
          if (result.error)
            say(`warning: ${result.name}: ${result.error} (it will be provisioned on its first call)`);
        }
      }
    }

    // One listener for the whole session: a reload builds the routes anew and swaps them in behind
    // it, so the port never closes, and a request in flight (a runsync: up to 90 s) finishes on the
    // routes it started with while new requests get the new ones.
    const routesOf = async () => {
      const next = await createDevServer({
        live,
        startFailure: (endpointId) => startFailureOf(platform.supervisor.problem(endpointId)),
        reloadFailure: () => reloadFailure,
        platformUrl: platform.url,
        apiKey: key.key,
        guard: { listenHost: args.host, allowOrigins: args.allowOrigins },
        log: say,
      });
      await next.ready();
      return next;
    };
    server = await routesOf();
    listener = createDevListener((request, response) => server?.routing(request, response));
    const listening = listener;
    await new Promise<void>((resolve, reject) => {
      listening.once('error', reject);
      listening.listen({ host: args.host, port }, () => {
        listening.off('error', reject);
        resolve();
      });
    }).catch((error: unknown) => {
      throw listenFailure(error, args.host, port, portChoice.setBy);
    });
    const address = listener.address();
    const boundPort = typeof address === 'object' && address ? address.port : port;
    const base = `http://${args.host.includes(':') ? `[${args.host}]` : args.host}:${boundPort}`;
    lock.listening({ url: base, platformUrl: platform.url });
    // Listen before printing: whoever reads the output may press Ctrl+C (or send SIGTERM) as soon as
    // it appears, and the workers and the lock are let go of only on the way out through here.
    const stopped = untilStopped();
    ctx.reporter.out(`Ferry dev server at ${base}  (docs: ${base}/docs)`);
    ctx.reporter.out(`Console at ${platform.url}/console  (sign in with your FERRY_API_KEY)`);
    const routeLines = (routes: typeof snapshot.routes) =>
      routes.map(
        (route) => `${route.method.padEnd(6)} ${base}${route.path}${route.note ? `  (${route.note})` : ''}`,
      );
    for (const line of routeLines(snapshot.routes)) ctx.reporter.out(`  ${line}`);
    for (const endpoint of snapshot.endpoints)
      if (endpoint.image !== undefined) say(`note: ${imageNotInDev(endpoint)}.`);
    say(`API key from ${key.source}; calls to the dev server need no Authorization header.`);
    say(
      args.reload
        ? 'Watching .py files; Ctrl+C stops the server and every worker.'
        : 'Ctrl+C stops the server and every worker.',
    );

    if (args.reload) {
      let timer: NodeJS.Timeout | undefined;
      let reloading = Promise.resolve();
      // The files changed since the last reload began, for the message of a reload that fails.
      const changed = new Set<string>();
      const reload = async () => {
        const files = [...changed].sort();
        changed.clear();
        try {
          const routesBefore = new Set(routeLines(snapshot.routes));
          const next = await scanForDev(projectDir);
          const removed = await live.apply(next);
          snapshot = next;
          for (const name of removed) say(`- removed live-${name}: no longer in the project`);
          const old = server;
          server = await routesOf();
          await old?.close();
          reloadFailure = undefined;
          say(`↻ reloaded (${countOf(snapshot.endpoints.length, 'endpoint')})`);
          // The routes a reload added or took away, as the start listed them: a new endpoint's URL
          // is on the terminal without a restart, or a look at /docs.
          const routesAfter = routeLines(snapshot.routes);
          for (const line of routesAfter) if (!routesBefore.has(line)) say(`  + ${line}`);
          for (const line of routesBefore) if (!routesAfter.includes(line)) say(`  - ${line}`);
        } catch (error) {
          reloadFailure = reloadFailureMessage(files, error);
          say(`reload failed: ${(error as Error).message}`);
          say(
            '  Every route and every run sent to the platform answer 503 with this error until a save reloads the code; /docs and /ping still answer.',
          );
        }
      };
      // chokidar follows what editors do: atomic saves (write a temp file, rename over), renames, new
      // files and folders. Node's fs.watch loses a file replaced by rename on Linux.
      const skipped = (file: string) => {
        const parts = path.relative(projectDir, file).split(path.sep);
        return parts.some(
          (p) => p === '.ferry' || p === '__pycache__' || p === 'node_modules' || p.startsWith('.'),
        );
      };
      watcher = chokidar.watch(projectDir, {
        ignoreInitial: true,
        ignored: (file, stats) => skipped(file) || (stats?.isFile() === true && !file.endsWith('.py')),
        atomic: true,
      });
      watcher.on('all', (_event, file) => {
        if (!file.endsWith('.py')) return;
        changed.add(path.relative(projectDir, file).split(path.sep).join('/'));
        clearTimeout(timer);
        timer = setTimeout(() => {
          reloading = reloading.then(reload);
        }, 300);
      });
      watcher.on('error', (error) => say(`warning: file watching: ${(error as Error).message}`));
    }
    await stopped;
    say('Stopping the dev server and its workers…');
  } finally {
    await watcher?.close();
    // Requests in flight finish first (close waits for them), as they did when Fastify listened.
    if (listener?.listening) await new Promise((resolve) => listener?.close(resolve));
    await server?.close();
    await platform.close();
  }
}

/** `ferry dev`'s flags as its handler reads them. */
export interface DevArgv {
  provider?: string | undefined;
  host: string;
  port: number | undefined;
  'allow-origin'?: string[] | undefined;
  reload: boolean;
  'auto-provision': boolean;
  deps: boolean;
  yes: boolean;
}

export function runDev(ctx: CliContext, argv: DevArgv): Promise<void> {
  return providerName(ctx, argv.provider) === 'aws'
    ? devOnAws(ctx, Boolean(argv.yes))
    : dev(ctx, {
        host: argv.host,
        allowOrigins: argv['allow-origin'] ?? [],
        port: argv.port,
        reload: argv.reload !== false,
        autoProvision: Boolean(argv['auto-provision']),
        deps: argv.deps !== false,
      });
}
