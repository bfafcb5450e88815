/**
 * Disk retention (docs/security.md): undeploy deletes the artifacts nothing runs any more and the
 * unpacked code, and the database gives freed pages back (incremental auto-vacuum).
 */
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { LocalProvider } from '../../cli/providers/local.js';
import { openLocalDatabase } from '../../core/adapters/local/sqlite.js';
import type { Job } from '../../core/job.js';
import type { EndpointRecord } from '../../core/ports.js';

const dirs: string[] = [];
const tempDir = () => {
  const dir = mkdtempSync(join(tmpdir(), 'ferry-retention-'));
  dirs.push(dir);
  return dir;
};
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

const endpoint = (id: string, artifactKey: string): EndpointRecord => ({
  id,
  app: 'a',
  env: 'dev',
  name: id,
  kind: 'queue',
  config: {},
  fingerprint: 'f',
  artifactKey,
  createdAt: 1,
  updatedAt: 1,
});

describe('disk retention', () => {
  it('undeploy deletes unused artifacts and unpacked code, keeping what others still run', async () => {
    const home = tempDir();
    const provider = new LocalProvider({ home, env: {}, projectDir: tempDir() });
    try {
      await provider.blobs.put('artifacts/one.tar.gz', new Uint8Array([1]));
      await provider.blobs.put('artifacts/shared.tar.gz', new Uint8Array([2]));
      const records = [
        endpoint('one', 'artifacts/one.tar.gz'),
        endpoint('two', 'artifacts/shared.tar.gz'),
        endpoint('three', 'artifacts/shared.tar.gz'),
      ];
      for (const record of records) {
        await provider.control.putEndpoint(record);
        mkdirSync(join(home, 'runtime', record.id, 'f'), { recursive: true });
      }
      const result = await provider.destroy([records[0]!, records[1]!]);
      expect(result.failed).toEqual([]);
      expect(await provider.blobs.exists('artifacts/one.tar.gz')).toBe(false);
      expect(await provider.blobs.exists('artifacts/shared.tar.gz')).toBe(true);
      expect(existsSync(join(home, 'runtime', 'one'))).toBe(false);
      expect(existsSync(join(home, 'runtime', 'two'))).toBe(false);
      expect(existsSync(join(home, 'runtime', 'three'))).toBe(true);
      await provider.destroy([records[2]!]);
      expect(await provider.blobs.exists('artifacts/shared.tar.gz')).toBe(false);
    } finally {
      await provider.close();
    }
  });

  it('gives freed pages back to the file system', async () => {
    const file = join(tempDir(), 'ferry.db');
    const db = openLocalDatabase(file);
    const peek = new Database(file, { readonly: true });
    try {
      expect(peek.pragma('auto_vacuum', { simple: true })).toBe(2);
      const input = { blob: 'x'.repeat(50_000) };
      for (let i = 0; i < 100; i++) {
        const job: Job = {
          id: `job-${i}`,
          endpointId: 'e',
          status: 'COMPLETED',
          input,
          policy: { executionTimeoutMs: 1_000, ttlMs: 10_000, lowPriority: false },
          sync: false,
          retentionMs: 1,
          createdAt: 0,
          expiresAt: 1,
          attempt: 1,
          retries: 0,
          version: 1,
        } as Job;
        await db.jobs.create(job);
      }
      await db.jobs.deleteExpired(10, 100);
      expect(peek.pragma('freelist_count', { simple: true })).toBeGreaterThan(100);
      db.reclaimSpace(1_000_000);
      expect(peek.pragma('freelist_count', { simple: true })).toBe(0);
    } finally {
      peek.close();
      await db.close();
    }
  });
});
