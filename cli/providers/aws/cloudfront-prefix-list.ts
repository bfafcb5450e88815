/**
 * CloudFront's origin-facing addresses, for the security group of a load-balanced endpoint's ALB
 * behind CloudFront (infra/constructs/https-front.ts; docs/security-aws.md "Load-balanced endpoints
 * over HTTPS").
 *
 * AWS keeps them in the AWS-managed prefix list `com.amazonaws.global.cloudfront.origin-facing`,
 * made for exactly this: a security group rule that admits CloudFront's origin-facing servers and
 * nothing else
 * (https://docs.aws.amazon.com/AmazonCloudFront/latest/DeveloperGuide/LocationsOfEdgeServers.html#managed-prefix-list,
 * https://docs.aws.amazon.com/vpc/latest/userguide/working-with-aws-managed-prefix-lists.html).
 * A rule names the list by id, and the id differs per region; the stacks are environment-agnostic
 * (synth needs no credentials), so the deploy asks EC2 for it, by name, in the deploy's region
 * (DescribeManagedPrefixLists with the `prefix-list-name` filter,
 * https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeManagedPrefixLists.html) and
 * passes it to the synth as `cloudFrontPrefixListId` (infra/app.ts; `-c ferry:cloudFrontPrefixList`
 * with `npx cdk synth`).
 */
import type {
  DescribeManagedPrefixListsCommand,
  DescribeManagedPrefixListsCommandOutput,
  ManagedPrefixList,
} from '@aws-sdk/client-ec2';
import { FerryError } from '../../../core/errors.js';
import type { Manifest } from '../../../core/manifest.js';
import type { LbHttpsOptions } from '../../../infra/constructs/https-front.js';
import { userFixableErrors } from './zones.js';

/** The IPv4 list of CloudFront's origin-facing servers (the ALBs are IPv4 only). */
export const cloudFrontOriginFacingList = 'com.amazonaws.global.cloudfront.origin-facing';

/** The EC2 call this module makes (the SDK client through ec2OnFirstUse, or a test's stand-in). */
export interface PrefixListsEc2 {
  send(command: DescribeManagedPrefixListsCommand): Promise<DescribeManagedPrefixListsCommandOutput>;
}

/** Whether a deploy of `manifest` puts any load-balanced endpoint behind CloudFront (no domain). */
export function needsCloudFrontPrefixList(
  manifest: Pick<Manifest, 'endpoints'>,
  https: LbHttpsOptions | undefined,
): boolean {
  return https === undefined && manifest.endpoints.some((endpoint) => endpoint.kind === 'lb');
}

const permissionHint =
  'Allow ec2:DescribeManagedPrefixLists to your AWS identity (the CLI makes this call itself, not through the CDK roles), or check AWS_PROFILE/AWS_REGION. ' +
  'With FERRY_AWS_DOMAIN set, load-balanced endpoints use no CloudFront and need no such call.';

/**
 * Only AWS can hold a list by this name: a customer's list "cannot start with com.amazonaws"
 * (CreateManagedPrefixList's PrefixListName,
 * https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CreateManagedPrefixList.html), so the
 * name is the whole test; the filter already asked for it, this keeps a stray answer out.
 */
const isCloudFrontList = (list: ManagedPrefixList): boolean =>
  list.PrefixListName === cloudFrontOriginFacingList;

/**
 * The id of CloudFront's origin-facing prefix list in the EC2 client's region. A refused call is the
 * user's to fix (exit 2, the IAM action named); a region without the list too (exit 2: the domain
 * mode needs no list).
 */
export async function cloudFrontPrefixListId(ec2: PrefixListsEc2): Promise<string> {
  const found: ManagedPrefixList[] = [];
  try {
    const { DescribeManagedPrefixListsCommand } = await import('@aws-sdk/client-ec2');
    let nextToken: string | undefined;
    // One page in practice (one name); NextToken is followed anyway, a few pages at most.
    for (let page = 0; page < 10; page++) {
      const answer = await ec2.send(
        new DescribeManagedPrefixListsCommand({
          Filters: [{ Name: 'prefix-list-name', Values: [cloudFrontOriginFacingList] }],
          ...(nextToken ? { NextToken: nextToken } : {}),
        }),
      );
      found.push(...(answer.PrefixLists ?? []));
      nextToken = answer.NextToken || undefined;
      if (!nextToken) break;
    }
  } catch (error) {
    const { name, message } = error as { name?: string; message?: string };
    const denied = name !== undefined && userFixableErrors.has(name);
    throw new FerryError(
      denied ? 'usage' : 'failed',
      `Cannot look up CloudFront's origin-facing prefix list (EC2 DescribeManagedPrefixLists, ${cloudFrontOriginFacingList}): ${message ?? String(error)}`,
      {
        hint: denied ? permissionHint : 'Check AWS_REGION and the network, then run the deploy again.',
        cause: error,
      },
    );
  }
  const ids = [
    ...new Set(
      found
        .filter(isCloudFrontList)
        .map((list) => list.PrefixListId)
        .filter((id): id is string => typeof id === 'string' && id !== ''),
    ),
  ];
  if (ids.length !== 1) {
    throw new FerryError(
      'usage',
      ids.length === 0
        ? `EC2 lists no prefix list ${cloudFrontOriginFacingList} in this region: the ALBs of load-balanced endpoints behind CloudFront could not be closed to CloudFront's addresses`
        : `EC2 lists ${ids.length} prefix lists named ${cloudFrontOriginFacingList} in this region (${ids.join(', ')}); Ferry expects one`,
      {
        hint:
          'Check AWS_REGION. In a region without the list, give the load-balanced endpoints a domain ' +
          '(FERRY_AWS_DOMAIN; docs/security-aws.md "Load-balanced endpoints over HTTPS"): the ALB then serves HTTPS itself, with no CloudFront in front.',
      },
    );
  }
  return ids[0]!;
}
