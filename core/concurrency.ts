/**
 * Bounded concurrency: work over a list with at most a few items in flight, where all at once would
 * start too much at a time (S3 reads of big payloads, endpoints provisioned by `ferry dev`).
 */

/** `fn` of each item, at most `lanes` running at once, answered in the items' order. */
export async function mapAtMost<T, R>(
  items: readonly T[],
  lanes: number,
  fn: (item: T) => Promise<R>,
): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  const lane = async () => {
    while (next < items.length) {
      const at = next++;
      results[at] = await fn(items[at] as T);
    }
  };
  await Promise.all(Array.from({ length: Math.min(lanes, items.length) }, lane));
  return results;
}
