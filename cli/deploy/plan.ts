/**
 * The decisions of `ferry deploy`, as pure functions over records (tested without a platform):
 * which app/environment to use or create (docs/architecture.md#the-cli), which endpoints to create, update
 * or remove, and the docker commands of `--preview`.
 */
import { type EndpointConfig, newEndpointId } from '../../core/deployment.js';
import { FerryError } from '../../core/errors.js';
import type { Manifest, ManifestEndpoint, Route } from '../../core/manifest.js';
import type { EndpointRecord } from '../../core/ports.js';
import { baseImageFor } from '../../worker-image/images.js';

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
  throw new FerryError('usage', `Multiple environments found: ${[...input.envNames].sort().join(', ')}`, {
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
 * update (the pool rolls the workers, docs/architecture.md#the-cli); names gone from the manifest are removed.
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

/** What sampleInput reads of a scanned callable. */
type SampledCallable = Pick<Route, 'name' | 'params' | 'inputs'>;

/**
 * The example request body of a printed curl line (deploy's and --preview's; `ferry dev` fills in
 * none): a placeholder for each required parameter, of its type hint's JSON type (a string when it
 * has none), and nothing for one with a default, which the
 * handler fills itself (a placeholder there may be the wrong type: `sleep=0` given "world"). The
 * scanner's `inputs` say which are required and leave out the runtime's keyword-only `job`, which the
 * worker refuses as an input key (ferry/invoke.py); a manifest without them falls back to the names,
 * less `job`. A class endpoint with several methods names its first in "method" (ferry/invoke.py
 * _pick_method).
 */
export function sampleInput(
  callable: (SampledCallable & { methods?: SampledCallable[] }) | undefined,
): Record<string, unknown> {
  const methods = callable?.methods ?? [];
  const sample: Record<string, unknown> = methods.length > 1 ? { method: methods[0]!.name } : {};
  const source = methods[0] ?? callable;
  const wanted: Array<{ name: string; type?: InputType }> = source?.inputs
    ? source.inputs.filter((i) => i.required)
    : (source?.params ?? [])
        .filter((p) => !p.startsWith('*') && p !== 'self' && p !== 'job')
        .map((name) => ({ name }));
  for (const { name, type } of wanted)
    sample[name] = name === 'input_data' ? { message: 'hello' } : placeholderOf(type);
  return sample;
}

type InputType = NonNullable<NonNullable<SampledCallable['inputs']>[number]['type']>;

/**
 * A placeholder of the parameter's hinted JSON type: `add(a: int, b: int)` given "world" twice
 * concatenates strings, and `mul(a: int, b: int)` fails, so the printed line would not work.
 */
function placeholderOf(type: InputType | undefined): unknown {
  switch (type) {
    case 'integer':
    case 'number':
      return 1;
    case 'boolean':
      return true;
    case 'object':
      return {};
    case 'array':
      return [];
    default:
      return 'world';
  }
}

/**
 * One curl line that works: the first queue endpoint's runsync, else the first POST route. `keyVar`
 * is the shell word that gives the key where the line is pasted (Provider.apiKeyInShell).
 */
export function curlExample(
  records: readonly EndpointRecord[],
  urlOf: (record: EndpointRecord) => string,
  keyVar = '$FERRY_API_KEY',
): string | undefined {
  const auth = `-H "Authorization: Bearer ${keyVar}" -H 'Content-Type: application/json'`;
  const queue = records.find((r) => r.kind === 'queue');
  if (queue) {
    const endpoint = (queue.config as unknown as EndpointConfig).endpoint;
    const body = JSON.stringify({ input: sampleInput(endpoint?.target) });
    return `curl -X POST ${urlOf(queue)}/runsync ${auth} -d '${body}'`;
  }
  for (const record of records) {
    const endpoint = (record.config as unknown as EndpointConfig).endpoint;
    const route = endpoint?.routes?.find((r) => r.method === 'POST' && !r.path.includes('{'));
    if (route) {
      const body = JSON.stringify(sampleInput(route));
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
//
// Each container is a worker base image (worker-image/images.ts) running worker-image/entrypoint.sh:
// it unpacks the artifact mounted at /ferry/artifact.tar.gz into /app and execs
// `python -m ferry.worker`, configured by the FERRY_* variables below (worker-image/python/ferry/
// config.py reads them). There is no platform in a preview, so a queue endpoint runs in standalone
// mode (it serves its own POST /runsync); a load-balanced one serves its routes as usual.

/** The port every preview worker listens on inside its container. */
export const previewContainerPort = 8080;
/** Where entrypoint.sh looks for a mounted artifact (its FERRY_ARTIFACT_PATH default). */
export const previewArtifactMount = '/ferry/artifact.tar.gz';

export interface PreviewEndpoint {
  name: string;
  kind: ManifestEndpoint['kind'];
  image: string;
  hostPort: number;
  /** http://127.0.0.1:<hostPort> */
  url: string;
  /** A curl line that calls it: runsync for a queue endpoint, the first route for a load-balanced one. */
  curl: string;
}

/** An endpoint the preview lists but does not start, and why. */
export interface NotPreviewed {
  name: string;
  image: string;
  reason: string;
}

export interface PreviewPlan {
  network: string;
  /** argv arrays, in order; the first is the network, then one `docker run` per endpoint. */
  commands: string[][];
  endpoints: PreviewEndpoint[];
  /** Image endpoints: listed, not run (imageNotPreviewed says why). */
  notRun: NotPreviewed[];
  /** argv arrays that tear it down: the containers, then the network. */
  cleanup: string[][];
}

/** infra/gpu.ts's rule: CPU only when cpu is given and gpu is not; neither means any GPU. */
const isGpu = (endpoint: ManifestEndpoint) =>
  !(endpoint.resources.cpu !== undefined && endpoint.resources.gpu === undefined);

/** The worker's environment: how entrypoint.sh and ferry/config.py find the code to serve. */
export function previewEnv(endpoint: ManifestEndpoint): Record<string, string> {
  const serve: Record<string, string> =
    endpoint.kind === 'queue'
      ? { FERRY_MODE: 'standalone', FERRY_TARGET: endpoint.target?.name ?? '' }
      : { FERRY_MODE: 'lb', FERRY_VARIABLE: endpoint.variable ?? '' };
  for (const [key, value] of Object.entries(serve)) {
    if (value === '') {
      throw new FerryError(
        'failed',
        `Endpoint '${endpoint.name}' has no ${key.slice(6).toLowerCase()} in the manifest`,
      );
    }
  }
  return {
    // The user's env first: the runtime's own variables must win over a stray FERRY_PORT there.
    ...endpoint.resources.env,
    FERRY_MODULE: endpoint.module,
    ...serve,
    // 0.0.0.0: docker's port mapping reaches the container's interface, not its loopback.
    FERRY_HOST: '0.0.0.0',
    FERRY_PORT: String(previewContainerPort),
    RUNPOD_ENDPOINT_ID: `preview-${endpoint.name}`,
  };
}

/** A curl line for one preview endpoint (no auth: the ports are bound to 127.0.0.1 only). */
export function previewCurl(endpoint: ManifestEndpoint, url: string): string {
  const json = `-H 'Content-Type: application/json'`;
  if (endpoint.kind === 'queue') {
    const body = JSON.stringify({ input: sampleInput(endpoint.target) });
    return `curl -X POST ${url}/runsync ${json} -d '${body}'`;
  }
  const route = endpoint.routes?.[0];
  if (!route) return `curl ${url}/ping`;
  // `{item_id}` would be a curl URL glob: put the parameter's name in its place.
  const routePath = route.path.replace(/\{([^}]*)\}/g, (_m, name: string) => encodeURIComponent(name));
  if (route.method === 'GET' || route.method === 'DELETE')
    return `curl -X ${route.method} ${url}${routePath}`;
  return `curl -X ${route.method} ${url}${routePath} ${json} -d '${JSON.stringify(sampleInput(route))}'`;
}

/**
 * Why an image endpoint (docs/python.md, image endpoints) is not started by `--preview`: its image
 * runs RunPod's worker loop, which takes jobs from a platform's queue, and a preview has no
 * platform. Its own local test server (`--rp_serve_api`) is a command-line flag of the image's own
 * script, which Ferry does not know (https://docs.runpod.io/serverless/development/local-testing).
 */
export const imageNotPreviewed =
  "not started: an image endpoint's worker takes jobs from the platform's queue, which a preview does not run; " +
  'deploy it (ferry deploy --provider aws), or run the image yourself with its --rp_serve_api flag';

export function previewPlan(input: {
  manifest: Manifest;
  artifactPath: string;
  /** Unique suffix of the network name (a timestamp in the CLI, fixed in tests). */
  runId: string;
  /** Ferry's version: the worker image tag (worker-image/images.ts). */
  version: string;
  firstHostPort?: number;
}): PreviewPlan {
  const network = `ferry-preview-${input.runId}`;
  const commands: string[][] = [['docker', 'network', 'create', network]];
  const containers: string[] = [];
  const endpoints: PreviewEndpoint[] = [];
  const notRun: NotPreviewed[] = [];
  let hostPort = input.firstHostPort ?? 8000;
  for (const endpoint of input.manifest.endpoints) {
    if (endpoint.image !== undefined) {
      notRun.push({ name: endpoint.name, image: endpoint.image, reason: imageNotPreviewed });
      continue;
    }
    const container = `ferry-preview-${endpoint.name}`.toLowerCase().replace(/[^a-z0-9_.-]/g, '-');
    const gpu = isGpu(endpoint);
    const image = baseImageFor(gpu ? 'gpu' : 'cpu', input.version, input.manifest.pythonVersion);
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
    ];
    if (gpu) run.push('--gpus', String(endpoint.resources.gpuCount));
    run.push('-v', `${input.artifactPath}:${previewArtifactMount}:ro`);
    for (const [key, value] of Object.entries(previewEnv(endpoint)).sort(([a], [b]) => a.localeCompare(b)))
      run.push('-e', `${key}=${value}`);
    run.push('-p', `127.0.0.1:${hostPort}:${previewContainerPort}`, image);
    commands.push(run);
    containers.push(container);
    const url = `http://127.0.0.1:${hostPort}`;
    endpoints.push({
      name: endpoint.name,
      kind: endpoint.kind,
      image,
      hostPort,
      url,
      curl: previewCurl(endpoint, url),
    });
    hostPort += 1;
  }
  // Containers go before the network: docker refuses to remove a network that still has endpoints.
  const cleanup = [
    ...[...containers].reverse().map((c) => ['docker', 'rm', '-f', c]),
    ['docker', 'network', 'rm', network],
  ];
  return { network, commands, endpoints, notRun, cleanup };
}
