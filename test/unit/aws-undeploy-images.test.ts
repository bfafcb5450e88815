/**
 * Removing some of an environment's endpoints deploys its stack again without them
 * (cli/providers/aws.ts destroy): with the images the environment's last deploy saved on its record
 * (cli/providers/aws/records.ts), looked up in the platform's ECR registry but never built there, and
 * without the shared platform stack. ECR (DescribeImages) and CodeBuild are injected stand-ins that
 * record the calls; the synth is real (through the recording fake toolkit) and the records live in
 * DynamoDB Local. The remover's shell names no image settings, as on a teammate's machine or in CI.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { DescribeImagesCommand, DescribeImagesCommandOutput } from '@aws-sdk/client-ecr';
import { describe, expect, it } from 'vitest';
import { ferryVersion } from '../../cli/config.js';
import type { AwsEnvironmentRecord } from '../../cli/providers/aws/records.js';
import type { Ec2Like } from '../../cli/providers/aws/zones.js';
import type { CodeBuildLike, EcrLike } from '../../cli/providers/aws-images.js';
import {
  type FakeToolkitState,
  RecordingToolkit,
  type StackOutputs,
  type SynthesizedAssembly,
  type ToolkitEventHandler,
} from '../../cli/providers/toolkit.js';
import { FerryError } from '../../core/errors.js';
import { platformStackName } from '../../infra/names.js';
import { agentImage, baseImageFor, imageContentHashes } from '../../worker-image/images.js';
import { cpuEndpoint, gpuEndpoint, sampleManifest } from '../infra/fixtures.js';
import { awsError, awsProviderHarness, deployedRecord, offeringsOnlyEc2 } from '../support/aws-provider.js';

const registry = '123456789012.dkr.ecr.us-east-1.amazonaws.com';

/** ECR's DescribeImages: every tag is there until `gone` says none is (ImageNotFoundException). */
class FakeEcr implements EcrLike {
  gone = false;
  readonly asked: string[] = [];
  async send(command: DescribeImagesCommand): Promise<DescribeImagesCommandOutput> {
    const tag = command.input.imageIds?.[0]?.imageTag;
    this.asked.push(`${command.input.repositoryName}:${tag}`);
    if (this.gone) {
      throw awsError('ImageNotFoundException', `The image with imageId {imageTag:'${tag}'} does not exist`);
    }
    return {
      imageDetails: [{ repositoryName: command.input.repositoryName, imageTags: [tag!] }],
      $metadata: {},
    };
  }
}

/** CodeBuild that records each call and refuses it: nothing here may start a build. */
function refusingCodeBuild(calls: unknown[]): CodeBuildLike {
  return {
    send: async (command: unknown) => {
      calls.push(command);
      throw awsError('AccessDeniedException', 'this test starts no image build');
    },
  } as unknown as CodeBuildLike;
}

/** EC2 is asked only which zones offer the pools (the platform names its zones; no endpoint is behind CloudFront). */
const noEc2: Ec2Like = offeringsOnlyEc2(['us-east-1a', 'us-east-1b']);

/** CloudFormation refusing the app stack as it does when an import has no export. */
class NoExportToolkit extends RecordingToolkit {
  override async deploy(
    _assembly: SynthesizedAssembly,
    stackNames: readonly string[],
    _onEvent: ToolkitEventHandler,
  ): Promise<Record<string, StackOutputs>> {
    throw new FerryError(
      'failed',
      `Deploying of ${stackNames.join(', ')} failed: No export named Ferry-WebhookQueueUrl found`,
    );
  }
}

describe('undeploy on AWS: the saved images, never a build (real synth, fake CloudFormation)', () => {
  const lines: string[] = [];
  const reporter = { line: (text: string) => lines.push(text) } as never;
  const app = 'imgs';
  const env = 'production';
  const cpu = deployedRecord(app, env, cpuEndpoint);
  const gpu = deployedRecord(app, env, gpuEndpoint);
  const ecr = new FakeEcr();
  const builds: unknown[] = [];

  const harness = awsProviderHarness({ region: 'us-east-1', reporter, scratchPrefix: 'ferry-undeploy-' });
  // No FERRY_AWS_IMAGE_REGISTRY: the platform's own registry, which builds missing tags on deploy.
  const provider = (toolkit = new RecordingToolkit(harness.stateFile)) =>
    harness.provider(noEc2, toolkit, {
      env: { FERRY_AWS_IMAGE_REGISTRY: undefined },
      ecr,
      codebuild: refusingCodeBuild(builds),
    });
  const state = () => JSON.parse(readFileSync(harness.stateFile, 'utf8')) as FakeToolkitState;

  /**
   * The environment's record as the deploy in `deployed` left it: that deploy runs once per file, and
   * each later test starts from this record again (a test may rewrite it; the removals fail, so the
   * endpoints' records and the stacks stay as deployed, which each test asserts).
   */
  let deployedEnvironment: AwsEnvironmentRecord | undefined;

  /** The platform deployed, with its ECR registry and image build project, and the environment's two endpoints. */
  async function deployed(): Promise<void> {
    ecr.gone = false;
    if (deployedEnvironment !== undefined) {
      await provider().control.putEnvironment(deployedEnvironment);
      return;
    }
    const s = state();
    s.platformOutputs = {
      ...s.platformOutputs,
      ImageRegistry: registry,
      ImageBuildProject: 'ferry-images',
      AvailabilityZones: 'us-east-1a,us-east-1b',
    };
    s.stacks[platformStackName] = s.platformOutputs;
    writeFileSync(harness.stateFile, JSON.stringify(s));
    const p = provider();
    await p.control.putEnvironment({ app, name: env, createdAt: 1 });
    await p.provision([cpu, gpu], { app, env, all: [cpu, gpu], reporter });
    deployedEnvironment = (await p.control.getEnvironment(app, env)) as AwsEnvironmentRecord;
    await p.close();
  }

  it('a saved image gone from ECR stops the removal with the fix: no build, no deploy, the endpoint kept', async () => {
    await deployed();
    const saved = (await provider().control.getEnvironment(app, env)) as AwsEnvironmentRecord;
    // The platform registry's tags name the images' content: the deploy bundled the agent in this install.
    const content = imageContentHashes(
      path.resolve(import.meta.dirname, '../..'),
      ferryVersion(),
      sampleManifest.pythonVersion,
    );
    expect(saved.aws?.images.agent).toBe(`${registry}/${agentImage(ferryVersion(), content)}`);
    expect(saved.aws?.images.agent).not.toBe(`${registry}/${agentImage(ferryVersion())}`);
    ecr.gone = true;
    ecr.asked.length = 0;
    const calls = state().calls.length;
    const result = await provider().destroy([cpu]);
    expect(result.deleted).toEqual([]);
    expect(result.failed).toHaveLength(1);
    expect(result.failed[0]!.error).toContain(`no longer in ${registry}`);
    expect(result.failed[0]!.hint).toContain('never builds images');
    // The images gpu_worker, which stays, runs on: its worker base and the agent.
    expect(ecr.asked.sort()).toEqual(
      [
        agentImage(ferryVersion(), content),
        baseImageFor('gpu', ferryVersion(), sampleManifest.pythonVersion, content),
      ].sort(),
    );
    expect(builds).toEqual([]);
    expect(state().calls).toHaveLength(calls);
    expect((await provider().control.listEndpoints({ app, env })).map((r) => r.name).sort()).toEqual([
      'cpu_worker',
      'gpu_worker',
    ]);
  }, 240_000);

  it('a record from before the settings were saved: warns what it reads, and still builds nothing', async () => {
    await deployed();
    const p = provider();
    const { aws: _saved, ...earlier } = (await p.control.getEnvironment(app, env)) as AwsEnvironmentRecord;
    await p.control.putEnvironment(earlier);
    ecr.gone = true;
    lines.length = 0;
    const calls = state().calls.length;
    const result = await p.destroy([cpu]);
    expect(lines.join('\n')).toContain(`warning: ${app}/${env} has no saved deploy settings`);
    expect(lines.join('\n')).toContain('FERRY_AWS_DOMAIN');
    expect(result.failed).toHaveLength(1);
    expect(result.failed[0]!.hint).toContain('never builds images');
    expect(builds).toEqual([]);
    expect(state().calls).toHaveLength(calls);
  }, 240_000);

  it('an app stack the older platform lacks an export for: the hint says how on', async () => {
    await deployed();
    const result = await provider(new NoExportToolkit(harness.stateFile)).destroy([cpu]);
    expect(result.failed).toHaveLength(1);
    expect(result.failed[0]!.error).toContain('No export named');
    expect(result.failed[0]!.hint).toContain(`The ${platformStackName} stack is older than this Ferry`);
  }, 240_000);
});
