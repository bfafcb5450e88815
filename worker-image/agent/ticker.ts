/**
 * The agents' periodic work (deadlines.ts for the queue agent, task protection for both): `tick`
 * every `everyMs` of the injected clock, so tests drive it with a fake clock instead of waiting.
 */
import type { Clock } from '../../core/ports.js';

/** Calls `tick` every `everyMs` until `signal` aborts; a tick that runs long delays the next one. */
export async function tickEvery(
  clock: Clock,
  everyMs: number,
  signal: AbortSignal,
  tick: () => Promise<void> | void,
): Promise<void> {
  while (!signal.aborted) {
    await clock.sleep(everyMs, signal);
    if (signal.aborted) return;
    await tick();
  }
}
