/**
 * The agent of a load-balanced endpoint (FERRY_AGENT_MODE=lb): the one door between the ALB and the
 * worker's own HTTP server. Every deployed endpoint needs the account API key (docs/api.md#authentication), and the
 * user's routes know nothing about keys, so the agent checks them and proxies the rest unchanged.
 *
 *   ALB :80 ──▶ agent :FERRY_AGENT_PORT ──┬─ GET /ping   answered here: 200 while the worker's /ping is
 *                                         │              200, else 503 (the ALB's health check; no key)
 *                                         ├─ no valid key  401 {"error": …}
 *                                         └─ anything else ─▶ worker 127.0.0.1:FERRY_PORT (same method,
 *                                                              path, query, body; Authorization removed)
 *
 * Keys are checked like the API's authorizer does: sha256 of `Bearer <key>` or the bare key, looked up
 * as `KEY#<hash>` in the control table (core/auth.ts KeyAuthenticator), the answer cached per hash for
 * `keyCacheMs` so a busy endpoint does not read DynamoDB on every request. A lookup that fails (throttled
 * table, missing permission) answers 503 and is logged: fail closed, never let a request through.
 *
 * The client's Authorization header is not forwarded: user code must never see the account key.
 */
import {
  createServer,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type OutgoingHttpHeaders,
  request,
  type ServerResponse,
} from 'node:http';
import { credentialOf, KeyAuthenticator } from '../../core/auth.js';
import { type Logger, stderrLogger } from '../../core/log.js';
import type { ControlStore } from '../../core/ports.js';
import { listen } from './listen.js';

export interface LbAgentOptions {
  endpointId: string;
  /** Where API keys live: a DynamoControlStore on the platform's control table. */
  control: Pick<ControlStore, 'findApiKeyByHash'>;
  /** The worker's port on localhost (its FERRY_PORT). */
  workerPort: number;
  /** Default 127.0.0.1: the worker shares the task's network namespace. */
  workerHost?: string;
  /** Default 0.0.0.0: the ALB reaches the agent at the host's address. */
  host?: string;
  /** Default 8080; 0 picks a free port. */
  port?: number;
  /** How long a key lookup is remembered (default 30 s). */
  keyCacheMs?: number;
  /** How long GET /ping waits for the worker's /ping (default 2 s; the ALB check times out at 5 s). */
  pingTimeoutMs?: number;
  log?: Logger;
}

export interface LbAgent {
  readonly url: string;
  /** Stops taking connections and waits for requests in flight (at most `waitMs`); twice is fine. */
  close(waitMs?: number): Promise<void>;
}

/** RFC 9110 §7.6.1: connection-specific headers are not forwarded by a proxy. */
const hopByHop = new Set([
  'connection',
  'keep-alive',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
]);

export async function startLbAgent(options: LbAgentOptions): Promise<LbAgent> {
  const agent = new LbAgentServer(options);
  await agent.listen();
  return agent;
}

class LbAgentServer implements LbAgent {
  url = '';
  private readonly auth: KeyAuthenticator;
  private readonly log: Logger;
  private readonly workerHost: string;
  private readonly server = createServer((req, res) => void this.serve(req, res));
  private closed: Promise<void> | undefined;

  constructor(private readonly options: LbAgentOptions) {
    this.log = options.log ?? prefixed(stderrLogger, 'ferry-agent: ');
    this.workerHost = options.workerHost ?? '127.0.0.1';
    this.auth = new KeyAuthenticator({
      control: options.control as ControlStore,
      cacheMs: options.keyCacheMs ?? 30_000,
    });
  }

  async listen(): Promise<void> {
    const host = this.options.host ?? '0.0.0.0';
    const { url, port } = await listen(this.server, host, this.options.port ?? 8080);
    this.url = url;
    this.log.info(
      `serving load-balanced endpoint ${this.options.endpointId} on ${host}:${port}, ` +
        `proxying to ${this.workerHost}:${this.options.workerPort}`,
    );
  }

  private async serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    try {
      const path = (req.url ?? '/').split('?')[0];
      if (req.method === 'GET' && path === '/ping') {
        const healthy = await this.workerHealthy();
        reply(
          res,
          healthy ? 200 : 503,
          healthy ? { status: 'healthy' } : { error: 'The worker is not ready' },
        );
        req.resume();
        return;
      }
      let allowed: boolean;
      try {
        allowed = await this.auth.isClientKey(credentialOf(req.headers.authorization));
      } catch (error) {
        this.log.error(`checking an API key: ${message(error)}`);
        reply(res, 503, { error: 'Cannot check the API key right now; try again' });
        req.resume();
        return;
      }
      if (!allowed) {
        reply(res, 401, { error: 'Missing or invalid API key' });
        req.resume();
        return;
      }
      this.proxy(req, res);
    } catch (error) {
      this.log.error(`serving ${req.method} ${req.url}: ${message(error)}`);
      reply(res, 500, { error: 'Internal error' });
    }
  }

  private proxy(req: IncomingMessage, res: ServerResponse): void {
    const headers = forwardable(req.headers);
    delete headers.authorization;
    const peer = req.socket.remoteAddress;
    const forwardedFor = req.headers['x-forwarded-for'];
    if (peer) headers['x-forwarded-for'] = forwardedFor ? `${forwardedFor}, ${peer}` : peer;
    const upstream = request(
      {
        host: this.workerHost,
        port: this.options.workerPort,
        method: req.method,
        path: req.url ?? '/',
        headers,
      },
      (answer) => {
        if (res.headersSent || res.destroyed) {
          answer.resume();
          return;
        }
        res.writeHead(answer.statusCode ?? 502, forwardable(answer.headers));
        answer.pipe(res);
        answer.on('error', () => res.destroy());
      },
    );
    upstream.on('error', (error) => {
      this.log.warn(`proxying ${req.method} ${req.url}: ${message(error)}`);
      reply(res, 502, { error: 'The worker is not reachable' });
    });
    // A client that hangs up mid-request: stop the call to the worker too.
    res.on('close', () => {
      if (!res.writableFinished) upstream.destroy();
    });
    req.pipe(upstream);
  }

  private async workerHealthy(): Promise<boolean> {
    try {
      const response = await fetch(`http://${this.workerHost}:${this.options.workerPort}/ping`, {
        signal: AbortSignal.timeout(this.options.pingTimeoutMs ?? 2_000),
      });
      await response.body?.cancel();
      return response.status === 200;
    } catch {
      return false;
    }
  }

  close(waitMs = 10_000): Promise<void> {
    this.closed ??= (async () => {
      const done = new Promise<void>((resolve) => this.server.close(() => resolve()));
      this.server.closeIdleConnections();
      const timer = setTimeout(() => this.server.closeAllConnections(), waitMs);
      await done;
      clearTimeout(timer);
    })();
    return this.closed;
  }
}

function forwardable(headers: IncomingHttpHeaders): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  const named = new Set(
    String(headers.connection ?? '')
      .split(',')
      .map((h) => h.trim().toLowerCase())
      .filter((h) => h.length > 0),
  );
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined || hopByHop.has(name) || named.has(name)) continue;
    out[name] = value;
  }
  return out;
}

function reply(res: ServerResponse, statusCode: number, body: unknown): void {
  if (res.headersSent || res.destroyed) {
    res.destroy();
    return;
  }
  const text = JSON.stringify(body);
  res
    .writeHead(statusCode, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) })
    .end(text);
}

const message = (error: unknown): string => (error instanceof Error ? error.message : String(error));

function prefixed(log: Logger, prefix: string): Logger {
  return {
    info: (m) => log.info(`${prefix}${m}`),
    warn: (m) => log.warn(`${prefix}${m}`),
    error: (m) => log.error(`${prefix}${m}`),
  };
}
