/**
 * The load the benches put on a platform through its job API, one copy for bench/run.ts and
 * bench/ab.ts (and the worker wait for bench/python-runtime.ts): /run loops on kept-alive sockets,
 * the wait until health counts the jobs COMPLETED, and the wait for an endpoint's workers.
 */
import { api, benchKey } from './faults.js';
import { jsonPoster } from './http.js';
import { pause, percentile } from './util.js';

/** The echo input: a short text, or `payloadBytes` of it for the large-input point of the curve. */
export const echoText = (payloadBytes: number) => (payloadBytes > 0 ? 'x'.repeat(payloadBytes) : 'echo me');

/**
 * Submits jobs with `clients` parallel /run loops while `more(submitted)` holds, then waits until
 * health counts them all COMPLETED. Answers how many, and the ms both took.
 */
export async function runJobs(
  url: string,
  endpointId: string,
  more: (submitted: number) => boolean,
  clients: number,
  text: string,
) {
  const health = async () => (await api(url, 'GET', `/${endpointId}/health`)).body;
  const before = (await health()).jobs as { completed: number; failed: number };
  const began = performance.now();
  const next = await postInLoops(url, { authorization: `Bearer ${benchKey}` }, `/v2/${endpointId}/run`, {
    clients,
    more,
    text,
  });
  const submittedMs = performance.now() - began;
  for (;;) {
    const now = await health();
    // Every job must complete: a failed one would never count, and the wait would never end.
    if (now.jobs.failed > before.failed) {
      throw new Error(
        `${now.jobs.failed - before.failed} ${endpointId} jobs failed${now.problem ? `: ${now.problem.reason}` : ''}`,
      );
    }
    if (now.jobs.completed - before.completed >= next) break;
    await pause(50);
  }
  return { jobs: next, submittedMs, ms: performance.now() - began };
}

/**
 * `clients` loops, each posting the echo body `{input: {i, text}}` to `path` and waiting for its
 * answer before the next, while `more(sent)`; one keep-alive socket per loop. Answers how many were
 * sent; any answer but 200 stops the run. With `latenciesMs`, each answer's time is pushed there.
 */
export async function postInLoops(
  baseUrl: string,
  headers: Record<string, string>,
  path: string,
  load: { clients: number; more: (sent: number) => boolean; text: string; latenciesMs?: number[] },
): Promise<number> {
  const poster = jsonPoster(baseUrl, headers, load.clients);
  let sent = 0;
  try {
    await Promise.all(
      Array.from({ length: load.clients }, async () => {
        while (load.more(sent)) {
          sent++;
          const began = performance.now();
          const r = await poster.post(path, { input: { i: sent, text: load.text } });
          load.latenciesMs?.push(performance.now() - began);
          if (r.status !== 200) throw new Error(`${path} answered ${r.status}: ${JSON.stringify(r.body)}`);
        }
      }),
    );
  } finally {
    await poster.close();
  }
  return sent;
}

/**
 * `clients` runsync loops of the echo input on kept-alive sockets while `more(sent)`: how many were
 * answered, the ms they took, and the answers' p50 in ms.
 */
export async function runsyncLoops(
  url: string,
  endpointId: string,
  clients: number,
  more: (sent: number) => boolean,
) {
  const latenciesMs: number[] = [];
  const began = performance.now();
  const count = await postInLoops(
    url,
    { authorization: `Bearer ${benchKey}` },
    `/v2/${endpointId}/runsync?wait=60000`,
    {
      clients,
      more,
      text: echoText(0),
      latenciesMs,
    },
  );
  const ms = performance.now() - began;
  return {
    count,
    ms,
    p50Ms: percentile(
      latenciesMs.sort((a, b) => a - b),
      50,
    ),
  };
}

/** Waits until health counts `count` workers (idle or running) for the endpoint, polling every `pollMs`. */
export async function waitWorkers(
  url: string,
  endpointId: string,
  count: number,
  timeoutMs = 60_000,
  pollMs = 100,
) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const w = (await api(url, 'GET', `/${endpointId}/health`)).body.workers;
    if (w.idle + w.running === count) return;
    await pause(pollMs);
  }
  throw new Error(`${endpointId} did not reach ${count} workers in ${timeoutMs} ms`);
}
