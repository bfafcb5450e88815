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
 * - The count stays within [min, max]. max wins over everything: if busy workers outnumber a lowered
 *   max, the count is max and nobody busy is named to stop (the actuator lets them finish: locally the
 *   pool does not stop them, on AWS task scale-in protection keeps ECS from stopping them).
 * - A failing endpoint (its workers die before their first contact, core/supervisor.ts) wants 0 workers,
 *   whatever min and the queue say: a new worker would run the same broken code, and on AWS each try
 *   is a GPU instance billed while it boots and crashes. A deploy clears the state.
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
  const idle: WorkerLoad[] = [];
  for (const worker of input.workers) {
    const holding = Math.max(0, worker.heldJobs) + Math.max(0, worker.inFlightRequests);
    held += holding;
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
    return { desired: 0, mayStop, demand, kept: input.workers.length - mayStop.length };
  }
  const desired = Math.min(max, Math.max(min, needed, kept));
  // Up workers beyond the desired count go, longest idle first, and only ones that are past their
  // idle_timeout with nothing held; a tie goes to the lower id so the answer is deterministic.
  const surplus = Math.max(0, input.workers.length - desired);
  const mayStop = idle
    .sort((a, b) => a.lastBusyAtMs - b.lastBusyAtMs || (a.workerId < b.workerId ? -1 : 1))
    .slice(0, surplus)
    .map((w) => w.workerId);
  return { desired, mayStop, demand, kept };
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
