/**
 * `ferry deploy` (local provider) refuses an image endpoint (docs/python.md, image endpoints): the local
 * provider runs Python processes without Docker, so it stops with exit 2 and a hint before it writes
 * anything, rather than record an endpoint nothing would serve.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { CliSandbox } from './cli-support.js';

const sandbox = new CliSandbox();
afterAll(() => sandbox.cleanup());

describe('ferry deploy with an image endpoint on the local provider', () => {
  it('exits 2 naming the endpoint and pointing at --provider aws, and records nothing', async () => {
    const project = path.join(sandbox.root, 'imgapp');
    mkdirSync(project, { recursive: true });
    writeFileSync(
      path.join(project, 'workers.py'),
      [
        'from ferry import Endpoint',
        'vllm = Endpoint(name="vllm", image="vllm/vllm-openai:v0.6.3", gpu="L40S")',
        '',
        '@Endpoint(name="echo", cpu="1-2")',
        'def echo(job_input):',
        '    return job_input',
        '',
      ].join('\n'),
    );
    const result = await sandbox.run(['deploy', '--no-serve'], { cwd: project });
    expect(result.code).toBe(2);
    expect(result.stderr).toContain(
      "'vllm' (vllm/vllm-openai:v0.6.3): image endpoints cannot run on the local provider",
    );
    expect(result.stderr).toContain('--provider aws');
    expect(result.stdout).toBe('');
    // Refused right after the build: the environment stage (the first write) never started.
    expect(result.stderr).not.toContain('Environment resolution');
  });
});
