/**
 * The worker ledger of a process that starts no workers (the API Lambda): health reads the shared
 * registry, which the worker supervisor of each agent keeps (core/supervisor.ts). Worker moves do not
 * reach such a process; if they do (a test engine without a supervisor), the registry is updated
 * directly and every worker may take.
 */
import type { Clock, StartFailureRecord, WorkerCounts, WorkerLedger, WorkerRegistry } from './ports.js';

export class RegistryLedger implements WorkerLedger {
  constructor(
    private readonly registry: WorkerRegistry,
    private readonly clock: Clock,
    /** A worker not heard from for this long no longer counts. */
    private readonly staleMs: number,
    /** Where the agents record an endpoint whose workers cannot start (its `problem` in health). */
    private readonly starts?: Pick<StartFailureRecord, 'startFailures'>,
  ) {}

  async mayTake(endpointId: string, workerId: string): Promise<boolean> {
    await this.write(endpointId, workerId, (held) => held);
    return true;
  }

  taken(endpointId: string, workerId: string, jobIds: string[]): Promise<void> {
    return this.write(endpointId, workerId, (held) => [...held, ...jobIds]);
  }

  released(endpointId: string, workerId: string, jobId: string): Promise<void> {
    return this.write(endpointId, workerId, (held) => held.filter((id) => id !== jobId));
  }

  pinged(endpointId: string, workerId: string, jobIds: string[]): Promise<void> {
    return this.write(endpointId, workerId, () => jobIds);
  }

  async held(workerId: string): Promise<string[]> {
    return (await this.registry.get(workerId))?.jobIds ?? [];
  }

  /** Every listed job the worker holds: this ledger keeps no renewal times (no worker pings it). */
  async leasesDue(workerId: string, listed: ReadonlySet<string>): Promise<string[]> {
    return (await this.held(workerId)).filter((jobId) => listed.has(jobId));
  }

  gone(_endpointId: string, workerId: string): Promise<void> {
    return this.registry.remove(workerId);
  }

  async counts(endpointId: string): Promise<WorkerCounts> {
    const [workers, starts] = await Promise.all([
      this.registry.list(endpointId, this.clock.now() - this.staleMs),
      this.starts?.startFailures(endpointId),
    ]);
    const running = workers.filter((w) => w.state === 'running').length;
    return {
      idle: workers.length - running,
      running,
      ...(starts?.problem ? { problem: starts.problem } : {}),
    };
  }

  private async write(endpointId: string, workerId: string, held: (current: string[]) => string[]) {
    const record = await this.registry.get(workerId);
    const before = record?.jobIds ?? [];
    const jobIds = [...new Set(held(before))];
    const now = this.clock.now();
    await this.registry.heartbeat({
      workerId,
      endpointId,
      state: jobIds.length > 0 ? 'running' : 'idle',
      jobIds,
      lastSeenAt: now,
      // Busy now, or until now: idle_timeout counts from here (core/scaling.ts).
      lastBusyAt: jobIds.length > 0 || before.length > 0 ? now : (record?.lastBusyAt ?? now),
    });
  }
}
