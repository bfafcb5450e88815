/**
 * BlobStore on S3: big payloads (the claim-check for anything over DynamoDB's 400 KB item or SQS's
 * 1 MiB message) and deployment artifacts.
 *
 * The S3Client must be created with `requestChecksumCalculation` and `responseChecksumValidation` set to
 * 'WHEN_REQUIRED' (see `s3ClientConfig`): with the SDK's default checksums, presigned PUTs carry a
 * checksum the uploader cannot know and stream bodies are sent aws-chunked, which some S3-compatible
 * stores save verbatim (docs/api.md#aws-front-door).
 */
import { type FileHandle, open, stat } from 'node:fs/promises';
import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CopyObjectCommand,
  CreateMultipartUploadCommand,
  DeleteObjectCommand,
  GetObjectCommand,
  HeadObjectCommand,
  PutObjectCommand,
  type S3Client,
  type S3ClientConfig,
  UploadPartCommand,
} from '@aws-sdk/client-s3';
import { getSignedUrl } from '@aws-sdk/s3-request-presigner';
import { FerryError, internal } from '../../errors.js';
import type { BlobStore } from '../../ports.js';

/** The client settings every S3Client handed to S3BlobStore needs (merge with region, credentials…). */
export const s3ClientConfig = {
  requestChecksumCalculation: 'WHEN_REQUIRED',
  responseChecksumValidation: 'WHEN_REQUIRED',
} as const satisfies Partial<S3ClientConfig>;

const mib = 1024 * 1024;
/** S3 multipart: parts of 5 MiB – 5 GiB except the last, at most 10 000 parts. */
const minPartBytes = 5 * mib;
const maxParts = 10_000;
/** 8 MiB parts: a 1.5 GB artifact is ~190 parts, and a lost part costs little to resend. */
export const defaultPartBytes = 8 * mib;
/** Presigned URLs live at most 7 days (SigV4). */
const maxPresignSec = 7 * 24 * 3600;

export interface S3BlobStoreOptions {
  client: S3Client;
  bucket: string;
  /** Prepended to every key, e.g. 'ferry/'. */
  prefix?: string;
  partBytes?: number;
}

const errorName = (error: unknown): string | undefined => (error instanceof Error ? error.name : undefined);

const httpStatusOf = (error: unknown): number | undefined =>
  (error as { $metadata?: { httpStatusCode?: number } } | undefined)?.$metadata?.httpStatusCode;

const isMissing = (error: unknown): boolean =>
  errorName(error) === 'NoSuchKey' || errorName(error) === 'NotFound' || httpStatusOf(error) === 404;

export class S3BlobStore implements BlobStore {
  private readonly client: S3Client;
  private readonly bucket: string;
  private readonly prefix: string;
  private readonly partBytes: number;

  constructor(options: S3BlobStoreOptions) {
    this.client = options.client;
    this.bucket = options.bucket;
    this.prefix = options.prefix ?? '';
    this.partBytes = Math.max(minPartBytes, options.partBytes ?? defaultPartBytes);
  }

  /** Keys are relative, '/'-separated names; the same rules as the local file store so both agree. */
  private objectKey(key: string): string {
    if (key === '' || key.startsWith('/') || key.split('/').some((part) => part === '..' || part === '')) {
      throw internal(`Invalid blob key: ${JSON.stringify(key)}`);
    }
    return this.prefix + key;
  }

  async put(key: string, body: Uint8Array): Promise<void> {
    await this.client.send(
      new PutObjectCommand({ Bucket: this.bucket, Key: this.objectKey(key), Body: body }),
    );
  }

  async putFile(key: string, filePath: string, onProgress?: (sentBytes: number) => void): Promise<void> {
    const objectKey = this.objectKey(key);
    const sizeBytes = (await stat(filePath)).size;
    // Keep under 10 000 parts even for files past 80 GB.
    const partBytes = Math.max(this.partBytes, Math.ceil(sizeBytes / maxParts));
    const file = await open(filePath, 'r');
    try {
      if (sizeBytes <= partBytes) {
        const body = await readChunk(file, 0, sizeBytes);
        await this.client.send(new PutObjectCommand({ Bucket: this.bucket, Key: objectKey, Body: body }));
        onProgress?.(sizeBytes);
        return;
      }
      await this.multipart(objectKey, file, sizeBytes, partBytes, onProgress);
    } finally {
      await file.close();
    }
  }

  /** Parts go one at a time: memory stays at one part, and the bandwidth is the uploader's anyway. */
  private async multipart(
    objectKey: string,
    file: FileHandle,
    sizeBytes: number,
    partBytes: number,
    onProgress?: (sentBytes: number) => void,
  ): Promise<void> {
    const created = await this.client.send(
      new CreateMultipartUploadCommand({ Bucket: this.bucket, Key: objectKey }),
    );
    const uploadId = created.UploadId;
    if (!uploadId) throw new FerryError('failed', `S3 gave no upload id for ${objectKey}`);
    try {
      const parts: { ETag: string; PartNumber: number }[] = [];
      let sentBytes = 0;
      for (let partNumber = 1; sentBytes < sizeBytes; partNumber++) {
        const length = Math.min(partBytes, sizeBytes - sentBytes);
        const body = await readChunk(file, sentBytes, length);
        const uploaded = await this.client.send(
          new UploadPartCommand({
            Bucket: this.bucket,
            Key: objectKey,
            UploadId: uploadId,
            PartNumber: partNumber,
            Body: body,
          }),
        );
        if (!uploaded.ETag) throw new FerryError('failed', `S3 gave no ETag for part ${partNumber}`);
        parts.push({ ETag: uploaded.ETag, PartNumber: partNumber });
        sentBytes += length;
        onProgress?.(sentBytes);
      }
      await this.client.send(
        new CompleteMultipartUploadCommand({
          Bucket: this.bucket,
          Key: objectKey,
          UploadId: uploadId,
          MultipartUpload: { Parts: parts },
        }),
      );
    } catch (error) {
      // An unfinished upload keeps its parts (and bills them) until aborted.
      await this.client
        .send(new AbortMultipartUploadCommand({ Bucket: this.bucket, Key: objectKey, UploadId: uploadId }))
        .catch(() => undefined);
      throw error;
    }
  }

  async get(key: string): Promise<Uint8Array | undefined> {
    try {
      const result = await this.client.send(
        new GetObjectCommand({ Bucket: this.bucket, Key: this.objectKey(key) }),
      );
      if (!result.Body) return new Uint8Array();
      return await result.Body.transformToByteArray();
    } catch (error) {
      if (isMissing(error)) return undefined;
      throw error;
    }
  }

  /**
   * The first `maxBytes + 1` bytes of `key` and its whole size, in one ranged GET, or undefined when
   * it is missing. For objects a client writes through a presigned PUT, which it may write again up
   * to the URL's expiry ("You can use the presigned URL multiple times, up to the expiration date and
   * time": https://docs.aws.amazon.com/AmazonS3/latest/userguide/using-presigned-url.html): a size
   * read first and a whole GET after would trust the object not to change between them (S3 holds
   * such a PUT to its signed size; a store that checks no signature holds it to nothing).
   * An empty object answers a range with 416 InvalidRange ("The requested range is not satisfiable").
   */
  async getAtMost(
    key: string,
    maxBytes: number,
  ): Promise<{ bytes: Uint8Array; sizeBytes: number } | undefined> {
    try {
      const result = await this.client.send(
        new GetObjectCommand({ Bucket: this.bucket, Key: this.objectKey(key), Range: `bytes=0-${maxBytes}` }),
      );
      const bytes = result.Body ? await result.Body.transformToByteArray() : new Uint8Array();
      // "bytes 0-N/TOTAL" when the range applied; a server that sent the whole object says nothing.
      const total = /\/(\d+)$/.exec(result.ContentRange ?? '')?.[1];
      return { bytes, sizeBytes: total === undefined ? bytes.length : Number(total) };
    } catch (error) {
      if (isMissing(error)) return undefined;
      if ((error as Error).name === 'InvalidRange') return { bytes: new Uint8Array(), sizeBytes: 0 };
      throw error;
    }
  }

  /** When the object was last written (ms, S3's Last-Modified), or undefined when there is none. */
  async modifiedAt(key: string): Promise<number | undefined> {
    try {
      const head = await this.client.send(
        new HeadObjectCommand({ Bucket: this.bucket, Key: this.objectKey(key) }),
      );
      return head.LastModified?.getTime() ?? 0;
    } catch (error) {
      if (isMissing(error)) return undefined;
      throw error;
    }
  }

  async exists(key: string): Promise<boolean> {
    return (await this.modifiedAt(key)) !== undefined;
  }

  /**
   * CopyObject, inside S3 (up to 5 GB in one call). CopySource is the source's bucket and key,
   * URL-encoded (https://docs.aws.amazon.com/AmazonS3/latest/API/API_CopyObject.html); IAM checks
   * s3:GetObject on the source and s3:PutObject on the copy.
   */
  async copy(fromKey: string, toKey: string): Promise<boolean> {
    const source = `${this.bucket}/${this.objectKey(fromKey).split('/').map(encodeURIComponent).join('/')}`;
    try {
      await this.client.send(
        new CopyObjectCommand({ Bucket: this.bucket, Key: this.objectKey(toKey), CopySource: source }),
      );
      return true;
    } catch (error) {
      if (isMissing(error)) return false;
      throw error;
    }
  }

  async delete(key: string): Promise<void> {
    // S3 answers 204 for a missing key too: deleting twice is fine.
    await this.client.send(new DeleteObjectCommand({ Bucket: this.bucket, Key: this.objectKey(key) }));
  }

  /**
   * A URL a client PUTs a body of exactly `sizeBytes` bytes to without credentials: the claim-check
   * for request bodies larger than API Gateway (10 MB) or Lambda (6 MB) take.
   *
   * The URL signs Content-Length: S3 computes a presigned request's signature over the headers that
   * X-Amz-SignedHeaders names, with the values the request carries, and refuses the request (403
   * SignatureDoesNotMatch) when it differs
   * (https://docs.aws.amazon.com/AmazonS3/latest/API/sigv4-query-string-auth.html). Unsigned, any
   * key holder could store up to S3's 5 GB per PUT, as often as the URL lives. `ContentLength` puts
   * the header on the request the presigner signs; `signableHeaders` keeps it signed even if the
   * signer (@smithy/signature-v4) lists it among the headers it leaves out, which it does not today.
   */
  async presignPut(key: string, expiresSec: number, sizeBytes: number): Promise<string> {
    return getSignedUrl(
      this.client,
      new PutObjectCommand({ Bucket: this.bucket, Key: this.objectKey(key), ContentLength: sizeBytes }),
      { expiresIn: presignSeconds(expiresSec), signableHeaders: new Set(['content-length']) },
    );
  }

  /** A URL a client GETs a big result from. */
  async presignGet(key: string, expiresSec: number): Promise<string> {
    return getSignedUrl(
      this.client,
      new GetObjectCommand({ Bucket: this.bucket, Key: this.objectKey(key) }),
      { expiresIn: presignSeconds(expiresSec) },
    );
  }

  /** The client is injected and may be shared: its owner destroys it. */
  async close(): Promise<void> {}
}

function presignSeconds(expiresSec: number): number {
  if (!Number.isInteger(expiresSec) || expiresSec < 1 || expiresSec > maxPresignSec) {
    throw internal(`A presigned URL lives 1–${maxPresignSec} s, not ${expiresSec}`);
  }
  return expiresSec;
}

async function readChunk(file: FileHandle, position: number, length: number): Promise<Uint8Array> {
  const buffer = Buffer.alloc(length);
  let read = 0;
  while (read < length) {
    const { bytesRead } = await file.read(buffer, read, length - read, position + read);
    if (bytesRead === 0) throw new FerryError('failed', 'The file shrank while it was being uploaded');
    read += bytesRead;
  }
  return buffer;
}
