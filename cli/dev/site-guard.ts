/**
 * Who may call the dev server (docs/security.md#the-dev-server). It takes no API key, so without this
 * any web page open in the developer's browser could call it: a cross-site form or `fetch` POST
 * (a "simple" request, sent without a CORS preflight) would run endpoints, and a page whose DNS name
 * is rebound to 127.0.0.1 could read the answers, the management API's jobs included.
 */
import type { IncomingHttpHeaders } from 'node:http';
import { isIP } from 'node:net';

export interface SiteGuard {
  /** The address the server was asked to listen on (`--host`). */
  listenHost: string;
  /** `--allow-origin` values, as URL origins (`allowedOrigin`). */
  allowOrigins: readonly string[];
}

/** An origin as browsers send it (`http://devbox.lan:8888`), or undefined when `text` is none. */
export function allowedOrigin(text: string): string | undefined {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return undefined;
  }
  const bare = url.pathname === '/' && !url.search && !url.hash && !url.username && !url.password;
  return bare && (url.protocol === 'http:' || url.protocol === 'https:') ? url.origin : undefined;
}

/** A host name or address in lower case, without an IPv6 address's brackets. */
const bareName = (name: string) => name.toLowerCase().replace(/^\[(.*)\]$/, '$1');

/** The name in a Host header (`localhost:8888`, `[::1]:8888`), bare; undefined when it is no host. */
function hostNameOf(host: string): string | undefined {
  const match = /^(\[[0-9A-Fa-f:.]+\]|[^:[\]/@?#\s]+)(?::\d*)?$/.exec(host);
  return match ? bareName(match[1]!) : undefined;
}

/**
 * Why the request is refused, or undefined when it may go on. Host: an IP address (a page cannot be
 * served from one whose DNS answer changes, which is what rebinding needs), `localhost`, the `--host`
 * name, or an allowed origin's name. The port is not checked: an SSH or Docker forward changes it,
 * and a browser always names the port it connected to. Origin, which browsers send on every cross-
 * origin fetch and on form POSTs: the server's own (the Host it was reached by, over http) or an
 * allowed one. Without Origin, `Sec-Fetch-Site: cross-site` (a link, an image, a frame of another
 * site) is refused too. A client that is not a browser sends neither and is let through.
 */
export function crossSiteRefusal(headers: IncomingHttpHeaders, guard: SiteGuard): string | undefined {
  const host = headers.host;
  if (host !== undefined) {
    const name = hostNameOf(host);
    const known =
      name !== undefined &&
      (isIP(name) !== 0 ||
        name === 'localhost' ||
        name === bareName(guard.listenHost) ||
        guard.allowOrigins.some((origin) => bareName(new URL(origin).hostname) === name));
    if (!known) {
      return (
        `Host '${host}' is not a name of this machine: ferry dev takes no API key, so it answers only ` +
        'requests to localhost, an IP address or its --host, and a web page whose name was made to ' +
        `point here (DNS rebinding) cannot call your endpoints. To reach it by this name, start it with ` +
        `--allow-origin http://${host}`
      );
    }
  }
  const origin = headers.origin;
  if (origin !== undefined) {
    const own = host !== undefined && origin.toLowerCase() === `http://${host.toLowerCase()}`;
    if (own || guard.allowOrigins.includes(origin)) return undefined;
    return (
      `The request came from a web page at ${origin}, not from the dev server's own pages: ferry dev ` +
      'takes no API key, so it answers only its own pages (/docs) and clients that are not browsers, ' +
      `and a page you visit cannot call your endpoints. To let pages of ${origin} call it, start it ` +
      `with --allow-origin ${origin}`
    );
  }
  if (headers['sec-fetch-site'] === 'cross-site') {
    return (
      'The request came from a page of another site (Sec-Fetch-Site: cross-site): ferry dev takes no ' +
      'API key, so it answers only its own pages (/docs) and clients that are not browsers. Open its ' +
      'address in the browser yourself, or call it with curl or a script'
    );
  }
  return undefined;
}

/** The request headers a page of an allowed origin may send beyond CORS's safelisted ones. */
const corsRequestHeaders = ['content-type', 'authorization'];

/**
 * The CORS answer for a request from an `--allow-origin` origin; undefined for any other request
 * (without Origin, or from the server's own pages, nothing is needed; other origins are refused
 * above). Without it the browser sends that page's requests but hides the answers from it, and a
 * JSON POST, which it asks about first (OPTIONS with Access-Control-Request-Method), is never sent.
 * The origin is named itself, never `*`. `preflight`: the request is that question, answered 204.
 */
export function corsAnswer(
  method: string,
  headers: IncomingHttpHeaders,
  guard: SiteGuard,
): { preflight: boolean; headers: Record<string, string> } | undefined {
  const origin = headers.origin;
  if (origin === undefined || !guard.allowOrigins.includes(origin)) return undefined;
  const answer: Record<string, string> = { 'access-control-allow-origin': origin, vary: 'Origin' };
  const asked = headers['access-control-request-method'];
  if (method !== 'OPTIONS' || asked === undefined) return { preflight: false, headers: answer };
  answer['access-control-allow-methods'] = 'GET, HEAD, POST, PUT, DELETE, PATCH';
  const wanted = (headers['access-control-request-headers'] ?? '')
    .split(',')
    .map((name) => name.trim().toLowerCase())
    .filter((name) => corsRequestHeaders.includes(name));
  if (wanted.length > 0) answer['access-control-allow-headers'] = [...new Set(wanted)].join(', ');
  // The answer depends on what was asked, not only on Origin.
  answer.vary = 'Origin, Access-Control-Request-Headers';
  return { preflight: true, headers: answer };
}
