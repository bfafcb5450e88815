/**
 * The source fingerprint: sha256 over the shipped files' sorted POSIX relative paths and contents,
 * each framed by its byte length so ("ab","c") and ("a","bc") never collide. A change rolls the
 * workers even when the resource configuration is the same (docs/architecture.md#the-cli).
 */
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import path from 'node:path';
import { comparePaths } from './files.js';

function lengthPrefix(bytes: number): Buffer {
  const frame = Buffer.alloc(8);
  frame.writeBigUInt64BE(BigInt(bytes));
  return frame;
}

export async function sourceFingerprint(projectDir: string, relPaths: readonly string[]): Promise<string> {
  const hash = createHash('sha256');
  for (const rel of [...relPaths].sort(comparePaths)) {
    const name = Buffer.from(rel, 'utf8');
    hash.update(lengthPrefix(name.length));
    hash.update(name);
    const file = path.join(projectDir, rel);
    const { size } = await stat(file);
    hash.update(lengthPrefix(size));
    // Streamed: a project may ship large data files.
    for await (const chunk of createReadStream(file)) hash.update(chunk as Buffer);
  }
  return hash.digest('hex');
}
