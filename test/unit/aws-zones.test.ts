/**
 * The platform VPC's availability zones (cli/providers/aws/zones.ts): the first deploy asks EC2
 * (DescribeAvailabilityZones, https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeAvailabilityZones.html)
 * and the zones reach the synthesized platform template; later deploys keep the deployed platform's
 * zones even when EC2 lists more; `refreshZones` moves to the region's list; a failed call is a clear
 * error. EC2 is an injected stand-in that records the exact SDK commands; the synth is real (through
 * the recording fake toolkit) and the records live in DynamoDB Local.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import {
  type AvailabilityZone,
  DescribeAvailabilityZonesCommand,
  type DescribeAvailabilityZonesCommandOutput,
} from '@aws-sdk/client-ec2';
import { describe, expect, it } from 'vitest';
import { type Ec2Like, platformZones, regionZones } from '../../cli/providers/aws/zones.js';
import {
  type FakeToolkitState,
  RecordingToolkit,
  type StackOutputs,
  type SynthesizedAssembly,
  type ToolkitEventHandler,
} from '../../cli/providers/toolkit.js';
import { exitCode, FerryError } from '../../core/errors.js';
import type { Manifest } from '../../core/manifest.js';
import { platformStackName } from '../../infra/names.js';
import { cpuEndpoint, sampleManifest } from '../infra/fixtures.js';
import { awsError, awsProviderHarness, deployedRecord } from '../support/aws-provider.js';

const zone = (name: string, over: Partial<AvailabilityZone> = {}): AvailabilityZone => ({
  ZoneName: name,
  ZoneType: 'availability-zone',
  State: 'available',
  OptInStatus: 'opt-in-not-required',
  ...over,
});

/** What us-west-2 may answer: three zones, a Local Zone, a Wavelength Zone, and oddities. */
const threeZones: AvailabilityZone[] = [
  zone('us-west-2c'),
  zone('us-west-2a'),
  zone('us-west-2-lax-1a', { ZoneType: 'local-zone', OptInStatus: 'opted-in' }),
  zone('us-west-2-wl1-sea-wlz-1', { ZoneType: 'wavelength-zone', OptInStatus: 'opted-in' }),
  zone('us-west-2-den-1a', { ZoneType: 'local-zone', OptInStatus: 'not-opted-in' }),
  zone('us-west-2b'),
  zone('us-west-2e', { State: 'impaired' }),
];

class FakeEc2 implements Ec2Like {
  readonly calls: DescribeAvailabilityZonesCommand[] = [];
  constructor(public zones: AvailabilityZone[] | Error) {}
  async send(command: DescribeAvailabilityZonesCommand): Promise<DescribeAvailabilityZonesCommandOutput> {
    this.calls.push(command);
    if (this.zones instanceof Error) throw this.zones;
    return { AvailabilityZones: this.zones, $metadata: {} };
  }
}

const lines: string[] = [];
const reporter = { line: (text: string) => lines.push(text) } as never;

describe('the region zones', () => {
  it('lists available, regular Availability Zones only, sorted, with one DescribeAvailabilityZones call', async () => {
    const ec2 = new FakeEc2(threeZones);
    expect(await regionZones(ec2)).toEqual(['us-west-2a', 'us-west-2b', 'us-west-2c']);
    expect(ec2.calls).toHaveLength(1);
    expect(ec2.calls[0]).toBeInstanceOf(DescribeAvailabilityZonesCommand);
    // Only the zones enabled for the account: AllAvailabilityZones is not asked for.
    expect(ec2.calls[0]!.input.AllAvailabilityZones).toBeUndefined();
  });

  it('a permission error is the user’s to fix: exit 2, with the IAM action in the hint', async () => {
    const ec2 = new FakeEc2(
      awsError('UnauthorizedOperation', 'You are not authorized to perform this operation.'),
    );
    const error = await regionZones(ec2).catch((e: unknown) => e);
    expect(FerryError.is(error)).toBe(true);
    expect((error as FerryError).code).toBe('usage');
    expect(exitCode(error)).toBe(2);
    expect((error as FerryError).message).toContain('DescribeAvailabilityZones');
    expect((error as FerryError).message).toContain('not authorized');
    expect((error as FerryError).hint).toContain('ec2:DescribeAvailabilityZones');
  });

  it('any other failure says what failed, exit 1', async () => {
    const error = await regionZones(new FakeEc2(awsError('RequestLimitExceeded', 'Rate exceeded'))).catch(
      (e: unknown) => e,
    );
    expect((error as FerryError).code).toBe('failed');
    expect(exitCode(error)).toBe(1);
    expect((error as FerryError).message).toContain('Rate exceeded');
  });

  it('no usable zone at all is an error, not an empty list', async () => {
    const error = await regionZones(new FakeEc2([zone('x-1a', { State: 'unavailable' })])).catch(
      (e: unknown) => e,
    );
    expect((error as FerryError).message).toContain('no available Availability Zone');
  });
});

describe('which zones a deploy synthesizes with', () => {
  const deployed = { ApiUrl: 'u', BucketName: 'b', ControlTableName: 'c' };

  it('keeps the deployed platform’s zones and does not ask EC2', async () => {
    const ec2 = new FakeEc2([...threeZones, zone('us-west-2d')]);
    const zones = await platformZones({
      ec2,
      deployed: { ...deployed, AvailabilityZones: 'us-west-2a,us-west-2b' },
      reporter,
    });
    expect(zones).toEqual(['us-west-2a', 'us-west-2b']);
    expect(ec2.calls).toHaveLength(0);
  });

  it('asks EC2 when the platform is new, or names no zones, or on refresh', async () => {
    const ec2 = new FakeEc2(threeZones);
    expect(await platformZones({ ec2, reporter })).toEqual(['us-west-2a', 'us-west-2b', 'us-west-2c']);
    expect(await platformZones({ ec2, deployed, reporter })).toEqual([
      'us-west-2a',
      'us-west-2b',
      'us-west-2c',
    ]);
    lines.length = 0;
    expect(
      await platformZones({
        ec2,
        deployed: { ...deployed, AvailabilityZones: 'us-west-2a,us-west-2b' },
        refresh: true,
        reporter,
      }),
    ).toEqual(['us-west-2a', 'us-west-2b', 'us-west-2c']);
    expect(ec2.calls).toHaveLength(3);
    expect(lines.join('\n')).toContain(
      'changing us-west-2a, us-west-2b → us-west-2a, us-west-2b, us-west-2c',
    );
  });

  it('names none without an EC2 client (offline): CDK’s default applies', async () => {
    expect(await platformZones({ reporter })).toBeUndefined();
  });
});

/**
 * The recording fake toolkit, plus what CloudFormation would report: a deployed stack's outputs
 * include every output whose template value is a plain string (with named zones, the platform's
 * `AvailabilityZones` is one). Keeps each deploy's platform template.
 */
class CapturingToolkit extends RecordingToolkit {
  readonly platformTemplates: Array<Record<string, unknown>> = [];
  constructor(private readonly stateFile: string) {
    super(stateFile);
  }
  override async deploy(
    assembly: SynthesizedAssembly,
    stackNames: readonly string[],
    onEvent: ToolkitEventHandler,
  ): Promise<Record<string, StackOutputs>> {
    const outputs = await super.deploy(assembly, stackNames, onEvent);
    if (!stackNames.includes(platformStackName)) return outputs;
    const template = assembly.template(platformStackName);
    this.platformTemplates.push(template);
    const literal: StackOutputs = {};
    for (const [id, output] of Object.entries(
      (template.Outputs ?? {}) as Record<string, { Value: unknown }>,
    )) {
      if (typeof output.Value === 'string') literal[id] = output.Value;
    }
    const state = JSON.parse(readFileSync(this.stateFile, 'utf8')) as FakeToolkitState;
    state.stacks[platformStackName] = { ...state.stacks[platformStackName], ...literal };
    writeFileSync(this.stateFile, JSON.stringify(state));
    return { ...outputs, [platformStackName]: { ...outputs[platformStackName], ...literal } };
  }
}

const subnetZones = (template: Record<string, unknown>): unknown[] =>
  Object.values(template.Resources as Record<string, { Type: string; Properties: Record<string, unknown> }>)
    .filter((r) => r.Type === 'AWS::EC2::Subnet')
    .map((r) => r.Properties.AvailabilityZone)
    .sort();

describe('ferry deploy --provider aws: zones of the platform VPC (real synth, fake CloudFormation)', () => {
  const app = 'zones';
  const env = 'production';
  const manifest: Manifest = { ...sampleManifest, app, endpoints: [cpuEndpoint] };
  const record = deployedRecord(app, env, cpuEndpoint);

  const harness = awsProviderHarness({ region: 'us-west-2', reporter, scratchPrefix: 'ferry-zones-' });
  const providerWith = (ec2: FakeEc2, toolkit: CapturingToolkit, extra: { refreshZones?: boolean } = {}) =>
    harness.provider(ec2, toolkit, extra);

  it('a DescribeAvailabilityZones permission error stops the first deploy before anything is deployed', async () => {
    const toolkit = new CapturingToolkit(harness.stateFile);
    const ec2 = new FakeEc2(
      awsError('UnauthorizedOperation', 'You are not authorized to perform this operation.'),
    );
    const error = await providerWith(ec2, toolkit)
      .prepare({ manifest, env, reporter })
      .catch((e: unknown) => e);
    expect(exitCode(error)).toBe(2);
    expect((error as FerryError).hint).toContain('ec2:DescribeAvailabilityZones');
    expect(toolkit.platformTemplates).toHaveLength(0);
  }, 240_000);

  it('first deploy: the platform subnets lie in the zones EC2 lists', async () => {
    const toolkit = new CapturingToolkit(harness.stateFile);
    const ec2 = new FakeEc2(threeZones);
    await providerWith(ec2, toolkit).prepare({ manifest, env, reporter });
    expect(ec2.calls).toHaveLength(1);
    expect(toolkit.platformTemplates).toHaveLength(1);
    const template = toolkit.platformTemplates[0]!;
    expect(subnetZones(template)).toEqual(['us-west-2a', 'us-west-2b', 'us-west-2c']);
    // What later deploys read back: the platform's output names the zones as a plain string.
    expect((template.Outputs as Record<string, { Value: unknown }>).AvailabilityZones?.Value).toBe(
      'us-west-2a,us-west-2b,us-west-2c',
    );
  }, 240_000);

  it('a later deploy keeps those zones although EC2 now lists a fourth', async () => {
    const toolkit = new CapturingToolkit(harness.stateFile);
    const ec2 = new FakeEc2([...threeZones, zone('us-west-2d')]);
    const provider = providerWith(ec2, toolkit);
    await provider.prepare({ manifest, env, reporter });
    await provider.provision([record], { app, env, all: [record], reporter });
    expect(ec2.calls).toHaveLength(0);
    expect(toolkit.platformTemplates).toHaveLength(1);
    expect(subnetZones(toolkit.platformTemplates[0]!)).toEqual(['us-west-2a', 'us-west-2b', 'us-west-2c']);
  }, 240_000);

  it('--refresh-zones moves the platform to the region’s current zones', async () => {
    const toolkit = new CapturingToolkit(harness.stateFile);
    const ec2 = new FakeEc2([...threeZones, zone('us-west-2d')]);
    const provider = providerWith(ec2, toolkit, { refreshZones: true });
    await provider.prepare({ manifest, env, reporter });
    await provider.provision([record], { app, env, all: [record], reporter });
    expect(ec2.calls).toHaveLength(1);
    expect(subnetZones(toolkit.platformTemplates[0]!)).toEqual([
      'us-west-2a',
      'us-west-2b',
      'us-west-2c',
      'us-west-2d',
    ]);
  }, 240_000);
});
