/**
 * The worker supervisor's policy on a fake clock, with a recording actuator and a recording engine:
 * identity checks, the held-jobs record, refresh, drain deadlines, stop grace, restart backoff and
 * failing-to-start (docs/workers.md). The real processes are in test/e2e/supervisor.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { FakeClock } from '../../core/clock.js';
import { silentLogger } from '../../core/log.js';
import type { StartFailureRecord, StartFailures } from '../../core/ports.js';
import { type SupervisedEngine, type WorkerIdentity, WorkerSupervisor } from '../../core/supervisor.js';

function setup(
  settings: Partial<WorkerSupervisor['settings']> = {},
  options: {
    stopMayBeDue?: (workerId: string) => Promise<boolean>;
    /** Runs inside engine.workerGone, as its requeue's wake of the pool runs a tick there. */
    duringGone?: () => Promise<void>;
  } = {},
) {
  const clock = new FakeClock();
  const actions: string[] = [];
  const started: WorkerIdentity[] = [];
  const gone: string[] = [];
  /** Per workerGone, whether it was told the platform stopped the worker (no attempt counted). */
  const goneStopped: boolean[] = [];
  const rejected: string[] = [];
  const timeoutChecks: string[] = [];
  let toStop: string[] = [];
  let stopReads = 0;
  const engine: SupervisedEngine = {
    workerGone: async (_e, workerId, reason, how) => {
      gone.push(`${workerId}: ${reason}`);
      goneStopped.push(how?.stopped === true);
      await duringGone?.();
      return 0;
    },
    jobsToStop: async () => {
      stopReads++;
      return toStop;
    },
    timeOutIfOverdue: async (_e, jobId) => {
      timeoutChecks.push(jobId);
      return { timedOut: false };
    },
    rejectQueued: async (_e, error) => {
      rejected.push(error);
      return 1;
    },
  };
  const { duringGone, ...supervisorOptions } = options;
  const supervisor = new WorkerSupervisor({
    clock,
    log: silentLogger,
    ...supervisorOptions,
    settings: {
      stopGraceMs: 1_000,
      drainMs: 5_000,
      backoffBaseMs: 1_000,
      backoffMaxMs: 8_000,
      maxFailedStarts: 3,
      refusedTakeHoldMs: 0,
      ...settings,
    },
  });
  supervisor.attach({
    engine,
    actuator: {
      start: (identity) => {
        started.push(identity);
        actions.push(`start ${identity.workerId}`);
      },
      stop: (workerId) => actions.push(`stop ${workerId}`),
      kill: (workerId) => actions.push(`kill ${workerId}`),
    },
  });
  /** A plan whose queue alone asks for `wanted` workers (one job each). */
  const plan = (wanted: number, max = 2) => ({
    urgentQueuedJobs: wanted,
    min: 0,
    max,
    maxConcurrency: 1,
    idleMs: 10_000,
    kind: 'queue' as const,
  });
  return {
    clock,
    supervisor,
    actions,
    started,
    gone,
    goneStopped,
    rejected,
    timeoutChecks,
    plan,
    setStops: (ids: string[]) => {
      toStop = ids;
    },
    stopReads: () => stopReads,
  };
}

describe('identity', () => {
  it('binds each token to its endpoint and worker id; a buried worker’s token is unknown', async () => {
    const { supervisor, started, plan } = setup();
    await supervisor.tick('a', plan(1));
    await supervisor.tick('b', plan(1));
    const [a, b] = started;
    expect(supervisor.verify(a!.token, 'a', a!.workerId)).toBe('ok');
    expect(supervisor.verify(a!.token, 'b', a!.workerId)).toBe('mismatch');
    expect(supervisor.verify(a!.token, 'a', b!.workerId)).toBe('mismatch');
    expect(supervisor.verify(b!.token, 'a', a!.workerId)).toBe('mismatch');
    expect(supervisor.verify('fyw_nobody', 'a', a!.workerId)).toBe('unknown');
    expect(supervisor.verify(undefined, 'a', a!.workerId)).toBe('unknown');
    expect(a!.token).not.toBe(b!.token);
    await supervisor.exited(a!.workerId, { code: 0, signal: null });
    expect(supervisor.verify(a!.token, 'a', a!.workerId)).toBe('unknown');
  });
});

describe('the held-jobs record', () => {
  it('takes add, done removes, pings drop what they leave out once it settled; health counts live workers', async () => {
    const { supervisor, started, plan, clock } = setup({ pingSettleMs: 5_000 });
    await supervisor.tick('a', plan(2));
    const [w1, w2] = started;
    expect(await supervisor.counts('a')).toEqual({ idle: 0, running: 0, problem: undefined }); // starting
    expect(await supervisor.mayTake('a', w1!.workerId)).toBe(true);
    expect(await supervisor.mayTake('a', w2!.workerId)).toBe(true);
    await supervisor.taken('a', w1!.workerId, ['j1', 'j2']);
    expect(await supervisor.counts('a')).toMatchObject({ idle: 1, running: 1 });
    await supervisor.released('a', w1!.workerId, 'j1', { refresh: false });
    expect(supervisor.heldBy(w1!.workerId)).toEqual(['j2']);
    // A ping without j2 right after the take may predate it: kept. Later it is dropped.
    await supervisor.pinged('a', w1!.workerId, []);
    expect(supervisor.heldBy(w1!.workerId)).toEqual(['j2']);
    clock.advance(5_000);
    await supervisor.pinged('a', w1!.workerId, ['j9']);
    expect(supervisor.heldBy(w1!.workerId)).toEqual([]);
    // Events about another endpoint's worker, or an unknown one, change nothing.
    await supervisor.taken('b', w1!.workerId, ['x']);
    await supervisor.taken('a', 'nobody', ['x']);
    expect(supervisor.heldBy(w1!.workerId)).toEqual([]);
    expect(await supervisor.mayTake('a', 'nobody')).toBe(false);
  });
});

describe('execution deadlines', () => {
  it('a job taken with its deadline is not read until the deadline; one without is read at once', async () => {
    const { supervisor, started, plan, clock, timeoutChecks } = setup();
    await supervisor.tick('a', plan(1));
    const [w] = started;
    await supervisor.mayTake('a', w!.workerId);
    await supervisor.taken('a', w!.workerId, ['known', 'unknown'], new Map([['known', clock.now() + 5_000]]));
    await new Promise((resolve) => setImmediate(resolve));
    expect(timeoutChecks).toEqual(['unknown']);
    clock.advance(4_999);
    await new Promise((resolve) => setImmediate(resolve));
    expect(timeoutChecks).toEqual(['unknown']);
    clock.advance(1);
    await new Promise((resolve) => setImmediate(resolve));
    expect(timeoutChecks).toEqual(['unknown', 'known']);
    // Released before its deadline: never read at all.
    await supervisor.taken('a', w!.workerId, ['early'], new Map([['early', clock.now() + 5_000]]));
    await supervisor.released('a', w!.workerId, 'early', { refresh: false });
    clock.advance(10_000);
    await new Promise((resolve) => setImmediate(resolve));
    expect(timeoutChecks).toEqual(['unknown', 'known']);
  });

  it('each deadline is read when it comes, whatever order the jobs were taken in', async () => {
    const { supervisor, started, plan, clock, timeoutChecks } = setup();
    await supervisor.tick('a', plan(1));
    const [w] = started;
    await supervisor.mayTake('a', w!.workerId);
    const t0 = clock.now();
    await supervisor.taken('a', w!.workerId, ['late'], new Map([['late', t0 + 9_000]]));
    // Taken after, due before: the timer armed for `late` must not hold `early` back.
    await supervisor.taken(
      'a',
      w!.workerId,
      ['early', 'middle'],
      new Map([
        ['early', t0 + 2_000],
        ['middle', t0 + 5_000],
      ]),
    );
    const readAt = async (ms: number) => {
      clock.set(t0 + ms);
      await new Promise((resolve) => setImmediate(resolve));
      return [...timeoutChecks];
    };
    expect(await readAt(1_999)).toEqual([]);
    expect(await readAt(2_000)).toEqual(['early']);
    // Let go before its deadline: never read.
    await supervisor.released('a', w!.workerId, 'middle', { refresh: false });
    expect(await readAt(8_999)).toEqual(['early']);
    expect(await readAt(9_000)).toEqual(['early', 'late']);
  });
});

describe('lifecycle', () => {
  it('refresh: a worker that finished with stopPod takes nothing more and is stopped, then replaced', async () => {
    const { supervisor, started, plan, actions } = setup();
    await supervisor.tick('a', plan(1, 1));
    const w = started[0]!;
    await supervisor.mayTake('a', w.workerId);
    await supervisor.taken('a', w.workerId, ['j1']);
    await supervisor.released('a', w.workerId, 'j1', { refresh: true });
    expect(await supervisor.mayTake('a', w.workerId)).toBe(false);
    await supervisor.tick('a', plan(1, 1));
    expect(actions).toContain(`stop ${w.workerId}`);
    // At max (1) until it is gone; then a fresh worker starts with no backoff.
    expect(started).toHaveLength(1);
    await supervisor.exited(w.workerId, { code: 0, signal: null });
    await supervisor.tick('a', plan(1, 1));
    expect(started).toHaveLength(2);
    expect(started[1]!.workerId).not.toBe(w.workerId);
  });

  it('a job requeued from a worker the platform stopped counts no attempt; one that died on its own, retiring or not, counts', async () => {
    const { supervisor, started, plan, goneStopped, gone, clock } = setup();
    await supervisor.tick('a', plan(2, 2));
    const [stoppedOne, retiring] = started;
    await supervisor.taken('a', stoppedOne!.workerId, ['j1']);
    // Shutdown: the stop is sent to it (then it exits, below).
    supervisor.shutdown(stoppedOne!.workerId);
    // A refresh_worker job ended while another of its jobs still runs; the worker then crashes before
    // its stop could be sent (it still holds j3).
    await supervisor.taken('a', retiring!.workerId, ['j2', 'j3']);
    await supervisor.released('a', retiring!.workerId, 'j2', { refresh: true });
    clock.advance(1);
    await supervisor.exited(retiring!.workerId, { code: null, signal: 'SIGSEGV' });
    await supervisor.exited(stoppedOne!.workerId, { code: null, signal: 'SIGTERM' });
    expect(goneStopped).toEqual([false, true]);
    // The reason a job shows if it fails for its attempts says which exit it was.
    expect(gone).toEqual([
      `${retiring!.workerId}: Worker ${retiring!.workerId} exited (signal SIGSEGV) after asking to be replaced (refresh_worker), while running the job`,
      `${stoppedOne!.workerId}: Worker ${stoppedOne!.workerId} was stopped`,
    ]);
  });

  it('a worker killed for keeping a stopped job hands back its other jobs without using an attempt, and says why', async () => {
    const { supervisor, started, plan, actions, clock, setStops, gone, goneStopped } = setup();
    await supervisor.tick('a', plan(1, 1));
    const w = started[0]!;
    await supervisor.mayTake('a', w.workerId);
    // max_concurrency 2: j1 is cancelled and kept (a handler stuck in C code), j2 runs on, healthy.
    await supervisor.taken('a', w.workerId, ['j1', 'j2']);
    setStops(['j1']);
    await supervisor.tick('a');
    clock.advance(1_000);
    await supervisor.tick('a');
    expect(actions).toContain(`kill ${w.workerId}`);
    // Between the kill and the exit it gets no more jobs for the kill to cut off.
    const take = supervisor.mayTake('a', w.workerId);
    clock.advance(60_000);
    expect(await take).toBe(false);
    await supervisor.exited(w.workerId, { code: null, signal: 'SIGKILL' });
    expect(goneStopped).toEqual([true]);
    expect(gone).toEqual([
      `${w.workerId}: Worker ${w.workerId} was stopped: it kept stopped job j1 for 1000 ms`,
    ]);
    // The platform's kill, not a crash: no backoff, and a replacement starts at once.
    expect((await supervisor.counts('a')).problem).toBeUndefined();
    await supervisor.tick('a', plan(1, 1));
    expect(started).toHaveLength(2);
  });

  it('a worker killed for not leaving within drainMs of its stop hands back the job it held without using an attempt, and says why', async () => {
    const { supervisor, started, plan, actions, clock, gone, goneStopped } = setup();
    await supervisor.tick('a', plan(1, 1));
    const w = started[0]!;
    await supervisor.mayTake('a', w.workerId);
    await supervisor.taken('a', w.workerId, ['j1']);
    supervisor.shutdown(w.workerId);
    clock.advance(5_000);
    await supervisor.tick('a');
    expect(actions).toContain(`kill ${w.workerId}`);
    await supervisor.exited(w.workerId, { code: null, signal: 'SIGKILL' });
    expect(goneStopped).toEqual([true]);
    expect(gone).toEqual([
      `${w.workerId}: Worker ${w.workerId} was stopped: it did not leave within 5000 ms of being asked to`,
    ]);
    expect((await supervisor.counts('a')).problem).toBeUndefined();
  });

  it('a worker that crashes while holding jobs still uses an attempt of each, beside one killed for a kept job', async () => {
    const { supervisor, started, plan, clock, setStops, gone, goneStopped } = setup();
    await supervisor.tick('a', plan(2, 2));
    const [crashing, keeping] = started;
    await supervisor.mayTake('a', crashing!.workerId);
    await supervisor.mayTake('a', keeping!.workerId);
    await supervisor.taken('a', crashing!.workerId, ['j1', 'j2']);
    await supervisor.taken('a', keeping!.workerId, ['j3', 'j4']);
    // j1 is cancelled too; its worker crashes within the grace, before any kill.
    setStops(['j1', 'j3']);
    await supervisor.tick('a');
    await supervisor.exited(crashing!.workerId, { code: null, signal: 'SIGSEGV' });
    expect((await supervisor.counts('a')).problem).toMatchObject({ state: 'backoff' });
    clock.advance(1_000);
    await supervisor.tick('a');
    await supervisor.exited(keeping!.workerId, { code: null, signal: 'SIGKILL' });
    expect(goneStopped).toEqual([false, true]);
    expect(gone).toEqual([
      `${crashing!.workerId}: Worker ${crashing!.workerId} exited (signal SIGSEGV) while running the job`,
      `${keeping!.workerId}: Worker ${keeping!.workerId} was stopped: it kept stopped job j3 for 1000 ms`,
    ]);
  });

  it('a stopped job kept past the grace period kills the worker; a drain past its deadline too', async () => {
    const { supervisor, started, plan, actions, clock, setStops } = setup();
    await supervisor.tick('a', plan(2));
    const [w1, w2] = started;
    await supervisor.taken('a', w1!.workerId, ['j1']);
    setStops(['j1']);
    await supervisor.tick('a');
    clock.advance(999);
    await supervisor.tick('a');
    expect(actions).not.toContain(`kill ${w1!.workerId}`);
    clock.advance(1);
    await supervisor.tick('a');
    expect(actions).toContain(`kill ${w1!.workerId}`);

    setStops([]);
    supervisor.drain(w2!.workerId);
    expect(actions).toContain(`stop ${w2!.workerId}`);
    clock.advance(5_000);
    await supervisor.tick('a');
    expect(actions).toContain(`kill ${w2!.workerId}`);
  });

  it('a worker with no contact within its start grace is killed and counted as a failed start; one in time is not', async () => {
    const { supervisor, started, plan, actions, clock } = setup({ maxFailedStarts: 1 });
    await supervisor.tick('a', { ...plan(2), startGraceMs: 10_000 });
    const [silent, prompt] = started;
    await supervisor.pinged('a', prompt!.workerId, []);
    clock.advance(9_999);
    await supervisor.tick('a');
    expect(actions.filter((a) => a.startsWith('kill'))).toEqual([]);
    clock.advance(1);
    await supervisor.tick('a');
    expect(actions.filter((a) => a.startsWith('kill'))).toEqual([`kill ${silent!.workerId}`]);
    // Killed by the supervisor, yet a failed start: it never made contact.
    await supervisor.exited(silent!.workerId, { code: null, signal: 'SIGKILL' });
    const problem = (await supervisor.counts('a')).problem;
    expect(problem?.state).toBe('failing');
    expect(problem?.lines).toContain(
      'the worker made no contact (no job-take or ping) within its start grace (10 s): is its import or model load stuck?',
    );
  });

  it('an adopted worker whose start is awaited gets its grace from the reported start, not from adoption', async () => {
    const { supervisor, clock, rejected } = setup({ maxFailedStarts: 1 });
    const killed: string[] = [];
    supervisor.attach({ actuator: { start: () => {}, stop: () => {}, kill: (id) => void killed.push(id) } });
    const identity = { workerId: 'a-adopted', endpointId: 'a', token: 'fyw_adopted_token_0123456789' };
    supervisor.adopt(identity, 'queue', { startGraceMs: 10_000, awaitStart: true });
    // Its image is still pulling: no grace runs yet, however long that takes.
    clock.advance(60_000);
    await supervisor.tick('a');
    expect(killed).toEqual([]);
    supervisor.started('a-adopted', clock.now());
    clock.advance(9_999);
    await supervisor.tick('a');
    expect(killed).toEqual([]);
    clock.advance(1);
    await supervisor.tick('a');
    expect(killed).toEqual(['a-adopted']);
    await supervisor.exited('a-adopted', { code: null, signal: 'SIGKILL' });
    expect((await supervisor.counts('a')).problem?.state).toBe('failing');
    expect(rejected).toHaveLength(1);
  });

  it('without a start grace a silent worker is left alone; a kill for a kept stopped job is no failed start', async () => {
    const { supervisor, started, plan, actions, clock, setStops } = setup({ maxFailedStarts: 1 });
    await supervisor.tick('a', plan(2));
    const [silent, busy] = started;
    clock.advance(3_600_000);
    await supervisor.tick('a');
    expect(actions).not.toContain(`kill ${silent!.workerId}`);
    await supervisor.taken('a', busy!.workerId, ['j1']);
    setStops(['j1']);
    await supervisor.tick('a');
    clock.advance(1_000);
    await supervisor.tick('a');
    expect(actions).toContain(`kill ${busy!.workerId}`);
    await supervisor.exited(busy!.workerId, { code: null, signal: 'SIGKILL' });
    expect((await supervisor.counts('a')).problem).toBeUndefined();
  });

  it('with stopMayBeDue, a tick reads the held jobs only when it says so, and on every tick while a stop is pending', async () => {
    let due = false;
    const { supervisor, started, plan, actions, clock, setStops, stopReads } = setup(
      {},
      { stopMayBeDue: async () => due },
    );
    await supervisor.tick('a', plan(1));
    const [w1] = started;
    await supervisor.taken('a', w1!.workerId, ['j1']);
    for (let i = 0; i < 5; i++) {
      clock.advance(1_000);
      await supervisor.tick('a');
    }
    expect(stopReads()).toBe(0);
    setStops(['j1']);
    due = true;
    await supervisor.tick('a');
    expect(stopReads()).toBe(1);
    // The stop is pending: the grace period is enforced without a new signal.
    due = false;
    clock.advance(999);
    await supervisor.tick('a');
    expect(stopReads()).toBe(2);
    expect(actions).not.toContain(`kill ${w1!.workerId}`);
    clock.advance(1);
    await supervisor.tick('a');
    expect(actions).toContain(`kill ${w1!.workerId}`);
  });

  it('crashes back off (1 s, 2 s, 4 s…), say why in health, and requeue the jobs at once', async () => {
    const { supervisor, started, plan, gone, clock } = setup();
    await supervisor.tick('a', plan(1, 1));
    const w = started[0]!;
    await supervisor.mayTake('a', w.workerId); // it made contact: not a failed start
    await supervisor.taken('a', w.workerId, ['j1']);
    await supervisor.exited(w.workerId, { code: 1, signal: null });
    expect(gone).toEqual([`${w.workerId}: Worker ${w.workerId} exited (code 1) while running the job`]);
    const health = await supervisor.counts('a');
    expect(health.problem).toMatchObject({ state: 'backoff', retryAtMs: clock.now() + 1_000 });
    await supervisor.tick('a', plan(1, 1));
    expect(started).toHaveLength(1); // backing off
    clock.advance(1_000);
    await supervisor.tick('a', plan(1, 1));
    expect(started).toHaveLength(2);
    await supervisor.mayTake('a', started[1]!.workerId);
    await supervisor.exited(started[1]!.workerId, { code: 1, signal: null });
    expect((await supervisor.counts('a')).problem?.retryAtMs).toBe(clock.now() + 2_000);
  });

  it('shutdown stops a busy worker at once; its exit, even by SIGKILL after the grace, is no crash', async () => {
    const { supervisor, started, plan, gone, actions } = setup();
    await supervisor.tick('a', plan(1, 1));
    const w = started[0]!;
    await supervisor.mayTake('a', w.workerId);
    await supervisor.taken('a', w.workerId, ['j1']);
    supervisor.shutdown(w.workerId);
    expect(actions).toContain(`stop ${w.workerId}`); // SIGTERM although it holds a job
    await supervisor.exited(w.workerId, { code: null, signal: 'SIGKILL' });
    expect(gone).toEqual([`${w.workerId}: Worker ${w.workerId} was stopped`]);
    expect((await supervisor.counts('a')).problem).toBeUndefined();
  });

  it('the backoff holds for a start the requeue of the crashed worker’s jobs wakes', async () => {
    // The requeue wakes the pool, whose tick ran before the next start time was set: every other
    // crash restarted at once, while the log said "next start in 1000 ms".
    const plan = {
      urgentQueuedJobs: 1,
      min: 0,
      max: 1,
      maxConcurrency: 1,
      idleMs: 10_000,
      kind: 'queue' as const,
    };
    const ticked: number[] = [];
    const t = setup(
      {},
      {
        duringGone: async () => {
          await t.supervisor.tick('a', plan);
          ticked.push(t.started.length);
        },
      },
    );
    const { supervisor, started, clock } = t;
    const crash = async (expectedDelayMs: number) => {
      await supervisor.tick('a', plan);
      const w = started.at(-1)!;
      await supervisor.mayTake('a', w.workerId);
      await supervisor.taken('a', w.workerId, ['j1']);
      const before = started.length;
      await supervisor.exited(w.workerId, { code: 1, signal: null });
      expect(ticked.at(-1)).toBe(before); // the tick inside the requeue started nothing
      clock.advance(expectedDelayMs - 1);
      await supervisor.tick('a', plan);
      expect(started).toHaveLength(before); // still backing off
      clock.advance(1);
    };
    await crash(1_000);
    await crash(2_000);
    await crash(4_000);
    await supervisor.tick('a', plan);
    expect(started).toHaveLength(4);
  });

  it('workers that die before any contact mark the endpoint failing; queued jobs fail; a redeploy clears it', async () => {
    const { supervisor, started, plan, clock, rejected } = setup();
    for (let i = 0; i < 3; i++) {
      await supervisor.tick('a', plan(1, 1));
      supervisor.output('a', started[i]!.workerId, 'ModuleNotFoundError: No module named nope');
      await supervisor.exited(started[i]!.workerId, { code: 2, signal: null });
      clock.advance(10_000);
    }
    const health = await supervisor.counts('a');
    expect(health.problem).toMatchObject({ state: 'failing' });
    expect(health.problem?.lines).toEqual(['ModuleNotFoundError: No module named nope']);
    expect(rejected[0]).toMatch(/cannot start: 3 workers in a row exited \(code 2\)/);
    expect(rejected[0]).toMatch(/No module named nope/);
    await supervisor.tick('a', plan(1, 1));
    expect(started).toHaveLength(3); // no more starts while failing
    expect(rejected.length).toBeGreaterThan(1); // and new jobs keep failing at once
    supervisor.redeployed('a');
    await supervisor.tick('a', plan(1, 1));
    expect(started).toHaveLength(4);
    expect((await supervisor.counts('a')).problem).toBeUndefined();
  });

  it('an endpoint its pool cannot configure (a secret with no value) is failing until it can; its own problem only is cleared', async () => {
    const { supervisor, started, plan, clock, rejected } = setup();
    const reason =
      'secrets not set: HF_TOKEN (printf %s "$VALUE" | ferry secrets set HF_TOKEN --app a --env e)';
    await supervisor.unconfigured('a', reason);
    expect((await supervisor.counts('a')).problem).toMatchObject({ state: 'failing', reason, lines: [] });
    expect(rejected).toEqual([`The endpoint's workers cannot start: ${reason}`]);
    // Every pass while it lasts fails the jobs that arrived since; the problem keeps its start.
    const since = (await supervisor.counts('a')).problem?.sinceMs;
    clock.advance(1_000);
    await supervisor.unconfigured('a', reason);
    expect(rejected).toHaveLength(2);
    expect((await supervisor.counts('a')).problem?.sinceMs).toBe(since);
    await supervisor.unconfigured('a', undefined);
    expect((await supervisor.counts('a')).problem).toBeUndefined();
    await supervisor.tick('a', plan(1, 1));
    expect(started).toHaveLength(1);

    // A complete configuration does not clear what workers' exits decided.
    for (let i = 0; i < 3; i++) {
      await supervisor.tick('b', plan(1, 1));
      const worker = started.filter((w) => w.endpointId === 'b')[i]!;
      supervisor.output('b', worker.workerId, 'SyntaxError: invalid syntax');
      await supervisor.exited(worker.workerId, {
        code: 2,
        signal: null,
      });
      clock.advance(10_000);
    }
    expect((await supervisor.counts('b')).problem).toMatchObject({ state: 'failing' });
    await supervisor.unconfigured('b', undefined);
    expect((await supervisor.counts('b')).problem).toMatchObject({ state: 'failing' });
  });

  it('with a shared record, failed starts count across supervisors (one per ECS task) and contact clears them', async () => {
    // What DynamoControlStore keeps on AWS, in memory; the writes are recorded to show who writes.
    let shared: StartFailures | undefined;
    const writes: string[] = [];
    const starts: StartFailureRecord = {
      startFailures: async () => shared && structuredClone(shared),
      addFailedStart: async () => {
        writes.push('add');
        shared = { ...shared, failedStarts: (shared?.failedStarts ?? 0) + 1 };
        return shared.failedStarts;
      },
      markFailing: async (_e, problem) => {
        writes.push('fail');
        shared = { failedStarts: shared?.failedStarts ?? 0, problem };
      },
      clearStartFailures: async () => {
        writes.push('clear');
        shared = undefined;
      },
    };
    const rejected: string[] = [];
    /** One task's agent: a fresh supervisor that adopts the one worker ECS started beside it. */
    const task = async (n: number) => {
      const supervisor = new WorkerSupervisor({
        clock: new FakeClock(),
        log: silentLogger,
        starts,
        settings: { maxFailedStarts: 3 },
      });
      supervisor.attach({
        engine: {
          workerGone: async () => 0,
          jobsToStop: async () => [],
          timeOutIfOverdue: async () => ({ timedOut: false }),
          rejectQueued: async (_e, error) => {
            rejected.push(error);
            return 1;
          },
        },
      });
      await supervisor.resumeStarts('a');
      const identity = supervisor.adoptNew('a', `a-task${n}`);
      return { supervisor, identity };
    };
    // A healthy start makes no write at all.
    const healthy = await task(0);
    await healthy.supervisor.mayTake('a', healthy.identity.workerId);
    expect(writes).toEqual([]);
    for (let n = 1; n <= 2; n++) {
      const { supervisor, identity } = await task(n);
      await supervisor.exited(identity.workerId, { code: 2, signal: null });
      expect((await supervisor.counts('a')).problem?.state).toBe('backoff');
    }
    expect(shared?.failedStarts).toBe(2);
    const third = await task(3);
    third.supervisor.output('a', third.identity.workerId, 'ModuleNotFoundError: No module named nope');
    await third.supervisor.exited(third.identity.workerId, { code: 2, signal: null });
    expect(shared?.problem).toMatchObject({
      state: 'failing',
      reason: expect.stringContaining('3 workers in a row'),
      lines: ['ModuleNotFoundError: No module named nope'],
    });
    expect(rejected).toHaveLength(1);
    expect(rejected[0]).toMatch(/No module named nope/);
    expect(writes).toEqual(['add', 'add', 'add', 'fail']);
    // A task that starts while a run is on record clears it at its worker's first contact, once.
    writes.length = 0;
    const fixed = await task(4);
    await fixed.supervisor.mayTake('a', fixed.identity.workerId);
    await fixed.supervisor.pinged('a', fixed.identity.workerId, []);
    expect(writes).toEqual(['clear']);
    expect(shared).toBeUndefined();
  });

  it('an exit asked for outside the supervisor (ECS stopping the task) before contact is no failed start', async () => {
    const { supervisor, started, plan, rejected } = setup({ maxFailedStarts: 1 });
    await supervisor.tick('a', plan(1, 1));
    await supervisor.exited(started[0]!.workerId, { code: 143, signal: null, asked: true });
    expect((await supervisor.counts('a')).problem).toBeUndefined();
    expect(rejected).toEqual([]);
    // The same exit not asked for is one (maxFailedStarts 1 here: failing at once).
    await supervisor.tick('a', plan(1, 1));
    await supervisor.exited(started[1]!.workerId, { code: 143, signal: null });
    expect((await supervisor.counts('a')).problem?.state).toBe('failing');
  });

  it("a worker's exit is reported with its own last lines, not the worker's before it", async () => {
    const { supervisor, started, plan } = setup({ startFailureCodes: [2] });
    await supervisor.tick('a', plan(1, 1));
    const healthy = started[0]!.workerId;
    await supervisor.mayTake('a', healthy);
    supervisor.output('a', healthy, 'ferry worker: received SIGTERM');
    supervisor.drain(healthy);
    await supervisor.exited(healthy, { code: 0, signal: null });
    await supervisor.tick('a', plan(1, 1));
    const broken = started[1]!.workerId;
    supervisor.output('a', broken, "ModuleNotFoundError: No module named 'nope'");
    await supervisor.exited(broken, { code: 2, signal: null });
    expect((await supervisor.counts('a')).problem).toMatchObject({
      state: 'failing',
      lines: ["ModuleNotFoundError: No module named 'nope'"],
    });
  });

  it('with startFailureCodes, one such exit before contact is failing at once; other exits back off', async () => {
    const { supervisor, started, plan, rejected } = setup({ startFailureCodes: [1, 2] });
    await supervisor.tick('a', plan(1, 1));
    supervisor.output('a', started[0]!.workerId, 'ImportError: cannot import name x');
    await supervisor.exited(started[0]!.workerId, { code: 2, signal: null });
    expect((await supervisor.counts('a')).problem).toMatchObject({
      state: 'failing',
      reason: expect.stringContaining('could not start (exit code 2)'),
      lines: ['ImportError: cannot import name x'],
    });
    expect(rejected[0]).toMatch(/ImportError: cannot import name x/);
    // A signal (the OOM killer, say) says nothing about the code: backoff, as without the setting.
    await supervisor.tick('b', plan(1, 1));
    await supervisor.exited(started[1]!.workerId, { code: null, signal: 'SIGKILL' });
    expect((await supervisor.counts('b')).problem).toMatchObject({ state: 'backoff' });
    // After contact the same code is a crash, not a failed start.
    await supervisor.tick('c', plan(1, 1));
    await supervisor.mayTake('c', started[2]!.workerId);
    await supervisor.exited(started[2]!.workerId, { code: 1, signal: null });
    expect((await supervisor.counts('c')).problem).toMatchObject({ state: 'backoff' });
  });

  it('never starts more than max, draining workers included', async () => {
    const { supervisor, started, plan } = setup();
    await supervisor.tick('a', plan(5, 2));
    expect(started).toHaveLength(2);
    supervisor.drain(started[0]!.workerId);
    await supervisor.tick('a', plan(5, 2));
    expect(started).toHaveLength(2);
    expect(supervisor.liveOf('a')).toHaveLength(2);
  });
});
