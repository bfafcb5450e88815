/**
 * BlobStore on the local file system: a key `a/b/c` is the file `<root>/a/b/c`. Writes go to a temp
 * file in the same folder and are renamed into place, so a reader never sees half a blob and a crash
 * mid-write leaves the old blob (or none), never a torn one.
 */
import { randomUUID } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { copyFile, mkdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { dirname, join, resolve, sep } from 'node:path';
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { internal } from '../../errors.js';
import type { BlobStore } from '../../ports.js';

export class FileBlobStore implements BlobStore {
  readonly #root: string;

  constructor(root: string) {
    this.#root = resolve(root);
  }

  async put(key: string, body: Uint8Array): Promise<void> {
    const path = this.#path(key);
    await this.#atomically(path, (temp) => writeFile(temp, body));
  }

  async putFile(key: string, filePath: string, onProgress?: (sentBytes: number) => void): Promise<void> {
    const path = this.#path(key);
    await this.#atomically(path, async (temp) => {
      let sentBytes = 0;
      const count = new Transform({
        transform(chunk: Buffer, _encoding, done) {
          sentBytes += chunk.length;
          onProgress?.(sentBytes);
          done(null, chunk);
        },
      });
      await pipeline(createReadStream(filePath), count, createWriteStream(temp));
      // An empty file still reports once, so a progress bar can finish.
      if (sentBytes === 0) onProgress?.(0);
    });
  }

  async get(key: string): Promise<Uint8Array | undefined> {
    try {
      return new Uint8Array(await readFile(this.#path(key)));
    } catch (error) {
      if (isMissing(error)) return undefined;
      throw error;
    }
  }

  async copy(fromKey: string, toKey: string): Promise<boolean> {
    const from = this.#path(fromKey);
    const to = this.#path(toKey);
    try {
      await this.#atomically(to, (temp) => copyFile(from, temp));
      return true;
    } catch (error) {
      if (isMissing(error)) return false;
      throw error;
    }
  }

  async exists(key: string): Promise<boolean> {
    try {
      return (await stat(this.#path(key))).isFile();
    } catch (error) {
      if (isMissing(error)) return false;
      throw error;
    }
  }

  /** Deleting a missing key is fine (as on S3). */
  async delete(key: string): Promise<void> {
    await rm(this.#path(key), { force: true });
  }

  async close(): Promise<void> {}

  /** Keys are '/'-separated relative paths; anything that could leave the root is refused. */
  #path(key: string): string {
    const parts = key.split('/');
    if (
      key.length === 0 ||
      key.length > 1024 ||
      key.startsWith('/') ||
      key.includes('\\') ||
      key.includes('\0') ||
      /^[a-zA-Z]:/.test(key) ||
      parts.some((p) => p === '' || p === '.' || p === '..')
    ) {
      throw internal(
        `Invalid blob key ${JSON.stringify(key)}: use a relative '/'-separated path without '..'`,
      );
    }
    const path = join(this.#root, ...parts);
    // Belt and braces: the checks above should make this impossible.
    if (!path.startsWith(this.#root + sep)) throw internal(`Invalid blob key ${JSON.stringify(key)}`);
    return path;
  }

  async #atomically(path: string, write: (tempPath: string) => Promise<void>): Promise<void> {
    await mkdir(dirname(path), { recursive: true });
    const temp = `${path}.${randomUUID()}.tmp`;
    try {
      await write(temp);
      await rename(temp, path);
    } catch (error) {
      await rm(temp, { force: true });
      throw error;
    }
  }
}

const isMissing = (error: unknown): boolean => {
  const code = (error as { code?: string }).code;
  return code === 'ENOENT' || code === 'ENOTDIR';
};
