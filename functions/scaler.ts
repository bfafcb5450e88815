/**
 * The scaler Lambda: the AWS actuator of the one scaling policy (core/scaling.ts, docs/scaling.md).
 * For each endpoint it reads what the job store knows — urgent jobs waiting (SQS
 * GetQueueAttributes, not CloudWatch metrics, capped by the jobs still IN_QUEUE: `urgentDemand`),
 * the jobs and requests each worker holds and when each
 * was last busy (the workers table) — asks the policy, and writes the answer into the endpoint's ECS
 * service as desiredCount. Nothing else decides counts: there are no step or target-tracking alarms.
 *
 * When it runs:
 * - every minute, from an EventBridge schedule. A rate cannot be shorter than one minute
 *   (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-rate-expressions.html);
 * - at once, when the API (or the sweeper) queues work for an endpoint that has no worker: the
 *   engine announces new work on its change feed, and `NudgingChangeFeed` turns that into an async
 *   invoke of this function with `{endpointId}` (at most once per endpoint per `quietMs` per sandbox).
 *   So scale-from-zero is decided within a second or so of the submit, and within one minute even if
 *   a nudge is lost. A tighter loop (Step Functions, a self-re-invoking function) would buy nothing
 *   the nudge does not: between submits nothing changes that needs a decision sooner than idle_timeout
 *   (at least a second, usually minutes), and scale-in a minute late costs one idle minute.
 *
 * Why not SQS metrics in CloudWatch: they are only emitted while a queue is active, so an idle queue
 * has none and a woken one takes minutes to show up
 * (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-available-cloudwatch-metrics.html).
 * GetQueueAttributes answers now.
 *
 * What keeps a busy worker alive when the count goes down: ECS stops tasks that are not yet running
 * first, then running ones without task scale-in protection. The agent protects its task while its
 * worker holds a job and until it has been idle for idle_timeout (worker-image/agent/agent.ts,
 * https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-scale-in-protection.html), and the
 * policy never asks for fewer workers than those it must keep, so the two agree.
 *
 * What keeps a woken load-balanced endpoint up while its task boots: nothing in the job store. The
 * request that woke it was answered 503 by the ALB and the wake-up alarm acts once per state change
 * (https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/alarm-actions.html), so the next
 * scheduled run sees no demand, and no worker either until the task runs (a GPU cold start takes
 * minutes). Before it would lower such an endpoint to 0, the scaler reads the service's tasks and keeps
 * those still within their boot allowance (`bootingOf` in core/scaling.ts; `bootAllowanceOf` here).
 *
 * A queue endpoint needs the same while its queue's count hides the job that woke it. SQS's
 * ApproximateNumberOfMessages "may not achieve consistency until at least 1 minute after the producers
 * stop sending messages" (GetQueueAttributes), and the urgent demand is the depth capped by the job
 * store's count (`urgentDemand`), so a depth still reading 0 makes it 0: the scheduled run right after
 * the /run nudge that started a task for the job lowered the endpoint back to 0, ECS stopped the task
 * mid-boot, and the next run started another, the cold start paid again (test/unit/scaling-sim.test.ts,
 * the lagging-count day). So when the store still counts urgent jobs waiting, booting tasks are kept
 * the same way; when it counts none, nothing is read and the answer stands.
 *
 * What stops it launching tasks that cannot start: a task of the cluster that stops with stopCode
 * TaskFailedToStart (an image that cannot be pulled, a `secrets=` name with no Secrets Manager secret:
 * https://docs.aws.amazon.com/AmazonECS/latest/developerguide/stopped-task-error-codes.html) reaches
 * this function from the same EventBridge rule that tells the alarm topic (infra/constructs/alarms.ts,
 * "ECS Task State Change", its `group` `service:<service name>`:
 * https://docs.aws.amazon.com/AmazonECS/latest/developerguide/ecs_task_events.html); so does a task
 * whose artifact download (the init container) exited non-zero, from a rule of its own
 * (infra/platform-stack.ts): the agent and the worker wait for that container's SUCCESS and never
 * start, under a stop code ECS does not document for it. No agent ever ran
 * in such a task, so no supervisor counts it: `recordTaskStartFailure` adds it to the endpoint's run of
 * failed starts, the same count the agents keep, and at the supervisor's `maxFailedStarts` marks the
 * endpoint failing with ECS's reason. Then this run wants no task, and the sweeper ends the queued
 * jobs with that reason instead of leaving them to their time-to-live; a deploy clears it. Each task
 * counts once, by its ARN, however many copies of its event ECS and Lambda deliver, and a task of an
 * older deployment of the service not at all.
 *
 * UpdateService: https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_UpdateService.html
 * DescribeServices (at most 10 services per call):
 * https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_DescribeServices.html
 */

import { type CloudWatchClient, DescribeAlarmsCommand } from '@aws-sdk/client-cloudwatch';
import {
  DescribeServicesCommand,
  DescribeTasksCommand,
  type ECSClient,
  ListTasksCommand,
  UpdateServiceCommand,
} from '@aws-sdk/client-ecs';
import { InvokeCommand, type LambdaClient } from '@aws-sdk/client-lambda';
import { z } from 'zod';
import { endpointConfigOf } from '../core/deployment.js';
import { serviceTasksFields, taskStartFailureFields } from '../core/metrics.js';
import { PendingWork } from '../core/pending-work.js';
import type {
  ChangeDetail,
  ChangeFeed,
  Clock,
  ControlStore,
  JobQueue,
  QueuedJobCount,
  StartFailureRecord,
  TaskStartFailureRecord,
  Watch,
  WorkerRegistry,
} from '../core/ports.js';
import {
  type BootAllowance,
  bootingOf,
  decideScale,
  type ScalingDecision,
  type ScalingInput,
  scalingSettingsOf,
  type TaskStart,
  workerLoadOf,
} from '../core/scaling.js';
import { defaultSupervisorSettings } from '../core/supervisor.js';
import { placementFor, poolMaxInstances } from '../infra/gpu.js';
import { wakeAlarmPrefix } from '../infra/names.js';
import { healthCheckGraceSecOf, initContainer } from '../infra/task-layout.js';
import { scalerDepsFromEnv } from './wiring.js';

/** What one run scales: every endpoint (the schedule), or one (a nudge). */
export const scalerEventSchema = z
  .object({
    endpointId: z.string().min(1).optional(),
    /** Load-balanced requests that found no worker (the wake-up alarm's nudge). */
    waitingRequests: z.number().int().min(0).optional(),
    /** An urgent job was just queued (the API's nudge, NudgingChangeFeed): demand is at least one. */
    urgentJob: z.literal(true).optional(),
  })
  .strict();
export type ScalerEvent = z.infer<typeof scalerEventSchema>;

/**
 * A CloudWatch alarm's Lambda action sends `{source: 'aws.cloudwatch', alarmData: {alarmName, state}}`
 * (https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/alarms-and-actions-Lambda.html).
 */
const alarmEventSchema = z.object({
  source: z.literal('aws.cloudwatch'),
  alarmData: z.object({
    alarmName: z.string(),
    state: z.object({ value: z.string() }).optional(),
  }),
});

/**
 * The run an event asks for. A nudge names its endpoint; a wake-up alarm going to ALARM means a
 * request was turned away; anything else (EventBridge's scheduled event) scales every endpoint.
 */
export function scalerEventOf(event: unknown): ScalerEvent {
  const nudge = scalerEventSchema.safeParse(event);
  if (nudge.success) return nudge.data;
  const alarm = alarmEventSchema.safeParse(event);
  if (alarm.success && alarm.data.alarmData.alarmName.startsWith(wakeAlarmPrefix)) {
    const endpointId = alarm.data.alarmData.alarmName.slice(wakeAlarmPrefix.length);
    const turnedAway = alarm.data.alarmData.state?.value === 'ALARM';
    return { endpointId, ...(turnedAway ? { waitingRequests: 1 } : {}) };
  }
  return {};
}

/**
 * A task that stopped before it ran, as EventBridge delivers it: TaskFailedToStart, or a task whose
 * init container (the artifact download) exited non-zero, so neither the agent nor the worker, which
 * wait for its SUCCESS, ever started. ECS documents no stop code for the second case (the agent's
 * container dependency fails, the essential agent never runs), so both codes a task that never ran
 * can stop with are read, and the init container's own exit code decides for EssentialContainerExited.
 */
const taskStartFailureSchema = z.object({
  source: z.literal('aws.ecs'),
  'detail-type': z.literal('ECS Task State Change'),
  detail: z.object({
    /** The task: each one counts once, however many copies of its event arrive. */
    taskArn: z.string().min(1),
    /** For a task a service started, the ID of the service's deployment that started it. */
    startedBy: z.string().optional(),
    group: z.string(),
    stopCode: z.enum(['TaskFailedToStart', 'EssentialContainerExited']),
    /** The instance ECS placed the task on; absent when it never found one. */
    containerInstanceArn: z.string().optional(),
    stoppedReason: z.string().optional(),
    containers: z
      .array(
        z.object({
          name: z.string().optional(),
          reason: z.string().optional(),
          exitCode: z.number().nullish(),
        }),
      )
      .optional(),
  }),
});

export interface TaskStartFailure {
  endpointId: string;
  taskArn: string;
  /** The deployment of the endpoint's service that started the task (`ecs-svc/…`), when ECS says. */
  startedBy?: string | undefined;
  /** ECS's stoppedReason (ResourceInitializationError: …, CannotPullContainerError: …). */
  reason: string;
  /** The containers' own reasons, as `name: reason`. */
  lines: string[];
}

/**
 * ECS's reasons for a task it could not place or hand to an instance: no instance with the CPU,
 * memory or GPUs it asks for (`TaskFailedToStart: RESOURCE:…`), an instance whose agent is
 * disconnected (`TaskFailedToStart: AGENT`), a placement constraint
 * (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/api_failures_messages.html).
 */
const placementReason = /^TaskFailedToStart: (RESOURCE|AGENT)\b|placement constraint/i;

/**
 * The failed start an event reports for one of the endpoints' services (`<prefix><endpointId>`),
 * when the endpoint caused it: the task was on an instance (its image pull and its secrets happen
 * there) and ECS names no placement reason. A task that never got an instance waited for capacity
 * (PROVISIONING, "provisioning tasks will wait for capacity for between 10 and 30 minutes before
 * transitioning to stopped", https://aws.amazon.com/blogs/containers/deep-dive-on-amazon-ecs-cluster-auto-scaling/):
 * a GPU shortage, the account's instance quota or a full pool, which the next deploy would not fix,
 * so it must not make the endpoint failing.
 */
export function taskStartFailureOf(event: unknown, serviceNamePrefix: string): TaskStartFailure | undefined {
  const parsed = taskStartFailureSchema.safeParse(event);
  if (!parsed.success) return undefined;
  const { taskArn, startedBy, group, stopCode, stoppedReason, containers, containerInstanceArn } =
    parsed.data.detail;
  const servicePrefix = `service:${serviceNamePrefix}`;
  if (!group.startsWith(servicePrefix) || group.length === servicePrefix.length) return undefined;
  if (!containerInstanceArn || placementReason.test(stoppedReason ?? '')) return undefined;
  const initExit = containers?.find((c) => c.name === initContainer)?.exitCode;
  const initFailed = initExit !== undefined && initExit !== null && initExit !== 0;
  // Any other essential exit is a task that ran: its agent saw the worker and counted what it had to.
  if (stopCode === 'EssentialContainerExited' && !initFailed) return undefined;
  return {
    endpointId: group.slice(servicePrefix.length),
    taskArn,
    ...(startedBy ? { startedBy } : {}),
    reason: initFailed
      ? `the artifact download exited ${initExit} before the worker could start; \`ferry logs\` shows its output`
      : (stoppedReason ?? 'no reason given'),
    lines: (containers ?? []).flatMap((c) => (c.reason ? [`${c.name ?? 'container'}: ${c.reason}`] : [])),
  };
}

/**
 * Why a failed task's event is not the endpoint's concern any more, or undefined when it is (or
 * nothing says otherwise). A deploy clears the run (DynamoControlStore `putEndpoint`), the tasks it
 * counted with it, so a copy of an event that arrives after the deploy (EventBridge tries a failed
 * hand-over again for up to a day; Lambda's queue delivers at least once and keeps a throttled
 * invoke of this function a minute, infra/platform-stack.ts maxEventAge,
 * https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-error-handling.html) would count
 * again against the new code. ECS names the deployment that started a service's task: "If the task
 * is started by an Amazon ECS service, then the startedBy parameter contains the deployment ID of the
 * service that starts it" (https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_Task.html;
 * the event's `detail` carries the task's fields). A deploy that changes the service (new code: a
 * new task definition) and `ferry secrets set` (a forced new deployment, cli/commands/secrets-run.ts)
 * make a new PRIMARY deployment, "the most recent deployment of a service"
 * (https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_Deployment.html), so a task that
 * another deployment started ran the old code or the old secrets and is not counted. One
 * DescribeServices call of the endpoint's service (the scaler's role may describe `ferry-*`
 * services), on a failed start only. A service that is gone (the endpoint was destroyed) has nothing
 * to count for. When the read fails, or the event or the service names no deployment, the task
 * counts, as before. What it cannot tell: a deploy that left the service as it was keeps its
 * deployment (as does a worker's contact, which also clears the run), so a copy of an event from
 * before it that arrives after it counts, once, in the new run.
 */
async function notCurrentDeployment(
  deps: Pick<ScalerDeps, 'ecs' | 'cluster' | 'serviceNamePrefix' | 'log'>,
  failure: TaskStartFailure,
): Promise<string | undefined> {
  if (!failure.startedBy) return undefined;
  const serviceName = `${deps.serviceNamePrefix}${failure.endpointId}`;
  try {
    const described = await deps.ecs.send(
      new DescribeServicesCommand({ cluster: deps.cluster, services: [serviceName] }),
    );
    const service = described.services?.find((s) => s.serviceName === serviceName && s.status === 'ACTIVE');
    if (!service) return `no active ECS service ${serviceName} in cluster ${deps.cluster}`;
    const primary = service.deployments?.find((d) => d.status === 'PRIMARY')?.id;
    if (!primary || primary === failure.startedBy) return undefined;
    return `started by deployment ${failure.startedBy}, not the service's current one (${primary})`;
  } catch (error) {
    deps.log?.({
      msg: 'ferry scaler: reading the deployment of a task that failed to start',
      endpointId: failure.endpointId,
      error: (error as Error).message,
    });
    return undefined;
  }
}

/**
 * One more failed start in the endpoint's run, and the endpoint failing once the run reaches
 * `maxFailedStarts` (the rule core/supervisor.ts applies to workers that die before contact). Each
 * task counts once, however many copies of its event arrive (`addTaskStartFailure`), and a task of
 * an older deployment of the service not at all (`notCurrentDeployment`). The verdict is written
 * when the run is at the threshold and the item has none, whether this call counted the task or a
 * copy of its event did: a copy then completes a verdict that an earlier run counted but did not
 * write (it stopped between the two writes), and never rewrites one.
 */
export async function recordTaskStartFailure(
  deps: Pick<ScalerDeps, 'control' | 'clock' | 'log' | 'ecs' | 'cluster' | 'serviceNamePrefix'>,
  failure: TaskStartFailure,
  maxFailedStarts = defaultSupervisorSettings.maxFailedStarts,
): Promise<void> {
  const { control } = deps;
  if (!control.addTaskStartFailure || !control.markFailing) return;
  const line = {
    msg: 'ferry task failed to start',
    endpointId: failure.endpointId,
    taskArn: failure.taskArn,
    reason: failure.reason,
  };
  const ignored = await notCurrentDeployment(deps, failure);
  if (ignored) {
    deps.log?.({ ...line, counted: false, ignored });
    return;
  }
  const {
    failedStarts: run,
    counted,
    problem,
  } = await control.addTaskStartFailure(failure.endpointId, failure.taskArn, maxFailedStarts);
  // A task counted here is one point of the dashboard's failed starts (core/metrics.ts; copies add none).
  deps.log?.({
    ...line,
    run,
    counted,
    ...(counted ? taskStartFailureFields(failure.endpointId) : {}),
  });
  if (run < maxFailedStarts || problem?.state === 'failing') return;
  await control.markFailing(failure.endpointId, {
    state: 'failing',
    reason: `${run} tasks in a row could not start (${failure.reason}); fix it and redeploy`,
    lines: failure.lines,
    sinceMs: deps.clock.now(),
  });
}

export interface ScalerDeps {
  control: Pick<ControlStore, 'listEndpoints' | 'getEndpoint'> &
    Partial<Pick<StartFailureRecord, 'startFailures' | 'markFailing'> & TaskStartFailureRecord>;
  queue: Pick<JobQueue, 'depth'>;
  /** The jobs IN_QUEUE at most (the count items of DynamoJobStore): the urgent ones cap the urgent depth. */
  jobs: QueuedJobCount;
  workers: Pick<WorkerRegistry, 'list'>;
  ecs: Pick<ECSClient, 'send'>;
  /** The ECS cluster holding every Ferry worker service. */
  cluster: string;
  /** An endpoint's service is `<prefix><endpointId>` (infra/ names it so). */
  serviceNamePrefix: string;
  clock: Clock;
  /** Registry records older than this are workers gone (the engine's workerStaleMs). */
  workerStaleMs: number;
  /** The load-balanced endpoints whose wake-up alarm is in ALARM now (turnedAwayOf). */
  turnedAway?: () => Promise<Set<string>>;
  log?: (line: Record<string, unknown>) => void;
}

/**
 * The endpoints whose load balancer turns requests away right now: their wake-up alarm is in ALARM.
 * An alarm acts only when its state changes ("not performed again if the condition persists",
 * https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/alarm-actions.html),
 * so under clients that keep retrying it stays in ALARM and wakes the scaler once. When that wake-up
 * lapsed (a GPU that took longer than its boot allowance, a failing verdict a deploy cleared), the
 * endpoint stayed at zero for as long as the retries went on. The scheduled run asks the alarms
 * instead (DescribeAlarms by name prefix and state; the scaler may describe `ferry-wake-*` alarms
 * only, infra/platform-stack.ts).
 */
export function turnedAwayOf(cloudwatch: Pick<CloudWatchClient, 'send'>): () => Promise<Set<string>> {
  return async () => {
    const ids = new Set<string>();
    let token: string | undefined;
    do {
      const page = await cloudwatch.send(
        new DescribeAlarmsCommand({
          AlarmNamePrefix: wakeAlarmPrefix,
          AlarmTypes: ['MetricAlarm'],
          StateValue: 'ALARM',
          MaxRecords: 100,
          NextToken: token,
        }),
      );
      for (const alarm of page.MetricAlarms ?? []) {
        if (alarm.AlarmName?.startsWith(wakeAlarmPrefix))
          ids.add(alarm.AlarmName.slice(wakeAlarmPrefix.length));
      }
      token = page.NextToken;
    } while (token);
    return ids;
  };
}

export interface EndpointScaleReport {
  endpointId: string;
  service: string;
  /** desiredCount before this run; undefined when the service was not found. */
  was?: number | undefined;
  /** The service's runningCount and pendingCount as this run's DescribeServices answered. */
  tasks?: { running: number; pending: number };
  decision?: ScalingDecision;
  /** Tasks kept through their boot allowance (load-balanced endpoints the policy put at 0). */
  booting?: number;
  /** Whether UpdateService was called. */
  updated: boolean;
  error?: string;
  /**
   * The endpoint has a record but no ECS service: its stack is being created or deleted. Expected
   * for minutes around a deploy, so not a failure of the run (`failedScales`).
   */
  noService?: true;
}

/**
 * The endpoints a run tried and failed to scale (its inputs unreadable, UpdateService refused).
 * One endpoint's trouble does not stop the others, but the run must still fail, or nothing sees it.
 */
export function failedScales(reports: readonly EndpointScaleReport[]): EndpointScaleReport[] {
  return reports.filter((r) => r.error !== undefined && !r.noService);
}

/**
 * The urgent jobs the policy scales for: the queue's urgent depth, capped by the urgent jobs still
 * IN_QUEUE (`QueuedCounts.urgent`). A nudge for an urgent job counts it even when the depth does not
 * show it yet: the queue attributes "may not achieve consistency until at least 1 minute after the
 * producers stop sending messages"
 * (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_GetQueueAttributes.html),
 * and a depth of 0 read right after the submit left the first job for the next scheduled run.
 * A message outlives its job when the job is cancelled, purged or failed while it waits (SQS deletes
 * a message only with the receipt of a receive: a worker's take drops it then), so after a
 * purge-queue or a failing endpoint's redeploy the depth alone would start up to `max` GPU tasks for
 * messages no job is behind. The cap counts urgent jobs only, as the depth does: capped by every
 * queued job, a cancelled urgent job's message started a GPU task for the low-priority jobs waiting
 * beside it, which never start one. Jobs queued before the counts knew their priority count as
 * urgent until they leave the queue (`readQueuedAtMost`, core/adapters/aws/dynamo/counts.ts).
 * The count read lags the writes a little (a GSI,
 * https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/GSI.html#GSI.Reads), which only
 * matters to a nudge sent by the submit itself: it may count one worker's worth (`lagSlack`) more.
 */
export function urgentDemand(queueUrgent: number, urgentQueuedAtMost: number, lagSlack: number): number {
  return Math.min(queueUrgent, urgentQueuedAtMost + lagSlack);
}

/**
 * How long a task may wait to run (an instance to launch, an image to pull): 10 minutes. That covers
 * the stages bench/results.md lists for a GPU from zero (about 8 minutes at worst) and ends no later
 * than ECS itself gives up: a task waiting for capacity waits 10 to 30 minutes before it is stopped
 * (https://aws.amazon.com/blogs/containers/deep-dive-on-amazon-ecs-cluster-auto-scaling/), so a task
 * that never gets an instance is let go before ECS could replace it with a new one to wait again.
 */
export const provisionAllowanceMs = 10 * 60_000;

/**
 * A task's boot allowance: `provisionAllowanceMs` until it runs, then the endpoint's health_check_grace
 * until its worker reports, the time ECS itself gives it before its health checks count.
 */
export function bootAllowanceOf(
  resources: Parameters<typeof placementFor>[0] & { healthCheckGraceSec?: number | undefined },
): BootAllowance {
  const graceSec = healthCheckGraceSecOf(resources, placementFor(resources).kind);
  return { provisionMs: provisionAllowanceMs, graceMs: graceSec * 1000 };
}

/**
 * The service's tasks that ECS means to run, with when each was created and started. ListTasks with
 * desiredStatus RUNNING lists tasks still waiting for an instance or pulling too (ECS never sets a
 * desired status of PENDING: https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_ListTasks.html);
 * DescribeTasks takes at most 100 tasks
 * (https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_DescribeTasks.html). A task without a
 * creation time is left out: its age could not be bounded.
 */
async function serviceTasks(deps: ScalerDeps, service: string): Promise<TaskStart[]> {
  const arns: string[] = [];
  let nextToken: string | undefined;
  do {
    const page = await deps.ecs.send(
      new ListTasksCommand({
        cluster: deps.cluster,
        serviceName: service,
        desiredStatus: 'RUNNING',
        ...(nextToken ? { nextToken } : {}),
      }),
    );
    arns.push(...(page.taskArns ?? []));
    nextToken = page.nextToken;
  } while (nextToken);
  const tasks: TaskStart[] = [];
  for (let i = 0; i < arns.length; i += 100) {
    const described = await deps.ecs.send(
      new DescribeTasksCommand({ cluster: deps.cluster, tasks: arns.slice(i, i + 100) }),
    );
    for (const task of described.tasks ?? []) {
      if (!task.createdAt) continue;
      tasks.push({ createdAtMs: task.createdAt.getTime(), startedAtMs: task.startedAt?.getTime() });
    }
  }
  return tasks;
}

/** One pass: every endpoint (schedule) or one (nudge). Never throws for one endpoint's trouble. */
export async function scaleEndpoints(deps: ScalerDeps, event: ScalerEvent): Promise<EndpointScaleReport[]> {
  const records = event.endpointId
    ? [await deps.control.getEndpoint(event.endpointId)].filter((r) => r !== undefined)
    : await deps.control.listEndpoints();
  // The schedule's run: requests turned away now count as one waiting request each endpoint.
  let turnedAway = new Set<string>();
  if (!event.endpointId && deps.turnedAway) {
    try {
      turnedAway = await deps.turnedAway();
    } catch (error) {
      deps.log?.({ msg: 'ferry scaler: reading the wake-up alarms', error: (error as Error).message });
    }
  }
  const plans: EndpointScaleReport[] = [];
  // Load-balanced endpoints, and queue endpoints with urgent jobs in the store: what the policy was
  // asked, to ask again with the tasks still booting.
  const bootInputs = new Map<EndpointScaleReport, { input: ScalingInput; allowance: BootAllowance }>();
  for (const record of records) {
    const service = `${deps.serviceNamePrefix}${record.id}`;
    try {
      const { endpoint } = endpointConfigOf(record);
      // Never more tasks than the endpoint's pool has instances: the rest would wait in PROVISIONING.
      const { min, max, ...policy } = scalingSettingsOf(endpoint.resources);
      const settings = {
        ...policy,
        min: Math.min(min, poolMaxInstances),
        max: Math.min(max, poolMaxInstances),
      };
      const now = deps.clock.now();
      const isQueue = endpoint.kind === 'queue';
      const [depth, queued, registered, starts] = await Promise.all([
        isQueue
          ? deps.queue.depth(record.id, { atMost: settings.max * settings.maxConcurrency })
          : Promise.resolve({ urgent: 0, visible: 0 }),
        isQueue ? deps.jobs.queuedAtMost(record.id, now) : Promise.resolve({ all: 0, urgent: 0 }),
        deps.workers.list(record.id, now - deps.workerStaleMs),
        deps.control.startFailures?.(record.id),
      ]);
      // Its workers cannot start: none is wanted until a deploy (the sweeper fails its queued jobs).
      const failing = starts?.problem?.state === 'failing';
      const nudged = event.endpointId === record.id;
      const input: ScalingInput = {
        ...settings,
        urgentQueuedJobs: urgentDemand(
          nudged && event.urgentJob ? Math.max(depth.urgent, 1) : depth.urgent,
          queued.urgent,
          nudged ? settings.maxConcurrency : 0,
        ),
        waitingRequests: nudged ? (event.waitingRequests ?? 0) : turnedAway.has(record.id) ? 1 : 0,
        workers: registered.map(workerLoadOf),
        nowMs: now,
        ...(failing ? { failing: true } : {}),
      };
      const plan: EndpointScaleReport = {
        endpointId: record.id,
        service,
        decision: decideScale(input),
        updated: false,
      };
      // A queue endpoint's jobs wait in the queue until a worker takes them, so its booting tasks
      // matter only while the store counts urgent jobs the lagging depth may not show yet.
      if (!failing && (!isQueue || queued.urgent > 0))
        bootInputs.set(plan, { input, allowance: bootAllowanceOf(endpoint.resources) });
      plans.push(plan);
    } catch (error) {
      plans.push({ endpointId: record.id, service, updated: false, error: (error as Error).message });
    }
  }
  // Current counts, ten services per call (the API's limit). A Service's desiredCount is what the
  // service scheduler is asked to keep, runningCount "the number of tasks in the cluster that are in
  // the RUNNING state" and pendingCount those in PENDING
  // (https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_Service.html): the dashboard's
  // workers graph (serviceTasksFields), read here at no extra call.
  const current = new Map<string, { desired: number; running: number; pending: number }>();
  const wanted = plans.filter((p) => p.decision);
  for (let i = 0; i < wanted.length; i += 10) {
    const batch = wanted.slice(i, i + 10).map((p) => p.service);
    const described = await deps.ecs.send(
      new DescribeServicesCommand({ cluster: deps.cluster, services: batch }),
    );
    for (const s of described.services ?? []) {
      if (s.serviceName && s.status === 'ACTIVE')
        current.set(s.serviceName, {
          desired: s.desiredCount ?? 0,
          running: s.runningCount ?? 0,
          pending: s.pendingCount ?? 0,
        });
    }
  }
  for (const plan of wanted) {
    const counts = current.get(plan.service);
    plan.was = counts?.desired;
    if (counts) plan.tasks = { running: counts.running, pending: counts.pending };
    if (plan.was === undefined) {
      // Deployed but its stack is not there (yet, or any more): nothing to scale.
      plan.error = `no active ECS service ${plan.service} in cluster ${deps.cluster}`;
      plan.noService = true;
      continue;
    }
    const boot = bootInputs.get(plan);
    // About to put an endpoint at 0 while it has tasks no worker has reported for: they may be
    // booting for the request or job that woke it. Only then are its tasks read (two more calls).
    if (boot && plan.decision!.desired === 0 && plan.was > boot.input.workers.length) {
      try {
        const tasks = await serviceTasks(deps, plan.service);
        plan.booting = bootingOf(tasks, boot.input.workers.length, boot.allowance, boot.input.nowMs);
        if (plan.booting > 0) plan.decision = decideScale({ ...boot.input, booting: plan.booting });
      } catch (error) {
        // Without the tasks the policy's answer stands; the line below says why.
        plan.error = `reading the tasks of ${plan.service}: ${(error as Error).message}`;
      }
    }
    if (plan.was === plan.decision!.desired) continue;
    try {
      await deps.ecs.send(
        new UpdateServiceCommand({
          cluster: deps.cluster,
          service: plan.service,
          desiredCount: plan.decision!.desired,
        }),
      );
      plan.updated = true;
    } catch (error) {
      plan.error = (error as Error).message;
    }
  }
  for (const plan of plans) {
    // One line per endpoint for CloudWatch Logs Insights: counts only. With the service's counts it
    // is also a point of the dashboard's workers graph (core/metrics.ts): the desiredCount this run
    // set, or left when it called nothing or UpdateService was refused.
    const tasks =
      plan.tasks && plan.was !== undefined
        ? serviceTasksFields(plan.endpointId, {
            desired: plan.updated ? plan.decision!.desired : plan.was,
            ...plan.tasks,
          })
        : {};
    deps.log?.({
      msg: 'ferry scale',
      endpointId: plan.endpointId,
      was: plan.was,
      desired: plan.decision?.desired,
      demand: plan.decision?.demand,
      kept: plan.decision?.kept,
      ...(plan.booting !== undefined ? { booting: plan.booting } : {}),
      updated: plan.updated,
      ...(plan.error ? { error: plan.error } : {}),
      ...tasks,
    });
  }
  return plans;
}

export function createScaler(deps: () => ScalerDeps) {
  return async (event: unknown): Promise<EndpointScaleReport[]> => {
    const resolved = deps();
    const failed = taskStartFailureOf(event, resolved.serviceNamePrefix);
    if (failed) await recordTaskStartFailure(resolved, failed);
    // A recorded failed start: its count again (failing now, it wants no task).
    const reports = await scaleEndpoints(
      resolved,
      failed ? { endpointId: failed.endpointId } : scalerEventOf(event),
    );
    // Every endpoint was tried and each one's reason logged; the run now fails if one could not be
    // scaled, because the ScalerErrors alarm reads the function's Errors metric, which counts
    // "exceptions that your code throws" (https://docs.aws.amazon.com/lambda/latest/dg/monitoring-metrics-types.html).
    // Caught and only logged, an endpoint whose UpdateService is refused kept its jobs queued with no
    // signal anywhere. Nothing retries the run (retryAttempts 0); the next scheduled run tries again.
    // A copy of the event (a retry, or ECS's and Lambda's at-least-once delivery) would not count its
    // task twice anyway (recordTaskStartFailure).
    const unscaled = failedScales(reports);
    if (unscaled.length > 0) {
      throw new Error(
        `${unscaled.length} endpoint(s) could not be scaled (${unscaled.map((r) => r.endpointId).join(', ')}); this run's log names each with its reason`,
      );
    }
    return reports;
  };
}

// ── the nudge ────────────────────────────────────────────────────────────────────────────────────

const endpointKeyPrefix = 'endpoint:';

export interface NudgeOptions {
  /** The feed it wraps (waits still go through it unchanged). */
  inner: ChangeFeed;
  workers: Pick<WorkerRegistry, 'list'>;
  clock: Clock;
  /** The engine's workerStaleMs (read when needed). */
  workerStaleMs: () => number;
  /** Invokes the scaler for one endpoint without waiting for it (Lambda InvocationType Event). */
  invoke: (endpointId: string) => Promise<void>;
  /** How long an answer ("has workers", "nudged") stands per endpoint. Default 10 s. */
  quietMs?: number;
  log?: (line: string) => void;
}

/**
 * A change feed that also wakes the scaler: the engine notifies `endpoint:<id>` whenever it queues a
 * job (submit, retry, requeue). If the endpoint has no live worker, the scaler is invoked for it at
 * once. Lookups and invokes are remembered per endpoint for `quietMs`, so a burst costs one of each.
 * `settled()` lets a Lambda handler finish them before it returns (a frozen sandbox sends nothing).
 */
export class NudgingChangeFeed implements ChangeFeed {
  private readonly answered = new Map<string, number>();
  private readonly pending = new PendingWork();
  private readonly quietMs: number;

  constructor(private readonly options: NudgeOptions) {
    this.quietMs = options.quietMs ?? 10_000;
  }

  watch(key: string): Watch {
    return this.options.inner.watch(key);
  }

  notify(key: string, detail?: ChangeDetail): void {
    this.options.inner.notify(key, detail);
    if (!key.startsWith(endpointKeyPrefix)) return;
    // Low-priority jobs never scale an endpoint up (core/scaling.ts): no nudge, and no quiet period
    // that would swallow an urgent job's nudge right after.
    if (detail?.queuedLowPriority) return;
    const endpointId = key.slice(endpointKeyPrefix.length);
    const now = this.options.clock.now();
    const last = this.answered.get(endpointId);
    if (last !== undefined && now - last < this.quietMs) return;
    this.answered.set(endpointId, now);
    const work = this.nudge(endpointId, now).catch((error) => {
      // A lost nudge costs at most one schedule period; never fail the request for it.
      this.answered.delete(endpointId);
      this.options.log?.(`scaler nudge for ${endpointId}: ${(error as Error).message}`);
    });
    this.pending.track(work);
  }

  /** Resolves once every nudge started so far has been sent (or given up). */
  async settled(): Promise<void> {
    await this.pending.settled();
  }

  private async nudge(endpointId: string, now: number): Promise<void> {
    const live = await this.options.workers.list(endpointId, now - this.options.workerStaleMs());
    if (live.length > 0) return;
    await this.options.invoke(endpointId);
  }
}

/** The invoke a nudge makes: async (Event), so the API never waits for the scaler's run. */
export function lambdaInvoker(lambda: Pick<LambdaClient, 'send'>, functionName: string) {
  return async (endpointId: string): Promise<void> => {
    await lambda.send(
      new InvokeCommand({
        FunctionName: functionName,
        InvocationType: 'Event',
        Payload: Buffer.from(JSON.stringify({ endpointId, urgentJob: true } satisfies ScalerEvent)),
      }),
    );
  };
}

/** `scaler.handler` in the bundle (functions/bundle.ts). */
export const handler = createScaler(() => scalerDepsFromEnv());
