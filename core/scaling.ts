/**
 * The scaling policy: how many workers an endpoint should have, and which of them may stop.
 *
 * One pure function, shared by both actuators (docs/scaling.md): the local pool starts and stops
 * processes from it, and on AWS the scaler Lambda (functions/scaler.ts) writes its answer into each ECS
 * service's desiredCount. Nothing here reads a clock or a store: the caller passes what the job store
 * knows and the time, so the rule is tested on tables and on a simulated day (test/unit/scaling*.test.ts).
 *
 * The rule, in words:
 * - Demand is the urgent jobs waiting (low-priority jobs never scale up), plus the jobs and
 *   load-balanced requests workers hold now, plus requests waiting at a front door for a worker.
 *   Each worker carries up to max_concurrency of them: needed = ceil(demand / max_concurrency).
 * - The answer is an absolute count, never a step. Asking again while a worker is still booting
 *   (a GPU cold start takes minutes) gives the same number, so one job can never ramp an endpoint up
 *   to several workers the way a "+1 every minute the queue is not empty" alarm does.
 * - A worker is kept while it holds anything and for idle_timeout after it last held something; only
 *   then may it stop. So the count never drops below the workers that must be kept.
 * - The count stays within [min, max], except that it never falls below the workers holding
 *   something: if busy workers outnumber a lowered max, the count is theirs, and no new one starts.
 *   On AWS a count below the protected tasks blocks their protection: ECS refuses to set or renew it
 *   with DEPLOYMENT_BLOCKED, "the service has more protected tasks than the desired count of tasks"
 *   (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-scale-in-protection.html), so
 *   a long job's protection lapsed and ECS stopped its task mid-job.
 * - A failing endpoint (its workers die before their first contact, core/supervisor.ts) wants no new
 *   worker, whatever min and the queue say: a new worker would run the same broken code, and on AWS
 *   each try is a GPU instance billed while it boots and crashes. Workers still holding something
 *   (tasks of the code before a broken deploy) stay to finish it. A deploy clears the state.
 * - Where the rest says 0, workers still booting within their boot allowance are kept (`booting`,
 *   counted by `bootingOf`). A load-balanced endpoint woken from zero needs this: the request that woke
 *   it is stored nowhere (its ALB answered 503 and the alarm fires once), so nothing else says the task
 *   now booting is wanted. Queue jobs wait in the queue, so a queue endpoint's demand outlives the
 *   boot, but SQS's count of them lags the sends by up to a minute or more: while it still reads 0,
 *   the scaler passes `booting` for a queue endpoint too (functions/scaler.ts).
 */

import type { WorkerRecord } from './ports.js';

/** What the policy needs to know about one worker that is up (registered with the job store). */
export interface WorkerLoad {
  workerId: string;
  /** Queue jobs it holds now. */
  heldJobs: number;
  /** Load-balanced requests it is serving now. */
  inFlightRequests: number;
  /**
   * When it last held a job or request (ms). A worker that has never held anything counts from when it
   * started, so a fresh worker gets its idle_timeout too.
   */
  lastBusyAtMs: number;
}

export interface ScalingInput {
  /** Urgent jobs waiting in the queue (low-priority ones left out: they never scale up). */
  urgentQueuedJobs: number;
  /** Load-balanced requests that reached the front door while no worker could take them. */
  waitingRequests?: number;
  workers: readonly WorkerLoad[];
  min: number;
  max: number;
  /** Jobs (or requests) one worker carries at once. */
  maxConcurrency: number;
  idleTimeoutMs: number;
  nowMs: number;
  /** The endpoint's workers cannot start (core/supervisor.ts): none is wanted until a deploy. */
  failing?: boolean;
  /**
   * Workers started for the endpoint that are not up yet and still within their boot allowance
   * (`bootingOf`). They keep the count from going to 0, and only that: above 0 the demand that started
   * them is still visible to the policy (held or waiting), so it decides alone. On AWS the scaler
   * passes it for load-balanced endpoints, and for queue endpoints whose store counts urgent jobs the
   * queue's lagging depth may not show yet (functions/scaler.ts); the local pool holds a waiting
   * request at its front door until a worker is ready, so its demand never vanishes and it passes none.
   */
  booting?: number;
}

export interface ScalingDecision {
  /** How many workers the endpoint should have, booting ones included. */
  desired: number;
  /**
   * Up workers that may stop now to reach `desired`: idle for at least idle_timeout and holding
   * nothing, longest idle first. Workers still booting are not listed: an actuator stops those first
   * (they hold nothing) before any listed one.
   */
  mayStop: string[];
  /** Jobs plus requests the workers must carry. */
  demand: number;
  /** Up workers that may not stop yet (busy, or idle for less than idle_timeout). */
  kept: number;
}

/** The policy. Pure: the same input always gives the same decision. */
export function decideScale(input: ScalingInput): ScalingDecision {
  const min = Math.max(0, Math.floor(input.min));
  const max = Math.max(min, Math.floor(input.max));
  const perWorker = Math.max(1, Math.floor(input.maxConcurrency));
  let held = 0;
  let kept = 0;
  let busy = 0;
  const idle: WorkerLoad[] = [];
  for (const worker of input.workers) {
    const holding = Math.max(0, worker.heldJobs) + Math.max(0, worker.inFlightRequests);
    held += holding;
    if (holding > 0) busy++;
    if (holding > 0 || input.nowMs - worker.lastBusyAtMs < input.idleTimeoutMs) kept++;
    else idle.push(worker);
  }
  const demand = Math.max(0, input.urgentQueuedJobs) + Math.max(0, input.waitingRequests ?? 0) + held;
  const needed = Math.ceil(demand / perWorker);
  if (input.failing) {
    // Workers holding something are left to finish (task protection on AWS); the rest may all go.
    const mayStop = input.workers
      .filter((w) => Math.max(0, w.heldJobs) + Math.max(0, w.inFlightRequests) === 0)
      .map((w) => w.workerId)
      .sort();
    return { desired: busy, mayStop, demand, kept: input.workers.length - mayStop.length };
  }
  const upWanted = Math.max(busy, Math.min(max, Math.max(min, needed, kept)));
  // Nothing wants a worker, but some are on their way: keep them through their boot allowance.
  const desired = upWanted > 0 ? upWanted : Math.min(max, Math.max(0, Math.floor(input.booting ?? 0)));
  // Up workers beyond the desired count go, longest idle first, and only ones that are past their
  // idle_timeout with nothing held; a tie goes to the lower id so the answer is deterministic. Booting
  // workers kept above count none of the up ones.
  const surplus = Math.max(0, input.workers.length - upWanted);
  const mayStop = idle
    .sort((a, b) => a.lastBusyAtMs - b.lastBusyAtMs || (a.workerId < b.workerId ? -1 : 1))
    .slice(0, surplus)
    .map((w) => w.workerId);
  return { desired, mayStop, demand, kept };
}

/** A task started for an endpoint, as its orchestrator reports it (on AWS, ECS DescribeTasks). */
export interface TaskStart {
  /** When it was created (placement asked for). */
  createdAtMs: number;
  /** When it started running; undefined while it waits for an instance or pulls its image. */
  startedAtMs?: number | undefined;
}

/** How long a task may take to come up, in its two stages. */
export interface BootAllowance {
  /** From creation until it runs: an instance to launch and an image to pull. */
  provisionMs: number;
  /** From its start until its worker reports: the endpoint's health_check_grace. */
  graceMs: number;
}

/**
 * How many workers are still booting: tasks that have not started and were created less than
 * `provisionMs` ago, plus those started less than `graceMs` ago beyond the `registered` workers that
 * have reported (a task's worker registers once it runs, so a started task is booting only until then).
 * Past its allowance a task counts for nothing: the endpoint goes back to the policy's count (min, or
 * its idle workers' idle_timeout), so a wake-up no request follows ends after the allowance plus
 * idle_timeout at most.
 */
export function bootingOf(
  tasks: readonly TaskStart[],
  registered: number,
  allowance: BootAllowance,
  nowMs: number,
): number {
  let waiting = 0;
  let started = 0;
  for (const task of tasks) {
    if (task.startedAtMs !== undefined) {
      if (nowMs - task.startedAtMs < allowance.graceMs) started++;
    } else if (nowMs - task.createdAtMs < allowance.provisionMs) {
      waiting++;
    }
  }
  return waiting + Math.max(0, started - Math.max(0, registered));
}

/**
 * A worker as the registry records it (what every actuator reads). A record written before
 * `lastBusyAt` existed counts as busy when last seen: kept, never stopped early.
 */
export function workerLoadOf(record: WorkerRecord): WorkerLoad {
  return {
    workerId: record.workerId,
    heldJobs: record.jobIds.length,
    inFlightRequests: record.inFlight ?? 0,
    lastBusyAtMs: record.lastBusyAt ?? record.lastSeenAt,
  };
}

/** The endpoint settings the policy reads, from the manifest's resources. */
export interface ScalingSettings {
  min: number;
  max: number;
  maxConcurrency: number;
  idleTimeoutMs: number;
}

export function scalingSettingsOf(resources: {
  workersMin: number;
  workersMax: number;
  maxConcurrency: number;
  idleTimeoutSec: number;
}): ScalingSettings {
  return {
    min: resources.workersMin,
    max: resources.workersMax,
    maxConcurrency: resources.maxConcurrency,
    idleTimeoutMs: resources.idleTimeoutSec * 1000,
  };
}
