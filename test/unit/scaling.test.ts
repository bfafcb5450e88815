import { describe, expect, it } from 'vitest';
import { FakeClock } from '../../core/clock.js';
import { bootingOf, decideScale, type ScalingInput, type WorkerLoad } from '../../core/scaling.js';

const clock = new FakeClock();
const now = clock.now();
const idleTimeoutMs = 5_000;

/** A worker that last held something `idleForMs` ago (0: busy now). */
const w = (workerId: string, held: number, idleForMs = 0, inFlight = 0): WorkerLoad => ({
  workerId,
  heldJobs: held,
  inFlightRequests: inFlight,
  lastBusyAtMs: now - idleForMs,
});

const base = { min: 0, max: 3, maxConcurrency: 1, idleTimeoutMs, nowMs: now, workers: [] };

interface Case {
  name: string;
  input: Partial<ScalingInput>;
  desired: number;
  mayStop: string[];
}

const cases: Case[] = [
  { name: 'nothing to do stays at zero', input: { urgentQueuedJobs: 0 }, desired: 0, mayStop: [] },
  { name: 'nothing to do stays at min', input: { urgentQueuedJobs: 0, min: 2 }, desired: 2, mayStop: [] },
  { name: 'one job from zero: one worker', input: { urgentQueuedJobs: 1 }, desired: 1, mayStop: [] },
  { name: 'a burst is capped at max', input: { urgentQueuedJobs: 50 }, desired: 3, mayStop: [] },
  {
    name: 'low-priority jobs are not passed in, so an endpoint at zero stays there',
    input: { urgentQueuedJobs: 0, min: 0 },
    desired: 0,
    mayStop: [],
  },
  {
    name: 'max_concurrency packs jobs into workers',
    input: { urgentQueuedJobs: 5, maxConcurrency: 4 },
    desired: 2,
    mayStop: [],
  },
  {
    name: 'a job already held is not counted twice',
    input: { urgentQueuedJobs: 0, workers: [w('a', 1)] },
    desired: 1,
    mayStop: [],
  },
  {
    name: 'held plus queued: one more worker per job',
    input: { urgentQueuedJobs: 1, workers: [w('a', 1)] },
    desired: 2,
    mayStop: [],
  },
  {
    name: 'a worker idle for less than idle_timeout is kept',
    input: { urgentQueuedJobs: 0, workers: [w('a', 0, idleTimeoutMs - 1)] },
    desired: 1,
    mayStop: [],
  },
  {
    name: 'a worker idle for exactly idle_timeout may stop',
    input: { urgentQueuedJobs: 0, workers: [w('a', 0, idleTimeoutMs)] },
    desired: 0,
    mayStop: ['a'],
  },
  {
    name: 'idle workers stop down to min, longest idle first',
    input: {
      urgentQueuedJobs: 0,
      min: 1,
      workers: [w('a', 0, idleTimeoutMs + 10), w('b', 0, idleTimeoutMs + 30), w('c', 0, idleTimeoutMs + 20)],
    },
    desired: 1,
    mayStop: ['b', 'c'],
  },
  {
    // On AWS a count below the protected tasks makes ECS refuse their protection (DEPLOYMENT_BLOCKED).
    name: 'busy workers are never named, and the count never falls below them, even under a lowered max',
    input: { urgentQueuedJobs: 3, max: 1, workers: [w('a', 1), w('b', 1), w('c', 0, idleTimeoutMs)] },
    desired: 2,
    mayStop: ['c'],
  },
  {
    name: 'an idle-expired worker goes while another serves the demand',
    input: { urgentQueuedJobs: 0, workers: [w('a', 1), w('b', 0, 60_000)] },
    desired: 1,
    mayStop: ['b'],
  },
  {
    name: 'idle-expired workers are reused for waiting jobs instead of stopping',
    input: { urgentQueuedJobs: 2, workers: [w('a', 0, 60_000), w('b', 0, 90_000)] },
    desired: 2,
    mayStop: [],
  },
  {
    name: 'one of three idle-expired workers goes when two jobs wait',
    input: { urgentQueuedJobs: 2, workers: [w('a', 0, 60_000), w('b', 0, 90_000), w('c', 0, 70_000)] },
    desired: 2,
    mayStop: ['b'],
  },
  {
    name: 'LB: a waiting request scales from zero',
    input: { urgentQueuedJobs: 0, waitingRequests: 1 },
    desired: 1,
    mayStop: [],
  },
  {
    name: 'LB: in-flight requests keep a worker and count as demand',
    input: { urgentQueuedJobs: 0, maxConcurrency: 2, workers: [w('a', 0, 0, 2), w('b', 0, 0, 1)] },
    desired: 2,
    mayStop: [],
  },
  {
    name: 'LB: back to min after idle',
    input: { urgentQueuedJobs: 0, min: 1, workers: [w('a', 0, idleTimeoutMs), w('b', 0, idleTimeoutMs)] },
    desired: 1,
    mayStop: ['a'],
  },
  {
    name: 'min above demand keeps the spare workers, none stops',
    input: { urgentQueuedJobs: 0, min: 2, workers: [w('a', 0, 60_000), w('b', 0, 60_000)] },
    desired: 2,
    mayStop: [],
  },
  {
    name: 'a failing endpoint wants no worker, whatever the queue and min say',
    input: { urgentQueuedJobs: 4, min: 2, failing: true },
    desired: 0,
    mayStop: [],
  },
  {
    name: 'a failing endpoint lets every worker holding nothing go, even inside its idle_timeout, and counts the busy one',
    input: { urgentQueuedJobs: 1, failing: true, workers: [w('b', 0, 1_000), w('a', 0, 0), w('c', 1)] },
    desired: 1,
    mayStop: ['a', 'b'],
  },
  {
    name: 'a worker booting keeps an endpoint from going back to 0',
    input: { urgentQueuedJobs: 0, booting: 1 },
    desired: 1,
    mayStop: [],
  },
  {
    name: 'booting workers are capped at max',
    input: { urgentQueuedJobs: 0, max: 2, booting: 3 },
    desired: 2,
    mayStop: [],
  },
  {
    name: 'booting workers add nothing when the policy already wants some (min)',
    input: { urgentQueuedJobs: 0, min: 1, booting: 2 },
    desired: 1,
    mayStop: [],
  },
  {
    name: 'booting workers add nothing when the policy already wants some (demand)',
    input: { urgentQueuedJobs: 0, workers: [w('a', 0, 0, 1)], booting: 1 },
    desired: 1,
    mayStop: [],
  },
  {
    name: 'an idle-expired worker may still go while another boots',
    input: { urgentQueuedJobs: 0, workers: [w('a', 0, idleTimeoutMs)], booting: 1 },
    desired: 1,
    mayStop: ['a'],
  },
  {
    name: 'a failing endpoint keeps no booting worker either',
    input: { urgentQueuedJobs: 0, failing: true, booting: 1 },
    desired: 0,
    mayStop: [],
  },
  {
    name: 'the same workers and queue when not failing keep them all',
    input: { urgentQueuedJobs: 1, failing: false, workers: [w('b', 0, 1_000), w('a', 0, 0), w('c', 1)] },
    desired: 3,
    mayStop: [],
  },
];

describe('decideScale', () => {
  it.each(cases)('$name', ({ input, desired, mayStop }) => {
    const decision = decideScale({ ...base, urgentQueuedJobs: 0, ...input });
    expect(decision.desired).toBe(desired);
    expect(decision.mayStop).toEqual(mayStop);
  });

  it('asking again while a worker boots gives the same count (no step ramp)', () => {
    const input: ScalingInput = { ...base, urgentQueuedJobs: 1 };
    const answers = Array.from({ length: 10 }, () => {
      clock.advance(60_000);
      return decideScale({ ...input, nowMs: clock.now() }).desired;
    });
    expect(new Set(answers)).toEqual(new Set([1]));
  });

  it('never names a worker holding anything, whatever the numbers', () => {
    // A small exhaustive sweep over shapes the tables above do not list one by one.
    for (let queued = 0; queued <= 4; queued++) {
      for (let max = 1; max <= 3; max++) {
        for (let min = 0; min <= max; min++) {
          const workers = [w('a', 1), w('b', 0, 0, 1), w('c', 0, idleTimeoutMs * 2), w('d', 0, 1)];
          const d = decideScale({ ...base, urgentQueuedJobs: queued, min, max, workers });
          // Within max, except that the two workers holding something are always counted.
          expect(d.desired).toBeLessThanOrEqual(Math.max(max, 2));
          expect(d.desired).toBeGreaterThanOrEqual(2);
          expect(d.desired).toBeGreaterThanOrEqual(min);
          for (const id of d.mayStop) expect(['c']).toContain(id);
        }
      }
    }
  });
});

describe('bootingOf', () => {
  const allowance = { provisionMs: 600_000, graceMs: 900_000 };
  const t = (createdAgoMs: number, startedAgoMs?: number) => ({
    createdAtMs: now - createdAgoMs,
    ...(startedAgoMs !== undefined ? { startedAtMs: now - startedAgoMs } : {}),
  });
  const cases: { name: string; tasks: ReturnType<typeof t>[]; registered: number; booting: number }[] = [
    { name: 'no task', tasks: [], registered: 0, booting: 0 },
    {
      name: 'waiting for its instance, within the allowance',
      tasks: [t(599_999)],
      registered: 0,
      booting: 1,
    },
    { name: 'waiting for its instance past the allowance', tasks: [t(600_000)], registered: 0, booting: 0 },
    {
      name: 'running, no worker reported, within grace',
      tasks: [t(700_000, 899_999)],
      registered: 0,
      booting: 1,
    },
    {
      name: 'running, no worker reported, past grace',
      tasks: [t(2_000_000, 900_000)],
      registered: 0,
      booting: 0,
    },
    { name: 'running and its worker reported', tasks: [t(700_000, 10_000)], registered: 1, booting: 0 },
    {
      name: 'a reported worker never hides a task still waiting for its instance',
      tasks: [t(1_000), t(5_000_000, 4_000_000)],
      registered: 1,
      booting: 1,
    },
    {
      name: 'two running, one reported',
      tasks: [t(400_000, 60_000), t(400_000, 30_000), t(10_000)],
      registered: 1,
      booting: 2,
    },
  ];
  it.each(cases)('$name', ({ tasks, registered, booting }) => {
    expect(bootingOf(tasks, registered, allowance, now)).toBe(booting);
  });
});
