/**
 * Endpoint secrets (docs/security.md): encrypted at rest under a 0600 key, bound to their app,
 * environment and name; `ferry secrets` (the real CLI binary) reads values from stdin and never prints
 * them; `--provider aws` writes Secrets Manager `ferry/<app>/<env>/<NAME>` (up to the SDK call, on a
 * stand-in that keeps each secret's deletion state as AWS documents it: fakeSecretsManager below).
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { Readable, Writable } from 'node:stream';
import { AccessDeniedException, ServiceNotFoundException, UpdateServiceCommand } from '@aws-sdk/client-ecs';
import {
  CreateSecretCommand,
  DeleteSecretCommand,
  DescribeSecretCommand,
  GetSecretValueCommand,
  InvalidParameterException,
  InvalidRequestException,
  ListSecretsCommand,
  PutSecretValueCommand,
  ResourceExistsException,
  ResourceNotFoundException,
  RestoreSecretCommand,
  type SecretsManagerClient,
} from '@aws-sdk/client-secrets-manager';
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import yargs from 'yargs';
import { type SecretsCommandOptions, secretsCommand } from '../../cli/commands/secrets.js';
import { createContext } from '../../cli/context.js';
import { SecretsManagerCallTokens, SecretsManagerSecretStore } from '../../core/adapters/aws/secrets.js';
import { openLocalDatabase } from '../../core/adapters/local/sqlite.js';
import type { EndpointRecord } from '../../core/ports.js';
import { sampleManifest, sampleResources } from '../infra/fixtures.js';
import { startAwsFixture } from '../support/emulators.js';
import { recordFor } from '../support/endpoints.js';

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

/** An AWS endpoint record of app shop in `env` that lists `secrets`. */
const endpoint = (name: string, env: string, secrets: string[]): EndpointRecord => ({
  ...recordFor(
    { ...sampleManifest.endpoints[0]!, name, resources: { ...sampleResources, secrets } },
    '/nowhere',
    `${name}0000000000`,
  ),
  app: 'shop',
  env,
});

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

describe('ferry deploy of an endpoint whose secret has no value', () => {
  it('warns on stderr, naming the endpoint, the secret and the command; a set one is not named', () => {
    const home = tempDir();
    const project = join(home, 'shop');
    mkdirSync(project);
    writeFileSync(
      join(project, 'app.py'),
      'from ferry import Endpoint\n\n@Endpoint(name="needs", cpu="1-2", secrets=["HF_TOKEN", "SET_ONE"])\ndef needs():\n    return {}\n',
    );
    const ferry = (args: string[], input?: string) =>
      spawnSync(process.execPath, [resolve('bin/ferry.js'), ...args], {
        input,
        encoding: 'utf8',
        env: { ...process.env, FERRY_HOME: home },
        cwd: project,
      });
    // Before any deploy, with no --env: where a plain `ferry deploy` goes (it defaulted to dev).
    const early = ferry(['secrets', 'set', 'SET_ONE'], 'v');
    expect(early.status, early.stderr).toBe(0);
    expect(early.stdout).toContain('✓ Set SET_ONE for shop/production');
    const deploy = ferry(['deploy', '--no-serve']);
    expect(deploy.status, deploy.stderr).toBe(0);
    expect(deploy.stderr).toContain(
      "warning: 'needs' needs secret HF_TOKEN, which has no value in shop/production: its workers start once it is set " +
        '(printf %s "$VALUE" | ferry secrets set HF_TOKEN --app shop --env production)',
    );
    expect(deploy.stderr).not.toContain('secret SET_ONE');
    // After it, with no --env: the app's only environment.
    expect(ferry(['secrets', 'set', 'HF_TOKEN'], 'v').stdout).toContain('✓ Set HF_TOKEN for shop/production');
    expect(ferry(['deploy', '--no-serve']).stderr).not.toContain('warning:');
    // Two environments: it asks which, as deploy does.
    expect(ferry(['env', 'create', 'staging']).status).toBe(0);
    const which = ferry(['secrets', 'list']);
    expect(which.status).toBe(2);
    expect(which.stderr).toContain('Multiple environments found: production, staging');
    expect(which.stderr).toContain('--env');
  }, 60_000);
});

describe('ferry secrets delete of a secret a deployed endpoint lists', () => {
  it('names each endpoint that lists it, what happens to its workers and how to give it back; --json adds usedBy', () => {
    const home = tempDir();
    const project = join(home, 'shop');
    mkdirSync(project);
    writeFileSync(
      join(project, 'app.py'),
      [
        'from ferry import Endpoint',
        '',
        '@Endpoint(name="needs", cpu="1-2", secrets=["HF_TOKEN"])',
        'def needs():',
        '    return {}',
        '',
        '@Endpoint(name="plain", cpu="1-2", secrets=["OTHER"])',
        'def plain():',
        '    return {}',
        '',
      ].join('\n'),
    );
    const ferry = (args: string[], input?: string) =>
      spawnSync(process.execPath, [resolve('bin/ferry.js'), ...args], {
        input,
        encoding: 'utf8',
        env: { ...process.env, FERRY_HOME: home },
        cwd: project,
      });
    for (const name of ['HF_TOKEN', 'OTHER', 'UNUSED']) {
      expect(ferry(['secrets', 'set', name], value).status).toBe(0);
    }
    const deploy = ferry(['deploy', '--no-serve']);
    expect(deploy.status, deploy.stderr).toBe(0);

    const deleted = ferry(['secrets', 'delete', 'HF_TOKEN']);
    expect(deleted.status, deleted.stderr).toBe(0);
    expect(deleted.stdout).toContain('✓ Deleted HF_TOKEN of shop/production');
    expect(deleted.stderr).toContain(
      'warning: needs lists HF_TOKEN in secrets=: its running workers keep the deleted value until they finish what they hold and stop, and no new worker starts',
    );
    expect(deleted.stderr).toContain('until HF_TOKEN is set again or needs is deployed without it');
    expect(deleted.stderr).toContain(
      'hint: printf %s "$VALUE" | ferry secrets set HF_TOKEN --app shop --env production, or remove HF_TOKEN from secrets= and run `ferry deploy`',
    );
    expect(deleted.stderr).not.toContain('plain');
    // The delete happened: the name is gone from the list.
    expect(
      JSON.parse(ferry(['secrets', 'list', '--json']).stdout).map((s: { name: string }) => s.name),
    ).toEqual(['OTHER', 'UNUSED']);

    const json = ferry(['secrets', 'delete', 'OTHER', '--json']);
    expect(json.status, json.stderr).toBe(0);
    expect(JSON.parse(json.stdout)).toEqual({
      app: 'shop',
      env: 'production',
      name: 'OTHER',
      deleted: true,
      usedBy: ['plain'],
    });
    expect(json.stderr).toContain('warning: plain lists OTHER in secrets=');

    // Nothing lists it: the output is the plain confirmation, with no warning and no usedBy.
    const unused = ferry(['secrets', 'delete', 'UNUSED', '--json']);
    expect(unused.status, unused.stderr).toBe(0);
    expect(JSON.parse(unused.stdout)).toEqual({
      app: 'shop',
      env: 'production',
      name: 'UNUSED',
      deleted: true,
    });
    expect(unused.stderr).not.toContain('warning');
    for (const text of [deleted.stdout, deleted.stderr, json.stdout, json.stderr])
      expect(text).not.toContain(value);
  }, 60_000);
});

describe('ferry secrets set --provider aws and an endpoint failing for want of it', () => {
  it('clears the failing verdict of the scope’s endpoints that list the secret, and only theirs', async () => {
    const aws = await startAwsFixture();
    try {
      const control = aws.control();
      const needs = endpoint('needs', 'prod', ['HF_TOKEN']);
      const other = endpoint('other', 'prod', ['OTHER']);
      const failing = {
        state: 'failing' as const,
        reason: 'ResourceInitializationError: unable to pull secrets',
        lines: [],
        sinceMs: 1,
      };
      for (const record of [needs, other]) {
        await control.putEndpoint(record);
        for (let i = 0; i < 3; i++) await control.addFailedStart(record.id);
        await control.markFailing(record.id, failing);
      }
      const sm = fakeSecretsManager();
      const ecs = fakeEcs();
      const cli = secretsCli(
        { awsClient: () => sm.client, awsControl: () => control, awsEcs: () => ecs.client },
        tempDir(),
      );
      const { stderr } = await cli(
        ['secrets', 'set', 'HF_TOKEN', '--app', 'shop', '--env', 'prod', '--provider', 'aws'],
        `${value}\n`,
      );
      expect(stderr).toContain('↻ needs was failing; cleared: its tasks start again with HF_TOKEN');
      expect(await control.startFailures(needs.id)).toBeUndefined();
      expect((await control.startFailures(other.id))?.problem?.state).toBe('failing');
      expect(ecs.forced).toEqual([`ferry-${needs.id}`]);
    } finally {
      await aws.stop();
    }
  }, 120_000);

  it('restarts the running tasks of the endpoints that list it (ECS reads secrets at task start only); --no-restart leaves them', async () => {
    const aws = await startAwsFixture();
    try {
      const control = aws.control();
      const running = endpoint('running', 'prod', ['HF_TOKEN', 'OTHER']);
      const notYet = endpoint('notyet', 'prod', ['HF_TOKEN']);
      const refused = endpoint('refused', 'prod', ['HF_TOKEN']);
      const unrelated = endpoint('unrelated', 'prod', ['OTHER']);
      const elsewhere = endpoint('elsewhere', 'staging', ['HF_TOKEN']);
      for (const record of [running, notYet, refused, unrelated, elsewhere])
        await control.putEndpoint(record);
      const sm = fakeSecretsManager();
      // ECS as UpdateService answers: a service whose stack is not deployed yet is not found, and a
      // caller without ecs:UpdateService on it is refused.
      const ecs = fakeEcs({
        [`ferry-${notYet.id}`]: new ServiceNotFoundException({
          message: 'Service not found.',
          $metadata: {},
        }),
        [`ferry-${refused.id}`]: new AccessDeniedException({
          message: 'User is not authorized to perform: ecs:UpdateService',
          $metadata: {},
        }),
      });
      const cli = secretsCli(
        { awsClient: () => sm.client, awsControl: () => control, awsEcs: () => ecs.client },
        tempDir(),
      );
      const flags = ['--app', 'shop', '--env', 'prod', '--provider', 'aws'];
      const set = await cli(['secrets', 'set', 'HF_TOKEN', ...flags, '--json'], `${value}\n`);
      expect(ecs.forced).toEqual([`ferry-${running.id}`]);
      expect(ecs.sent.every((c) => c.cluster === 'ferry' && c.forceNewDeployment === true)).toBe(true);
      expect(JSON.parse(set.stdout)).toEqual({
        app: 'shop',
        env: 'prod',
        name: 'HF_TOKEN',
        set: true,
        restarted: ['running'],
      });
      expect(set.stderr).toContain('↻ running: its tasks restart to read the new HF_TOKEN');
      expect(set.stderr).not.toContain('notyet');
      expect(set.stderr).toContain(
        `warning: could not restart the tasks of refused (User is not authorized to perform: ecs:UpdateService)`,
      );
      expect(set.stderr).toContain(
        `aws ecs update-service --cluster ferry --service ferry-${refused.id} --force-new-deployment`,
      );
      expect(set.stderr).not.toContain(value);
      expect(sm.valueOf('ferry/shop/prod/HF_TOKEN')).toBe(value);

      ecs.sent.length = 0;
      const quiet = await cli(['secrets', 'set', 'HF_TOKEN', ...flags, '--no-restart'], `${value}-2\n`);
      expect(ecs.sent).toEqual([]);
      expect(quiet.stderr).not.toContain('restart');
      expect(sm.valueOf('ferry/shop/prod/HF_TOKEN')).toBe(`${value}-2`);
    } finally {
      await aws.stop();
    }
  }, 120_000);
});

describe('ferry secrets delete --provider aws of a secret an endpoint lists', () => {
  it('names the endpoints of that environment that list it (running tasks keep it, new ones cannot start) and restarts nothing', async () => {
    const aws = await startAwsFixture();
    try {
      const control = aws.control();
      for (const record of [
        endpoint('needs', 'prod', ['HF_TOKEN']),
        endpoint('unrelated', 'prod', ['OTHER']),
        endpoint('elsewhere', 'staging', ['HF_TOKEN']),
      ])
        await control.putEndpoint(record);
      const sm = fakeSecretsManager();
      const ecs = fakeEcs();
      const cli = secretsCli(
        { awsClient: () => sm.client, awsControl: () => control, awsEcs: () => ecs.client },
        tempDir(),
      );
      const flags = ['--app', 'shop', '--env', 'prod', '--provider', 'aws'];
      await cli(['secrets', 'set', 'HF_TOKEN', ...flags, '--no-restart'], `${value}\n`);
      await cli(['secrets', 'set', 'LONE', ...flags, '--no-restart'], `${value}\n`);
      const deleted = await cli(['secrets', 'delete', 'HF_TOKEN', ...flags, '--json']);
      expect(JSON.parse(deleted.stdout)).toEqual({
        app: 'shop',
        env: 'prod',
        name: 'HF_TOKEN',
        deleted: true,
        usedBy: ['needs'],
      });
      expect(deleted.stderr).toContain(
        'warning: needs lists HF_TOKEN in secrets=: its running tasks keep the deleted value until they stop, and a new task cannot start',
      );
      expect(deleted.stderr).toContain(
        'hint: printf %s "$VALUE" | ferry secrets set HF_TOKEN --app shop --env prod --provider aws, or remove HF_TOKEN from secrets= and run `ferry deploy --provider aws`',
      );
      expect(deleted.stderr).not.toMatch(/unrelated|elsewhere/);
      // A delete restarts nothing: a restarted task could not start without the secret.
      expect(ecs.sent).toEqual([]);
      await expect(
        sm.client.send(new GetSecretValueCommand({ SecretId: 'ferry/shop/prod/HF_TOKEN' })),
      ).rejects.toThrow(/marked for deletion/);

      const lone = await cli(['secrets', 'delete', 'LONE', ...flags, '--json']);
      expect(JSON.parse(lone.stdout)).toEqual({ app: 'shop', env: 'prod', name: 'LONE', deleted: true });
      expect(lone.stderr).toBe('');
    } finally {
      await aws.stop();
    }
  }, 120_000);
});

/**
 * ECS's UpdateService for the restart after a set: records each call's input, and answers `refusals`
 * by service name with the error ECS would send.
 */
function fakeEcs(refusals: Record<string, Error> = {}) {
  const sent: { cluster?: string; service?: string; forceNewDeployment?: boolean }[] = [];
  const forced: string[] = [];
  const client = {
    send: (async (command: unknown) => {
      if (!(command instanceof UpdateServiceCommand)) throw new Error('only UpdateService is expected');
      sent.push(command.input);
      const refusal = refusals[command.input.service ?? ''];
      if (refusal) throw refusal;
      forced.push(command.input.service!);
      return {};
    }) as never,
  };
  return { client, sent, forced };
}

/** `ferry secrets …` in process, with the command's injected AWS parts; answers what it printed. */
function secretsCli(options: SecretsCommandOptions, cwd: string) {
  return async (args: string[], input = '') => {
    let stdout = '';
    let stderr = '';
    const sink = (append: (text: string) => void) =>
      new Writable({
        write(chunk, _encoding, done) {
          append(chunk.toString());
          done();
        },
      });
    const ctx = createContext({
      stdout: sink((text) => {
        stdout += text;
      }),
      stderr: sink((text) => {
        stderr += text;
      }),
      stdin: Readable.from([input]),
      interactive: false,
      env: { FERRY_HOME: cwd },
      cwd,
    });
    await yargs(args)
      .option('provider', { type: 'string' })
      .command(secretsCommand(ctx, options))
      .exitProcess(false)
      .fail((message, error) => {
        throw error ?? new Error(message);
      })
      .parseAsync();
    return { stdout, stderr };
  };
}

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
    const sm = fakeSecretsManager();
    const tokens = new SecretsManagerCallTokens(sm.client);
    const name = 'ferry-call/shop/prod/api/key';
    await tokens.put(name, value);
    expect(sm.names()).toEqual(['PutSecretValueCommand', 'CreateSecretCommand']);
    expect((sm.sent[1] as CreateSecretCommand).input).toMatchObject({
      Name: name,
      SecretString: value,
      Tags: [{ Key: 'ferry:purpose', Value: 'call-key' }],
    });
    // Someone scheduled it for deletion by hand: the next put restores it, then writes.
    await sm.client.send(new DeleteSecretCommand({ SecretId: name, RecoveryWindowInDays: 7 }));
    expect(await tokens.exists(name)).toBe(false);
    sm.sent.length = 0;
    await tokens.put(name, `${value}-2`);
    expect(sm.names()).toEqual(['PutSecretValueCommand', 'RestoreSecretCommand', 'PutSecretValueCommand']);
    expect(sm.valueOf(name)).toBe(`${value}-2`);
    sm.sent.length = 0;
    await tokens.delete(name);
    expect((sm.sent[0] as DeleteSecretCommand).input).toEqual({
      SecretId: name,
      ForceDeleteWithoutRecovery: true,
    });
    expect(await tokens.exists(name)).toBe(false);
  });

  it('set after delete: restores the secret from its recovery window and writes the new value', async () => {
    const sm = fakeSecretsManager();
    const store = new SecretsManagerSecretStore(sm.client);
    const name = 'ferry/shop/prod/HF_TOKEN';
    await store.set(scope, 'HF_TOKEN', value);
    expect(await store.delete(scope, 'HF_TOKEN')).toBe(true);
    // What the delete left: a secret in its 7-day window, hidden from ListSecrets, refusing writes.
    expect(await store.list(scope)).toEqual([]);
    await expect(
      sm.client.send(new PutSecretValueCommand({ SecretId: name, SecretString: 'x' })),
    ).rejects.toThrow(/marked for deletion/);
    await expect(sm.client.send(new CreateSecretCommand({ Name: name, SecretString: 'x' }))).rejects.toThrow(
      /scheduled for deletion/,
    );

    sm.sent.length = 0;
    await store.set(scope, 'HF_TOKEN', `${value}-new`);
    expect(sm.names()).toEqual(['PutSecretValueCommand', 'RestoreSecretCommand', 'PutSecretValueCommand']);
    expect((sm.sent[1] as RestoreSecretCommand).input).toEqual({ SecretId: name });
    expect(sm.valueOf(name)).toBe(`${value}-new`);
    expect(await sm.client.send(new DescribeSecretCommand({ SecretId: name }))).not.toHaveProperty(
      'DeletedDate',
    );
    expect(await store.list(scope)).toEqual([{ name: 'HF_TOKEN', updatedAt: expect.any(Number) }]);

    // Once the window has passed, the secret is gone for good and a set creates it anew.
    expect(await store.delete(scope, 'HF_TOKEN')).toBe(true);
    sm.advanceMs(7 * 24 * 3600_000);
    sm.sent.length = 0;
    await store.set(scope, 'HF_TOKEN', `${value}-3`);
    expect(sm.names()).toEqual(['PutSecretValueCommand', 'CreateSecretCommand']);
    expect(sm.valueOf(name)).toBe(`${value}-3`);
  });

  it('a write that fails after the restore puts the deletion back; deleting twice is like deleting nothing', async () => {
    const sm = fakeSecretsManager();
    const name = 'ferry/shop/prod/HF_TOKEN';
    let puts = 0;
    // The second PutSecretValue (the one after RestoreSecret) fails, as a throttle or a dropped
    // connection would make it.
    const flaky = {
      send: (command: unknown) => {
        if (command instanceof PutSecretValueCommand && ++puts === 2)
          return Promise.reject(new Error('ThrottlingException: Rate exceeded'));
        return sm.client.send(command as never);
      },
    };
    const store = new SecretsManagerSecretStore(sm.client);
    await store.set(scope, 'HF_TOKEN', value);
    expect(await store.delete(scope, 'HF_TOKEN')).toBe(true);
    // Deleted already: the second delete finds nothing to delete (no raw InvalidRequestException).
    expect(await store.delete(scope, 'HF_TOKEN')).toBe(false);
    puts = 0;
    await expect(new SecretsManagerSecretStore(flaky as never).set(scope, 'HF_TOKEN', 'new')).rejects.toThrow(
      /Rate exceeded/,
    );
    // The deleted value is not left current: the secret is back in its recovery window.
    expect(await sm.client.send(new DescribeSecretCommand({ SecretId: name }))).toHaveProperty('DeletedDate');
    await expect(sm.client.send(new GetSecretValueCommand({ SecretId: name }))).rejects.toThrow(
      /marked for deletion/,
    );
  });

  it('ferry secrets delete then set --provider aws: the set succeeds and the new value is what Secrets Manager holds', async () => {
    const sm = fakeSecretsManager();
    const cwd = tempDir();
    const cli = secretsCli({ awsClient: () => sm.client }, cwd);
    const flags = ['--app', 'shop', '--env', 'prod', '--provider', 'aws'];
    await cli(['secrets', 'set', 'HF_TOKEN', ...flags], `${value}\n`);
    await cli(['secrets', 'delete', 'HF_TOKEN', ...flags]);
    await cli(['secrets', 'set', 'HF_TOKEN', ...flags, '--json'], `${value}-rotated\n`);
    const got = await sm.client.send(new GetSecretValueCommand({ SecretId: 'ferry/shop/prod/HF_TOKEN' }));
    expect(got.SecretString).toBe(`${value}-rotated`);
    expect(JSON.parse((await cli(['secrets', 'list', ...flags, '--json'])).stdout)).toEqual([
      { name: 'HF_TOKEN', updatedAt: expect.any(String) },
    ]);
  });
});

/**
 * Secrets Manager as its API reference describes one secret's life, for the calls Ferry makes. A
 * recovery-window DeleteSecret (7 to 30 days; 30 when neither option is given) stamps DeletedDate;
 * until the window ends, PutSecretValue, GetSecretValue and DeleteSecret of the secret, and
 * CreateSecret of its name, answer InvalidRequestException, ListSecrets leaves it out unless
 * IncludePlannedDeletion, DescribeSecret still answers with its DeletedDate, and RestoreSecret
 * removes the DeletedDate. ForceDeleteWithoutRecovery removes it at once, and does not answer
 * ResourceNotFoundException for a missing secret. The messages are the ones AWS sends.
 * https://docs.aws.amazon.com/secretsmanager/latest/apireference/API_DeleteSecret.html
 * https://docs.aws.amazon.com/secretsmanager/latest/apireference/API_RestoreSecret.html
 * https://docs.aws.amazon.com/secretsmanager/latest/apireference/API_CreateSecret.html
 * https://docs.aws.amazon.com/secretsmanager/latest/apireference/API_PutSecretValue.html
 * https://docs.aws.amazon.com/secretsmanager/latest/apireference/API_ListSecrets.html
 */
function fakeSecretsManager() {
  let nowMs = 1_700_000_000_000;
  interface Secret {
    value: string;
    lastChangedMs: number;
    deletedMs?: number;
    /** When the recovery window ends. */
    deleteAtMs?: number;
  }
  const secrets = new Map<string, Secret>();
  const sent: unknown[] = [];
  const meta = { $metadata: {} };
  const notFound = () =>
    new ResourceNotFoundException({ message: "Secrets Manager can't find the specified secret.", ...meta });
  const markedDeleted = () =>
    new InvalidRequestException({
      message: "You can't perform this operation on the secret because it was marked for deletion.",
      ...meta,
    });
  /** The secret, once any recovery window that has ended has taken it. */
  const find = (id: string | undefined): Secret | undefined => {
    const secret = secrets.get(id ?? '');
    if (secret?.deleteAtMs !== undefined && nowMs >= secret.deleteAtMs) {
      secrets.delete(id ?? '');
      return undefined;
    }
    return secret;
  };
  const live = (id: string | undefined): Secret => {
    const secret = find(id);
    if (!secret) throw notFound();
    if (secret.deletedMs !== undefined) throw markedDeleted();
    return secret;
  };
  const send = async (command: unknown): Promise<unknown> => {
    sent.push(command);
    if (command instanceof CreateSecretCommand) {
      const { Name, SecretString } = command.input;
      const existing = find(Name);
      if (existing?.deletedMs !== undefined) {
        throw new InvalidRequestException({
          message:
            "You can't create this secret because a secret with this name is already scheduled for deletion.",
          ...meta,
        });
      }
      if (existing) {
        throw new ResourceExistsException({
          message: `The operation failed because the secret ${Name} already exists.`,
          ...meta,
        });
      }
      secrets.set(Name ?? '', { value: SecretString ?? '', lastChangedMs: nowMs });
      return { Name };
    }
    if (command instanceof PutSecretValueCommand) {
      const secret = live(command.input.SecretId);
      secret.value = command.input.SecretString ?? '';
      secret.lastChangedMs = nowMs;
      return { Name: command.input.SecretId };
    }
    if (command instanceof GetSecretValueCommand) {
      return { Name: command.input.SecretId, SecretString: live(command.input.SecretId).value };
    }
    if (command instanceof DeleteSecretCommand) {
      const { SecretId, RecoveryWindowInDays, ForceDeleteWithoutRecovery } = command.input;
      if (ForceDeleteWithoutRecovery) {
        if (RecoveryWindowInDays !== undefined) {
          throw new InvalidParameterException({
            message: "You can't use ForceDeleteWithoutRecovery in conjunction with RecoveryWindowInDays.",
            ...meta,
          });
        }
        secrets.delete(SecretId ?? '');
        return { Name: SecretId };
      }
      const days = RecoveryWindowInDays ?? 30;
      if (days < 7 || days > 30) {
        throw new InvalidParameterException({
          message: 'The RecoveryWindowInDays value must be between 7 and 30 days (inclusive).',
          ...meta,
        });
      }
      const secret = live(SecretId);
      secret.deletedMs = nowMs;
      secret.deleteAtMs = nowMs + days * 24 * 3600_000;
      return { Name: SecretId, DeletionDate: new Date(secret.deleteAtMs) };
    }
    if (command instanceof RestoreSecretCommand) {
      const secret = find(command.input.SecretId);
      if (!secret) throw notFound();
      secret.deletedMs = undefined;
      secret.deleteAtMs = undefined;
      return { Name: command.input.SecretId };
    }
    if (command instanceof DescribeSecretCommand) {
      const secret = find(command.input.SecretId);
      if (!secret) throw notFound();
      return {
        Name: command.input.SecretId,
        LastChangedDate: new Date(secret.lastChangedMs),
        ...(secret.deletedMs === undefined ? {} : { DeletedDate: new Date(secret.deletedMs) }),
      };
    }
    if (command instanceof ListSecretsCommand) {
      // The name filter matches prefixes.
      const prefixes = command.input.Filters?.find((f) => f.Key === 'name')?.Values ?? [''];
      const SecretList = [...secrets.keys()]
        .filter((name) => prefixes.some((p) => name.startsWith(p)))
        .map((name) => [name, find(name)] as const)
        .filter(([, s]) => s && (s.deletedMs === undefined || command.input.IncludePlannedDeletion))
        .map(([name, s]) => ({ Name: name, LastChangedDate: new Date(s!.lastChangedMs) }));
      return { SecretList };
    }
    throw new Error(`the fake Secrets Manager does not answer ${(command as object).constructor.name}`);
  };
  return {
    sent,
    names: () => sent.map((c) => (c as { constructor: { name: string } }).constructor.name),
    client: { send: send as SecretsManagerClient['send'] },
    /** The current value, read as GetSecretValue would (refused while scheduled for deletion). */
    valueOf: (name: string) => live(name).value,
    advanceMs: (ms: number) => {
      nowMs += ms;
    },
  };
}
