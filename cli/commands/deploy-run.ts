/** What `ferry deploy` runs (cli/commands/deploy.ts defines the command): loaded when it runs. */
import { spawnSync } from 'node:child_process';
import { checkRecordName } from '../../core/deployment.js';
import { FerryError, usage } from '../../core/errors.js';
import { dockerBuildCommands } from '../../worker-image/images.js';
import { buildProject } from '../build/index.js';
import { ferryVersion, shellLine } from '../config.js';
import type { CliContext } from '../context.js';
import { defaultEnvironment, previewPlan } from '../deploy/plan.js';
import { buildEventPrinter, deployProject, printDeploySummary } from '../deploy/run.js';
import { projectAppName } from '../project-config.js';
import type { AwsProvider } from '../providers/aws.js';
import { providerName, withProvider } from '../providers/index.js';
import { type BuildArgv, buildOptionsFrom, type GlobalFlags } from './shared.js';

/** Why docker cannot run containers here, or undefined when `docker info` answers. */
function dockerProblem(env: NodeJS.ProcessEnv): FerryError | undefined {
  const info = spawnSync('docker', ['info'], { env, encoding: 'utf8', timeout: 15_000 });
  const hint = 'Install Docker and start its engine, then run again — or run the commands above yourself.';
  if (info.error && (info.error as NodeJS.ErrnoException).code === 'ENOENT') {
    return new FerryError('failed', '--preview needs Docker, and the docker command was not found on PATH', {
      hint,
    });
  }
  if (info.error || info.status !== 0) {
    const why = `${info.stderr ?? ''}`
      .split('\n')
      .find((line) => line.trim() !== '')
      ?.trim();
    const detail = info.error ? info.error.message : (why ?? `exit code ${info.status}`);
    return new FerryError(
      'failed',
      `--preview needs a running Docker engine, and \`docker info\` failed: ${detail}`,
      {
        hint,
      },
    );
  }
  return undefined;
}

/** The worker images are not on a registry: a failed `docker run` most often means one is not built. */
function imageHint(command: readonly string[], version: string, pythonVersion: string): string | undefined {
  const image = command[1] === 'run' ? command.at(-1) : undefined;
  if (image === undefined) return undefined;
  const kind = image.includes('worker-base-gpu') ? 'base-gpu' : 'base-cpu';
  const build = dockerBuildCommands(version, pythonVersion, { kinds: [kind] })[0]!;
  return `If ${image} is not built yet, build it from the Ferry repository root: ${shellLine(build)}`;
}

/** What the offline modes read of deploy's argv. */
type OfflineArgv = BuildArgv & GlobalFlags & { env?: unknown; json?: boolean };

/** Step 1 of 2 of the offline modes (--preview, --synth-only): build the project as deploy would. */
function buildStep(ctx: CliContext, argv: OfflineArgv, app: string) {
  ctx.reporter.line('[1/2] Build');
  return buildProject({
    ...buildOptionsFrom(argv, ctx.io.env),
    projectDir: ctx.io.cwd,
    app,
    onProgress: buildEventPrinter(ctx.reporter),
  });
}

async function preview(ctx: CliContext, argv: OfflineArgv, app: string): Promise<void> {
  const built = await buildStep(ctx, argv, app);
  const version = ferryVersion();
  const plan = previewPlan({
    manifest: built.manifest,
    artifactPath: built.artifactPath,
    runId: String(Date.now()),
    version,
  });
  ctx.reporter.line('[2/2] Preview (one container per endpoint, one shared network)');
  for (const skipped of plan.notRun)
    ctx.reporter.line(`  ${skipped.name} [${skipped.image}]: ${skipped.reason}`);
  // The plan is the data: the commands as shell lines, or with --json the whole plan (commands and
  // cleanup as argv arrays, endpoints with URL and curl), as one JSON document and nothing else.
  if (argv.json) ctx.reporter.json(plan);
  else for (const command of plan.commands) ctx.reporter.out(shellLine(command));
  const problem = dockerProblem(ctx.io.env);
  if (problem) throw problem;

  // Ctrl+C may come while containers are starting (spawnSync blocks): note it and clean up after the
  // command in flight, so no container outlives the preview.
  let interrupted = false;
  let wake: () => void = () => {};
  const onSignal = () => {
    interrupted = true;
    wake();
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  const stop = () => {
    ctx.reporter.line('Stopping the preview');
    for (const command of plan.cleanup) spawnSync(command[0]!, command.slice(1), { stdio: 'ignore' });
    ctx.reporter.line('✓ Preview stopped');
  };
  try {
    for (const command of plan.commands) {
      const result = spawnSync(command[0]!, command.slice(1), { stdio: ['ignore', 'ignore', 'inherit'] });
      if (interrupted) return stop();
      if (result.status !== 0) {
        stop();
        throw new FerryError('failed', `Preview failed at: ${shellLine(command)}`, {
          hint: imageHint(command, version, built.manifest.pythonVersion),
        });
      }
    }
    ctx.reporter.line('Preview running:');
    for (const endpoint of plan.endpoints) {
      ctx.reporter.line(`  ${endpoint.name} (${endpoint.kind}) → ${endpoint.url}   [${endpoint.image}]`);
      ctx.reporter.line(`    ${endpoint.curl}`);
    }
    for (const skipped of plan.notRun) ctx.reporter.line(`  ${skipped.name} (image endpoint): not started`);
    ctx.reporter.line('Ctrl+C stops it.');
    // Signal listeners alone do not keep Node running: without a handle the process would end here,
    // leaving the containers behind.
    const keepAlive = setInterval(() => {}, 60_000);
    await new Promise<void>((resolve) => {
      wake = resolve;
      if (interrupted) resolve();
    });
    clearInterval(keepAlive);
    stop();
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}

/** `--synth-only` (AWS): build, then write the CloudFormation templates offline, with no credentials. */
async function synthOnly(ctx: CliContext, argv: OfflineArgv, app: string): Promise<void> {
  if (providerName(ctx, argv.provider) !== 'aws') {
    throw usage('--synth-only is for --provider aws', 'The local provider has no templates to write.');
  }
  const built = await buildStep(ctx, argv, app);
  const env = typeof argv.env === 'string' ? argv.env : defaultEnvironment;
  ctx.reporter.line(`[2/2] Synthesize (environment ${env}; offline)`);
  await withProvider(
    ctx,
    'aws',
    async (provider) => {
      const result = await (provider as AwsProvider).synthOnly({
        manifest: built.manifest,
        app,
        env,
        reporter: ctx.reporter,
      });
      if (argv.json) return ctx.reporter.json(result);
      ctx.reporter.out(`✓ Synthesized ${result.stacks.length} stacks into ${result.directory}`);
      for (const stack of result.stacks) ctx.reporter.out(`  ${stack.name}  ${stack.template}`);
    },
    { offline: true },
  );
}

/** `ferry deploy`'s flags as its handler reads them. */
export type DeployArgv = OfflineArgv & {
  env?: string | undefined;
  app?: string | undefined;
  preview: boolean;
  serve: boolean;
  'synth-only': boolean;
  yes: boolean;
  bootstrap: boolean;
  'refresh-zones': boolean;
  'alarm-email'?: string | undefined;
  json: boolean;
};

export async function runDeploy(ctx: CliContext, argv: DeployArgv): Promise<void> {
  const projectDir = ctx.io.cwd;
  // Checked before the build: a deploy creates the app and environment it names.
  const app = checkRecordName('app', projectAppName(projectDir, argv.app));
  if (typeof argv.env === 'string') checkRecordName('environment', argv.env);
  const awsOnly = (['bootstrap', 'refresh-zones', 'alarm-email'] as const).filter(
    (flag) => argv[flag] !== undefined && argv[flag] !== false,
  );
  if (awsOnly.length > 0 && (argv.preview || providerName(ctx, argv.provider) !== 'aws')) {
    throw usage(
      `--${awsOnly[0]} is for --provider aws`,
      argv.preview
        ? 'A --preview runs containers on this machine; leave the AWS flags out.'
        : 'Add --provider aws, or leave the flag out to deploy on this machine.',
    );
  }
  if (argv.preview) return preview(ctx, argv, app);
  if (argv['synth-only']) return synthOnly(ctx, argv, app);
  await withProvider(
    ctx,
    argv.provider,
    async (provider) => {
      ctx.reporter.line(`Deploying ${app} with the ${provider.name} provider`);
      const result = await deployProject({
        provider,
        reporter: ctx.reporter,
        projectDir,
        app,
        ...(typeof argv.env === 'string' ? { env: argv.env } : {}),
        build: buildOptionsFrom(argv, ctx.io.env),
        serve: argv.serve !== false,
      });
      printDeploySummary(ctx.reporter, result, Boolean(argv.json));
    },
    {
      yes: Boolean(argv.yes),
      bootstrap: Boolean(argv.bootstrap),
      refreshZones: Boolean(argv['refresh-zones']),
      ...(typeof argv['alarm-email'] === 'string' ? { alarmEmail: argv['alarm-email'] } : {}),
    },
  );
}
