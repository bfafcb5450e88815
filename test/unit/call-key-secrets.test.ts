/**
 * Call keys in Secrets Manager (core/adapters/aws/secrets.ts SecretsManagerCallTokens) up to the SDK
 * calls: whether a task could read the secret (DescribeSecret), and a write right after an undeploy
 * force-deleted the same name, which Secrets Manager finishes in the background
 * (https://docs.aws.amazon.com/secretsmanager/latest/apireference/API_DeleteSecret.html). The client
 * is a stand-in recording the exact commands; the clock is fake.
 */
import {
  CreateSecretCommand,
  DescribeSecretCommand,
  InvalidRequestException,
  PutSecretValueCommand,
  ResourceNotFoundException,
} from '@aws-sdk/client-secrets-manager';
import { describe, expect, it } from 'vitest';
import { deletionWaitMs, SecretsManagerCallTokens } from '../../core/adapters/aws/secrets.js';
import { FerryError } from '../../core/errors.js';

const name = 'ferry-call/shop/prod/gpu-worker/key';

function fakeClock() {
  let now = 1_000_000;
  const slept: number[] = [];
  return {
    slept,
    clock: {
      nowMs: () => now,
      sleep: async (ms: number) => {
        slept.push(ms);
        now += ms;
      },
    },
  };
}

/** A client that answers each command with the first matching scripted answer, and records them. */
function client(answer: (command: unknown) => unknown) {
  const sent: unknown[] = [];
  return {
    sent,
    names: () => sent.map((c) => (c as { constructor: { name: string } }).constructor.name),
    client: {
      send: (async (command: unknown) => {
        sent.push(command);
        return answer(command);
      }) as never,
    },
  };
}

const scheduled = () =>
  new InvalidRequestException({
    message:
      "You can't create this secret because a secret with this name is already scheduled for deletion.",
    $metadata: {},
  });
const notFound = () => new ResourceNotFoundException({ message: 'not found', $metadata: {} });

describe('a call key written right after an undeploy deleted its secret', () => {
  it('waits out "scheduled for deletion" with backoff and progress, then creates the secret', async () => {
    let creates = 0;
    const {
      sent,
      names,
      client: sm,
    } = client((command) => {
      if (command instanceof PutSecretValueCommand) throw notFound();
      if (command instanceof CreateSecretCommand && ++creates <= 2) throw scheduled();
      return {};
    });
    const { clock, slept } = fakeClock();
    const lines: string[] = [];
    await new SecretsManagerCallTokens(sm, { clock, onWait: (t) => lines.push(t) }).put(name, 'fy_x');
    expect(names()).toEqual([
      'PutSecretValueCommand',
      'CreateSecretCommand',
      'PutSecretValueCommand',
      'CreateSecretCommand',
      'PutSecretValueCommand',
      'CreateSecretCommand',
    ]);
    expect((sent.at(-1) as CreateSecretCommand).input).toMatchObject({ Name: name, SecretString: 'fy_x' });
    expect(slept).toEqual([2_000, 4_000]);
    expect(lines).toHaveLength(2);
    expect(lines[0]).toContain(`secret ${name} is still being deleted`);
    expect(lines[0]).toContain('trying again in 2 s');
  });

  it('gives up after about a minute with a FerryError and a hint', async () => {
    const { client: sm } = client((command) => {
      if (command instanceof PutSecretValueCommand) throw notFound();
      throw scheduled();
    });
    const { clock, slept } = fakeClock();
    const error = await new SecretsManagerCallTokens(sm, { clock })
      .put(name, 'fy_x')
      .catch((e: unknown) => e);
    expect(FerryError.is(error)).toBe(true);
    expect((error as FerryError).message).toContain('still deleting secret');
    expect((error as FerryError).hint).toContain('again in a minute');
    expect(slept.reduce((a, b) => a + b, 0)).toBe(deletionWaitMs);
  });

  it('does not wait on other errors', async () => {
    const { client: sm } = client(() => {
      throw Object.assign(new Error('User is not authorized'), { name: 'AccessDeniedException' });
    });
    const { clock, slept } = fakeClock();
    await expect(new SecretsManagerCallTokens(sm, { clock }).put(name, 'v')).rejects.toThrow(
      'not authorized',
    );
    expect(slept).toEqual([]);
  });
});

describe('whether a task could read the call key', () => {
  it('asks DescribeSecret: missing or scheduled for deletion is no, present is yes', async () => {
    const answers: Record<string, () => unknown> = {
      present: () => ({ Name: 'present' }),
      scheduled: () => ({ Name: 'scheduled', DeletedDate: new Date() }),
      missing: () => {
        throw notFound();
      },
    };
    const { sent, client: sm } = client((command) =>
      answers[(command as DescribeSecretCommand).input.SecretId!]!(),
    );
    const tokens = new SecretsManagerCallTokens(sm);
    expect(await tokens.exists('present')).toBe(true);
    expect(await tokens.exists('scheduled')).toBe(false);
    expect(await tokens.exists('missing')).toBe(false);
    expect(sent[0]).toBeInstanceOf(DescribeSecretCommand);
    expect((sent[0] as DescribeSecretCommand).input).toEqual({ SecretId: 'present' });
  });

  it('names the permission it needs when Secrets Manager refuses', async () => {
    const { client: sm } = client(() => {
      throw Object.assign(new Error('not authorized to perform: secretsmanager:DescribeSecret'), {
        name: 'AccessDeniedException',
      });
    });
    const error = await new SecretsManagerCallTokens(sm).exists(name).catch((e: unknown) => e);
    expect(FerryError.is(error)).toBe(true);
    expect((error as FerryError).hint).toContain('secretsmanager:DescribeSecret');
  });
});
