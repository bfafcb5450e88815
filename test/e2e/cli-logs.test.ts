/**
 * `ferry logs` and `ferry console` through the CLI binary against `ferry serve --detach` (real worker
 * pools and Python workers): a job sent to /run has its handler's print() lines printed by
 * `ferry logs ENDPOINT --job ID`, plain and --json; the console is where `ferry console` says; and
 * the console proxy of `--provider aws` passes the key through to an API (here the local platform).
 */
import { spawn } from 'node:child_process';
import { cpSync, mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ConsoleProxy, startConsoleProxy } from '../../cli/console-proxy.js';
import { CliSandbox, repoRoot } from './cli-support.js';

const apiKey = 'fy_cli_logs_key';
const sandbox = new CliSandbox();
let project: string;
let queueUrl: string;
let platformUrl: string;
let proxy: ConsoleProxy | undefined;

const authed = { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' };

beforeAll(async () => {
  project = path.join(sandbox.root, 'observe');
  cpSync(path.join(repoRoot, 'test/e2e/fixtures/observe'), project, { recursive: true });
  const deploy = await sandbox.run(['deploy'], { cwd: project, env: { FERRY_API_KEY: apiKey } });
  expect(deploy.code, deploy.stderr).toBe(0);
  queueUrl = /chatty\s+(\S+)/.exec(deploy.stdout)![1]!;
  platformUrl = queueUrl.replace(/\/v2\/.*$/, '');
}, 180_000);

afterAll(async () => {
  await proxy?.close();
  await sandbox.cleanup();
});

async function runToEnd(input: unknown): Promise<string> {
  const { id } = (await (
    await fetch(`${queueUrl}/run`, { method: 'POST', headers: authed, body: JSON.stringify({ input }) })
  ).json()) as { id: string };
  for (;;) {
    const r = (await (
      await fetch(`${queueUrl}/status-sync/${id}?wait=5000`, { method: 'POST', headers: authed })
    ).json()) as { status: string };
    if (r.status === 'COMPLETED') return id;
    expect(['IN_QUEUE', 'IN_PROGRESS']).toContain(r.status);
  }
}

describe('ferry logs', () => {
  it("--job prints the handler's print() lines of a job run through /run", async () => {
    const id = await runToEnd({ name: 'CLI', lines: 2 });
    const r = await sandbox.run(['logs', 'chatty', '--job', id], {
      cwd: project,
      env: { FERRY_API_KEY: apiKey },
    });
    expect(r.code, r.stderr).toBe(0);
    const lines = r.stdout.trim().split('\n');
    expect(lines).toHaveLength(3);
    expect(lines[0]).toMatch(new RegExp(`\\[chatty ${id}\\] working on CLI: step 0$`));
    expect(lines[2]).toContain('careful, CLI');

    const json = await sandbox.run(['logs', 'chatty', '--job', id, '--json'], {
      cwd: project,
      env: { FERRY_API_KEY: apiKey },
    });
    const parsed = json.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(parsed.map((l) => [l.jobId, l.stream, l.text])).toEqual([
      [id, 'stdout', 'working on CLI: step 0'],
      [id, 'stdout', 'working on CLI: step 1'],
      [id, 'stderr', 'careful, CLI'],
    ]);
  });

  it('an unknown endpoint or a bad --since is a usage error (exit 2) with a hint', async () => {
    const unknown = await sandbox.run(['logs', 'nope'], { cwd: project, env: { FERRY_API_KEY: apiKey } });
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain('hint:');
    // The name is right and --app is not: said so, with where the name is, not "no such name".
    const otherApp = await sandbox.run(['logs', 'chatty', '--app', 'nope'], {
      cwd: project,
      env: { FERRY_API_KEY: apiKey },
    });
    expect(otherApp.code).toBe(2);
    expect(otherApp.stderr).toContain("Error: No endpoint named 'chatty' in app 'nope'\n");
    expect(otherApp.stderr).toMatch(
      /hint: 'chatty' is deployed in observe\/production \(\S+\): pass --app observe, or an id\./,
    );
    const since = await sandbox.run(['logs', 'chatty', '--since', 'yesterday-ish'], {
      cwd: project,
      env: { FERRY_API_KEY: apiKey },
    });
    expect(since.code).toBe(2);
    expect(since.stderr).toContain('hint: For example --since 10m');
    // `-5m` is its value (five minutes ago), not the flags -5 and -m.
    const minus = await sandbox.run(['logs', 'chatty', '--since', '-5m'], {
      cwd: project,
      env: { FERRY_API_KEY: apiKey },
    });
    expect(minus.code, minus.stderr).toBe(0);
    const job = await sandbox.run(['logs', 'chatty', '--job', 'nope'], {
      cwd: project,
      env: { FERRY_API_KEY: apiKey },
    });
    expect(job.code).toBe(2);
    expect(job.stderr).toContain('Error: Job nope not found');
    expect(job.stderr).toContain('hint: Give the id that /run returned');
  });
});

describe('ferry logs in a ferry dev folder', () => {
  it("a name neither ferry dev nor FERRY_HOME's platform has says ferry dev starts it on its first call", async () => {
    // A running `ferry dev`, as its lock shows it: a live process whose command line says `dev`, and
    // a platform that answers (here the `ferry serve` itself, which has no endpoint 'greet').
    const devProject = path.join(sandbox.root, 'devproject');
    mkdirSync(path.join(devProject, '.ferry'), { recursive: true });
    const stand = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1e6)', 'dev'], {
      detached: true,
      stdio: 'ignore',
    });
    try {
      writeFileSync(
        path.join(devProject, '.ferry', 'dev.json'),
        JSON.stringify({ pid: stand.pid, startedAt: Date.now(), platformUrl }),
      );
      const r = await sandbox.run(['logs', 'greet'], { cwd: devProject, env: { FERRY_API_KEY: apiKey } });
      expect(r.code, r.stderr).toBe(2);
      expect(r.stderr).toContain("Error: No endpoint has the id or name 'greet'");
      expect(r.stderr).toContain(
        `hint: \`ferry dev\` in ${devProject} has none yet: it starts a function's endpoint`,
      );
      expect(r.stderr).toMatch(/has none either \(it has: .*chatty \(chatty-\S+\)/);
    } finally {
      process.kill(-stand.pid!, 'SIGKILL');
    }
  });
});

describe('ferry console', () => {
  it('prints where the local console is, and it is there', async () => {
    const r = await sandbox.run(['console'], { cwd: project, env: { FERRY_API_KEY: apiKey } });
    expect(r.code, r.stderr).toBe(0);
    const url = r.stdout.trim();
    expect(url).toBe(`${platformUrl}/console`);
    const page = await fetch(url);
    expect(page.status).toBe(200);
    expect(await page.text()).toContain('<main id="main">');
  });

  it('the --provider aws proxy serves the console and passes the key through to the API', async () => {
    proxy = await startConsoleProxy({
      origin: platformUrl,
      consoleDir: path.join(repoRoot, 'console'),
      host: '127.0.0.1',
      port: 0,
    });
    expect((await fetch(`${proxy.url}/console/app.js`)).status).toBe(200);
    const listed = await fetch(`${proxy.url}/manage/v1/endpoints`, { headers: authed });
    expect(listed.status).toBe(200);
    expect(
      ((await listed.json()) as { endpoints: { name: string }[] }).endpoints.map((e) => e.name),
    ).toContain('chatty');
    expect((await fetch(`${proxy.url}/manage/v1/endpoints`)).status).toBe(401);
    const endpointId = queueUrl.split('/').at(-1)!;
    const run = await fetch(`${proxy.url}/v2/${endpointId}/runsync`, {
      method: 'POST',
      headers: authed,
      body: JSON.stringify({ input: { name: 'proxy', lines: 0 } }),
    });
    expect(((await run.json()) as { output: unknown }).output).toEqual({ greeting: 'Hello, proxy!' });
  });
});
