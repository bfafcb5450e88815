/**
 * The dev server's rule of who may call it (cli/dev/site-guard.ts), on the header spellings the e2e
 * test (test/e2e/cli-dev.test.ts) does not send: default ports, IPv6, case, Hosts that are no host;
 * and the CORS answer an --allow-origin page gets.
 */
import { describe, expect, it } from 'vitest';
import { allowedOrigin, corsAnswer, crossSiteRefusal } from '../../cli/dev/site-guard.js';

const local = { listenHost: 'localhost', allowOrigins: [] };

describe('crossSiteRefusal', () => {
  it('lets in its own origin by every name of this machine, default port included', () => {
    for (const host of [
      'localhost:8888',
      'LocalHost:8888',
      'localhost',
      '127.0.0.1:80',
      '[::1]:8888',
      '10.1.2.3:8888',
    ])
      expect(crossSiteRefusal({ host, origin: `http://${host}` }, local), host).toBeUndefined();
    expect(
      crossSiteRefusal({ host: 'localhost:8888', origin: 'http://LOCALHOST:8888' }, local),
    ).toBeUndefined();
  });

  it('lets in the --host name and an allowed origin’s name, and nothing more', () => {
    const guard = {
      listenHost: 'DevBox.lan',
      allowOrigins: ['http://[fd00::1]:9000', 'https://app.example'],
    };
    expect(crossSiteRefusal({ host: 'devbox.lan:8888' }, guard)).toBeUndefined();
    expect(crossSiteRefusal({ host: 'app.example' }, guard)).toBeUndefined();
    expect(
      crossSiteRefusal({ host: 'localhost:8888', origin: 'https://app.example' }, guard),
    ).toBeUndefined();
    for (const host of [
      'evil.example:8888',
      'localhost.:8888',
      'evil.example/@localhost',
      'localhost:8888 x',
      '',
    ])
      expect(crossSiteRefusal({ host }, guard), host).toMatch(/is not a name of this machine/);
  });

  it('refuses another origin, an https one of the same name, and null; a cross-site fetch without Origin', () => {
    for (const origin of ['http://localhost:3000', 'https://localhost:8888', 'null'])
      expect(crossSiteRefusal({ host: 'localhost:8888', origin }, local), origin).toContain(
        `start it with --allow-origin ${origin}`,
      );
    expect(crossSiteRefusal({ host: 'localhost:8888', 'sec-fetch-site': 'cross-site' }, local)).toContain(
      'Sec-Fetch-Site: cross-site',
    );
    for (const site of ['same-origin', 'same-site', 'none'])
      expect(
        crossSiteRefusal({ host: 'localhost:8888', 'sec-fetch-site': site }, local),
        site,
      ).toBeUndefined();
  });
});

describe('allowedOrigin', () => {
  it('takes an origin as browsers send it, and nothing else', () => {
    expect(allowedOrigin('http://DevBox.lan:8888/')).toBe('http://devbox.lan:8888');
    expect(allowedOrigin('https://app.example:443')).toBe('https://app.example');
    for (const text of [
      'devbox.lan',
      'http://devbox.lan/path',
      'http://u:p@devbox.lan',
      'file:///x',
      'ftp://a',
      '*',
    ])
      expect(allowedOrigin(text), text).toBeUndefined();
  });
});

describe('corsAnswer', () => {
  const guard = { listenHost: 'localhost', allowOrigins: ['http://localhost:5173'] };
  const page = 'http://localhost:5173';

  it("answers an allowed origin's preflight with that origin, the methods, and the headers asked among content-type and authorization", () => {
    expect(
      corsAnswer(
        'OPTIONS',
        {
          origin: page,
          'access-control-request-method': 'POST',
          'access-control-request-headers': 'Content-Type, x-custom,authorization',
        },
        guard,
      ),
    ).toEqual({
      preflight: true,
      headers: {
        'access-control-allow-origin': page,
        'access-control-allow-methods': 'GET, HEAD, POST, PUT, DELETE, PATCH',
        'access-control-allow-headers': 'content-type, authorization',
        vary: 'Origin, Access-Control-Request-Headers',
      },
    });
    const bare = corsAnswer('OPTIONS', { origin: page, 'access-control-request-method': 'PUT' }, guard);
    expect(bare?.preflight).toBe(true);
    expect(bare?.headers['access-control-allow-headers']).toBeUndefined();
  });

  it('names the allowed origin on its other requests (an OPTIONS without Access-Control-Request-Method is one), and nothing for the rest', () => {
    const named = { preflight: false, headers: { 'access-control-allow-origin': page, vary: 'Origin' } };
    expect(corsAnswer('POST', { origin: page }, guard)).toEqual(named);
    expect(corsAnswer('OPTIONS', { origin: page }, guard)).toEqual(named);
    for (const headers of [
      {},
      { origin: 'http://localhost:5174', 'access-control-request-method': 'POST' },
      { origin: 'http://localhost:8888' },
      { origin: 'null' },
    ])
      expect(corsAnswer('OPTIONS', headers, guard), JSON.stringify(headers)).toBeUndefined();
  });
});
