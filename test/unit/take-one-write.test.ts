/**
 * The local store's one-write take (EngineDeps.takeQueued): receive, claim and acknowledge commit
 * together, so no message is left hidden to come back later, two takers never get one job, stale
 * messages are skipped without costing the caller its `max`, and a submit wakes one waiting take,
 * not all of them. A job created while a take waits is handed to it in the create's own write.
 * Real SQLite (in memory), fake clock, no sleeps.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { type LocalDatabase, openLocalDatabase } from '../../core/adapters/local/sqlite.js';
import { FakeClock } from '../../core/clock.js';
import type { JobEngine } from '../../core/engine.js';
import { JsonText, stringifyJsonExact } from '../../core/json.js';
import { localEngine } from '../support/localEngine.js';

const ep = 'ep';

/** Counts sleeps begun, so a test can tell a long poll that was woken for nothing (it sleeps again). */
class CountingClock extends FakeClock {
  sleepsBegun = 0;
  override sleep(ms: number, signal?: AbortSignal): Promise<void> {
    this.sleepsBegun++;
    return super.sleep(ms, signal);
  }
}

let clock: CountingClock;
let db: LocalDatabase;
let engine: JobEngine;

beforeEach(() => {
  clock = new CountingClock();
  db = openLocalDatabase(':memory:', { clock });
  engine = localEngine(db, clock, { leaseMs: 30_000 });
});
afterEach(async () => {
  await db.close();
});

const submit = async () => (await engine.submit(ep, { input: {} }, { sync: false })).id;
const turn = () => new Promise((resolve) => setImmediate(resolve));

describe('one-write take', () => {
  it('consumes the message with the claim: nothing is left in the queue to come back', async () => {
    const id = await submit();
    expect((await db.queue.depth(ep)).visible).toBe(1);
    const takenAt = clock.now();
    const [taken] = await engine.take(ep, 'w1', 1, 0);
    expect(taken?.id).toBe(id);
    expect(await db.jobs.get(id, clock.now())).toMatchObject({
      status: 'IN_PROGRESS',
      workerId: 'w1',
      attempt: 1,
      leaseUntil: takenAt + 30_000,
    });
    // The composed take hides the message until the lease; this one deleted it in the same commit.
    clock.advance(60_000);
    expect(await db.queue.receive(ep, { max: 10, visibilityMs: 1_000, waitMs: 0 })).toEqual([]);
  });

  it('hands inputs out as the stored JSON text when the caller writes them out, parsed otherwise', async () => {
    const input = { seed: '\u0000ferry-int:18446744073709551615', text: 'x'.repeat(70_000) };
    const first = (await engine.submit(ep, { input }, { sync: false })).id;
    const second = (await engine.submit(ep, { input }, { sync: false })).id;
    const [asText] = await engine.take(ep, 'w1', 1, 0, undefined, true);
    expect(asText?.id).toBe(first);
    expect(asText?.input).toBeInstanceOf(JsonText);
    expect((asText?.input as JsonText | undefined)?.text).toBe(JSON.stringify(input));
    expect(stringifyJsonExact(asText)).toBe(
      `{"id":"${first}","input":{"seed":18446744073709551615,"text":"${input.text}"}}`,
    );
    const [parsed] = await engine.take(ep, 'w1', 1, 0);
    expect(parsed).toEqual({ id: second, input });
  });

  it('skips stale messages (cancelled, expired) and still fills max from the jobs behind them', async () => {
    const cancelled = await submit();
    const expiring = (await engine.submit(ep, { input: {}, policy: { ttl: 10_000 } }, { sync: false })).id;
    const a = await submit();
    const b = await submit();
    await engine.cancel(ep, cancelled);
    clock.advance(10_000);
    // `expiring` has passed its ttl: get hides it, so it must not be handed out either.
    const taken = await engine.take(ep, 'w1', 2, 0);
    expect(taken.map((j) => j.id)).toEqual([a, b]);
    expect(await engine.take(ep, 'w1', 2, 0)).toEqual([]);
    expect((await db.queue.depth(ep)).visible).toBe(0);
    expect(await db.jobs.get(expiring, clock.now())).toBeUndefined();
  });

  it('hands each job to one taker only, whatever the interleaving', async () => {
    const ids = [];
    for (let i = 0; i < 20; i++) ids.push(await submit());
    const takes = await Promise.all(Array.from({ length: 8 }, (_, i) => engine.take(ep, `w${i}`, 3, 0)));
    const all = takes.flat().map((j) => j.id);
    expect(new Set(all).size).toBe(all.length);
    expect(all.length).toBe(20);
    expect(all.sort()).toEqual([...ids].sort());
  });

  it('a submit wakes one waiting take; the others keep waiting for the next submit', async () => {
    const first = engine.take(ep, 'w1', 1, 60_000);
    const second = engine.take(ep, 'w2', 1, 60_000);
    while (clock.pendingSleeps() < 2) await turn();
    const a = await submit();
    // One of the two answers with the job; the other stays asleep (no clock movement).
    const winner = await Promise.race([
      first.then((j) => ['w1', j] as const),
      second.then((j) => ['w2', j] as const),
    ]);
    expect(winner[1].map((j) => j.id)).toEqual([a]);
    for (let i = 0; i < 5; i++) await turn();
    // The other take was not woken at all: still its first sleep (waking every take per submit had
    // each run a receive that found nothing and sleep again).
    expect(clock.pendingSleeps()).toBe(1);
    expect(clock.sleepsBegun).toBe(2);
    const b = await submit();
    const other = await (winner[0] === 'w1' ? second : first);
    expect(other.map((j) => j.id)).toEqual([b]);
  });

  it('hands a job created while a take waits straight to it, claimed in the same write, never queued', async () => {
    // The local queue's own insert (not on the JobQueue port): every queued job goes through it.
    const queued = vi.spyOn(db.queue as unknown as { insertSync(...args: unknown[]): void }, 'insertSync');
    const pending = engine.take(ep, 'w1', 4, 60_000);
    while (clock.pendingSleeps() < 1) await turn();
    const id = await submit();
    const [taken] = await pending;
    expect(taken?.id).toBe(id);
    expect(queued).not.toHaveBeenCalled();
    expect(await db.jobs.get(id, clock.now())).toMatchObject({
      status: 'IN_PROGRESS',
      workerId: 'w1',
      attempt: 1,
      leaseUntil: clock.now() + 30_000,
      version: 2,
    });
    // With nobody waiting, the next job is queued as before.
    const next = await submit();
    expect(queued).toHaveBeenCalledTimes(1);
    expect((await engine.take(ep, 'w1', 4, 0)).map((j) => j.id)).toEqual([next]);
  });

  it('hands a waiting take no more than its max; the rest of the burst is queued in order', async () => {
    const pending = engine.take(ep, 'w1', 2, 60_000);
    while (clock.pendingSleeps() < 1) await turn();
    const ids = await Promise.all([submit(), submit(), submit()]);
    expect((await pending).map((j) => j.id)).toEqual(ids.slice(0, 2));
    expect((await db.queue.depth(ep)).visible).toBe(1);
    expect((await engine.take(ep, 'w2', 2, 0)).map((j) => j.id)).toEqual([ids[2]]);
  });

  it('a create that fails hands nothing over: the waiting take keeps waiting for the next job', async () => {
    const first = await engine.submit(ep, { input: {} }, { sync: false });
    await engine.take(ep, 'w0', 1, 0);
    const pending = engine.take(ep, 'w1', 1, 60_000);
    while (clock.pendingSleeps() < 1) await turn();
    // The same id again: the insert fails inside the write, the take is not woken.
    await expect(db.createQueued(first)).rejects.toThrow(/already exists/);
    for (let i = 0; i < 5; i++) await turn();
    expect(clock.pendingSleeps()).toBe(1);
    expect(await db.jobs.get(first.id, clock.now())).toMatchObject({ status: 'IN_PROGRESS', workerId: 'w0' });
    const id = await submit();
    expect((await pending).map((j) => j.id)).toEqual([id]);
  });

  it('a job handed over in a turn where another write fails reaches the take once, committed', async () => {
    const first = await engine.submit(ep, { input: {} }, { sync: false });
    await engine.take(ep, 'w0', 1, 0);
    const pending = engine.take(ep, 'w1', 1, 60_000);
    while (clock.pendingSleeps() < 1) await turn();
    // One turn: a new job (handed to w1 inside the write), then a create that fails (the same id
    // again). The turn's write is rolled back at the failure and runs again, the hand-off with it.
    const job = { ...first, id: `${first.id}-second` };
    const [created, again] = await Promise.allSettled([db.createQueued(job), db.createQueued(first)]);
    expect(created.status).toBe('fulfilled');
    expect(again.status).toBe('rejected');
    expect((again as PromiseRejectedResult).reason.message).toMatch(/already exists/);
    // Settled within a few turns: a hand-off lost in the first run would leave the take waiting.
    let got: string[] | undefined;
    void pending.then((jobs) => {
      got = jobs.map((j) => j.id);
    });
    for (let i = 0; i < 20 && !got; i++) await turn();
    expect(got).toEqual([job.id]);
    expect(await db.jobs.get(job.id, clock.now())).toMatchObject({ status: 'IN_PROGRESS', workerId: 'w1' });
    expect(await engine.take(ep, 'w2', 1, 0)).toEqual([]);
  });

  it('a take whose caller left answers [] and claims nothing', async () => {
    const abort = new AbortController();
    const pending = engine.take(ep, 'w1', 1, 60_000, abort.signal);
    while (clock.pendingSleeps() < 1) await turn();
    abort.abort();
    expect(await pending).toEqual([]);
    const id = await submit();
    const [taken] = await engine.take(ep, 'w2', 1, 0);
    expect(taken?.id).toBe(id);
  });
});
