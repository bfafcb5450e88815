/**
 * The fault suite at full size (`npm run fault`, after a build): kill -9 of the platform under load,
 * Python workers killed mid-job, 100k queued jobs, and hanging/failing/dropping webhooks. Prints what
 * happened and exits 1 if any guarantee broke. The short version runs in npm test (test/fault/).
 *
 * Sizes: FERRY_FAULT_JOBS (default 3000), FERRY_FAULT_KILLS (3), FERRY_FAULT_QUEUE (100000).
 */

import { deepQueue, killPlatformUnderLoad, killWorkersMidJob, webhookFaults } from './lib/faults.js';
import { envInt } from './lib/util.js';

const mb = (bytes: number | undefined) =>
  bytes === undefined ? 'n/a' : `${(bytes / 1048576).toFixed(1)} MB`;

async function main(): Promise<number> {
  const failures: string[] = [];
  const check = (ok: boolean, what: string) => {
    console.log(`  ${ok ? 'ok  ' : 'FAIL'} ${what}`);
    if (!ok) failures.push(what);
  };

  const jobs = envInt('FERRY_FAULT_JOBS', 3_000);
  const kills = envInt('FERRY_FAULT_KILLS', 3);
  console.log(`(a) kill -9 of the platform ${kills} times while ${jobs} jobs are submitted and worked`);
  const a = await killPlatformUnderLoad({ jobs, kills });
  console.log(
    `    submitted ${a.submitted}, acknowledged ${a.acknowledged}, completed ${a.completed}, handler ran twice for ${a.ranTwice}, restarts took ${a.restartMs.join(', ')} ms`,
  );
  check(a.notCompleted.length === 0, `every acknowledged job COMPLETED (${a.notCompleted.length} did not)`);
  check(a.completedTwice.length === 0, `no job completed twice (${a.completedTwice.length} did)`);

  console.log('(b) Python workers killed with SIGKILL mid-job');
  const b = await killWorkersMidJob({ jobs: 6, jobMs: 2_000 });
  console.log(
    `    killed pids ${b.killedPids.join(', ')}; results from pids ${[...new Set(b.resultPids)].join(', ')}`,
  );
  check(
    b.statuses.every((s) => s === 'COMPLETED'),
    `all ${b.jobs} jobs COMPLETED (${b.statuses.join(', ')})`,
  );
  check(
    b.resultPids.every((pid) => !b.killedPids.includes(pid)),
    'every result came from a worker that was not killed',
  );

  const queued = envInt('FERRY_FAULT_QUEUE', 100_000);
  console.log(`(c) ${queued} queued jobs`);
  const c = await deepQueue({ jobs: queued });
  console.log(
    `    submit ${c.submitMs} ms (${c.submitPerSec}/s), health ${c.healthMs} ms, purge ${c.purgeMs} ms; RSS idle ${mb(c.rssIdleBytes)}, queued ${mb(c.rssQueuedBytes)}, after purge ${mb(c.rssAfterPurgeBytes)}`,
  );
  check(c.inQueue === queued, `health counts ${c.inQueue} in queue`);
  check(c.removed === queued, `purge removed ${c.removed}`);
  check(c.inQueueAfterPurge === 0, `queue empty after purge (${c.inQueueAfterPurge})`);

  console.log('(d) webhooks that hang, answer 500 and drop the connection (retry delay 200 ms)');
  const d = await webhookFaults({ retryDelayMs: 200 });
  console.log(
    `    runsync ms ${JSON.stringify(d.runsyncMs)}, receiver hits ${JSON.stringify(d.hits)}, stop took ${d.stopMs} ms`,
  );
  check(
    Object.values(d.statuses).every((s) => s === 'COMPLETED'),
    `jobs COMPLETED (${JSON.stringify(d.statuses)})`,
  );
  check(d.hits.fail === 3 && d.hits.drop === 3, 'failing receivers got the POST and 2 retries, no more');
  check(d.stopMs < 8_000, 'closing the platform does not wait for a hanging webhook');

  console.log(
    failures.length === 0 ? 'fault suite: all guarantees held' : `fault suite: ${failures.length} FAILED`,
  );
  return failures.length === 0 ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (error) => {
    console.error(error);
    process.exit(1);
  },
);
