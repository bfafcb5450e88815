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
 *
 * A stalled or broken connection must not hold the task (and its GPU host) for ever: until the
 * download ends the agent has not started, so no start grace applies to the task. Two layers:
 *
 * - A stall: the client's socket idle timeout (`artifactS3Config`, the SDK's NodeHttpHandler
 *   `socketTimeout`) destroys a connection on which no byte arrived for `stallMs`, whether S3 has not
 *   answered yet (the SDK then retries the request itself) or the body stopped mid-way (the body
 *   stream fails with the SDK's TimeoutError). Not `requestTimeout`: a total time, up to the response
 *   headers only (https://github.com/aws/aws-sdk-js-v3/issues/8098), which only warns unless
 *   `throwOnRequestTimeout` (@smithy/types NodeHttpHandlerOptions). A slow download that keeps moving
 *   is never cut.
 * - A resume: the SDK retries a request, never a body that failed after `send` resolved. So here a
 *   stalled, reset or short body is asked for again from the first byte not yet written, `Range:
 *   bytes=<written>-` with `If-Match: <ETag of the first answer>`: S3 answers 412 Precondition Failed
 *   when the object is no longer that one (GetObject If-Match,
 *   https://docs.aws.amazon.com/AmazonS3/latest/API/API_GetObject.html), and the download fails
 *   rather than splice two objects. At most `attempts` requests, with a doubling pause between them;
 *   then a FerryError that names the artifact, how far it got and why (main.ts prints it and exits 1;
 *   the worker and the agent start only on this container's success, so the task stops).
 *
 * How long at worst, with the defaults (30 s stall, 5 GETs, pauses of 1+2+4+8 s): a body that stalls
 * every time fails after about 2.75 min; S3 never answering at all, after about 8 min (each GET is
 * itself 3 SDK attempts). Before, either held the task for ever.
 *
 * The body is read as the SDK hands it, a Node IncomingMessage: with no ChecksumMode and
 * responseChecksumValidation WHEN_REQUIRED there is no ChecksumStream around it, which has been seen
 * to swallow a destroyed socket and never end (https://github.com/aws/aws-sdk-js-v3/issues/8098).
 *
 * What is checked: the file's size is the object's (Content-Length of the first answer; each resumed
 * part must start where the file ends and report the same total in Content-Range), and If-Match keeps
 * every byte from the same object. No checksum: the deploy uploads without one (s3ClientConfig,
 * WHEN_REQUIRED), and a ranged GET has no whole-object checksum to check anyway.
 */
import { randomBytes } from 'node:crypto';
import { chmod, type FileHandle, mkdir, open, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { Readable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  GetObjectCommand,
  type GetObjectCommandOutput,
  type S3Client,
  type S3ClientConfig,
} from '@aws-sdk/client-s3';
import { s3ClientConfig } from '../../core/adapters/aws/s3.js';
import { FerryError, messageOf } from '../../core/errors.js';

/**
 * How long a connection to S3 may deliver nothing before it is cut and the download resumed. Far
 * beyond the pauses of a working connection: S3 answers a GET within a second or so and then streams,
 * and a lossy link pauses while TCP retransmits, its timeout doubling from 200 ms (six losses in a
 * row: about 13 s). And cheap when it cuts a connection that would have recovered: the download
 * resumes where it stopped, it does not start over. Short, because until the download ends nothing
 * else watches the task. A slow link is not a stall: only a gap between bytes counts.
 */
export const artifactStallMs = 30_000;

/** GET requests in all (the first and the resumes) before the download fails. */
export const artifactAttempts = 5;

/** The pause before the first resume, doubled before each next one (1, 2, 4, 8 s). */
const firstBackoffMs = 1_000;

/**
 * The init container's S3 client settings (merge with region and credentials): s3ClientConfig, and
 * the SDK's connection and socket idle timeouts at `stallMs`, which are what notice a stall. The
 * SDK's own retries (3 attempts of a request that failed before its body) stay as they are.
 */
export function artifactS3Config(stallMs: number = artifactStallMs) {
  return {
    ...s3ClientConfig,
    requestHandler: { connectionTimeout: stallMs, socketTimeout: stallMs },
  } as const satisfies Partial<S3ClientConfig>;
}

export interface ArtifactDownload {
  /** Made with `artifactS3Config`: its socket timeout is what cuts a stalled connection. */
  s3: S3Client;
  bucket: string;
  key: string;
  /** Where the archive goes (the worker's FERRY_ARTIFACT_PATH). */
  path: string;
  signal?: AbortSignal;
  /** GET requests in all before giving up (default `artifactAttempts`). */
  attempts?: number;
  /** The pause before the first resume, doubled each time (default 1 s). */
  backoffMs?: number;
  /** Told of each failed attempt that will be resumed (the container's log). */
  log?: (line: string) => void;
}

/** How far the download is: what the first answer said of the object, and the bytes in the file. */
interface Progress {
  /** Set from the first answer's headers; every resumed part must be of the same object. */
  object?: { size: number; etag: string | undefined };
  /** Bytes written to the part file, from its start, with no gap. */
  written: number;
}

/** A failure another request will not fix: the download ends with it at once. */
class Final extends Error {
  constructor(readonly error: unknown) {
    super(messageOf(error));
  }
}

/** Downloads `s3://bucket/key` to `path`; resolves to its size in bytes. */
export async function downloadArtifact(options: ArtifactDownload): Promise<number> {
  const { bucket, key, path, signal } = options;
  const attempts = Math.max(1, options.attempts ?? artifactAttempts);
  const backoffMs = options.backoffMs ?? firstBackoffMs;
  await mkdir(dirname(path), { recursive: true });
  const part = `${path}.part-${randomBytes(4).toString('hex')}`;
  let file: FileHandle | undefined;
  try {
    file = await open(part, 'w', 0o644);
    const progress: Progress = { written: 0 };
    for (let attempt = 1; ; attempt++) {
      try {
        await getPart(options, file, progress);
        const size = progress.object?.size;
        if (progress.written === size) break;
        throw new Error(`the body ended early, at ${progress.written} of ${size} bytes`);
      } catch (error) {
        if (signal?.aborted) throw signal.reason ?? error;
        if (error instanceof Final) throw error.error;
        const where = progress.object
          ? `${progress.written} of ${progress.object.size} bytes`
          : 'before any answer';
        if (attempt >= attempts) {
          throw new FerryError(
            'failed',
            `Cannot download the artifact s3://${bucket}/${key}: ${attempts} attempts failed, the last at ${where}: ${messageOf(error)}`,
            {
              hint: 'ECS replaces the task and the next one downloads it again. If this repeats, check the route from the tasks to S3 (the VPC, its S3 endpoint or NAT).',
              cause: error,
            },
          );
        }
        const pauseMs = backoffMs * 2 ** (attempt - 1);
        options.log?.(
          `artifact download attempt ${attempt} of ${attempts} failed at ${where} (${messageOf(error)}); resuming in ${pauseMs} ms`,
        );
        await sleep(pauseMs, undefined, signal ? { signal } : {});
      }
    }
    await file.close();
    file = undefined;
    await publishWhole(part, path);
    return progress.written;
  } finally {
    await file?.close().catch(() => undefined);
    await rm(part, { force: true });
  }
}

/**
 * One GET: the whole object when nothing is known of it yet, else the rest of it from
 * `progress.written` on, if it is still the same object. Writes what arrives at its place in `file`
 * and keeps `progress` up to date as it goes, so a failure leaves it saying where to resume.
 * Resolves once the body has ended; throws `Final` for what another attempt cannot fix, anything
 * else may be resumed.
 */
async function getPart(options: ArtifactDownload, file: FileHandle, progress: Progress): Promise<void> {
  const { s3, bucket, key, signal } = options;
  const { object } = progress;
  // Without an ETag a resume could splice two objects: start over instead.
  if (object?.etag === undefined && progress.written > 0) {
    await file.truncate(0);
    progress.written = 0;
  }
  const from = progress.written;
  let result: GetObjectCommandOutput;
  try {
    result = await s3.send(
      new GetObjectCommand({
        Bucket: bucket,
        Key: key,
        ...(from > 0 ? { Range: `bytes=${from}-`, IfMatch: object?.etag } : {}),
      }),
      signal ? { abortSignal: signal } : {},
    );
  } catch (error) {
    throw requestFailure(options, error);
  }
  const { Body: body } = result;
  if (!(body instanceof Readable)) {
    throw new Final(new FerryError('failed', `S3 returned no body for s3://${bucket}/${key}`));
  }
  // A ranged answer (206) says where its part starts and the whole object's size; a whole one, its size.
  let start = 0;
  let size = result.ContentLength ?? Number.NaN;
  if (result.ContentRange !== undefined) {
    const range = /^bytes (\d+)-\d+\/(\d+)$/.exec(result.ContentRange);
    start = Number(range?.[1]);
    size = Number(range?.[2]);
  }
  const expected = object?.size ?? size;
  if (!Number.isSafeInteger(size) || size !== expected || (start !== 0 && start !== from)) {
    body.destroy();
    throw new Final(
      new FerryError(
        'failed',
        `S3 answered s3://${bucket}/${key} with an unexpected part (Content-Range ${result.ContentRange ?? 'none'}, Content-Length ${result.ContentLength}) where bytes ${from}- of ${expected} were asked for`,
      ),
    );
  }
  progress.object ??= { size, etag: result.ETag };
  // A whole object where a range was asked for: write it again from the start.
  if (start === 0 && from > 0) {
    await file.truncate(0);
    progress.written = 0;
  }
  for await (const chunk of body as AsyncIterable<Buffer>) {
    const at = progress.written;
    if (at + chunk.length > size) {
      throw new Final(
        new FerryError('failed', `S3 sent more than the ${size} bytes of s3://${bucket}/${key}`),
      );
    }
    try {
      await file.write(chunk, 0, chunk.length, at);
    } catch (error) {
      throw new Final(error);
    }
    progress.written = at + chunk.length;
  }
}

/** A GET that failed before its body: a FerryError when another attempt cannot help, else as it is. */
function requestFailure(options: ArtifactDownload, error: unknown): unknown {
  const { bucket, key } = options;
  const name = (error as Error).name;
  const status = (error as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode;
  if (name === 'NoSuchKey' || status === 404) {
    return new Final(
      new FerryError('not_found', `The artifact s3://${bucket}/${key} does not exist`, {
        hint: 'Run `ferry deploy` again: the upload stage puts it there.',
      }),
    );
  }
  // The task role may read this one key and list nothing, and to a caller without
  // s3:ListBucket S3 answers a missing key with 403 Access Denied, not 404: the two cannot be
  // told apart here (https://docs.aws.amazon.com/AmazonS3/latest/API/API_GetObject.html).
  if (name === 'AccessDenied' || status === 403) {
    return new Final(
      new FerryError(
        'failed',
        `The artifact s3://${bucket}/${key} does not exist, or this task's role may not read it (S3 answers both with 403)`,
        {
          hint: 'Run `ferry deploy` again: the upload stage puts the artifact there, and the deploy grants the task role its key.',
          cause: error,
        },
      ),
    );
  }
  // If-Match failed: the key now holds another object than the one half written.
  if (name === 'PreconditionFailed' || status === 412) {
    return new Final(
      new FerryError(
        'failed',
        `The artifact s3://${bucket}/${key} changed while it was being downloaded (its ETag is no longer the first answer's): not joining parts of two objects`,
        { hint: 'ECS replaces the task and the next one downloads the new object.', cause: error },
      ),
    );
  }
  // Throttling, 5xx and network failures the SDK has already retried: worth another attempt later.
  if (status === undefined || status >= 500 || status === 429) return error;
  return new Final(
    new FerryError('failed', `Cannot read the artifact s3://${bucket}/${key}: ${messageOf(error)}`, {
      cause: error,
    }),
  );
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
