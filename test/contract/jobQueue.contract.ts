/**
 * The JobQueue contract (SQS semantics). Every adapter (SQLite, SQS via fauxqs) must pass it unchanged.
 *
 * Time: an adapter that takes a clock hands the suite its FakeClock and time moves only when the
 * suite advances it (no sleeps at all). An adapter on wall time (an SQS emulator) gets short real
 * waits; SQS counts visibility and long polls in whole seconds, so pass `visibilityMs`/`longPollMs`
 * of 1000 there. Endpoint ids are unique per test, so tests may share one queue server.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { FakeClock } from '../../core/clock.js';
import type { JobQueue } from '../../core/ports.js';
import { flush, realSleep, track, uniqueId } from './helpers.js';

export interface JobQueueFixture {
  queue: JobQueue;
  /** Present when the adapter runs on this fake clock; then the suite never sleeps. */
  clock?: FakeClock;
  close(): Promise<void>;
}

export interface JobQueueContractOptions {
  /** Visibility timeout used on wall time (default 1000, the SQS granularity). */
  visibilityMs?: number;
  /** Long-poll wait used on wall time when the suite waits for it to run out (default 1000). */
  longPollMs?: number;
}

export function describeJobQueueContract(
  name: string,
  open: () => Promise<JobQueueFixture>,
  options: JobQueueContractOptions = {},
): void {
  describe(`JobQueue contract: ${name}`, () => {
    let fixture: JobQueueFixture;
    let queue: JobQueue;
    let ep: string;

    beforeEach(async () => {
      fixture = await open();
      queue = fixture.queue;
      ep = uniqueId('ep');
    });
    afterEach(async () => {
      await fixture.close();
    });

    const fake = (): FakeClock | undefined => fixture.clock;
    /** The visibility the suite asks for: long on a fake clock (time only moves when told). */
    const visibilityMs = (): number => (fake() ? 30_000 : (options.visibilityMs ?? 1_000));
    /** Lets `ms` pass, on the fake clock or for real (with a margin for emulator timers). */
    const pass = async (ms: number): Promise<void> => {
      const clock = fake();
      if (clock) {
        clock.advance(ms);
        await flush();
      } else {
        await realSleep(ms + 150);
      }
    };
    /** Waits until a receive has reached its long-poll wait. */
    const untilWaiting = async (): Promise<void> => {
      const clock = fake();
      if (clock) await vi.waitFor(() => expect(clock.pendingSleeps()).toBeGreaterThan(0));
      else await realSleep(150);
    };
    const receive = (max = 10, waitMs = 0, signal?: AbortSignal) =>
      queue.receive(ep, { max, visibilityMs: visibilityMs(), waitMs, signal });

    it('delivers a sent message and hides it from other receivers while it is invisible', async () => {
      await queue.send(ep, 'job-1', { lowPriority: false });
      const got = await receive();
      expect(got.map((m) => m.jobId)).toEqual(['job-1']);
      expect(typeof got[0]?.receipt).toBe('string');
      expect(await receive()).toEqual([]);
    });

    it('delivers in send order to a single receiver, at most `max` at a time', async () => {
      for (const id of ['a', 'b', 'c', 'd']) await queue.send(ep, id, { lowPriority: false });
      const first = await receive(1);
      const rest = await receive(2);
      const last = await receive(10);
      expect(first.map((m) => m.jobId)).toEqual(['a']);
      expect(rest.map((m) => m.jobId)).toEqual(['b', 'c']);
      expect(last.map((m) => m.jobId)).toEqual(['d']);
    });

    it('keeps endpoints apart', async () => {
      const other = uniqueId('ep');
      await queue.send(other, 'elsewhere', { lowPriority: false });
      expect(await receive()).toEqual([]);
      const got = await queue.receive(other, { max: 10, visibilityMs: visibilityMs(), waitMs: 0 });
      expect(got.map((m) => m.jobId)).toEqual(['elsewhere']);
    });

    it('delivers again after the visibility timeout, with a new receipt; a stale receipt acks nothing', async () => {
      await queue.send(ep, 'job-1', { lowPriority: false });
      const [first] = await receive();
      expect(first?.jobId).toBe('job-1');
      await pass(visibilityMs());
      const [second] = await receive();
      expect(second?.jobId).toBe('job-1');
      expect(second?.receipt).not.toBe(first?.receipt);

      await queue.ack(ep, first!.receipt);
      await pass(visibilityMs());
      const [third] = await receive();
      expect(third?.jobId).toBe('job-1');

      await queue.ack(ep, third!.receipt);
      await queue.ack(ep, third!.receipt);
      await pass(visibilityMs());
      expect(await receive()).toEqual([]);
    });

    it('forgets an acknowledged message for good (acking twice is fine)', async () => {
      await queue.send(ep, 'job-1', { lowPriority: false });
      await queue.send(ep, 'job-2', { lowPriority: false });
      const got = await receive();
      const one = got.find((m) => m.jobId === 'job-1')!;
      await queue.ack(ep, one.receipt);
      await queue.ack(ep, one.receipt);
      await pass(visibilityMs());
      expect((await receive()).map((m) => m.jobId)).toEqual(['job-2']);
    });

    it('long poll: wakes when a message is sent within the wait', async () => {
      const started = Date.now();
      const waiting = track(receive(10, 10_000));
      await untilWaiting();
      expect(waiting.settled).toBe(false);
      await queue.send(ep, 'late', { lowPriority: false });
      const got = await waiting.promise;
      expect(got.map((m) => m.jobId)).toEqual(['late']);
      // On a fake clock no time passed at all; on wall time it answered well before the wait ran out.
      expect(Date.now() - started).toBeLessThan(5_000);
      if (fake()) expect(fake()!.pendingSleeps()).toBe(0);
    });

    it('long poll: answers [] when the wait runs out with nothing sent', async () => {
      const clock = fake();
      if (clock) {
        const waiting = track(receive(10, 2_000));
        await untilWaiting();
        clock.advance(1_999);
        await flush();
        expect(waiting.settled).toBe(false);
        clock.advance(1);
        expect(await waiting.promise).toEqual([]);
      } else {
        const waitMs = options.longPollMs ?? 1_000;
        const started = Date.now();
        expect(await receive(10, waitMs)).toEqual([]);
        expect(Date.now() - started).toBeGreaterThanOrEqual(waitMs - 100);
      }
    });

    it('long poll: is not woken by a send to another endpoint', async () => {
      const clock = fake();
      const waitMs = clock ? 2_000 : (options.longPollMs ?? 1_000);
      const waiting = track(receive(10, waitMs));
      await untilWaiting();
      await queue.send(uniqueId('ep'), 'elsewhere', { lowPriority: false });
      if (clock) {
        await flush();
        expect(waiting.settled).toBe(false);
        clock.advance(waitMs);
      }
      expect(await waiting.promise).toEqual([]);
    });

    it('long poll: delivers a message that turns visible again during the wait', async () => {
      await queue.send(ep, 'job-1', { lowPriority: false });
      expect(await receive()).toHaveLength(1);
      const clock = fake();
      const waiting = track(receive(10, clock ? 60_000 : visibilityMs() * 4));
      await untilWaiting();
      if (clock) {
        clock.advance(visibilityMs());
        await flush();
      }
      const got = await waiting.promise;
      expect(got.map((m) => m.jobId)).toEqual(['job-1']);
    });

    it('long poll: stops with [] when the signal aborts', async () => {
      const controller = new AbortController();
      const started = Date.now();
      const waiting = track(receive(10, 20_000, controller.signal));
      await untilWaiting();
      controller.abort();
      expect(await waiting.promise).toEqual([]);
      expect(Date.now() - started).toBeLessThan(5_000);

      // An already-aborted signal answers at once, and a message sent meanwhile is not lost.
      await queue.send(ep, 'kept', { lowPriority: false });
      expect(await receive(10, 20_000, AbortSignal.abort())).toEqual([]);
      expect((await receive()).map((m) => m.jobId)).toEqual(['kept']);
    });

    it('reports depth: visible messages, and the urgent ones among them (not low-priority)', async () => {
      expect(await queue.depth(ep)).toEqual({ visible: 0, urgent: 0 });
      await queue.send(ep, 'a', { lowPriority: false });
      await queue.send(ep, 'b', { lowPriority: true });
      await queue.send(ep, 'c', { lowPriority: false });
      expect(await queue.depth(ep)).toEqual({ visible: 3, urgent: 2 });
      const [first] = await receive(1);
      expect(first?.jobId).toBe('a');
      expect(await queue.depth(ep)).toEqual({ visible: 2, urgent: 1 });
      expect(await queue.depth(uniqueId('ep'))).toEqual({ visible: 0, urgent: 0 });
    });

    it('may stop counting at atMost, but never reports less than that much of what waits', async () => {
      for (const [id, lowPriority] of [
        ['l1', true],
        ['l2', true],
        ['u1', false],
        ['u2', false],
        ['u3', false],
      ] as const)
        await queue.send(ep, id, { lowPriority });
      const capped = await queue.depth(ep, { atMost: 2 });
      expect(capped.visible).toBeGreaterThanOrEqual(2);
      expect(capped.visible).toBeLessThanOrEqual(5);
      expect(capped.urgent).toBeGreaterThanOrEqual(2);
      expect(capped.urgent).toBeLessThanOrEqual(3);
      expect(await queue.depth(ep, { atMost: 10 })).toEqual({ visible: 5, urgent: 3 });
    });
  });
}
