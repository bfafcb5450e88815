/**
 * The queue agent's drain (worker-image/agent/drain.ts) and deadline watch (deadlines.ts) on a fake
 * clock, with a stand-in supervisor that records what it is told. The same behaviour through a real
 * agent, DynamoDB Local and fauxqs is in lifecycle.test.ts; here the edges are exact.
 */
import { describe, expect, it } from 'vitest';
import { FakeClock } from '../../core/clock.js';
import { watchDeadlines } from '../../worker-image/agent/deadlines.js';
import { Drain } from '../../worker-image/agent/drain.js';
import type { TaskProtection } from '../../worker-image/agent/protection.js';
import { eventually, memoryLog } from './helpers.js';

function standInSupervisor(held: string[]) {
  const calls: string[] = [];
  return {
    calls,
    held,
    drain: (workerId: string) => void calls.push(`drain ${workerId}`),
    heldBy: () => [...held],
    exited: async (workerId: string, how: { code: number | null; signal: string | null }) => {
      calls.push(`exited ${workerId} ${how.signal}`);
      held.length = 0;
    },
    tick: async (endpointId: string) => void calls.push(`tick ${endpointId}`),
  };
}

function standInProtection() {
  const calls: string[] = [];
  const protection = {
    tick: () => void calls.push('tick'),
    release: async () => void calls.push('release'),
  } as unknown as TaskProtection;
  return { protection, calls };
}

function drainOf(held: string[], drainMs = 10_000) {
  const clock = new FakeClock();
  const supervisor = standInSupervisor(held);
  const { protection, calls: protectionCalls } = standInProtection();
  const log = memoryLog();
  const closing = new AbortController();
  let webhooksIdle = 0;
  const drain = new Drain({
    supervisor,
    workerId: 'w1',
    clock,
    log,
    drainMs,
    closing: closing.signal,
    protection,
    webhooks: { idle: async () => void webhooksIdle++ },
  });
  return { clock, supervisor, protectionCalls, log, closing, drain, webhooksIdle: () => webhooksIdle };
}

const waitingOn = (clock: FakeClock) =>
  eventually('the drain to wait', () => (clock.pendingSleeps() > 0 ? true : undefined));

describe('drain', () => {
  it('lets held jobs finish, then buries the worker, releases protection and waits for webhooks', async () => {
    const t = drainOf(['job-1']);
    const done = t.drain.start();
    expect(t.drain.start()).toBe(done); // one drain, however many signals
    expect(t.drain.signal.aborted).toBe(true); // takes in flight end
    expect(t.supervisor.calls).toEqual(['drain w1']);
    await waitingOn(t.clock);
    t.supervisor.held.length = 0; // the job finished
    t.clock.advance(200);
    await done;
    expect(t.supervisor.calls).toEqual(['drain w1', 'exited w1 SIGTERM']);
    expect(t.protectionCalls).toEqual(['release']);
    expect(t.webhooksIdle()).toBe(1);
    expect(t.log.lines.some((l) => l.includes('went back to the queue'))).toBe(false);
    expect(t.log.lines.at(-1)).toBe('info drained');
  });

  it('requeues what is still held at the deadline, and says so', async () => {
    const t = drainOf(['job-1', 'job-2'], 1_000);
    const done = t.drain.start();
    for (let elapsed = 0; elapsed < 1_000; elapsed += 200) {
      await waitingOn(t.clock);
      t.clock.advance(200);
    }
    await done;
    expect(t.supervisor.calls).toEqual(['drain w1', 'exited w1 SIGTERM']);
    expect(t.log.lines).toContain('warn drain deadline: 2 job(s) went back to the queue');
  });

  it('waits for a take that may still reach the queue, but not for takes begun while draining', async () => {
    const t = drainOf([]);
    let finishTake: (value: string) => void = () => {};
    const take = t.drain.take(() => new Promise<string>((resolve) => (finishTake = resolve)));
    const done = t.drain.start();
    await waitingOn(t.clock); // nothing held, but a take is in flight
    // A take that arrives now is refused before the queue: it does not hold the drain.
    const late = t.drain.take(() => new Promise<string>(() => {}));
    void late;
    finishTake('taken');
    expect(await take).toBe('taken');
    t.clock.advance(200);
    await done;
    expect(t.supervisor.calls).toEqual(['drain w1', 'exited w1 SIGTERM']);
  });

  it('stops waiting when the agent closes', async () => {
    const t = drainOf(['job-1'], 60_000);
    const done = t.drain.start();
    await waitingOn(t.clock);
    t.closing.abort();
    await done;
    expect(t.supervisor.calls).toEqual(['drain w1', 'exited w1 SIGTERM']);
  });
});

describe('deadline watch', () => {
  it('ticks the supervisor and then protection every tick; a failed check is logged, not fatal', async () => {
    const clock = new FakeClock();
    const supervisor = standInSupervisor([]);
    let failures = 1;
    const failing = {
      tick: async (endpointId: string) => {
        if (failures-- > 0) throw new Error('ProvisionedThroughputExceededException');
        await supervisor.tick(endpointId);
      },
    };
    const { protection, calls: protectionCalls } = standInProtection();
    const log = memoryLog();
    const stop = new AbortController();
    const watching = watchDeadlines({
      supervisor: failing,
      endpointId: 'ep1',
      protection,
      clock,
      tickMs: 1_000,
      signal: stop.signal,
      log,
    });
    for (let i = 0; i < 3; i++) {
      await eventually('the watch to sleep', () => (clock.pendingSleeps() === 1 ? true : undefined));
      clock.advance(1_000);
      await eventually('the tick to run', () => (protectionCalls.length === i + 1 ? true : undefined));
    }
    expect(log.lines).toEqual(['warn checking held jobs: ProvisionedThroughputExceededException']);
    expect(supervisor.calls).toEqual(['tick ep1', 'tick ep1']);
    expect(protectionCalls).toEqual(['tick', 'tick', 'tick']);
    stop.abort();
    await watching;
  });
});
