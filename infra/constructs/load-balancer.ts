/**
 * An internet-facing ALB per load-balanced endpoint, so user routes keep their own paths (a shared
 * ALB would need path prefixes the worker does not know about). Clients reach it over HTTPS only
 * (https-front.ts: an ACM certificate for the user's domain, else CloudFront).
 *
 * Scaling (docs/scaling.md): the scaler Lambda sets the service's count; nothing here decides it.
 * While an endpoint has no worker the ALB itself answers 503 (no healthy target) and runs no code of
 * ours, so the wake-up comes from its metrics: an alarm on HTTPCode_ELB_503_Count ≥ 1 invokes the
 * scaler (a CloudWatch alarm can invoke a Lambda function on a state change:
 * https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/alarms-and-actions-Lambda.html),
 * which then asks the policy for one worker. RequestCount would not do: it counts only requests a
 * target answered, and ALB metrics are only reported while requests flow
 * (https://docs.aws.amazon.com/elasticloadbalancing/latest/application/load-balancer-cloudwatch-metrics.html).
 * The alarm is a nudge, not a count: it fires once per OK → ALARM change. Back to min after idle comes
 * from the agents, which report their in-flight requests to the workers table.
 */
import { ArnFormat, Duration, Stack, Validations } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as cwActions from 'aws-cdk-lib/aws-cloudwatch-actions';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import type * as ecs from 'aws-cdk-lib/aws-ecs';
import * as elbv2 from 'aws-cdk-lib/aws-elasticloadbalancingv2';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import { Construct } from 'constructs';
import type { DnsRecord } from '../../core/deployment.js';
import type { ManifestEndpoint } from '../../core/manifest.js';
import { scalerFunctionName, wakeAlarmName } from '../names.js';
import type { PlatformRefs } from '../platform-exports.js';
import { albIdleTimeoutSec, ports } from '../task-layout.js';
import { HttpsFront, type LbHttpsOptions } from './https-front.js';

export interface EndpointLoadBalancerProps {
  endpoint: ManifestEndpoint;
  endpointId: string;
  platform: PlatformRefs;
  service: ecs.Ec2Service;
  https?: LbHttpsOptions | undefined;
  /** Without a domain: CloudFront's origin-facing prefix list in this region (https-front.ts). */
  cloudFrontPrefixListId?: string | undefined;
}

export class EndpointLoadBalancer extends Construct {
  readonly loadBalancer: elbv2.ApplicationLoadBalancer;
  readonly targetGroup: elbv2.ApplicationTargetGroup;
  readonly securityGroup: ec2.SecurityGroup;
  /** The https address clients use. */
  readonly url: string;
  /** The DNS record the user must create for `url` (a domain without a hosted zone; https-front.ts). */
  readonly dnsRecord?: DnsRecord;

  constructor(scope: Construct, id: string, props: EndpointLoadBalancerProps) {
    super(scope, id);
    const { platform, endpoint, service } = props;
    const { resources } = endpoint;
    // The ALB's own group: who may reach it (https-front.ts), and nothing else. The way to the
    // agents is the platform's group, below.
    const securityGroup = new ec2.SecurityGroup(this, 'AlbSecurityGroup', {
      vpc: platform.vpc,
      description: `Ferry ${endpoint.name}: public HTTPS front`,
      // No egress rule, so CDK writes one that matches no traffic: a group created without any gets
      // an allow-all one from EC2
      // (https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-ec2-securitygroup.html).
      allowAllOutbound: false,
    });
    Validations.of(securityGroup).acknowledge({
      id: 'AwsSolutions-EC23',
      reason:
        'A load-balanced endpoint is public by design (docs/api.md#load-balanced-endpoints); every request needs the API key.',
    });

    const alb = new elbv2.ApplicationLoadBalancer(this, 'Alb', {
      vpc: platform.vpc,
      internetFacing: true,
      securityGroup,
      vpcSubnets: { subnetType: ec2.SubnetType.PUBLIC },
      dropInvalidHeaderFields: true,
      // Long handler calls (model inference) must not be cut at the 60 s default.
      idleTimeout: Duration.seconds(albIdleTimeoutSec(resources)),
    });
    // The way to the agents' dynamic host ports (bridge mode, task-layout.ts), the same group on every
    // Ferry ALB: the hosts' group admits it with one rule, however many load-balanced endpoints the
    // account has (PlatformStack.hostsFromLoadBalancers). The rules of an interface's groups add up
    // (https://docs.aws.amazon.com/vpc/latest/userguide/security-group-rules.html); an interface takes
    // 5 groups by default (https://docs.aws.amazon.com/vpc/latest/userguide/amazon-vpc-limits.html#vpc-limits-security-groups).
    alb.addSecurityGroup(platform.loadBalancerSecurityGroup);
    Validations.of(alb).acknowledge({
      id: 'AwsSolutions-ELB2',
      reason:
        'Access logs need a dedicated bucket with an ELB delivery policy; requests are logged by the agent.',
    });
    const targetGroup = new elbv2.ApplicationTargetGroup(this, 'Targets', {
      vpc: platform.vpc,
      port: ports.lbPublic,
      protocol: elbv2.ApplicationProtocol.HTTP,
      // Bridge mode: ECS registers the instance with the host port it picked for the agent's
      // container port (task-layout.ts ephemeralPorts). `ip` is for awsvpc tasks, "associated with an
      // elastic network interface, not an Amazon EC2 instance"
      // (https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-properties-ecs-service-loadbalancer.html).
      targetType: elbv2.TargetType.INSTANCE,
      // A deregistering target keeps its requests in flight until they end or the delay passes: "the
      // amount of time that the load balancer waits to move the target to the UNUSED state"
      // (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/load-balancer-connection-draining.html,
      // "Do not set the value to 5 seconds when you have a service with long-lived requests"). 30 s cut
      // every request still running 30 s into a deploy or a scale-in; the longest a request may run
      // is the ALB's idle timeout (3600 s is the attribute's most). A target with no request in
      // flight and no connection is released at once, and the agent closes its idle connections as
      // soon as ECS starts stopping its task (worker-image/agent/lb.ts drain), so an idle task is not
      // held for the delay.
      deregistrationDelay: Duration.seconds(Math.min(3600, albIdleTimeoutSec(resources))),
      // Back in service after 2 passing checks, not the default 5 (75 s of a ready worker unused):
      // "When the health checks exceed HealthyThresholdCount consecutive successes, the load balancer
      // puts the target back in service"
      // (https://docs.aws.amazon.com/elasticloadbalancing/latest/application/target-group-health-checks.html).
      // No port: the check goes to "the port on which each target receives traffic from the load
      // balancer" (https://docs.aws.amazon.com/elasticloadbalancing/latest/application/target-group-health-checks.html),
      // the dynamic host port; a fixed one would probe a port no host publishes.
      healthCheck: {
        path: '/ping',
        healthyHttpCodes: '200',
        interval: Duration.seconds(15),
        healthyThresholdCount: 2,
      },
    });
    service.attachToApplicationTargetGroup(targetGroup);
    const front = new HttpsFront(this, 'Https', {
      endpointName: endpoint.name,
      loadBalancer: alb,
      securityGroup,
      targetGroup,
      https: props.https,
      cloudFrontPrefixListId: props.cloudFrontPrefixListId,
    });
    this.url = front.url;
    if (front.dnsRecord) this.dnsRecord = front.dnsRecord;

    // The platform's scaler, by its fixed name (the platform stack is deployed first).
    const scaler = lambda.Function.fromFunctionAttributes(this, 'Scaler', {
      functionArn: Stack.of(this).formatArn({
        service: 'lambda',
        resource: 'function',
        resourceName: scalerFunctionName,
        arnFormat: ArnFormat.COLON_RESOURCE_NAME,
      }),
      // The platform grants every wake-up alarm at once (PlatformStack, WakeAlarms): an alarm action
      // adds no permission of its own (no sameEnvironment, so the import cannot add one).
      skipPermissions: true,
    });
    const turnedAway = alb.metrics.httpCodeElb(elbv2.HttpCodeElb.ELB_503_COUNT, {
      period: Duration.minutes(1),
      statistic: 'Sum',
    });
    new cloudwatch.Alarm(this, 'WakeAlarm', {
      // The scaler reads the endpoint id from this name (functions/scaler.ts).
      alarmName: wakeAlarmName(props.endpointId),
      alarmDescription: `Ferry ${endpoint.name}: requests turned away with no worker; wakes the scaler`,
      metric: turnedAway,
      threshold: 1,
      evaluationPeriods: 1,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    }).addAlarmAction(new cwActions.LambdaAction(scaler));
    this.loadBalancer = alb;
    this.targetGroup = targetGroup;
    this.securityGroup = securityGroup;
  }
}
