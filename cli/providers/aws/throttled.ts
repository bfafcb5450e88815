/**
 * A deploy or undeploy that CloudFormation finished, but that toolkit-lib reported as failed because
 * a DescribeStackEvents call was throttled at the end.
 *
 * toolkit-lib 1.40.1 (the version package-lock.json pins) waits for the stack to settle with
 * DescribeStacks, then, in a `finally`, stops its event monitor, whose last read of the stack's
 * events (`StackActivityMonitor.stop()` → `finalPollToEnd()`) is not guarded: a throttled read
 * ("Throttling: Rate exceeded") escapes and fails a deploy whose stack is already UPDATE_COMPLETE
 * (https://github.com/aws/aws-cdk-cli/issues/1777, fixed by https://github.com/aws/aws-cdk-cli/pull/1941
 * in a later toolkit-lib; stack-activity-monitor.js and deploy-stack.js `monitorDeployment` here
 * still have it). `destroyStack` calls the same `monitor.stop()` in its `finally`, so an undeploy
 * fails the same way once its stack is gone. The polls before it swallow throttling (`tick()`
 * reports it and polls again). CloudFormation's API shares one rate across the account and region,
 * so a few deploys at once, or CI next to a teammate, are enough.
 *
 * Ferry does not take such a failure as it is. For each stack the failed call was to deploy, it asks
 * CloudFormation what happened: a stack in CREATE_COMPLETE or UPDATE_COMPLETE whose change set of
 * this very deploy (a name of its own, toolkit.ts uniqueChangeSetName) is EXECUTE_COMPLETE was
 * deployed by it (DescribeChangeSet ExecutionStatus,
 * https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_DescribeChangeSet.html; an
 * executed change set stays, "CloudFormation deletes all other change sets associated with the
 * stack", https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_ExecuteChangeSet.html),
 * and its outputs are read back. A stack without a change set of this deploy was not touched by it:
 * toolkit-lib never reached it (it deploys in order and stops at the first failure), or skipped it
 * as unchanged (it deletes an empty change set, deployments.js cleanupChangeSet); those are deployed
 * again (unchanged ones are skipped again). Any other answer for any stack (its change set of this
 * deploy rolled back, EXECUTE_FAILED, or not executed; the stack in UPDATE_ROLLBACK_COMPLETE or
 * still busy) and when no stack was deployed: the failure stands, as toolkit-lib reported it (a
 * throttled final read replaces the error of a failed deploy too). For an undeploy: a stack that no
 * longer exists (DescribeStacks: "does not exist", or DELETE_COMPLETE) is deleted; anything else,
 * the failure stands.
 *
 * Polling less often makes the throttling rarer: toolkit-lib polls stack events and the stack every
 * 2 s by default; Ferry asks for `stackEventPollingMs` (toolkit.ts deployOptionsFor, destroy).
 */
import type {
  AssemblyBuilder,
  CdkToolkit,
  DeployOptions,
  StackLookup,
  StackOutputs,
  SynthesizedAssembly,
  ToolkitEventHandler,
} from '../toolkit.js';
import { uniqueChangeSetName } from '../toolkit.js';

/** The statuses of a stack whose deploy succeeded (the rest of *_COMPLETE are rollbacks and deletes). */
export const deployedStatuses: ReadonlySet<string> = new Set(['CREATE_COMPLETE', 'UPDATE_COMPLETE']);

/**
 * CloudFormation's refusal for rate: the Query API's `Throttling` ("Rate exceeded"), as the SDK
 * throws it (its name) and as toolkit-lib words it ("❌  <stack> failed: Throttling: Rate exceeded",
 * the SDK error as the cause).
 */
export function isThrottling(error: unknown): boolean {
  let current = error as { name?: unknown; message?: unknown; cause?: unknown } | undefined;
  for (let depth = 0; current && depth < 8; depth++) {
    const name = typeof current.name === 'string' ? current.name : '';
    const message = typeof current.message === 'string' ? current.message : '';
    if (/^(Throttling|ThrottlingException|TooManyRequestsException)$/.test(name)) return true;
    if (/\bThrottling\b|Rate exceeded/i.test(message)) return true;
    current = current.cause as typeof current;
  }
  return false;
}

/** How many more deploys a throttled one may lead to (each for the stacks it did not reach). */
const redeploysAfterThrottling = 2;

/** The toolkit as the provider uses it: `inner`, with a throttled ending checked against CloudFormation. */
export class ThrottleTolerantToolkit implements CdkToolkit {
  constructor(
    private readonly inner: CdkToolkit,
    private readonly lookup: StackLookup,
  ) {}

  synth(builder: AssemblyBuilder, options: { outdir: string }): Promise<SynthesizedAssembly> {
    return this.inner.synth(builder, options);
  }

  bootstrap(assembly: SynthesizedAssembly, onEvent: ToolkitEventHandler): Promise<void> {
    return this.inner.bootstrap(assembly, onEvent);
  }

  deploy(
    assembly: SynthesizedAssembly,
    stackNames: readonly string[],
    onEvent: ToolkitEventHandler,
    options: DeployOptions = {},
  ): Promise<Record<string, StackOutputs>> {
    return this.#deploy(assembly, stackNames, onEvent, options.changeSetName, redeploysAfterThrottling);
  }

  async #deploy(
    assembly: SynthesizedAssembly,
    stackNames: readonly string[],
    onEvent: ToolkitEventHandler,
    changeSetName = uniqueChangeSetName(),
    redeploys: number,
  ): Promise<Record<string, StackOutputs>> {
    try {
      return await this.inner.deploy(assembly, stackNames, onEvent, { changeSetName });
    } catch (error) {
      if (!isThrottling(error)) throw error;
      const outcome = await this.#outcome(stackNames, changeSetName).catch(() => undefined);
      if (!outcome || outcome.failed) throw error;
      const { deployed } = outcome;
      const names = Object.keys(deployed);
      if (names.length === 0) throw error;
      onEvent({
        type: 'warning',
        message: `CloudFormation throttled reading the events of ${stackNames.join(', ')} (${(error as Error).message}), but it deployed ${names.join(', ')}: going on`,
      });
      const rest = stackNames.filter((name) => !names.includes(name));
      if (rest.length === 0) return deployed;
      if (redeploys <= 0) throw error;
      return { ...deployed, ...(await this.#deploy(assembly, rest, onEvent, undefined, redeploys - 1)) };
    }
  }

  /**
   * What this deploy's change set `changeSetName` did to each of `stackNames`: `deployed`, with the
   * outputs, where it was executed and the stack is CREATE_COMPLETE or UPDATE_COMPLETE; `failed` when
   * one was made for a stack and did not end so; a stack without one was not touched.
   */
  async #outcome(
    stackNames: readonly string[],
    changeSetName: string,
  ): Promise<{ deployed: Record<string, StackOutputs>; failed: boolean }> {
    const deployed: Record<string, StackOutputs> = {};
    for (const name of stackNames) {
      const execution = await this.lookup.changeSetExecution(name, changeSetName);
      if (execution === undefined) continue;
      const described = await this.lookup.describe(name);
      if (execution !== 'EXECUTE_COMPLETE' || !described || !deployedStatuses.has(described.status)) {
        return { deployed, failed: true };
      }
      deployed[name] = described.outputs;
    }
    return { deployed, failed: false };
  }

  async destroy(
    target: SynthesizedAssembly | readonly string[],
    onEvent: ToolkitEventHandler,
  ): Promise<void> {
    try {
      await this.inner.destroy(target, onEvent);
    } catch (error) {
      if (!isThrottling(error)) throw error;
      const names = Array.isArray(target) ? [...target] : [...(target as SynthesizedAssembly).stackNames];
      for (const name of names) {
        const left = await this.lookup.describe(name).catch(() => 'unknown');
        if (left !== undefined) throw error;
      }
      onEvent({
        type: 'warning',
        message: `CloudFormation throttled reading the events of ${names.join(', ')} (${(error as Error).message}), but ${names.length === 1 ? 'it is' : 'they are'} deleted: going on`,
      });
    }
  }
}
