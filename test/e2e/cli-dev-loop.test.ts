/**
 * The `ferry dev` loop through the real binary and real Python workers: declared dependencies in a
 * venv under .ferry/ (pip progress on the terminal, --no-deps), handler print() lines on the
 * terminal, 400 JSON for a body that is not JSON, one route per public method of a class (named as
 * Flash names it; the class kept where two callables of the file share a name), typed
 * OpenAPI at /openapi.json, reload after atomic saves (write + rename) and new files, and a worker
 * that cannot import answering the request at once with its error; an image endpoint listed with
 * why it does not run, and calls to it answered at once; `ferry logs` and `ferry console` in the
 * project folder, and in a folder below it, reaching dev's platform, as a Python script run there
 * does (no FERRY_API_URL, no FERRY_PORT: dev's lock says where it listens); GET /ping.
 */
import { type ChildProcess, spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rawExchange } from '../support/raw-http.js';
import { writeWheel } from '../support/wheels.js';
import { CliSandbox, postJson as post, repoRoot, stopChild } from './cli-support.js';

const sandbox = new CliSandbox();
let project = '';
let wheels = '';
let base = '';
let dev: ChildProcess;
let output: () => { stdout: string; stderr: string };

const app = `from ferry import Endpoint


@Endpoint(name="hello", cpu="1-2")
def hello(name: str, times: int = 2, loud: bool = False):
    """Repeat a name."""
    print(f"handler saw {name}")
    return {"text": name * times}


@Endpoint(name="model", cpu="1-2")
class Model:
    def predict(self, x: int):
        return {"pred": x * 2}

    def embed(self, text: str):
        return {"len": len(text)}


@Endpoint(name="withdep", cpu="1-2", dependencies=["tinydep-dev"])
def withdep():
    import tinydep_dev

    return tinydep_dev.VALUE
`;

const broken = `import module_that_is_not_installed_xyz
from ferry import Endpoint


@Endpoint(name="broken", cpu="1-2")
def broken():
    return 1
`;

// Two classes with a method of the same name, and a function of that name too.
const clash = `from ferry import Endpoint


@Endpoint(name="clash_a", cpu="1-2")
class A:
    def predict(self):
        return "A.predict"

    def embed(self):
        return "A.embed"


@Endpoint(name="clash_b", cpu="1-2")
class B:
    def predict(self):
        return "B.predict"

    def score(self):
        return "B.score"


@Endpoint(name="clash_fn", cpu="1-2")
def predict():
    return "predict"
`;

function makeProject(name: string): string {
  const dir = path.join(sandbox.root, name);
  mkdirSync(dir, { recursive: true });
  writeFileSync(path.join(dir, 'app.py'), app);
  writeFileSync(path.join(dir, 'broken.py'), broken);
  writeFileSync(
    path.join(dir, 'brokenlb.py'),
    'import lb_module_that_is_not_installed_xyz\nfrom ferry import Endpoint\n\napi = Endpoint(name="brokenlb", cpu="1-2")\n\n\n@api.post("/go")\ndef go(x: int = 1):\n    return x\n',
  );
  writeFileSync(path.join(dir, 'clash.py'), clash);
  writeFileSync(
    path.join(dir, 'models.py'),
    'from ferry import Endpoint\n\nvllm = Endpoint(name="vllm", image="vllm/vllm-openai:v0.6.3", gpu="L40S")\n',
  );
  writeFileSync(path.join(dir, '.env'), 'FERRY_API_KEY=fy_dev_loop\n');
  return dir;
}

async function startDev(dir: string, extra: string[] = []) {
  return sandbox.start(
    ['dev', '--host', '127.0.0.1', '--port', '0', ...extra],
    /Ferry dev server at (http:\/\/\S+)/,
    {
      cwd: dir,
      // No package index here: pip installs from a folder of wheels.
      env: { PIP_NO_INDEX: '1', PIP_FIND_LINKS: wheels },
    },
  );
}

const get = async (url: string) => {
  const response = await fetch(url);
  return { status: response.status, body: (await response.json()) as Record<string, any> };
};

/** Probes every 100 ms for up to a minute: a reload takes a fraction of a second, a 500 ms poll waited most of it out. */
async function until<T>(what: string, probe: () => Promise<T | undefined>, tries = 600): Promise<T> {
  for (let i = 0; i < tries; i++) {
    // The server restarts on a reload: a refused or reset connection means "not yet".
    const found = await probe().catch(() => undefined);
    if (found !== undefined) return found;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`gave up waiting for ${what}:\n${output().stderr}`);
}

beforeAll(async () => {
  wheels = path.join(sandbox.root, 'wheels');
  mkdirSync(wheels);
  writeWheel(wheels, { name: 'tinydep-dev', code: 'VALUE = "from the venv"\n' });
  // A stand-in numpy, for a Python that has none (pip takes a real one it finds instead).
  writeWheel(wheels, { name: 'numpy', code: 'VALUE = "stand-in numpy"\n' });
  project = makeProject('loop');
  const started = await startDev(project);
  dev = started.child;
  output = started.output;
  base = started.match[1]!;
});
afterAll(() => sandbox.cleanup());

describe('ferry dev loop', { timeout: 120_000 }, () => {
  it('prints handler print() lines on the terminal, prefixed by endpoint', async () => {
    const result = await post(`${base}/app/hello/runsync`, { input: { name: 'bob' } });
    expect(result.body).toMatchObject({ status: 'COMPLETED', output: { text: 'bobbob' } });
    await until('the print line', async () =>
      // `ferry dev` prints each job's log lines as `[<endpoint> <job id>] text` (docs/observability.md).
      /\[hello [^\]]+-u1\] handler saw bob/.test(output().stderr) ? true : undefined,
    );
  });

  it("`ferry logs` and `ferry console` in the project folder, or below it, find ferry dev's platform", async () => {
    // Its platform keeps its state in the project's .ferry, not in FERRY_HOME; the key is the .env's.
    const logs = await sandbox.run(['logs', 'hello'], { cwd: project });
    expect(logs.code, logs.stderr).toBe(0);
    expect(logs.stdout).toMatch(/\[live-hello [^\]]+-u1\] handler saw bob/);
    const consoleUrl = /Console at (\S+)/.exec(output().stdout)![1];
    const console = await sandbox.run(['console'], { cwd: project });
    expect(console.code, console.stderr).toBe(0);
    expect(console.stdout.trim()).toBe(consoleUrl);
    // From a folder below the project's, the same dev (and the key in the project's .env).
    const below = path.join(project, 'pkg', 'deeper');
    mkdirSync(below, { recursive: true });
    const logsBelow = await sandbox.run(['logs', 'hello'], { cwd: below });
    expect(logsBelow.code, logsBelow.stderr).toBe(0);
    expect(logsBelow.stdout).toMatch(/\[live-hello [^\]]+-u1\] handler saw bob/);
    const consoleBelow = await sandbox.run(['console'], { cwd: below });
    expect(consoleBelow.code, consoleBelow.stderr).toBe(0);
    expect(consoleBelow.stdout.trim()).toBe(consoleUrl);
    // Elsewhere nothing serves it: the hint says where to run it.
    const elsewhere = await sandbox.run(['logs', 'hello'], { cwd: sandbox.root });
    expect(elsewhere.code).toBe(1);
    expect(elsewhere.stderr).toContain('Nothing serves these endpoints right now');
    expect(elsewhere.stderr).toContain("for `ferry dev`'s endpoints, run this in the folder where it runs");
  });

  it('a Python script in the project, or below it, calls the running dev wherever it listens', () => {
    // The dev server took a free port (not 8888), and its platform another: the client reads
    // .ferry/dev.json, as `ferry logs` does.
    const below = path.join(project, 'pkg', 'script');
    mkdirSync(below, { recursive: true });
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      PYTHONPATH: path.join(repoRoot, 'worker-image', 'python'),
      FERRY_API_KEY: 'fy_dev_loop',
    };
    delete env.FERRY_API_URL;
    delete env.FERRY_PORT;
    const script =
      'from ferry.client import Platform\n' +
      'platform = Platform.from_environ()\n' +
      'print(platform.request("GET", "/v2/by-name/loop/-/hello")[1]["name"])\n';
    const result = spawnSync('python3', ['-c', script], {
      cwd: below,
      env,
      encoding: 'utf8',
      timeout: 30_000,
    });
    expect(result.stderr).toBe('');
    expect(result.stdout.trim()).toBe('live-hello');
  });

  it("answers GET /ping as Flash's dev server does", async () => {
    expect(await get(`${base}/ping`)).toEqual({ status: 200, body: { status: 'healthy' } });
    const spec = (await (await fetch(`${base}/openapi.json`)).json()) as any;
    expect(spec.paths['/ping'].get.tags).toEqual(['dev server']);
  });

  it('answers 400 JSON to a body that is not JSON', async () => {
    const result = await post(`${base}/app/hello/runsync`, '{"input": ');
    expect(result.status).toBe(400);
    expect(result.body.error).toEqual(expect.any(String));
  });

  it('answers a malformed request, an undecodable URL and an unknown path in the {"error"} shape', async () => {
    const port = Number(new URL(base).port);
    const malformed = await rawExchange(port, Buffer.from('GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n'));
    expect(malformed.status).toBe(400);
    expect(Object.keys(malformed.body as object)).toEqual(['error']);
    // The platform's v2 API, passed through, refuses a URL that does not decode as the platform does.
    const undecodable = await get(`${base}/v2/app/status/%E0%A4%A`);
    expect(undecodable.status).toBe(400);
    expect(Object.keys(undecodable.body)).toEqual(['error']);
    // Elsewhere a path is read as the load-balanced runtime reads it (docs/api.md): decoded as far as
    // it decodes, then no route.
    const undecodedRoute = await get(`${base}/app/%E0%A4%A`);
    expect(undecodedRoute).toEqual({ status: 404, body: { error: 'No route for GET /app/%E0%A4%A' } });
    const unknown = await get(`${base}/nothing/here`);
    expect(unknown.status).toBe(404);
    expect(unknown.body).toEqual({ error: 'No route for GET /nothing/here' });
  });

  it("gives a class one route per public method, named as Flash's: by the method, beside the file's functions", async () => {
    const predict = await post(`${base}/app/predict/runsync`, { input: { x: 21 } });
    expect(predict.body.output).toEqual({ pred: 42 });
    const embed = await post(`${base}/app/embed/runsync`, { input: { text: 'abc' } });
    expect(embed.body.output).toEqual({ len: 3 });
    expect(output().stdout).toContain(`  POST   ${base}/app/predict/runsync\n`);
  });

  it('keeps the class in the routes of methods another callable of the file shares a name with, and says so on start', async () => {
    for (const cls of ['A', 'B']) {
      expect(output().stdout).toContain(
        `  POST   ${base}/clash/${cls}/predict/runsync  (more than one callable of clash.py is named predict: ${cls}.predict keeps its class in the route)\n`,
      );
      const result = await post(`${base}/clash/${cls}/predict/runsync`, { input: {} });
      expect(result.body.output).toBe(`${cls}.predict`);
    }
    // The function of that name, and a method whose name is the file's only one, keep the plain route.
    expect(output().stdout).toContain(`  POST   ${base}/clash/predict/runsync\n`);
    expect((await post(`${base}/clash/predict/runsync`, { input: {} })).body.output).toBe('predict');
    expect((await post(`${base}/clash/score/runsync`, { input: {} })).body.output).toBe('B.score');
  });

  it('serves typed OpenAPI schemas from the type hints at /openapi.json', async () => {
    const spec = (await (await fetch(`${base}/openapi.json`)).json()) as any;
    const input =
      spec.paths['/app/hello/runsync'].post.requestBody.content['application/json'].schema.properties.input;
    expect(input.required).toEqual(['name']);
    expect(input.properties).toEqual({
      name: { type: 'string' },
      times: { type: 'integer', default: 2 },
      loud: { type: 'boolean', default: false },
    });
    expect(spec.paths['/app/predict/runsync']).toBeDefined();
  });

  it('installs declared dependencies into a venv under .ferry/venvs, with pip output shown', async () => {
    const result = await post(`${base}/app/withdep/runsync`, { input: {} });
    expect(result.body).toMatchObject({ status: 'COMPLETED', output: 'from the venv' });
    expect(output().stderr).toContain('Installing dependencies of withdep into .ferry/venvs/');
    expect(output().stderr).toMatch(/\[pip withdep\] .*tinydep/);
  });

  it('numpy (which the base images ship) is installed into the venv when your Python has none; torch is not', async () => {
    // Deployed, the image's copy is used; under dev no image stands behind the worker, and leaving
    // numpy out failed the job at `import numpy` although the endpoint asked for it. Here python3 is
    // a fresh venv without numpy. Without pip too (ensurepip took most of this test's time): ferry dev
    // never runs this Python's pip, the venv it makes for the endpoint gets its own.
    const bare = path.join(sandbox.root, 'bare-python');
    expect(spawnSync('python3', ['-m', 'venv', '--without-pip', bare]).status).toBe(0);
    const dir = path.join(sandbox.root, 'numpy-project');
    mkdirSync(dir);
    writeFileSync(path.join(dir, '.env'), 'FERRY_API_KEY=fy_dev_loop\n');
    writeFileSync(
      path.join(dir, 'np.py'),
      'from ferry import Endpoint\n\n\n@Endpoint(name="np", cpu="1-2", dependencies=["numpy", "torch"])\n' +
        'def np():\n    import numpy\n\n    return "numpy imported"\n',
    );
    const started = await sandbox.start(
      ['dev', '--host', '127.0.0.1', '--port', '0'],
      /Ferry dev server at (http:\/\/\S+)/,
      {
        cwd: dir,
        env: {
          PIP_NO_INDEX: '1',
          PIP_FIND_LINKS: wheels,
          PATH: `${path.join(bare, 'bin')}${path.delimiter}${process.env.PATH}`,
        },
      },
    );
    const result = await post(`${started.match[1]}/np/runsync`, { input: {} });
    const stderr = started.output().stderr;
    expect(result.body, stderr).toMatchObject({ status: 'COMPLETED', output: 'numpy imported' });
    expect(stderr).toContain(
      "note: python3 has no numpy, which the base images ship: ferry dev installs it for the endpoints that ask for it (deployed, the image's copy is used)",
    );
    expect(stderr).toMatch(/Installing dependencies of np into \.ferry\/venvs\/\w+: numpy\n/);
    expect(stderr).not.toContain('"numpy" is not installed');
    expect(stderr).toContain('the base image provides torch');
    expect(await stopChild(started.child)).toBe(0);
  });

  it('a worker that cannot import fails the request at once with its error, also on the terminal', async () => {
    const result = await post(`${base}/broken/runsync`, { input: {} });
    expect(result.status).toBe(502);
    expect(result.body.error).toContain('The worker of broken failed to start');
    expect(result.body.error).toContain('module_that_is_not_installed_xyz');
    expect(output().stderr).toContain('The worker of broken failed to start');
    // Under dev a save reloads the code: that is the fix to tell, naming the endpoint as written.
    expect(output().stderr).toMatch(
      /error: endpoint broken is failing: its worker could not start \(exit code \d\); fix the code and save it: ferry dev reloads it/,
    );
    expect(output().stderr).not.toContain('redeploy');
    // Answered at once from then on too, until the code changes.
    const again = await post(`${base}/broken/runsync`, { input: {} });
    expect(again.body.error).toContain('module_that_is_not_installed_xyz');
  });

  it('lists an image endpoint with why it does not run; calls to it fail at once with that (400)', async () => {
    const why = "Endpoint 'vllm' runs the image vllm/vllm-openai:v0.6.3: ferry dev runs Python processes";
    expect(output().stderr).toContain(`note: ${why}`);
    const route = await post(`${base}/models/runsync`, { input: { prompt: 'x' } });
    expect(route.status).toBe(400);
    expect(route.body.error).toContain(why);
    expect(route.body.error).toContain('ferry deploy --provider aws');
    // A script's call by name (docs/python.md) gets the same answer, not a job that never runs.
    const response = await fetch(`${base}/v2/by-name/loop/-/vllm/runsync`, {
      method: 'POST',
      headers: { authorization: 'Bearer fy_dev_loop', 'content-type': 'application/json' },
      body: JSON.stringify({ input: {} }),
    });
    expect(response.status).toBe(400);
    expect(((await response.json()) as { error: string }).error).toContain(why);
  });

  it('a load-balanced worker that cannot import fails its request at once the same way', async () => {
    const result = await post(`${base}/brokenlb/go`, { x: 2 });
    expect(result.status).toBe(502);
    expect(result.body.error).toContain('The worker of brokenlb failed to start');
    expect(result.body.error).toContain('lb_module_that_is_not_installed_xyz');
    // The supervisor holds the endpoint failing: the next request is answered without a new worker.
    const again = await post(`${base}/brokenlb/go`, { x: 3 });
    expect(again.body.error).toContain('lb_module_that_is_not_installed_xyz');
  });

  it('reloads after atomic saves (write a temp file, rename it over) again and again, and on new files', async () => {
    const file = path.join(project, 'app.py');
    for (const word of ['first', 'second']) {
      const temp = path.join(project, `.app.py.${word}.tmp`);
      writeFileSync(
        temp,
        readFileSync(file, 'utf8').replace(/return \{"text": [^}]*\}/, `return {"text": "${word}"}`),
      );
      renameSync(temp, file);
      await until(`the ${word} save`, async () => {
        const result = await post(`${base}/app/hello/runsync`, { input: { name: 'x' } });
        return result.body.output?.text === word ? true : undefined;
      });
    }
    writeFileSync(
      path.join(project, 'added.py'),
      'from ferry import Endpoint\n\n\n@Endpoint(name="added", cpu="1-2")\ndef added():\n    return "new file"\n',
    );
    await until('the new file', async () => {
      const response = await fetch(`${base}/added/runsync`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ input: {} }),
      });
      if (response.status === 404) return undefined;
      return ((await response.json()) as any).output === 'new file' ? true : undefined;
    });
    // The reload lists the routes it added, as the start listed the first ones.
    await until('the new routes on the terminal', async () =>
      output().stderr.includes(`  + POST   ${base}/added/runsync\n`) ? true : undefined,
    );
  });

  it('keeps its port open through a reload while a request is in flight, which finishes', async () => {
    writeFileSync(
      path.join(project, 'slow.py'),
      'import time\nfrom ferry import Endpoint\n\n\n@Endpoint(name="slow", cpu="1-2")\ndef slow(seconds: float):\n    print("slow started", flush=True)\n    time.sleep(seconds)\n    return "slept"\n',
    );
    await until('the slow endpoint', async () => {
      const response = await fetch(`${base}/slow/runsync`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ input: { seconds: 0 } }),
      });
      return response.status === 200 ? true : undefined;
    });
    const reloadsBefore = output().stderr.split('↻ reloaded').length;
    let settled = false;
    const inFlight = post(`${base}/slow/runsync`, { input: { seconds: 8 } }).finally(() => {
      settled = true;
    });
    await until('the slow job to start', async () =>
      output().stderr.split('slow started').length >= 3 ? true : undefined,
    );
    const file = path.join(project, 'app.py');
    writeFileSync(file, `${readFileSync(file, 'utf8')}\n# edited while a request runs\n`);
    // Before, the reload closed the port and waited for the request: refused until it ended.
    await until('the reload', async () =>
      output().stderr.split('↻ reloaded').length > reloadsBefore ? true : undefined,
    );
    const during = await fetch(`${base}/openapi.json`);
    expect(during.status).toBe(200);
    expect(settled).toBe(false);
    expect((await inFlight).body).toMatchObject({ status: 'COMPLETED', output: 'slept' });
  });

  it('--no-deps leaves dependencies out: the worker runs in your Python as it is', async () => {
    expect(await stopChild(dev)).toBe(0);
    const other = makeProject('nodeps');
    const started = await startDev(other, ['--no-deps']);
    output = started.output;
    const result = await post(`${started.match[1]}/app/withdep/runsync`, { input: {} });
    expect(result.body.status).toBe('FAILED');
    expect(result.body.error).toContain('tinydep_dev');
    expect(started.output().stderr).not.toContain('Installing dependencies');
    expect(started.output().stderr).toContain('--no-deps');
    expect(await stopChild(started.child)).toBe(0);
  });
});
