/**
 * How the CLI talks to people: stdout carries data (what `--json` and scripts read), stderr carries
 * progress. Spinners and bars redraw only on a TTY; elsewhere every step is one plain line, so CI
 * logs and tests read the same story a person sees.
 */
import type { Readable, Writable } from 'node:stream';
import { usage } from '../core/errors.js';

export interface CliIo {
  stdout: Writable;
  stderr: Writable;
  stdin: Readable;
  /** stderr is a terminal: spinners and redrawn bars are allowed. */
  interactive: boolean;
  env: NodeJS.ProcessEnv;
  cwd: string;
}

export function processIo(): CliIo {
  return {
    stdout: process.stdout,
    stderr: process.stderr,
    stdin: process.stdin,
    interactive: Boolean(process.stderr.isTTY),
    env: process.env,
    cwd: process.cwd(),
  };
}

export function formatMs(ms: number): string {
  return ms < 1000 ? `${Math.round(ms)}ms` : `${(ms / 1000).toFixed(1)}s`;
}

/** `1 endpoint`, `3 endpoints`: a count with its noun in the number it needs. */
export const countOf = (n: number, noun: string): string => `${n} ${noun}${n === 1 ? '' : 's'}`;

/**
 * Rows as lines of aligned columns: each column as wide as its widest cell, two spaces between. The
 * one table of the CLI's listings (`app list`, `env get`, the build summary, ...).
 */
export function table(rows: string[][]): string[] {
  if (rows.length === 0) return [];
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length)));
  return rows.map((r) =>
    r
      .map((cell, i) => cell.padEnd(widths[i]!))
      .join('  ')
      .trimEnd(),
  );
}

export function formatBytes(bytes: number): string {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KB`;
  return `${(bytes / (1024 * 1024)).toFixed(1)} MB`;
}

/** Progress on stderr. */
export class Reporter {
  #spinner: NodeJS.Timeout | undefined;
  #spinnerText = '';

  constructor(private readonly io: CliIo) {}

  line(text = ''): void {
    this.#clearSpinner();
    this.io.stderr.write(`${text}\n`);
  }

  /** Data for scripts, on stdout. */
  out(text: string): void {
    this.io.stdout.write(`${text}\n`);
  }

  json(value: unknown): void {
    this.io.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
  }

  /** Runs one named step: a spinner on a TTY, a "…" line otherwise, then ✓/✗ with its duration. */
  async step<T>(title: string, fn: () => Promise<T>, detail?: (result: T) => string): Promise<T> {
    const startMs = Date.now();
    this.#startSpinner(title);
    try {
      const result = await fn();
      const extra = detail ? detail(result) : '';
      this.line(`✓ ${title}${extra ? `  ${extra}` : ''}  ${formatMs(Date.now() - startMs)}`);
      return result;
    } catch (error) {
      this.line(`✗ ${title}  ${formatMs(Date.now() - startMs)}`);
      throw error;
    }
  }

  /** A progress bar for `total` bytes; on a non-TTY it prints at most every 25%. */
  progress(label: string, total: number): (done: number) => void {
    let lastQuarter = -1;
    return (done: number) => {
      const fraction = total > 0 ? Math.min(1, done / total) : 1;
      if (this.io.interactive) {
        const width = 24;
        const filled = Math.round(fraction * width);
        this.io.stderr.write(
          `\r  ${label} [${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${formatBytes(done)}/${formatBytes(total)}`,
        );
        if (fraction >= 1) this.io.stderr.write('\n');
        return;
      }
      const quarter = Math.floor(fraction * 4);
      if (quarter > lastQuarter) {
        lastQuarter = quarter;
        this.io.stderr.write(
          `  ${label} ${Math.round(fraction * 100)}% (${formatBytes(done)}/${formatBytes(total)})\n`,
        );
      }
    };
  }

  #startSpinner(title: string): void {
    if (!this.io.interactive) {
      this.io.stderr.write(`… ${title}\n`);
      return;
    }
    this.#clearSpinner();
    const frames = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];
    let frame = 0;
    this.#spinnerText = title;
    this.#spinner = setInterval(() => {
      this.io.stderr.write(`\r${frames[frame++ % frames.length]} ${this.#spinnerText}`);
    }, 80);
  }

  #clearSpinner(): void {
    if (!this.#spinner) return;
    clearInterval(this.#spinner);
    this.#spinner = undefined;
    this.io.stderr.write('\r\x1b[K');
  }
}

/**
 * How long a prompt waits for its answer when stdin is not a terminal. An answer piped in (`echo y |`)
 * is there at once; a pipe that stays open and silent (a CI runner, a parent process that never
 * writes) would otherwise hold the command for ever.
 */
export const pipedAnswerWaitMs = 10_000;

/**
 * Reads one answer line from stdin. End of input, or silence on a stdin that is not a terminal for
 * `pipedAnswerWaitMs`, is no answer, so a prompt in CI never hangs.
 *
 * Without a terminal, no answer at all (stdin ends, or stays silent, before a line comes) is not a
 * "no" but a question nobody could see: unless `unanswered` is 'decline', that is a usage error (exit
 * 2) that names the way on without a question (`--force`, or an answer piped in), instead of
 * "Cancelled". A line piped in (`echo y |`, even an empty one) is an answer as on a terminal.
 */
export async function ask(
  io: CliIo,
  question: string,
  options: { timeoutMs?: number; unanswered?: 'refuse' | 'decline' } = {},
): Promise<string> {
  io.stderr.write(question);
  const stdin = io.stdin as Readable & { isTTY?: boolean };
  const timeoutMs = options.timeoutMs ?? 0;
  const waitMs = timeoutMs > 0 ? timeoutMs : stdin.isTTY ? 0 : pipedAnswerWaitMs;
  const answered = await new Promise<string | undefined>((resolve) => {
    let buffer = '';
    let timer: NodeJS.Timeout | undefined;
    const finish = (answer: string | undefined) => {
      stdin.off('data', onData);
      stdin.off('end', onEnd);
      stdin.off('error', onEnd);
      if (timer) clearTimeout(timer);
      stdin.pause();
      io.stderr.write('\n');
      resolve(answer?.trim());
    };
    const onData = (chunk: Buffer | string) => {
      buffer += chunk.toString();
      const newline = buffer.indexOf('\n');
      if (newline >= 0) finish(buffer.slice(0, newline));
    };
    // Some text before the end (`printf y |`) is an answer; nothing at all is none.
    const onEnd = () => finish(buffer === '' ? undefined : buffer);
    stdin.on('data', onData);
    stdin.once('end', onEnd);
    stdin.once('error', onEnd);
    if (waitMs > 0) {
      timer = setTimeout(() => {
        if (!stdin.isTTY) io.stderr.write(`\n(no answer on stdin within ${formatMs(waitMs)}: taken as none)`);
        finish(undefined);
      }, waitMs);
    }
    stdin.resume();
  });
  if (answered === undefined && !stdin.isTTY && options.unanswered !== 'decline') {
    throw usage(
      'This needs confirmation, and stdin is not a terminal: no answer came',
      'Pass --force (-f) to go ahead without a question, or pipe the answer into stdin.',
    );
  }
  return answered ?? '';
}

/** `[y/N]`: anything but y/yes is No. No answer without a terminal: see ask. */
export async function confirm(
  io: CliIo,
  question: string,
  options: { unanswered?: 'refuse' | 'decline' } = {},
): Promise<boolean> {
  const answer = await ask(io, `${question} [y/N] `, options);
  return /^y(es)?$/i.test(answer);
}
