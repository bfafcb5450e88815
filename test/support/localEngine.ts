/**
 * A JobEngine over a real local SQLite database, wired as the local platform wires it
 * (core/adapters/local/platform.ts): the store's one-write submit, take and requeue. `composedTake`
 * leaves those out, so the engine composes them from queue and store calls as it does on AWS. `jobs`
 * stands in for the database's job store (a test's wrapper around it; the requeue is then composed).
 */
import type { LocalDatabase } from '../../core/adapters/local/sqlite.js';
import { LocalChangeFeed } from '../../core/changes.js';
import type { FakeClock } from '../../core/clock.js';
import { type EngineDeps, type EngineSettings, JobEngine } from '../../core/engine.js';
import type { ChangeFeed, JobStore } from '../../core/ports.js';

export function localEngine(
  db: LocalDatabase,
  clock: FakeClock,
  settings: Partial<EngineSettings>,
  options: {
    composedTake?: boolean;
    changes?: ChangeFeed;
    jobs?: JobStore;
  } & Pick<EngineDeps, 'webhooks' | 'warn'> &
    Partial<Pick<EngineDeps, 'ledger'>> = {},
): JobEngine {
  return new JobEngine({
    jobs: options.jobs ?? db.jobs,
    queue: db.queue,
    workers: db.workers,
    changes: options.changes ?? new LocalChangeFeed(clock),
    clock,
    settings,
    webhooks: options.webhooks,
    warn: options.warn,
    ...(options.ledger ? { ledger: options.ledger } : {}),
    ...(options.composedTake
      ? {}
      : {
          createQueued: (job) => db.createQueued(job),
          takeQueued: (endpointId, options) => db.takeQueued(endpointId, options),
          // Not under a test's wrapper of the job store: it would not see the requeue's write.
          ...(options.jobs ? {} : { requeueQueued: db.requeueQueued }),
        }),
  });
}
