/**
 * `ferry dev` through the real binary and real Python workers, when a save leaves code that does not
 * load (a syntax error): every route answers 503 {"error"} naming the file, the error and that the
 * next save reloads, instead of the old code's answers, and so does a /v2 run or /lb request, passed
 * through the dev server or sent straight to its platform (.ferry/dev.json's URL), while an earlier
 * job's status still answers; /docs, /ping and / still answer; the next good save serves the new
 * code. Each step waits for the line ferry dev prints, never for time.
 */
import type { ChildProcess } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { CliSandbox, postJson as post, printedOn } from './cli-support.js';

const sandbox = new CliSandbox();
let project = '';
let base = '';
let dev: ChildProcess;
let output: () => { stdout: string; stderr: string };

const app = (word: string) => `from ferry import Endpoint


@Endpoint(name="hello", cpu="1-2")
def hello(name: str):
    return f"${word} {name}"
`;

const api = `from ferry import Endpoint

api = Endpoint(name="api", cpu="1-2")


@api.post("/echo")
def echo(x: int = 1):
    return {"x": x}
`;

beforeAll(async () => {
  project = path.join(sandbox.root, 'reloads');
  mkdirSync(project);
  writeFileSync(path.join(project, 'app.py'), app('v1'));
  writeFileSync(path.join(project, 'api.py'), api);
  writeFileSync(path.join(project, '.env'), 'FERRY_API_KEY=fy_dev_reload\n');
  const started = await sandbox.start(
    ['dev', '--host', '127.0.0.1', '--port', '0', '--no-deps'],
    /Ferry dev server at (http:\/\/\S+)/,
    { cwd: project },
  );
  dev = started.child;
  output = started.output;
  base = started.match[1]!;
});
afterAll(() => sandbox.cleanup());

it('answers 503 naming the file and the error while the saved code does not load, then serves the next good save', {
  timeout: 120_000,
}, async () => {
  expect((await post(`${base}/app/runsync`, { input: { name: 'a' } })).body.output).toBe('v1 a');
  expect((await post(`${base}/api/echo`, { x: 2 })).body).toEqual({ x: 2 });
  // The platform itself, as a script that read .ferry/dev.json (or FERRY_API_URL) calls it.
  const { platformUrl } = JSON.parse(readFileSync(path.join(project, '.ferry', 'dev.json'), 'utf8')) as {
    platformUrl: string;
  };
  const ids = JSON.parse(readFileSync(path.join(project, '.ferry', 'resources.json'), 'utf8')) as Record<
    string,
    { id: string }
  >;
  const auth = { authorization: 'Bearer fy_dev_reload', 'content-type': 'application/json' };
  const send = async (url: string, method: string, body?: unknown) => {
    const response = await fetch(url, {
      method,
      headers: auth,
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    return { status: response.status, body: (await response.json()) as Record<string, any> };
  };
  const earlier = await send(`${platformUrl}/v2/${ids.hello!.id}/runsync`, 'POST', { input: { name: 'b' } });
  expect(earlier.body).toMatchObject({ status: 'COMPLETED', output: 'v1 b' });

  const failed = printedOn(dev, /reload failed[^\n]*\n[^\n]*\n/);
  writeFileSync(path.join(project, 'app.py'), `${app('v2')}\ndef broken(:\n`);
  await failed;
  const message =
    /^ferry dev could not reload the project after app\.py changed: The project has a problem: app\.py:8: syntax error: invalid syntax \(parsed with Python [0-9.]+\)\. It does not run the code from before that change: fix the code and save, and ferry dev reloads it on the next save\.$/;
  // Every route, the load-balanced one of the file that still loads too: reloading is all or nothing.
  const queue = await post(`${base}/app/runsync`, { input: { name: 'a' } });
  expect(queue.status).toBe(503);
  expect(queue.body.error).toMatch(message);
  const lb = await post(`${base}/api/echo`, { x: 2 });
  expect(lb.status).toBe(503);
  expect(lb.body.error).toMatch(message);
  // So does what a script sends that would run the code (by id and by name), through the dev server
  // or straight to its platform, while a job's reads still pass: jobs started before can be followed.
  for (const url of [base, platformUrl]) {
    for (const [method, route, body] of [
      ['POST', `/v2/${ids.hello!.id}/run`, { input: { name: 'a' } }],
      ['POST', `/v2/${ids.hello!.id}/runsync`, { input: { name: 'a' } }],
      ['POST', `/v2/${ids.hello!.id}/retry/${earlier.body.id}`, undefined],
      ['POST', '/v2/by-name/reloads/-/hello/run', { input: { name: 'a' } }],
      ['POST', `/lb/${ids.api!.id}/echo`, { x: 2 }],
    ] as const) {
      const refused = await send(`${url}${route}`, method, body);
      expect({ url, route, status: refused.status }).toEqual({ url, route, status: 503 });
      expect(refused.body.error).toMatch(message);
    }
    expect((await send(`${url}/v2/${ids.hello!.id}/health`, 'GET')).status).toBe(200);
    const status = await send(`${url}/v2/${ids.hello!.id}/status/${earlier.body.id}`, 'GET');
    expect(status).toMatchObject({ status: 200, body: { status: 'COMPLETED', output: 'v1 b' } });
  }
  // The dev server itself still answers.
  expect((await fetch(`${base}/ping`)).status).toBe(200);
  expect((await fetch(`${base}/docs`)).status).toBe(200);
  expect(((await (await fetch(`${base}/`)).json()) as { status: string }).status).toBe('ok');
  expect(output().stderr).toMatch(
    /reload failed: The project has a problem:\n {2}app\.py:8: syntax error: [^\n]+\n {2}Every route and every run sent to the platform answer 503 with this error until a save reloads the code; \/docs and \/ping still answer\.\n/,
  );

  const reloaded = printedOn(dev, /↻ reloaded/);
  writeFileSync(path.join(project, 'app.py'), app('v2'));
  await reloaded;
  const fixed = await post(`${base}/app/runsync`, { input: { name: 'a' } });
  expect(fixed).toMatchObject({ status: 200, body: { status: 'COMPLETED', output: 'v2 a' } });
  expect((await post(`${base}/api/echo`, { x: 3 })).body).toEqual({ x: 3 });
  // And on the platform itself.
  const queued = await send(`${platformUrl}/v2/${ids.hello!.id}/run`, 'POST', { input: { name: 'c' } });
  expect(queued.status).toBe(200);
  const direct = await send(`${platformUrl}/v2/${ids.hello!.id}/runsync`, 'POST', { input: { name: 'd' } });
  expect(direct.body).toMatchObject({ status: 'COMPLETED', output: 'v2 d' });
  expect((await send(`${platformUrl}/lb/${ids.api!.id}/echo`, 'POST', { x: 4 })).body).toEqual({ x: 4 });
  expect(readFileSync(path.join(project, 'app.py'), 'utf8')).not.toContain('broken');
});

it('answers 503 naming both routes and their file after a save gives two endpoints one route, then serves the next good save', {
  timeout: 120_000,
}, async () => {
  // Two load-balanced endpoints of one file, each with its own /health: apart on the platform, one
  // route (GET /status/health) under ferry dev.
  const status = (second: string) => `from ferry import Endpoint

a = Endpoint(name="svc_a", cpu="1-2")
b = Endpoint(name="svc_b", cpu="1-2")


@a.get("/health")
def health_a():
    return "a"


@b.get("${second}")
def health_b():
    return "b"
`;
  const failed = printedOn(dev, /reload failed[^\n]*\n[^\n]*\n/);
  writeFileSync(path.join(project, 'status.py'), status('/health'));
  await failed;
  const queue = await post(`${base}/app/runsync`, { input: { name: 'a' } });
  expect(queue.status).toBe(503);
  expect(queue.body.error).toBe(
    'ferry dev could not reload the project after status.py changed: Two routes are GET /status/health: ' +
      '@a.get("/health") of status.py and @b.get("/health") of status.py. Rename one of them or its file: ' +
      "a file's one callable is at /<module>/runsync, several at /<module>/<function or method>/runsync, " +
      'a load-balanced route at /<module><path>. It does not run the code from before that change: fix the code ' +
      'and save, and ferry dev reloads it on the next save.',
  );
  expect(output().stderr).toContain('reload failed: Two routes are GET /status/health: ');
  // Fastify's own "route skipped" warning is never the story.
  expect(output().stderr).not.toContain('skipped');

  const reloaded = printedOn(dev, /↻ reloaded[^\n]*\n(?: {2}\+ [^\n]*\n){2}/);
  writeFileSync(path.join(project, 'status.py'), status('/ready'));
  await reloaded;
  expect(output().stderr).toMatch(/\+ GET {4}http:\/\/\S+\/status\/health\n/);
  expect(output().stderr).toMatch(/\+ GET {4}http:\/\/\S+\/status\/ready\n/);
  expect((await post(`${base}/app/runsync`, { input: { name: 'a' } })).body.output).toBe('v2 a');
});

it('answers 503 naming the route after a save puts one at a path ferry dev serves itself, while that page still answers; then serves the next good save', {
  timeout: 120_000,
}, async () => {
  // docs.py's GET /json is GET /docs/json under ferry dev: Swagger UI's OpenAPI document.
  const docs = (route: string) => `from ferry import Endpoint

pages = Endpoint(name="pages", cpu="1-2")


@pages.get("${route}")
def page():
    return {"page": "mine"}
`;
  const failed = printedOn(dev, /reload failed[^\n]*\n[^\n]*\n/);
  writeFileSync(path.join(project, 'docs.py'), docs('/json'));
  await failed;
  const queue = await post(`${base}/app/runsync`, { input: { name: 'a' } });
  expect(queue.status).toBe(503);
  expect(queue.body.error).toBe(
    'ferry dev could not reload the project after docs.py changed: @pages.get("/json") of docs.py is GET /docs/json, ' +
      "a path ferry dev serves itself (Swagger UI's OpenAPI document, at /docs/json). Rename the route or its " +
      'module: ferry dev serves /, /ping, /openapi.json, /docs, /docs/, /docs/json, /docs/yaml, /docs/static/*, /manage/v1/*, /v2/* and /lb/* itself. It does ' +
      'not run the code from before that change: fix the code and save, and ferry dev reloads it on the next save.',
  );
  // The page is still Swagger UI's document, and Fastify never got to skip the route.
  const page = await fetch(`${base}/docs/json`);
  expect(page.status).toBe(200);
  expect(((await page.json()) as { openapi?: string }).openapi).toMatch(/^3\./);
  expect(output().stderr).toContain('reload failed: @pages.get("/json") of docs.py is GET /docs/json, ');
  expect(output().stderr).not.toContain('skipped');

  const reloaded = printedOn(dev, /↻ reloaded[^\n]*\n(?: {2}\+ [^\n]*\n)/);
  writeFileSync(path.join(project, 'docs.py'), docs('/mine'));
  await reloaded;
  expect(await (await fetch(`${base}/docs/mine`)).json()).toEqual({ page: 'mine' });
  expect((await post(`${base}/app/runsync`, { input: { name: 'a' } })).body.output).toBe('v2 a');
});
