/**
 * The WorkerRegistry contract. Every adapter (SQLite, DynamoDB) must pass it unchanged.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { WorkerRecord, WorkerRegistry } from '../../core/ports.js';
import { futureBaseMs, uniqueId } from './helpers.js';

export interface WorkerRegistryFixture {
  workers: WorkerRegistry;
  close(): Promise<void>;
}

export function describeWorkerRegistryContract(
  name: string,
  open: () => Promise<WorkerRegistryFixture>,
): void {
  describe(`WorkerRegistry contract: ${name}`, () => {
    let fixture: WorkerRegistryFixture;
    let workers: WorkerRegistry;
    let ep: string;
    let t0: number;

    beforeEach(async () => {
      fixture = await open();
      workers = fixture.workers;
      ep = uniqueId('ep');
      t0 = futureBaseMs();
    });
    afterEach(async () => {
      await fixture.close();
    });

    const worker = (overrides: Partial<WorkerRecord> = {}): WorkerRecord => ({
      workerId: uniqueId('w'),
      endpointId: ep,
      state: 'idle',
      jobIds: [],
      lastSeenAt: t0,
      ...overrides,
    });
    const sortedIds = (list: WorkerRecord[]) => list.map((w) => w.workerId).sort();

    it('records a heartbeat and reads it back', async () => {
      const w = worker({ state: 'running', jobIds: ['job-1', 'job-2'] });
      await workers.heartbeat(w);
      expect(await workers.get(w.workerId)).toEqual(w);
      expect(await workers.get(uniqueId('missing'))).toBeUndefined();
    });

    it('replaces the record on the next heartbeat', async () => {
      const w = worker({ state: 'running', jobIds: ['job-1'] });
      await workers.heartbeat(w);
      const later = { ...w, state: 'idle' as const, jobIds: [], lastSeenAt: t0 + 5_000 };
      await workers.heartbeat(later);
      expect(await workers.get(w.workerId)).toEqual(later);
      expect(await workers.list(ep, t0)).toEqual([later]);
    });

    it('lists the workers of one endpoint seen since a moment', async () => {
      const recent = worker({ lastSeenAt: t0 + 1_000 });
      const exactly = worker({ lastSeenAt: t0 + 500 });
      const stale = worker({ lastSeenAt: t0 });
      const elsewhere = worker({ endpointId: uniqueId('ep'), lastSeenAt: t0 + 1_000 });
      for (const w of [recent, exactly, stale, elsewhere]) await workers.heartbeat(w);

      expect(sortedIds(await workers.list(ep, t0 + 500))).toEqual([recent.workerId, exactly.workerId].sort());
      expect(sortedIds(await workers.list(ep, t0))).toEqual(
        [recent.workerId, exactly.workerId, stale.workerId].sort(),
      );
      expect(await workers.list(ep, t0 + 2_000)).toEqual([]);
    });

    it('removes a worker (removing twice is fine)', async () => {
      const w = worker();
      await workers.heartbeat(w);
      await workers.remove(w.workerId);
      await workers.remove(w.workerId);
      expect(await workers.get(w.workerId)).toBeUndefined();
      expect(await workers.list(ep, 0)).toEqual([]);
    });
  });
}
