/** `ferry deploy`: build, resolve the environment, upload, provision, configure (spec §3, §4.4). */
import { spawnSync } from 'node:child_process';
import type { CommandModule } from 'yargs';
import { FerryError } from '../../core/errors.js';
import { buildProject } from '../build/index.js';
import { appNameOf, readProjectConfig } from '../config.js';
import { type CliContext, withProvider } from '../context.js';
import { previewPlan, shellLine } from '../deploy/plan.js';
import { buildEventPrinter, deployProject, printDeploySummary } from '../deploy/run.js';
import { buildFlags, buildOptionsFrom, jsonFlag } from './shared.js';

async function preview(ctx: CliContext, argv: Record<string, unknown>, app: string): Promise<void> {
  ctx.reporter.line('[1/2] Build');
  const built = await buildProject({
    ...buildOptionsFrom(argv, ctx.io.env),
    projectDir: ctx.io.cwd,
    app,
    onProgress: buildEventPrinter(ctx.reporter),
  });
  const plan = previewPlan({
    manifest: built.manifest,
    artifactPath: built.artifactPath,
    runId: String(Date.now()),
  });
  ctx.reporter.line('[2/2] Preview plan (one container per endpoint, one shared network)');
  for (const command of plan.commands) ctx.reporter.out(shellLine(command));
  for (const port of plan.ports)
    ctx.reporter.line(`  ${port.name} (${port.kind}) → http://127.0.0.1:${port.hostPort}`);
  const docker = spawnSync('docker', ['info'], { stdio: 'ignore', timeout: 15_000 });
  if (docker.error || docker.status !== 0) {
    throw new FerryError('failed', '--preview needs a running Docker engine, and `docker info` failed', {
      hint: 'Start Docker and run again, or run the commands above yourself.',
    });
  }
  const started: string[][] = [];
  const stop = () => {
    for (const command of [...plan.cleanup]) spawnSync(command[0]!, command.slice(1), { stdio: 'ignore' });
    ctx.reporter.line('✓ Preview stopped');
  };
  for (const command of plan.commands) {
    const result = spawnSync(command[0]!, command.slice(1), { stdio: ['ignore', 'ignore', 'inherit'] });
    if (result.status !== 0) {
      stop();
      throw new FerryError('failed', `Preview failed at: ${shellLine(command)}`);
    }
    started.push(command);
  }
  ctx.reporter.line('Preview running; Ctrl+C stops it.');
  await new Promise<void>((resolve) => {
    process.once('SIGINT', () => resolve());
    process.once('SIGTERM', () => resolve());
  });
  stop();
}

export const deployCommand = (ctx: CliContext): CommandModule => ({
  command: 'deploy',
  describe: 'Build and deploy the project to an environment',
  builder: (y) =>
    buildFlags(y)
      .option('env', { alias: 'e', type: 'string', describe: 'Target environment (created if missing)' })
      .option('app', {
        alias: 'a',
        type: 'string',
        describe: 'App name',
        defaultDescription: 'the folder name',
      })
      .option('preview', {
        type: 'boolean',
        default: false,
        describe: 'Run a local container preview instead (Docker)',
      })
      .option('serve', {
        type: 'boolean',
        default: true,
        hidden: true,
        describe: 'Start `ferry serve --detach` when no platform answers (--no-serve: records only)',
      })
      .option('json', jsonFlag)
      .example('$0 deploy', 'Deploy to the only environment (or create production)')
      .example('$0 deploy --env staging --exclude scipy', 'Deploy to staging without scipy'),
  handler: async (argv) => {
    const projectDir = ctx.io.cwd;
    const app =
      (argv.app as string | undefined) ?? readProjectConfig(projectDir).app ?? appNameOf(projectDir);
    if (argv.preview) return preview(ctx, argv, app);
    await withProvider(ctx, argv.provider as string | undefined, async (provider) => {
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
    });
  },
});
