/**
 * Whether a deploy has replaced this task, so a busy task steps aside: a new task definition, or a
 * newer deployment of the same one (a forced new deployment, as `ferry secrets set` starts to hand
 * tasks a new secret value).
 *
 * Task scale-in protection keeps a task with work from being stopped by scale-in "or deployments"
 * (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-scale-in-protection-endpoint.html),
 * and a queue agent protects its task while it holds a job (protection.ts). Under steady load it
 * always holds one, so a deploy never stopped the old tasks: with the services' maximum at 100 %,
 * no new task could start either, and jobs ran on the old code while the stack update waited.
 *
 * So the agent asks ECS, once a minute, which task definition its service's PRIMARY deployment runs
 * (DescribeServices, https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_DescribeServices.html:
 * "PRIMARY" is "the most recent deployment of a service") and compares it with its own task's, from
 * the task metadata endpoint v4 (`Cluster`, `Family`, `Revision`,
 * https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-metadata-endpoint-v4-response.html).
 * Once they differ it calls `onSuperseded` (once): the agent takes no new job, finishes the ones it
 * holds, turns protection off and leaves, and ECS starts a task of the new definition in its place.
 * Its role may describe its own service and no other (infra/isolation.ts).
 *
 * A forced new deployment ("start a new deployment with no service definition changes",
 * https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_UpdateService.html) keeps the task
 * definition, so the definitions match and a busy task would hold the deployment (and its old secret
 * values) for as long as it stays busy. The metadata endpoint does not say which deployment started
 * the task (DescribeTasks' `startedBy` does, for a grant the role does not have), but it gives the
 * task's `PullStartedAt` and each container's `CreatedAt`: a task made well before the PRIMARY
 * deployment's `createdAt` belongs to an older deployment, since ECS starts no task for a deployment
 * once a newer one is PRIMARY. `clockMarginMs` covers the instance's clock against ECS's; a task of
 * an older deployment made within that margin before the new one is not found, and holds it as before.
 */
import type { DescribeServicesCommandOutput } from '@aws-sdk/client-ecs';
import { DescribeServicesCommand } from '@aws-sdk/client-ecs';
import { messageOf } from '../../core/errors.js';
import type { Clock } from '../../core/ports.js';

export interface SupersededWatch {
  ecs: { send(command: DescribeServicesCommand): Promise<DescribeServicesCommandOutput> };
  /** `ECS_CONTAINER_METADATA_URI_V4`. */
  metadataUri: string;
  /** The task's service (infra/names.ts serviceName). */
  serviceName: string;
  clock: Clock;
  signal: AbortSignal;
  /** Called once, with what replaced the task, for the agent's log line. */
  onSuperseded(reason: string): void;
  warn(message: string): void;
  /** Between looks (default a minute: a deploy waits at most that long for its old tasks to step aside). */
  pollMs?: number;
  fetch?: typeof fetch;
}

interface OwnTask {
  cluster: string;
  /** `family:revision`, the tail of a task definition ARN. */
  taskDefinition: string;
  /** When the task was made: its first image pull, else its first container's creation. */
  madeAtMs: number | undefined;
}

/** How much earlier than a deployment a task must have been made to count as an older one's. */
export const clockMarginMs = 30_000;

async function ownTask(watch: SupersededWatch): Promise<OwnTask> {
  const response = await (watch.fetch ?? fetch)(`${watch.metadataUri}/task`, {
    signal: AbortSignal.timeout(5_000),
  });
  if (!response.ok) throw new Error(`task metadata: HTTP ${response.status}`);
  const task = (await response.json()) as {
    Cluster?: string;
    Family?: string;
    Revision?: string;
    PullStartedAt?: string;
    Containers?: { CreatedAt?: string }[];
  };
  if (!task.Cluster || !task.Family || !task.Revision) {
    throw new Error('task metadata without Cluster, Family and Revision');
  }
  // "omitted" when not known (a cached image is not pulled): the earliest of what is there.
  const times = [task.PullStartedAt, ...(task.Containers ?? []).map((c) => c.CreatedAt)]
    .map((at) => Date.parse(at ?? ''))
    .filter((ms) => Number.isFinite(ms));
  return {
    cluster: task.Cluster,
    taskDefinition: `${task.Family}:${task.Revision}`,
    madeAtMs: times.length > 0 ? Math.min(...times) : undefined,
  };
}

/** Resolves once the task was found superseded (after `onSuperseded`) or the signal aborts. */
export async function watchSuperseded(watch: SupersededWatch): Promise<void> {
  let own: OwnTask | undefined;
  let lastProblem = '';
  while (!watch.signal.aborted) {
    await watch.clock.sleep(watch.pollMs ?? 60_000, watch.signal);
    if (watch.signal.aborted) return;
    try {
      own ??= await ownTask(watch);
      const answer = await watch.ecs.send(
        new DescribeServicesCommand({ cluster: own.cluster, services: [watch.serviceName] }),
      );
      const primary = answer.services?.[0]?.deployments?.find((d) => d.status === 'PRIMARY');
      lastProblem = '';
      const definition = primary?.taskDefinition;
      if (definition && !definition.endsWith(`/${own.taskDefinition}`)) {
        watch.onSuperseded(`a deploy replaced this task's definition (now ${definition})`);
        return;
      }
      const deployedAtMs = primary?.createdAt?.getTime();
      if (
        definition &&
        deployedAtMs !== undefined &&
        own.madeAtMs !== undefined &&
        own.madeAtMs < deployedAtMs - clockMarginMs
      ) {
        watch.onSuperseded(
          `a newer deployment of this task's definition started (${primary?.id ?? 'no id'}, created ${new Date(deployedAtMs).toISOString()})`,
        );
        return;
      }
    } catch (error) {
      // Logged once per kind of failure; the task goes on serving meanwhile.
      const problem = messageOf(error);
      if (problem !== lastProblem) watch.warn(`deployment check: ${problem}`);
      lastProblem = problem;
    }
  }
}
