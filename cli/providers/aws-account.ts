/**
 * What an AWS account needs before Ferry's stacks can work in it, checked by `ferry deploy` up front
 * rather than discovered as a failed (and rolled back) stack:
 *
 *  - The ECS service-linked role (AWSServiceRoleForECS). ECS tries to create it on CreateCluster, but
 *    only when the caller may; a CloudFormation-created cluster in an account that never used ECS
 *    fails with "Unable to assume the service linked role. Please verify that the ECS service linked
 *    role exists". CreateServiceLinkedRole for ecs.amazonaws.com is idempotent in effect: when the
 *    role exists IAM answers InvalidInput "...has been taken in this account", which is fine. A
 *    least-privilege deployer may not create service-linked roles at all (IAM wants
 *    iam:CreateServiceLinkedRole for that), so a refusal falls back to GetRole, and a refusal of
 *    that too leaves the check to CloudFormation with a warning.
 *    https://docs.aws.amazon.com/AmazonECS/latest/developerguide/using-service-linked-roles.html
 *    https://docs.aws.amazon.com/IAM/latest/UserGuide/using-service-linked-roles.html
 *    https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_CreateCluster.html
 *    https://docs.aws.amazon.com/IAM/latest/APIReference/API_CreateServiceLinkedRole.html
 *    https://docs.aws.amazon.com/IAM/latest/APIReference/API_GetRole.html
 *  - A stack CloudFormation can deploy over (usableStack): none, or one that is neither dead
 *    (ROLLBACK_COMPLETE after a failed first deploy, DELETE_FAILED after a failed undeploy), nor
 *    never created (REVIEW_IN_PROGRESS), nor busy with another operation, nor stuck in a failed
 *    rollback (UPDATE_ROLLBACK_FAILED: the fix is named, never run), nor another app's.
 *  - SQS's queue names released (waitForQueueNames) before a deploy creates queues of names its
 *    stack deleted moments ago: an undeploy, of the stack or of some of its endpoints, or a
 *    rolled-back deploy.
 */
import {
  CreateServiceLinkedRoleCommand,
  type CreateServiceLinkedRoleCommandOutput,
  GetRoleCommand,
  type GetRoleCommandOutput,
  IAMClient,
} from '@aws-sdk/client-iam';
import { SubscribeCommand, type SubscribeCommandOutput } from '@aws-sdk/client-sns';
import { FerryError } from '../../core/errors.js';
import { ownershipTags } from '../../infra/names.js';
import type { Reporter } from '../io.js';
import {
  type CdkToolkit,
  deadStackStatuses,
  isBusyStackStatus,
  rollbackFailedStatus,
  type StackDescription,
  type StackLookup,
  type ToolkitEventHandler,
  uncreatedStackStatuses,
} from './toolkit.js';

/** The IAM calls this module makes (the SDK client, or a test's stand-in). */
export interface IamLike {
  send(command: CreateServiceLinkedRoleCommand): Promise<CreateServiceLinkedRoleCommandOutput>;
  send(command: GetRoleCommand): Promise<GetRoleCommandOutput>;
  destroy?(): void;
}

export const ecsServiceName = 'ecs.amazonaws.com';
/** The role's fixed name (the ECS page above). */
export const ecsServiceLinkedRoleName = 'AWSServiceRoleForECS';

const errorOf = (error: unknown) => error as { name?: string; message?: string };
/** IAM's refusal (the Query API's code is AccessDenied; the SDK keeps it as the name). */
const isAccessDenied = (error: unknown) => /^AccessDenied(Exception)?$/.test(errorOf(error).name ?? '');

const administratorHint =
  'Ask an account administrator to run `aws iam create-service-linked-role --aws-service-name ecs.amazonaws.com` once, ' +
  'or grant iam:CreateServiceLinkedRole for ecs.amazonaws.com to the deploying identity.';

/**
 * Creates the ECS service-linked role, or confirms it is there. `unchecked`: IAM let this identity
 * neither create nor read it; the deploy goes on (if the role is really missing, CloudFormation's
 * cluster creation fails with ECS's own message).
 */
export async function ensureEcsServiceLinkedRole(
  iam: IamLike,
  reporter: Reporter,
): Promise<'created' | 'exists' | 'unchecked'> {
  try {
    await iam.send(new CreateServiceLinkedRoleCommand({ AWSServiceName: ecsServiceName }));
    reporter.line('  created the ECS service-linked role (AWSServiceRoleForECS): first use of ECS here');
    return 'created';
  } catch (error) {
    const { name, message } = errorOf(error);
    if (name === 'InvalidInputException' && /has been taken/i.test(message ?? '')) return 'exists';
    if (isAccessDenied(error)) return ecsServiceLinkedRoleByGetRole(iam, reporter, error);
    throw new FerryError(
      'failed',
      `Cannot create or check the ECS service-linked role: ${message ?? String(error)}`,
      { hint: administratorHint, cause: error },
    );
  }
}

/** After CreateServiceLinkedRole was refused: is the role there anyway? */
async function ecsServiceLinkedRoleByGetRole(
  iam: IamLike,
  reporter: Reporter,
  createError: unknown,
): Promise<'exists' | 'unchecked'> {
  try {
    await iam.send(new GetRoleCommand({ RoleName: ecsServiceLinkedRoleName }));
    return 'exists';
  } catch (error) {
    if (errorOf(error).name === 'NoSuchEntityException' || errorOf(error).name === 'NoSuchEntity') {
      throw new FerryError(
        'failed',
        `This account has no ECS service-linked role (${ecsServiceLinkedRoleName}), and this identity may not create it: ${errorOf(createError).message ?? String(createError)}`,
        { hint: administratorHint, cause: createError },
      );
    }
    reporter.line(
      `  warning: cannot check the ECS service-linked role (${ecsServiceLinkedRoleName}): IAM refused iam:CreateServiceLinkedRole, and iam:GetRole answered: ${errorOf(error).message ?? String(error)}. ` +
        "Going on; if the role is missing, creating the platform's ECS cluster fails. " +
        'Fix: `aws iam create-service-linked-role --aws-service-name ecs.amazonaws.com`, once, as an administrator.',
    );
    return 'unchecked';
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

/** Why a stack in this state is deleted before a deploy, or undefined when it is not. */
export function replacedBecause(status: string): string | undefined {
  if (status === 'DELETE_FAILED') return 'an earlier delete of it could not delete some of its resources';
  if (deadStackStatuses.has(status)) return 'an earlier first deploy failed and rolled back';
  if (uncreatedStackStatuses.has(status)) {
    return 'an earlier first deploy stopped before CloudFormation created anything';
  }
  return undefined;
}

/** A stack CloudFormation is working on: wait (exit 2), rather than fail halfway into a deploy. */
export function stackBusyError(stack: string, status: string): FerryError {
  return new FerryError(
    'usage',
    `Stack ${stack} is in ${status}: another deploy of this stack is running (or its undeploy or rollback)`,
    {
      hint: 'Wait for it, or see its events in the CloudFormation console; then run the command again.',
    },
  );
}

/**
 * The stack as it stands, ready to deploy over: undefined when there is none, also after deleting one
 * left in ROLLBACK_COMPLETE or DELETE_FAILED (CloudFormation cannot update such a stack, only delete
 * it) or in REVIEW_IN_PROGRESS (never created; deleted rather than created over, so no later step
 * reads a stack without outputs). Refuses (exit 2) a stack another operation is running on, and one in
 * UPDATE_ROLLBACK_FAILED (rollbackFailedError, with the command that unblocks it). With
 * `owner`, refuses (exit 2) a stack whose ownership tags name another app/environment, or none.
 */
export async function usableStack(
  ports: Pick<StackPorts, 'lookup' | 'toolkit'>,
  stack: string,
  options: { reporter: Reporter; onEvent: ToolkitEventHandler; owner?: { app: string; env: string } },
): Promise<StackDescription | undefined> {
  const { reporter, owner } = options;
  let described = await ports.lookup.describe(stack);
  const because = described && replacedBecause(described.status);
  if (described && because) {
    reporter.line(
      `  stack ${stack} is in ${described.status} (${because}): deleting it, then deploying it again`,
    );
    await deleteBeforeRedeploy(ports, stack, options.onEvent);
    described = undefined;
  }
  if (described?.status === rollbackFailedStatus) throw await rollbackFailedError(ports, stack);
  if (described && isBusyStackStatus(described.status)) throw stackBusyError(stack, described.status);
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
        { hint: 'Pick another app name (--app, or `app` in .ferry/config.json) or environment (--env).' },
      );
    }
  }
  return described;
}

/**
 * A stack in UPDATE_ROLLBACK_FAILED: an update failed, and so did its rollback. CloudFormation refuses
 * to update it ("You can't update a stack that is in the UPDATE_ROLLBACK_FAILED state",
 * https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/using-cfn-updating-stacks-continueupdaterollback.html),
 * so toolkit-lib's change set would fail with a message that says nothing of the way on. That way is
 * ContinueUpdateRollback, which brings the stack back to UPDATE_ROLLBACK_COMPLETE; its ResourcesToSkip
 * takes only resources "in the UPDATE_FAILED state because a rollback failed", and a skipped
 * resource is left "inconsistent with the state of the resources in the stack template"
 * (https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_ContinueUpdateRollback.html).
 * Ferry names the command and never runs it: what stopped the rollback (a resource deleted or changed
 * by hand, a missing permission) may need fixing first, and skipping is the owner's decision.
 */
async function rollbackFailedError(ports: Pick<StackPorts, 'lookup'>, stack: string): Promise<FerryError> {
  // The events name the resources to skip; without them, the command without the option stands.
  const failures = await ports.lookup.rollbackFailures(stack).catch(() => []);
  const command = `aws cloudformation continue-update-rollback --stack-name ${stack}`;
  const listed =
    failures.length > 0
      ? ` CloudFormation could not roll back:\n${failures.map((f) => `  ${f.logicalId} (${f.type}): ${f.reason}`).join('\n')}`
      : '';
  const skip =
    failures.length > 0
      ? ` If they cannot be fixed, skip them: \`${command} --resources-to-skip ${failures.map((f) => f.logicalId).join(' ')}\` ` +
        '(CloudFormation then leaves them as they are, which may differ from the template until a later deploy changes them).'
      : '';
  return new FerryError(
    'usage',
    `Stack ${stack} is in ${rollbackFailedStatus}: an update of it failed and so did its rollback, and CloudFormation updates it again only once the rollback is continued.${listed}`,
    {
      hint:
        `Fix what stopped the rollback (see the stack's events), then run \`${command}\`.${skip} ` +
        'Once the stack is in UPDATE_ROLLBACK_COMPLETE, run this command again.',
    },
  );
}

/**
 * Deletes a dead stack. When CloudFormation cannot delete some of its resources again, it says which
 * and why (their DELETE_FAILED events), and how to delete the stack without them: DeleteStack's
 * RetainResources, "for stacks in the DELETE_FAILED state"
 * (https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_DeleteStack.html).
 */
async function deleteBeforeRedeploy(
  ports: Pick<StackPorts, 'lookup' | 'toolkit'>,
  stack: string,
  onEvent: ToolkitEventHandler,
): Promise<void> {
  try {
    await ports.toolkit.destroy([stack], onEvent);
  } catch (error) {
    // The events are a better answer than the toolkit's; without them, the toolkit's stands.
    const failures = await ports.lookup.deleteFailures(stack).catch(() => []);
    if (failures.length === 0) throw error;
    const ids = failures.map((f) => f.logicalId).join(' ');
    throw new FerryError(
      'failed',
      `Stack ${stack} could not be deleted, so it cannot be deployed again. CloudFormation could not delete:\n${failures
        .map((f) => `  ${f.logicalId} (${f.type}): ${f.reason}`)
        .join('\n')}`,
      {
        hint:
          'Remove what holds them (above), then run the command again. Or delete the stack and keep them: ' +
          `\`aws cloudformation delete-stack --stack-name ${stack} --retain-resources ${ids}\` ` +
          "(CloudFormation's option to retain resources of a stack in DELETE_FAILED); what it keeps is yours to delete.",
        cause: error,
      },
    );
  }
}

/**
 * Waits until SQS lets a deploy of `stack` create queues of these names: 60 s (+ skew) after the
 * stack last deleted one of them. Endpoint queue names are fixed and endpoint ids deterministic
 * (infra/names.ts), so deploying an endpoint again asks for the very names its undeploy deleted:
 * the whole stack's delete (`live` false), an update without some endpoints (its queues go in
 * UPDATE_COMPLETE_CLEANUP_IN_PROGRESS), or the rollback of a deploy that added some. Without the
 * wait, CreateQueue fails and the deploy rolls back.
 */
export async function waitForQueueNames(
  ports: Pick<StackPorts, 'lookup' | 'clock'>,
  stack: string,
  options: { queueNames: readonly string[]; live: boolean; reporter: Reporter },
): Promise<void> {
  const { queueNames, live, reporter } = options;
  if (queueNames.length === 0) return;
  const sinceMs = ports.clock.nowMs() - queueNameReuseMs;
  const deletedAt = await ports.lookup.queuesDeletedAtMs(stack, { queueNames, sinceMs, live });
  const waitMs = deletedAt === undefined ? 0 : deletedAt + queueNameReuseMs - ports.clock.nowMs();
  if (waitMs <= 0) return;
  const what = live
    ? `stack ${stack} deleted queues that this deploy creates again moments ago (an undeploy of endpoints, or a rolled-back deploy)`
    : `stack ${stack} was deleted moments ago`;
  reporter.line(
    `  waiting ${Math.ceil(waitMs / 1000)} s: ${what}, and SQS reuses a queue name only 60 s after that queue was deleted`,
  );
  await ports.clock.sleep(waitMs);
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
