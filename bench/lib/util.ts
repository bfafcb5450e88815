/** Small helpers shared by the bench scripts. */

/** A positive integer from the environment, or the fallback. */
export const envInt = (name: string, fallback: number): number => {
  const n = Number(process.env[name]);
  return Number.isInteger(n) && n > 0 ? n : fallback;
};

export const pause = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Progress goes to stderr; stdout is the report. */
export const say = (line: string): void => {
  process.stderr.write(`${line}\n`);
};

export const round = (n: number, digits = 1): number => Number(n.toFixed(digits));

/** The `p`th percentile of ascending `sorted` (NaN when empty). */
export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}
