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
import { resolveDependencies } from '../build/deps.js';
import { runProcess, tail } from '../build/process.js';

const readyMarker = '.ferry-ready';

export class DevVenvs {
  readonly #inflight = new Map<string, Promise<string>>();

  readonly #said = new Set<string>();

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
    const resolved = resolveDependencies({
      projectDir: this.options.projectDir,
      endpoints: [endpoint],
      onProgress: (event) => {
        if (event.type === 'warning') this.#once(`note: ${event.message}`);
      },
    });
    const deps = [...resolved.install].sort();
    if (deps.length === 0) return undefined;
    deps.push(...resolved.pipArgs);
    const python = this.options.python ?? 'python3';
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
