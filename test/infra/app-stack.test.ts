import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Stack } from 'aws-cdk-lib';
import { Match, Template } from 'aws-cdk-lib/assertions';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { callTokenSecretName } from '../../core/call-keys.js';
import { FerryError } from '../../core/errors.js';
import { limits } from '../../core/limits.js';
import type { ManifestEndpoint } from '../../core/manifest.js';
import { buildApp, type FerryApp } from '../../infra/app.js';
import {
  artifactMount,
  type DeployedEndpoint,
  endpointIdFor,
  leaseTiming,
  ports,
} from '../../infra/app-stack.js';
import {
  gpuInstanceFor,
  poolFitOf,
  poolMaxInstances,
  workerMemoryReservationMiB,
  workerSharedMemoryMiB,
} from '../../infra/gpu.js';
import { platformAzCount, platformExportNames, poolExportName } from '../../infra/platform-exports.js';
import { ecsConfigLines } from '../../infra/platform-stack.js';
import { drainMs, stopTimeoutSec } from '../../infra/task-layout.js';
import { type AgentMode, requiredAgentVariables } from '../../worker-image/agent/config.js';
import { lbEndpoint, sampleImages, sampleManifest, sampleResources, stubFunctionsDir } from './fixtures.js';
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
    callKeyIds: { gpu_worker: 'call-0a1b2c3d' },
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
  StopTimeout?: number;
  MemoryReservation?: number;
  EntryPoint?: string[];
  LogConfiguration?: { LogDriver: string; Options: Record<string, unknown> };
  Links?: string[];
  Secrets?: { Name: string; ValueFrom: unknown }[];
  LinuxParameters?: { Capabilities?: { Add?: string[]; Drop?: string[] }; SharedMemorySize?: number };
  Privileged?: boolean;
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
    // Load-balanced endpoints are listed by their https address (infra/constructs/https-front.ts).
    expect(value).toContain('\\"url\\":\\"https://');
    expect(value).not.toContain('http://');
  });
});

describe('tasks', () => {
  it('ask for one GPU on the GPU endpoint and none on the CPU one', () => {
    const gpuWorker = containersOf(endpoint('gpu_worker')).find((c) => c.Name === 'worker')!;
    expect(gpuWorker.ResourceRequirements).toEqual([{ Type: 'GPU', Value: '1' }]);
    for (const c of containersOf(endpoint('cpu_worker'))) expect(c.ResourceRequirements).toBeUndefined();
    for (const c of containersOf(endpoint('lb_worker'))) expect(c.ResourceRequirements).toBeUndefined();
  });

  it("let a stopping queue task's worker finish its jobs: it stops first, within the drain, under its stopTimeout", () => {
    for (const name of ['gpu_worker', 'cpu_worker']) {
      const containers = containersOf(endpoint(name));
      const byName = (n: string) => containers.find((c) => c.Name === n)!;
      // ECS stops the worker before the agent it depends on; the agent then finds nothing held.
      expect(byName('worker').DependsOn).toContainEqual({ ContainerName: 'agent', Condition: 'START' });
      for (const c of ['agent', 'worker']) expect(byName(c).StopTimeout).toBe(stopTimeoutSec);
      expect(envOf(byName('worker')).FERRY_GRACE_MS).toBe(String(drainMs));
      expect(envOf(byName('agent')).FERRY_DRAIN_MS).toBe(String(drainMs));
      expect(drainMs).toBeLessThan(stopTimeoutSec * 1000);
    }
  });

  it("log to CloudWatch without blocking: a slow CloudWatch must not stall the agent's pings", () => {
    // Not left to the account's defaultLogDriverMode setting
    // (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/ecs-account-settings.html).
    for (const name of ['gpu_worker', 'cpu_worker', 'lb_worker']) {
      for (const c of containersOf(endpoint(name))) {
        expect(c.LogConfiguration?.LogDriver, c.Name).toBe('awslogs');
        expect(c.LogConfiguration?.Options, c.Name).toMatchObject({
          mode: 'non-blocking',
          'max-buffer-size': '26214400b',
        });
      }
    }
  });

  it('run an essential agent sidecar next to the worker, after an artifact init container, each in its own (bridge) network namespace', () => {
    for (const name of ['gpu_worker', 'cpu_worker', 'lb_worker']) {
      const e = endpoint(name);
      const containers = containersOf(e);
      const byName = (n: string) => containers.find((c) => c.Name === n)!;
      expect(containers.map((c) => c.Name).sort()).toEqual(['agent', 'artifact', 'worker']);
      // The agent is the task's one essential container: the worker's exit does not stop the task
      // before the agent has seen it (a failed start is counted: worker-image/agent/ecsWorker.ts),
      // and the agent, leaving after it, stops the task.
      expect(byName('agent').Essential).toBe(true);
      expect(byName('worker').Essential).toBe(false);
      expect(byName('artifact').Essential).toBe(false);
      expect(containers.filter((c) => c.Essential !== false).map((c) => c.Name)).toEqual(['agent']);
      expect(template.toJSON().Resources[idOf(e.taskDefinition)].Properties.NetworkMode).toBe('bridge');
      // The worker starts once the artifact is on the shared volume, which it mounts read-only; the
      // agent waits for it too, so a failed download stops the task (the agent is its one essential
      // container), rather than leaving an agent beside a worker that never starts.
      expect(byName('worker').DependsOn).toContainEqual({ ContainerName: 'artifact', Condition: 'SUCCESS' });
      expect(byName('agent').DependsOn).toContainEqual({ ContainerName: 'artifact', Condition: 'SUCCESS' });
      expect(byName('worker').MountPoints).toEqual([
        { SourceVolume: artifactMount.volume, ContainerPath: artifactMount.path, ReadOnly: true },
      ]);
      expect(byName('artifact').MountPoints).toContainEqual({
        SourceVolume: artifactMount.volume,
        ContainerPath: artifactMount.path,
        ReadOnly: false,
      });
      expect(envOf(byName('worker')).FERRY_ARTIFACT_PATH).toBe(artifactMount.file);
      expect(envOf(byName('artifact')).FERRY_ARTIFACT_PATH).toBe(artifactMount.file);
      // The agent image's own entry point, tini first: the task's entryPoint replaces the image's.
      expect(byName('agent').EntryPoint).toEqual([
        '/usr/bin/tini',
        '--',
        'node',
        '/opt/ferry/agent/agent.mjs',
      ]);
      expect(byName('artifact').EntryPoint).toEqual(byName('agent').EntryPoint);
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

  it("give the worker a /dev/shm of half its memory, not Docker's 64 MiB (DataLoader workers, NCCL)", () => {
    for (const e of built.appStack.endpoints) {
      for (const c of containersOf(e)) {
        const shm = c.LinuxParameters?.SharedMemorySize;
        if (c.Name !== 'worker') expect([e.name, c.Name, shm]).toEqual([e.name, c.Name, undefined]);
        else {
          expect(shm, e.name).toBe(Math.floor(c.MemoryReservation! / 2));
          expect(shm!, e.name).toBeGreaterThanOrEqual(1024);
        }
      }
    }
    const shape = gpuInstanceFor('A10G', 1);
    expect(workerSharedMemoryMiB(shape)).toBe(Math.floor(workerMemoryReservationMiB(shape) / 2));
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
    // The ferry runtime sends results that finish together in one request only when this is set.
    expect(worker.FERRY_WEBHOOK_POST_OUTPUT_BATCH).toBe(`${base}/job-done-batch/${e.id}-worker?agent=1`);
    expect(worker.RUNPOD_AI_API_KEY).toBe(agent.FERRY_WORKER_TOKEN);
    expect(worker.RUNPOD_POD_ID).toBeDefined();
    // Not the placeholder worker id: the ferry runtime reports the container's own hostname instead.
    expect(worker.RUNPOD_POD_HOSTNAME).toBeUndefined();
    expect(worker.RUNPOD_ENDPOINT_ID).toBe(e.id);
    expect(worker).toMatchObject({
      FERRY_MODE: 'queue',
      FERRY_MODULE: 'gpu_worker',
      FERRY_TARGET: 'generate',
    });
  });
});

describe('worker tokens and secrets (docs/security-aws.md)', () => {
  const secretsOf = (c: ContainerDefinition) =>
    ((c as { Secrets?: { Name: string }[] }).Secrets ?? []).map((x) => x.Name).sort();

  it('hand the worker token to agent and worker as ECS secrets, never in the environment', () => {
    const containers = containersOf(endpoint('gpu_worker'));
    const agent = containers.find((c) => c.Name === 'agent')!;
    const worker = containers.find((c) => c.Name === 'worker')!;
    expect(secretsOf(agent)).toEqual(['FERRY_WORKER_TOKEN']);
    expect(secretsOf(worker)).toEqual(['FERRY_CALL_TOKEN', 'RUNPOD_AI_API_KEY']);
    for (const c of containers) {
      expect(Object.keys(envOf(c))).not.toContain('FERRY_WORKER_TOKEN');
      expect(Object.keys(envOf(c))).not.toContain('RUNPOD_AI_API_KEY');
      expect(Object.keys(envOf(c))).not.toContain('FERRY_AGENT_EXTERNAL_ID');
    }
  });

  // A Docker link hands the linking container every variable of the linked one, ECS secrets
  // included (https://docs.docker.com/engine/network/links/): a queue worker (user code) links to
  // its agent. A load-balanced agent links to its worker the other way: platform code, which may.
  it('a link shows the worker no secret it does not already hold', () => {
    const workerLinks = built.appStack.endpoints.flatMap((e) => {
      const containers = containersOf(e);
      return containers
        .filter((from) => from.Name === 'worker')
        .flatMap((from) => (from.Links ?? []).map((link) => ({ e, containers, from, link })));
    });
    expect(workerLinks.map(({ e }) => e.name).sort()).toEqual(['cpu_worker', 'gpu_worker']);
    for (const { e, containers, from, link } of workerLinks) {
      const linked = containers.find((c) => c.Name === link.split(':')[0])!;
      const held = new Set((from.Secrets ?? []).map((x) => JSON.stringify(x.ValueFrom)));
      for (const secret of linked.Secrets ?? []) {
        expect(held.has(JSON.stringify(secret.ValueFrom)), `${e.name}: ${secret.Name}`).toBe(true);
      }
    }
  });

  // With NET_RAW a container on the host's bridge can forge ARP and read other tasks' traffic.
  it('give no container raw sockets, privileges or added capabilities', () => {
    for (const e of built.appStack.endpoints) {
      for (const c of containersOf(e)) {
        expect([e.name, c.Name, c.LinuxParameters?.Capabilities?.Drop]).toEqual([
          e.name,
          c.Name,
          ['NET_RAW'],
        ]);
        expect(c.LinuxParameters?.Capabilities?.Add).toBeUndefined();
        expect(c.Privileged).toBeUndefined();
      }
    }
    expect(ecsConfigLines).toContain('ECS_DISABLE_PRIVILEGED=true');
  });

  it("hand the agent role's external id to the init container, which writes it where only the agent reads it", () => {
    for (const e of built.appStack.endpoints) {
      const containers = containersOf(e);
      const byName = (name: string) => containers.find((c) => c.Name === name)!;
      expect(secretsOf(byName('artifact')), e.name).toEqual(['FERRY_AGENT_EXTERNAL_ID']);
      for (const name of ['agent', 'worker'])
        expect(secretsOf(byName(name))).not.toContain('FERRY_AGENT_EXTERNAL_ID');
      const file = envOf(byName('artifact')).FERRY_AGENT_EXTERNAL_ID_FILE;
      expect(file).toBe(envOf(byName('agent')).FERRY_AGENT_EXTERNAL_ID_FILE);
      const mountsOf = (name: string) =>
        (byName(name).MountPoints ?? []).filter((m) => String(file).startsWith(`${m.ContainerPath}/`));
      expect(mountsOf('artifact')).toMatchObject([{ SourceVolume: 'ferry-agent', ReadOnly: false }]);
      expect(mountsOf('agent')).toMatchObject([{ SourceVolume: 'ferry-agent', ReadOnly: true }]);
      expect(mountsOf('worker')).toEqual([]);
      expect((byName('worker').MountPoints ?? []).map((m) => m.SourceVolume)).not.toContain('ferry-agent');
    }
  });

  // ECS registers no container whose variable is in both its environment and its secrets, so the
  // stack's deploy would fail and roll back (core/endpoint-spec.ts platformEnvNames says where).
  it('give no container a name in both its environment and its secrets, with user env and secrets set', () => {
    const fns = stubFunctionsDir();
    cleanups.push(fns.cleanup);
    const manifest = structuredClone(sampleManifest);
    for (const e of manifest.endpoints) {
      e.resources.env = { ...e.resources.env, MODEL: 'm', AWS_DEFAULT_REGION: 'eu-west-1' };
      e.resources.secrets = ['HF_TOKEN'];
    }
    const app = buildApp({
      manifest,
      env: 'dev',
      functionsCodeDir: fns.dir,
      artifact: { key: 'a' },
      images: sampleImages,
      callKeyIds: Object.fromEntries(manifest.endpoints.map((e) => [e.name, 'call-0a1b2c3d'])),
      nag: false,
    });
    const resources = Template.fromStack(app.appStack).toJSON().Resources as Record<
      string,
      { Type: string; Properties: { ContainerDefinitions?: ContainerDefinition[] } }
    >;
    const containers = Object.values(resources)
      .filter((r) => r.Type === 'AWS::ECS::TaskDefinition')
      .flatMap((r) => r.Properties.ContainerDefinitions ?? []);
    expect(containers.length).toBeGreaterThanOrEqual(3 * manifest.endpoints.length);
    for (const c of containers) {
      const environment = new Set((c.Environment ?? []).map((v) => v.Name));
      expect(
        (c.Secrets ?? []).map((x) => x.Name).filter((name) => environment.has(name)),
        c.Name,
      ).toEqual([]);
    }
    expect(containers.some((c) => (c.Secrets ?? []).some((x) => x.Name === 'HF_TOKEN'))).toBe(true);
  });

  it('leave no token-like value in any container environment', () => {
    for (const e of built.appStack.endpoints) {
      for (const c of containersOf(e)) {
        for (const [name, value] of Object.entries(envOf(c))) {
          // The source fingerprint is a digest of the code, public by design.
          if (name === 'FERRY_SOURCE_FINGERPRINT') continue;
          expect(JSON.stringify(value)).not.toMatch(/[0-9a-f]{64}/);
        }
      }
    }
  });
});

describe('services and scaling', () => {
  it('start at zero tasks on their capacity provider; queue services replace every task, load-balanced ones start the new first', () => {
    const services = Object.values(template.findResources('AWS::ECS::Service'));
    expect(services).toHaveLength(3);
    for (const service of services) {
      expect(service.Properties.DesiredCount).toBe(0);
      expect(service.Properties.CapacityProviderStrategy).toHaveLength(1);
      expect(service.Properties.LaunchType).toBeUndefined();
    }
    const deployment = (name: string) =>
      template.toJSON().Resources[idOf(endpoint(name).service)].Properties.DeploymentConfiguration;
    // Queue jobs wait in their queue while a task rolls.
    for (const name of ['gpu_worker', 'cpu_worker']) {
      expect(deployment(name)).toMatchObject({ MinimumHealthyPercent: 0, MaximumPercent: 100 });
    }
    // A request has nowhere to wait: the old tasks serve until the new ones pass their checks.
    expect(deployment('lb_worker')).toMatchObject({ MinimumHealthyPercent: 100, MaximumPercent: 200 });
  });

  it('place tasks on any host of their pool, the fallback types included: no placement constraint', () => {
    // A pool's group launches a fallback type when its first has no capacity (infra/gpu.ts); a
    // constraint on the instance type would leave the task PENDING there, and AWS's cluster auto
    // scaling recommends none but distinctInstance
    // (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/cluster-auto-scaling.html).
    for (const service of Object.values(template.findResources('AWS::ECS::Service'))) {
      expect(service.Properties.PlacementConstraints).toBeUndefined();
    }
  });

  it('leave every count to the scaler: no scalable targets, scaling policies or count alarms', () => {
    // The scaler Lambda (functions/scaler.ts) sets desiredCount from the scaling policy; an
    // Application Auto Scaling policy beside it would fight it (docs/scaling.md).
    template.resourceCountIs('AWS::ApplicationAutoScaling::ScalableTarget', 0);
    template.resourceCountIs('AWS::ApplicationAutoScaling::ScalingPolicy', 0);
    for (const alarm of Object.values(template.findResources('AWS::CloudWatch::Alarm'))) {
      const actions = JSON.stringify(alarm.Properties.AlarmActions ?? []);
      expect(actions).not.toMatch(/ScalingPolicy|autoscaling/i);
    }
    // Counted alarms: the four dead-letter alarms of the two queue endpoints, and the wake-up of the
    // load-balanced one.
    const descriptions = Object.values(template.findResources('AWS::CloudWatch::Alarm')).map((a) =>
      String(a.Properties.AlarmDescription),
    );
    expect(descriptions.filter((d) => !d.includes('dead-letter'))).toEqual([
      'Ferry lb_worker: requests turned away with no worker; wakes the scaler',
    ]);
  });

  it('name each service ferry-<endpointId>, the name the scaler sets and its grant allows', () => {
    for (const name of ['gpu_worker', 'cpu_worker', 'lb_worker']) {
      const e = endpoint(name);
      expect(template.toJSON().Resources[idOf(e.service)].Properties.ServiceName).toBe(`ferry-${e.id}`);
    }
  });

  it('wake a load-balanced endpoint from zero: the ALB 503 count invokes the scaler, by alarm name', () => {
    const e = endpoint('lb_worker');
    template.hasResourceProperties('AWS::CloudWatch::Alarm', {
      AlarmName: `ferry-wake-${e.id}`,
      MetricName: 'HTTPCode_ELB_503_Count',
      Namespace: 'AWS/ApplicationELB',
      Threshold: 1,
      ComparisonOperator: 'GreaterThanOrEqualToThreshold',
      TreatMissingData: 'notBreaching',
    });
    const [wake] = Object.values(
      template.findResources('AWS::CloudWatch::Alarm', { Properties: { AlarmName: `ferry-wake-${e.id}` } }),
    );
    expect(wake!.Properties.AlarmActions).toHaveLength(1);
    expect(JSON.stringify(wake!.Properties.AlarmActions)).toContain(':function:ferry-scaler');
    // No permission per endpoint: the platform's one covers every wake-up alarm (the scaler's
    // resource-based policy is 20 KB at most; infra/platform-stack.ts, test/infra/platform-stack.test.ts).
    template.resourceCountIs('AWS::Lambda::Permission', 0);
  });

  it('let a queue agent keep task protection until idle for idle_timeout', () => {
    const agent = containersOf(endpoint('cpu_worker')).find((c) => c.Name === 'agent')!;
    expect(envOf(agent).FERRY_IDLE_TIMEOUT_SEC).toBe('300');
  });

  it("tell a queue agent the endpoint's max_concurrency, which it holds each take to (core/engine.ts take)", () => {
    const agent = containersOf(endpoint('cpu_worker')).find((c) => c.Name === 'agent')!;
    expect(envOf(agent).FERRY_MAX_CONCURRENCY).toBe('4');
  });
});

describe('task roles', () => {
  it('let a queue agent receive, delete, release and requeue on its own two queues only', () => {
    const gpu = endpoint('gpu_worker');
    const cpu = endpoint('cpu_worker');
    const statements = statementsOf(template, gpu.agentRole);
    expect(actionsOf(statementsOf(template, gpu.taskRole)).filter((a) => a.startsWith('sqs:'))).toEqual([]);
    const sqsActions = [...new Set(actionsOf(statements).filter((a) => a.startsWith('sqs:')))];
    expect(sqsActions.sort()).toEqual([
      'sqs:ChangeMessageVisibility',
      'sqs:DeleteMessage',
      'sqs:ReceiveMessage',
      'sqs:SendMessage',
    ]);
    const webhookQueue = JSON.stringify({ 'Fn::ImportValue': platformExportNames.webhookQueueArn });
    for (const action of sqsActions) {
      expect(resourcesFor(statements, action).sort()).toEqual(
        [
          queueRef(gpu.queue!),
          queueRef(gpu.lowQueue!),
          // The webhooks of the jobs it ends go to the platform's webhook queue: send only.
          ...(action === 'sqs:SendMessage' ? [webhookQueue] : []),
        ].sort(),
      );
    }
    expect(JSON.stringify(statements)).not.toContain(idOf(cpu.queue!));
    expect(envOf(containersOf(gpu).find((c) => c.Name === 'agent')!).FERRY_WEBHOOK_QUEUE_URL).toEqual({
      'Fn::ImportValue': platformExportNames.webhookQueueUrl,
    });
  });

  it('read the artifact by its exact key (task role); payloads only under its job ids (agent role)', () => {
    const gpu = endpoint('gpu_worker');
    const statements = statementsOf(template, gpu.taskRole);
    const gets = resourcesFor(statements, 's3:GetObject');
    expect(gets).toHaveLength(1);
    expect(gets[0]).toContain('/artifacts/demo/dev/fff.tar.gz');
    expect(resourcesFor(statements, 's3:PutObject')).toHaveLength(0);
    // No listing: a missing artifact then answers 403, as the init container expects (test/agent/lb.test.ts).
    expect(resourcesFor(statements, 's3:ListBucket')).toHaveLength(0);
    const puts = resourcesFor(statementsOf(template, gpu.agentRole), 's3:PutObject');
    expect(puts).toHaveLength(4);
    expect(puts.join()).toContain(`/payloads/${gpu.id}-*`);
    expect(puts.join()).toContain(`/payloads/sync-${gpu.id}-*`);
    // Webhook bodies too big for a message, under its own jobs' keys (webhookBodyKey).
    expect(puts.join()).toContain(`/payloads/webhooks/${gpu.id}-*`);
    expect(puts.join()).toContain(`/payloads/webhooks/sync-${gpu.id}-*`);
    expect(resourcesFor(statementsOf(template, gpu.agentRole), 's3:GetObject').join()).not.toContain(
      'webhooks',
    );
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

  it('give a load-balanced agent only KEY# items and its STARTS# item of the control table and its worker record, no queue or job table', () => {
    const lb = endpoint('lb_worker');
    expect(actionsOf(statementsOf(template, lb.taskRole)).filter((a) => a.startsWith('dynamodb:'))).toEqual(
      [],
    );
    const statements = statementsOf(template, lb.agentRole);
    const actions = actionsOf(statements);
    expect(actions.filter((a) => a.startsWith('sqs:'))).toEqual([]);
    expect([...new Set(actions.filter((a) => a.startsWith('dynamodb:')))].sort()).toEqual([
      'dynamodb:DeleteItem',
      'dynamodb:GetItem',
      'dynamodb:PutItem',
      'dynamodb:UpdateItem',
    ]);
    // Its load for the scaler goes to the workers table only.
    const workersArn = JSON.stringify({ 'Fn::ImportValue': platformExportNames.workersTableArn });
    expect(resourcesFor(statements, 'dynamodb:PutItem')).toEqual([workersArn]);
    // Its run of failed starts: the one STARTS# item of its endpoint (infra/isolation.ts).
    const starts = statements.find((s) => actionsOf([s]).includes('dynamodb:UpdateItem'))!;
    expect(JSON.stringify(starts.Resource)).toContain('Control');
    expect(starts.Condition).toEqual({
      'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': [`STARTS#${lb.id}`] },
      Null: { 'dynamodb:LeadingKeys': 'false' },
    });
    expect(resourcesFor(statements, 'dynamodb:DeleteItem')).toEqual(
      expect.arrayContaining([workersArn, JSON.stringify(starts.Resource)]),
    );
    const agent = containersOf(endpoint('lb_worker')).find((c) => c.Name === 'agent')!;
    expect(envOf(agent).FERRY_WORKERS_TABLE).toEqual({
      'Fn::ImportValue': platformExportNames.workersTableName,
    });
    const keyRead = statements.find(
      (s) => actionsOf([s]).includes('dynamodb:GetItem') && !actionsOf([s]).includes('dynamodb:UpdateItem'),
    )!;
    expect(keyRead.Condition).toEqual({ 'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': ['KEY#*'] } });
    expect(JSON.stringify(keyRead.Resource)).toContain('Control');
  });
});

describe('load-balanced endpoint', () => {
  it('is an internet-facing ALB with an HTTP listener and a /ping health check', () => {
    template.resourceCountIs('AWS::ElasticLoadBalancingV2::LoadBalancer', 1);
    template.hasResourceProperties('AWS::ElasticLoadBalancingV2::LoadBalancer', {
      Scheme: 'internet-facing',
      // The fixture sets no execution_timeout (0): the platform's default, not the ALB's 60 s
      // (https://docs.aws.amazon.com/elasticloadbalancing/latest/application/edit-load-balancer-attributes.html).
      LoadBalancerAttributes: Match.arrayWith([
        { Key: 'idle_timeout.timeout_seconds', Value: String(limits.executionTimeoutDefaultMs / 1000) },
      ]),
    });
    expect(lbEndpoint.resources.executionTimeoutMs).toBe(0);
    template.hasResourceProperties('AWS::ElasticLoadBalancingV2::Listener', { Port: 80, Protocol: 'HTTP' });
    template.hasResourceProperties('AWS::ElasticLoadBalancingV2::TargetGroup', {
      HealthCheckPath: '/ping',
      HealthyThresholdCount: 2,
      TargetType: 'instance',
      Port: ports.lbPublic,
      // A deregistering task keeps its requests for as long as the ALB lets one run (was 30 s).
      TargetGroupAttributes: Match.arrayWith([
        {
          Key: 'deregistration_delay.timeout_seconds',
          Value: String(limits.executionTimeoutDefaultMs / 1000),
        },
      ]),
    });
  });

  // The last hop of a load-balanced endpoint's first request. In bridge mode ECS registers the
  // container instance with the host port it picked for the agent's container port, so the target
  // type is `instance` ("tasks that use the awsvpc network mode are associated with an elastic network
  // interface, not an Amazon EC2 instance", the reason awsvpc needs `ip`:
  // https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-properties-ecs-service-loadbalancer.html),
  // and the health check must go to that port too: its default, "the port on which each target
  // receives traffic from the load balancer"
  // (https://docs.aws.amazon.com/elasticloadbalancing/latest/application/target-group-health-checks.html).
  // A fixed HealthCheckPort of 8000 would probe a port no host publishes, and no target would ever
  // be healthy. The agent answers GET /ping 200 when its worker is ready and 503 otherwise, within
  // its 2 s wait for the worker (worker-image/agent/lb.ts pingTimeoutMs), under the check's 5 s
  // timeout, the default for HTTP checks. The ALB spans every zone of the platform, so every zone a
  // pool launches in ("Your load balancer subnet configuration must include all Availability Zones
  // that your container instances reside in", https://docs.aws.amazon.com/AmazonECS/latest/developerguide/alb.html).
  it('health-checks the agent on the host port ECS registered, at /ping, for the 200 it answers when ready', () => {
    const e = endpoint('lb_worker');
    const resources = template.toJSON().Resources;
    // The fixture's one load-balanced endpoint: the template's one target group.
    const groups = Object.entries(template.findResources('AWS::ElasticLoadBalancingV2::TargetGroup'));
    expect(groups).toHaveLength(1);
    const [targetsId, { Properties: targets }] = groups[0]!;
    expect(targets.TargetType).toBe('instance');
    expect(targets.HealthCheckPort ?? 'traffic-port').toBe('traffic-port');
    expect(targets.HealthCheckProtocol ?? 'HTTP').toBe('HTTP');
    expect(targets.HealthCheckPath).toBe('/ping');
    expect(targets.Matcher).toEqual({ HttpCode: '200' });
    expect(targets.HealthCheckTimeoutSeconds ?? 5).toBeGreaterThan(2);
    // ECS registers the agent container's published port: hostPort 0, a port from the hosts' range.
    const agent = containersOf(e).find((c) => c.Name === 'agent') as ContainerDefinition & {
      PortMappings?: unknown[];
    };
    expect(agent.PortMappings).toEqual([{ ContainerPort: ports.lbPublic, HostPort: 0, Protocol: 'tcp' }]);
    expect(resources[idOf(e.service)].Properties.LoadBalancers).toEqual([
      {
        ContainerName: 'agent',
        ContainerPort: ports.lbPublic,
        TargetGroupArn: { Ref: targetsId },
      },
    ]);
    // Every subnet the platform exports, so every zone a pool's hosts may be in.
    const subnets = resources[idOf(e.loadBalancer!)].Properties.Subnets as unknown[];
    expect(subnets).toEqual(
      Array.from({ length: platformAzCount }, (_, i) => ({
        'Fn::Select': [i, { 'Fn::Split': [',', { 'Fn::ImportValue': platformExportNames.publicSubnetIds }] }],
      })),
    );
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
      // Task scale-in protection lasts this long after the last request (worker-image/agent/lb.ts).
      FERRY_IDLE_TIMEOUT_SEC: String(lbEndpoint.resources.idleTimeoutSec),
      // Its idle connections outlive the ALB's, whose idle timeout is this
      // (the LoadBalancerAttributes of 'is an internet-facing ALB…' above).
      FERRY_LB_IDLE_TIMEOUT_SEC: String(limits.executionTimeoutDefaultMs / 1000),
      // Requests in flight at SIGTERM get the container's stopTimeout, less the margin, to finish.
      FERRY_DRAIN_MS: String(drainMs),
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

  it("gives the agent and the worker the task's hop secret, drawn by the init container before both start", () => {
    const containers = containersOf(endpoint('lb_worker'));
    const byName = (name: string) => containers.find((c) => c.Name === name)!;
    const secretFile = artifactMount.lbSecretFile;
    // The init container writes it into the task's own volume (worker-image/agent/artifact.ts)…
    expect(envOf(byName('artifact')).FERRY_LB_SECRET_FILE).toBe(secretFile);
    expect(byName('artifact').MountPoints).toContainEqual({
      SourceVolume: artifactMount.volume,
      ContainerPath: artifactMount.path,
      ReadOnly: false,
    });
    // …and both read it from there, read-only, after it exited 0: the agent sends it, the worker
    // answers only requests carrying it (the worker's port is open on the host's Docker bridge).
    for (const name of ['agent', 'worker']) {
      expect([name, envOf(byName(name)).FERRY_LB_SECRET_FILE]).toEqual([name, secretFile]);
      expect(byName(name).MountPoints).toContainEqual({
        SourceVolume: artifactMount.volume,
        ContainerPath: artifactMount.path,
        ReadOnly: true,
      });
      expect(byName(name).DependsOn).toContainEqual({ ContainerName: 'artifact', Condition: 'SUCCESS' });
    }
    // A queue endpoint's task has no such hop: its worker calls its agent with its worker token.
    const queue = containersOf(endpoint('gpu_worker'));
    for (const container of queue) expect(envOf(container).FERRY_LB_SECRET_FILE).toBeUndefined();
  });

  it("reaches the hosts through the platform's load balancer group, adding no rule to a platform group", () => {
    // Its own group (who may reach the ALB) and the platform's (the way to the agents,
    // PlatformStack.hostsFromLoadBalancers); the rules of both add up on the ALB's interfaces
    // (https://docs.aws.amazon.com/vpc/latest/userguide/security-group-rules.html).
    const alb = endpoint('lb_worker').loadBalancer!;
    const own = alb.connections.securityGroups[0]!;
    expect(template.toJSON().Resources[idOf(alb)].Properties.SecurityGroups).toEqual([
      { 'Fn::GetAtt': [idOf(own), 'GroupId'] },
      { 'Fn::ImportValue': platformExportNames.loadBalancerSecurityGroupId },
    ]);
    // Every rule of the stack is its ALB's own group's, none the hosts' or the shared group's.
    for (const type of ['AWS::EC2::SecurityGroupIngress', 'AWS::EC2::SecurityGroupEgress']) {
      for (const rule of Object.values(template.findResources(type))) {
        expect(rule.Properties.GroupId).toEqual({ 'Fn::GetAtt': [idOf(own), 'GroupId'] });
      }
    }
    // The own group reaches nothing: its one egress rule is CDK's that matches no traffic, which
    // keeps EC2 from giving a new group an allow-all rule
    // (https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-ec2-securitygroup.html).
    expect(template.toJSON().Resources[idOf(own)].Properties.SecurityGroupEgress).toEqual([
      {
        CidrIp: '255.255.255.255/32',
        Description: 'Disallow all traffic',
        IpProtocol: 'icmp',
        FromPort: 252,
        ToPort: 86,
      },
    ]);
    expect(template.findResources('AWS::EC2::SecurityGroupEgress')).toEqual({});
  });
});

describe('bad manifests', () => {
  /** Builds the app from the sample manifest with `edit` applied to its first endpoint's resources. */
  const buildWith = (edit: (resources: ManifestEndpoint['resources']) => void) => {
    const fns = stubFunctionsDir();
    try {
      const bad = structuredClone(sampleManifest);
      edit(bad.endpoints[0]!.resources);
      return buildApp({
        manifest: bad,
        env: 'dev',
        functionsCodeDir: fns.dir,
        artifact: { key: 'a' },
        images: sampleImages,
        nag: false,
      });
    } finally {
      fns.cleanup();
    }
  };

  it('fail with a FerryError, not a crash', () => {
    expect(() =>
      buildWith((resources) => {
        resources.workersMin = 9;
      }),
    ).toThrowError(FerryError);
  });

  it('refuse a workers minimum its pool cannot hold (usage, with the cap); a maximum out of reach is a warning', () => {
    const endpoint = (workersMin: number, workersMax: number) => ({
      name: 'big',
      resources: { ...sampleResources, gpu: ['A10G' as const], workersMin, workersMax },
    });
    expect(poolFitOf(endpoint(0, poolMaxInstances))).toEqual({});
    expect(poolFitOf(endpoint(1, 20)).warning).toBe(
      `big: workers max 20, but its g5.xlarge pool holds ${poolMaxInstances} instances (one worker each, shared by every app on g5.xlarge): at most ${poolMaxInstances} run at once`,
    );
    const refused = poolFitOf(endpoint(poolMaxInstances + 1, 20)).error;
    expect(refused?.code).toBe('usage');
    expect(refused?.message).toContain(`workers min ${poolMaxInstances + 1} can never run`);
    expect(refused?.hint).toContain(`to ${poolMaxInstances} or less`);
    expect(() =>
      buildWith((resources) => {
        resources.workersMin = poolMaxInstances + 1;
        resources.workersMax = 20;
      }),
    ).toThrowError(/can never run/);
  });
});

describe('remote calls from AWS workers (docs/python.md)', () => {
  it('give every worker the API root, its app, env and endpoint name', () => {
    const apiRoot = {
      'Fn::Select': [0, { 'Fn::Split': ['/v2', { 'Fn::ImportValue': platformExportNames.apiUrl }] }],
    };
    for (const e of built.appStack.endpoints) {
      const worker = containersOf(e).find((c) => c.Name === 'worker')!;
      expect(envOf(worker)).toMatchObject({
        FERRY_API_URL: apiRoot,
        FERRY_APP: sampleManifest.app,
        FERRY_ENV: 'dev',
        FERRY_ENDPOINT_NAME: e.name,
      });
    }
  });
});

describe('call keys (core/call-keys.ts, docs/security-aws.md)', () => {
  const secretOf = (c: ContainerDefinition, name: string) =>
    ((c as { Secrets?: { Name: string; ValueFrom: unknown }[] }).Secrets ?? []).find((s) => s.Name === name);
  const policies = () =>
    Object.entries(template.findResources('AWS::IAM::Policy')).map(([id, p]) => ({
      id,
      roles: JSON.stringify(p.Properties.Roles),
      document: JSON.stringify(p.Properties.PolicyDocument),
    }));

  it("hand each worker its own endpoint's call key as an ECS secret, and nothing to the agent or init", () => {
    for (const e of built.appStack.endpoints) {
      for (const c of containersOf(e)) {
        const secret = secretOf(c, 'FERRY_CALL_TOKEN');
        expect(Object.keys(envOf(c))).not.toContain('FERRY_CALL_TOKEN');
        if (c.Name !== 'worker') {
          expect(secret, `${e.name}/${c.Name}`).toBeUndefined();
          continue;
        }
        expect(JSON.stringify(secret?.ValueFrom)).toContain(
          `:secret:${callTokenSecretName({ app: 'demo', env: 'dev', name: e.name })}"`,
        );
      }
    }
  });

  it('put the key id (not the key) in the worker environment, so a new key rolls the tasks', () => {
    const worker = containersOf(endpoint('gpu_worker')).find((c) => c.Name === 'worker')!;
    expect(envOf(worker).FERRY_CALL_KEY_ID).toBe('call-0a1b2c3d');
    const cpu = containersOf(endpoint('cpu_worker')).find((c) => c.Name === 'worker')!;
    expect(envOf(cpu).FERRY_CALL_KEY_ID).toBeUndefined();
  });

  it("let only the endpoint's own execution role read its call key, by exact name", () => {
    const names = built.appStack.endpoints.map((e) => e.name);
    for (const name of names) {
      const secret = callTokenSecretName({ app: 'demo', env: 'dev', name });
      const readers = policies().filter((p) => p.document.includes(`${secret}-??????`));
      expect(readers, name).toHaveLength(1);
      expect(readers[0]!.roles).toContain('ExecutionRole');
      // That policy names no other endpoint's call key, and no wildcard over them.
      for (const other of names.filter((n) => n !== name)) {
        expect(readers[0]!.document).not.toContain(`ferry-call/demo/dev/${other}/`);
      }
      expect(readers[0]!.document).not.toMatch(/secret:ferry-call\/[^"]*\*/);
    }
  });

  it('give the task roles (which user code holds) no Secrets Manager action at all', () => {
    for (const e of built.appStack.endpoints) {
      const taskRoleId = idOf(e.taskRole);
      const taskPolicies = policies().filter((p) => p.roles.includes(taskRoleId));
      expect(taskPolicies.length, e.name).toBeGreaterThan(0);
      for (const p of taskPolicies) expect(p.document).not.toContain('secretsmanager:');
    }
  });
});

describe('image endpoints (docs/python.md)', () => {
  it('run the declared image as the worker container, beside the unchanged agent', () => {
    const fns = stubFunctionsDir();
    try {
      const manifest = structuredClone(sampleManifest);
      const { target: _target, ...base } = manifest.endpoints.find((e) => e.name === 'gpu_worker')!;
      manifest.endpoints.push({ ...base, name: 'vllm', image: 'vllm/vllm-openai:v0.6.3' });
      const app = buildApp({
        manifest,
        env: 'dev',
        functionsCodeDir: fns.dir,
        artifact: { key: 'a' },
        images: sampleImages,
        nag: false,
      });
      const stackTemplate = Template.fromStack(app.appStack);
      const containersFor = (name: string): ContainerDefinition[] => {
        const e = app.appStack.endpoints.find((x) => x.name === name)!;
        return stackTemplate.toJSON().Resources[
          Stack.of(e.taskDefinition).getLogicalId(e.taskDefinition.node.defaultChild as never)
        ].Properties.ContainerDefinitions;
      };
      const imageOf = (c: ContainerDefinition | undefined) => (c as { Image?: unknown } | undefined)?.Image;
      const vllm = containersFor('vllm');
      const gpu = containersFor('gpu_worker');
      expect(imageOf(vllm.find((c) => c.Name === 'worker'))).toBe('vllm/vllm-openai:v0.6.3');
      expect(imageOf(gpu.find((c) => c.Name === 'worker'))).not.toBe('vllm/vllm-openai:v0.6.3');
      // The agent is the platform's, speaking RunPod's worker protocol to the image.
      const agent = vllm.find((c) => c.Name === 'agent')!;
      expect(imageOf(agent)).toEqual(imageOf(gpu.find((c) => c.Name === 'agent')));
      expect(Object.keys(envOf(vllm.find((c) => c.Name === 'worker')!))).toEqual(
        expect.arrayContaining(['RUNPOD_WEBHOOK_GET_JOB', 'RUNPOD_WEBHOOK_POST_OUTPUT']),
      );
    } finally {
      fns.cleanup();
    }
  });
});

describe('ECR pull rights for the images a task names (infra/constructs/service.ts)', () => {
  // The OCI and Docker client endpoints of https://docs.aws.amazon.com/general/latest/gr/ecr.html
  // (dkr.ecr, dkr.ecr-fips, dkr-ecr and dkr-ecr-fips), and the partitions of
  // https://docs.aws.amazon.com/IAM/latest/UserGuide/reference-arns.html.
  const digest = `sha256:${'ab'.repeat(32)}`;
  const cases = [
    {
      name: 'govcloud',
      image: '123456789012.dkr.ecr.us-gov-west-1.amazonaws.com/team/gov:1',
      arn: 'arn:aws-us-gov:ecr:us-gov-west-1:123456789012:repository/team/gov',
    },
    {
      name: 'fips',
      image: '123456789012.dkr.ecr-fips.us-east-1.amazonaws.com/team/fips:1',
      arn: 'arn:aws:ecr:us-east-1:123456789012:repository/team/fips',
    },
    {
      name: 'dual_stack',
      image: `123456789012.dkr-ecr.eu-west-1.on.aws/team/v6@${digest}`,
      arn: 'arn:aws:ecr:eu-west-1:123456789012:repository/team/v6',
    },
    {
      name: 'dual_stack_fips',
      image: '123456789012.dkr-ecr-fips.us-east-2.on.aws/v6fips:2',
      arn: 'arn:aws:ecr:us-east-2:123456789012:repository/v6fips',
    },
    {
      name: 'china',
      image: '123456789012.dkr.ecr.cn-north-1.amazonaws.com.cn/team/cn:1',
      arn: 'arn:aws-cn:ecr:cn-north-1:123456789012:repository/team/cn',
    },
  ];

  it('grant the execution role a pull on the repository of every ECR host form, and pull the URI as given', () => {
    const fns = stubFunctionsDir();
    try {
      const manifest = structuredClone(sampleManifest);
      const { target: _target, ...base } = manifest.endpoints.find((e) => e.name === 'gpu_worker')!;
      for (const c of cases) manifest.endpoints.push({ ...base, name: c.name, image: c.image });
      const app = buildApp({
        manifest,
        env: 'dev',
        functionsCodeDir: fns.dir,
        artifact: { key: 'a' },
        images: sampleImages,
        nag: false,
      });
      const stackTemplate = Template.fromStack(app.appStack);
      for (const c of cases) {
        const e = app.appStack.endpoints.find((x) => x.name === c.name)!;
        const worker = (
          stackTemplate.toJSON().Resources[idOf(e.taskDefinition)].Properties
            .ContainerDefinitions as (ContainerDefinition & { Image?: unknown })[]
        ).find((x) => x.Name === 'worker')!;
        // As given: rebuilt from the ARN it would name the standard dkr.ecr host instead.
        expect(worker.Image, c.name).toBe(c.image);
        const statements = statementsOf(stackTemplate, e.taskDefinition.executionRole!);
        expect(resourcesFor(statements, 'ecr:BatchGetImage'), c.name).toContain(JSON.stringify(c.arn));
        expect(resourcesFor(statements, 'ecr:GetDownloadUrlForLayer'), c.name).toContain(
          JSON.stringify(c.arn),
        );
        expect(resourcesFor(statements, 'ecr:GetAuthorizationToken'), c.name).toContain('"*"');
      }
    } finally {
      fns.cleanup();
    }
  });
});
