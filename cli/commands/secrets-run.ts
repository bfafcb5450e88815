/** What `ferry secrets` runs (cli/commands/secrets.ts defines the command): loaded when it runs. */
import path from 'node:path';
import type { Readable } from 'node:stream';
import type { ECSClient } from '@aws-sdk/client-ecs';
import { securePrivateDir } from '../../core/adapters/local/home.js';
import { checkSecretName, type SecretStore } from '../../core/adapters/local/secrets.js';
import { openLocalDatabase } from '../../core/adapters/local/sqlite.js';
import { checkRecordName, endpointConfigOf } from '../../core/deployment.js';
import { FerryError, messageOf, notFound, usage } from '../../core/errors.js';
import type { ControlStore, EndpointRecord } from '../../core/ports.js';
import { clusterName, serviceName } from '../../infra/names.js';
import { ferryHome } from '../config.js';
import type { CliContext } from '../context.js';
import { resolveEnvironment } from '../deploy/plan.js';
import type { CliIo } from '../io.js';
import { projectAppName } from '../project-config.js';
import { providerName, withProvider } from '../providers/index.js';
import type { FailingVerdicts, SecretsCommandOptions } from './secrets.js';

/** The scope's endpoints whose `secrets=` list `name`. */
async function endpointsUsing(
  control: Pick<FailingVerdicts, 'listEndpoints'>,
  scope: { app: string; env: string },
  name: string,
): Promise<EndpointRecord[]> {
  return (await control.listEndpoints(scope)).filter((record) =>
    (endpointConfigOf(record).endpoint.resources.secrets ?? []).includes(name),
  );
}

/**
 * On AWS an endpoint whose tasks could not start three times is failing until something may have
 * fixed it (docs/aws.md#failing-endpoints): a deploy, or the secret it lacked. So setting a secret
 * clears the verdict of the endpoints that list it, and the scaler starts their tasks again.
 * Locally the pool's next pass does the same (WorkerSupervisor.unconfigured). Answers their names.
 */
async function clearFailing(control: FailingVerdicts, endpoints: EndpointRecord[]): Promise<string[]> {
  const cleared: string[] = [];
  for (const record of endpoints) {
    if ((await control.startFailures(record.id))?.problem?.state !== 'failing') continue;
    await control.clearStartFailures(record.id);
    cleared.push(record.name);
  }
  return cleared;
}

/** Runs a function with the control records (`undefined`: no platform yet), opening them if need be. */
type WithRecords = <T>(fn: (control: FailingVerdicts | undefined) => Promise<T>) => Promise<T>;

/** ECS's answers for a service that is not running: nothing to restart (its stack is not there). */
const notRunning = new Set([
  'ServiceNotFoundException',
  'ServiceNotActiveException',
  'ClusterNotFoundException',
]);

/**
 * ECS hands a task its secrets when the task starts, and a running task "will not receive the
 * updated value automatically": its service must start fresh tasks, a forced new deployment
 * (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/secrets-envvar-secrets-manager.html).
 * So after a set, the services of the endpoints that list the secret are restarted that way, as the
 * local pool rolls its workers when a value changes (the pool spec's key holds a digest of them). A
 * task holding a job keeps its scale-in protection, which deployments honour too
 * (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-scale-in-protection.html): it
 * finishes the job before it stops. Answers the endpoints restarted and the ones that could not be;
 * one whose service is not there (its stack is not deployed yet) is neither.
 */
async function restartTasksUsing(
  ecs: Pick<ECSClient, 'send'>,
  endpoints: EndpointRecord[],
): Promise<{ restarted: string[]; failed: { endpoint: EndpointRecord; message: string }[] }> {
  const { UpdateServiceCommand } = await import('@aws-sdk/client-ecs');
  const restarted: string[] = [];
  const failed: { endpoint: EndpointRecord; message: string }[] = [];
  for (const endpoint of endpoints) {
    try {
      await ecs.send(
        new UpdateServiceCommand({
          cluster: clusterName,
          service: serviceName(endpoint.id),
          forceNewDeployment: true,
        }),
      );
      restarted.push(endpoint.name);
    } catch (error) {
      if (!notRunning.has((error as Error).name)) failed.push({ endpoint, message: messageOf(error) });
    }
  }
  return { restarted, failed };
}

/**
 * After `secrets set --provider aws`: the endpoints that list the secret are cleared of a failing
 * verdict and, unless `ecsOf` is undefined (--no-restart), their tasks restart. Each step says what
 * it did; a failure only warns, since the secret is set. Answers the endpoints restarted.
 */
async function reachEndpointsUsing(
  ctx: CliContext,
  scope: { app: string; env: string },
  name: string,
  withRecords: WithRecords,
  ecsOf: (() => Promise<{ ecs: Pick<ECSClient, 'send'>; done: () => void }>) | undefined,
): Promise<string[]> {
  let users: EndpointRecord[];
  try {
    users = await withRecords(async (control) => {
      if (!control) return [];
      const found = await endpointsUsing(control, scope, name);
      for (const endpoint of await clearFailing(control, found)) {
        ctx.reporter.line(`  ↻ ${endpoint} was failing; cleared: its tasks start again with ${name}`);
      }
      return found;
    });
  } catch (error) {
    ctx.reporter.line(
      `  warning: could not check for endpoints that use ${name} (${messageOf(error)}); a deploy clears failing ones, and running tasks read it when they next start`,
    );
    return [];
  }
  if (!ecsOf || users.length === 0) return [];
  try {
    const { ecs, done } = await ecsOf();
    try {
      const { restarted, failed } = await restartTasksUsing(ecs, users);
      for (const endpoint of restarted) {
        ctx.reporter.line(
          `  ↻ ${endpoint}: its tasks restart to read the new ${name} (a task holding a job finishes it first)`,
        );
      }
      for (const { endpoint, message } of failed) {
        ctx.reporter.line(
          `  warning: could not restart the tasks of ${endpoint.name} (${message}); they read the new ${name} when they next start, or now after: aws ecs update-service --cluster ${clusterName} --service ${serviceName(endpoint.id)} --force-new-deployment`,
        );
      }
      return restarted;
    } finally {
      done();
    }
  } catch (error) {
    ctx.reporter.line(
      `  warning: could not restart tasks (${messageOf(error)}); they read the new ${name} when they next start`,
    );
    return [];
  }
}

/** The line that gives a deleted secret back to the endpoints that list it. */
const setAgainLine = (scope: { app: string; env: string }, name: string, provider: string): string =>
  `printf %s "$VALUE" | ferry secrets set ${name} --app ${scope.app} --env ${scope.env}${provider === 'aws' ? ' --provider aws' : ''}`;

/**
 * After `ferry secrets delete`: the scope's endpoints that list the name, each named on stderr with
 * what the delete does to it, since a user deleting a leaked value expects it gone from the workers
 * and it is not. Locally the running `ferry serve` drains the workers it has (they keep the value
 * until they finish what they hold and stop) and starts none while the name has no value: the
 * endpoint is failing, its health naming the secret (LocalWorkers.secretGone); `drain` has it do so
 * now, between the warnings and the hint (drainNow). On AWS a running task keeps what ECS
 * gave it at its start ("will not receive the updated value automatically",
 * https://docs.aws.amazon.com/AmazonECS/latest/developerguide/secrets-envvar-secrets-manager.html),
 * and a new one cannot start: a secret scheduled for deletion cannot be read ("you can no longer
 * directly access it", https://docs.aws.amazon.com/secretsmanager/latest/userguide/manage_restore-secret.html),
 * so ECS stops the task with ResourceInitializationError (a secret Secrets Manager cannot find is one
 * of its causes, https://repost.aws/knowledge-center/ecs-secrets-manager-issues), and after three such starts
 * the endpoint is failing (docs/aws.md#failing-endpoints). Answers their names; a failure to read
 * the records only warns, since the secret is deleted.
 */
async function warnEndpointsUsing(
  ctx: CliContext,
  provider: string,
  scope: { app: string; env: string },
  name: string,
  withRecords: WithRecords,
  drain?: (users: EndpointRecord[]) => Promise<void>,
): Promise<string[]> {
  let users: EndpointRecord[];
  try {
    users = await withRecords(async (control) => (control ? endpointsUsing(control, scope, name) : []));
  } catch (error) {
    ctx.reporter.line(
      `  warning: could not check for endpoints that use ${name} (${messageOf(error)}); an endpoint that lists it in secrets= starts no new worker until it is set again`,
    );
    return [];
  }
  for (const { name: endpoint } of users) {
    ctx.reporter.line(
      provider === 'aws'
        ? `  warning: ${endpoint} lists ${name} in secrets=: its running tasks keep the deleted value until they stop, and a new task cannot start (ECS cannot read ${name}; after three tries the endpoint is failing) until ${name} is set again or ${endpoint} is deployed without it`
        : `  warning: ${endpoint} lists ${name} in secrets=: its running workers keep the deleted value until they finish what they hold and stop, and no new worker starts (the endpoint is failing: its health names ${name}, its jobs end FAILED) until ${name} is set again or ${endpoint} is deployed without it`,
    );
  }
  if (users.length > 0) {
    await drain?.(users);
    ctx.reporter.line(
      `  hint: ${setAgainLine(scope, name, provider)}, or remove ${name} from secrets= and run \`ferry deploy${provider === 'aws' ? ' --provider aws' : ''}\``,
    );
  }
  return users.map((record) => record.name);
}

/**
 * After a local delete of a secret that `users` list: the running `ferry serve` makes its pass now
 * (LocalProvider.passNow, the ask `ferry deploy` and `secrets set` make), not within a second, so
 * once the delete answers those endpoints are failing and no worker given the deleted value takes
 * another job: one could before. No serve running: nothing to ask. One that cannot be asked drains
 * them at its next pass, which passNow's warning says.
 */
async function drainNow(ctx: CliContext, name: string, users: EndpointRecord[]): Promise<void> {
  const names = users.map((record) => record.name).join(', ');
  const report = await withProvider(ctx, 'local', async (local) =>
    local.passNow?.(users, ctx.reporter, {
      asking: `  the running platform drains the workers of ${names} now…`,
      waiting: (waitedSec) =>
        `  still waiting for the platform to drain the workers of ${names}… ${waitedSec} s`,
      unasked: (url, why) =>
        `  warning: could not ask the platform at ${url} to drain the workers of ${names} now (${why}); it drains them when it next reads the records, within a second or two`,
    }),
  );
  if (!report) return;
  // An endpoint without a problem found a value again (the name set since): it is not failing.
  const failing = new Set(report.endpoints.filter((e) => e.problem).map((e) => e.id));
  const drained = users.filter((record) => failing.has(record.id)).map((record) => record.name);
  if (drained.length === 0) return;
  ctx.reporter.line(
    `  ✓ ${drained.join(', ')} failing now: no worker given the deleted ${name} takes another job (one that holds a job finishes it)`,
  );
}

/** The provider a command acts on: `--provider`, else FERRY_PROVIDER, else local. */
const providerOf = (ctx: CliContext, flag: unknown): string =>
  providerName(ctx, typeof flag === 'string' ? flag : undefined);

/**
 * Runs `fn` with the provider's control records, open while it runs (tests inject AWS's).
 * Before the first AWS deploy there is no platform, so no environment and no verdict: `fn` gets
 * `undefined`. A not-found that `fn` itself throws (no such secret) is the command's answer.
 */
async function withControl<T>(
  ctx: CliContext,
  provider: string,
  options: SecretsCommandOptions,
  fn: (control: FailingVerdicts | undefined) => Promise<T>,
): Promise<T> {
  if (provider === 'aws' && options.awsControl) return fn(options.awsControl());
  let opened = false;
  try {
    return await withProvider(ctx, provider, (platform) => {
      opened = true;
      return fn(platform.control as ControlStore & FailingVerdicts);
    });
  } catch (error) {
    if (!opened && FerryError.is(error) && error.code === 'not_found') return fn(undefined);
    throw error;
  }
}

async function withSecretStore<T>(
  ctx: CliContext,
  provider: string,
  options: SecretsCommandOptions,
  fn: (store: SecretStore) => Promise<T>,
): Promise<T> {
  if (provider === 'aws') {
    // The AWS SDK only for --provider aws: every command loads this module (the command table).
    const [sdk, { SecretsManagerSecretStore }, { checkAwsConfiguration }] = await Promise.all([
      import('@aws-sdk/client-secrets-manager'),
      import('../../core/adapters/aws/secrets.js'),
      import('../providers/aws/clients.js'),
    ]);
    if (options.awsClient) return fn(new SecretsManagerSecretStore(options.awsClient()));
    const client = new sdk.SecretsManagerClient({});
    try {
      await checkAwsConfiguration(client.config);
      return await fn(new SecretsManagerSecretStore(client));
    } finally {
      client.destroy();
    }
  }
  const home = ferryHome(ctx.io.env);
  securePrivateDir(home);
  const db = openLocalDatabase(path.join(home, 'ferry.db'));
  try {
    return await fn(db.openSecrets(path.join(home, 'secrets.key')));
  } finally {
    await db.close();
  }
}

/** The ECS client for `--provider aws` restarts, and how to let it go. */
async function ecsFor(
  options: SecretsCommandOptions,
): Promise<{ ecs: Pick<ECSClient, 'send'>; done: () => void }> {
  if (options.awsEcs) return { ecs: options.awsEcs(), done: () => {} };
  const { ECSClient } = await import('@aws-sdk/client-ecs');
  const client = new ECSClient({});
  return { ecs: client, done: () => client.destroy() };
}

/**
 * Runs `fn` in the app environment a command acts on. Without `--env`, the one `ferry deploy` would
 * deploy to (resolveEnvironment: the app's only environment, production when it has none, and a
 * usage error naming them when it has several), so a secret set before or after a plain `ferry
 * deploy` lands where that deploy's workers read it. It defaulted to `dev`, which no plain deploy
 * uses. Only then are the control records opened, and `fn` gets them (`records`) for further use.
 */
async function withScope<T>(
  ctx: CliContext,
  argv: { app?: unknown; env?: unknown; provider?: unknown },
  options: SecretsCommandOptions,
  fn: (scope: { app: string; env: string }, records?: WithRecords) => Promise<T>,
): Promise<T> {
  const app = checkRecordName('app', projectAppName(ctx.io.cwd, argv.app));
  if (typeof argv.env === 'string') return fn({ app, env: checkRecordName('environment', argv.env) });
  return withControl(ctx, providerOf(ctx, argv.provider), options, async (control) => {
    const envNames = control ? (await control.listEnvironments(app)).map((e) => e.name) : [];
    const { env } = resolveEnvironment({ appExists: envNames.length > 0, envNames, requested: undefined });
    return fn({ app, env }, (use) => use(control));
  });
}

/**
 * The value: all of stdin when it is piped (one trailing newline dropped), else a prompt on the
 * terminal with echo off.
 */
export async function readSecretValue(io: CliIo, name: string): Promise<string> {
  const stdin = io.stdin as Readable & { isTTY?: boolean; setRawMode?: (raw: boolean) => void };
  if (!stdin.isTTY || !stdin.setRawMode) {
    let text = '';
    for await (const chunk of stdin) text += chunk.toString();
    return text.replace(/\r?\n$/, '');
  }
  io.stderr.write(`Value for ${name} (not shown): `);
  stdin.setRawMode(true);
  stdin.resume();
  try {
    return await new Promise<string>((resolve, reject) => {
      let value = '';
      const onData = (chunk: Buffer | string) => {
        for (const char of chunk.toString()) {
          if (char === '\r' || char === '\n') {
            stdin.off('data', onData);
            resolve(value);
            return;
          }
          if (char === '\u0003') {
            stdin.off('data', onData);
            reject(usage('Cancelled'));
            return;
          }
          value = char === '\u007f' ? value.slice(0, -1) : value + char;
        }
      };
      stdin.on('data', onData);
    });
  } finally {
    stdin.setRawMode(false);
    stdin.pause();
    io.stderr.write('\n');
  }
}

/** The flags of `secrets set|list|delete` as their handlers read them. */
export interface SecretsArgv {
  name?: unknown;
  app?: unknown;
  env?: unknown;
  provider?: unknown;
  restart?: unknown;
  json?: unknown;
}

export async function secretsSet(
  ctx: CliContext,
  argv: SecretsArgv,
  options: SecretsCommandOptions,
): Promise<void> {
  const name = String(argv.name);
  checkSecretName(name);
  const provider = providerOf(ctx, argv.provider);
  let restarted: string[] | undefined;
  const scope = await withScope(ctx, argv, options, async (scope, records) => {
    const value = await readSecretValue(ctx.io, name);
    if (value.length === 0) {
      throw usage(`No value for ${name}`, `Pipe it in: printf %s "$VALUE" | ferry secrets set ${name}`);
    }
    await withSecretStore(ctx, provider, options, (store) => store.set(scope, name, value));
    if (provider === 'aws') {
      restarted = await reachEndpointsUsing(
        ctx,
        scope,
        name,
        records ?? ((use) => withControl(ctx, provider, options, use)),
        argv.restart ? () => ecsFor(options) : undefined,
      );
    } else {
      // The running `ferry serve` rolls the endpoints that use it now, not at its next pass:
      // once this says Set, no job is taken by a worker that has the old value.
      await withProvider(ctx, provider, async (local) =>
        local.awaitRollout?.(await endpointsUsing(local.control, scope, name), ctx.reporter),
      );
    }
    return scope;
  });
  if (argv.json) return ctx.reporter.json({ ...scope, name, set: true, ...(restarted ? { restarted } : {}) });
  ctx.reporter.out(`✓ Set ${name} for ${scope.app}/${scope.env}`);
}

export async function secretsList(
  ctx: CliContext,
  argv: SecretsArgv,
  options: SecretsCommandOptions,
): Promise<void> {
  const [scope, names] = await withScope(ctx, argv, options, async (scope) => [
    scope,
    await withSecretStore(ctx, providerOf(ctx, argv.provider), options, (store) => store.list(scope)),
  ]);
  if (argv.json) {
    return ctx.reporter.json(
      names.map((s) => ({ name: s.name, updatedAt: new Date(s.updatedAt).toISOString() })),
    );
  }
  if (names.length === 0) return ctx.reporter.out(`No secrets for ${scope.app}/${scope.env}.`);
  for (const secret of names) ctx.reporter.out(secret.name);
}

export async function secretsDelete(
  ctx: CliContext,
  argv: SecretsArgv,
  options: SecretsCommandOptions,
): Promise<void> {
  const name = String(argv.name);
  const provider = providerOf(ctx, argv.provider);
  const [scope, usedBy] = await withScope(ctx, argv, options, async (scope, records) => {
    const deleted = await withSecretStore(ctx, provider, options, (store) => store.delete(scope, name));
    if (!deleted)
      throw notFound(
        `No secret ${name} for ${scope.app}/${scope.env}`,
        'See them with `ferry secrets list`.',
      );
    return [
      scope,
      await warnEndpointsUsing(
        ctx,
        provider,
        scope,
        name,
        records ?? ((use) => withControl(ctx, provider, options, use)),
        provider === 'aws' ? undefined : (users) => drainNow(ctx, name, users),
      ),
    ] as const;
  });
  if (argv.json)
    return ctx.reporter.json({
      ...scope,
      name,
      deleted: true,
      ...(usedBy.length > 0 ? { usedBy } : {}),
    });
  ctx.reporter.out(`✓ Deleted ${name} of ${scope.app}/${scope.env}`);
}
