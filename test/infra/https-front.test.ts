/**
 * Load-balanced endpoints are reachable over HTTPS only (infra/constructs/https-front.ts): with a
 * domain, an ALB HTTPS listener with an ACM certificate and port 80 redirecting; without one, a
 * CloudFront front whose origin header the ALB requires. Each synthesized with cdk-nag on.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Template as TemplateType } from 'aws-cdk-lib/assertions';
import { Match, Template } from 'aws-cdk-lib/assertions';
import { afterAll, describe, expect, it } from 'vitest';
import { buildApp } from '../../infra/app.js';
import type { LbHttpsOptions } from '../../infra/constructs/https-front.js';
import { originHeaderName } from '../../infra/constructs/https-front.js';
import { lbEndpoint, sampleImages, sampleManifest, stubFunctionsDir } from './fixtures.js';

const cleanups: (() => void)[] = [];
afterAll(() => {
  for (const cleanup of cleanups) cleanup();
});

function synth(https?: LbHttpsOptions): { template: TemplateType; url: string } {
  const fns = stubFunctionsDir();
  const outdir = mkdtempSync(join(tmpdir(), 'ferry-https-out-'));
  cleanups.push(fns.cleanup, () => rmSync(outdir, { recursive: true, force: true }));
  const built = buildApp({
    manifest: { ...sampleManifest, endpoints: [lbEndpoint] },
    env: 'dev',
    functionsCodeDir: fns.dir,
    artifact: { key: 'artifacts/demo/dev/fff.tar.gz' },
    images: sampleImages,
    outdir,
    ...(https ? { https } : {}),
  });
  // cdk-nag runs here: a finding throws "Validation failed".
  built.app.synth();
  const url = built.appStack.endpoints.find((e) => e.name === lbEndpoint.name)!.url!;
  return { template: Template.fromStack(built.appStack), url };
}

const listeners = (template: TemplateType) =>
  Object.values(template.findResources('AWS::ElasticLoadBalancingV2::Listener')).map((r) => r.Properties);

describe('without a domain: CloudFront in front', () => {
  const { template, url } = synth();

  it('is the address clients get, and sends http viewers to https', () => {
    expect(url).toMatch(/^https:\/\//);
    template.hasResourceProperties('AWS::CloudFront::Distribution', {
      DistributionConfig: Match.objectLike({
        DefaultCacheBehavior: Match.objectLike({ ViewerProtocolPolicy: 'redirect-to-https' }),
      }),
    });
  });

  it('forwards Authorization (caching off, all viewer headers) and sends the secret origin header', () => {
    const distribution = Object.values(template.findResources('AWS::CloudFront::Distribution'))[0]!;
    const config = distribution.Properties.DistributionConfig;
    // The managed CachingDisabled and AllViewerExceptHostHeader policies.
    expect(config.DefaultCacheBehavior.CachePolicyId).toBe('4135ea2d-6df8-44a3-9df3-4b5a84be39ad');
    expect(config.DefaultCacheBehavior.OriginRequestPolicyId).toBe('b689b0a8-53d0-40ab-baf2-68738e2966ac');
    const header = config.Origins[0].OriginCustomHeaders.find(
      (h: { HeaderName: string }) => h.HeaderName === originHeaderName,
    );
    expect(JSON.stringify(header.HeaderValue)).toContain('{{resolve:secretsmanager:');
  });

  it('closes the ALB to anyone without the header: port 80 answers 403, only the header rule forwards', () => {
    const all = listeners(template);
    expect(all).toHaveLength(1);
    expect(all[0]).toMatchObject({
      Port: 80,
      DefaultActions: [{ Type: 'fixed-response', FixedResponseConfig: { StatusCode: '403' } }],
    });
    const rules = Object.values(template.findResources('AWS::ElasticLoadBalancingV2::ListenerRule'));
    expect(rules).toHaveLength(1);
    const rule = rules[0]!.Properties;
    expect(rule.Actions[0].Type).toBe('forward');
    expect(rule.Conditions[0].Field).toBe('http-header');
    expect(rule.Conditions[0].HttpHeaderConfig.HttpHeaderName).toBe(originHeaderName);
    expect(JSON.stringify(rule.Conditions[0].HttpHeaderConfig.Values)).toContain('{{resolve:secretsmanager:');
  });
});

describe('with a domain: an ACM certificate on the ALB', () => {
  const { template, url } = synth({ domainName: 'example.com', hostedZoneId: 'Z123EXAMPLE' });

  it('listens with HTTPS on 443 and only redirects on 80', () => {
    expect(url).toBe('https://lb-worker.example.com');
    const all = listeners(template);
    expect(all).toHaveLength(2);
    const https = all.find((l) => l.Port === 443)!;
    expect(https.Protocol).toBe('HTTPS');
    expect(https.Certificates).toHaveLength(1);
    expect(https.SslPolicy).toMatch(/^ELBSecurityPolicy-TLS13/);
    const http = all.find((l) => l.Port === 80)!;
    expect(http.DefaultActions).toEqual([
      {
        Type: 'redirect',
        RedirectConfig: { Protocol: 'HTTPS', Port: '443', StatusCode: 'HTTP_301' },
      },
    ]);
    template.resourceCountIs('AWS::CloudFront::Distribution', 0);
  });

  it('requests a DNS-validated certificate for the endpoint host and points the zone at the ALB', () => {
    template.hasResourceProperties('AWS::CertificateManager::Certificate', {
      DomainName: 'lb-worker.example.com',
      ValidationMethod: 'DNS',
    });
    template.hasResourceProperties('AWS::Route53::RecordSet', {
      Name: 'lb-worker.example.com.',
      Type: 'A',
      HostedZoneId: 'Z123EXAMPLE',
    });
  });

  it('uses a certificate the user already has instead of requesting one', () => {
    const arn = 'arn:aws:acm:us-east-1:123456789012:certificate/11111111-2222-3333-4444-555555555555';
    const given = synth({ domainName: 'example.com', certificateArn: arn });
    given.template.resourceCountIs('AWS::CertificateManager::Certificate', 0);
    const https = listeners(given.template).find((l) => l.Port === 443)!;
    expect(https.Certificates).toEqual([{ CertificateArn: arn }]);
  });
});
