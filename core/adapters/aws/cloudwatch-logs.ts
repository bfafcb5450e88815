/**
 * Job and worker logs in CloudWatch Logs (docs/observability.md). One log group for the platform's
 * job output; each writer (an agent, one per ECS task) has its own log stream. Every event is one
 * JSON object — `{"endpointId", "workerId", "jobId", "stream", "text"}` — so Logs Insights discovers
 * the fields and `filter jobId = "…"` works without parsing
 * (https://docs.aws.amazon.com/AmazonCloudWatch/latest/logs/CWL_AnalyzeLogData-discoverable-fields.html),
 * and FilterLogEvents takes a JSON filter pattern `{ $.jobId = "…" }`
 * (https://docs.aws.amazon.com/AmazonCloudWatch/latest/logs/FilterAndPatternSyntax.html).
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
  type InputLogEvent,
  PutLogEventsCommand,
} from '@aws-sdk/client-cloudwatch-logs';
import { badRequest } from '../../errors.js';
import type { LogLine, LogQuery, LogStore } from '../../ports.js';

/** PutLogEvents' limits (see above). */
export const putLogEventsLimits = {
  events: 10_000,
  bytes: 1_048_576,
  overheadBytesPerEvent: 26,
  spanMs: 24 * 3_600_000,
} as const;

/**
 * Every log stream of an endpoint's writers starts with this; an agent may write only such streams
 * (its role's grant, infra/constructs/service.ts). So the stream name, not the event's own
 * `endpointId`, which is whatever the writer put there, says whose line it is, and a read filters by
 * it: an agent that wrote `{"endpointId": "<another>"}` into its own stream must not forge lines in
 * another endpoint's job logs.
 */
export const jobLogStreamPrefix = (endpointId: string): string => `${endpointId}/`;

/** Ids that go into a filter pattern as they are (quotes or backslashes would change its meaning). */
const safeId = /^[A-Za-z0-9._:-]{1,256}$/;

interface Cursor {
  /** The last event's timestamp; the next read starts there (FilterLogEvents' startTime is inclusive). */
  t: number;
  /** The events at exactly `t` already handed out, so they are not repeated. */
  ids: string[];
}

export interface CloudWatchLogStoreOptions {
  client: CloudWatchLogsClient;
  logGroup: string;
  /** This writer's stream (created on first write); readers need none. */
  logStream?: string;
}

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

  async read(query: LogQuery): Promise<{ lines: LogLine[]; next: string }> {
    const cursor = decodeCursor(query.after);
    if (!safeId.test(query.endpointId) || (query.jobId !== undefined && !safeId.test(query.jobId))) {
      return { lines: [], next: query.after ?? '' };
    }
    const filterPattern =
      query.jobId !== undefined
        ? `{ ($.endpointId = "${query.endpointId}") && ($.jobId = "${query.jobId}") }`
        : `{ $.endpointId = "${query.endpointId}" }`;
    const startTime = Math.max(cursor?.t ?? 0, query.sinceMs ?? 0) || undefined;
    const seen = new Set(cursor?.ids ?? []);
    const lines: LogLine[] = [];
    let last: Cursor | undefined = cursor;
    let nextToken: string | undefined;
    do {
      const page = await this.options.client.send(
        new FilterLogEventsCommand({
          logGroupName: this.options.logGroup,
          // "Filters the results to include only events from log streams that have names starting
          // with this prefix" (https://docs.aws.amazon.com/AmazonCloudWatchLogs/latest/APIReference/API_FilterLogEvents.html).
          logStreamNamePrefix: jobLogStreamPrefix(query.endpointId),
          filterPattern,
          startTime,
          limit: Math.min(10_000, query.limit - lines.length + seen.size),
          nextToken,
        }),
      );
      for (const event of page.events ?? []) {
        if (event.eventId && cursor && event.timestamp === cursor.t && seen.has(event.eventId)) continue;
        const line = lineOf(event.message, event.timestamp);
        if (!line) continue;
        lines.push(line);
        const t = event.timestamp ?? 0;
        // Ids at the same millisecond, so a resumed read skips them (bounded: the cursor travels in a URL).
        last = {
          t,
          ids: last && last.t === t ? [...last.ids, event.eventId ?? ''].slice(-100) : [event.eventId ?? ''],
        };
        if (lines.length >= query.limit) break;
      }
      nextToken = page.nextToken;
    } while (nextToken && lines.length < query.limit);
    return { lines, next: last ? encodeCursor(last) : (query.after ?? '') };
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

function lineOf(message: string | undefined, timestamp: number | undefined): LogLine | undefined {
  try {
    const value = JSON.parse(message ?? '') as Partial<LogLine>;
    if (typeof value.endpointId !== 'string' || typeof value.text !== 'string') return undefined;
    return {
      atMs: timestamp ?? 0,
      endpointId: value.endpointId,
      workerId: String(value.workerId ?? ''),
      ...(typeof value.jobId === 'string' ? { jobId: value.jobId } : {}),
      stream: value.stream === 'stderr' ? 'stderr' : 'stdout',
      text: value.text,
    };
  } catch {
    return undefined;
  }
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

function encodeCursor(cursor: Cursor): string {
  return Buffer.from(JSON.stringify(cursor)).toString('base64url');
}

function decodeCursor(after: string | undefined): Cursor | undefined {
  if (after === undefined || after === '') return undefined;
  try {
    const value = JSON.parse(Buffer.from(after, 'base64url').toString('utf8')) as Cursor;
    if (
      Number.isSafeInteger(value.t) &&
      Array.isArray(value.ids) &&
      value.ids.every((id) => typeof id === 'string')
    )
      return { t: value.t, ids: value.ids.slice(-100) };
  } catch {
    // fall through
  }
  throw badRequest('after is not a cursor this API handed out');
}
