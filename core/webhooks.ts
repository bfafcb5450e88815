/**
 * Webhook delivery: the final job body POSTed to the job's webhook, retried twice 10 s apart when the
 * receiver does not answer 2xx (RunPod docs). Delivery runs in the background and never throws.
 *
 * A webhook URL is chosen by whoever submits the job, so it is treated as hostile (docs/security.md):
 * - its host is resolved once per attempt, and every address must be public unicast — loopback,
 *   private, link-local (the cloud metadata address 169.254.169.254 among them), unique-local,
 *   NAT64/6to4 and the IPv4-mapped forms of all of these are refused — unless an operator put the
 *   host or its address range on the allow-list (local development);
 * - the connection goes to the address that was checked (the socket's DNS lookup is pinned to it),
 *   so a second answer from the resolver (DNS rebinding) cannot switch it;
 * - redirects are never followed: a 3xx is a failed attempt;
 * - with an outbox (the local platform's SQLite table), pending deliveries and their retries survive
 *   a restart.
 */
import { lookup as dnsLookup } from 'node:dns/promises';
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { LookupFunction } from 'node:net';
import ipaddr from 'ipaddr.js';
import type { WebhookSender } from './engine.js';
import { FerryError } from './errors.js';
import { stringifyJsonExact } from './json.js';
import { limits } from './limits.js';
import { PendingWork } from './pending-work.js';
import type { Clock } from './ports.js';

export interface WebhookLog {
  warn(message: string): void;
}

/** A pending delivery, as the outbox keeps it. */
export interface OutboxEntry {
  id: number;
  url: string;
  body: string;
  /** Attempts made so far. */
  attempt: number;
  nextAtMs: number;
}

/** Where pending deliveries wait, so retries survive a restart (SQLite locally). */
export interface WebhookOutbox {
  add(entry: Omit<OutboxEntry, 'id'>): Promise<number>;
  due(nowMs: number, limit: number): Promise<OutboxEntry[]>;
  reschedule(id: number, attempt: number, nextAtMs: number): Promise<void>;
  remove(id: number): Promise<void>;
}

/** Resolves a host name to every address it has (injected by tests). */
export type Resolve = (hostname: string) => Promise<{ address: string; family: number }[]>;

const systemResolve: Resolve = (hostname) => dnsLookup(hostname, { all: true, verbatim: true });

/** Public unicast only; IPv4-mapped IPv6 addresses are judged as the IPv4 address they carry. */
export function isPublicAddress(address: string): boolean {
  if (!ipaddr.isValid(address)) return false;
  return ipaddr.process(address).range() === 'unicast';
}

/**
 * Allow-list entries: a host name (exact, any case) or an address or CIDR range (`127.0.0.1`,
 * `10.0.0.0/8`, `::1`). Malformed entries are refused when the sender is built.
 */
export function parseAllowList(entries: readonly string[]): {
  hosts: Set<string>;
  ranges: [ipaddr.IPv4 | ipaddr.IPv6, number][];
} {
  const hosts = new Set<string>();
  const ranges: [ipaddr.IPv4 | ipaddr.IPv6, number][] = [];
  for (const raw of entries.map((e) => e.trim()).filter((e) => e.length > 0)) {
    if (ipaddr.isValidCIDR(raw)) ranges.push(ipaddr.parseCIDR(raw));
    else if (ipaddr.isValid(raw)) {
      const ip = ipaddr.parse(raw);
      ranges.push([ip, ip.kind() === 'ipv4' ? 32 : 128]);
    } else if (/^[a-z0-9.-]+$/i.test(raw)) hosts.add(raw.toLowerCase());
    else
      throw new FerryError(
        'usage',
        `Webhook allow-list entry '${raw}' is neither a host name nor an address range`,
      );
  }
  return { hosts, ranges };
}

/** `FERRY_WEBHOOK_ALLOW`: a comma-separated allow-list for `ferry serve` and `ferry dev`. */
export const webhookAllowFromEnv = (env: NodeJS.ProcessEnv): string[] =>
  (env.FERRY_WEBHOOK_ALLOW ?? '')
    .split(',')
    .map((entry) => entry.trim())
    .filter((entry) => entry.length > 0);

function inRanges(address: string, ranges: [ipaddr.IPv4 | ipaddr.IPv6, number][]): boolean {
  const ip = ipaddr.process(address);
  return ranges.some(([range, bits]) => range.kind() === ip.kind() && ip.match(range, bits));
}

/** The address a delivery connects to, after every check passed. */
export interface WebhookTarget {
  url: URL;
  address: string;
  family: 4 | 6;
}

/**
 * Checks a webhook URL and resolves it to the one address the delivery will connect to. Throws a
 * FerryError saying why it is refused.
 */
export async function resolveWebhookTarget(
  rawUrl: string,
  options: { allow?: readonly string[]; resolve?: Resolve } = {},
): Promise<WebhookTarget> {
  let url: URL;
  try {
    url = new URL(rawUrl);
  } catch {
    throw new FerryError('bad_request', 'Webhook URL is not a valid URL');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new FerryError('bad_request', `Webhook URL must be http or https, not ${url.protocol}`);
  }
  if (url.username || url.password)
    throw new FerryError('bad_request', 'Webhook URL must not carry credentials');
  const allow = parseAllowList(options.allow ?? []);
  const host = url.hostname.replace(/^\[|\]$/g, '').toLowerCase();
  const resolved = ipaddr.isValid(host)
    ? [{ address: host, family: ipaddr.parse(host).kind() === 'ipv4' ? 4 : 6 }]
    : await (options.resolve ?? systemResolve)(host).catch((error: Error) => {
        throw new FerryError('bad_request', `Webhook host ${host} does not resolve: ${error.message}`);
      });
  if (resolved.length === 0) throw new FerryError('bad_request', `Webhook host ${host} has no address`);
  const hostAllowed = allow.hosts.has(host);
  // Every address must pass, not only the one we pick: a resolver that mixes public and internal
  // answers is what a rebinding attack looks like.
  for (const { address } of resolved) {
    if (!hostAllowed && !isPublicAddress(address) && !inRanges(address, allow.ranges)) {
      throw new FerryError(
        'bad_request',
        `Webhook host ${host} resolves to ${address}, which is not a public address`,
        { hint: 'For local development, allow it explicitly (FERRY_WEBHOOK_ALLOW)' },
      );
    }
  }
  const first = resolved[0]!;
  return { url, address: first.address, family: first.family === 6 ? 6 : 4 };
}

/**
 * One POST to an already checked target. The socket's lookup answers with the checked address, so no
 * second resolution happens; TLS still verifies the certificate against the URL's host name. A
 * redirect is returned as its status, never followed.
 */
export function postToTarget(
  target: WebhookTarget,
  body: string,
  options: { timeoutMs: number; signal?: AbortSignal },
): Promise<number> {
  const pinned: LookupFunction = (_hostname, lookupOptions, callback) => {
    if ((lookupOptions as { all?: boolean }).all) {
      (callback as unknown as (e: null, a: { address: string; family: number }[]) => void)(null, [
        { address: target.address, family: target.family },
      ]);
    } else callback(null, target.address, target.family);
  };
  const request = target.url.protocol === 'https:' ? httpsRequest : httpRequest;
  return new Promise<number>((resolve, reject) => {
    const req = request(
      target.url,
      {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
        lookup: pinned,
        timeout: options.timeoutMs,
        signal: options.signal,
      },
      (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      },
    );
    req.on('timeout', () => req.destroy(new Error(`no answer within ${options.timeoutMs} ms`)));
    req.on('error', reject);
    req.end(body);
  });
}

export class HttpWebhookSender implements WebhookSender {
  private readonly inFlight = new PendingWork();
  private readonly stop = new AbortController();
  /** Outbox entries being delivered now. */
  private readonly active = new Set<number>();

  constructor(
    private readonly options: {
      clock: Clock;
      log?: WebhookLog;
      attempts?: number;
      retryDelayMs?: number;
      timeoutMs?: number;
      /** Hosts and address ranges that may be private (local development). */
      allow?: readonly string[];
      resolve?: Resolve;
      /** Persistent pending deliveries; without one, retries live in memory. */
      outbox?: WebhookOutbox;
    },
  ) {
    parseAllowList(options.allow ?? []);
  }

  send(url: string, body: unknown): void {
    const text = stringifyJsonExact(body);
    const outbox = this.options.outbox;
    const work = outbox
      ? outbox
          .add({ url, body: text, attempt: 0, nextAtMs: this.options.clock.now() })
          .then(() => this.pump())
      : this.deliverInMemory(url, text);
    this.inFlight.track(
      work.catch((error: Error) => this.options.log?.warn(`webhook outbox failed: ${error.message}`)),
    );
  }

  /**
   * Delivers what the outbox holds now, then keeps looking for due retries until close(). The
   * platform calls it once on start, which is how deliveries pending at a restart go out.
   */
  start(pollMs = 1_000): void {
    if (!this.options.outbox) return;
    const loop = async () => {
      while (!this.stop.signal.aborted) {
        await this.pump();
        await this.options.clock.sleep(pollMs, this.stop.signal).catch(() => undefined);
      }
    };
    void loop();
  }

  /** Waits for deliveries under way (tests, graceful shutdown). */
  async idle(): Promise<void> {
    await this.inFlight.settled();
  }

  /** Abandons pending retries (an outbox keeps them for the next start). */
  close(): void {
    this.stop.abort();
  }

  private attempts(): number {
    return this.options.attempts ?? limits.webhookAttempts;
  }

  /**
   * Starts a delivery for each due outbox entry not already under way. Deliveries run side by side,
   * so a receiver that hangs until its timeout holds up nobody else's webhook.
   */
  private async pump(): Promise<void> {
    const outbox = this.options.outbox!;
    try {
      const due = await outbox.due(this.options.clock.now(), 100);
      for (const entry of due) {
        if (this.active.has(entry.id) || this.stop.signal.aborted) continue;
        this.active.add(entry.id);
        this.inFlight.track(this.deliverEntry(outbox, entry).finally(() => this.active.delete(entry.id)));
      }
    } catch (error) {
      this.options.log?.warn(`webhook outbox failed: ${(error as Error).message}`);
    }
  }

  private async deliverEntry(outbox: WebhookOutbox, entry: OutboxEntry): Promise<void> {
    const attempt = entry.attempt + 1;
    const finished = await this.attempt(entry.url, entry.body, attempt);
    if (finished || attempt >= this.attempts()) await outbox.remove(entry.id);
    else {
      const delayMs = this.options.retryDelayMs ?? limits.webhookRetryDelayMs;
      await outbox.reschedule(entry.id, attempt, this.options.clock.now() + delayMs);
    }
  }

  private async deliverInMemory(url: string, body: string): Promise<void> {
    const attempts = this.attempts();
    for (let attempt = 1; attempt <= attempts && !this.stop.signal.aborted; attempt++) {
      if (await this.attempt(url, body, attempt)) return;
      if (attempt < attempts) {
        await this.options.clock.sleep(
          this.options.retryDelayMs ?? limits.webhookRetryDelayMs,
          this.stop.signal,
        );
      }
    }
  }

  private attempt(url: string, body: string, attempt: number): Promise<boolean> {
    return attemptWebhook(url, body, attempt, { ...this.options, signal: this.stop.signal });
  }
}

/** How one delivery attempt is made (HttpWebhookSender's options; the AWS webhook function's). */
export interface WebhookAttemptOptions {
  log?: WebhookLog;
  /** Attempts in all, for the log line (default limits.webhookAttempts). */
  attempts?: number;
  timeoutMs?: number;
  /** Hosts and address ranges that may be private (local development). */
  allow?: readonly string[];
  resolve?: Resolve;
  signal?: AbortSignal;
}

/**
 * One checked POST of a delivery; true when the delivery is over (the receiver answered 2xx, or the
 * target is refused: a refused target stays refused, so it gets no retries). Never throws.
 */
export async function attemptWebhook(
  url: string,
  body: string,
  attempt: number,
  options: WebhookAttemptOptions = {},
): Promise<boolean> {
  const of = `(attempt ${attempt}/${options.attempts ?? limits.webhookAttempts})`;
  try {
    const target = await resolveWebhookTarget(url, { allow: options.allow, resolve: options.resolve });
    const status = await postToTarget(target, body, {
      timeoutMs: options.timeoutMs ?? limits.webhookTimeoutMs,
      signal: options.signal,
    });
    if (status >= 200 && status < 300) return true;
    options.log?.warn(
      `webhook ${redact(url)} answered ${status}${status >= 300 && status < 400 ? ' (redirects are not followed)' : ''} ${of}`,
    );
  } catch (error) {
    options.log?.warn(`webhook ${redact(url)} failed: ${(error as Error).message} ${of}`);
    if (FerryError.is(error) && error.code === 'bad_request') return true;
  }
  return false;
}

/** Webhook URLs often carry tokens in their query; logs keep only the origin and path. */
export function redact(url: string): string {
  try {
    const u = new URL(url);
    return `${u.origin}${u.pathname}`;
  } catch {
    return '(invalid url)';
  }
}
