/**
 * CloudFront's origin-facing prefix list (cli/providers/aws/cloudfront-prefix-list.ts): a deploy with
 * load-balanced endpoints behind CloudFront (no domain) asks EC2 for the id of
 * `com.amazonaws.global.cloudfront.origin-facing` in its region (DescribeManagedPrefixLists with the
 * `prefix-list-name` filter,
 * https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeManagedPrefixLists.html; the
 * list: https://docs.aws.amazon.com/AmazonCloudFront/latest/DeveloperGuide/LocationsOfEdgeServers.html#managed-prefix-list)
 * and the ALBs' port-80 rule names it; a refused call or a region without the list stops the deploy
 * before anything is deployed, exit 2. EC2 is an injected stand-in that records the exact SDK
 * commands; the synth is real (through the recording fake toolkit) and the records live in DynamoDB
 * Local.
 */
import { readFileSync } from 'node:fs';
import {
  type AvailabilityZone,
  DescribeAvailabilityZonesCommand,
  type DescribeAvailabilityZonesCommandOutput,
  DescribeInstanceTypeOfferingsCommand,
  type DescribeInstanceTypeOfferingsCommandOutput,
  DescribeManagedPrefixListsCommand,
  type DescribeManagedPrefixListsCommandOutput,
  type ManagedPrefixList,
} from '@aws-sdk/client-ec2';
import { describe, expect, it } from 'vitest';
import {
  cloudFrontOriginFacingList,
  cloudFrontPrefixListId,
  needsCloudFrontPrefixList,
} from '../../cli/providers/aws/cloudfront-prefix-list.js';
import type { Ec2Like } from '../../cli/providers/aws/zones.js';
import {
  type FakeToolkitState,
  RecordingToolkit,
  type StackOutputs,
  type SynthesizedAssembly,
  type ToolkitEventHandler,
} from '../../cli/providers/toolkit.js';
import { exitCode, FerryError } from '../../core/errors.js';
import type { Manifest } from '../../core/manifest.js';
import { appStackName, platformStackName } from '../../infra/names.js';
import { cpuEndpoint, lbEndpoint, sampleManifest } from '../infra/fixtures.js';
import { awsError, awsProviderHarness, deployedRecord, offeredEverywhere } from '../support/aws-provider.js';

/** What EC2 answers for the list in us-east-1. */
const cloudFrontList: ManagedPrefixList = {
  PrefixListId: 'pl-3b927c52',
  AddressFamily: 'IPv4',
  State: 'create-complete',
  PrefixListArn: 'arn:aws:ec2:us-east-1:aws:prefix-list/pl-3b927c52',
  PrefixListName: cloudFrontOriginFacingList,
  MaxEntries: 55,
  Version: 1,
  Tags: [],
  OwnerId: 'AWS',
};

type Answer = Partial<DescribeManagedPrefixListsCommandOutput>;

/**
 * EC2 for the calls the CLI makes: zones, the pools' offerings (every type in every zone), and the
 * prefix lists page by page (or an error).
 */
class FakeEc2 implements Ec2Like {
  readonly calls: Array<
    | DescribeAvailabilityZonesCommand
    | DescribeInstanceTypeOfferingsCommand
    | DescribeManagedPrefixListsCommand
  > = [];
  constructor(
    private readonly pages: Answer[] | Error,
    private readonly zones: AvailabilityZone[] = ['a', 'b', 'c'].map((z) => ({
      ZoneName: `us-east-1${z}`,
      ZoneType: 'availability-zone',
      State: 'available',
      OptInStatus: 'opt-in-not-required',
    })),
  ) {}
  send(command: DescribeAvailabilityZonesCommand): Promise<DescribeAvailabilityZonesCommandOutput>;
  send(command: DescribeInstanceTypeOfferingsCommand): Promise<DescribeInstanceTypeOfferingsCommandOutput>;
  send(command: DescribeManagedPrefixListsCommand): Promise<DescribeManagedPrefixListsCommandOutput>;
  async send(
    command:
      | DescribeAvailabilityZonesCommand
      | DescribeInstanceTypeOfferingsCommand
      | DescribeManagedPrefixListsCommand,
  ): Promise<
    | DescribeAvailabilityZonesCommandOutput
    | DescribeInstanceTypeOfferingsCommandOutput
    | DescribeManagedPrefixListsCommandOutput
  > {
    this.calls.push(command);
    if (command instanceof DescribeAvailabilityZonesCommand) {
      return { AvailabilityZones: this.zones, $metadata: {} };
    }
    if (command instanceof DescribeInstanceTypeOfferingsCommand) {
      return offeredEverywhere(
        command,
        this.zones.map((zone) => zone.ZoneName!),
      );
    }
    if (this.pages instanceof Error) throw this.pages;
    const token = command.input.NextToken;
    const page = this.pages[token ? Number(token) : 0] ?? {};
    return { ...page, $metadata: {} };
  }
  prefixListCalls(): DescribeManagedPrefixListsCommand[] {
    return this.calls.filter((c) => c instanceof DescribeManagedPrefixListsCommand);
  }
}

async function failure(promise: Promise<unknown>): Promise<FerryError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(FerryError.is(error)).toBe(true);
  return error as FerryError;
}

describe('the lookup', () => {
  it('asks EC2 once, by the list name, and answers the list’s id', async () => {
    const ec2 = new FakeEc2([{ PrefixLists: [cloudFrontList] }]);
    expect(await cloudFrontPrefixListId(ec2)).toBe('pl-3b927c52');
    expect(ec2.calls).toHaveLength(1);
    expect(ec2.calls[0]).toBeInstanceOf(DescribeManagedPrefixListsCommand);
    expect((ec2.calls[0] as DescribeManagedPrefixListsCommand).input).toEqual({
      Filters: [{ Name: 'prefix-list-name', Values: ['com.amazonaws.global.cloudfront.origin-facing'] }],
    });
  });

  it('keeps only the list of that name out of the answer, and follows NextToken', async () => {
    // A customer's list cannot take a name that starts with com.amazonaws (CreateManagedPrefixList),
    // so the name identifies CloudFront's list; another list in a page is not taken for it.
    const other: ManagedPrefixList = {
      ...cloudFrontList,
      PrefixListId: 'pl-0123456789abcdef0',
      PrefixListName: 'com.amazonaws.us-east-1.s3',
    };
    const ec2 = new FakeEc2([{ PrefixLists: [other], NextToken: '1' }, { PrefixLists: [cloudFrontList] }]);
    expect(await cloudFrontPrefixListId(ec2)).toBe('pl-3b927c52');
    expect(ec2.prefixListCalls().map((c) => c.input.NextToken)).toEqual([undefined, '1']);
  });

  it('no such list in the region: exit 2, naming the list, the region to check and the domain mode', async () => {
    for (const pages of [
      [{ PrefixLists: [] }],
      [{}],
      [{ PrefixLists: [{ ...cloudFrontList, PrefixListName: 'my-cloudfront' }] }],
    ]) {
      const error = await failure(cloudFrontPrefixListId(new FakeEc2(pages)));
      expect(error.code).toBe('usage');
      expect(exitCode(error)).toBe(2);
      expect(error.message).toContain(`no prefix list ${cloudFrontOriginFacingList} in this region`);
      expect(error.hint).toContain('AWS_REGION');
      expect(error.hint).toContain('FERRY_AWS_DOMAIN');
    }
  });

  it('access denied is the user’s to fix: exit 2, with the IAM action in the hint', async () => {
    const ec2 = new FakeEc2(
      awsError('UnauthorizedOperation', 'You are not authorized to perform this operation.'),
    );
    const error = await failure(cloudFrontPrefixListId(ec2));
    expect(error.code).toBe('usage');
    expect(exitCode(error)).toBe(2);
    expect(error.message).toContain('DescribeManagedPrefixLists');
    expect(error.message).toContain('not authorized');
    expect(error.hint).toContain('ec2:DescribeManagedPrefixLists');
  });

  it('any other failure says what failed, exit 1', async () => {
    const error = await failure(
      cloudFrontPrefixListId(new FakeEc2(awsError('RequestLimitExceeded', 'Rate exceeded'))),
    );
    expect(error.code).toBe('failed');
    expect(exitCode(error)).toBe(1);
    expect(error.message).toContain('Rate exceeded');
  });

  it('is needed only for load-balanced endpoints without a domain', () => {
    expect(needsCloudFrontPrefixList({ endpoints: [cpuEndpoint, lbEndpoint] }, undefined)).toBe(true);
    expect(needsCloudFrontPrefixList({ endpoints: [lbEndpoint] }, { domainName: 'example.com' })).toBe(false);
    expect(needsCloudFrontPrefixList({ endpoints: [cpuEndpoint] }, undefined)).toBe(false);
  });
});

/** The recording fake toolkit, keeping each deployed app stack's template. */
class CapturingToolkit extends RecordingToolkit {
  readonly appTemplates: Array<Record<string, unknown>> = [];
  override async deploy(
    assembly: SynthesizedAssembly,
    stackNames: readonly string[],
    onEvent: ToolkitEventHandler,
  ): Promise<Record<string, StackOutputs>> {
    const outputs = await super.deploy(assembly, stackNames, onEvent);
    for (const name of stackNames)
      if (name !== platformStackName) this.appTemplates.push(assembly.template(name));
    return outputs;
  }
}

/** The port-80 rules of the template's ALB groups: their source, a prefix list or a CIDR. */
function port80Sources(template: Record<string, unknown>): unknown[] {
  const resources = Object.values(
    template.Resources as Record<string, { Type: string; Properties: Record<string, unknown> }>,
  );
  const inline = resources
    .filter((r) => r.Type === 'AWS::EC2::SecurityGroup')
    .flatMap((r) => (r.Properties.SecurityGroupIngress ?? []) as Array<Record<string, unknown>>);
  const separate = resources
    .filter((r) => r.Type === 'AWS::EC2::SecurityGroupIngress')
    .map((r) => r.Properties);
  return [...inline, ...separate]
    .filter((rule) => rule.FromPort === 80)
    .map((rule) => rule.SourcePrefixListId ?? rule.CidrIp);
}

describe('ferry deploy --provider aws: the ALBs behind CloudFront (real synth, fake CloudFormation)', () => {
  const lines: string[] = [];
  const reporter = { line: (text: string) => lines.push(text) } as never;
  const app = 'front';
  const env = 'production';
  const manifest: Manifest = { ...sampleManifest, app, endpoints: [lbEndpoint] };
  const record = deployedRecord(app, env, lbEndpoint);

  const harness = awsProviderHarness({ region: 'us-east-1', reporter, scratchPrefix: 'ferry-cf-prefix-' });
  const providerWith = (ec2: FakeEc2, toolkit: CapturingToolkit, env: NodeJS.ProcessEnv = {}) =>
    harness.provider(ec2, toolkit, { env });

  it('a refused lookup stops the first deploy before anything is deployed (exit 2)', async () => {
    const toolkit = new CapturingToolkit(harness.stateFile);
    const ec2 = new FakeEc2(
      awsError('UnauthorizedOperation', 'You are not authorized to perform this operation.'),
    );
    const error = await failure(providerWith(ec2, toolkit).prepare({ manifest, env, reporter }));
    expect(exitCode(error)).toBe(2);
    expect(error.hint).toContain('ec2:DescribeManagedPrefixLists');
    expect(toolkit.appTemplates).toHaveLength(0);
    const state = JSON.parse(readFileSync(harness.stateFile, 'utf8')) as FakeToolkitState;
    expect(state.calls).toHaveLength(0);
  }, 240_000);

  it('the deployed ALB admits port 80 from the looked-up list only; one lookup per process', async () => {
    const toolkit = new CapturingToolkit(harness.stateFile);
    lines.length = 0;
    const ec2 = new FakeEc2([{ PrefixLists: [cloudFrontList] }]);
    const provider = providerWith(ec2, toolkit);
    await provider.prepare({ manifest, env, reporter });
    await provider.provision([record], { app, env, all: [record], reporter });
    expect(ec2.prefixListCalls()).toHaveLength(1);
    expect(toolkit.appTemplates).toHaveLength(1);
    expect(port80Sources(toolkit.appTemplates[0]!)).toEqual(['pl-3b927c52']);
    expect(lines.join('\n')).toContain('CloudFront origin-facing prefix list: pl-3b927c52');
    // The leg from CloudFront to the ALB is plain HTTP without a domain: said once, with the fix.
    const warnings = lines.filter((line) => line.includes('without a domain'));
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain('plain HTTP');
    expect(warnings[0]).toContain('FERRY_AWS_DOMAIN');
  }, 240_000);

  it('a later deploy in a region without the list is refused before the stack changes', async () => {
    const toolkit = new CapturingToolkit(harness.stateFile);
    const error = await failure(
      providerWith(new FakeEc2([{ PrefixLists: [] }]), toolkit).provision([record], {
        app,
        env,
        all: [record],
        reporter,
      }),
    );
    expect(exitCode(error)).toBe(2);
    expect(error.message).toContain(cloudFrontOriginFacingList);
    expect(toolkit.appTemplates).toHaveLength(0);
  }, 240_000);

  it('with a domain there is no CloudFront and no lookup: the ALB is public on 443 and 80', async () => {
    const toolkit = new CapturingToolkit(harness.stateFile);
    lines.length = 0;
    const ec2 = new FakeEc2(awsError('UnauthorizedOperation', 'never asked'));
    await providerWith(ec2, toolkit, { FERRY_AWS_DOMAIN: 'example.com' }).provision([record], {
      app,
      env,
      all: [record],
      reporter,
    });
    expect(ec2.prefixListCalls()).toHaveLength(0);
    expect(port80Sources(toolkit.appTemplates[0]!)).toEqual(['0.0.0.0/0']);
    expect(lines.join('\n')).not.toContain('without a domain');
  }, 240_000);

  it('--synth-only stays offline: no EC2 call, and it says the deploy narrows port 80', async () => {
    const toolkit = new CapturingToolkit(harness.stateFile);
    const ec2 = new FakeEc2(awsError('UnauthorizedOperation', 'never asked'));
    lines.length = 0;
    const { stacks } = await providerWith(ec2, toolkit).synthOnly({ manifest, app, env, reporter });
    expect(ec2.calls).toHaveLength(0);
    expect(stacks.map((s) => s.name)).toContain(appStackName(app, env));
    expect(lines.join('\n')).toContain('admit port 80 from any IPv4');
  }, 240_000);
});
