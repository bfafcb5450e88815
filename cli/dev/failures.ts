/**
 * Workers that fail to start under `ferry dev` (an import error, a missing package, a class whose
 * __init__ raises): the pool reports each one here (LocalWorkersOptions.onStartFailure), and a
 * request to that endpoint fails at once with the worker's own output instead of waiting in the
 * queue while the pool retries with backoff. A fresh provisioning (a reload after an edit) forgets
 * the failure, so the next request tries the new code.
 */
export class StartFailures {
  readonly #last = new Map<string, string>();
  readonly #waiting = new Map<string, Set<(output: string) => void>>();

  report(endpointId: string, output: string): void {
    this.#last.set(endpointId, output);
    for (const resolve of this.#waiting.get(endpointId) ?? []) resolve(output);
    this.#waiting.delete(endpointId);
  }

  /** The endpoint's code changed: its old failure says nothing about the new code. */
  forget(endpointId: string): void {
    this.#last.delete(endpointId);
  }

  /** A failure already seen for the endpoint's current code. */
  current(endpointId: string): string | undefined {
    return this.#last.get(endpointId);
  }

  /** Resolves with the next failure of `endpointId`; `cancel()` stops waiting. */
  next(endpointId: string): { failed: Promise<string>; cancel: () => void } {
    let resolver: ((output: string) => void) | undefined;
    const failed = new Promise<string>((resolve) => {
      resolver = resolve;
    });
    const set = this.#waiting.get(endpointId) ?? new Set();
    set.add(resolver!);
    this.#waiting.set(endpointId, set);
    return {
      failed,
      cancel: () => {
        set.delete(resolver!);
      },
    };
  }
}

/** What the request answers: the error and the worker's last lines, without the noise. */
export function startFailureMessage(endpoint: string, output: string): string {
  const lines = output.split('\n').filter((l) => l.trim() !== '');
  return `The worker of ${endpoint} failed to start:\n${lines.slice(-15).join('\n')}`;
}
