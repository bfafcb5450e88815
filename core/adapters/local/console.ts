/**
 * Serves the web console (docs/observability.md) at /console: a few static files from the install's
 * `console/` folder and uPlot from node_modules, read per request (they are small, and a rebuilt
 * console shows up without a restart). The page talks to /manage/v1 and /v2 on the same origin with
 * the API key the user typed, kept in sessionStorage: nothing here knows a key.
 */
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import path from 'node:path';
import type { FastifyInstance } from 'fastify';

const require = createRequire(import.meta.url);

/** Only these files; the URL never names a path on disk. */
function consoleFiles(dir: string): Record<string, { file: string; type: string }> {
  const uplot = path.dirname(require.resolve('uplot/dist/uPlot.iife.min.js'));
  return {
    '/console': { file: path.join(dir, 'index.html'), type: 'text/html; charset=utf-8' },
    '/console/': { file: path.join(dir, 'index.html'), type: 'text/html; charset=utf-8' },
    '/console/app.js': { file: path.join(dir, 'app.js'), type: 'text/javascript; charset=utf-8' },
    '/console/app.css': { file: path.join(dir, 'app.css'), type: 'text/css; charset=utf-8' },
    '/console/uplot.js': {
      file: path.join(uplot, 'uPlot.iife.min.js'),
      type: 'text/javascript; charset=utf-8',
    },
    '/console/uplot.css': { file: path.join(uplot, 'uPlot.min.css'), type: 'text/css; charset=utf-8' },
  };
}

/**
 * The page only loads its own scripts and talks to its own origin; uPlot sets inline styles, hence
 * 'unsafe-inline' for styles (not scripts).
 */
const contentSecurityPolicy =
  "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

export function registerConsole(app: FastifyInstance, dir: string): void {
  for (const [url, { file, type }] of Object.entries(consoleFiles(dir))) {
    app.get(url, async (_request, reply) => {
      const body = await readFile(file);
      return reply
        .type(type)
        .header('content-security-policy', contentSecurityPolicy)
        .header('x-content-type-options', 'nosniff')
        .header('referrer-policy', 'no-referrer')
        .header('cache-control', 'no-cache')
        .send(body);
    });
  }
}
