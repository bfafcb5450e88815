/**
 * Scaling of a queue endpoint's service. It reads the urgent queue's
 * ApproximateNumberOfMessagesVisible only. Messages are deleted the moment a worker claims their job,
 * so "not visible" (in flight) is ~0 even under full load and cannot measure work; "visible" is
 * exactly the jobs no worker has picked up yet. The low-priority queue is left out on purpose: those
 * jobs never start a worker.
 *
 *  1. Scale out — step, on "visible ≥ 1" (1-minute maximum), ChangeInCapacity, relative to that
 *     threshold: < 2·maxConcurrency waiting → +1, < 8·maxConcurrency → +2, more → +4. From zero
 *     too (target tracking cannot leave zero). While jobs keep waiting the alarm stays in ALARM and
 *     the policy fires again after each cooldown, up to workersMax.
 *  2. Scale in — step, on "nothing visible for idleTimeoutSec" (missing data counts: an idle
 *     queue stops emitting metrics), ExactCapacity workersMin. Busy tasks survive it: the agent
 *     turns on ECS task scale-in protection while its worker holds a job
 *     (PUT $ECS_AGENT_URI/task-protection/v1/state, allowed by the task role), so ECS stops only
 *     idle tasks and the protected ones once they finish.
 */
import { Duration } from 'aws-cdk-lib';
import * as appscaling from 'aws-cdk-lib/aws-applicationautoscaling';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as cwActions from 'aws-cdk-lib/aws-cloudwatch-actions';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct } from 'constructs';
import type { ManifestEndpoint } from '../../core/manifest.js';

export interface QueueScalingProps {
  endpoint: ManifestEndpoint;
  target: appscaling.ScalableTarget;
  queue: sqs.IQueue;
}

export class QueueScaling extends Construct {
  constructor(scope: Construct, id: string, props: QueueScalingProps) {
    super(scope, id);
    const { endpoint, target, queue } = props;
    const { resources } = endpoint;
    const minute = Duration.minutes(1);
    const visible = queue.metricApproximateNumberOfMessagesVisible({ period: minute, statistic: 'Maximum' });
    const per = Math.max(1, resources.maxConcurrency);

    const scaleOut = new appscaling.StepScalingAction(this, 'ScaleOut', {
      scalingTarget: target,
      adjustmentType: appscaling.AdjustmentType.CHANGE_IN_CAPACITY,
      cooldown: minute,
    });
    scaleOut.addAdjustment({ lowerBound: 0, upperBound: 2 * per, adjustment: 1 });
    scaleOut.addAdjustment({ lowerBound: 2 * per, upperBound: 8 * per, adjustment: 2 });
    scaleOut.addAdjustment({ lowerBound: 8 * per, adjustment: 4 });
    new cloudwatch.Alarm(this, 'BacklogAlarm', {
      alarmDescription: `Ferry ${endpoint.name}: jobs are waiting for a worker`,
      metric: visible,
      threshold: 1,
      evaluationPeriods: 1,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    }).addAlarmAction(new cwActions.ApplicationScalingAction(scaleOut));

    const idleMinutes = Math.max(1, Math.ceil(resources.idleTimeoutSec / 60));
    const idle = new appscaling.StepScalingAction(this, 'Idle', {
      scalingTarget: target,
      adjustmentType: appscaling.AdjustmentType.EXACT_CAPACITY,
      cooldown: Duration.seconds(resources.idleTimeoutSec),
    });
    idle.addAdjustment({ upperBound: 0, adjustment: resources.workersMin });
    new cloudwatch.Alarm(this, 'IdleAlarm', {
      alarmDescription: `Ferry ${endpoint.name}: no job waiting for ${resources.idleTimeoutSec} s`,
      metric: visible,
      threshold: 0,
      evaluationPeriods: idleMinutes,
      comparisonOperator: cloudwatch.ComparisonOperator.LESS_THAN_OR_EQUAL_TO_THRESHOLD,
      // An inactive queue stops emitting metrics: silence means idle.
      treatMissingData: cloudwatch.TreatMissingData.BREACHING,
    }).addAlarmAction(new cwActions.ApplicationScalingAction(idle));
  }
}
