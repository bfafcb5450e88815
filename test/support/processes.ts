/**
 * Processes a test started through the code under test (a server an endpoint module starts at
 * import, say) and must see gone afterwards.
 */
import { existsSync, readFileSync } from 'node:fs';
import { afterEach, expect, vi } from 'vitest';

/**
 * Whether `pid` is a live process. A zombie is not: killed, it waits only for its parent (or init,
 * once its parent is gone; a container's init may never reap it) to collect it.
 */
export function running(pid: number): boolean {
  try {
    // "pid (comm) state ...": comm may hold spaces and parens, so the state follows the last ')'.
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    if (existsSync('/proc/self')) return false;
  }
  // No /proc (macOS): signal 0 says whether the pid exists.
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code !== 'ESRCH';
  }
}

/**
 * A list of pids for a test file to push onto: each is sent SIGKILL after every test, whatever the
 * test saw, so a sleeper a child started does not outlive a test that failed before it looked.
 */
export function killedAfterEach(): number[] {
  const pids: number[] = [];
  afterEach(() => {
    for (const pid of pids.splice(0)) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // Gone already.
      }
    }
  });
  return pids;
}

/** Polls briefly (a SIGKILL is not instant) until `pid` is gone; fails naming it if it still runs. */
export function expectGone(pid: number): Promise<void> {
  return vi.waitFor(() => expect(running(pid), `process ${pid} still runs`).toBe(false), {
    timeout: 5_000,
    interval: 20,
  });
}

/**
 * Python lines that start `sleep 300` (a stand-in for a server a module starts at import), which
 * inherits the caller's stdout and stderr, and write its pid to `pidFile`. `ownSession`: in a
 * session of its own (`start_new_session=True`, as `setsid` or a daemon), out of the caller's
 * process group.
 */
export const startsSleeper = (pidFile: string, options: { ownSession?: boolean } = {}): string =>
  'import subprocess as _subprocess\n' +
  `_sleeper = _subprocess.Popen(["sleep", "300"]${options.ownSession ? ', start_new_session=True' : ''})\n` +
  `with open(${JSON.stringify(pidFile)}, "w") as _f:\n` +
  '    _f.write(str(_sleeper.pid))\n';

/** The pid in `pidFile`, once it is written whole (polled: another process writes it). */
export function pidWritten(pidFile: string, timeoutMs = 30_000): Promise<number> {
  return vi.waitFor(
    () => {
      const text = existsSync(pidFile) ? readFileSync(pidFile, 'utf8') : '';
      if (!/^\d+$/.test(text)) throw new Error(`no pid in ${pidFile} yet`);
      return Number(text);
    },
    { timeout: timeoutMs, interval: 20 },
  );
}
