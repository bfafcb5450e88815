/** A port whose adapter is made on first use (the table's name is known only once the platform is). */
export function lazyPort<T extends object>(open: () => Promise<T>): T {
  return new Proxy({} as T, {
    get(_target, prop) {
      // Not a thenable: `await provider.control` must not call into the store.
      if (prop === 'then') return undefined;
      // The provider closes the clients; a store never opened has nothing to close.
      if (prop === 'close') return async () => {};
      return async (...args: unknown[]) => {
        const port = (await open()) as Record<PropertyKey, unknown>;
        return (port[prop] as (...a: unknown[]) => unknown).apply(port, args);
      };
    },
  });
}
