/**
 * Endpoint secrets on the local platform (docs/security.md): values set with `ferry secrets set`,
 * stored in ferry.db encrypted with AES-256-GCM under a 32-byte key in FERRY_HOME/secrets.key (0600,
 * created on first use), and handed only to the workers of endpoints that name them in `secrets=`.
 * The additional authenticated data binds each ciphertext to its app, environment and name, so a row
 * copied to another name or app does not decrypt. Nothing here ever returns a value except
 * `resolve`, which the worker pool calls to build a worker's environment.
 */
import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import type Database from 'better-sqlite3';
import { FerryError } from '../../errors.js';
import { createPrivateFile } from './home.js';

/** A secret's name is an environment variable name: that is how the worker sees it. */
export const secretNamePattern = /^[A-Za-z_][A-Za-z0-9_]*$/;
/** A value is an environment variable: keep it well under what exec() accepts. */
export const secretValueMaxBytes = 64 * 1024;

/** Variable names a secret may not take: the platform's own (both providers). */
export const reservedSecretPrefixes = ['FERRY_', 'RUNPOD_', 'AWS_', 'ECS_'] as const;

/** A usage error for a value over secretValueMaxBytes (both providers): it becomes an environment variable. */
export function checkSecretValue(value: string): void {
  if (Buffer.byteLength(value) > secretValueMaxBytes) {
    throw new FerryError('usage', `A secret value is at most ${secretValueMaxBytes} bytes`, {
      hint: 'Keep larger data in a file or object storage, and put its location (or a key to it) in the secret.',
    });
  }
}

export function checkSecretName(name: string): void {
  if (!secretNamePattern.test(name)) {
    throw new FerryError('usage', `Secret name '${name}' is not an environment variable name`, {
      hint: 'Use letters, digits and _, not starting with a digit (e.g. HF_TOKEN)',
    });
  }
  if (reservedSecretPrefixes.some((prefix) => name.toUpperCase().startsWith(prefix))) {
    throw new FerryError(
      'usage',
      `Secret name '${name}' uses a reserved prefix (${reservedSecretPrefixes.join(', ')})`,
      {
        hint: `The platform sets variables with these prefixes itself: choose another name, e.g. MY_${name}.`,
      },
    );
  }
}

export interface SecretScope {
  app: string;
  env: string;
}

export interface SecretListing {
  name: string;
  updatedAt: number;
}

/** What the CLI and the worker pool need; the AWS provider implements the first three on Secrets Manager. */
export interface SecretStore {
  set(scope: SecretScope, name: string, value: string): Promise<void>;
  list(scope: SecretScope): Promise<SecretListing[]>;
  delete(scope: SecretScope, name: string): Promise<boolean>;
}

const keyBytes = 32;
const nonceBytes = 12;

export class LocalSecretStore implements SecretStore {
  #key: Buffer | undefined;

  constructor(
    private readonly db: Database.Database,
    private readonly keyFile: string,
    private readonly clock: () => number = Date.now,
  ) {
    db.exec(`CREATE TABLE IF NOT EXISTS secrets (
      app TEXT NOT NULL,
      env TEXT NOT NULL,
      name TEXT NOT NULL,
      nonce BLOB NOT NULL,
      ciphertext BLOB NOT NULL,
      tag BLOB NOT NULL,
      updated_at INTEGER NOT NULL,
      PRIMARY KEY (app, env, name)
    )`);
  }

  async set(scope: SecretScope, name: string, value: string): Promise<void> {
    checkSecretName(name);
    checkSecretValue(value);
    const nonce = randomBytes(nonceBytes);
    const cipher = createCipheriv('aes-256-gcm', this.key(true), nonce);
    cipher.setAAD(aad(scope, name));
    const ciphertext = Buffer.concat([cipher.update(value, 'utf8'), cipher.final()]);
    this.db
      .prepare(
        `INSERT INTO secrets (app, env, name, nonce, ciphertext, tag, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT (app, env, name) DO UPDATE SET nonce = excluded.nonce, ciphertext = excluded.ciphertext,
           tag = excluded.tag, updated_at = excluded.updated_at`,
      )
      .run(scope.app, scope.env, name, nonce, ciphertext, cipher.getAuthTag(), this.clock());
  }

  async list(scope: SecretScope): Promise<SecretListing[]> {
    return this.db
      .prepare<[string, string], { name: string; updated_at: number }>(
        'SELECT name, updated_at FROM secrets WHERE app = ? AND env = ? ORDER BY name',
      )
      .all(scope.app, scope.env)
      .map((row) => ({ name: row.name, updatedAt: row.updated_at }));
  }

  async delete(scope: SecretScope, name: string): Promise<boolean> {
    return (
      this.db
        .prepare('DELETE FROM secrets WHERE app = ? AND env = ? AND name = ?')
        .run(scope.app, scope.env, name).changes > 0
    );
  }

  /**
   * The values of `names` for one endpoint's workers. A name with no value set is an error that names
   * it (never its value), so a worker does not start without a secret its code expects.
   */
  async resolve(scope: SecretScope, names: readonly string[]): Promise<Record<string, string>> {
    const out: Record<string, string> = {};
    if (names.length === 0) return out;
    const read = this.db.prepare<
      [string, string, string],
      { nonce: Buffer; ciphertext: Buffer; tag: Buffer }
    >('SELECT nonce, ciphertext, tag FROM secrets WHERE app = ? AND env = ? AND name = ?');
    const missing: string[] = [];
    for (const name of names) {
      const row = read.get(scope.app, scope.env, name);
      if (!row) {
        missing.push(name);
        continue;
      }
      const decipher = createDecipheriv('aes-256-gcm', this.key(false), row.nonce);
      decipher.setAAD(aad(scope, name));
      decipher.setAuthTag(row.tag);
      try {
        out[name] = Buffer.concat([decipher.update(row.ciphertext), decipher.final()]).toString('utf8');
      } catch {
        throw new FerryError(
          'failed',
          `Secret ${name} of ${scope.app}/${scope.env} does not decrypt with this secrets.key`,
        );
      }
    }
    if (missing.length > 0) {
      throw new FerryError('failed', `secrets not set: ${missing.join(', ')}`, {
        hint: `printf %s "$VALUE" | ferry secrets set ${missing[0]} --app ${scope.app} --env ${scope.env}`,
      });
    }
    return out;
  }

  private key(create: boolean): Buffer {
    if (this.#key) return this.#key;
    if (!existsSync(this.keyFile)) {
      if (!create) throw new FerryError('failed', `No secrets key at ${this.keyFile}`);
      createPrivateFile(this.keyFile);
      writeFileSync(this.keyFile, randomBytes(keyBytes).toString('base64'), { mode: 0o600 });
    }
    const key = Buffer.from(readFileSync(this.keyFile, 'utf8').trim(), 'base64');
    if (key.length !== keyBytes) throw new FerryError('failed', `${this.keyFile} is not a 32-byte key`);
    this.#key = key;
    return key;
  }
}

const aad = (scope: SecretScope, name: string): Buffer =>
  Buffer.from(`${scope.app}\0${scope.env}\0${name}`, 'utf8');
