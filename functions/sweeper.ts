/**
 * The sweeper Lambda, run by an EventBridge schedule (every minute): lapsed leases go back to the
 * queue or fail, overrunning jobs time out, jobs past policy.ttl stop (JobEngine.sweep), expired
 * rows go now rather than when DynamoDB's TTL gets to them (typically within a few days of their
 * expiry, https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/howitworks-ttl.html; within two
 * days, says https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_UpdateTimeToLive.html;
 * reads filter anyway),
 * and, on queue endpoints, no job is left waiting for a message that will never come:
 *
 *  - IN_QUEUE jobs waiting `staleQueuedMs` or more get their message again (the API writes the job,
 *    then sends the message; a failed send left it waiting forever). Takes are conditional, so a
 *    duplicate message is harmless (JobEngine.resendWaiting).
 *  - Jobs whose message went to a dead-letter queue (received `maxReceiveCount` times without a
 *    claim) end FAILED with the reason, and the dead letter is deleted.
 */
import type { SweepTally } from '../core/engine.js';
import { messageOf } from '../core/errors.js';
import type { Deadline } from '../core/ports.js';
import { queuedJobsFailure } from '../core/supervisor.js';
import type { Platform } from './wiring.js';
import { platformFromEnv, settleSends } from './wiring.js';

export interface SweepReport extends SweepTally {
  deleted: number;
  resent: number;
  deadLettered: number;
  /** Queued jobs of endpoints whose workers cannot start, failed with the reason. */
  notStartable: number;
}

/** What the sweeper leaves itself to return once its webhooks are settled, of its 55 s timeout. */
const returnMarginMs = 2_000;

/**
 * The run's one deadline, which every step that loops checks before each unit of work (a job, a
 * page of chunks, a message, an endpoint): the rest waits for the next minute. Lambda stops an
 * invocation at the function's timeout wherever it is
 * (https://docs.aws.amazon.com/lambda/latest/dg/configuration-timeout.html), and then no `finally`
 * runs: the webhooks, nudges and stop signals of what the run had moved were not sent. The time left
 * is the context's getRemainingTimeInMillis(), "the number of milliseconds left before the
 * execution times out" (https://docs.aws.amazon.com/lambda/latest/dg/nodejs-context.html).
 */
function runDeadline(remainingMs: () => number): Deadline & { leftMs(): number } {
  const leftMs = () => remainingMs() - sweepTiming.finishMs;
  return { leftMs, passed: () => leftMs() <= 0 };
}

export const sweepTiming = {
  /** The schedule (infra/platform-stack.ts SweepEveryMinute). */
  periodMs: 60_000,
  /** An IN_QUEUE job this old gets its message again (and again every this long). */
  staleQueuedMs: 10 * 60_000,
  /** Per endpoint and run: bounded work, the rest waits for the next minute. */
  resendLimit: 200,
  deadLetterLimit: 100,
  /**
   * Expired jobs deleted per run (each one a Delete plus its blobs and chunks), oldest first; of their
   * streams, at most DynamoJobStore's sweepDropChunks chunks a run, a longer one over several runs.
   */
  expiredDeleteLimit: 200,
  /**
   * What a run keeps of its time for its `finally` (the nudges, the stop signals and the webhooks of
   * the jobs it moved) and to return: no step starts work past it (runDeadline). A failing endpoint's
   * backlog of tens of thousands ran the function into its timeout, every minute, before any webhook.
   */
  finishMs: 15_000 + returnMarginMs,
} as const;

/**
 * The endpoints a run visits, begun at a different one each minute: a run that runs out of time
 * leaves the endpoints after its deadline to the next, and in the same order every run the last ones
 * would wait for as long as the time keeps running out. Counted from the schedule's minute, since a
 * Lambda keeps nothing between runs it can count on.
 */
function rotated<T>(items: readonly T[], turn: number): T[] {
  const start = items.length === 0 ? 0 : turn % items.length;
  return [...items.slice(start), ...items.slice(0, start)];
}

export function createSweeper(platform: () => Platform, nowMs: () => number = Date.now) {
  return async (
    _event?: unknown,
    context?: { getRemainingTimeInMillis?: () => number },
  ): Promise<SweepReport> => {
    const { engine, jobs, control, deadLetters } = platform();
    const remainingMs = () => context?.getRemainingTimeInMillis?.() ?? 30_000;
    const deadline = runDeadline(remainingMs);
    // Each endpoint's steps run on their own: one whose queue is gone (a stack deleted by hand, an
    // undeploy that failed and kept the records) answers QueueDoesNotExist, which must not stop the
    // resends, dead letters and rejections of every endpoint after it. The run fails at its end.
    const failures: string[] = [];
    const forEach = async (
      what: string,
      endpointIds: readonly string[],
      step: (id: string) => Promise<void>,
    ) => {
      for (const endpointId of endpointIds) {
        if (deadline.passed()) return;
        try {
          await step(endpointId);
        } catch (error) {
          failures.push(`${what} of ${endpointId}: ${messageOf(error)}`);
        }
      }
    };
    let report: SweepReport;
    // The deadline had passed when the steps ended: they may have left work for the next run.
    let outOfTime = false;
    try {
      const swept = await engine.sweep({ deadline });
      const deleted = await jobs.deleteExpired(nowMs(), sweepTiming.expiredDeleteLimit, deadline);
      const queueEndpoints = rotated(
        (deadline.passed() ? [] : await control.listEndpoints())
          .filter((e) => e.kind === 'queue')
          .map((e) => e.id),
        Math.floor(nowMs() / sweepTiming.periodMs),
      );
      let resent = 0;
      await forEach('resending waiting jobs', queueEndpoints, async (endpointId) => {
        resent += await engine.resendWaiting([endpointId], {
          staleMs: sweepTiming.staleQueuedMs,
          periodMs: sweepTiming.periodMs,
          limit: sweepTiming.resendLimit,
          deadline,
        });
      });
      let deadLettered = 0;
      await forEach('reading dead letters', queueEndpoints, async (endpointId) => {
        for (const letter of await deadLetters.take(endpointId, sweepTiming.deadLetterLimit)) {
          // A letter taken but not handled shows again once its visibility timeout (60 s,
          // sqsDeadLetters) ends.
          if (deadline.passed()) return;
          const failed = await engine.failDeadLettered(
            letter.jobId,
            'The job could not be handed to a worker: its queue message was received 5 times without being claimed (dead-lettered)',
          );
          if (failed) deadLettered++;
          await letter.remove();
        }
      });
      // An endpoint the agents marked failing gets no new worker until a deploy: jobs that reach it
      // meanwhile end now with the reason, as the local supervisor's tick ends them.
      let notStartable = 0;
      await forEach('failing the queued jobs', queueEndpoints, async (endpointId) => {
        const problem = (await control.startFailures(endpointId))?.problem;
        if (problem?.state === 'failing') {
          notStartable += await engine.rejectQueued(endpointId, queuedJobsFailure(problem), {
            budgetMs: Math.max(0, deadline.leftMs()),
          });
        }
      });
      report = { ...swept, deleted, resent, deadLettered, notStartable };
      outOfTime = deadline.passed();
    } finally {
      // Whatever failed above, what the run did start goes out before it returns (a Lambda
      // environment is frozen once the handler returns). Requeued jobs of an endpoint left with no
      // worker nudged the scaler; timed-out and requeued jobs signal their workers' agents to stop
      // them; jobs the sweep ended (timed out, failed) notify their webhooks.
      // Within the time left: one that hangs must not run the function into its timeout, nor take
      // the others' time (settleSends).
      await settleSends(platform(), remainingMs() - returnMarginMs);
    }
    // One line per run for CloudWatch Logs Insights; counts only, never job contents.
    console.log(JSON.stringify({ msg: 'ferry sweep', ...report, failedSteps: failures.length, outOfTime }));
    for (const failure of failures) console.error(`ferry sweep: ${failure}`);
    // A job the sweep could not move is left for the next run, so that it does not stop the rest;
    // the run still fails once all the rest is done, because the SweeperErrors alarm reads the
    // function's Errors metric, which counts "exceptions that your code throws"
    // (https://docs.aws.amazon.com/lambda/latest/dg/monitoring-metrics-types.html): a job that stays
    // stuck fails every run and raises it. The schedule and the function retry nothing (retryAttempts 0).
    if (report.left > 0)
      throw new Error(
        `${report.left} job(s) could not be swept and were left for the next run; this run's log names each with its reason`,
      );
    if (failures.length > 0)
      throw new Error(
        `${failures.length} endpoint step(s) of the sweep failed, the rest ran: ${failures.join('; ')}`,
      );
    return report;
  };
}

/** `sweeper.handler` in the bundle (functions/bundle.ts). */
export const handler = createSweeper(platformFromEnv);
