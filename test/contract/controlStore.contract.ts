/**
 * The ControlStore contract. Every adapter (SQLite, DynamoDB) must pass it unchanged. Names are
 * unique per test and listings are checked on this test's own records, so tests may share a table.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { ApiKeyRecord, ControlStore, EndpointRecord, EnvironmentRecord } from '../../core/ports.js';
import { uniqueId } from './helpers.js';

export interface ControlStoreFixture {
  control: ControlStore;
  close(): Promise<void>;
}

export function describeControlStoreContract(name: string, open: () => Promise<ControlStoreFixture>): void {
  describe(`ControlStore contract: ${name}`, () => {
    let fixture: ControlStoreFixture;
    let control: ControlStore;
    let app: string;

    beforeEach(async () => {
      fixture = await open();
      control = fixture.control;
      app = uniqueId('app');
    });
    afterEach(async () => {
      await fixture.close();
    });

    const env = (overrides: Partial<EnvironmentRecord> = {}): EnvironmentRecord => ({
      app,
      name: 'dev',
      createdAt: 1_000,
      ...overrides,
    });
    const endpoint = (overrides: Partial<EndpointRecord> = {}): EndpointRecord => ({
      id: uniqueId('ep'),
      app,
      env: 'dev',
      name: 'gpu_worker',
      kind: 'queue',
      config: { gpu: ['L4'], workers: [0, 3], idleTimeout: 60 },
      fingerprint: 'sha256:abc',
      createdAt: 1_000,
      updatedAt: 1_000,
      ...overrides,
    });

    it('puts, gets, lists and deletes apps', async () => {
      const other = uniqueId('app');
      await control.putApp({ name: app, createdAt: 1 });
      await control.putApp({ name: other, createdAt: 2 });
      expect(await control.getApp(app)).toEqual({ name: app, createdAt: 1 });
      expect(await control.getApp(uniqueId('missing'))).toBeUndefined();
      const names = (await control.listApps()).map((a) => a.name);
      expect(names).toEqual(expect.arrayContaining([app, other]));

      await control.putApp({ name: app, createdAt: 5 });
      expect(await control.getApp(app)).toEqual({ name: app, createdAt: 5 });
      expect((await control.listApps()).filter((a) => a.name === app)).toHaveLength(1);

      await control.deleteApp(app);
      await control.deleteApp(app);
      expect(await control.getApp(app)).toBeUndefined();
      expect((await control.listApps()).map((a) => a.name)).not.toContain(app);
      expect(await control.getApp(other)).toBeDefined();
    });

    it('keys environments by app and name, and lists those of one app', async () => {
      const otherApp = uniqueId('app');
      await control.putEnvironment(env({ name: 'dev' }));
      await control.putEnvironment(
        env({ name: 'production', fingerprint: 'f1', artifactKey: 'a/k', deployedAt: 9 }),
      );
      await control.putEnvironment(env({ app: otherApp, name: 'dev' }));

      expect(await control.getEnvironment(app, 'production')).toEqual(
        env({ name: 'production', fingerprint: 'f1', artifactKey: 'a/k', deployedAt: 9 }),
      );
      expect(await control.getEnvironment(app, 'staging')).toBeUndefined();
      expect((await control.listEnvironments(app)).map((e) => e.name).sort()).toEqual(['dev', 'production']);
      expect((await control.listEnvironments(otherApp)).map((e) => e.name)).toEqual(['dev']);

      await control.putEnvironment(env({ name: 'dev', fingerprint: 'f2' }));
      expect((await control.getEnvironment(app, 'dev'))?.fingerprint).toBe('f2');
      expect(await control.listEnvironments(app)).toHaveLength(2);

      await control.deleteEnvironment(app, 'dev');
      expect(await control.getEnvironment(app, 'dev')).toBeUndefined();
      expect(await control.getEnvironment(otherApp, 'dev')).toBeDefined();
    });

    it('stores endpoints and lists them by app, by app and environment, or all', async () => {
      const otherApp = uniqueId('app');
      const devQueue = endpoint({ env: 'dev', name: 'gpu_worker' });
      const devLb = endpoint({
        env: 'dev',
        name: 'lb_worker',
        kind: 'lb',
        artifactKey: 'artifacts/1.tar.gz',
      });
      const prod = endpoint({ env: 'production' });
      const foreign = endpoint({ app: otherApp });
      for (const e of [devQueue, devLb, prod, foreign]) await control.putEndpoint(e);

      expect(await control.getEndpoint(devLb.id)).toEqual(devLb);
      expect(await control.getEndpoint(uniqueId('missing'))).toBeUndefined();
      const ids = (list: EndpointRecord[]) => list.map((e) => e.id).sort();
      expect(ids(await control.listEndpoints({ app }))).toEqual([devQueue.id, devLb.id, prod.id].sort());
      expect(ids(await control.listEndpoints({ app, env: 'dev' }))).toEqual([devQueue.id, devLb.id].sort());
      expect(ids(await control.listEndpoints({ app: otherApp }))).toEqual([foreign.id]);
      const all = ids(await control.listEndpoints());
      expect(all).toEqual(expect.arrayContaining([devQueue.id, devLb.id, prod.id, foreign.id]));
      expect(ids(await control.listEndpoints({}))).toEqual(all);

      const rolled = { ...devQueue, fingerprint: 'sha256:def', updatedAt: 2_000 };
      await control.putEndpoint(rolled);
      expect(await control.getEndpoint(devQueue.id)).toEqual(rolled);
      expect(ids(await control.listEndpoints({ app, env: 'dev' }))).toHaveLength(2);

      await control.deleteEndpoint(devQueue.id);
      await control.deleteEndpoint(devQueue.id);
      expect(await control.getEndpoint(devQueue.id)).toBeUndefined();
      expect(ids(await control.listEndpoints({ app, env: 'dev' }))).toEqual([devLb.id]);
    });

    it('finds API keys by hash, lists and deletes them', async () => {
      const key = (overrides: Partial<ApiKeyRecord> = {}): ApiKeyRecord => ({
        id: uniqueId('key'),
        name: 'ci',
        hash: uniqueId('hash').replace(/-/g, ''),
        createdAt: 1_000,
        ...overrides,
      });
      const a = key({ name: 'laptop' });
      const b = key({ name: 'ci', createdAt: 2_000 });
      await control.putApiKey(a);
      await control.putApiKey(b);

      expect(await control.findApiKeyByHash(a.hash)).toEqual(a);
      expect(await control.findApiKeyByHash('0'.repeat(64))).toBeUndefined();
      const listed = (await control.listApiKeys()).filter((k) => k.id === a.id || k.id === b.id);
      expect(listed.map((k) => k.id).sort()).toEqual([a.id, b.id].sort());

      await control.deleteApiKey(a.id);
      await control.deleteApiKey(a.id);
      expect(await control.findApiKeyByHash(a.hash)).toBeUndefined();
      expect(await control.findApiKeyByHash(b.hash)).toEqual(b);
    });
  });
}
