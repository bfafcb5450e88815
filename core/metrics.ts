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
  return endpointMetricFields(endpointId, nowMs, [
    { name: taskStartFailureMetricName, unit: 'Count', value: 1 },
  ]);
}

/** The EMF document for one ended job, or undefined while it has not ended. */
export function jobMetricsLine(endpointId: string, view: JobView, nowMs: number): string | undefined {
  if (!['COMPLETED', 'FAILED', 'TIMED_OUT', 'CANCELLED'].includes(view.status)) return undefined;
  const failed = view.status === 'FAILED' || view.status === 'TIMED_OUT' ? 1 : 0;
  const metrics: EndpointMetric[] = [
    { name: jobMetricNames.ended, unit: 'Count', value: 1 },
    { name: jobMetricNames.failed, unit: 'Count', value: failed },
  ];
  if (view.delayTime !== undefined) {
    metrics.push({ name: jobMetricNames.delayMs, unit: 'Milliseconds', value: view.delayTime });
  }
  if (view.executionTime !== undefined) {
    metrics.push({ name: jobMetricNames.executionMs, unit: 'Milliseconds', value: view.executionTime });
  }
  const { _aws, EndpointId, ...values } = endpointMetricFields(endpointId, nowMs, metrics);
  return JSON.stringify({ _aws, EndpointId, jobId: view.id, status: view.status, ...values });
}

interface EndpointMetric {
  name: string;
  unit: 'Count' | 'Milliseconds';
  value: number;
}

/**
 * The EMF fields of `metrics` in the `Ferry` namespace by EndpointId: the `_aws` directive, the
 * dimension's value and each metric's value at the top level, as the format asks. The one shape of
 * every metric line Ferry prints (the agent's per job, the scaler's per failed start).
 */
function endpointMetricFields(
  endpointId: string,
  nowMs: number,
  metrics: readonly EndpointMetric[],
): Record<string, unknown> {
  return {
    _aws: {
      Timestamp: nowMs,
      CloudWatchMetrics: [
        {
          Namespace: metricsNamespace,
          Dimensions: [['EndpointId']],
          Metrics: metrics.map(({ name, unit }) => ({ Name: name, Unit: unit })),
        },
      ],
    },
    EndpointId: endpointId,
    ...Object.fromEntries(metrics.map(({ name, value }) => [name, value])),
  };
}
