/**
 * What `ferry dev` runs: the project's endpoints as `live-<name>` records on an in-process platform,
 * running the code on disk (EndpointConfig.codeDir). `.ferry/resources.json` maps each endpoint
 * name to its record id and config hash, so a restart reuses the same ids and a changed
 * configuration (or source fingerprint) updates the record in place — the pool restarts workers.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { z } from 'zod';
import { mapAtMost } from '../../core/concurrency.js';
import { type EndpointConfig, livePrefix, newEndpointId } from '../../core/deployment.js';
import { badRequest } from '../../core/errors.js';
import type { ManifestEndpoint } from '../../core/manifest.js';
import type { ControlStore, EndpointRecord } from '../../core/ports.js';
import { listShippedFiles } from '../build/files.js';
import { sourceFingerprint } from '../build/fingerprint.js';
import { resolvePythonVersion } from '../build/index.js';
import { type ScannedFile, scanProject } from '../build/scan.js';
import { projectAppName } from '../project-config.js';
import { type DevRoute, devRoutes } from './routes.js';

const resourcesSchema = z.record(z.string(), z.object({ id: z.string(), configHash: z.string() }).strict());
export type DevResources = z.infer<typeof resourcesSchema>;

/** The app `ferry dev` records its live endpoints in: the one `ferry deploy` would use (projectAppName). */
export const devApp = (projectDir: string) => projectAppName(projectDir);
export const devEnv = 'dev';

export interface ScanSnapshot {
  endpoints: ManifestEndpoint[];
  pythonVersion: EndpointConfig['pythonVersion'];
  fingerprint: string;
  warnings: string[];
  /** What the scan read of each file (its imports). */
  files: ScannedFile[];
  /** The dev server's routes; two at one method and path make the scan fail (devRoutes). */
  routes: DevRoute[];
}

export async function scanForDev(projectDir: string, python = 'python3'): Promise<ScanSnapshot> {
  const shipped = await listShippedFiles({ projectDir });
  const scanned = await scanProject({
    projectDir,
    files: shipped.files.filter((f) => f.endsWith('.py')),
    python,
  });
  const pythonVersion = resolvePythonVersion(
    undefined,
    scanned.endpoints,
    scanned.lines,
    scanned.python,
    () => {},
  );
  return {
    endpoints: scanned.endpoints,
    pythonVersion,
    fingerprint: await sourceFingerprint(projectDir, shipped.files),
    warnings: [...shipped.warnings, ...scanned.warnings],
    files: scanned.files,
    routes: devRoutes(scanned.endpoints),
  };
}

export class DevResourcesFile {
  readonly path: string;
  constructor(projectDir: string) {
    this.path = path.join(projectDir, '.ferry', 'resources.json');
  }
  read(): DevResources {
    if (!existsSync(this.path)) return {};
    try {
      return resourcesSchema.parse(JSON.parse(readFileSync(this.path, 'utf8')));
    } catch {
      return {}; // a damaged cache only costs new ids
    }
  }
  write(resources: DevResources): void {
    mkdirSync(path.dirname(this.path), { recursive: true });
    writeFileSync(this.path, `${JSON.stringify(resources, null, 2)}\n`);
  }
}

export type ProvisionOutcome = 'created' | 'updated' | 'unchanged';

/**
 * Why `ferry dev` does not run an image endpoint (docs/python.md, image endpoints): its workers are
 * local Python processes, and the endpoint's worker is a container image. Said at startup, and as
 * the answer (400) to every call, so a call fails at once instead of waiting for a worker that
 * never comes.
 */
export const imageNotInDev = (endpoint: Pick<ManifestEndpoint, 'name' | 'image'>): string =>
  `Endpoint '${endpoint.name}' runs the image ${endpoint.image}: ferry dev runs Python processes, not ` +
  'containers, so it cannot serve it here. Deploy it (ferry deploy --provider aws) and call it there, or ' +
  'run the image yourself';

/** Provisioning of live endpoints, serialized per name (two first calls make one record). */
export class LiveEndpoints {
  #snapshot: ScanSnapshot;
  /** The app of the live records, read once (devApp reads .ferry/config.json). */
  readonly #app: string;
  readonly #inflight = new Map<string, Promise<EndpointRecord>>();
  readonly #provisioned = new Set<string>();

  constructor(
    private readonly options: {
      projectDir: string;
      control: ControlStore;
      file: DevResourcesFile;
      snapshot: ScanSnapshot;
      /** Tell the worker pools to look now instead of at their next tick. */
      reconcile: () => Promise<void>;
      /** The worker command for an endpoint (its dependencies' venv), or undefined for the default. */
      workerCommand?: (endpoint: ManifestEndpoint) => Promise<string[] | undefined>;
      onChange?: (name: string, outcome: ProvisionOutcome, record: EndpointRecord) => void;
    },
  ) {
    this.#snapshot = options.snapshot;
    this.#app = devApp(options.projectDir);
  }

  get snapshot(): ScanSnapshot {
    return this.#snapshot;
  }

  endpoint(name: string): ManifestEndpoint | undefined {
    return this.#snapshot.endpoints.find((e) => e.name === name);
  }

  /** The record of `name`, created or brought up to date with the current scan. */
  ensure(name: string): Promise<EndpointRecord> {
    const running = this.#inflight.get(name);
    if (running) return running;
    const work = this.#provision(name).finally(() => this.#inflight.delete(name));
    this.#inflight.set(name, work);
    return work;
  }

  async #provision(name: string): Promise<EndpointRecord> {
    const endpoint = this.endpoint(name);
    if (!endpoint) throw new Error(`No endpoint named ${name} in the project any more`);
    if (endpoint.image !== undefined) throw badRequest(imageNotInDev(endpoint));
    const resources = this.options.file.read();
    const liveName = `${livePrefix}${name}`;
    const cachedId = resources[name]?.id;
    const previous =
      (cachedId ? await this.options.control.getEndpoint(cachedId) : undefined) ??
      (await this.options.control.listEndpoints({ app: this.#app, env: devEnv })).find(
        (r) => r.name === liveName,
      );
    const command = await this.options.workerCommand?.(endpoint);
    const config: EndpointConfig = {
      endpoint,
      pythonVersion: this.#snapshot.pythonVersion,
      codeDir: path.resolve(this.options.projectDir),
      ...(command ? { command } : {}),
    };
    const nowMs = Date.now();
    const record: EndpointRecord = {
      id: previous?.id ?? cachedId ?? newEndpointId(liveName),
      app: this.#app,
      env: devEnv,
      name: liveName,
      kind: endpoint.kind,
      config: config as unknown as Record<string, unknown>,
      fingerprint: this.#snapshot.fingerprint,
      createdAt: previous?.createdAt ?? nowMs,
      updatedAt: nowMs,
    };
    const same =
      previous !== undefined &&
      previous.fingerprint === record.fingerprint &&
      JSON.stringify(previous.config) === JSON.stringify(record.config);
    const outcome: ProvisionOutcome = previous === undefined ? 'created' : same ? 'unchanged' : 'updated';
    if (outcome !== 'unchanged') {
      const app = this.#app;
      if (!(await this.options.control.getApp(app)))
        await this.options.control.putApp({ name: app, createdAt: nowMs });
      if (!(await this.options.control.getEnvironment(app, devEnv))) {
        await this.options.control.putEnvironment({ app, name: devEnv, createdAt: nowMs });
      }
      await this.options.control.putEndpoint(record);
      await this.options.reconcile();
    }
    this.options.file.write({
      ...this.options.file.read(),
      [name]: { id: record.id, configHash: endpoint.configHash },
    });
    this.#provisioned.add(name);
    this.options.onChange?.(name, outcome, record);
    return outcome === 'unchanged' ? previous! : record;
  }

  /** After a re-scan: update what was provisioned, drop what is gone. Returns the names removed. */
  async apply(snapshot: ScanSnapshot): Promise<string[]> {
    this.#snapshot = snapshot;
    const removed: string[] = [];
    for (const name of [...this.#provisioned]) {
      if (this.endpoint(name)) {
        await this.ensure(name);
        continue;
      }
      const resources = this.options.file.read();
      const id = resources[name]?.id;
      if (id) await this.options.control.deleteEndpoint(id);
      delete resources[name];
      this.options.file.write(resources);
      this.#provisioned.delete(name);
      removed.push(name);
    }
    if (removed.length > 0) await this.options.reconcile();
    return removed;
  }

  /** Provisions every endpoint, at most `concurrency` at a time (docs/api.md#limits: 3). */
  async ensureAll(concurrency = 3): Promise<Array<{ name: string; error?: string }>> {
    // Image endpoints are listed at startup with why they do not run here (imageNotInDev).
    const names = this.#snapshot.endpoints.filter((e) => e.image === undefined).map((e) => e.name);
    return mapAtMost(names, concurrency, async (name): Promise<{ name: string; error?: string }> => {
      try {
        await this.ensure(name);
        return { name };
      } catch (error) {
        return { name, error: (error as Error).message };
      }
    });
  }
}
