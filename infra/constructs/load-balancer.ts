/**
 * An internet-facing ALB per load-balanced endpoint, so user routes keep their own paths (a shared
 * ALB would need path prefixes the worker does not know about). HTTP only: HTTPS needs a certificate
 * for a domain the user owns; `ferry deploy` prints the URL as http. An ALB with no healthy target
 * answers 503, so a from-zero step policy watches its request count, and target tracking on requests
 * per task scales from there.
 */
import { Duration, Validations } from 'aws-cdk-lib';
import * as appscaling from 'aws-cdk-lib/aws-applicationautoscaling';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as cwActions from 'aws-cdk-lib/aws-cloudwatch-actions';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import type * as ecs from 'aws-cdk-lib/aws-ecs';
import * as elbv2 from 'aws-cdk-lib/aws-elasticloadbalancingv2';
import { Construct } from 'constructs';
import type { ManifestEndpoint } from '../../core/manifest.js';
import type { PlatformRefs } from '../platform-exports.js';
import { ports } from '../task-layout.js';

export interface EndpointLoadBalancerProps {
  endpoint: ManifestEndpoint;
  platform: PlatformRefs;
  service: ecs.Ec2Service;
  target: appscaling.ScalableTarget;
}

export class EndpointLoadBalancer extends Construct {
  readonly loadBalancer: elbv2.ApplicationLoadBalancer;
  readonly targetGroup: elbv2.ApplicationTargetGroup;
  readonly securityGroup: ec2.SecurityGroup;

  constructor(scope: Construct, id: string, props: EndpointLoadBalancerProps) {
    super(scope, id);
    const { platform, endpoint, service, target } = props;
    const { resources } = endpoint;
    const securityGroup = new ec2.SecurityGroup(this, 'AlbSecurityGroup', {
      vpc: platform.vpc,
      description: `Ferry ${endpoint.name}: public HTTP`,
      allowAllOutbound: false,
    });
    securityGroup.addIngressRule(
      ec2.Peer.anyIpv4(),
      ec2.Port.tcp(80),
      'Public HTTP; the agent checks the API key',
    );
    securityGroup.addEgressRule(platform.instanceSecurityGroup, ec2.Port.tcp(ports.lbPublic), 'To the agent');
    // The rule lives in this stack (deleted with it) but opens the platform's host group to this ALB only.
    new ec2.CfnSecurityGroupIngress(this, 'HostIngress', {
      groupId: platform.instanceSecurityGroup.securityGroupId,
      sourceSecurityGroupId: securityGroup.securityGroupId,
      ipProtocol: 'tcp',
      fromPort: ports.lbPublic,
      toPort: ports.lbPublic,
      description: `Ferry ${endpoint.name} ALB to its agent`,
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
      idleTimeout: Duration.seconds(
        Math.min(4000, Math.max(60, Math.ceil(resources.executionTimeoutMs / 1000))),
      ),
    });
    Validations.of(alb).acknowledge({
      id: 'AwsSolutions-ELB2',
      reason:
        'Access logs need a dedicated bucket with an ELB delivery policy; requests are logged by the agent.',
    });
    const targetGroup = new elbv2.ApplicationTargetGroup(this, 'Targets', {
      vpc: platform.vpc,
      port: ports.lbPublic,
      protocol: elbv2.ApplicationProtocol.HTTP,
      targetType: elbv2.TargetType.INSTANCE,
      deregistrationDelay: Duration.seconds(30),
      healthCheck: { path: '/ping', healthyHttpCodes: '200', interval: Duration.seconds(15) },
    });
    service.attachToApplicationTargetGroup(targetGroup);
    alb.addListener('Http', { port: 80, open: false, defaultTargetGroups: [targetGroup] });

    const requests = alb.metrics.requestCount({ period: Duration.minutes(1), statistic: 'Sum' });
    const fromZero = new appscaling.StepScalingAction(this, 'FromZero', {
      scalingTarget: target,
      adjustmentType: appscaling.AdjustmentType.CHANGE_IN_CAPACITY,
      cooldown: Duration.minutes(1),
    });
    fromZero.addAdjustment({ lowerBound: 0, adjustment: 1 });
    new cloudwatch.Alarm(this, 'RequestsAlarm', {
      alarmDescription: `Ferry ${endpoint.name}: requests arrived`,
      metric: requests,
      threshold: 1,
      evaluationPeriods: 1,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    }).addAlarmAction(new cwActions.ApplicationScalingAction(fromZero));
    target.scaleToTrackMetric(`${id}-RequestsPerTask`, {
      predefinedMetric: appscaling.PredefinedMetric.ALB_REQUEST_COUNT_PER_TARGET,
      resourceLabel: `${alb.loadBalancerFullName}/${targetGroup.targetGroupFullName}`,
      // Requests per task per minute; a worker serves maxConcurrency at a time.
      targetValue: 60 * resources.maxConcurrency,
      scaleInCooldown: Duration.seconds(resources.idleTimeoutSec),
      scaleOutCooldown: Duration.minutes(1),
    });
    this.loadBalancer = alb;
    this.targetGroup = targetGroup;
    this.securityGroup = securityGroup;
  }
}
