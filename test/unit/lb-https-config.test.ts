/** `lbHttpsFrom` (cli/providers/aws/settings.ts): the HTTPS options of load-balanced endpoints on AWS. */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { lbHttpsFrom } from '../../cli/providers/aws/settings.js';
import { FerryError } from '../../core/errors.js';

const dirs: string[] = [];
const project = (dotenv?: string) => {
  const dir = mkdtempSync(path.join(tmpdir(), 'ferry-https-config-'));
  dirs.push(dir);
  if (dotenv !== undefined) writeFileSync(path.join(dir, '.env'), dotenv);
  return dir;
};
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

describe('lbHttpsFrom', () => {
  it('is undefined without a domain (CloudFront fronts each endpoint)', () => {
    expect(lbHttpsFrom({}, project())).toBeUndefined();
  });

  it('reads the domain, zone and certificate from the environment', () => {
    expect(
      lbHttpsFrom(
        {
          FERRY_AWS_DOMAIN: 'api.example.com.',
          FERRY_AWS_HOSTED_ZONE_ID: 'Z1',
          FERRY_AWS_CERTIFICATE_ARN: 'arn:c',
        },
        project(),
      ),
    ).toEqual({ domainName: 'api.example.com', hostedZoneId: 'Z1', certificateArn: 'arn:c' });
  });

  it("falls back to the project's .env, the environment winning", () => {
    const dir = project('FERRY_AWS_DOMAIN=from-dotenv.example.com\nFERRY_AWS_HOSTED_ZONE_ID=Z2\n');
    expect(lbHttpsFrom({}, dir)).toEqual({ domainName: 'from-dotenv.example.com', hostedZoneId: 'Z2' });
    expect(lbHttpsFrom({ FERRY_AWS_DOMAIN: 'env.example.com' }, dir)).toEqual({
      domainName: 'env.example.com',
      hostedZoneId: 'Z2',
    });
  });

  it('refuses a certificate or zone without a domain, with a hint', () => {
    let error: unknown;
    try {
      lbHttpsFrom({ FERRY_AWS_CERTIFICATE_ARN: 'arn:c' }, project());
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(FerryError);
    expect((error as FerryError).code).toBe('usage');
    expect((error as Error).message).toContain('FERRY_AWS_DOMAIN');
  });
});
