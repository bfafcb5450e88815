/**
 * An AwsProvider as `ferry deploy --provider aws` builds it, for tests of what a deploy asks AWS
 * before it deploys (EC2's zones and prefix lists, CloudFormation's stack events): its records in
 * DynamoDB Local and S3 through the emulators, CloudFormation played by a recording fake toolkit (its
 * state file says the platform is deployed) or a given lookup, and EC2 (and ECR, CodeBuild) injected
 * stand-ins. The synth is real.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import {
  type _InstanceType,
  DescribeInstanceTypeOfferingsCommand,
  type DescribeInstanceTypeOfferingsCommandOutput,
} from '@aws-sdk/client-ec2';
import { afterAll, beforeAll } from 'vitest';
import type { Reporter } from '../../cli/io.js';
import type { Ec2Like } from '../../cli/providers/aws/zones.js';
import { AwsProvider, type AwsProviderOptions } from '../../cli/providers/aws.js';
import type { FakeToolkitState, RecordingToolkit, StackLookup } from '../../cli/providers/toolkit.js';
import { MemoryCallTokens } from '../../core/adapters/aws/secrets.js';
import type { ManifestEndpoint } from '../../core/manifest.js';
import type { EndpointRecord } from '../../core/ports.js';
import { endpointIdFor } from '../../infra/names.js';
import { sampleManifest } from '../infra/fixtures.js';
import { type AwsFixture, startAwsFixture } from './emulators.js';

/**
 * EC2's DescribeInstanceTypeOfferings answer that offers every type the command's `instance-type`
 * filter names in each of `zones`, on one page: for fakes of tests that are not about which zones
 * offer a type (aws/zones.ts asks it when the platform has not recorded a pool's offerings).
 */
export function offeredEverywhere(
  command: DescribeInstanceTypeOfferingsCommand,
  zones: readonly string[],
): DescribeInstanceTypeOfferingsCommandOutput {
  const types = command.input.Filters?.find((f) => f.Name === 'instance-type')?.Values ?? [];
  return {
    InstanceTypeOfferings: types.flatMap((type) =>
      zones.map((zone) => ({
        InstanceType: type as _InstanceType,
        LocationType: 'availability-zone' as const,
        Location: zone,
      })),
    ),
    $metadata: {},
  };
}

/**
 * EC2 answering a deploy's zone questions for a region with `zones`, all available and offering
 * every type: DescribeAvailabilityZones and DescribeInstanceTypeOfferings (aws/zones.ts).
 */
export function zonesEc2(zones: readonly string[]): Ec2Like {
  return {
    send: async (command: unknown) =>
      command instanceof DescribeInstanceTypeOfferingsCommand
        ? offeredEverywhere(command, zones)
        : {
            AvailabilityZones: zones.map((ZoneName) => ({
              ZoneName,
              ZoneType: 'availability-zone',
              State: 'available',
              OptInStatus: 'opt-in-not-required',
            })),
          },
  } as unknown as Ec2Like;
}

/**
 * EC2 asked only which zones offer the pools' types (answered: all of `zones`); any other call
 * throws: the platform names its zones and no endpoint sits behind CloudFront.
 */
export function offeringsOnlyEc2(zones: readonly string[]): Ec2Like {
  return {
    send: async (command: unknown) => {
      if (command instanceof DescribeInstanceTypeOfferingsCommand) return offeredEverywhere(command, zones);
      throw new Error(`EC2 was asked: ${(command as object).constructor.name}`);
    },
  } as unknown as Ec2Like;
}

/** An error as the AWS SDK throws it: its `name` is the service's error code. */
export function awsError(name: string, message: string): Error {
  return Object.assign(new Error(message), { name });
}

/** The record a deploy of `endpoint` (of the sample manifest) to `app`/`env` leaves. */
export function deployedRecord(app: string, env: string, endpoint: ManifestEndpoint): EndpointRecord {
  return {
    id: endpointIdFor(app, env, endpoint.name),
    app,
    env,
    name: endpoint.name,
    kind: endpoint.kind,
    config: { endpoint, pythonVersion: sampleManifest.pythonVersion },
    fingerprint: sampleManifest.sourceFingerprint,
    artifactKey: `artifacts/${app}/${env}/x.tar.gz`,
    createdAt: 1,
    updatedAt: 1,
  };
}

export interface AwsProviderHarness {
  /** The recording toolkit's state file (its stacks, and the calls it was asked). */
  readonly stateFile: string;
  /** A provider in `region` over the fixture; `env` adds to its environment; `lookup` default: `toolkit`. */
  provider(
    ec2: Ec2Like,
    toolkit: RecordingToolkit,
    more?: { env?: NodeJS.ProcessEnv; lookup?: StackLookup } & Pick<
      AwsProviderOptions,
      'refreshZones' | 'clock' | 'ecr' | 'codebuild'
    >,
  ): AwsProvider;
}

/**
 * Starts the emulators and a scratch project before the describe's tests and ends both after them;
 * call it in the describe's body.
 */
export function awsProviderHarness(options: {
  region: string;
  reporter: Reporter;
  /** Names the scratch folder, so a leftover one says which test left it. */
  scratchPrefix: string;
}): AwsProviderHarness {
  let fixture: AwsFixture | undefined;
  let root = '';
  let stateFile = '';
  beforeAll(async () => {
    fixture = await startAwsFixture();
    root = mkdtempSync(path.join(tmpdir(), options.scratchPrefix));
    stateFile = path.join(root, 'fake-toolkit.json');
    const initial: FakeToolkitState = {
      stacks: {},
      platformOutputs: {
        ApiUrl: `https://abc123.execute-api.${options.region}.amazonaws.com/api/v2`,
        BucketName: fixture.bucket,
        ControlTableName: fixture.tables.control,
      },
      calls: [],
    };
    writeFileSync(stateFile, JSON.stringify(initial));
  }, 180_000);
  afterAll(async () => {
    await fixture?.stop();
    if (root) rmSync(root, { recursive: true, force: true });
  });
  return {
    get stateFile() {
      return stateFile;
    },
    provider(ec2, toolkit, more = {}) {
      if (!fixture) throw new Error('awsProviderHarness: the provider is for tests, after beforeAll');
      return new AwsProvider({
        env: {
          FERRY_AWS_IMAGE_REGISTRY: `123456789012.dkr.ecr.${options.region}.amazonaws.com`,
          ...more.env,
        },
        projectDir: root,
        stateDir: path.join(root, '.ferry'),
        reporter: options.reporter,
        toolkit,
        lookup: more.lookup ?? toolkit,
        clients: { doc: fixture.doc, s3: fixture.s3, close: () => {} },
        callTokens: new MemoryCallTokens(),
        ec2,
        refreshZones: more.refreshZones,
        ...(more.clock ? { clock: more.clock } : {}),
        ...(more.ecr ? { ecr: more.ecr } : {}),
        ...(more.codebuild ? { codebuild: more.codebuild } : {}),
      });
    },
  };
}
