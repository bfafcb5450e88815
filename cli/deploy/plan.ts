/**
 * The decisions of `ferry deploy`, as pure functions over records (tested without a platform):
 * which app/environment to use or create (spec §4.4 rules 1–3), which endpoints to create, update
 * or remove, and the docker commands of `--preview`.
 */
import { type EndpointConfig, newEndpointId } from '../../core/deployment.js';
import { FerryError } from '../../core/errors.js';
import type { Manifest, ManifestEndpoint } from '../../core/manifest.js';
import type { EndpointRecord } from '../../core/ports.js';

export interface EnvironmentDecision {
  env: string;
  createApp: boolean;
  createEnv: boolean;
}

export const defaultEnvironment = 'production';

/** Spec §4.4 deploy rules 1–3. */
export function resolveEnvironment(input: {
  appExists: boolean;
  envNames: readonly string[];
  requested: string | undefined;
}): EnvironmentDecision {
  if (!input.appExists) {
    return { env: input.requested ?? defaultEnvironment, createApp: true, createEnv: true };
  }
  if (input.requested !== undefined) {
    return { env: input.requested, createApp: false, createEnv: !input.envNames.includes(input.requested) };
  }
  if (input.envNames.length === 0) return { env: defaultEnvironment, createApp: false, createEnv: true };
  if (input.envNames.length === 1) return { env: input.envNames[0]!, createApp: false, createEnv: false };
  throw new FerryError('failed', `Multiple environments found: ${[...input.envNames].sort().join(', ')}`, {
    hint: 'Choose one with --env <name>',
  });
}

export interface EndpointPlan {
  create: EndpointRecord[];
  update: EndpointRecord[];
  unchanged: EndpointRecord[];
  remove: EndpointRecord[];
}

function configHashOf(record: EndpointRecord): string | undefined {
  const endpoint = (record.config as Partial<EndpointConfig>).endpoint;
  return endpoint?.configHash;
}

/**
 * Endpoints keep their id across deploys (same app/env/name). A new fingerprint or config hash is an
 * update (the pool rolls the workers, spec §4.4 rule 4); names gone from the manifest are removed.
 */
export function planEndpoints(input: {
  existing: readonly EndpointRecord[];
  endpoints: readonly ManifestEndpoint[];
  app: string;
  env: string;
  fingerprint: string;
  pythonVersion: Manifest['pythonVersion'];
  artifactKey?: string;
  codeDir?: string;
  /** Prefix of record names (`live-` in `ferry dev`). */
  namePrefix?: string;
  nowMs: number;
  newId?: (name: string) => string;
}): EndpointPlan {
  const plan: EndpointPlan = { create: [], update: [], unchanged: [], remove: [] };
  const prefix = input.namePrefix ?? '';
  const byName = new Map(input.existing.map((record) => [record.name, record]));
  const wanted = new Set<string>();
  for (const endpoint of input.endpoints) {
    const name = `${prefix}${endpoint.name}`;
    wanted.add(name);
    const config: EndpointConfig = {
      endpoint,
      pythonVersion: input.pythonVersion,
      ...(input.codeDir ? { codeDir: input.codeDir } : {}),
    };
    const previous = byName.get(name);
    const record: EndpointRecord = {
      id: previous?.id ?? (input.newId ?? newEndpointId)(name),
      app: input.app,
      env: input.env,
      name,
      kind: endpoint.kind,
      config: config as unknown as Record<string, unknown>,
      fingerprint: input.fingerprint,
      ...(input.artifactKey ? { artifactKey: input.artifactKey } : {}),
      createdAt: previous?.createdAt ?? input.nowMs,
      updatedAt: input.nowMs,
    };
    if (!previous) plan.create.push(record);
    else if (
      previous.fingerprint !== input.fingerprint ||
      configHashOf(previous) !== endpoint.configHash ||
      previous.kind !== endpoint.kind ||
      previous.artifactKey !== record.artifactKey ||
      JSON.stringify(previous.config) !== JSON.stringify(record.config)
    )
      plan.update.push(record);
    else plan.unchanged.push(previous);
  }
  for (const record of input.existing) if (!wanted.has(record.name)) plan.remove.push(record);
  return plan;
}

export const artifactKeyOf = (app: string, env: string, fingerprint: string) =>
  `artifacts/${app}/${env}/${fingerprint}.tar.gz`;

/** Example request bodies: the first route/target parameters, with placeholder values. */
function sampleInput(params: readonly string[] | undefined): Record<string, unknown> {
  const sample: Record<string, unknown> = {};
  for (const param of (params ?? []).filter((p) => !p.startsWith('*') && p !== 'self').slice(0, 2)) {
    sample[param] = param === 'input_data' ? { message: 'hello' } : 'world';
  }
  return sample;
}

/** One curl line that works: the first queue endpoint's runsync, else the first POST route. */
export function curlExample(
  records: readonly EndpointRecord[],
  urlOf: (record: EndpointRecord) => string,
  keyVar = '$FERRY_API_KEY',
): string | undefined {
  const auth = `-H "Authorization: Bearer ${keyVar}" -H 'Content-Type: application/json'`;
  const queue = records.find((r) => r.kind === 'queue');
  if (queue) {
    const endpoint = (queue.config as unknown as EndpointConfig).endpoint;
    const body = JSON.stringify({ input: sampleInput(endpoint?.target?.params) });
    return `curl -X POST ${urlOf(queue)}/runsync ${auth} -d '${body}'`;
  }
  for (const record of records) {
    const endpoint = (record.config as unknown as EndpointConfig).endpoint;
    const route = endpoint?.routes?.find((r) => r.method === 'POST' && !r.path.includes('{'));
    if (route) {
      const body = JSON.stringify(sampleInput(route.params));
      return `curl -X POST ${urlOf(record)}${route.path} ${auth} -d '${body}'`;
    }
  }
  const anyGet = records.find((r) => r.kind === 'lb');
  if (anyGet) {
    const route = (anyGet.config as unknown as EndpointConfig).endpoint?.routes?.[0];
    if (route) return `curl ${urlOf(anyGet)}${route.path} -H "Authorization: Bearer ${keyVar}"`;
  }
  return undefined;
}

// ---- --preview: one container per endpoint on a shared network --------------------------------

/** Images the preview runs (worker-image/ builds them; the names must match its Dockerfiles). */
export const previewImages = {
  gpu: 'ferry/worker-gpu:0.1.0',
  cpu: 'ferry/worker-cpu:0.1.0',
} as const;

export interface PreviewPlan {
  network: string;
  /** argv arrays, in order; the first is the network, then one `docker run` per endpoint. */
  commands: string[][];
  /** Host port of each endpoint. */
  ports: Array<{ name: string; kind: ManifestEndpoint['kind']; hostPort: number }>;
  /** argv arrays that tear it down. */
  cleanup: string[][];
}

export function previewPlan(input: {
  manifest: Manifest;
  artifactPath: string;
  /** Unique suffix of the network name (a timestamp in the CLI, fixed in tests). */
  runId: string;
  firstHostPort?: number;
  images?: { gpu: string; cpu: string };
}): PreviewPlan {
  const images = input.images ?? previewImages;
  const network = `ferry-preview-${input.runId}`;
  const commands: string[][] = [['docker', 'network', 'create', network]];
  const cleanup: string[][] = [];
  const ports: PreviewPlan['ports'] = [];
  let hostPort = input.firstHostPort ?? 8000;
  for (const endpoint of input.manifest.endpoints) {
    const container = `ferry-preview-${endpoint.name}`.toLowerCase().replace(/[^a-z0-9_.-]/g, '-');
    const image = endpoint.resources.gpu ? images.gpu : images.cpu;
    const env: Record<string, string> = {
      ...endpoint.resources.env,
      FERRY_ENDPOINT_NAME: endpoint.name,
      FERRY_ENDPOINT_KIND: endpoint.kind,
      FERRY_ARTIFACT: '/opt/ferry/artifact.tar.gz',
      RUNPOD_ENDPOINT_ID: `preview-${endpoint.name}`,
    };
    const run = [
      'docker',
      'run',
      '-d',
      '--name',
      container,
      '--network',
      network,
      '--network-alias',
      endpoint.name,
      '-v',
      `${input.artifactPath}:/opt/ferry/artifact.tar.gz:ro`,
    ];
    for (const [key, value] of Object.entries(env).sort(([a], [b]) => a.localeCompare(b)))
      run.push('-e', `${key}=${value}`);
    run.push('-p', `127.0.0.1:${hostPort}:8080`, image);
    commands.push(run);
    cleanup.push(['docker', 'rm', '-f', container]);
    ports.push({ name: endpoint.name, kind: endpoint.kind, hostPort });
    hostPort += 1;
  }
  cleanup.push(['docker', 'network', 'rm', network]);
  return { network, commands, ports, cleanup };
}

/** argv → a shell line for people to read (single-quoted where needed). */
export function shellLine(argv: readonly string[]): string {
  return argv
    .map((arg) => (/^[A-Za-z0-9_./:=@%+-]+$/.test(arg) ? arg : `'${arg.replace(/'/g, `'\\''`)}'`))
    .join(' ');
}
