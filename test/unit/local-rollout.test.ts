/**
 * LocalProvider.awaitRollout (cli/providers/local.ts), the wait of `ferry deploy` (local) and
 * `ferry secrets set` on the running serve's `POST /local/v1/reconcile`: the serve answers only once
 * its pass is done (it unpacks each changed endpoint's new artifact first), so the deploy says every
 * 5 s that it still waits, and gives up with a warning after 60 s. It printed one line before and one
 * after, nothing in between. A real HTTP server stands in for the serve's route and holds its answer
 * until the test gives it; time is a FakeClock, so no test waits for real.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { Reporter } from '../../cli/io.js';
import { LocalProvider } from '../../cli/providers/local.js';
import { FileBlobStore } from '../../core/adapters/local/files.js';
import { reconcilePath } from '../../core/adapters/local/rollout.js';
import { openLocalDatabase } from '../../core/adapters/local/sqlite.js';
import { FakeClock } from '../../core/clock.js';
import type { EndpointRecord } from '../../core/ports.js';

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const record = (id: string, name: string): EndpointRecord => ({
  id,
  app: 'a',
  env: 'dev',
  name,
  kind: 'queue',
  config: {},
  fingerprint: 'f',
  artifactKey: `artifacts/${id}.tar.gz`,
  createdAt: 1,
  updatedAt: 1,
});

/** A stand-in for the serve's reconcile route: each request waits in `asked` for the test to answer. */
async function holdingServe() {
  const asked: Array<{ request: IncomingMessage; response: ServerResponse }> = [];
  let heard: () => void = () => {};
  const server = createServer((request, response) => {
    asked.push({ request, response });
    heard();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push(
    () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  );
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    asked,
    /** Resolves once a request has come in. */
    request: () =>
      new Promise<void>((resolve) => {
        if (asked.length > 0) resolve();
        else heard = resolve;
      }),
  };
}

/** A LocalProvider on a real SQLite file, pointed at `url`, with `clock`; and what it printed. */
function providerFor(url: string, clock: FakeClock) {
  const home = mkdtempSync(path.join(tmpdir(), 'wd-local-rollout-'));
  const db = openLocalDatabase(path.join(home, 'ferry.db'));
  const blobs = new FileBlobStore(path.join(home, 'blobs'));
  cleanups.push(async () => {
    await blobs.close();
    await db.close();
    rmSync(home, { recursive: true, force: true });
  });
  const provider = new LocalProvider({
    home,
    env: { FERRY_API_KEY: 'fy_rollout_test' },
    projectDir: home,
    stores: { control: db.control, blobs, url },
    clock,
  });
  const lines: string[] = [];
  let printed: () => void = () => {};
  const reporter = {
    line: (text = '') => {
      lines.push(text);
      printed();
    },
  } as unknown as Reporter;
  /** Resolves once a line holding `text` was printed (it may have been already). */
  const sees = (text: string) =>
    new Promise<void>((resolve) => {
      const check = () => {
        if (lines.some((line) => line.includes(text))) resolve();
        else printed = check;
      };
      check();
    });
  return { provider, lines, reporter, sees };
}

describe('LocalProvider.awaitRollout', () => {
  it('says every 5 s that it still waits for the serve to take up the endpoints, until it answers', async () => {
    const serve = await holdingServe();
    const clock = new FakeClock();
    const { provider, lines, reporter, sees } = providerFor(serve.url, clock);
    const waited = provider.awaitRollout([record('ep-1', 'greet'), record('ep-2', 'shout')], reporter);
    await serve.request();
    expect(serve.asked[0]!.request.url).toBe(reconcilePath);
    expect(serve.asked[0]!.request.headers.authorization).toBe('Bearer fy_rollout_test');
    clock.advance(5_000);
    await sees('… 5 s');
    clock.advance(5_000);
    await sees('… 10 s');
    clock.advance(2_000);
    serve.asked[0]!.response.writeHead(200, { 'content-type': 'application/json' });
    serve.asked[0]!.response.end(JSON.stringify({ endpoints: [{ id: 'ep-1', running: true }] }));
    await waited;
    expect(lines).toEqual([
      '  the running platform takes up greet, shout now…',
      '  still waiting for the platform to take up greet, shout (it unpacks each new deployment first)… 5 s',
      '  still waiting for the platform to take up greet, shout (it unpacks each new deployment first)… 10 s',
      "  ✓ every job from now on runs on this deployment's workers (an earlier one's finish what they hold)",
    ]);
    // Nothing more once it answered: the progress lines stopped with the wait.
    clock.advance(60_000);
    expect(lines).toHaveLength(4);
    expect(clock.pendingSleeps()).toBe(0);
  });

  it('gives up after 60 s with a warning; the serve rolls at its next pass', async () => {
    const serve = await holdingServe();
    const clock = new FakeClock();
    const { provider, lines, reporter, sees } = providerFor(serve.url, clock);
    const waited = provider.awaitRollout([record('ep-1', 'greet')], reporter);
    await serve.request();
    const hungUp = new Promise<void>((resolve) => serve.asked[0]!.request.socket.once('close', resolve));
    for (let sec = 5; sec < 60; sec += 5) {
      clock.advance(5_000);
      await sees(`… ${sec} s`);
    }
    clock.advance(5_000);
    await waited;
    // The deploy stopped asking: the connection is closed from its side.
    await hungUp;
    expect(lines.filter((line) => line.startsWith('  still waiting'))).toHaveLength(11);
    expect(lines.at(-1)).toBe(
      `  warning: could not ask the platform at ${serve.url} to roll its workers now (no answer within 60 s); it rolls them when it next reads the records, within a second or two`,
    );
    expect(clock.pendingSleeps()).toBe(0);
  });
});
