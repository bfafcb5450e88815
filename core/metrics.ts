/**
 * Job metrics as CloudWatch Embedded Metric Format (docs/observability.md): one JSON log line per
 * ended job that CloudWatch turns into metrics in the `Ferry` namespace, by EndpointId — no
 * PutMetricData call and no extra IAM. The agent prints it to stdout, which the awslogs driver ships.
 * Format: https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html
 */
import type { JobView } from './job.js';

export const metricsNamespace = 'Ferry';

/** The metric names the dashboard (infra/constructs/dashboard.ts) reads. */
export const jobMetricNames = {
  ended: 'JobsEnded',
  failed: 'JobsFailed',
  delayMs: 'DelayMs',
  executionMs: 'ExecutionMs',
} as const;

/** The metric of an endpoint's tasks that could not start, as the scaler counts them (functions/scaler.ts). */
export const taskStartFailureMetricName = 'TaskStartFailures';

/**
 * The EMF fields that make a log line of the scaler (a JSON object, as its `log` prints it) one
 * failed start of the endpoint in the `Ferry` namespace, by EndpointId: CloudWatch extracts it from
 * the function's own log group, so the dashboard graphs failed starts without a per-endpoint
 * EventBridge rule (300 rules per bus and account: one per endpoint capped the endpoints an account
 * could deploy, infra/constructs/dashboard.ts).
 */
export function taskStartFailureFields(endpointId: string, nowMs: number): Record<string, unknown> {
  return {
    _aws: {
      Timestamp: nowMs,
      CloudWatchMetrics: [
        {
          Namespace: metricsNamespace,
          Dimensions: [['EndpointId']],
          Metrics: [{ Name: taskStartFailureMetricName, Unit: 'Count' }],
        },
      ],
    },
    EndpointId: endpointId,
    [taskStartFailureMetricName]: 1,
  };
}

/** The EMF document for one ended job, or undefined while it has not ended. */
export function jobMetricsLine(endpointId: string, view: JobView, nowMs: number): string | undefined {
  if (!['COMPLETED', 'FAILED', 'TIMED_OUT', 'CANCELLED'].includes(view.status)) return undefined;
  const failed = view.status === 'FAILED' || view.status === 'TIMED_OUT' ? 1 : 0;
  const metrics: { Name: string; Unit: string }[] = [
    { Name: jobMetricNames.ended, Unit: 'Count' },
    { Name: jobMetricNames.failed, Unit: 'Count' },
  ];
  const values: Record<string, number> = { [jobMetricNames.ended]: 1, [jobMetricNames.failed]: failed };
  if (view.delayTime !== undefined) {
    metrics.push({ Name: jobMetricNames.delayMs, Unit: 'Milliseconds' });
    values[jobMetricNames.delayMs] = view.delayTime;
  }
  if (view.executionTime !== undefined) {
    metrics.push({ Name: jobMetricNames.executionMs, Unit: 'Milliseconds' });
    values[jobMetricNames.executionMs] = view.executionTime;
  }
  return JSON.stringify({
    _aws: {
      Timestamp: nowMs,
      CloudWatchMetrics: [{ Namespace: metricsNamespace, Dimensions: [['EndpointId']], Metrics: metrics }],
    },
    EndpointId: endpointId,
    jobId: view.id,
    status: view.status,
    ...values,
  });
}
