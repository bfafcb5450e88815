/**
 * `ferry dev` through the real binary: init → dev → the dev server's routes run the project's code
 * in real Python workers (queue runsync, a load-balanced route), /docs, reload on a .py change,
 * and Ctrl+C stopping everything with exit 0. One `ferry dev` per project: a second one in the same
 * folder exits 2 naming the first, and the lock (.ferry/dev.json) goes with the process that held it.
 * It takes no key, so a web page of another site, or one rebound to 127.0.0.1, is refused, while
 * Swagger UI (in Chromium) and clients that are not browsers are served; a page of an --allow-origin
 * origin, in Chromium, sends JSON and reads the answers (CORS).
 */

import { type ChildProcess, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, request as httpRequest, type OutgoingHttpHeaders, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CliSandbox, postJson as post, printedOn, stopChild } from './cli-support.js';

const sandbox = new CliSandbox();
let project = '';
let base = '';
let dev: ChildProcess;
let output: () => { stdout: string; stderr: string };

beforeAll(async () => {
  expect((await sandbox.run(['init', 'devproj'])).code).toBe(0);
  project = path.join(sandbox.root, 'devproj');
  // The key comes from the project's .env here (docs/api.md#authentication); the dev server's own routes need none.
  writeFileSync(path.join(project, '.env'), 'FERRY_API_KEY=fy_dev_local\n');
  const started = await sandbox.start(
    ['dev', '--host', '127.0.0.1', '--port', '0'],
    /Ferry dev server at (http:\/\/\S+)/,
    {
      cwd: project,
    },
  );
  dev = started.child;
  output = started.output;
  base = started.match[1]!;
});
afterAll(() => sandbox.cleanup());

/**
 * A request with the headers a browser would send (fetch cannot set Host): what a page of another
 * site, or one whose name was rebound to 127.0.0.1, makes its visitor's browser send.
 */
const browserLike = (
  url: string,
  options: { method?: string; headers: OutgoingHttpHeaders; body?: string },
): Promise<{ status: number; body: any }> =>
  new Promise((resolve, reject) => {
    const sent = httpRequest(url, { method: options.method ?? 'GET', headers: options.headers }, (answer) => {
      let text = '';
      answer.setEncoding('utf8');
      answer.on('data', (chunk) => {
        text += chunk;
      });
      answer.on('end', () => resolve({ status: answer.statusCode!, body: JSON.parse(text) }));
    });
    sent.on('error', reject);
    sent.end(options.body);
  });

describe('ferry dev', () => {
  it('GET / answers health JSON listing the routes', async () => {
    const response = await fetch(`${base}/`);
    expect(response.status).toBe(200);
    const body = (await response.json()) as { status: string; routes: string[] };
    expect(body.status).toBe('ok');
    expect(body.routes).toEqual(
      expect.arrayContaining([
        'POST /cpu_worker/runsync',
        'POST /gpu_worker/runsync',
        'POST /lb_worker/process',
        'GET /lb_worker/health',
      ]),
    );
  });

  it('runs a queue job through /<module>/runsync with the {input} wrapper, no auth header', async () => {
    const result = await post(`${base}/cpu_worker/runsync`, { input: { input_data: { message: 'hi' } } });
    expect(result.status).toBe(200);
    expect(result.body.status).toBe('COMPLETED');
    expect(result.body.id).toEqual(expect.any(String));
    expect(result.body.output.message).toBe('Hello from the CPU worker: hi');
    const unwrapped = await post(`${base}/cpu_worker/runsync`, { input_data: {} });
    expect(unwrapped.status).toBe(400);
    expect(unwrapped.body.error).toContain('{"input"');
  });

  it('the GPU template falls back to the CPU without torch', async () => {
    const result = await post(`${base}/gpu_worker/runsync`, { input: { input_data: { message: 'g' } } });
    expect(result.body.status).toBe('COMPLETED');
    expect(result.body.output.gpu.available).toBe(false);
  });

  it('proxies load-balanced routes with direct JSON', async () => {
    const result = await post(`${base}/lb_worker/process`, { input_data: { n: 2 } });
    expect(result.status).toBe(200);
    expect(result.body).toMatchObject({ status: 'success', echo: { n: 2 } });
    const health = await fetch(`${base}/lb_worker/health`);
    expect(await health.json()).toEqual({ status: 'healthy' });
  });

  it("a named route asked with another method answers 405 with the Allow header, as the platform's load-balanced runtime does", async () => {
    for (const [method, route, allowed] of [
      ['GET', '/lb_worker/process', 'POST'],
      ['DELETE', '/lb_worker/health', 'GET, HEAD'],
      ['GET', '/cpu_worker/runsync', 'POST'],
    ] as const) {
      const response = await fetch(`${base}${route}`, { method });
      expect(response.status, `${method} ${route}`).toBe(405);
      expect(response.headers.get('allow')).toBe(allowed);
      expect(await response.json()).toEqual({
        error: `method ${method} not allowed for ${route}; allowed: ${allowed}`,
      });
    }
    // The runtime's own answer, through the platform's /lb route (the dev server passes it through).
    const resources = JSON.parse(readFileSync(path.join(project, '.ferry', 'resources.json'), 'utf8'));
    const platform = await fetch(`${base}/lb/${resources.lb_worker.id}/process`, {
      headers: { authorization: 'Bearer fy_dev_local' },
    });
    expect(platform.status).toBe(405);
    expect(platform.headers.get('allow')).toBe('POST');
    expect(await platform.json()).toEqual({ error: 'method GET not allowed for /process; allowed: POST' });
    const platformGet = await fetch(`${base}/lb/${resources.lb_worker.id}/health`, {
      method: 'DELETE',
      headers: { authorization: 'Bearer fy_dev_local' },
    });
    expect(platformGet.headers.get('allow')).toBe('GET, HEAD');
    expect(await platformGet.json()).toEqual({
      error: 'method DELETE not allowed for /health; allowed: GET, HEAD',
    });
    // A path no route has stays a 404.
    const none = await fetch(`${base}/lb_worker/nope`, { method: 'DELETE' });
    expect(none.status).toBe(404);
    expect(await none.json()).toEqual({ error: 'No route for DELETE /lb_worker/nope' });
  });

  it('passes a 64-bit integer through with every digit, and refuses the JSON the platform refuses', async () => {
    const response = await fetch(`${base}/lb_worker/process`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"input_data":{"seed":18446744073709551615}}',
    });
    expect(response.status).toBe(200);
    // As text (the worker's own, spaces and all): JSON.parse here would round what came back.
    expect(await response.text()).toMatch(/"seed": ?18446744073709551615[,}]/);
    // A job's input, as the platform's /run refuses it; a load-balanced body goes to the worker as it came.
    const refused = await fetch(`${base}/cpu_worker/runsync`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"input":{"input_data":{"__proto__":{"admin":true}}}}',
    });
    expect(refused.status).toBe(400);
    expect(await refused.json()).toEqual({ error: 'JSON keys named "__proto__" are not accepted' });
  });

  it("reads a body as JSON whatever its label, up to the platform's own limits, as the platform does", async () => {
    const body = (message: string) => JSON.stringify({ input: { input_data: { message } } });
    // curl -d labels JSON as a form; RunPod's SDK does too; text/plain is fetch's label for a string.
    for (const type of ['application/x-www-form-urlencoded', 'text/plain;charset=UTF-8']) {
      const queued = await fetch(`${base}/cpu_worker/runsync`, {
        method: 'POST',
        headers: { 'content-type': type },
        body: body('labelled'),
      });
      expect(queued.status, type).toBe(200);
      expect(((await queued.json()) as any).output.message).toBe('Hello from the CPU worker: labelled');
      const direct = await fetch(`${base}/lb_worker/process`, {
        method: 'POST',
        headers: { 'content-type': type },
        body: '{"input_data":{"n":3}}',
      });
      expect(direct.status, type).toBe(200);
      expect(await direct.json()).toMatchObject({ status: 'success', echo: { n: 3 } });
      // The v2 API passed through, with the platform key, by the endpoint's id.
      const { id } = JSON.parse(
        readFileSync(path.join(project, '.ferry', 'resources.json'), 'utf8'),
      ).cpu_worker;
      const v2 = await fetch(`${base}/v2/${id}/runsync`, {
        method: 'POST',
        headers: { 'content-type': type, authorization: 'Bearer fy_dev_local' },
        body: body('by id'),
      });
      expect(v2.status, type).toBe(200);
      expect(((await v2.json()) as any).output.message).toBe('Hello from the CPU worker: by id');
    }
    // 2 MB: over Fastify's default 1 MiB, well within /run's 10 MiB.
    const large = 'x'.repeat(2_000_000);
    const big = await fetch(`${base}/cpu_worker/runsync`, { method: 'POST', body: body(large) });
    expect(big.status).toBe(200);
    expect(((await big.json()) as any).output.message).toBe(`Hello from the CPU worker: ${large}`);
    const bigDirect = await post(`${base}/lb_worker/process`, { input_data: { large } });
    expect(bigDirect.status).toBe(200);
    expect(bigDirect.body.echo.large).toBe(large);
    // Over /run's limit: the 413 names the route called and the limit, as the platform's does.
    const over = await fetch(`${base}/cpu_worker/runsync`, {
      method: 'POST',
      body: body('x'.repeat(10_485_760)),
    });
    expect(over.status).toBe(413);
    expect(await over.json()).toEqual({
      error: 'Request body is over the limit of POST /cpu_worker/runsync: it takes at most 10485760 bytes',
    });
  });

  it('serves Swagger UI at /docs with docstring summaries', async () => {
    const page = await fetch(`${base}/docs`);
    expect(page.status).toBe(200);
    const spec = (await (await fetch(`${base}/docs/json`)).json()) as {
      paths: Record<string, Record<string, { summary: string }>>;
    };
    expect(spec.paths['/cpu_worker/runsync']!.post!.summary).toBe('Say hello from a CPU worker.');
    expect(spec.paths['/lb_worker/process']!.post!.summary).toBe('Echo the input back with a timestamp.');
  });

  it('refuses what a web page of another site, or one rebound to this machine, makes the browser send', async () => {
    const { host, port } = new URL(base);
    const job = JSON.stringify({ input: { input_data: { message: 'from a page' } } });
    const otherSite = (origin: string) =>
      `To let pages of ${origin} call it, start it with --allow-origin ${origin}`;
    // A cross-site "simple" POST (text/plain, or a form): sent with no CORS preflight.
    for (const [type, origin] of [
      ['text/plain;charset=UTF-8', 'https://attacker.example'],
      ['application/x-www-form-urlencoded', 'http://localhost:3000'],
      ['text/plain', 'null'],
    ]) {
      const refused = await browserLike(`${base}/cpu_worker/runsync`, {
        method: 'POST',
        headers: { host, origin: origin!, 'sec-fetch-site': 'cross-site', 'content-type': type! },
        body: job,
      });
      expect(refused.status, origin).toBe(403);
      expect(refused.body.error, origin).toContain(`The request came from a web page at ${origin}`);
      expect(refused.body.error, origin).toContain(otherSite(origin!));
    }
    // A link, an image or a frame of another site: no Origin, but the browser says where it came from.
    const linked = await browserLike(`${base}/lb_worker/health`, {
      headers: { host, 'sec-fetch-site': 'cross-site', 'sec-fetch-mode': 'no-cors' },
    });
    expect(linked.status).toBe(403);
    expect(linked.body.error).toContain('Sec-Fetch-Site: cross-site');
    // DNS rebinding: the page's own name, now pointing here, so its origin is the Host: it could read
    // the answers, the management API's jobs (inputs and outputs) among them.
    for (const path of ['/manage/v1/endpoints', '/docs/json', '/cpu_worker/runsync']) {
      const rebound = await browserLike(`${base}${path}`, {
        method: path.endsWith('runsync') ? 'POST' : 'GET',
        headers: {
          host: `attacker.example:${port}`,
          origin: `http://attacker.example:${port}`,
          'sec-fetch-site': 'same-origin',
        },
        ...(path.endsWith('runsync') ? { body: job } : {}),
      });
      expect(rebound.status, path).toBe(403);
      expect(rebound.body.error, path).toContain(
        `Host 'attacker.example:${port}' is not a name of this machine`,
      );
      expect(rebound.body.error, path).toContain(
        `start it with --allow-origin http://attacker.example:${port}`,
      );
    }
    expect(output().stderr).toContain(
      'refused POST /cpu_worker/runsync: The request came from a web page at https://attacker.example',
    );
    // The refused line names the caller's Host with its control characters written out (a C1 CSI
    // here, which some terminals act on): a request cannot rewrite what the developer reads.
    // The line is printed as the 403 is sent: awaited on its own event, not on the answer.
    const refusedLine = printedOn(dev, `Host 'evil\\x9b2J.example:${port}' is not a name`);
    const escaping = await browserLike(`${base}/ping`, { headers: { host: `evil\u009b2J.example:${port}` } });
    expect(escaping.status).toBe(403);
    await refusedLine;
    expect(output().stderr).toContain(`Host 'evil\\x9b2J.example:${port}' is not a name`);
    expect(output().stderr).not.toContain('\u009b');
    // Its own pages, by each name of this machine, and clients that are not browsers, are served.
    for (const name of [host, `localhost:${port}`, `[::1]:${port}`]) {
      const own = await browserLike(`${base}/`, {
        headers: { host: name, origin: `http://${name}`, 'sec-fetch-site': 'same-origin' },
      });
      expect(own.status, name).toBe(200);
    }
    const plain = await browserLike(`${base}/ping`, { headers: { host } });
    expect(plain).toEqual({ status: 200, body: { status: 'healthy' } });
  });

  it('Swagger UI at /docs, in Chromium, calls the endpoints from its own origin', async () => {
    const profile = mkdtempSync(path.join(tmpdir(), 'ferry-chromium-'));
    const browser = await chromium.launchPersistentContext(profile, {
      executablePath: '/usr/bin/chromium',
      args: ['--no-sandbox', '--headless', '--disable-gpu', '--no-first-run'],
    });
    try {
      const page = await browser.newPage();
      await page.goto(`${base}/docs`);
      // Swagger UI's "Try it out" → Execute on the queue route.
      const operation = page.locator('#operations-cpu_worker-post_cpu_worker_runsync');
      await operation.locator('.opblock-summary').click();
      await operation.getByRole('button', { name: 'Try it out' }).click();
      await operation
        .locator('textarea.body-param__text')
        .fill(JSON.stringify({ input: { input_data: { message: 'from Swagger' } } }));
      const answered = page.waitForResponse((r) => r.url() === `${base}/cpu_worker/runsync`);
      await operation.getByRole('button', { name: 'Execute' }).click();
      const answer = await answered;
      // What Chromium sent: the page's own origin.
      const sent = await answer.request().allHeaders();
      expect(sent.origin).toBe(base);
      expect(answer.status()).toBe(200);
      expect(((await answer.json()) as any).output.message).toMatch(/: from Swagger$/);
    } finally {
      await browser.close();
      rmSync(profile, { recursive: true, force: true });
    }
  }, 60_000);

  it('records live- endpoints in .ferry/resources.json', () => {
    const resources = JSON.parse(readFileSync(path.join(project, '.ferry', 'resources.json'), 'utf8'));
    expect(resources.cpu_worker.id).toMatch(/^live-cpu-worker-[0-9a-f]{8}$/);
    expect(resources.lb_worker.configHash).toEqual(expect.any(String));
  });

  it('reloads on a .py change: the same endpoint runs the new code', async () => {
    const reloaded = printedOn(dev, '↻ reloaded');
    const file = path.join(project, 'cpu_worker.py');
    writeFileSync(file, readFileSync(file, 'utf8').replace('Hello from the CPU worker', 'Reloaded worker'));
    // The line comes once the endpoint was redeployed and the new routes are in place.
    await reloaded;
    const resources = JSON.parse(readFileSync(path.join(project, '.ferry', 'resources.json'), 'utf8'));
    expect(output().stderr).toContain(`~ updated live-cpu_worker (${resources.cpu_worker.id})`);
    const result = await post(`${base}/cpu_worker/runsync`, { input: { input_data: { message: 'x' } } });
    expect(result.body.output.message).toBe('Reloaded worker: x');
  });

  it('a second ferry dev in the same folder exits 2 naming the first, which keeps serving', async () => {
    // Its platform would share .ferry/ferry.db and requeue the first's running jobs at its start.
    const second = await sandbox.run(['dev', '--host', '127.0.0.1', '--port', '0'], {
      cwd: project,
      timeoutMs: 30_000,
    });
    expect(second.code, second.stderr).toBe(2);
    expect(second.stderr).toContain(
      `Error: ferry dev is already running for this project at ${base} (pid ${dev.pid})`,
    );
    expect(second.stderr).toMatch(/\n {2}hint: .*stop it/);
    expect(second.stdout).toBe('');
    const result = await post(`${base}/cpu_worker/runsync`, { input: { input_data: { message: 'still' } } });
    expect(result.body.output.message).toBe('Reloaded worker: still');
  });

  it('Ctrl+C stops the server and exits 0', async () => {
    expect(await stopChild(dev, 'SIGINT')).toBe(0);
    await expect(fetch(`${base}/`)).rejects.toThrow();
  });

  it('lets go of the lock when it stops, and takes over one whose process is gone', async () => {
    const lock = path.join(project, '.ferry', 'dev.json');
    expect(existsSync(lock)).toBe(false);
    const args = ['dev', '--host', '127.0.0.1', '--port', '0', '--no-reload'];
    const ready = /Ferry dev server at (http:\/\/\S+)/;
    const again = await sandbox.start(args, ready, { cwd: project });
    expect(JSON.parse(readFileSync(lock, 'utf8'))).toMatchObject({
      pid: again.child.pid,
      url: again.match[1],
    });
    expect(await stopChild(again.child, 'SIGTERM')).toBe(0);
    expect(existsSync(lock)).toBe(false);
    // What a `kill -9` or a crash leaves behind: a lock naming a process that is gone.
    const gone = spawnSync(process.execPath, ['-e', '']).pid;
    writeFileSync(lock, JSON.stringify({ pid: gone, startedAt: Date.now(), url: 'http://127.0.0.1:1' }));
    const taken = await sandbox.start(args, ready, { cwd: project });
    expect(JSON.parse(readFileSync(lock, 'utf8')).pid).toBe(taken.child.pid);
    expect(await stopChild(taken.child)).toBe(0);
    expect(existsSync(lock)).toBe(false);
  }, 120_000);

  it('--allow-origin lets pages of that origin call it, and its name reach it; a value that is no origin exits 2', async () => {
    const bad = await sandbox.run(['dev', '--port', '0', '--allow-origin', 'devbox.lan'], {
      cwd: project,
      timeoutMs: 30_000,
    });
    expect(bad.code, bad.stderr).toBe(2);
    expect(bad.stderr).toContain('--allow-origin devbox.lan is not an origin');
    expect(bad.stderr).toContain('hint: Give an origin as the browser shows it');
    const allowed = await sandbox.start(
      [
        'dev',
        '--host',
        '127.0.0.1',
        '--port',
        '0',
        '--no-reload',
        '--allow-origin',
        'http://devbox.lan:9000/',
        '--allow-origin',
        'http://localhost:5173',
      ],
      /Ferry dev server at (http:\/\/\S+)/,
      { cwd: project },
    );
    const url = `${allowed.match[1]}/ping`;
    const healthy = { status: 200, body: { status: 'healthy' } };
    // Reached as devbox.lan (a forward, a hosts entry), from its own pages.
    expect(
      await browserLike(url, {
        headers: {
          host: 'devbox.lan:9000',
          origin: 'http://devbox.lan:9000',
          'sec-fetch-site': 'same-origin',
        },
      }),
    ).toEqual(healthy);
    // A front-end's dev server on another port, calling this one from the browser.
    expect(
      await browserLike(url, {
        headers: { host: 'localhost', origin: 'http://localhost:5173', 'sec-fetch-site': 'same-site' },
      }),
    ).toEqual(healthy);
    // Another origin still is refused, and so is a name no flag gave.
    const other = await browserLike(url, { headers: { host: 'localhost', origin: 'http://localhost:5174' } });
    expect(other.status).toBe(403);
    const name = await browserLike(url, { headers: { host: 'devbox2.lan:9000' } });
    expect(name.status).toBe(403);
    expect(await stopChild(allowed.child)).toBe(0);
  }, 120_000);

  it("--allow-origin's pages, in Chromium, POST JSON (preflighted) and read the answer; another origin's page cannot", async () => {
    // Two pages on ports of their own: one the flag names, one it does not.
    const pageServer = async (): Promise<{ server: Server; origin: string }> => {
      const server = createServer((_request, response) => {
        response.setHeader('content-type', 'text/html');
        response.end('<!doctype html><title>front-end</title>');
      });
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      return { server, origin: `http://127.0.0.1:${(server.address() as { port: number }).port}` };
    };
    const allowedPage = await pageServer();
    const otherPage = await pageServer();
    const profile = mkdtempSync(path.join(tmpdir(), 'ferry-chromium-'));
    const started = await sandbox.start(
      ['dev', '--host', '127.0.0.1', '--port', '0', '--no-reload', '--allow-origin', allowedPage.origin],
      /Ferry dev server at (http:\/\/\S+)/,
      { cwd: project },
    );
    const devUrl = started.match[1]!;
    const browser = await chromium.launchPersistentContext(profile, {
      executablePath: '/usr/bin/chromium',
      args: ['--no-sandbox', '--headless', '--disable-gpu', '--no-first-run'],
    });
    try {
      const page = await browser.newPage();
      // What a front-end does: fetch() with a JSON body, then read the answer.
      const call = (url: string) =>
        page.evaluate(async (target) => {
          try {
            const response = await fetch(target, {
              method: 'POST',
              headers: { 'content-type': 'application/json' },
              body: JSON.stringify({ input: { input_data: { message: 'from the front-end' } } }),
            });
            return { status: response.status, body: await response.json() };
          } catch (error) {
            return { failed: String(error) };
          }
        }, url);
      await page.goto(allowedPage.origin);
      const answered = await call(`${devUrl}/cpu_worker/runsync`);
      expect(answered).toMatchObject({
        status: 200,
        body: { status: 'COMPLETED', output: { message: expect.stringMatching(/: from the front-end$/) } },
      });
      await page.goto(otherPage.origin);
      const refused = await call(`${devUrl}/cpu_worker/runsync`);
      expect(refused).toEqual({ failed: expect.stringContaining('Failed to fetch') });
      // Chromium asked first (a JSON POST is not a "simple" request): the question was refused.
      expect(started.output().stderr).toContain(
        `refused OPTIONS /cpu_worker/runsync: The request came from a web page at ${otherPage.origin}`,
      );
    } finally {
      await browser.close();
      rmSync(profile, { recursive: true, force: true });
      for (const { server } of [allowedPage, otherPage]) server.close();
    }
    // Exactly what it answers: the origin itself (never *), what was asked, Vary; and nothing without Origin.
    const sent = await fetch(`${devUrl}/cpu_worker/runsync`, {
      method: 'OPTIONS',
      headers: {
        origin: allowedPage.origin,
        'access-control-request-method': 'POST',
        'access-control-request-headers': 'content-type',
      },
    });
    expect(sent.status).toBe(204);
    expect(
      Object.fromEntries([...sent.headers].filter(([name]) => /^(access-control|vary)/.test(name))),
    ).toEqual({
      'access-control-allow-origin': allowedPage.origin,
      'access-control-allow-methods': 'GET, HEAD, POST, PUT, DELETE, PATCH',
      'access-control-allow-headers': 'content-type',
      vary: 'Origin, Access-Control-Request-Headers',
    });
    const plain = await fetch(`${devUrl}/ping`);
    expect(plain.headers.get('access-control-allow-origin')).toBeNull();
    const foreign = await fetch(`${devUrl}/cpu_worker/runsync`, {
      method: 'OPTIONS',
      headers: { origin: otherPage.origin, 'access-control-request-method': 'POST' },
    });
    expect(foreign.status).toBe(403);
    expect(foreign.headers.get('access-control-allow-origin')).toBeNull();
    expect(await stopChild(started.child)).toBe(0);
  }, 120_000);
});
