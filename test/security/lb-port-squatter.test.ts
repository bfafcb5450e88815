/**
 * A load-balanced worker's port taken between the pool's pick and the worker's bind by a process of
 * another user (under `ferry serve --worker-uids`, another endpoint's code; docs/security.md): an
 * HTTP server that answers 200 to everything, so it would pass the pool's /ping. It must get neither
 * the worker's secret (the probe's lbSecretHeader) nor a client's request, and the endpoint comes up
 * on another port. And a worker that has exited, its port bound by someone else since: no request
 * goes there (the pool used to forward to it until it had read the dead worker's output to its end,
 * up to a second while a process it left behind holds that output open). Needs root to run the
 * squatter as another uid and the workers as their endpoint's; skipped otherwise.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { scanProject } from '../../cli/build/scan.js';
import { killUidRange } from '../../core/adapters/local/pool.js';
import { pickChildPort } from '../../core/child-port.js';
import { recordFor } from '../support/endpoints.js';
import { startTestPlatform, type TestPlatform, testApiKey } from '../support/platform.js';
import { until } from '../support/until.js';

const isRoot = process.getuid?.() === 0;
/** The endpoint's workers run as a uid of their own, as under `ferry serve --worker-uids`. */
const workerUids = { first: 230_100, last: 230_199 };
/** nobody: a uid that is neither the platform's nor the endpoint's. */
const squatterUid = 65_534;
const projectDir = resolve('test/e2e/fixtures/workers');
const diesDir = resolve('test/security/fixtures/lb-dies');
/** Prints "listening" once bound, then each request's line and headers; answers 200 to all. */
const squatterSource = `
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        print("REQUEST", self.requestline, dict(self.headers), flush=True)
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"squatter": true}')
    do_POST = do_GET
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H)
print("listening", flush=True)
server.serve_forever()
`;

let squatter: ChildProcess;
let squatterPort: number;
let squatterOutput = '';
/** Every port the pool picked for a worker, in order. */
const picks: number[] = [];
let platform: TestPlatform;
let dataDir: string;

beforeAll(async () => {
  if (!isRoot) return;
  squatterPort = await pickChildPort();
  squatter = spawn('/usr/bin/python3', ['-c', squatterSource, String(squatterPort)], {
    uid: squatterUid,
    gid: squatterUid,
    detached: true,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  squatter.stdout!.setEncoding('utf8');
  squatter.stdout!.on('data', (data: string) => {
    squatterOutput += data;
  });
  while (!squatterOutput.includes('listening')) await once(squatter.stdout!, 'data');
  const parent = mkdtempSync(join(tmpdir(), 'ferry-squatter-'));
  // FERRY_HOME's folder must let the worker user through to FERRY_HOME-runtime beside it.
  chmodSync(parent, 0o711);
  dataDir = join(parent, 'home');
  platform = await startTestPlatform({
    dataDir,
    workers: {
      ferryPythonPath: resolve('worker-image/python'),
      workerUids,
      // The system interpreter: one under /root (pyenv) is out of the worker user's reach.
      python: '/usr/bin/python3',
      tickMs: 100,
      reconcileIntervalMs: 300,
      // The first pick is the squatter's port, as if it had bound it after the pick.
      pickPort: async () => {
        const port = picks.length === 0 ? squatterPort : await pickChildPort();
        picks.push(port);
        return port;
      },
    },
  });
  const { endpoints } = await scanProject({ projectDir });
  const lb = endpoints.find((endpoint) => endpoint.name === 'lb')!;
  await platform.db.control.putEndpoint(recordFor(lb, projectDir));
  const [dies] = (await scanProject({ projectDir: diesDir })).endpoints;
  await platform.db.control.putEndpoint(recordFor(dies!, diesDir));
  await platform.workers!.reconcile();
});

afterAll(async () => {
  if (!isRoot) return;
  await platform?.stop(false);
  killUidRange(workerUids);
  rmSync(join(dataDir, '..'), { recursive: true, force: true });
  rmSync(`${dataDir}-runtime`, { recursive: true, force: true });
  if (squatter?.pid) {
    try {
      process.kill(-squatter.pid, 'SIGKILL');
    } catch {
      // gone already
    }
  }
});

it.skipIf(!isRoot)(
  "a port another user's process holds gets no secret and no request; the worker comes up on another port",
  async () => {
    const response = await fetch(`${platform.url}/lb/lb/items/7`, {
      headers: { authorization: `Bearer ${testApiKey}`, 'x-client-note': 'for the worker only' },
    });
    const logs = platform.workers!.pool('lb')?.recentLogs() ?? [];
    expect(response.status, logs.join('\n')).toBe(200);
    // The real worker's answer, not the squatter's.
    expect(await response.json()).toEqual({ id: '7', q: null });
    expect(picks[0]).toBe(squatterPort);
    expect(picks.length).toBe(2);
    // The squatter heard nothing: no /ping with the secret, no client request.
    expect(squatterOutput).not.toContain('REQUEST');
    expect(
      logs.some((line) =>
        line.includes(`port ${squatterPort} is held by a process of another user (uid ${squatterUid})`),
      ),
      logs.join('\n'),
    ).toBe(true);
    expect(platform.supervisor.problem('lb')).toBeUndefined();
    // The worker that answered ran as the endpoint's own uid, the one its listener was checked for.
    const [pid] = platform.workers!.pool('lb')!.processGroups();
    const uid = Number(/^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]);
    expect(uid).toBeGreaterThanOrEqual(workerUids.first);
    expect(uid).toBeLessThanOrEqual(workerUids.last);
  },
);

it.skipIf(!isRoot)(
  'a worker that has exited gets no more requests, though anyone may have bound its port',
  async () => {
    const get = (path: string) =>
      fetch(`${platform.url}/lb/lb-dies${path}`, { headers: { authorization: `Bearer ${testApiKey}` } });
    expect((await get('/items/1')).status).toBe(200);
    const port = picks.at(-1)!;
    const [pid] = platform.workers!.pool('lb-dies')!.processGroups();
    await get('/die');
    // Reaped: the pool has seen it exit, and its port is free.
    await until(
      'the worker to be reaped',
      () => existsSync(`/proc/${pid}`),
      (alive) => !alive,
    );
    const heard: string[] = [];
    const squatter = createServer((request, response) => {
      heard.push(`${request.method} ${request.url}`);
      response.end('{"squatter": true}');
    });
    squatter.listen(port, '127.0.0.1');
    await once(squatter, 'listening');
    try {
      const response = await get('/items/2');
      expect(await response.text()).not.toContain('squatter');
      expect(heard).toEqual([]);
    } finally {
      squatter.close();
    }
  },
);
