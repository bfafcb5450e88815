/**
 * The local isolation suite of issue 13 (docs/security.md): two apps, three endpoints, real Python
 * workers run as another OS user (`workerUser`, what `ferry serve --worker-user` sets). Each handler
 * tries to read the database, the secrets key and the client key file, and reports its environment:
 * it reads nothing, sees no platform variable or key, and sees its own endpoint's secrets only.
 * Needs root to start workers as `nobody`; skipped otherwise.
 */
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { scanProject } from '../../cli/build/scan.js';
import { recordFor } from '../support/endpoints.js';
import { call, startTestPlatform, type TestPlatform, testApiKey } from '../support/platform.js';

const isRoot = process.getuid?.() === 0;
const nobody = { uid: 65534, gid: 65534 };
const projectDir = resolve('test/security/fixtures/tenants');
const tenants: Record<string, { app: string; env: string }> = {
  spy: { app: 'shop', env: 'prod' },
  victim: { app: 'blog', env: 'prod' },
  bystander: { app: 'blog', env: 'dev' },
};
const secretValues = { SPY_TOKEN: 'spy-secret-value-1', VICTIM_TOKEN: 'victim-secret-value-2' };

let platform: TestPlatform;
let dataDir: string;

beforeAll(async () => {
  if (!isRoot) return;
  dataDir = join(mkdtempSync(join(tmpdir(), 'ferry-isolation-')), 'home');
  platform = await startTestPlatform({
    dataDir,
    workerWaitMs: 5_000,
    workers: {
      ferryPythonPath: resolve('worker-image/python'),
      tickMs: 100,
      reconcileIntervalMs: 500,
      workerUser: nobody,
      // The system interpreter: one under /root (pyenv) is out of the worker user's reach.
      python: '/usr/bin/python3',
    },
  });
  // The client key file `ferry` keeps in FERRY_HOME.
  writeFileSync(join(dataDir, 'api-key'), `${testApiKey}\n`, { mode: 0o600 });
  chmodSync(join(dataDir, 'api-key'), 0o600);
  const secrets = platform.db.openSecrets(join(dataDir, 'secrets.key'));
  await secrets.set(tenants.spy!, 'SPY_TOKEN', secretValues.SPY_TOKEN);
  await secrets.set(tenants.victim!, 'VICTIM_TOKEN', secretValues.VICTIM_TOKEN);
  const { endpoints } = await scanProject({ projectDir });
  for (const endpoint of endpoints) {
    await platform.db.control.putEndpoint({ ...recordFor(endpoint, projectDir), ...tenants[endpoint.name]! });
  }
  await platform.workers!.reconcile();
}, 60_000);

afterAll(async () => {
  if (!platform) return;
  await platform.stop(false);
  rmSync(join(dataDir, '..'), { recursive: true, force: true });
  rmSync(`${dataDir}-runtime`, { recursive: true, force: true });
});

interface Probe {
  env: Record<string, string>;
  reads: Record<string, string>;
  uid: number;
}

async function probe(endpoint: string): Promise<Probe> {
  const paths = ['ferry.db', 'ferry.db-wal', 'secrets.key', 'api-key', 'serve.log'].map((f) =>
    join(dataDir, f),
  );
  const answer = await call(platform.baseUrl, 'POST', `/${endpoint}/runsync`, { input: { paths } });
  expect(answer.body.status).toBe('COMPLETED');
  return answer.body.output as Probe;
}

describe.runIf(isRoot)('tenant isolation on the local platform (workers as another OS user)', () => {
  it.each(Object.keys(tenants))('%s reads no platform file and sees no platform secret', async (name) => {
    const seen = await probe(name);
    expect(seen.uid).toBe(nobody.uid);
    for (const [path, outcome] of Object.entries(seen.reads)) {
      expect([path, outcome]).toEqual([path, expect.stringMatching(/PermissionError|FileNotFoundError/)]);
    }
    const env = JSON.stringify(seen.env);
    expect(env).not.toContain(testApiKey);
    expect(env).not.toContain(dataDir);
    expect(Object.keys(seen.env).filter((k) => /^(AWS_|FERRY_HOME|FERRY_API_KEY)/.test(k))).toEqual([]);
  });

  it('hands each endpoint its own secrets and nobody else’s', async () => {
    const [spy, victim, bystander] = await Promise.all(['spy', 'victim', 'bystander'].map(probe));
    expect(spy!.env.SPY_TOKEN).toBe(secretValues.SPY_TOKEN);
    expect(victim!.env.VICTIM_TOKEN).toBe(secretValues.VICTIM_TOKEN);
    expect(JSON.stringify(spy!.env)).not.toContain(secretValues.VICTIM_TOKEN);
    expect(JSON.stringify(victim!.env)).not.toContain(secretValues.SPY_TOKEN);
    expect(JSON.stringify(bystander!.env)).not.toMatch(/spy-secret|victim-secret/);
  });
});
