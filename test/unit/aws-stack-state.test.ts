/**
 * What a deploy keeps of the deployed stacks, and what it makes of a failure that is not one:
 *
 *  - Termination protection an administrator set stays on: the stacks are synthesized with the
 *    deployed stack's EnableTerminationProtection, because toolkit-lib sets every stack it deploys to
 *    its artifact's value (deploy-stack.js updateTerminationProtection).
 *  - A deploy or undeploy that toolkit-lib 1.40.1 failed only because its last DescribeStackEvents
 *    read was throttled (https://github.com/aws/aws-cdk-cli/issues/1777) goes on as the success it
 *    was when CloudFormation says so (cli/providers/aws/throttled.ts): records written, keys retired.
 *
 * Real synth; CloudFormation played by the recording fake toolkit; records in DynamoDB Local.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { isThrottling, ThrottleTolerantToolkit } from '../../cli/providers/aws/throttled.js';
import {
  type CdkToolkit,
  type FakeToolkitState,
  RecordingToolkit,
  type StackDescription,
  type StackLookup,
} from '../../cli/providers/toolkit.js';
import { FerryError } from '../../core/errors.js';
import { appStackName, platformStackName } from '../../infra/names.js';
import { cpuEndpoint, sampleManifest } from '../infra/fixtures.js';
import { awsProviderHarness, deployedRecord, zonesEc2 as zonesEc2For } from '../support/aws-provider.js';

const lines: string[] = [];
const reporter = { line: (text: string) => lines.push(text) } as never;

const zoneNames = ['a', 'b', 'c'].map((z) => `us-east-1${z}`);
const zonesEc2 = zonesEc2For(zoneNames);

describe('deploys over the deployed stacks (real synth, fake CloudFormation)', () => {
  const harness = awsProviderHarness({ region: 'us-east-1', reporter, scratchPrefix: 'ferry-stack-state-' });

  const readState = () => JSON.parse(readFileSync(harness.stateFile, 'utf8')) as FakeToolkitState;
  /** The platform and `app`/`env`'s stack deployed, as the fake toolkit's state has them, changed by `more`. */
  function deployed(app: string, env: string, more: (state: FakeToolkitState) => void = () => {}) {
    const state = readState();
    const stack = appStackName(app, env);
    state.stacks[platformStackName] = { ...state.platformOutputs };
    state.stacks[stack] ??= {};
    state.tags = { ...state.tags, [stack]: { 'ferry:app': app, 'ferry:env': env } };
    more(state);
    writeFileSync(harness.stateFile, JSON.stringify(state));
    lines.length = 0;
    return stack;
  }

  /** A deploy of the CPU endpoint to `app`/`env`, as `ferry deploy` runs it (prepare, then provision). */
  async function deploy(app: string, env: string) {
    const record = deployedRecord(app, env, cpuEndpoint);
    const provider = harness.provider(zonesEc2, new RecordingToolkit(harness.stateFile));
    await provider.prepare({ manifest: { ...sampleManifest, app }, env, reporter });
    await provider.provision([record], { app, env, all: [record], reporter });
    return { provider, record };
  }

  it('keeps the termination protection each deployed stack has: on stays on, off stays off', async () => {
    const stack = deployed('guarded', 'production', (state) => {
      state.terminationProtection = {
        [platformStackName]: true,
        [appStackName('guarded', 'production')]: false,
      };
    });
    const { provider } = await deploy('guarded', 'production');
    const manifest = JSON.parse(readFileSync(path.join(provider.assemblyDir, 'manifest.json'), 'utf8')) as {
      artifacts: Record<string, { properties?: { terminationProtection?: boolean } }>;
    };
    expect(manifest.artifacts[platformStackName]?.properties?.terminationProtection).toBe(true);
    expect(manifest.artifacts[stack]?.properties?.terminationProtection ?? false).toBe(false);
    // The fake sets each stack to its artifact's value, as toolkit-lib does: still on.
    expect(readState().terminationProtection?.[platformStackName]).toBe(true);

    deployed('guarded', 'production', (state) => {
      state.terminationProtection = { [platformStackName]: false, [stack]: true };
    });
    await deploy('guarded', 'production');
    const again = JSON.parse(readFileSync(path.join(provider.assemblyDir, 'manifest.json'), 'utf8')) as {
      artifacts: Record<string, { properties?: { terminationProtection?: boolean } }>;
    };
    expect(again.artifacts[stack]?.properties?.terminationProtection).toBe(true);
    expect(again.artifacts[platformStackName]?.properties?.terminationProtection ?? false).toBe(false);
    expect(readState().terminationProtection?.[stack]).toBe(true);
  }, 240_000);

  it('a deploy failed by a throttled last events read, whose stack CloudFormation updated: a success, its records written', async () => {
    const stack = deployed('throttled', 'production', (state) => {
      state.throttleDeploy = { [appStackName('throttled', 'production')]: 'UPDATE_COMPLETE' };
    });
    const { provider, record } = await deploy('throttled', 'production');
    const written = await provider.control.getEndpoint(record.id);
    expect(written).toMatchObject({ id: record.id, aws: { stack } });
    expect(lines.join('\n')).toContain(
      `warning: CloudFormation throttled reading the events of ${platformStackName}, ${stack}`,
    );
    expect(lines.join('\n')).toContain(`but it deployed ${platformStackName}, ${stack}: going on`);
    // The change set the throttled deploy executed is the one it named.
    const calls = readState().calls.filter((c) => c.op === 'deploy');
    expect(readState().changeSets?.[stack]?.name).toBe(calls.at(-1)?.changeSetName);
  }, 240_000);

  it('the platform throttled at its end: the app stack it never reached is deployed after it', async () => {
    const stack = deployed('after', 'production', (state) => {
      state.throttleDeploy = { [platformStackName]: 'UPDATE_COMPLETE' };
    });
    const { provider, record } = await deploy('after', 'production');
    const calls = readState()
      .calls.filter((c) => c.op === 'deploy')
      .slice(-2)
      .map((c) => c.stacks);
    expect(calls).toEqual([[platformStackName, stack], [stack]]);
    expect(await provider.control.getEndpoint(record.id)).toMatchObject({ aws: { stack } });
  }, 240_000);

  it('a deploy failed by a throttled read whose stack rolled back (UPDATE_ROLLBACK_COMPLETE) still fails, and writes no record', async () => {
    deployed('rolled', 'production', (state) => {
      state.throttleDeploy = { [appStackName('rolled', 'production')]: 'UPDATE_ROLLBACK_COMPLETE' };
    });
    const record = deployedRecord('rolled', 'production', cpuEndpoint);
    const provider = harness.provider(zonesEc2, new RecordingToolkit(harness.stateFile));
    const error = await provider
      .provision([record], { app: 'rolled', env: 'production', all: [record], reporter })
      .catch((e: unknown) => e);
    expect(FerryError.is(error)).toBe(true);
    expect((error as FerryError).message).toContain('Throttling: Rate exceeded');
    expect(await provider.control.getEndpoint(record.id)).toBeUndefined();
    // Not deployed again either: its change set of this deploy failed.
    const last = readState().calls.at(-1);
    expect(last).toMatchObject({
      op: 'deploy',
      stacks: [platformStackName, appStackName('rolled', 'production')],
    });
  }, 240_000);

  it('an undeploy failed by a throttled read once its stack is gone: the endpoint is removed', async () => {
    const { record } = await deploy('leaving', 'production');
    const stack = deployed('leaving', 'production', (state) => {
      state.throttleDestroy = [appStackName('leaving', 'production')];
    });
    const provider = harness.provider(zonesEc2, new RecordingToolkit(harness.stateFile));
    const result = await provider.destroy([record]);
    expect(result.failed).toEqual([]);
    expect(result.deleted.map((r) => r.id)).toEqual([record.id]);
    expect(await provider.control.getEndpoint(record.id)).toBeUndefined();
    expect(readState().stacks[stack]).toBeUndefined();
  }, 240_000);
});

describe('ThrottleTolerantToolkit', () => {
  const throttled = () =>
    new FerryError('failed', 'Destroying of Ferry-x failed: Rate exceeded', {
      cause: Object.assign(new Error('Rate exceeded'), { name: 'Throttling' }),
    });
  const lookupOf = (stacks: Record<string, StackDescription>): StackLookup =>
    ({
      describe: async (name: string) => stacks[name],
      changeSetExecution: async () => 'EXECUTE_COMPLETE',
    }) as unknown as StackLookup;

  it('an undeploy throttled while its stack is still being deleted fails as it did', async () => {
    const inner = {
      destroy: async () => {
        throw throttled();
      },
    } as unknown as CdkToolkit;
    const stacks = { 'Ferry-x': { status: 'DELETE_IN_PROGRESS', outputs: {}, tags: {} } };
    const toolkit = new ThrottleTolerantToolkit(inner, lookupOf(stacks));
    await expect(toolkit.destroy(['Ferry-x'], () => {})).rejects.toThrow('Rate exceeded');
  });

  it('any other failure is not looked into', async () => {
    let described = 0;
    const inner = {
      deploy: async () => {
        throw new FerryError(
          'failed',
          'Deploying of Ferry-x failed: Resource handler returned message: "boom"',
        );
      },
    } as unknown as CdkToolkit;
    const lookup = {
      describe: async () => {
        described++;
        return { status: 'UPDATE_COMPLETE', outputs: {}, tags: {} };
      },
      changeSetExecution: async () => 'EXECUTE_COMPLETE',
    } as unknown as StackLookup;
    await expect(
      new ThrottleTolerantToolkit(inner, lookup).deploy({} as never, ['Ferry-x'], () => {}),
    ).rejects.toThrow('boom');
    expect(described).toBe(0);
    expect(isThrottling(throttled())).toBe(true);
    expect(isThrottling(new Error('ValidationError: Template format error'))).toBe(false);
  });
});
