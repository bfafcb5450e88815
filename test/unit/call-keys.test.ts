/**
 * Call keys' secret names and their move to `…/<name>/key` (core/call-keys.ts): a name Secrets
 * Manager cannot misread as a complete ARN, and deployments of earlier Ferry versions (whose secret
 * is under `ferry-call/<app>/<env>/<name>`) get a key under the new name and lose the old secret.
 */
import { describe, expect, it } from 'vitest';
import { MemoryCallTokens } from '../../core/adapters/aws/secrets.js';
import {
  callTokenSecretName,
  deleteLegacyCallTokenSecret,
  legacyCallTokenSecretName,
  prepareCallKeys,
  revokeCallKeys,
} from '../../core/call-keys.js';
import type { ApiKeyRecord, ControlStore, EndpointRecord } from '../../core/ports.js';

const endpoint = (name: string, id = `id${name.replace(/[^a-z0-9]/g, '')}`): EndpointRecord => ({
  id,
  app: 'shop',
  env: 'prod',
  name,
  kind: 'queue',
  config: {},
  fingerprint: 'f',
  createdAt: 1,
  updatedAt: 1,
});

function keyStore(initial: ApiKeyRecord[] = []) {
  const keys = [...initial];
  const control = {
    putApiKey: async (k: ApiKeyRecord) => void keys.push(k),
    listApiKeys: async () => [...keys],
    deleteApiKey: async (id: string) => {
      const at = keys.findIndex((k) => k.id === id);
      if (at >= 0) keys.splice(at, 1);
    },
  } as unknown as Pick<ControlStore, 'putApiKey' | 'listApiKeys' | 'deleteApiKey'>;
  return { keys, control };
}

describe('the call key secret name', () => {
  it('never ends in "-" and six characters, which Secrets Manager reads as its own suffix', () => {
    // https://docs.aws.amazon.com/secretsmanager/latest/userguide/troubleshoot.html#ARN_secretnamehyphen
    for (const name of [
      'gpu-worker',
      'img-resize',
      'a-bcdefg',
      'x-ABC123',
      'api',
      'cpu_worker',
      'a-b-c-d-e-f-g',
    ]) {
      const secret = callTokenSecretName(endpoint(name));
      expect(secret, name).toBe(`ferry-call/shop/prod/${name}/key`);
      expect(secret, name).not.toMatch(/-[A-Za-z0-9]{6}$/);
    }
    expect(legacyCallTokenSecretName(endpoint('gpu-worker'))).toBe('ferry-call/shop/prod/gpu-worker');
  });
});

describe('moving from the name of earlier versions', () => {
  it('gives an endpoint whose secret is only under the old name a new key under the new name', async () => {
    const old = endpoint('gpu-worker');
    const current = endpoint('api');
    const { keys, control } = keyStore([
      { id: 'call-old', name: 'w', hash: 'h1', createdAt: 1, app: 'shop', env: 'prod', endpointId: old.id },
      {
        id: 'call-cur',
        name: 'w',
        hash: 'h2',
        createdAt: 1,
        app: 'shop',
        env: 'prod',
        endpointId: current.id,
      },
    ]);
    const secrets = new MemoryCallTokens();
    secrets.values.set(legacyCallTokenSecretName(old), 'fy_old');
    secrets.values.set(callTokenSecretName(current), 'fy_current');
    const ids = await prepareCallKeys({ control, secrets, nowMs: () => 2 }, [old, current], new Set());
    // The unchanged endpoint whose secret is where its tasks read it keeps its key and tasks.
    expect(ids.api).toBe('call-cur');
    expect(secrets.values.get(callTokenSecretName(current))).toBe('fy_current');
    // The other gets a new key in the new secret; the old key stays valid until the deploy retires it.
    expect(ids['gpu-worker']).not.toBe('call-old');
    expect(secrets.values.get(callTokenSecretName(old))).toMatch(/^fy_/);
    expect(keys.map((k) => k.id)).toEqual(['call-old', 'call-cur', ids['gpu-worker']]);
    // Once the stack deployed, the old secret goes.
    await deleteLegacyCallTokenSecret(secrets, old);
    expect([...secrets.values.keys()].sort()).toEqual(
      [callTokenSecretName(current), callTokenSecretName(old)].sort(),
    );
  });

  it('revokes the secret under both names at undeploy, and the keys', async () => {
    const gone = endpoint('img-resize');
    const { keys, control } = keyStore([
      { id: 'call-1', name: 'w', hash: 'h1', createdAt: 1, app: 'shop', env: 'prod', endpointId: gone.id },
    ]);
    const secrets = new MemoryCallTokens();
    secrets.values.set(legacyCallTokenSecretName(gone), 'fy_old');
    secrets.values.set(callTokenSecretName(gone), 'fy_new');
    secrets.values.set(callTokenSecretName(endpoint('other')), 'fy_other');
    await revokeCallKeys({ control, secrets }, gone);
    expect(keys).toEqual([]);
    expect([...secrets.values.keys()]).toEqual([callTokenSecretName(endpoint('other'))]);
  });
});

// Secrets Manager: "If you update the secret value more than once every 10 minutes, you create more
// versions than Secrets Manager removes, and you will reach the quota for secret versions"
// (https://docs.aws.amazon.com/secretsmanager/latest/userguide/reference_limits.html).
describe('rotation on a changed endpoint', () => {
  const minute = 60_000;
  /** Deploys `ep` as changed (in `rotate`) at `atMs`, with its secret in place; answers its key id. */
  async function changedDeploy(atMs: number, store: ReturnType<typeof keyStore>, secrets: MemoryCallTokens) {
    const ep = endpoint('api');
    const ids = await prepareCallKeys(
      { control: store.control, secrets, nowMs: () => atMs },
      [ep],
      new Set([ep.id]),
    );
    return ids.api!;
  }

  it('keeps a key younger than 10 minutes: a CI deploying every few minutes writes no new secret version', async () => {
    const store = keyStore();
    const secrets = new MemoryCallTokens();
    let puts = 0;
    const put = secrets.put.bind(secrets);
    secrets.put = async (name, value) => {
      puts++;
      await put(name, value);
    };
    const first = await changedDeploy(0, store, secrets);
    expect(puts).toBe(1);
    // Code-only changes 2, 5 and 9.99 minutes later: the same key, no write.
    for (const atMs of [2 * minute, 5 * minute, 10 * minute - 1]) {
      expect(await changedDeploy(atMs, store, secrets)).toBe(first);
    }
    expect(puts).toBe(1);
    expect(store.keys).toHaveLength(1);
  });

  it('replaces a key 10 minutes old or more, as before', async () => {
    const store = keyStore();
    const secrets = new MemoryCallTokens();
    const first = await changedDeploy(0, store, secrets);
    const second = await changedDeploy(10 * minute, store, secrets);
    expect(second).not.toBe(first);
    // The age that counts is the newest key's.
    expect(await changedDeploy(15 * minute, store, secrets)).toBe(second);
    expect(await changedDeploy(20 * minute, store, secrets)).not.toBe(second);
  });

  it('a young key whose secret is gone is replaced all the same: its value exists nowhere else', async () => {
    const store = keyStore();
    const secrets = new MemoryCallTokens();
    const first = await changedDeploy(0, store, secrets);
    secrets.values.clear();
    expect(await changedDeploy(minute, store, secrets)).not.toBe(first);
  });
});
