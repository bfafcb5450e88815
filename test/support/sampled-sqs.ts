/**
 * An SQS client, in memory and on a fake clock, that answers receives as AWS documents them and
 * fauxqs does not: fauxqs answers every short poll from the whole queue, so code that trusts an empty
 * short poll passes on it and misses messages on AWS.
 *
 * What AWS documents (Amazon SQS short and long polling, SQS Developer Guide):
 *  - a short poll (WaitTimeSeconds 0) "queries only a subset of the servers (based on a weighted
 *    random distribution)": with few messages it can answer empty while messages wait. Here a short
 *    poll sees a message only when `shortPollSees` says so; the default is the unlucky sample, every
 *    time (SQS promises nothing better for any one request);
 *  - a long poll queries all the servers ("eliminates false empty responses") and returns as soon as
 *    a message is there; on a queue with nothing it waits its whole WaitTimeSeconds. Here the wait
 *    moves the fake clock on, and a message `arriving` within it ends the wait at its arrival.
 *
 * Only what Ferry's adapters send is answered: GetQueueUrl, GetQueueAttributes
 * (ApproximateNumberOfMessages, exact unless `approximate` says otherwise), ReceiveMessage, DeleteMessage,
 * ChangeMessageVisibilityBatch and SendMessage. `requests` lists each receive, for tests that check
 * which queue was polled how.
 */
import {
  ChangeMessageVisibilityBatchCommand,
  DeleteMessageCommand,
  GetQueueAttributesCommand,
  GetQueueUrlCommand,
  ReceiveMessageCommand,
  SendMessageCommand,
  type SQSClient,
} from '@aws-sdk/client-sqs';

interface Held {
  id: string;
  body: string;
  visibleAtMs: number;
  receipt: string | undefined;
}

export interface SampledSqs {
  client: SQSClient;
  /** The fake clock's now, in ms; moved only by long polls' waits and `advance`. */
  now(): number;
  advance(ms: number): void;
  urlOf(name: string): string;
  put(name: string, body: string): void;
  /** A message that appears at `atMs` on the fake clock (a long poll waiting then gets it). */
  arriving(name: string, body: string, atMs: number): void;
  /** Messages of the queue, visible or not. */
  count(name: string): number;
  requests: Array<{ queue: string; waitSec: number; got: number; atMs: number }>;
}

export function sampledSqs(
  options: {
    shortPollSees?: (queue: string, body: string) => boolean;
    startMs?: number;
    /** Told each time the fake clock moves (a test with code on Date.now moves Date with it). */
    onAdvance?: (nowMs: number) => void;
    /**
     * ApproximateNumberOfMessages from the true visible count; default: exact. SQS's may lag "at
     * least 1 minute after the producers stop sending messages" (GetQueueAttributes), either way.
     */
    approximate?: (queue: string, visible: number) => number;
  } = {},
): SampledSqs {
  const shortPollSees = options.shortPollSees ?? (() => false);
  let nowMs = options.startMs ?? 1_000_000;
  let serial = 0;
  const queues = new Map<string, Held[]>();
  const arrivals: Array<{ name: string; body: string; atMs: number }> = [];
  const requests: SampledSqs['requests'] = [];
  const urlOf = (name: string) => `http://sqs.fake/123456789012/${name}`;
  const nameOf = (url: string | undefined) => String(url).split('/').pop() as string;
  const queue = (name: string) => {
    let held = queues.get(name);
    if (!held) {
      held = [];
      queues.set(name, held);
    }
    return held;
  };
  const put = (name: string, body: string) => {
    queue(name).push({ id: `m${++serial}`, body, visibleAtMs: nowMs, receipt: undefined });
  };
  const advance = (ms: number) => {
    nowMs += ms;
    options.onAdvance?.(nowMs);
    for (const due of arrivals.filter((a) => a.atMs <= nowMs)) {
      arrivals.splice(arrivals.indexOf(due), 1);
      put(due.name, due.body);
    }
  };
  const visible = (name: string) => queue(name).filter((m) => m.visibleAtMs <= nowMs);

  const receive = (input: ReceiveMessageCommand['input']) => {
    const name = nameOf(input.QueueUrl);
    const waitSec = input.WaitTimeSeconds ?? 0;
    const max = input.MaxNumberOfMessages ?? 1;
    const take = (candidates: Held[]) => {
      const got = candidates.slice(0, max);
      for (const m of got) {
        m.visibleAtMs = nowMs + (input.VisibilityTimeout ?? 30) * 1000;
        m.receipt = `r-${m.id}-${++serial}`;
      }
      requests.push({ queue: name, waitSec, got: got.length, atMs: nowMs });
      return { Messages: got.map((m) => ({ MessageId: m.id, Body: m.body, ReceiptHandle: m.receipt })) };
    };
    if (waitSec === 0) return take(visible(name).filter((m) => shortPollSees(name, m.body)));
    if (visible(name).length > 0) return take(visible(name));
    const next = arrivals
      .filter((a) => a.name === name && a.atMs <= nowMs + waitSec * 1000)
      .sort((a, b) => a.atMs - b.atMs)[0];
    advance(next ? next.atMs - nowMs : waitSec * 1000);
    return take(visible(name));
  };

  const client = {
    async send(command: unknown): Promise<unknown> {
      if (command instanceof GetQueueUrlCommand) return { QueueUrl: urlOf(command.input.QueueName!) };
      if (command instanceof GetQueueAttributesCommand) {
        const name = nameOf(command.input.QueueUrl);
        const count = options.approximate?.(name, visible(name).length) ?? visible(name).length;
        return { Attributes: { ApproximateNumberOfMessages: String(count) } };
      }
      if (command instanceof ReceiveMessageCommand) return receive(command.input);
      if (command instanceof DeleteMessageCommand) {
        const held = queue(nameOf(command.input.QueueUrl));
        const at = held.findIndex((m) => m.receipt === command.input.ReceiptHandle);
        if (at >= 0) held.splice(at, 1);
        return {};
      }
      if (command instanceof ChangeMessageVisibilityBatchCommand) {
        const held = queue(nameOf(command.input.QueueUrl));
        for (const entry of command.input.Entries ?? []) {
          const m = held.find((h) => h.receipt === entry.ReceiptHandle);
          if (m) m.visibleAtMs = nowMs + (entry.VisibilityTimeout ?? 0) * 1000;
        }
        return { Successful: [], Failed: [] };
      }
      if (command instanceof SendMessageCommand) {
        put(nameOf(command.input.QueueUrl), command.input.MessageBody ?? '');
        return { MessageId: `m${serial}` };
      }
      throw new Error(`sampledSqs does not answer ${(command as object).constructor.name}`);
    },
    destroy() {},
  } as unknown as SQSClient;

  return {
    client,
    now: () => nowMs,
    advance,
    urlOf,
    put,
    arriving: (name, body, atMs) => arrivals.push({ name, body, atMs }),
    count: (name) => queue(name).length,
    requests,
  };
}
