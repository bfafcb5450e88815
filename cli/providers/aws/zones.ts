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
// (or --refresh-zones), a deploy that adds a pool whose offerings are not recorded, and a deploy with
// endpoints behind CloudFront call it (regionZones, instanceTypeOfferings, cloudfront-prefix-list.ts,
// ec2OnFirstUse).
import type {
  AvailabilityZone,
  DescribeAvailabilityZonesCommand,
  DescribeAvailabilityZonesCommandOutput,
  DescribeInstanceTypeOfferingsCommand,
  DescribeInstanceTypeOfferingsCommandOutput,
  DescribeManagedPrefixListsCommand,
  DescribeManagedPrefixListsCommandOutput,
} from '@aws-sdk/client-ec2';
import { FerryError } from '../../../core/errors.js';
import {
  type InstanceTypeZones,
  instanceTypeZonesOutput,
  parseInstanceTypeZones,
  poolZones,
} from '../../../infra/pool-zones.js';
import type { Reporter } from '../../io.js';
import { type PlatformOutputs, platformPools } from './platform.js';

/** The EC2 calls this module makes (the SDK client, or a test's stand-in). */
export interface ZonesEc2 {
  send(command: DescribeAvailabilityZonesCommand): Promise<DescribeAvailabilityZonesCommandOutput>;
  send(command: DescribeInstanceTypeOfferingsCommand): Promise<DescribeInstanceTypeOfferingsCommandOutput>;
}

/** The EC2 calls the CLI makes: zones and offerings here, CloudFront's prefix list in cloudfront-prefix-list.ts. */
export interface Ec2Like extends ZonesEc2 {
  send(command: DescribeAvailabilityZonesCommand): Promise<DescribeAvailabilityZonesCommandOutput>;
  send(command: DescribeInstanceTypeOfferingsCommand): Promise<DescribeInstanceTypeOfferingsCommandOutput>;
  send(command: DescribeManagedPrefixListsCommand): Promise<DescribeManagedPrefixListsCommandOutput>;
  destroy?(): void;
}

type Ec2Command =
  | DescribeAvailabilityZonesCommand
  | DescribeInstanceTypeOfferingsCommand
  | DescribeManagedPrefixListsCommand;

/** The SDK's EC2 client, created (and its module loaded) on the first call. */
export function ec2OnFirstUse(): Ec2Like {
  let client: import('@aws-sdk/client-ec2').EC2Client | undefined;
  function send(command: DescribeAvailabilityZonesCommand): Promise<DescribeAvailabilityZonesCommandOutput>;
  function send(
    command: DescribeInstanceTypeOfferingsCommand,
  ): Promise<DescribeInstanceTypeOfferingsCommandOutput>;
  function send(command: DescribeManagedPrefixListsCommand): Promise<DescribeManagedPrefixListsCommandOutput>;
  async function send(
    command: Ec2Command,
  ): Promise<
    | DescribeAvailabilityZonesCommandOutput
    | DescribeInstanceTypeOfferingsCommandOutput
    | DescribeManagedPrefixListsCommandOutput
  > {
    client ??= new (await import('@aws-sdk/client-ec2')).EC2Client({});
    // The SDK types send per command class; each of the three is an EC2 command.
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
 * What the deploying identity must be allowed for the CLI's own zone calls (the first deploy and
 * --refresh-zones make both; a deploy that adds a pool makes the second).
 */
const zoneCallsHint =
  'Allow ec2:DescribeAvailabilityZones and ec2:DescribeInstanceTypeOfferings to your AWS identity (the CLI makes these calls itself, not through the CDK roles), or check AWS_PROFILE/AWS_REGION.';

/** An EC2 call of this module that failed: the user's to fix (exit 2) when it was refused. */
function ec2CallFailed(error: unknown, what: string): FerryError {
  const { name, message } = error as { name?: string; message?: string };
  const denied = name !== undefined && userFixableErrors.has(name);
  return new FerryError(denied ? 'usage' : 'failed', `${what}: ${message ?? String(error)}`, {
    hint: denied ? zoneCallsHint : 'Check AWS_REGION and the network, then run the deploy again.',
    cause: error,
  });
}

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
    throw ec2CallFailed(error, "Cannot list the region's availability zones (EC2 DescribeAvailabilityZones)");
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

/**
 * The zones of the region that offer each of `instanceTypes`, via DescribeInstanceTypeOfferings with
 * LocationType `availability-zone` and an `instance-type` filter, page by page
 * (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeInstanceTypeOfferings.html:
 * "Lists the instance types that are offered for the specified location"; one offering per type and
 * zone). Every asked type is in the answer, with no zone when EC2 lists none for it.
 */
export async function instanceTypeOfferings(
  ec2: ZonesEc2,
  instanceTypes: readonly string[],
): Promise<Record<string, string[]>> {
  const offered = new Map<string, Set<string>>(instanceTypes.map((type) => [type, new Set<string>()]));
  try {
    const { DescribeInstanceTypeOfferingsCommand } = await import('@aws-sdk/client-ec2');
    let nextToken: string | undefined;
    do {
      const page: DescribeInstanceTypeOfferingsCommandOutput = await ec2.send(
        new DescribeInstanceTypeOfferingsCommand({
          LocationType: 'availability-zone',
          Filters: [{ Name: 'instance-type', Values: [...instanceTypes] }],
          ...(nextToken ? { NextToken: nextToken } : {}),
        }),
      );
      for (const offering of page.InstanceTypeOfferings ?? []) {
        const { InstanceType: type, Location: zone } = offering;
        if (type && zone) offered.get(type)?.add(zone);
      }
      nextToken = page.NextToken || undefined;
    } while (nextToken);
  } catch (error) {
    throw ec2CallFailed(
      error,
      `Cannot list the zones that offer ${instanceTypes.join(', ')} (EC2 DescribeInstanceTypeOfferings)`,
    );
  }
  return Object.fromEntries([...offered].map(([type, zones]) => [type, [...zones].sort()]));
}

/** The offerings a deployed platform's pools were placed by (its `InstanceTypeZones` output). */
export function deployedOfferings(
  outputs: PlatformOutputs | undefined,
): Record<string, string[]> | undefined {
  const text = outputs?.[instanceTypeZonesOutput];
  if (!text) return undefined;
  return parseInstanceTypeZones(text, `${instanceTypeZonesOutput} output of the platform`);
}

/**
 * The offerings to synthesize the platform's pools with (infra/pool-zones.ts): those the deployed
 * platform recorded (none on `refresh`) and those `asked` earlier in this process, plus EC2's answer
 * for every type a pool may launch that neither names. No zone names, or no EC2 client and nothing
 * recorded: undefined, and every pool spans every zone as before.
 *
 * A pool the platform does not have yet that no zone of the platform offers is refused (exit 2),
 * before anything is deployed: its group could never launch an instance. One the platform already has
 * is kept where it was, with a warning: pools are never pruned (aws/platform.ts), so refusing it would
 * stop every deploy of every app in the account.
 */
export async function poolOfferings(input: {
  ec2?: ZonesEc2;
  deployed?: PlatformOutputs;
  refresh?: boolean;
  /** Offerings this process already asked EC2 for. */
  asked?: InstanceTypeZones;
  zones: readonly string[] | undefined;
  pools: readonly string[];
  gpuWarmPoolSize: number;
  reporter: Reporter;
}): Promise<InstanceTypeZones | undefined> {
  const { zones, pools, reporter } = input;
  if (!zones) return undefined;
  const { equivalentInstanceTypes, poolInstanceTypes } = await import('../../../infra/gpu.js');
  const known: Record<string, readonly string[]> = {
    ...(input.refresh ? {} : deployedOfferings(input.deployed)),
    ...input.asked,
  };
  // Every type a pool may launch, warm pool or not, so a later change of the warm pool size finds
  // its types recorded.
  const needed = [...new Set(pools.flatMap(equivalentInstanceTypes))].sort();
  const missing = needed.filter((type) => known[type] === undefined);
  if (missing.length > 0 && input.ec2) Object.assign(known, await instanceTypeOfferings(input.ec2, missing));
  if (Object.keys(known).length === 0) return undefined;

  const existing = new Set(input.deployed ? platformPools(input.deployed) : []);
  const refused: string[] = [];
  for (const pool of pools) {
    const types = poolInstanceTypes(pool, input.gpuWarmPoolSize);
    const placed = poolZones(types, zones, known);
    if (!placed || placed.length === zones.length) continue;
    if (placed.length > 0) {
      // Said when EC2 was asked about the pool, not on every deploy.
      if (types.some((type) => missing.includes(type))) {
        const left = zones.filter((zone) => !placed.includes(zone));
        reporter.line(
          `  ${pool} pool: zones ${placed.join(', ')} (${left.join(', ')} offer${left.length > 1 ? '' : 's'} none of ${types.join(', ')})`,
        );
      }
      continue;
    }
    const where = types.map((type) => `${type} in ${known[type]?.join(', ') || 'no zone'}`).join('; ');
    if (existing.has(pool)) {
      reporter.line(
        `  warning: no zone of the platform (${zones.join(', ')}) offers the ${pool} pool's types (EC2 offers ${where}): it cannot launch an instance; it keeps every zone until --refresh-zones moves the platform to zones that offer it`,
      );
    } else {
      refused.push(`${pool} (EC2 offers ${where})`);
    }
  }
  if (refused.length > 0) {
    throw new FerryError(
      'usage',
      `No zone of the platform (${zones.join(', ')}) offers the instance types of the pool${refused.length > 1 ? 's' : ''} ${refused.join('; ')}: its Auto Scaling group could never launch an instance`,
      {
        hint:
          "If the region's current zones include one that offers it, `ferry deploy --provider aws --refresh-zones` moves the platform there (it replaces the platform's subnets: undeploy the app environments first); " +
          'otherwise choose another type for the endpoint (its gpu= or cpu=), or deploy in another region.',
      },
    );
  }
  return known;
}
