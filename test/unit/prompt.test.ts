/**
 * The CLI's prompts (cli/io.ts ask/confirm) on a stdin that is not a terminal: a piped answer is read,
 * end of input declines, and a pipe that stays open and silent declines after pipedAnswerWaitMs
 * instead of holding the command for ever.
 */
import { PassThrough } from 'node:stream';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { type CliIo, confirm, pipedAnswerWaitMs } from '../../cli/io.js';

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

  it('declines at the end of input', async () => {
    const { io, stdin } = pipedIo();
    const answer = confirm(io, 'Go on?');
    stdin.end();
    expect(await answer).toBe(false);
  });

  it('declines when an open pipe stays silent, and says so', async () => {
    vi.useFakeTimers();
    const { io, stderr } = pipedIo();
    let settled: boolean | undefined;
    void confirm(io, 'Go on?').then((yes) => {
      settled = yes;
    });
    await vi.advanceTimersByTimeAsync(pipedAnswerWaitMs - 1);
    expect(settled).toBeUndefined();
    await vi.advanceTimersByTimeAsync(1);
    expect(settled).toBe(false);
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
