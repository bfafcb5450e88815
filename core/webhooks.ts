/**
 * Webhook delivery: the final job body POSTed to the job's webhook, retried twice 10 s apart when the
 * receiver does not answer 2xx (RunPod docs). Delivery runs in the background and never throws.
 */
import type { WebhookSender } from './engine.js';
import { limits } from './limits.js';
import type { Clock } from './ports.js';

export interface WebhookLog {
  warn(message: string): void;
}

export class HttpWebhookSender implements WebhookSender {
  private readonly inFlight = new Set<Promise<void>>();
  private readonly stop = new AbortController();

  constructor(
    private readonly options: {
      clock: Clock;
      log?: WebhookLog;
      fetch?: typeof fetch;
      attempts?: number;
      retryDelayMs?: number;
      timeoutMs?: number;
    },
  ) {}

  send(url: string, body: unknown): void {
    const delivery = this.deliver(url, JSON.stringify(body)).finally(() => this.inFlight.delete(delivery));
    this.inFlight.add(delivery);
  }

  /** Waits for deliveries under way (tests, graceful shutdown). */
  async idle(): Promise<void> {
    while (this.inFlight.size > 0) await Promise.all([...this.inFlight]);
  }

  /** Abandons pending retries. */
  close(): void {
    this.stop.abort();
  }

  private async deliver(url: string, body: string): Promise<void> {
    const attempts = this.options.attempts ?? limits.webhookAttempts;
    const doFetch = this.options.fetch ?? fetch;
    for (let attempt = 1; attempt <= attempts && !this.stop.signal.aborted; attempt++) {
      try {
        const response = await doFetch(url, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body,
          signal: AbortSignal.any([
            this.stop.signal,
            AbortSignal.timeout(this.options.timeoutMs ?? limits.webhookTimeoutMs),
          ]),
        });
        await response.body?.cancel();
        if (response.ok) return;
        this.options.log?.warn(
          `webhook ${redact(url)} answered ${response.status} (attempt ${attempt}/${attempts})`,
        );
      } catch (error) {
        this.options.log?.warn(
          `webhook ${redact(url)} failed: ${(error as Error).message} (attempt ${attempt}/${attempts})`,
        );
      }
      if (attempt < attempts) {
        await this.options.clock.sleep(
          this.options.retryDelayMs ?? limits.webhookRetryDelayMs,
          this.stop.signal,
        );
      }
    }
  }
}

/** Webhook URLs often carry tokens in their query; logs keep only the origin and path. */
function redact(url: string): string {
  try {
    const u = new URL(url);
    return `${u.origin}${u.pathname}`;
  } catch {
    return '(invalid url)';
  }
}
