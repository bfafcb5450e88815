/**
 * The CloudWatch dashboard of one app environment (docs/observability.md): per endpoint, jobs/s,
 * delay and execution p50/p95, queue age, running vs desired workers, GPU utilization and failed
 * launches. Sources:
 *   - jobs, delay, execution: the `Ferry` EMF metrics the agent prints per ended job (core/metrics.ts)
 *   - queue age: SQS ApproximateAgeOfOldestMessage (a message is deleted as soon as a job is claimed,
 *     so it is the longest wait for a worker)
 *   - running vs desired: Container Insights (the platform's cluster has it on), by service
 *     https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/Container-Insights-metrics-ECS.html
 *   - GPU utilization: the CloudWatch agent's nvidia_smi_utilization_gpu, when the GPU instances run
 *     the agent with its NVIDIA GPU metrics (empty otherwise; the AMI does not ship it turned on)
 *     https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch-Agent-NVIDIA-GPU.html
 *   - failed launches: the `Ferry` TaskStartFailures metric the scaler prints (EMF, core/metrics.ts)
 *     for each task it counts as a failed start of the endpoint (the platform's one rule on ECS
 *     "Task State Change" events with stopCode TaskFailedToStart hands them to it,
 *     https://docs.aws.amazon.com/AmazonECS/latest/developerguide/ecs_task_events.html). Not a rule
 *     per endpoint: EventBridge allows 300 rules per event bus, 100 in some regions
 *     (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-quota.html), and one per endpoint
 *     on the default bus made the deploy of about the 297th endpoint of an account fail.
 */
import { Aws, Duration } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import type * as ecs from 'aws-cdk-lib/aws-ecs';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct } from 'constructs';
import { jobMetricNames, metricsNamespace, taskStartFailureMetricName } from '../../core/metrics.js';

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
  service: ecs.Ec2Service;
  queue?: sqs.IQueue | undefined;
  gpu: boolean;
}

export interface EnvironmentDashboardProps {
  /** The full name (regionalDashboardName). */
  dashboardName: string;
  clusterName: string;
  endpoints: readonly DashboardEndpoint[];
}

export class EnvironmentDashboard extends Construct {
  readonly dashboard: cloudwatch.Dashboard;

  constructor(scope: Construct, id: string, props: EnvironmentDashboardProps) {
    super(scope, id);
    this.dashboard = new cloudwatch.Dashboard(this, 'Dashboard', { dashboardName: props.dashboardName });
    const minute = Duration.minutes(1);
    const ferry = (metricName: string, endpointId: string, statistic: string) =>
      new cloudwatch.Metric({
        namespace: metricsNamespace,
        metricName,
        dimensionsMap: { EndpointId: endpointId },
        statistic,
        period: minute,
      });
    for (const endpoint of props.endpoints) {
      const services = { ClusterName: props.clusterName, ServiceName: endpoint.service.serviceName };
      const insights = (metricName: string, label: string) =>
        new cloudwatch.Metric({
          namespace: 'ECS/ContainerInsights',
          metricName,
          dimensionsMap: services,
          statistic: 'Average',
          period: minute,
          label,
        });
      this.dashboard.addWidgets(
        new cloudwatch.TextWidget({
          markdown: `## ${endpoint.name} \`${endpoint.id}\``,
          width: 24,
          height: 1,
        }),
      );
      const widgets: cloudwatch.IWidget[] = [];
      // Per second whatever the graph's period: the dashboard's periods follow its time range (CDK's
      // PeriodOverride.AUTO, the default), so a fixed `/ 60` overstated a day's view 5 to 60 times.
      // PERIOD(m) "returns the period of the metric in seconds"
      // (https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/using-metric-math.html).
      if (endpoint.queue) {
        widgets.push(
          new cloudwatch.GraphWidget({
            title: `${endpoint.name}: jobs/s`,
            left: [
              new cloudwatch.MathExpression({
                expression: 'ended / PERIOD(ended)',
                usingMetrics: { ended: ferry(jobMetricNames.ended, endpoint.id, 'Sum') },
                label: 'ended/s',
                period: minute,
              }),
              new cloudwatch.MathExpression({
                expression: 'failed / PERIOD(failed)',
                usingMetrics: { failed: ferry(jobMetricNames.failed, endpoint.id, 'Sum') },
                label: 'failed/s',
                period: minute,
              }),
            ],
            width: 8,
          }),
          new cloudwatch.GraphWidget({
            title: `${endpoint.name}: delay and execution (ms)`,
            left: [
              ferry(jobMetricNames.delayMs, endpoint.id, 'p50').with({ label: 'delay p50' }),
              ferry(jobMetricNames.delayMs, endpoint.id, 'p95').with({ label: 'delay p95' }),
              ferry(jobMetricNames.executionMs, endpoint.id, 'p50').with({ label: 'execution p50' }),
              ferry(jobMetricNames.executionMs, endpoint.id, 'p95').with({ label: 'execution p95' }),
            ],
            width: 8,
          }),
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
        new cloudwatch.GraphWidget({
          title: `${endpoint.name}: workers running vs desired`,
          left: [insights('RunningTaskCount', 'running'), insights('DesiredTaskCount', 'desired')],
          width: 8,
        }),
        new cloudwatch.GraphWidget({
          title: `${endpoint.name}: failed launches`,
          left: [
            new cloudwatch.Metric({
              namespace: metricsNamespace,
              metricName: taskStartFailureMetricName,
              dimensionsMap: { EndpointId: endpoint.id },
              statistic: 'Sum',
              period: Duration.minutes(5),
              label: 'tasks that failed to start',
            }),
          ],
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
