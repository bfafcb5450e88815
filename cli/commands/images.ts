/**
 * `ferry images build|push`: the worker and agent images, from this Ferry install.
 *
 *   build  bundles the agent (worker-image/agent/dist/agent.mjs, which the Dockerfiles COPY), then
 *          `docker build` per kind, bases first (worker-image/images.ts owns the commands)
 *   push   `aws ecr get-login-password | docker login`, then `docker tag` + `docker push` per kind
 *
 * `--dry-run` prints the exact shell commands on stdout (one per line, runnable as a script) and runs
 * nothing: for machines without docker, or to run them elsewhere. Without docker, `ferry deploy
 * --provider aws` builds the images in the platform's CodeBuild project instead.
 */
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import type { CommandModule } from 'yargs';
import { FerryError } from '../../core/errors.js';
import { pythonVersions } from '../../core/manifest.js';
import {
  agentBundleDir,
  defaultPythonVersion,
  dockerBuildCommands,
  dockerPushCommands,
} from '../../worker-image/images.js';
import { ferryVersion, installRoot } from '../config.js';
import type { CliContext } from '../context.js';
import { shellLine } from '../deploy/plan.js';
import { examples, nonBlankFlag } from './shared.js';

/** What `ferry deploy --provider aws` needs: the agent and the two bases (model images are opt-in). */
export const defaultImageKinds = ['agent', 'base-cpu', 'base-gpu'] as const;

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

const common = (y: import('yargs').Argv) =>
  y
    .option('kind', {
      type: 'string',
      array: true,
      describe: 'Image kinds (agent, base-cpu, base-gpu, sdxl-turbo)',
      defaultDescription: defaultImageKinds.join(','),
    })
    .option('python', {
      type: 'string',
      choices: [...pythonVersions],
      describe: 'Python version of the worker images',
      defaultDescription: defaultPythonVersion,
    })
    .option('image-version', {
      type: 'string',
      describe: 'Image tag version',
      defaultDescription: "this Ferry's version",
    })
    .option(
      'docker',
      nonBlankFlag('docker', 'Name the docker executable (--docker docker), or leave --docker out.', {
        describe: 'The docker executable',
        default: 'docker',
      }),
    )
    .option('dry-run', {
      type: 'boolean',
      default: false,
      describe: 'Print the commands (stdout) instead of running them',
    });

export const imagesCommand = (ctx: CliContext): CommandModule => ({
  command: 'images <action>',
  describe: 'Build or push the worker and agent images (docker; --dry-run prints the commands)',
  builder: (y) =>
    common(y)
      .positional('action', { choices: ['build', 'push'] as const, describe: 'build or push' })
      .option('registry', {
        type: 'string',
        describe: 'push: the ECR registry, <account>.dkr.ecr.<region>.amazonaws.com',
        defaultDescription: 'FERRY_AWS_IMAGE_REGISTRY',
      })
      .epilogue(
        examples([
          ['$0 images build --dry-run', 'Print the build commands'],
          [
            '$0 images push --registry 123456789012.dkr.ecr.us-east-1.amazonaws.com',
            'Push to your ECR registry',
          ],
        ]),
      ),
  handler: async (argv) => {
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
  },
});
