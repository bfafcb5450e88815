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
import type { CommandModule } from 'yargs';
import { pythonVersions } from '../../core/python-versions.js';
import { defaultPythonVersion } from '../../worker-image/images.js';
import type { CliContext } from '../context.js';
import { examples, nonBlankFlag } from './shared.js';

/** What `ferry deploy --provider aws` needs: the agent and the two bases (model images are opt-in). */
export const defaultImageKinds = ['agent', 'base-cpu', 'base-gpu'] as const;

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
  handler: async (argv) => (await import('./images-run.js')).runImages(ctx, argv),
});
