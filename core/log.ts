/**
 * The one logger shape the core needs. The CLI prints to stderr (stdout is data); services may pass
 * pino or anything with these methods. Keys and tokens are never passed to it.
 */
export interface Logger {
  info(message: string): void;
  warn(message: string): void;
  error(message: string): void;
}

export const stderrLogger: Logger = {
  info: (message) => process.stderr.write(`${message}\n`),
  warn: (message) => process.stderr.write(`warning: ${message}\n`),
  error: (message) => process.stderr.write(`error: ${message}\n`),
};

export const silentLogger: Logger = { info() {}, warn() {}, error() {} };
