/**
 * The embedded provider: records in FERRY_HOME/ferry.db, artifacts in FERRY_HOME/blobs, served by
 * `ferry serve` (whose worker pools reconcile against the same records). Everyone on this machine
 * who points FERRY_HOME at the same folder sees the same apps; nothing lives in a project folder.
 */
import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { FileBlobStore } from '../../core/adapters/local/files.js';
import { securePrivateDir } from '../../core/adapters/local/home.js';
import { type RolloutReport, reconcilePath } from '../../core/adapters/local/rollout.js';
import { openLocalDatabase } from '../../core/adapters/local/sqlite.js';
import { hashKey, newSecret } from '../../core/auth.js';
import { systemClock } from '../../core/clock.js';
import { messageOf, usage } from '../../core/errors.js';
import { defaultPort } from '../../core/limits.js';
import type { BlobStore, Clock, ControlStore, EndpointRecord } from '../../core/ports.js';
import { apiKeyFromUser, apiKeyInShell } from '../config.js';
import type { Reporter } from '../io.js';
import {
  checkListenable,
  nextFreePort,
  type PortChoice,
  readServerInfo,
  runningServer,
  startDetached,
} from '../serve.js';
import type { DestroyResult, PassWording, Provider, ServingState } from './types.js';

export interface LocalProviderOptions {
  home: string;
  env: NodeJS.ProcessEnv;
  projectDir: string;
  /** Use these stores (an in-process platform) instead of opening FERRY_HOME's. */
  stores?: { control: ControlStore; blobs: BlobStore; url: string };
  /** Time for the rollout wait: its progress lines and its deadline (tests move a FakeClock). */
  clock?: Clock;
}

/**
 * FERRY_PORT, else 8888. A FERRY_PORT that is not a port is the user's mistake, said at once: quietly
 * serving on 8888 instead leaves their clients knocking on the port they set.
 */
export function defaultServePort(env: NodeJS.ProcessEnv): number {
  const value = env.FERRY_PORT?.trim();
  if (!value) return defaultPort;
  const port = Number(value);
  if (/^\d+$/.test(value) && port <= 65_535) return port;
  throw usage(
    `FERRY_PORT=${JSON.stringify(env.FERRY_PORT)} is not a port`,
    'Set it to a whole number from 1 to 65535 (0 picks any free port), or unset it for 8888.',
  );
}

/**
 * The port `ferry dev` or the `ferry serve --detach` a local deploy starts asks for: --port (`flag`),
 * else FERRY_PORT, else 8888. Throws at once for a FERRY_PORT that is no port, --port or not, as
 * `ferry serve` does: the clients that read it are as lost either way. Called before a command
 * starts anything.
 */
export function requestedPort(env: NodeJS.ProcessEnv, flag?: number): PortChoice {
  const fromEnv = defaultServePort(env);
  if (flag !== undefined) return { port: flag, setBy: '--port' };
  return env.FERRY_PORT?.trim()
    ? { port: fromEnv, setBy: 'FERRY_PORT' }
    : { port: fromEnv, setBy: 'default' };
}

/**
 * The port to listen on for `choice`, asked before anything expensive starts. FERRY_PORT's is taken
 * exactly: the user's clients (and the Python client's default URL) knock there, so moving to another
 * would leave them calling nothing; when it cannot be listened on now, this throws the usage error the
 * listen would give (listenFailure, naming FERRY_PORT). --port's and the default move to the next
 * free port: `ferry dev` holds 8888 while it runs, and a second one or a deploy beside it should still
 * start. A check, not a hold: the listen itself still reports a port taken since.
 */
export async function portToListenOn(host: string, choice: PortChoice): Promise<number> {
  if (choice.setBy !== 'FERRY_PORT') return nextFreePort(host, choice.port);
  await checkListenable(host, choice);
  return choice.port;
}

const keyFilePath = (home: string) => path.join(home, 'api-key');

/**
 * Removes FERRY_HOME/api-key when it holds the key of `hash` (a revoked one), and says where it was:
 * localApiKey registers the file's key whenever it finds it unknown, so a revoked default key left in
 * the file was accepted again by the next serve or deploy. With the file gone they make a new one.
 */
export function forgetKeyFile(home: string, hash: string): string | undefined {
  const file = keyFilePath(home);
  if (!existsSync(file) || hashKey(readFileSync(file, 'utf8').trim()) !== hash) return undefined;
  rmSync(file, { force: true });
  return file;
}

/**
 * The key of this FERRY_HOME: FERRY_API_KEY (environment or .env) wins; otherwise FERRY_HOME/api-key,
 * created on first use (0600) and stored hashed in the control store so a served platform accepts it.
 */
export async function localApiKey(
  home: string,
  control: ControlStore,
  env: NodeJS.ProcessEnv,
  projectDir: string,
): Promise<{ key: string; source: string }> {
  const fromUser = apiKeyFromUser(env, projectDir);
  if (fromUser) {
    return {
      key: fromUser.key,
      source: fromUser.source === 'environment' ? 'FERRY_API_KEY' : '.env FERRY_API_KEY',
    };
  }
  const file = keyFilePath(home);
  let key = existsSync(file) ? readFileSync(file, 'utf8').trim() : '';
  if (!key) {
    securePrivateDir(home);
    key = newSecret('fy');
    writeFileSync(file, `${key}\n`, { mode: 0o600 });
    chmodSync(file, 0o600);
  }
  const hash = hashKey(key);
  if (!(await control.findApiKeyByHash(hash))) {
    await control.putApiKey({
      id: `key-${randomBytes(4).toString('hex')}`,
      name: 'default (FERRY_HOME/api-key)',
      hash,
      createdAt: Date.now(),
    });
  }
  return { key, source: file };
}

/**
 * How long a deploy (or a secret's set or delete) waits for the running platform's pass: it unpacks
 * each changed endpoint's artifact first.
 */
const rolloutWaitMs = 60_000;
/** How often that wait says it is still waiting: the serve answers only once the pass is done. */
const rolloutProgressMs = 5_000;

export class LocalProvider implements Provider {
  readonly name = 'local' as const;
  readonly control: ControlStore;
  readonly blobs: BlobStore;
  readonly #close: () => Promise<void>;
  readonly #fixedUrl: string | undefined;
  /** Which `secrets=` names have a value (names only: listing needs no key). */
  readonly secretNames?: (scope: { app: string; env: string }) => Promise<string[]>;
  /** Which of `names` have none (the same listing: the local store is consistent at once). */
  readonly missingSecrets?: (
    scope: { app: string; env: string },
    names: readonly string[],
  ) => Promise<string[]>;
  #url: string | undefined;

  constructor(private readonly options: LocalProviderOptions) {
    if (options.stores) {
      this.control = options.stores.control;
      this.blobs = options.stores.blobs;
      this.#fixedUrl = options.stores.url;
      this.#close = async () => {};
    } else {
      securePrivateDir(options.home);
      const db = openLocalDatabase(path.join(options.home, 'ferry.db'));
      const blobs = new FileBlobStore(path.join(options.home, 'blobs'));
      this.control = db.control;
      this.blobs = blobs;
      const secrets = db.openSecrets(path.join(options.home, 'secrets.key'));
      this.secretNames = async (scope) => (await secrets.list(scope)).map((s) => s.name);
      this.missingSecrets = async (scope, names) => {
        const have = new Set((await secrets.list(scope)).map((s) => s.name));
        return [...new Set(names)].filter((name) => !have.has(name));
      };
      this.#close = async () => {
        await blobs.close();
        await db.close();
      };
    }
  }

  uploadArtifact(key: string, filePath: string, onProgress?: (sentBytes: number) => void): Promise<void> {
    return this.blobs.putFile(key, filePath, onProgress);
  }

  async provision(records: EndpointRecord[]): Promise<void> {
    // The pools of a running `ferry serve` reconcile on a timer and roll workers whose fingerprint or config changed.
    for (const record of records) await this.control.putEndpoint(record);
  }

  async destroy(records: EndpointRecord[]): Promise<DestroyResult> {
    const result: DestroyResult = { deleted: [], failed: [] };
    for (const record of records) {
      try {
        await this.control.deleteEndpoint(record.id);
        if (await this.control.getEndpoint(record.id)) throw new Error('the record is still there');
        result.deleted.push(record);
      } catch (error) {
        result.failed.push({ record, error: (error as Error).message });
      }
    }
    await this.#reclaim(result.deleted);
    return result;
  }

  /**
   * Disk retention (docs/security.md): the artifacts no remaining endpoint runs, and
   * the unpacked code of the deleted endpoints (a running `ferry serve` stops their workers when it
   * next reconciles). The database gives the freed pages back on the platform's vacuum schedule.
   */
  async #reclaim(deleted: EndpointRecord[]): Promise<void> {
    if (deleted.length === 0) return;
    const inUse = new Set<string>();
    for (const endpoint of await this.control.listEndpoints()) {
      if (endpoint.artifactKey) inUse.add(endpoint.artifactKey);
    }
    for (const record of deleted) {
      if (record.artifactKey && !inUse.has(record.artifactKey)) await this.blobs.delete(record.artifactKey);
      if (!this.options.stores) {
        rmSync(path.join(this.options.home, 'runtime', record.id), { recursive: true, force: true });
      }
    }
  }

  endpointUrl(record: EndpointRecord): string {
    // Listings (`env get`, `undeploy list`) do not probe the server: the URL the running (or last)
    // `ferry serve` recorded is its port, which `--port` may have set to another than FERRY_PORT's.
    const base =
      this.#fixedUrl ??
      this.#url ??
      readServerInfo(this.options.home)?.url ??
      `http://127.0.0.1:${defaultServePort(this.options.env)}`;
    return record.kind === 'lb' ? `${base}/lb/${record.id}` : `${base}/v2/${record.id}`;
  }

  async serving(): Promise<string | undefined> {
    if (this.#fixedUrl) return this.#fixedUrl;
    this.#url = await runningServer(this.options.home);
    return this.#url;
  }

  /**
   * The check ensureServing makes before it detaches a server, made before the build: a FERRY_PORT
   * taken now fails the deploy at once (exit 2) instead of after the build and upload. ensureServing
   * checks again, since the port may be taken in between.
   */
  async checkServable(): Promise<void> {
    if (await this.serving()) return;
    await portToListenOn('127.0.0.1', requestedPort(this.options.env));
  }

  async ensureServing(reporter: Reporter): Promise<ServingState> {
    const url = await this.serving();
    if (url) return { url, started: false };
    reporter.line(`  no platform answers for ${this.options.home}; starting \`ferry serve --detach\``);
    // Refused here, before a server is detached, when FERRY_PORT's port is taken; a server that loses
    // the port after this check exits 2 with the same error, which startDetached passes on.
    const choice = requestedPort(this.options.env);
    const port = await portToListenOn('127.0.0.1', choice);
    const info = await startDetached({
      home: this.options.home,
      port: { port, setBy: choice.setBy },
      env: this.options.env,
    });
    this.#url = info.url;
    reporter.line(
      `  started ferry serve (pid ${info.pid}) at ${info.url}; logs in ${path.join(this.options.home, 'serve.log')}`,
    );
    return { url: info.url, started: true };
  }

  /**
   * The running `ferry serve` reads the records now and answers once the workers of every changed
   * endpoint are drained (core/adapters/local/rollout.ts): it read them once a second, and until then
   * an idle worker of the old code took the next job. A serve that cannot be asked (an older Ferry,
   * a key of one app) or does not answer in time rolls at its next pass anyway: a warning, not a
   * failure, since the records are written. Every 5 s meanwhile, a line says it still waits.
   */
  async awaitRollout(changed: readonly EndpointRecord[], reporter: Reporter): Promise<void> {
    const names = changed.map((r) => r.name).join(', ');
    const report = await this.passNow(changed, reporter, {
      asking: `  the running platform takes up ${names} now…`,
      waiting: (waitedSec) =>
        `  still waiting for the platform to take up ${names} (it unpacks each new deployment first)… ${waitedSec} s`,
      unasked: (url, why) =>
        `  warning: could not ask the platform at ${url} to roll its workers now (${why}); it rolls them when it next reads the records, within a second or two`,
    });
    if (!report) return;
    const found = new Map(report.endpoints.map((e) => [e.id, e]));
    for (const record of changed) {
      const problem = found.get(record.id)?.problem;
      if (!problem) continue;
      reporter.line(
        found.get(record.id)?.running
          ? `  warning: ${record.name} keeps its previous workers: ${problem}`
          : `  warning: ${record.name} starts no worker: ${problem}`,
      );
    }
    // Said for a first deploy too: the serve starts the new endpoints' pools now, not at its next pass.
    reporter.line(
      "  ✓ every job from now on runs on this deployment's workers (an earlier one's finish what they hold)",
    );
  }

  /**
   * Asks the running `ferry serve` for a pass now (POST reconcilePath) and waits for its answer, up
   * to a minute, saying every 5 s that it still waits: the serve answers only once the pass is done,
   * and unpacking a new deployment takes a while. The one owner of that ask, for a deploy
   * (awaitRollout) and a deleted secret alike; `wording` says what the pass does for the caller.
   */
  async passNow(
    endpoints: readonly EndpointRecord[],
    reporter: Reporter,
    wording: PassWording,
  ): Promise<RolloutReport | undefined> {
    if (endpoints.length === 0) return undefined;
    const url = this.#fixedUrl ?? this.#url ?? (await this.serving());
    if (!url) return undefined;
    reporter.line(wording.asking);
    const clock = this.options.clock ?? systemClock;
    const startMs = clock.now();
    // Ends the progress lines and the deadline once the answer is in (or the ask failed).
    const answered = new AbortController();
    const deadline = new AbortController();
    void clock.sleep(rolloutWaitMs, answered.signal).then(() => {
      if (!answered.signal.aborted) deadline.abort();
    });
    // The serve says nothing until its pass is done (a large artifact takes a while to unpack): a
    // line every few seconds shows the command is not stuck.
    void (async () => {
      for (;;) {
        await clock.sleep(rolloutProgressMs, answered.signal);
        if (answered.signal.aborted || deadline.signal.aborted) return;
        reporter.line(wording.waiting(Math.round((clock.now() - startMs) / 1000)));
      }
    })();
    try {
      const { key } = await this.apiKey();
      const response = await fetch(`${url}${reconcilePath}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}` },
        signal: deadline.signal,
      });
      const body = (await response.json().catch(() => undefined)) as
        | (RolloutReport & { error?: string })
        | undefined;
      if (!response.ok || !Array.isArray(body?.endpoints)) {
        throw new Error(body?.error ?? `HTTP ${response.status}`);
      }
      return body;
    } catch (error) {
      const why = deadline.signal.aborted ? `no answer within ${rolloutWaitMs / 1000} s` : messageOf(error);
      reporter.line(wording.unasked(url, why));
      return undefined;
    } finally {
      answered.abort();
    }
  }

  apiKey(): Promise<{ key: string; source: string }> {
    return localApiKey(this.options.home, this.control, this.options.env, this.options.projectDir);
  }

  async apiKeyInShell(): Promise<string> {
    const { env, projectDir, home } = this.options;
    if (apiKeyFromUser(env, projectDir)) return apiKeyInShell(env, projectDir);
    // FERRY_HOME/api-key, created and accepted by the platform here if it is not yet.
    await this.apiKey();
    return apiKeyInShell(env, projectDir, keyFilePath(home));
  }

  forgetKeyFile(hash: string): string | undefined {
    return forgetKeyFile(this.options.home, hash);
  }

  close(): Promise<void> {
    return this.#close();
  }
}
