/**
 * `ferry deploy` to a running `ferry serve` (the local provider): once it says Deployed, every job
 * is taken by a worker of the new code. The serve read the records once a second, and until then
 * the idle worker of the old code, waiting for work, took the next job: a runsync sent right after
 * the deploy failed with the old signature's TypeError. Now the deploy asks the serve to roll its
 * workers at once (core/adapters/local/rollout.ts) and a drained worker's waiting take is handed
 * nothing. The real binary, a real detached serve, real Python workers; no sleeps.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { CliSandbox } from './cli-support.js';

const apiKey = 'fy_roll_e2e_key';

/** Version `n` takes `v<n>` (an earlier version's worker fails on it) and says which it is. */
const appSource = (n: number) =>
  [
    'from ferry import Endpoint',
    '',
    '@Endpoint(name="greet", cpu="1-2", workers=(1, 1))',
    `def greet(v${n}=0):`,
    `    return {"version": ${n}}`,
    '',
  ].join('\n');

describe('ferry deploy to a running ferry serve', () => {
  const sandbox = new CliSandbox();
  afterAll(() => sandbox.cleanup());

  it('a runsync sent right after Deployed runs the new code, deploy after deploy', async () => {
    const project = path.join(sandbox.root, 'rollapp');
    const deploy = async (n: number) => {
      writeFileSync(path.join(project, 'app.py'), appSource(n));
      const result = await sandbox.run(['deploy'], { cwd: project, env: { FERRY_API_KEY: apiKey } });
      expect(result.code, result.stderr).toBe(0);
      return result;
    };
    const runsync = async (url: string, n: number) => {
      const response = await fetch(`${url}/runsync?wait=60000`, {
        method: 'POST',
        headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({ input: { [`v${n}`]: 1 } }),
      });
      return (await response.json()) as { status: string; output?: unknown; error?: unknown };
    };

    mkdirSync(project);
    const first = await deploy(1);
    const url = /greet\s+(\S+)\s+\(queue\)/.exec(first.stdout)?.[1];
    expect(url, first.stdout).toBeDefined();
    // The worker of version 1 is up, and idle once this answers (workers=(1, 1) keeps it).
    expect(await runsync(url!, 1)).toMatchObject({ status: 'COMPLETED', output: { version: 1 } });

    for (const n of [2, 3, 4]) {
      const result = await deploy(n);
      expect(result.stderr).toContain("every job from now on runs on this deployment's workers");
      // At once: no wait between Deployed and the job.
      const job = await runsync(url!, n);
      expect(job, `version ${n}`).toMatchObject({ status: 'COMPLETED', output: { version: n } });
    }

    // A new value of a secret the endpoint lists rolls it the same way (the pool's spec holds it).
    const secretSource = [
      'import os',
      'from ferry import Endpoint',
      '',
      '@Endpoint(name="greet", cpu="1-2", workers=(1, 1), secrets=["TOKEN"])',
      'def greet(v5=0):',
      '    return {"version": 5, "token": os.environ.get("TOKEN")}',
      '',
    ].join('\n');
    const setSecret = async (value: string) => {
      const result = await sandbox.run(['secrets', 'set', 'TOKEN'], {
        cwd: project,
        input: value,
        env: { FERRY_API_KEY: apiKey },
      });
      expect(result.code, result.stderr).toBe(0);
      return result;
    };
    await setSecret('first');
    writeFileSync(path.join(project, 'app.py'), secretSource);
    const withSecret = await sandbox.run(['deploy'], { cwd: project, env: { FERRY_API_KEY: apiKey } });
    expect(withSecret.code, withSecret.stderr).toBe(0);
    expect(await runsync(url!, 5)).toMatchObject({ output: { token: 'first' } });
    for (const value of ['second', 'third']) {
      const set = await setSecret(value);
      expect(set.stderr).toContain("every job from now on runs on this deployment's workers");
      expect(await runsync(url!, 5), value).toMatchObject({ status: 'COMPLETED', output: { token: value } });
    }
  }, 240_000);
});
