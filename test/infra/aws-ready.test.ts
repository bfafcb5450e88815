/**
 * Issue "AWS that works on a real account", one template check per item, on the stacks of a fresh
 * `ferry init` project (the init templates, scanned by the real scanner) plus two GPU load-balanced
 * endpoints: one with the default health-check grace, one with `health_check_grace=1500`.
 */
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Stack } from 'aws-cdk-lib';
import { Match, Template } from 'aws-cdk-lib/assertions';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { scanProject } from '../../cli/build/scan.js';
import { templatesDir } from '../../cli/config.js';
import { type Manifest, manifestSchema } from '../../core/manifest.js';
import { buildApp, type FerryApp } from '../../infra/app.js';
import type { DeployedEndpoint } from '../../infra/app-stack.js';
import { ecrPublicLogin } from '../../infra/constructs/images.js';
import { appStackName, imageBuildQueuedMinutes, ownershipTags, queueName } from '../../infra/names.js';
import { integrationTiming } from '../../infra/platform-stack.js';
import { defaultHealthCheckGraceSec, ephemeralPorts, ports } from '../../infra/task-layout.js';
import { workerImages } from '../../worker-image/images.js';
import { stubFunctionsDir } from './fixtures.js';
import { actionsOf, resourcesFor, statementsOf } from './iam.js';

const repo = path.resolve(import.meta.dirname, '../..');
const registry = '123456789012.dkr.ecr.us-east-1.amazonaws.com';
const images = {
  gpuWorker: `${registry}/ferry/worker-base-gpu:0.1.0-py3.12`,
  cpuWorker: `${registry}/ferry/worker-base-cpu:0.1.0-py3.12`,
  agent: `${registry}/ferry/agent:0.1.0`,
};

const gpuApi = (name: string, extra: string) => `from ferry import Endpoint

api = Endpoint(name="${name}", gpu="A10G", workers=(0, 2)${extra})

@api.post("/generate")
def generate(body: dict):
    return body
`;

let built: FerryApp;
let platform: Template;
let app: Template;
let synthError: unknown;
let manifest: Manifest;
const cleanups: (() => void)[] = [];

beforeAll(async () => {
  const project = mkdtempSync(path.join(tmpdir(), 'ferry-fresh-'));
  cleanups.push(() => rmSync(project, { recursive: true, force: true }));
  for (const file of ['gpu_worker.py', 'cpu_worker.py', 'lb_worker.py']) {
    cpSync(path.join(templatesDir(), file), path.join(project, file));
  }
  writeFileSync(path.join(project, 'gpu_api.py'), gpuApi('gpu_api', ''));
  writeFileSync(path.join(project, 'slow_api.py'), gpuApi('slow_api', ', health_check_grace=1500'));
  // A queue endpoint that sets a start grace (its model load may hang).
  writeFileSync(
    path.join(project, 'slow_worker.py'),
    readFileSync(path.join(templatesDir(), 'gpu_worker.py'), 'utf8').replace(
      '@Endpoint(name="gpu_worker",',
      '@Endpoint(name="slow_worker", health_check_grace=900,',
    ),
  );
  const { endpoints } = await scanProject({ projectDir: project });
  manifest = manifestSchema.parse({
    version: 1,
    app: 'fresh',
    pythonVersion: '3.12',
    generatedAt: '2026-01-01T00:00:00.000Z',
    sourceFingerprint: 'e'.repeat(64),
    endpoints,
    dependencies: { installed: [], excluded: [] },
  });
  const fns = stubFunctionsDir();
  const outdir = mkdtempSync(path.join(tmpdir(), 'ferry-fresh-out-'));
  cleanups.push(fns.cleanup, () => rmSync(outdir, { recursive: true, force: true }));
  built = buildApp({
    manifest,
    env: 'production',
    functionsCodeDir: fns.dir,
    artifact: { key: 'artifacts/fresh/production/e.tar.gz' },
    images,
    outdir,
  });
  try {
    built.app.synth();
  } catch (error) {
    synthError = error;
  }
  platform = Template.fromStack(built.platform);
  app = Template.fromStack(built.appStack);
}, 120_000);
afterAll(() => {
  for (const cleanup of cleanups) cleanup();
});

const endpoint = (name: string): DeployedEndpoint => built.appStack.endpoints.find((e) => e.name === name)!;
const idOf = (construct: { node: { defaultChild?: unknown } }) =>
  Stack.of(construct as never).getLogicalId(construct.node.defaultChild as never);
const resource = (template: Template, construct: { node: { defaultChild?: unknown } }) =>
  template.toJSON().Resources[idOf(construct)];
type Container = {
  Name: string;
  Image: unknown;
  Links?: string[];
  PortMappings?: { ContainerPort: number; HostPort?: number }[];
  Environment?: { Name: string; Value: unknown }[];
};
const containers = (e: DeployedEndpoint): Container[] =>
  resource(app, e.taskDefinition).Properties.ContainerDefinitions;
const container = (e: DeployedEndpoint, name: string) => containers(e).find((c) => c.Name === name)!;

describe('the fresh project', () => {
  it('scans to the init endpoints plus the two GPU load-balanced ones and a slow-starting queue one', () => {
    expect(manifest.endpoints.map((e) => `${e.name}:${e.kind}`).sort()).toEqual([
      'cpu_worker:queue',
      'gpu_api:lb',
      'gpu_worker:queue',
      'lb_worker:lb',
      'slow_api:lb',
      'slow_worker:queue',
    ]);
  });

  it('passes cdk-nag AwsSolutions (every acknowledgement carries its reason in the code)', () => {
    expect(synthError).toBeUndefined();
    const report = path.join(built.app.outdir, 'validation-report.json');
    if (existsSync(report)) expect(readFileSync(report, 'utf8')).not.toContain('"failure"');
  });
});

describe('1. images', () => {
  it('the platform has one private, immutable ECR repository per image kind, kept on delete but not on a failed create', () => {
    const repos = platform.findResources('AWS::ECR::Repository');
    expect(
      Object.values(repos)
        .map((r) => r.Properties.RepositoryName)
        .sort(),
    ).toEqual(workerImages.map((i) => i.repository).sort());
    for (const repo of Object.values(repos)) {
      // No repository-level scanning: "The PutImageScanningConfiguration API is being deprecated, in
      // favor of specifying the image scanning configuration at the registry level"
      // (https://docs.aws.amazon.com/AmazonECR/latest/APIReference/API_PutImageScanningConfiguration.html).
      expect(repo.Properties.ImageScanningConfiguration).toBeUndefined();
      expect(repo.Properties.ImageTagMutability).toBe('IMMUTABLE');
      // Fixed names: one left behind by a rolled-back first create failed every retry on its name.
      expect(repo.DeletionPolicy).toBe('RetainExceptOnCreate');
      expect(repo.UpdateReplacePolicy).toBe('Retain');
      // Only untagged images expire: a tag may still be named by a deployed environment's tasks.
      const rules = JSON.parse(repo.Properties.LifecyclePolicy.LifecyclePolicyText).rules;
      expect(rules).toEqual([
        expect.objectContaining({
          selection: {
            tagStatus: 'untagged',
            countType: 'sinceImagePushed',
            countNumber: 1,
            countUnit: 'days',
          },
          action: { type: 'expire' },
        }),
      ]);
    }
  });

  it('a privileged CodeBuild project builds from an uploaded context and may push only to those repositories', () => {
    const project = resource(platform, built.platform.images.buildProject);
    expect(project.Properties.Environment).toMatchObject({ PrivilegedMode: true, Type: 'LINUX_CONTAINER' });
    const names = project.Properties.Environment.EnvironmentVariables.map((v: { Name: string }) => v.Name);
    expect(names).toEqual(expect.arrayContaining(['FERRY_BUCKET', 'FERRY_REGISTRY', 'FERRY_CONTEXT_KEY']));
    const spec = JSON.stringify(project.Properties.Source.BuildSpec);
    expect(spec).toContain('ferry-build-images.sh');
    expect(spec).toContain('docker login --username AWS --password-stdin');
    const policies = JSON.stringify(platform.findResources('AWS::IAM::Policy'));
    for (const repo of built.platform.images.repositories.values()) expect(policies).toContain(idOf(repo));
    platform.hasOutput('ImageRegistry', Match.anyValue());
    platform.hasOutput('ImageBuildProject', { Value: { Ref: idOf(built.platform.images.buildProject) } });
  });

  it('the build logs in to ECR Public (us-east-1), and goes on where it cannot: anonymous pulls are limited per IP', () => {
    const project = resource(platform, built.platform.images.buildProject);
    const spec = JSON.parse(project.Properties.Source.BuildSpec) as {
      phases: { pre_build: { commands: string[] }; build: { commands: string[] } };
    };
    const pre = spec.phases.pre_build.commands;
    expect(pre).toContain(
      'aws ecr-public get-login-password --region us-east-1 | docker login --username AWS --password-stdin public.ecr.aws || true',
    );
    expect(pre).toContain(ecrPublicLogin);
    // Before the build script, after the context is there.
    expect(pre.indexOf(ecrPublicLogin)).toBeGreaterThan(pre.findIndex((c) => c.includes('tar -xzf')));
    const statements = statementsOf(platform, built.platform.images.buildProject.role!);
    for (const action of ['ecr-public:GetAuthorizationToken', 'sts:GetServiceBearerToken']) {
      expect(resourcesFor(statements, action), action).toEqual(['"*"']);
    }
  });

  it('the build may look up tags (ecr:DescribeImages) in the Ferry repositories only', () => {
    const statements = statementsOf(platform, built.platform.images.buildProject.role!);
    const repositories = [...built.platform.images.repositories.values()].map((r) =>
      JSON.stringify({ 'Fn::GetAtt': [idOf(r), 'Arn'] }),
    );
    expect(resourcesFor(statements, 'ecr:DescribeImages').sort()).toEqual(repositories.sort());
    expect(actionsOf(statements.filter((st) => st.Resource === '*'))).not.toContain('ecr:DescribeImages');
  });

  it("a build waits at most 60 minutes in CodeBuild's queue (its default is 8 hours)", () => {
    const project = resource(platform, built.platform.images.buildProject);
    expect(imageBuildQueuedMinutes).toBe(60);
    expect(project.Properties.QueuedTimeoutInMinutes).toBe(60);
    expect(project.Properties.TimeoutInMinutes).toBe(120);
  });

  it('the agent and artifact containers run the small agent image, not a worker base image', () => {
    for (const e of built.appStack.endpoints) {
      expect(JSON.stringify(container(e, 'agent').Image)).toContain('ferry/agent:0.1.0');
      expect(JSON.stringify(container(e, 'artifact').Image)).toContain('ferry/agent:0.1.0');
      expect(JSON.stringify(container(e, 'worker').Image)).toContain('ferry/worker-base-');
    }
  });
});

describe('2. nothing orphaned without saying so', () => {
  type Resource = { Type: string; DeletionPolicy?: string; UpdateReplacePolicy?: string };
  const platformResources = () => Object.values(platform.toJSON().Resources as Record<string, Resource>);
  const kept = ['AWS::DynamoDB::Table', 'AWS::S3::Bucket', 'AWS::ECR::Repository'];

  // "RetainExceptOnCreate behaves like Retain for stack operations, except for the stack operation
  // that initially created the resource. If the stack operation that created the resource is rolled
  // back, CloudFormation deletes the resource."
  // (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-attribute-deletionpolicy.html)
  it.each(kept)(
    'every %s is kept when the stack is deleted or replaces it, not when its first create rolls back',
    (type) => {
      const resources = platformResources().filter((r) => r.Type === type);
      expect(resources.length).toBeGreaterThan(0);
      for (const r of resources) {
        expect(r.DeletionPolicy).toBe('RetainExceptOnCreate');
        expect(r.UpdateReplacePolicy).toBe('Retain');
      }
    },
  );

  it('only the account-wide API Gateway logging role is kept even by a rolled-back create; docs/aws.md says what is kept', () => {
    const retained = platformResources()
      .filter((r) => r.DeletionPolicy === 'Retain')
      .map((r) => r.Type);
    // API Gateway's account-wide CloudWatch logging role: the account keeps naming it after the
    // stack is gone, and other APIs in the region log through it (infra/platform-stack.ts).
    expect(new Set(retained)).toEqual(new Set(['AWS::ApiGateway::Account', 'AWS::IAM::Role']));
    expect(retained).toHaveLength(2);
    const doc = readFileSync(path.join(repo, 'docs/aws.md'), 'utf8');
    for (const kind of ['DynamoDB tables', 'S3 bucket', 'ECR repositories', 'API Gateway CloudWatch role'])
      expect(doc).toContain(kind);
    expect(doc).toContain('RetainExceptOnCreate');
    // App stacks keep nothing: every resource goes with the stack.
    expect(
      Object.values(app.toJSON().Resources).some(
        (r) => (r as { DeletionPolicy?: string }).DeletionPolicy?.startsWith('Retain') ?? false,
      ),
    ).toBe(false);
  });
});

describe('3. names and ownership', () => {
  it('the app stack is named with the app/env hash and tagged with its owner', () => {
    expect(built.appStack.stackName).toBe(appStackName('fresh', 'production'));
    expect(built.appStack.tags.tagValues()).toMatchObject({
      [ownershipTags.app]: 'fresh',
      [ownershipTags.env]: 'production',
    });
  });

  it('queue names are the endpoint ids (hashes of app, env, name) the Lambdas derive', () => {
    const names = Object.values(app.findResources('AWS::SQS::Queue')).map((q) => q.Properties.QueueName);
    for (const e of built.appStack.endpoints.filter((x) => x.kind === 'queue')) {
      for (const role of ['urgent', 'urgent-dlq', 'low', 'low-dlq'] as const) {
        expect(names).toContain(queueName(e.id, role));
      }
    }
  });
});

describe('4. load-balanced GPU endpoints survive model loading', () => {
  it('health-check grace: GPU default, the endpoint’s own value, and the CPU default', () => {
    const grace = (name: string) =>
      resource(app, endpoint(name).service).Properties.HealthCheckGracePeriodSeconds;
    expect(grace('gpu_api')).toBe(defaultHealthCheckGraceSec.gpu);
    expect(defaultHealthCheckGraceSec.gpu).toBeGreaterThanOrEqual(600);
    expect(grace('slow_api')).toBe(1500);
    expect(grace('lb_worker')).toBe(defaultHealthCheckGraceSec.cpu);
    expect(grace('gpu_worker')).toBeUndefined();
  });

  it('the agent knows the same grace: a worker silent past it is killed as a failed start', () => {
    for (const name of ['gpu_api', 'slow_api', 'lb_worker']) {
      const env = Object.fromEntries(
        (container(endpoint(name), 'agent').Environment ?? []).map((v) => [v.Name, v.Value]),
      );
      const grace = resource(app, endpoint(name).service).Properties.HealthCheckGracePeriodSeconds;
      expect(env.FERRY_HEALTH_CHECK_GRACE_SEC).toBe(String(grace));
    }
  });

  it('a queue agent gets the grace only when its endpoint sets one (it kills a worker silent past it)', () => {
    const graceOf = (name: string) =>
      (container(endpoint(name), 'agent').Environment ?? []).find(
        (v) => v.Name === 'FERRY_HEALTH_CHECK_GRACE_SEC',
      )?.Value;
    expect(graceOf('slow_worker')).toBe('900');
    expect(graceOf('gpu_worker')).toBeUndefined();
    expect(graceOf('cpu_worker')).toBeUndefined();
  });
});

describe('8. runtime and alarms', () => {
  it('every function runs on nodejs24.x', () => {
    const fns = Object.values(platform.findResources('AWS::Lambda::Function')).filter(
      (f) => f.Properties.Handler !== undefined && !String(f.Properties.Handler).startsWith('index.'),
    );
    expect(fns.length).toBeGreaterThanOrEqual(3);
    for (const fn of fns) expect(fn.Properties.Runtime).toBe('nodejs24.x');
  });

  it('platform and DLQ alarms notify the alarm topic', () => {
    const topicRef = { Ref: idOf(built.platform.alarms.topic) };
    for (const alarm of Object.values(platform.findResources('AWS::CloudWatch::Alarm'))) {
      expect(alarm.Properties.AlarmActions).toContainEqual(topicRef);
    }
    const dlqAlarms = Object.values(app.findResources('AWS::CloudWatch::Alarm')).filter((a) =>
      String(a.Properties.AlarmDescription).includes('dead-letter'),
    );
    expect(dlqAlarms.length).toBe(2 * built.appStack.endpoints.filter((e) => e.kind === 'queue').length);
    for (const alarm of dlqAlarms) {
      expect(alarm.Properties.AlarmActions).toEqual([{ 'Fn::ImportValue': 'Ferry-AlarmTopicArn' }]);
    }
  });

  it('tasks that fail to start (image pull) and failed instance launches reach the topic', () => {
    const rules = Object.values(platform.findResources('AWS::Events::Rule')).filter(
      (r) => r.Properties.EventPattern,
    );
    const topicRef = { Ref: idOf(built.platform.alarms.topic) };
    const ecs = rules.find((r) => r.Properties.EventPattern.detail?.stopCode?.[0] === 'TaskFailedToStart')!;
    expect(ecs.Properties.EventPattern).toMatchObject({
      'detail-type': ['ECS Task State Change'],
      detail: { lastStatus: ['STOPPED'], stopCode: ['TaskFailedToStart'] },
    });
    const asg = rules.find((r) => r.Properties.EventPattern.source?.[0] === 'aws.autoscaling')!;
    expect(asg.Properties.EventPattern['detail-type']).toEqual(['EC2 Instance Launch Unsuccessful']);
    for (const rule of [ecs, asg]) expect(rule.Properties.Targets[0].Arn).toEqual(topicRef);
    // EventBridge may publish: the topic policy names events.amazonaws.com.
    expect(JSON.stringify(platform.findResources('AWS::SNS::TopicPolicy'))).toContain('events.amazonaws.com');
  });

  it('a task that failed to start also reaches the scaler, which counts it against its endpoint', () => {
    const [ruleId, ecs] = Object.entries(platform.findResources('AWS::Events::Rule')).find(
      ([, r]) => r.Properties.EventPattern?.detail?.stopCode?.[0] === 'TaskFailedToStart',
    )!;
    const scalerArn = { 'Fn::GetAtt': [idOf(built.platform.scalerFunction), 'Arn'] };
    const target = (ecs.Properties.Targets as Array<Record<string, unknown>>).find(
      (t) => JSON.stringify(t.Arn) === JSON.stringify(scalerArn),
    );
    // Retried: a lost event is a failed start not counted.
    expect(target).toMatchObject({ RetryPolicy: { MaximumRetryAttempts: 2 } });
    // EventBridge may invoke it for this rule only.
    const permissions = Object.values(platform.findResources('AWS::Lambda::Permission')).filter(
      (p) =>
        p.Properties.Principal === 'events.amazonaws.com' &&
        JSON.stringify(p.Properties.FunctionName) === JSON.stringify(scalerArn),
    );
    expect(permissions.map((p) => p.Properties.SourceArn)).toContainEqual({ 'Fn::GetAtt': [ruleId, 'Arn'] });
    // Its one write of a table: UpdateItem on STARTS# items of the control table.
    const writes = statementsOf(platform, built.platform.scalerFunction.role!).filter((s) =>
      [s.Action].flat().some((a: string) => /^dynamodb:(Put|Update|Delete|BatchWrite|TransactWrite)/.test(a)),
    );
    expect(writes).toHaveLength(1);
    expect(writes[0]).toMatchObject({
      Action: 'dynamodb:UpdateItem',
      Condition: { 'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': ['STARTS#*'] } },
    });
  });
});

describe('9. task networking', () => {
  it('a task whose artifact download failed reaches the scaler alone, from a rule of its own', () => {
    const rules = Object.entries(platform.findResources('AWS::Events::Rule')).filter(
      ([, r]) => r.Properties.EventPattern?.source?.[0] === 'aws.ecs',
    );
    expect(rules).toHaveLength(2);
    const [ruleId, init] = rules.find(([, r]) => r.Properties.EventPattern.detail.containers)!;
    expect(init.Properties.EventPattern).toEqual({
      source: ['aws.ecs'],
      'detail-type': ['ECS Task State Change'],
      detail: {
        clusterArn: [{ 'Fn::GetAtt': [idOf(built.platform.cluster), 'Arn'] }],
        lastStatus: ['STOPPED'],
        stopCode: ['EssentialContainerExited'],
        containers: { name: ['artifact'], exitCode: [{ 'anything-but': 0 }] },
      },
    });
    // The init container's name is the one the task definitions give it.
    const definitions = Object.values(app.findResources('AWS::ECS::TaskDefinition'));
    expect(definitions.length).toBeGreaterThan(0);
    for (const definition of definitions) {
      const artifact = definition.Properties.ContainerDefinitions.find(
        (c: { Name: string }) => c.Name === 'artifact',
      );
      expect(artifact).toMatchObject({ Essential: false });
    }
    // Only the scaler hears it (a crash of a task that ran may match too: no email for it), retried.
    const scalerArn = { 'Fn::GetAtt': [idOf(built.platform.scalerFunction), 'Arn'] };
    expect(init.Properties.Targets).toHaveLength(1);
    expect(init.Properties.Targets[0]).toMatchObject({
      Arn: scalerArn,
      RetryPolicy: { MaximumRetryAttempts: 2 },
    });
    const permissions = Object.values(platform.findResources('AWS::Lambda::Permission')).filter(
      (p) =>
        p.Properties.Principal === 'events.amazonaws.com' &&
        JSON.stringify(p.Properties.FunctionName) === JSON.stringify(scalerArn),
    );
    expect(permissions.map((p) => p.Properties.SourceArn)).toContainEqual({ 'Fn::GetAtt': [ruleId, 'Arn'] });
  });
  it('bridge mode: own namespaces, links by name, no fixed host port anywhere', () => {
    for (const e of built.appStack.endpoints) {
      expect(resource(app, e.taskDefinition).Properties.NetworkMode).toBe('bridge');
      for (const c of containers(e)) {
        for (const mapping of c.PortMappings ?? []) expect(mapping.HostPort ?? 0).toBe(0);
      }
      expect(container(e, 'worker').PortMappings ?? []).toEqual([]);
      if (e.kind === 'queue') {
        expect(container(e, 'worker').Links).toEqual(['agent:agent']);
        expect(container(e, 'agent').PortMappings ?? []).toEqual([]);
      } else {
        expect(container(e, 'agent').Links).toEqual(['worker:worker']);
        expect(container(e, 'agent').PortMappings).toEqual([
          expect.objectContaining({ ContainerPort: ports.lbPublic, HostPort: 0 }),
        ]);
      }
    }
  });

  it("the hosts take the dynamic port range from the load balancers' group only: one rule for three ALBs", () => {
    // A group takes 60 inbound rules by default
    // (https://docs.aws.amazon.com/vpc/latest/userguide/amazon-vpc-limits.html#vpc-limits-security-groups):
    // a rule per ALB failed the 61st load-balanced endpoint of an account; one rule never grows.
    const hostsId = { 'Fn::GetAtt': [idOf(built.platform.instanceSecurityGroup), 'GroupId'] };
    const hostRules = Object.values(platform.findResources('AWS::EC2::SecurityGroupIngress'))
      .map((r) => r.Properties)
      .filter((rule) => JSON.stringify(rule.GroupId) === JSON.stringify(hostsId));
    expect(hostRules).toEqual([
      expect.objectContaining({
        SourceSecurityGroupId: { 'Fn::GetAtt': [idOf(built.platform.loadBalancerSecurityGroup), 'GroupId'] },
        IpProtocol: 'tcp',
        FromPort: ephemeralPorts.from,
        ToPort: ephemeralPorts.to,
      }),
    ]);
    // The three ALBs each carry that group besides their own, and the app stack adds no rule to a
    // platform group (only the ALBs' own groups' rules, whose GroupId is a group of this stack).
    const lb = built.appStack.endpoints.filter((e) => e.kind === 'lb');
    expect(lb).toHaveLength(3);
    for (const e of lb) {
      expect(resource(app, e.loadBalancer!).Properties.SecurityGroups).toEqual([
        { 'Fn::GetAtt': [idOf(e.loadBalancer!.connections.securityGroups[0]!), 'GroupId'] },
        { 'Fn::ImportValue': 'Ferry-LoadBalancerSecurityGroupId' },
      ]);
    }
    for (const type of ['AWS::EC2::SecurityGroupIngress', 'AWS::EC2::SecurityGroupEgress']) {
      for (const rule of Object.values(app.findResources(type))) {
        expect(JSON.stringify(rule.Properties.GroupId)).not.toContain('Fn::ImportValue');
      }
    }
  });
});

describe('10. runsync wait', () => {
  it('29 s integration (the default): waits end at 25 s, then {id, status}', () => {
    expect(integrationTiming()).toEqual({
      integrationTimeoutSec: 29,
      functionTimeoutSec: 28,
      maxWaitMs: 25_000,
    });
    const methods = Object.values(platform.findResources('AWS::ApiGateway::Method'));
    for (const m of methods.filter((x) => x.Properties.Integration)) {
      expect(m.Properties.Integration.TimeoutInMillis).toBe(29_000);
    }
    platform.hasOutput('RunsyncMaxWaitMs', { Value: '25000' });
  });

  it('a raised quota gives RunPod’s 90 s default wait; values out of range are refused', () => {
    expect(integrationTiming(95).maxWaitMs).toBe(90_000);
    expect(integrationTiming(300)).toEqual({
      integrationTimeoutSec: 300,
      functionTimeoutSec: 299,
      maxWaitMs: 90_000,
    });
    expect(integrationTiming(60).maxWaitMs).toBe(56_000);
    for (const bad of [28, 901, 30.5]) {
      expect(() => integrationTiming(bad)).toThrow(expect.objectContaining({ code: 'usage' }));
    }
  });
});
