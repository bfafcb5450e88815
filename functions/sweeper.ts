/**
 * The sweeper Lambda, run by an EventBridge schedule (every minute): lapsed leases go back to the
 * queue or fail, overrunning jobs time out, jobs past policy.ttl stop (JobEngine.sweep), and expired
 * rows go now rather than when DynamoDB's TTL gets to them (it lags by days; reads filter anyway).
 */
import type { Platform } from './wiring.js';
import { platformFromEnv } from './wiring.js';

export interface SweepReport {
  requeued: number;
  failed: number;
  timedOut: number;
  expired: number;
  deleted: number;
}

export function createSweeper(platform: () => Platform, nowMs: () => number = Date.now) {
  return async (): Promise<SweepReport> => {
    const { engine, jobs } = platform();
    const swept = await engine.sweep();
    const deleted = await jobs.deleteExpired(nowMs());
    // Requeued jobs of an endpoint left with no worker nudged the scaler: send that before returning.
    await platform().nudges?.settled();
    const report = { ...swept, deleted };
    // One line per run for CloudWatch Logs Insights; counts only, never job contents.
    console.log(JSON.stringify({ msg: 'ferry sweep', ...report }));
    return report;
  };
}

/** `sweeper.handler` in the bundle (functions/bundle.ts). */
export const handler = createSweeper(platformFromEnv);
