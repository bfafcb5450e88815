/**
 * What `ferry deploy --provider aws` checks in the account before deploying: the ECS service-linked
 * role (also for a deployer that may not create it), stacks left in ROLLBACK_COMPLETE or
 * REVIEW_IN_PROGRESS, stacks another deploy is working on, stacks another app owns, SQS's 60 s
 * queue-name reuse rule.
 * The IAM and CloudFormation clients are injected stand-ins that record the exact SDK commands.
 */
import {
  DescribeStackEventsCommand,
  DescribeStacksCommand,
  ListStacksCommand,
} from '@aws-sdk/client-cloudformation';
import { CreateServiceLinkedRoleCommand, GetRoleCommand } from '@aws-sdk/client-iam';
import { SubscribeCommand } from '@aws-sdk/client-sns';
import { describe, expect, it } from 'vitest';
import {
  ensureEcsServiceLinkedRole,
  type IamLike,
  queueNameReuseMs,
  type SnsLike,
  type StackPorts,
  subscribeAlarmEmail,
  usableStack,
} from '../../cli/providers/aws-account.js';
import {
  type CdkToolkit,
  type CloudFormationLike,
  CloudFormationLookup,
  type StackDescription,
  type StackLookup,
} from '../../cli/providers/toolkit.js';
import { FerryError } from '../../core/errors.js';
import { awsError } from '../support/aws-provider.js';

const lines: string[] = [];
const reporter = { line: (text: string) => lines.push(text) } as never;

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
});

/** A lookup and toolkit over a map of stacks; records destroys. */
function fakeStacks(stacks: Record<string, StackDescription>, deletedAt: Record<string, number> = {}) {
  const destroyed: string[][] = [];
  const slept: number[] = [];
  let now = 1_000_000;
  const lookup: StackLookup = {
    outputs: async (name) => stacks[name]?.outputs,
    describe: async (name) => stacks[name],
    queuesDeletedAtMs: async (name) => deletedAt[name],
    close: () => {},
  };
  const toolkit = {
    destroy: async (names: readonly string[]) => {
      destroyed.push([...names]);
      for (const name of names) delete stacks[name];
    },
  } as unknown as CdkToolkit;
  const ports: StackPorts = {
    lookup,
    toolkit,
    clock: {
      nowMs: () => now,
      sleep: async (ms) => {
        slept.push(ms);
        now += ms;
      },
    },
  };
  return { ports, destroyed, slept, now: () => now };
}

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

  it('waits until 60 s (+ skew) after the old stack deleted its queues, and not when that is past', async () => {
    lines.length = 0;
    const recent = fakeStacks({}, { 'Ferry-x': 1_000_000 - 20_000 });
    await usableStack(recent.ports, 'Ferry-x', options());
    expect(recent.slept).toEqual([queueNameReuseMs - 20_000]);
    expect(lines.join('\n')).toContain('SQS reuses a queue name only 60 s after');
    const old = fakeStacks({}, { 'Ferry-x': 1_000_000 - 120_000 });
    await usableStack(old.ports, 'Ferry-x', options());
    expect(old.slept).toEqual([]);
  });
});

describe('CloudFormationLookup', () => {
  const at = (iso: string) => new Date(iso);
  function client(responses: (command: unknown) => unknown): { cfn: CloudFormationLike; sent: unknown[] } {
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
    expect(await lookup.describe('FerryPlatform')).toEqual({
      status: 'ROLLBACK_COMPLETE',
      outputs: { ApiUrl: 'https://x' },
      tags: { 'ferry:app': 'shop' },
    });
    expect(await lookup.describe('gone')).toBeUndefined();
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
            Timestamp: at('2026-01-02T00:04:00Z'),
          },
          {
            ResourceType: 'AWS::SQS::Queue',
            ResourceStatus: 'DELETE_COMPLETE',
            Timestamp: at('2026-01-02T00:03:00Z'),
          },
          {
            ResourceType: 'AWS::SQS::Queue',
            ResourceStatus: 'DELETE_IN_PROGRESS',
            Timestamp: at('2026-01-02T00:04:30Z'),
          },
        ],
      };
    });
    const lookup = new CloudFormationLookup(cfn);
    expect(await lookup.queuesDeletedAtMs('Ferry-a')).toBe(at('2026-01-02T00:04:00Z').getTime());
    expect((sent[0] as ListStacksCommand).input.StackStatusFilter).toEqual(['DELETE_COMPLETE']);
    expect(sent[1]).toBeInstanceOf(DescribeStackEventsCommand);
    expect(await lookup.queuesDeletedAtMs('Ferry-none')).toBeUndefined();
  });

  it('sends DescribeStacks by name', async () => {
    const { cfn, sent } = client(() => ({ Stacks: [] }));
    await new CloudFormationLookup(cfn).outputs('FerryPlatform');
    expect(sent[0]).toBeInstanceOf(DescribeStacksCommand);
    expect((sent[0] as DescribeStacksCommand).input).toEqual({ StackName: 'FerryPlatform' });
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
