/**
 * What `ferry deploy --provider aws` checks in the account before deploying: the ECS service-linked
 * role (also for a deployer that may not create it), stacks left in ROLLBACK_COMPLETE, DELETE_FAILED
 * or REVIEW_IN_PROGRESS, stacks another deploy is working on, stacks another app owns, SQS's 60 s
 * queue-name reuse rule (after a stack's delete, and after an update or rollback that deleted queues:
 * https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_CreateQueue.html).
 * The IAM and CloudFormation clients are injected stand-ins that record the exact SDK commands; time
 * is a FakeClock.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import {
  DescribeChangeSetCommand,
  DescribeStackEventsCommand,
  DescribeStacksCommand,
  ListStacksCommand,
  type ResourceStatus,
  type StackEvent,
} from '@aws-sdk/client-cloudformation';
import { CreateServiceLinkedRoleCommand, GetRoleCommand } from '@aws-sdk/client-iam';
import { SubscribeCommand } from '@aws-sdk/client-sns';
import { describe, expect, it } from 'vitest';
import { AwsProvider } from '../../cli/providers/aws.js';
import {
  checkPlatformCreatable,
  type EcrRepositoriesLike,
  ensureEcsServiceLinkedRole,
  type IamLike,
  platformRepositoryNames,
  queueNameReuseMs,
  type SnsLike,
  type StackPorts,
  subscribeAlarmEmail,
  usableStack,
  waitForQueueNames,
} from '../../cli/providers/aws-account.js';
import {
  type CdkToolkit,
  type CloudFormationLike,
  CloudFormationLookup,
  type DeleteFailure,
  type FakeToolkitState,
  RecordingToolkit,
  type StackDescription,
  type StackLookup,
  type StackOutputs,
  type SynthesizedAssembly,
  type ToolkitEventHandler,
} from '../../cli/providers/toolkit.js';
import { MemoryCallTokens } from '../../core/adapters/aws/secrets.js';
import { FakeClock } from '../../core/clock.js';
import { exitCode, FerryError } from '../../core/errors.js';
import { appStackName, platformStackName, queueName } from '../../infra/names.js';
import { cpuEndpoint, sampleManifest } from '../infra/fixtures.js';
import {
  awsError,
  awsProviderHarness,
  deployedRecord,
  zonesEc2 as zonesEc2For,
} from '../support/aws-provider.js';

const lines: string[] = [];
const reporter = { line: (text: string) => lines.push(text) } as never;

/** The error an SDK v3 call gets when `host` has no DNS answer (this machine offline). */
const unreachableAws = (host: string) =>
  Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: 'ENOTFOUND', $metadata: {} });

describe('ECS service-linked role', () => {
  it('asks IAM to create it for ecs.amazonaws.com', async () => {
    const sent: unknown[] = [];
    const iam: IamLike = {
      send: async (command) => {
        sent.push(command);
        return {} as never;
      },
    };
    expect(await ensureEcsServiceLinkedRole(iam, reporter)).toBe('created');
    expect(sent).toHaveLength(1);
    expect(sent[0]).toBeInstanceOf(CreateServiceLinkedRoleCommand);
    expect((sent[0] as CreateServiceLinkedRoleCommand).input).toEqual({
      AWSServiceName: 'ecs.amazonaws.com',
    });
  });

  it('takes "has been taken in this account" as: it exists', async () => {
    const iam: IamLike = {
      send: async () => {
        throw awsError(
          'InvalidInputException',
          'Service role name AWSServiceRoleForECS has been taken in this account, please try a different suffix.',
        );
      },
    };
    expect(await ensureEcsServiceLinkedRole(iam, reporter)).toBe('exists');
  });

  /** IAM refusing CreateServiceLinkedRole, and answering GetRole with `getRole`. */
  function leastPrivilegeIam(getRole: () => unknown) {
    const sent: unknown[] = [];
    const iam: IamLike = {
      send: (async (command: unknown) => {
        sent.push(command);
        if (command instanceof CreateServiceLinkedRoleCommand) {
          throw awsError(
            'AccessDenied',
            'User: arn:aws:iam::123456789012:user/deployer is not authorized to perform: iam:CreateServiceLinkedRole',
          );
        }
        return getRole();
      }) as never,
    };
    return { iam, sent };
  }

  it('when IAM refuses to create it, reads it with GetRole: there is fine', async () => {
    lines.length = 0;
    const { iam, sent } = leastPrivilegeIam(() => ({ Role: { RoleName: 'AWSServiceRoleForECS' } }));
    expect(await ensureEcsServiceLinkedRole(iam, reporter)).toBe('exists');
    expect(sent[1]).toBeInstanceOf(GetRoleCommand);
    expect((sent[1] as GetRoleCommand).input).toEqual({ RoleName: 'AWSServiceRoleForECS' });
    expect(lines).toEqual([]);
  });

  it('when IAM refuses GetRole too, warns on stderr and goes on', async () => {
    lines.length = 0;
    const { iam } = leastPrivilegeIam(() => {
      throw awsError('AccessDenied', 'User is not authorized to perform: iam:GetRole');
    });
    expect(await ensureEcsServiceLinkedRole(iam, reporter)).toBe('unchecked');
    expect(lines.join('\n')).toContain('warning: cannot check the ECS service-linked role');
    expect(lines.join('\n')).toContain(
      'aws iam create-service-linked-role --aws-service-name ecs.amazonaws.com',
    );
  });

  it('fails with the command an administrator can run when the role is missing and IAM refuses to create it', async () => {
    const { iam } = leastPrivilegeIam(() => {
      throw awsError('NoSuchEntityException', 'The role with name AWSServiceRoleForECS cannot be found.');
    });
    const error = await ensureEcsServiceLinkedRole(iam, reporter).catch((e: unknown) => e);
    expect(FerryError.is(error)).toBe(true);
    expect((error as FerryError).message).toContain('no ECS service-linked role');
    expect((error as FerryError).message).toContain('not authorized');
    expect((error as FerryError).hint).toContain(
      'aws iam create-service-linked-role --aws-service-name ecs.amazonaws.com',
    );
  });

  it('fails with the hint on any other IAM error', async () => {
    const iam: IamLike = {
      send: async () => {
        throw awsError('ServiceFailureException', 'IAM is having a bad day');
      },
    };
    const error = await ensureEcsServiceLinkedRole(iam, reporter).catch((e: unknown) => e);
    expect((error as FerryError).message).toContain('bad day');
    expect((error as FerryError).hint).toContain('create-service-linked-role');
  });

  it.each([
    ['no network', unreachableAws('iam.amazonaws.com'), "AWS did not answer: check this machine's network"],
    [
      'credentials AWS refused',
      awsError('InvalidClientTokenId', 'The security token included in the request is invalid.'),
      'Set AWS credentials',
    ],
  ])('with %s, the hint says that, not to ask an administrator for the role', async (_, failure, hint) => {
    const iam: IamLike = {
      send: async () => {
        throw failure;
      },
    };
    const error = await ensureEcsServiceLinkedRole(iam, reporter).catch((e: unknown) => e);
    expect((error as FerryError).message).toContain('Cannot create or check the ECS service-linked role');
    expect((error as FerryError).hint).toContain(hint);
    expect((error as FerryError).hint).not.toContain('administrator');
  });
});

/**
 * A lookup and toolkit over a map of stacks; records destroys. The deletes of `failDestroy` fail as
 * the toolkit's do, and `deleteFailures` is what the stack's events then say.
 */
function fakeStacks(
  stacks: Record<string, StackDescription>,
  more: {
    failDestroy?: string[];
    deleteFailures?: Record<string, DeleteFailure[]>;
    rollbackFailures?: Record<string, DeleteFailure[]>;
  } = {},
) {
  const destroyed: string[][] = [];
  const lookup: StackLookup = {
    outputs: async (name) => stacks[name]?.outputs,
    describe: async (name) => stacks[name],
    queuesDeletedAtMs: async () => undefined,
    deleteFailures: async (name) => more.deleteFailures?.[name] ?? [],
    rollbackFailures: async (name) => more.rollbackFailures?.[name] ?? [],
    changeSetExecution: async () => undefined,
    close: () => {},
  };
  const toolkit = {
    destroy: async (names: readonly string[]) => {
      destroyed.push([...names]);
      for (const name of names) {
        if (more.failDestroy?.includes(name)) {
          throw new FerryError('failed', `Destroying of ${name} failed: ${name} is in DELETE_FAILED`, {
            hint: 'See the CloudFormation events above (or in the AWS console) for the resource that failed.',
          });
        }
        delete stacks[name];
      }
    },
  } as unknown as CdkToolkit;
  const ports: Pick<StackPorts, 'lookup' | 'toolkit'> = { lookup, toolkit };
  return { ports, destroyed };
}

/** A CloudFormation client answering `responses(command)`; records the commands. */
function cloudFormation(responses: (command: unknown) => unknown): {
  cfn: CloudFormationLike;
  sent: unknown[];
} {
  const sent: unknown[] = [];
  const cfn = {
    send: async (command: unknown) => {
      sent.push(command);
      return responses(command);
    },
    destroy: () => {},
  } as unknown as CloudFormationLike;
  return { cfn, sent };
}

/** The repo's FakeClock behind the provider's clock port: a sleep is recorded and moves time on. */
function fakeClock() {
  const clock = new FakeClock();
  const slept: number[] = [];
  return {
    clock,
    slept,
    port: {
      nowMs: () => clock.now(),
      sleep: async (ms: number) => {
        slept.push(ms);
        clock.advance(ms);
      },
    },
  };
}

const queueUrl = (name: string) => `https://sqs.us-east-1.amazonaws.com/123456789012/${name}`;

/** The event of a queue's delete, `ageMs` before `nowMs`. */
const queueDeleted = (name: string, nowMs: number, ageMs: number): StackEvent => ({
  StackId: 'arn:aws:cloudformation:us-east-1:123456789012:stack/Ferry-x/1',
  StackName: 'Ferry-x',
  EventId: `${name}-${ageMs}`,
  LogicalResourceId: 'Queue',
  ResourceType: 'AWS::SQS::Queue',
  ResourceStatus: 'DELETE_COMPLETE',
  PhysicalResourceId: queueUrl(name),
  Timestamp: new Date(nowMs - ageMs),
});

const options = (owner?: { app: string; env: string }) => ({
  reporter,
  onEvent: () => {},
  ...(owner ? { owner } : {}),
});

describe('usableStack', () => {
  it('deletes a stack in ROLLBACK_COMPLETE, says so, and treats it as absent', async () => {
    lines.length = 0;
    const { ports, destroyed } = fakeStacks({
      'Ferry-shop-production-1': { status: 'ROLLBACK_COMPLETE', outputs: {}, tags: {} },
    });
    const found = await usableStack(
      ports,
      'Ferry-shop-production-1',
      options({ app: 'shop', env: 'production' }),
    );
    expect(found).toBeUndefined();
    expect(destroyed).toEqual([['Ferry-shop-production-1']]);
    expect(lines.join('\n')).toContain('is in ROLLBACK_COMPLETE');
    expect(lines.join('\n')).toContain('deleting it, then deploying it again');
  });

  it('deletes a stack left in DELETE_FAILED (a failed undeploy), says so, and treats it as absent', async () => {
    lines.length = 0;
    const { ports, destroyed } = fakeStacks({
      'Ferry-shop-staging-1': {
        status: 'DELETE_FAILED',
        outputs: {},
        tags: { 'ferry:app': 'shop', 'ferry:env': 'staging' },
      },
    });
    const found = await usableStack(ports, 'Ferry-shop-staging-1', options({ app: 'shop', env: 'staging' }));
    expect(found).toBeUndefined();
    expect(destroyed).toEqual([['Ferry-shop-staging-1']]);
    expect(lines.join('\n')).toContain(
      'stack Ferry-shop-staging-1 is in DELETE_FAILED (an earlier delete of it could not delete some of its resources): deleting it, then deploying it again',
    );
  });

  it('when the delete fails again: each resource left and why (its events), how to keep them, exit 1', async () => {
    const failures: DeleteFailure[] = [
      {
        logicalId: 'LbWorkerTargetGroup1F2E3D',
        type: 'AWS::ElasticLoadBalancingV2::TargetGroup',
        reason: 'Target group is currently in use by a listener or a rule',
      },
      {
        logicalId: 'GpuWorkerQueue4C5D6E',
        type: 'AWS::SQS::Queue',
        reason: 'User is not authorized to perform: sqs:DeleteQueue',
      },
    ];
    const { ports, destroyed } = fakeStacks(
      { 'Ferry-x': { status: 'DELETE_FAILED', outputs: {}, tags: {} } },
      { failDestroy: ['Ferry-x'], deleteFailures: { 'Ferry-x': failures } },
    );
    const error = await usableStack(ports, 'Ferry-x', options()).catch((e: unknown) => e);
    expect(FerryError.is(error)).toBe(true);
    expect(exitCode(error)).toBe(1);
    const { message, hint } = error as FerryError;
    expect(message).toContain('Stack Ferry-x could not be deleted');
    for (const f of failures) expect(message).toContain(`\n  ${f.logicalId} (${f.type}): ${f.reason}`);
    expect(hint).toContain(
      '`aws cloudformation delete-stack --stack-name Ferry-x --retain-resources LbWorkerTargetGroup1F2E3D GpuWorkerQueue4C5D6E`',
    );
    expect(destroyed).toEqual([['Ferry-x']]);
  });

  it('when the delete fails again and its events name no resource, the toolkit’s error stands', async () => {
    const { ports } = fakeStacks(
      { 'Ferry-x': { status: 'DELETE_FAILED', outputs: {}, tags: {} } },
      { failDestroy: ['Ferry-x'] },
    );
    const error = await usableStack(ports, 'Ferry-x', options()).catch((e: unknown) => e);
    expect((error as FerryError).message).toBe('Destroying of Ferry-x failed: Ferry-x is in DELETE_FAILED');
  });

  it('deletes a stack left in REVIEW_IN_PROGRESS (never created), says so, and treats it as absent', async () => {
    lines.length = 0;
    const { ports, destroyed } = fakeStacks({
      FerryPlatform: { status: 'REVIEW_IN_PROGRESS', outputs: {}, tags: {} },
    });
    expect(await usableStack(ports, 'FerryPlatform', options())).toBeUndefined();
    expect(destroyed).toEqual([['FerryPlatform']]);
    expect(lines.join('\n')).toContain('is in REVIEW_IN_PROGRESS');
    expect(lines.join('\n')).toContain('stopped before CloudFormation created anything');
  });

  it.each([
    'CREATE_IN_PROGRESS',
    'UPDATE_IN_PROGRESS',
    'UPDATE_COMPLETE_CLEANUP_IN_PROGRESS',
    'UPDATE_ROLLBACK_IN_PROGRESS',
    'DELETE_IN_PROGRESS',
  ])('refuses (exit 2) a stack in %s, which another operation holds, and touches nothing', async (status) => {
    const { ports, destroyed } = fakeStacks({
      'Ferry-x': { status, outputs: {}, tags: { 'ferry:app': 'ml', 'ferry:env': 'prod' } },
    });
    const error = await usableStack(ports, 'Ferry-x', options({ app: 'ml', env: 'prod' })).catch((e) => e);
    expect(FerryError.is(error)).toBe(true);
    expect((error as FerryError).code).toBe('usage');
    expect((error as FerryError).message).toBe(
      `Stack Ferry-x is in ${status}: another deploy of this stack is running (or its undeploy or rollback)`,
    );
    expect((error as FerryError).hint).toContain('CloudFormation console');
    expect(destroyed).toEqual([]);
  });

  it('refuses (exit 2) a stack another app owns, and one with no owner tags', async () => {
    const { ports, destroyed } = fakeStacks({
      'Ferry-x': {
        status: 'UPDATE_COMPLETE',
        outputs: {},
        tags: { 'ferry:app': 'ml', 'ferry:env': 'api-prod' },
      },
      'Ferry-y': { status: 'CREATE_COMPLETE', outputs: {}, tags: {} },
    });
    const other = await usableStack(ports, 'Ferry-x', options({ app: 'ml-api', env: 'prod' })).catch(
      (e) => e,
    );
    expect((other as FerryError).code).toBe('usage');
    expect((other as FerryError).message).toContain('belongs to app ml, environment api-prod');
    const untagged = await usableStack(ports, 'Ferry-y', options({ app: 'ml-api', env: 'prod' })).catch(
      (e) => e,
    );
    expect((untagged as FerryError).message).toContain('something other than Ferry');
    expect(destroyed).toEqual([]);
  });

  it('returns its own stack as it is', async () => {
    const mine = {
      status: 'UPDATE_COMPLETE',
      outputs: { A: '1' },
      tags: { 'ferry:app': 'ml', 'ferry:env': 'prod' },
    };
    const { ports } = fakeStacks({ 'Ferry-x': mine });
    expect(await usableStack(ports, 'Ferry-x', options({ app: 'ml', env: 'prod' }))).toEqual(mine);
  });

  it('never deletes FerryPlatform in DELETE_FAILED: refuses (exit 2) with what is left and the steps of a fresh platform', async () => {
    const failures: DeleteFailure[] = [
      {
        logicalId: 'PoolGpuAsg1A2B3C',
        type: 'AWS::AutoScaling::AutoScalingGroup',
        reason: 'Instances are protected from scale-in',
      },
    ];
    const { ports, destroyed } = fakeStacks(
      { FerryPlatform: { status: 'DELETE_FAILED', outputs: {}, tags: {} } },
      { deleteFailures: { FerryPlatform: failures } },
    );
    const error = await usableStack(ports, 'FerryPlatform', options()).catch((e: unknown) => e);
    expect(FerryError.is(error)).toBe(true);
    expect(exitCode(error)).toBe(2);
    const { message, hint } = error as FerryError;
    expect(message).toContain('Stack FerryPlatform is in DELETE_FAILED');
    expect(message).toContain(
      '\n  PoolGpuAsg1A2B3C (AWS::AutoScaling::AutoScalingGroup): Instances are protected from scale-in',
    );
    expect(hint).toContain('`aws cloudformation delete-stack --stack-name FerryPlatform`');
    for (const name of [
      'ferry/agent',
      'ferry/worker-base-cpu',
      'ferry/worker-base-gpu',
      'ferry/worker-sdxl-turbo',
    ]) {
      expect(hint).toContain(`\`aws ecr delete-repository --repository-name ${name} --force\``);
    }
    expect(hint).toContain('ferry keys create --provider aws');
    expect(destroyed).toEqual([]);
    // A failed first create of the platform is still deleted and created again: RetainExceptOnCreate
    // deleted what it kept when the create rolled back (infra/retention.ts).
    const first = fakeStacks({ FerryPlatform: { status: 'ROLLBACK_COMPLETE', outputs: {}, tags: {} } });
    expect(await usableStack(first.ports, 'FerryPlatform', options())).toBeUndefined();
    expect(first.destroyed).toEqual([['FerryPlatform']]);
  });

  it('REVIEW_IN_PROGRESS made minutes ago is another first deploy at its prompt: refused (exit 2), not deleted; after 30 min it is abandoned and deleted', async () => {
    const time = fakeClock();
    const now = time.clock.now();
    const recent = fakeStacks({
      FerryPlatform: { status: 'REVIEW_IN_PROGRESS', outputs: {}, tags: {}, createdMs: now - 5 * 60_000 },
    });
    const error = await usableStack({ ...recent.ports, clock: time.port }, 'FerryPlatform', options()).catch(
      (e: unknown) => e,
    );
    expect(FerryError.is(error)).toBe(true);
    expect(exitCode(error)).toBe(2);
    expect((error as FerryError).message).toBe(
      'Stack FerryPlatform is in REVIEW_IN_PROGRESS since 5 min ago: another first deploy of this stack is in progress (its change set waits for approval, or is being executed)',
    );
    expect((error as FerryError).hint).toContain(
      '`aws cloudformation delete-stack --stack-name FerryPlatform`',
    );
    expect(recent.destroyed).toEqual([]);
    const old = fakeStacks({
      'Ferry-x': { status: 'REVIEW_IN_PROGRESS', outputs: {}, tags: {}, createdMs: now - 31 * 60_000 },
    });
    expect(await usableStack({ ...old.ports, clock: time.port }, 'Ferry-x', options())).toBeUndefined();
    expect(old.destroyed).toEqual([['Ferry-x']]);
  });

  it.each(['ROLLBACK_COMPLETE', 'DELETE_FAILED', 'REVIEW_IN_PROGRESS'])(
    'a stack in %s with termination protection on is not deleted: refused (exit 2) with the command that turns it off',
    async (status) => {
      const { ports, destroyed } = fakeStacks({
        'Ferry-x': { status, outputs: {}, tags: {}, terminationProtection: true, createdMs: 0 },
      });
      const error = await usableStack(ports, 'Ferry-x', options()).catch((e: unknown) => e);
      expect(FerryError.is(error)).toBe(true);
      expect(exitCode(error)).toBe(2);
      expect((error as FerryError).message).toContain(`Stack Ferry-x is in ${status}`);
      expect((error as FerryError).message).toContain('termination protection on');
      expect((error as FerryError).hint).toContain(
        '`aws cloudformation update-termination-protection --no-enable-termination-protection --stack-name Ferry-x`',
      );
      expect(destroyed).toEqual([]);
    },
  );
});

describe('checkPlatformCreatable', () => {
  /** ECR knowing the repositories `present`; records what it was asked. */
  function ecrWith(present: readonly string[], fail?: Error) {
    const asked: string[][] = [];
    const ecr: EcrRepositoriesLike = {
      send: async (command) => {
        asked.push(command.input.repositoryNames ?? []);
        if (fail) throw fail;
        const name = command.input.repositoryNames?.[0] ?? '';
        if (!present.includes(name)) {
          throw awsError('RepositoryNotFoundException', `The repository with name '${name}' does not exist`);
        }
        return { repositories: [{ repositoryName: name }] } as never;
      },
    };
    return { ecr, asked };
  }

  it('stops (exit 2) with the delete commands when repositories a deleted platform kept are there', async () => {
    const { ecr, asked } = ecrWith(['ferry/agent', 'ferry/worker-base-gpu']);
    const error = await checkPlatformCreatable(ecr, reporter).catch((e: unknown) => e);
    expect(FerryError.is(error)).toBe(true);
    expect(exitCode(error)).toBe(2);
    expect((error as FerryError).message).toContain(
      'FerryPlatform is to be created, but ECR repositories of its fixed names exist: ferry/agent, ferry/worker-base-gpu',
    );
    expect((error as FerryError).hint).toContain(
      '`aws ecr delete-repository --repository-name ferry/agent --force`, `aws ecr delete-repository --repository-name ferry/worker-base-gpu --force`',
    );
    expect((error as FerryError).hint).not.toContain('ferry/worker-base-cpu');
    // One name per call: DescribeRepositories fails the whole call on any missing name.
    expect(asked).toEqual(platformRepositoryNames.map((name) => [name]));
    expect(platformRepositoryNames).toEqual([
      'ferry/agent',
      'ferry/worker-base-cpu',
      'ferry/worker-base-gpu',
      'ferry/worker-sdxl-turbo',
    ]);
  });

  it('none there: goes on; ECR refusing the read: a warning, and goes on', async () => {
    await checkPlatformCreatable(ecrWith([]).ecr, reporter);
    lines.length = 0;
    const denied = ecrWith(
      [],
      awsError('AccessDeniedException', 'not authorized to perform: ecr:DescribeRepositories'),
    );
    await checkPlatformCreatable(denied.ecr, reporter);
    expect(denied.asked).toHaveLength(1);
    expect(lines.join('\n')).toContain('warning: cannot check for ECR repositories a deleted platform kept');
  });

  it('ECR out of reach: fails with the network hint', async () => {
    const error = await checkPlatformCreatable(
      ecrWith([], unreachableAws('api.ecr.us-east-1.amazonaws.com')).ecr,
      reporter,
    ).catch((e: unknown) => e);
    expect((error as FerryError).message).toContain('Cannot look up the ECR repository ferry/agent');
    expect((error as FerryError).hint).toContain("AWS did not answer: check this machine's network");
  });
});

describe('waitForQueueNames', () => {
  const names = ['ferry-ep1', 'ferry-ep1-dlq'];

  /** Waits for `names` over CloudFormation answering `events` for the stack; what it slept and sent. */
  async function waitOver(live: boolean, events: (nowMs: number) => StackEvent[]) {
    lines.length = 0;
    const time = fakeClock();
    const { cfn, sent } = cloudFormation((command) => {
      if (command instanceof ListStacksCommand) {
        return { StackSummaries: [{ StackName: 'Ferry-x', StackId: 'id-x', DeletionTime: new Date(0) }] };
      }
      return { StackEvents: events(time.clock.now()), NextToken: 'more' };
    });
    const lookup = new CloudFormationLookup(cfn);
    await waitForQueueNames({ lookup, clock: time.port }, 'Ferry-x', { queueNames: names, live, reporter });
    return { slept: time.slept, sent };
  }

  it('a live stack that deleted a queue of these names 20 s ago (an undeploy of an endpoint): waits the other 45 s, saying why', async () => {
    const { slept, sent } = await waitOver(true, (now) => [
      queueDeleted('ferry-ep1', now, 20_000),
      queueDeleted('ferry-ep1-dlq', now, 25_000),
      queueDeleted('ferry-ep1', now, 90_000),
    ]);
    expect(slept).toEqual([queueNameReuseMs - 20_000]);
    expect(lines.join('\n')).toContain(
      'waiting 45 s: stack Ferry-x deleted queues that this deploy creates again moments ago (an undeploy of endpoints, or a rolled-back deploy), and SQS reuses a queue name only 60 s after that queue was deleted',
    );
    // Its own events, by name; the page reached events older than 65 s, so no further page.
    expect(sent).toHaveLength(1);
    expect((sent[0] as DescribeStackEventsCommand).input).toEqual({ StackName: 'Ferry-x' });
  });

  it('does not wait for queues of other names, nor for deletions more than 65 s ago', async () => {
    const others = await waitOver(true, (now) => [
      queueDeleted('ferry-ep12', now, 10_000),
      queueDeleted('ferry-ep2', now, 20_000),
      { ...queueDeleted('ferry-ep1', now, 5_000), ResourceStatus: 'DELETE_IN_PROGRESS' },
    ]);
    expect(others.slept).toEqual([]);
    const old = await waitOver(true, (now) => [queueDeleted('ferry-ep1', now, queueNameReuseMs + 1_000)]);
    expect(old.slept).toEqual([]);
    expect(old.sent).toHaveLength(1);
    expect(lines).toEqual([]);
  });

  it('a deleted stack: reads the newest deleted stack of the name, and waits until 60 s (+ skew) after its queues went', async () => {
    const { slept, sent } = await waitOver(false, (now) => [queueDeleted('ferry-ep1', now, 20_000)]);
    expect(slept).toEqual([queueNameReuseMs - 20_000]);
    expect(lines.join('\n')).toContain(
      'stack Ferry-x was deleted moments ago, and SQS reuses a queue name only 60 s after',
    );
    expect(sent[0]).toBeInstanceOf(ListStacksCommand);
    expect((sent[1] as DescribeStackEventsCommand).input.StackName).toBe('id-x');
  });

  it('a stack without named queues asks nothing', async () => {
    const time = fakeClock();
    const { cfn, sent } = cloudFormation(() => {
      throw new Error('not asked');
    });
    const lookup = new CloudFormationLookup(cfn);
    await waitForQueueNames({ lookup, clock: time.port }, 'FerryPlatform', {
      queueNames: [],
      live: true,
      reporter,
    });
    expect(sent).toEqual([]);
    expect(time.slept).toEqual([]);
  });
});

describe('CloudFormationLookup', () => {
  const at = (iso: string) => new Date(iso);
  const client = cloudFormation;
  /** A resource's event in `stack`'s history, as DescribeStackEvents lists it. */
  const eventOf =
    (stack: string) =>
    (logicalId: string, type: string, status: string, reason?: string): StackEvent => ({
      StackId: `arn:aws:cloudformation:us-east-1:123456789012:stack/${stack}/1`,
      StackName: stack,
      EventId: `${logicalId}-${status}-${reason ?? ''}`,
      LogicalResourceId: logicalId,
      ResourceType: type,
      ResourceStatus: status as ResourceStatus,
      ...(reason ? { ResourceStatusReason: reason } : {}),
      Timestamp: at('2026-01-02T00:00:00Z'),
    });

  it('describes status, outputs and tags; "does not exist" is undefined', async () => {
    const { cfn } = client((command) => {
      const name = (command as DescribeStacksCommand).input.StackName;
      if (name === 'gone') throw new Error('Stack with id gone does not exist');
      return {
        Stacks: [
          {
            StackStatus: 'ROLLBACK_COMPLETE',
            Outputs: [{ OutputKey: 'ApiUrl', OutputValue: 'https://x' }],
            Tags: [{ Key: 'ferry:app', Value: 'shop' }],
          },
        ],
      };
    });
    const lookup = new CloudFormationLookup(cfn);
    expect(await lookup.describe('FerryPlatform')).toMatchObject({
      status: 'ROLLBACK_COMPLETE',
      outputs: { ApiUrl: 'https://x' },
      tags: { 'ferry:app': 'shop' },
    });
    expect(await lookup.describe('gone')).toBeUndefined();
  });

  it('reads termination protection (EnableTerminationProtection) and when the stack was made (CreationTime)', async () => {
    const created = at('2026-01-02T03:04:05Z');
    const { cfn } = client((command) => ({
      Stacks: [
        {
          StackStatus: 'UPDATE_COMPLETE',
          EnableTerminationProtection: (command as DescribeStacksCommand).input.StackName === 'FerryPlatform',
          CreationTime: created,
        },
      ],
    }));
    const lookup = new CloudFormationLookup(cfn);
    expect(await lookup.describe('FerryPlatform')).toEqual({
      status: 'UPDATE_COMPLETE',
      terminationProtection: true,
      createdMs: created.getTime(),
      outputs: {},
      tags: {},
    });
    expect((await lookup.describe('Ferry-x'))?.terminationProtection).toBe(false);
  });

  it('finds when the newest deleted stack of the name deleted its last queue', async () => {
    const { cfn, sent } = client((command) => {
      if (command instanceof ListStacksCommand) {
        return {
          StackSummaries: [
            { StackName: 'Ferry-a', StackId: 'id-old', DeletionTime: at('2026-01-01T00:00:00Z') },
            { StackName: 'Ferry-a', StackId: 'id-new', DeletionTime: at('2026-01-02T00:00:00Z') },
            { StackName: 'Ferry-b', StackId: 'id-b', DeletionTime: at('2026-01-03T00:00:00Z') },
          ],
        };
      }
      expect((command as DescribeStackEventsCommand).input.StackName).toBe('id-new');
      return {
        StackEvents: [
          {
            ResourceType: 'AWS::CloudFormation::Stack',
            ResourceStatus: 'DELETE_COMPLETE',
            Timestamp: at('2026-01-02T00:05:00Z'),
          },
          {
            ResourceType: 'AWS::SQS::Queue',
            ResourceStatus: 'DELETE_COMPLETE',
            PhysicalResourceId: queueUrl('ferry-other'),
            Timestamp: at('2026-01-02T00:04:30Z'),
          },
          {
            ResourceType: 'AWS::SQS::Queue',
            ResourceStatus: 'DELETE_COMPLETE',
            PhysicalResourceId: queueUrl('ferry-a1'),
            Timestamp: at('2026-01-02T00:04:00Z'),
          },
          {
            ResourceType: 'AWS::SQS::Queue',
            ResourceStatus: 'DELETE_COMPLETE',
            PhysicalResourceId: queueUrl('ferry-a1-dlq'),
            Timestamp: at('2026-01-02T00:03:00Z'),
          },
          {
            ResourceType: 'AWS::SQS::Queue',
            ResourceStatus: 'DELETE_IN_PROGRESS',
            PhysicalResourceId: queueUrl('ferry-a1'),
            Timestamp: at('2026-01-02T00:03:50Z'),
          },
        ],
      };
    });
    const lookup = new CloudFormationLookup(cfn);
    const query = {
      queueNames: ['ferry-a1', 'ferry-a1-dlq'],
      sinceMs: at('2026-01-02T00:00:00Z').getTime(),
      live: false,
    };
    expect(await lookup.queuesDeletedAtMs('Ferry-a', query)).toBe(at('2026-01-02T00:04:00Z').getTime());
    expect((sent[0] as ListStacksCommand).input.StackStatusFilter).toEqual(['DELETE_COMPLETE']);
    expect(sent[1]).toBeInstanceOf(DescribeStackEventsCommand);
    expect(await lookup.queuesDeletedAtMs('Ferry-none', query)).toBeUndefined();
  });

  it('finds the resources the last delete of a stack could not delete, and why', async () => {
    const event = eventOf('Ferry-a');
    const stackType = 'AWS::CloudFormation::Stack';
    const tg = 'AWS::ElasticLoadBalancingV2::TargetGroup';
    const pages = [
      {
        StackEvents: [
          event('Ferry-a', stackType, 'DELETE_FAILED', 'The following resource(s) failed to delete: [Tg]. '),
          event('Tg', tg, 'DELETE_FAILED', 'Target group is currently in use by a listener or a rule'),
          event('Queue', 'AWS::SQS::Queue', 'DELETE_COMPLETE'),
        ],
        NextToken: '1',
      },
      {
        StackEvents: [
          event('Tg', tg, 'DELETE_FAILED', 'an earlier try of the same delete'),
          event('Bucket', 'AWS::S3::Bucket', 'DELETE_FAILED'),
          event('Ferry-a', stackType, 'DELETE_IN_PROGRESS', 'User Initiated'),
          // An earlier delete, which a later one got past.
          event('Role', 'AWS::IAM::Role', 'DELETE_FAILED', 'long since deleted'),
        ],
        NextToken: '2',
      },
    ];
    const { cfn, sent } = client((command) => {
      const token = (command as DescribeStackEventsCommand).input.NextToken;
      return pages[token ? Number(token) : 0];
    });
    expect(await new CloudFormationLookup(cfn).deleteFailures('Ferry-a')).toEqual([
      {
        logicalId: 'Tg',
        type: tg,
        reason: 'Target group is currently in use by a listener or a rule',
      },
      { logicalId: 'Bucket', type: 'AWS::S3::Bucket', reason: 'no reason given' },
    ]);
    expect(sent.map((c) => (c as DescribeStackEventsCommand).input)).toEqual([
      { StackName: 'Ferry-a' },
      { StackName: 'Ferry-a', NextToken: '1' },
    ]);
  });

  it('finds the resources the last update rollback of a stack could not roll back (ContinueUpdateRollback skips only those)', async () => {
    const event = eventOf('FerryPlatform');
    const stackType = 'AWS::CloudFormation::Stack';
    const fn = 'AWS::Lambda::Function';
    const { cfn } = client(() => ({
      StackEvents: [
        event(
          'FerryPlatform',
          stackType,
          'UPDATE_ROLLBACK_FAILED',
          'The following resource(s) failed to update: [ApiFunction].',
        ),
        event('ApiFunction', fn, 'UPDATE_FAILED', 'Resource handler returned message: "Function not found"'),
        event('Queue', 'AWS::SQS::Queue', 'UPDATE_COMPLETE'),
        event(
          'FerryPlatform',
          stackType,
          'UPDATE_ROLLBACK_IN_PROGRESS',
          'The following resource(s) failed to update: [Role].',
        ),
        // The update's own failure, which started the rollback: not one ResourcesToSkip takes.
        event('Role', 'AWS::IAM::Role', 'UPDATE_FAILED', 'Access denied'),
      ],
    }));
    expect(await new CloudFormationLookup(cfn).rollbackFailures('FerryPlatform')).toEqual([
      {
        logicalId: 'ApiFunction',
        type: fn,
        reason: 'Resource handler returned message: "Function not found"',
      },
    ]);
  });

  it('reads the ExecutionStatus of a change set by stack and name; one that does not exist is undefined', async () => {
    const { cfn, sent } = client((command) => {
      const input = (command as DescribeChangeSetCommand).input;
      if (input.ChangeSetName === 'ferry-gone') {
        throw awsError('ChangeSetNotFoundException', 'ChangeSet [ferry-gone] does not exist');
      }
      return {
        ExecutionStatus: input.ChangeSetName === 'ferry-done' ? 'EXECUTE_COMPLETE' : 'EXECUTE_FAILED',
      };
    });
    const lookup = new CloudFormationLookup(cfn);
    expect(await lookup.changeSetExecution('FerryPlatform', 'ferry-done')).toBe('EXECUTE_COMPLETE');
    expect(await lookup.changeSetExecution('FerryPlatform', 'ferry-failed')).toBe('EXECUTE_FAILED');
    expect(await lookup.changeSetExecution('FerryPlatform', 'ferry-gone')).toBeUndefined();
    expect(sent[0]).toBeInstanceOf(DescribeChangeSetCommand);
    expect((sent[0] as DescribeChangeSetCommand).input).toEqual({
      StackName: 'FerryPlatform',
      ChangeSetName: 'ferry-done',
    });
  });

  it('sends DescribeStacks by name', async () => {
    const { cfn, sent } = client(() => ({ Stacks: [] }));
    await new CloudFormationLookup(cfn).outputs('FerryPlatform');
    expect(sent[0]).toBeInstanceOf(DescribeStacksCommand);
    expect((sent[0] as DescribeStacksCommand).input).toEqual({ StackName: 'FerryPlatform' });
  });
});

describe('ferry deploy over a live stack waits out the queue names it deleted (real synth, fake CloudFormation)', () => {
  // `ferry undeploy ep` (other endpoints remain) deletes ep's queues in the update's cleanup; a
  // deploy of ep within a minute asks SQS for the same names (its id is deterministic).
  const timeline: string[] = [];
  const reporter = { line: (text: string) => timeline.push(text) } as never;
  const app = 'again';
  const env = 'production';
  const stack = appStackName(app, env);
  const record = deployedRecord(app, env, cpuEndpoint);
  const harness = awsProviderHarness({ region: 'us-east-1', reporter, scratchPrefix: 'ferry-queue-names-' });

  /** The recording toolkit, marking its deploys in the timeline. */
  class TimelineToolkit extends RecordingToolkit {
    override async deploy(
      assembly: SynthesizedAssembly,
      stackNames: readonly string[],
      onEvent: ToolkitEventHandler,
    ): Promise<Record<string, StackOutputs>> {
      timeline.push(`deploy ${stackNames.join(' ')}`);
      return super.deploy(assembly, stackNames, onEvent);
    }
  }

  /** CloudFormation: the stacks as the recording toolkit has them; the events from a stand-in client. */
  class EventsLookup extends CloudFormationLookup {
    constructor(
      private readonly stacks: RecordingToolkit,
      cfn: CloudFormationLike,
    ) {
      super(cfn);
    }
    override describe(name: string): Promise<StackDescription | undefined> {
      return this.stacks.describe(name);
    }
  }

  const zoneNames = ['a', 'b', 'c'].map((z) => `us-east-1${z}`);
  const zonesEc2 = zonesEc2For(zoneNames);

  /** Deploys the endpoint over its live stack, whose events show these queue deletions. */
  async function deployAfter(deleted: Array<{ name: string; ageMs: number }>) {
    const state = JSON.parse(readFileSync(harness.stateFile, 'utf8')) as FakeToolkitState;
    state.stacks[platformStackName] = { ...state.platformOutputs };
    state.stacks[stack] ??= {};
    state.tags = { ...state.tags, [stack]: { 'ferry:app': app, 'ferry:env': env } };
    writeFileSync(harness.stateFile, JSON.stringify(state));
    timeline.length = 0;
    const time = fakeClock();
    const { cfn, sent } = cloudFormation((command) => {
      expect(command).toBeInstanceOf(DescribeStackEventsCommand);
      return { StackEvents: deleted.map((d) => queueDeleted(d.name, time.clock.now(), d.ageMs)) };
    });
    const toolkit = new TimelineToolkit(harness.stateFile);
    const provider = harness.provider(zonesEc2, toolkit, {
      lookup: new EventsLookup(toolkit, cfn),
      clock: time.port,
    });
    await provider.provision([record], { app, env, all: [record], reporter });
    return { slept: time.slept, sent };
  }

  it('its queues deleted 20 s ago: waits the other 45 s, says why, then deploys', async () => {
    const { slept, sent } = await deployAfter([
      { name: queueName(record.id, 'urgent'), ageMs: 20_000 },
      { name: queueName(record.id, 'urgent-dlq'), ageMs: 21_000 },
    ]);
    expect(slept).toEqual([45_000]);
    const waiting = timeline.findIndex((line) =>
      line.includes(`waiting 45 s: stack ${stack} deleted queues that this deploy creates again`),
    );
    expect(waiting).toBeGreaterThanOrEqual(0);
    expect(timeline.indexOf(`deploy ${platformStackName} ${stack}`)).toBeGreaterThan(waiting);
    // The app stack's own events; the platform's queues have no fixed names, so it is not asked.
    expect(sent.map((c) => (c as DescribeStackEventsCommand).input.StackName)).toEqual([stack]);
  }, 240_000);

  it('no wait for deleted queues of other names, or deleted more than 65 s ago', async () => {
    const other = await deployAfter([{ name: queueName('someotherid', 'urgent'), ageMs: 20_000 }]);
    expect(other.slept).toEqual([]);
    expect(timeline).toContain(`deploy ${platformStackName} ${stack}`);
    const old = await deployAfter([{ name: queueName(record.id, 'urgent'), ageMs: 66_000 }]);
    expect(old.slept).toEqual([]);
    expect(timeline.some((line) => line.includes('waiting'))).toBe(false);
  }, 240_000);
});

describe('ferry deploy creating the platform where a deleted platform kept its repositories', () => {
  it('stops (exit 2) with the delete commands before anything is built, synthesized or deployed', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'ferry-kept-repos-'));
    try {
      const stateFile = path.join(dir, 'fake-toolkit.json');
      const initial: FakeToolkitState = { stacks: {}, platformOutputs: {}, calls: [] };
      writeFileSync(stateFile, JSON.stringify(initial));
      const toolkit = new RecordingToolkit(stateFile);
      const synths: unknown[] = [];
      const synth = toolkit.synth.bind(toolkit);
      toolkit.synth = async (...args) => {
        synths.push(args);
        return synth(...args);
      };
      const ecr: EcrRepositoriesLike = {
        send: async (command) => {
          const name = command.input.repositoryNames?.[0];
          if (name !== 'ferry/worker-base-cpu')
            throw awsError('RepositoryNotFoundException', 'no such repository');
          return { repositories: [{ repositoryName: name }] } as never;
        },
      };
      const provider = new AwsProvider({
        env: { FERRY_AWS_IMAGE_REGISTRY: '123456789012.dkr.ecr.us-east-1.amazonaws.com' },
        projectDir: dir,
        stateDir: path.join(dir, '.ferry'),
        reporter,
        toolkit,
        lookup: toolkit,
        clients: { doc: {} as never, s3: {} as never, close: () => {} },
        callTokens: new MemoryCallTokens(),
        ecrRepositories: ecr,
      });
      const error = await provider
        .prepare({ manifest: sampleManifest, env: 'production', reporter })
        .catch((e: unknown) => e);
      expect(FerryError.is(error)).toBe(true);
      expect(exitCode(error)).toBe(2);
      expect((error as FerryError).message).toContain(
        'ECR repositories of its fixed names exist: ferry/worker-base-cpu',
      );
      expect((error as FerryError).hint).toContain(
        '`aws ecr delete-repository --repository-name ferry/worker-base-cpu --force`',
      );
      expect(synths).toEqual([]);
      expect((JSON.parse(readFileSync(stateFile, 'utf8')) as FakeToolkitState).calls).toEqual([]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 240_000);
});

describe('commands that read the platform', () => {
  /** A provider over `stacks` (no deploy happens: these only read the platform). */
  function providerOver(stacks: Record<string, StackDescription>, nowMs = 0) {
    const { ports } = fakeStacks(stacks);
    return new AwsProvider({
      env: {},
      projectDir: tmpdir(),
      reporter,
      toolkit: ports.toolkit,
      lookup: ports.lookup,
      clients: { doc: {} as never, s3: {} as never, close: () => {} },
      callTokens: new MemoryCallTokens(),
      clock: { nowMs: () => nowMs, sleep: async () => {} },
    });
  }

  it('a platform in DELETE_FAILED: the steps to finish the delete and deploy fresh, not "ferry deploy deletes it"; one made minutes ago in REVIEW_IN_PROGRESS: busy', async () => {
    const failed = await providerOver({ FerryPlatform: { status: 'DELETE_FAILED', outputs: {}, tags: {} } })
      .platform()
      .catch((e: unknown) => e);
    expect((failed as FerryError).hint).toContain(
      '`aws cloudformation delete-stack --stack-name FerryPlatform`',
    );
    expect((failed as FerryError).hint).toContain(
      '`aws ecr delete-repository --repository-name ferry/agent --force`',
    );
    expect((failed as FerryError).hint).not.toContain('it deletes the failed stack');
    const nowMs = 10 * 3_600_000;
    const held = await providerOver(
      { FerryPlatform: { status: 'REVIEW_IN_PROGRESS', outputs: {}, tags: {}, createdMs: nowMs - 60_000 } },
      nowMs,
    )
      .platform()
      .catch((e: unknown) => e);
    expect(exitCode(held)).toBe(2);
    expect((held as FerryError).message).toContain(
      'Stack FerryPlatform is in REVIEW_IN_PROGRESS: another deploy',
    );
  });

  it('serving() (what `ferry console` and `ferry logs` ask first) reads the platform stack: its ApiUrl, or nothing where there is no platform', async () => {
    const apiUrl = 'https://abc123.execute-api.us-east-1.amazonaws.com/api/v2';
    const deployed = providerOver({
      FerryPlatform: {
        status: 'UPDATE_COMPLETE',
        outputs: { ApiUrl: apiUrl, BucketName: 'bucket', ControlTableName: 'control' },
        tags: {},
      },
    });
    expect(await deployed.serving()).toBe(apiUrl);
    expect(await providerOver({}).serving()).toBeUndefined();
    // Never created (REVIEW_IN_PROGRESS long ago, no outputs): no platform either.
    const uncreated = providerOver(
      { FerryPlatform: { status: 'REVIEW_IN_PROGRESS', outputs: {}, tags: {}, createdMs: 0 } },
      10 * 3_600_000,
    );
    expect(await uncreated.serving()).toBeUndefined();
    // One that cannot be used says why, rather than "deploy first".
    const failed = await providerOver({ FerryPlatform: { status: 'DELETE_FAILED', outputs: {}, tags: {} } })
      .serving()
      .catch((e: unknown) => e);
    expect((failed as FerryError).hint).toContain(
      '`aws cloudformation delete-stack --stack-name FerryPlatform`',
    );
  });
});

describe('--alarm-email', () => {
  it('subscribes the address to the alarm topic by email and says a confirmation is pending', async () => {
    lines.length = 0;
    const sent: SubscribeCommand[] = [];
    const sns: SnsLike = {
      send: async (command) => {
        sent.push(command);
        return { SubscriptionArn: 'pending confirmation' } as never;
      },
    };
    await subscribeAlarmEmail(sns, 'arn:aws:sns:us-east-1:123456789012:alarms', 'ops@example.com', reporter);
    expect(sent[0]).toBeInstanceOf(SubscribeCommand);
    expect(sent[0]!.input).toEqual({
      TopicArn: 'arn:aws:sns:us-east-1:123456789012:alarms',
      Protocol: 'email',
      Endpoint: 'ops@example.com',
      ReturnSubscriptionArn: true,
    });
    expect(lines.join('\n')).toContain('confirmation mail sent to ops@example.com');
  });

  it('refuses something that is not an address (exit 2) without calling SNS', async () => {
    const sns: SnsLike = {
      send: async () => {
        throw new Error('must not be called');
      },
    };
    const error = await subscribeAlarmEmail(sns, 'arn', 'not-an-address', reporter).catch((e: unknown) => e);
    expect((error as FerryError).code).toBe('usage');
  });
});
