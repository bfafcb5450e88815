/**
 * The one logger shape the core needs. The CLI prints to stderr (stdout is data); services may pass
 * pino or anything with these methods. Keys and tokens are never passed to it.
 */
export interface Logger {
  info(message: string): void;
  warn(message: string): void;
  error(message: string): void;
}

/** Control characters but the tab and the newline: C0, DEL and C1. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what it finds
const controlCharacters = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/g;

/**
 * `text` for a terminal, its control characters written out (`\x1b`): worker output and job lines
 * are user code's, and on a terminal an escape sequence or a carriage return could rewrite what the
 * operator reads (a line that seems another endpoint's), or the window's title.
 */
export const printable = (text: string): string =>
  text.replace(controlCharacters, (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, '0')}`);

export const stderrLogger: Logger = {
  info: (message) => process.stderr.write(`${printable(message)}\n`),
  warn: (message) => process.stderr.write(`warning: ${printable(message)}\n`),
  error: (message) => process.stderr.write(`error: ${printable(message)}\n`),
};

export const silentLogger: Logger = { info() {}, warn() {}, error() {} };
