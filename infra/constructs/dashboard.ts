/**
 * The CloudWatch dashboard of one app environment (docs/observability.md): per endpoint, jobs ended
 * and failed, delay and execution p50/p95, queue age, running vs desired workers, GPU utilization and
 * failed launches. Sources:
 *   - jobs, delay, execution: the metrics line the agent prints per ended job (core/metrics.ts), read
 *     by Logs Insights from the agent container's streams only (`containerStreamRegex`): the worker
 *     container writes to the same log group, and its lines must never count (core/metrics.ts says
 *     why these are not CloudWatch metrics)
 *   - queue age: SQS ApproximateAgeOfOldestMessage (a message is deleted as soon as a job is claimed,
 *     so it is the longest wait for a worker)
 *   - running vs desired: the service's counts the scaler logs on each run (core/metrics.ts
 *     serviceTasksFields), read by Logs Insights from the scaler's own log group. Not Container
 *     Insights' RunningTaskCount and DesiredTaskCount: an ordinary namespace, to which a worker adds
 *     points for any service with one embedded-metric line printed to its stdout (core/metrics.ts)
 *   - GPU utilization: the CloudWatch agent's nvidia_smi_utilization_gpu, when the GPU instances run
 *     the agent with its NVIDIA GPU metrics (empty otherwise; the AMI does not ship it turned on)
 *     https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch-Agent-NVIDIA-GPU.html
 *   - failed launches: the line the scaler logs for each task it counts as a failed start of the
 *     endpoint (core/metrics.ts), read by Logs Insights from the scaler's own log group, which only
 *     it writes (the platform's one rule on ECS "Task State Change" events with stopCode
 *     TaskFailedToStart hands them to it,
 *     https://docs.aws.amazon.com/AmazonECS/latest/developerguide/ecs_task_events.html). Not a rule
 *     per endpoint: EventBridge allows 300 rules per event bus, 100 in some regions
 *     (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-quota.html), and one per endpoint
 *     on the default bus made the deploy of about the 297th endpoint of an account fail.
 *
 * A Logs Insights widget runs its query on each view of the dashboard, and Logs Insights is charged
 * by the data a query scans (https://aws.amazon.com/cloudwatch/pricing/): the job-log group over the
 * dashboard's time range, worker output included, or the scaler's group.
 */
import { Aws, Duration } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct } from 'constructs';
import { containerStreamRegex } from '../../core/adapters/aws/cloudwatch-logs.js';
import {
  jobMetricNames,
  metricsLineKey,
  serviceTasksQuery,
  taskStartFailuresQuery,
} from '../../core/metrics.js';
import { jobLogGroupName, scalerLogGroupName } from '../names.js';

/**
 * A dashboard name that holds the region, `<base>-<region>` (e.g. `Ferry-us-east-1`): "All dashboards
 * in your account are global, not region-specific"
 * (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-resource-cloudwatch-dashboard.html),
 * so a fixed name made the platform of a second region (one platform per account and region), or the
 * same app environment deployed in two regions, fail to create its dashboard. Names are 1 to 255
 * letters, digits, `-` and `_`; region names are shorter than 25, so `base` keeps its first 230.
 */
export const regionalDashboardName = (base: string): string => `${base.slice(0, 230)}-${Aws.REGION}`;

export interface DashboardEndpoint {
  name: string;
  id: string;
  queue?: sqs.IQueue | undefined;
  gpu: boolean;
}

export interface EnvironmentDashboardProps {
  /** The full name (regionalDashboardName). */
  dashboardName: string;
  endpoints: readonly DashboardEndpoint[];
}

export class EnvironmentDashboard extends Construct {
  readonly dashboard: cloudwatch.Dashboard;

  constructor(scope: Construct, id: string, props: EnvironmentDashboardProps) {
    super(scope, id);
    this.dashboard = new cloudwatch.Dashboard(this, 'Dashboard', { dashboardName: props.dashboardName });
    const minute = Duration.minutes(1);
    // A Logs Insights line chart of the agent's metrics lines of one endpoint, in 5-minute bins
    // whatever the dashboard's time range (a week's view is 2016 points).
    const agentLines = (endpointId: string, title: string, stats: string) =>
      new cloudwatch.LogQueryWidget({
        title,
        logGroupNames: [jobLogGroupName],
        queryLines: [
          `filter @logStream like /${containerStreamRegex(endpointId, 'agent')}/ and ${metricsLineKey} = "job"`,
          `stats ${stats} by bin(5m)`,
        ],
        view: cloudwatch.LogQueryVisualizationType.LINE,
        width: 8,
      });
    for (const endpoint of props.endpoints) {
      this.dashboard.addWidgets(
        new cloudwatch.TextWidget({
          markdown: `## ${endpoint.name} \`${endpoint.id}\``,
          width: 24,
          height: 1,
        }),
      );
      const widgets: cloudwatch.IWidget[] = [];
      if (endpoint.queue) {
        const { ended, failed, delayMs, executionMs } = jobMetricNames;
        widgets.push(
          agentLines(
            endpoint.id,
            `${endpoint.name}: jobs ended and failed per 5 min`,
            `sum(${ended}) as ended, sum(${failed}) as failed`,
          ),
          agentLines(
            endpoint.id,
            `${endpoint.name}: delay and execution (ms)`,
            [
              `pct(${delayMs}, 50) as delay_p50`,
              `pct(${delayMs}, 95) as delay_p95`,
              `pct(${executionMs}, 50) as execution_p50`,
              `pct(${executionMs}, 95) as execution_p95`,
            ].join(', '),
          ),
          new cloudwatch.GraphWidget({
            title: `${endpoint.name}: queue age (s)`,
            left: [
              endpoint.queue.metricApproximateAgeOfOldestMessage({ period: minute, statistic: 'Maximum' }),
            ],
            width: 8,
          }),
        );
      }
      widgets.push(
        new cloudwatch.LogQueryWidget({
          title: `${endpoint.name}: workers running vs desired`,
          logGroupNames: [scalerLogGroupName],
          queryLines: serviceTasksQuery(endpoint.id),
          view: cloudwatch.LogQueryVisualizationType.LINE,
          width: 8,
        }),
        new cloudwatch.LogQueryWidget({
          title: `${endpoint.name}: failed launches per 5 min`,
          logGroupNames: [scalerLogGroupName],
          queryLines: taskStartFailuresQuery(endpoint.id),
          view: cloudwatch.LogQueryVisualizationType.LINE,
          width: 8,
        }),
      );
      if (endpoint.gpu) {
        widgets.push(
          new cloudwatch.GraphWidget({
            title: `${endpoint.name}: GPU utilization (%)`,
            left: [
              new cloudwatch.MathExpression({
                expression: `SEARCH('{CWAgent,host,index,name} MetricName="nvidia_smi_utilization_gpu"', 'Average', 60)`,
                usingMetrics: {},
                label: 'GPU',
                period: minute,
              }),
            ],
            width: 8,
          }),
        );
      }
      this.dashboard.addWidgets(...widgets);
    }
  }
}
