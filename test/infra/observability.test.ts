/**
 * The observability resources, as CloudFormation sees them: the job-log group and who may touch it
 * (agents write their own endpoint's streams, the API Lambda only reads), the management API route
 * behind the key authorizer, the management API's DynamoDB reads through indexes (no Scan), and the
 * per-environment dashboard with its failed-launch counter.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Match, Template } from 'aws-cdk-lib/assertions';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metricsNamespace, taskStartFailureMetricName } from '../../core/metrics.js';
import { buildApp, type FerryApp } from '../../infra/app.js';
import { jobLogGroupName } from '../../infra/names.js';
import { sampleImages, sampleManifest, stubFunctionsDir } from './fixtures.js';
import { actionsOf, resourcesFor, statementsOf } from './iam.js';

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
      'p95',
      'ApproximateAgeOfOldestMessage',
      'RunningTaskCount',
      'DesiredTaskCount',
      'nvidia_smi_utilization_gpu',
      'TaskStartFailures',
    ])
      expect(body, needle).toContain(needle);
  });

  it('jobs/s divides by the graph’s own period, which follows the dashboard’s time range', () => {
    const body = JSON.stringify(
      Object.values(app.findResources('AWS::CloudWatch::Dashboard'))[0]!.Properties.DashboardBody,
    );
    expect(body).toContain('ended / PERIOD(ended)');
    expect(body).toContain('failed / PERIOD(failed)');
    expect(body).not.toMatch(/(ended|failed) \/ 60/);
  });

  it('graphs failed starts from the scaler’s metric, with no EventBridge rule per endpoint (300 per bus)', () => {
    // An app stack adds no rule: each would count against the account's 300 rules on the default bus.
    app.resourceCountIs('AWS::Events::Rule', 0);
    const body = JSON.stringify(
      Object.values(app.findResources('AWS::CloudWatch::Dashboard'))[0]!.Properties.DashboardBody,
    );
    // The body is a JSON string inside the template: its quotes come escaped.
    expect(body).toContain(`\\"${metricsNamespace}\\",\\"${taskStartFailureMetricName}\\",\\"EndpointId\\"`);
    expect(body).not.toContain('TriggeredRules');
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
