/**
 * `ferry deploy`, `env`, `app`, `undeploy`, `keys` through the real binary on the local provider
 * (FERRY_HOME in a temp folder), and one deploy → curl of the printed runsync line against the
 * `ferry serve --detach` that deploy starts (real worker pools and Python workers).
 */
import { execFile, execFileSync, spawnSync } from 'node:child_process';
import {
  appendFileSync,
  existsSync,
  mkdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  curlExample,
  imageNotPreviewed,
  planEndpoints,
  previewArtifactMount,
  previewPlan,
  resolveEnvironment,
} from '../../cli/deploy/plan.js';
import type { Manifest } from '../../core/manifest.js';
import { baseImageFor } from '../../worker-image/images.js';
import { sampleResources } from '../infra/fixtures.js';
import { writeWheel } from '../support/wheels.js';
import { CliSandbox, deployStages, repoRoot, stopChild } from './cli-support.js';

const run = promisify(execFile);

describe('deploy and the control records (--no-serve)', () => {
  const sandbox = new CliSandbox();
  let project = '';
  const json = async (args: string[]) => {
    const result = await sandbox.run([...args, '--json'], { cwd: project });
    expect(result.code, `${args.join(' ')}: ${result.stderr}`).toBe(0);
    return JSON.parse(result.stdout);
  };

  beforeAll(async () => {
    expect((await sandbox.run(['init', 'shop'])).code).toBe(0);
    project = path.join(sandbox.root, 'shop');
  });
  afterAll(() => sandbox.cleanup());

  it('creates app and production env, records every endpoint, and prints the five stages', async () => {
    const result = await sandbox.run(['deploy', '--no-serve'], { cwd: project });
    expect(result.code, result.stderr).toBe(0);
    for (const stage of deployStages) expect(result.stderr).toContain(stage);
    expect(result.stderr).toContain("app 'shop' not found: creating it with environment 'production'");
    expect(result.stderr).toContain('excluded torch: base image');
    expect(result.stdout).toMatch(
      /cpu_worker\s+http:\/\/127\.0\.0\.1:\d+\/v2\/cpu-worker-[0-9a-f]{8}\s+\(queue\)/,
    );
    expect(result.stdout).toMatch(/lb_worker\s+http:\/\/\S+\/lb\/lb-worker-[0-9a-f]{8}/);
    expect(result.stdout).toContain('POST /process');
    expect(result.stdout).toContain('GET /health');
    // No FERRY_API_KEY here: the line reads the key from FERRY_HOME/api-key where it is pasted.
    expect(result.stdout).toMatch(
      /curl -X POST \S+\/runsync -H "Authorization: Bearer \$\(cat '[^']+\/api-key'\)"/,
    );
    expect(result.stdout).not.toContain(readFileSync(path.join(sandbox.home, 'api-key'), 'utf8').trim());

    const apps = await json(['app', 'list']);
    expect(apps).toEqual([
      expect.objectContaining({ name: 'shop', environments: ['production'], endpoints: 3 }),
    ]);
    const envs = await json(['env', 'list']);
    expect(envs).toEqual([expect.objectContaining({ name: 'production', endpoints: 3 })]);
    const env = await json(['env', 'get', 'production']);
    expect(env.endpoints.map((e: { name: string }) => e.name).sort()).toEqual([
      'cpu_worker',
      'gpu_worker',
      'lb_worker',
    ]);
    expect(env.fingerprint).toMatch(/^[0-9a-f]{64}$/);
    const app = await json(['app', 'get', 'shop']);
    expect(app.environments[0].endpoints).toHaveLength(3);
  });

  it('a source change updates the fingerprint in place (same ids); a dropped file removes its endpoint', async () => {
    const before = await json(['env', 'get', 'production']);
    appendFileSync(path.join(project, 'cpu_worker.py'), '\n# changed\n');
    const again = await sandbox.run(['deploy', '--no-serve', '--json'], { cwd: project });
    expect(again.code, again.stderr).toBe(0);
    const result = JSON.parse(again.stdout);
    expect(result.fingerprint).not.toBe(before.fingerprint);
    expect(result.endpoints.every((e: { change: string }) => e.change === 'updated')).toBe(true);
    const after = await json(['env', 'get', 'production']);
    const ids = (x: { endpoints: Array<{ id: string }> }) => x.endpoints.map((e) => e.id).sort();
    expect(ids(after)).toEqual(ids(before));
    expect(after.endpoints.every((e: { fingerprint: string }) => e.fingerprint === result.fingerprint)).toBe(
      true,
    );

    rmSync(path.join(project, 'lb_worker.py'));
    const third = await sandbox.run(['deploy', '--no-serve'], { cwd: project });
    expect(third.code).toBe(0);
    expect(third.stderr).toMatch(/- removed lb_worker \(lb-worker-[0-9a-f]{8}\): no longer in the project/);
    expect((await json(['undeploy', 'list'])).map((e: { name: string }) => e.name).sort()).toEqual([
      'cpu_worker',
      'gpu_worker',
    ]);
  });

  it('undeploy NAME, list and --all (typed DELETE ALL)', async () => {
    const one = await sandbox.run(['undeploy', 'gpu_worker', '--force'], { cwd: project });
    expect(one.code, one.stderr).toBe(0);
    expect((await json(['undeploy', 'list'])).map((e: { name: string }) => e.name)).toEqual(['cpu_worker']);
    // A name that names nothing: the user's to fix, exit 2 with where to look.
    const missing = await sandbox.run(['undeploy', 'gpu_worker', '--force'], { cwd: project });
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain('See `ferry undeploy list`');
    const declined = await sandbox.run(['undeploy', '--all'], { cwd: project, input: 'delete all\n' });
    expect(declined.code).toBe(1);
    expect(declined.stderr).toContain('Type DELETE ALL to confirm');
    expect(await json(['undeploy', 'list'])).toHaveLength(1);
    // --all run in the project: only its app, even with another app deployed beside it.
    const otherApp = await sandbox.run(['deploy', '--no-serve', '--app', 'neighbour'], { cwd: project });
    expect(otherApp.code, otherApp.stderr).toBe(0);
    const all = await sandbox.run(['undeploy', '--all'], { cwd: project, input: 'DELETE ALL\n' });
    expect(all.code, all.stderr).toBe(0);
    expect(all.stdout).toContain('✓ Removed 1 endpoint\n');
    expect(all.stderr).toContain(`of app '${path.basename(project)}'`);
    const left = await json(['undeploy', 'list']);
    expect(left.length).toBeGreaterThan(0);
    expect(new Set(left.map((e: { app: string }) => e.app))).toEqual(new Set(['neighbour']));
    const everywhere = await sandbox.run(['undeploy', '--all', '--everywhere', '--force'], { cwd: project });
    expect(everywhere.code, everywhere.stderr).toBe(0);
    expect(await json(['undeploy', 'list'])).toEqual([]);
    // Nothing left: with --json, the empty list of what was removed, not a sentence on stdout.
    expect(await json(['undeploy', '--all', '--force'])).toEqual([]);
    expect((await sandbox.run(['app', 'delete', 'neighbour', '--force'], { cwd: project })).code).toBe(0);
  });

  it('env delete and app delete remove their endpoints first', async () => {
    expect((await sandbox.run(['deploy', '--no-serve', '--env', 'staging'], { cwd: project })).code).toBe(0);
    expect((await sandbox.run(['deploy', '--no-serve', '--env', 'production'], { cwd: project })).code).toBe(
      0,
    );
    expect(await json(['undeploy', 'list'])).toHaveLength(4);
    // Secrets are the user's: deleting an environment keeps them, and says so.
    for (const env of ['staging', 'production']) {
      const set = await sandbox.run(['secrets', 'set', 'HF_TOKEN', '--env', env], {
        cwd: project,
        input: 'v\n',
      });
      expect(set.code, set.stderr).toBe(0);
    }
    const envDelete = await sandbox.run(['env', 'delete', 'staging', '--force'], { cwd: project });
    expect(envDelete.code, envDelete.stderr).toBe(0);
    expect(envDelete.stdout).toContain('(2 endpoints removed)');
    expect(envDelete.stderr).toContain(
      "kept 1 secret of shop/staging (HF_TOKEN): a new 'staging' environment gets them; remove one with `ferry secrets delete NAME --app shop --env staging`",
    );
    expect((await sandbox.run(['secrets', 'list', '--env', 'staging'], { cwd: project })).stdout).toBe(
      'HF_TOKEN\n',
    );
    const left = await json(['undeploy', 'list']);
    expect(left.map((e: { env: string }) => e.env)).toEqual(['production', 'production']);
    expect((await json(['env', 'list'])).map((e: { name: string }) => e.name)).toEqual(['production']);
    const appDelete = await sandbox.run(['app', 'delete', 'shop', '--force'], { cwd: project });
    expect(appDelete.code, appDelete.stderr).toBe(0);
    expect(appDelete.stderr).toContain('kept 1 secret of shop/production (HF_TOKEN)');
    expect(await json(['undeploy', 'list'])).toEqual([]);
    expect(await json(['app', 'list'])).toEqual([]);
    const gone = await sandbox.run(['app', 'get', 'shop'], { cwd: project });
    expect(gone.code).toBe(2);
    expect(gone.stderr).toContain("No app named 'shop'\n  hint: See the apps with `ferry app list`.");
  });

  it("warns before anything is written when an endpoint asks for numpy, the local provider's python3 has none, and pip cannot install it", async () => {
    // The build leaves numpy to the base images, and the local provider runs none: python3 here is a
    // fresh venv without numpy, as a user's Python may be, and without pip, so the build cannot put
    // numpy into the artifact either (as without a package index): the deploy goes on, and says how.
    const bare = path.join(sandbox.root, 'bare-python');
    expect(spawnSync('python3', ['-m', 'venv', '--without-pip', bare]).status).toBe(0);
    const dir = path.join(sandbox.root, 'numpy-app');
    mkdirSync(dir);
    writeFileSync(
      path.join(dir, 'np.py'),
      'from ferry import Endpoint\n\n\n@Endpoint(name="np", cpu="1-2", dependencies=["numpy", "torch"])\n' +
        'def np():\n    import numpy\n\n    return 1\n',
    );
    const result = await sandbox.run(['deploy', '--no-serve'], {
      cwd: dir,
      env: { PATH: `${path.join(bare, 'bin')}${path.delimiter}${process.env.PATH}` },
    });
    expect(result.code, result.stderr).toBe(0);
    expect(result.stderr).toMatch(
      /warning: could not install numpy into the artifact for the local workers \(.*No module named pip\); building without it/,
    );
    expect(result.stderr).toContain('excluded numpy: base image');
    const warning =
      "warning: endpoint 'np' asks for numpy, which the base images ship; the local provider runs workers on python3, which has no numpy: install it there (python3 -m pip install numpy), or their jobs fail at `import numpy`";
    expect(result.stderr).toContain(warning);
    expect(result.stderr.indexOf(warning)).toBeLessThan(
      result.stderr.indexOf('[2/5] Environment resolution'),
    );
    // The torch stack is that Python's to have or lack: no warning for it.
    expect(result.stderr).not.toContain('asks for torch, which the base images ship');
  });

  it('keys create (printed once), list, revoke', async () => {
    const created = await sandbox.run(['keys', 'create', '--name', 'ci']);
    expect(created.code).toBe(0);
    expect(created.stdout.trim()).toMatch(/^fy_\S{20,}$/);
    const list = await json(['keys', 'list']);
    const key = list.find((k: { name: string }) => k.name === 'ci');
    expect(key).toBeDefined();
    expect(JSON.stringify(list)).not.toContain(created.stdout.trim());
    expect((await sandbox.run(['keys', 'revoke', key.id])).code).toBe(0);
    expect((await json(['keys', 'list'])).some((k: { id: string }) => k.id === key.id)).toBe(false);
    expect((await sandbox.run(['keys', 'revoke', key.id])).code).toBe(2);
  });

  it('revoking the default key removes FERRY_HOME/api-key, so the next deploy makes a new key, not the revoked one', async () => {
    expect((await sandbox.run(['deploy', '--no-serve'], { cwd: project })).code).toBe(0);
    const file = path.join(sandbox.home, 'api-key');
    const revokedKey = readFileSync(file, 'utf8').trim();
    const isDefault = (k: { name: string }) => k.name === 'default (FERRY_HOME/api-key)';
    const revoked = (await json(['keys', 'list'])).filter(isDefault);
    expect(revoked).toHaveLength(1);
    const revoke = await sandbox.run(['keys', 'revoke', revoked[0].id]);
    expect(revoke.code, revoke.stderr).toBe(0);
    expect(revoke.stderr).toContain(`removed ${file}, which held it`);
    expect(existsSync(file)).toBe(false);
    // Before, the file kept the key and the next deploy (or serve) registered it again.
    expect((await sandbox.run(['deploy', '--no-serve'], { cwd: project })).code).toBe(0);
    expect(readFileSync(file, 'utf8').trim()).not.toBe(revokedKey);
    const now = (await json(['keys', 'list'])).filter(isDefault);
    expect(now.map((k: { id: string }) => k.id)).not.toContain(revoked[0].id);
    expect(now).toHaveLength(1);
  });
});

// This machine has the docker CLI and no engine; where an engine answers, these paths cannot be seen.
const dockerEngineUp = spawnSync('docker', ['info'], { stdio: 'ignore', timeout: 15_000 }).status === 0;

describe('deploy --preview without a Docker engine', () => {
  const sandbox = new CliSandbox();
  let project = '';
  beforeAll(async () => {
    expect((await sandbox.run(['init', 'peek'])).code).toBe(0);
    project = path.join(sandbox.root, 'peek');
  });
  afterAll(() => sandbox.cleanup());

  /**
   * A PATH with python3 (the build needs it) and a stand-in docker that logs its argv to
   * FAKE_DOCKER_LOG and succeeds, or fails on the command containing FAKE_DOCKER_FAIL: the engine side
   * (images, containers) is not on this machine; the order of the commands and the cleanup are.
   */
  const fakeDockerBin = (): string => {
    const bin = path.join(sandbox.root, 'bin-fake-docker');
    if (existsSync(bin)) return bin;
    mkdirSync(bin);
    writeFileSync(
      path.join(bin, 'docker'),
      [
        '#!/bin/sh',
        `printf '%s\\n' "$*" >> "$FAKE_DOCKER_LOG"`,
        'if [ -n "$FAKE_DOCKER_FAIL" ]; then case "$*" in *"$FAKE_DOCKER_FAIL"*) exit 1 ;; esac; fi',
        'exit 0',
        '',
      ].join('\n'),
      { mode: 0o755 },
    );
    const python = execFileSync('python3', ['-c', 'import sys; print(sys.executable)'], { encoding: 'utf8' });
    symlinkSync(python.trim(), path.join(bin, 'python3'));
    return bin;
  };

  it.skipIf(dockerEngineUp)(
    'builds, prints the docker commands, then stops with exit 1: `docker info` failed',
    async () => {
      const result = await sandbox.run(['deploy', '--preview'], { cwd: project });
      expect(result.code, result.stderr).toBe(1);
      expect(result.stderr).toContain('[1/2] Build');
      expect(result.stderr).toMatch(
        /Error: --preview needs a running Docker engine, and `docker info` failed: \S/,
      );
      expect(result.stderr).toContain('hint: Install Docker and start its engine');
      expect(result.stderr).not.toMatch(/\n\s+at /); // no stack trace
      const lines = result.stdout.trim().split('\n');
      expect(lines[0]).toMatch(/^docker network create ferry-preview-\d+$/);
      expect(lines).toHaveLength(4); // the network, then one container per endpoint of the template
      expect(result.stdout).toContain(
        `${path.join(project, '.ferry', 'artifact.tar.gz')}:/ferry/artifact.tar.gz:ro`,
      );
      expect(result.stdout).toMatch(/FERRY_MODE=standalone .*ferry\/worker-base-(cpu|gpu):\S+-py3\.1\d/);
      expect(result.stdout).toContain('FERRY_MODE=lb');
      // Nothing ran: no preview was reported as running.
      expect(result.stderr).not.toContain('Preview running');
    },
  );

  it('says so when the docker command is missing altogether', async () => {
    // A PATH with python3 only (the build needs it); node itself is started by absolute path.
    const bin = path.join(sandbox.root, 'bin-without-docker');
    mkdirSync(bin);
    const python = execFileSync('python3', ['-c', 'import sys; print(sys.executable)'], { encoding: 'utf8' });
    symlinkSync(python.trim(), path.join(bin, 'python3'));
    const result = await sandbox.run(['deploy', '--preview'], { cwd: project, env: { PATH: bin } });
    expect(result.code, result.stderr).toBe(1);
    expect(result.stderr).toContain(
      'Error: --preview needs Docker, and the docker command was not found on PATH',
    );
    expect(result.stdout).toMatch(/^docker network create /);
  });

  it('starts every container with a working docker, prints URL and curl per endpoint, and Ctrl+C cleans up', async () => {
    const bin = fakeDockerBin();
    const log = path.join(sandbox.root, 'docker.log');
    const started = await sandbox.start(['deploy', '--preview'], /docker network create/, {
      cwd: project,
      env: { PATH: bin, FAKE_DOCKER_LOG: log },
    });
    const deadline = Date.now() + 30_000;
    while (!started.output().stderr.includes('Ctrl+C stops it.') && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 100));
    const { stderr } = started.output();
    expect(stderr).toMatch(/cpu_worker \(queue\) → http:\/\/127\.0\.0\.1:8000/);
    expect(stderr).toContain(
      `curl -X POST http://127.0.0.1:8000/runsync -H 'Content-Type: application/json' -d '{"input":{"input_data":{"message":"hello"}}}'`,
    );
    expect(stderr).toMatch(/lb_worker \(lb\) → http:\/\/127\.0\.0\.1:8002/);
    expect(stderr).toContain(
      `curl -X POST http://127.0.0.1:8002/process -H 'Content-Type: application/json' -d '{"input_data":{"message":"hello"}}'`,
    );
    const beforeStop = readFileSync(log, 'utf8').trim().split('\n');
    expect(beforeStop[0]).toBe('info');
    expect(beforeStop.slice(1).map((line) => line.split(' ').slice(0, 2).join(' '))).toEqual([
      'network create',
      'run -d',
      'run -d',
      'run -d',
    ]);

    expect(await stopChild(started.child)).toBe(0);
    const network = /docker network create (\S+)/.exec(started.output().stdout)![1]!;
    expect(readFileSync(log, 'utf8').trim().split('\n').slice(beforeStop.length)).toEqual([
      'rm -f ferry-preview-lb_worker',
      'rm -f ferry-preview-gpu_worker',
      'rm -f ferry-preview-cpu_worker',
      `network rm ${network}`,
    ]);
    expect(started.output().stderr).toContain('✓ Preview stopped');
  });

  it('a container that fails to start stops the preview: exit 1, the failed command named, all cleaned up', async () => {
    const log = path.join(sandbox.root, 'docker-fail.log');
    const result = await sandbox.run(['deploy', '--preview'], {
      cwd: project,
      env: {
        PATH: fakeDockerBin(),
        FAKE_DOCKER_LOG: log,
        FAKE_DOCKER_FAIL: '--name ferry-preview-gpu_worker',
      },
    });
    expect(result.code, result.stderr).toBe(1);
    expect(result.stderr).toMatch(/Error: Preview failed at: docker run -d --name ferry-preview-gpu_worker /);
    expect(result.stderr).toMatch(
      /hint: If ferry\/worker-base-gpu:\S+ is not built yet, build it from the Ferry repository root: docker build --platform linux\/amd64 --file worker-image\/Dockerfile\.gpu /,
    );
    const calls = readFileSync(log, 'utf8').trim().split('\n');
    expect(calls.filter((c) => c.startsWith('run '))).toHaveLength(2); // lb_worker never started
    expect(calls.slice(-4)).toEqual([
      'rm -f ferry-preview-lb_worker',
      'rm -f ferry-preview-gpu_worker',
      'rm -f ferry-preview-cpu_worker',
      expect.stringMatching(/^network rm ferry-preview-\d+$/),
    ]);
  });

  it('lists an image endpoint as not started (with why), and starts no container for it', async () => {
    // Last in this block: the project keeps the image endpoint from here on.
    writeFileSync(
      path.join(project, 'models.py'),
      'from ferry import Endpoint\n\nvllm = Endpoint(name="vllm", image="vllm/vllm-openai:v0.6.3", gpu="L40S")\n',
    );
    const log = path.join(sandbox.root, 'docker-image.log');
    const started = await sandbox.start(['deploy', '--preview'], /docker network create/, {
      cwd: project,
      env: { PATH: fakeDockerBin(), FAKE_DOCKER_LOG: log },
    });
    const deadline = Date.now() + 30_000;
    while (!started.output().stderr.includes('Ctrl+C stops it.') && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 100));
    const { stderr } = started.output();
    expect(stderr).toContain(`vllm [vllm/vllm-openai:v0.6.3]: ${imageNotPreviewed}`);
    expect(stderr).toContain('vllm (image endpoint): not started');
    expect(stderr).toMatch(/cpu_worker \(queue\) → http:\/\/127\.0\.0\.1:8000/);
    const runs = readFileSync(log, 'utf8')
      .split('\n')
      .filter((line) => line.startsWith('run '));
    expect(runs).toHaveLength(3);
    expect(runs.join('\n')).not.toContain('vllm');
    expect(await stopChild(started.child)).toBe(0);
  });
});

describe('what a deploy starts and loads', () => {
  const sandbox = new CliSandbox();
  let project = '';
  beforeAll(async () => {
    expect((await sandbox.run(['init', 'lean'])).code).toBe(0);
    project = path.join(sandbox.root, 'lean');
  });
  afterAll(() => sandbox.cleanup());

  it('starts python3 once (the scan); the import check runs the binary it reported, with no probe', async () => {
    // A PATH whose python3 and python3.<local minor> log each start, then run the real interpreter:
    // each start through a command (pyenv's shim, say) costs its own resolution, paid once per deploy.
    const bin = path.join(sandbox.root, 'bin-logged-python');
    mkdirSync(bin);
    const [version, real] = execFileSync(
      'python3',
      ['-c', 'import sys; print("%d.%d" % sys.version_info[:2]); print(sys.executable)'],
      { encoding: 'utf8' },
    )
      .trim()
      .split('\n') as [string, string];
    for (const name of ['python3', `python${version}`])
      writeFileSync(
        path.join(bin, name),
        `#!/bin/sh\nprintf '${name} %s\\n' "$*" >> "$PYTHON_START_LOG"\nexec '${real}' "$@"\n`,
        { mode: 0o755 },
      );
    const log = path.join(sandbox.root, 'python-starts.log');
    const result = await sandbox.run(['deploy', '--no-serve'], {
      cwd: project,
      env: { PATH: bin, PYTHON_START_LOG: log },
    });
    expect(result.code, result.stderr).toBe(0);
    expect(result.stderr).toContain('✓ artifact');
    expect(readFileSync(log, 'utf8').trim().split('\n')).toEqual([
      expect.stringMatching(/^python3 \S*scan\.py /),
    ]);
  });

  it('loads no module of the commands it does not run (servers, dev server, AWS SDK)', async () => {
    // A resolve hook (node:module register) logs every module URL the process resolves.
    const hooks = path.join(sandbox.root, 'log-modules.mjs');
    writeFileSync(
      hooks,
      [
        "import { appendFileSync } from 'node:fs';",
        'export async function resolve(specifier, context, next) {',
        '  const result = await next(specifier, context);',
        "  appendFileSync(process.env.MODULE_LOG, result.url + '\\n');",
        '  return result;',
        '}',
        '',
      ].join('\n'),
    );
    const register = path.join(sandbox.root, 'register-hooks.mjs');
    writeFileSync(
      register,
      `import { register } from 'node:module';\nregister(${JSON.stringify(pathToFileURL(hooks).href)});\n`,
    );
    const log = path.join(sandbox.root, 'modules.log');
    const result = await sandbox.run(['deploy', '--no-serve', '--app', 'lean-modules'], {
      cwd: project,
      env: { NODE_OPTIONS: `--import ${pathToFileURL(register).href}`, MODULE_LOG: log },
    });
    expect(result.code, result.stderr).toBe(0);
    const loaded = readFileSync(log, 'utf8');
    // What a deploy uses is there (the hook saw the process)...
    expect(loaded).toMatch(/node_modules\/better-sqlite3\//);
    expect(loaded).toMatch(/node_modules\/tar\//);
    // ...and what only `serve`, `dev`, `console` or `--provider aws` use is not.
    for (const unused of [
      'node_modules/fastify/',
      'node_modules/@fastify/',
      'node_modules/chokidar/',
      'node_modules/@aws-sdk/',
      'node_modules/aws-cdk-lib/',
      '/core/adapters/local/platform.js',
    ])
      expect(loaded, unused).not.toContain(unused);
  });
});

describe('deploy → the printed curl line works against the served platform', () => {
  const sandbox = new CliSandbox();
  afterAll(() => sandbox.cleanup());

  it('starts ferry serve --detach, and the runsync curl completes the job', async () => {
    expect((await sandbox.run(['init', 'live'])).code).toBe(0);
    const project = path.join(sandbox.root, 'live');
    const apiKey = 'fy_cli_e2e_key';
    const deploy = await sandbox.run(['deploy'], { cwd: project, env: { FERRY_API_KEY: apiKey } });
    expect(deploy.code, deploy.stderr).toBe(0);
    expect(deploy.stderr).toContain('starting `ferry serve --detach`');
    const curl = deploy.stdout.split('\n').find((line) => line.trim().startsWith('curl '));
    expect(curl).toBeDefined();
    const { stdout } = await run('sh', ['-c', `${curl!.trim()} -s --max-time 60`], {
      env: { ...process.env, FERRY_API_KEY: apiKey },
    });
    const job = JSON.parse(stdout);
    expect(job.status).toBe('COMPLETED');
    expect(job.output.message).toBe('Hello from the CPU worker: hello');
    // The LB endpoint too, with the key (docs/api.md#authentication).
    const lbUrl = /lb_worker\s+(\S+)/.exec(deploy.stdout)![1]!;
    const response = await fetch(`${lbUrl}/process`, {
      method: 'POST',
      headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ input_data: { n: 1 } }),
    });
    expect(response.status).toBe(200);
    expect(await response.json()).toMatchObject({ status: 'success', echo: { n: 1 } });
    const anonymous = await fetch(`${lbUrl}/health`);
    expect(anonymous.status).toBe(401);
    // Listings name the port the platform serves on (FERRY_PORT is 0 here: it picked a free one),
    // not the port FERRY_PORT or the default would give.
    const listed = await sandbox.run(['undeploy', 'list', '--json'], { cwd: project });
    expect(listed.code, listed.stderr).toBe(0);
    const lbListed = (JSON.parse(listed.stdout) as { name: string; url: string }[]).find(
      (e) => e.name === 'lb_worker',
    );
    expect(lbListed?.url).toBe(lbUrl);

    // Without FERRY_API_KEY in the environment the key is FERRY_HOME/api-key's: the printed line,
    // pasted into a shell that has no FERRY_API_KEY either, still answers (it was a 401).
    const keyless = await sandbox.run(['deploy'], { cwd: project });
    expect(keyless.code, keyless.stderr).toBe(0);
    const keylessCurl = keyless.stdout.split('\n').find((line) => line.trim().startsWith('curl '));
    expect(keylessCurl).toContain(`$(cat '${path.join(sandbox.home, 'api-key')}')`);
    const shellEnv: NodeJS.ProcessEnv = { ...process.env };
    delete shellEnv.FERRY_API_KEY;
    const keylessRun = await run(
      'bash',
      ['-c', `${keylessCurl!.trim()} -s --max-time 60 -w '\n%{http_code}'`],
      { env: shellEnv },
    );
    const [body, status] = keylessRun.stdout.trim().split('\n') as [string, string];
    expect(status).toBe('200');
    expect(JSON.parse(body)).toMatchObject({
      status: 'COMPLETED',
      output: { message: 'Hello from the CPU worker: hello' },
    });
  });
});

describe('local deploy of an endpoint that asks for numpy', () => {
  const sandbox = new CliSandbox();
  let bare = '';
  let wheels = '';
  // One key for the sandbox's serve, which the first deploy starts and the later ones use.
  const apiKey = 'fy_cli_numpy_key';
  beforeAll(() => {
    // python3 here is a fresh venv without numpy, as a user's Python may be.
    bare = path.join(sandbox.root, 'bare-python');
    expect(spawnSync('python3', ['-m', 'venv', bare]).status).toBe(0);
    // No package index here: pip installs a stand-in numpy from a folder of wheels.
    wheels = path.join(sandbox.root, 'wheels');
    mkdirSync(wheels);
    writeWheel(wheels, { name: 'numpy', code: 'VALUE = "stand-in numpy"\n' });
    // pandas' shape: a wheel that needs numpy and imports it.
    writeWheel(wheels, {
      name: 'pandaslike',
      requires: ['numpy'],
      code: 'import numpy\n\nVALUE = "pandaslike on " + numpy.VALUE\n',
    });
    // A package pip cannot install here: a dependency no wheel provides.
    writeWheel(wheels, { name: 'brokenpkg', requires: ['nosuchdep'] });
  });
  // No package index, and the venv's python3 first on PATH.
  const offline = () => ({
    FERRY_API_KEY: apiKey,
    PIP_NO_INDEX: '1',
    PIP_FIND_LINKS: wheels,
    PATH: `${path.join(bare, 'bin')}${path.delimiter}${process.env.PATH}`,
  });
  afterAll(() => sandbox.cleanup());

  it('onto a python3 without numpy installs it into the artifact, and the job that imports it completes', async () => {
    // The build leaves numpy to the base images, and the local provider runs none: the jobs failed
    // at `import numpy`.
    const dir = path.join(sandbox.root, 'numpy-served');
    mkdirSync(dir);
    writeFileSync(
      path.join(dir, 'np.py'),
      'from ferry import Endpoint\n\n\n@Endpoint(name="np", cpu="1-2", dependencies=["numpy", "torch"])\n' +
        'def np():\n    import numpy\n\n    return numpy.VALUE\n',
    );
    const deploy = await sandbox.run(['deploy', '--json'], { cwd: dir, env: offline() });
    expect(deploy.code, deploy.stderr).toBe(0);
    expect(deploy.stderr).toContain(
      "note: endpoint 'np' asks for numpy, which the base images ship; python3, which runs the local workers, has none: it is installed into the artifact (on AWS the image's copy is used)",
    );
    expect(deploy.stderr).toContain('installed numpy==1.0.0');
    expect(deploy.stderr).not.toContain('excluded numpy');
    expect(deploy.stderr).not.toContain('python3 -m pip install numpy');
    // The torch stack stays that Python's to have or lack: gigabytes, never installed for it.
    expect(deploy.stderr).toContain('excluded torch: base image');
    expect(deploy.stderr).toContain(
      'endpoint \'np\' asks for "torch", which the base images ship: the local workers use the torch of python3, which runs them, if it has one, and "torch" is not installed',
    );
    expect(deploy.stderr).not.toContain("the base image's version is used");
    const url = (JSON.parse(deploy.stdout) as { endpoints: Array<{ url: string }> }).endpoints[0]!.url;
    const response = await fetch(`${url}/runsync`, {
      method: 'POST',
      headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ input: {} }),
    });
    expect(await response.json()).toMatchObject({ status: 'COMPLETED', output: 'stand-in numpy' });
  });

  it('onto a python3 without numpy installs the numpy a requirement pulls in, and the job that imports that requirement completes', async () => {
    // numpy asked for by no one but pandaslike's wheel was left out of the artifact as pulled in by
    // another package: every job failed at pandaslike's `import numpy`.
    const dir = path.join(sandbox.root, 'pandaslike-served');
    mkdirSync(dir);
    writeFileSync(path.join(dir, 'requirements.txt'), 'pandaslike\n');
    writeFileSync(
      path.join(dir, 'frames.py'),
      'from ferry import Endpoint\n\n\n@Endpoint(name="frames", cpu="1-2")\n' +
        'def frames():\n    import pandaslike\n\n    return pandaslike.VALUE\n',
    );
    const deploy = await sandbox.run(['deploy', '--json'], { cwd: dir, env: offline() });
    expect(deploy.code, deploy.stderr).toBe(0);
    expect(deploy.stderr).toContain(
      "note: pandaslike needs numpy, which the base images ship; python3, which runs the local workers, has none: it is installed into the artifact (on AWS the image's copy is used)",
    );
    expect(deploy.stderr).toContain('installed numpy==1.0.0');
    expect(deploy.stderr).not.toContain('excluded numpy');
    expect(deploy.stderr).not.toContain('python3 -m pip install numpy');
    const url = (JSON.parse(deploy.stdout) as { endpoints: Array<{ url: string }> }).endpoints[0]!.url;
    const response = await fetch(`${url}/runsync`, {
      method: 'POST',
      headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ input: {} }),
    });
    expect(await response.json()).toMatchObject({
      status: 'COMPLETED',
      output: 'pandaslike on stand-in numpy',
    });

    // `ferry build` (as a deploy to AWS, whose image brings numpy) still leaves it out, on the same
    // python3 without numpy.
    const built = await sandbox.run(['build'], { cwd: dir, env: offline() });
    expect(built.code, built.stderr).toBe(0);
    expect(built.stderr).toContain('excluded numpy: base image (pulled in by another package)');
    expect(built.stderr).not.toContain('installed numpy');
    expect(built.stderr).not.toContain('into the artifact');
  });

  it('reports the error of another requirement pip cannot install at once, with pip run once', async () => {
    // pip failed on brokenpkg; the build then ran pip again without numpy, which failed the same way.
    const dir = path.join(sandbox.root, 'broken-requirement');
    mkdirSync(dir);
    writeFileSync(path.join(dir, 'requirements.txt'), 'brokenpkg\n');
    writeFileSync(
      path.join(dir, 'np.py'),
      'from ferry import Endpoint\n\n\n@Endpoint(name="np", cpu="1-2", dependencies=["numpy"])\n' +
        'def np():\n    import numpy\n\n    return numpy.VALUE\n',
    );
    const result = await sandbox.run(['deploy', '--no-serve'], { cwd: dir, env: offline() });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('pip could not install the dependencies');
    expect(result.stderr).toContain('No matching distribution found for nosuchdep');
    expect(result.stderr).not.toContain('could not install numpy into the artifact');
    // Each pip run prints its steps (the build's dependency-progress events): brokenpkg is processed once.
    expect(result.stderr.match(/pip: Processing \S*brokenpkg-1\.0\.0/g)).toHaveLength(1);
  });

  it("onto a python3 with numpy uses that Python's, and says so rather than name a base image", async () => {
    const withNumpy = path.join(sandbox.root, 'numpy-python');
    expect(spawnSync('python3', ['-m', 'venv', withNumpy]).status).toBe(0);
    const pip = spawnSync(
      path.join(withNumpy, 'bin', 'python'),
      ['-m', 'pip', 'install', '--no-index', '--find-links', wheels, 'numpy'],
      { encoding: 'utf8' },
    );
    expect(pip.status, pip.stderr).toBe(0);
    const dir = path.join(sandbox.root, 'numpy-found');
    mkdirSync(dir);
    writeFileSync(
      path.join(dir, 'np.py'),
      'from ferry import Endpoint\n\n\n@Endpoint(name="np", cpu="1-2", dependencies=["numpy>=2"])\n' +
        'def np():\n    import numpy\n\n    return numpy.VALUE\n',
    );
    const result = await sandbox.run(['deploy', '--no-serve'], {
      cwd: dir,
      env: { PATH: `${path.join(withNumpy, 'bin')}${path.delimiter}${process.env.PATH}` },
    });
    expect(result.code, result.stderr).toBe(0);
    expect(result.stderr).toContain(
      'warning: endpoint \'np\' asks for "numpy>=2", which the base images ship: the local workers use the numpy of python3, which runs them, and "numpy>=2" is not installed',
    );
    // Said for AWS and `ferry build` (test/e2e/build.test.ts), where an image stands behind the workers.
    expect(result.stderr).not.toContain("the base image's version is used");
    expect(result.stderr).toContain('excluded numpy: base image');
    expect(result.stderr).not.toContain('into the artifact');
  });
});

describe('deploy decisions (pure)', () => {
  it('resolves the environment by the rules of docs/architecture.md#the-cli', () => {
    expect(resolveEnvironment({ appExists: false, envNames: [], requested: undefined })).toEqual({
      env: 'production',
      createApp: true,
      createEnv: true,
    });
    expect(resolveEnvironment({ appExists: false, envNames: [], requested: 'dev' }).env).toBe('dev');
    expect(resolveEnvironment({ appExists: true, envNames: ['a'], requested: 'b' })).toEqual({
      env: 'b',
      createApp: false,
      createEnv: true,
    });
    expect(resolveEnvironment({ appExists: true, envNames: ['only'], requested: undefined }).createEnv).toBe(
      false,
    );
    expect(() => resolveEnvironment({ appExists: true, envNames: ['b', 'a'], requested: undefined })).toThrow(
      'Multiple environments found: a, b',
    );
  });

  const manifest: Manifest = {
    version: 1,
    app: 'demo',
    pythonVersion: '3.11',
    generatedAt: '2026-01-01T00:00:00.000Z',
    sourceFingerprint: 'f1',
    dependencies: { installed: [], excluded: [] },
    endpoints: [
      {
        name: 'gen',
        kind: 'queue',
        file: 'gen.py',
        module: 'gen',
        target: { name: 'gen', isAsync: false, isGenerator: false, params: ['prompt'], type: 'function' },
        resources: { ...sampleResources, gpu: ['A100'], workersMax: 1, env: { MODE: 'x' } },
        configHash: 'h1',
      },
      {
        name: 'api',
        kind: 'lb',
        file: 'api.py',
        module: 'api',
        variable: 'api',
        routes: [
          {
            name: 'p',
            method: 'POST',
            path: '/process',
            isAsync: false,
            isGenerator: false,
            params: ['input_data'],
          },
        ],
        resources: { ...sampleResources, cpu: '1-2', workersMax: 1 },
        configHash: 'h2',
      },
    ],
  };

  it('plans create, update (fingerprint or config), unchanged and remove, keeping ids', () => {
    const first = planEndpoints({
      existing: [],
      endpoints: manifest.endpoints,
      app: 'demo',
      env: 'p',
      fingerprint: 'f1',
      pythonVersion: '3.11',
      nowMs: 1,
    });
    expect(first.create.map((r) => r.name)).toEqual(['gen', 'api']);
    const same = planEndpoints({
      existing: first.create,
      endpoints: manifest.endpoints,
      app: 'demo',
      env: 'p',
      fingerprint: 'f1',
      pythonVersion: '3.11',
      nowMs: 2,
    });
    expect(same.unchanged).toHaveLength(2);
    const changed = planEndpoints({
      existing: first.create,
      endpoints: manifest.endpoints.slice(0, 1),
      app: 'demo',
      env: 'p',
      fingerprint: 'f2',
      pythonVersion: '3.11',
      nowMs: 3,
    });
    expect(changed.update.map((r) => r.id)).toEqual([first.create[0]!.id]);
    expect(changed.remove.map((r) => r.name)).toEqual(['api']);
    const reconfigured = planEndpoints({
      existing: first.create,
      endpoints: [{ ...manifest.endpoints[0]!, configHash: 'h9' }, manifest.endpoints[1]!],
      app: 'demo',
      env: 'p',
      fingerprint: 'f1',
      pythonVersion: '3.11',
      nowMs: 4,
    });
    expect(reconfigured.update.map((r) => r.name)).toEqual(['gen']);
    const curl = curlExample(first.create, (r) => `http://h/v2/${r.id}`);
    expect(curl).toBe(
      `curl -X POST http://h/v2/${first.create[0]!.id}/runsync -H "Authorization: Bearer $FERRY_API_KEY" -H 'Content-Type: application/json' -d '{"input":{"prompt":"world"}}'`,
    );
    expect(curlExample(first.create.slice(1), (r) => `http://h/lb/${r.id}`)).toContain('/process');
  });

  it('--preview plans the worker images: entrypoint mount, runtime env, image tags, ports, cleanup', () => {
    const plan = previewPlan({
      manifest,
      artifactPath: '/p/.ferry/artifact.tar.gz',
      runId: '42',
      version: '0.1.0',
    });
    expect(plan.commands[0]).toEqual(['docker', 'network', 'create', 'ferry-preview-42']);
    expect(plan.commands).toHaveLength(3);
    // The queue endpoint: standalone mode (it serves its own /runsync), on the GPU base image.
    expect(plan.commands[1]).toEqual([
      'docker',
      'run',
      '-d',
      '--name',
      'ferry-preview-gen',
      '--network',
      'ferry-preview-42',
      '--network-alias',
      'gen',
      '--gpus',
      '1',
      '-v',
      '/p/.ferry/artifact.tar.gz:/ferry/artifact.tar.gz:ro',
      '-e',
      'FERRY_HOST=0.0.0.0',
      '-e',
      'FERRY_MODE=standalone',
      '-e',
      'FERRY_MODULE=gen',
      '-e',
      'FERRY_PORT=8080',
      '-e',
      'FERRY_TARGET=gen',
      '-e',
      'MODE=x',
      '-e',
      'RUNPOD_ENDPOINT_ID=preview-gen',
      '-p',
      '127.0.0.1:8000:8080',
      baseImageFor('gpu', '0.1.0', '3.11'),
    ]);
    expect(plan.commands[1]!.at(-1)).toBe('ferry/worker-base-gpu:0.1.0-py3.11');
    // The load-balanced endpoint: lb mode with its variable, on the CPU base image, no --gpus.
    const api = plan.commands[2]!;
    expect(api).not.toContain('--gpus');
    expect(api).toEqual(expect.arrayContaining(['FERRY_MODE=lb', 'FERRY_VARIABLE=api', 'FERRY_MODULE=api']));
    expect(api).not.toContain('FERRY_TARGET=gen');
    expect(api.slice(-3)).toEqual(['-p', '127.0.0.1:8001:8080', 'ferry/worker-base-cpu:0.1.0-py3.11']);
    expect(plan.endpoints).toEqual([
      {
        name: 'gen',
        kind: 'queue',
        image: 'ferry/worker-base-gpu:0.1.0-py3.11',
        hostPort: 8000,
        url: 'http://127.0.0.1:8000',
        curl: `curl -X POST http://127.0.0.1:8000/runsync -H 'Content-Type: application/json' -d '{"input":{"prompt":"world"}}'`,
      },
      {
        name: 'api',
        kind: 'lb',
        image: 'ferry/worker-base-cpu:0.1.0-py3.11',
        hostPort: 8001,
        url: 'http://127.0.0.1:8001',
        curl: `curl -X POST http://127.0.0.1:8001/process -H 'Content-Type: application/json' -d '{"input_data":{"message":"hello"}}'`,
      },
    ]);
    // Containers first (last started, first removed), then the network they were attached to.
    expect(plan.cleanup).toEqual([
      ['docker', 'rm', '-f', 'ferry-preview-api'],
      ['docker', 'rm', '-f', 'ferry-preview-gen'],
      ['docker', 'network', 'rm', 'ferry-preview-42'],
    ]);
    // The version and Python version are checked by the image table, not pasted into a tag.
    expect(() => previewPlan({ manifest, artifactPath: '/a', runId: '1', version: 'not a tag' })).toThrow(
      'Image version must be a docker tag',
    );
  });

  it('--preview lists an image endpoint as not started, and runs the others as before', () => {
    const image = 'vllm/vllm-openai:v0.6.3';
    const withImage: Manifest = {
      ...manifest,
      endpoints: [
        ...manifest.endpoints,
        { ...manifest.endpoints[0]!, name: 'vllm', target: undefined, image, configHash: 'h3' },
      ],
    };
    const plan = previewPlan({ manifest: withImage, artifactPath: '/a', runId: '1', version: '0.1.0' });
    expect(plan.notRun).toEqual([{ name: 'vllm', image, reason: imageNotPreviewed }]);
    expect(plan.notRun[0]!.reason).toContain('ferry deploy --provider aws');
    expect(plan.endpoints.map((e) => e.name)).toEqual(['gen', 'api']);
    expect(plan.commands).toHaveLength(3);
    expect(JSON.stringify(plan.commands)).not.toContain('vllm');
  });

  it('--preview sets only FERRY_* variables that entrypoint.sh or ferry/config.py read', () => {
    const readers = ['worker-image/entrypoint.sh', 'worker-image/python/ferry/config.py']
      .map((file) => readFileSync(path.join(repoRoot, file), 'utf8'))
      .join('\n');
    const plan = previewPlan({ manifest, artifactPath: '/p/a.tar.gz', runId: '1', version: '0.1.0' });
    const names = new Set<string>();
    for (const command of plan.commands)
      command.forEach((arg, index) => {
        if (command[index - 1] === '-e' && arg.startsWith('FERRY_'))
          names.add(arg.slice(0, arg.indexOf('=')));
      });
    expect([...names].sort()).toEqual([
      'FERRY_HOST',
      'FERRY_MODE',
      'FERRY_MODULE',
      'FERRY_PORT',
      'FERRY_TARGET',
      'FERRY_VARIABLE',
    ]);
    for (const name of names)
      expect(readers, `${name} is read by nobody`).toMatch(new RegExp(`["{]${name}\\b`));
    // The modes it asks for exist in the runtime, and the mount is where the entrypoint looks.
    expect(readers).toContain('"standalone"');
    expect(readers).toContain('"lb"');
    expect(readers).toContain(`FERRY_ARTIFACT_PATH:-${previewArtifactMount}`);
    expect(readFileSync(path.join(repoRoot, 'worker-image/python/ferry/standalone.py'), 'utf8')).toContain(
      '"/runsync"',
    );
  });
});
