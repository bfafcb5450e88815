/**
 * Endpoint secrets on AWS: one Secrets Manager secret per value, named `ferry/<app>/<env>/<NAME>`,
 * which the app stack hands to the endpoint's worker container as an ECS secret (so the value is in
 * neither the template nor the task definition). `ferry secrets set --provider aws` writes here.
 * https://docs.aws.amazon.com/secretsmanager/latest/apireference/API_PutSecretValue.html
 * https://docs.aws.amazon.com/AmazonECS/latest/developerguide/secrets-envvar-secrets-manager.html
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import {
  CreateSecretCommand,
  DeleteSecretCommand,
  DescribeSecretCommand,
  ListSecretsCommand,
  PutSecretValueCommand,
  ResourceNotFoundException,
  RestoreSecretCommand,
  type SecretsManagerClient,
} from '@aws-sdk/client-secrets-manager';
import type { CallTokenSecrets } from '../../call-keys.js';
import { foregroundClock } from '../../clock.js';
import { FerryError } from '../../errors.js';
import {
  checkSecretName,
  checkSecretValue,
  type SecretListing,
  type SecretScope,
  type SecretStore,
} from '../local/secrets.js';

/** The Secrets Manager name of one endpoint secret; the app stack uses the same function. */
export const awsSecretName = (scope: SecretScope, name: string): string =>
  `ferry/${scope.app}/${scope.env}/${name}`;

const isNotFound = (error: unknown) =>
  error instanceof ResourceNotFoundException || (error as Error).name === 'ResourceNotFoundException';

/**
 * Whether secret `id` is there for a task to read: the one answer to "does this secret exist" for
 * user secrets and call keys alike. DescribeSecret, not ListSecrets: "ListSecrets might not reflect
 * changes from the last five minutes. You can get more recent information for a specific secret by
 * calling DescribeSecret" (https://docs.aws.amazon.com/secretsmanager/latest/apireference/API_ListSecrets.html).
 * A secret scheduled for deletion still answers, with its DeletedDate
 * (https://docs.aws.amazon.com/secretsmanager/latest/apireference/API_DescribeSecret.html), and ECS
 * could not read it then (GetSecretValue refuses a secret marked for deletion): no. No secret
 * (ResourceNotFoundException): no. Any other answer (AccessDeniedException without
 * secretsmanager:DescribeSecret, a throttle) is thrown as it came.
 */
export async function secretExists(client: Pick<SecretsManagerClient, 'send'>, id: string): Promise<boolean> {
  try {
    const described = await client.send(new DescribeSecretCommand({ SecretId: id }));
    return described.DeletedDate === undefined;
  } catch (error) {
    if (isNotFound(error)) return false;
    throw error;
  }
}

/**
 * A write that meets a deletion Secrets Manager has not finished waits for it. DeleteSecret with
 * ForceDeleteWithoutRecovery returns at once and deletes in the background: "If you delete a secret
 * and then immediately create a secret with the same name, use appropriate back off and retry
 * logic" (https://docs.aws.amazon.com/secretsmanager/latest/apireference/API_DeleteSecret.html).
 * Until then a write of the name answers InvalidRequestException about the deletion (CreateSecret:
 * "...already scheduled for deletion"). Call keys meet it when a deploy follows an undeploy of the
 * same endpoint.
 */
export interface DeletionWait {
  clock: { nowMs(): number; sleep(ms: number): Promise<void> };
  /** Progress (stderr): what the write is waiting for. */
  onWait?: (text: string) => void;
  /** Give up after this long. */
  forMs?: number;
}

/** `ferry secrets delete` keeps Secrets Manager's recovery window: a mistaken delete can be undone. */
const recoveryWindowDays = 7;

/** Bounded: a deletion that outlasts it fails with a hint rather than hold the deploy up. */
export const deletionWaitMs = 60_000;

/** 2 s, 4 s, 8 s, then every 15 s. */
const deletionBackoffMs = (attempt: number) => Math.min(2_000 * 2 ** attempt, 15_000);

/** Secrets Manager's answer to a write on a secret marked for deletion, or still being deleted. */
const isDeletionPending = (error: unknown) =>
  (error as Error).name === 'InvalidRequestException' && /\bdelet(ion|ed)\b/i.test((error as Error).message);

/**
 * Writes `value` as the current version of secret `name`, creating the secret (with `create`'s
 * description and tags) when it does not exist yet. With `restoreScheduled`, a secret scheduled for
 * deletion (in its recovery window) is restored first: until then Secrets Manager refuses
 * PutSecretValue on it, and CreateSecret of its name, with InvalidRequestException ("The secret is
 * scheduled for deletion"), and RestoreSecret is what cancels the deletion by removing its
 * DeletedDate (https://docs.aws.amazon.com/secretsmanager/latest/apireference/API_DeleteSecret.html,
 * https://docs.aws.amazon.com/secretsmanager/latest/apireference/API_RestoreSecret.html). The
 * restored secret is the same one (same ARN, tags, description) with `value` as its new current
 * version.
 */
async function writeSecretOnce(
  client: Pick<SecretsManagerClient, 'send'>,
  name: string,
  value: string,
  create: { Description: string; Tags: { Key: string; Value: string }[] },
  options: { restoreScheduled?: boolean },
): Promise<void> {
  try {
    await client.send(new PutSecretValueCommand({ SecretId: name, SecretString: value }));
    return;
  } catch (error) {
    if (isDeletionPending(error) && options.restoreScheduled) {
      await client.send(new RestoreSecretCommand({ SecretId: name }));
      try {
        await client.send(new PutSecretValueCommand({ SecretId: name, SecretString: value }));
      } catch (putError) {
        // The restore made the deleted value current again (it may have been deleted because it
        // leaked): without the new value written, the deletion is put back as it was.
        await client
          .send(new DeleteSecretCommand({ SecretId: name, RecoveryWindowInDays: recoveryWindowDays }))
          .catch(() => {});
        throw putError;
      }
      return;
    }
    if (!isNotFound(error)) throw error;
  }
  await client.send(new CreateSecretCommand({ Name: name, SecretString: value, ...create }));
}

/** writeSecretOnce, again with backoff while a deletion is pending (with `waitDeletion`). */
async function writeSecret(
  client: Pick<SecretsManagerClient, 'send'>,
  name: string,
  value: string,
  create: { Description: string; Tags: { Key: string; Value: string }[] },
  options: { restoreScheduled?: boolean; waitDeletion?: DeletionWait } = {},
): Promise<void> {
  const wait = options.waitDeletion;
  const started = wait?.clock.nowMs() ?? 0;
  for (let attempt = 0; ; attempt++) {
    try {
      await writeSecretOnce(client, name, value, create, options);
      return;
    } catch (error) {
      if (!wait || !isDeletionPending(error)) throw error;
      const limitMs = wait.forMs ?? deletionWaitMs;
      const waitedMs = wait.clock.nowMs() - started;
      if (waitedMs >= limitMs) {
        throw new FerryError(
          'failed',
          `Secrets Manager is still deleting secret ${name} after ${Math.round(waitedMs / 1000)} s: ${(error as Error).message}`,
          {
            hint: 'It deletes in the background after an undeploy; run the command again in a minute.',
            cause: error,
          },
        );
      }
      const delayMs = Math.min(deletionBackoffMs(attempt), limitMs - waitedMs);
      wait.onWait?.(
        `  secret ${name} is still being deleted (an undeploy moments ago): trying again in ${Math.ceil(delayMs / 1000)} s`,
      );
      await wait.clock.sleep(delayMs);
    }
  }
}

export class SecretsManagerSecretStore implements SecretStore {
  constructor(private readonly client: Pick<SecretsManagerClient, 'send'>) {}

  async set(scope: SecretScope, name: string, value: string): Promise<void> {
    checkSecretName(name);
    checkSecretValue(value);
    // `ferry secrets delete` leaves the secret in its recovery window (delete, below), where every
    // write of the name is refused; setting it again means the user wants it back with this value,
    // so it is restored and written (writeSecretOnce), as the call keys' secrets already are.
    await writeSecret(
      this.client,
      awsSecretName(scope, name),
      value,
      {
        Description: `Ferry secret ${name} of ${scope.app}/${scope.env}`,
        Tags: [
          { Key: 'ferry:app', Value: scope.app },
          { Key: 'ferry:env', Value: scope.env },
        ],
      },
      { restoreScheduled: true },
    );
  }

  /**
   * The environment's secrets, from ListSecrets: the only call that enumerates them, and eventually
   * consistent ("ListSecrets might not reflect changes from the last five minutes",
   * https://docs.aws.amazon.com/secretsmanager/latest/apireference/API_ListSecrets.html), so a
   * secret set or deleted moments ago may be missing from it, or still in it. `ferry secrets list`
   * says so; a deploy's check of the names its endpoints need asks `missing` instead.
   */
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

  /**
   * Which of `names` have no value in the environment, as a task starting now would find them: no
   * secret, or one scheduled for deletion (`ferry secrets delete`). One DescribeSecret per name
   * (secretExists), not ListSecrets, which may lag five minutes behind a `set` or a `delete`. Needs
   * secretsmanager:DescribeSecret on `ferry/*`; a look-up that fails (refused, throttled) throws,
   * naming the secret, and the deploy's warning says it could not check.
   */
  async missing(scope: SecretScope, names: readonly string[]): Promise<string[]> {
    const unique = [...new Set(names)];
    const found = await Promise.all(
      unique.map(async (name) => {
        const id = awsSecretName(scope, name);
        try {
          return await secretExists(this.client, id);
        } catch (error) {
          throw new FerryError('failed', `Cannot look up secret ${id}: ${(error as Error).message}`, {
            ...((error as Error).name === 'AccessDeniedException'
              ? {
                  hint: 'The deploying identity needs secretsmanager:DescribeSecret on ferry/* (docs/security-aws.md, "Secrets").',
                }
              : {}),
            cause: error,
          });
        }
      }),
    );
    return unique.filter((_, i) => !found[i]);
  }

  /**
   * Scheduled for deletion after Secrets Manager's recovery window (7 days here), so a mistaken
   * delete can be undone (RestoreSecret) meanwhile; a `set` of the same name within the window
   * restores the secret and writes the new value.
   */
  async delete(scope: SecretScope, name: string): Promise<boolean> {
    try {
      await this.client.send(
        new DeleteSecretCommand({
          SecretId: awsSecretName(scope, name),
          RecoveryWindowInDays: recoveryWindowDays,
        }),
      );
      return true;
    } catch (error) {
      // A secret already in its recovery window is refused again with InvalidRequestException: to
      // the user it is as gone as one that never existed.
      if (isNotFound(error) || isDeletionPending(error)) return false;
      throw error;
    }
  }
}

/**
 * Call keys' values (core/call-keys.ts), one secret per endpoint. Deleted without a recovery window:
 * the value is a key that was revoked first, and a redeploy reuses the name (waiting out the
 * background deletion, DeletionWait). A secret someone scheduled for deletion by hand is restored
 * before it is written
 * (https://docs.aws.amazon.com/secretsmanager/latest/apireference/API_RestoreSecret.html).
 */
export class SecretsManagerCallTokens implements CallTokenSecrets {
  readonly #wait: DeletionWait;

  constructor(
    private readonly client: Pick<SecretsManagerClient, 'send'>,
    wait: Partial<DeletionWait> = {},
  ) {
    this.#wait = { clock: foregroundClock, ...wait };
  }

  async put(name: string, value: string): Promise<void> {
    await writeSecret(
      this.client,
      name,
      value,
      {
        Description: "Ferry: the call key of one endpoint's workers (written by ferry deploy)",
        Tags: [{ Key: 'ferry:purpose', Value: 'call-key' }],
      },
      { restoreScheduled: true, waitDeletion: this.#wait },
    );
  }

  /** secretExists: there, and not scheduled for deletion. */
  async exists(name: string): Promise<boolean> {
    try {
      return await secretExists(this.client, name);
    } catch (error) {
      throw new FerryError('failed', `Cannot look up secret ${name}: ${(error as Error).message}`, {
        hint: 'The deploying identity needs secretsmanager:DescribeSecret on ferry-call/* (docs/security-aws.md, "Call keys").',
        cause: error,
      });
    }
  }

  async delete(name: string): Promise<void> {
    try {
      await this.client.send(new DeleteSecretCommand({ SecretId: name, ForceDeleteWithoutRecovery: true }));
    } catch (error) {
      if (!isNotFound(error)) throw error;
    }
  }
}

/** Call keys' values in memory: tests. */
export class MemoryCallTokens implements CallTokenSecrets {
  readonly values = new Map<string, string>();

  async put(name: string, value: string): Promise<void> {
    this.values.set(name, value);
  }

  async exists(name: string): Promise<boolean> {
    return this.values.has(name);
  }

  async delete(name: string): Promise<void> {
    this.values.delete(name);
  }
}

/**
 * Call keys' values in a JSON file: the fake toolkit's deploys (FERRY_TEST_FAKE_TOOLKIT, no AWS
 * account). Each CLI run is a new process; the file lets a deploy see what the one before wrote, as
 * Secrets Manager would, and lets the CLI's end-to-end tests read the names written.
 */
export class FileCallTokens implements CallTokenSecrets {
  constructor(readonly file: string) {}

  read(): Record<string, string> {
    return existsSync(this.file)
      ? (JSON.parse(readFileSync(this.file, 'utf8')) as Record<string, string>)
      : {};
  }

  #write(values: Record<string, string>): void {
    writeFileSync(this.file, `${JSON.stringify(values, null, 2)}\n`, { mode: 0o600 });
  }

  async put(name: string, value: string): Promise<void> {
    this.#write({ ...this.read(), [name]: value });
  }

  async exists(name: string): Promise<boolean> {
    return name in this.read();
  }

  async delete(name: string): Promise<void> {
    const { [name]: _gone, ...rest } = this.read();
    this.#write(rest);
  }
}
