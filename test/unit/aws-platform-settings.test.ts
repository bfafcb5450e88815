/**
 * The shared FerryPlatform stack across deployers (cli/providers/aws/platform.ts): a deploy keeps the
 * platform-wide settings the deployed platform says it was built with (its outputs, infra/
 * platform-settings.ts) unless the deployer's shell sets one; a Ferry older than the one that last
 * deployed the platform refuses to deploy it; and a stack stuck in UPDATE_ROLLBACK_FAILED is refused
 * with the command that unblocks it (cli/providers/aws-account.ts). CloudFormation is the recording
 * fake toolkit, the synth is real, the records live in DynamoDB Local.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ferryVersion } from '../../cli/config.js';
import { compareVersions } from '../../cli/providers/aws/platform.js';
import type { Ec2Like } from '../../cli/providers/aws/zones.js';
import { type FakeToolkitState, RecordingToolkit, type StackOutputs } from '../../cli/providers/toolkit.js';
import { exitCode, FerryError } from '../../core/errors.js';
import { isGpuInstanceType } from '../../infra/gpu.js';
import { platformStackName } from '../../infra/names.js';
import { cpuEndpoint, gpuEndpoint, sampleManifest } from '../infra/fixtures.js';
import { awsProviderHarness, deployedRecord, offeringsOnlyEc2 } from '../support/aws-provider.js';

/** EC2 is asked only which zones offer the pools (the platform names its zones; no endpoint is behind CloudFront). */
const noEc2: Ec2Like = offeringsOnlyEc2(['us-east-1a', 'us-east-1b']);

type Resources = Record<string, { Type: string; Properties: Record<string, unknown> }>;

describe('the shared platform across deployers (real synth, fake CloudFormation)', () => {
  const lines: string[] = [];
  const reporter = { line: (text: string) => lines.push(text) } as never;
  const app = 'plat';
  const env = 'production';
  const cpu = deployedRecord(app, env, cpuEndpoint);
  const gpu = deployedRecord(app, env, gpuEndpoint);
  const harness = awsProviderHarness({ region: 'us-east-1', reporter, scratchPrefix: 'ferry-platform-' });
  const provider = (shell: NodeJS.ProcessEnv = {}) =>
    harness.provider(noEc2, new RecordingToolkit(harness.stateFile), { env: shell });
  const state = () => JSON.parse(readFileSync(harness.stateFile, 'utf8')) as FakeToolkitState;
  const editState = (edit: (s: FakeToolkitState) => void) => {
    const s = state();
    edit(s);
    writeFileSync(harness.stateFile, JSON.stringify(s));
  };
  const deploys = (since: number) => state().calls.slice(since);

  /** The platform as deployed, with these outputs besides the ones the CLI needs. */
  function platformDeployedWith(outputs: StackOutputs): void {
    editState((s) => {
      s.platformOutputs = {
        ApiUrl: s.platformOutputs.ApiUrl!,
        BucketName: s.platformOutputs.BucketName!,
        ControlTableName: s.platformOutputs.ControlTableName!,
        AvailabilityZones: 'us-east-1a,us-east-1b',
        ...outputs,
      };
      s.stacks[platformStackName] = s.platformOutputs;
      delete s.statuses;
    });
  }

  /** A deploy of the environment as `ferry deploy` runs it (prepare, then provision). */
  async function deploy(shell: NodeJS.ProcessEnv = {}): Promise<void> {
    const p = provider(shell);
    try {
      await p.prepare({ manifest: sampleManifest, env, reporter });
      await p.control.putEnvironment({ app, name: env, createdAt: 1 });
      await p.provision([cpu, gpu], { app, env, all: [cpu, gpu], reporter });
    } finally {
      await p.close();
    }
  }

  /**
   * What the last synth built the platform with: its integration timeouts, warm pools, the scale-out
   * steps of its GPU and CPU pools (MinimumScalingStepSize; absent: ECS's 1) and its outputs.
   */
  function platformTemplate() {
    const dir = path.join(path.dirname(harness.stateFile), '.ferry', 'cdk.out');
    const template = JSON.parse(
      readFileSync(path.join(dir, `${platformStackName}.template.json`), 'utf8'),
    ) as {
      Resources: Resources;
      Outputs: Record<string, { Value: unknown }>;
    };
    const resources = Object.values(template.Resources);
    const timeouts = new Set(
      resources
        .filter((r) => r.Type === 'AWS::ApiGateway::Method')
        .map((r) => (r.Properties.Integration as { TimeoutInMillis?: number } | undefined)?.TimeoutInMillis)
        .filter((t) => t !== undefined),
    );
    const warmPools = resources
      .filter((r) => r.Type === 'AWS::AutoScaling::WarmPool')
      .map((r) => r.Properties.MinSize);
    const outputs = Object.fromEntries(Object.entries(template.Outputs).map(([k, v]) => [k, v.Value]));
    const steps = { gpu: new Set<unknown>(), cpu: new Set<unknown>() };
    for (const pool of String(outputs.InstanceTypes).split(',')) {
      const provider = Object.entries(template.Resources).find(
        ([id, r]) =>
          r.Type === 'AWS::ECS::CapacityProvider' && id.startsWith(`Pool${pool.replace(/\./g, '')}Provider`),
      )![1];
      const scaling = (
        provider.Properties.AutoScalingGroupProvider as { ManagedScaling: Record<string, unknown> }
      ).ManagedScaling;
      steps[isGpuInstanceType(pool) ? 'gpu' : 'cpu'].add(scaling.MinimumScalingStepSize);
    }
    return {
      timeouts: [...timeouts],
      warmPools,
      steps: { gpu: [...steps.gpu], cpu: [...steps.cpu] },
      outputs,
    };
  }

  it('keeps the deployed platform-wide settings when the shell sets none', async () => {
    platformDeployedWith({
      IntegrationTimeoutSec: '120',
      GpuWarmPoolSize: '2',
      GpuScaleOutStep: '4',
      FerryVersion: ferryVersion(),
    });
    lines.length = 0;
    await deploy();
    const built = platformTemplate();
    expect(built.timeouts).toEqual([120_000]);
    expect(built.warmPools.length).toBeGreaterThan(0);
    expect(new Set(built.warmPools)).toEqual(new Set([2]));
    expect(built.steps).toEqual({ gpu: [4], cpu: [undefined] });
    // The platform says what it was built with, for the next deploy.
    expect(built.outputs).toMatchObject({
      IntegrationTimeoutSec: '120',
      GpuWarmPoolSize: '2',
      GpuScaleOutStep: '4',
      FerryVersion: ferryVersion(),
    });
    expect(lines.join('\n')).not.toContain('changes from');
  }, 240_000);

  it("takes the shell's value when it sets one, and says what changes", async () => {
    platformDeployedWith({
      IntegrationTimeoutSec: '120',
      GpuWarmPoolSize: '2',
      GpuScaleOutStep: '4',
      FerryVersion: ferryVersion(),
    });
    lines.length = 0;
    await deploy({
      FERRY_AWS_INTEGRATION_TIMEOUT_SEC: '60',
      FERRY_AWS_GPU_WARM_POOL_SIZE: '0',
      FERRY_AWS_GPU_SCALE_OUT_STEP: '1',
    });
    const built = platformTemplate();
    expect(built.timeouts).toEqual([60_000]);
    expect(built.warmPools).toEqual([]);
    expect(built.steps).toEqual({ gpu: [undefined], cpu: [undefined] });
    expect(built.outputs).toMatchObject({
      IntegrationTimeoutSec: '60',
      GpuWarmPoolSize: '0',
      GpuScaleOutStep: '1',
    });
    const said = lines.join('\n');
    expect(said).toContain(
      "FERRY_AWS_INTEGRATION_TIMEOUT_SEC=60: the platform's integration timeout (s) changes from 120 to 60",
    );
    expect(said).toContain(
      "FERRY_AWS_GPU_WARM_POOL_SIZE=0: the platform's GPU warm pool size changes from 2 to 0",
    );
    expect(said).toContain(
      "FERRY_AWS_GPU_SCALE_OUT_STEP=1: the platform's GPU scale-out step changes from 4 to 1, for every app in this account and region",
    );
  }, 240_000);

  it('gives the warm pool a CLI route: FERRY_AWS_GPU_WARM_POOL_SIZE on a platform without one', async () => {
    platformDeployedWith({ FerryVersion: ferryVersion() });
    await deploy({ FERRY_AWS_GPU_WARM_POOL_SIZE: '1' });
    expect(new Set(platformTemplate().warmPools)).toEqual(new Set([1]));
    const bad = await deploy({ FERRY_AWS_GPU_WARM_POOL_SIZE: 'lots' }).catch((e: unknown) => e);
    expect(exitCode(bad)).toBe(2);
    expect((bad as FerryError).message).toContain('FERRY_AWS_GPU_WARM_POOL_SIZE must be a whole number');
  }, 240_000);

  it('gives the scale-out step the same route: FERRY_AWS_GPU_SCALE_OUT_STEP, kept by later deploys, checked', async () => {
    platformDeployedWith({ FerryVersion: ferryVersion() });
    lines.length = 0;
    await deploy({ FERRY_AWS_GPU_SCALE_OUT_STEP: '3' });
    let built = platformTemplate();
    expect(built.steps).toEqual({ gpu: [3], cpu: [undefined] });
    expect(built.outputs).toMatchObject({ GpuScaleOutStep: '3' });
    // A platform without the output had ECS's default, 1: the change is said.
    expect(lines.join('\n')).toContain(
      "FERRY_AWS_GPU_SCALE_OUT_STEP=3: the platform's GPU scale-out step changes from 1 to 3",
    );
    // The next deploy, from a shell without the variable, keeps it.
    platformDeployedWith({ FerryVersion: ferryVersion(), GpuScaleOutStep: '3' });
    await deploy();
    built = platformTemplate();
    expect(built.steps).toEqual({ gpu: [3], cpu: [undefined] });
    for (const value of ['0', '2.5', 'lots', '1e3', '10001']) {
      const bad = await deploy({ FERRY_AWS_GPU_SCALE_OUT_STEP: value }).catch((e: unknown) => e);
      expect(exitCode(bad), value).toBe(2);
      expect((bad as FerryError).message).toBe(
        `FERRY_AWS_GPU_SCALE_OUT_STEP must be a whole number from 1 to 10000, got "${value}"`,
      );
      expect((bad as FerryError).hint).toContain('Leave it unset (the platform keeps its step)');
    }
  }, 240_000);

  it('an older platform without the outputs: its timeout from RunsyncMaxWaitMs, kept', async () => {
    // integrationTiming: the wait is the timeout less 4 s, below RunPod's 90 s.
    platformDeployedWith({ RunsyncMaxWaitMs: '56000' });
    await deploy();
    expect(platformTemplate().timeouts).toEqual([60_000]);
  }, 240_000);

  it('refuses (exit 2, nothing deployed) to deploy a platform a newer Ferry deployed', async () => {
    platformDeployedWith({ FerryVersion: '999.0.0' });
    const since = state().calls.length;
    const error = await deploy().catch((e: unknown) => e);
    expect(FerryError.is(error)).toBe(true);
    expect(exitCode(error)).toBe(2);
    expect((error as FerryError).message).toContain(
      `FerryPlatform was deployed by Ferry 999.0.0, newer than this Ferry ${ferryVersion()}`,
    );
    expect((error as FerryError).hint).toContain('Upgrade Ferry');
    expect(deploys(since)).toEqual([]);
  }, 240_000);

  it('deploys over a platform of the same or an older Ferry, or one that does not say', async () => {
    for (const version of [ferryVersion(), '0.0.1', undefined]) {
      platformDeployedWith(version ? { FerryVersion: version } : {});
      const since = state().calls.length;
      await deploy();
      const calls = deploys(since);
      expect(calls.map((c) => c.op)).toEqual(['deploy']);
      expect(calls[0]!.stacks[0]).toBe(platformStackName);
    }
  }, 240_000);

  it('refuses (exit 2, nothing deployed) a platform in UPDATE_ROLLBACK_FAILED, with the command and the resources to skip', async () => {
    platformDeployedWith({ FerryVersion: ferryVersion() });
    editState((s) => {
      s.statuses = { [platformStackName]: 'UPDATE_ROLLBACK_FAILED' };
      s.rollbackFailures = {
        [platformStackName]: [
          { logicalId: 'ApiFunction', type: 'AWS::Lambda::Function', reason: 'Resource not found' },
          { logicalId: 'Bucket', type: 'AWS::S3::Bucket', reason: 'Access Denied' },
        ],
      };
    });
    const since = state().calls.length;
    const error = await deploy().catch((e: unknown) => e);
    expect(exitCode(error)).toBe(2);
    const { message, hint } = error as FerryError;
    expect(message).toContain('Stack FerryPlatform is in UPDATE_ROLLBACK_FAILED');
    expect(message).toContain('ApiFunction (AWS::Lambda::Function): Resource not found');
    expect(hint).toContain('`aws cloudformation continue-update-rollback --stack-name FerryPlatform`');
    expect(hint).toContain(
      '`aws cloudformation continue-update-rollback --stack-name FerryPlatform --resources-to-skip ApiFunction Bucket`',
    );
    expect(deploys(since)).toEqual([]);
  }, 240_000);

  it('refuses an app stack in UPDATE_ROLLBACK_FAILED the same way (no events: the command alone)', async () => {
    platformDeployedWith({ FerryVersion: ferryVersion() });
    await deploy();
    const stack = state().calls.at(-1)!.stacks[1]!;
    editState((s) => {
      s.statuses = { [stack]: 'UPDATE_ROLLBACK_FAILED' };
      delete s.rollbackFailures;
    });
    const since = state().calls.length;
    const error = await deploy().catch((e: unknown) => e);
    expect(exitCode(error)).toBe(2);
    expect((error as FerryError).hint).toContain(
      `\`aws cloudformation continue-update-rollback --stack-name ${stack}\``,
    );
    expect((error as FerryError).hint).not.toContain('--resources-to-skip');
    expect(deploys(since)).toEqual([]);
  }, 240_000);
});

describe('compareVersions (semver precedence)', () => {
  it('orders versions as semver does, and knows no version from garbage', () => {
    const ordered = [
      '0.1.0',
      '0.1.1',
      '0.2.0-alpha',
      '0.2.0-alpha.1',
      '0.2.0-alpha.beta',
      '0.2.0-beta.2',
      '0.2.0-beta.11',
      '0.2.0',
      '1.0.0',
      '10.0.0',
    ];
    for (let i = 0; i + 1 < ordered.length; i++) {
      expect(compareVersions(ordered[i]!, ordered[i + 1]!), `${ordered[i]} < ${ordered[i + 1]}`).toBeLessThan(
        0,
      );
      expect(compareVersions(ordered[i + 1]!, ordered[i]!)).toBeGreaterThan(0);
    }
    expect(compareVersions('1.2.3', '1.2.3+build.5')).toBe(0);
    expect(compareVersions('1.2', '1.2.3')).toBeUndefined();
  });
});
