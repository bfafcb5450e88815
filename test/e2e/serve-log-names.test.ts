/**
 * `ferry serve`'s own lines about an endpoint's workers (a crash, a restart, failing) name the
 * endpoint by the name its owner deployed it with, as `ferry dev`'s do, not by its internal id. The
 * real binary, a real deploy into the same FERRY_HOME, and a real Python worker that crashes.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { until } from '../support/until.js';
import { CliSandbox } from './cli-support.js';

const sandbox = new CliSandbox();
afterAll(() => sandbox.cleanup());

const apiKey = 'fy_serve_names_key';

describe('ferry serve names endpoints by name in its supervisor lines', () => {
  it('a crashing worker: the backoff line says the endpoint name, not its id', async () => {
    const serve = await sandbox.start(['serve', '--port', '0'], /Ferry platform at (http:\/\/\S+)/, {
      env: { FERRY_API_KEY: apiKey },
    });
    const url = serve.match[1]!;
    const project = path.join(sandbox.root, 'names');
    mkdirSync(project);
    writeFileSync(
      path.join(project, 'app.py'),
      [
        'import os',
        'from ferry import Endpoint',
        '',
        '@Endpoint(name="looper", cpu="1-2", workers=(0, 1))',
        'def looper():',
        '    os._exit(3)',
        '',
      ].join('\n'),
    );
    const deploy = await sandbox.run(['deploy', '--no-serve'], {
      cwd: project,
      env: { FERRY_API_KEY: apiKey },
    });
    expect(deploy.code, deploy.stderr).toBe(0);
    const id = /looper\s+http:\/\/\S+\/v2\/(\S+)/.exec(deploy.stdout)?.[1];
    expect(id, deploy.stdout).toMatch(/^looper-[0-9a-f]{8}$/);

    const run = await fetch(`${url}/v2/${id}/run`, {
      method: 'POST',
      headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ input: {} }),
    });
    expect(run.status).toBe(200);
    const stderr = await until(
      'the supervisor to report the crash',
      () => serve.output().stderr,
      (text) => /endpoint \S+: worker \S+ exited \(code 3\)/.test(text),
      60_000,
    );
    expect(stderr).toMatch(/endpoint looper: worker \S+ exited \(code 3\); 1 crash\(es\) in a row/);
    expect(stderr).not.toContain(`endpoint ${id}`);
  }, 120_000);
});
