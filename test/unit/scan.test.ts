/**
 * The static scanner (scan.py run by real python3 through scanProject): endpoint shapes, literal-only
 * arguments, validation with file:line, and that user code is parsed, never run.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { canonicalJson, configHash, scannerPath, scanProject } from '../../cli/build/scan.js';
import { FerryError } from '../../core/errors.js';
import { manifestEndpointSchema } from '../../core/manifest.js';

const tempDirs: string[] = [];

function project(files: Record<string, string>): string {
  const root = mkdtempSync(path.join(tmpdir(), 'scan-'));
  tempDirs.push(root);
  for (const [rel, content] of Object.entries(files)) {
    mkdirSync(path.dirname(path.join(root, rel)), { recursive: true });
    writeFileSync(path.join(root, rel), content);
  }
  return root;
}

async function scanError(files: Record<string, string>): Promise<string> {
  const error = await scanProject({ projectDir: project(files) }).catch((e: unknown) => e);
  expect(FerryError.is(error)).toBe(true);
  expect((error as FerryError).code).toBe('bad_request');
  return (error as FerryError).message;
}

afterAll(() => {
  for (const dir of tempDirs) rmSync(dir, { recursive: true, force: true });
});

describe('scanProject: endpoint shapes', () => {
  it('finds def, async def, generators and async generators with params and summaries', async () => {
    const root = project({
      'workers/__init__.py': '',
      'workers/fns.py': `from ferry import Endpoint as E

@E(name="plain", gpu="T4")
def plain(a, b=1, *args, c, **kw):
    """Add numbers.

    Longer text."""
    def inner():
        yield 1  # a nested generator does not make plain one
    return a + b

@E(name="aplain")
async def aplain(x):
    return x

@E(name="gen", cpu="4-16")
def gen(n):
    yield from range(n)

@E(name="agen", gpu=["L40S", "A10G"], workers=(1, 4), idle_timeout=120, execution_timeout_ms=5000,
   max_concurrency=4, gpu_count=2, env={"K": "v"}, dependencies=["tinydep>=1"], system_dependencies=["ffmpeg"],
   python_version="3.12")
async def agen(prompt):
    yield prompt
`,
    });
    const result = await scanProject({ projectDir: root });
    const byName = new Map(result.endpoints.map((e) => [e.name, e]));
    for (const endpoint of result.endpoints) manifestEndpointSchema.parse(endpoint);

    expect(byName.get('plain')).toMatchObject({
      kind: 'queue',
      file: 'workers/fns.py',
      module: 'workers.fns',
      target: {
        name: 'plain',
        type: 'function',
        isAsync: false,
        isGenerator: false,
        summary: 'Add numbers.',
      },
      resources: {
        gpu: ['T4'],
        workersMin: 0,
        workersMax: 1,
        idleTimeoutSec: 60,
        gpuCount: 1,
        maxConcurrency: 1,
      },
    });
    expect(byName.get('plain')!.target!.params).toEqual(['a', 'b', 'c']);
    expect(byName.get('aplain')!.target).toMatchObject({ isAsync: true, isGenerator: false });
    expect(byName.get('aplain')!.resources.gpu).toEqual(['any']);
    expect(byName.get('gen')!.target).toMatchObject({ isAsync: false, isGenerator: true });
    expect(byName.get('gen')!.resources).toMatchObject({ cpu: '4-16' });
    expect(byName.get('gen')!.resources.gpu).toBeUndefined();
    expect(byName.get('agen')!.target).toMatchObject({
      isAsync: true,
      isGenerator: true,
      params: ['prompt'],
    });
    expect(byName.get('agen')!.resources).toEqual({
      gpu: ['L40S', 'A10G'],
      gpuCount: 2,
      workersMin: 1,
      workersMax: 4,
      idleTimeoutSec: 120,
      executionTimeoutMs: 5000,
      maxConcurrency: 4,
      env: { K: 'v' },
      dependencies: ['tinydep>=1'],
      systemDependencies: ['ffmpeg'],
      pythonVersion: '3.12',
    });
    expect(result.lines.get('agen')).toEqual({ file: 'workers/fns.py', line: 20 });
    expect(result.files.find((f) => f.path === 'workers/fns.py')!.imports).toContain('ferry');
    // Recorded, but nothing installs them: the build says so where the endpoint is declared.
    expect(result.warnings).toEqual([
      expect.stringMatching(
        /^workers\/fns\.py:20: Endpoint 'agen': system_dependencies ffmpeg are not installed by Ferry: .*image=/,
      ),
    ]);
  });

  it('finds class endpoints with one or several public methods, and `import ferry` spelled out', async () => {
    const root = project({
      'models.py': `import ferry

@ferry.Endpoint(name="single", gpu="A100")
class Single:
    """One model."""
    def __init__(self):
        self.model = None
    def predict(self, x):
        """Predict."""
        return x
    def _helper(self):
        pass

@ferry.Endpoint(name="multi", cpu="2-8")
class Multi:
    async def encode(self, text):
        return text
    def stream(self, n):
        yield n
    @staticmethod
    def version():
        return 1
`,
    });
    const { endpoints } = await scanProject({ projectDir: root });
    const single = endpoints.find((e) => e.name === 'single')!;
    expect(single.target).toEqual({
      name: 'Single',
      type: 'class',
      isAsync: false,
      isGenerator: false,
      params: [],
      summary: 'One model.',
      methods: [
        {
          name: 'predict',
          isAsync: false,
          isGenerator: false,
          params: ['x'],
          inputs: [{ name: 'x', required: true }],
          summary: 'Predict.',
        },
      ],
    });
    const multi = endpoints.find((e) => e.name === 'multi')!;
    expect(multi.target!.methods).toEqual([
      {
        name: 'encode',
        isAsync: true,
        isGenerator: false,
        params: ['text'],
        inputs: [{ name: 'text', required: true }],
      },
      {
        name: 'stream',
        isAsync: false,
        isGenerator: true,
        params: ['n'],
        inputs: [{ name: 'n', required: true }],
      },
      { name: 'version', isAsync: false, isGenerator: false, params: [], inputs: [] },
    ]);
  });

  it('finds load-balanced endpoints and their routes, with path parameters', async () => {
    const root = project({
      'lb_worker.py': `from ferry import Endpoint

api = Endpoint(name="my-api", cpu="1-2", workers=(1, 5))

@api.get("/health")
def health():
    return {"ok": True}

@api.post("/process")
async def process(input_data: dict):
    """Process input."""
    return input_data

@api.put("/items/{item_id}")
def put_item(item_id, body=None):
    return {}

@api.delete(path="/items/{item_id}")
async def delete_item(item_id):
    return {}

@api.patch("/items/{item_id}")
def patch_item(item_id):
    return {}
`,
    });
    const { endpoints } = await scanProject({ projectDir: root });
    expect(endpoints).toHaveLength(1);
    const api = manifestEndpointSchema.parse(endpoints[0]);
    expect(api).toMatchObject({ kind: 'lb', name: 'my-api', variable: 'api', module: 'lb_worker' });
    expect(api.target).toBeUndefined();
    expect(api.resources).toMatchObject({ cpu: '1-2', workersMin: 1, workersMax: 5 });
    expect(api.routes!.map((r) => `${r.method} ${r.path}`)).toEqual([
      'GET /health',
      'POST /process',
      'PUT /items/{item_id}',
      'DELETE /items/{item_id}',
      'PATCH /items/{item_id}',
    ]);
    expect(api.routes![1]).toEqual({
      name: 'process',
      isAsync: true,
      isGenerator: false,
      params: ['input_data'],
      // Types and defaults from the signature, for the dev server's OpenAPI document.
      inputs: [{ name: 'input_data', required: true, type: 'object' }],
      summary: 'Process input.',
      method: 'POST',
      path: '/process',
    });
    expect(api.routes![2]!.params).toEqual(['item_id', 'body']);
    expect(api.routes![2]!.inputs).toEqual([
      { name: 'item_id', required: true },
      { name: 'body', required: false, default: null },
    ]);
    // No health_check_grace: left out, so the config hash of such endpoints does not change.
    expect(api.resources.healthCheckGraceSec).toBeUndefined();
  });

  it("records which hints ferry dev checks: plain types, None beside one, **kwargs; another module's int is left alone", async () => {
    const root = project({
      'typed.py': `import typing
import numpy as np
from typing import Optional, Union, List
from ferry import Endpoint

@Endpoint(name="typed", cpu="1-2")
def typed(a: int, b: float = 1.0, c: Optional[str] = None, d: list[int] | None = None,
          e: "dict[str, int]" = None, f: Union[bool, None] = True, g: Union[int, str] = 1,
          h: np.float = 1, i: typing.List[int] = [], j=None, k: int | str = 1, m: MyClass = None,
          *args, job=None, **extra):
    return a
`,
    });
    const { endpoints } = await scanProject({ projectDir: root });
    const target = manifestEndpointSchema.parse(endpoints[0]).target!;
    expect(target.varKeywords).toBe(true);
    expect(target.inputs).toEqual([
      { name: 'a', required: true, type: 'integer' },
      { name: 'b', required: false, type: 'number', default: 1.0 },
      { name: 'c', required: false, type: 'string', nullable: true, default: null },
      { name: 'd', required: false, type: 'array', nullable: true, default: null },
      // A typed parameter whose default is None takes None too.
      { name: 'e', required: false, type: 'object', nullable: true, default: null },
      { name: 'f', required: false, type: 'boolean', nullable: true, default: true },
      // Two types, another module's float, no hint, a class: unchecked.
      { name: 'g', required: false, default: 1 },
      { name: 'h', required: false, default: 1 },
      { name: 'i', required: false, type: 'array', default: [] },
      { name: 'j', required: false, default: null },
      { name: 'k', required: false, default: 1 },
      { name: 'm', required: false, default: null },
    ]);
  });

  it("leaves out what no input key gives: a positional-only parameter with a default, a method's self", async () => {
    const root = project({
      'pos.py': `from ferry import Endpoint

@Endpoint(name="pos", cpu="1-2")
def pos(a: int = 1, b=2, /, c: int = 3, *, d, job=None):
    return a

@Endpoint(name="model", cpu="1-2")
class Model:
    def predict(self, /, x, scale=1.0):
        return x

api = Endpoint(name="api", cpu="1-2")

@api.post("/p")
def route(n=1, /, *, job=None):
    return n
`,
    });
    const { endpoints } = await scanProject({ projectDir: root });
    const [pos, model, api] = endpoints.map((e) => manifestEndpointSchema.parse(e));
    expect(pos!.target!.params).toEqual(['c', 'd', 'job']);
    expect(pos!.target!.inputs).toEqual([
      { name: 'c', required: false, type: 'integer', default: 3 },
      { name: 'd', required: true },
    ]);
    expect(model!.target!.methods![0]!.inputs).toEqual([
      { name: 'x', required: true },
      { name: 'scale', required: false, default: 1.0 },
    ]);
    // A route is given no job, so a `job` with a default is an argument its body may send.
    expect(api!.routes![0]!.inputs).toEqual([{ name: 'job', required: false, default: null }]);
  });

  it('skips Endpoint(id=...) clients; records Endpoint(name=, image=) as a queue endpoint with its image', async () => {
    const root = project({
      'calls.py': `from ferry import Endpoint

other = Endpoint(id="abc-12345678")
vllm = Endpoint(name="vllm", image="vllm/vllm-openai:v0.6.3", gpu="L40S", workers=(0, 2), env={"MODEL": "x"})

@Endpoint(name="real", cpu="1-2")
def real():
    return other.runsync({})
`,
    });
    const result = await scanProject({ projectDir: root });
    expect(result.endpoints.map((e) => e.name)).toEqual(['vllm', 'real']);
    const vllm = manifestEndpointSchema.parse(result.endpoints[0]);
    expect(vllm).toMatchObject({ kind: 'queue', image: 'vllm/vllm-openai:v0.6.3', file: 'calls.py' });
    expect(vllm.target).toBeUndefined();
    expect(vllm.resources).toMatchObject({
      gpu: ['L40S'],
      workersMin: 0,
      workersMax: 2,
      env: { MODEL: 'x' },
    });
    // The image is configuration: a new tag changes the hash (and so rolls the workers).
    expect(vllm.configHash).not.toBe(configHash(vllm.resources));
    const retagged = await scanProject({
      projectDir: project({
        'calls.py':
          'from ferry import Endpoint\nvllm = Endpoint(name="vllm", image="vllm/vllm-openai:v0.6.4", gpu="L40S", workers=(0, 2), env={"MODEL": "x"})\n',
      }),
    });
    expect(retagged.endpoints[0]!.configHash).not.toBe(vllm.configHash);
  });

  it('refuses image endpoints without a name, with a bad reference, or with code-only parameters', async () => {
    expect(
      await scanError({ 'a.py': 'from ferry import Endpoint\nx = Endpoint(image="repo/w:1")\n' }),
    ).toContain('an image endpoint needs a name');
    expect(
      await scanError({
        'a.py': 'from ferry import Endpoint\nx = Endpoint(name="w", image="repo/w:1; rm -rf /")\n',
      }),
    ).toContain("'image' must be an image reference");
    expect(
      await scanError({
        'a.py':
          'from ferry import Endpoint\nx = Endpoint(name="w", image="repo/w:1", dependencies=["torch"])\n',
      }),
    ).toContain("'dependencies' does not apply to an image endpoint");
  });

  it('maps Flash names (GpuType, GpuGroup, CpuInstanceType, "cpu3c-1-2") through the one table, with notes', async () => {
    const root = project({
      'flash.py': `from ferry import CpuInstanceType, Endpoint, GpuGroup, GpuType

@Endpoint(name="a", gpu=GpuType.GEFORCE_RTX_4090)
def a():
    return 1

@Endpoint(name="b", gpu=[GpuGroup.AMPERE_80, "NVIDIA H100 80GB HBM3"])
def b():
    return 1

@Endpoint(name="c", cpu=CpuInstanceType.CPU3G_4_16)
def c():
    return 1

@Endpoint(name="d", cpu="cpu3c-1-2")
def d():
    return 1
`,
    });
    const result = await scanProject({ projectDir: root });
    const byName = new Map(result.endpoints.map((e) => [e.name, e.resources]));
    expect(byName.get('a')!.gpu).toEqual(['L4']);
    expect(byName.get('b')!.gpu).toEqual(['A100', 'H100']);
    expect(byName.get('c')!.cpu).toBe('4-16');
    expect(byName.get('d')!.cpu).toBe('1-2');
    expect(result.warnings.join('\n')).toContain('RTX 4090 is a consumer GPU; nearest AWS model: L4');
    const unknown = project({
      'bad.py': `from ferry import Endpoint, GpuType

@Endpoint(name="x", gpu="RTX 9999")
def x():
    return 1
`,
    });
    await expect(scanProject({ projectDir: unknown })).rejects.toThrow(
      /Flash names are accepted too: ADA_24/,
    );
  });

  it('passes health_check_grace through to the manifest, and refuses one out of 0-7200', async () => {
    const ok = await scanProject({
      projectDir: project({
        'gpu_api.py': `from ferry import Endpoint\n\napi = Endpoint(name="gen", gpu="A10G", health_check_grace=1200)\n\n@api.post("/go")\ndef go(x):\n    return x\n`,
      }),
    });
    expect(manifestEndpointSchema.parse(ok.endpoints[0]).resources.healthCheckGraceSec).toBe(1200);
    const message = await scanError({
      'gpu_api.py': `from ferry import Endpoint\n\napi = Endpoint(name="gen", health_check_grace=9000)\n\n@api.post("/go")\ndef go(x):\n    return x\n`,
    });
    expect(message).toContain('health_check_grace must be a whole number 0 to 7200');
  });

  it('treats `ep = Endpoint(...)` then `@ep` as a queue endpoint, and warns about max_concurrency on LB', async () => {
    const root = project({
      'w.py': `from ferry import Endpoint

worker = Endpoint(cpu="2-8", max_concurrency=4)

@worker
async def handle(job_input, **extra):
    return job_input

api = Endpoint(name="api", max_concurrency=3)

@api.get("/items/{item_id}")
def item(**kw):
    return kw
`,
    });
    const result = await scanProject({ projectDir: root });
    const handle = result.endpoints.find((e) => e.name === 'handle')!;
    expect(handle).toMatchObject({ kind: 'queue', target: { name: 'handle', isAsync: true } });
    expect(handle.resources.maxConcurrency).toBe(4);
    expect(handle.variable).toBeUndefined();
    expect(result.lines.get('handle')).toEqual({ file: 'w.py', line: 5 });
    const api = result.endpoints.find((e) => e.name === 'api')!;
    expect(api.resources.maxConcurrency).toBe(1);
    expect(result.warnings).toEqual([
      "w.py:9: Endpoint 'api': max_concurrency applies to queue-based endpoints only; ignored",
    ]);
  });

  it('hashes only the resources, independent of key order', async () => {
    const root = project({
      'a.py':
        'from ferry import Endpoint\n\n@Endpoint(name="a", env={"X": "1", "Y": "2"})\ndef a():\n    pass\n',
      'b.py':
        'from ferry import Endpoint\n\n@Endpoint(env={"Y": "2", "X": "1"}, name="b")\ndef b():\n    pass\n',
    });
    const { endpoints } = await scanProject({ projectDir: root });
    expect(endpoints[0]!.configHash).toBe(endpoints[1]!.configHash);
    expect(endpoints[0]!.configHash).toBe(configHash(endpoints[0]!.resources));
    expect(canonicalJson({ b: 1, a: [{ d: 2, c: undefined }] })).toBe('{"a":[{"d":2}],"b":1}');
  });

  it('skips virtualenvs, tests and test files, and ignores code that does not use ferry', async () => {
    const endpoint = 'from ferry import Endpoint\n\n@Endpoint(name="x")\ndef x():\n    pass\n';
    const root = project({
      'main.py': endpoint,
      '.venv/lib/site.py': endpoint.replace('"x"', '"venv"'),
      'tests/t.py': endpoint.replace('"x"', '"tests"'),
      'test_main.py': endpoint.replace('"x"', '"test-file"'),
      'other.py': 'class Endpoint:\n    pass\n\n@Endpoint\ndef y():\n    pass\n',
    });
    const { endpoints } = await scanProject({ projectDir: root });
    expect(endpoints.map((e) => e.name)).toEqual(['x']);
  });

  it('never imports or runs user code', async () => {
    const marker = path.join(tmpdir(), `ferry-scan-marker-${process.pid}-${Date.now()}`);
    const root = project({
      'worker.py': `import sys
open(${JSON.stringify(marker)}, "w").write("ran")
from ferry import Endpoint
raise SystemExit(7)

@Endpoint(name="still-found")
def f():
    pass
`,
      'other.py': 'import os\nos._exit(9)\n',
    });
    const { endpoints } = await scanProject({ projectDir: root });
    expect(endpoints.map((e) => e.name)).toEqual(['still-found']);
    expect(existsSync(marker)).toBe(false);
  });

  it('prints JSON when run directly as `python3 scan.py <dir>`', () => {
    const root = project({
      'w.py': 'from ferry import Endpoint\n\n@Endpoint(name="w")\ndef w():\n    pass\n',
    });
    const output = JSON.parse(execFileSync('python3', [scannerPath(), root], { encoding: 'utf8' }));
    expect(output.ok).toBe(true);
    expect(output.endpoints[0].config.name).toBe('w');
  });

  it('reports the interpreter it ran on: its version and the binary behind the command', async () => {
    const root = project({
      'w.py': 'from ferry import Endpoint\n\n@Endpoint(name="w")\ndef w():\n    pass\n',
    });
    const [version, executable] = execFileSync(
      'python3',
      ['-c', 'import sys; print("%d.%d" % sys.version_info[:2]); print(sys.executable)'],
      { encoding: 'utf8' },
    )
      .trim()
      .split('\n');
    const result = await scanProject({ projectDir: root });
    expect(result.python).toEqual({ version, executable });
    // The binary, not the command: the build starts it directly (no shim such as pyenv's again).
    expect(path.isAbsolute(result.python.executable)).toBe(true);
  });
});

describe('scanProject: errors name file:line', () => {
  it('requires literal Endpoint arguments', async () => {
    const message = await scanError({
      'w.py':
        'from ferry import Endpoint\nGPU = "A100"\n\n@Endpoint(name="w", gpu=GPU)\ndef w():\n    pass\n',
    });
    expect(message).toContain("w.py:4: Endpoint parameter 'gpu' must be a literal value");
    expect(message).toContain("the name 'GPU'");

    const unpacked = await scanError({
      'w.py': 'from ferry import Endpoint\nopts = {}\n\n@Endpoint(name="w", **opts)\ndef w():\n    pass\n',
    });
    expect(unpacked).toContain('w.py:4: Endpoint arguments must be written out');

    const route = await scanError({
      'lb.py':
        'from ferry import Endpoint\napi = Endpoint(name="a")\nP = "/x"\n\n@api.post(P)\ndef f():\n    pass\n',
    });
    expect(route).toContain('lb.py:5: route path must be a literal value');
  });

  it.each([
    ['gpu and cpu together', '@Endpoint(name="w", gpu="A100", cpu="2-8")', 'sets both gpu and cpu'],
    ['an unknown GPU', '@Endpoint(name="w", gpu="RTX9090")', "unknown gpu 'RTX9090'"],
    [
      'a GPU in the wrong case',
      '@Endpoint(name="w", gpu=["a100"])',
      "unknown gpu 'a100' (did you mean 'A100'?)",
    ],
    ['"any" with models', '@Endpoint(name="w", gpu=["any", "T4"])', 'gpu "any" cannot be combined'],
    [
      'a bad env name',
      '@Endpoint(name="w", env={"A-B": "1"})',
      "env key 'A-B' is not an environment variable name",
    ],
    [
      'an env key the platform sets',
      '@Endpoint(name="w", env={"FERRY_CALL_TOKEN": "x"})',
      'env key FERRY_CALL_TOKEN is one the platform sets in every worker itself (FERRY_*)',
    ],
    [
      'an env key of the worker protocol',
      '@Endpoint(name="w", env={"RUNPOD_AI_API_KEY": "x"})',
      'env key RUNPOD_AI_API_KEY is one the platform sets in every worker itself (RUNPOD_AI_API_KEY)',
    ],
    ['a bad cpu', '@Endpoint(name="w", cpu="lots")', 'cpu must be "<vCPUs>-<GiB>"'],
    [
      'min over max workers',
      '@Endpoint(name="w", workers=(3, 1))',
      'workers=(min, max) needs 0 <= min <= max',
    ],
    ['zero workers', '@Endpoint(name="w", workers=0)', 'workers must be at least 1'],
    [
      'a bad idle timeout',
      '@Endpoint(name="w", idle_timeout=0)',
      'idle_timeout must be a whole number 1 to 3600',
    ],
    ['an unknown parameter', '@Endpoint(name="w", colour=4)', "unknown Endpoint parameter 'colour'"],
    // Flash's parameters (and memory, which Flash users write) name what Ferry does instead.
    [
      "Flash's flashboot",
      '@Endpoint(name="w", flashboot=True)',
      "Endpoint has no parameter 'flashboot' in Ferry: Flash's FlashBoot has no Ferry counterpart; keep a worker warm with workers=(1, N)",
    ],
    [
      "Flash's datacenter",
      '@Endpoint(name="w", datacenter="EU-RO-1")',
      "Endpoint has no parameter 'datacenter' in Ferry: Ferry deploys to one AWS region",
    ],
    [
      "Flash's scaler_value",
      '@Endpoint(name="w", scaler_value=4)',
      "no parameter 'scaler_value' in Ferry: Ferry scales every endpoint on its queue",
    ],
    ['a memory size', '@Endpoint(name="w", memory=4)', 'memory is part of cpu="<vCPUs>-<GiB>"'],
    ['an unsupported python', '@Endpoint(name="w", python_version="3.9")', 'python_version must be one of'],
    ['a bad name', '@Endpoint(name="no spaces")', "Endpoint name 'no spaces' is not valid"],
    ['a bare decorator', '@Endpoint', 'call Endpoint when decorating'],
  ])('rejects %s', async (_label, decorator, expected) => {
    const message = await scanError({
      'pkg/w.py': `from ferry import Endpoint\n\n${decorator}\ndef w():\n    pass\n`,
    });
    expect(message).toContain(`pkg/w.py:3: `);
    expect(message).toContain(expected);
  });

  it('accepts every form of dependencies=[...] that pip takes, unchanged', async () => {
    const forms = [
      'pillow',
      'torch>=2.1',
      'Flash_Attn.Extra-Pkg',
      'numpy==2.*',
      'requests[socks, security]>=2.31,<3',
      'foo~=1.4.2',
      'foo===1.0.post1',
      'legacy===bar!!',
      'foo!=1.5.*, >1.0rc1, <=2.0.dev3',
      'foo (>=1.0)',
      'torch==2.1.0+cu121',
      'foo==1!2.0',
      'uvloop; sys_platform != "win32" and (python_version >= "3.8" or os_name == \'posix\')',
      "foo>=1 ; platform_machine not in 'arm64 aarch64'",
      "foo; 'linux' in sys_platform",
      'mypkg @ https://example.com/wheels/mypkg-1.0-py3-none-any.whl',
      'mypkg[gpu] @ file:///opt/wheels/mypkg-1.0-py3-none-any.whl ; python_version < "3.13"',
      'git+https://github.com/org/repo.git@v1.2#egg=repo',
      'https://example.com/wheels/mypkg-1.0-py3-none-any.whl; python_version >= "3.10"',
      './wheels/local-1.0-py3-none-any.whl',
      'vendor/local_pkg',
    ];
    const root = project({
      'w.py': `from ferry import Endpoint\n\n@Endpoint(name="w", dependencies=${JSON.stringify(forms)})\ndef w():\n    pass\n`,
    });
    const [endpoint] = (await scanProject({ projectDir: root })).endpoints;
    expect(endpoint?.resources.dependencies).toEqual(forms);
  });

  // pip meets these with a traceback (an unparsable marker) or with an error that names no file:line.
  it.each([
    ['foo>=bar!!', "'>=bar!!' is not a list of version specifiers"],
    ['not a req ;;', 'expected a package name'],
    ['torch ;;', "';' is not an environment marker"],
    ['torch; python_versoin < "3.12"', 'is not an environment marker'],
    ['mypkg @ ./local', "'./local' is not a URL"],
  ])('rejects the dependency %j, naming file:line and the string', async (dependency, reason) => {
    const message = await scanError({
      'pkg/w.py': `from ferry import Endpoint\n\n@Endpoint(name="w", dependencies=["pillow", ${JSON.stringify(dependency)}])\ndef w():\n    pass\n`,
    });
    expect(message).toContain(
      `pkg/w.py:3: Endpoint 'w': dependency '${dependency}' is not a valid requirement`,
    );
    expect(message).toContain(reason);
    expect(message).toContain('a pip requirement such as "torch>=2.1" or "pillow"');
  });

  const endpointFile = 'from ferry import Endpoint\n\n@Endpoint(name="w")\ndef w():\n    pass\n';

  it('accepts every requirements.txt line pip takes: the same rule as dependencies=[...]', async () => {
    const lines = [
      '# runtime deps',
      '',
      '--index-url https://pypi.org/simple',
      '--extra-index-url=https://example.com/simple',
      '-i https://mirror.example.com/simple',
      '-c constraints.txt',
      '--constraint constraints.txt',
      '-f ./wheels',
      '--pre',
      '--no-binary :all:',
      '-r more.txt',
      'pillow',
      'requests[socks, security]>=2.31,<3  # a trailing comment',
      'uvloop; sys_platform != "win32" and python_version >= "3.8"',
      'legacy===bar!!',
      'foo (>=1.0)',
      'torch==2.1.0+cu121 --hash=sha256:0123 --hash sha256:4567',
      'numpy==2.* \\',
      '    --hash=sha256:89ab',
      'mypkg @ https://example.com/wheels/mypkg-1.0-py3-none-any.whl ; python_version < "3.13"',
      'git+https://github.com/org/repo.git@v1.2#egg=repo',
      'https://example.com/wheels/other-1.0-py3-none-any.whl; python_version >= "3.10"',
      './wheels/local-1.0-py3-none-any.whl',
      'vendor/local_pkg',
      '/opt/wheels/abs-1.0.tar.gz',
    ];
    const root = project({
      'w.py': endpointFile,
      'requirements.txt': `${lines.join('\n')}\n`,
      'more.txt': 'tinydep==1.0\n',
      'constraints.txt': '',
    });
    expect((await scanProject({ projectDir: root })).endpoints.map((e) => e.name)).toEqual(['w']);
    // The files the build scans (scanProject's files option) check requirements.txt too.
    expect((await scanProject({ projectDir: root, files: ['w.py'] })).endpoints).toHaveLength(1);
  });

  // pip meets these with a traceback (an unparsable marker) or "Invalid requirement" and exit 1.
  it.each([
    ['torch ;;', "';' is not an environment marker"],
    ['torch; python_versoin < "3.12"', 'is not an environment marker'],
    ['foo>=bar!!', "'>=bar!!' is not a list of version specifiers"],
    ['not a requirement', 'expected a package name'],
    ['mypkg @ ./local', "'./local' is not a URL"],
  ])('refuses the requirements.txt line %j at requirements.txt:LINE', async (line, reason) => {
    const message = await scanError({
      'w.py': endpointFile,
      'requirements.txt': `# deps\npillow\n\n${line}  # why\n`,
    });
    expect(message).toContain(`requirements.txt:4: '${line}' is not a valid requirement (`);
    expect(message).toContain(reason);
    expect(message).toContain('write a pip requirement such as "torch>=2.1" or "pillow"');
  });

  it('names the included file and the first line of a continued one, with every problem at once', async () => {
    const message = await scanError({
      'w.py': endpointFile,
      'requirements.txt': 'pillow\n-r deps/more.txt\nfoo >= \\\n  1.0 ;;\n',
      'deps/more.txt': 'ok-pkg\n\nbad pkg\n',
      'bad.py': 'from ferry import Endpoint\n\n@Endpoint(name="b", gpu="nope")\ndef b():\n    pass\n',
    });
    expect(message).toContain('The project has 3 problems');
    expect(message).toContain("deps/more.txt:3: 'bad pkg' is not a valid requirement");
    expect(message).toContain("requirements.txt:3: 'foo >=   1.0 ;;' is not a valid requirement");
    expect(message).toContain("bad.py:3: Endpoint 'b': unknown gpu 'nope'");
  });

  it('rejects reserved, duplicate and parameterless routes, and an unnamed or routeless LB endpoint', async () => {
    const head = 'from ferry import Endpoint\napi = Endpoint(name="api")\n';
    expect(await scanError({ 'lb.py': `${head}\n@api.get("/ping")\ndef p():\n    pass\n` })).toContain(
      'lb.py:4: route path /ping is reserved',
    );
    expect(
      await scanError({
        'lb.py': `${head}\n@api.post("/a")\ndef a():\n    pass\n\n@api.post("/a")\ndef b():\n    pass\n`,
      }),
    ).toContain("lb.py:8: duplicate route POST /a on Endpoint 'api' (first declared at lb.py:5)");
    expect(
      await scanError({ 'lb.py': `${head}\n@api.get("/items/{item_id}")\ndef g(id):\n    pass\n` }),
    ).toContain('path parameter {item_id}');
    expect(
      await scanError({
        'lb.py':
          'from ferry import Endpoint\napi = Endpoint(cpu="1-2")\n\n@api.get("/a")\ndef a():\n    pass\n',
      }),
    ).toContain('lb.py:4: a load-balanced Endpoint needs a name');
    expect(await scanError({ 'lb.py': head })).toContain("lb.py:2: Endpoint 'api' (api) is never used");
    expect(
      await scanError({ 'lb.py': `${head}\n@api.get("/items/{id}/x{y}")\ndef g(id, y):\n    pass\n` }),
    ).toContain('a path parameter must be a whole segment');
    // A wildcard and a parameter to ferry dev's router (find-my-way), text to the runtime's.
    expect(await scanError({ 'lb.py': `${head}\n@api.get("/files/*")\ndef g():\n    pass\n` })).toContain(
      "lb.py:4: route path '/files/*' has '*', which ferry dev would read as a wildcard",
    );
    expect(
      await scanError({ 'lb.py': `${head}\n@api.get("/v1/models:list")\ndef g():\n    pass\n` }),
    ).toContain("lb.py:4: route path '/v1/models:list' has ':', which ferry dev would read as");
    expect(
      await scanError({
        'lb.py': `${head}\n@api\ndef q():\n    pass\n\n@api.get("/a")\ndef a():\n    pass\n`,
      }),
    ).toContain("lb.py:8: Endpoint 'api' already decorates 'q' (queue-based)");
  });

  it("rejects a handler no input can call: a required positional-only parameter, a route's required job", async () => {
    // A job input and a request body reach the handler by keyword only (ferry/invoke.py, ferry/lb.py).
    expect(
      await scanError({
        'q.py': 'from ferry import Endpoint\n\n@Endpoint(name="q")\ndef f(a, /, b):\n    pass\n',
      }),
    ).toContain(
      "q.py:4: f() can never be called: its parameter 'a' is positional-only (before the '/') and has no default, " +
        "and a job input or a request body is passed by keyword only; drop the '/' or give 'a' a default",
    );
    expect(
      await scanError({
        'm.py':
          'from ferry import Endpoint\n\n@Endpoint(name="m")\nclass Model:\n    def ok(self, /, x):\n        pass\n\n' +
          '    def predict(self, x, y=1, /):\n        pass\n',
      }),
    ).toContain("m.py:8: Model.predict() can never be called: its parameter 'x' is positional-only");
    expect(
      await scanError({
        's.py':
          'from ferry import Endpoint\n\n@Endpoint(name="s")\nclass S:\n    @staticmethod\n    def run(x, /):\n        pass\n',
      }),
    ).toContain("s.py:6: S.run() can never be called: its parameter 'x' is positional-only");
    const head = 'from ferry import Endpoint\napi = Endpoint(name="api")\n';
    expect(await scanError({ 'lb.py': `${head}\n@api.post("/a")\ndef a(x, /):\n    pass\n` })).toContain(
      "lb.py:5: a() can never be called: its parameter 'x' is positional-only",
    );
    // Only a queue job is given `job`: a route's required one would make every request a 400.
    expect(await scanError({ 'lb.py': `${head}\n@api.post("/a")\ndef a(x, *, job):\n    pass\n` })).toContain(
      "lb.py:5: a() can never be called: it takes a keyword-only 'job' with no default, and only a queue-based " +
        'handler is given its job; a load-balanced route gets none (progress_update is for queue jobs): ' +
        "drop 'job' or give it a default",
    );
  });

  it('rejects the same endpoint name in two files, naming both', async () => {
    const endpoint = 'from ferry import Endpoint\n\n@Endpoint(name="same")\ndef f():\n    pass\n';
    const message = await scanError({ 'a.py': endpoint, 'b.py': endpoint });
    expect(message).toContain("b.py:3: endpoint name 'same' is already used at a.py:3");
  });

  it('rejects endpoints that are not at the top level of a module', async () => {
    const message = await scanError({
      'w.py':
        'from ferry import Endpoint\n\ndef make():\n    @Endpoint(name="inner")\n    def inner():\n        pass\n',
    });
    expect(message).toContain(
      "w.py:5: 'inner' is decorated as an endpoint but is not defined at the top level",
    );
  });

  it('reports syntax errors with file:line, and every problem at once', async () => {
    const message = await scanError({
      'broken.py': 'from ferry import Endpoint\n\ndef f(:\n    pass\n',
      'bad.py': 'from ferry import Endpoint\n\n@Endpoint(name="b", gpu="nope")\ndef b():\n    pass\n',
    });
    expect(message).toContain('The project has 2 problems');
    expect(message).toMatch(/broken\.py:3: syntax error: .* \(parsed with Python 3\.\d+\)/);
    expect(message).toContain("bad.py:3: Endpoint 'b': unknown gpu 'nope'");
  });
});
