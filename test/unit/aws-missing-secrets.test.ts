/**
 * `ferry deploy --provider aws` warns of a `secrets=` name with no value, as the local provider's
 * deploy does (cli/deploy/run.ts warnOfMissingSecrets). On AWS such an endpoint's tasks never start:
 * ECS reads the secret when it starts the container ("Sensitive data is injected into your container
 * when the container is initially started",
 * https://docs.aws.amazon.com/AmazonECS/latest/developerguide/secrets-envvar-secrets-manager.html),
 * and after three failed starts the endpoint is failing. The AWS provider lists the environment's
 * secrets through the Secrets Manager store `ferry secrets list` uses, here on a stand-in client.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { ListSecretsCommand } from '@aws-sdk/client-secrets-manager';
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

/** Secrets Manager's ListSecrets, holding `names` (full secret names); or refusing with `refuse`. */
function secretsManager(names: string[], refuse?: Error) {
  const asked: unknown[] = [];
  return {
    asked,
    send: async (command: unknown) => {
      if (!(command instanceof ListSecretsCommand)) throw new Error('only ListSecrets is expected');
      asked.push(command.input);
      if (refuse) throw refuse;
      const prefix = command.input.Filters?.[0]?.Values?.[0] ?? '';
      return { SecretList: names.filter((n) => n.startsWith(prefix)).map((Name) => ({ Name })) };
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

async function warnings(provider: Pick<AwsProvider, 'secretNames'>): Promise<string[]> {
  const lines: string[] = [];
  const reporter = { line: (text: string) => void lines.push(text) } as unknown as Reporter;
  await warnOfMissingSecrets(provider, scope, [needs], reporter);
  return lines;
}

const homes: string[] = [];
afterAll(() => {
  for (const home of homes) rmSync(home, { recursive: true, force: true });
});

describe('a deploy to AWS of an endpoint whose secret has no value', () => {
  it('prints the warning the local provider prints, for each missing name of this app environment', async () => {
    const client = secretsManager([
      'ferry/shop/production/DB_URL',
      // Another environment's and another app's HF_TOKEN are not this environment's.
      'ferry/shop/staging/HF_TOKEN',
      'ferry/other/production/HF_TOKEN',
    ]);
    const aws = await warnings(awsProvider(client));
    expect(aws).toEqual([
      "  warning: 'needs' needs secret HF_TOKEN, which has no value in shop/production: its workers start once it is set " +
        '(printf %s "$VALUE" | ferry secrets set HF_TOKEN --app shop --env production)',
    ]);
    expect(client.asked).toEqual([{ Filters: [{ Key: 'name', Values: ['ferry/shop/production/'] }] }]);

    const home = mkdtempSync(path.join(tmpdir(), 'ferry-missing-secrets-'));
    homes.push(home);
    const local = new LocalProvider({ home, env: {}, projectDir: home });
    try {
      expect(local.secretNames).toBeDefined();
      const localWarnings = await warnings(local);
      // The local environment has neither value: its warnings are HF_TOKEN's (the same line) and DB_URL's.
      expect(localWarnings[0]).toBe(aws[0]);
      expect(localWarnings).toHaveLength(2);
    } finally {
      await local.close();
    }
  });

  it('says nothing when every name has a value', async () => {
    const client = secretsManager(['ferry/shop/production/HF_TOKEN', 'ferry/shop/production/DB_URL']);
    expect(await warnings(awsProvider(client))).toEqual([]);
  });

  it('a refused ListSecrets does not stop the deploy: it says it could not check, and how to', async () => {
    const client = secretsManager(
      [],
      awsError('AccessDeniedException', 'not authorized to perform: secretsmanager:ListSecrets'),
    );
    expect(await warnings(awsProvider(client))).toEqual([
      "  warning: could not check that the endpoints' secrets have values in shop/production " +
        '(not authorized to perform: secretsmanager:ListSecrets); `ferry secrets list --app shop --env production` shows which do',
    ]);
  });
});
