/**
 * The two SQS queues the v2 API feeds for one queue endpoint: urgent `ferry-<id>` and low-priority
 * `ferry-<id>-low` (core/adapters/aws/sqs.ts), each with its own DLQ and a DLQ alarm. The DLQ alarm
 * lives here, with its queue: the shared platform has no per-app resource, and its dashboard finds
 * every DLQ by name.
 */
import { Duration } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as cwActions from 'aws-cdk-lib/aws-cloudwatch-actions';
import type * as sns from 'aws-cdk-lib/aws-sns';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct } from 'constructs';
import { limits } from '../../core/limits.js';
import { queueName } from '../names.js';
import { leaseTiming } from '../task-layout.js';

export interface EndpointQueuesProps {
  endpointId: string;
  /** Where the DLQ alarms notify (the platform's alarm topic). */
  alarmTopic?: sns.ITopic;
}

export class EndpointQueues extends Construct {
  /** Urgent jobs; the only queue scaling reads. */
  readonly queue: sqs.Queue;
  readonly deadLetterQueue: sqs.Queue;
  /** policy.lowPriority jobs: drained by running workers, never a reason to start one. */
  readonly lowQueue: sqs.Queue;
  readonly lowDeadLetterQueue: sqs.Queue;

  constructor(scope: Construct, id: string, props: EndpointQueuesProps) {
    super(scope, id);
    const urgent = this.pair('', props, 'urgent', 'urgent-dlq');
    const low = this.pair('Low', props, 'low', 'low-dlq');
    this.queue = urgent.queue;
    this.deadLetterQueue = urgent.deadLetterQueue;
    this.lowQueue = low.queue;
    this.lowDeadLetterQueue = low.deadLetterQueue;
  }

  private pair(
    id: string,
    { endpointId, alarmTopic }: EndpointQueuesProps,
    role: 'urgent' | 'low',
    dlqRole: 'urgent-dlq' | 'low-dlq',
  ): { queue: sqs.Queue; deadLetterQueue: sqs.Queue } {
    const deadLetterQueue = new sqs.Queue(this, `${id}Dlq`, {
      queueName: queueName(endpointId, dlqRole),
      retentionPeriod: Duration.days(14),
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      enforceSSL: true,
    });
    const queue = new sqs.Queue(this, `${id}Queue`, {
      // The name the Lambdas derive: FERRY_QUEUE_NAME_PREFIX + id (+ '-low'), functions/wiring.ts.
      queueName: queueName(endpointId, role),
      visibilityTimeout: Duration.seconds(leaseTiming.receiveVisibilitySec),
      receiveMessageWaitTime: Duration.seconds(20),
      // policy.ttl may keep a job for up to 7 days.
      retentionPeriod: Duration.millis(limits.ttlMaxMs),
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      enforceSSL: true,
      deadLetterQueue: { queue: deadLetterQueue, maxReceiveCount: leaseTiming.maxReceiveCount },
    });
    deadLetterAlarm(
      this,
      `${id}DlqAlarm`,
      deadLetterQueue,
      'Ferry: jobs reached the dead-letter queue (a message was received 5 times)',
      alarmTopic,
    );
    return { queue, deadLetterQueue };
  }
}

/** An alarm as soon as a message sits in `deadLetterQueue`, notifying `topic` when given. */
export function deadLetterAlarm(
  scope: Construct,
  id: string,
  deadLetterQueue: sqs.IQueue,
  description: string,
  topic?: sns.ITopic,
): cloudwatch.Alarm {
  const alarm = new cloudwatch.Alarm(scope, id, {
    alarmDescription: description,
    metric: deadLetterQueue.metricApproximateNumberOfMessagesVisible({
      period: Duration.minutes(1),
      statistic: 'Maximum',
    }),
    threshold: 1,
    evaluationPeriods: 1,
    comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
    // SQS only emits metrics for active queues: silence is not a problem.
    treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
  });
  if (topic) alarm.addAlarmAction(new cwActions.SnsAction(topic));
  return alarm;
}
