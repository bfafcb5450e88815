/**
 * The local isolation suite of issue 13 (docs/security.md): two apps, three endpoints, real Python
 * workers, each endpoint's as an OS user of its own (`workerUids`, what `ferry serve --worker-uids`
 * sets). Each handler tries to read the database, the secrets key and the client key file, reports
 * its environment, and looks at every other process (/proc environ, kill -0): it reads nothing, sees
 * no platform variable or key, sees its own endpoint's secrets only, and reaches no other endpoint's
 * process or code; the spy cannot list the endpoints' folders nor leave links in its own for the
 * platform to follow as root at a restart. Needs root to start workers as other users; skipped
 * otherwise.
 */

import { spawn } from 'node:child_process';
import {
  chmodSync,
  chownSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { create as createTar } from 'tar';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { scanProject } from '../../cli/build/scan.js';
import { killUidRange } from '../../core/adapters/local/pool.js';
import { CliSandbox } from '../e2e/cli-support.js';
import { recordFor } from '../support/endpoints.js';
import { call, startTestPlatform, type TestPlatform, testApiKey } from '../support/platform.js';
import { running } from '../support/processes.js';
import { until } from '../support/until.js';

const isRoot = process.getuid?.() === 0;
/** uids no account on a test machine uses; one per endpoint, in the order they first start. */
const workerUids = { first: 230_000, last: 230_099 };
const projectDir = resolve('test/security/fixtures/tenants');
const tenants: Record<string, { app: string; env: string }> = {
  spy: { app: 'shop', env: 'prod' },
  victim: { app: 'blog', env: 'prod' },
  bystander: { app: 'blog', env: 'dev' },
};
const secretValues = { SPY_TOKEN: 'spy-secret-value-1', VICTIM_TOKEN: 'victim-secret-value-2' };

let platform: TestPlatform;
let dataDir: string;

/** The platform on `dataDir`, as `ferry serve --worker-uids` starts it (again, after a restart). */
const startPlatform = () =>
  startTestPlatform({
    dataDir,
    workerWaitMs: 5_000,
    workers: {
      ferryPythonPath: resolve('worker-image/python'),
      tickMs: 100,
      reconcileIntervalMs: 500,
      workerUids,
      // The system interpreter: one under /root (pyenv) is out of the worker user's reach.
      python: '/usr/bin/python3',
    },
  });

beforeAll(async () => {
  if (!isRoot) return;
  const parent = mkdtempSync(join(tmpdir(), 'ferry-isolation-'));
  // FERRY_HOME's folder must let the worker users through to FERRY_HOME-runtime beside it.
  chmodSync(parent, 0o711);
  dataDir = join(parent, 'home');
  platform = await startPlatform();
  // The client key file `ferry` keeps in FERRY_HOME.
  writeFileSync(join(dataDir, 'api-key'), `${testApiKey}\n`, { mode: 0o600 });
  chmodSync(join(dataDir, 'api-key'), 0o600);
  const secrets = platform.db.openSecrets(join(dataDir, 'secrets.key'));
  await secrets.set(tenants.spy!, 'SPY_TOKEN', secretValues.SPY_TOKEN);
  await secrets.set(tenants.victim!, 'VICTIM_TOKEN', secretValues.VICTIM_TOKEN);
  // Deployed the way `ferry deploy` does: an artifact the platform unpacks (not a code folder).
  const archive = join(dataDir, '..', 'tenants.tar.gz');
  await createTar({ gzip: true, file: archive, cwd: projectDir, portable: true }, ['tenants.py']);
  await platform.blobs.put('artifacts/tenants.tar.gz', readFileSync(archive));
  const { endpoints } = await scanProject({ projectDir });
  for (const endpoint of endpoints) {
    const { config, ...record } = recordFor(endpoint, projectDir);
    await platform.db.control.putEndpoint({
      ...record,
      config: { ...config, codeDir: undefined },
      artifactKey: 'artifacts/tenants.tar.gz',
      fingerprint: 'v1',
      ...tenants[endpoint.name]!,
    });
  }
  await platform.workers!.reconcile();
}, 60_000);

afterAll(async () => {
  if (!platform) return;
  await platform.stop(false);
  // Whatever a failed test left running as a worker uid (a handler's daemon).
  killUidRange(workerUids);
  rmSync(join(dataDir, '..'), { recursive: true, force: true });
  rmSync(`${dataDir}-runtime`, { recursive: true, force: true });
});

interface Probe {
  env: Record<string, string>;
  reads: Record<string, string>;
  uid: number;
  pid: number;
  /** Where the worker could write a file (its HOME, its temp folder), or the error it got. */
  writes: { home: string; tmp: string };
  /** Other processes' environments the worker could read, and the pids it may signal. */
  environs: string[];
  signalable: number[];
}

/** What the endpoint's handler sees, trying to read `paths` (by default the platform's own files). */
async function probe(endpoint: string, paths?: string[]): Promise<Probe> {
  const files =
    paths ?? ['ferry.db', 'ferry.db-wal', 'secrets.key', 'api-key', 'serve.log'].map((f) => join(dataDir, f));
  const answer = await call(platform.baseUrl, 'POST', `/${endpoint}/runsync`, { input: { paths: files } });
  expect(answer.body.status, JSON.stringify(answer.body)).toBe('COMPLETED');
  return answer.body.output as Probe;
}

/** The endpoint's own folder beside FERRY_HOME (its code, HOME and TMPDIR), and its record. */
async function runtimeOf(name: string) {
  const record = (await platform.db.control.listEndpoints()).find((r) => r.name === name)!;
  return { dir: join(`${dataDir}-runtime`, record.id), fingerprint: record.fingerprint };
}

describe.runIf(isRoot)('tenant isolation on the local platform (workers as another OS user)', () => {
  it.each(Object.keys(tenants))('%s reads no platform file and sees no platform secret', async (name) => {
    const seen = await probe(name);
    expect(seen.uid).toBeGreaterThanOrEqual(workerUids.first);
    expect(seen.uid).toBeLessThanOrEqual(workerUids.last);
    for (const [path, outcome] of Object.entries(seen.reads)) {
      expect([path, outcome]).toEqual([path, expect.stringMatching(/PermissionError|FileNotFoundError/)]);
    }
    const env = JSON.stringify(seen.env);
    expect(env).not.toContain(testApiKey);
    // FERRY_HOME itself, not the runtime folder beside it (FERRY_HOME-runtime, the code).
    expect(env.replaceAll(`${dataDir}-runtime`, '')).not.toContain(dataDir);
    expect(Object.keys(seen.env).filter((k) => /^(AWS_|FERRY_HOME|FERRY_API_KEY)/.test(k))).toEqual([]);
  });

  it('hands each endpoint its own secrets and nobody else’s', async () => {
    const [spy, victim, bystander] = await Promise.all(
      ['spy', 'victim', 'bystander'].map((name) => probe(name)),
    );
    expect(spy!.env.SPY_TOKEN).toBe(secretValues.SPY_TOKEN);
    expect(victim!.env.VICTIM_TOKEN).toBe(secretValues.VICTIM_TOKEN);
    expect(JSON.stringify(spy!.env)).not.toContain(secretValues.VICTIM_TOKEN);
    expect(JSON.stringify(victim!.env)).not.toContain(secretValues.SPY_TOKEN);
    expect(JSON.stringify(bystander!.env)).not.toMatch(/spy-secret|victim-secret/);
  });

  it("keeps each endpoint out of other endpoints' processes: no environment (secrets) read, no signal", async () => {
    // Probed in turn, so the victim's worker is running while the spy looks at /proc.
    const victim = await probe('victim');
    const spy = await probe('spy');
    const bystander = await probe('bystander');
    expect(new Set([spy.uid, victim.uid, bystander.uid]).size).toBe(3);
    expect(JSON.stringify(spy.environs)).not.toContain(secretValues.VICTIM_TOKEN);
    expect(JSON.stringify(bystander.environs)).not.toMatch(/spy-secret|victim-secret/);
    expect(spy.signalable).not.toContain(victim.pid);
    expect(spy.signalable).not.toContain(bystander.pid);
    expect(victim.signalable).not.toContain(spy.pid);
  });

  it('refuses to start when worker users could not reach their code, naming the folder', async () => {
    const closed = mkdtempSync(join(tmpdir(), 'ferry-isolation-closed-'));
    try {
      await expect(
        startTestPlatform({
          dataDir: join(closed, 'home'),
          workers: { ferryPythonPath: resolve('worker-image/python'), workerUids },
        }),
      ).rejects.toThrow(`${closed} does not let other users through`);
    } finally {
      rmSync(closed, { recursive: true, force: true });
    }
  });

  it("lists no endpoint's folder to workers, other apps' included", async () => {
    const runtime = `${dataDir}-runtime`;
    const answer = await call(
      platform.baseUrl,
      'POST',
      `/${(await runtimeOf('spy')).dir.split('/').pop()}/runsync`,
      {
        input: { folders: [runtime] },
      },
    );
    expect(answer.body.output).toEqual({ listed: { [runtime]: 'PermissionError' } });
  });

  it("refuses to start when FERRY_HOME-runtime is another user's folder, naming it", async () => {
    const parent = mkdtempSync(join(tmpdir(), 'ferry-isolation-taken-'));
    try {
      chmodSync(parent, 0o711);
      const runtime = join(parent, 'home-runtime');
      mkdirSync(runtime);
      chownSync(runtime, workerUids.last, workerUids.last);
      await expect(
        startTestPlatform({
          dataDir: join(parent, 'home'),
          workers: { ferryPythonPath: resolve('worker-image/python'), workerUids },
        }),
      ).rejects.toThrow(`Workers' folders cannot be kept in ${runtime}: it is another user's folder`);
    } finally {
      rmSync(parent, { recursive: true, force: true });
    }
  });

  it('leaves no process a handler started in a session of its own running once it stops, nor one an earlier run left', async () => {
    const spy = (await runtimeOf('spy')).dir.split('/').pop();
    const started = await call(platform.baseUrl, 'POST', `/${spy}/runsync`, { input: { daemon: true } });
    const daemon = started.body.output.daemon as number;
    expect(running(daemon)).toBe(true);
    await platform.stop(false);
    await until(
      `process ${daemon} to be gone`,
      () => running(daemon),
      (alive) => !alive,
      10_000,
    );
    // One a run killed with -9 left behind: a process of a worker uid when the platform starts.
    const left = spawn('sleep', ['600'], {
      uid: workerUids.last,
      gid: workerUids.last,
      detached: true,
      stdio: 'ignore',
    });
    left.unref();
    expect(running(left.pid!)).toBe(true);
    platform = await startPlatform();
    await until(
      `process ${left.pid} to be gone`,
      () => running(left.pid!),
      (alive) => !alive,
      10_000,
    );
  });

  it('ferry serve --detach keeps the isolation it was asked for', async () => {
    const sandbox = new CliSandbox();
    try {
      chmodSync(sandbox.root, 0o711);
      const started = await sandbox.run(['serve', '--detach', '--worker-uids', '230100-230199']);
      expect(started.code, started.stderr).toBe(0);
      const { pid } = JSON.parse(readFileSync(join(sandbox.home, 'server.json'), 'utf8')) as { pid: number };
      const argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
      expect(argv.slice(argv.indexOf('--worker-uids'), argv.indexOf('--worker-uids') + 2)).toEqual([
        '--worker-uids',
        '230100-230199',
      ]);
    } finally {
      await sandbox.cleanup();
    }
  });

  it('gives each endpoint a HOME and a temp folder of its own, which no other endpoint reads', async () => {
    const victim = await probe('victim');
    const own = (await runtimeOf('victim')).dir;
    expect(victim.writes).toEqual({ home: join(own, 'home'), tmp: join(own, 'tmp') });
    const left = [join(own, 'home', 'probe.txt'), join(own, 'tmp', 'probe.txt')];
    const spy = await probe('spy', left);
    for (const path of left) expect([path, spy.reads[path]]).toEqual([path, 'PermissionError']);
  });

  it("keeps each endpoint's unpacked code its own", async () => {
    const { dir, fingerprint } = await runtimeOf('victim');
    const victimCode = join(dir, fingerprint, 'tenants.py');
    expect((await probe('spy', [victimCode])).reads[victimCode]).toBe('PermissionError');
    expect((await probe('victim', [victimCode])).reads[victimCode]).toBe('read');
  });

  it("gives an endpoint's code no link the platform follows as root: its folder is root's, FERRY_HOME and other endpoints' folders stay out of its reach after a restart", async () => {
    const spy = await runtimeOf('spy');
    const victim = await runtimeOf('victim');
    const victimUid = statSync(join(victim.dir, 'home')).uid;
    const targets = { home: dataDir, tmp: victim.dir };
    // The spy's code tries to swap its HOME and temp folder for links to FERRY_HOME and the victim's folder.
    const answer = await call(platform.baseUrl, 'POST', `/${spy.dir.split('/').pop()}/runsync`, {
      input: { plant_links: targets },
    });
    expect(answer.body.output).toEqual({ planted: { home: 'PermissionError', tmp: 'PermissionError' } });
    // What an earlier Ferry let it do (the folder was the spy's own): the links are there at a restart.
    const spyUid = statSync(join(spy.dir, 'home')).uid;
    await platform.stop(false);
    chownSync(spy.dir, spyUid, spyUid);
    chmodSync(spy.dir, 0o700);
    // FERRY_HOME again, and a link to nothing (mkdir would stop at it).
    const links = { home: dataDir, tmp: join(victim.dir, 'nothing-here') };
    for (const [name, target] of Object.entries(links)) {
      rmSync(join(spy.dir, name), { recursive: true, force: true });
      symlinkSync(target, join(spy.dir, name));
    }
    platform = await startPlatform();
    const home = statSync(dataDir);
    expect([home.uid, home.mode & 0o777]).toEqual([0, 0o700]);
    const victimFolder = statSync(victim.dir);
    expect([victimFolder.uid, victimFolder.gid, victimFolder.mode & 0o777]).toEqual([0, victimUid, 0o750]);
    const spyFolder = statSync(spy.dir);
    expect([spyFolder.uid, spyFolder.gid, spyFolder.mode & 0o777]).toEqual([0, spyUid, 0o750]);
    for (const name of Object.keys(targets)) {
      const own = lstatSync(join(spy.dir, name));
      expect([name, own.isDirectory(), own.uid, own.mode & 0o777]).toEqual([name, true, spyUid, 0o700]);
    }
    // And the spy's workers still start, with their HOME and temp folder to write in.
    expect((await probe('spy')).writes).toEqual({ home: join(spy.dir, 'home'), tmp: join(spy.dir, 'tmp') });
  });
});
