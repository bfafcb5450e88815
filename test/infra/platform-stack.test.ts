import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { App } from 'aws-cdk-lib';
import { Match, Template } from 'aws-cdk-lib/assertions';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dynamoSchema, stopSignalKey, type TableSpec } from '../../core/adapters/aws/dynamo.js';
import { outOfScopeMessage } from '../../core/auth.js';
import {
  FerryError,
  inlineBodyTooLargeMessage,
  missingKeyMessage,
  noRouteMessage,
} from '../../core/errors.js';
import { limits } from '../../core/limits.js';
import { functionEntries } from '../../functions/bundle.js';
import { outputCopyReuseMs, payloadCopyExpiryDays } from '../../functions/payloads.js';
import { functionEnvSchema } from '../../functions/wiring.js';
import { buildApp, ferryContext, optionsFromContext } from '../../infra/app.js';
import { poolMaxInstances } from '../../infra/gpu.js';
import { imageBuildPrefix } from '../../infra/names.js';
import { platformAzCount, platformExportNames, poolExportName } from '../../infra/platform-exports.js';
import {
  imageBuildExpiryDays,
  integrationTimeoutSec,
  maxWaitMs,
  PlatformStack,
  payloadExpiryDays,
  payloadsPrefix,
  webhookTiming,
} from '../../infra/platform-stack.js';
import { ephemeralPorts } from '../../infra/task-layout.js';
import { sampleImages, sampleManifest, stubFunctionsDir } from './fixtures.js';
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

const tableOf = (role: keyof typeof dynamoSchema) =>
  template.toJSON().Resources[logicalId(platform.tables[role])].Properties;

describe('tables', () => {
  it('are exactly the four tables of dynamoSchema: keys, GSIs, TTL attributes', () => {
    expect(Object.keys(template.findResources('AWS::DynamoDB::Table'))).toHaveLength(4);
    for (const role of Object.keys(dynamoSchema) as (keyof typeof dynamoSchema)[]) {
      const spec = dynamoSchema[role] as TableSpec;
      const table = tableOf(role);
      const keys = [{ AttributeName: spec.partitionKey.name, KeyType: 'HASH' }];
      if (spec.sortKey) keys.push({ AttributeName: spec.sortKey.name, KeyType: 'RANGE' });
      expect(table.KeySchema, role).toEqual(keys);
      const indexes = (table.GlobalSecondaryIndexes ?? []) as {
        IndexName: string;
        KeySchema: unknown;
        Projection: unknown;
      }[];
      expect(indexes.map((i) => i.IndexName).sort(), role).toEqual(
        Object.values(spec.indexes)
          .map((i) => i.indexName)
          .sort(),
      );
      const types = new Map<string, string>();
      types.set(spec.partitionKey.name, spec.partitionKey.type);
      if (spec.sortKey) types.set(spec.sortKey.name, spec.sortKey.type);
      for (const index of Object.values(spec.indexes)) {
        const deployed = indexes.find((i) => i.IndexName === index.indexName)!;
        expect(deployed.KeySchema).toEqual([
          { AttributeName: index.partitionKey.name, KeyType: 'HASH' },
          { AttributeName: index.sortKey.name, KeyType: 'RANGE' },
        ]);
        expect(deployed.Projection, index.indexName).toEqual(
          index.projection.type === 'INCLUDE'
            ? { ProjectionType: 'INCLUDE', NonKeyAttributes: [...index.projection.attributes] }
            : { ProjectionType: 'KEYS_ONLY' },
        );
        types.set(index.partitionKey.name, index.partitionKey.type);
        types.set(index.sortKey.name, index.sortKey.type);
      }
      const definitions = (table.AttributeDefinitions as { AttributeName: string; AttributeType: string }[])
        .map((d) => [d.AttributeName, d.AttributeType])
        .sort();
      expect(definitions, role).toEqual([...types].sort());
      expect(table.TimeToLiveSpecification, role).toEqual(
        spec.ttlAttribute ? { AttributeName: spec.ttlAttribute, Enabled: true } : undefined,
      );
      expect(table.BillingMode).toBe('PAY_PER_REQUEST');
    }
  });

  it('projects into each GSI only what its queries read, never ALL (inputs of up to 160 KB stay in the table)', () => {
    const projections = Object.fromEntries(
      Object.values(template.findResources('AWS::DynamoDB::Table')).flatMap((table) =>
        ((table.Properties.GlobalSecondaryIndexes ?? []) as { IndexName: string; Projection: unknown }[]).map(
          (index) => [index.IndexName, index.Projection],
        ),
      ),
    );
    const refs = ['inputRef', 'outputRef', 'errorRef', 's3ConfigRef', 'webhookRef'];
    expect(projections).toEqual({
      byEndpointStatus: { ProjectionType: 'INCLUDE', NonKeyAttributes: ['expiresAt'] },
      byStatusExpiry: { ProjectionType: 'INCLUDE', NonKeyAttributes: ['endpointId', 'retries', ...refs] },
      byEndpointExpiry: {
        ProjectionType: 'INCLUDE',
        NonKeyAttributes: ['status', 'retries', 'inQueue', 'inProgress', 'completed', 'failed', 'retried'],
      },
      byStatusOverdue: { ProjectionType: 'KEYS_ONLY' },
      byKind: { ProjectionType: 'INCLUDE', NonKeyAttributes: ['body'] },
      byEndpoint: { ProjectionType: 'INCLUDE', NonKeyAttributes: ['body'] },
    });
    // The jobs table, which also holds the count items, expires both through expiresAtSec.
    expect(tableOf('jobs').TimeToLiveSpecification).toEqual({ AttributeName: 'expiresAtSec', Enabled: true });
  });

  it('has point-in-time recovery and encryption on every table, and keeps them on stack delete, not on a failed create', () => {
    const tables = template.findResources('AWS::DynamoDB::Table');
    for (const table of Object.values(tables)) {
      expect(table.Properties.PointInTimeRecoverySpecification).toEqual({ PointInTimeRecoveryEnabled: true });
      expect(table.Properties.SSESpecification).toEqual({ SSEEnabled: true });
      // infra/retention.ts: deleted only when the create that made them rolls back.
      expect(table.DeletionPolicy).toBe('RetainExceptOnCreate');
      expect(table.UpdateReplacePolicy).toBe('Retain');
    }
  });

  it('has no separate keys table: keys live in the control table', () => {
    const tables = Object.values(template.findResources('AWS::DynamoDB::Table'));
    for (const table of tables) {
      expect(JSON.stringify(table.Properties.KeySchema)).not.toContain('keyHash');
    }
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
          Match.objectLike({ Prefix: 'payloads/', ExpirationInDays: payloadExpiryDays, Status: 'Enabled' }),
        ]),
      },
    });
    const rules = Object.values(template.findResources('AWS::S3::Bucket'))[0]!.Properties
      .LifecycleConfiguration.Rules as { Prefix?: string; ExpirationInDays?: number }[];
    // Nothing expires artifacts/ (or the whole bucket).
    expect(rules.filter((r) => r.ExpirationInDays !== undefined).map((r) => r.Prefix)).toEqual([
      'payloads/',
      'payloads/uploads/',
      'payloads/outputs/',
      'image-builds/',
    ]);
  });

  it('removes upload and output copies within days, which no job record owns and no sweep deletes', () => {
    const rules = Object.values(template.findResources('AWS::S3::Bucket'))[0]!.Properties
      .LifecycleConfiguration.Rules as { Prefix?: string; ExpirationInDays?: number; Status: string }[];
    for (const prefix of ['payloads/uploads/', 'payloads/outputs/']) {
      expect(rules.find((r) => r.Prefix === prefix)).toMatchObject({
        ExpirationInDays: payloadCopyExpiryDays,
        Status: 'Enabled',
      });
    }
    // Shorter than the backstop (S3 honours the shorter of two overlapping expirations), and a copy
    // is written again when older than outputCopyReuseMs, so a signed URL (an hour) never outlives it.
    expect(payloadCopyExpiryDays).toBeLessThan(payloadExpiryDays);
    expect(outputCopyReuseMs + 3_600_000).toBeLessThan(payloadCopyExpiryDays * 86_400_000);
  });

  it('expires image build contexts, which only the build that follows the upload reads', () => {
    // cli/providers/aws-images.ts writes one per build under image-builds/; the build reads it in its
    // pre_build phase, after at most the project's queued timeout, and CodeBuild stops a build at the
    // project's timeout.
    template.hasResourceProperties('AWS::S3::Bucket', {
      LifecycleConfiguration: {
        Rules: Match.arrayWith([
          Match.objectLike({
            Prefix: imageBuildPrefix,
            ExpirationInDays: imageBuildExpiryDays,
            Status: 'Enabled',
          }),
        ]),
      },
    });
    const project = Object.values(template.findResources('AWS::CodeBuild::Project'))[0]!.Properties;
    const { TimeoutInMinutes: timeoutMinutes, QueuedTimeoutInMinutes: queuedMinutes } = project as {
      TimeoutInMinutes: number;
      QueuedTimeoutInMinutes: number;
    };
    expect(queuedMinutes).toBe(60);
    expect(imageBuildExpiryDays * 24 * 60).toBeGreaterThan(queuedMinutes + timeoutMinutes);
  });

  it('is kept on stack delete, not when its first create rolls back (infra/retention.ts)', () => {
    template.hasResource('AWS::S3::Bucket', {
      DeletionPolicy: 'RetainExceptOnCreate',
      UpdateReplacePolicy: 'Retain',
    });
  });

  it("expires payloads only after the longest a job is kept, so the rule never takes a live job's input", () => {
    // S3 counts whole days from an object's creation (rounding up to midnight UTC): the rule must pass
    // limits.jobLifetimeMaxMs (14 days) itself, not just the 7-day policy.ttl.
    expect(payloadExpiryDays * 86_400_000).toBeGreaterThan(limits.jobLifetimeMaxMs);
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
        ManagedTerminationProtection: 'ENABLED',
      }),
    });
    template.allResourcesProperties('AWS::AutoScaling::AutoScalingGroup', { MinSize: '0' });
    // The cap the scaler and the deploy check hold endpoints to (infra/gpu.ts poolMaxInstances).
    template.allResourcesProperties('AWS::AutoScaling::AutoScalingGroup', {
      MaxSize: String(poolMaxInstances),
    });
    template.hasResourceProperties('AWS::EC2::LaunchTemplate', {
      LaunchTemplateData: Match.objectLike({ InstanceType: 'g5.xlarge' }),
    });
  });

  it('lets the Auto Scaling groups terminate only instances ECS has emptied (managed termination protection)', () => {
    // ECS sets and lifts instance protection itself; it needs new instances protected from the start
    // (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/managed-termination-protection.html).
    template.allResourcesProperties('AWS::AutoScaling::AutoScalingGroup', {
      NewInstancesProtectedFromScaleIn: true,
    });
  });

  it('lets a GPU pool fall back to equivalent sizes in order, On-Demand only; a CPU pool keeps one type', () => {
    // Mixed-instances group, prioritized On-Demand: the first override is launched unless EC2 has no
    // capacity for it (https://docs.aws.amazon.com/autoscaling/ec2/userguide/allocation-strategies.html).
    const asgs = Object.values(template.findResources('AWS::AutoScaling::AutoScalingGroup'));
    const mixed = asgs.filter((a) => a.Properties.MixedInstancesPolicy);
    expect(mixed).toHaveLength(1);
    const policy = mixed[0]!.Properties.MixedInstancesPolicy;
    expect(policy.LaunchTemplate.Overrides.map((o: { InstanceType: string }) => o.InstanceType)).toEqual([
      'g5.xlarge',
      'g5.2xlarge',
      'g5.4xlarge',
    ]);
    expect(policy.InstancesDistribution).toEqual({
      OnDemandAllocationStrategy: 'prioritized',
      OnDemandBaseCapacity: 0,
      OnDemandPercentageAboveBaseCapacity: 100,
    });
    // The CPU pool (m7i.large) has no equivalents: a plain launch template.
    const plain = asgs.filter((a) => !a.Properties.MixedInstancesPolicy);
    expect(plain).toHaveLength(1);
    expect(plain[0]!.Properties.LaunchTemplate).toBeDefined();
    // cdk-nag's EC26 cannot read a template inside a mixed policy (acknowledged): check it here.
    for (const lt of Object.values(template.findResources('AWS::EC2::LaunchTemplate'))) {
      expect(lt.Properties.LaunchTemplateData.BlockDeviceMappings[0].Ebs.Encrypted).toBe(true);
    }
    // Managed scaling and termination protection hold for the mixed group too (checked above for all).
    expect(mixed[0]!.Properties.NewInstancesProtectedFromScaleIn).toBe(true);
  });

  it('says the platform-wide settings it was built with, and its Ferry version, in outputs (infra/platform-settings.ts)', () => {
    template.hasOutput('IntegrationTimeoutSec', { Value: '29' });
    template.hasOutput('GpuWarmPoolSize', { Value: '0' });
    // Only a stack given its version says one (the CLI and `npx cdk` always give it: infra/app.ts).
    expect(Object.keys(template.findOutputs('FerryVersion'))).toEqual([]);
    const fns = stubFunctionsDir();
    try {
      const raised = Template.fromStack(
        new PlatformStack(new App(), 'FerryPlatform', {
          functionsCodeDir: fns.dir,
          integrationTimeoutSec: 120,
          ferryVersion: '1.2.3',
        }),
      );
      raised.hasOutput('IntegrationTimeoutSec', { Value: '120' });
      // The API function answers by it (functions/api.ts answerDeadline).
      raised.hasResourceProperties('AWS::Lambda::Function', {
        Environment: { Variables: Match.objectLike({ FERRY_INTEGRATION_TIMEOUT_MS: '120000' }) },
      });
      raised.hasOutput('FerryVersion', { Value: '1.2.3' });
    } finally {
      fns.cleanup();
    }
  });

  it('keeps no warm pool unless asked; with gpuWarmPoolSize, stopped GPU instances beside GPU pools only', () => {
    template.resourceCountIs('AWS::AutoScaling::WarmPool', 0);
    const fns = stubFunctionsDir();
    try {
      const warm = new PlatformStack(new App(), 'FerryPlatform', {
        functionsCodeDir: fns.dir,
        instanceTypes: ['g5.xlarge', 'm7i.large'],
        gpuWarmPoolSize: 1,
      });
      const warmTemplate = Template.fromStack(warm);
      warmTemplate.resourceCountIs('AWS::AutoScaling::WarmPool', 1);
      // Said in an output, so the next deploy keeps it (cli/providers/aws/platform.ts platformSettings).
      warmTemplate.hasOutput('GpuWarmPoolSize', { Value: '1' });
      warmTemplate.hasResourceProperties('AWS::AutoScaling::WarmPool', {
        MinSize: 1,
        MaxGroupPreparedCapacity: 1,
        PoolState: 'Stopped',
        InstanceReusePolicy: { ReuseOnScaleIn: false },
      });
      // The GPU hosts wait for the warm pool check before they join the cluster.
      const gpuTemplate = Object.values(warmTemplate.findResources('AWS::EC2::LaunchTemplate')).find((t) =>
        JSON.stringify(t).includes('g5.xlarge'),
      );
      expect(JSON.stringify(gpuTemplate)).toContain('ECS_WARM_POOLS_CHECK=true');
      // Auto Scaling stops a warm-pool instance without waiting for its user data, and cloud-init runs
      // user data once: the script runs at every boot, so the boot that leaves the pool writes the
      // ecs.config lines (ECS_CLUSTER included, CDK's line in the same part) before the agent starts.
      const [head, shellPart] = userDataParts(gpuTemplate);
      expect(head).toMatch(/^Content-Type: multipart\/mixed; boundary=/);
      expect(head).toContain('Content-Type: text/cloud-config');
      expect(head).toContain('#cloud-config\ncloud_final_modules:\n- [scripts-user, always]\n');
      expect(head).toContain('Content-Type: text/x-shellscript');
      expect(shellPart).toMatch(/^#!\/bin\/bash\n/);
      for (const line of ['ECS_WARM_POOLS_CHECK=true', 'ECS_ENABLE_GPU_SUPPORT=true', 'ECS_CLUSTER=']) {
        expect(shellPart).toContain(`echo ${line}`);
      }
      // A host outside a warm pool boots once into service: its user data stays a plain script.
      const cpuTemplate = Object.values(warmTemplate.findResources('AWS::EC2::LaunchTemplate')).find((t) =>
        JSON.stringify(t).includes('m7i.large'),
      );
      expect(JSON.stringify(cpuTemplate)).not.toContain('cloud_final_modules');
      // A warm pool cannot sit on a mixed-instances group (PutWarmPool refuses it): one type only.
      warmTemplate.allResourcesProperties('AWS::AutoScaling::AutoScalingGroup', {
        MixedInstancesPolicy: Match.absent(),
      });
    } finally {
      fns.cleanup();
    }
  });

  it("leaves managed scaling's scale-out step to ECS unless asked; with gpuScaleOutStep N, N hosts per round in GPU pools only", () => {
    /** Each pool's ManagedScaling, by the instance type in its capacity provider's logical id. */
    const stepsOf = (built: Template) =>
      Object.fromEntries(
        ['g5.xlarge', 'm7i.large'].map((pool) => {
          const providers = Object.entries(built.findResources('AWS::ECS::CapacityProvider')).filter(([id]) =>
            id.startsWith(`Pool${pool.replace(/\./g, '')}Provider`),
          );
          expect(providers, pool).toHaveLength(1);
          const scaling = providers[0]![1].Properties.AutoScalingGroupProvider.ManagedScaling;
          return [pool, { min: scaling.MinimumScalingStepSize, max: scaling.MaximumScalingStepSize }];
        }),
      );
    // Default: neither step in the template (ECS then adds 1 host per round), and the output says 1.
    expect(stepsOf(template)).toEqual({
      'g5.xlarge': { min: undefined, max: undefined },
      'm7i.large': { min: undefined, max: undefined },
    });
    template.hasOutput('GpuScaleOutStep', { Value: '1' });
    const fns = stubFunctionsDir();
    try {
      const stepped = Template.fromStack(
        new PlatformStack(new App(), 'FerryPlatform', {
          functionsCodeDir: fns.dir,
          instanceTypes: ['g5.xlarge', 'm7i.large'],
          gpuScaleOutStep: 4,
        }),
      );
      // The GPU pool adds 4 hosts per round; its maximum stays at the API's highest (never below the
      // minimum). The CPU pool keeps ECS's default.
      expect(stepsOf(stepped)).toEqual({
        'g5.xlarge': { min: 4, max: 10_000 },
        'm7i.large': { min: undefined, max: undefined },
      });
      stepped.allResourcesProperties('AWS::ECS::CapacityProvider', {
        AutoScalingGroupProvider: Match.objectLike({
          ManagedScaling: Match.objectLike({ Status: 'ENABLED', TargetCapacity: 100 }),
        }),
      });
      // Said in an output, so the next deploy keeps it (cli/providers/aws/platform.ts platformSettings).
      stepped.hasOutput('GpuScaleOutStep', { Value: '4' });
    } finally {
      fns.cleanup();
    }
  });

  it('takes the scale-out step from CDK context too (`npx cdk -c ferry:gpuScaleOutStep=N`), checked the same way', () => {
    const dir = mkdtempSync(join(tmpdir(), 'ferry-step-ctx-'));
    const fns = stubFunctionsDir();
    try {
      const manifestPath = join(dir, 'ferry_manifest.json');
      writeFileSync(manifestPath, JSON.stringify(sampleManifest));
      const context = (extra: Record<string, string>) =>
        new App({
          context: {
            ...ferryContext,
            'ferry:manifest': manifestPath,
            'ferry:env': 'dev',
            'ferry:functionsDir': fns.dir,
            'ferry:artifactKey': 'artifacts/demo/dev/fff.tar.gz',
            'ferry:gpuWorkerImage': sampleImages.gpuWorker,
            'ferry:cpuWorkerImage': sampleImages.cpuWorker,
            'ferry:agentImage': sampleImages.agent,
            ...extra,
          },
        });
      expect(optionsFromContext(context({})).gpuScaleOutStep).toBeUndefined();
      const app = context({ 'ferry:gpuScaleOutStep': '6' });
      const options = optionsFromContext(app);
      expect(options.gpuScaleOutStep).toBe(6);
      expect(buildApp(options, app).platform.gpuScaleOutStep).toBe(6);
      let error: unknown;
      try {
        optionsFromContext(context({ 'ferry:gpuScaleOutStep': '0' }));
      } catch (e) {
        error = e;
      }
      expect(FerryError.is(error)).toBe(true);
      expect((error as FerryError).message).toBe(
        'ferry:gpuScaleOutStep must be a whole number from 1 to 10000, got "0"',
      );
      expect((error as FerryError).hint).toContain('-c ferry:gpuScaleOutStep=N');
    } finally {
      fns.cleanup();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('uses ECS managed draining, not the CDK drain-hook Lambda', () => {
    expect(
      Object.keys(template.findResources('AWS::Lambda::Function')).some((id) => id.includes('Drain')),
    ).toBe(false);
    // The only topic is the alarm topic (the drain hook would add its own).
    expect(Object.keys(template.findResources('AWS::SNS::Topic'))).toEqual([
      logicalId(platform.alarms.topic),
    ]);
  });

  it('turns on Container Insights and spans two AZs with no NAT gateway', () => {
    template.hasResourceProperties('AWS::ECS::Cluster', {
      ClusterSettings: [{ Name: 'containerInsights', Value: 'enabled' }],
    });
    template.resourceCountIs('AWS::EC2::Subnet', 2);
    template.resourceCountIs('AWS::EC2::NatGateway', 0);
  });

  // The first hop of a first job: a host that never registers with the Ferry cluster leaves every
  // task in PROVISIONING, on an instance that is billed and protected from scale-in. A GPU host needs
  // the ECS-optimized GPU AMI (the NVIDIA driver and container runtime, and the agent reports the
  // GPUs: https://docs.aws.amazon.com/AmazonECS/latest/developerguide/ecs-gpu.html), named by its
  // SSM parameter (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/retrieve-ecs-optimized_AMI.html);
  // an agent with no ECS_CLUSTER joins the cluster named `default`
  // (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/ecs-agent-config.html); and the
  // agent registers and reports with the instance role, whose actions AWS lists in
  // AmazonEC2ContainerServiceforEC2Role (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/instance_IAM_role.html).
  // Not ECR pulls: with an execution role on the task the agent pulls with that role
  // (infra/constructs/service.ts EcrUriImage), and the cluster exists, so no ecs:CreateCluster.
  it('boots every host into the Ferry cluster: the AMI of its kind, ECS_CLUSTER, and the agent’s calls on the instance role', () => {
    const json = template.toJSON();
    const clusterId = logicalId(platform.cluster);
    const launchTemplates = Object.values(template.findResources('AWS::EC2::LaunchTemplate'));
    expect(launchTemplates.map((lt) => lt.Properties.LaunchTemplateData.InstanceType).sort()).toEqual([
      'g5.xlarge',
      'm7i.large',
    ]);
    for (const lt of launchTemplates) {
      const data = lt.Properties.LaunchTemplateData;
      const gpu = data.InstanceType === 'g5.xlarge';
      expect([data.InstanceType, json.Parameters[data.ImageId.Ref]]).toEqual([
        data.InstanceType,
        {
          Type: 'AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>',
          Default: gpu
            ? '/aws/service/ecs/optimized-ami/amazon-linux-2023/gpu/recommended/image_id'
            : '/aws/service/ecs/optimized-ami/amazon-linux-2023/recommended/image_id',
        },
      ]);
      // `echo ECS_CLUSTER=` + the cluster's name (its Ref) + ` >> /etc/ecs/ecs.config`.
      const parts = data.UserData['Fn::Base64']['Fn::Join'][1] as unknown[];
      const at = parts.findIndex((p) => typeof p === 'string' && p.endsWith('\necho ECS_CLUSTER='));
      expect(at, data.InstanceType).toBeGreaterThanOrEqual(0);
      expect(parts[at + 1]).toEqual({ Ref: clusterId });
      expect(parts[at + 2]).toMatch(/^ >> \/etc\/ecs\/ecs\.config/);
      expect(JSON.stringify(data.UserData).includes('echo ECS_ENABLE_GPU_SUPPORT=true')).toBe(gpu);
      // The launch template's instance profile carries the pool's role, which the agent acts with.
      const profileId = data.IamInstanceProfile.Arn['Fn::GetAtt'][0];
      const [roleRef] = json.Resources[profileId].Properties.Roles;
      const statements = Object.values(template.findResources('AWS::IAM::Policy'))
        .filter((p) =>
          (p.Properties.Roles as unknown[]).some((r) => JSON.stringify(r) === JSON.stringify(roleRef)),
        )
        .flatMap((p) => p.Properties.PolicyDocument.Statement);
      const clusterArn = JSON.stringify({ 'Fn::GetAtt': [clusterId, 'Arn'] });
      for (const action of [
        'ecs:RegisterContainerInstance',
        'ecs:DeregisterContainerInstance',
        'ecs:Submit*',
      ]) {
        expect(resourcesFor(statements, action), action).toEqual([clusterArn]);
      }
      for (const action of ['ecs:Poll', 'ecs:StartTelemetrySession']) {
        const [allowing] = statements.filter((s) => actionsOf([s]).includes(action));
        expect(allowing?.Condition, action).toEqual({ ArnEquals: { 'ecs:cluster': JSON.parse(clusterArn) } });
      }
      expect(resourcesFor(statements, 'ecs:DiscoverPollEndpoint')).toEqual(['"*"']);
    }
  });

  // The hosts reach ECS, ECR, Secrets Manager, SQS and CloudWatch Logs over the internet, and their
  // bridge-mode containers through the host's address (docs/aws.md#networking-bridge-not-awsvpc):
  // no NAT gateway and no interface endpoint, so a host without a public IPv4 address never
  // registers and no task of it starts. A subnet whose "public IPv4 addressing attribute" is on
  // gives each instance launched into it one, and an internet gateway route makes that address
  // usable (https://docs.aws.amazon.com/vpc/latest/userguide/vpc-ip-addressing.html,
  // https://docs.aws.amazon.com/vpc/latest/userguide/VPC_Internet_Gateway.html). A launch template
  // that named network interfaces would decide the address itself, so it names none. S3 (the
  // artifact, ECR's image layers) and DynamoDB take the gateway endpoints on the same route tables,
  // with no policy of their own: an endpoint policy that left out ECR's layer bucket would fail
  // every image pull (https://docs.aws.amazon.com/AmazonECR/latest/userguide/vpc-endpoints.html).
  it('gives every host a public address with a route out, and S3 and DynamoDB gateway endpoints on its route tables', () => {
    const json = template.toJSON();
    const resources = json.Resources as Record<string, { Type: string; Properties: Record<string, any> }>;
    const ofType = (type: string) => Object.values(resources).filter((r) => r.Type === type);
    template.resourceCountIs('AWS::EC2::NatGateway', 0);
    for (const lt of ofType('AWS::EC2::LaunchTemplate')) {
      expect(lt.Properties.LaunchTemplateData.NetworkInterfaces).toBeUndefined();
    }
    const [gateway] = Object.keys(template.findResources('AWS::EC2::InternetGateway'));
    const endpoints = ofType('AWS::EC2::VPCEndpoint');
    expect(endpoints.map((e) => e.Properties.VpcEndpointType ?? 'Gateway')).toEqual(['Gateway', 'Gateway']);
    expect(endpoints.map((e) => JSON.stringify(e.Properties.ServiceName)).sort()).toEqual(
      ['dynamodb', 's3'].map((service) =>
        JSON.stringify({ 'Fn::Join': ['', ['com.amazonaws.', { Ref: 'AWS::Region' }, `.${service}`]] }),
      ),
    );
    for (const e of endpoints) expect(e.Properties.PolicyDocument).toBeUndefined();
    const asgs = ofType('AWS::AutoScaling::AutoScalingGroup');
    expect(asgs).toHaveLength(2);
    for (const asg of asgs) {
      const subnets = asg.Properties.VPCZoneIdentifier as { Ref: string }[];
      expect(subnets.length).toBeGreaterThan(0);
      for (const { Ref: subnet } of subnets) {
        expect(resources[subnet]!.Properties.MapPublicIpOnLaunch, subnet).toBe(true);
        const [association] = ofType('AWS::EC2::SubnetRouteTableAssociation').filter(
          (a) => a.Properties.SubnetId.Ref === subnet,
        );
        const routeTable = association!.Properties.RouteTableId;
        const routes = ofType('AWS::EC2::Route').filter(
          (r) => JSON.stringify(r.Properties.RouteTableId) === JSON.stringify(routeTable),
        );
        expect(routes.map((r) => [r.Properties.DestinationCidrBlock, r.Properties.GatewayId])).toEqual([
          ['0.0.0.0/0', { Ref: gateway }],
        ]);
        for (const e of endpoints) expect(e.Properties.RouteTableIds).toContainEqual(routeTable);
      }
    }
    // Out to anywhere: the agent, the ECS agent and the worker all leave through the host's group.
    expect(resources[logicalId(platform.instanceSecurityGroup)]!.Properties.SecurityGroupEgress).toEqual([
      { CidrIp: '0.0.0.0/0', Description: expect.any(String), IpProtocol: '-1' },
    ]);
  });

  it('spans the zones the CLI names (three here), and the app stack imports that many subnets', () => {
    // Environment-agnostic stacks know no zone names, so the CLI passes the region's
    // (https://docs.aws.amazon.com/cdk/v2/guide/configure-env.html).
    const fns = stubFunctionsDir();
    try {
      const built = buildApp({
        manifest: sampleManifest,
        env: 'dev',
        functionsCodeDir: fns.dir,
        artifact: { key: 'a' },
        images: sampleImages,
        availabilityZones: ['eu-west-1a', 'eu-west-1b', 'eu-west-1c'],
      });
      built.app.synth(); // cdk-nag runs here and throws on a finding
      const platformTemplate = Template.fromStack(built.platform);
      const zones = Object.values(platformTemplate.findResources('AWS::EC2::Subnet')).map(
        (subnet) => subnet.Properties.AvailabilityZone,
      );
      expect(zones.sort()).toEqual(['eu-west-1a', 'eu-west-1b', 'eu-west-1c']);
      expect(built.platform.azCount).toBe(3);
      // The app's imported subnet list has three items: Fn::Select index 2 of the import appears.
      const appJson = JSON.stringify(Template.fromStack(built.appStack).toJSON());
      expect(appJson).toContain(
        '{"Fn::Select":[2,{"Fn::Split":[",",{"Fn::ImportValue":"Ferry-PublicSubnetIds"}]}]}',
      );
      expect(appJson).not.toContain('{"Fn::Select":[3,');
    } finally {
      fns.cleanup();
    }
  });

  it('refuses fewer than two named zones, with a hint', () => {
    const fns = stubFunctionsDir();
    try {
      expect(
        () =>
          new PlatformStack(new App(), 'FerryPlatform', {
            functionsCodeDir: fns.dir,
            availabilityZones: ['x-1a'],
          }),
      ).toThrowError(FerryError);
    } finally {
      fns.cleanup();
    }
  });

  it("puts each pool's Auto Scaling group only in the zones that offer one of its types; the VPC and CPU pools keep every zone", () => {
    // A launch in a zone that does not offer the type fails ("Your requested instance type (…) is not
    // supported in your requested Availability Zone (…)"), alarms as a capacity problem and delays the
    // cold start before the group "will attempt to launch in another healthy Availability Zone
    // instead" (https://docs.aws.amazon.com/autoscaling/ec2/APIReference/API_AvailabilityZoneDistribution.html).
    const zones = ['us-west-2a', 'us-west-2b', 'us-west-2c'];
    const offerings = {
      // The g5 pool launches g5.xlarge, then g5.2xlarge, g5.4xlarge (gpu.ts): us-west-2c offers none.
      'g5.xlarge': ['us-west-2a', 'us-west-2d'],
      'g5.2xlarge': ['us-west-2b'],
      'g5.4xlarge': [],
      'm7i.large': ['us-west-2a', 'us-west-2b', 'us-west-2c', 'us-west-2d'],
    };
    const fns = stubFunctionsDir();
    try {
      const stackWith = (more: { gpuWarmPoolSize?: number; offered?: boolean } = {}) =>
        Template.fromStack(
          new PlatformStack(new App(), 'FerryPlatform', {
            functionsCodeDir: fns.dir,
            instanceTypes: ['g5.xlarge', 'm7i.large'],
            availabilityZones: zones,
            ...(more.offered === false ? {} : { instanceTypeZones: offerings }),
            ...(more.gpuWarmPoolSize ? { gpuWarmPoolSize: more.gpuWarmPoolSize } : {}),
          }),
        );
      const asgZones = (placed: Template, pool: string): string[] => {
        const json = placed.toJSON();
        const [asg, ...more] = Object.entries(
          placed.findResources('AWS::AutoScaling::AutoScalingGroup'),
        ).filter(([id]) => id.startsWith(`Pool${pool.replace(/\./g, '')}Asg`));
        expect(asg).toBeDefined();
        expect(more).toHaveLength(0);
        return (asg![1].Properties.VPCZoneIdentifier as Array<{ Ref: string }>)
          .map((subnet) => json.Resources[subnet.Ref].Properties.AvailabilityZone as string)
          .sort();
      };
      const placed = stackWith();
      expect(asgZones(placed, 'g5.xlarge')).toEqual(['us-west-2a', 'us-west-2b']);
      expect(asgZones(placed, 'm7i.large')).toEqual(zones);
      // The VPC (and so the ALBs and the exported subnet list) keeps every zone.
      placed.resourceCountIs('AWS::EC2::Subnet', 3);
      // A warm pool keeps the group to g5.xlarge (PutWarmPool refuses a mixed-instances group).
      expect(asgZones(stackWith({ gpuWarmPoolSize: 1 }), 'g5.xlarge')).toEqual(['us-west-2a']);
      // Offerings not known (offline synth): every zone, as before.
      expect(asgZones(stackWith({ offered: false }), 'g5.xlarge')).toEqual(zones);
      // What the next deploy reads back, within the platform's zones; a plain output, not an export
      // (it changes as pools are added, and an imported export cannot change).
      placed.hasOutput('InstanceTypeZones', {
        Value:
          'g5.2xlarge:us-west-2b;g5.4xlarge:;g5.xlarge:us-west-2a;m7i.large:us-west-2a,us-west-2b,us-west-2c',
      });
      expect(placed.toJSON().Outputs.InstanceTypeZones.Export).toBeUndefined();
      expect(stackWith({ offered: false }).toJSON().Outputs.InstanceTypeZones).toBeUndefined();
    } finally {
      fns.cleanup();
    }
  });

  it("admits into the hosts only the load balancers' group, on the dynamic host ports, with one rule", () => {
    // Bridge mode publishes the agent's port on the ephemeral range (task-layout.ts); the ALBs
    // reach it through the platform's group, so the hosts' group holds one rule however many
    // load-balanced endpoints the account has: a group takes 60 inbound rules by default
    // (https://docs.aws.amazon.com/vpc/latest/userguide/amazon-vpc-limits.html#vpc-limits-security-groups).
    const hosts = template.toJSON().Resources[logicalId(platform.instanceSecurityGroup)];
    expect(hosts.Properties.SecurityGroupIngress).toBeUndefined();
    const hostsId = { 'Fn::GetAtt': [logicalId(platform.instanceSecurityGroup), 'GroupId'] };
    const balancersId = { 'Fn::GetAtt': [logicalId(platform.loadBalancerSecurityGroup), 'GroupId'] };
    const into = (groupId: unknown) =>
      Object.values(template.findResources('AWS::EC2::SecurityGroupIngress'))
        .map((r) => r.Properties)
        .filter((rule) => JSON.stringify(rule.GroupId) === JSON.stringify(groupId));
    expect(into(hostsId)).toEqual([
      {
        GroupId: hostsId,
        SourceSecurityGroupId: balancersId,
        IpProtocol: 'tcp',
        FromPort: ephemeralPorts.from,
        ToPort: ephemeralPorts.to,
        Description: expect.any(String),
      },
    ]);
    // Nothing connects to an ALB through the shared group: no inbound rule, inline or separate.
    const balancers = template.toJSON().Resources[logicalId(platform.loadBalancerSecurityGroup)];
    expect(balancers.Properties.SecurityGroupIngress).toBeUndefined();
    expect(into(balancersId)).toEqual([]);
  });

  it("lets the load balancers' group reach the hosts' dynamic ports and nothing else", () => {
    const balancers = template.toJSON().Resources[logicalId(platform.loadBalancerSecurityGroup)];
    // Inline: a group created with egress rules of its own gets no allow-all rule
    // (https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-ec2-securitygroup.html).
    expect(balancers.Properties.SecurityGroupEgress).toEqual([
      {
        DestinationSecurityGroupId: { 'Fn::GetAtt': [logicalId(platform.instanceSecurityGroup), 'GroupId'] },
        IpProtocol: 'tcp',
        FromPort: ephemeralPorts.from,
        ToPort: ephemeralPorts.to,
        Description: expect.any(String),
      },
    ]);
    const balancersId = JSON.stringify({
      'Fn::GetAtt': [logicalId(platform.loadBalancerSecurityGroup), 'GroupId'],
    });
    const separate = Object.values(template.findResources('AWS::EC2::SecurityGroupEgress')).filter(
      (r) => JSON.stringify(r.Properties.GroupId) === balancersId,
    );
    expect(separate).toEqual([]);
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

  it('sends every method of every path under /v2 and /manage/v1 to the API function, behind the authorizer', () => {
    // The function routes by method and path (core/api.ts, core/manage.ts), as the local server does:
    // an unknown route or method under them is its 404 {"error"}, not API Gateway's 403 for a
    // resource or method it lacks ("Missing Authentication Token", or with an Authorization header
    // a SigV4 complaint quoting the header back).
    const resources = Object.entries(template.findResources('AWS::ApiGateway::Resource'));
    const pathOf = (id: string): string => {
      const resource = resources.find(([logical]) => logical === id)?.[1];
      if (!resource) return '';
      const parent = resource.Properties.ParentId as { Ref?: string };
      return `${parent.Ref ? pathOf(parent.Ref) : ''}/${resource.Properties.PathPart}`;
    };
    const methods = Object.values(template.findResources('AWS::ApiGateway::Method'));
    const routes = methods.map((m) => `${m.Properties.HttpMethod} ${pathOf(m.Properties.ResourceId.Ref)}`);
    expect(routes.sort()).toEqual(['ANY /manage/v1/{proxy+}', 'ANY /v2/{proxy+}']);
    const [first] = methods;
    for (const method of methods) {
      expect(method.Properties.AuthorizationType).toBe('CUSTOM');
      expect(method.Properties.AuthorizerId).toEqual(first!.Properties.AuthorizerId);
      expect(method.Properties.Integration.Type).toBe('AWS_PROXY');
      expect(method.Properties.Integration.Uri).toEqual(first!.Properties.Integration.Uri);
    }
  });

  it('reads the key from the Authorization header in a REQUEST authorizer', () => {
    template.hasResourceProperties('AWS::ApiGateway::Authorizer', {
      Type: 'REQUEST',
      IdentitySource: 'method.request.header.Authorization',
    });
  });

  it('gives up on integrations within 29 s, all into the one api function', () => {
    const methods = Object.values(template.findResources('AWS::ApiGateway::Method'));
    for (const method of methods) {
      expect(method.Properties.Integration.TimeoutInMillis).toBeLessThanOrEqual(29_000);
      expect(JSON.stringify(method.Properties.Integration.Uri)).toContain(logicalId(platform.apiFunction));
    }
    expect(integrationTimeoutSec).toBeLessThanOrEqual(29);
  });

  it('runs the bundles of functions/bundle.ts with the environment functions/wiring.ts parses', () => {
    const fns = {
      api: platform.apiFunction,
      authorizer: platform.authorizerFunction,
      sweeper: platform.sweeperFunction,
      scaler: platform.scalerFunction,
      webhooks: platform.webhookFunction,
    };
    expect(Object.keys(fns).sort()).toEqual(Object.keys(functionEntries).sort());
    for (const [name, fn] of Object.entries(fns)) {
      const props = template.toJSON().Resources[logicalId(fn)].Properties;
      expect(props.Runtime).toBe('nodejs24.x');
      expect(props.Handler).toBe(functionEntries[name as keyof typeof functionEntries]);
      const env = props.Environment.Variables as Record<string, unknown>;
      // Every variable the schema requires (no default, not optional) is set.
      const shape = functionEnvSchema.shape as Record<
        string,
        { safeParse(v: unknown): { success: boolean } }
      >;
      for (const [key, schema] of Object.entries(shape)) {
        if (!schema.safeParse(undefined).success) expect(env[key], `${name} ${key}`).toBeDefined();
      }
      expect(env.FERRY_WORKERS_TABLE).toEqual({ Ref: logicalId(platform.workersTable) });
      expect(env.FERRY_QUEUE_NAME_PREFIX).toBe('ferry-');
      expect(env.FERRY_BLOB_PREFIX).toBe('');
      expect(env.FERRY_WEBHOOK_QUEUE_URL).toEqual({ Ref: logicalId(platform.webhookQueue) });
    }
    const api = template.toJSON().Resources[logicalId(platform.apiFunction)].Properties;
    expect(Number(api.Environment.Variables.FERRY_MAX_WAIT_MS)).toBe(maxWaitMs);
    expect(Number(api.Environment.Variables.FERRY_INTEGRATION_TIMEOUT_MS)).toBe(integrationTimeoutSec * 1000);
    expect(maxWaitMs).toBeLessThan(api.Timeout * 1000);
    expect(api.Timeout).toBeLessThan(integrationTimeoutSec);
  });

  it('answers gateway-made errors in the API error shape: 401 for a missing or unknown key, 403 outside its scope, 404 off the API, 5xx masked', () => {
    const responses = Object.values(template.findResources('AWS::ApiGateway::GatewayResponse')).map(
      (r) =>
        r.Properties as {
          ResponseType: string;
          StatusCode?: string;
          ResponseTemplates: Record<string, string>;
        },
    );
    const byType = (type: string) => responses.filter((r) => r.ResponseType === type);
    // The authorizer threw "Unauthorized" (or the header is missing): the local API's 401.
    expect(byType('UNAUTHORIZED')).toEqual([
      expect.objectContaining({
        StatusCode: '401',
        ResponseTemplates: { 'application/json': JSON.stringify({ error: missingKeyMessage }) },
      }),
    ]);
    // A known key whose policy does not cover the route: the local API's 403.
    expect(byType('ACCESS_DENIED')).toEqual([
      expect.objectContaining({
        StatusCode: '403',
        ResponseTemplates: { 'application/json': JSON.stringify({ error: outOfScopeMessage }) },
      }),
    ]);
    // A path outside /v2 and /manage/v1, which has no resource: 404, none of API Gateway's words.
    expect(byType('MISSING_AUTHENTICATION_TOKEN')).toEqual([
      expect.objectContaining({
        StatusCode: '404',
        ResponseTemplates: { 'application/json': JSON.stringify({ error: noRouteMessage }) },
      }),
    ]);
    // A body whose Lambda event is over 6 MB (under API Gateway's own 10 MB): the uploads route is named.
    expect(byType('REQUEST_TOO_LARGE')).toEqual([
      expect.objectContaining({
        StatusCode: '413',
        ResponseTemplates: { 'application/json': JSON.stringify({ error: inlineBodyTooLargeMessage }) },
      }),
    ]);
    expect(inlineBodyTooLargeMessage).toMatch(/6 MB.*\/uploads.*inputRef/);
    // Every 5xx API Gateway makes (a failed authorizer, an integration timeout, a throttled function):
    // the API's own 5xx shape with the request id the function logs, not `{"error": null}`.
    const [fiveHundreds] = byType('DEFAULT_5XX');
    const body = fiveHundreds!.ResponseTemplates['application/json']!;
    expect(JSON.parse(body.replace('$context.requestId', 'r-1'))).toEqual({
      error: 'internal error',
      requestId: 'r-1',
    });
  });
});

const arnOf = (construct: { node: { defaultChild?: unknown } }) =>
  JSON.stringify({ 'Fn::GetAtt': [logicalId(construct), 'Arn'] });

/**
 * The statements on the workers table allow UpdateItem, only on `<workerId>#stop` items: a Lambda can
 * bump an agent's stop signal (core/adapters/aws/stop-signals.ts) but not rewrite a worker's record.
 */
function expectOnlyStopSignals(statements: ReturnType<typeof statementsOf>): void {
  const onWorkers = statements.filter((st) =>
    JSON.stringify(st.Resource).includes(logicalId(platform.workersTable)),
  );
  expect(onWorkers).toHaveLength(1);
  expect(onWorkers[0]!.Action).toBe('dynamodb:UpdateItem');
  expect(onWorkers[0]!.Resource).toEqual(JSON.parse(arnOf(platform.workersTable)));
  expect(onWorkers[0]!.Condition).toEqual({
    'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': ['*#stop'] },
  });
  // The pattern matches signal items and no worker record (workerIds never contain '#').
  expect(stopSignalKey('ep1-abc')).toMatch(/^.*#stop$/);
  expect('ep1-abc').not.toMatch(/^.*#stop$/);
}

describe('least privilege', () => {
  it('lets the authorizer only GetItem KEY# items of the control table', () => {
    const statements = statementsOf(template, platform.authorizerFunction.role!);
    // A scoped key's policy lists no endpoints (functions/authorizer.ts allowedResources): no Query.
    expect(actionsOf(statements)).toEqual(['dynamodb:GetItem']);
    expect(resourcesFor(statements, 'dynamodb:GetItem')).toEqual([arnOf(platform.controlTable)]);
    expect(statements[0]!.Condition).toEqual({
      'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': ['KEY#*'] },
    });
    // The condition fences off every other kind of control record (DynamoControlStore's pk formats).
    for (const other of ['APP#demo', 'ENV#demo#dev', 'EP#abc', 'KEYID#k1']) {
      expect(/^KEY#.*$/.test(other)).toBe(false);
    }
    expect(dynamoSchema.control.partitionKey).toEqual({ name: 'pk', type: 'S' });
  });

  it('gives the api function the tables, indexes, queues and payloads its routes use, no more', () => {
    const statements = statementsOf(template, platform.apiFunction.role!);
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
      // Final-status webhooks (a cancel's, a purge's) are handed to the webhook queue.
      JSON.stringify({ 'Fn::GetAtt': [logicalId(platform.webhookQueue), 'Arn'] }),
    ]);
    expect(actionsOf(statements)).toContain('sqs:GetQueueUrl');
    for (const action of ['s3:GetObject', 's3:PutObject']) {
      const resources = resourcesFor(statements, action);
      expect(resources).toHaveLength(1);
      expect(resources[0]).toContain(`/${payloadsPrefix}*`);
    }
    expect(resourcesFor(statements, 'dynamodb:PutItem')).toEqual([arnOf(platform.jobsTable)]);
    // Lists read the jobs their keys-only index found by key; transitions ADD to count items.
    expect(resourcesFor(statements, 'dynamodb:BatchGetItem')).toEqual([arnOf(platform.jobsTable)]);
    expect(resourcesFor(statements, 'dynamodb:UpdateItem')).toContain(arnOf(platform.jobsTable));
    const queries = resourcesFor(statements, 'dynamodb:Query').join('\n');
    expect(queries).toContain('/index/byEndpointStatus');
    // health: the count items and the current bucket's expired jobs.
    expect(queries).toContain('/index/byEndpointExpiry');
    expect(queries).toContain('/index/byEndpoint"');
    expect(queries).not.toContain('index/*');
    // Control: reads only.
    const onControl = statements.filter((s) =>
      JSON.stringify(s.Resource).includes(logicalId(platform.controlTable)),
    );
    // GetItem, and Query on byKind for the management API's endpoint list.
    expect(actionsOf(onControl)).toEqual(['dynamodb:GetItem', 'dynamodb:Query']);
    expect(actionsOf(statements)).not.toContain('dynamodb:DeleteItem');
    expect(actionsOf(statements)).not.toContain('sqs:ReceiveMessage');
    // A cancel signals the holder's agent; the workers' records themselves stay out of reach.
    expectOnlyStopSignals(statements.filter((st) => !JSON.stringify(st.Resource).includes('/index/')));
  });

  it('lets the sweeper query the overdue and expiry indexes, delete jobs, and send to queues', () => {
    const statements = statementsOf(template, platform.sweeperFunction.role!);
    const queries = resourcesFor(statements, 'dynamodb:Query').join('\n');
    expect(queries).toContain(`/index/${dynamoSchema.jobs.indexes.byStatusOverdue.indexName}`);
    expect(queries).toContain(`/index/${dynamoSchema.jobs.indexes.byStatusExpiry.indexName}`);
    expect(resourcesFor(statements, 'dynamodb:DeleteItem')).toEqual([arnOf(platform.jobsTable)]);
    expect(actionsOf(statements)).toContain('sqs:SendMessage');
    // Dead letters are counted, read and deleted; waiting jobs found per endpoint (functions/sweeper.ts).
    expect(actionsOf(statements)).toEqual(
      expect.arrayContaining(['sqs:GetQueueAttributes', 'sqs:ReceiveMessage', 'sqs:DeleteMessage']),
    );
    expect(queries).toContain(`/index/${dynamoSchema.jobs.indexes.byEndpointStatus.indexName}`);
    // Of the control table the kind index (which endpoints exist) and, of its items, only the STARTS#
    // ones (an endpoint whose workers cannot start: its queued jobs end FAILED); no endpoint or key.
    const control = statements.filter((st) =>
      JSON.stringify(st.Resource).includes(logicalId(platform.controlTable)),
    );
    expect(control.flatMap((st) => [st.Action].flat()).sort()).toEqual([
      'dynamodb:GetItem',
      'dynamodb:Query',
    ]);
    expect(JSON.stringify(control.find((st) => st.Action === 'dynamodb:Query'))).toContain(
      `/index/${dynamoSchema.control.indexes.byKind.indexName}`,
    );
    expect(control.find((st) => st.Action === 'dynamodb:GetItem')?.Condition).toEqual({
      'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': ['STARTS#*'] },
      Null: { 'dynamodb:LeadingKeys': 'false' },
    });
    // Of the workers table: the byEndpoint index (a requeue nudges the scaler unless the endpoint
    // has live workers, which it reads first), and otherwise only stop-signal items, to stop the jobs
    // the sweep ended or requeued.
    const readsWorkerIndex = (st: (typeof statements)[number]) =>
      st.Action === 'dynamodb:Query' &&
      JSON.stringify(st.Resource).includes(logicalId(platform.workersTable));
    expect(statements.filter(readsWorkerIndex).map((st) => JSON.stringify(st.Resource))).toEqual([
      expect.stringContaining(`"/index/${dynamoSchema.workers.indexes.byEndpoint.indexName}"`),
    ]);
    expectOnlyStopSignals(statements.filter((st) => !readsWorkerIndex(st)));
  });

  it('lets the scaler only describe and update Ferry services, and read what the policy needs', () => {
    const statements = statementsOf(template, platform.scalerFunction.role!);
    const ecsActions = actionsOf(statements).filter((a) => a.startsWith('ecs:'));
    expect(ecsActions.sort()).toEqual([
      'ecs:DescribeServices',
      'ecs:DescribeTasks',
      'ecs:ListTasks',
      'ecs:UpdateService',
    ]);
    // Tasks are only read (a woken load-balanced endpoint's booting tasks), on the Ferry cluster.
    expect(resourcesFor(statements, 'ecs:DescribeTasks').join()).toContain(':task/ferry/*');
    const list = statements.find((s) => s.Action === 'ecs:ListTasks')!;
    expect(JSON.stringify(list.Condition)).toContain(':cluster/ferry');
    const services = JSON.stringify([
      'arn:',
      { Ref: 'AWS::Partition' },
      ':ecs:',
      { Ref: 'AWS::Region' },
      ':',
      { Ref: 'AWS::AccountId' },
      ':service/ferry/ferry-*',
    ]);
    for (const action of ['ecs:DescribeServices', 'ecs:UpdateService']) {
      expect(resourcesFor(statements, action)).toEqual([
        JSON.stringify({ 'Fn::Join': ['', JSON.parse(services)] }),
      ]);
    }
    // CloudWatch may invoke it for wake-up alarms of this account, all of them in one statement.
    const wake = Object.values(template.findResources('AWS::Lambda::Permission')).filter(
      (p) => p.Properties.Principal === 'lambda.alarms.cloudwatch.amazonaws.com',
    );
    expect(wake).toHaveLength(1);
    expect(wake[0]!.Properties).toMatchObject({
      Action: 'lambda:InvokeFunction',
      SourceAccount: { Ref: 'AWS::AccountId' },
    });
    expect(JSON.stringify(wake[0]!.Properties.SourceArn)).toContain(':alarm:ferry-wake-*');
    // Of CloudWatch, the wake-up alarms' states only (functions/scaler.ts turnedAwayOf).
    expect(actionsOf(statements).filter((a) => a.startsWith('cloudwatch:'))).toEqual([
      'cloudwatch:DescribeAlarms',
    ]);
    expect(resourcesFor(statements, 'cloudwatch:DescribeAlarms').join()).toContain(':alarm:ferry-wake-*');
    // Reads only, but for a task that could not start (functions/scaler.ts recordTaskStartFailure):
    // UpdateItem of STARTS# items of the control table. No job, chunk or payload access, no other
    // write of a table, no message sent. Of the jobs table, the count items on byEndpointExpiry only
    // (how many jobs are IN_QUEUE at most).
    const all = actionsOf(statements);
    for (const write of ['dynamodb:PutItem', 'dynamodb:DeleteItem', 'sqs:SendMessage']) {
      expect(all).not.toContain(write);
    }
    const updates = statements.filter((st) => [st.Action].flat().includes('dynamodb:UpdateItem'));
    expect(updates).toHaveLength(1);
    expect(JSON.stringify(updates[0]!.Resource)).toContain(logicalId(platform.controlTable));
    expect(updates[0]!.Condition).toEqual({
      'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': ['STARTS#*'] },
      Null: { 'dynamodb:LeadingKeys': 'false' },
    });
    expect(all.filter((a) => a.startsWith('s3:'))).toEqual([]);
    const onJobs = statements.filter((st) => JSON.stringify(st).includes(logicalId(platform.jobsTable)));
    expect(onJobs).toHaveLength(1);
    expect(actionsOf(onJobs)).toEqual(['dynamodb:Query']);
    expect(JSON.stringify(onJobs[0]!.Resource)).toContain(
      `/index/${dynamoSchema.jobs.indexes.byEndpointExpiry.indexName}`,
    );
    expect(onJobs[0]!.Condition).toEqual({
      'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': ['*#COUNTS'] },
      Null: { 'dynamodb:LeadingKeys': 'false' },
    });
    expect(JSON.stringify(statements)).not.toContain(logicalId(platform.chunksTable));
    expect(resourcesFor(statements, 'dynamodb:Query').join('\n')).toContain(
      `/index/${dynamoSchema.workers.indexes.byEndpoint.indexName}`,
    );
    expect(all).toContain('sqs:GetQueueAttributes');
  });

  it('lets the api and the sweeper invoke the scaler function itself, nothing else of Lambda', () => {
    for (const fn of [platform.apiFunction, platform.sweeperFunction]) {
      const statements = statementsOf(template, fn.role!);
      expect(resourcesFor(statements, 'lambda:InvokeFunction')).toEqual([
        JSON.stringify({ 'Fn::GetAtt': [logicalId(platform.scalerFunction), 'Arn'] }),
      ]);
    }
    const authorizer = statementsOf(template, platform.authorizerFunction.role!);
    expect(actionsOf(authorizer)).not.toContain('lambda:InvokeFunction');
  });

  it('never grants a wildcard action, nor Resource "*" but for ListTasks fenced to the Ferry cluster', () => {
    for (const fn of [
      platform.apiFunction,
      platform.authorizerFunction,
      platform.sweeperFunction,
      platform.scalerFunction,
    ]) {
      const statements = statementsOf(template, fn.role!);
      for (const action of actionsOf(statements)) expect(action).not.toContain('*');
      for (const s of statements.filter((st) => st.Resource === '*')) {
        // ECS authorizes ListTasks on the cluster through its ecs:cluster condition key, as AWS's own
        // "list and describe tasks" policy example does.
        expect(s.Action).toBe('ecs:ListTasks');
        expect(JSON.stringify(s.Condition)).toContain(':cluster/ferry');
      }
    }
  });
});

describe('outputs', () => {
  it('names what the CLI reads', () => {
    const outputs = Object.keys(template.toJSON().Outputs);
    for (const name of [
      'ApiUrl',
      'BucketName',
      'ClusterName',
      'JobsTableName',
      'ChunksTableName',
      'ControlTableName',
      'WorkersTableName',
    ]) {
      expect(outputs).toContain(name);
    }
    template.hasOutput('WorkersTableName', { Value: { Ref: logicalId(platform.workersTable) } });
  });

  it('exports what app stacks import under fixed names (platform-exports.ts), one per pool too', () => {
    template.hasOutput('JobsTableName', {
      Value: { Ref: logicalId(platform.jobsTable) },
      Export: { Name: platformExportNames.jobsTableName },
    });
    template.hasOutput('ControlTableArn', {
      Value: { 'Fn::GetAtt': [logicalId(platform.controlTable), 'Arn'] },
      Export: { Name: platformExportNames.controlTableArn },
    });
    template.hasOutput('BucketName', {
      Value: { Ref: logicalId(platform.bucket) },
      Export: { Name: 'Ferry-BucketName' },
    });
    template.hasOutput('ClusterName', {
      Value: { Ref: logicalId(platform.cluster) },
      Export: { Name: 'Ferry-ClusterName' },
    });
    // Literal: app stacks import it, and CloudFormation refuses to change or delete an export in use.
    template.hasOutput('LoadBalancerSecurityGroupId', {
      Value: { 'Fn::GetAtt': [logicalId(platform.loadBalancerSecurityGroup), 'GroupId'] },
      Export: { Name: 'Ferry-LoadBalancerSecurityGroupId' },
    });
    const pool = template.toJSON().Outputs.Poolg5xlargeCapacityProvider;
    expect(pool.Export).toEqual({ Name: 'Ferry-Pool-g5-xlarge-CapacityProvider' });
    const providers = Object.keys(template.findResources('AWS::ECS::CapacityProvider'));
    expect(providers).toContain(pool.Value.Ref);
    expect(pool.Value.Ref).toMatch(/^Poolg5xlarge/);
    const exported = Object.values(template.toJSON().Outputs as Record<string, { Export?: { Name: string } }>)
      .flatMap((o) => (o.Export ? [o.Export.Name] : []))
      .sort();
    expect(exported).toEqual(
      [
        ...Object.values(platformExportNames),
        poolExportName('g5.xlarge'),
        poolExportName('m7i.large'),
      ].sort(),
    );
    // Subnet lists are as long as app stacks import them (Fn.importListValue needs the length).
    const subnets = template.toJSON().Outputs.PublicSubnetIds.Value['Fn::Join'][1];
    expect(subnets).toHaveLength(platformAzCount);
  });

  it('lists its pools in a plain InstanceTypes output (it grows, so it is not exported)', () => {
    template.hasOutput('InstanceTypes', { Value: 'g5.xlarge,m7i.large' });
    expect(template.toJSON().Outputs.InstanceTypes.Export).toBeUndefined();
  });
});

describe('webhooks (core/adapters/aws/webhook-queue.ts)', () => {
  const resourceOf = (construct: { node: { defaultChild?: unknown } }) =>
    template.toJSON().Resources[logicalId(construct)];

  it('feed the webhook function from their queue, which gives back only the records it lists', () => {
    const fn = resourceOf(platform.webhookFunction).Properties;
    expect(fn.Handler).toBe(functionEntries.webhooks);
    expect(fn.Timeout).toBe(webhookTiming.functionTimeoutSec);
    template.hasResourceProperties('AWS::Lambda::EventSourceMapping', {
      EventSourceArn: { 'Fn::GetAtt': [logicalId(platform.webhookQueue), 'Arn'] },
      FunctionName: { Ref: logicalId(platform.webhookFunction) },
      BatchSize: 10,
      FunctionResponseTypes: ['ReportBatchItemFailures'],
      ScalingConfig: { MaximumConcurrency: webhookTiming.maxConcurrency },
    });
    template.resourceCountIs('AWS::Lambda::EventSourceMapping', 1);
  });

  it("keep a message invisible for six times the function's timeout, dead-letter it after five receives, and are encrypted", () => {
    const queue = resourceOf(platform.webhookQueue).Properties;
    // https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-configure.html
    expect(queue.VisibilityTimeout).toBe(6 * resourceOf(platform.webhookFunction).Properties.Timeout);
    expect(queue.RedrivePolicy).toEqual({
      deadLetterTargetArn: { 'Fn::GetAtt': [logicalId(platform.webhookDeadLetters), 'Arn'] },
      maxReceiveCount: 5,
    });
    expect(queue.SqsManagedSseEnabled).toBe(true);
    // Not under the endpoint queues' prefix: the `ferry-*` grants of the api and sweeper miss it.
    expect(queue.QueueName).toBeUndefined();
    template.hasResourceProperties('AWS::CloudWatch::Alarm', {
      MetricName: 'ApproximateNumberOfMessagesVisible',
      Dimensions: [
        { Name: 'QueueName', Value: { 'Fn::GetAtt': [logicalId(platform.webhookDeadLetters), 'QueueName'] } },
      ],
    });
  });

  it('let the webhook function reach its queue and the bodies under payloads/webhooks/ (and list key names), no table', () => {
    const statements = statementsOf(template, platform.webhookFunction.role!);
    const actions = actionsOf(statements);
    expect(actions.filter((a) => a.startsWith('dynamodb:'))).toEqual([]);
    expect(actions.filter((a) => a.startsWith('s3:')).sort()).toEqual([
      's3:DeleteObject',
      's3:GetObject',
      's3:ListBucket',
    ]);
    // Listing (key names) on the bucket itself, so that a body already gone reads as 404, not 403.
    expect(resourcesFor(statements, 's3:ListBucket')).toEqual([
      JSON.stringify({ 'Fn::GetAtt': [logicalId(platform.bucket), 'Arn'] }),
    ]);
    expect(resourcesFor(statements, 's3:GetObject')).toEqual([
      expect.stringContaining(`/${payloadsPrefix}webhooks/*`),
    ]);
    for (const action of ['sqs:ReceiveMessage', 'sqs:DeleteMessage', 'sqs:SendMessage']) {
      expect(resourcesFor(statements, action)).toEqual([
        JSON.stringify({ 'Fn::GetAtt': [logicalId(platform.webhookQueue), 'Arn'] }),
      ]);
    }
  });

  it('are handed over by the api and the sweeper, which may send to the webhook queue', () => {
    for (const fn of [platform.apiFunction, platform.sweeperFunction]) {
      const statements = statementsOf(template, fn.role!);
      expect(resourcesFor(statements, 'sqs:SendMessage')).toContain(
        JSON.stringify({ 'Fn::GetAtt': [logicalId(platform.webhookQueue), 'Arn'] }),
      );
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

  it('runs the scaler every minute, under the fixed name app stacks point wake-up alarms at', () => {
    template.hasResourceProperties('AWS::Events::Rule', {
      ScheduleExpression: 'rate(1 minute)',
      Targets: [Match.objectLike({ Arn: { 'Fn::GetAtt': [logicalId(platform.scalerFunction), 'Arn'] } })],
    });
    const scaler = template.toJSON().Resources[logicalId(platform.scalerFunction)].Properties;
    expect(scaler.FunctionName).toBe('ferry-scaler');
    expect(scaler.Environment.Variables).toMatchObject({
      FERRY_CLUSTER: 'ferry',
      FERRY_SERVICE_NAME_PREFIX: 'ferry-',
    });
    const api = template.toJSON().Resources[logicalId(platform.apiFunction)].Properties;
    expect(api.Environment.Variables.FERRY_SCALER_FUNCTION).toBe('ferry-scaler');
  });

  it('does not let Lambda retry a failed sweep or scaler run beside the next scheduled one, nor keep a throttled one', () => {
    // Lambda retries a failed asynchronous invoke twice by default, and keeps a throttled one for up
    // to 6 hours (https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-error-handling.html);
    // the schedules' RetryPolicy is EventBridge's and covers only failures to invoke.
    for (const fn of [platform.sweeperFunction, platform.scalerFunction]) {
      template.hasResourceProperties('AWS::Lambda::EventInvokeConfig', {
        FunctionName: { Ref: logicalId(fn) },
        MaximumRetryAttempts: 0,
        MaximumEventAgeInSeconds: 60,
      });
    }
  });

  it('alarms on API 5xx and on sweeper and scaler errors', () => {
    template.hasResourceProperties('AWS::CloudWatch::Alarm', {
      MetricName: '5XXError',
      Namespace: 'AWS/ApiGateway',
    });
    // The scaler fails its run when an endpoint could not be scaled (functions/scaler.ts).
    for (const fn of [platform.sweeperFunction, platform.scalerFunction]) {
      template.hasResourceProperties('AWS::CloudWatch::Alarm', {
        MetricName: 'Errors',
        Dimensions: [{ Name: 'FunctionName', Value: { Ref: logicalId(fn) } }],
      });
    }
    template.resourceCountIs('AWS::CloudWatch::Dashboard', 1);
  });

  it('CloudWatch may publish this account’s alarms to the topic: its policy replaced the default one', () => {
    // Without it: "Resource: arn:aws:cloudwatch:...:alarm:ALARM_NAME is not authorized to perform:
    // SNS:Publish" (https://repost.aws/knowledge-center/cloudwatch-receive-sns-for-alarm-trigger).
    const topic = { Ref: logicalId(platform.alarms.topic) };
    const policies = Object.values(template.findResources('AWS::SNS::TopicPolicy')).filter((p) =>
      JSON.stringify(p.Properties.Topics).includes(JSON.stringify(topic)),
    );
    expect(policies).toHaveLength(1);
    const statements = policies[0]!.Properties.PolicyDocument.Statement as Array<Record<string, any>>;
    const alarms = statements.filter((st) => st.Principal?.Service === 'cloudwatch.amazonaws.com');
    expect(alarms).toEqual([
      expect.objectContaining({
        Effect: 'Allow',
        Action: 'sns:Publish',
        Resource: topic,
        Condition: {
          ArnLike: {
            'aws:SourceArn': {
              'Fn::Join': [
                '',
                [
                  'arn:',
                  { Ref: 'AWS::Partition' },
                  ':cloudwatch:',
                  { Ref: 'AWS::Region' },
                  ':',
                  { Ref: 'AWS::AccountId' },
                  ':alarm:*',
                ],
              ],
            },
          },
        },
      }),
    ]);
    // Every alarm of the platform acts on that topic (the app stacks' DLQ alarms import it).
    const actions = Object.values(template.findResources('AWS::CloudWatch::Alarm')).flatMap(
      (a) => a.Properties.AlarmActions ?? [],
    );
    expect(actions.length).toBeGreaterThan(0);
    for (const action of actions) expect(action).toEqual(topic);
  });

  it('the platform dashboard finds every app queue by its name token, and graphs every function’s errors', () => {
    const [dashboard] = Object.values(template.findResources('AWS::CloudWatch::Dashboard'));
    const body = JSON.stringify(dashboard!.Properties.DashboardBody);
    // A quoted value is an exact match: "ferry-" matched no queue.
    expect(body).not.toContain('QueueName=\\"ferry-\\"');
    expect(body).toContain('QueueName=ferry NOT QueueName=dlq');
    expect(body).toContain('QueueName=ferry QueueName=dlq');
    for (const fn of [
      platform.apiFunction,
      platform.authorizerFunction,
      platform.sweeperFunction,
      platform.scalerFunction,
      platform.webhookFunction,
    ])
      expect(body).toContain(logicalId(fn));
  });
});

describe('ECS hosts keep the instance metadata service from tasks (docs/security-aws.md)', () => {
  it('require IMDSv2 with a hop limit of 1 on every launch template', () => {
    const templates = Object.values(template.findResources('AWS::EC2::LaunchTemplate'));
    expect(templates.length).toBeGreaterThan(0);
    for (const lt of templates) {
      expect(lt.Properties.LaunchTemplateData.MetadataOptions).toMatchObject({
        HttpTokens: 'required',
        HttpPutResponseHopLimit: 1,
      });
    }
  });

  it('set ECS_AWSVPC_BLOCK_IMDS=true in every host ecs.config', () => {
    const templates = Object.values(template.findResources('AWS::EC2::LaunchTemplate'));
    for (const lt of templates) {
      expect(JSON.stringify(lt.Properties.LaunchTemplateData.UserData)).toContain(
        'echo ECS_AWSVPC_BLOCK_IMDS=true >> /etc/ecs/ecs.config',
      );
    }
  });

  // "prefer-cached: ... Automated image cleanup is turned off for the container to ensure that the
  // cached image isn't removed"; "once: ... pulled remotely only if it wasn't pulled by a previous task
  // on the same container instance or if the cached image was removed by the automated image cleanup
  // process" (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/pull-behavior.html).
  it('reuse a pulled image but leave image cleanup on, so old worker images do not fill the disk', () => {
    for (const lt of Object.values(template.findResources('AWS::EC2::LaunchTemplate'))) {
      const userData = JSON.stringify(lt.Properties.LaunchTemplateData.UserData);
      expect(userData).toContain('echo ECS_IMAGE_PULL_BEHAVIOR=once >> /etc/ecs/ecs.config');
      expect(userData).not.toContain('prefer-cached');
      // Nothing turns the agent's image cleanup off either.
      expect(userData).not.toContain('ECS_DISABLE_IMAGE_CLEANUP');
    }
  });

  it("pull the worker's image while the artifact downloads, not after (every host ecs.config)", () => {
    for (const lt of Object.values(template.findResources('AWS::EC2::LaunchTemplate'))) {
      expect(JSON.stringify(lt.Properties.LaunchTemplateData.UserData)).toContain(
        'echo ECS_PULL_DEPENDENT_CONTAINERS_UPFRONT=true >> /etc/ecs/ecs.config',
      );
    }
  });
});

/**
 * A launch template's user data as [the text before the first intrinsic (the MIME head and parts for a
 * multipart), the shell script part's own text with the cluster reference left as an empty string].
 */
function userDataParts(launchTemplate: unknown): [string, string] {
  const userData = (launchTemplate as { Properties: { LaunchTemplateData: { UserData: unknown } } })
    .Properties.LaunchTemplateData.UserData as { 'Fn::Base64': { 'Fn::Join': [string, unknown[]] } };
  const [head, script] = userData['Fn::Base64']['Fn::Join'][1] as [
    string,
    { 'Fn::Base64': { 'Fn::Join': [string, unknown[]] } },
  ];
  const scriptText = script['Fn::Base64']['Fn::Join'][1]
    .map((piece) => (typeof piece === 'string' ? piece : ''))
    .join('');
  return [head, scriptText];
}
