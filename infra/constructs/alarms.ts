/**
 * One SNS topic every Ferry alarm and failure notice goes to, so a team subscribes once
 * (`ferry deploy --alarm-email`, or any SNS subscription). What reaches it:
 *
 *  - the platform's CloudWatch alarms (API 5xx, sweeper and scaler errors) and every app stack's DLQ
 *    alarms;
 *  - ECS tasks of the Ferry cluster that stopped before they ran: stopCode TaskFailedToStart, which
 *    is what an image that cannot be pulled (CannotPullContainerError) or a task that cannot be set
 *    up (ResourceInitializationError) ends with (EventBridge "ECS Task State Change":
 *    https://docs.aws.amazon.com/AmazonECS/latest/developerguide/ecs_task_events.html,
 *    https://docs.aws.amazon.com/AmazonECS/latest/developerguide/stopped-task-error-codes.html);
 *  - Auto Scaling groups that failed to launch an instance (vCPU quota, no capacity of that type in
 *    the zone): "EC2 Instance Launch Unsuccessful"
 *    (https://docs.aws.amazon.com/autoscaling/ec2/userguide/automating-ec2-auto-scaling-with-eventbridge.html).
 *
 * The topic is not encrypted at rest: CloudWatch alarms and EventBridge cannot publish to a topic
 * under the AWS-managed SNS key (https://docs.aws.amazon.com/sns/latest/dg/sns-key-management.html),
 * a customer key costs $1/month idle, and alarm texts carry no secrets. Publishing needs TLS.
 */
import { Aws, Validations } from 'aws-cdk-lib';
import * as events from 'aws-cdk-lib/aws-events';
import * as eventsTargets from 'aws-cdk-lib/aws-events-targets';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as sns from 'aws-cdk-lib/aws-sns';
import { Construct } from 'constructs';

export interface AlarmTopicProps {
  clusterArn: string;
}

export class AlarmTopic extends Construct {
  readonly topic: sns.Topic;
  /** Tasks of the cluster that stopped before they ran; the scaler counts them too (functions/scaler.ts). */
  readonly taskStartFailures: events.Rule;

  constructor(scope: Construct, id: string, props: AlarmTopicProps) {
    super(scope, id);
    this.topic = new sns.Topic(this, 'Topic', { displayName: 'Ferry alarms', enforceSSL: true });
    Validations.of(this.topic).acknowledge({
      id: 'AwsSolutions-SNS2',
      reason:
        'CloudWatch alarms and EventBridge cannot publish to a topic under the AWS-managed SNS key; alarm texts hold no secrets.',
    });
    // The topic's policy (TLS only, EventBridge's grant) replaces SNS's default one, which let the
    // account's own sources publish; without this statement every alarm's action fails with "Resource:
    // arn:aws:cloudwatch:...:alarm:ALARM_NAME is not authorized to perform: SNS:Publish", in the
    // alarm's history only (https://repost.aws/knowledge-center/cloudwatch-receive-sns-for-alarm-trigger).
    // Fenced to this account's alarms in this region, by the condition that page shows.
    this.topic.addToResourcePolicy(
      new iam.PolicyStatement({
        sid: 'CloudWatchAlarmsOfThisAccount',
        principals: [new iam.ServicePrincipal('cloudwatch.amazonaws.com')],
        actions: ['sns:Publish'],
        resources: [this.topic.topicArn],
        conditions: {
          ArnLike: {
            'aws:SourceArn': `arn:${Aws.PARTITION}:cloudwatch:${Aws.REGION}:${Aws.ACCOUNT_ID}:alarm:*`,
          },
        },
      }),
    );
    const target = new eventsTargets.SnsTopic(this.topic);
    this.taskStartFailures = new events.Rule(this, 'TaskStartFailures', {
      description: 'Ferry: a worker task stopped because its image could not be pulled or it could not start',
      eventPattern: {
        source: ['aws.ecs'],
        detailType: ['ECS Task State Change'],
        detail: {
          clusterArn: [props.clusterArn],
          lastStatus: ['STOPPED'],
          stopCode: ['TaskFailedToStart'],
        },
      },
      targets: [target],
    });
    new events.Rule(this, 'InstanceLaunchFailures', {
      description: 'Ferry: a capacity pool could not launch an instance (vCPU quota, no capacity)',
      eventPattern: {
        source: ['aws.autoscaling'],
        detailType: ['EC2 Instance Launch Unsuccessful'],
        detail: { AutoScalingGroupName: [{ prefix: 'FerryPlatform-' }] },
      },
      targets: [target],
    });
  }
}
