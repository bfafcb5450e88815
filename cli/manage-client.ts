/**
 * The CLI's client of the management API (core/manage.ts): `ferry logs` and `ferry dev` read job
 * logs through it, the same way for both providers (local: the running `ferry serve`, or the platform
 * of the `ferry dev` running in the project folder; AWS: the API Gateway in front of the API Lambda).
 */
import { livePrefix } from '../core/deployment.js';
import { FerryError } from '../core/errors.js';
import { printable } from '../core/log.js';
import { managePrefix, type WireLogLine } from '../core/manage.js';
import type { EndpointRecord } from '../core/ports.js';

/** The platform is busy (429, or 503): try again after `retryAfterMs` (its Retry-After). */
export class BusyError extends FerryError {
  constructor(
    message: string,
    readonly retryAfterMs: number,
  ) {
    super('too_many_requests', message);
  }
}

export class ManageClient {
  constructor(
    /** The platform's origin, e.g. `http://127.0.0.1:8888` or `https://abc.execute-api.../prod`. */
    private readonly baseUrl: string,
    private readonly apiKey: string,
  ) {}

  /** The origin of an API URL that ends in `/v2` (the AWS ApiUrl output), or the URL itself. */
  static originOf(apiUrl: string): string {
    return apiUrl.replace(/\/+$/, '').replace(/\/v2$/, '');
  }

  async get<T>(path: string, query: Record<string, string | number | undefined> = {}): Promise<T> {
    const params = new URLSearchParams();
    for (const [name, value] of Object.entries(query))
      if (value !== undefined) params.set(name, String(value));
    const qs = params.toString();
    const url = `${this.baseUrl}${managePrefix}${path}${qs ? `?${qs}` : ''}`;
    let response: Response;
    try {
      response = await fetch(url, { headers: { authorization: `Bearer ${this.apiKey}` } });
    } catch (error) {
      throw new FerryError('failed', `Cannot reach ${this.baseUrl}: ${(error as Error).message}`, {
        hint: 'Is the platform running? (`ferry serve`, or deploy to AWS first)',
      });
    }
    const text = await response.text();
    let body: unknown;
    try {
      body = text ? JSON.parse(text) : undefined;
    } catch {
      body = undefined;
    }
    if (!response.ok) {
      const message = (body as { error?: string } | undefined)?.error ?? `HTTP ${response.status}`;
      if (response.status === 429 || response.status === 503) {
        const seconds = Number(response.headers.get('retry-after'));
        throw new BusyError(message, Number.isFinite(seconds) && seconds > 0 ? seconds * 1000 : 5_000);
      }
      const code =
        response.status === 401
          ? 'unauthorized'
          : response.status === 404
            ? 'not_found'
            : response.status < 500
              ? 'bad_request'
              : 'failed';
      throw new FerryError(code, message, {
        hint: response.status === 401 ? 'Set FERRY_API_KEY to a key this platform accepts.' : undefined,
      });
    }
    return body as T;
  }

  /** The platform's endpoints (their id, name, app and environment, with health and scaling state). */
  endpoints() {
    return this.get<{ endpoints: EndpointName[] }>('/endpoints');
  }

  logs(
    endpointId: string,
    query: { job?: string; since?: number; after?: string; limit?: number; follow?: '1' },
  ) {
    // `more` and `ended` are absent from a platform older than this client.
    return this.get<{ lines: WireLogLine[]; next: string; more?: boolean; ended?: boolean }>(
      `/endpoints/${encodeURIComponent(endpointId)}/logs`,
      query,
    );
  }
}

/** What names an endpoint: enough to find one by id or name (resolveEndpoint). */
export type EndpointName = Pick<EndpointRecord, 'id' | 'name' | 'app' | 'env'>;

/** Whether `record` is in the app and environment `scope` names (an unnamed one is any). */
export function inScope(
  record: Pick<EndpointRecord, 'app' | 'env'>,
  scope: { app?: string | undefined; env?: string | undefined },
): boolean {
  return (
    (scope.app === undefined || record.app === scope.app) &&
    (scope.env === undefined || record.env === scope.env)
  );
}

/** What `--app`/`--env` narrowed a lookup to, in words: "app 'shop', environment 'prod'". */
export function scopeWords(scope: { app?: string | undefined; env?: string | undefined }): string {
  return [
    ...(scope.app !== undefined ? [`app '${scope.app}'`] : []),
    ...(scope.env !== undefined ? [`environment '${scope.env}'`] : []),
  ].join(', ');
}

/**
 * A name that names no endpoint where `scope` looked, but names `elsewhere`: a usage error (exit 2)
 * that says where it is and how to address it there, rather than that it names nothing.
 */
export function notInScope(
  wanted: string,
  scope: { app?: string | undefined; env?: string | undefined },
  elsewhere: readonly EndpointName[],
): FerryError {
  const apps = [...new Set(elsewhere.map((r) => r.app))];
  const how =
    apps.length === 1
      ? `pass --app ${apps[0]}${scope.env !== undefined ? ' and its --env' : ''}, or an id`
      : 'pass its --app (and --env), or an id';
  return new FerryError('usage', `No endpoint named '${wanted}' in ${scopeWords(scope)}`, {
    hint: `'${wanted}' is deployed in ${elsewhere.map((r) => `${r.app}/${r.env} (${r.id})`).join(', ')}: ${how}.`,
  });
}

/** Whether `wanted` is the endpoint's name (a `ferry dev` endpoint's without its `live-` prefix too). */
export const namedAs = (record: EndpointName, wanted: string): boolean =>
  record.name === wanted || record.name === `${livePrefix}${wanted}`;

/** An endpoint by id, or by name when exactly one endpoint has it (else a usage error that lists them). */
export function resolveEndpoint<R extends EndpointName>(
  records: readonly R[],
  wanted: string,
  filter: { app?: string; env?: string } = {},
): R {
  const byId = records.find((r) => r.id === wanted);
  if (byId) return byId;
  const anywhere = records.filter((r) => namedAs(r, wanted));
  const named = anywhere.filter((r) => inScope(r, filter));
  if (named.length === 1) return named[0]!;
  if (named.length === 0) {
    // The name is right, --app or --env is not: say so, and where the name is.
    if (anywhere.length > 0) throw notInScope(wanted, filter, anywhere);
    throw new FerryError('usage', `No endpoint has the id or name '${wanted}'`, {
      hint:
        records.length > 0
          ? `Known: ${records.map((r) => `${r.name} (${r.id})`).join(', ')}`
          : 'Deploy one first.',
    });
  }
  throw new FerryError('usage', `Several endpoints are named '${wanted}'`, {
    hint: `Pass an id: ${named.map((r) => `${r.id} (${r.app}/${r.env})`).join(', ')}, or --app/--env.`,
  });
}

/** `10m`, `90s`, `2h`, `1d` or an ISO date → epoch ms (relative to `nowMs`). */
export function sinceMs(value: string, nowMs: number): number {
  // `-5m` (five minutes ago) reads as 5m: the minus says what `--since` means anyway.
  const relative = /^-?(\d+)(ms|s|m|h|d)$/.exec(value.trim());
  if (relative) {
    const unit = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 }[
      relative[2] as 'ms' | 's' | 'm' | 'h' | 'd'
    ];
    return nowMs - Number(relative[1]) * unit;
  }
  const absolute = Date.parse(value);
  if (Number.isFinite(absolute)) return absolute;
  throw new FerryError('usage', `--since takes a duration like 10m, 2h or 1d, or a date; got '${value}'`, {
    hint: 'For example --since 10m (the last ten minutes) or --since 2026-01-31T09:00:00Z.',
  });
}

/**
 * One line for a terminal: time, where it came from, the text. A worker's own line names the worker
 * (on AWS, a task's container names itself and the task: `worker <task id>`, `agent <task id>`).
 */
export function formatLine(line: WireLogLine, label: string): string {
  const time = new Date(line.atMs).toISOString().slice(11, 23);
  const where = line.jobId
    ? `${label} ${line.jobId}`
    : `${label} ${line.container ?? 'worker'} ${line.workerId}`;
  // The text is user code's: its control characters are written out (core/log.ts printable).
  return `${time} [${where}] ${printable(line.text)}`;
}
