/**
 * `ferry deploy --provider aws` warns of a `secrets=` name with no value, as the local provider's
 * deploy does (cli/deploy/run.ts warnOfMissingSecrets). On AWS such an endpoint's tasks never start:
 * ECS reads the secret when it starts the container ("Sensitive data is injected into your container
 * when the container is initially started",
 * https://docs.aws.amazon.com/AmazonECS/latest/developerguide/secrets-envvar-secrets-manager.html),
 * and after three failed starts the endpoint is failing. The AWS provider asks DescribeSecret of each
 * name through the Secrets Manager store `ferry secrets` uses, here on a stand-in client whose
 * ListSecrets lags behind, as AWS says it may: "ListSecrets might not reflect changes from the last
 * five minutes. You can get more recent information for a specific secret by calling DescribeSecret"
 * (https://docs.aws.amazon.com/secretsmanager/latest/apireference/API_ListSecrets.html).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import {
  CreateSecretCommand,
  DeleteSecretCommand,
  DescribeSecretCommand,
  InvalidRequestException,
  ListSecretsCommand,
  PutSecretValueCommand,
  ResourceNotFoundException,
  RestoreSecretCommand,
} from '@aws-sdk/client-secrets-manager';
import { afterAll, describe, expect, it } from 'vitest';
import { warnOfMissingSecrets } from '../../cli/deploy/run.js';
import type { Reporter } from '../../cli/io.js';
import { AwsProvider, type AwsProviderOptions } from '../../cli/providers/aws.js';
import { LocalProvider } from '../../cli/providers/local.js';
import { MemoryCallTokens, SecretsManagerSecretStore } from '../../core/adapters/aws/secrets.js';
import type { ManifestEndpoint } from '../../core/manifest.js';
import { cpuEndpoint } from '../infra/fixtures.js';
import { awsError } from '../support/aws-provider.js';

const scope = { app: 'shop', env: 'production' };
const needs: ManifestEndpoint = {
  ...cpuEndpoint,
  name: 'needs',
  resources: { ...cpuEndpoint.resources, secrets: ['HF_TOKEN', 'DB_URL'] },
};

/**
 * Secrets Manager for the calls `ferry secrets set|delete` and a deploy's check make, holding
 * `names` (full secret names), or refusing every DescribeSecret and ListSecrets with `refuse`.
 * DescribeSecret answers the state now (a secret scheduled for deletion with its DeletedDate,
 * https://docs.aws.amazon.com/secretsmanager/latest/apireference/API_DescribeSecret.html);
 * ListSecrets answers the state as of the last `settle()`, as a ListSecrets less than five minutes
 * after a change may, leaving out what was scheduled for deletion by then (it does unless
 * IncludePlannedDeletion). A write of a secret scheduled for deletion is refused until it is restored
 * (https://docs.aws.amazon.com/secretsmanager/latest/apireference/API_RestoreSecret.html).
 */
function secretsManager(names: string[], refuse?: Error) {
  const asked: unknown[] = [];
  const now = new Map<string, { DeletedDate?: Date }>(names.map((n) => [n, {}]));
  const snapshot = () => new Map([...now].map(([n, s]) => [n, { ...s }]));
  let listed = snapshot();
  const meta = { $metadata: {} };
  const find = (id: string | undefined) => {
    const secret = now.get(id ?? '');
    if (!secret)
      throw new ResourceNotFoundException({
        message: "Secrets Manager can't find the specified secret.",
        ...meta,
      });
    return secret;
  };
  const live = (id: string | undefined) => {
    const secret = find(id);
    if (secret.DeletedDate) {
      throw new InvalidRequestException({
        message: "You can't perform this operation on the secret because it was marked for deletion.",
        ...meta,
      });
    }
    return secret;
  };
  return {
    asked,
    /** Five minutes on: ListSecrets has caught up with every change so far. */
    settle: () => {
      listed = snapshot();
    },
    send: async (command: unknown) => {
      if (command instanceof ListSecretsCommand) {
        asked.push({ ListSecrets: command.input });
        if (refuse) throw refuse;
        const prefix = command.input.Filters?.[0]?.Values?.[0] ?? '';
        const SecretList = [...listed]
          .filter(([n, s]) => n.startsWith(prefix) && !s.DeletedDate)
          .map(([Name]) => ({ Name }));
        return { SecretList };
      }
      if (command instanceof DescribeSecretCommand) {
        asked.push({ DescribeSecret: command.input });
        if (refuse) throw refuse;
        const { DeletedDate } = find(command.input.SecretId);
        return { Name: command.input.SecretId, ...(DeletedDate ? { DeletedDate } : {}) };
      }
      if (command instanceof PutSecretValueCommand) return void live(command.input.SecretId);
      if (command instanceof CreateSecretCommand) return void now.set(command.input.Name ?? '', {});
      if (command instanceof RestoreSecretCommand) {
        find(command.input.SecretId).DeletedDate = undefined;
        return {};
      }
      if (command instanceof DeleteSecretCommand) {
        live(command.input.SecretId).DeletedDate = new Date();
        return {};
      }
      throw new Error(`not expected: ${(command as object).constructor.name}`);
    },
  };
}

/** An AwsProvider as the CLI builds it, with nothing behind it but the Secrets Manager stand-in. */
function awsProvider(client: ReturnType<typeof secretsManager>): AwsProvider {
  const unused = new Proxy({}, { get: () => () => Promise.reject(new Error('not used by this test')) });
  return new AwsProvider({
    env: {},
    projectDir: tmpdir(),
    reporter: { line: () => {} },
    toolkit: unused,
    lookup: unused,
    clients: { ...(unused as object), close: () => {} },
    callTokens: new MemoryCallTokens(),
    secrets: new SecretsManagerSecretStore(client),
  } as unknown as AwsProviderOptions);
}

async function warnings(provider: Pick<AwsProvider, 'missingSecrets'>): Promise<string[]> {
  const lines: string[] = [];
  const reporter = { line: (text: string) => void lines.push(text) } as unknown as Reporter;
  await warnOfMissingSecrets(provider, scope, [needs], reporter);
  return lines;
}

const homes: string[] = [];
afterAll(() => {
  for (const home of homes) rmSync(home, { recursive: true, force: true });
});

const hfTokenWarning =
  "  warning: 'needs' needs secret HF_TOKEN, which has no value in shop/production: its workers start once it is set " +
  '(printf %s "$VALUE" | ferry secrets set HF_TOKEN --app shop --env production)';

describe('a deploy to AWS of an endpoint whose secret has no value', () => {
  it('prints the warning the local provider prints, for each missing name of this app environment', async () => {
    const client = secretsManager([
      'ferry/shop/production/DB_URL',
      // Another environment's and another app's HF_TOKEN are not this environment's.
      'ferry/shop/staging/HF_TOKEN',
      'ferry/other/production/HF_TOKEN',
    ]);
    const aws = await warnings(awsProvider(client));
    expect(aws).toEqual([hfTokenWarning]);
    // One DescribeSecret per name the endpoints need, by its full name; no ListSecrets.
    expect(client.asked).toEqual([
      { DescribeSecret: { SecretId: 'ferry/shop/production/HF_TOKEN' } },
      { DescribeSecret: { SecretId: 'ferry/shop/production/DB_URL' } },
    ]);

    const home = mkdtempSync(path.join(tmpdir(), 'ferry-missing-secrets-'));
    homes.push(home);
    const local = new LocalProvider({ home, env: {}, projectDir: home });
    try {
      expect(local.missingSecrets).toBeDefined();
      const localWarnings = await warnings(local);
      // The local environment has neither value: its warnings are HF_TOKEN's (the same line) and DB_URL's.
      expect(localWarnings[0]).toBe(aws[0]);
      expect(localWarnings).toHaveLength(2);
    } finally {
      await local.close();
    }
  });

  it('says nothing when every name has a value, and asks once for a name two endpoints need', async () => {
    const client = secretsManager(['ferry/shop/production/HF_TOKEN', 'ferry/shop/production/DB_URL']);
    const provider = awsProvider(client);
    const lines: string[] = [];
    const reporter = { line: (text: string) => void lines.push(text) } as unknown as Reporter;
    await warnOfMissingSecrets(provider, scope, [needs, { ...needs, name: 'also' }], reporter);
    expect(lines).toEqual([]);
    expect(client.asked).toHaveLength(2);
  });

  it('a secret set a moment ago, which ListSecrets does not show yet, has a value: no warning', async () => {
    const client = secretsManager(['ferry/shop/production/DB_URL']);
    const store = new SecretsManagerSecretStore(client);
    await store.set(scope, 'HF_TOKEN', 'hf_x');
    // What `ferry secrets list` (ListSecrets) answers within five minutes of the set: not HF_TOKEN.
    expect((await store.list(scope)).map((s) => s.name)).toEqual(['DB_URL']);
    expect(await warnings(awsProvider(client))).toEqual([]);
  });

  it('a secret deleted a moment ago, which ListSecrets still shows, has no value: the deploy warns', async () => {
    const client = secretsManager(['ferry/shop/production/HF_TOKEN', 'ferry/shop/production/DB_URL']);
    const store = new SecretsManagerSecretStore(client);
    expect(await store.delete(scope, 'HF_TOKEN')).toBe(true);
    // ListSecrets within five minutes of the delete: still there. DescribeSecret: its DeletedDate.
    expect((await store.list(scope)).map((s) => s.name)).toEqual(['DB_URL', 'HF_TOKEN']);
    expect(await warnings(awsProvider(client))).toEqual([hfTokenWarning]);
    // Set again (restored from its recovery window): it has a value at once.
    await store.set(scope, 'HF_TOKEN', 'hf_y');
    expect(await warnings(awsProvider(client))).toEqual([]);
    // And once ListSecrets has caught up, the same answers.
    client.settle();
    expect(await warnings(awsProvider(client))).toEqual([]);
  });

  it('a refused DescribeSecret does not stop the deploy: it says it could not check, why, and how to', async () => {
    const client = secretsManager(
      ['ferry/shop/production/HF_TOKEN'],
      awsError('AccessDeniedException', 'not authorized to perform: secretsmanager:DescribeSecret'),
    );
    expect(await warnings(awsProvider(client))).toEqual([
      "  warning: could not check that the endpoints' secrets have values in shop/production " +
        '(Cannot look up secret ferry/shop/production/HF_TOKEN: not authorized to perform: secretsmanager:DescribeSecret); ' +
        '`ferry secrets list --app shop --env production` shows which do. ' +
        'The deploying identity needs secretsmanager:DescribeSecret on ferry/* (docs/security-aws.md, "Secrets").',
    ]);
  });

  it('any other failed look-up (a throttle) says it could not check, without a permission hint', async () => {
    const client = secretsManager([], awsError('ThrottlingException', 'Rate exceeded'));
    expect(await warnings(awsProvider(client))).toEqual([
      "  warning: could not check that the endpoints' secrets have values in shop/production " +
        '(Cannot look up secret ferry/shop/production/HF_TOKEN: Rate exceeded); ' +
        '`ferry secrets list --app shop --env production` shows which do',
    ]);
  });
});
