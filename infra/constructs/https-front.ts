/**
 * HTTPS in front of a load-balanced endpoint's ALB: clients send the API key, so nothing they are
 * given is plain HTTP (docs/security-aws.md#load-balanced-endpoints-over-https).
 *
 *  - With a domain (`https.domainName`): the ALB listens on 443 with an ACM certificate for
 *    `<endpoint>.<domain>` (the one given, or one DNS-validated here: in the hosted zone when its id
 *    is given, else CloudFormation waits until the validation record exists,
 *    https://docs.aws.amazon.com/acm/latest/userguide/dns-validation.html), and port 80 answers a
 *    301 to https (https://docs.aws.amazon.com/elasticloadbalancing/latest/application/load-balancer-listeners.html).
 *  - Without one: a CloudFront distribution is the public address (HTTPS on its cloudfront.net name,
 *    viewers on http are redirected). CloudFront reaches the ALB over HTTP with a secret header; the
 *    ALB's listener forwards only requests that carry it and answers 403 to anything else, so the
 *    ALB's own address is closed to clients
 *    (https://docs.aws.amazon.com/AmazonCloudFront/latest/DeveloperGuide/restrict-access-to-load-balancer.html).
 *    Its security group admits port 80 from CloudFront's origin-facing servers only: the AWS-managed
 *    prefix list `com.amazonaws.global.cloudfront.origin-facing`
 *    (https://docs.aws.amazon.com/AmazonCloudFront/latest/DeveloperGuide/LocationsOfEdgeServers.html#managed-prefix-list),
 *    whose id differs per region: `ferry deploy` looks it up (cli/providers/aws/cloudfront-prefix-list.ts)
 *    and passes it as `cloudFrontPrefixListId`. Without an id (an offline synth) the rule admits any
 *    IPv4 and the header alone closes the ALB.
 *    Caching is off and every viewer header goes to the origin, Authorization included
 *    (https://repost.aws/knowledge-center/cloudfront-authorization-header). CloudFront waits at most
 *    `originReadTimeoutSec` for the first byte of an answer (60 s unless AWS raises the quota,
 *    https://docs.aws.amazon.com/AmazonCloudFront/latest/DeveloperGuide/DownloadDistValuesOrigin.html),
 *    so a longer handler call needs the domain mode.
 */
import { Duration, RemovalPolicy, Validations } from 'aws-cdk-lib';
import * as acm from 'aws-cdk-lib/aws-certificatemanager';
import * as cloudfront from 'aws-cdk-lib/aws-cloudfront';
import * as origins from 'aws-cdk-lib/aws-cloudfront-origins';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as elbv2 from 'aws-cdk-lib/aws-elasticloadbalancingv2';
import * as route53 from 'aws-cdk-lib/aws-route53';
import * as route53Targets from 'aws-cdk-lib/aws-route53-targets';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import { Construct } from 'constructs';
import type { DnsRecord } from '../../core/deployment.js';
import { FerryError } from '../../core/errors.js';

/** `ferry deploy`'s HTTPS options for load-balanced endpoints on AWS. */
export interface LbHttpsOptions {
  /** Endpoints answer at `<endpoint name>.<domainName>` (underscores become hyphens). */
  domainName: string;
  /** An issued ACM certificate (same region) covering those names; else one is requested here. */
  certificateArn?: string;
  /** The Route 53 zone of `domainName`: validation and alias records are created in it. */
  hostedZoneId?: string;
}

/** The header CloudFront adds and the ALB requires (no client can know its value). */
export const originHeaderName = 'X-Ferry-Origin';
/** CloudFront's default ceiling for an origin's first byte. */
export const originReadTimeoutSec = 60;

/**
 * Rules the CloudFront origin-facing prefix list counts as against the security group's "Inbound or
 * outbound rules per security group" quota (60 by default, IPv4 and IPv6 counted apart,
 * https://docs.aws.amazon.com/vpc/latest/userguide/amazon-vpc-limits.html#vpc-limits-security-groups):
 * an AWS-managed list counts as its weight, 55 for this one
 * (https://docs.aws.amazon.com/vpc/latest/userguide/working-with-aws-managed-prefix-lists.html#aws-managed-prefix-list-weights).
 * The ALB's group is its endpoint's own (load-balancer.ts) and holds no other IPv4 inbound rule in
 * this mode: 55 of 60.
 */
export const cloudFrontPrefixListWeight = 55;
/** The default quota of inbound (and, apart, outbound) rules per security group, per address family. */
export const securityGroupRulesQuota = 60;

/** The form of an EC2 prefix list id (`pl-` and 8 or 17 hex digits). */
const prefixListIdPattern = /^pl-(?:[0-9a-f]{8}|[0-9a-f]{17})$/;

/** `id` when it has the form of a prefix list id; a usage error naming `source` otherwise. */
export function checkPrefixListId(id: string, source: string): string {
  if (!prefixListIdPattern.test(id)) {
    throw new FerryError('usage', `${source} must be a prefix list id (pl-…), got "${id}"`, {
      hint: "The id of com.amazonaws.global.cloudfront.origin-facing in the deploy's region: aws ec2 describe-managed-prefix-lists --filters Name=prefix-list-name,Values=com.amazonaws.global.cloudfront.origin-facing",
    });
  }
  return id;
}

export interface HttpsFrontProps {
  endpointName: string;
  loadBalancer: elbv2.ApplicationLoadBalancer;
  securityGroup: ec2.SecurityGroup;
  targetGroup: elbv2.ApplicationTargetGroup;
  https?: LbHttpsOptions | undefined;
  /**
   * Without a domain: the id of `com.amazonaws.global.cloudfront.origin-facing` in the deploy's
   * region; the ALB then admits port 80 from CloudFront only. Unset: from any IPv4 (the rule's description says why).
   */
  cloudFrontPrefixListId?: string | undefined;
}

/** A DNS label from an endpoint name. */
export const hostLabel = (endpointName: string): string =>
  endpointName
    .toLowerCase()
    .replace(/[^a-z0-9-]/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, 63);

/** The error codes CloudFront caches and lets a distribution set a caching time for. */
const cachedErrorCodes = [400, 403, 404, 405, 414, 416, 500, 501, 502, 503, 504];

export class HttpsFront extends Construct {
  /** What clients use: always https. */
  readonly url: string;
  /**
   * A domain without a hosted zone: the record the user must create at their DNS provider for `url`
   * to resolve (nothing here can write it), a CNAME to the ALB's DNS name
   * (https://docs.aws.amazon.com/elasticloadbalancing/latest/application/application-load-balancers.html#dns-name).
   */
  readonly dnsRecord?: DnsRecord;
  readonly distribution?: cloudfront.Distribution;

  constructor(scope: Construct, id: string, props: HttpsFrontProps) {
    super(scope, id);
    const { loadBalancer, securityGroup, targetGroup, https } = props;
    if (https) {
      const host = `${hostLabel(props.endpointName)}.${https.domainName}`;
      const zone = https.hostedZoneId
        ? route53.HostedZone.fromHostedZoneAttributes(this, 'Zone', {
            hostedZoneId: https.hostedZoneId,
            zoneName: https.domainName,
          })
        : undefined;
      const certificate = https.certificateArn
        ? acm.Certificate.fromCertificateArn(this, 'Certificate', https.certificateArn)
        : new acm.Certificate(this, 'Certificate', {
            domainName: host,
            validation: acm.CertificateValidation.fromDns(zone),
          });
      securityGroup.addIngressRule(
        ec2.Peer.anyIpv4(),
        ec2.Port.tcp(443),
        'Public HTTPS; the agent checks the API key',
      );
      securityGroup.addIngressRule(ec2.Peer.anyIpv4(), ec2.Port.tcp(80), 'Redirect to HTTPS only');
      loadBalancer.addListener('Https', {
        port: 443,
        protocol: elbv2.ApplicationProtocol.HTTPS,
        certificates: [certificate],
        sslPolicy: elbv2.SslPolicy.RECOMMENDED_TLS,
        open: false,
        defaultTargetGroups: [targetGroup],
      });
      loadBalancer.addListener('Http', {
        port: 80,
        open: false,
        defaultAction: elbv2.ListenerAction.redirect({ protocol: 'HTTPS', port: '443', permanent: true }),
      });
      if (zone) {
        new route53.ARecord(this, 'Alias', {
          zone,
          recordName: host,
          target: route53.RecordTarget.fromAlias(new route53Targets.LoadBalancerTarget(loadBalancer)),
        });
      } else {
        this.dnsRecord = { name: host, type: 'CNAME', value: loadBalancer.loadBalancerDnsName };
      }
      this.url = `https://${host}`;
      return;
    }

    const originSecret = new secretsmanager.Secret(this, 'OriginSecret', {
      description: `Ferry ${props.endpointName}: the header CloudFront sends its ALB`,
      generateSecretString: { passwordLength: 48, excludePunctuation: true, includeSpace: false },
      removalPolicy: RemovalPolicy.DESTROY,
    });
    Validations.of(originSecret).acknowledge({
      id: 'AwsSolutions-SMG4',
      reason:
        'Used by CloudFront and the ALB listener through dynamic references; a stack update replaces both together.',
    });
    // Resolved by CloudFormation at deploy; the template holds only the reference.
    const headerValue = originSecret.secretValue.unsafeUnwrap();

    // Port 80 from CloudFront's origin-facing servers only, and the listener below still wants the
    // secret header: the prefix list covers every CloudFront distribution, not just this one
    // (https://docs.aws.amazon.com/AmazonCloudFront/latest/DeveloperGuide/restrict-access-to-load-balancer.html).
    const prefixListId = props.cloudFrontPrefixListId;
    if (prefixListId !== undefined) {
      securityGroup.addIngressRule(
        ec2.Peer.prefixList(checkPrefixListId(prefixListId, 'cloudFrontPrefixListId')),
        ec2.Port.tcp(80),
        'CloudFront origin-facing servers only (header-checked)',
      );
    } else {
      securityGroup.addIngressRule(
        ec2.Peer.anyIpv4(),
        ec2.Port.tcp(80),
        'Any IPv4: no CloudFront prefix list id at synth (header-checked)',
      );
      // No construct warning: the toolkit reports annotations at error level (CDK_TOOLKIT_E9600), and
      // this template is only ever synthesized offline to be read (`--synth-only` prints a note).
    }
    const listener = loadBalancer.addListener('Http', {
      port: 80,
      open: false,
      defaultAction: elbv2.ListenerAction.fixedResponse(403, {
        contentType: 'application/json',
        messageBody: '{"error":"Use the endpoint\'s https address"}',
      }),
    });
    listener.addAction('FromCloudFront', {
      priority: 1,
      conditions: [elbv2.ListenerCondition.httpHeader(originHeaderName, [headerValue])],
      action: elbv2.ListenerAction.forward([targetGroup]),
    });

    const distribution = new cloudfront.Distribution(this, 'Distribution', {
      comment: `Ferry ${props.endpointName}`,
      defaultBehavior: {
        origin: new origins.LoadBalancerV2Origin(loadBalancer, {
          protocolPolicy: cloudfront.OriginProtocolPolicy.HTTP_ONLY,
          customHeaders: { [originHeaderName]: headerValue },
          readTimeout: Duration.seconds(originReadTimeoutSec),
          // One attempt. The attempts CloudFront makes to connect are also the times it sends a GET or
          // HEAD again when the origin does not answer within the read timeout: "If your origin times
          // out, CloudFront resets the response timeout and tries again based on the configured number
          // of retries" (AWS's announcement of the response completion timeout, 2025-07-30; the
          // Developer Guide's "Origin response timeout",
          // https://docs.aws.amazon.com/AmazonCloudFront/latest/DeveloperGuide/RequestAndResponseBehaviorCustomOrigin.html).
          // At the default 3, a GET handler slower than the read timeout ran three times on the
          // workers (a GPU call each) before the client got its 504, three read timeouts later. A POST
          // is never sent again. What one attempt gives up: a second try when a connection to the ALB
          // cannot be made, which the client's own retry covers.
          connectionAttempts: 1,
        }),
        viewerProtocolPolicy: cloudfront.ViewerProtocolPolicy.REDIRECT_TO_HTTPS,
        allowedMethods: cloudfront.AllowedMethods.ALLOW_ALL,
        cachePolicy: cloudfront.CachePolicy.CACHING_DISABLED,
        originRequestPolicy: cloudfront.OriginRequestPolicy.ALL_VIEWER_EXCEPT_HOST_HEADER,
      },
      // "CloudFront caches error responses for a default duration of 10 seconds", whatever the
      // cache policy (https://docs.aws.amazon.com/AmazonCloudFront/latest/DeveloperGuide/custom-error-pages-expiration.html):
      // a 503 at zero or a 502 while a worker boots would be served on after the worker is ready, and
      // one caller's 403 to the next caller of the same path. None is cached.
      errorResponses: cachedErrorCodes.map((httpStatus) => ({ httpStatus, ttl: Duration.seconds(0) })),
      // No minimumProtocolVersion: with the default cloudfront.net certificate it has no effect (the
      // policy is fixed by CloudFront) and CDK warns; a custom domain (https.domainName) pins TLS 1.2.
    });
    Validations.of(distribution).acknowledge(
      {
        id: 'AwsSolutions-CFR1',
        reason: 'Endpoints serve their users wherever they are; the API key decides access.',
      },
      {
        id: 'AwsSolutions-CFR2',
        reason: 'WAF is billed per web ACL; teams attach their own. Every request needs the API key.',
      },
      {
        id: 'AwsSolutions-CFR3',
        reason: 'Access logs need a log bucket with ACLs; requests are logged by the agent.',
      },
      {
        id: 'AwsSolutions-CFR4',
        reason:
          'The default cloudfront.net certificate cannot pin a minimum TLS version; give https.domainName for that.',
      },
      {
        id: 'AwsSolutions-CFR5',
        reason:
          'The ALB has no certificate without a domain; CloudFront reaches it over HTTP with a secret header, and the ALB refuses requests without it.',
      },
    );
    this.distribution = distribution;
    this.url = `https://${distribution.distributionDomainName}`;
  }
}
