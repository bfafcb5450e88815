/**
 * A worker in TypeScript that speaks the RunPod worker protocol (docs/architecture.md#worker-protocol)
 * and keeps going when the platform vanishes: the fault suite kills the platform under it, and the
 * engine-only throughput bench uses it as the cheapest possible worker (undici's request on kept-alive
 * sockets: fetch cost this process about ten times the CPU per request, and this process is also
 * the bench's client).
 *
 * It counts, per job id, how often its handler ran and how often job-done was accepted (200), so a
 * test can say "none completed twice" from the worker's side.
 */
import { setMaxListeners } from 'node:events';
import { request } from 'undici';
import { pause } from './util.js';

export interface WorkerTarget {
  url: string;
  token: string;
}

export interface CountingWorkerOptions {
  /** Parallel take loops (one job each). */
  concurrency: number;
  /** Simulated work per job. */
  workMs?: number;
  workerId?: string;
}

export class CountingWorker {
  readonly executions = new Map<string, number>();
  readonly completions = new Map<string, number>();
  /** job-done answers other than 200 (409 after a lease moved the job on, etc.), by status. */
  readonly refusals = new Map<number, number>();
  readonly workerId: string;
  private abort = CountingWorker.controller();
  private loops: Promise<void>[] = [];

  constructor(
    private target: WorkerTarget,
    private readonly endpointId: string,
    private readonly options: CountingWorkerOptions,
  ) {
    this.workerId = options.workerId ?? `tsw-${Math.random().toString(36).slice(2, 8)}`;
  }

  /** One signal shared by every loop's request (undici adds a listener per request in flight). */
  private static controller(): AbortController {
    const controller = new AbortController();
    setMaxListeners(0, controller.signal);
    return controller;
  }

  /** The platform came back elsewhere (a restart picks a new port and a new worker token). */
  retarget(target: WorkerTarget): void {
    this.target = target;
  }

  get completed(): number {
    return [...this.completions.values()].reduce((a, b) => a + b, 0);
  }

  start(): void {
    for (let i = 0; i < this.options.concurrency; i++) this.loops.push(this.loop());
  }

  async stop(): Promise<void> {
    this.abort.abort();
    await Promise.all(this.loops);
    this.loops = [];
    this.abort = CountingWorker.controller();
  }

  private base(): string {
    return `${this.target.url}/v2/${this.endpointId}`;
  }

  private async loop(): Promise<void> {
    const signal = this.abort.signal;
    while (!signal.aborted) {
      let job: { id: string; input: unknown } | undefined;
      try {
        const response = await request(
          `${this.base()}/job-take/${this.workerId}?gpu=none&job_in_progress=0`,
          {
            headers: { authorization: this.target.token },
            signal,
          },
        );
        if (response.statusCode === 200) job = (await response.body.json()) as { id: string; input: unknown };
        else await response.body.dump();
        if (response.statusCode !== 200 && response.statusCode !== 204) await pause(50);
      } catch {
        if (signal.aborted) return;
        await pause(50); // platform down or restarting
        continue;
      }
      if (!job) continue;
      this.executions.set(job.id, (this.executions.get(job.id) ?? 0) + 1);
      if (this.options.workMs) await pause(this.options.workMs);
      await this.done(job.id, { output: job.input });
    }
  }

  /** Like RunPod's SDK: a few attempts on network errors; a 4xx answer is final. */
  private async done(jobId: string, body: unknown): Promise<void> {
    for (let attempt = 0; attempt < 20; attempt++) {
      try {
        const response = await request(
          `${this.base()}/job-done/${this.workerId}/${jobId}?gpu=none&isStream=false`,
          {
            method: 'POST',
            headers: {
              authorization: this.target.token,
              'content-type': 'application/x-www-form-urlencoded',
            },
            body: JSON.stringify(body),
          },
        );
        await response.body.dump();
        if (response.statusCode === 200) {
          this.completions.set(jobId, (this.completions.get(jobId) ?? 0) + 1);
        } else {
          this.refusals.set(response.statusCode, (this.refusals.get(response.statusCode) ?? 0) + 1);
        }
        return;
      } catch {
        await pause(100);
      }
    }
  }
}
