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
 *    never created (REVIEW_IN_PROGRESS), nor busy with another operation (also a REVIEW_IN_PROGRESS
 *    stack made minutes ago: another first deploy at its approval prompt), nor stuck in a failed
 *    rollback (UPDATE_ROLLBACK_FAILED: the fix is named, never run), nor another app's. Never
 *    deleted by Ferry: FerryPlatform in DELETE_FAILED (someone is deleting the platform; a new one
 *    would start without its keys and records), and a dead stack with termination protection on.
 *  - Before the platform is created: no ECR repositories of its fixed names left by a platform
 *    deleted earlier (checkPlatformCreatable), which the create would fail on, every time.
 *  - SQS's queue names released (waitForQueueNames) before a deploy creates queues of names its
 *    stack deleted moments ago: an undeploy, of the stack or of some of its endpoints, or a
 *    rolled-back deploy.
 */
import { DescribeRepositoriesCommand, type DescribeRepositoriesCommandOutput } from '@aws-sdk/client-ecr';
import {
  CreateServiceLinkedRoleCommand,
  type CreateServiceLinkedRoleCommandOutput,
  GetRoleCommand,
  type GetRoleCommandOutput,
  IAMClient,
} from '@aws-sdk/client-iam';
import { SubscribeCommand, type SubscribeCommandOutput } from '@aws-sdk/client-sns';
import { FerryError } from '../../core/errors.js';
import { ownershipTags, platformStackName } from '../../infra/names.js';
import { workerImages } from '../../worker-image/images.js';
import type { Reporter } from '../io.js';
import { awsAccessHint } from './aws/access.js';
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
      // A call that never reached IAM (no network) or that IAM refused for its credentials is not
      // fixed by an administrator creating the role: say what is.
      { hint: awsAccessHint(error) ?? administratorHint, cause: error },
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

/**
 * How long a stack in REVIEW_IN_PROGRESS is taken for another deploy's, not an abandoned one. A first
 * deploy through toolkit-lib creates its CREATE change set, which puts the new stack in
 * REVIEW_IN_PROGRESS, and only then asks for approval of IAM changes (toolkit.js `_deploy`:
 * `deployments.prepareStack`, then the CDK_TOOLKIT_I5060 request); the stack stays there while the
 * person reads the diff. Deleting it then deletes the other deployer's stack and change set under
 * them. A first deploy whose change set failed, or that was killed at the prompt, leaves the stack
 * there for good (toolkit-lib cleans up only after a declined prompt, deployments.js
 * cleanupChangeSet). Half an hour is longer than anyone reads a diff, short enough that an abandoned
 * stack does not block for long; until then the error names the command that deletes it.
 */
export const reviewHeldMs = 30 * 60_000;

/**
 * How long ago a stack in REVIEW_IN_PROGRESS was made, when that is less than `reviewHeldMs` (another
 * deploy may hold it); undefined for any other stack, and one whose creation time is unknown.
 */
export function heldForReviewMs(described: StackDescription, nowMs: number): number | undefined {
  if (!uncreatedStackStatuses.has(described.status) || described.createdMs === undefined) return undefined;
  const ageMs = nowMs - described.createdMs;
  return ageMs < reviewHeldMs ? Math.max(0, ageMs) : undefined;
}

/** Why a stack in this state is deleted before a deploy, or undefined when it is not. */
export function replacedBecause(status: string): string | undefined {
  if (status === 'DELETE_FAILED') return 'an earlier delete of it could not delete some of its resources';
  if (deadStackStatuses.has(status)) return 'an earlier first deploy failed and rolled back';
  if (uncreatedStackStatuses.has(status)) {
    return 'an earlier first deploy stopped before CloudFormation created anything, over 30 minutes ago';
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
 * it) or in REVIEW_IN_PROGRESS for longer than `reviewHeldMs` (never created; deleted rather than
 * created over, so no later step reads a stack without outputs). Refuses (exit 2) a stack another
 * operation is running on (also one in REVIEW_IN_PROGRESS made less than `reviewHeldMs` ago), one in
 * UPDATE_ROLLBACK_FAILED (rollbackFailedError, with the command that unblocks it), FerryPlatform in
 * DELETE_FAILED (platformDeleteFailedError), and a stack it would delete that has termination
 * protection on (CloudFormation would refuse the delete). With `owner`, refuses (exit 2) a stack
 * whose ownership tags name another app/environment, or none.
 */
export async function usableStack(
  ports: Pick<StackPorts, 'lookup' | 'toolkit'> & Partial<Pick<StackPorts, 'clock'>>,
  stack: string,
  options: { reporter: Reporter; onEvent: ToolkitEventHandler; owner?: { app: string; env: string } },
): Promise<StackDescription | undefined> {
  const { reporter, owner } = options;
  let described = await ports.lookup.describe(stack);
  if (described?.status === 'DELETE_FAILED' && stack === platformStackName) {
    throw await platformDeleteFailedError(ports, stack);
  }
  const heldMs = described && heldForReviewMs(described, ports.clock?.nowMs() ?? Date.now());
  if (described && heldMs !== undefined) throw reviewHeldError(stack, described.status, heldMs);
  const because = described && replacedBecause(described.status);
  if (described?.terminationProtection && because) {
    throw protectedDeadStackError(stack, described.status, because);
  }
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
 * A REVIEW_IN_PROGRESS stack made `ageMs` ago: most likely another first deploy of it (a teammate,
 * CI) waiting at its approval prompt (reviewHeldMs). Deleting it would pull that deploy's stack and
 * change set from under it.
 */
function reviewHeldError(stack: string, status: string, ageMs: number): FerryError {
  const minutes = Math.max(1, Math.round(ageMs / 60_000));
  const wait = Math.ceil((reviewHeldMs - ageMs) / 60_000);
  return new FerryError(
    'usage',
    `Stack ${stack} is in ${status} since ${minutes} min ago: another first deploy of this stack is in progress (its change set waits for approval, or is being executed)`,
    {
      hint:
        'Wait for it, or see the stack in the CloudFormation console; then run the command again. ' +
        `If no other deploy is running (an earlier first deploy failed or was interrupted), delete the stack: \`aws cloudformation delete-stack --stack-name ${stack}\`, ` +
        `then run the command again (after ${wait} min more, Ferry takes it for abandoned and deletes it itself).`,
    },
  );
}

/**
 * A stack Ferry would delete (replacedBecause) that has termination protection on: "If a user
 * attempts to delete a stack with termination protection enabled, the deletion fails and the stack,
 * including its status, remains unchanged"; it can be set on a stack in any status but
 * DELETE_IN_PROGRESS and DELETE_COMPLETE
 * (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/using-cfn-protect-stacks.html).
 * Someone turned it on; turning it off is theirs to decide, so Ferry names the command.
 */
function protectedDeadStackError(stack: string, status: string, because: string): FerryError {
  return new FerryError(
    'usage',
    `Stack ${stack} is in ${status} (${because}) and can only be deleted and deployed again, but it has termination protection on, so CloudFormation refuses to delete it`,
    {
      hint:
        `If it may go, turn the protection off: \`aws cloudformation update-termination-protection --no-enable-termination-protection --stack-name ${stack}\`, ` +
        'then run the command again (it deletes the stack and deploys it again).',
    },
  );
}

/** The ECR repositories the platform makes, by their fixed names (worker-image/images.ts, infra/constructs/images.ts). */
export const platformRepositoryNames: readonly string[] = workerImages.map((image) => image.repository);

const deleteRepositoryCommands = (names: readonly string[]) =>
  names.map((name) => `\`aws ecr delete-repository --repository-name ${name} --force\``).join(', ');

/** How a platform deleted earlier is deployed fresh (docs/aws.md "Deploying the platform fresh"). */
const freshPlatformSteps =
  'The new platform starts with empty tables: API keys (`ferry keys create --provider aws` again) and app, environment and endpoint ' +
  'records are in the old platform\'s tables, which are kept and not used by it (docs/aws.md "Deploying the platform fresh").';

/**
 * FerryPlatform in DELETE_FAILED: someone deleted the platform (Ferry never does), and CloudFormation
 * could not delete all of it. Ferry does not finish that delete and create a new platform by itself,
 * as it does for an app stack: the tables, bucket and ECR repositories are `RetainExceptOnCreate`
 * ("behaves like Retain for stack operations, except for the stack operation that initially created
 * the resource", https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-attribute-deletionpolicy.html;
 * infra/retention.ts), so they outlive the delete: the new platform would start without the API keys
 * and records in the kept tables, and its create would fail on the repositories' fixed names, roll
 * back, and be deleted and tried again on every deploy. The steps are the owner's (docs/aws.md
 * "Deleting the platform stack", "Deploying the platform fresh").
 */
async function platformDeleteFailedError(
  ports: Pick<StackPorts, 'lookup'>,
  stack: string,
): Promise<FerryError> {
  const failures = await ports.lookup.deleteFailures(stack).catch(() => []);
  const listed =
    failures.length > 0
      ? ` CloudFormation could not delete:\n${failures.map((f) => `  ${f.logicalId} (${f.type}): ${f.reason}`).join('\n')}`
      : '';
  return new FerryError(
    'usage',
    `Stack ${stack} is in DELETE_FAILED: a delete of the platform stopped part way.${listed}\n` +
      'Ferry does not finish deleting the platform and create a new one by itself: a new platform would not have the API keys and records of this one.',
    { hint: platformDeleteFailedHint(stack) },
  );
}

/** The way on from a platform in DELETE_FAILED, also for commands that only read it. */
export function platformDeleteFailedHint(stack: string): string {
  return (
    `To finish the delete: remove what holds the resources it could not delete (see the stack's events), then \`aws cloudformation delete-stack --stack-name ${stack}\` ` +
    '(docs/aws.md "Deleting the platform stack"). Then delete the kept image repositories, which a new platform creates under the same names: ' +
    `${deleteRepositoryCommands(platformRepositoryNames)}; and run \`ferry deploy --provider aws\`, which creates a new platform. ${freshPlatformSteps}`
  );
}

/** The ECR calls checkPlatformCreatable makes (the SDK client, or a test's stand-in). */
export interface EcrRepositoriesLike {
  send(command: DescribeRepositoriesCommand): Promise<DescribeRepositoriesCommandOutput>;
}

/**
 * Before the platform stack is created: the platform's ECR repositories have fixed names, and a
 * platform deleted earlier kept its own (`RetainExceptOnCreate` keeps them on a delete,
 * infra/retention.ts). The create would fail on the first name that exists, roll back to
 * ROLLBACK_COMPLETE, and the next deploy would delete it and fail the same way, for ever. Asks ECR for
 * each name (DescribeRepositories answers RepositoryNotFoundException for one that does not exist,
 * https://docs.aws.amazon.com/AmazonECR/latest/APIReference/API_DescribeRepositories.html) and
 * stops (exit 2) with the commands that delete the ones found. The kept tables and bucket have
 * generated names and block nothing. An identity ECR refuses the read to gets a warning and the
 * create goes on.
 */
export async function checkPlatformCreatable(ecr: EcrRepositoriesLike, reporter: Reporter): Promise<void> {
  const kept: string[] = [];
  for (const name of platformRepositoryNames) {
    try {
      const found = await ecr.send(new DescribeRepositoriesCommand({ repositoryNames: [name] }));
      if ((found.repositories ?? []).some((r) => r.repositoryName === name)) kept.push(name);
    } catch (error) {
      const code = errorOf(error).name ?? '';
      if (code === 'RepositoryNotFoundException') continue;
      if (isAccessDenied(error)) {
        reporter.line(
          `  warning: cannot check for ECR repositories a deleted platform kept (${errorOf(error).message ?? code}); ` +
            `if ${name} or another of ${platformRepositoryNames.join(', ')} exists, creating ${platformStackName} fails on it`,
        );
        return;
      }
      throw new FerryError(
        'failed',
        `Cannot look up the ECR repository ${name}: ${errorOf(error).message ?? String(error)}`,
        { hint: awsAccessHint(error), cause: error },
      );
    }
  }
  if (kept.length === 0) return;
  throw new FerryError(
    'usage',
    `${platformStackName} is to be created, but ECR repositories of its fixed names exist: ${kept.join(', ')} ` +
      '(kept when a platform was deleted). Its create would fail on them, and roll back.',
    {
      hint:
        `Delete them (their images go with them; the next deploy builds what it needs again): ${deleteRepositoryCommands(kept)}; ` +
        `then run the command again. ${freshPlatformSteps}`,
    },
  );
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
