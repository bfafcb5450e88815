/** What `ferry serve` and `ferry quickstart` run (cli/commands/serve.ts defines them): loaded when they run. */
import { type ExecFileSyncOptionsWithStringEncoding, execFileSync } from 'node:child_process';
import { existsSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { LocalPlatformOptions, startLocalPlatform } from '../../core/adapters/local/platform.js';
import { FerryError, usage } from '../../core/errors.js';
import { stderrLogger } from '../../core/log.js';
import { signalGroup } from '../../core/process-group.js';
import { apiKeyFromUser, ferryHome, ferryPythonPath, installRoot } from '../config.js';
import type { CliContext } from '../context.js';
import { deployProject, printDeploySummary } from '../deploy/run.js';
import { LocalProvider, localApiKey, requestedPort } from '../providers/local.js';
import {
  answers,
  commandLineHas,
  listenFailure,
  type PortChoice,
  processAlive,
  readServerInfo,
  runningServer,
  serverInfoPath,
  startDetached,
} from '../serve.js';

export async function startServing(
  ctx: CliContext,
  options: {
    host: string;
    /** The port, and what named it: a taken one's hint names that setting. */
    port: PortChoice;
    dataDir: string;
    workerUser?: { uid: number; gid: number };
    workerUids?: { first: number; last: number };
  },
) {
  // Loaded here rather than at the top: every command loads this module (the command table), and
  // the platform (Fastify, worker pools) would add its load time to each `ferry deploy` or `app list`.
  const [platformModule, { webhookAllowFromEnv }] = await Promise.all([
    import('../../core/adapters/local/platform.js'),
    import('../../core/webhooks.js'),
  ]);
  const userKey = apiKeyFromUser(ctx.io.env, ctx.io.cwd);
  const platformOptions: LocalPlatformOptions = {
    dataDir: options.dataDir,
    host: options.host,
    port: options.port.port,
    log: stderrLogger,
    workers: {
      ferryPythonPath: ferryPythonPath(),
      ...(options.workerUser ? { workerUser: options.workerUser } : {}),
      ...(options.workerUids ? { workerUids: options.workerUids } : {}),
    },
    consoleDir: path.join(installRoot(), 'console'),
    webhookAllow: webhookAllowFromEnv(ctx.io.env),
    ...(userKey ? { apiKey: userKey.key } : {}),
  };
  let platform: Awaited<ReturnType<typeof startLocalPlatform>>;
  try {
    platform = await platformModule.startLocalPlatform(platformOptions);
  } catch (error) {
    throw listenFailure(error, options.host, options.port.port, options.port.setBy);
  }
  const key = await localApiKey(options.dataDir, platform.db.control, ctx.io.env, ctx.io.cwd);
  return { platform, key };
}

/** Resolves on Ctrl+C / SIGTERM. */
export function untilStopped(): Promise<string> {
  return new Promise((resolve) => {
    const stop = (signal: string) => () => resolve(signal);
    process.once('SIGINT', stop('SIGINT'));
    process.once('SIGTERM', stop('SIGTERM'));
  });
}

function writeServerInfo(home: string, url: string): () => void {
  writeFileSync(
    serverInfoPath(home),
    `${JSON.stringify({ pid: process.pid, url, startedAt: Date.now() })}\n`,
  );
  return () => {
    if (readServerInfo(home)?.pid === process.pid) rmSync(serverInfoPath(home), { force: true });
  };
}

/**
 * Whether server.json's pid is still that `ferry serve`: the platform answers at its URL, or (Linux)
 * the process's command line is a `serve`. A pid alone could be another process's by now.
 */
async function stillServing(info: { pid: number; url: string }): Promise<boolean> {
  if (!processAlive(info.pid)) return false;
  if (await answers(info.url)) return true;
  return commandLineHas(info.pid, ['serve']) === true;
}

/**
 * `ferry serve --stop`: the platform of this FERRY_HOME (server.json) is asked to stop as Ctrl+C asks
 * (SIGTERM to its process group: it stops its workers itself), and killed with its group if it is
 * still there after `graceMs`. Nothing serving is no error: the wanted state holds.
 */
async function stopServing(ctx: CliContext, graceMs = 20_000): Promise<void> {
  const home = ferryHome(ctx.io.env);
  const info = readServerInfo(home);
  if (!info || !(await stillServing(info))) {
    rmSync(serverInfoPath(home), { force: true });
    ctx.reporter.line(`No platform serves ${home}`);
    return;
  }
  const signal = (name: NodeJS.Signals) => signalGroup(info.pid, name);
  ctx.reporter.line(`Stopping ferry serve (pid ${info.pid}) at ${info.url}…`);
  signal('SIGTERM');
  const deadline = Date.now() + graceMs;
  while (processAlive(info.pid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
  if (processAlive(info.pid)) {
    ctx.reporter.line(`  it did not stop within ${graceMs / 1000} s: killing its process group`);
    signal('SIGKILL');
  }
  rmSync(serverInfoPath(home), { force: true });
  ctx.reporter.line(`✓ Stopped ferry serve (pid ${info.pid})`);
}

export async function serve(
  ctx: CliContext,
  argv: {
    host: string;
    /** --port, when given: it wins over FERRY_PORT. */
    port: number | undefined;
    detach: boolean;
    stop: boolean;
    'worker-user'?: string;
    'worker-uids'?: string;
  },
): Promise<void> {
  if (argv.stop) {
    const other = (['detach', 'worker-user', 'worker-uids', 'port'] as const).find(
      (flag) => argv[flag] !== undefined && argv[flag] !== false,
    );
    if (other)
      throw usage(
        `--stop takes no --${other}`,
        'Run `ferry serve --stop` alone; it stops the platform of this FERRY_HOME.',
      );
    return stopServing(ctx);
  }
  const port = requestedPort(ctx.io.env, argv.port);
  const home = ferryHome(ctx.io.env);
  // Checked before anything starts, in the foreground too: a detached server must not come up
  // without the isolation it was asked for.
  const isolation = workerIsolation(argv);
  // Said once the platform is up: a start that fails reports this start's log lines, its error first.
  const asRoot = rootWithoutIsolation(process.getuid?.(), isolation.args);
  const gpus = gpuDevicesOpenToAll(isolation.options.workerUids !== undefined);
  const running = await runningServer(home);
  if (running) {
    if (argv.detach) {
      ctx.reporter.line(`A platform already serves ${home}`);
      ctx.reporter.out(running);
      return;
    }
    throw new FerryError('conflict', `A platform already serves ${home} at ${running}`, {
      hint: 'Stop it with `ferry serve --stop`, or use another FERRY_HOME.',
    });
  }
  if (argv.detach) {
    const info = await startDetached({
      home,
      host: argv.host,
      port,
      env: ctx.io.env,
      serveArgs: isolation.args,
    });
    ctx.reporter.line(
      `✓ ferry serve runs in the background (pid ${info.pid}); logs in ${path.join(home, 'serve.log')}`,
    );
    if (asRoot) ctx.reporter.line(asRoot);
    if (gpus) ctx.reporter.line(gpus);
    ctx.reporter.out(info.url);
    return;
  }
  const { platform, key } = await startServing(ctx, {
    host: argv.host,
    port,
    dataDir: home,
    ...isolation.options,
  });
  const forget = writeServerInfo(home, platform.url);
  ctx.reporter.out(`Ferry platform at ${platform.url}  (state in ${home})`);
  ctx.reporter.out(`API key from ${key.source}; console at ${platform.url}/console`);
  ctx.reporter.out('Ctrl+C stops it and its workers.');
  if (asRoot) ctx.reporter.line(asRoot);
  if (gpus) ctx.reporter.line(gpus);
  await untilStopped();
  ctx.reporter.line('Stopping…');
  forget();
  await platform.close();
}

/**
 * `--worker-user` / `--worker-uids` (docs/security.md): the platform options they set, and the same
 * flags for a detached server. Both need root (the platform starts workers as other users).
 */
export function workerIsolation(argv: { 'worker-user'?: string; 'worker-uids'?: string }): {
  options: { workerUser?: { uid: number; gid: number }; workerUids?: { first: number; last: number } };
  args: string[];
} {
  const user = argv['worker-user'];
  const uids = argv['worker-uids'];
  if (user === undefined && uids === undefined) return { options: {}, args: [] };
  if (user !== undefined && uids !== undefined) {
    throw usage(
      'Pass either --worker-user or --worker-uids',
      '--worker-uids gives each endpoint a user of its own; --worker-user one user for all endpoints',
    );
  }
  if (process.getuid?.() !== 0) {
    throw usage('Running workers as other OS users needs root', 'Run `sudo ferry serve …`');
  }
  if (user !== undefined) return { options: { workerUser: osUser(user) }, args: ['--worker-user', user] };
  return { options: { workerUids: uidRange(uids!) }, args: ['--worker-uids', uids!] };
}

/**
 * The warning for a platform started as root with neither isolation flag: endpoint code then runs as
 * root too, and can read FERRY_HOME (every key, the database) and other workers' environments
 * (docs/security.md). Said, not refused: a container that runs everything as root is common.
 */
export function rootWithoutIsolation(uid: number | undefined, isolationArgs: string[]): string | undefined {
  if (uid !== 0 || isolationArgs.length > 0) return undefined;
  return (
    'warning: serving as root without --worker-uids or --worker-user: endpoint code runs as root and can ' +
    "read FERRY_HOME's keys and database and other endpoints' secrets. " +
    'Run `sudo ferry serve --worker-uids 200000-265535` to give each endpoint a user of its own.'
  );
}

/**
 * The warning for `--worker-uids` on a host whose GPU device files (`/dev/nvidia*`, in `devDir`) every
 * user may open: the driver's default mode is 0666. A worker's CUDA_VISIBLE_DEVICES only says which
 * GPUs CUDA shows it; the uid that keeps an endpoint out of other endpoints' files and processes does
 * not keep it off their GPUs, which it can open and use (docs/security.md). Said, not refused: the
 * operator's fix (a container per endpoint, the device cgroup, tighter device modes) is outside Ferry.
 */
export function gpuDevicesOpenToAll(workerUids: boolean, devDir = '/dev'): string | undefined {
  if (!workerUids) return undefined;
  let names: string[];
  try {
    names = readdirSync(devDir).filter((name) => name.startsWith('nvidia'));
  } catch {
    return undefined;
  }
  const open = names.filter((name) => {
    try {
      // Read or write for others: either opens the device to any uid.
      return (statSync(path.join(devDir, name)).mode & 0o006) !== 0;
    } catch {
      return false;
    }
  });
  if (open.length === 0) return undefined;
  const shown = open.sort().map((name) => path.join(devDir, name));
  return (
    `warning: ${shown.slice(0, 3).join(', ')}${shown.length > 3 ? ` and ${shown.length - 3} more` : ''} ` +
    "can be opened by every user, so --worker-uids does not keep an endpoint's code off GPUs given to " +
    'another (CUDA_VISIBLE_DEVICES only picks the GPUs CUDA shows). Run each endpoint in a container of ' +
    'its own, or limit the devices with the device cgroup (docs/security.md).'
  );
}

/** `FIRST-LAST`, e.g. `200000-265535`: uids no account on this machine uses. */
export function uidRange(text: string): { first: number; last: number } {
  const match = /^(\d+)-(\d+)$/.exec(text.trim());
  const first = Number(match?.[1]);
  const last = Number(match?.[2]);
  if (!match || first < 1000 || last < first || last > 4_294_967_294) {
    throw usage(
      `--worker-uids must be FIRST-LAST with 1000 <= FIRST <= LAST, got '${text}'`,
      'For example --worker-uids 200000-265535 (uids no account on this machine uses)',
    );
  }
  return { first, last };
}

/** uid and gid of a user name (or numeric id), via id(1); a usage error when it does not exist. */
export function osUser(name: string): { uid: number; gid: number } {
  // id's own complaint ("no such user") is not shown: the usage error below says it once.
  const quiet: ExecFileSyncOptionsWithStringEncoding = {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
  };
  try {
    const uid = Number(execFileSync('id', ['-u', name], quiet).trim());
    const gid = Number(execFileSync('id', ['-g', name], quiet).trim());
    return { uid, gid };
  } catch {
    throw usage(`No OS user '${name}'`, 'Create one first, e.g. useradd --system ferry-worker');
  }
}

export async function quickstart(
  ctx: CliContext,
  argv: { host: string; port: number | undefined },
): Promise<void> {
  const port = requestedPort(ctx.io.env, argv.port);
  const home = ferryHome(ctx.io.env);
  const projectDir = path.join(installRoot(), 'examples', 'hello');
  if (!existsSync(path.join(projectDir, 'hello.py'))) {
    throw new FerryError('failed', `The example ${projectDir}/hello.py is missing from this install`);
  }
  const { platform, key } = await startServing(ctx, { host: argv.host, port, dataDir: home });
  const forget = writeServerInfo(home, platform.url);
  try {
    const provider = new LocalProvider({
      home,
      env: ctx.io.env,
      projectDir,
      stores: { control: platform.db.control, blobs: platform.blobs, url: platform.url },
    });
    const result = await deployProject({
      provider,
      reporter: ctx.reporter,
      projectDir,
      app: 'hello',
      env: 'production',
      // The example lives in the install (often the repository): stage and pack under FERRY_HOME so
      // `npm start` never writes into examples/hello.
      build: {
        buildDir: path.join(home, 'build', 'hello'),
        output: path.join(home, 'build', 'hello.tar.gz'),
      },
      serve: true,
    });
    await platform.workers?.reconcile();
    // Listen before printing: whoever reads the output may press Ctrl+C as soon as it appears.
    const stopped = untilStopped();
    printDeploySummary(ctx.reporter, result, false);
    const queue = result.endpoints.find((e) => e.kind === 'queue');
    const lb = result.endpoints.find((e) => e.kind === 'lb');
    const auth = `-H "Authorization: Bearer ${key.key}" -H 'Content-Type: application/json'`;
    ctx.reporter.out('');
    ctx.reporter.out(`Platform: ${platform.url}`);
    ctx.reporter.out(`API key:  ${key.key}   (from ${key.source})`);
    ctx.reporter.out('');
    if (queue) {
      ctx.reporter.out('# wait for the result');
      ctx.reporter.out(`curl -X POST ${queue.url}/runsync ${auth} -d '{"input": {"name": "Ada"}}'`);
      ctx.reporter.out('# queue a job, then ask for its status (use the id it printed)');
      ctx.reporter.out(`curl -X POST ${queue.url}/run ${auth} -d '{"input": {"name": "Grace"}}'`);
      ctx.reporter.out(`curl ${queue.url}/status/<job id> -H "Authorization: Bearer ${key.key}"`);
    }
    if (lb) {
      ctx.reporter.out('# load-balanced route, direct JSON');
      ctx.reporter.out(`curl -X POST ${lb.url}/echo ${auth} -d '{"text": "hi"}'`);
    }
    ctx.reporter.out('');
    ctx.reporter.out('Ctrl+C stops the platform and its workers.');
    await stopped;
  } finally {
    forget();
    await platform.close();
  }
}
