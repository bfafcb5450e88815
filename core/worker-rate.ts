/**
 * The worker rate limit (docs/security.md): requests per worker token in fixed windows, 429 with
 * Retry-After past it, results and stream chunks counted but never refused, a job-log batch counted
 * by the store reads it causes (WorkerWindows.readsRefusal). One rule for both places a worker's
 * requests arrive: the local front door (core/adapters/local/guard.ts) and the AWS agent
 * (worker-image/agent/agent.ts), where a refused request is also SQS and DynamoDB requests the
 * account is not billed for (docs/security-aws.md, "What is left"). No dependency beyond the
 * standard library: the agent is bundled (worker-image/agent/bundle.ts).
 */

/** What a refused request is answered: 429 with this `error` and a Retry-After of `retryAfterSec`. */
export interface RateRefusal {
  retryAfterSec: number;
  error: string;
}

/** The 429's message, the same for a client key and a worker token. */
export function rateLimitMessage(max: number, windowMs: number, waitMs: number): string {
  return `Rate limit of ${max} requests per ${Math.round(windowMs / 1000)} s exceeded; retry in ${Math.ceil(waitMs / 1000)} s`;
}

/** A worker route whose body is a job's result or stream chunk (core/api.ts: job-done, job-done-batch, job-stream). */
const resultRoute = /^\/v2\/[^/]+\/job-(?:done|done-batch|stream)\//;

/**
 * Whether the request at `url` (a path, with or without its query) carries a result or a stream
 * chunk. Those are counted but never refused: RunPod's worker SDK and Ferry's runtime take a 4xx to
 * a result as final and drop it, and the job would run again once its lease lapsed. The worker's
 * takes, stops and pings meet the limit instead.
 */
export const carriesResult = (url: string): boolean => resultRoute.test(url);

/**
 * Requests per worker token in fixed windows. O(1), and nothing is allocated per request once a
 * token has its entry.
 */
export class WorkerWindows {
  private readonly windows = new Map<string, { count: number; startMs: number }>();

  constructor(
    private readonly max: number,
    private readonly windowMs: number,
    private readonly now: () => number = Date.now,
  ) {}

  /** Counts a request of `tokenHash`: 0 while within the limit, else the ms until its window ends. */
  take(tokenHash: string): number {
    const now = this.now();
    const window = this.current(tokenHash, now);
    window.count++;
    return window.count > this.max ? window.startMs + this.windowMs - now : 0;
  }

  /** The window `tokenHash` counts in at `now`: a new one when its last has ended. */
  private current(tokenHash: string, now: number): { count: number; startMs: number } {
    let window = this.windows.get(tokenHash);
    if (window === undefined) {
      // Tokens die with their workers: a bound instead of a sweep.
      if (this.windows.size >= 10_000) this.windows.clear();
      window = { count: 0, startMs: now };
      this.windows.set(tokenHash, window);
    } else if (now - window.startMs >= this.windowMs) {
      window.count = 0;
      window.startMs = now;
    }
    return window;
  }

  /**
   * Counts a request of `tokenHash` to `url`: undefined when it is served (within the limit, or a
   * result), else the 429 to answer.
   */
  refusal(tokenHash: string, url: string): RateRefusal | undefined {
    const waitMs = this.take(tokenHash);
    if (waitMs === 0 || carriesResult(url)) return undefined;
    return this.refusalFor(waitMs);
  }

  /**
   * A request of `tokenHash` already counted (refusal, above) that would cost the store `reads`
   * reads: a job-log batch, one read per distinct job it names (core/api.ts). It counts as that
   * many requests, the one counted plus `reads - 1` more, so a worker cannot turn its window into
   * 500 times as many reads (on AWS, DynamoDB GetItems on the jobs table every endpoint shares:
   * docs/security-aws.md). Undefined when the window takes them all, and they are counted; else the
   * 429 to answer, and nothing more is counted: the store is not read, and a smaller batch may
   * still fit in what is left.
   */
  readsRefusal(tokenHash: string, reads: number): RateRefusal | undefined {
    if (reads <= 1) return undefined;
    const now = this.now();
    const window = this.current(tokenHash, now);
    if (window.count + reads - 1 > this.max) return this.refusalFor(window.startMs + this.windowMs - now);
    window.count += reads - 1;
    return undefined;
  }

  private refusalFor(waitMs: number): RateRefusal {
    return {
      retryAfterSec: Math.ceil(waitMs / 1000),
      error: rateLimitMessage(this.max, this.windowMs, waitMs),
    };
  }
}
