/**
 * The CLI's prompts (cli/io.ts ask/confirm) on a stdin that is not a terminal: a piped answer is read
 * (an empty line declines); no answer at all (end of input, or a pipe that stays open and silent for
 * pipedAnswerWaitMs instead of holding the command for ever) is a usage error that names --force,
 * or declines where the caller asks for that.
 */
import { PassThrough } from 'node:stream';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { type CliIo, confirm, pipedAnswerWaitMs } from '../../cli/io.js';
import { FerryError } from '../../core/errors.js';

function pipedIo(): { io: CliIo; stdin: PassThrough; stderr: () => string } {
  const stdin = new PassThrough();
  const stderr = new PassThrough();
  let written = '';
  stderr.on('data', (chunk: Buffer) => {
    written += chunk.toString();
  });
  const io: CliIo = {
    stdout: new PassThrough(),
    stderr,
    stdin,
    interactive: false,
    env: {},
    cwd: process.cwd(),
  };
  return { io, stdin, stderr: () => written };
}

afterEach(() => {
  vi.useRealTimers();
});

describe('a prompt on a piped stdin', () => {
  it('reads the piped answer', async () => {
    const { io, stdin } = pipedIo();
    const answer = confirm(io, 'Go on?');
    stdin.write('y\n');
    expect(await answer).toBe(true);
  });

  it('declines an empty line', async () => {
    const { io, stdin } = pipedIo();
    const answer = confirm(io, 'Go on?');
    stdin.write('\n');
    expect(await answer).toBe(false);
  });

  it('at the end of input with no answer: a usage error (exit 2) that names --force, not a "no"', async () => {
    const { io, stdin } = pipedIo();
    const answer = confirm(io, 'Go on?');
    stdin.end();
    const error = await answer.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(FerryError.is(error) && error.code).toBe('usage');
    expect((error as FerryError).message).toContain('needs confirmation');
    expect((error as FerryError).hint).toContain('--force');
  });

  it("declines at the end of input when the caller asks for that (unanswered: 'decline')", async () => {
    const { io, stdin } = pipedIo();
    const answer = confirm(io, 'Go on?', { unanswered: 'decline' });
    stdin.end();
    expect(await answer).toBe(false);
  });

  it('gives up when an open pipe stays silent, and says so', async () => {
    vi.useFakeTimers();
    const { io, stderr } = pipedIo();
    let settled: unknown;
    void confirm(io, 'Go on?').then(
      (yes) => {
        settled = yes;
      },
      (error: unknown) => {
        settled = error;
      },
    );
    await vi.advanceTimersByTimeAsync(pipedAnswerWaitMs - 1);
    expect(settled).toBeUndefined();
    await vi.advanceTimersByTimeAsync(1);
    expect(FerryError.is(settled) && settled.code).toBe('usage');
    expect(stderr()).toContain('no answer on stdin within 10.0s: taken as none');
  });

  it('waits for an answer typed late within the wait', async () => {
    vi.useFakeTimers();
    const { io, stdin } = pipedIo();
    const answer = confirm(io, 'Go on?');
    await vi.advanceTimersByTimeAsync(pipedAnswerWaitMs / 2);
    stdin.write('yes\n');
    expect(await answer).toBe(true);
  });
});
