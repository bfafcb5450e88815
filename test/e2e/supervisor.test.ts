/**
 * The worker supervisor with real Python processes (docs/workers.md): a RunPod-SDK-shaped worker
 * whose heartbeat runs in a child process, and `python -m ferry.worker` endpoints written on the fly.
 * After crashes, cancels, timeouts and scale-down no process of a worker's group is left, health
 * never counts more workers than max, crash loops and failed starts end in FAILED jobs in bounded
 * time, refresh_worker gives the next job a fresh worker, and user code sees no platform secrets.
 */
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { scanProject, withConfigHash } from '../../cli/build/scan.js';
import type { EndpointConfig } from '../../core/deployment.js';
import { sampleResources } from '../infra/fixtures.js';
import { recordFor } from '../support/endpoints.js';
import { call, startTestPlatform, type TestPlatform } from '../support/platform.js';
import { until } from '../support/until.js';

const leaseMs = 4_000;
const maxAttempts = 2;
const backoffBaseMs = 200;
let platform: TestPlatform;
let base: string;
let scratch: string;
/** The most workers /health reported for each endpoint, sampled all along. */
const seenMax = new Map<string, number>();
let sampling: NodeJS.Timeout | undefined;
const logLines: string[] = [];

/** Pids of every live process in a process group (from /proc; zombies count as gone). */
function groupMembers(pgid: number): number[] {
  const members: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      // pid (comm) state ppid pgrp …; comm may hold spaces, so split after its closing paren.
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (fields[0] !== 'Z' && Number(fields[2]) === pgid) members.push(Number(name));
    } catch {
      // gone meanwhile
    }
  }
  return members;
}

const health = async (id: string) => (await call(base, 'GET', `/${id}/health`)).body;
const status = async (id: string, jobId: string) => (await call(base, 'GET', `/${id}/status/${jobId}`)).body;
const finalOf = (id: string, jobId: string, timeoutMs = 40_000) =>
  until(
    `job ${jobId} to end`,
    () => status(id, jobId),
    (b) => ['COMPLETED', 'FAILED', 'CANCELLED', 'TIMED_OUT'].includes(b.status),
    timeoutMs,
  );
const submit = async (id: string, input: Record<string, unknown>, policy?: Record<string, unknown>) =>
  (await call(base, 'POST', `/${id}/run`, { input, ...(policy ? { policy } : {}) })).body.id as string;

function runpodStyleRecord(id: string, workersMax: number) {
  const codeDir = resolve('test/e2e/fixtures/runpod-heartbeat');
  const config: EndpointConfig = {
    endpoint: withConfigHash({
      name: id,
      kind: 'queue',
      file: 'handler.py',
      module: 'handler',
      target: { name: 'handler', type: 'function', isAsync: false, isGenerator: false, params: ['job'] },
      // One GPU wanted (sampleResources); none on this machine, so the worker runs on CPU.
      resources: { ...sampleResources, workersMax, idleTimeoutSec: 1 },
      configHash: '',
    }),
    pythonVersion: '3.11',
    codeDir,
    command: ['python3', '-u', 'handler.py'],
  };
  return {
    id,
    app: 'test',
    env: 'production',
    name: id,
    kind: 'queue' as const,
    config,
    fingerprint: 'x',
    createdAt: Date.now(),
    updatedAt: Date.now(),
  };
}

/** Writes a one-module ferry project and deploys its endpoints; a new `version` redeploys. */
async function deployModule(name: string, source: string, version: string) {
  const dir = join(scratch, `${name}-${version}`);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'app.py'), source);
  const { endpoints } = await scanProject({ projectDir: dir });
  for (const endpoint of endpoints) {
    await platform.db.control.putEndpoint({ ...recordFor(endpoint, dir), fingerprint: version });
  }
  await platform.workers!.reconcile();
}

beforeAll(async () => {
  scratch = mkdtempSync(join(tmpdir(), 'ferry-supervisor-'));
  // What must never reach user code (the pool reads the platform's environment at each start).
  process.env.FERRY_API_KEY = 'fy_platform_secret';
  process.env.FERRY_HOME = join(scratch, 'home');
  process.env.AWS_SECRET_ACCESS_KEY = 'platform-aws-secret';
  process.env.AWS_ACCESS_KEY_ID = 'AKIAPLATFORM';
  process.env.FERRY_SOMETHING = 'platform-setting';
  platform = await startTestPlatform({
    // What `ferry serve` prints on stderr.
    log: { info: () => {}, warn: (m) => logLines.push(m), error: (m) => logLines.push(m) },
    workerWaitMs: 2_000,
    sweepIntervalMs: 200,
    settings: { leaseMs, maxAttempts },
    supervisor: { backoffBaseMs, backoffMaxMs: 1_000, maxFailedStarts: 3 },
    workers: {
      ferryPythonPath: resolve('worker-image/python'),
      tickMs: 100,
      stopGraceMs: 1_000,
      drainMs: 2_000,
      reconcileIntervalMs: 300,
      pingIntervalMs: 500,
    },
  });
  base = platform.baseUrl;
  await platform.db.control.putEndpoint(runpodStyleRecord('rp', 1));
  await platform.db.control.putEndpoint(runpodStyleRecord('rp2', 2));
  await platform.workers!.reconcile();
  sampling = setInterval(async () => {
    for (const id of ['rp', 'rp2']) {
      const h = await health(id).catch(() => undefined);
      if (!h?.workers) continue;
      seenMax.set(id, Math.max(seenMax.get(id) ?? 0, h.workers.idle + h.workers.running));
    }
  }, 150);
});

afterAll(async () => {
  clearInterval(sampling);
  await platform?.stop();
  for (const key of [
    'FERRY_API_KEY',
    'FERRY_HOME',
    'AWS_SECRET_ACCESS_KEY',
    'AWS_ACCESS_KEY_ID',
    'FERRY_SOMETHING',
  ])
    delete process.env[key];
  rmSync(scratch, { recursive: true, force: true });
});

describe('a RunPod-SDK-shaped worker with a heartbeat child process', () => {
  it('a crash mid-job leaves no process of the worker; the job runs again at once and completes', async () => {
    const marker = join(scratch, 'crash-once');
    const jobId = await submit('rp', { crash_once: marker, value: 1 });
    const pgid = Number(
      await until(
        'the crash',
        () => (existsSync(marker) ? readFileSync(marker, 'utf8') : ''),
        (t) => t !== '',
      ),
    );
    // Requeued at once on the exit, not after the lease: well before leaseMs × attempts.
    const view = await finalOf('rp', jobId);
    expect(view.status).toBe('COMPLETED');
    expect(view.output.value).toBe(1);
    await until(
      'the crashed group to be gone',
      () => groupMembers(pgid),
      (m) => m.length === 0,
      10_000,
    );
    // The next job completes too.
    expect((await finalOf('rp', await submit('rp', { value: 2 }))).output.value).toBe(2);
  });

  it('cancel of a running job: the worker that ignores it is killed with its group; the next job completes', async () => {
    const pgidFile = join(scratch, 'cancel-pgid');
    const jobId = await submit('rp', { pgid_file: pgidFile, sleep: 60 });
    const pgid = Number(
      await until(
        'the job to start',
        () => (existsSync(pgidFile) ? readFileSync(pgidFile, 'utf8') : ''),
        (t) => t !== '',
      ),
    );
    expect(groupMembers(pgid).length).toBeGreaterThanOrEqual(2); // the worker and its heartbeat process
    expect((await call(base, 'POST', `/rp/cancel/${jobId}`)).body.status).toBe('CANCELLED');
    await until(
      'the group to be gone',
      () => groupMembers(pgid),
      (m) => m.length === 0,
      15_000,
    );
    expect((await finalOf('rp', await submit('rp', { value: 3 }))).output.value).toBe(3);
  });

  it('an execution timeout ends the job TIMED_OUT and the worker group; the next job completes', async () => {
    const pgidFile = join(scratch, 'timeout-pgid');
    const jobId = await submit('rp', { pgid_file: pgidFile, sleep: 60 }, { executionTimeout: 5_000 });
    const pgid = Number(
      await until(
        'the job to start',
        () => (existsSync(pgidFile) ? readFileSync(pgidFile, 'utf8') : ''),
        (t) => t !== '',
      ),
    );
    expect((await finalOf('rp', jobId)).status).toBe('TIMED_OUT');
    await until(
      'the group to be gone',
      () => groupMembers(pgid),
      (m) => m.length === 0,
      15_000,
    );
    expect((await finalOf('rp', await submit('rp', { value: 4 }))).output.value).toBe(4);
  });

  it('scale-down after idle_timeout leaves no process behind, and health never counted more than max', async () => {
    const files = [join(scratch, 'scale-a'), join(scratch, 'scale-b')];
    const jobs = await Promise.all(files.map((f) => submit('rp2', { pgid_file: f, sleep: 1 })));
    for (const jobId of jobs) expect((await finalOf('rp2', jobId)).status).toBe('COMPLETED');
    const groups = files.map((f) => Number(readFileSync(f, 'utf8')));
    await until(
      'workers to scale to zero',
      () => health('rp2'),
      (h) => h.workers.idle + h.workers.running === 0,
      20_000,
    );
    await until(
      'no process of any group',
      () => groups.flatMap(groupMembers),
      (m) => m.length === 0,
      10_000,
    );
    expect(platform.workers!.pool('rp2')!.processGroups()).toEqual([]);
    expect(seenMax.get('rp') ?? 0).toBeLessThanOrEqual(1);
    expect(seenMax.get('rp2') ?? 0).toBeLessThanOrEqual(2);
  });

  it('refresh_worker: the output is kept without the key, and the next job runs on a new worker', async () => {
    const first = await finalOf('rp', await submit('rp', { refresh: true, value: 'keep me' }));
    expect(first.status).toBe('COMPLETED');
    expect(first.output).toEqual({ worker: expect.any(String), value: 'keep me' });
    const second = await finalOf('rp', await submit('rp', { value: 'next' }));
    expect(second.output.worker).not.toBe(first.output.worker);
  });
});

describe('ferry runtime workers', () => {
  it('refresh_worker: two jobs in a row run on two worker ids; the first output is intact', async () => {
    await deployModule(
      'refresher',
      `import os
from ferry import Endpoint

@Endpoint(name="refresher", cpu="1-2", workers=(0, 1), idle_timeout=5)
def refresher(value=None):
    return {"refresh_worker": True, "value": value, "pid": os.getpid()}
`,
      'v1',
    );
    const a = await finalOf('refresher', await submit('refresher', { value: [1, 2, 3] }));
    const b = await finalOf('refresher', await submit('refresher', { value: 'second' }));
    expect(a).toMatchObject({ status: 'COMPLETED', output: { value: [1, 2, 3] } });
    expect(a.output).not.toHaveProperty('refresh_worker');
    expect(b.status).toBe('COMPLETED');
    expect(b.workerId).not.toBe(a.workerId);
    expect(b.output.pid).not.toBe(a.output.pid);
  });

  it('a crash-looping handler: its job ends FAILED in bounded time, health says why, a fixed redeploy serves', async () => {
    const crashing = `import os
from ferry import Endpoint

@Endpoint(name="looper", cpu="1-2", workers=(0, 1), idle_timeout=5)
def looper():
    os._exit(3)
`;
    await deployModule('looper', crashing, 'v1');
    const started = Date.now();
    const jobId = await submit('looper', {});
    const view = await finalOf('looper', jobId);
    expect(view.status).toBe('FAILED');
    expect(view.error).toMatch(/exited \(code 3\)/);
    // Bounded by attempts × lease plus the backoffs, with room for slow starts on a busy machine.
    expect(Date.now() - started).toBeLessThan(maxAttempts * leaseMs + 10_000);
    const h = await health('looper');
    expect(h.problem).toMatchObject({ state: 'backoff' });
    expect(h.problem.reason).toMatch(/exited \(code 3\)/);
    expect(logLines.join('\n')).toMatch(/endpoint looper: worker .* exited \(code 3\)/);
    expect(Object.keys(h.workers).sort()).toEqual(['idle', 'running']);

    await deployModule('looper', crashing.replace('os._exit(3)', 'return "fixed"'), 'v2');
    expect((await finalOf('looper', await submit('looper', {}))).output).toBe('fixed');
  });

  it('a bad top-level import: the endpoint is marked failing and queued jobs end FAILED with the error', async () => {
    const broken = `import no_such_package_here
from ferry import Endpoint

@Endpoint(name="broken", cpu="1-2", workers=(0, 1), idle_timeout=5)
def broken():
    return "never"
`;
    await deployModule('broken', broken, 'v1');
    const jobId = await submit('broken', {});
    const view = await finalOf('broken', jobId);
    expect(view.status).toBe('FAILED');
    expect(view.error).toMatch(/cannot start/);
    expect(view.error).toMatch(/no_such_package_here/);
    const h = await health('broken');
    expect(h.problem).toMatchObject({ state: 'failing' });
    expect(h.problem.lines.join('\n')).toMatch(/no_such_package_here/);
    // `ferry serve` says why on stderr, with the worker's last lines.
    expect(logLines.join('\n')).toMatch(/endpoint broken is failing: .*\n(.|\n)*no_such_package_here/);
    // While failing, a new job fails at once instead of waiting for its TTL.
    expect((await finalOf('broken', await submit('broken', {}), 10_000)).status).toBe('FAILED');

    await deployModule('broken', broken.replace('import no_such_package_here\n', ''), 'v2');
    expect((await finalOf('broken', await submit('broken', {}))).output).toBe('never');
    expect((await health('broken')).problem).toBeUndefined();
  });

  it('a worker command that cannot be started: the endpoint is failing, saying why, and its job ends FAILED', async () => {
    const record = runpodStyleRecord('nostart', 1);
    const command = ['/nonexistent/ferry-python3', '-u', 'handler.py'];
    await platform.db.control.putEndpoint({ ...record, config: { ...record.config, command } });
    await platform.workers!.reconcile();
    const view = await finalOf('nostart', await submit('nostart', {}));
    expect(view.status).toBe('FAILED');
    expect(view.error).toMatch(/cannot start/);
    const h = await health('nostart');
    expect(h.problem).toMatchObject({ state: 'failing' });
    expect(h.problem.lines).toEqual(['could not start: spawn /nonexistent/ferry-python3 ENOENT']);
    // The platform's close (afterAll) waits for no worker that never started.
  });

  it('a handler sees none of the platform secrets or settings in its environment', async () => {
    await deployModule(
      'envspy',
      `import os
from ferry import Endpoint

@Endpoint(name="envspy", cpu="1-2", workers=(0, 1), idle_timeout=5, env={"MY_SETTING": "mine"})
def envspy():
    return sorted(os.environ)
`,
      'v1',
    );
    const view = await finalOf('envspy', await submit('envspy', {}));
    const names: string[] = view.output;
    expect(names).toContain('MY_SETTING');
    expect(names).toContain('RUNPOD_AI_API_KEY');
    for (const secret of [
      'FERRY_API_KEY',
      'FERRY_HOME',
      'AWS_SECRET_ACCESS_KEY',
      'AWS_ACCESS_KEY_ID',
      'FERRY_SOMETHING',
    ])
      expect(names).not.toContain(secret);
    // Only the runtime's own FERRY_* variables.
    const ferry = names.filter((n) => n.startsWith('FERRY_'));
    for (const name of ferry) {
      expect([
        'FERRY_APP_DIR',
        'FERRY_MODULE',
        'FERRY_TARGET',
        'FERRY_MODE',
        'FERRY_MAX_CONCURRENCY',
        'FERRY_PARENT_PID',
        // Remote calls by name (docs/python.md): the call token reaches only this app and environment.
        'FERRY_API_URL',
        'FERRY_CALL_TOKEN',
        'FERRY_APP',
        'FERRY_ENV',
        'FERRY_ENDPOINT_NAME',
        // Where the runtime ships job log lines (docs/observability.md): a worker route, no secret.
        'FERRY_WEBHOOK_POST_LOG',
        // "stderr": keep a marked copy of each job line there until it is sent (no secret).
        'FERRY_LOG_BACKUP',
        // Where the runtime posts the results of several jobs at once (a worker route, no secret).
        'FERRY_WEBHOOK_POST_OUTPUT_BATCH',
      ]).toContain(name);
    }
  });
});
