/**
 * Endpoint secrets on AWS: one Secrets Manager secret per value, named `ferry/<app>/<env>/<NAME>`,
 * which the app stack hands to the endpoint's worker container as an ECS secret (so the value is in
 * neither the template nor the task definition). `ferry secrets set --provider aws` writes here.
 * https://docs.aws.amazon.com/secretsmanager/latest/apireference/API_PutSecretValue.html
 * https://docs.aws.amazon.com/AmazonECS/latest/developerguide/secrets-envvar-secrets-manager.html
 */
import {
  CreateSecretCommand,
  DeleteSecretCommand,
  ListSecretsCommand,
  PutSecretValueCommand,
  ResourceNotFoundException,
  RestoreSecretCommand,
  type SecretsManagerClient,
} from '@aws-sdk/client-secrets-manager';
import type { CallTokenSecrets } from '../../call-keys.js';
import { FerryError } from '../../errors.js';
import {
  checkSecretName,
  type SecretListing,
  type SecretScope,
  type SecretStore,
  secretValueMaxBytes,
} from '../local/secrets.js';

/** The Secrets Manager name of one endpoint secret; the app stack uses the same function. */
export const awsSecretName = (scope: SecretScope, name: string): string =>
  `ferry/${scope.app}/${scope.env}/${name}`;

const isNotFound = (error: unknown) =>
  error instanceof ResourceNotFoundException || (error as Error).name === 'ResourceNotFoundException';

/**
 * Writes `value` as the current version of secret `name`, creating the secret (with `create`'s
 * description and tags) when it does not exist yet. With `restoreScheduled`, a secret scheduled for
 * deletion is restored first
 * (https://docs.aws.amazon.com/secretsmanager/latest/apireference/API_RestoreSecret.html).
 */
async function writeSecret(
  client: Pick<SecretsManagerClient, 'send'>,
  name: string,
  value: string,
  create: { Description: string; Tags: { Key: string; Value: string }[] },
  options: { restoreScheduled?: boolean } = {},
): Promise<void> {
  try {
    await client.send(new PutSecretValueCommand({ SecretId: name, SecretString: value }));
    return;
  } catch (error) {
    const scheduled =
      (error as Error).name === 'InvalidRequestException' && /deletion/i.test((error as Error).message);
    if (scheduled && options.restoreScheduled) {
      await client.send(new RestoreSecretCommand({ SecretId: name }));
      await client.send(new PutSecretValueCommand({ SecretId: name, SecretString: value }));
      return;
    }
    if (!isNotFound(error)) throw error;
  }
  await client.send(new CreateSecretCommand({ Name: name, SecretString: value, ...create }));
}

export class SecretsManagerSecretStore implements SecretStore {
  constructor(private readonly client: Pick<SecretsManagerClient, 'send'>) {}

  async set(scope: SecretScope, name: string, value: string): Promise<void> {
    checkSecretName(name);
    if (Buffer.byteLength(value) > secretValueMaxBytes) {
      throw new FerryError('usage', `A secret value is at most ${secretValueMaxBytes} bytes`);
    }
    await writeSecret(this.client, awsSecretName(scope, name), value, {
      Description: `Ferry secret ${name} of ${scope.app}/${scope.env}`,
      Tags: [
        { Key: 'ferry:app', Value: scope.app },
        { Key: 'ferry:env', Value: scope.env },
      ],
    });
  }

  async list(scope: SecretScope): Promise<SecretListing[]> {
    const prefix = awsSecretName(scope, '');
    const out: SecretListing[] = [];
    let token: string | undefined;
    do {
      const page = await this.client.send(
        new ListSecretsCommand({ Filters: [{ Key: 'name', Values: [prefix] }], NextToken: token }),
      );
      for (const secret of page.SecretList ?? []) {
        // The name filter matches prefixes; keep exact children only.
        if (secret.Name?.startsWith(prefix) && !secret.Name.slice(prefix.length).includes('/')) {
          out.push({
            name: secret.Name.slice(prefix.length),
            updatedAt: secret.LastChangedDate?.getTime() ?? 0,
          });
        }
      }
      token = page.NextToken;
    } while (token);
    return out.sort((a, b) => a.name.localeCompare(b.name));
  }

  /** Scheduled for deletion after Secrets Manager's recovery window (7 days here). */
  async delete(scope: SecretScope, name: string): Promise<boolean> {
    try {
      await this.client.send(
        new DeleteSecretCommand({ SecretId: awsSecretName(scope, name), RecoveryWindowInDays: 7 }),
      );
      return true;
    } catch (error) {
      if (isNotFound(error)) return false;
      throw error;
    }
  }
}

/**
 * Call keys' values (core/call-keys.ts), one secret per endpoint. Deleted without a recovery window:
 * the value is a key that was revoked first, and a redeploy reuses the name. A secret someone
 * scheduled for deletion by hand is restored before it is written
 * (https://docs.aws.amazon.com/secretsmanager/latest/apireference/API_RestoreSecret.html).
 */
export class SecretsManagerCallTokens implements CallTokenSecrets {
  constructor(private readonly client: Pick<SecretsManagerClient, 'send'>) {}

  async put(name: string, value: string): Promise<void> {
    await writeSecret(
      this.client,
      name,
      value,
      {
        Description: "Ferry: the call key of one endpoint's workers (written by ferry deploy)",
        Tags: [{ Key: 'ferry:purpose', Value: 'call-key' }],
      },
      { restoreScheduled: true },
    );
  }

  async delete(name: string): Promise<void> {
    try {
      await this.client.send(new DeleteSecretCommand({ SecretId: name, ForceDeleteWithoutRecovery: true }));
    } catch (error) {
      if (!isNotFound(error)) throw error;
    }
  }
}

/** Call keys' values in memory: the fake toolkit's deploys (no AWS account) and tests. */
export class MemoryCallTokens implements CallTokenSecrets {
  readonly values = new Map<string, string>();

  async put(name: string, value: string): Promise<void> {
    this.values.set(name, value);
  }

  async delete(name: string): Promise<void> {
    this.values.delete(name);
  }
}
