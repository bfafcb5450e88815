/**
 * The upload URL of POST uploads (S3PayloadStore.createUpload → S3BlobStore.presignPut) takes a PUT
 * of exactly the size it was asked for, no other: it signs Content-Length. S3 recomputes a presigned
 * URL's signature over the headers its X-Amz-SignedHeaders names, with the values the PUT carries,
 * and answers 403 SignatureDoesNotMatch when they differ
 * (https://docs.aws.amazon.com/AmazonS3/latest/API/sigv4-query-string-auth.html).
 *
 * fauxqs, the S3 emulator of the aws-box tests, checks no signature (it stores any PUT to any URL),
 * so a PUT through it proves nothing here: the signature is checked the way S3 checks it instead,
 * recomputed with @smithy/signature-v4 from the URL's own parameters and the PUT's headers. Presigning
 * is local (no request is sent), so the client points at no server.
 */
import { S3Client } from '@aws-sdk/client-s3';
import { SignatureV4 } from '@smithy/signature-v4';
import { describe, expect, it } from 'vitest';
import { s3ClientConfig } from '../../core/adapters/aws/s3.js';
import { S3PayloadStore } from '../../functions/payloads.js';

const credentials = { accessKeyId: 'AKIAFERRYTEST', secretAccessKey: 'ferry-test-secret' };
const client = new S3Client({ ...s3ClientConfig, region: 'us-east-1', credentials });
const store = new S3PayloadStore({ client, bucket: 'platform-bucket', prefix: 'ferry/' });

/** The query parameters the signer writes itself; the rest of the URL's are signed as they are. */
const authParams = [
  'X-Amz-Algorithm',
  'X-Amz-Credential',
  'X-Amz-Date',
  'X-Amz-Expires',
  'X-Amz-SignedHeaders',
  'X-Amz-Signature',
];

/**
 * Whether S3 would take a PUT carrying `headers` to `url`: the signature computed again from the URL's
 * credential scope, date, expiry and other parameters and the PUT's values of the headers the URL
 * names, compared with the URL's. A signed header the PUT lacks is left out, as S3 would find it
 * missing, so the signature then differs too.
 */
async function s3Accepts(url: string, headers: Record<string, string>): Promise<boolean> {
  const parsed = new URL(url);
  const params = Object.fromEntries(parsed.searchParams);
  const signedNames = params['X-Amz-SignedHeaders']!.split(';');
  const sent: Record<string, string> = { host: parsed.host };
  for (const [name, value] of Object.entries(headers)) sent[name.toLowerCase()] = value;
  const signedHeaders = Object.fromEntries(
    signedNames.filter((name) => sent[name] !== undefined).map((name) => [name, sent[name]!]),
  );
  const { 'X-Amz-Content-Sha256': payloadHash, ...query } = Object.fromEntries(
    Object.entries(params).filter(([name]) => !authParams.includes(name)),
  );
  const [accessKeyId, , region, service] = params['X-Amz-Credential']!.split('/');
  const date = params['X-Amz-Date']!.replace(
    /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/,
    '$1-$2-$3T$4:$5:$6Z',
  );
  const signer = new SignatureV4({
    credentials: { ...credentials, accessKeyId: accessKeyId! },
    region: region!,
    service: service!,
    sha256: client.config.sha256,
    uriEscapePath: false,
  });
  const again = await signer.presign(
    {
      method: 'PUT',
      protocol: parsed.protocol,
      hostname: parsed.hostname,
      path: parsed.pathname,
      query,
      // A presigned URL's payload is UNSIGNED-PAYLOAD (its X-Amz-Content-Sha256); the signer reads the
      // payload hash from this header and moves it back into the query.
      headers: { ...signedHeaders, 'X-Amz-Content-Sha256': payloadHash! },
    },
    {
      signingDate: new Date(date),
      expiresIn: Number(params['X-Amz-Expires']),
      signableHeaders: new Set(signedNames),
    },
  );
  return again.query?.['X-Amz-Signature'] === params['X-Amz-Signature'];
}

describe('the upload URL', () => {
  it('signs Content-Length, and answers with the size it signed', async () => {
    const upload = await store.createUpload('ep', 1234);
    const signed = new URL(upload.uploadUrl).searchParams.get('X-Amz-SignedHeaders')!.split(';');
    expect(signed).toContain('content-length');
    expect(upload.sizeBytes).toBe(1234);
  });

  it('takes a PUT of exactly the size it was made for, and none bigger, smaller or without a length', async () => {
    const sizeBytes = 7 * 1024 * 1024;
    const { uploadUrl } = await store.createUpload('ep', sizeBytes);
    // The check accepts a PUT the URL was made for: a refusal below is the length's, not the check's.
    expect(await s3Accepts(uploadUrl, { 'Content-Length': String(sizeBytes) })).toBe(true);
    expect(await s3Accepts(uploadUrl, { 'Content-Length': String(sizeBytes + 1) })).toBe(false);
    expect(await s3Accepts(uploadUrl, { 'Content-Length': String(sizeBytes - 1) })).toBe(false);
    expect(await s3Accepts(uploadUrl, {})).toBe(false);
  });

  it('leaves Content-Type unsigned, so a client may send any', async () => {
    const { uploadUrl } = await store.createUpload('ep', 10);
    const put = { 'Content-Length': '10' };
    expect(await s3Accepts(uploadUrl, { ...put, 'Content-Type': 'application/json' })).toBe(true);
    expect(await s3Accepts(uploadUrl, { ...put, 'Content-Type': 'text/plain' })).toBe(true);
  });
});
