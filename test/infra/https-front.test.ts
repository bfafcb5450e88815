/**
 * Load-balanced endpoints are reachable over HTTPS only (infra/constructs/https-front.ts): with a
 * domain, an ALB HTTPS listener with an ACM certificate and port 80 redirecting; without one, a
 * CloudFront front whose origin header the ALB requires, and whose security group admits port 80
 * from CloudFront's origin-facing prefix list only
 * (https://docs.aws.amazon.com/AmazonCloudFront/latest/DeveloperGuide/LocationsOfEdgeServers.html#managed-prefix-list),
 * within the rules-per-security-group quota
 * (https://docs.aws.amazon.com/vpc/latest/userguide/amazon-vpc-limits.html#vpc-limits-security-groups;
 * the list weighs 55 rules,
 * https://docs.aws.amazon.com/vpc/latest/userguide/working-with-aws-managed-prefix-lists.html#aws-managed-prefix-list-weights).
 * Each synthesized with cdk-nag on.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { App } from 'aws-cdk-lib';
import type { Template as TemplateType } from 'aws-cdk-lib/assertions';
import { Match, Template } from 'aws-cdk-lib/assertions';
import { afterAll, describe, expect, it } from 'vitest';
import { exitCode, FerryError } from '../../core/errors.js';
import type { ManifestEndpoint } from '../../core/manifest.js';
import { buildApp, ferryContext, optionsFromContext } from '../../infra/app.js';
import type { LbHttpsOptions } from '../../infra/constructs/https-front.js';
import {
  cloudFrontPrefixListWeight,
  originHeaderName,
  originReadTimeoutSec,
  securityGroupRulesQuota,
} from '../../infra/constructs/https-front.js';
import { lbEndpoint, sampleImages, sampleManifest, stubFunctionsDir } from './fixtures.js';

const cleanups: (() => void)[] = [];
afterAll(() => {
  for (const cleanup of cleanups) cleanup();
});

/** The id `com.amazonaws.global.cloudfront.origin-facing` has in us-east-1 (any pl- id would do). */
const prefixListId = 'pl-3b927c52';

function synth(
  https?: LbHttpsOptions,
  options: { cloudFrontPrefixListId?: string; endpoints?: ManifestEndpoint[] } = {},
): { template: TemplateType; url: string } {
  const fns = stubFunctionsDir();
  const outdir = mkdtempSync(join(tmpdir(), 'ferry-https-out-'));
  cleanups.push(fns.cleanup, () => rmSync(outdir, { recursive: true, force: true }));
  const built = buildApp({
    manifest: { ...sampleManifest, endpoints: options.endpoints ?? [lbEndpoint] },
    env: 'dev',
    functionsCodeDir: fns.dir,
    artifact: { key: 'artifacts/demo/dev/fff.tar.gz' },
    images: sampleImages,
    outdir,
    ...(https ? { https } : {}),
    ...(options.cloudFrontPrefixListId ? { cloudFrontPrefixListId: options.cloudFrontPrefixListId } : {}),
  });
  // cdk-nag runs here: a finding throws "Validation failed".
  built.app.synth();
  const url = built.appStack.endpoints.find((e) => e.kind === 'lb')!.url!;
  return { template: Template.fromStack(built.appStack), url };
}

/** An intrinsic inside the Endpoints output's JSON text, written so that tests can look for it. */
const token = (intrinsic: unknown): string => `<${JSON.stringify(intrinsic)}>`;

/** The app stack's `Endpoints` output as text: its `Fn::Join` pieces joined, intrinsics as `token`s. */
function endpointsOutput(template: TemplateType): string {
  const value = template.toJSON().Outputs.Endpoints.Value as string | { 'Fn::Join': [string, unknown[]] };
  if (typeof value === 'string') return value;
  const [separator, parts] = value['Fn::Join'];
  return parts.map((part) => (typeof part === 'string' ? part : token(part))).join(separator);
}

interface Rule {
  IpProtocol: string;
  FromPort?: number;
  ToPort?: number;
  CidrIp?: string;
  CidrIpv6?: string;
  SourcePrefixListId?: string;
  SourceSecurityGroupId?: unknown;
  DestinationSecurityGroupId?: unknown;
  Description?: string;
}

interface Group {
  GroupDescription: string;
  SecurityGroupIngress?: Rule[];
  SecurityGroupEgress?: Rule[];
}

/**
 * The ALBs' own security groups (load-balancer.ts), each with every rule that counts against it: its
 * inline rules and the separate AWS::EC2::SecurityGroupIngress/Egress resources whose GroupId is it
 * (CDK writes a prefix-list rule, or one naming a group of another stack, as one of those).
 */
function albGroups(template: TemplateType): Array<Group & { id: string; inbound: Rule[]; outbound: Rule[] }> {
  const separate = (type: string) =>
    Object.values(template.findResources(type)).map((r) => r.Properties as Rule & { GroupId: unknown });
  const ingress = separate('AWS::EC2::SecurityGroupIngress');
  const egress = separate('AWS::EC2::SecurityGroupEgress');
  return Object.entries(template.findResources('AWS::EC2::SecurityGroup'))
    .map(([id, r]) => ({ id, group: r.Properties as Group }))
    .filter(({ group }) => group.GroupDescription.endsWith('public HTTPS front'))
    .map(({ id, group }) => {
      const own = (rules: Array<Rule & { GroupId: unknown }>): Rule[] =>
        rules
          .filter(
            (rule) => JSON.stringify(rule.GroupId) === JSON.stringify({ 'Fn::GetAtt': [id, 'GroupId'] }),
          )
          .map(({ GroupId: _, ...rule }) => rule);
      return {
        ...group,
        id,
        inbound: [...(group.SecurityGroupIngress ?? []), ...own(ingress)],
        outbound: [...(group.SecurityGroupEgress ?? []), ...own(egress)],
      };
    });
}

/** The egress rule CDK writes into a group that may send nothing (allowAllOutbound: false, no rule). */
const matchesNoTraffic: Rule = {
  CidrIp: '255.255.255.255/32',
  Description: 'Disallow all traffic',
  IpProtocol: 'icmp',
  FromPort: 252,
  ToPort: 86,
};

/**
 * What a rule counts as against "Inbound or outbound rules per security group": one, or an
 * AWS-managed prefix list's weight (the only list used here is CloudFront's).
 */
const ruleWeight = (rule: Rule): number => (rule.SourcePrefixListId ? cloudFrontPrefixListWeight : 1);

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

  it('sends each request to the ALB once: no second GET after a read timeout (a second handler run)', () => {
    const distribution = Object.values(template.findResources('AWS::CloudFront::Distribution'))[0]!;
    const [origin] = distribution.Properties.DistributionConfig.Origins;
    expect(origin.ConnectionAttempts).toBe(1);
    expect(origin.CustomOriginConfig.OriginReadTimeout).toBe(originReadTimeoutSec);
    // No cap on the whole answer: a streamed answer may run past the read timeout between its parts.
    expect(origin.ResponseCompletionTimeout).toBeUndefined();
  });

  it('caches no error answer (CloudFront keeps them 10 s by default, whatever the cache policy)', () => {
    const distribution = Object.values(template.findResources('AWS::CloudFront::Distribution'))[0]!;
    const errors = distribution.Properties.DistributionConfig.CustomErrorResponses as {
      ErrorCode: number;
      ErrorCachingMinTTL: number;
      ResponseCode?: number;
    }[];
    expect(errors.map((e) => e.ErrorCode)).toEqual([400, 403, 404, 405, 414, 416, 500, 501, 502, 503, 504]);
    for (const error of errors) {
      expect(error.ErrorCachingMinTTL).toBe(0);
      // The origin's own answer goes through: no page or status of CloudFront's replaces it.
      expect(error.ResponseCode).toBeUndefined();
    }
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

describe('without a domain: the ALB admits port 80 from CloudFront only', () => {
  const { template } = synth(undefined, { cloudFrontPrefixListId: prefixListId });

  it('its security group takes port 80 from the origin-facing prefix list, and nothing from 0.0.0.0/0', () => {
    const groups = albGroups(template);
    expect(groups).toHaveLength(1);
    expect(groups[0]!.inbound).toEqual([
      {
        IpProtocol: 'tcp',
        FromPort: 80,
        ToPort: 80,
        SourcePrefixListId: prefixListId,
        Description: 'CloudFront origin-facing servers only (header-checked)',
      },
    ]);
    // No rule of the stack, inline or separate, opens anything to the whole internet.
    const inline = Object.values(template.findResources('AWS::EC2::SecurityGroup')).flatMap(
      (r) => (r.Properties.SecurityGroupIngress ?? []) as Rule[],
    );
    const separate = Object.values(template.findResources('AWS::EC2::SecurityGroupIngress')).map(
      (r) => r.Properties as Rule,
    );
    // The prefix-list rule at least (the stack adds no rule to the platform's groups).
    expect(inline.length + separate.length).toBeGreaterThan(0);
    for (const rule of [...inline, ...separate]) {
      expect(rule.CidrIp).toBeUndefined();
      expect(rule.CidrIpv6).toBeUndefined();
    }
  });

  it('still requires the secret header (defence in depth: the list covers every CloudFront distribution)', () => {
    const rules = Object.values(template.findResources('AWS::ElasticLoadBalancingV2::ListenerRule'));
    expect(rules).toHaveLength(1);
    expect(rules[0]!.Properties.Conditions[0].HttpHeaderConfig.HttpHeaderName).toBe(originHeaderName);
    expect(listeners(template)[0]!.DefaultActions[0].Type).toBe('fixed-response');
  });

  it('stays within the default rules-per-security-group quota, inbound and outbound', () => {
    const group = albGroups(template)[0]!;
    const inbound = group.inbound.reduce((sum, rule) => sum + ruleWeight(rule), 0);
    expect(inbound).toBe(cloudFrontPrefixListWeight);
    expect(inbound).toBeLessThanOrEqual(securityGroupRulesQuota);
    // None of its own: the way to the agents is the platform's load balancer group (one rule on
    // the hosts' group for every ALB, PlatformStack.hostsFromLoadBalancers). CDK's rule that
    // matches no traffic keeps EC2 from giving the new group an allow-all one
    // (https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-ec2-securitygroup.html).
    expect(group.outbound).toEqual([matchesNoTraffic]);
  });

  it('gives every load-balanced endpoint its own group: rules never add up across endpoints', () => {
    const endpoints = [0, 1, 2].map((i) => ({ ...lbEndpoint, name: `lb_${i}` }));
    const many = synth(undefined, { cloudFrontPrefixListId: prefixListId, endpoints }).template;
    const groups = albGroups(many);
    expect(groups).toHaveLength(3);
    for (const group of groups) {
      expect(group.inbound).toHaveLength(1);
      expect(group.inbound[0]!.SourcePrefixListId).toBe(prefixListId);
      expect(group.inbound.reduce((sum, rule) => sum + ruleWeight(rule), 0)).toBeLessThanOrEqual(
        securityGroupRulesQuota,
      );
      expect(group.outbound).toEqual([matchesNoTraffic]);
    }
    // What is shared is the platform's load balancer group, which every ALB carries besides its own
    // (within the 5 groups a network interface takes by default,
    // https://docs.aws.amazon.com/vpc/latest/userguide/amazon-vpc-limits.html#vpc-limits-security-groups);
    // the hosts admit it with one rule of the platform stack (platform-stack.test.ts), so no rule of
    // this stack names a platform group, whatever the number of endpoints.
    const albs = Object.values(many.findResources('AWS::ElasticLoadBalancingV2::LoadBalancer'));
    expect(albs).toHaveLength(3);
    const ownIds = groups.map((group) => ({ 'Fn::GetAtt': [group.id, 'GroupId'] }));
    for (const alb of albs) {
      const carried = alb.Properties.SecurityGroups as unknown[];
      expect(carried).toHaveLength(2);
      expect(ownIds).toContainEqual(carried[0]);
      expect(carried[1]).toEqual({ 'Fn::ImportValue': 'Ferry-LoadBalancerSecurityGroupId' });
    }
    for (const type of ['AWS::EC2::SecurityGroupIngress', 'AWS::EC2::SecurityGroupEgress']) {
      for (const rule of Object.values(many.findResources(type))) {
        expect(ownIds).toContainEqual(rule.Properties.GroupId);
      }
    }
  });

  it('refuses an id that is no prefix list id (exit 2)', () => {
    let error: unknown;
    try {
      synth(undefined, { cloudFrontPrefixListId: 'sg-0123456789abcdef0' });
    } catch (e) {
      error = e;
    }
    expect(FerryError.is(error)).toBe(true);
    expect(exitCode(error)).toBe(2);
    expect((error as FerryError).message).toContain('cloudFrontPrefixListId');
  });

  it('`npx cdk synth` takes the id as -c ferry:cloudFrontPrefixList', () => {
    const context = (extra: Record<string, string>) => new App({ context: { ...ferryContext, ...extra } });
    const dir = mkdtempSync(join(tmpdir(), 'ferry-https-ctx-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const manifestPath = join(dir, 'ferry_manifest.json');
    writeFileSync(manifestPath, JSON.stringify({ ...sampleManifest, endpoints: [lbEndpoint] }));
    const base = {
      'ferry:manifest': manifestPath,
      'ferry:env': 'dev',
      'ferry:functionsDir': dir,
      'ferry:artifactKey': 'artifacts/demo/dev/fff.tar.gz',
      'ferry:gpuWorkerImage': sampleImages.gpuWorker,
      'ferry:cpuWorkerImage': sampleImages.cpuWorker,
      'ferry:agentImage': sampleImages.agent,
    };
    expect(optionsFromContext(context(base)).cloudFrontPrefixListId).toBeUndefined();
    expect(
      optionsFromContext(context({ ...base, 'ferry:cloudFrontPrefixList': prefixListId }))
        .cloudFrontPrefixListId,
    ).toBe(prefixListId);
    expect(() =>
      optionsFromContext(context({ ...base, 'ferry:cloudFrontPrefixList': 'cloudfront' })),
    ).toThrow(/ferry:cloudFrontPrefixList must be a prefix list id/);
  });
});

describe('without a domain and without the prefix list id (offline synth)', () => {
  const { template } = synth();

  it('admits any IPv4 on port 80 only, header-checked, and says so in the rule', () => {
    expect(albGroups(template)[0]!.inbound).toEqual([
      {
        IpProtocol: 'tcp',
        FromPort: 80,
        ToPort: 80,
        CidrIp: '0.0.0.0/0',
        Description: 'Any IPv4: no CloudFront prefix list id at synth (header-checked)',
      },
    ]);
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

  it('is public on 443 and 80 (the ALB is the address), whatever prefix list id is given', () => {
    const withId = synth(
      { domainName: 'example.com', hostedZoneId: 'Z123EXAMPLE' },
      { cloudFrontPrefixListId: prefixListId },
    ).template;
    for (const t of [template, withId]) {
      const ingress = albGroups(t)[0]!.inbound;
      expect(ingress.map((r) => [r.FromPort, r.CidrIp, r.SourcePrefixListId])).toEqual([
        [443, '0.0.0.0/0', undefined],
        [80, '0.0.0.0/0', undefined],
      ]);
      expect(ingress.reduce((sum, rule) => sum + ruleWeight(rule), 0)).toBeLessThanOrEqual(
        securityGroupRulesQuota,
      );
    }
  });

  it('lists no DNS record for the user in the Endpoints output: the zone has the alias', () => {
    expect(endpointsOutput(template)).not.toContain('dnsRecord');
  });

  it('uses a certificate the user already has instead of requesting one', () => {
    const arn = 'arn:aws:acm:us-east-1:123456789012:certificate/11111111-2222-3333-4444-555555555555';
    const given = synth({ domainName: 'example.com', certificateArn: arn });
    given.template.resourceCountIs('AWS::CertificateManager::Certificate', 0);
    const https = listeners(given.template).find((l) => l.Port === 443)!;
    expect(https.Certificates).toEqual([{ CertificateArn: arn }]);
  });
});

describe('with a domain and no hosted zone: the user creates the DNS record', () => {
  const { template, url } = synth({ domainName: 'example.com' });

  it('creates no record, and lists a CNAME from the host to the ALB in the Endpoints output', () => {
    template.resourceCountIs('AWS::Route53::RecordSet', 0);
    const albs = Object.keys(template.findResources('AWS::ElasticLoadBalancingV2::LoadBalancer'));
    expect(albs).toHaveLength(1);
    // A CNAME to the ALB's DNS name reaches it from a name outside Route 53
    // (https://docs.aws.amazon.com/elasticloadbalancing/latest/application/application-load-balancers.html#dns-name).
    expect(url).toBe('https://lb-worker.example.com');
    expect(endpointsOutput(template)).toContain(
      `"dnsRecord":{"name":"lb-worker.example.com","type":"CNAME","value":"${token({ 'Fn::GetAtt': [albs[0]!, 'DNSName'] })}"}`,
    );
  });
});

describe('without a domain (CloudFront)', () => {
  it('lists no DNS record for the user in the Endpoints output', () => {
    expect(endpointsOutput(synth().template)).not.toContain('dnsRecord');
  });
});
