/**
 * How many resources an app environment's stack may declare. CloudFormation takes at most 500 per
 * template (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/cloudformation-limits.html),
 * and each endpoint declares about 21 (queues, roles, secrets, task definition, service, alarms, and
 * for a load-balanced one its ALB and front; measured in test/infra/template-limits.test.ts,
 * docs/aws.md "How many endpoints an environment fits"). Counted once the stack is built, before
 * synthesis: CDK's own count at synthesis fails with a bare validation error and no way forward, and
 * nothing may reach CloudFormation that it would refuse.
 *
 * Not counted here: CloudFormation's 60 dynamic references per template (same page). A load-balanced
 * endpoint with the CloudFront front uses three, any other endpoint one (docs/security-aws.md), so 21
 * or more CloudFront endpoints in one environment pass this check and are refused by CloudFormation.
 */
import { CfnResource, type Stack } from 'aws-cdk-lib';
import { usage } from '../core/errors.js';

export const maxTemplateResources = 500;

/** The AWS::CDK::Metadata resource CDK adds at synthesis when version reporting is on (the CLI's default). */
const addedAtSynthesis = 1;

/** The resources `stack` will hold in its template: those declared so far plus what synthesis adds. */
export function templateResourceCount(stack: Stack): number {
  const declared = stack.node.findAll().filter((c) => CfnResource.isCfnResource(c)).length;
  return declared + addedAtSynthesis;
}

/** Throws a usage error (exit 2) when the app environment's stack would hold too many resources. */
export function checkTemplateResources(
  stack: Stack,
  environment: { app: string; env: string; endpoints: number },
): void {
  const count = templateResourceCount(stack);
  if (count <= maxTemplateResources) return;
  const { app, env, endpoints } = environment;
  throw usage(
    `${app}/${env} needs ${count} CloudFormation resources for its ${endpoints} endpoints; one stack may hold at most ${maxTemplateResources}`,
    'Split the endpoints across environments: deploy some of them from another project folder, ' +
      'as their own environment (`ferry deploy -e <env>`) or app. docs/aws.md, "How many endpoints an environment fits".',
  );
}
