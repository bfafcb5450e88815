/**
 * What every command gets: its I/O and a progress reporter. Light, as the command definitions that
 * take it are (cli/commands/index.ts); the provider a command was pointed at is opened by
 * withProvider (cli/providers/index.ts).
 */
import { type CliIo, Reporter } from './io.js';

export interface CliContext {
  io: CliIo;
  reporter: Reporter;
}

export function createContext(io: CliIo): CliContext {
  return { io, reporter: new Reporter(io) };
}
