import { App } from 'aws-cdk-lib';
import { Match, Template } from 'aws-cdk-lib/assertions';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  integrationTimeoutSec,
  jobsTableLayout,
  maxWaitMs,
  PlatformStack,
  type RouteGroup,
  routeGroups,
} from '../../infra/platform-stack.js';
import { stubFunctionsDir } from './fixtures.js';
import { actionsOf, resourcesFor, statementsOf } from './iam.js';

let platform: PlatformStack;
let template: Template;
let cleanup: () => void;

beforeAll(() => {
  const fns = stubFunctionsDir();
  cleanup = fns.cleanup;
  const app = new App();
  platform = new PlatformStack(app, 'FerryPlatform', {
    functionsCodeDir: fns.dir,
    instanceTypes: ['g5.xlarge', 'm7i.large'],
  });
  template = Template.fromStack(platform);
});
afterAll(() => cleanup());

const logicalId = (construct: { node: { defaultChild?: unknown } }) =>
  platform.getLogicalId(construct.node.defaultChild as never);

describe('tables', () => {
  it('expires jobs by the expiresAtSec TTL attribute and has the status/lease indexes', () => {
    template.hasResource('AWS::DynamoDB::Table', {
      Properties: Match.objectLike({
        KeySchema: [{ AttributeName: 'id', KeyType: 'HASH' }],
        TimeToLiveSpecification: { AttributeName: 'expiresAtSec', Enabled: true },
        GlobalSecondaryIndexes: [
          Match.objectLike({ IndexName: jobsTableLayout.byEndpointStatus.indexName }),
          Match.objectLike({
            IndexName: jobsTableLayout.byStatusDue.indexName,
            KeySchema: [
              { AttributeName: 'status', KeyType: 'HASH' },
              { AttributeName: 'dueAtMs', KeyType: 'RANGE' },
            ],
          }),
        ],
      }),
    });
  });

  it('has point-in-time recovery and encryption on every table, and keeps them on stack delete', () => {
    const tables = template.findResources('AWS::DynamoDB::Table');
    expect(Object.keys(tables)).toHaveLength(4);
    for (const table of Object.values(tables)) {
      expect(table.Properties.PointInTimeRecoverySpecification).toEqual({ PointInTimeRecoveryEnabled: true });
      expect(table.Properties.SSESpecification).toEqual({ SSEEnabled: true });
      expect(table.DeletionPolicy).toBe('Retain');
    }
  });

  it('keys the API keys table by the key hash', () => {
    template.hasResourceProperties('AWS::DynamoDB::Table', {
      KeySchema: [{ AttributeName: 'keyHash', KeyType: 'HASH' }],
    });
  });
});

describe('bucket', () => {
  it('is encrypted, private, and expires payloads but not artifacts', () => {
    template.hasResourceProperties('AWS::S3::Bucket', {
      BucketEncryption: {
        ServerSideEncryptionConfiguration: [{ ServerSideEncryptionByDefault: { SSEAlgorithm: 'AES256' } }],
      },
      PublicAccessBlockConfiguration: {
        BlockPublicAcls: true,
        BlockPublicPolicy: true,
        IgnorePublicAcls: true,
        RestrictPublicBuckets: true,
      },
      LifecycleConfiguration: {
        Rules: Match.arrayWith([
          Match.objectLike({ Prefix: 'payloads/', ExpirationInDays: 3, Status: 'Enabled' }),
        ]),
      },
    });
    const rules = Object.values(template.findResources('AWS::S3::Bucket'))[0]!.Properties
      .LifecycleConfiguration.Rules as { Prefix?: string; ExpirationInDays?: number }[];
    // Nothing expires artifacts/ (or the whole bucket).
    expect(rules.filter((r) => r.ExpirationInDays !== undefined).map((r) => r.Prefix)).toEqual(['payloads/']);
  });

  it('denies every request that is not over TLS', () => {
    template.hasResourceProperties('AWS::S3::BucketPolicy', {
      PolicyDocument: {
        Statement: Match.arrayWith([
          Match.objectLike({
            Effect: 'Deny',
            Action: 's3:*',
            Principal: { AWS: '*' },
            Condition: { Bool: { 'aws:SecureTransport': 'false' } },
          }),
        ]),
      },
    });
  });
});

describe('compute', () => {
  it('has a GPU pool on the AL2023 GPU AMI and a CPU pool, both scaling from zero', () => {
    const params = JSON.stringify(template.toJSON().Parameters);
    expect(params).toContain('/aws/service/ecs/optimized-ami/amazon-linux-2023/gpu/recommended/image_id');
    expect(params).toContain('/aws/service/ecs/optimized-ami/amazon-linux-2023/recommended/image_id');
    template.resourceCountIs('AWS::ECS::CapacityProvider', 2);
    template.allResourcesProperties('AWS::ECS::CapacityProvider', {
      AutoScalingGroupProvider: Match.objectLike({
        ManagedScaling: Match.objectLike({ Status: 'ENABLED', TargetCapacity: 100 }),
        ManagedTerminationProtection: 'DISABLED',
      }),
    });
    template.allResourcesProperties('AWS::AutoScaling::AutoScalingGroup', { MinSize: '0' });
    template.hasResourceProperties('AWS::EC2::LaunchTemplate', {
      LaunchTemplateData: Match.objectLike({ InstanceType: 'g5.xlarge' }),
    });
  });

  it('uses ECS managed draining, not the CDK drain-hook Lambda', () => {
    expect(
      Object.keys(template.findResources('AWS::Lambda::Function')).some((id) => id.includes('Drain')),
    ).toBe(false);
    template.resourceCountIs('AWS::SNS::Topic', 0);
  });

  it('turns on Container Insights and spans two AZs with no NAT gateway', () => {
    template.hasResourceProperties('AWS::ECS::Cluster', {
      ClusterSettings: [{ Name: 'containerInsights', Value: 'enabled' }],
    });
    template.resourceCountIs('AWS::EC2::Subnet', 2);
    template.resourceCountIs('AWS::EC2::NatGateway', 0);
  });

  it('gives the ECS hosts a security group with no inbound rule', () => {
    const sg = template.toJSON().Resources[logicalId(platform.instanceSecurityGroup)];
    expect(sg.Properties.SecurityGroupIngress).toBeUndefined();
  });

  it('refuses an endpoint whose instance type has no pool, with a hint', () => {
    expect(() => platform.capacityProviderFor('p5.48xlarge')).toThrowError(
      /no capacity pool for p5.48xlarge/,
    );
  });
});

describe('API', () => {
  it('is a regional REST API', () => {
    template.hasResourceProperties('AWS::ApiGateway::RestApi', {
      EndpointConfiguration: { Types: ['REGIONAL'] },
    });
  });

  it('puts every v2 route behind the authorizer, with GET and POST where the API takes both', () => {
    const methods = Object.values(template.findResources('AWS::ApiGateway::Method'));
    expect(methods).toHaveLength(12);
    for (const method of methods) expect(method.Properties.AuthorizationType).toBe('CUSTOM');
    const resources = template.findResources('AWS::ApiGateway::Resource');
    const parts = Object.values(resources).map((r) => r.Properties.PathPart);
    for (const part of [
      'v2',
      '{endpointId}',
      'run',
      'runsync',
      'status',
      'status-sync',
      'stream',
      'cancel',
    ]) {
      expect(parts).toContain(part);
    }
    for (const part of ['retry', 'purge-queue', 'health', '{jobId}']) expect(parts).toContain(part);
    const statusSync = Object.entries(resources).find(([, r]) => r.Properties.PathPart === 'status-sync')![0];
    const jobId = Object.entries(resources).find(
      ([, r]) =>
        r.Properties.PathPart === '{jobId}' && JSON.stringify(r.Properties.ParentId).includes(statusSync),
    )![0];
    const verbs = methods
      .filter((m) => m.Properties.ResourceId.Ref === jobId)
      .map((m) => m.Properties.HttpMethod);
    expect(verbs.sort()).toEqual(['GET', 'POST']);
  });

  it('reads the key from the Authorization header in a REQUEST authorizer', () => {
    template.hasResourceProperties('AWS::ApiGateway::Authorizer', {
      Type: 'REQUEST',
      IdentitySource: 'method.request.header.Authorization',
    });
  });

  it('gives up on integrations within 29 s', () => {
    const methods = Object.values(template.findResources('AWS::ApiGateway::Method'));
    for (const method of methods) {
      expect(method.Properties.Integration.TimeoutInMillis).toBeLessThanOrEqual(29_000);
    }
    expect(integrationTimeoutSec).toBeLessThanOrEqual(29);
  });

  it('tells the waiting routes to answer before the gateway gives up', () => {
    const waiting: RouteGroup[] = ['runsync', 'status', 'stream'];
    for (const group of routeGroups) {
      const fn = template.toJSON().Resources[logicalId(platform.routeFunctions[group])];
      expect(fn.Properties.Runtime).toBe('nodejs22.x');
      expect(fn.Properties.Handler).toBe('api.handler');
      const env = fn.Properties.Environment.Variables;
      expect(env.FERRY_ROUTE_GROUP).toBe(group);
      if (waiting.includes(group)) {
        expect(Number(env.FERRY_MAX_WAIT_MS)).toBe(maxWaitMs);
        expect(Number(env.FERRY_MAX_WAIT_MS)).toBeLessThan(fn.Properties.Timeout * 1000);
        expect(fn.Properties.Timeout).toBeLessThan(integrationTimeoutSec);
      } else {
        expect(env.FERRY_MAX_WAIT_MS).toBeUndefined();
      }
    }
  });

  it('answers gateway-made errors in the API error shape, 401 for a denied key', () => {
    template.hasResourceProperties('AWS::ApiGateway::GatewayResponse', {
      ResponseType: 'ACCESS_DENIED',
      StatusCode: '401',
      ResponseTemplates: { 'application/json': '{"error":"Missing or invalid API key"}' },
    });
  });
});

describe('least privilege', () => {
  it('lets the authorizer only read the keys table', () => {
    const statements = statementsOf(template, platform.authorizerFunction.role!);
    expect(actionsOf(statements).sort()).toEqual(['dynamodb:GetItem']);
    expect(resourcesFor(statements, 'dynamodb:GetItem')).toEqual([
      JSON.stringify({ 'Fn::GetAtt': [logicalId(platform.apiKeysTable), 'Arn'] }),
    ]);
  });

  it('does not let the status function write to queues, the keys table or the chunks', () => {
    const statements = statementsOf(template, platform.routeFunctions.status.role!);
    const actions = actionsOf(statements);
    expect(actions.filter((a) => a.startsWith('sqs:'))).toEqual([]);
    expect(actions).not.toContain('dynamodb:PutItem');
    expect(actions).not.toContain('dynamodb:DeleteItem');
    expect(actions).not.toContain('s3:PutObject');
    const text = JSON.stringify(statements);
    expect(text).not.toContain(logicalId(platform.apiKeysTable));
    expect(text).not.toContain(logicalId(platform.chunksTable));
  });

  it('lets run send only to Ferry queues and write only payloads', () => {
    const statements = statementsOf(template, platform.routeFunctions.run.role!);
    expect(resourcesFor(statements, 'sqs:SendMessage')).toEqual([
      JSON.stringify({
        'Fn::Join': [
          '',
          [
            'arn:',
            { Ref: 'AWS::Partition' },
            ':sqs:',
            { Ref: 'AWS::Region' },
            ':',
            { Ref: 'AWS::AccountId' },
            ':ferry-*',
          ],
        ],
      }),
    ]);
    expect(resourcesFor(statements, 's3:PutObject').join()).toContain('/payloads/*');
  });

  it('never grants a wildcard action, and no Resource "*" except PutMetricData for the sweeper', () => {
    for (const fn of [
      ...Object.values(platform.routeFunctions),
      platform.authorizerFunction,
      platform.sweeperFunction,
    ]) {
      const statements = statementsOf(template, fn.role!);
      for (const action of actionsOf(statements)) expect(action).not.toContain('*');
      for (const s of statements) {
        if (s.Resource === '*') {
          expect(s.Action).toBe('cloudwatch:PutMetricData');
          expect(s.Condition).toEqual({ StringEquals: { 'cloudwatch:namespace': 'Ferry' } });
        }
      }
    }
  });
});

describe('operations', () => {
  it('runs the sweeper every minute', () => {
    template.hasResourceProperties('AWS::Events::Rule', {
      ScheduleExpression: 'rate(1 minute)',
      Targets: [Match.objectLike({ Arn: { 'Fn::GetAtt': [logicalId(platform.sweeperFunction), 'Arn'] } })],
    });
  });

  it('alarms on API 5xx and on the age of the oldest job', () => {
    template.hasResourceProperties('AWS::CloudWatch::Alarm', {
      MetricName: '5XXError',
      Namespace: 'AWS/ApiGateway',
    });
    template.hasResourceProperties('AWS::CloudWatch::Alarm', {
      MetricName: 'OldestJobAgeSec',
      Namespace: 'Ferry',
    });
    template.resourceCountIs('AWS::CloudWatch::Dashboard', 1);
  });
});
