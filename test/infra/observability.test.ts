/**
 * The observability resources, as CloudFormation sees them: the job-log group and who may touch it
 * (agents and their tasks' awslogs driver write their own endpoint's streams, the API Lambda only
 * reads), the management API route
 * behind the key authorizer, the management API's DynamoDB reads through indexes (no Scan), and the
 * per-environment dashboard with its failed-launch counter.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Stack } from 'aws-cdk-lib';
import { Match, Template } from 'aws-cdk-lib/assertions';
import type * as ecs from 'aws-cdk-lib/aws-ecs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  containerLogStreamPrefix,
  containerStreamRegex,
  jobLogStreamPrefix,
  taskContainers,
} from '../../core/adapters/aws/cloudwatch-logs.js';
import { metricsLineKey, serviceTaskMetricNames, taskStartFailureMetricName } from '../../core/metrics.js';
import { buildApp, type FerryApp } from '../../infra/app.js';
import { jobLogGroupName, scalerFunctionName, scalerLogGroupName } from '../../infra/names.js';
import { account, Policy, region } from '../support/iam-gate.js';
import { sampleImages, sampleManifest, stubFunctionsDir } from './fixtures.js';
import { actionsOf, resourcesFor, statementsOf } from './iam.js';

interface ContainerDefinition {
  Name: string;
  LogConfiguration?: unknown;
}

/** The container definitions of a task definition, as synthesized. */
function containersOf(taskDefinition: ecs.TaskDefinition): ContainerDefinition[] {
  const id = Stack.of(taskDefinition).getLogicalId(taskDefinition.node.defaultChild as ecs.CfnTaskDefinition);
  return app.toJSON().Resources[id].Properties.ContainerDefinitions as ContainerDefinition[];
}

interface Widget {
  type: string;
  properties: { title?: string; query?: string; metrics?: unknown[] };
}

/**
 * The app dashboard's widgets, as CloudWatch reads its body: the body is an Fn::Join of text and
 * tokens (the region, the services' names), which stand in here as `TOKEN`.
 */
function dashboardWidgets(): Widget[] {
  const [dashboard] = Object.values(app.findResources('AWS::CloudWatch::Dashboard'));
  const body = dashboard!.Properties.DashboardBody as { 'Fn::Join': [string, unknown[]] };
  const text = body['Fn::Join'][1].map((part) => (typeof part === 'string' ? part : 'TOKEN')).join('');
  return (JSON.parse(text) as { widgets: Widget[] }).widgets;
}

let built: FerryApp;
let app: Template;
let platform: Template;
const cleanups: (() => void)[] = [];

beforeAll(() => {
  const fns = stubFunctionsDir();
  const outdir = mkdtempSync(join(tmpdir(), 'ferry-infra-obs-'));
  cleanups.push(fns.cleanup, () => rmSync(outdir, { recursive: true, force: true }));
  built = buildApp({
    manifest: sampleManifest,
    env: 'dev',
    functionsCodeDir: fns.dir,
    artifact: { key: 'artifacts/demo/dev/fff.tar.gz' },
    images: sampleImages,
    outdir,
  });
  app = Template.fromStack(built.appStack);
  platform = Template.fromStack(built.platform);
});
afterAll(() => {
  for (const cleanup of cleanups) cleanup();
});

describe('job logs', () => {
  it('the platform owns the job-log group, kept longer than any job stays readable', () => {
    platform.hasResourceProperties('AWS::Logs::LogGroup', {
      LogGroupName: jobLogGroupName,
      RetentionInDays: 14,
    });
  });

  it('the API function reads it (FilterLogEvents only) and knows its name', () => {
    const role = built.platform.apiFunction.role!;
    const statements = statementsOf(platform, role);
    const logActions = actionsOf(statements).filter((a) => a.startsWith('logs:'));
    expect(logActions).toEqual(['logs:FilterLogEvents']);
    expect(resourcesFor(statements, 'logs:FilterLogEvents').join()).toContain(
      `log-group:${jobLogGroupName}:*`,
    );
    platform.hasResourceProperties('AWS::Lambda::Function', {
      Environment: { Variables: Match.objectLike({ FERRY_LOG_GROUP: jobLogGroupName }) },
    });
  });

  it("an agent (its scoped role) writes only its own endpoint's streams", () => {
    for (const endpoint of built.appStack.endpoints.filter((e) => e.kind === 'queue')) {
      const statements = statementsOf(app, endpoint.agentRole);
      const resources = resourcesFor(statements, 'logs:PutLogEvents');
      expect(resources).toHaveLength(1);
      expect(resources[0]).toContain(`${jobLogGroupName}:log-stream:${endpoint.id}/*`);
      expect(actionsOf(statements)).not.toContain('logs:FilterLogEvents');
    }
  });

  it("every container's own output goes to the job-log group under its endpoint's id, never blocking", () => {
    for (const endpoint of built.appStack.endpoints) {
      const containers = containersOf(endpoint.taskDefinition);
      // The names the reader knows a container stream by (`<endpointId>/<container>/<task id>`).
      expect(containers.map((c) => c.Name).sort()).toEqual([...taskContainers].sort());
      for (const c of containers) {
        expect(c.LogConfiguration, `${endpoint.name} ${c.Name}`).toEqual({
          LogDriver: 'awslogs',
          Options: {
            'awslogs-group': jobLogGroupName,
            'awslogs-stream-prefix': endpoint.id,
            'awslogs-region': { Ref: 'AWS::Region' },
            mode: 'non-blocking',
            'max-buffer-size': '26214400b',
          },
        });
      }
      // The driver's streams are under the prefix a read of the endpoint scans.
      expect(
        `${containerLogStreamPrefix(endpoint.id)}/worker/t`.startsWith(jobLogStreamPrefix(endpoint.id)),
      ).toBe(true);
    }
  });

  it("the execution role (the awslogs driver's) may create and write its own endpoint's streams and no other's", () => {
    const [mine, other] = built.appStack.endpoints;
    expect(other).toBeDefined();
    for (const endpoint of built.appStack.endpoints) {
      const statements = statementsOf(app, endpoint.taskDefinition.executionRole!).filter((s) =>
        actionsOf([s]).some((a) => a.startsWith('logs:') || a.includes('*')),
      );
      expect(actionsOf(statements).sort()).toEqual(['logs:CreateLogStream', 'logs:PutLogEvents']);
      for (const action of ['logs:CreateLogStream', 'logs:PutLogEvents']) {
        const resources = resourcesFor(statements, action);
        expect(resources).toHaveLength(1);
        expect(resources[0]).toContain(`log-group:${jobLogGroupName}:log-stream:${endpoint.id}/*"`);
      }
    }
    // Evaluated as IAM does (the stream's ARN: "…:log-group:<group>:log-stream:<stream>").
    const policy = new Policy(
      statementsOf(app, mine!.taskDefinition.executionRole!).filter((s) =>
        actionsOf([s]).some((a) => a.startsWith('logs:')),
      ),
    );
    const stream = (name: string) =>
      `arn:aws:logs:${region}:${account}:log-group:${jobLogGroupName}:log-stream:${name}`;
    const task = '0123456789abcdef0123456789abcdef';
    for (const action of ['logs:CreateLogStream', 'logs:PutLogEvents']) {
      const allows = (name: string) => policy.allows({ action, resource: stream(name), leadingKeys: [] });
      for (const container of taskContainers)
        expect(allows(`${mine!.id}/${container}/${task}`), action).toBe(true);
      expect(allows(`${other!.id}/worker/${task}`), action).toBe(false);
      expect(allows(`${other!.id}/${task}`), action).toBe(false);
      // Another endpoint whose id starts with this one's.
      expect(allows(`${mine!.id}x/worker/${task}`), action).toBe(false);
      expect(
        policy.allows({
          action,
          resource: `arn:aws:logs:${region}:${account}:log-group:${jobLogGroupName}`,
          leadingKeys: [],
        }),
      ).toBe(false);
    }
  });

  it('the app environment keeps no log group of its own: its containers write the platform’s', () => {
    expect(Object.keys(app.findResources('AWS::Logs::LogGroup'))).toEqual([]);
  });

  it('the management API reads DynamoDB through indexes only, never a Scan', () => {
    const actions = actionsOf(statementsOf(platform, built.platform.apiFunction.role!));
    expect(actions.filter((a) => a.startsWith('dynamodb:'))).not.toContain('dynamodb:Scan');
    const queries = resourcesFor(statementsOf(platform, built.platform.apiFunction.role!), 'dynamodb:Query');
    for (const index of ['byEndpointStatus', 'byKind', 'byEndpoint'])
      expect(
        queries.some((r) => r.includes(`/index/${index}`)),
        index,
      ).toBe(true);
  });
});

describe('management API route', () => {
  it('/manage/v1/{proxy+} goes to the API function behind the key authorizer', () => {
    const resources = Object.entries(platform.findResources('AWS::ApiGateway::Resource'));
    const v1 = resources.find(([, r]) => r.Properties.PathPart === 'v1');
    const proxy = resources.find(
      ([, r]) => r.Properties.PathPart === '{proxy+}' && r.Properties.ParentId.Ref === v1?.[0],
    );
    expect(proxy).toBeDefined();
    // Any method: the function answers all but GET with its 404 (core/manage.ts).
    platform.hasResourceProperties('AWS::ApiGateway::Method', {
      HttpMethod: 'ANY',
      ResourceId: { Ref: proxy![0] },
      AuthorizationType: 'CUSTOM',
      AuthorizerId: Match.anyValue(),
    });
  });
});

describe('dashboard', () => {
  // "All dashboards in your account are global, not region-specific."
  // (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-resource-cloudwatch-dashboard.html)
  it('is named after its stack and its region, so the environment deploys in a second region too', () => {
    const [dashboard] = Object.values(app.findResources('AWS::CloudWatch::Dashboard'));
    expect(dashboard!.Properties.DashboardName).toEqual({
      'Fn::Join': ['', [`${built.appStack.stackName}-`, { Ref: 'AWS::Region' }]],
    });
  });

  it('the platform’s is `Ferry-<region>`: one platform per account and region', () => {
    platform.hasResourceProperties('AWS::CloudWatch::Dashboard', {
      DashboardName: { 'Fn::Join': ['', ['Ferry-', { Ref: 'AWS::Region' }]] },
    });
  });

  it('one dashboard per environment with the ops questions per endpoint', () => {
    const dashboards = app.findResources('AWS::CloudWatch::Dashboard');
    expect(Object.keys(dashboards)).toHaveLength(1);
    const body = JSON.stringify(Object.values(dashboards)[0]!.Properties.DashboardBody);
    for (const needle of [
      'JobsEnded',
      'DelayMs',
      'ExecutionMs',
      'pct(',
      'ApproximateAgeOfOldestMessage',
      serviceTaskMetricNames.running,
      serviceTaskMetricNames.desired,
      'nvidia_smi_utilization_gpu',
      'TaskStartFailures',
    ])
      expect(body, needle).toContain(needle);
  });

  // A worker can print any line into the job-log group, and CloudWatch extracts a line in the
  // embedded metric format as a metric whoever wrote it (core/metrics.ts): so no graph reads a
  // metric a worker could write, and the jobs' graphs read the agent container's streams by name.
  it('graphs jobs from the agent container’s own streams and no metric a worker could print', () => {
    const widgets = dashboardWidgets();
    const metricNamespaces = widgets
      .flatMap((w) => (w.properties.metrics ?? []) as unknown[][])
      .map((metric) => metric[0])
      .filter((namespace) => typeof namespace === 'string');
    // SQS's own (an `AWS/` namespace, closed to such lines); the CloudWatch agent's GPU graph is a
    // search expression (below); none of Ferry's.
    expect([...new Set(metricNamespaces)].sort()).toEqual(['AWS/SQS']);
    expect(JSON.stringify(widgets)).not.toContain('"Ferry"');
    for (const endpoint of built.appStack.endpoints.filter((e) => e.queue)) {
      const queries = widgets
        .filter((w) => w.type === 'log' && w.properties.query?.includes(`SOURCE '${jobLogGroupName}'`))
        .map((w) => w.properties.query!)
        .filter((query) => query.includes(containerStreamRegex(endpoint.id, 'agent')));
      expect(queries, endpoint.name).toHaveLength(2);
      for (const query of queries) {
        expect(query).toContain(
          `filter @logStream like /${containerStreamRegex(endpoint.id, 'agent')}/ and ${metricsLineKey} = "job"`,
        );
      }
      // The worker's streams of the same endpoint are not the agent's.
      const agentStreams = new RegExp(containerStreamRegex(endpoint.id, 'agent'));
      expect(agentStreams.test(`${endpoint.id}/agent/0123abcd`)).toBe(true);
      expect(agentStreams.test(`${endpoint.id}/worker/0123abcd`)).toBe(false);
    }
  });

  // Container Insights' RunningTaskCount and DesiredTaskCount are an ordinary namespace: one
  // embedded-metric line a worker prints, with any service's dimensions, adds a point to them
  // (docs/security-aws.md, "What is left"). The scaler logs the counts DescribeServices gave it.
  it('graphs workers running vs desired from the scaler’s own log group, filtered on the endpoint, and reads no Container Insights metric', () => {
    const widgets = dashboardWidgets();
    for (const endpoint of built.appStack.endpoints) {
      const [widget, ...others] = widgets.filter(
        (w) => w.properties.title === `${endpoint.name}: workers running vs desired`,
      );
      expect(others).toEqual([]);
      expect(widget!.type).toBe('log');
      const query = widget!.properties.query!;
      expect(query).toContain(`SOURCE '${scalerLogGroupName}'`);
      expect(query).not.toContain(jobLogGroupName);
      expect(query).toContain(
        `filter @message like /"${metricsLineKey}":"serviceTasks","EndpointId":"${endpoint.id}"/`,
      );
      expect(query).toContain('max(runningTasks) as running, max(desiredTasks) as desired');
      expect(query).toContain('by bin(1m)');
    }
    // No widget reads Container Insights, and the only other metric source, the CloudWatch agent's
    // GPU utilization, is on the GPU endpoints' rows only.
    const body = JSON.stringify(widgets);
    expect(body).not.toContain('ContainerInsights');
    expect(body).not.toContain('TaskCount');
    const gpuNames = built.appStack.endpoints.filter((e) => e.placement.kind === 'gpu').map((e) => e.name);
    expect(gpuNames).not.toEqual([]);
    const agentWidgets = widgets.filter((w) => JSON.stringify(w).includes('CWAgent'));
    expect(agentWidgets.map((w) => w.properties.title).sort()).toEqual(
      gpuNames.map((name) => `${name}: GPU utilization (%)`).sort(),
    );
    for (const w of widgets.filter((w) => w.type === 'metric' && !agentWidgets.includes(w))) {
      for (const metric of (w.properties.metrics ?? []) as unknown[][])
        expect(metric[0], w.properties.title).toBe('AWS/SQS');
    }
  });

  it('graphs failed starts from the scaler’s own log group, with no EventBridge rule per endpoint (300 per bus)', () => {
    // An app stack adds no rule: each would count against the account's 300 rules on the default bus.
    app.resourceCountIs('AWS::Events::Rule', 0);
    const widgets = dashboardWidgets();
    for (const endpoint of built.appStack.endpoints) {
      const [query, ...others] = widgets
        .map((w) => w.properties.query ?? '')
        .filter((q) => q.includes(`"EndpointId":"${endpoint.id}"`) && q.includes('taskStartFailure'));
      expect(others).toEqual([]);
      expect(query).toContain(`SOURCE '${scalerLogGroupName}'`);
      expect(query).toContain(`"${metricsLineKey}":"taskStartFailure"`);
      expect(query).toContain(`as ${taskStartFailureMetricName}`);
    }
    expect(JSON.stringify(widgets)).not.toContain('TriggeredRules');
    // The scaler writes that group, by its fixed name, and nothing else is granted it.
    const scaler = Object.values(platform.findResources('AWS::Lambda::Function')).find(
      (fn) => fn.Properties.FunctionName === scalerFunctionName,
    );
    const [groupId] = Object.entries(platform.findResources('AWS::Logs::LogGroup')).find(
      ([, group]) => group.Properties.LogGroupName === scalerLogGroupName,
    )!;
    expect(scaler!.Properties.LoggingConfig).toEqual({ LogGroup: { Ref: groupId } });
    // The platform's one rule on ECS task events hands failed starts to the scaler, which counts them.
    platform.hasResourceProperties('AWS::Events::Rule', {
      EventPattern: Match.objectLike({
        source: ['aws.ecs'],
        'detail-type': ['ECS Task State Change'],
        detail: Match.objectLike({ stopCode: ['TaskFailedToStart'] }),
      }),
    });
  });
});
