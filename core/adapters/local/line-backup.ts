/**
 * The job lines a ferry worker has printed but not yet delivered (docs/observability.md, "Job logs").
 *
 * The runtime ships a job's lines to the job-log route in batches; what has not gone out when its
 * process dies (os._exit, a segfault, kill -9) would die with it, and those are the lines that say
 * why. With FERRY_LOG_BACKUP=stderr (the pool sets it) the runtime also writes each shipped line to
 * its stderr, marked, and says when its batch was sent (worker-image/python/ferry/logs.py):
 *
 *   ::ferry-log line <seq> {"jobId", "atMs", "stream", "text"}
 *   ::ferry-log sent <seq>
 *
 * The pool keeps the marked lines, neither shown nor stored (the job-log route records them), drops
 * them when they are said sent, and records whatever is left once the worker has exited: each line is
 * recorded once, by the route or, after a crash, here.
 */
import { limits } from '../../limits.js';
import type { LogLine } from '../../ports.js';

export const logBackupMark = '::ferry-log ';

/** The most unsent lines kept per worker (a shipper batch is at most 500): the newest are kept. */
const keptLines = 1_000;

export class JobLineBackup {
  private lines: { seq: number; json: string }[] = [];

  /** Whether `line` (of the worker's stderr) was a mark: if so it is no line of the worker's own. */
  take(line: string): boolean {
    if (!line.startsWith(logBackupMark)) return false;
    const rest = line.slice(logBackupMark.length);
    const space = rest.indexOf(' ', 5);
    if (rest.startsWith('line ') && space > 0) {
      const seq = Number(rest.slice(5, space));
      if (Number.isSafeInteger(seq)) {
        this.lines.push({ seq, json: rest.slice(space + 1) });
        if (this.lines.length > keptLines) this.lines.splice(0, this.lines.length - keptLines);
      }
    } else if (rest.startsWith('sent ')) {
      const seq = Number(rest.slice(5));
      const kept = this.lines.findIndex((l) => l.seq > seq);
      this.lines.splice(0, kept === -1 ? this.lines.length : kept);
    }
    return true;
  }

  /**
   * The lines not said sent, as lines of their jobs, and only of the jobs in `jobIds` (those the worker
   * held when it died: a line naming any other job is not the worker's to write). Empties the backup.
   */
  unsent(endpointId: string, workerId: string, jobIds: ReadonlySet<string>): LogLine[] {
    const out: LogLine[] = [];
    for (const { json } of this.lines.splice(0)) {
      let line: unknown;
      try {
        line = JSON.parse(json);
      } catch {
        continue;
      }
      const { jobId, atMs, stream, text } = (line ?? {}) as Record<string, unknown>;
      if (typeof jobId !== 'string' || !jobIds.has(jobId)) continue;
      if (typeof text !== 'string' || typeof atMs !== 'number' || !Number.isFinite(atMs)) continue;
      out.push({
        atMs,
        endpointId,
        workerId,
        jobId,
        stream: stream === 'stderr' ? 'stderr' : 'stdout',
        text: text.slice(0, limits.logLineChars),
      });
    }
    return out;
  }
}
