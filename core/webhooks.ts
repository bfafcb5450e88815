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
 * - an attempt has one deadline (limits.webhookTimeoutMs) for all of it: the lookup, the connection,
 *   the upload and the answer. Node's `timeout` option is an idle timeout only, so a receiver that
 *   sent a byte now and then held an attempt for as long as it liked;
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

/** IPv6's global unicast block: ipaddr.js calls what is left of ::/0 'unicast' too (e.g. ::/96). */
const globalUnicastV6 = ipaddr.parseCIDR('2000::/3') as [ipaddr.IPv6, number];

/**
 * Public unicast only; IPv4-mapped IPv6 addresses are judged as the IPv4 address they carry. An IPv6
 * address must also be global unicast (2000::/3): the deprecated IPv4-compatible `::127.0.0.1`
 * (::/96) is 'unicast' to ipaddr.js, and some hosts route it to the IPv4 address it carries.
 */
export function isPublicAddress(address: string): boolean {
  if (!ipaddr.isValid(address)) return false;
  const ip = ipaddr.process(address);
  if (ip.range() !== 'unicast') return false;
  return ip.kind() === 'ipv4' || (ip as ipaddr.IPv6).match(globalUnicastV6);
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
 * FerryError saying why: `bad_request` when the target is refused (a malformed URL, an address the
 * policy forbids), which no retry can change; `bad_gateway` when its name does not resolve now; or
 * the signal's reason once `signal` fires, since a lookup cannot be cancelled, only no longer waited
 * for.
 */
export async function resolveWebhookTarget(
  rawUrl: string,
  options: { allow?: readonly string[]; resolve?: Resolve; signal?: AbortSignal } = {},
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
    : await unlessAborted((options.resolve ?? systemResolve)(host), options.signal).catch((error: Error) => {
        if (options.signal?.aborted) throw error;
        // Not a refusal, whatever the resolver said (EAI_AGAIN, a timeout, even ENOTFOUND): RunPod
        // retries a webhook that got no 2xx for any reason (docs/api.md: 2 retries, 10 s apart),
        // and a name that does not resolve now may in 10 s (a record just created, a resolver
        // hiccup). Two more lookups cost nothing; a dropped webhook is lost for good.
        throw new FerryError('bad_gateway', `Webhook host ${host} does not resolve: ${error.message}`, {
          cause: error,
        });
      });
  if (resolved.length === 0) throw new FerryError('bad_gateway', `Webhook host ${host} has no address`);
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

/** `work`'s answer, or the signal's reason as soon as it fires (`work` is left running, unwatched). */
function unlessAborted<T>(work: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return work;
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    if (signal.aborted) onAbort();
    else signal.addEventListener('abort', onAbort, { once: true });
    work.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}

/**
 * One POST to an already checked target. The socket's lookup answers with the checked address, so no
 * second resolution happens; TLS still verifies the certificate against the URL's host name. A
 * redirect is returned as its status, never followed. `signal` ends it wherever it is (connecting,
 * uploading, waiting for the headers); once the status is in, the rest of the answer is read until
 * it ends or the signal fires, and the status stands either way: the receiver has said what it did
 * with the webhook.
 */
export function postToTarget(target: WebhookTarget, body: string, signal: AbortSignal): Promise<number> {
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
        signal,
      },
      (res) => {
        const status = res.statusCode ?? 0;
        // A body cut short by the signal errors here; the status is the answer all the same.
        res.on('error', () => {});
        res.on('close', () => resolve(status));
        res.resume();
      },
    );
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

  /** True when the delivery is over: delivered, or refused for good. */
  private async attempt(url: string, body: string, attempt: number): Promise<boolean> {
    const outcome = await attemptWebhook(url, body, attempt, { ...this.options, signal: this.stop.signal });
    return outcome === 'delivered' || outcome === 'refused';
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
  /** The caller giving up (a platform stopping, a function near its timeout): the attempt is abandoned. */
  signal?: AbortSignal;
}

/**
 * How an attempt ended. `delivered`: the receiver answered 2xx. `refused`: the target is refused
 * (resolveWebhookTarget's `bad_request`), and stays refused, so it gets no retries. `failed`: any
 * other answer or failure, the deadline's included; retried while attempts are left. `abandoned`:
 * the caller's signal fired before the receiver answered, so the attempt does not count.
 */
export type WebhookAttemptOutcome = 'delivered' | 'refused' | 'failed' | 'abandoned';

/** One checked POST of a delivery, within its deadline (options.timeoutMs). Never throws. */
export async function attemptWebhook(
  url: string,
  body: string,
  attempt: number,
  options: WebhookAttemptOptions = {},
): Promise<WebhookAttemptOutcome> {
  const of = `(attempt ${attempt}/${options.attempts ?? limits.webhookAttempts})`;
  const timeoutMs = options.timeoutMs ?? limits.webhookTimeoutMs;
  const deadline = AbortSignal.timeout(timeoutMs);
  const signal = options.signal ? AbortSignal.any([options.signal, deadline]) : deadline;
  try {
    const target = await resolveWebhookTarget(url, {
      allow: options.allow,
      resolve: options.resolve,
      signal,
    });
    const status = await postToTarget(target, body, signal);
    if (status >= 200 && status < 300) return 'delivered';
    options.log?.warn(
      `webhook ${redact(url)} answered ${status}${status >= 300 && status < 400 ? ' (redirects are not followed)' : ''} ${of}`,
    );
  } catch (error) {
    if (options.signal?.aborted) {
      options.log?.warn(`webhook ${redact(url)} abandoned: the caller stopped waiting ${of}`);
      return 'abandoned';
    }
    const reason = deadline.aborted ? `no answer within ${timeoutMs} ms` : (error as Error).message;
    options.log?.warn(`webhook ${redact(url)} failed: ${reason} ${of}`);
    if (FerryError.is(error) && error.code === 'bad_request') return 'refused';
  }
  return 'failed';
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
