/** Picks the provider: `--provider`, then the project's .ferry/config.json, then local. */
import path from 'node:path';
import { FerryError, usage } from '../../core/errors.js';
import { ferryHome, type ProviderName, providerNames } from '../config.js';
import type { CliContext } from '../context.js';
import { type CliIo, confirm, type Reporter } from '../io.js';
import { readProjectConfig } from '../project-config.js';
import { LocalProvider } from './local.js';
import type { Provider } from './types.js';

export interface OpenProviderOptions {
  env: NodeJS.ProcessEnv;
  projectDir: string;
  /** Progress of long provider work (AWS: CloudFormation). */
  reporter?: Reporter;
  /** Prompts (AWS: approving IAM changes) go here; without a TTY they fail unless `yes`. */
  io?: CliIo;
  /** Approve what the provider would ask about (`--yes`). */
  yes?: boolean;
  /** AWS: bootstrap the account/region for the CDK before the first deploy. */
  bootstrap?: boolean;
  /** AWS: subscribe this address to the alarm topic (`ferry deploy --alarm-email`). */
  alarmEmail?: string;
  /** AWS: move the platform VPC to the region's current availability zones (`--refresh-zones`). */
  refreshZones?: boolean;
  /** AWS: no call will be made (`--synth-only`), so no region or credentials are needed. */
  offline?: boolean;
}

/** IAM, ECR, CodeBuild, SNS and EC2 clients from the usual credential chain (loaded only for real deploys). */
async function realAccountClients(reporter: Reporter) {
  const [
    { iamFromEnv },
    { ECRClient },
    { CodeBuildClient },
    { SNSClient },
    { ec2OnFirstUse },
    { SecretsManagerClient },
    { SecretsManagerCallTokens, SecretsManagerSecretStore },
  ] = await Promise.all([
    import('./aws-account.js'),
    import('@aws-sdk/client-ecr'),
    import('@aws-sdk/client-codebuild'),
    import('@aws-sdk/client-sns'),
    import('./aws/zones.js'),
    import('@aws-sdk/client-secrets-manager'),
    import('../../core/adapters/aws/secrets.js'),
  ]);
  const secretsManager = new SecretsManagerClient({});
  const ecr = new ECRClient({});
  return {
    // Waits out a deletion of the same secret by an undeploy moments ago, with progress.
    callTokens: new SecretsManagerCallTokens(secretsManager, {
      onWait: (text) => reporter.line(text),
    }),
    // The deploy's warning of a `secrets=` name with no value (cli/deploy/run.ts).
    secrets: new SecretsManagerSecretStore(secretsManager),
    iam: iamFromEnv(),
    sns: new SNSClient({}) as unknown as import('./aws-account.js').SnsLike,
    ecr: ecr as unknown as import('./aws-images.js').EcrLike,
    ecrRepositories: ecr as unknown as import('./aws-account.js').EcrRepositoriesLike,
    codebuild: new CodeBuildClient({}) as unknown as import('./aws-images.js').CodeBuildLike,
    // Loaded on first use: only a platform's first deploy (or --refresh-zones), a deploy that adds a
    // pool whose offerings the platform has not recorded, and a deploy with load-balanced endpoints
    // behind CloudFront ask EC2.
    ec2: ec2OnFirstUse(),
  };
}

/** Where the fake toolkit's deploys keep call keys' values: beside its state file. */
export const fakeCallTokensFile = (stateFile: string): string =>
  `${path.resolve(stateFile)}.call-tokens.json`;

export async function openProvider(name: ProviderName, options: OpenProviderOptions): Promise<Provider> {
  if (name === 'aws') {
    // The SDK warns on every run that releases after January 2027 will need Node 22. The versions
    // package-lock.json pins run on Node 20 (package.json engines); the warning would bury the
    // deploy's own output, so it is off unless the user set the variable themselves.
    process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';
    const { io, reporter } = options;
    if (!io || !reporter) throw new FerryError('failed', 'The AWS provider needs the command I/O');
    // Loaded only here: the AWS SDK clients and the CDK toolkit are large. The region and
    // credentials are checked with the DynamoDB and S3 clients alone, before the provider and the
    // toolkit load: a shell without them is told so with a third less CPU (`ferry app list
    // --provider aws`, about 1.3 s against 0.9 s).
    const { awsClientsFromEnv, checkAwsConfiguration } = await import('./aws/clients.js');
    const clients = awsClientsFromEnv(options.env);
    let loaded: [typeof import('./aws.js'), typeof import('./toolkit.js')];
    try {
      if (!options.offline) await checkAwsConfiguration(clients.s3.config);
      loaded = await Promise.all([import('./aws.js'), import('./toolkit.js')]);
    } catch (error) {
      clients.close();
      throw error;
    }
    const [{ AwsProvider }, { toolkitFromEnv }] = loaded;
    const { toolkit, lookup } = toolkitFromEnv(options.env, async (question, kind) => {
      if (options.yes) return true;
      if (!io.interactive) {
        throw new FerryError(
          'failed',
          kind === 'security'
            ? 'The deployment broadens IAM or network access and needs approval, but there is no terminal to ask'
            : 'The deployment needs a rollback approval, but there is no terminal to ask',
          { hint: 'Run it in a terminal to review the changes, or pass --yes to approve them.' },
        );
      }
      reporter.line(question);
      return confirm(io, 'Deploy these changes?', { unanswered: 'decline' });
    });
    return new AwsProvider({
      env: options.env,
      projectDir: options.projectDir,
      reporter,
      toolkit,
      lookup,
      clients,
      // The recording fake toolkit (tests) talks to no AWS account, so there is no role to check,
      // and call keys' values go to a file beside its state (their records still go to the
      // control table).
      ...(options.env.FERRY_TEST_FAKE_TOOLKIT
        ? {
            callTokens: new (await import('../../core/adapters/aws/secrets.js')).FileCallTokens(
              fakeCallTokensFile(options.env.FERRY_TEST_FAKE_TOOLKIT),
            ),
          }
        : await realAccountClients(reporter)),
      ...(options.bootstrap ? { bootstrap: true } : {}),
      ...(options.alarmEmail ? { alarmEmail: options.alarmEmail } : {}),
      ...(options.refreshZones ? { refreshZones: true } : {}),
    });
  }
  return new LocalProvider({
    home: ferryHome(options.env),
    env: options.env,
    projectDir: options.projectDir,
  });
}

export function providerName(ctx: CliContext, flag: string | undefined): ProviderName {
  const name = flag ?? readProjectConfig(ctx.io.cwd).provider ?? 'local';
  if (!(providerNames as readonly string[]).includes(name)) {
    throw usage(`Unknown provider '${name}'`, `Choose one of ${providerNames.join(', ')}.`);
  }
  return name as ProviderName;
}

/** Opens the provider, runs `fn`, and closes it whatever happens. */
export async function withProvider<T>(
  ctx: CliContext,
  flag: string | undefined,
  fn: (provider: Provider) => Promise<T>,
  options: Pick<OpenProviderOptions, 'yes' | 'bootstrap' | 'alarmEmail' | 'refreshZones' | 'offline'> = {},
): Promise<T> {
  const provider = await openProvider(providerName(ctx, flag), {
    env: ctx.io.env,
    projectDir: ctx.io.cwd,
    reporter: ctx.reporter,
    io: ctx.io,
    ...options,
  });
  try {
    return await fn(provider);
  } finally {
    await provider.close();
  }
}
