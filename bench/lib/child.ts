/**
 * The platform in a child process (`node dist/bench/serve-child.js`), so a benchmark or a fault test
 * can measure its memory from outside and kill it with SIGKILL. The child prints one JSON line when it
 * listens, then answers JSON commands on stdin, one per line (see bench/serve-child.ts).
 */
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

export interface ChildOptions {
  /** `--floor` starts the bare Fastify echo instead of the platform. */
  dataDir: string;
  apiKey: string;
  /** 0 picks a free port. */
  port?: number;
  leaseMs?: number;
  workerWaitMs?: number;
  sweepMs?: number;
  webhookRetryDelayMs?: number;
  /** Queue endpoints to create (ids), with no worker pool. */
  endpoints?: string[];
  /** A Python project whose endpoints run in worker pools, with per-endpoint resource overrides. */
  project?: { dir: string; ferryPythonPath: string; resources?: Record<string, Record<string, number>> };
  /** Extra node flags, e.g. ['--expose-gc'] or ['--cpu-prof']. */
  nodeArgs?: string[];
}

/** The child's answer to a command: `{submitted, ms}`, `{removed, ms}` or `{rss, heapUsed, external}`. */
export interface CommandAnswer {
  ms?: number;
  submitted?: number;
  removed?: number;
  rss?: number;
  heapUsed?: number;
  error?: string;
}

export interface PlatformChild {
  url: string;
  port: number;
  /** Per endpoint, the identity of the one protocol worker a bench may run from outside. */
  workers: Record<string, { workerId: string; token: string }>;
  pid: number;
  /** Where that endpoint's outside worker connects, with its token and worker id. */
  target(endpointId: string): { url: string; token: string; workerId: string };
  /** Sends a command and waits for its one-line JSON answer. */
  command(cmd: Record<string, unknown>): Promise<CommandAnswer>;
  kill(signal: NodeJS.Signals): Promise<void>;
  /** SIGTERM, then waits for the exit. Twice is fine. */
  stop(): Promise<void>;
  /** What the child wrote to stderr (for failures). */
  stderr(): string;
}

export const serveChildPath = () => join(process.cwd(), 'dist', 'bench', 'serve-child.js');

export async function startPlatformChild(options: ChildOptions): Promise<PlatformChild> {
  const script = serveChildPath();
  if (!existsSync(script)) {
    throw new Error(`${script} is missing: run \`npm run build\` (npx tsc -p tsconfig.json) first`);
  }
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    FERRY_BENCH_LEASE_MS: String(options.leaseMs ?? 60_000),
    FERRY_BENCH_WORKER_WAIT_MS: String(options.workerWaitMs ?? 5_000),
    FERRY_BENCH_SWEEP_MS: String(options.sweepMs ?? 1_000),
    FERRY_BENCH_WEBHOOK_RETRY_MS: String(options.webhookRetryDelayMs ?? 10_000),
    FERRY_BENCH_ENDPOINTS: (options.endpoints ?? []).join(','),
    FERRY_BENCH_PROJECT: options.project ? JSON.stringify(options.project) : '',
  };
  const child = spawn(
    process.execPath,
    [...(options.nodeArgs ?? []), script, options.dataDir, String(options.port ?? 0), options.apiKey],
    { env, stdio: ['pipe', 'pipe', 'pipe'] },
  );
  let errText = '';
  child.stderr!.setEncoding('utf8');
  child.stderr!.on('data', (d: string) => {
    errText = (errText + d).slice(-20_000);
  });
  const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()));
  const lines = createInterface({ input: child.stdout! });
  const pending: ((line: string) => void)[] = [];
  let ready: (line: string) => void = () => {};
  const first = new Promise<string>((resolve, reject) => {
    ready = resolve;
    child.on('exit', (code, signal) =>
      reject(new Error(`serve-child exited (${signal ?? code}) before it listened:\n${errText}`)),
    );
  });
  let seenFirst = false;
  lines.on('line', (line) => {
    if (!seenFirst) {
      seenFirst = true;
      ready(line);
    } else pending.shift()?.(line);
  });
  const info = JSON.parse(await first) as {
    url: string;
    port: number;
    workers: Record<string, { workerId: string; token: string }>;
    pid: number;
  };
  let stopped: Promise<void> | undefined;
  return {
    ...info,
    target(endpointId) {
      const worker = info.workers[endpointId];
      if (!worker) throw new Error(`serve-child has no outside worker for endpoint ${endpointId}`);
      return { url: info.url, ...worker };
    },
    command(cmd) {
      return new Promise((resolve, reject) => {
        const onExit = () => reject(new Error(`serve-child exited during ${JSON.stringify(cmd)}`));
        child.once('exit', onExit);
        pending.push((line) => {
          child.off('exit', onExit);
          const answer = JSON.parse(line) as CommandAnswer;
          if (answer.error) reject(new Error(answer.error));
          else resolve(answer);
        });
        child.stdin!.write(`${JSON.stringify(cmd)}\n`);
      });
    },
    async kill(signal) {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      await exited;
    },
    stop() {
      stopped ??= (async () => {
        if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
        await exited;
        clearTimeout(timer);
      })();
      return stopped;
    },
    stderr: () => errText,
  };
}

/**
 * CPU time (user + system) a process has used, all its threads, in ms, from /proc (Linux; clock
 * ticks of 10 ms, the USER_HZ of every mainstream Linux). Unlike jobs/s it hardly moves with other
 * load on the machine.
 */
export function cpuMs(pid: number): number | undefined {
  return statCpuMs(`/proc/${pid}/stat`);
}

/**
 * CPU time of a process's main thread alone, in ms: for the platform, its event loop, which caps
 * its jobs/s on a quiet machine (bench/results.md, nineteenth pass); other threads (the WAL
 * checkpointer's) run beside it.
 */
export function mainThreadCpuMs(pid: number): number | undefined {
  return statCpuMs(`/proc/${pid}/task/${pid}/stat`);
}

function statCpuMs(path: string): number | undefined {
  try {
    const stat = readFileSync(path, 'utf8');
    // Fields after the command name (which may hold spaces): state is field 3, utime 14, stime 15.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) * 10;
  } catch {
    return undefined;
  }
}

/** CPU time of a process's descendants (not itself), in ms: the platform's worker processes. */
export function descendantsCpuMs(pid: number): number {
  let children: number[] = [];
  try {
    children = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8')
      .trim()
      .split(/\s+/)
      .filter((s) => s.length > 0)
      .map(Number);
  } catch {
    return 0;
  }
  return children.reduce((sum, child) => sum + (cpuMs(child) ?? 0) + descendantsCpuMs(child), 0);
}

/** Resident set size of a process in bytes, from /proc (Linux). */
export function rssBytes(pid: number): number | undefined {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const match = /^VmRSS:\s+(\d+)\s+kB/m.exec(status);
    return match ? Number(match[1]) * 1024 : undefined;
  } catch {
    return undefined;
  }
}
