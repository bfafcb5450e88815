/**
 * An in-memory CloudWatch Logs for tests: the three calls CloudWatchLogStore makes, with the rules
 * of the real service that matter to it (PutLogEvents: the group and stream must exist, events in
 * chronological order, at most 10,000 events and 1,048,576 bytes counting 26 per event; FilterLogEvents:
 * a stream name prefix, JSON filter patterns of `$.field = "value"` terms joined by && (which no
 * event that is not a JSON object matches), no pattern matching every event, startTime and
 * endTime inclusive, events in order of timestamp and then of ingestion, each with its stream's
 * name, pages; ThrottlingException when a test asks for it with `throttleFilter`). `awslogs` plays
 * the ECS awslogs driver: a container's raw lines into a stream it names. No
 * emulator for CloudWatch Logs runs here, so the AWS SDK's own command objects come in and the
 * answers have the SDK's shapes: the adapter is tested up to the SDK call.
 */
import {
  type CloudWatchLogsClient,
  CreateLogStreamCommand,
  FilterLogEventsCommand,
  PutLogEventsCommand,
} from '@aws-sdk/client-cloudwatch-logs';

interface StoredEvent {
  eventId: string;
  logStreamName: string;
  timestamp: number;
  ingestionTime: number;
  message: string;
}

class AwsLikeError extends Error {
  constructor(name: string, message: string) {
    super(message);
    this.name = name;
  }
}

export class FakeCloudWatchLogs {
  readonly groups = new Map<string, Map<string, StoredEvent[]>>();
  readonly calls: string[] = [];
  /** Every FilterLogEvents call's input, in order. */
  readonly filterInputs: FilterLogEventsCommand['input'][] = [];
  /** How many of the coming FilterLogEvents calls answer ThrottlingException (the account's 5 TPS quota). */
  throttleFilter = 0;
  private nextId = 1;

  constructor(groups: string[]) {
    for (const group of groups) this.groups.set(group, new Map());
  }

  /** Stands in for a CloudWatchLogsClient (only `send` is used). */
  asClient(): CloudWatchLogsClient {
    return {
      send: (command: unknown) => this.send(command),
      destroy: () => {},
    } as unknown as CloudWatchLogsClient;
  }

  /**
   * What the ECS `awslogs` driver does with a container's output: each line, as printed, one event of
   * the stream `<awslogs-stream-prefix>/<container name>/<task id>`, created on first use (through
   * the same CreateLogStream and PutLogEvents rules as any writer).
   */
  async awslogs(
    group: string,
    logStreamName: string,
    lines: { atMs: number; text: string }[],
  ): Promise<void> {
    if (!this.group(group).has(logStreamName))
      await this.send(new CreateLogStreamCommand({ logGroupName: group, logStreamName }));
    await this.send(
      new PutLogEventsCommand({
        logGroupName: group,
        logStreamName,
        logEvents: lines.map((l) => ({ timestamp: l.atMs, message: l.text })),
      }),
    );
  }

  events(group: string): StoredEvent[] {
    // "sorted by event timestamp, the timestamp when the event was ingested by CloudWatch Logs, and
    // the ID of the PutLogEvents request" (API_FilterLogEvents): here ids are given in ingestion order.
    return [...(this.groups.get(group)?.values() ?? [])]
      .flat()
      .sort((a, b) => a.timestamp - b.timestamp || a.eventId.localeCompare(b.eventId));
  }

  async send(command: unknown): Promise<unknown> {
    if (command instanceof CreateLogStreamCommand) {
      this.calls.push('CreateLogStream');
      const { logGroupName, logStreamName } = command.input;
      const group = this.group(logGroupName!);
      if (group.has(logStreamName!))
        throw new AwsLikeError('ResourceAlreadyExistsException', 'The specified log stream already exists');
      group.set(logStreamName!, []);
      return {};
    }
    if (command instanceof PutLogEventsCommand) {
      this.calls.push('PutLogEvents');
      const { logGroupName, logStreamName, logEvents = [] } = command.input;
      const stream = this.group(logGroupName!).get(logStreamName!);
      if (!stream)
        throw new AwsLikeError('ResourceNotFoundException', 'The specified log stream does not exist.');
      if (logEvents.length > 10_000) throw new AwsLikeError('InvalidParameterException', 'too many events');
      const bytes = logEvents.reduce((sum, e) => sum + Buffer.byteLength(e.message ?? '') + 26, 0);
      if (bytes > 1_048_576) throw new AwsLikeError('InvalidParameterException', 'batch too large');
      for (let i = 1; i < logEvents.length; i++) {
        if ((logEvents[i]!.timestamp ?? 0) < (logEvents[i - 1]!.timestamp ?? 0))
          throw new AwsLikeError(
            'InvalidParameterException',
            'Log events in a single PutLogEvents request must be in chronological order.',
          );
      }
      for (const e of logEvents) {
        stream.push({
          eventId: String(this.nextId++).padStart(12, '0'),
          logStreamName: logStreamName!,
          timestamp: e.timestamp!,
          ingestionTime: Date.now(),
          message: e.message!,
        });
      }
      return {};
    }
    if (command instanceof FilterLogEventsCommand) {
      this.calls.push('FilterLogEvents');
      this.filterInputs.push(command.input);
      if (this.throttleFilter > 0) {
        this.throttleFilter--;
        throw new AwsLikeError('ThrottlingException', 'Rate exceeded');
      }
      const {
        logGroupName,
        logStreamNamePrefix,
        filterPattern,
        startTime,
        endTime,
        limit = 10_000,
        nextToken,
      } = command.input;
      this.group(logGroupName!);
      // "If not provided, all the events are matched" (API_FilterLogEvents).
      const terms = filterPattern ? parsePattern(filterPattern) : undefined;
      const matching = this.events(logGroupName!).filter((e) => {
        if (logStreamNamePrefix !== undefined && !e.logStreamName.startsWith(logStreamNamePrefix))
          return false;
        if (startTime !== undefined && e.timestamp < startTime) return false;
        if (endTime !== undefined && e.timestamp > endTime) return false;
        if (!terms) return true;
        let value: Record<string, unknown>;
        try {
          value = JSON.parse(e.message) as Record<string, unknown>;
        } catch {
          return false;
        }
        if (value === null || typeof value !== 'object') return false;
        return terms.every(([field, wanted]) => value[field] === wanted);
      });
      const offset = nextToken ? Number(nextToken) : 0;
      const page = matching.slice(offset, offset + limit);
      const more = offset + limit < matching.length;
      return { events: page, ...(more ? { nextToken: String(offset + limit) } : {}) };
    }
    throw new Error(`FakeCloudWatchLogs: ${(command as object).constructor.name} is not modelled`);
  }

  private group(name: string): Map<string, StoredEvent[]> {
    const group = this.groups.get(name);
    if (!group)
      throw new AwsLikeError('ResourceNotFoundException', 'The specified log group does not exist.');
    return group;
  }
}

/** `{ ($.a = "x") && ($.b = "y") }` → [['a','x'], ['b','y']]; anything else is refused loudly. */
function parsePattern(pattern: string): [string, string][] {
  const body = /^\{\s*(.*)\s*\}$/.exec(pattern.trim());
  if (!body) throw new AwsLikeError('InvalidParameterException', `unsupported pattern ${pattern}`);
  return body[1]!.split('&&').map((term) => {
    const match = /^\(?\s*\$\.(\w+)\s*=\s*"([^"\\]*)"\s*\)?$/.exec(term.trim());
    if (!match) throw new AwsLikeError('InvalidParameterException', `unsupported term ${term}`);
    return [match[1]!, match[2]!];
  });
}
