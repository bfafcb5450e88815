/**
 * The claim-check for bodies the AWS front door cannot carry (docs/api.md#aws-front-door):
 *
 *   request  ── API Gateway 10 MB ──▶ Lambda 6 MB ──▶ V2Api        too big: POST /uploads → presigned PUT,
 *                                                                  then /run {"inputRef": ...}
 *   response ◀── Lambda 6 MB ◀── V2Api                              too big: output → {"outputUrl": ...}
 *
 * Objects live under `payloads/` in the platform bucket: `payloads/uploads/<uuid>.json` for inputs,
 * `payloads/outputs/<job>/<sha256>.json` for outputs, content-addressed so a client polling /status
 * re-uses one object instead of one per poll. Neither belongs to a job's record (the job store keeps
 * its own copy of an input), so the sweeper's delete of an expired job leaves them: their own
 * lifecycle rule removes them `payloadCopyExpiryDays` after they were written (infra/platform-stack.ts),
 * instead of the 15-day backstop of `payloads/`, and an output copy older than `outputCopyReuseMs` is
 * written again before a URL is signed for it, so no URL outlives its object.
 */
import { createHash, randomUUID } from 'node:crypto';
import type { S3Client } from '@aws-sdk/client-s3';
import { S3BlobStore } from '../core/adapters/aws/s3.js';
import type { PayloadStore } from '../core/api.js';
import { badRequest, tooLarge } from '../core/errors.js';
import { parseJsonExact, stringifyJsonExact } from '../core/json.js';

/** Lambda's synchronous invocation cap, on the request event and on the response (6 MB). */
export const lambdaPayloadBytes = 6 * 1024 * 1024;

/**
 * Whether a response body of this text fits in `maxBytes` of a Lambda response. The body travels as
 * a JSON string inside the response document, so its escaping counts too: a body of quotes and
 * backslashes doubles, a control character becomes six bytes (`\u0001`), the most any UTF-16 unit
 * grows; under a sixth of the limit nothing can make it too big, which spares most answers a second
 * stringify.
 */
export function fitsLambdaResponse(body: string, maxBytes: number): boolean {
  if (body.length * 6 <= maxBytes) return true;
  return Buffer.byteLength(JSON.stringify(body)) <= maxBytes;
}

/**
 * Days after which S3 removes upload and output copies (the lifecycle rule of `payloads/uploads/` and
 * `payloads/outputs/`). An upload is read by the /run that names it, minutes after its 15-minute URL
 * was signed; an output copy serves a job's result, which is kept 30 minutes after the job ends
 * (docs/api.md#retention). S3 counts days from an object's creation, rounded up to midnight UTC
 * (https://docs.aws.amazon.com/AmazonS3/latest/userguide/intro-lifecycle-rules.html).
 */
export const payloadCopyExpiryDays = 2;

/**
 * An output copy written longer ago than this is written again before a URL is signed for it: the
 * copy then has at least a day left before its rule may remove it, more than any URL's hour.
 */
export const outputCopyReuseMs = 24 * 3_600_000;

/** Room for the response envelope (`statusCode`, headers) around the body. */
export const envelopeBytes = 16 * 1024;

const uploadRefPattern =
  /^payloads\/uploads\/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.json$/;

export interface S3PayloadStoreOptions {
  /** Created with `s3ClientConfig` (WHEN_REQUIRED checksums): presigned PUTs break otherwise. */
  client: S3Client;
  bucket: string;
  /** The blob prefix of the platform (the same one the DynamoJobStore's blobs use). */
  prefix?: string;
  /** How long an upload URL may be used. */
  uploadUrlSec?: number;
  /** How long an output URL may be used. */
  outputUrlSec?: number;
  /** A body whose JSON, embedded in the Lambda response, would be bigger than this is shrunk. */
  maxResponseBytes?: number;
  /** The time (ms), for the age of an output copy; `Date.now` unless a test moves it. */
  now?: () => number;
}

type Json = Record<string, unknown>;

export class S3PayloadStore implements PayloadStore {
  private readonly blobs: S3BlobStore;
  private readonly uploadUrlSec: number;
  private readonly outputUrlSec: number;
  private readonly maxResponseBytes: number;
  private readonly now: () => number;

  constructor(options: S3PayloadStoreOptions) {
    this.blobs = new S3BlobStore({ client: options.client, bucket: options.bucket, prefix: options.prefix });
    this.uploadUrlSec = options.uploadUrlSec ?? 900;
    this.outputUrlSec = options.outputUrlSec ?? 3600;
    this.maxResponseBytes = options.maxResponseBytes ?? lambdaPayloadBytes - envelopeBytes;
    this.now = options.now ?? Date.now;
  }

  async createUpload(
    _endpointId: string,
    sizeBytes: number,
  ): Promise<{ uploadUrl: string; inputRef: string; expiresInSec: number; sizeBytes: number }> {
    const inputRef = `payloads/uploads/${randomUUID()}.json`;
    const uploadUrl = await this.blobs.presignPut(inputRef, this.uploadUrlSec, sizeBytes);
    return { uploadUrl, inputRef, expiresInSec: this.uploadUrlSec, sizeBytes };
  }

  async readInput(inputRef: string, maxBytes: number): Promise<Record<string, unknown>> {
    // Only refs this store handed out: an inputRef must never read other objects of the bucket.
    if (!uploadRefPattern.test(inputRef)) {
      throw badRequest(
        `Invalid inputRef ${JSON.stringify(inputRef.slice(0, 200))}: use the inputRef that POST /uploads returned`,
      );
    }
    // At most one byte past the cap is read: the URL takes only the size POST uploads was given, which
    // may be over this route's cap (uploadMaxBytes is the larger route's), and into memory goes no
    // more than the cap whatever the object holds (getAtMost).
    const read = await this.blobs.getAtMost(inputRef, maxBytes);
    if (!read) {
      throw badRequest(`Nothing was uploaded to ${inputRef}: PUT the input JSON to its uploadUrl first`);
    }
    if (read.sizeBytes > maxBytes || read.bytes.length > maxBytes) {
      throw tooLarge(
        `The upload at ${inputRef} is ${Math.max(read.sizeBytes, read.bytes.length)} bytes; this route takes at most ${maxBytes}`,
      );
    }
    const value = parseJsonExact(Buffer.from(read.bytes), `The upload at ${inputRef}`);
    if (typeof value !== 'object' || value === null || Array.isArray(value)) {
      throw badRequest(`The upload at ${inputRef} must be a JSON object (it becomes the job's input)`);
    }
    return value as Record<string, unknown>;
  }

  /**
   * Job views: `output` (then `input`) over the cap become `{"outputUrl", "sizeBytes"}` with
   * `"outputTooLarge": true` (`inputUrl` / `inputTooLarge` for input). Stream answers: the biggest
   * chunks' outputs likewise, per chunk. Anything else goes out as it is.
   */
  async fitResponse(body: unknown): Promise<unknown> {
    if (this.fits(body) || typeof body !== 'object' || body === null) return body;
    const view = { ...(body as Json) };
    const jobId = typeof view.id === 'string' ? view.id : 'unknown';
    if (Array.isArray(view.stream)) {
      const chunks = view.stream.map((chunk) => (isObject(chunk) ? { ...chunk } : chunk));
      view.stream = chunks;
      const bySize = chunks
        .map((chunk, index) => ({ index, bytes: isObject(chunk) ? jsonBytes(chunk.output) : 0 }))
        .sort((a, b) => b.bytes - a.bytes);
      for (const { index } of bySize) {
        if (this.fits(view)) break;
        const chunk = chunks[index];
        if (isObject(chunk) && 'output' in chunk) {
          chunk.output = await this.publish(jobId, 'outputUrl', chunk.output);
          chunk.outputTooLarge = true;
        }
      }
      return view;
    }
    if ('output' in view) {
      view.output = await this.publish(jobId, 'outputUrl', view.output);
      view.outputTooLarge = true;
    }
    if (!this.fits(view) && 'input' in view) {
      view.input = await this.publish(jobId, 'inputUrl', view.input);
      view.inputTooLarge = true;
    }
    return view;
  }

  private fits(body: unknown): boolean {
    return fitsLambdaResponse(JSON.stringify(body) ?? '', this.maxResponseBytes);
  }

  private async publish(
    jobId: string,
    name: 'outputUrl' | 'inputUrl',
    value: unknown,
  ): Promise<{ [key: string]: string | number }> {
    const json = stringifyJsonExact(value) ?? 'null';
    const digest = createHash('sha256').update(json).digest('hex');
    const key = `payloads/outputs/${encodeURIComponent(jobId)}/${digest}.json`;
    const writtenAt = await this.blobs.modifiedAt(key);
    // Missing (never written, or removed by its rule), or near the end of its rule: written anew.
    if (writtenAt === undefined || this.now() - writtenAt > outputCopyReuseMs) {
      await this.blobs.put(key, Buffer.from(json, 'utf8'));
    }
    return {
      [name]: await this.blobs.presignGet(key, this.outputUrlSec),
      sizeBytes: Buffer.byteLength(json),
    };
  }
}

const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

const jsonBytes = (value: unknown): number => Buffer.byteLength(JSON.stringify(value) ?? '');
