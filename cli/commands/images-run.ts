/** What `ferry images` runs (cli/commands/images.ts defines the command): loaded when it runs. */
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { FerryError } from '../../core/errors.js';
import {
  agentBundleDir,
  defaultPythonVersion,
  dockerBuildCommands,
  dockerPushCommands,
} from '../../worker-image/images.js';
import { ferryVersion, installRoot, shellLine } from '../config.js';
import type { CliContext } from '../context.js';
import { defaultImageKinds } from './images.js';

/** The command that bundles the agent from the BUILT package (dist/), run from the install root. */
export function agentBundleCommand(): string[] {
  return ['node', 'dist/worker-image/agent/bundle.js', agentBundleDir];
}

interface ImagesArgs {
  kind: string[];
  python: string;
  version: string;
  docker: string;
  dryRun: boolean;
  registry?: string;
}

function argsOf(argv: Record<string, unknown>, env: NodeJS.ProcessEnv): ImagesArgs {
  const kinds = (argv.kind as string[] | undefined)?.flatMap((k) => k.split(',')).filter(Boolean);
  const registry = (argv.registry as string | undefined) ?? env.FERRY_AWS_IMAGE_REGISTRY;
  return {
    kind: kinds && kinds.length > 0 ? kinds : [...defaultImageKinds],
    python: (argv.python as string | undefined) ?? defaultPythonVersion,
    version: (argv['image-version'] as string | undefined) ?? ferryVersion(),
    docker: (argv.docker as string | undefined) ?? 'docker',
    dryRun: Boolean(argv['dry-run']),
    ...(registry ? { registry } : {}),
  };
}

/** Runs argv with its output on stderr (progress); a FerryError when it fails. */
function run(ctx: CliContext, argv: readonly string[], cwd: string, shell = false): void {
  ctx.reporter.line(`$ ${shell ? argv[0] : shellLine(argv)}`);
  const result = shell
    ? spawnSync(argv[0]!, { cwd, shell: true, stdio: ['ignore', 2, 2], env: ctx.io.env })
    : spawnSync(argv[0]!, argv.slice(1), { cwd, stdio: ['ignore', 2, 2], env: ctx.io.env });
  if (result.error && (result.error as NodeJS.ErrnoException).code === 'ENOENT') {
    throw new FerryError('usage', `${argv[0]} was not found on PATH`, {
      hint:
        'Install Docker, or run `ferry images build --dry-run` and run the commands where Docker is; ' +
        '`ferry deploy --provider aws` can also build the images in your account (CodeBuild).',
    });
  }
  if (result.status !== 0) {
    throw new FerryError('failed', `${shell ? argv[0] : shellLine(argv)} exited with ${result.status}`);
  }
}

export function buildPlan(args: ImagesArgs): string[][] {
  return [
    agentBundleCommand(),
    ...dockerBuildCommands(args.version, args.python, { kinds: args.kind, docker: args.docker }),
  ];
}

export async function runImages(ctx: CliContext, argv: Record<string, unknown>): Promise<void> {
  const args = argsOf(argv, ctx.io.env);
  const root = installRoot();
  if (argv.action === 'build') {
    const plan = buildPlan(args);
    if (args.dryRun) {
      ctx.reporter.out(`cd ${shellLine([root])}\n${plan.map((c) => shellLine(c)).join('\n')}`);
      return;
    }
    ctx.reporter.line(`Building ${args.kind.join(', ')} (version ${args.version}, Python ${args.python})`);
    // The agent bundle in process: same code as the printed command, without needing dist/.
    const { bundleAgent } = await import('../../worker-image/agent/bundle.js');
    await bundleAgent(path.join(root, agentBundleDir));
    ctx.reporter.line(`  ✓ agent bundle ${agentBundleDir}/agent.mjs`);
    for (const command of plan.slice(1)) run(ctx, command, root);
    ctx.reporter.line('  ✓ built');
    return;
  }
  if (!args.registry) {
    throw new FerryError('usage', 'ferry images push needs a registry', {
      hint: 'Pass --registry <account>.dkr.ecr.<region>.amazonaws.com (the FerryPlatform stack output ImageRegistry), or set FERRY_AWS_IMAGE_REGISTRY.',
    });
  }
  const { login, commands } = dockerPushCommands(args.registry, args.version, args.python, {
    kinds: args.kind,
    docker: args.docker,
  });
  if (args.dryRun) {
    ctx.reporter.out(`${login}\n${commands.map((c) => shellLine(c)).join('\n')}`);
    return;
  }
  run(ctx, [login], root, true);
  for (const command of commands) run(ctx, command, root);
  ctx.reporter.line(`  ✓ pushed to ${args.registry}`);
}
