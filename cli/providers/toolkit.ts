/**
 * The CDK port of the AWS provider: synthesize an assembly, deploy stacks of it and get their outputs,
 * destroy stacks, and read a deployed stack's outputs. The real one drives @aws-cdk/toolkit-lib 1.40.1
 * in process (no `cdk` CLI); tests inject a fake.
 *
 *   synth(builder)                       offline, no credentials (stacks are environment-agnostic)
 *   deploy(assembly, [names], onEvent)   → outputs per stack; throws when a stack fails
 *   destroy(assembly | [names], onEvent) deletes the stacks (missing ones are fine)
 *   StackLookup.outputs(name)            CloudFormation DescribeStacks; undefined when no such stack
 *
 * Hidden test hook: FERRY_TEST_FAKE_TOOLKIT=<state.json> makes `toolkitFromEnv` return
 * `RecordingToolkit`, which synthesizes for real but only records deploys and destroys in that file
 * and answers outputs from it. It exists for the CLI's end-to-end tests (the binary runs in a child
 * process, where nothing can be injected); it never talks to AWS.
 */
import { randomUUID } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import {
  CloudFormationClient,
  DescribeChangeSetCommand,
  type DescribeChangeSetCommandOutput,
  DescribeStackEventsCommand,
  type DescribeStackEventsCommandOutput,
  DescribeStacksCommand,
  type DescribeStacksCommandOutput,
  ListStacksCommand,
  type ListStacksCommandOutput,
  type StackEvent,
} from '@aws-sdk/client-cloudformation';
import { FerryError } from '../../core/errors.js';
import { awsAccessHint, credentialsHint, stripAnsi } from './aws/access.js';

/** What the provider shows of the toolkit's work: one event per stage, stack and resource step. */
export interface ToolkitEvent {
  type: 'stack' | 'resources' | 'done' | 'warning' | 'error';
  stack?: string;
  message: string;
  /** Resources of `stack` finished so far, and how many there are (when CloudFormation says). */
  completed?: number;
  total?: number;
  /** A resource event's ResourceStatusReason (e.g. the DNS record a certificate waits for). */
  reason?: string;
}
export type ToolkitEventHandler = (event: ToolkitEvent) => void;

/** A synthesized cloud assembly: its folder and stacks (CloudFormation templates as JSON). */
export interface SynthesizedAssembly {
  readonly directory: string;
  readonly stackNames: readonly string[];
  template(stackName: string): Record<string, unknown>;
  /** The stack-level tags the assembly's manifest gives the stack (CloudFormation applies them). */
  tags?(stackName: string): Record<string, string>;
  /** The termination protection the assembly's manifest gives the stack (toolkit-lib sets it so). */
  terminationProtection?(stackName: string): boolean;
  dispose(): Promise<void>;
}

/** Builds the CDK app into `outdir` with `context` and returns its `app.synth()`. */
export type AssemblyBuilder = (props: { outdir?: string; context?: Record<string, unknown> }) => unknown;

export type StackOutputs = Record<string, string>;

export interface DeployOptions {
  /** The name of each stack's change set (default: a new uniqueChangeSetName). */
  changeSetName?: string;
}

export interface CdkToolkit {
  synth(builder: AssemblyBuilder, options: { outdir: string }): Promise<SynthesizedAssembly>;
  /** Deploys exactly these stacks, in dependency order; resolves with each one's outputs. */
  deploy(
    assembly: SynthesizedAssembly,
    stackNames: readonly string[],
    onEvent: ToolkitEventHandler,
    options?: DeployOptions,
  ): Promise<Record<string, StackOutputs>>;
  /** Deletes the stacks; by name needs no template (a stack a teammate deployed). */
  destroy(target: SynthesizedAssembly | readonly string[], onEvent: ToolkitEventHandler): Promise<void>;
  /** `cdk bootstrap` of the account/region the credentials point at. */
  bootstrap(assembly: SynthesizedAssembly, onEvent: ToolkitEventHandler): Promise<void>;
}

/** What the CLI needs of a stack that exists: its state, outputs and tags. */
export interface StackDescription {
  /** CloudFormation's StackStatus, e.g. CREATE_COMPLETE, ROLLBACK_COMPLETE. */
  status: string;
  outputs: StackOutputs;
  tags: Record<string, string>;
  /**
   * EnableTerminationProtection: while it is on, "If a user attempts to delete a stack with
   * termination protection enabled, the deletion fails"
   * (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/using-cfn-protect-stacks.html).
   * Someone set it on the stack (Ferry never does); deploys keep it as it is (infra/app.ts).
   */
  terminationProtection?: boolean;
  /** CreationTime (epoch ms): for a stack in REVIEW_IN_PROGRESS, when its CREATE change set made it. */
  createdMs?: number;
}

export interface StackLookup {
  /** The outputs of a deployed stack, or undefined when there is no such stack. */
  outputs(stackName: string): Promise<StackOutputs | undefined>;
  /** The stack's status, outputs and tags, or undefined when there is no such stack. */
  describe(stackName: string): Promise<StackDescription | undefined>;
  /**
   * When the stack last deleted an SQS queue of one of `queueNames` (epoch ms), among its events
   * since `sinceMs`; undefined when it deleted none. `live`: the stack exists and its own events are
   * read (an update that removed endpoints, a rolled-back deploy that added some); otherwise those of
   * the newest deleted stack of the name. SQS refuses a queue name for 60 s after the queue of that
   * name was deleted, and a deploy that creates it again must wait that out (aws-account.ts).
   */
  queuesDeletedAtMs(
    stackName: string,
    query: { queueNames: readonly string[]; sinceMs: number; live: boolean },
  ): Promise<number | undefined>;
  /** The resources the stack's last delete could not delete, each with CloudFormation's reason. */
  deleteFailures(stackName: string): Promise<DeleteFailure[]>;
  /**
   * The resources the stack's last update rollback could not roll back (UPDATE_ROLLBACK_FAILED), each
   * with CloudFormation's reason: what ContinueUpdateRollback may be told to skip.
   */
  rollbackFailures(stackName: string): Promise<ResourceFailure[]>;
  /**
   * The ExecutionStatus of the stack's change set `changeSetName` (EXECUTE_COMPLETE once executed and
   * its operation completed; EXECUTE_FAILED, AVAILABLE, ...), or undefined when there is no such
   * change set (aws/throttled.ts).
   */
  changeSetExecution(stackName: string, changeSetName: string): Promise<string | undefined>;
  close(): void;
}

/** A resource an operation on a stack failed on (its *_FAILED event). */
export interface ResourceFailure {
  logicalId: string;
  type: string;
  reason: string;
}

/** A resource a stack delete left behind (its DELETE_FAILED event). */
export type DeleteFailure = ResourceFailure;

/**
 * A stack whose update failed and whose rollback then failed too: CloudFormation neither updates nor
 * deletes it until ContinueUpdateRollback brings it back to UPDATE_ROLLBACK_COMPLETE
 * (https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_ContinueUpdateRollback.html).
 */
export const rollbackFailedStatus = 'UPDATE_ROLLBACK_FAILED';

/**
 * The queue names a template gives its queues. Endpoint queues have fixed names (infra/names.ts
 * queueName); a queue without one gets a name CloudFormation makes unique, which no rule about
 * reusing names touches.
 */
export function queueNamesOf(template: Record<string, unknown>): string[] {
  return Object.values((template.Resources ?? {}) as Record<string, Resource>)
    .filter((r) => r.Type === 'AWS::SQS::Queue')
    .map((r) => r.Properties?.QueueName)
    .filter((n): n is string => typeof n === 'string')
    .sort();
}

/**
 * A stack in one of these states can neither be updated nor used, and CloudFormation's only way on
 * is to delete it (and create it again). ROLLBACK_*: its creation failed and rolled back
 * (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/troubleshooting.html#troubleshooting-errors-update-rollback-failed
 * and https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_Stack.html, StackStatus).
 * DELETE_FAILED: a delete stopped at resources it could not delete; "you can't work with or update
 * the stack. Delete the stack again or view the stack events"
 * (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/view-stack-events.html).
 */
export const deadStackStatuses: ReadonlySet<string> = new Set([
  'ROLLBACK_COMPLETE',
  'ROLLBACK_FAILED',
  'DELETE_FAILED',
]);

/**
 * A stack in REVIEW_IN_PROGRESS was never created: a CREATE change set made it, "an expected StackId
 * but without any templates or resources", and was never executed (a first deploy stopped at its
 * approval prompt, or a change set that failed validation)
 * (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/view-stack-events.html#cfn-console-view-stack-data-resources-status-codes).
 * It has no outputs and nothing to keep; the CDK treats it as a stack that does not exist
 * (toolkit-lib's deploy-stack.js creates over it), and so does Ferry, once it is old enough: a
 * REVIEW_IN_PROGRESS stack made minutes ago is most likely another first deploy waiting at its
 * approval prompt, busy rather than abandoned (aws-account.ts reviewHeldMs).
 */
export const uncreatedStackStatuses: ReadonlySet<string> = new Set(['REVIEW_IN_PROGRESS']);

/**
 * CloudFormation is working on the stack (a deploy, an undeploy, a rollback, a cleanup): it refuses
 * another operation until that ends. REVIEW_IN_PROGRESS ends in _IN_PROGRESS too, but CloudFormation
 * does nothing there; whether a deployer still holds it is told by its age (uncreatedStackStatuses).
 */
export const isBusyStackStatus = (status: string): boolean =>
  status.endsWith('_IN_PROGRESS') && !uncreatedStackStatuses.has(status);

/**
 * Decides the toolkit's questions. `security`: the deploy broadens IAM or security-group access.
 * Returns false to decline (the deploy is cancelled).
 */
export type Approver = (question: string, kind: 'security' | 'rollback') => Promise<boolean>;

// ── reading an assembly folder (shared by the real toolkit and the fake) ─────────────────────────

interface AssemblyLike {
  directory: string;
  stacks: ReadonlyArray<{
    stackName: string;
    template: unknown;
    tags?: Record<string, string>;
    terminationProtection?: boolean;
  }>;
}

function assemblyView(asm: AssemblyLike, dispose: () => Promise<void>): SynthesizedAssembly {
  const templates = new Map(asm.stacks.map((s) => [s.stackName, s.template as Record<string, unknown>]));
  return {
    directory: asm.directory,
    stackNames: [...templates.keys()],
    template(stackName) {
      const template = templates.get(stackName);
      if (!template) throw new FerryError('failed', `The assembly has no stack ${stackName}`);
      return template;
    },
    tags(stackName) {
      return { ...asm.stacks.find((s) => s.stackName === stackName)?.tags };
    },
    terminationProtection(stackName) {
      return asm.stacks.find((s) => s.stackName === stackName)?.terminationProtection === true;
    },
    dispose,
  };
}

/** Empty stand-ins named like the stacks to delete: CloudFormation deletes by name. */
async function placeholderBuilder(stackNames: readonly string[]): Promise<AssemblyBuilder> {
  const { App, Stack } = await import('aws-cdk-lib');
  return ({ outdir, context }) => {
    const app = new App({ ...(outdir ? { outdir } : {}), ...(context ? { context } : {}) });
    for (const name of stackNames) new Stack(app, name);
    return app.synth();
  };
}

// ── the real toolkit ───────────────────────────────────────────────────────────────────────────

interface IoMessageLike {
  level: string;
  code?: string;
  message: string;
  data?: unknown;
  defaultResponse?: unknown;
}

/** One line from a toolkit message, or undefined for the chatter (debug, trace, most info). */
export function toolkitEventOf(message: IoMessageLike): ToolkitEvent | undefined {
  const text = stripAnsi(message.message).trim();
  const data = (message.data ?? {}) as Record<string, unknown>;
  const stackName = (data.stack as { stackName?: string } | undefined)?.stackName;
  switch (message.code) {
    case 'CDK_TOOLKIT_I5100': // stack deploy progress {total, current, stack}
    case 'CDK_TOOLKIT_I7100': // stack destroy progress
      return {
        type: 'stack',
        ...(stackName ? { stack: stackName } : {}),
        message: text,
      };
    case 'CDK_TOOLKIT_I5502': {
      // stack activity: one CloudFormation event, with progress {completed, total}
      const progress = data.progress as { completed?: number; total?: number } | undefined;
      const event = data.event as
        | {
            LogicalResourceId?: string;
            ResourceStatus?: string;
            ResourceStatusReason?: string;
            ResourceType?: string;
            StackName?: string;
          }
        | undefined;
      return {
        type: 'resources',
        ...(event?.StackName ? { stack: event.StackName } : stackName ? { stack: stackName } : {}),
        message:
          `${event?.ResourceStatus ?? ''} ${event?.ResourceType ?? ''} ${event?.LogicalResourceId ?? ''}`.trim(),
        ...(progress?.completed !== undefined ? { completed: progress.completed } : {}),
        ...(progress?.total !== undefined ? { total: progress.total } : {}),
        ...(event?.ResourceStatusReason ? { reason: event.ResourceStatusReason } : {}),
      };
    }
    case 'CDK_TOOLKIT_I5900': // deploy result
    case 'CDK_TOOLKIT_I7900': // destroyed
      return { type: 'done', ...(stackName ? { stack: stackName } : {}), message: text };
  }
  if (message.level === 'error') return { type: 'error', message: text };
  if (message.level === 'warn') return { type: 'warning', message: text };
  return undefined;
}

/** Why a deploy or destroy failed, with the hint that helps most often. */
function toolkitFailure(action: string, stacks: readonly string[], error: unknown): FerryError {
  const message = stripAnsi((error as Error)?.message ?? String(error));
  const bootstrap = /bootstrap/i.test(message);
  const access = awsAccessHint(error);
  // CloudFormation refuses to delete a stack with termination protection on
  // (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/using-cfn-protect-stacks.html).
  const terminationProtection = /TerminationProtection/i.test(message);
  return new FerryError('failed', `${action} of ${stacks.join(', ')} failed: ${message}`, {
    hint: terminationProtection
      ? `Termination protection is on: someone protected the stack from deletion. If it may go, turn it off (${stacks
          .map(
            (stack) =>
              `\`aws cloudformation update-termination-protection --no-enable-termination-protection --stack-name ${stack}\``,
          )
          .join(', ')}), then run the command again.`
      : bootstrap
        ? 'The account/region is not bootstrapped for the CDK: run `npx cdk bootstrap` once (or `ferry deploy --provider aws --bootstrap`).'
        : (access ??
          'See the CloudFormation events above (or in the AWS console) for the resource that failed.'),
    cause: error,
  });
}

export class LibToolkit implements CdkToolkit {
  #onEvent: ToolkitEventHandler = () => {};
  readonly #toolkit: Promise<import('@aws-cdk/toolkit-lib').Toolkit>;

  constructor(options: { approve: Approver }) {
    // Imported lazily: toolkit-lib is large, and most commands never need it.
    this.#toolkit = import('@aws-cdk/toolkit-lib').then(
      (lib) =>
        new lib.Toolkit({
          emojis: false,
          color: false,
          ioHost: {
            notify: async (message) => {
              const event = toolkitEventOf(message as IoMessageLike);
              if (event) this.#onEvent(event);
            },
            requestResponse: async <T>(message: {
              code: string;
              message: string;
              data?: unknown;
              defaultResponse: T;
            }) => {
              const data = (message.data ?? {}) as { permissionChangeType?: string };
              if (message.code === 'CDK_TOOLKIT_I5060') {
                // Only changes that broaden access need a person (the CDK CLI's default, "broadening").
                if (data.permissionChangeType !== 'broadening') return message.defaultResponse;
                return (await options.approve(stripAnsi(message.message), 'security')) as T;
              }
              if (message.code === 'CDK_TOOLKIT_I5050') {
                return (await options.approve(stripAnsi(message.message), 'rollback')) as T;
              }
              // Destroy confirmations (I7010) were asked by our own command already.
              return message.defaultResponse;
            },
          },
        }),
    );
  }

  async synth(builder: AssemblyBuilder, options: { outdir: string }): Promise<SynthesizedAssembly> {
    const lib = await import('@aws-cdk/toolkit-lib');
    const toolkit = await this.#toolkit;
    const cx = await toolkit.fromAssemblyBuilder(
      async (props) => builder({ ...props }) as import('@aws-cdk/cloud-assembly-schema').ICloudAssembly,
      { outdir: options.outdir },
    );
    let cached: import('@aws-cdk/toolkit-lib').CachedCloudAssembly;
    // Synth reports its findings (cdk-nag, validation) as messages before it throws: keep them.
    const problems: string[] = [];
    this.#onEvent = (event) => {
      if (event.type === 'error') problems.push(event.message);
    };
    try {
      cached = await toolkit.synth(cx, { stacks: { strategy: lib.StackSelectionStrategy.ALL_STACKS } });
    } catch (error) {
      // toolkit-lib wraps what our builder threw ("Assembly builder failed"): show the cause.
      const cause = (error as { cause?: unknown }).cause ?? error;
      if (FerryError.is(cause)) throw cause;
      const details = problems.length > 0 ? `\n  ${problems.slice(0, 20).join('\n  ')}` : '';
      throw new FerryError(
        'failed',
        `Synthesizing the stacks failed: ${stripAnsi((cause as Error)?.message ?? String(cause))}${details}`,
        {
          cause: error,
        },
      );
    } finally {
      this.#onEvent = () => {};
    }
    const view = assemblyView(cached.cloudAssembly, () => cached.dispose());
    return Object.assign(view, { cached });
  }

  async deploy(
    assembly: SynthesizedAssembly,
    stackNames: readonly string[],
    onEvent: ToolkitEventHandler,
    options: DeployOptions = {},
  ): Promise<Record<string, StackOutputs>> {
    const lib = await import('@aws-cdk/toolkit-lib');
    const toolkit = await this.#toolkit;
    this.#onEvent = onEvent;
    try {
      const result = await toolkit.deploy(
        cachedOf(assembly),
        deployOptionsFor(lib, stackNames, options.changeSetName),
      );
      return Object.fromEntries(result.stacks.map((s) => [s.stackName, { ...s.outputs }]));
    } catch (error) {
      throw toolkitFailure('Deploying', stackNames, error);
    } finally {
      this.#onEvent = () => {};
    }
  }

  async destroy(
    target: SynthesizedAssembly | readonly string[],
    onEvent: ToolkitEventHandler,
  ): Promise<void> {
    const lib = await import('@aws-cdk/toolkit-lib');
    const toolkit = await this.#toolkit;
    const names = isAssembly(target) ? target.stackNames : target;
    this.#onEvent = onEvent;
    try {
      const source = isAssembly(target)
        ? cachedOf(target)
        : await toolkit.fromAssemblyBuilder(
            async (props) =>
              (await placeholderBuilder(names))(
                props,
              ) as import('@aws-cdk/cloud-assembly-schema').ICloudAssembly,
          );
      await toolkit.destroy(source, {
        stacks: {
          strategy: lib.StackSelectionStrategy.PATTERN_MUST_MATCH,
          patterns: [...names],
          expand: lib.ExpandStackSelection.NONE,
        },
        stackEventPollingInterval: stackEventPollingMs,
      });
    } catch (error) {
      throw toolkitFailure('Destroying', names, error);
    } finally {
      this.#onEvent = () => {};
    }
  }

  async bootstrap(assembly: SynthesizedAssembly, onEvent: ToolkitEventHandler): Promise<void> {
    const lib = await import('@aws-cdk/toolkit-lib');
    const toolkit = await this.#toolkit;
    this.#onEvent = onEvent;
    try {
      const environments = bootstrapEnvironmentNames(cachedOf(assembly).cloudAssembly.stacks);
      await toolkit.bootstrap(lib.BootstrapEnvironments.fromList(environments));
    } catch (error) {
      throw toolkitFailure('Bootstrapping', ['CDKToolkit'], error);
    } finally {
      this.#onEvent = () => {};
    }
  }
}

/**
 * The environments `cdk bootstrap` should bootstrap for these stacks: each one once. toolkit-lib's
 * `BootstrapEnvironments.fromCloudAssemblySource` hands over one environment per stack, without
 * de-duplication (actions/bootstrap/index.js: `stackCollection.stackArtifacts.map(stack =>
 * stack.environment)`), and `Toolkit.bootstrap` bootstraps them all at once (toolkit.js:
 * `Promise.all(bootstrapEnvironments.map(...))`). Ferry's two stacks are environment-agnostic, both
 * `aws://unknown-account/unknown-region`, which the credentials resolve to the same account and
 * region (sdk-provider.js resolveEnvironment): two concurrent creates of CDKToolkit, and the second
 * fails with "AlreadyExistsException: Stack [CDKToolkit] already exists"
 * (https://github.com/aws/aws-cdk/issues/65; the CDK CLI de-duplicates its environments since
 * https://github.com/aws/aws-cdk/pull/625). `BootstrapEnvironments.fromList` takes these names as
 * they are (`aws://<account>/<region>`, unknown parts resolved the same way).
 */
export function bootstrapEnvironmentNames(
  stacks: ReadonlyArray<{ readonly environment: { readonly name: string } }>,
): string[] {
  return [...new Set(stacks.map((stack) => stack.environment.name))];
}

/**
 * A change-set name of this deploy's own. toolkit-lib's default is one fixed name
 * (`cdk-deploy-change-set`), and before creating its change set it deletes any change set of that
 * name on the stack ("Delete any existing change sets generated by CDK since change set names must be
 * unique", deploy-stack.js cleanupOldChangeset): two deploys that touch the same stack at once (every
 * `ferry deploy` deploys FerryPlatform) could delete, or execute, each other's change set. CloudFormation
 * wants the name "unique among all change sets that are associated with the specified stack", of
 * alphanumerics and hyphens, starting with a letter, at most 128 characters
 * (https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_CreateChangeSet.html).
 */
export const uniqueChangeSetName = (): string => `ferry-${randomUUID()}`;

/**
 * How often toolkit-lib reads a deploying or deleting stack's events and status: 5 s, not its 2 s
 * default (stack-activity-monitor.js `pollingInterval = 2_000`; DeployOptions and DestroyOptions
 * `stackEventPollingInterval`). DescribeStackEvents and DescribeStacks share CloudFormation's
 * account-wide rate, and toolkit-lib 1.40.1 fails an operation that already succeeded when its last
 * events read is throttled (aws/throttled.ts says how Ferry copes); fewer reads, fewer throttles.
 * Progress lines come in 5 s steps.
 */
export const stackEventPollingMs = 5_000;

/** toolkit-lib's deploy options: exactly these stacks, each through a change set of this deploy's own. */
export function deployOptionsFor(
  lib: Pick<typeof import('@aws-cdk/toolkit-lib'), 'StackSelectionStrategy' | 'ExpandStackSelection'>,
  stackNames: readonly string[],
  changeSetName = uniqueChangeSetName(),
): import('@aws-cdk/toolkit-lib').DeployOptions {
  return {
    stacks: {
      strategy: lib.StackSelectionStrategy.PATTERN_MUST_MATCH,
      patterns: [...stackNames],
      expand: lib.ExpandStackSelection.NONE,
    },
    deploymentMethod: { method: 'change-set', changeSetName },
    stackEventPollingInterval: stackEventPollingMs,
  };
}

const isAssembly = (target: SynthesizedAssembly | readonly string[]): target is SynthesizedAssembly =>
  !Array.isArray(target);

function cachedOf(assembly: SynthesizedAssembly): import('@aws-cdk/toolkit-lib').CachedCloudAssembly {
  const cached = (
    assembly as SynthesizedAssembly & { cached?: import('@aws-cdk/toolkit-lib').CachedCloudAssembly }
  ).cached;
  if (!cached) throw new FerryError('failed', 'This assembly was not synthesized by the CDK toolkit');
  return cached;
}

/** The CloudFormation calls the lookup makes (the SDK client, or a test's stand-in). */
export interface CloudFormationLike {
  send(command: DescribeStacksCommand): Promise<DescribeStacksCommandOutput>;
  send(command: DescribeChangeSetCommand): Promise<DescribeChangeSetCommandOutput>;
  send(command: ListStacksCommand): Promise<ListStacksCommandOutput>;
  send(command: DescribeStackEventsCommand): Promise<DescribeStackEventsCommandOutput>;
  destroy(): void;
}

/** DescribeStacks by name; "does not exist" is undefined, anything else an error. */
export class CloudFormationLookup implements StackLookup {
  constructor(
    private readonly client: CloudFormationLike = new CloudFormationClient(
      {},
    ) as unknown as CloudFormationLike,
  ) {}

  async outputs(stackName: string): Promise<StackOutputs | undefined> {
    return (await this.describe(stackName))?.outputs;
  }

  async describe(stackName: string): Promise<StackDescription | undefined> {
    try {
      const result = await this.client.send(new DescribeStacksCommand({ StackName: stackName }));
      const stack = result.Stacks?.[0];
      if (!stack || stack.StackStatus === 'DELETE_COMPLETE') return undefined;
      return {
        status: stack.StackStatus ?? 'UNKNOWN',
        terminationProtection: stack.EnableTerminationProtection === true,
        ...(stack.CreationTime ? { createdMs: stack.CreationTime.getTime() } : {}),
        outputs: Object.fromEntries(
          (stack.Outputs ?? [])
            .filter((o) => o.OutputKey !== undefined)
            .map((o) => [o.OutputKey as string, o.OutputValue ?? '']),
        ),
        tags: Object.fromEntries(
          (stack.Tags ?? []).filter((t) => t.Key !== undefined).map((t) => [t.Key as string, t.Value ?? '']),
        ),
      };
    } catch (error) {
      if (/does not exist/i.test((error as Error).message ?? '')) return undefined;
      throw lookupFailure(stackName, error);
    }
  }

  /**
   * A live stack's events are read by its name. A deleted one's by its id: ListStacks keeps deleted
   * stacks (with their ids) for 90 days, and DescribeStackEvents by stack id still answers for them
   * (https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_ListStacks.html); the
   * newest deleted stack of the name only, found in at most a few pages.
   */
  async queuesDeletedAtMs(
    stackName: string,
    query: { queueNames: readonly string[]; sinceMs: number; live: boolean },
  ): Promise<number | undefined> {
    if (query.queueNames.length === 0) return undefined;
    try {
      const stackId = query.live ? stackName : await this.#newestDeletedStackId(stackName);
      if (!stackId) return undefined;
      const names = new Set(query.queueNames);
      let latest: number | undefined;
      for await (const event of this.#events(stackId)) {
        const at = event.Timestamp?.getTime();
        if (at === undefined) continue;
        // Events come newest first: the rest are older still.
        if (at < query.sinceMs) return latest;
        if (
          event.ResourceType === 'AWS::SQS::Queue' &&
          event.ResourceStatus === 'DELETE_COMPLETE' &&
          names.has(queueNameOfPhysicalId(event.PhysicalResourceId ?? '')) &&
          (latest === undefined || at > latest)
        ) {
          latest = at;
        }
      }
      return latest;
    } catch (error) {
      throw lookupFailure(stackName, error);
    }
  }

  /** A stack's events (by name, or by id for a deleted one), newest first, from a few pages at most. */
  async *#events(stackNameOrId: string): AsyncGenerator<StackEvent> {
    let token: string | undefined;
    for (let page = 0; page < 5; page++) {
      const events: DescribeStackEventsCommandOutput = await this.client.send(
        new DescribeStackEventsCommand({ StackName: stackNameOrId, NextToken: token }),
      );
      yield* events.StackEvents ?? [];
      token = events.NextToken;
      if (!token) return;
    }
  }

  async #newestDeletedStackId(stackName: string): Promise<string | undefined> {
    let newest: { id: string; deletedMs: number } | undefined;
    let token: string | undefined;
    for (let page = 0; page < 5; page++) {
      const listed: ListStacksCommandOutput = await this.client.send(
        new ListStacksCommand({ StackStatusFilter: ['DELETE_COMPLETE'], NextToken: token }),
      );
      for (const summary of listed.StackSummaries ?? []) {
        if (summary.StackName !== stackName || !summary.StackId) continue;
        const deletedMs = summary.DeletionTime?.getTime() ?? 0;
        if (!newest || deletedMs > newest.deletedMs) newest = { id: summary.StackId, deletedMs };
      }
      token = listed.NextToken;
      if (!token) break;
    }
    return newest?.id;
  }

  /**
   * The DELETE_FAILED events of the stack's resources since its last delete began (the stack's own
   * DELETE_IN_PROGRESS event), the newest per resource; a few pages at most.
   */
  deleteFailures(stackName: string): Promise<DeleteFailure[]> {
    return this.#failuresSince(stackName, { began: 'DELETE_IN_PROGRESS', failed: 'DELETE_FAILED' });
  }

  /**
   * The UPDATE_FAILED events of the stack's resources since its last rollback began (the stack's own
   * UPDATE_ROLLBACK_IN_PROGRESS event): the resources "in the UPDATE_FAILED state because a rollback
   * failed", the only ones ContinueUpdateRollback's ResourcesToSkip takes
   * (https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_ContinueUpdateRollback.html).
   */
  rollbackFailures(stackName: string): Promise<ResourceFailure[]> {
    return this.#failuresSince(stackName, { began: 'UPDATE_ROLLBACK_IN_PROGRESS', failed: 'UPDATE_FAILED' });
  }

  /**
   * The `failed` events of the stack's resources since its last operation began (the stack's own
   * `began` event), the newest per resource; a few pages at most.
   */
  async #failuresSince(
    stackName: string,
    statuses: { began: string; failed: string },
  ): Promise<ResourceFailure[]> {
    try {
      const failures = new Map<string, ResourceFailure>();
      for await (const event of this.#events(stackName)) {
        const logicalId = event.LogicalResourceId ?? '';
        const ofStack = event.ResourceType === 'AWS::CloudFormation::Stack' && logicalId === stackName;
        if (ofStack && event.ResourceStatus === statuses.began) break;
        if (ofStack || event.ResourceStatus !== statuses.failed || failures.has(logicalId)) continue;
        failures.set(logicalId, {
          logicalId,
          type: event.ResourceType ?? 'unknown type',
          reason: event.ResourceStatusReason ?? 'no reason given',
        });
      }
      return [...failures.values()];
    } catch (error) {
      throw lookupFailure(stackName, error);
    }
  }

  /**
   * DescribeChangeSet's ExecutionStatus: EXECUTE_COMPLETE once the change set was executed and its
   * stack operation completed (ChangeSetNotFound, or no such stack: undefined)
   * (https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_DescribeChangeSet.html).
   */
  async changeSetExecution(stackName: string, changeSetName: string): Promise<string | undefined> {
    try {
      const described = await this.client.send(
        new DescribeChangeSetCommand({ StackName: stackName, ChangeSetName: changeSetName }),
      );
      return described.ExecutionStatus ?? 'UNAVAILABLE';
    } catch (error) {
      if (
        (error as Error).name === 'ChangeSetNotFoundException' ||
        /does not exist/i.test((error as Error).message ?? '')
      )
        return undefined;
      throw lookupFailure(stackName, error);
    }
  }

  close(): void {
    this.client.destroy();
  }
}

/** An SQS queue's physical id is its URL, which ends in its name. */
const queueNameOfPhysicalId = (physicalId: string) => physicalId.slice(physicalId.lastIndexOf('/') + 1);

/** A region or credentials missing altogether never reach here: openProvider checks them first (checkAwsConfiguration). */
function lookupFailure(stackName: string, error: unknown): FerryError {
  return new FerryError(
    'failed',
    `Cannot read the CloudFormation stack ${stackName}: ${(error as Error).message}`,
    { hint: awsAccessHint(error) ?? credentialsHint, cause: error },
  );
}

// ── the recording fake (hidden test hook) ───────────────────────────────────────────────────────

/** The fake's file: what tests set up (outputs, failures) and what it recorded (calls). */
export interface FakeToolkitState {
  /** Deployed stacks and their outputs. Tests may seed the platform here ("already deployed"). */
  stacks: Record<string, StackOutputs>;
  /** Outputs of the platform stack when the fake deploys it. */
  platformOutputs: StackOutputs;
  /** Stack names whose deploy (or destroy) fails. */
  failDeploy?: string[];
  failDestroy?: string[];
  /** Stack statuses other than CREATE_COMPLETE (e.g. ROLLBACK_COMPLETE), by name. */
  statuses?: Record<string, string>;
  /** Stack tags, by name (deploys record the tags of the template's stack here). */
  tags?: Record<string, Record<string, string>>;
  /**
   * Stacks with termination protection on, by name. A deploy sets it to the artifact's value, as
   * toolkit-lib does (deploy-stack.js updateTerminationProtection).
   */
  terminationProtection?: Record<string, boolean>;
  /** Queues a stack (live, or deleted under that name) deleted: their names and when (epoch ms). */
  queueDeletions?: Record<string, Array<{ queueName: string; atMs: number }>>;
  /** What the last failed delete of a stack could not delete (its DELETE_FAILED events). */
  deleteFailures?: Record<string, DeleteFailure[]>;
  /** What the last failed rollback of a stack could not roll back (its UPDATE_FAILED events). */
  rollbackFailures?: Record<string, ResourceFailure[]>;
  /**
   * Stacks whose next deploy CloudFormation carries out, leaving the stack in the given status
   * (UPDATE_COMPLETE: deployed; UPDATE_ROLLBACK_COMPLETE: rolled back), after which the deploy fails
   * as toolkit-lib's does when its last events read is throttled ("Throttling: Rate exceeded",
   * aws/throttled.ts). Used once.
   */
  throttleDeploy?: Record<string, string>;
  /** Stacks whose next destroy deletes them, then fails as a throttled events read does. Used once. */
  throttleDestroy?: string[];
  /** The last change set each deploy executed on a stack, and how it ended. */
  changeSets?: Record<string, { name: string; executionStatus: 'EXECUTE_COMPLETE' | 'EXECUTE_FAILED' }>;
  calls: FakeToolkitCall[];
}

export interface FakeToolkitCall {
  op: 'deploy' | 'destroy' | 'bootstrap';
  stacks: string[];
  /** deploy: the change set name it was given. */
  changeSetName?: string;
  /** deploy: per stack, what its template says (read from the real synthesized template). */
  summaries?: Record<string, TemplateSummary>;
}

export interface TemplateSummary {
  resourceCount: number;
  /** FERRY_SOURCE_FINGERPRINT values of its task definitions. */
  fingerprints: string[];
  /** Endpoints as the task definitions' environments name them. */
  endpoints: Array<{ name: string; id: string; kind: 'queue' | 'lb' }>;
  /** Queue names (`ferry-<id>`, `ferry-<id>-dlq`). */
  queueNames: string[];
}

type Resource = { Type?: string; Properties?: Record<string, unknown> };

/** What a deploy of this template would make, for the fake's outputs and the tests' assertions. */
export function summarizeTemplate(template: Record<string, unknown>): TemplateSummary {
  const resources = Object.values((template.Resources ?? {}) as Record<string, Resource>);
  const fingerprints = new Set<string>();
  const endpoints = new Map<string, { name: string; id: string; kind: 'queue' | 'lb' }>();
  for (const resource of resources) {
    if (resource.Type !== 'AWS::ECS::TaskDefinition') continue;
    const containers = (resource.Properties?.ContainerDefinitions ?? []) as Array<{
      Environment?: Array<{ Name?: string; Value?: unknown }>;
    }>;
    for (const container of containers) {
      const env = new Map((container.Environment ?? []).map((e) => [e.Name, e.Value]));
      const fingerprint = env.get('FERRY_SOURCE_FINGERPRINT');
      if (typeof fingerprint === 'string') fingerprints.add(fingerprint);
      const id = env.get('FERRY_ENDPOINT_ID');
      const name = env.get('FERRY_ENDPOINT');
      const kind = env.get('FERRY_ENDPOINT_KIND');
      if (typeof id === 'string' && typeof name === 'string' && (kind === 'queue' || kind === 'lb'))
        endpoints.set(id, { name, id, kind });
    }
  }
  return {
    resourceCount: resources.length,
    fingerprints: [...fingerprints].sort(),
    endpoints: [...endpoints.values()].sort((a, b) => a.name.localeCompare(b.name)),
    queueNames: queueNamesOf(template),
  };
}

/**
 * The template's own `Endpoints` output as CloudFormation would resolve it, by endpoint id: an ALB's
 * DNS name becomes a made-up `<logical id>.us-east-1.elb.amazonaws.com`, any other intrinsic `fake`.
 */
function resolvedEndpointsOutput(template: Record<string, unknown>): Map<string, Record<string, unknown>> {
  const value = (template.Outputs as Record<string, { Value?: unknown }> | undefined)?.Endpoints?.Value;
  const text = (part: unknown): string => {
    if (typeof part === 'string') return part;
    const intrinsic = part as { 'Fn::Join'?: [string, unknown[]]; 'Fn::GetAtt'?: [string, string] };
    if (intrinsic['Fn::Join']) return intrinsic['Fn::Join'][1].map(text).join(intrinsic['Fn::Join'][0]);
    const getAtt = intrinsic['Fn::GetAtt'];
    if (getAtt?.[1] === 'DNSName') return `${getAtt[0].toLowerCase()}.us-east-1.elb.amazonaws.com`;
    return 'fake';
  };
  if (value === undefined) return new Map();
  const listed = JSON.parse(text(value)) as Array<Record<string, unknown> & { id: string }>;
  return new Map(listed.map((e) => [e.id, e]));
}

/**
 * Fake outputs of an app stack: the `Endpoints` JSON the real stack exports, from the template
 * (made-up URLs; a DNS record for the user where the template's output lists one).
 */
function fakeAppOutputs(summary: TemplateSummary, template: Record<string, unknown>): StackOutputs {
  const real = resolvedEndpointsOutput(template);
  const endpoints = summary.endpoints.map((e) => {
    const dnsRecord = real.get(e.id)?.dnsRecord;
    return e.kind === 'queue'
      ? {
          ...e,
          queueUrl: `https://sqs.us-east-1.amazonaws.com/123456789012/ferry-${e.id}`,
        }
      : {
          ...e,
          url: `http://ferry-${e.id}.us-east-1.elb.amazonaws.com`,
          ...(dnsRecord ? { dnsRecord } : {}),
        };
  });
  return { Endpoints: JSON.stringify(endpoints) };
}

export class RecordingToolkit implements CdkToolkit, StackLookup {
  constructor(private readonly file: string) {}

  private read(): FakeToolkitState {
    if (!existsSync(this.file)) {
      return { stacks: {}, platformOutputs: {}, calls: [] };
    }
    return JSON.parse(readFileSync(this.file, 'utf8')) as FakeToolkitState;
  }

  private write(state: FakeToolkitState): void {
    writeFileSync(this.file, `${JSON.stringify(state, null, 2)}\n`);
  }

  async synth(builder: AssemblyBuilder, options: { outdir: string }): Promise<SynthesizedAssembly> {
    const asm = (await builder({ outdir: options.outdir })) as AssemblyLike;
    return assemblyView(asm, async () => {});
  }

  async deploy(
    assembly: SynthesizedAssembly,
    stackNames: readonly string[],
    onEvent: ToolkitEventHandler,
    options: DeployOptions = {},
  ): Promise<Record<string, StackOutputs>> {
    const state = this.read();
    const changeSetName = options.changeSetName ?? uniqueChangeSetName();
    const summaries: Record<string, TemplateSummary> = {};
    const outputs: Record<string, StackOutputs> = {};
    try {
      for (const [index, name] of stackNames.entries()) {
        const template = assembly.template(name);
        const summary = summarizeTemplate(template);
        summaries[name] = summary;
        onEvent({
          type: 'stack',
          stack: name,
          message: `${name}: deploying... [${index + 1}/${stackNames.length}]`,
        });
        onEvent({
          type: 'resources',
          stack: name,
          message: 'CREATE_COMPLETE (fake)',
          completed: summary.resourceCount,
          total: summary.resourceCount,
        });
        if (state.failDeploy?.includes(name)) {
          throw new FerryError(
            'failed',
            `Deploying of ${name} failed: The stack named ${name} failed creation (fake toolkit)`,
          );
        }
        const throttledAt = state.throttleDeploy?.[name];
        if (throttledAt !== undefined) {
          delete state.throttleDeploy?.[name];
          const deployed = throttledAt === 'CREATE_COMPLETE' || throttledAt === 'UPDATE_COMPLETE';
          if (deployed) {
            state.stacks[name] =
              name === 'FerryPlatform' ? { ...state.platformOutputs } : fakeAppOutputs(summary, template);
          }
          state.statuses = { ...state.statuses, [name]: throttledAt };
          state.changeSets = {
            ...state.changeSets,
            [name]: {
              name: changeSetName,
              executionStatus: deployed ? 'EXECUTE_COMPLETE' : 'EXECUTE_FAILED',
            },
          };
          // As toolkit-lib words it (toolkit.js) once toolkitFailure wrapped it, the SDK's error as the cause.
          const throttled = Object.assign(new Error('Rate exceeded'), { name: 'Throttling' });
          throw new FerryError(
            'failed',
            `Deploying of ${stackNames.join(', ')} failed: ❌  ${name} failed: Throttling: Rate exceeded (fake toolkit)`,
            { cause: throttled },
          );
        }
        outputs[name] =
          name === 'FerryPlatform' ? { ...state.platformOutputs } : fakeAppOutputs(summary, template);
        state.stacks[name] = outputs[name];
        if (state.statuses) delete state.statuses[name];
        state.changeSets = {
          ...state.changeSets,
          [name]: { name: changeSetName, executionStatus: 'EXECUTE_COMPLETE' },
        };
        const tags = assembly.tags?.(name);
        if (tags && Object.keys(tags).length > 0) state.tags = { ...state.tags, [name]: tags };
        const protection = assembly.terminationProtection?.(name) ?? false;
        if (protection || state.terminationProtection?.[name] !== undefined) {
          state.terminationProtection = { ...state.terminationProtection, [name]: protection };
        }
        onEvent({ type: 'done', stack: name, message: `${name}: deployed` });
      }
      return outputs;
    } finally {
      state.calls.push({ op: 'deploy', stacks: [...stackNames], changeSetName, summaries });
      this.write(state);
    }
  }

  async destroy(
    target: SynthesizedAssembly | readonly string[],
    onEvent: ToolkitEventHandler,
  ): Promise<void> {
    const names = isAssembly(target) ? [...target.stackNames] : [...target];
    const state = this.read();
    state.calls.push({ op: 'destroy', stacks: names });
    try {
      for (const name of names) {
        if (state.failDestroy?.includes(name)) {
          throw new FerryError('failed', `Destroying of ${name} failed: DELETE_FAILED (fake toolkit)`);
        }
        if (state.terminationProtection?.[name]) {
          throw new FerryError(
            'failed',
            `Destroying of ${name} failed: Stack [${name}] cannot be deleted while TerminationProtection is enabled (fake toolkit)`,
          );
        }
        delete state.stacks[name];
        if (state.statuses) delete state.statuses[name];
        if (state.tags) delete state.tags[name];
        if (state.throttleDestroy?.includes(name)) {
          state.throttleDestroy = state.throttleDestroy.filter((n) => n !== name);
          throw new FerryError(
            'failed',
            `Destroying of ${names.join(', ')} failed: Throttling: Rate exceeded (fake toolkit)`,
            { cause: Object.assign(new Error('Rate exceeded'), { name: 'Throttling' }) },
          );
        }
        onEvent({ type: 'done', stack: name, message: `${name}: destroyed` });
      }
    } finally {
      this.write(state);
    }
  }

  async bootstrap(_assembly: SynthesizedAssembly, _onEvent: ToolkitEventHandler): Promise<void> {
    const state = this.read();
    state.calls.push({ op: 'bootstrap', stacks: ['CDKToolkit'] });
    this.write(state);
  }

  async outputs(stackName: string): Promise<StackOutputs | undefined> {
    return (await this.describe(stackName))?.outputs;
  }

  async describe(stackName: string): Promise<StackDescription | undefined> {
    const state = this.read();
    const outputs = state.stacks[stackName];
    const status = state.statuses?.[stackName];
    if (!outputs && !status) return undefined;
    return {
      status: status ?? 'CREATE_COMPLETE',
      outputs: outputs ?? {},
      tags: state.tags?.[stackName] ?? {},
      terminationProtection: state.terminationProtection?.[stackName] ?? false,
    };
  }

  async queuesDeletedAtMs(
    stackName: string,
    query: { queueNames: readonly string[]; sinceMs: number },
  ): Promise<number | undefined> {
    const times = (this.read().queueDeletions?.[stackName] ?? [])
      .filter((d) => query.queueNames.includes(d.queueName) && d.atMs >= query.sinceMs)
      .map((d) => d.atMs);
    return times.length > 0 ? Math.max(...times) : undefined;
  }

  async deleteFailures(stackName: string): Promise<DeleteFailure[]> {
    return this.read().deleteFailures?.[stackName] ?? [];
  }

  async rollbackFailures(stackName: string): Promise<ResourceFailure[]> {
    return this.read().rollbackFailures?.[stackName] ?? [];
  }

  async changeSetExecution(stackName: string, changeSetName: string): Promise<string | undefined> {
    const last = this.read().changeSets?.[stackName];
    return last?.name === changeSetName ? last.executionStatus : undefined;
  }

  close(): void {}
}

/** The real toolkit and lookup, or the recording fake when FERRY_TEST_FAKE_TOOLKIT is set. */
export function toolkitFromEnv(
  env: NodeJS.ProcessEnv,
  approve: Approver,
): { toolkit: CdkToolkit; lookup: StackLookup } {
  const fake = env.FERRY_TEST_FAKE_TOOLKIT;
  if (fake) {
    const recording = new RecordingToolkit(path.resolve(fake));
    return { toolkit: recording, lookup: recording };
  }
  return { toolkit: new LibToolkit({ approve }), lookup: new CloudFormationLookup() };
}
