/**
 * Which of the platform's zones each capacity pool's Auto Scaling group spans (docs/aws.md
 * "Availability zones", "Zones of each pool"). No CDK import here: the CLI reads and writes the same
 * text without loading aws-cdk-lib.
 *
 * GPU types are offered in only some zones of a region. A group whose subnets include a zone that
 * offers none of its types still runs, but each launch it tries there fails ("Your requested instance
 * type (…) is not supported in your requested Availability Zone (…)") before the group "will attempt
 * to launch in another healthy Availability Zone instead"
 * (https://docs.aws.amazon.com/autoscaling/ec2/APIReference/API_AvailabilityZoneDistribution.html):
 * each failure is an "EC2 Instance Launch Unsuccessful" event on the alarm topic
 * (infra/constructs/alarms.ts) and a retry added to a GPU cold start. And a launch template override
 * "must specify an instance type that is supported in your requested Region and Availability Zones"
 * (https://docs.aws.amazon.com/autoscaling/ec2/APIReference/API_LaunchTemplateOverrides.html).
 * So a pool's group gets only the subnets of the zones that offer one of its types, as EC2
 * DescribeInstanceTypeOfferings answered them (cli/providers/aws/zones.ts); the VPC, the load
 * balancers and every export keep all the platform's zones.
 */
import { FerryError } from '../core/errors.js';

/** Instance type → the zones that offer it (EC2 DescribeInstanceTypeOfferings, LocationType availability-zone). */
export type InstanceTypeZones = Readonly<Record<string, readonly string[]>>;

/**
 * The platform output (not exported) that records the offerings the pools were placed by, within the
 * platform's zones: the CLI reads it back (cli/providers/aws/zones.ts poolOfferings), so later
 * deploys ask EC2 only for types it does not name. Not an export on purpose: it changes as pools are
 * added, and CloudFormation refuses to change an exported value while a stack imports it
 * (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/using-cfn-stack-exports.html).
 */
export const instanceTypeZonesOutput = 'InstanceTypeZones';

/**
 * `g5.xlarge:us-west-2a,us-west-2b;m7i.large:us-west-2a,…` (types sorted, zones sorted; a type
 * offered in none of the zones has nothing after its colon). The same text is the output's value and
 * `-c ferry:instanceTypeZones=…` for `npx cdk synth`.
 */
export function formatInstanceTypeZones(offerings: InstanceTypeZones): string {
  return Object.keys(offerings)
    .sort()
    .map((type) => `${type}:${[...new Set(offerings[type])].sort().join(',')}`)
    .join(';');
}

/** The text of formatInstanceTypeZones back; `source` names where it came from in the error. */
export function parseInstanceTypeZones(text: string, source: string): Record<string, string[]> {
  const offerings: Record<string, string[]> = {};
  for (const entry of text.split(';').map((e) => e.trim())) {
    if (entry === '') continue;
    const match = /^([a-z0-9-]+\.[a-z0-9-]+):([a-z0-9-,\s]*)$/.exec(entry);
    if (!match) {
      throw new FerryError('usage', `${source}: "${entry}" is not <instance type>:<zone>,<zone>…`, {
        hint: 'Write it as g5.xlarge:us-west-2a,us-west-2b;m7i.large:us-west-2a,us-west-2b,us-west-2c',
      });
    }
    offerings[match[1]!] = match[2]!
      .split(',')
      .map((zone) => zone.trim())
      .filter((zone) => zone !== '');
  }
  return offerings;
}

/**
 * The platform zones a pool of `types` may launch in: those offering at least one of them, in the
 * order of `zones`. Undefined when that is not known (no zone names: CDK's `Fn::GetAZs` picks; or a
 * type whose offerings nobody asked for): the pool then spans every zone, as before. An empty list is
 * a pool no zone of the platform offers, which the CLI refuses to add (zones.ts checkPoolOfferings).
 */
export function poolZones(
  types: readonly string[],
  zones: readonly string[] | undefined,
  offerings: InstanceTypeZones | undefined,
): string[] | undefined {
  if (!zones || !offerings || types.some((type) => offerings[type] === undefined)) return undefined;
  const offered = new Set(types.flatMap((type) => offerings[type] ?? []));
  return zones.filter((zone) => offered.has(zone));
}
