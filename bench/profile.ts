/**
 * Where the platform's main thread spends its CPU under part (a)'s Python-pool load, as the kernel
 * counts it (`node dist/bench/profile.js`, Linux with `perf`): `perf record` of the thread alone for
 * FERRY_BENCH_PROFILE_SECONDS (5) while 16 /run loops keep 2 Python workers × 8 busy, then its
 * samples by kind of code (self), the kernel's share by system call, named frames with what they
 * call (inclusive), and the top symbols. FERRY_BENCH_PROFILE_LOAD=runsync: part (b)'s load instead,
 * FERRY_BENCH_CLIENTS (1) runsync loops against the same pool, where a job is paid alone.
 *
 * Why beside FERRY_BENCH_CPU_PROF (`--cpu-prof`): V8's sampler ticks on wall-clock time, not on
 * the thread's CPU time, and shows native code (SQLite, Node's C++, the kernel) only as the
 * JavaScript function that called it. On the twentieth pass's load `--cpu-prof` gave the answers'
 * `writev` 16 % of the thread; here the kernel's writev is 6 % of its CPU (bench/results.md,
 * twenty-first pass). The platform runs with `--perf-basic-prof` (V8 writes /tmp/perf-<pid>.map,
 * removed at the end) and `--interpreted-frames-native-stack`, so JavaScript frames carry their names.
 */
import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { mainThreadCpuMs, startPlatformChild } from './lib/child.js';
import { benchKey, echoPoolProject } from './lib/faults.js';
import { echoText, runJobs, runsyncLoops, waitWorkers } from './lib/load.js';
import { envInt, round, say } from './lib/util.js';

const seconds = envInt('FERRY_BENCH_PROFILE_SECONDS', 5);
const warmUpSeconds = envInt('FERRY_BENCH_WARMUP_SECONDS', 3);
const load = process.env.FERRY_BENCH_PROFILE_LOAD ?? 'pool';
if (load !== 'pool' && load !== 'runsync') {
  console.error(`FERRY_BENCH_PROFILE_LOAD is pool or runsync, not ${load}`);
  process.exit(2);
}
const clients = load === 'runsync' ? envInt('FERRY_BENCH_CLIENTS', 1) : 16;
const run = promisify(execFile);

/** One line of `perf report -t '|'`: its share of the samples, where the code lives, the symbol. */
interface Sample {
  percent: number;
  dso: string;
  symbol: string;
}

async function perfReport(data: string, children: boolean): Promise<Sample[]> {
  const { stdout } = await run(
    'perf',
    [
      'report',
      '-i',
      data,
      children ? '--children' : '--no-children',
      '--sort',
      'dso,sym',
      '-g',
      'none',
      '--stdio',
      '-t',
      '|',
    ],
    { maxBuffer: 256 * 1024 * 1024 },
  );
  const samples: Sample[] = [];
  for (const line of stdout.split('\n')) {
    if (line.startsWith('#') || !line.includes('|')) continue;
    const fields = line.split('|').map((field) => field.trim());
    // --children adds the self column after the inclusive one: the first figure is the one wanted.
    const percent = Number.parseFloat(fields[0]!);
    if (!Number.isFinite(percent)) continue;
    samples.push({ percent, dso: fields.at(-2)!, symbol: fields.at(-1)!.replace(/^\[[.k]\]\s*/, '') });
  }
  return samples;
}

/** The kind of code a symbol is, for the self-time table. */
function kindOf({ dso, symbol }: Sample): string {
  if (dso.includes('kernel')) return 'the kernel (system calls, interrupts, page faults)';
  if (dso.includes('better_sqlite3')) return 'SQLite (better-sqlite3, native)';
  if (dso.startsWith('[JIT]')) return 'JavaScript, compiled (Ferry, Fastify, Node internals)';
  if (dso.startsWith('libc')) return 'libc (memory copies, malloc)';
  if (/Scaveng|Heap::|MarkCompact|Marking|Sweep|Evacuat|GCTracer|RecordWrite/.test(symbol))
    return 'V8 garbage collection';
  if (/^Builtins_/.test(symbol)) return 'V8 builtins (property lookups, calls, promises, strings)';
  if (/^llhttp|^node::|^uv_|^uv__/.test(symbol)) return "Node's C++ (HTTP parser, streams, libuv)";
  if (/^v8::/.test(symbol)) return 'V8 runtime (JSON, property lookups, strings, C++ API calls)';
  return 'other native code';
}

/** Kernel entry points, inclusive, by what the thread asked for. */
const systemCalls: [string, RegExp][] = [
  ['writev (the answers)', /^do_writev$/],
  ['pwrite64 (WAL frames)', /^__x64_sys_pwrite64$/],
  ['fcntl (SQLite locks)', /^__x64_sys_fcntl$/],
  ['read (requests)', /^ksys_read$/],
  ['epoll_pwait', /^__x64_sys_epoll_pwait$/],
  ['page faults', /^asm_exc_page_fault$/],
];

/**
 * Frames worth their inclusive share: a JavaScript one (`JS:<tier><name> <file>`, the tier `^` baseline
 * or `*` optimized) summed over its tiers. Synchronous ones only: what an async function runs after
 * its first await is not under its frame.
 */
const namedFrames: [string, RegExp][] = [
  [
    'the group commit (GroupCommit.flush: the turn’s writes and COMMIT)',
    /^JS:[*^~+]?flush .*local\/sqlite\.js/,
  ],
  ['SQLite statements (sqlite3_step, commits included)', /^sqlite3_step$/],
  ['WAL frames written (pagerWalFrames)', /^pagerWalFrames$/],
  ['the answers (Fastify Reply.send to writev)', /^JS:[*^~+]?Reply\.send /],
  ['V8 garbage collection (Heap::CollectGarbage)', /^v8::internal::Heap::CollectGarbage$/],
];

/**
 * The load while `more()`: /run loops until health counts the jobs COMPLETED (pool), or runsync
 * loops (runsync). Answers how many jobs, the ms, and the runsyncs' p50.
 */
async function drive(
  url: string,
  more: () => boolean,
): Promise<{ jobs: number; ms: number; p50Ms?: number }> {
  if (load === 'pool') return runJobs(url, 'echo', more, clients, echoText(0));
  const { count, ms, p50Ms } = await runsyncLoops(url, 'echo', clients, more);
  return { jobs: count, ms, p50Ms };
}

const sumOf = (samples: Sample[], match: (s: Sample) => boolean) =>
  samples.filter(match).reduce((sum, s) => sum + s.percent, 0);

const pct = (n: number) => `${round(n, 1).toFixed(1).padStart(5)} %`;

async function main(): Promise<void> {
  try {
    await run('perf', ['--version']);
  } catch {
    console.error(
      'perf is needed (Linux): apt-get install linux-perf, or use FERRY_BENCH_CPU_PROF=1 with npm run bench',
    );
    process.exit(2);
  }
  const work = mkdtempSync(join(tmpdir(), 'ferry-bench-profile-'));
  const child = await startPlatformChild({
    dataDir: join(work, 'data'),
    apiKey: benchKey,
    workerWaitMs: 20_000,
    project: echoPoolProject(),
    // --perf-basic-prof turns on V8's code log too: into the work folder, not a file per isolate here.
    nodeArgs: [
      '--perf-basic-prof',
      '--interpreted-frames-native-stack',
      '--no-logfile-per-isolate',
      `--logfile=${join(work, 'v8.log')}`,
    ],
  });
  try {
    await waitWorkers(child.url, 'echo', 2);
    const warmUntil = performance.now() + warmUpSeconds * 1000;
    await drive(child.url, () => performance.now() < warmUntil);
    say(`perf record of the platform's main thread (tid ${child.pid}) for ${seconds} s under ${load} load`);
    const data = join(work, 'perf.data');
    // -t: the main thread only (the checkpoint thread and V8's helpers run beside it).
    const perf = spawn(
      'perf',
      ['record', '-F', '999', '-g', '-t', String(child.pid), '-o', data, '--', 'sleep', String(seconds)],
      {
        stdio: ['ignore', 'ignore', 'pipe'],
      },
    );
    let perfErr = '';
    perf.stderr.on('data', (d: Buffer) => {
      perfErr += d.toString();
    });
    const recorded = new Promise<number | null>((resolveExit) => {
      perf.on('exit', resolveExit);
      perf.on('error', (error) => {
        perfErr += String(error);
        resolveExit(null);
      });
    });
    let recording = true;
    void recorded.then(() => {
      recording = false;
    });
    const mainBefore = mainThreadCpuMs(child.pid);
    const { jobs, ms, p50Ms } = await drive(child.url, () => recording);
    const mainAfter = mainThreadCpuMs(child.pid);
    const code = await recorded;
    if (code !== 0) throw new Error(`perf record exited ${code}: ${perfErr.trim().slice(-500)}`);
    const perJob =
      mainBefore === undefined || mainAfter === undefined ? '?' : round((mainAfter - mainBefore) / jobs, 4);
    say(
      `${jobs} jobs in ${round(ms / 1000, 1)} s (${round((jobs * 1000) / ms)} jobs/s${p50Ms === undefined ? '' : `, runsync p50 ${round(p50Ms, 2)} ms`}); reading the samples`,
    );

    const self = await perfReport(data, false);
    const inclusive = await perfReport(data, true);
    const kinds = new Map<string, number>();
    for (const sample of self) kinds.set(kindOf(sample), (kinds.get(kindOf(sample)) ?? 0) + sample.percent);
    const lines = [
      `The platform's main thread: ${perJob} ms of CPU a job over the sampled load (perf's own cost included).`,
      'By kind of code (self):',
    ];
    for (const [kind, share] of [...kinds].sort((a, b) => b[1] - a[1]))
      lines.push(`  ${pct(share)}  ${kind}`);
    lines.push('The kernel, by system call (inclusive):');
    for (const [name, match] of systemCalls)
      lines.push(
        `  ${pct(sumOf(inclusive, (s) => s.dso.includes('kernel') && match.test(s.symbol)))}  ${name}`,
      );
    lines.push('Named frames (inclusive):');
    for (const [name, match] of namedFrames)
      lines.push(`  ${pct(sumOf(inclusive, (s) => match.test(s.symbol)))}  ${name}`);
    lines.push('Top symbols (self):');
    for (const sample of self.slice(0, 25))
      lines.push(`  ${pct(sample.percent)}  ${sample.symbol.slice(0, 110)}  [${sample.dso}]`);
    console.log(lines.join('\n'));
  } finally {
    const pid = child.pid;
    await child.stop();
    rmSync(work, { recursive: true, force: true });
    rmSync(`/tmp/perf-${pid}.map`, { force: true });
  }
}

await main();
