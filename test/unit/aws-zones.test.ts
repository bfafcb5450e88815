/**
 * The platform VPC's availability zones (cli/providers/aws/zones.ts): the first deploy asks EC2
 * (DescribeAvailabilityZones, https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeAvailabilityZones.html)
 * and the zones reach the synthesized platform template; later deploys keep the deployed platform's
 * zones even when EC2 lists more; `refreshZones` moves to the region's list; a failed call is a clear
 * error. Each pool's Auto Scaling group gets only the zones that offer one of its instance types
 * (DescribeInstanceTypeOfferings,
 * https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeInstanceTypeOfferings.html), and
 * a new pool no zone of the platform offers is refused. EC2 is an injected stand-in that records the exact SDK commands; the synth is real (through
 * the recording fake toolkit) and the records live in DynamoDB Local.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import {
  type AvailabilityZone,
  DescribeAvailabilityZonesCommand,
  type DescribeAvailabilityZonesCommandOutput,
  DescribeInstanceTypeOfferingsCommand,
  type DescribeInstanceTypeOfferingsCommandOutput,
  type InstanceTypeOffering,
} from '@aws-sdk/client-ec2';
import { describe, expect, it } from 'vitest';
import {
  type Ec2Like,
  instanceTypeOfferings,
  platformZones,
  poolOfferings,
  regionZones,
} from '../../cli/providers/aws/zones.js';
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

/** Which zones offer a type; default: every regular, available zone the fake lists. */
type Offered = (instanceType: string) => readonly string[];

/**
 * EC2 for the zone calls: DescribeAvailabilityZones, and DescribeInstanceTypeOfferings answered from
 * `offered` for the types its `instance-type` filter names, `pageSize` offerings a page (NextToken is
 * the index of the next page's first offering).
 */
class FakeEc2 implements Ec2Like {
  readonly calls: Array<DescribeAvailabilityZonesCommand | DescribeInstanceTypeOfferingsCommand> = [];
  constructor(
    public zones: AvailabilityZone[] | Error,
    public offered: Offered | Error = () =>
      this.zones instanceof Error
        ? []
        : this.zones.filter((zone) => zone.ZoneType === 'availability-zone').map((zone) => zone.ZoneName!),
    readonly pageSize = 2,
  ) {}
  send(command: DescribeAvailabilityZonesCommand): Promise<DescribeAvailabilityZonesCommandOutput>;
  send(command: DescribeInstanceTypeOfferingsCommand): Promise<DescribeInstanceTypeOfferingsCommandOutput>;
  async send(
    command: DescribeAvailabilityZonesCommand | DescribeInstanceTypeOfferingsCommand,
  ): Promise<DescribeAvailabilityZonesCommandOutput | DescribeInstanceTypeOfferingsCommandOutput> {
    this.calls.push(command);
    if (command instanceof DescribeInstanceTypeOfferingsCommand) {
      if (this.offered instanceof Error) throw this.offered;
      const offered = this.offered;
      const types = command.input.Filters?.find((f) => f.Name === 'instance-type')?.Values ?? [];
      const all: InstanceTypeOffering[] = types.flatMap((type) =>
        offered(type).map((zone) => ({
          InstanceType: type as InstanceTypeOffering['InstanceType'],
          LocationType: 'availability-zone' as const,
          Location: zone,
        })),
      );
      const start = Number(command.input.NextToken ?? 0);
      const end = start + this.pageSize;
      return {
        InstanceTypeOfferings: all.slice(start, end),
        ...(end < all.length ? { NextToken: String(end) } : {}),
        $metadata: {},
      };
    }
    if (this.zones instanceof Error) throw this.zones;
    return { AvailabilityZones: this.zones, $metadata: {} };
  }
  zoneCalls(): DescribeAvailabilityZonesCommand[] {
    return this.calls.filter((c) => c instanceof DescribeAvailabilityZonesCommand);
  }
  offeringCalls(): DescribeInstanceTypeOfferingsCommand[] {
    return this.calls.filter((c) => c instanceof DescribeInstanceTypeOfferingsCommand);
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
    expect(ec2.zoneCalls()[0]!.input.AllAvailabilityZones).toBeUndefined();
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

describe('the zones that offer each pool’s instance types', () => {
  const platform = ['us-west-2a', 'us-west-2b', 'us-west-2c'];
  /**
   * g5 is offered in two of the three zones, p5 only in a fourth the platform does not span, p4d
   * nowhere, the rest everywhere.
   */
  const offered: Offered = (type) => {
    if (type.startsWith('g5.')) return ['us-west-2a', 'us-west-2b'];
    if (type.startsWith('p5.')) return ['us-west-2d'];
    if (type.startsWith('p4d.')) return [];
    return [...platform, 'us-west-2d'];
  };
  const deployed = { ApiUrl: 'u', BucketName: 'b', ControlTableName: 'c' };

  it('asks DescribeInstanceTypeOfferings by availability zone for the types, page by page', async () => {
    const ec2 = new FakeEc2(threeZones, offered, 2);
    const answer = await instanceTypeOfferings(ec2, ['g5.xlarge', 'm7i.large', 'p4d.24xlarge']);
    expect(answer).toEqual({
      'g5.xlarge': ['us-west-2a', 'us-west-2b'],
      'm7i.large': ['us-west-2a', 'us-west-2b', 'us-west-2c', 'us-west-2d'],
      // A type EC2 lists nowhere is still in the answer: offered in no zone.
      'p4d.24xlarge': [],
    });
    // Six offerings, two a page: three calls, each after the first with the previous page's token.
    const calls = ec2.offeringCalls();
    expect(calls).toHaveLength(3);
    expect(calls.map((c) => c.input.NextToken)).toEqual([undefined, '2', '4']);
    for (const call of calls) {
      expect(call.input.LocationType).toBe('availability-zone');
      expect(call.input.Filters).toEqual([
        { Name: 'instance-type', Values: ['g5.xlarge', 'm7i.large', 'p4d.24xlarge'] },
      ]);
    }
  });

  it('a permission error is the user’s to fix: exit 2, with the IAM action in the hint', async () => {
    const ec2 = new FakeEc2(
      threeZones,
      awsError('UnauthorizedOperation', 'You are not authorized to perform this operation.'),
    );
    const error = await instanceTypeOfferings(ec2, ['g5.xlarge']).catch((e: unknown) => e);
    expect(exitCode(error)).toBe(2);
    expect((error as FerryError).message).toContain('DescribeInstanceTypeOfferings');
    expect((error as FerryError).hint).toContain('ec2:DescribeInstanceTypeOfferings');
    // The zones call's refusal names both actions the first deploy needs.
    const zonesError = await regionZones(
      new FakeEc2(awsError('UnauthorizedOperation', 'You are not authorized to perform this operation.')),
    ).catch((e: unknown) => e);
    expect((zonesError as FerryError).hint).toContain('ec2:DescribeInstanceTypeOfferings');
  });

  it('asks for every type a pool may launch, and only those the platform has not recorded', async () => {
    const ec2 = new FakeEc2(threeZones, offered);
    const first = await poolOfferings({
      ec2,
      zones: platform,
      pools: ['g5.xlarge', 'm7i.large'],
      gpuWarmPoolSize: 0,
      reporter,
    });
    // The g5 pool falls back to g5.2xlarge and g5.4xlarge (infra/gpu.ts): asked about too.
    expect(ec2.offeringCalls()[0]!.input.Filters?.[0]?.Values).toEqual([
      'g5.2xlarge',
      'g5.4xlarge',
      'g5.xlarge',
      'm7i.large',
    ]);
    expect(first?.['g5.xlarge']).toEqual(['us-west-2a', 'us-west-2b']);
    // A later deploy of a platform that recorded them (its InstanceTypeZones output) asks nothing…
    const recorded = {
      ...deployed,
      InstanceTypes: 'g5.xlarge,m7i.large',
      InstanceTypeZones:
        'g5.2xlarge:us-west-2a,us-west-2b;g5.4xlarge:us-west-2a,us-west-2b;g5.xlarge:us-west-2a,us-west-2b;m7i.large:us-west-2a,us-west-2b,us-west-2c',
    };
    const again = new FakeEc2(threeZones, offered);
    const kept = await poolOfferings({
      ec2: again,
      deployed: recorded,
      zones: platform,
      pools: ['g5.xlarge', 'm7i.large'],
      gpuWarmPoolSize: 0,
      reporter,
    });
    expect(again.calls).toHaveLength(0);
    expect(kept?.['m7i.large']).toEqual(platform);
    // …and one that adds a pool asks about its types only.
    await poolOfferings({
      ec2: again,
      deployed: recorded,
      zones: platform,
      pools: ['g5.xlarge', 'g6.xlarge', 'm7i.large'],
      gpuWarmPoolSize: 0,
      reporter,
    });
    const asked = new Set(again.offeringCalls().map((c) => JSON.stringify(c.input.Filters?.[0]?.Values)));
    expect([...asked]).toEqual([JSON.stringify(['g6.2xlarge', 'g6.4xlarge', 'g6.xlarge'])]);
    // --refresh-zones asks about every type again.
    const refreshed = new FakeEc2(threeZones, offered);
    await poolOfferings({
      ec2: refreshed,
      deployed: recorded,
      refresh: true,
      zones: platform,
      pools: ['g5.xlarge', 'm7i.large'],
      gpuWarmPoolSize: 0,
      reporter,
    });
    expect(refreshed.offeringCalls()[0]!.input.Filters?.[0]?.Values).toHaveLength(4);
  });

  it('refuses a new pool no zone of the platform offers, naming the type and the zones that do (exit 2)', async () => {
    const ec2 = new FakeEc2(threeZones, offered);
    const error = await poolOfferings({
      ec2,
      deployed: { ...deployed, InstanceTypes: 'g5.xlarge,m7i.large' },
      zones: platform,
      pools: ['g5.xlarge', 'm7i.large', 'p5.4xlarge'],
      gpuWarmPoolSize: 0,
      reporter,
    }).catch((e: unknown) => e);
    expect(FerryError.is(error)).toBe(true);
    expect(exitCode(error)).toBe(2);
    const { message, hint } = error as FerryError;
    expect(message).toContain('us-west-2a, us-west-2b, us-west-2c');
    expect(message).toContain('p5.4xlarge in us-west-2d');
    expect(message).not.toContain('g5.xlarge');
    expect(hint).toContain('--refresh-zones');
    expect(hint).toContain('another type');
  });

  it('keeps a pool the platform already has with a warning: refusing it would stop every deploy', async () => {
    lines.length = 0;
    const ec2 = new FakeEc2(threeZones, offered);
    const offerings = await poolOfferings({
      ec2,
      deployed: { ...deployed, InstanceTypes: 'm7i.large,p5.4xlarge' },
      zones: platform,
      pools: ['m7i.large', 'p5.4xlarge'],
      gpuWarmPoolSize: 0,
      reporter,
    });
    expect(offerings?.['p5.4xlarge']).toEqual(['us-west-2d']);
    expect(lines.join('\n')).toContain('warning: no zone of the platform');
  });

  it('names nothing without zone names or without EC2 and a record: every pool spans every zone', async () => {
    const ec2 = new FakeEc2(threeZones, offered);
    const input = { pools: ['g5.xlarge'], gpuWarmPoolSize: 0, reporter };
    expect(await poolOfferings({ ...input, ec2, zones: undefined })).toBeUndefined();
    expect(ec2.calls).toHaveLength(0);
    expect(await poolOfferings({ ...input, zones: platform })).toBeUndefined();
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

/** Each pool's Auto Scaling group → the zones of its subnets (VPCZoneIdentifier). */
const poolSubnetZones = (template: Record<string, unknown>): Record<string, string[]> => {
  const resources = template.Resources as Record<
    string,
    { Type: string; Properties: Record<string, unknown> }
  >;
  const pools: Record<string, string[]> = {};
  for (const [id, resource] of Object.entries(resources)) {
    if (resource.Type !== 'AWS::AutoScaling::AutoScalingGroup') continue;
    const pool = ['g5.xlarge', 'm7i.large'].find((type) =>
      id.startsWith(`Pool${type.replace(/\./g, '')}Asg`),
    );
    if (!pool) throw new Error(`an Auto Scaling group of no known pool: ${id}`);
    pools[pool] = (resource.Properties.VPCZoneIdentifier as Array<{ Ref: string }>)
      .map((subnet) => resources[subnet.Ref]!.Properties.AvailabilityZone as string)
      .sort();
  }
  return pools;
};

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

  /** g5 (the default GPU pool's family) is not offered in us-west-2c; every other type everywhere. */
  const noG5In2c: Offered = (type) =>
    type.startsWith('g5.') ? ['us-west-2a', 'us-west-2b'] : ['us-west-2a', 'us-west-2b', 'us-west-2c'];

  it('a first deploy whose GPU pool no zone of the platform offers is refused before anything is deployed', async () => {
    const toolkit = new CapturingToolkit(harness.stateFile);
    const ec2 = new FakeEc2(threeZones, (type) => (type.startsWith('g5.') ? ['us-west-2d'] : ['us-west-2a']));
    const error = await providerWith(ec2, toolkit)
      .prepare({ manifest, env, reporter })
      .catch((e: unknown) => e);
    expect(exitCode(error)).toBe(2);
    expect((error as FerryError).message).toContain('g5.xlarge in us-west-2d');
    expect((error as FerryError).hint).toContain('--refresh-zones');
    expect(toolkit.platformTemplates).toHaveLength(0);
  }, 240_000);

  it('first deploy: the platform subnets lie in the zones EC2 lists, each pool in the zones offering its types', async () => {
    const toolkit = new CapturingToolkit(harness.stateFile);
    const ec2 = new FakeEc2(threeZones, noG5In2c);
    await providerWith(ec2, toolkit).prepare({ manifest, env, reporter });
    expect(ec2.zoneCalls()).toHaveLength(1);
    expect(ec2.offeringCalls().length).toBeGreaterThan(0);
    expect(toolkit.platformTemplates).toHaveLength(1);
    const template = toolkit.platformTemplates[0]!;
    expect(subnetZones(template)).toEqual(['us-west-2a', 'us-west-2b', 'us-west-2c']);
    expect(poolSubnetZones(template)).toEqual({
      'g5.xlarge': ['us-west-2a', 'us-west-2b'],
      'm7i.large': ['us-west-2a', 'us-west-2b', 'us-west-2c'],
    });
    // What later deploys read back: the platform's outputs name the zones, and where each pool's
    // types are offered, as plain strings.
    const outputs = template.Outputs as Record<string, { Value: unknown }>;
    expect(outputs.AvailabilityZones?.Value).toBe('us-west-2a,us-west-2b,us-west-2c');
    expect(outputs.InstanceTypeZones?.Value).toBe(
      'g5.2xlarge:us-west-2a,us-west-2b;g5.4xlarge:us-west-2a,us-west-2b;g5.xlarge:us-west-2a,us-west-2b;m7i.large:us-west-2a,us-west-2b,us-west-2c',
    );
  }, 240_000);

  it('a later deploy keeps those zones although EC2 now lists a fourth', async () => {
    const toolkit = new CapturingToolkit(harness.stateFile);
    const ec2 = new FakeEc2([...threeZones, zone('us-west-2d')]);
    const provider = providerWith(ec2, toolkit);
    await provider.prepare({ manifest, env, reporter });
    await provider.provision([record], { app, env, all: [record], reporter });
    // Neither the zones nor the pools' offerings are asked again: the platform recorded both.
    expect(ec2.calls).toHaveLength(0);
    expect(toolkit.platformTemplates).toHaveLength(1);
    expect(subnetZones(toolkit.platformTemplates[0]!)).toEqual(['us-west-2a', 'us-west-2b', 'us-west-2c']);
    expect(poolSubnetZones(toolkit.platformTemplates[0]!)['g5.xlarge']).toEqual(['us-west-2a', 'us-west-2b']);
  }, 240_000);

  it('--refresh-zones moves the platform to the region’s current zones', async () => {
    const toolkit = new CapturingToolkit(harness.stateFile);
    const ec2 = new FakeEc2([...threeZones, zone('us-west-2d')]);
    const provider = providerWith(ec2, toolkit, { refreshZones: true });
    await provider.prepare({ manifest, env, reporter });
    await provider.provision([record], { app, env, all: [record], reporter });
    expect(ec2.zoneCalls()).toHaveLength(1);
    // The offerings are asked again too, for the new zones (the fake offers every type everywhere).
    expect(ec2.offeringCalls().length).toBeGreaterThan(0);
    expect(poolSubnetZones(toolkit.platformTemplates[0]!)['g5.xlarge']).toHaveLength(4);
    expect(subnetZones(toolkit.platformTemplates[0]!)).toEqual([
      'us-west-2a',
      'us-west-2b',
      'us-west-2c',
      'us-west-2d',
    ]);
  }, 240_000);
});
