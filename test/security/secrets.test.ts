/**
 * Endpoint secrets (docs/security.md): encrypted at rest under a 0600 key, bound to their app,
 * environment and name; `ferry secrets` (the real CLI binary) reads values from stdin and never prints
 * them; `--provider aws` writes Secrets Manager `ferry/<app>/<env>/<NAME>` (up to the SDK call).
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import {
  CreateSecretCommand,
  type DeleteSecretCommand,
  InvalidRequestException,
  ListSecretsCommand,
  PutSecretValueCommand,
  ResourceNotFoundException,
  RestoreSecretCommand,
} from '@aws-sdk/client-secrets-manager';
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { SecretsManagerCallTokens, SecretsManagerSecretStore } from '../../core/adapters/aws/secrets.js';
import { openLocalDatabase } from '../../core/adapters/local/sqlite.js';

const dirs: string[] = [];
const tempDir = () => {
  const dir = mkdtempSync(join(tmpdir(), 'ferry-secrets-'));
  dirs.push(dir);
  return dir;
};
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

const value = 'hf_super_secret_value_0123456789';
const scope = { app: 'shop', env: 'prod' };

describe('local secret store', () => {
  it('keeps values encrypted at rest under a 0600 key, and decrypts them for the right name only', async () => {
    const home = tempDir();
    const db = openLocalDatabase(join(home, 'ferry.db'));
    const store = db.openSecrets(join(home, 'secrets.key'));
    await store.set(scope, 'HF_TOKEN', value);
    expect(statSync(join(home, 'secrets.key')).mode & 0o777).toBe(0o600);
    expect(await store.list(scope)).toEqual([{ name: 'HF_TOKEN', updatedAt: expect.any(Number) }]);
    expect(await store.resolve(scope, ['HF_TOKEN'])).toEqual({ HF_TOKEN: value });
    await db.close();
    for (const file of ['ferry.db', 'ferry.db-wal']) {
      let bytes = '';
      try {
        bytes = readFileSync(join(home, file)).toString('latin1');
      } catch {}
      expect(bytes.includes(value)).toBe(false);
    }
    // A row copied to another app does not decrypt there (the name and scope are authenticated).
    const raw = new Database(join(home, 'ferry.db'));
    raw
      .prepare(
        "INSERT INTO secrets SELECT 'blog', env, name, nonce, ciphertext, tag, updated_at FROM secrets",
      )
      .run();
    raw.close();
    const again = openLocalDatabase(join(home, 'ferry.db'));
    await expect(
      again.openSecrets(join(home, 'secrets.key')).resolve({ app: 'blog', env: 'prod' }, ['HF_TOKEN']),
    ).rejects.toThrow(/does not decrypt/);
    await expect(again.openSecrets(join(home, 'secrets.key')).resolve(scope, ['MISSING'])).rejects.toThrow(
      /secrets not set: MISSING/,
    );
    await again.close();
  });
});

describe('ferry secrets (CLI binary)', () => {
  const ferry = (home: string, args: string[], input?: string) =>
    spawnSync(process.execPath, [resolve('bin/ferry.js'), ...args], {
      input,
      encoding: 'utf8',
      env: { ...process.env, FERRY_HOME: home },
      cwd: home,
    });

  it('sets from stdin, lists names only, deletes, and never prints a value', () => {
    const home = tempDir();
    const outputs: string[] = [];
    const run = (args: string[], input?: string) => {
      const result = ferry(home, args, input);
      outputs.push(result.stdout, result.stderr);
      return result;
    };
    expect(run(['secrets', 'set', 'HF_TOKEN', '--app', 'shop', '--env', 'prod'], `${value}\n`).status).toBe(
      0,
    );
    const list = run(['secrets', 'list', '--app', 'shop', '--env', 'prod', '--json']);
    expect(list.status).toBe(0);
    expect(JSON.parse(list.stdout)).toEqual([{ name: 'HF_TOKEN', updatedAt: expect.any(String) }]);
    expect(run(['secrets', 'set', 'bad-name', '--app', 'shop'], 'x').status).toBe(2);
    expect(run(['secrets', 'delete', 'HF_TOKEN', '--app', 'shop', '--env', 'prod']).status).toBe(0);
    expect(run(['secrets', 'list', '--app', 'shop', '--env', 'prod', '--json']).stdout.trim()).toBe('[]');
    for (const text of outputs) expect(text).not.toContain(value);
  });
});

describe('Secrets Manager store', () => {
  it('puts the value, creating the secret ferry/<app>/<env>/<NAME> the first time', async () => {
    const sent: unknown[] = [];
    let exists = false;
    const store = new SecretsManagerSecretStore({
      send: (async (command: unknown) => {
        sent.push(command);
        if (command instanceof PutSecretValueCommand && !exists) {
          throw new ResourceNotFoundException({ message: 'not found', $metadata: {} });
        }
        if (command instanceof CreateSecretCommand) exists = true;
        if (command instanceof ListSecretsCommand) {
          return {
            SecretList: [
              { Name: 'ferry/shop/prod/HF_TOKEN', LastChangedDate: new Date(5) },
              { Name: 'ferry/shop/prod/nested/X' },
              { Name: 'ferry/shop/production/OTHER' },
            ],
          };
        }
        return {};
      }) as never,
    });
    await store.set(scope, 'HF_TOKEN', value);
    await store.set(scope, 'HF_TOKEN', `${value}-2`);
    expect(sent.map((c) => (c as { constructor: { name: string } }).constructor.name)).toEqual([
      'PutSecretValueCommand',
      'CreateSecretCommand',
      'PutSecretValueCommand',
    ]);
    expect((sent[1] as CreateSecretCommand).input).toMatchObject({
      Name: 'ferry/shop/prod/HF_TOKEN',
      SecretString: value,
    });
    expect((sent[2] as PutSecretValueCommand).input).toEqual({
      SecretId: 'ferry/shop/prod/HF_TOKEN',
      SecretString: `${value}-2`,
    });
    expect(await store.list(scope)).toEqual([{ name: 'HF_TOKEN', updatedAt: 5 }]);
    expect(await store.delete(scope, 'HF_TOKEN')).toBe(true);
    expect((sent.at(-1) as DeleteSecretCommand).input).toEqual({
      SecretId: 'ferry/shop/prod/HF_TOKEN',
      RecoveryWindowInDays: 7,
    });
    await expect(store.set(scope, 'not valid', 'x')).rejects.toThrow(/environment variable name/);
  });

  it('call tokens: created the first time, restored when scheduled for deletion, deleted without recovery', async () => {
    const sent: unknown[] = [];
    let state: 'absent' | 'scheduled' | 'present' = 'absent';
    const client = {
      send: (async (command: unknown) => {
        sent.push(command);
        if (command instanceof PutSecretValueCommand && state === 'absent') {
          throw new ResourceNotFoundException({ message: 'not found', $metadata: {} });
        }
        if (command instanceof PutSecretValueCommand && state === 'scheduled') {
          throw new InvalidRequestException({ message: 'The secret is marked for deletion.', $metadata: {} });
        }
        if (command instanceof CreateSecretCommand) state = 'present';
        if (command instanceof RestoreSecretCommand) state = 'present';
        return {};
      }) as never,
    };
    const names = () => sent.map((c) => (c as { constructor: { name: string } }).constructor.name);
    const tokens = new SecretsManagerCallTokens(client);
    await tokens.put('ferry-call/shop/prod/api', value);
    expect(names()).toEqual(['PutSecretValueCommand', 'CreateSecretCommand']);
    expect((sent[1] as CreateSecretCommand).input).toMatchObject({
      Name: 'ferry-call/shop/prod/api',
      SecretString: value,
      Tags: [{ Key: 'ferry:purpose', Value: 'call-key' }],
    });
    state = 'scheduled';
    sent.length = 0;
    await tokens.put('ferry-call/shop/prod/api', `${value}-2`);
    expect(names()).toEqual(['PutSecretValueCommand', 'RestoreSecretCommand', 'PutSecretValueCommand']);
    sent.length = 0;
    await tokens.delete('ferry-call/shop/prod/api');
    expect((sent[0] as DeleteSecretCommand).input).toEqual({
      SecretId: 'ferry-call/shop/prod/api',
      ForceDeleteWithoutRecovery: true,
    });

    // A user secret scheduled for deletion is not restored behind the user's back: the error stands.
    state = 'scheduled';
    await expect(new SecretsManagerSecretStore(client).set(scope, 'HF_TOKEN', value)).rejects.toThrow(
      /marked for deletion/,
    );
  });
});
