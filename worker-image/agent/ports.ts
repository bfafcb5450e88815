/**
 * What the queue agent wires its engine and API to, beyond the AWS adapters themselves: the one
 * endpoint it serves, pinned, and adapters that log their own failures.
 */
import { FerryError, messageOf } from '../../core/errors.js';
import type { Logger } from '../../core/log.js';
import type { EndpointDirectory, EndpointRecord } from '../../core/ports.js';

/**
 * The agent serves exactly one queue endpoint: the one its task was deployed for. The API only asks
 * the control store whether the endpoint exists and is queue-based, so the answer is pinned here
 * rather than read from DynamoDB on every request. Nothing else of the control plane is reachable.
 */
export function pinnedEndpoint(endpointId: string): EndpointDirectory {
  const record: EndpointRecord = {
    id: endpointId,
    app: '',
    env: '',
    name: endpointId,
    kind: 'queue',
    config: {},
    fingerprint: '',
    createdAt: 0,
    updatedAt: 0,
  };
  return {
    getEndpoint: async (id) => (id === endpointId ? record : undefined),
    // The agent serves worker routes only: no name route resolves here.
    listEndpoints: async () => [],
  };
}

/**
 * The same adapter, with every rejected call that is not a FerryError (those are answers, not faults)
 * logged as `<name>.<method>: <error>` before it propagates.
 */
export function logged<T extends object>(name: string, target: T, log: Logger): T {
  return new Proxy(target, {
    get(object, property, receiver) {
      const value = Reflect.get(object, property, receiver);
      if (typeof value !== 'function') return value;
      return (...args: unknown[]) => {
        const result = (value as (...a: unknown[]) => unknown).apply(object, args);
        if (!(result instanceof Promise)) return result;
        return result.catch((error: unknown) => {
          if (!FerryError.is(error)) {
            const kind = error instanceof Error ? `${error.name}: ` : '';
            log.error(`${name}.${String(property)}: ${kind}${messageOf(error)}`);
          }
          throw error;
        });
      };
    },
  });
}
