import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Stack } from 'aws-cdk-lib';
import { Match, Template } from 'aws-cdk-lib/assertions';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FerryError } from '../../core/errors.js';
import { buildApp, type FerryApp } from '../../infra/app.js';
import { type DeployedEndpoint, endpointIdFor, leaseTiming } from '../../infra/app-stack.js';
import { gpuInstanceFor, workerMemoryReservationMiB } from '../../infra/gpu.js';
import { sampleImages, sampleManifest, stubFunctionsDir } from './fixtures.js';
import { actionsOf, resourcesFor, statementsOf } from './iam.js';

let built: FerryApp;
let template: Template;
let synthError: unknown;
const cleanups: (() => void)[] = [];

beforeAll(() => {
  const fns = stubFunctionsDir();
  const outdir = mkdtempSync(join(tmpdir(), 'ferry-infra-out-'));
  cleanups.push(fns.cleanup, () => rmSync(outdir, { recursive: true, force: true }));
  built = buildApp({
    manifest: sampleManifest,
    env: 'dev',
    functionsCodeDir: fns.dir,
    artifact: { key: 'artifacts/demo/dev/fff.tar.gz' },
    images: sampleImages,
    outdir,
  });
  try {
    built.app.synth();
  } catch (error) {
    synthError = error;
  }
  template = Template.fromStack(built.appStack);
});
afterAll(() => {
  for (const cleanup of cleanups) cleanup();
});

const endpoint = (name: string): DeployedEndpoint => built.appStack.endpoints.find((e) => e.name === name)!;
const idOf = (construct: { node: { defaultChild?: unknown } }) =>
  Stack.of(construct as never).getLogicalId(construct.node.defaultChild as never);
const queueRef = (queue: sqs.IQueue) => JSON.stringify({ 'Fn::GetAtt': [idOf(queue), 'Arn'] });

interface ContainerDefinition {
  Name: string;
  Environment?: { Name: string; Value: unknown }[];
  ResourceRequirements?: unknown;
  Essential?: boolean;
  MemoryReservation?: number;
}
const containersOf = (e: DeployedEndpoint): ContainerDefinition[] =>
  template.toJSON().Resources[idOf(e.taskDefinition)].Properties.ContainerDefinitions;
const envOf = (c: ContainerDefinition) =>
  Object.fromEntries((c.Environment ?? []).map((v) => [v.Name, v.Value]));

describe('the whole app', () => {
  it('passes cdk-nag AwsSolutions: synth does not throw "Validation failed"', () => {
    expect(synthError).toBeUndefined();
    const report = join(built.app.outdir, 'validation-report.json');
    if (existsSync(report)) expect(readFileSync(report, 'utf8')).not.toContain('"failure"');
  });

  it('is environment-agnostic (no account or region lookups)', () => {
    expect(built.appStack.environment).toBe('aws://unknown-account/unknown-region');
    expect(built.platform.environment).toBe('aws://unknown-account/unknown-region');
  });

  it('names queues from stable endpoint ids', () => {
    expect(endpoint('gpu_worker').id).toBe(endpointIdFor('demo', 'dev', 'gpu_worker'));
    expect(endpoint('gpu_worker').id).toMatch(/^[a-z0-9]{14}$/);
    template.hasResourceProperties('AWS::SQS::Queue', { QueueName: `ferry-${endpoint('gpu_worker').id}` });
  });
});

describe('queues', () => {
  it('keep a message invisible for at least twice the lease, and redrive to a DLQ after 5 receives', () => {
    for (const name of ['gpu_worker', 'cpu_worker']) {
      const e = endpoint(name);
      const queue = template.toJSON().Resources[idOf(e.queue!)].Properties;
      expect(queue.VisibilityTimeout).toBe(120);
      expect(queue.VisibilityTimeout).toBeGreaterThanOrEqual(2 * leaseTiming.leaseSec);
      expect(queue.VisibilityTimeout).toBeGreaterThan(leaseTiming.renewEverySec);
      expect(queue.RedrivePolicy).toEqual({
        deadLetterTargetArn: { 'Fn::GetAtt': [idOf(e.deadLetterQueue!), 'Arn'] },
        maxReceiveCount: 5,
      });
    }
  });

  it('enforce TLS on queues and DLQs', () => {
    const policies = Object.values(template.findResources('AWS::SQS::QueuePolicy'));
    expect(policies).toHaveLength(4);
    for (const policy of policies) {
      expect(policy.Properties.PolicyDocument.Statement).toContainEqual(
        expect.objectContaining({ Effect: 'Deny', Condition: { Bool: { 'aws:SecureTransport': 'false' } } }),
      );
    }
  });

  it('have a DLQ alarm each', () => {
    const alarms = Object.values(template.findResources('AWS::CloudWatch::Alarm')).filter((a) =>
      String(a.Properties.AlarmDescription).includes('dead-letter'),
    );
    expect(alarms).toHaveLength(2);
  });

  it('leave load-balanced endpoints without a queue', () => {
    expect(endpoint('lb_worker').queue).toBeUndefined();
    template.resourceCountIs('AWS::SQS::Queue', 4);
  });
});

describe('tasks', () => {
  it('ask for one GPU on the GPU endpoint and none on the CPU one', () => {
    const gpuWorker = containersOf(endpoint('gpu_worker')).find((c) => c.Name === 'worker')!;
    expect(gpuWorker.ResourceRequirements).toEqual([{ Type: 'GPU', Value: '1' }]);
    for (const c of containersOf(endpoint('cpu_worker'))) expect(c.ResourceRequirements).toBeUndefined();
    for (const c of containersOf(endpoint('lb_worker'))) expect(c.ResourceRequirements).toBeUndefined();
  });

  it('run an essential agent sidecar next to the worker, on the host network', () => {
    for (const name of ['gpu_worker', 'cpu_worker', 'lb_worker']) {
      const e = endpoint(name);
      const containers = containersOf(e);
      expect(containers.map((c) => c.Name).sort()).toEqual(['agent', 'worker']);
      expect(containers.every((c) => c.Essential === true)).toBe(true);
      expect(template.toJSON().Resources[idOf(e.taskDefinition)].Properties.NetworkMode).toBe('host');
    }
  });

  it('reserve most of the host for the worker (one task per instance)', () => {
    const worker = containersOf(endpoint('gpu_worker')).find((c) => c.Name === 'worker')!;
    const shape = gpuInstanceFor('A10G', 1);
    expect(worker.MemoryReservation).toBe(workerMemoryReservationMiB(shape));
    expect(worker.MemoryReservation!).toBeGreaterThan((shape.memoryGiB * 1024) / 2);
  });

  it('carry the source fingerprint and endpoint identity, so a code-only change rolls the service', () => {
    const e = endpoint('gpu_worker');
    for (const container of containersOf(e)) {
      const env = envOf(container);
      expect(env.FERRY_SOURCE_FINGERPRINT).toBe(sampleManifest.sourceFingerprint);
      expect(env).toMatchObject({
        FERRY_APP: 'demo',
        FERRY_ENV: 'dev',
        FERRY_ENDPOINT: 'gpu_worker',
        FERRY_ENDPOINT_ID: e.id,
        FERRY_ARTIFACT_KEY: 'artifacts/demo/dev/fff.tar.gz',
      });
      expect(env.FERRY_ARTIFACT_BUCKET).toBeDefined();
    }
    const agent = envOf(containersOf(e).find((c) => c.Name === 'agent')!);
    expect(agent.FERRY_QUEUE_URL).toEqual({ Ref: idOf(e.queue!) });
    expect(agent.FERRY_JOBS_TABLE).toBeDefined();
    expect(agent.FERRY_CHUNKS_TABLE).toBeDefined();
    const worker = envOf(containersOf(e).find((c) => c.Name === 'worker')!);
    expect(worker.MODEL).toBe('tiny');
    expect(String(worker.RUNPOD_WEBHOOK_GET_JOB)).toMatch(
      /^http:\/\/127\.0\.0\.1:\d+\/v2\/[a-z0-9]+\/job-take\/\$ID\?/,
    );
    expect(worker.RUNPOD_AI_API_KEY).toBe(agent.FERRY_WORKER_TOKEN);
  });
});

describe('services and scaling', () => {
  it('start at zero tasks on their capacity provider, free to replace every task', () => {
    const services = Object.values(template.findResources('AWS::ECS::Service'));
    expect(services).toHaveLength(3);
    for (const service of services) {
      expect(service.Properties.DesiredCount).toBe(0);
      expect(service.Properties.DeploymentConfiguration.MinimumHealthyPercent).toBe(0);
      expect(service.Properties.CapacityProviderStrategy).toHaveLength(1);
      expect(service.Properties.LaunchType).toBeUndefined();
    }
  });

  it('scale between workersMin and workersMax', () => {
    const target = (name: string) =>
      template.toJSON().Resources[idOf(endpoint(name).scalableTarget)].Properties;
    expect(target('gpu_worker')).toMatchObject({ MinCapacity: 0, MaxCapacity: 3 });
    expect(target('cpu_worker')).toMatchObject({ MinCapacity: 1, MaxCapacity: 5 });
    expect(target('lb_worker')).toMatchObject({ MinCapacity: 1, MaxCapacity: 2 });
  });

  it('leave zero with a +1 step when a message is visible', () => {
    const e = endpoint('gpu_worker');
    const policies = template.findResources('AWS::ApplicationAutoScaling::ScalingPolicy', {
      Properties: {
        ScalingTargetId: { Ref: idOf(e.scalableTarget) },
        PolicyType: 'StepScaling',
        StepScalingPolicyConfiguration: Match.objectLike({
          AdjustmentType: 'ChangeInCapacity',
          StepAdjustments: [{ MetricIntervalLowerBound: 0, ScalingAdjustment: 1 }],
        }),
      },
    });
    const [policyId] = Object.keys(policies);
    expect(policyId).toBeDefined();
    template.hasResourceProperties('AWS::CloudWatch::Alarm', {
      MetricName: 'ApproximateNumberOfMessagesVisible',
      Dimensions: [{ Name: 'QueueName', Value: { 'Fn::GetAtt': [idOf(e.queue!), 'QueueName'] } }],
      Threshold: 1,
      ComparisonOperator: 'GreaterThanOrEqualToThreshold',
      AlarmActions: [{ Ref: policyId }],
    });
  });

  it('track jobs per running task, targeting maxConcurrency', () => {
    template.hasResourceProperties('AWS::ApplicationAutoScaling::ScalingPolicy', {
      ScalingTargetId: { Ref: idOf(endpoint('cpu_worker').scalableTarget) },
      PolicyType: 'TargetTrackingScaling',
      TargetTrackingScalingPolicyConfiguration: Match.objectLike({
        TargetValue: 4,
        DisableScaleIn: true,
        CustomizedMetricSpecification: {
          Metrics: Match.arrayWith([
            Match.objectLike({ Id: 'e1', Expression: '(m1 + m2) / m3', ReturnData: true }),
          ]),
        },
      }),
    });
  });

  it('go back to workersMin after idleTimeoutSec with no jobs', () => {
    template.hasResourceProperties('AWS::ApplicationAutoScaling::ScalingPolicy', {
      ScalingTargetId: { Ref: idOf(endpoint('cpu_worker').scalableTarget) },
      StepScalingPolicyConfiguration: {
        AdjustmentType: 'ExactCapacity',
        Cooldown: 300,
        StepAdjustments: [{ MetricIntervalUpperBound: 0, ScalingAdjustment: 1 }],
      },
    });
    template.hasResourceProperties('AWS::CloudWatch::Alarm', {
      AlarmDescription: 'Ferry cpu_worker: no jobs for 300 s',
      EvaluationPeriods: 5,
      TreatMissingData: 'breaching',
    });
  });
});

describe('task roles', () => {
  it('let a worker use only its own queue, and never send to it', () => {
    const gpu = endpoint('gpu_worker');
    const cpu = endpoint('cpu_worker');
    const statements = statementsOf(template, gpu.taskRole);
    const sqsActions = actionsOf(statements).filter((a) => a.startsWith('sqs:'));
    expect(sqsActions.sort()).toEqual([
      'sqs:ChangeMessageVisibility',
      'sqs:DeleteMessage',
      'sqs:GetQueueAttributes',
      'sqs:ReceiveMessage',
    ]);
    for (const action of sqsActions) expect(resourcesFor(statements, action)).toEqual([queueRef(gpu.queue!)]);
    expect(JSON.stringify(statements)).not.toContain(idOf(cpu.queue!));
  });

  it('read the artifact by its exact key and reach only payloads/ otherwise', () => {
    const statements = statementsOf(template, endpoint('gpu_worker').taskRole);
    const gets = resourcesFor(statements, 's3:GetObject');
    expect(gets.some((r) => r.includes('/artifacts/demo/dev/fff.tar.gz'))).toBe(true);
    expect(resourcesFor(statements, 's3:PutObject')).toHaveLength(1);
    expect(resourcesFor(statements, 's3:PutObject')[0]).toContain('/payloads/*');
    for (const s of statements) expect(s.Resource).not.toBe('*');
    for (const action of actionsOf(statements)) expect(action).not.toContain('*');
  });

  it('give a load-balanced worker the keys table to check clients, and no queue', () => {
    const statements = statementsOf(template, endpoint('lb_worker').taskRole);
    expect(actionsOf(statements).filter((a) => a.startsWith('sqs:'))).toEqual([]);
    expect(actionsOf(statements)).toContain('dynamodb:GetItem');
  });
});

describe('load-balanced endpoint', () => {
  it('is an internet-facing ALB with an HTTP listener and a /ping health check', () => {
    template.resourceCountIs('AWS::ElasticLoadBalancingV2::LoadBalancer', 1);
    template.hasResourceProperties('AWS::ElasticLoadBalancingV2::LoadBalancer', {
      Scheme: 'internet-facing',
    });
    template.hasResourceProperties('AWS::ElasticLoadBalancingV2::Listener', { Port: 80, Protocol: 'HTTP' });
    template.hasResourceProperties('AWS::ElasticLoadBalancingV2::TargetGroup', {
      HealthCheckPath: '/ping',
      TargetType: 'instance',
    });
  });

  it('opens the ECS hosts only to its own ALB', () => {
    const ingress = Object.values(template.findResources('AWS::EC2::SecurityGroupIngress'));
    expect(ingress).toHaveLength(1);
    expect(ingress[0]!.Properties.SourceSecurityGroupId).toEqual({
      'Fn::GetAtt': [idOf(endpoint('lb_worker').loadBalancer!.connections.securityGroups[0]!), 'GroupId'],
    });
    expect(ingress[0]!.Properties.CidrIp).toBeUndefined();
  });
});

describe('bad manifests', () => {
  it('fail with a FerryError, not a crash', () => {
    const fns = stubFunctionsDir();
    try {
      const bad = structuredClone(sampleManifest);
      bad.endpoints[0]!.resources.workersMin = 9;
      expect(() =>
        buildApp({
          manifest: bad,
          env: 'dev',
          functionsCodeDir: fns.dir,
          artifact: { key: 'a' },
          images: sampleImages,
          nag: false,
        }),
      ).toThrowError(FerryError);
    } finally {
      fns.cleanup();
    }
  });
});
