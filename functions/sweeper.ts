/**
 * The sweeper Lambda, run by an EventBridge schedule (every minute): lapsed leases go back to the
 * queue or fail, overrunning jobs time out, jobs past policy.ttl stop (JobEngine.sweep), and expired
 * rows go now rather than when DynamoDB's TTL gets to them (it lags by days; reads filter anyway).
 */
import type { Platform } from './wiring.js';
import { platformFromEnv, settleWebhooks } from './wiring.js';

export interface SweepReport {
  requeued: number;
  failed: number;
  timedOut: number;
  expired: number;
  deleted: number;
}

/** What the sweeper leaves itself to finish webhooks and return, of its 55 s timeout. */
const returnMarginMs = 2_000;

export function createSweeper(platform: () => Platform, nowMs: () => number = Date.now) {
  return async (
    _event?: unknown,
    context?: { getRemainingTimeInMillis?: () => number },
  ): Promise<SweepReport> => {
    const { engine, jobs, webhooks } = platform();
    const swept = await engine.sweep();
    const deleted = await jobs.deleteExpired(nowMs());
    // Jobs the sweep ended (timed out, failed) notify their webhooks: deliver before returning.
    await settleWebhooks(webhooks, (context?.getRemainingTimeInMillis?.() ?? 30_000) - returnMarginMs);
    const report = { ...swept, deleted };
    // One line per run for CloudWatch Logs Insights; counts only, never job contents.
    console.log(JSON.stringify({ msg: 'ferry sweep', ...report }));
    return report;
  };
}

/** `sweeper.handler` in the bundle (functions/bundle.ts). */
export const handler = createSweeper(platformFromEnv);
