/**
 * Work started without waiting for it (webhook deliveries, scaler nudges, stop signals) that someone
 * must be able to wait out: a Lambda handler before it returns, since Lambda may freeze the sandbox
 * as soon as it does (docs/aws.md), or a test, or a graceful shutdown.
 */
export class PendingWork {
  private readonly inFlight = new Set<Promise<void>>();

  /** Keeps `work` until it settles. It must not reject: callers catch and log their own failures. */
  track(work: Promise<void>): void {
    const tracked = work.finally(() => this.inFlight.delete(tracked));
    this.inFlight.add(tracked);
  }

  /** Resolves once everything tracked so far, and anything it started meanwhile, has settled. */
  async settled(): Promise<void> {
    while (this.inFlight.size > 0) await Promise.all([...this.inFlight]);
  }
}
