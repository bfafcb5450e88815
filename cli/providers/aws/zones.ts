/**
 * The availability zones of the platform VPC (docs/aws.md "Availability zones").
 *
 * The platform stack is environment-agnostic, and CDK knows no zone names for such a stack: without
 * help it spreads the VPC over two `Fn::GetAZs` picks
 * (https://docs.aws.amazon.com/cdk/api/v2/docs/aws-cdk-lib.Stack.html#availabilityzones). GPU
 * capacity is scarce per zone, so the first deploy asks EC2 for the region's zones and hands them to
 * the synth as `availabilityZones` (infra/app.ts; `-c ferry:availabilityZones` is the same thing for
 * `npx cdk synth`).
 *
 * Later deploys reuse the zones the platform was deployed with (its `AvailabilityZones` output), never
 * the region's current list: a subnet's zone cannot change in place, so a zone AWS adds or opens to
 * the account would replace subnets, and app stacks import the zone and subnet lists, which
 * CloudFormation refuses to change while imported. Moving to the region's current zones is
 * deliberate: `ferry deploy --refresh-zones`.
 */
// Types only: the EC2 client takes most of a second to load, and only a platform's first deploy
// (or --refresh-zones) and a deploy with endpoints behind CloudFront call it (regionZones,
// cloudfront-prefix-list.ts, ec2OnFirstUse).
import type {
  AvailabilityZone,
  DescribeAvailabilityZonesCommand,
  DescribeAvailabilityZonesCommandOutput,
  DescribeManagedPrefixListsCommand,
  DescribeManagedPrefixListsCommandOutput,
} from '@aws-sdk/client-ec2';
import { FerryError } from '../../../core/errors.js';
import type { Reporter } from '../../io.js';
import type { PlatformOutputs } from './platform.js';

/** The EC2 call this module makes (the SDK client, or a test's stand-in). */
export interface ZonesEc2 {
  send(command: DescribeAvailabilityZonesCommand): Promise<DescribeAvailabilityZonesCommandOutput>;
}

/** The EC2 calls the CLI makes: zones here, CloudFront's prefix list in cloudfront-prefix-list.ts. */
export interface Ec2Like extends ZonesEc2 {
  send(command: DescribeAvailabilityZonesCommand): Promise<DescribeAvailabilityZonesCommandOutput>;
  send(command: DescribeManagedPrefixListsCommand): Promise<DescribeManagedPrefixListsCommandOutput>;
  destroy?(): void;
}

/** The SDK's EC2 client, created (and its module loaded) on the first call. */
export function ec2OnFirstUse(): Ec2Like {
  let client: import('@aws-sdk/client-ec2').EC2Client | undefined;
  function send(command: DescribeAvailabilityZonesCommand): Promise<DescribeAvailabilityZonesCommandOutput>;
  function send(command: DescribeManagedPrefixListsCommand): Promise<DescribeManagedPrefixListsCommandOutput>;
  async function send(
    command: DescribeAvailabilityZonesCommand | DescribeManagedPrefixListsCommand,
  ): Promise<DescribeAvailabilityZonesCommandOutput | DescribeManagedPrefixListsCommandOutput> {
    client ??= new (await import('@aws-sdk/client-ec2')).EC2Client({});
    // The SDK types send per command class; either of the two is an EC2 command.
    return client.send(command as DescribeAvailabilityZonesCommand);
  }
  return {
    send,
    destroy() {
      client?.destroy();
    },
  };
}

/**
 * A zone the platform may use: a regular Availability Zone (not a Local Zone or Wavelength Zone,
 * which have few instance types and no GPUs to speak of) that is up and enabled for the account.
 * https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_AvailabilityZone.html: `zoneType`
 * availability-zone | local-zone | wavelength-zone; `optInStatus` is always opt-in-not-required for
 * Availability Zones; `state` available | information | impaired | unavailable | constrained.
 */
export function isPlatformZone(zone: AvailabilityZone): boolean {
  return (
    zone.ZoneType === 'availability-zone' &&
    zone.State === 'available' &&
    (zone.OptInStatus === 'opt-in-not-required' || zone.OptInStatus === 'opted-in') &&
    typeof zone.ZoneName === 'string' &&
    zone.ZoneName !== ''
  );
}

/**
 * EC2 errors that mean the deploying identity may not make the call, or is no identity at all: the
 * user fixes those (exit 2). https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html
 */
export const userFixableErrors: ReadonlySet<string> = new Set([
  'UnauthorizedOperation',
  'AuthFailure',
  'CredentialsProviderError',
  'ExpiredToken',
  'InvalidClientTokenId',
]);

/**
 * The region's zones, sorted by name, via DescribeAvailabilityZones
 * (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeAvailabilityZones.html). The
 * platform stack takes the first `maxPlatformAzs` of them (infra/platform-stack.ts).
 */
export async function regionZones(ec2: ZonesEc2): Promise<string[]> {
  let answer: DescribeAvailabilityZonesCommandOutput;
  try {
    const { DescribeAvailabilityZonesCommand } = await import('@aws-sdk/client-ec2');
    // Without AllAvailabilityZones, EC2 lists only the zones enabled for the account.
    answer = await ec2.send(new DescribeAvailabilityZonesCommand({}));
  } catch (error) {
    const { name, message } = error as { name?: string; message?: string };
    const denied = name !== undefined && userFixableErrors.has(name);
    throw new FerryError(
      denied ? 'usage' : 'failed',
      `Cannot list the region's availability zones (EC2 DescribeAvailabilityZones): ${message ?? String(error)}`,
      {
        hint: denied
          ? 'Allow ec2:DescribeAvailabilityZones to your AWS identity (the CLI makes this call itself, not through the CDK roles), or check AWS_PROFILE/AWS_REGION.'
          : 'Check AWS_REGION and the network, then run the deploy again.',
        cause: error,
      },
    );
  }
  const zones = (answer.AvailabilityZones ?? [])
    .filter(isPlatformZone)
    .map((zone) => zone.ZoneName as string)
    .sort();
  if (zones.length === 0) {
    throw new FerryError('failed', 'EC2 lists no available Availability Zone in this region', {
      hint: 'Check AWS_REGION: it must name a region enabled for this account.',
    });
  }
  return [...new Set(zones)];
}

/** The zones a deployed platform spans (its `AvailabilityZones` output, Ferry-AvailabilityZones). */
export function deployedZones(outputs: PlatformOutputs | undefined): string[] | undefined {
  const zones = (outputs?.AvailabilityZones ?? '')
    .split(',')
    .map((zone) => zone.trim())
    .filter((zone) => zone !== '');
  return zones.length > 0 ? zones : undefined;
}

/**
 * The zones to synthesize the platform with: the deployed platform's, unless there is none or
 * `refresh`; then the region's. Without an EC2 client (the CLI's recording fake toolkit) none are
 * named and CDK's default applies.
 */
export async function platformZones(input: {
  ec2?: ZonesEc2;
  deployed?: PlatformOutputs;
  refresh?: boolean;
  reporter: Reporter;
}): Promise<string[] | undefined> {
  const current = deployedZones(input.deployed);
  if (current && !input.refresh) return current;
  if (!input.ec2) return current;
  const region = await regionZones(input.ec2);
  if (current && region.join(',') !== current.join(',')) {
    input.reporter.line(
      `  availability zones: changing ${current.join(', ')} → ${region.join(', ')} (--refresh-zones): the platform's subnets are replaced, which CloudFormation refuses while app stacks import them`,
    );
  } else {
    input.reporter.line(`  availability zones: ${region.join(', ')}`);
  }
  return region;
}
