/** `ferry deploy`: build, resolve the environment, upload, provision, configure (docs/architecture.md#the-cli). */
import type { CommandModule } from 'yargs';
import type { CliContext } from '../context.js';
import { approveFlag, buildFlags, defineCommand, examples, jsonFlag } from './shared.js';

export const deployCommand = (ctx: CliContext): CommandModule =>
  defineCommand({
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
        .option('synth-only', {
          type: 'boolean',
          default: false,
          describe: 'AWS: write the CloudFormation templates to .ferry/cdk.out and stop (offline)',
        })
        .option('yes', approveFlag)
        .option('bootstrap', {
          type: 'boolean',
          default: false,
          describe: 'AWS: run the CDK bootstrap of the account/region before the first deploy',
        })
        .option('refresh-zones', {
          type: 'boolean',
          default: false,
          describe:
            "AWS: move the platform VPC to the region's current availability zones (replaces its subnets)",
        })
        .option('alarm-email', {
          type: 'string',
          describe: 'AWS: subscribe this address to the alarm topic (alarms, image-pull and launch failures)',
        })
        .option('json', jsonFlag)
        .epilogue(
          examples([
            ['$0 deploy', 'Deploy to the only environment (or create production)'],
            ['$0 deploy --provider aws --yes', 'Deploy to your AWS account'],
            ['$0 deploy --env staging --exclude scipy', 'Deploy to staging without scipy'],
          ]),
        ),
    handler: async (argv) => (await import('./deploy-run.js')).runDeploy(ctx, argv),
  });
