/**
 * Job metrics as log lines (docs/observability.md): one JSON line per ended job, which the agent
 * prints to stdout (the awslogs driver ships it to the agent container's stream of the job-log
 * group), and the fields of the scaler's lines per failed start and per endpoint's service counts.
 * The CloudWatch dashboard (infra/constructs/dashboard.ts) reads them with Logs Insights, from those
 * streams by name and from the scaler's own log group.
 *
 * Plain JSON, not CloudWatch's embedded metric format (EMF), and read from the log by stream, not as
 * metrics: a metric in CloudWatch says nothing of who wrote it, and a worker can write one. CloudWatch
 * Logs extracts an EMF document from any event of a Standard-class log group, by its content: "When
 * calling PutLogEvents, you have the option to include the following HTTP header, which tells
 * CloudWatch Logs the metrics should be extracted, but it's not required. x-amzn-logs-format:
 * json/emf" ("Using the PutLogEvents API to send manually-created embedded metric format logs",
 * https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Generation_PutLogEvents.html;
 * the header was a MUST until January 2023, and the awslogs driver never sends it). The worker
 * container's output reaches the job-log group through the same awslogs driver as the agent's, so
 * when these lines were EMF (`_aws`, namespace `Ferry`, dimension EndpointId), a worker that printed
 * a line of that shape, with any endpoint's id, counted in that endpoint's graphs. Nothing in a
 * document tells a writer apart (a namespace or a dimension a worker can read, it can print), and
 * the group cannot leave extraction out and still serve `ferry logs`: the Infrequent Access class is
 * for logs that need none of "Live Tail, metric extraction, alarming, or data protection" (AWS's
 * launch note, "Amazon CloudWatch Logs now offers Infrequent Access log class"; features by class:
 * https://docs.aws.amazon.com/AmazonCloudWatch/latest/logs/CloudWatch_Logs_Log_Classes.html), but
 * FilterLogEvents, every `ferry logs` read, is refused on such a group (InvalidOperationException
 * "FilterLogEvents is not supported for this log class", as CloudWatch Logs answers it). The
 * stream a line is in is what no worker chooses: the driver names it after the container
 * (`<endpointId>/<container>/<task id>`) and IAM fences who writes it (infra/constructs/service.ts).
 */
import type { JobView } from './job.js';

/**
 * The key that marks a Ferry metrics line, with what it counts (`job`, `taskStartFailure`,
 * `serviceTasks`): how `ferry logs` knows the agent's lines to leave out
 * (core/adapters/aws/cloudwatch-logs.ts) and what the dashboard's queries pick
 * (infra/constructs/dashboard.ts). Never `_aws`: see above.
 */
export const metricsLineKey = 'ferryMetrics';

/** The fields the dashboard (infra/constructs/dashboard.ts) reads. */
export const jobMetricNames = {
  ended: 'JobsEnded',
  failed: 'JobsFailed',
  delayMs: 'DelayMs',
  executionMs: 'ExecutionMs',
} as const;

/** The field of an endpoint's tasks that could not start, as the scaler counts them (functions/scaler.ts). */
export const taskStartFailureMetricName = 'TaskStartFailures';

/**
 * The fields that make a log line of the scaler (a JSON object, as its `log` prints it) one failed
 * start of the endpoint: the dashboard counts them in the scaler's own log group (`scalerLogGroupName`,
 * infra/names.ts), which only the scaler writes, so it graphs failed starts without a per-endpoint
 * EventBridge rule (300 rules per bus and account: one per endpoint capped the endpoints an account
 * could deploy, infra/constructs/dashboard.ts).
 */
export function taskStartFailureFields(endpointId: string): Record<string, unknown> {
  return { [metricsLineKey]: 'taskStartFailure', EndpointId: endpointId, [taskStartFailureMetricName]: 1 };
}

/**
 * The Logs Insights lines that count one endpoint's failed starts per 5 minutes from the scaler's log
 * group, one line each (`taskStartFailureFields`). Matched as text, as `serviceTasksQuery` says why.
 */
export function taskStartFailuresQuery(endpointId: string): string[] {
  return [
    `filter @message like /"${metricsLineKey}":"taskStartFailure"/ and @message like /"EndpointId":"${endpointId}"/`,
    `stats count(*) as ${taskStartFailureMetricName} by bin(5m)`,
  ];
}

/** An endpoint's ECS service counts, as one scaler run read and left them (functions/scaler.ts). */
export interface ServiceTaskCounts {
  /** The service's desiredCount once the run is done: the one it set, or the one it left. */
  desired: number;
  /** The service's runningCount and pendingCount as DescribeServices answered in the run. */
  running: number;
  pending: number;
}

/** The fields of the scaler's service counts that the dashboard's workers graph reads. */
export const serviceTaskMetricNames = {
  desired: 'DesiredTasks',
  running: 'RunningTasks',
  pending: 'PendingTasks',
} as const;

/**
 * The fields that make the scaler's line of an endpoint (a JSON object, as its `log` prints it) one
 * point of the endpoint's workers graph, running vs desired: the dashboard reads them in the scaler's
 * own log group, which only the scaler writes, where it read Container Insights' task counts before,
 * a namespace any worker could add points to with one embedded-metric line (see above). The order is
 * the one `serviceTasksQuery` reads.
 */
export function serviceTasksFields(endpointId: string, counts: ServiceTaskCounts): Record<string, unknown> {
  return {
    [metricsLineKey]: 'serviceTasks',
    EndpointId: endpointId,
    [serviceTaskMetricNames.desired]: counts.desired,
    [serviceTaskMetricNames.running]: counts.running,
    [serviceTaskMetricNames.pending]: counts.pending,
  };
}

/**
 * The Logs Insights lines that graph one endpoint's service counts from the scaler's log group, the
 * highest of each per minute (the scaler's schedule; a nudge adds a run between). The scaler logs
 * through Lambda's text format (time, request id and level before the JSON), so the line is matched
 * and its counts parsed as text; JSON.stringify writes no spaces and `serviceTasksFields` fixes the
 * order.
 */
export function serviceTasksQuery(endpointId: string): string[] {
  const { desired, running, pending } = serviceTaskMetricNames;
  return [
    `filter @message like /"${metricsLineKey}":"serviceTasks","EndpointId":"${endpointId}"/`,
    `parse @message /"${desired}":(?<desiredTasks>\\d+),"${running}":(?<runningTasks>\\d+),"${pending}":(?<pendingTasks>\\d+)/`,
    'stats max(runningTasks) as running, max(desiredTasks) as desired, max(pendingTasks) as pending by bin(1m)',
  ];
}

/** The metrics line for one ended job, or undefined while it has not ended. */
export function jobMetricsLine(endpointId: string, view: JobView): string | undefined {
  if (!['COMPLETED', 'FAILED', 'TIMED_OUT', 'CANCELLED'].includes(view.status)) return undefined;
  const failed = view.status === 'FAILED' || view.status === 'TIMED_OUT' ? 1 : 0;
  return JSON.stringify({
    [metricsLineKey]: 'job',
    EndpointId: endpointId,
    jobId: view.id,
    status: view.status,
    [jobMetricNames.ended]: 1,
    [jobMetricNames.failed]: failed,
    ...(view.delayTime !== undefined ? { [jobMetricNames.delayMs]: view.delayTime } : {}),
    ...(view.executionTime !== undefined ? { [jobMetricNames.executionMs]: view.executionTime } : {}),
  });
}
