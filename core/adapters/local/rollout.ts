/**
 * `POST /local/v1/reconcile` on the local platform: it reads the endpoint records now, rather than at
 * its pools' next pass (once a second), and answers once the workers of every changed endpoint are
 * drained: from then on they take no job, and workers of the new deployment take the queue.
 * `ferry deploy` asks it after writing the records, so that once it says Deployed no job runs the
 * old code (docs/workers.md). Local only: the records are in this machine's SQLite file, which the
 * CLI writes directly. It takes an every-app key, as the management API does: the answer names every
 * endpoint. Its own module, so the CLI reads the path without loading the server.
 */
export const reconcilePath = '/local/v1/reconcile';

/** What a pass made of each endpoint record (LocalWorkers.reconcileNow). */
export interface RolloutReport {
  endpoints: Array<{
    id: string;
    /** Whether a pool serves it: its workers run the record, or `problem` says why not. */
    running: boolean;
    /** Why its workers could not be given the record as it is: a running pool keeps the previous one. */
    problem?: string;
  }>;
}
