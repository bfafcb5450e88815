/**
 * FERRY_AGENT_MODE=artifact: the task's init container. It copies the app artifact from S3 into the
 * task volume that the worker container mounts read-only at /ferry, then exits 0; the worker starts
 * only after that (ECS container dependency SUCCESS) and its entrypoint unpacks FERRY_ARTIFACT_PATH.
 *
 * Why here and not a presigned FERRY_ARTIFACT_URL: a presigned URL in a task definition expires (at
 * most 7 days, less with role credentials), yet ECS starts new tasks from it for months. The task
 * role reads the one artifact key instead, so credentials rotate and nothing secret is in the env.
 *
 * The file appears whole or not at all: written to `<path>.part-<random>`, then renamed.
 */
import { randomBytes } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { chmod, mkdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { GetObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { FerryError } from '../../core/errors.js';

export interface ArtifactDownload {
  s3: S3Client;
  bucket: string;
  key: string;
  /** Where the archive goes (the worker's FERRY_ARTIFACT_PATH). */
  path: string;
  signal?: AbortSignal;
}

/** Downloads `s3://bucket/key` to `path`; resolves to its size in bytes. */
export async function downloadArtifact(options: ArtifactDownload): Promise<number> {
  const { s3, bucket, key, path } = options;
  await mkdir(dirname(path), { recursive: true });
  const part = `${path}.part-${randomBytes(4).toString('hex')}`;
  try {
    let body: unknown;
    try {
      const result = await s3.send(
        new GetObjectCommand({ Bucket: bucket, Key: key }),
        options.signal ? { abortSignal: options.signal } : {},
      );
      body = result.Body;
    } catch (error) {
      const name = (error as Error).name;
      const status = (error as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode;
      if (name === 'NoSuchKey' || status === 404) {
        throw new FerryError('not_found', `The artifact s3://${bucket}/${key} does not exist`, {
          hint: 'Run `ferry deploy` again: the upload stage puts it there.',
        });
      }
      // The task role may read this one key and list nothing, and to a caller without
      // s3:ListBucket S3 answers a missing key with 403 Access Denied, not 404: the two cannot be
      // told apart here (https://docs.aws.amazon.com/AmazonS3/latest/API/API_GetObject.html).
      if (name === 'AccessDenied' || status === 403) {
        throw new FerryError(
          'failed',
          `The artifact s3://${bucket}/${key} does not exist, or this task's role may not read it (S3 answers both with 403)`,
          {
            hint: 'Run `ferry deploy` again: the upload stage puts the artifact there, and the deploy grants the task role its key.',
            cause: error,
          },
        );
      }
      throw new FerryError(
        'failed',
        `Cannot read the artifact s3://${bucket}/${key}: ${(error as Error).message}`,
        {
          cause: error,
        },
      );
    }
    if (!(body instanceof Readable)) {
      throw new FerryError('failed', `S3 returned no body for s3://${bucket}/${key}`);
    }
    await pipeline(
      body,
      createWriteStream(part, { mode: 0o644 }),
      options.signal ? { signal: options.signal } : {},
    );
    await publishWhole(part, path);
    return (await stat(path)).size;
  } finally {
    await rm(part, { force: true });
  }
}

/**
 * A load-balanced task's secret for the agent → worker hop (core/auth.ts lbSecretHeader), drawn by
 * the init container into the task's own volume before the worker and the agent start: only this
 * task's containers mount it, and a new task draws a new one.
 */
export async function writeLbSecret(path: string): Promise<void> {
  await writeTaskSecret(path, randomBytes(32).toString('base64url'));
}

/**
 * Hands a secret to another container of the task in a file of a task volume, which only the
 * containers meant to read it mount (infra/task-layout.ts). World-readable like the artifact, for a
 * reader that runs as another user than this container.
 */
export async function writeTaskSecret(path: string, value: string): Promise<void> {
  const part = `${path}.part-${randomBytes(4).toString('hex')}`;
  await writeFile(part, `${value}\n`, { mode: 0o644 });
  await publishWhole(part, path);
}

/**
 * Puts a finished part file at `path` in one rename, so readers see it whole or not at all, and
 * world-readable: the worker runs as another user than this container (the umask may have cut the
 * mode the file was created with).
 */
async function publishWhole(part: string, path: string): Promise<void> {
  await chmod(part, 0o644);
  await rename(part, path);
}

/**
 * The secret writeTaskSecret wrote, for the variable naming its file; a missing or empty file is a
 * configuration error.
 */
export async function readTaskSecret(path: string, variable: string): Promise<string> {
  let secret: string;
  try {
    secret = (await readFile(path, 'utf8')).trim();
  } catch (error) {
    throw new FerryError('failed', `${variable} ${path} cannot be read: ${(error as Error).message}`);
  }
  if (!secret) throw new FerryError('failed', `${variable} ${path} is empty`);
  return secret;
}
