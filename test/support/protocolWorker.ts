/**
 * A test worker that speaks the worker protocol over HTTP exactly as RunPod's Python SDK does
 * (docs/architecture.md#worker-protocol): raw token in Authorization, JSON bodies labelled
 * x-www-form-urlencoded, `isStream` on job-done. Tests drive it step by step or let it serve.
 */
export interface ProtocolJob {
  id: string;
  input: any;
}

export class ProtocolWorker {
  private readonly base: string;

  constructor(
    platformUrl: string,
    endpointId: string,
    readonly token: string,
    readonly workerId = `worker-${Math.random().toString(36).slice(2, 8)}`,
  ) {
    this.base = `${platformUrl}/v2/${endpointId}`;
  }

  private async request(method: string, path: string, body?: unknown, signal?: AbortSignal) {
    const response = await fetch(`${this.base}${path}`, {
      method,
      headers: {
        authorization: this.token,
        'content-type': 'application/x-www-form-urlencoded',
        charset: 'utf-8',
      },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal,
    });
    const text = await response.text();
    return { status: response.status, body: text.length > 0 ? JSON.parse(text) : undefined };
  }

  async take(signal?: AbortSignal): Promise<ProtocolJob | undefined> {
    const r = await this.request(
      'GET',
      `/job-take/${this.workerId}?gpu=none&job_in_progress=0`,
      undefined,
      signal,
    );
    if (r.status === 204) return undefined;
    if (r.status !== 200) throw new Error(`job-take answered ${r.status}: ${JSON.stringify(r.body)}`);
    return r.body as ProtocolJob;
  }

  async takeBatch(size: number): Promise<ProtocolJob[]> {
    const r = await this.request(
      'GET',
      `/job-take-batch/${this.workerId}?gpu=none&batch_size=${size}&job_in_progress=0`,
    );
    return r.status === 204 ? [] : (r.body as ProtocolJob[]);
  }

  done(jobId: string, body: unknown, isStream = false) {
    return this.request('POST', `/job-done/${this.workerId}/${jobId}?gpu=none&isStream=${isStream}`, body);
  }

  /** The ferry runtime's job-done-batch (a Ferry route): `body` as given, so tests can send bad ones. */
  doneBatch(body: unknown) {
    return this.request('POST', `/job-done-batch/${this.workerId}`, body);
  }

  stream(jobId: string, output: unknown) {
    return this.request('POST', `/job-stream/${this.workerId}/${jobId}?gpu=none&isStream=false`, { output });
  }

  ping(jobIds: string[]) {
    const q = jobIds.length > 0 ? `&job_id=${jobIds.join(',')}` : '';
    return this.request('GET', `/ping/${this.workerId}?gpu=none${q}&runpod_version=1.12.0`);
  }

  async jobsToStop(): Promise<string[]> {
    const r = await this.request('GET', `/job-stop/${this.workerId}?gpu=none`);
    return r.status === 204 ? [] : (r.body.jobsToStop as string[]);
  }

  /**
   * Serves until `stop()`: each job's input decides what happens. `{echo}` completes with it,
   * `{fail}` fails, `{chunks: [...]}` streams them then ends, `{sleepMs}` waits first.
   */
  serve(): { stop(): Promise<void> } {
    const abort = new AbortController();
    const loop = (async () => {
      while (!abort.signal.aborted) {
        let job: ProtocolJob | undefined;
        try {
          job = await this.take(abort.signal);
        } catch {
          if (abort.signal.aborted) return;
          await new Promise((r) => setTimeout(r, 50));
          continue;
        }
        if (!job) continue;
        const input = job.input ?? {};
        if (input.sleepMs) await new Promise((r) => setTimeout(r, input.sleepMs));
        if (input.fail) {
          await this.done(job.id, { error: String(input.fail) });
        } else if (Array.isArray(input.chunks)) {
          for (const chunk of input.chunks) await this.stream(job.id, chunk);
          await this.done(job.id, { output: input.chunks }, true);
        } else {
          await this.done(job.id, { output: input.echo ?? input });
        }
      }
    })();
    return {
      stop: async () => {
        abort.abort();
        await loop.catch(() => {});
      },
    };
  }
}
