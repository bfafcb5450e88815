/**
 * Vitest's global setup (vitest.config.ts): a folder for what the test files of one run share, and
 * after the last file, the end of what they started there. Today that is one DynamoDB Local
 * (sharedDynamoLocal in emulators.ts): the first file that needs it starts it, and it is stopped
 * here, its whole process group, whichever file started it and whether or not that file failed.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { TestProject } from 'vitest/node';
import { signalGroup } from '../../core/process-group.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** The run's shared folder (run-setup.ts). */
    ferryRunDir: string;
  }
}

export default function setup(project: TestProject) {
  const dir = mkdtempSync(path.join(tmpdir(), 'ferry-test-run-'));
  project.provide('ferryRunDir', dir);
  return async () => {
    await stopGroup(recordedPid(dir));
    rmSync(dir, { recursive: true, force: true });
  };
}

/** The files of the shared DynamoDB Local in the run's folder: who starts it, where it is, its log. */
export function sharedDynamoFiles(dir: string) {
  return {
    lock: path.join(dir, 'dynamo.lock'),
    record: path.join(dir, 'dynamo.json'),
    failed: path.join(dir, 'dynamo.failed'),
    log: path.join(dir, 'dynamo.log'),
  };
}

/** The shared DynamoDB Local's pid (its process group's id: it runs detached), if one was started. */
function recordedPid(dir: string): number | undefined {
  const { record } = sharedDynamoFiles(dir);
  if (!existsSync(record)) return undefined;
  return (JSON.parse(readFileSync(record, 'utf8')) as { pid: number }).pid;
}

/** SIGTERM to the group, SIGKILL after 5 s, and back once nothing of it is left. */
async function stopGroup(pid: number | undefined): Promise<void> {
  if (pid === undefined) return;
  const alive = () => {
    try {
      process.kill(-pid, 0);
      return true;
    } catch {
      return false; // ESRCH: the group is gone
    }
  };
  signalGroup(pid, 'SIGTERM');
  const killAt = Date.now() + 5_000;
  while (alive()) {
    if (Date.now() > killAt) signalGroup(pid, 'SIGKILL');
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}
