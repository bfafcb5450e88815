/**
 * A webhook attempt's deadline and what a failed lookup means (core/webhooks.ts), and the webhook
 * function's own deadline (functions/webhooks.ts). The receivers are real servers on 127.0.0.1: one
 * that trickles its answer's headers a byte at a time, one that never answers, one that answers 200.
 * The resolver is injected (tests never use the machine's DNS); SQS is a recorder.
 */
import { once } from 'node:events';
import { createServer as createHttpServer, type Server } from 'node:http';
import {
  type AddressInfo,
  createServer as createTcpServer,
  type Socket,
  type Server as TcpServer,
} from 'node:net';
import type { SendMessageCommand } from '@aws-sdk/client-sqs';
import type { SQSRecord } from 'aws-lambda';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { WebhookDeliveryOptions } from '../../core/adapters/aws/webhook-queue.js';
import { FakeClock } from '../../core/clock.js';
import { attemptWebhook, HttpWebhookSender, type Resolve } from '../../core/webhooks.js';
import { createWebhookHandler } from '../../functions/webhooks.js';

/** How long the trickling receiver takes to finish its headers: far past every deadline below. */
const trickleMs = 5_000;
const trickleStepMs = 100;

const sockets = new Set<Socket>();
let trickling: TcpServer;
let silent: TcpServer;
let fast: Server;
let trickleUrl: string;
let silentUrl: string;
let fastUrl: string;
/** Requests each receiver got. */
let trickled = 0;
let silenced = 0;
let posts: string[] = [];
const warnings: string[] = [];
const log = { warn: (line: string) => warnings.push(line) };

function tcpReceiver(onRequest: (socket: Socket) => void): TcpServer {
  return createTcpServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => {});
    socket.once('data', () => onRequest(socket));
  });
}

async function listen(server: TcpServer | Server): Promise<string> {
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
}

beforeAll(async () => {
  // Sends a byte of a header every 100 ms, so the socket is never idle for long.
  trickling = tcpReceiver((socket) => {
    trickled++;
    socket.write('HTTP/1.1 200 OK\r\nx-slow: ');
    let sent = 0;
    const timer = setInterval(() => {
      if (++sent * trickleStepMs < trickleMs) socket.write('a');
      else {
        clearInterval(timer);
        socket.end('\r\ncontent-length: 0\r\n\r\n');
      }
    }, trickleStepMs);
    socket.on('close', () => clearInterval(timer));
  });
  silent = tcpReceiver(() => {
    silenced++;
  });
  fast = createHttpServer((req, res) => {
    let body = '';
    req.on('data', (chunk) => {
      body += chunk;
    });
    req.on('end', () => {
      posts.push(body);
      res.writeHead(200).end();
    });
  });
  trickleUrl = await listen(trickling);
  silentUrl = await listen(silent);
  fastUrl = await listen(fast);
});

afterAll(async () => {
  for (const socket of sockets) socket.destroy();
  fast.closeAllConnections();
  await Promise.all(
    [trickling, silent, fast].map((server) => new Promise<void>((resolve) => server.close(() => resolve()))),
  );
});

afterEach(() => {
  trickled = 0;
  silenced = 0;
  posts = [];
  warnings.length = 0;
});

describe("an attempt's deadline", () => {
  it('ends an attempt whose receiver trickles its headers, as a failed (retried) attempt', async () => {
    const startedMs = Date.now();
    const outcome = await attemptWebhook(trickleUrl, '{"id":"j"}', 1, {
      allow: ['127.0.0.1'],
      timeoutMs: 300,
      log,
    });
    expect(trickled).toBe(1);
    expect(outcome).toBe('failed');
    // Node's `timeout` option is an idle timeout: it never fired, and the attempt lasted the whole
    // trickle. Well before the trickle would have ended, with room for a busy machine.
    expect(Date.now() - startedMs).toBeLessThan(trickleMs - 2_000);
    expect(warnings.join('\n')).toMatch(/no answer within 300 ms/);
  }, 20_000);

  it('covers the lookup too: a resolver that never answers fails the attempt at the deadline', async () => {
    const resolve: Resolve = () => new Promise(() => {});
    const outcome = await attemptWebhook('http://hooks.example/hook', '{}', 1, {
      allow: ['hooks.example'],
      resolve,
      timeoutMs: 300,
      log,
    });
    expect(outcome).toBe('failed');
    expect(warnings.join('\n')).toMatch(/no answer within 300 ms/);
  }, 20_000);
});

/** A resolver error as node:dns gives it. */
const dnsError = (code: string, hostname: string) =>
  Object.assign(new Error(`getaddrinfo ${code} ${hostname}`), { code, hostname });

describe('what a failed lookup means', () => {
  /** A sender making its three attempts at once (retry delay 0 on a fake clock). */
  const sender = (resolve: Resolve, allow: string[] = ['hooks.example']) =>
    new HttpWebhookSender({ clock: new FakeClock(0), allow, resolve, retryDelayMs: 0, attempts: 3, log });

  it('retries a lookup that failed for now (EAI_AGAIN), and delivers once the name resolves', async () => {
    const lookups: string[] = [];
    const resolve: Resolve = async (hostname) => {
      lookups.push(hostname);
      if (lookups.length === 1) throw dnsError('EAI_AGAIN', hostname);
      return [{ address: '127.0.0.1', family: 4 }];
    };
    const webhooks = sender(resolve);
    webhooks.send(fastUrl.replace('127.0.0.1', 'hooks.example'), { id: 'again' });
    await webhooks.idle();
    expect(lookups).toEqual(['hooks.example', 'hooks.example']);
    expect(posts).toEqual(['{"id":"again"}']);
    expect(warnings.join('\n')).toMatch(/does not resolve: getaddrinfo EAI_AGAIN .*\(attempt 1\/3\)/);
  });

  it('retries a name that does not exist (ENOTFOUND): RunPod retries any failed delivery', async () => {
    let lookups = 0;
    const resolve: Resolve = async (hostname) => {
      lookups++;
      throw dnsError('ENOTFOUND', hostname);
    };
    const webhooks = sender(resolve);
    webhooks.send('http://gone.example/hook', { id: 'gone' });
    await webhooks.idle();
    expect(lookups).toBe(3);
  });

  it('refuses a private address at once: the address policy is final', async () => {
    let lookups = 0;
    const resolve: Resolve = async () => {
      lookups++;
      return [{ address: '10.0.0.1', family: 4 }];
    };
    const webhooks = sender(resolve, []);
    webhooks.send('http://internal.example/hook', { id: 'private' });
    await webhooks.idle();
    expect(lookups).toBe(1);
    expect(warnings.join('\n')).toMatch(/not a public address/);
    expect(await attemptWebhook('http://internal.example/hook', '{}', 1, { resolve, timeoutMs: 300 })).toBe(
      'refused',
    );
  });
});

/** An SQS record of the webhook queue, for its first attempt, its body inline. */
function record(messageId: string, url: string, body: string): SQSRecord {
  return {
    messageId,
    receiptHandle: messageId,
    body,
    attributes: {} as SQSRecord['attributes'],
    messageAttributes: {
      url: { stringValue: url, dataType: 'String' },
      attempt: { stringValue: '1', dataType: 'Number' },
    },
    md5OfBody: '',
    eventSource: 'aws:sqs',
    eventSourceARN: 'arn:aws:sqs:us-east-1:000000000000:webhooks',
    awsRegion: 'us-east-1',
  };
}

describe("the webhook function's deadline", () => {
  it('abandons the attempt still under way before its timeout and gives back only that record', async () => {
    const sent: SendMessageCommand['input'][] = [];
    const handler = createWebhookHandler(() => ({
      sqs: {
        send: async (command: SendMessageCommand) => {
          sent.push(command.input);
          return {};
        },
      } as unknown as WebhookDeliveryOptions['sqs'],
      queueUrl: 'https://sqs.us-east-1.amazonaws.com/000000000000/webhooks',
      blobs: {} as WebhookDeliveryOptions['blobs'],
      allow: ['127.0.0.1'],
      log,
    }));
    // The function has 2 s left; the silent receiver would hold its attempt for the default 10 s.
    const remainingMs = 2_000;
    const startedMs = Date.now();
    const context = { getRemainingTimeInMillis: () => remainingMs - (Date.now() - startedMs) };
    const answer = await handler(
      {
        Records: [record('hanging', silentUrl, '{"id":"slow"}'), record('fast', fastUrl, '{"id":"quick"}')],
      },
      context,
    );
    expect(Date.now() - startedMs).toBeLessThan(remainingMs);
    expect(silenced).toBe(1);
    expect(answer).toEqual({ batchItemFailures: [{ itemIdentifier: 'hanging' }] });
    expect(posts).toEqual(['{"id":"quick"}']);
    // The hanging record comes back through the queue for the same attempt: no retry is queued.
    expect(sent).toEqual([]);
  }, 30_000);
});
