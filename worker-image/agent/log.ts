/** The agents' own log: stderr (the awslogs driver ships it), every line marked as the agent's. */
import { type Logger, stderrLogger } from '../../core/log.js';

export function prefixed(log: Logger, prefix: string): Logger {
  return {
    info: (m) => log.info(`${prefix}${m}`),
    warn: (m) => log.warn(`${prefix}${m}`),
    error: (m) => log.error(`${prefix}${m}`),
  };
}

export const agentLog: Logger = prefixed(stderrLogger, 'ferry-agent: ');
