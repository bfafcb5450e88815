/**
 * Webhooks as an SSRF vector (docs/security.md): internal addresses are refused after DNS resolution,
 * redirects are not followed, the connection goes to the address that was checked, an allowed host
 * gets its delivery, and pending retries survive a restart through the SQLite outbox.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { openLocalDatabase } from '../../core/adapters/local/sqlite.js';
import { FakeClock } from '../../core/clock.js';
import { parseJsonExact } from '../../core/json.js';
import {
  HttpWebhookSender,
  isPublicAddress,
  type Resolve,
  resolveWebhookTarget,
} from '../../core/webhooks.js';

interface Hit {
  method: string;
  path: string;
  host: string | undefined;
  body: string;
}
const hits: Hit[] = [];
let status = 200;
let receiver: Server;
let port: number;

beforeAll(async () => {
  receiver = createServer((req: IncomingMessage, res) => {
    let body = '';
    req.on('data', (c) => {
      body += c;
    });
    req.on('end', () => {
      hits.push({ method: req.method!, path: req.url!, host: req.headers.host, body });
      if (req.url === '/redirect')
        res.writeHead(302, { location: `http://127.0.0.1:${port}/internal` }).end();
      else res.writeHead(status).end();
    });
  });
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
  port = (receiver.address() as AddressInfo).port;
});
afterAll(() => new Promise<void>((r) => receiver.close(() => r())));
afterEach(() => {
  hits.length = 0;
  status = 200;
});

/** A resolver with fixed answers, counting lookups. */
function fakeDns(answers: Record<string, string[]>) {
  const lookups: string[] = [];
  const resolve: Resolve = async (hostname) => {
    lookups.push(hostname);
    const list = answers[hostname];
    if (!list) throw new Error('ENOTFOUND');
    return list.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }));
  };
  return { resolve, lookups };
}

describe('webhook SSRF table', () => {
  const dns = fakeDns({
    'loopback.test': ['127.0.0.1'],
    'ten.test': ['10.1.2.3'],
    'oneseventwo.test': ['172.16.5.4'],
    'oneninetwo.test': ['192.168.1.1'],
    'metadata.test': ['169.254.169.254'],
    'v6loop.test': ['::1'],
    'mapped.test': ['::ffff:127.0.0.1'],
    'mixed.test': ['93.184.216.34', '10.0.0.1'],
    'aws6.test': ['fd00:ec2::254'],
    'public.test': ['93.184.216.34'],
  });

  it.each([
    ['loopback', 'http://loopback.test/hook'],
    ['10/8', 'http://ten.test/hook'],
    ['172.16/12', 'http://oneseventwo.test/hook'],
    ['192.168/16', 'http://oneninetwo.test/hook'],
    ['metadata 169.254.169.254', 'http://metadata.test/latest/meta-data/'],
    ['IPv6 loopback', 'http://v6loop.test/hook'],
    ['IPv4-mapped loopback', 'http://mapped.test/hook'],
    ['one internal answer among public ones', 'http://mixed.test/hook'],
    ['AWS IPv6 metadata (unique local)', 'http://aws6.test/hook'],
    ['literal loopback', 'http://127.0.0.1/hook'],
    ['literal metadata', 'http://169.254.169.254/latest/meta-data/'],
    ['literal IPv6 loopback', 'http://[::1]/hook'],
    ['literal IPv4-mapped IPv6', 'http://[::ffff:7f00:1]/hook'],
    ['literal IPv4-compatible loopback (::/96)', 'http://[::127.0.0.1]/hook'],
    ['literal IPv4-compatible metadata (::/96)', 'http://[::a9fe:a9fe]/hook'],
    ['hex IPv4 loopback', 'http://0x7f.0.0.1/hook'],
    ['decimal IPv4 loopback', 'http://2130706433/hook'],
    ['unspecified', 'http://0.0.0.0/hook'],
    ['not http', 'file:///etc/passwd'],
  ])('refuses %s', async (_name, url) => {
    await expect(resolveWebhookTarget(url, { resolve: dns.resolve })).rejects.toThrow(
      /not a public address|must be http/,
    );
  });

  it('accepts a public address and resolves it once', async () => {
    const target = await resolveWebhookTarget('https://public.test/hook', { resolve: dns.resolve });
    expect(target.address).toBe('93.184.216.34');
    expect(isPublicAddress('2606:4700:4700::1111')).toBe(true);
  });

  it('refuses a redirect: a 3xx is a failed attempt, its Location is never fetched', async () => {
    const clock = new FakeClock(0);
    const warnings: string[] = [];
    const sender = new HttpWebhookSender({
      clock,
      allow: ['127.0.0.1'],
      attempts: 1,
      log: { warn: (m) => warnings.push(m) },
    });
    sender.send(`http://127.0.0.1:${port}/redirect`, { id: 'j' });
    await sender.idle();
    expect(hits.map((h) => h.path)).toEqual(['/redirect']);
    expect(warnings.join('\n')).toMatch(/answered 302 \(redirects are not followed\)/);
  });

  it('delivers to an allowed host, connecting to the address it checked', async () => {
    const dnsHook = fakeDns({ 'hooks.example': ['127.0.0.1'] });
    const sender = new HttpWebhookSender({
      clock: new FakeClock(0),
      allow: ['hooks.example'],
      resolve: dnsHook.resolve,
    });
    sender.send(`http://hooks.example:${port}/hook?token=t`, { id: 'job-1', status: 'COMPLETED' });
    await sender.idle();
    expect(hits).toEqual([
      {
        method: 'POST',
        path: '/hook?token=t',
        host: `hooks.example:${port}`,
        body: '{"id":"job-1","status":"COMPLETED"}',
      },
    ]);
    // One resolution per attempt: the socket did not look the name up again.
    expect(dnsHook.lookups).toEqual(['hooks.example']);
  });

  it('carries an integer beyond 2^53 with every digit (core/json.ts)', async () => {
    const sender = new HttpWebhookSender({ clock: new FakeClock(0), allow: ['127.0.0.1'] });
    const output = parseJsonExact(Buffer.from('{"seed":18446744073709551615}'), 'Request body');
    sender.send(`http://127.0.0.1:${port}/hook`, { id: 'job-2', status: 'COMPLETED', output });
    await sender.idle();
    expect(hits.map((h) => h.body)).toEqual([
      '{"id":"job-2","status":"COMPLETED","output":{"seed":18446744073709551615}}',
    ]);
  });

  it('without the allow-list, the same loopback receiver is never called', async () => {
    const sender = new HttpWebhookSender({ clock: new FakeClock(0), attempts: 3 });
    sender.send(`http://127.0.0.1:${port}/hook`, { id: 'j' });
    await sender.idle();
    expect(hits).toEqual([]);
  });
});

describe('webhook outbox', () => {
  it('keeps a pending retry across a restart and delivers it after', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'ferry-outbox-'));
    try {
      const clock = new FakeClock(1_000);
      let db = openLocalDatabase(join(dir, 'ferry.db'), { clock });
      status = 503;
      let sender = new HttpWebhookSender({
        clock,
        allow: ['127.0.0.1'],
        outbox: db.outbox,
        retryDelayMs: 10_000,
      });
      sender.send(`http://127.0.0.1:${port}/hook`, { id: 'kept' });
      await sender.idle();
      expect(hits).toHaveLength(1);
      // The platform stops before the retry is due.
      sender.close();
      await db.close();
      expect(await openAndCount(dir)).toBe(1);

      status = 200;
      clock.advance(10_000);
      db = openLocalDatabase(join(dir, 'ferry.db'), { clock });
      sender = new HttpWebhookSender({
        clock,
        allow: ['127.0.0.1'],
        outbox: db.outbox,
        retryDelayMs: 10_000,
      });
      sender.start(60_000);
      for (let i = 0; i < 200 && hits.length < 2; i++) await new Promise((r) => setTimeout(r, 10));
      await sender.idle();
      sender.close();
      expect(hits.map((h) => h.body)).toEqual(['{"id":"kept"}', '{"id":"kept"}']);
      expect(await db.outbox.due(Number.MAX_SAFE_INTEGER, 10)).toEqual([]);
      await db.close();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

async function openAndCount(dir: string): Promise<number> {
  const db = openLocalDatabase(join(dir, 'ferry.db'));
  try {
    return (await db.outbox.due(Number.MAX_SAFE_INTEGER, 100)).length;
  } finally {
    await db.close();
  }
}
