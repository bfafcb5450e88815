import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Stack } from 'aws-cdk-lib';
import { Match, Template } from 'aws-cdk-lib/assertions';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FerryError } from '../../core/errors.js';
import { buildApp, type FerryApp } from '../../infra/app.js';
import {
  artifactMount,
  type DeployedEndpoint,
  endpointIdFor,
  leaseTiming,
  ports,
} from '../../infra/app-stack.js';
import { gpuInstanceFor, workerMemoryReservationMiB } from '../../infra/gpu.js';
import { platformExportNames, poolExportName } from '../../infra/platform-exports.js';
import { type AgentMode, requiredAgentVariables } from '../../worker-image/agent/config.js';
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
  DependsOn?: { ContainerName: string; Condition: string }[];
  MountPoints?: { SourceVolume: string; ContainerPath: string; ReadOnly: boolean }[];
  User?: string;
  Environment?: { Name: string; Value: unknown }[];
  ResourceRequirements?: unknown;
  Essential?: boolean;
  MemoryReservation?: number;
  EntryPoint?: string[];
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

  it('reads the platform only through its fixed exports, never a CDK-generated one', () => {
    const agent = envOf(containersOf(endpoint('gpu_worker')).find((c) => c.Name === 'agent')!);
    expect(agent.FERRY_JOBS_TABLE).toEqual({ 'Fn::ImportValue': platformExportNames.jobsTableName });
    expect(agent.FERRY_CONTROL_TABLE).toEqual({ 'Fn::ImportValue': platformExportNames.controlTableName });
    expect(agent.FERRY_BUCKET).toEqual({ 'Fn::ImportValue': platformExportNames.bucketName });
    const service = template.toJSON().Resources[idOf(endpoint('gpu_worker').service)].Properties;
    expect(service.Cluster).toEqual({ 'Fn::ImportValue': platformExportNames.clusterName });
    expect(service.CapacityProviderStrategy).toEqual([
      { CapacityProvider: { 'Fn::ImportValue': poolExportName('g5.xlarge') }, Weight: 1 },
    ]);
    expect(JSON.stringify(template.toJSON())).not.toContain('ExportsOutput');
    expect(built.appStack.dependencies).toContain(built.platform);
  });

  it('names queues from stable endpoint ids', () => {
    expect(endpoint('gpu_worker').id).toBe(endpointIdFor('demo', 'dev', 'gpu_worker'));
    expect(endpoint('gpu_worker').id).toMatch(/^[a-z0-9]{14}$/);
    template.hasResourceProperties('AWS::SQS::Queue', { QueueName: `ferry-${endpoint('gpu_worker').id}` });
  });
});

describe('queues', () => {
  it('are two per queue endpoint, urgent and -low, as the Lambdas derive their names', () => {
    for (const name of ['gpu_worker', 'cpu_worker']) {
      const e = endpoint(name);
      const props = (q: sqs.IQueue) => template.toJSON().Resources[idOf(q)].Properties;
      expect(props(e.queue!).QueueName).toBe(`ferry-${e.id}`);
      expect(props(e.lowQueue!).QueueName).toBe(`ferry-${e.id}-low`);
      expect(props(e.deadLetterQueue!).QueueName).toBe(`ferry-${e.id}-dlq`);
      expect(props(e.lowDeadLetterQueue!).QueueName).toBe(`ferry-${e.id}-low-dlq`);
    }
    template.resourceCountIs('AWS::SQS::Queue', 8);
  });

  it('hide a received message for one lease (it is deleted right after the claim) and redrive each to its DLQ', () => {
    for (const name of ['gpu_worker', 'cpu_worker']) {
      const e = endpoint(name);
      for (const [queue, dlq] of [
        [e.queue!, e.deadLetterQueue!],
        [e.lowQueue!, e.lowDeadLetterQueue!],
      ] as const) {
        const props = template.toJSON().Resources[idOf(queue)].Properties;
        expect(props.VisibilityTimeout).toBe(leaseTiming.receiveVisibilitySec);
        expect(leaseTiming.receiveVisibilitySec).toBe(leaseTiming.leaseSec);
        expect(props.RedrivePolicy).toEqual({
          deadLetterTargetArn: { 'Fn::GetAtt': [idOf(dlq), 'Arn'] },
          maxReceiveCount: leaseTiming.maxReceiveCount,
        });
      }
    }
  });

  it('enforce TLS on queues and DLQs', () => {
    const policies = Object.values(template.findResources('AWS::SQS::QueuePolicy'));
    expect(policies).toHaveLength(8);
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
    expect(alarms).toHaveLength(4);
  });

  it('leave load-balanced endpoints without a queue', () => {
    expect(endpoint('lb_worker').queue).toBeUndefined();
    expect(endpoint('lb_worker').lowQueue).toBeUndefined();
  });

  it('are listed in the Endpoints output with both URLs', () => {
    const value = JSON.stringify(template.toJSON().Outputs.Endpoints.Value);
    const gpu = endpoint('gpu_worker');
    expect(value).toContain(idOf(gpu.queue!));
    expect(value).toContain(idOf(gpu.lowQueue!));
    expect(value).toContain('lowQueueUrl');
    expect(value).toContain('queueUrl');
    expect(value).toContain(idOf(endpoint('lb_worker').loadBalancer!));
  });
});

describe('tasks', () => {
  it('ask for one GPU on the GPU endpoint and none on the CPU one', () => {
    const gpuWorker = containersOf(endpoint('gpu_worker')).find((c) => c.Name === 'worker')!;
    expect(gpuWorker.ResourceRequirements).toEqual([{ Type: 'GPU', Value: '1' }]);
    for (const c of containersOf(endpoint('cpu_worker'))) expect(c.ResourceRequirements).toBeUndefined();
    for (const c of containersOf(endpoint('lb_worker'))) expect(c.ResourceRequirements).toBeUndefined();
  });

  it('run an essential agent sidecar next to the worker, after an artifact init container, each in its own (bridge) network namespace', () => {
    for (const name of ['gpu_worker', 'cpu_worker', 'lb_worker']) {
      const e = endpoint(name);
      const containers = containersOf(e);
      const byName = (n: string) => containers.find((c) => c.Name === n)!;
      expect(containers.map((c) => c.Name).sort()).toEqual(['agent', 'artifact', 'worker']);
      expect(byName('agent').Essential).toBe(true);
      expect(byName('worker').Essential).toBe(true);
      expect(byName('artifact').Essential).toBe(false);
      expect(template.toJSON().Resources[idOf(e.taskDefinition)].Properties.NetworkMode).toBe('bridge');
      // The worker starts once the artifact is on the shared volume, which it mounts read-only.
      expect(byName('worker').DependsOn).toContainEqual({ ContainerName: 'artifact', Condition: 'SUCCESS' });
      expect(byName('worker').MountPoints).toEqual([
        { SourceVolume: artifactMount.volume, ContainerPath: artifactMount.path, ReadOnly: true },
      ]);
      expect(byName('artifact').MountPoints).toEqual([
        { SourceVolume: artifactMount.volume, ContainerPath: artifactMount.path, ReadOnly: false },
      ]);
      expect(envOf(byName('worker')).FERRY_ARTIFACT_PATH).toBe(artifactMount.file);
      expect(envOf(byName('artifact')).FERRY_ARTIFACT_PATH).toBe(artifactMount.file);
      // The agent runs from a worker base image: only its entry point differs.
      expect(byName('agent').EntryPoint).toEqual(['node', '/opt/ferry/agent/agent.mjs']);
      expect(byName('artifact').EntryPoint).toEqual(['node', '/opt/ferry/agent/agent.mjs']);
    }
  });

  it('give every agent container each variable its mode requires (worker-image/agent/config.ts)', () => {
    for (const name of ['gpu_worker', 'cpu_worker', 'lb_worker']) {
      const e = endpoint(name);
      for (const container of containersOf(e).filter((c) => c.Name !== 'worker')) {
        const env = envOf(container);
        const mode = (env.FERRY_AGENT_MODE ?? 'queue') as AgentMode;
        expect(mode).toBe(container.Name === 'artifact' ? 'artifact' : e.kind);
        const missing = requiredAgentVariables(mode).filter((key) => env[key] === undefined);
        expect(missing, `${name}/${container.Name}`).toEqual([]);
      }
    }
    const agent = envOf(containersOf(endpoint('gpu_worker')).find((c) => c.Name === 'agent')!);
    // Optional in the schema, but the design needs them: the low queue, the workers table, the lease.
    expect(agent.FERRY_QUEUE_URL_LOW).toEqual({ Ref: idOf(endpoint('gpu_worker').lowQueue!) });
    expect(agent.FERRY_WORKERS_TABLE).toBeDefined();
    expect(Number(agent.FERRY_LEASE_SEC)).toBe(leaseTiming.leaseSec);
    expect(Number(agent.FERRY_AGENT_PORT)).toBe(ports.agent);
    expect(agent.AWS_REGION).toEqual({ Ref: 'AWS::Region' });
  });

  it('reserve most of the host for the worker (one task per instance)', () => {
    const worker = containersOf(endpoint('gpu_worker')).find((c) => c.Name === 'worker')!;
    const shape = gpuInstanceFor('A10G', 1);
    expect(worker.MemoryReservation).toBe(workerMemoryReservationMiB(shape));
    expect(worker.MemoryReservation!).toBeGreaterThan((shape.memoryGiB * 1024) / 2);
  });

  it('carry the source fingerprint and endpoint identity, so a code-only change rolls the service', () => {
    const e = endpoint('gpu_worker');
    // The init container only fetches the artifact; the two long-running containers carry identity.
    for (const container of containersOf(e).filter((c) => c.Name !== 'artifact')) {
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
    // What agent.workerEnv() hands a worker, pointing at the agent's port on localhost.
    const base = `http://agent:${ports.agent}/v2/${e.id}`;
    expect(worker.RUNPOD_WEBHOOK_GET_JOB).toBe(`${base}/job-take/${e.id}-worker?agent=1`);
    expect(worker.RUNPOD_WEBHOOK_POST_OUTPUT).toBe(`${base}/job-done/${e.id}-worker/$ID?agent=1`);
    expect(worker.RUNPOD_WEBHOOK_POST_STREAM).toBe(`${base}/job-stream/${e.id}-worker/$ID?agent=1`);
    expect(worker.RUNPOD_WEBHOOK_PING).toBe(`${base}/ping/${e.id}-worker?agent=1`);
    expect(worker.RUNPOD_AI_API_KEY).toBe(agent.FERRY_WORKER_TOKEN);
    expect(worker.RUNPOD_POD_ID).toBeDefined();
    expect(worker.RUNPOD_ENDPOINT_ID).toBe(e.id);
    expect(worker).toMatchObject({
      FERRY_MODE: 'queue',
      FERRY_MODULE: 'gpu_worker',
      FERRY_TARGET: 'generate',
    });
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

  it('scale out in steps, from zero too, on visible messages of the urgent queue only', () => {
    const e = endpoint('cpu_worker');
    const policies = template.findResources('AWS::ApplicationAutoScaling::ScalingPolicy', {
      Properties: {
        ScalingTargetId: { Ref: idOf(e.scalableTarget) },
        PolicyType: 'StepScaling',
        StepScalingPolicyConfiguration: Match.objectLike({ AdjustmentType: 'ChangeInCapacity' }),
      },
    });
    const [policyId] = Object.keys(policies);
    expect(policyId).toBeDefined();
    // maxConcurrency 4: 1–8 waiting → +1, 9–32 → +2, more → +4 (bounds relative to the threshold 1).
    expect(policies[policyId!]!.Properties.StepScalingPolicyConfiguration.StepAdjustments).toEqual([
      { MetricIntervalLowerBound: 0, MetricIntervalUpperBound: 8, ScalingAdjustment: 1 },
      { MetricIntervalLowerBound: 8, MetricIntervalUpperBound: 32, ScalingAdjustment: 2 },
      { MetricIntervalLowerBound: 32, ScalingAdjustment: 4 },
    ]);
    template.hasResourceProperties('AWS::CloudWatch::Alarm', {
      MetricName: 'ApproximateNumberOfMessagesVisible',
      Dimensions: [{ Name: 'QueueName', Value: { 'Fn::GetAtt': [idOf(e.queue!), 'QueueName'] } }],
      Threshold: 1,
      ComparisonOperator: 'GreaterThanOrEqualToThreshold',
      AlarmActions: [{ Ref: policyId }],
    });
  });

  it('never scale on in-flight messages (~0 while jobs run) nor on the low-priority queue', () => {
    const text = JSON.stringify(template.toJSON().Resources);
    expect(text).not.toContain('ApproximateNumberOfMessagesNotVisible');
    for (const name of ['gpu_worker', 'cpu_worker']) {
      const low = idOf(endpoint(name).lowQueue!);
      const scalingAlarms = Object.values(template.findResources('AWS::CloudWatch::Alarm')).filter(
        (a) => !String(a.Properties.AlarmDescription).includes('dead-letter'),
      );
      for (const alarm of scalingAlarms) expect(JSON.stringify(alarm)).not.toContain(low);
    }
    template.resourcePropertiesCountIs(
      'AWS::ApplicationAutoScaling::ScalingPolicy',
      { PolicyType: 'TargetTrackingScaling' },
      1, // the load-balanced endpoint's requests per target only
    );
  });

  it('go back to workersMin after idleTimeoutSec with no visible job', () => {
    template.hasResourceProperties('AWS::ApplicationAutoScaling::ScalingPolicy', {
      ScalingTargetId: { Ref: idOf(endpoint('cpu_worker').scalableTarget) },
      StepScalingPolicyConfiguration: {
        AdjustmentType: 'ExactCapacity',
        Cooldown: 300,
        StepAdjustments: [{ MetricIntervalUpperBound: 0, ScalingAdjustment: 1 }],
      },
    });
    template.hasResourceProperties('AWS::CloudWatch::Alarm', {
      AlarmDescription: 'Ferry cpu_worker: no job waiting for 300 s',
      MetricName: 'ApproximateNumberOfMessagesVisible',
      Dimensions: [
        { Name: 'QueueName', Value: { 'Fn::GetAtt': [idOf(endpoint('cpu_worker').queue!), 'QueueName'] } },
      ],
      EvaluationPeriods: 5,
      TreatMissingData: 'breaching',
    });
  });
});

describe('task roles', () => {
  it('let a queue agent receive, delete, release and requeue on its own two queues only', () => {
    const gpu = endpoint('gpu_worker');
    const cpu = endpoint('cpu_worker');
    const statements = statementsOf(template, gpu.taskRole);
    const sqsActions = actionsOf(statements).filter((a) => a.startsWith('sqs:'));
    expect(sqsActions.sort()).toEqual([
      'sqs:ChangeMessageVisibility',
      'sqs:DeleteMessage',
      'sqs:ReceiveMessage',
      'sqs:SendMessage',
    ]);
    for (const action of sqsActions) {
      expect(resourcesFor(statements, action).sort()).toEqual(
        [queueRef(gpu.queue!), queueRef(gpu.lowQueue!)].sort(),
      );
    }
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

  it('let agents set ECS task scale-in protection', () => {
    for (const name of ['gpu_worker', 'lb_worker']) {
      expect(actionsOf(statementsOf(template, endpoint(name).taskRole))).toContain(
        'ecs:UpdateTaskProtection',
      );
    }
  });

  it('give a load-balanced agent only KEY# items of the control table, and no queue or job table', () => {
    const statements = statementsOf(template, endpoint('lb_worker').taskRole);
    const actions = actionsOf(statements);
    expect(actions.filter((a) => a.startsWith('sqs:'))).toEqual([]);
    expect(actions.filter((a) => a.startsWith('dynamodb:'))).toEqual(['dynamodb:GetItem']);
    const keyRead = statements.find((s) => actionsOf([s]).includes('dynamodb:GetItem'))!;
    expect(keyRead.Condition).toEqual({ 'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': ['KEY#*'] } });
    expect(JSON.stringify(keyRead.Resource)).toContain('Control');
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
      Port: ports.lbPublic,
    });
  });

  it('sends the ALB to the agent in lb mode, which proxies to the linked worker', () => {
    const containers = containersOf(endpoint('lb_worker'));
    const agent = envOf(containers.find((c) => c.Name === 'agent')!);
    const worker = envOf(containers.find((c) => c.Name === 'worker')!);
    expect(agent).toMatchObject({
      FERRY_AGENT_MODE: 'lb',
      FERRY_AGENT_HOST: '0.0.0.0',
      FERRY_AGENT_PORT: String(ports.lbPublic),
      FERRY_PORT: String(ports.lbWorker),
      FERRY_WORKER_HOST: 'worker',
    });
    expect(worker).toMatchObject({
      FERRY_MODE: 'lb',
      FERRY_MODULE: 'lb_worker',
      FERRY_VARIABLE: 'api',
      FERRY_HOST: '0.0.0.0',
      FERRY_PORT: String(ports.lbWorker),
    });
    expect(worker.RUNPOD_WEBHOOK_GET_JOB).toBeUndefined();
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
