/**
 * The agent bundle: esbuild makes one agent.mjs that Node can parse, and that, started with no
 * configuration, names the missing variables and exits 2 at once (no stack trace).
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { bundleAgent } from '../../worker-image/agent/bundle.js';
import { parseAgentEnv, requiredAgentVariables } from '../../worker-image/agent/config.js';

const dir = mkdtempSync(join(tmpdir(), 'ferry-agent-bundle-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('agent bundle', () => {
  it('bundles into agent.mjs that parses and exits 2 without configuration', async () => {
    const file = await bundleAgent(dir);
    expect(file).toBe(join(dir, 'agent.mjs'));
    expect(statSync(file).size).toBeGreaterThan(10_000);

    const check = spawnSync(process.execPath, ['--check', file], { encoding: 'utf8' });
    expect(check.status, check.stderr).toBe(0);

    const run = spawnSync(process.execPath, [file], {
      encoding: 'utf8',
      env: { PATH: process.env.PATH ?? '' },
      timeout: 20_000,
    });
    expect(run.status, run.stderr).toBe(2);
    expect(run.stderr).toContain('FERRY_ENDPOINT_ID is required');
    expect(run.stderr).toContain('AWS_REGION is required');
    expect(run.stderr).not.toMatch(/\n\s+at /); // no stack trace
  }, 60_000);
});

describe('agent configuration', () => {
  const good = {
    FERRY_ENDPOINT_ID: 'ep1',
    FERRY_JOBS_TABLE: 'jobs',
    FERRY_CHUNKS_TABLE: 'chunks',
    FERRY_WORKERS_TABLE: 'workers',
    FERRY_BUCKET: 'bucket',
    FERRY_QUEUE_URL: 'https://sqs.us-east-1.amazonaws.com/123/ferry-ep1',
    AWS_REGION: 'us-east-1',
    FERRY_APP: 'ignored: the worker shares these',
  };

  it('reads the variables with defaults', () => {
    const parsed = parseAgentEnv(good);
    expect(parsed.ok).toBe(true);
    if (!parsed.ok || parsed.env.FERRY_AGENT_MODE !== 'queue') throw new Error('expected queue mode');
    expect(parsed.env.FERRY_AGENT_PORT).toBe(8080);
    expect(parsed.env.FERRY_DRAIN_MS).toBe(110_000);
    expect(parsed.env.FERRY_AGENT_HOST).toBe('127.0.0.1');
    expect(parsed.env.ECS_AGENT_URI).toBeUndefined();
    // No cap unless the stack gives the endpoint's max_concurrency.
    expect(parsed.env.FERRY_MAX_CONCURRENCY).toBeUndefined();
    const capped = parseAgentEnv({ ...good, FERRY_MAX_CONCURRENCY: '4' });
    if (!capped.ok || capped.env.FERRY_AGENT_MODE !== 'queue') throw new Error('expected queue mode');
    expect(capped.env.FERRY_MAX_CONCURRENCY).toBe(4);
  });

  it('names each bad variable', () => {
    const parsed = parseAgentEnv({
      ...good,
      FERRY_AGENT_PORT: '70000',
      FERRY_QUEUE_URL: 'not a url',
      FERRY_DRAIN_MS: '200000',
      FERRY_BUCKET: '',
      FERRY_MAX_CONCURRENCY: '0',
    });
    expect(parsed.ok).toBe(false);
    if (parsed.ok) return;
    expect(parsed.problems.join('\n')).toMatch(/FERRY_AGENT_PORT must be a port/);
    expect(parsed.problems.join('\n')).toMatch(/FERRY_QUEUE_URL must be a URL/);
    expect(parsed.problems.join('\n')).toMatch(/FERRY_DRAIN_MS must be at most 120000/);
    expect(parsed.problems.join('\n')).toMatch(/FERRY_BUCKET is required/);
    expect(parsed.problems.join('\n')).toMatch(/FERRY_MAX_CONCURRENCY must be >= 1/);
  });

  it('reads lb mode: the control table and the worker port, listening beyond loopback', () => {
    const parsed = parseAgentEnv({
      FERRY_AGENT_MODE: 'lb',
      FERRY_ENDPOINT_ID: 'ep1',
      FERRY_CONTROL_TABLE: 'control',
      FERRY_PORT: '8001',
      FERRY_APP: 'shop',
      FERRY_ENV: 'prod',
      AWS_REGION: 'us-east-1',
      // Task scale-in protection (protection.ts): ECS injects the first, the stack sets the second.
      ECS_AGENT_URI: 'http://169.254.170.2/api/task-1',
      FERRY_IDLE_TIMEOUT_SEC: '300',
    });
    if (!parsed.ok || parsed.env.FERRY_AGENT_MODE !== 'lb') throw new Error('expected lb mode');
    expect(parsed.env.FERRY_PORT).toBe(8001);
    expect(parsed.env.ECS_AGENT_URI).toBe('http://169.254.170.2/api/task-1');
    expect(parsed.env.FERRY_IDLE_TIMEOUT_SEC).toBe(300);
    expect(parsed.env.FERRY_AGENT_HOST).toBe('0.0.0.0');
    expect(requiredAgentVariables('lb').sort()).toEqual(
      [
        'AWS_REGION',
        'FERRY_AGENT_MODE',
        'FERRY_APP',
        'FERRY_CONTROL_TABLE',
        'FERRY_ENDPOINT_ID',
        'FERRY_ENV',
        'FERRY_PORT',
      ].sort(),
    );
  });

  it('names a missing lb variable and an unknown mode', () => {
    const missing = parseAgentEnv({ FERRY_AGENT_MODE: 'lb', FERRY_ENDPOINT_ID: 'ep1', AWS_REGION: 'x' });
    expect(missing.ok).toBe(false);
    if (!missing.ok)
      expect(missing.problems.sort()).toEqual(
        [
          'FERRY_APP is required',
          'FERRY_CONTROL_TABLE is required',
          'FERRY_ENV is required',
          'FERRY_PORT is required',
        ].sort(),
      );
    const unknown = parseAgentEnv({ ...good, FERRY_AGENT_MODE: 'proxy' });
    expect(unknown.ok).toBe(false);
    if (!unknown.ok)
      expect(unknown.problems[0]).toMatch(/FERRY_AGENT_MODE must be one of queue, lb, artifact/);
  });
});
