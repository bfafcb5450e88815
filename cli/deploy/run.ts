/**
 * `ferry deploy`: the five stages of docs/architecture.md#the-cli (build, environment resolution, upload, provisioning,
 * configuration), each printed with its timing. Success is printed only after the records are
 * written and read back, and (unless told not to serve) after the platform answers for them — an
 * empty deploy is an error (flash#365 printed success having made nothing).
 */
import { stat } from 'node:fs/promises';
import type { DnsRecord } from '../../core/deployment.js';
import { FerryError, messageOf, usage } from '../../core/errors.js';
import type { ManifestEndpoint } from '../../core/manifest.js';
import type { EndpointRecord } from '../../core/ports.js';
import {
  baseImageReason,
  distributionsMissing,
  requirementName,
  workersPythonBrings,
} from '../build/deps.js';
import { type BuildEvent, type BuildOptions, type BuildResult, buildProject } from '../build/index.js';
import { countOf, formatBytes, formatMs, type Reporter } from '../io.js';
import type { Provider } from '../providers/types.js';
import { artifactKeyOf, curlExample, type EndpointPlan, planEndpoints, resolveEnvironment } from './plan.js';

export function buildEventPrinter(reporter: Reporter): (event: BuildEvent) => void {
  return (event) => {
    switch (event.type) {
      case 'stage-started':
        reporter.line(`  · ${event.stage}…`);
        break;
      case 'stage-finished':
        reporter.line(`  ✓ ${event.stage}  ${event.detail}  ${formatMs(event.durationMs)}`);
        break;
      case 'files':
        reporter.line(`    ${event.shippedCount} files to ship (${event.pythonCount} Python)`);
        break;
      case 'endpoints':
        reporter.line(`    endpoints: ${event.names.join(', ')}`);
        break;
      case 'packages-installed':
        for (const pkg of event.packages) reporter.line(`    installed ${pkg.name}==${pkg.version}`);
        break;
      case 'dependency-progress':
        reporter.line(`    pip: ${event.text}`);
        break;
      case 'package-excluded':
        reporter.line(`    excluded ${event.name}: ${event.reason}`);
        break;
      case 'note':
        reporter.line(`    note: ${event.message}`);
        break;
      case 'warning':
        reporter.line(`    warning: ${event.message}`);
        break;
    }
  };
}

export interface DeployOptions {
  provider: Provider;
  reporter: Reporter;
  projectDir: string;
  app: string;
  env?: string;
  build: Omit<BuildOptions, 'projectDir' | 'app' | 'onProgress'>;
  /** False: write records only (tests, or a platform served elsewhere). */
  serve: boolean;
  /** Prefix of endpoint names (`live-` when `ferry dev` deploys to a provider). */
  namePrefix?: string;
}

export interface DeployResult {
  app: string;
  env: string;
  fingerprint: string;
  artifactKey: string;
  artifactBytes: number;
  servedAt: string | undefined;
  endpoints: Array<{
    id: string;
    name: string;
    kind: string;
    url: string;
    routes?: string[];
    /** A record the user must create at their DNS provider before `url` resolves (Provider.dnsRecord). */
    dnsRecord?: DnsRecord;
    change: string;
  }>;
  removed: Array<{ id: string; name: string }>;
  curl: string | undefined;
}

async function stageOf<T>(
  reporter: Reporter,
  index: number,
  title: string,
  fn: () => Promise<T>,
): Promise<T> {
  const startMs = Date.now();
  reporter.line(`[${index}/5] ${title}`);
  const result = await fn();
  reporter.line(`      done in ${formatMs(Date.now() - startMs)}`);
  return result;
}

/**
 * Says which `secrets=` names have no value in the target environment: such an endpoint starts no
 * worker, and is failing, until they are set (docs/security.md, "Secrets"). A warning, not a refusal:
 * the value may well be set right after the deploy. Nor does a failed look-up stop the deploy (on
 * AWS, a deployer without secretsmanager:DescribeSecret): it says it could not check, and why.
 */
export async function warnOfMissingSecrets(
  provider: Pick<Provider, 'missingSecrets'>,
  scope: { app: string; env: string },
  endpoints: readonly ManifestEndpoint[],
  reporter: Reporter,
): Promise<void> {
  const needed = endpoints.flatMap((e) => e.resources.secrets ?? []);
  if (!provider.missingSecrets || needed.length === 0) return;
  let missing: Set<string>;
  try {
    missing = new Set(await provider.missingSecrets(scope, needed));
  } catch (error) {
    const hint = FerryError.is(error) && error.hint ? `. ${error.hint}` : '';
    reporter.line(
      `  warning: could not check that the endpoints' secrets have values in ${scope.app}/${scope.env} (${messageOf(error)}); ` +
        `\`ferry secrets list --app ${scope.app} --env ${scope.env}\` shows which do${hint}`,
    );
    return;
  }
  for (const endpoint of endpoints) {
    for (const name of endpoint.resources.secrets ?? []) {
      if (!missing.has(name)) continue;
      reporter.line(
        `  warning: '${endpoint.name}' needs secret ${name}, which has no value in ${scope.app}/${scope.env}: ` +
          `its workers start once it is set (printf %s "$VALUE" | ferry secrets set ${name} --app ${scope.app} --env ${scope.env})`,
      );
    }
  }
}

/**
 * The refusal of environment resolution (several environments and no `--env`) before the build, which
 * can take minutes, rather than after it. Stage 2 decides again after `prepare`: records that cannot
 * be read yet (AWS before its first deploy: no platform, so no records) are left to it.
 */
async function refuseAmbiguousEnvironment(provider: Provider, app: string, requested: string | undefined) {
  if (requested !== undefined) return;
  let envNames: string[];
  try {
    envNames = (await provider.control.listEnvironments(app)).map((e) => e.name);
  } catch {
    return;
  }
  resolveEnvironment({ appExists: envNames.length > 0, envNames, requested });
}

/**
 * The build leaves out what the base images ship, but the local provider runs no image: its workers
 * run on python3 as it is. The build installs numpy into the artifact when python3 lacks it
 * (BuildOptions.workersPython); where it could not (no package index, pip failed), every job of an
 * endpoint that asked for it fails at `import numpy` (the torch stack is left to that Python: see
 * workersPythonBrings). Said before anything is written, with the fix.
 */
async function warnOfMissingNumpy(manifest: BuildResult['manifest'], reporter: Reporter): Promise<void> {
  const left = manifest.dependencies.excluded
    .filter((e) => e.reason === baseImageReason && workersPythonBrings(e.name))
    .map((e) => e.name);
  for (const name of await distributionsMissing('python3', left)) {
    const askers = manifest.endpoints
      .filter((e) => e.resources.dependencies.some((spec) => requirementName(spec) === name))
      .map((e) => `'${e.name}'`);
    const who = askers.length > 0 ? `endpoint ${askers.join(', ')}` : 'requirements.txt';
    reporter.line(
      `  warning: ${who} asks for ${name}, which the base images ship; the local provider runs workers on python3, which has no ${name}: install it there (python3 -m pip install ${name}), or their jobs fail at \`import ${name}\``,
    );
  }
}

export async function deployProject(options: DeployOptions): Promise<DeployResult> {
  const { provider, reporter, app } = options;

  await refuseAmbiguousEnvironment(provider, app, options.env);
  if (options.serve) await provider.checkServable?.();
  const built: BuildResult = await stageOf(reporter, 1, 'Build', () =>
    buildProject({
      ...options.build,
      projectDir: options.projectDir,
      app,
      // The local provider runs the artifact on python3 as it is, with no image behind it.
      ...(provider.name === 'local' ? { workersPython: 'python3' } : {}),
      onProgress: buildEventPrinter(reporter),
    }),
  );
  const manifest = built.manifest;
  if (manifest.endpoints.length === 0) {
    throw new FerryError('failed', 'The build found no endpoints: nothing to deploy');
  }
  // An image endpoint's worker is a container image, and the local provider runs Python processes
  // without Docker: refuse before anything is written rather than deploy an endpoint nothing serves.
  const images = manifest.endpoints.filter((e) => e.image !== undefined);
  if (images.length > 0 && provider.name !== 'aws') {
    throw usage(
      `${images.map((e) => `'${e.name}' (${e.image})`).join(', ')}: image endpoints cannot run on the ${provider.name} provider`,
      'Image endpoints run on --provider aws (docs/python.md, image endpoints). Locally, call the image from a queue function or deploy it with --provider aws.',
    );
  }

  if (provider.name === 'local') await warnOfMissingNumpy(manifest, reporter);

  const env = await stageOf(reporter, 2, 'Environment resolution', async () => {
    // AWS: the platform (control table, bucket) must exist before records are read or written.
    await provider.prepare?.({ manifest, env: options.env, reporter });
    const appRecord = await provider.control.getApp(app);
    const envs = appRecord ? await provider.control.listEnvironments(app) : [];
    const decision = resolveEnvironment({
      appExists: appRecord !== undefined,
      envNames: envs.map((e) => e.name),
      requested: options.env,
    });
    const nowMs = Date.now();
    if (decision.createApp) {
      reporter.line(`  app '${app}' not found: creating it with environment '${decision.env}'`);
      await provider.control.putApp({ name: app, createdAt: nowMs });
    }
    if (decision.createEnv) {
      if (!decision.createApp)
        reporter.line(`  environment '${decision.env}' not found in app '${app}': creating it`);
      await provider.control.putEnvironment({ app, name: decision.env, createdAt: nowMs });
    } else {
      reporter.line(`  using environment '${decision.env}' of app '${app}'`);
    }
    return decision.env;
  });

  const artifactKey = artifactKeyOf(app, env, manifest.sourceFingerprint);
  await stageOf(reporter, 3, 'Upload', async () => {
    const size = (await stat(built.artifactPath)).size;
    const bar = reporter.progress('artifact', size);
    await provider.uploadArtifact(artifactKey, built.artifactPath, bar);
    reporter.line(`  ✓ uploaded ${formatBytes(size)} as ${artifactKey}`);
  });

  const plan: EndpointPlan = await stageOf(reporter, 4, 'Provisioning', async () => {
    const existing = await provider.control.listEndpoints({ app, env });
    const plan = planEndpoints({
      existing,
      endpoints: manifest.endpoints,
      app,
      env,
      fingerprint: manifest.sourceFingerprint,
      pythonVersion: manifest.pythonVersion,
      artifactKey,
      ...(options.namePrefix ? { namePrefix: options.namePrefix } : {}),
      ...(provider.newEndpointId ? { newId: (name: string) => provider.newEndpointId!(app, env, name) } : {}),
      nowMs: Date.now(),
    });
    await warnOfMissingSecrets(provider, { app, env }, manifest.endpoints, reporter);
    await provider.provision([...plan.create, ...plan.update], {
      app,
      env,
      all: [...plan.create, ...plan.update, ...plan.unchanged],
      reporter,
    });
    for (const r of plan.create) reporter.line(`  + created ${r.name} (${r.id})`);
    for (const r of plan.update)
      reporter.line(`  ~ updated ${r.name} (${r.id}): workers roll to the new build`);
    for (const r of plan.unchanged) reporter.line(`  = unchanged ${r.name} (${r.id})`);
    if (plan.remove.length > 0) {
      const removed = await provider.destroy(plan.remove);
      for (const r of removed.deleted)
        reporter.line(`  - removed ${r.name} (${r.id}): no longer in the project`);
      if (removed.failed.length > 0) {
        throw new FerryError(
          'failed',
          `Could not remove endpoints no longer in the project: ${removed.failed.map((f) => `${f.record.name} (${f.error})`).join(', ')}`,
        );
      }
    }
    return plan;
  });

  const deployed: EndpointRecord[] = [...plan.create, ...plan.update, ...plan.unchanged];
  const servedAt = await stageOf(reporter, 5, 'Configuration', async () => {
    // Read back: success means the records are there, not that we meant to write them.
    for (const record of deployed) {
      const stored = await provider.control.getEndpoint(record.id);
      if (!stored || stored.fingerprint !== manifest.sourceFingerprint) {
        throw new FerryError('failed', `Endpoint ${record.name} (${record.id}) was not recorded`);
      }
    }
    const envRecord = await provider.control.getEnvironment(app, env);
    // Kept: what the provider saved on the record while provisioning (AWS: the stack's settings).
    await provider.control.putEnvironment({
      ...envRecord,
      app,
      name: env,
      createdAt: envRecord?.createdAt ?? Date.now(),
      fingerprint: manifest.sourceFingerprint,
      artifactKey,
      deployedAt: Date.now(),
    });
    if (!options.serve) {
      reporter.line('  records written; not starting a platform (--no-serve)');
      return await provider.serving();
    }
    const serving = await provider.ensureServing(reporter);
    reporter.line(`  served at ${serving.url}`);
    // Deployed means deployed: no job taken after this runs the code this deploy replaced.
    if (!serving.started) await provider.awaitRollout?.([...plan.create, ...plan.update], reporter);
    return serving.url;
  });

  const endpoints = deployed.map((record) => {
    const routes = (record.config as { endpoint?: { routes?: Array<{ method: string; path: string }> } })
      .endpoint?.routes;
    const dnsRecord = provider.dnsRecord?.(record);
    return {
      id: record.id,
      name: record.name,
      kind: record.kind,
      url: provider.endpointUrl(record),
      ...(record.kind === 'lb' ? { routes: (routes ?? []).map((r) => `${r.method} ${r.path}`) } : {}),
      ...(dnsRecord ? { dnsRecord } : {}),
      change: plan.create.includes(record)
        ? 'created'
        : plan.update.includes(record)
          ? 'updated'
          : 'unchanged',
    };
  });
  return {
    app,
    env,
    fingerprint: manifest.sourceFingerprint,
    artifactKey,
    artifactBytes: built.artifactBytes,
    servedAt,
    endpoints,
    removed: plan.remove.map((r) => ({ id: r.id, name: r.name })),
    curl: curlExample(deployed, (r) => provider.endpointUrl(r), await provider.apiKeyInShell()),
  };
}

/** The success block: every endpoint (LB: URL, name, routes; queue: URL, name) and one curl line. */
export function printDeploySummary(reporter: Reporter, result: DeployResult, json: boolean): void {
  if (json) {
    reporter.json(result);
    return;
  }
  reporter.out(`✓ Deployed ${result.app} to ${result.env} (${countOf(result.endpoints.length, 'endpoint')})`);
  const width = Math.max(...result.endpoints.map((e) => e.name.length));
  for (const endpoint of result.endpoints) {
    if (endpoint.kind === 'lb') {
      reporter.out(`  ${endpoint.name.padEnd(width)}  ${endpoint.url}  (load-balanced)`);
      for (const route of endpoint.routes ?? []) reporter.out(`  ${' '.repeat(width)}    ${route}`);
      // Beside its URL: the URL does not resolve until the user creates this record.
      const dns = endpoint.dnsRecord;
      if (dns) {
        reporter.out(
          `  ${' '.repeat(width)}    DNS: create ${dns.type} ${dns.name} → ${dns.value} at your DNS provider; the URL resolves once it exists`,
        );
      }
    } else {
      reporter.out(`  ${endpoint.name.padEnd(width)}  ${endpoint.url}  (queue)`);
    }
  }
  for (const removed of result.removed) reporter.out(`  removed ${removed.name} (${removed.id})`);
  if (!result.servedAt) reporter.out('Not served yet: run `ferry serve` to start the platform.');
  if (result.curl) {
    reporter.out('Try it:');
    reporter.out(`  ${result.curl}`);
  }
}
