/**
 * Progress of a build, as a small typed union. The CLI prints these to stderr; tests assert on them.
 * Nothing the build drops or overrides goes unreported (flash #353 dropped packages silently).
 */
export type BuildStage = 'files' | 'scan' | 'dependencies' | 'artifact';

export type BuildEvent =
  | { type: 'stage-started'; stage: BuildStage }
  | { type: 'stage-finished'; stage: BuildStage; durationMs: number; detail: string }
  | { type: 'files'; shippedCount: number; pythonCount: number }
  | { type: 'endpoints'; names: string[] }
  | { type: 'packages-installed'; packages: Array<{ name: string; version: string }> }
  /** One step of pip while it runs (fetching a package, retrying the index): a long install is not silent. */
  | { type: 'dependency-progress'; text: string }
  | { type: 'package-excluded'; name: string; reason: string }
  /** What the build does that the user may not expect, and is not wrong (numpy into a local artifact). */
  | { type: 'note'; message: string }
  /** `package`: the one a base-image warning is about (`ferry dev` installs it where your Python lacks it). */
  | { type: 'warning'; message: string; package?: string };

export type ProgressSink = (event: BuildEvent) => void;

/** Monotonic-enough milliseconds; injected so tests can pin durations. */
export type NowMs = () => number;

/** Runs `fn` between a started and a finished event, with its duration and a one-line summary. */
export async function stage<T>(
  name: BuildStage,
  emit: ProgressSink,
  nowMs: NowMs,
  fn: () => Promise<T>,
  detail: (result: T) => string,
): Promise<T> {
  const startMs = nowMs();
  emit({ type: 'stage-started', stage: name });
  const result = await fn();
  emit({
    type: 'stage-finished',
    stage: name,
    durationMs: Math.max(0, nowMs() - startMs),
    detail: detail(result),
  });
  return result;
}
