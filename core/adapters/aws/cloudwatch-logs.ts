/**
 * Job and worker logs in CloudWatch Logs (docs/observability.md). One log group for the platform's
 * output, with two kinds of stream under each endpoint's prefix `<endpointId>/`:
 *
 * - job lines: each writer (an agent, one per ECS task) has its own stream `<endpointId>/<uuid>`.
 *   Every event is one JSON object — `{"endpointId", "workerId", "jobId", "stream", "text"}` — so
 *   Logs Insights discovers the fields and `filter jobId = "…"` works without parsing
 *   (https://docs.aws.amazon.com/AmazonCloudWatch/latest/logs/CWL_AnalyzeLogData-discoverable-fields.html),
 *   and FilterLogEvents takes a JSON filter pattern `{ $.jobId = "…" }`
 *   (https://docs.aws.amazon.com/AmazonCloudWatch/latest/logs/FilterAndPatternSyntax.html).
 * - the task's containers' own output (an import error before the runtime starts, a crash, an image
 *   endpoint's server, everything of a load-balanced endpoint): the ECS `awslogs` driver, with
 *   `awslogs-stream-prefix` the endpoint id, writes it raw, a line an event, to
 *   `<endpointId>/<container name>/<ECS task id>` ("the log stream takes the following format:
 *   prefix-name/container-name/ecs-task-id",
 *   https://docs.aws.amazon.com/cdk/api/v2/docs/aws-cdk-lib.aws_ecs.AwsLogDriverProps.html, quoting
 *   https://docs.aws.amazon.com/AmazonECS/latest/developerguide/using_awslogs.html).
 *
 * A read tells the two apart by the stream's name, never by the event: user code decides what the
 * worker container prints, JSON that looks like a job line included (`streamOf`).
 *
 * Retention: the log group's retention (infra/) is the longest a job's result is kept; reads go
 * through the management API, which shows a job's lines only while the job itself is readable.
 *
 * PutLogEvents rules (https://docs.aws.amazon.com/AmazonCloudWatchLogs/latest/APIReference/API_PutLogEvents.html):
 * events in chronological order, at most 10,000 per call and 1,048,576 bytes counting 26 bytes per
 * event, a batch spanning at most 24 h; sequence tokens are ignored now, so writers need no lock.
 */
import {
  type CloudWatchLogsClient,
  CreateLogStreamCommand,
  FilterLogEventsCommand,
  type FilterLogEventsCommandOutput,
  type InputLogEvent,
  PutLogEventsCommand,
} from '@aws-sdk/client-cloudwatch-logs';
import { badRequest, FerryError, retryAfterSec } from '../../errors.js';
import { metricsLineKey } from '../../metrics.js';
import type { LogLine, LogPage, LogQuery, LogStore, TaskContainer } from '../../ports.js';

/** PutLogEvents' limits (see above). */
export const putLogEventsLimits = {
  events: 10_000,
  bytes: 1_048_576,
  overheadBytesPerEvent: 26,
  spanMs: 24 * 3_600_000,
} as const;

/**
 * Every log stream of an endpoint's writers starts with this; its agent and its tasks' awslogs driver
 * may write only such streams (the agent role's and the execution role's grants,
 * infra/constructs/service.ts). So the stream name, not the event's own `endpointId`, which is
 * whatever the writer put there, says whose line it is, and a read filters by it: an agent that wrote
 * `{"endpointId": "<another>"}` into its own stream must not forge lines in another endpoint's logs.
 */
export const jobLogStreamPrefix = (endpointId: string): string => `${endpointId}/`;

/** The containers of an endpoint's ECS task, by their names in the task definition (infra/constructs/service.ts). */
export const taskContainers: readonly TaskContainer[] = ['artifact', 'agent', 'worker'];

/**
 * The `awslogs-stream-prefix` of an endpoint's containers (infra/constructs/service.ts): the driver
 * names each stream `<prefix>/<container name>/<task id>`, so they fall under
 * `jobLogStreamPrefix(endpointId)`, beside the agents' job-line streams, and IAM fences both alike.
 */
export const containerLogStreamPrefix = (endpointId: string): string => endpointId;

/**
 * What a stream of `endpointId` holds, by its name: `job` for an agent's stream of JSON job lines
 * (`<endpointId>/<one segment>`, as worker-image/agent/main.ts names it), `container` for the
 * awslogs driver's stream of a task's container (`<endpointId>/<container>/<task id>`), undefined
 * for anything else (not read). Only the platform's writers name streams: the awslogs driver (the
 * task's execution role) and the agent (its scoped role), both fenced to the endpoint's prefix, so no
 * user code can put a line into a stream of the other kind.
 */
export function streamOf(
  endpointId: string,
  logStreamName: string | undefined,
): { kind: 'job' } | { kind: 'container'; container: TaskContainer; taskId: string } | undefined {
  const prefix = jobLogStreamPrefix(endpointId);
  if (!logStreamName?.startsWith(prefix)) return undefined;
  const parts = logStreamName.slice(prefix.length).split('/');
  if (parts.length === 1 && parts[0]) return { kind: 'job' };
  const [container, taskId] = parts;
  if (parts.length === 2 && taskId && taskContainers.includes(container as TaskContainer))
    return { kind: 'container', container: container as TaskContainer, taskId };
  return undefined;
}

/**
 * The regular expression (its source, for Logs Insights' `filter @logStream like /…/`) that matches
 * the awslogs streams of one container of the endpoint's tasks and nothing else: anchored, so
 * another endpoint whose id ends with this one's does not match, and with the container's segment, so
 * the worker's streams never match the agent's. The infra dashboard picks the agent's metrics lines
 * with it (core/metrics.ts): a worker chooses what it prints, never the stream it lands in. Endpoint
 * ids are lowercase letters and digits (checked at synth), nothing a regular expression reads as an
 * operator.
 */
export function containerStreamRegex(endpointId: string, container: TaskContainer): string {
  return `^${containerLogStreamPrefix(endpointId)}\\/${container}\\/`;
}

/** Ids that go into a filter pattern as they are (quotes or backslashes would change its meaning). */
const safeId = /^[A-Za-z0-9._:-]{1,256}$/;

/**
 * How long after a line's timestamp a follower waits before handing it out. Each task writes its own
 * stream, after the runtime's batching (0.5 s, ferry/logs.py), the agent's PutLogEvents and the few
 * seconds CloudWatch takes to make an event searchable (docs/observability.md); and PutLogEvents
 * takes events stamped long before (only "Events older than 14 days or preceding the log group's
 * retention period are rejected", API reference above), so across streams lines do not arrive in
 * timestamp order. A follower that moved its cursor to the newest line it saw would
 * pass over a line another task stamped earlier but delivered later; one that reads only up to
 * `now - followSettleMs` does not, unless a line is that late. 10 s is about twice what the path
 * above takes when nothing is wrong; a live view shows lines that much later.
 */
export const followSettleMs = 10_000;

/**
 * FilterLogEvents calls one read makes at most; the read then answers `more` with a cursor that goes
 * on where the scan stopped. FilterLogEvents has "a default quota of 5 transactions per second (TPS)
 * per account or AWS Region", a hard limit that does "not qualify for a limit increase"
 * (https://repost.aws/knowledge-center/cloudwatch-logs-throttling), shared by every reader in the
 * account; and a scan of a sparse range may take many calls, since "This operation can return empty
 * results while there are more log events available through the token"
 * (https://docs.aws.amazon.com/AmazonCloudWatchLogs/latest/APIReference/API_FilterLogEvents.html).
 */
export const filterCallsPerRead = 4;

/** FilterLogEvents' own page cap: "up to 10,000 log events" (API reference above). */
const filterPageEvents = 10_000;

/**
 * Where a read resumes. FilterLogEvents returns events "sorted by event timestamp, the timestamp when
 * the event was ingested by CloudWatch Logs, and the ID of the PutLogEvents request" (API reference
 * above): within one millisecond the events already handed out come first, and a later read from
 * that millisecond (startTime is inclusive) skips the first `n` of them. A count, not the events'
 * ids: one `print()` of many lines stamps them all with the same millisecond, and a capped id list
 * made a page that ended inside such a millisecond start over at its first lines, for ever.
 */
interface Cursor {
  /** The timestamp the next read starts at. */
  t: number;
  /** How many events at `t` were handed out already (skipped by the next read). */
  n: number;
  /**
   * A scan the call cap stopped between pages: FilterLogEvents' nextToken ("The token expires after
   * 24 hours") with the time range it belongs to. The next read goes on with it instead of scanning
   * again from `t`.
   */
  scan?: { token: string; from?: number | undefined; to?: number | undefined };
}

export interface CloudWatchLogStoreOptions {
  client: CloudWatchLogsClient;
  logGroup: string;
  /** This writer's stream (created on first write); readers need none. */
  logStream?: string;
  /** The clock reads are settled against (tests pass a fake one). */
  now?: () => number;
}

/** Errors with which CloudWatch Logs says "too many calls" (https://repost.aws/knowledge-center/cloudwatch-logs-throttling). */
const throttlingErrors = new Set(['ThrottlingException', 'RequestLimitExceeded']);

export class CloudWatchLogStore implements LogStore {
  private streamReady: Promise<void> | undefined;

  constructor(private readonly options: CloudWatchLogStoreOptions) {}

  async append(lines: readonly LogLine[]): Promise<void> {
    if (lines.length === 0) return;
    const stream = this.options.logStream;
    if (!stream) throw new Error('CloudWatchLogStore: a log stream is needed to write');
    await this.ensureStream(stream);
    for (const batch of batchesOf(lines)) {
      await this.options.client.send(
        new PutLogEventsCommand({
          logGroupName: this.options.logGroup,
          logStreamName: stream,
          logEvents: batch,
        }),
      );
    }
  }

  async read(query: LogQuery): Promise<LogPage> {
    const cursor = decodeCursor(query.after);
    if (!safeId.test(query.endpointId) || (query.jobId !== undefined && !safeId.test(query.jobId))) {
      return { lines: [], next: query.after ?? '', more: false, ended: query.untilMs !== undefined };
    }
    // A job's lines: its agent's JSON events (a container's raw line never matches a JSON pattern;
    // one that prints JSON with this job id is left out by its stream, below). An endpoint's: every
    // event of its streams ("If not provided, all the events are matched", API reference below),
    // the containers' raw lines too; what each event is, its stream's name says.
    const filterPattern =
      query.jobId !== undefined
        ? `{ ($.endpointId = "${query.endpointId}") && ($.jobId = "${query.jobId}") }`
        : undefined;
    // Events up to here are where they will stay in FilterLogEvents' order.
    const settled = (this.options.now ?? Date.now)() - followSettleMs;
    const end = query.follow ? Math.min(query.untilMs ?? settled, settled) : query.untilMs;
    const fresh = {
      from: Math.max(cursor?.t ?? 0, query.sinceMs ?? 0) || undefined,
      to: end,
    };
    let range = cursor?.scan ?? fresh;
    let nextToken = cursor?.scan?.token;
    // A fresh scan from the cursor's millisecond passes over the events handed out there already.
    let skip = nextToken === undefined && cursor && (range.from ?? 0) <= cursor.t ? cursor.n : 0;
    let at: { t: number; n: number } | undefined = cursor && { t: cursor.t, n: cursor.n };
    const lines: LogLine[] = [];
    let calls = 0;
    let answered = 0;
    while (range.to === undefined || range.from === undefined || range.from <= range.to) {
      // The cap: a read that has not found its end answers what it has and where to go on.
      if (calls >= filterCallsPerRead)
        return { lines, next: encodeCursor(at, nextToken, range), more: true, ended: false };
      let page: FilterLogEventsCommandOutput;
      try {
        calls++;
        page = await this.options.client.send(
          new FilterLogEventsCommand({
            logGroupName: this.options.logGroup,
            // "Filters the results to include only events from log streams that have names starting
            // with this prefix" (https://docs.aws.amazon.com/AmazonCloudWatchLogs/latest/APIReference/API_FilterLogEvents.html).
            logStreamNamePrefix: jobLogStreamPrefix(query.endpointId),
            filterPattern,
            startTime: range.from,
            // "Events with a timestamp later than this time are not returned" (API reference above).
            endTime: range.to,
            limit: Math.min(filterPageEvents, query.limit - lines.length + skip),
            nextToken,
          }),
        );
        answered++;
      } catch (error) {
        const name = (error as { name?: string } | undefined)?.name ?? '';
        if (answered === 0 && nextToken !== undefined && name === 'InvalidParameterException') {
          // The cursor's token expired ("after 24 hours"): scan again from the cursor's place.
          range = fresh;
          nextToken = undefined;
          skip = cursor && (range.from ?? 0) <= cursor.t ? cursor.n : 0;
          continue;
        }
        if (!throttlingErrors.has(name)) throw error;
        // What was read before the quota ran out goes out; the caller reads on later.
        if (answered > 0)
          return { lines, next: encodeCursor(at, nextToken, range), more: true, ended: false };
        throw new FerryError(
          'too_many_requests',
          `Too many log reads in this AWS account right now (CloudWatch Logs allows 5 a second); try again in ${retryAfterSec} s`,
          { cause: error },
        );
      }
      const events = page.events ?? [];
      let taken = 0;
      for (const event of events) {
        if (lines.length >= query.limit) break;
        taken++;
        const t = event.timestamp ?? 0;
        if (skip > 0 && cursor && t === cursor.t) {
          skip--;
          continue;
        }
        skip = 0;
        at = at && at.t === t ? { t, n: at.n + 1 } : { t, n: 1 };
        const line = lineOf(query, event);
        if (line) lines.push(line);
      }
      // The page is full inside a FilterLogEvents page: its token would pass over the rest of that
      // page, so the next read starts from `at` instead.
      if (taken < events.length) return { lines, next: encodeCursor(at), more: true, ended: false };
      nextToken = page.nextToken;
      if (!nextToken) break;
      if (lines.length >= query.limit)
        return { lines, next: encodeCursor(at, nextToken, range), more: true, ended: false };
    }
    // The scan reached its end. Up to a settled end there is nothing left to find, so the next read
    // starts after it: a follower's poll then scans only what arrived since, not the whole range again.
    const scannedTo = range.to;
    if (scannedTo !== undefined && scannedTo <= settled && (!at || at.t <= scannedTo)) {
      at = { t: scannedTo + 1, n: 0 };
    }
    const ended = query.untilMs !== undefined && (scannedTo ?? Number.POSITIVE_INFINITY) >= query.untilMs;
    return {
      lines,
      next: encodeCursor(at) || (query.after ?? ''),
      more: false,
      ended: ended && query.untilMs! <= settled,
    };
  }

  private ensureStream(stream: string): Promise<void> {
    this.streamReady ??= this.options.client
      .send(new CreateLogStreamCommand({ logGroupName: this.options.logGroup, logStreamName: stream }))
      .then(
        () => undefined,
        (error: { name?: string }) => {
          if (error?.name === 'ResourceAlreadyExistsException') return;
          this.streamReady = undefined;
          throw error;
        },
      );
    return this.streamReady;
  }
}

/** The event message: the line as JSON, with the job id as its own field. */
export function messageOf(line: LogLine): string {
  return JSON.stringify({
    endpointId: line.endpointId,
    workerId: line.workerId,
    ...(line.jobId !== undefined ? { jobId: line.jobId } : {}),
    stream: line.stream,
    text: line.text,
  });
}

/**
 * The line an event of the query's streams stands for, or undefined when it is not one to show: an
 * event of a stream `streamOf` does not know; on an agent's stream, one that is not a job line of
 * this endpoint (and job); on a container's stream, every event of a job's read, and the agent
 * container's metrics lines (core/metrics.ts, one per ended job; only the agent prints them, so
 * only its container's are left out: a worker's output is shown as it was printed).
 */
function lineOf(
  query: Pick<LogQuery, 'endpointId' | 'jobId'>,
  event: { logStreamName?: string | undefined; message?: string | undefined; timestamp?: number | undefined },
): LogLine | undefined {
  const stream = streamOf(query.endpointId, event.logStreamName);
  const message = event.message ?? '';
  const atMs = event.timestamp ?? 0;
  if (stream?.kind === 'container') {
    if (query.jobId !== undefined) return undefined;
    if (stream.container === 'agent' && isMetricsLine(message)) return undefined;
    // awslogs keeps no mark of stdout or stderr: each line of either is an event like any other.
    return {
      atMs,
      endpointId: query.endpointId,
      workerId: stream.taskId,
      stream: 'stdout',
      container: stream.container,
      text: message,
    };
  }
  if (stream?.kind !== 'job') return undefined;
  const value = parsed(message) as Partial<LogLine> | undefined;
  // Whatever an agent wrote into its event: the stream fences it to its own endpoint's lines.
  if (value?.endpointId !== query.endpointId || typeof value.text !== 'string') return undefined;
  if (query.jobId !== undefined && value.jobId !== query.jobId) return undefined;
  return {
    atMs,
    endpointId: value.endpointId,
    workerId: String(value.workerId ?? ''),
    ...(typeof value.jobId === 'string' ? { jobId: value.jobId } : {}),
    stream: value.stream === 'stderr' ? 'stderr' : 'stdout',
    text: value.text,
  };
}

/** An event's message as a JSON object, or undefined. */
function parsed(message: string): Record<string, unknown> | undefined {
  try {
    const value: unknown = JSON.parse(message);
    return value !== null && typeof value === 'object' && !Array.isArray(value)
      ? (value as Record<string, unknown>)
      : undefined;
  } catch {
    return undefined;
  }
}

/** A metrics line of the agent's: a JSON object with `metricsLineKey` (core/metrics.ts). */
function isMetricsLine(message: string): boolean {
  const doc = message.trimStart().startsWith('{') ? parsed(message) : undefined;
  return doc !== undefined && Object.hasOwn(doc, metricsLineKey);
}

/** Lines as PutLogEvents batches: sorted by time, within the count, byte and 24 h limits. */
export function batchesOf(lines: readonly LogLine[]): InputLogEvent[][] {
  const events = [...lines]
    .sort((a, b) => a.atMs - b.atMs)
    .map((line) => ({ timestamp: line.atMs, message: messageOf(line) }));
  const batches: InputLogEvent[][] = [];
  let batch: InputLogEvent[] = [];
  let bytes = 0;
  for (const event of events) {
    const size = Buffer.byteLength(event.message) + putLogEventsLimits.overheadBytesPerEvent;
    const first = batch[0];
    if (
      first &&
      (batch.length >= putLogEventsLimits.events ||
        bytes + size > putLogEventsLimits.bytes ||
        event.timestamp - (first.timestamp ?? 0) > putLogEventsLimits.spanMs)
    ) {
      batches.push(batch);
      batch = [];
      bytes = 0;
    }
    batch.push(event);
    bytes += size;
  }
  if (batch.length > 0) batches.push(batch);
  return batches;
}

function encodeCursor(
  at: { t: number; n: number } | undefined,
  token?: string,
  range?: { from?: number | undefined; to?: number | undefined },
): string {
  if (!at && token === undefined) return '';
  const cursor: Cursor = {
    t: at?.t ?? range?.from ?? 0,
    n: at?.n ?? 0,
    ...(token !== undefined ? { scan: { token, from: range?.from, to: range?.to } } : {}),
  };
  return Buffer.from(JSON.stringify(cursor)).toString('base64url');
}

const optionalMs = (value: unknown) => value === undefined || Number.isSafeInteger(value);

/** A cursor this store handed out; one from before counts (`{t, ids}`) reads as `n = ids.length`. */
function decodeCursor(after: string | undefined): Cursor | undefined {
  if (after === undefined || after === '') return undefined;
  try {
    const value = JSON.parse(Buffer.from(after, 'base64url').toString('utf8')) as Partial<Cursor> & {
      ids?: unknown;
    };
    if (!Number.isSafeInteger(value.t)) throw new Error('no t');
    // The ids of the events at `t` it had handed out: the first ones there, up to 100 of them.
    if (Array.isArray(value.ids)) return { t: value.t!, n: value.ids.length };
    if (!Number.isSafeInteger(value.n) || value.n! < 0) throw new Error('no n');
    const scan = value.scan;
    if (scan !== undefined) {
      if (typeof scan.token !== 'string' || !optionalMs(scan.from) || !optionalMs(scan.to))
        throw new Error('bad scan');
      return { t: value.t!, n: value.n!, scan: { token: scan.token, from: scan.from, to: scan.to } };
    }
    return { t: value.t!, n: value.n! };
  } catch {
    // fall through
  }
  throw badRequest('after is not a cursor this API handed out');
}
