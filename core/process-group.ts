/**
 * Process groups: a child spawned with `detached: true` leads a group of its own, and what it starts
 * (a server an imported module runs, a compiler pip runs) stays in that group unless it leaves it
 * (`setsid`). Signalling the group reaches all of them, where signalling the child reaches it alone.
 */

/** `signal` to the process group that `pid` leads; a group that is gone already is fine. */
export function signalGroup(pid: number | undefined, signal: NodeJS.Signals): void {
  if (pid === undefined) return;
  try {
    process.kill(-pid, signal);
  } catch {
    // ESRCH: the group is gone already.
  }
}

/** SIGKILL to the whole process group a child leads (spawned with `detached: true`). */
export function killGroup(child: { readonly pid?: number | undefined }): void {
  signalGroup(child.pid, 'SIGKILL');
}
