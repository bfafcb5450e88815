/**
 * What an AWS account needs before Ferry's stacks can work in it, checked by `ferry deploy` up front
 * rather than discovered as a failed (and rolled back) stack:
 *
 *  - The ECS service-linked role (AWSServiceRoleForECS). ECS tries to create it on CreateCluster, but
 *    only when the caller may; a CloudFormation-created cluster in an account that never used ECS
 *    fails with "Unable to assume the service linked role. Please verify that the ECS service linked
 *    role exists". CreateServiceLinkedRole for ecs.amazonaws.com is idempotent in effect: when the
 *    role exists IAM answers InvalidInput "...has been taken in this account", which is fine.
 *    https://docs.aws.amazon.com/AmazonECS/latest/developerguide/using-service-linked-roles.html
 *    https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_CreateCluster.html
 *    https://docs.aws.amazon.com/IAM/latest/APIReference/API_CreateServiceLinkedRole.html
 *  - A stack CloudFormation can deploy over (usableStack): none, or one that is neither dead
 *    (ROLLBACK_COMPLETE after a failed first deploy) nor another app's; and, when it must be
 *    created again right after a delete, SQS's queue names released.
 */
import {
  CreateServiceLinkedRoleCommand,
  type CreateServiceLinkedRoleCommandOutput,
  IAMClient,
} from '@aws-sdk/client-iam';
import { SubscribeCommand, type SubscribeCommandOutput } from '@aws-sdk/client-sns';
import { FerryError } from '../../core/errors.js';
import { ownershipTags } from '../../infra/names.js';
import type { Reporter } from '../io.js';
import {
  type CdkToolkit,
  deadStackStatuses,
  type StackDescription,
  type StackLookup,
  type ToolkitEventHandler,
} from './toolkit.js';

/** The IAM call this module makes (the SDK client, or a test's stand-in). */
export interface IamLike {
  send(command: CreateServiceLinkedRoleCommand): Promise<CreateServiceLinkedRoleCommandOutput>;
  destroy?(): void;
}

export const ecsServiceName = 'ecs.amazonaws.com';

/** Creates the ECS service-linked role, or confirms it is there. */
export async function ensureEcsServiceLinkedRole(
  iam: IamLike,
  reporter: Reporter,
): Promise<'created' | 'exists'> {
  try {
    await iam.send(new CreateServiceLinkedRoleCommand({ AWSServiceName: ecsServiceName }));
    reporter.line('  created the ECS service-linked role (AWSServiceRoleForECS): first use of ECS here');
    return 'created';
  } catch (error) {
    const { name, message } = error as { name?: string; message?: string };
    if (name === 'InvalidInputException' && /has been taken/i.test(message ?? '')) return 'exists';
    throw new FerryError(
      'failed',
      `Cannot create or check the ECS service-linked role: ${message ?? String(error)}`,
      {
        hint:
          'Ask an account administrator to run `aws iam create-service-linked-role --aws-service-name ecs.amazonaws.com` once, ' +
          'or grant iam:CreateServiceLinkedRole for ecs.amazonaws.com to the deploying identity.',
        cause: error,
      },
    );
  }
}

/** The real client, from the usual AWS credential chain. */
export function iamFromEnv(): IamLike {
  return new IAMClient({}) as unknown as IamLike;
}

/**
 * SQS: "You must wait 60 seconds after deleting a queue before you can create another queue with the
 * same name" (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_CreateQueue.html,
 * and API_DeleteQueue.html). A few seconds more for clock skew between CloudFormation and here.
 */
export const queueNameReuseMs = 60_000 + 5_000;

export interface StackPorts {
  lookup: StackLookup;
  toolkit: CdkToolkit;
  clock: { nowMs(): number; sleep(ms: number): Promise<void> };
}

/**
 * The stack as it stands, ready to deploy over: undefined when there is none, also after deleting one
 * left in ROLLBACK_COMPLETE (CloudFormation cannot update such a stack, only delete it). With `owner`,
 * refuses (exit 2) a stack whose ownership tags name another app/environment, or none. Before a
 * stack is created again, waits until SQS lets its queue names be reused.
 */
export async function usableStack(
  ports: StackPorts,
  stack: string,
  options: { reporter: Reporter; onEvent: ToolkitEventHandler; owner?: { app: string; env: string } },
): Promise<StackDescription | undefined> {
  const { reporter, owner } = options;
  let described = await ports.lookup.describe(stack);
  if (described && deadStackStatuses.has(described.status)) {
    reporter.line(
      `  stack ${stack} is in ${described.status} (an earlier first deploy failed and rolled back): deleting it, then deploying it again`,
    );
    await ports.toolkit.destroy([stack], options.onEvent);
    described = undefined;
  }
  if (described && owner) {
    const app = described.tags[ownershipTags.app];
    const env = described.tags[ownershipTags.env];
    if (app !== owner.app || env !== owner.env) {
      const who =
        app === undefined
          ? 'something other than Ferry (no ferry:app tag)'
          : `app ${app}, environment ${env}`;
      throw new FerryError(
        'usage',
        `Stack ${stack} belongs to ${who}, not ${owner.app}/${owner.env}: refusing to deploy over it`,
        { hint: 'Pick another app name (--app, or `app` in ferry.toml) or environment (--env).' },
      );
    }
  }
  if (!described) {
    const deletedAt = await ports.lookup.queuesDeletedAtMs(stack);
    const waitMs = deletedAt === undefined ? 0 : deletedAt + queueNameReuseMs - ports.clock.nowMs();
    if (waitMs > 0) {
      reporter.line(
        `  waiting ${Math.ceil(waitMs / 1000)} s: stack ${stack} was deleted moments ago, and SQS reuses a queue name only 60 s after that queue was deleted`,
      );
      await ports.clock.sleep(waitMs);
    }
  }
  return described;
}

export interface SnsLike {
  send(command: SubscribeCommand): Promise<SubscribeCommandOutput>;
}

/**
 * Subscribes an email address to the alarm topic. SNS answers a repeat subscription of the same
 * address with the existing one, so every deploy may ask; a new address gets a confirmation mail and
 * receives nothing until it is confirmed (https://docs.aws.amazon.com/sns/latest/api/API_Subscribe.html).
 */
export async function subscribeAlarmEmail(
  sns: SnsLike,
  topicArn: string,
  email: string,
  reporter: Reporter,
): Promise<void> {
  if (!/^[^@\s]+@[^@\s]+\.[^@\s]+$/.test(email)) {
    throw new FerryError('usage', `--alarm-email ${JSON.stringify(email)} is not an email address`);
  }
  const result = await sns.send(
    new SubscribeCommand({
      TopicArn: topicArn,
      Protocol: 'email',
      Endpoint: email,
      ReturnSubscriptionArn: true,
    }),
  );
  const pending = !result.SubscriptionArn || /pending/i.test(result.SubscriptionArn);
  reporter.line(
    pending
      ? `  alarms: confirmation mail sent to ${email} (alarms reach it once the link in it is followed)`
      : `  alarms: ${email} is subscribed`,
  );
}
