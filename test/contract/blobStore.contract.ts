/**
 * The BlobStore contract. Every adapter (files, S3) must pass it unchanged. Keys are unique per test
 * so tests may share one bucket.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { BlobStore } from '../../core/ports.js';
import { expectFerryError, uniqueId } from './helpers.js';

export interface BlobStoreFixture {
  blobs: BlobStore;
  close(): Promise<void>;
}

export function describeBlobStoreContract(name: string, open: () => Promise<BlobStoreFixture>): void {
  describe(`BlobStore contract: ${name}`, () => {
    let fixture: BlobStoreFixture;
    let blobs: BlobStore;
    let prefix: string;
    let scratch: string;

    beforeEach(async () => {
      fixture = await open();
      blobs = fixture.blobs;
      prefix = uniqueId('t');
      scratch = await mkdtemp(join(tmpdir(), 'ferry-blob-contract-'));
    });
    afterEach(async () => {
      await fixture.close();
      await rm(scratch, { recursive: true, force: true });
    });

    it('stores bytes and reads them back exactly, under nested keys', async () => {
      const body = new Uint8Array(256).map((_, i) => i);
      const key = `${prefix}/payloads/job-1/input.bin`;
      await blobs.put(key, body);
      const read = await blobs.get(key);
      expect(read).toBeInstanceOf(Uint8Array);
      expect(Buffer.from(read!).equals(Buffer.from(body))).toBe(true);
    });

    it('overwrites a key', async () => {
      const key = `${prefix}/x.json`;
      await blobs.put(key, new TextEncoder().encode('{"v":1}'));
      await blobs.put(key, new TextEncoder().encode('{"v":2}'));
      expect(new TextDecoder().decode(await blobs.get(key))).toBe('{"v":2}');
    });

    it('stores an empty blob', async () => {
      const key = `${prefix}/empty`;
      await blobs.put(key, new Uint8Array());
      expect(await blobs.exists(key)).toBe(true);
      expect((await blobs.get(key))?.length).toBe(0);
    });

    it('reads a missing key as undefined and reports it as absent', async () => {
      expect(await blobs.get(`${prefix}/nothing`)).toBeUndefined();
      expect(await blobs.exists(`${prefix}/nothing`)).toBe(false);
    });

    it('tells existence and deletes (deleting twice or a missing key is fine)', async () => {
      const key = `${prefix}/a/b`;
      await blobs.put(key, new Uint8Array([1, 2, 3]));
      expect(await blobs.exists(key)).toBe(true);
      await blobs.delete(key);
      expect(await blobs.exists(key)).toBe(false);
      expect(await blobs.get(key)).toBeUndefined();
      await blobs.delete(key);
      await blobs.delete(`${prefix}/never-was`);
    });

    it('copies a blob to a new key (the source stays), under keys that need encoding; a missing source copies nothing', async () => {
      const bytes = new Uint8Array(randomBytes(300 * 1024));
      const from = `${prefix}/job%3Aa b/input-1`;
      const to = `${prefix}/job%3Aa b/input-2`;
      await blobs.put(from, bytes);
      expect(await blobs.copy(from, to)).toBe(true);
      expect(Buffer.from((await blobs.get(to))!).equals(Buffer.from(bytes))).toBe(true);
      expect(Buffer.from((await blobs.get(from))!).equals(Buffer.from(bytes))).toBe(true);
      expect(await blobs.copy(`${prefix}/never-was`, `${prefix}/copy`)).toBe(false);
      expect(await blobs.exists(`${prefix}/copy`)).toBe(false);
    });

    it('uploads a file in pieces with growing progress that ends at its size', async () => {
      const size = 3 * 1024 * 1024 + 17;
      const content = randomBytes(size);
      const file = join(scratch, 'artifact.tar.gz');
      await writeFile(file, content);
      const progress: number[] = [];
      const key = `${prefix}/artifacts/artifact.tar.gz`;
      await blobs.putFile(key, file, (sent) => progress.push(sent));

      expect(Buffer.from((await blobs.get(key))!).equals(content)).toBe(true);
      expect(progress.length).toBeGreaterThan(0);
      expect(progress.at(-1)).toBe(size);
      for (let i = 1; i < progress.length; i++) expect(progress[i]).toBeGreaterThanOrEqual(progress[i - 1]!);
    });

    it('uploads a file without a progress callback', async () => {
      const file = join(scratch, 'small.txt');
      await writeFile(file, 'hello');
      await blobs.putFile(`${prefix}/small.txt`, file);
      expect(new TextDecoder().decode(await blobs.get(`${prefix}/small.txt`))).toBe('hello');
    });

    it('fails to upload a file that does not exist, and stores nothing', async () => {
      await expect(blobs.putFile(`${prefix}/ghost`, join(scratch, 'ghost'))).rejects.toThrow();
      expect(await blobs.exists(`${prefix}/ghost`)).toBe(false);
    });

    it('refuses keys that climb out or are absolute (an internal error: keys are ours)', async () => {
      for (const key of ['../escape', `${prefix}/../../escape`, '/etc/passwd', '', `${prefix}//double`]) {
        await expectFerryError(blobs.put(key, new Uint8Array([1])), 'internal');
        await expectFerryError(blobs.get(key), 'internal');
      }
    });
  });
}
