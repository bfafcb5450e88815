/**
 * Dependencies for `ferry dev` workers: each endpoint's `dependencies=[...]` go into a virtual
 * environment under `.ferry/venvs/<key>/`, keyed by the interpreter and the sorted requirement list,
 * so endpoints that declare the same list share one and a restart reuses it. The venv sees the
 * interpreter's own site-packages (--system-site-packages): what is installed there already (torch)
 * is not downloaded again. pip's output streams to the terminal while it works.
 */
import { createHash } from 'node:crypto';
import { existsSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { FerryError } from '../../core/errors.js';
import type { ManifestEndpoint } from '../../core/manifest.js';
import {
  distributionsMissing,
  requirementName,
  resolveDependencies,
  workersPythonBrings,
} from '../build/deps.js';
import { runProcess, tail } from '../build/process.js';

const readyMarker = '.ferry-ready';

export class DevVenvs {
  readonly #inflight = new Map<string, Promise<string>>();

  readonly #said = new Set<string>();

  /** `<python>\0<distribution>` → whether that Python has it (the probe's answers, kept). */
  readonly #installed = new Map<string, boolean>();

  #once(line: string): void {
    if (this.#said.has(line)) return;
    this.#said.add(line);
    this.options.say(line);
  }

  constructor(
    private readonly options: {
      projectDir: string;
      python?: string;
      say: (line: string) => void;
    },
  ) {}

  /** The worker command for `endpoint`: its venv's python, or undefined without dependencies. */
  async commandFor(endpoint: ManifestEndpoint): Promise<string[] | undefined> {
    // The build's own rules (cli/build/deps.ts): requirements.txt too, and what every base image
    // ships (torch, numpy, ...) left out — your Python's copy is used, as the image's is deployed.
    const warnings: Array<{ message: string; package?: string }> = [];
    const resolved = resolveDependencies({
      projectDir: this.options.projectDir,
      endpoints: [endpoint],
      onProgress: (event) => {
        if (event.type === 'warning') warnings.push(event);
      },
    });
    const python = this.options.python ?? 'python3';
    // Unless your Python has no numpy: here no base image stands behind the worker, which would fail
    // at `import numpy` although the endpoint asked for it (Flash's numpy exclusion broke CPU
    // endpoints so, its PR #263); it is installed into the venv like any other package. The torch
    // stack stays your Python's to have or lack: gigabytes, and code that asks for it runs without it
    // here (the `ferry init` template's gpu_worker falls back to the CPU).
    const lacking = await this.#lacking(
      python,
      resolved.leftToBaseImage.map(requirementName).filter(workersPythonBrings),
    );
    for (const warning of warnings)
      if (warning.package === undefined || !lacking.has(warning.package))
        this.#once(`note: ${warning.message}`);
    for (const name of lacking)
      this.#once(
        `note: ${python} has no ${name}, which the base images ship: ferry dev installs it for the endpoints that ask for it (deployed, the image's copy is used)`,
      );
    const deps = [
      ...resolved.install,
      ...resolved.leftToBaseImage.filter((spec) => lacking.has(requirementName(spec))),
    ].sort();
    if (deps.length === 0) return undefined;
    deps.push(...resolved.pipArgs);
    const key = createHash('sha256')
      .update(JSON.stringify([python, deps]))
      .digest('hex')
      .slice(0, 16);
    let work = this.#inflight.get(key);
    if (!work) {
      work = this.#create(key, python, deps, endpoint.name).finally(() => this.#inflight.delete(key));
      this.#inflight.set(key, work);
    }
    return [await work, '-m', 'ferry.worker'];
  }

  /** Which of `names` (distributions) `python` cannot find; asked once per name. */
  async #lacking(python: string, names: readonly string[]): Promise<Set<string>> {
    const unknown = names.filter((name) => !this.#installed.has(`${python}\0${name}`));
    if (unknown.length > 0) {
      const missing = await distributionsMissing(python, unknown);
      for (const name of unknown) this.#installed.set(`${python}\0${name}`, !missing.has(name));
    }
    return new Set(names.filter((name) => this.#installed.get(`${python}\0${name}`) === false));
  }

  async #create(key: string, python: string, deps: string[], name: string): Promise<string> {
    const dir = path.join(this.options.projectDir, '.ferry', 'venvs', key);
    const venvPython = path.join(dir, 'bin', 'python');
    if (existsSync(path.join(dir, readyMarker))) return venvPython;
    const say = this.options.say;
    rmSync(dir, { recursive: true, force: true }); // a half-made venv from an interrupted install
    say(`Installing dependencies of ${name} into .ferry/venvs/${key}: ${deps.join(', ')}`);
    const venv = await runProcess(python, ['-m', 'venv', '--system-site-packages', dir], {
      timeoutMs: 120_000,
    });
    if (venv.exitCode !== 0) {
      throw new FerryError(
        'failed',
        `Could not create a virtual environment for ${name}: ${tail(venv.stderr)}`,
        {
          hint: 'Install the venv module of your Python (Debian: apt install python3-venv), or run ferry dev --no-deps.',
        },
      );
    }
    const startedMs = Date.now();
    const pip = await runProcess(
      venvPython,
      ['-m', 'pip', 'install', '--progress-bar', 'off', '--no-input', ...deps],
      {
        timeoutMs: 1_800_000,
        cwd: this.options.projectDir,
        onLine: (line) => say(`  [pip ${name}] ${line}`),
      },
    );
    if (pip.exitCode !== 0) {
      rmSync(dir, { recursive: true, force: true });
      throw new FerryError(
        'failed',
        `pip could not install the dependencies of ${name}:\n${tail(pip.stderr || pip.stdout)}`,
        {
          hint: 'Fix dependencies=[...] of the endpoint, or run ferry dev --no-deps to use your own environment.',
        },
      );
    }
    writeFileSync(path.join(dir, readyMarker), `${JSON.stringify(deps)}\n`);
    say(`✓ dependencies of ${name} installed (${((Date.now() - startedMs) / 1000).toFixed(1)} s)`);
    return venvPython;
  }
}
