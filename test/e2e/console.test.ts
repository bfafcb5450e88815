/**
 * The web console in a real headless Chromium (Debian's `chromium`, driven by playwright-core)
 * against the embedded platform with real Python workers: sign in, see the example endpoints,
 * submit a job from the request box and watch it complete, read its logs, see a failed job's error,
 * and a wrong key refused. With FERRY_UPDATE_SCREENSHOTS=1 the screenshots go to docs/ (the README
 * shows them); otherwise to a temp folder, so a test run leaves the tree as it was.
 */
import { cpSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join, resolve } from 'node:path';
import { type BrowserContext, chromium, type Page, type Request } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { scanProject } from '../../cli/build/scan.js';
import { recordFor } from '../support/endpoints.js';
import { call, startTestPlatform, type TestPlatform, testApiKey } from '../support/platform.js';

const chromiumPath = '/usr/bin/chromium';
const chromiumArgs = [
  '--no-sandbox',
  '--headless',
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-first-run',
];
let platform: TestPlatform;
let browser: BrowserContext;
let page: Page;
let profile: string;
let shots: string;
let apps: string;

const shot = (name: string) => page.screenshot({ path: join(shots, `console-${name}.png`) });

/**
 * A tab of a browser of its own, signed in at `address`, with a fake clock (`tab.clock`) and the
 * addresses of every fetch the page made, written down in the page as it calls fetch: a poll's call
 * fired while `runFor` ran the clock is in `fetched()` once `runFor` is done, where a route's count
 * may still be on its way. Not a tab of the shared browser: a clock installed in one tab is
 * installed in every tab of its browser context.
 */
async function clockTab(address: string) {
  const other = await chromium.launch({ executablePath: chromiumPath, args: chromiumArgs });
  const tab = await other.newPage();
  // A script (the tests' TypeScript has no DOM types), run in the page before its own.
  await tab.addInitScript(`(() => {
    const calls = [];
    const fetchOf = window.fetch.bind(window);
    window.fetchedByPage = calls;
    window.fetch = (input, init) => {
      calls.push(String(input));
      return fetchOf(input, init);
    };
  })()`);
  try {
    await tab.clock.install();
    await tab.goto(address);
    await tab.fill('#api-key', testApiKey);
    await tab.click('#sign-in');
  } catch (error) {
    await other.close();
    throw error;
  }
  const fetched = () => tab.evaluate<string[]>('window.fetchedByPage');
  /**
   * Stops the clock: from here on only `tab.clock.runFor` moves it. At a moment a second ahead of the
   * page's clock, taken again should the clock pass it before pauseAt comes: pauseAt refuses a moment
   * in the past ("Cannot fast-forward to the past"), and 100 ms ahead failed on a loaded host.
   */
  const pause = async () => {
    for (let tries = 1; ; tries++) {
      const at = await tab.evaluate<number>('Date.now() + 1000');
      try {
        return await tab.clock.pauseAt(at);
      } catch (error) {
        if (tries >= 5 || !String(error).includes('to the past')) throw error;
      }
    }
  };
  return { other, tab, fetched, pause };
}

beforeAll(async () => {
  if (!existsSync(chromiumPath)) {
    throw new Error(
      `${chromiumPath} is missing: apt-get install -y --no-install-recommends chromium (.ci/run does)`,
    );
  }
  shots = process.env.FERRY_UPDATE_SCREENSHOTS
    ? resolve('docs')
    : mkdtempSync(join(tmpdir(), 'ferry-shots-'));
  profile = mkdtempSync(join(tmpdir(), 'ferry-chromium-'));
  platform = await startTestPlatform({
    consoleDir: resolve('console'),
    workerWaitMs: 5_000,
    workers: { ferryPythonPath: resolve('worker-image/python'), tickMs: 100, reconcileIntervalMs: 500 },
  });
  // Copies, so tracebacks in the screenshots name a neutral folder and not this checkout.
  apps = mkdtempSync(join(tmpdir(), 'ferry-console-'));
  for (const source of [resolve('examples/hello'), resolve('test/e2e/fixtures/observe')]) {
    const projectDir = join(apps, basename(source));
    cpSync(source, projectDir, { recursive: true });
    const { endpoints } = await scanProject({ projectDir });
    for (const endpoint of endpoints) await platform.db.control.putEndpoint(recordFor(endpoint, projectDir));
  }
  await platform.workers!.reconcile();
  // A fresh profile folder per run (playwright passes it as --user-data-dir).
  browser = await chromium.launchPersistentContext(profile, {
    executablePath: chromiumPath,
    args: chromiumArgs,
    viewport: { width: 1280, height: 800 },
  });
  page = browser.pages()[0] ?? (await browser.newPage());
  page.setDefaultTimeout(30_000);
});

afterAll(async () => {
  await browser?.close();
  await platform?.stop();
  if (profile) rmSync(profile, { recursive: true, force: true });
  if (apps) rmSync(apps, { recursive: true, force: true });
  if (shots && !process.env.FERRY_UPDATE_SCREENSHOTS) rmSync(shots, { recursive: true, force: true });
});

describe('console', () => {
  it('asks for a key when none was typed, and sends nothing', async () => {
    const sent: string[] = [];
    const record = (r: Request) => {
      if (new URL(r.url()).pathname.startsWith('/manage/')) sent.push(r.url());
    };
    page.on('request', record);
    try {
      await page.goto(`${platform.url}/console`);
      await page.fill('#api-key', '   ');
      await page.click('#sign-in');
      await expect
        .poll(() => page.textContent('#sign-in-error'), { timeout: 10_000 })
        .toBe('Enter an API key first (ferry keys create makes one).');
      expect(sent).toEqual([]);
    } finally {
      page.off('request', record);
    }
  });

  it('refuses a wrong key', async () => {
    await page.goto(`${platform.url}/console`);
    await page.fill('#api-key', 'fy_not_a_key');
    await page.click('#sign-in');
    await expect.poll(() => page.textContent('#sign-in-error'), { timeout: 30_000 }).toContain('refused');
    expect(await page.evaluate('sessionStorage.getItem("ferry.apiKey")')).toBeNull();
    await shot('signin');
  });

  it('signs in and shows the example endpoints with live counts', async () => {
    await page.fill('#api-key', testApiKey);
    await page.click('#sign-in');
    await page.waitForSelector('#endpoints tr[data-endpoint="hello"]');
    const names = await page.$$eval('#endpoints tbody tr td:first-child', (cells) =>
      cells.map((c) => c.textContent),
    );
    expect(names).toEqual(expect.arrayContaining(['hello', 'hello-api', 'chatty', 'boom']));
    // The key is in this tab's session only: never in the URL, never in localStorage.
    expect(page.url()).not.toContain(testApiKey);
    expect(await page.evaluate('sessionStorage.getItem("ferry.apiKey")')).toBe(testApiKey);
    expect(await page.evaluate('localStorage.length')).toBe(0);
  });

  it('submits a job from the request box and watches it complete', async () => {
    await page.click('#endpoints tr[data-endpoint="chatty"]');
    await page.click('button[data-tab="request"]');
    await page.fill('#request-input', '{"input": {"name": "Browser", "lines": 3}}');
    await page.click('#send-run');
    await expect.poll(() => page.textContent('#request-status'), { timeout: 30_000 }).toBe('COMPLETED');
    expect(await page.textContent('#request-output')).toContain('Hello, Browser!');
    await shot('request');
  });

  it("opens the job's logs", async () => {
    await page.click('#request-job');
    await expect
      .poll(() => page.textContent('#job-logs'), { timeout: 30_000 })
      .toContain('working on Browser: step 2');
    expect(await page.textContent('#job-logs')).toContain('careful, Browser');
    expect(await page.textContent('#job-status')).toBe('COMPLETED');
    // An ended job cannot be cancelled: no Cancel.
    expect(await page.isVisible('#job-cancel')).toBe(false);
  });

  it("shows a failed job's error", async () => {
    await page.goto(`${platform.url}/console#/e/boom/request`);
    await page.fill('#request-input', '{"input": {"why": "shown in the browser"}}');
    await page.click('#send-runsync');
    await expect.poll(() => page.textContent('#request-status'), { timeout: 30_000 }).toBe('FAILED');
    // The request box shows the error as the job's page does (type, message, traceback), not the
    // runtime's JSON as an escaped string.
    expect(await page.textContent('#request-output #job-error')).toBe(
      'ValueError: boom: shown in the browser',
    );
    expect(await page.textContent('#request-output pre')).toContain('Traceback (most recent call last)');
    expect(await page.textContent('#request-output')).not.toContain('error_type');
    await page.click('#request-job');
    await expect
      .poll(() => page.textContent('#job-error'), { timeout: 30_000 })
      .toContain('boom: shown in the browser');
    await expect.poll(() => page.textContent('#job-logs'), { timeout: 30_000 }).toContain('about to fail');
    // Ended, it still shows the input it failed on (docs/observability.md says why).
    expect(JSON.parse((await page.textContent('#job-input')) ?? '')).toEqual({ why: 'shown in the browser' });
    await shot('failed');
  });

  it('lists jobs, workers and charts', async () => {
    await page.goto(`${platform.url}/console#/e/chatty/jobs`);
    await page.waitForSelector('#jobs tbody tr[data-job]');
    await page.selectOption('#status-filter', 'COMPLETED');
    await expect
      .poll(() => page.$$eval('#jobs tbody tr .badge', (b) => b.map((x) => x.textContent)), {
        timeout: 30_000,
      })
      .toEqual(['COMPLETED']);
    // Today's jobs: the time only, the full ISO time in the title.
    const [shown, iso, time] = await page.$eval('#jobs tbody tr[data-job] time', (t) => [
      t.textContent,
      t.getAttribute('title'),
      new Date(t.getAttribute('datetime') ?? '').toLocaleTimeString(),
    ]);
    expect(shown).toBe(time);
    expect(iso).toMatch(/^\d{4}-\d\d-\d\dT/);
    await shot('jobs');
    await page.click('button[data-tab="workers"]');
    await page.waitForSelector('#workers tbody tr');
    await page.click('button[data-tab="charts"]');
    // uPlot draws on canvas: four panels, each with its legend.
    await expect.poll(() => page.$$eval('#charts canvas', (c) => c.length), { timeout: 30_000 }).toBe(4);
    await page.goto(`${platform.url}/console#/e/chatty/charts`);
    await expect.poll(() => page.$$eval('#charts canvas', (c) => c.length), { timeout: 30_000 }).toBe(4);
    await shot('charts');
  });

  it("draws each chart's y axis as wide as its longest label", async () => {
    // A 100-minute p95: its label, 6,000,000 (ms), is wider than the 60 px the axis had.
    const t = Math.floor(Date.now() / 1000);
    const series = (v: number) => [v, v, v];
    const metrics = {
      fromMs: (t - 60) * 1000,
      stepSec: 30,
      t: [t - 60, t - 30, t],
      jobsPerSec: series(0.5),
      failedPerSec: series(0),
      executionP50Ms: series(1_000),
      executionP95Ms: series(6_000_000),
      delayP50Ms: series(5),
      delayP95Ms: series(10),
      queueDepth: series(0),
      workers: series(1),
      truncated: false,
    };
    await page.route('**/manage/v1/endpoints/chatty/metrics?*', (r) => r.fulfill({ json: metrics }));
    try {
      // From another page: the one before may be these charts already, drawn from the real series.
      await page.goto(`${platform.url}/console#/e/chatty/workers`);
      await page.click('button[data-tab="charts"]');
      await expect.poll(() => page.$$eval('#charts canvas', (c) => c.length), { timeout: 30_000 }).toBe(4);
      // uPlot writes each axis's size as its element's width (the y axis is the second); the labels
      // are drawn on the canvas in its default axis font, right-aligned past the ticks (10 px) and
      // their gap (5 px).
      const axisPx = await page.$$eval(
        '#charts .chart:nth-child(2) .u-axis',
        (axes) => axes[1]?.getBoundingClientRect().width,
      );
      const labelPx = await page.evaluate(`(() => {
        const ctx = document.createElement('canvas').getContext('2d');
        ctx.font = '12px system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, "Noto Sans", sans-serif';
        return ctx.measureText('6,000,000').width;
      })()`);
      expect(axisPx).toBeGreaterThanOrEqual(Number(labelPx) + 15);
    } finally {
      await page.unroute('**/manage/v1/endpoints/chatty/metrics?*');
    }
  });

  it('fits a 375 px wide window: no page scrolls sideways, a wide table scrolls in its own box', async () => {
    await page.setViewportSize({ width: 375, height: 740 });
    const sideways = () =>
      page.evaluate('document.documentElement.scrollWidth - document.documentElement.clientWidth');
    try {
      await page.goto(`${platform.url}/console#/`);
      await page.waitForSelector('#endpoints tr[data-endpoint="chatty"]');
      expect(await sideways()).toBe(0);
      // The table is wider than the window: its box scrolls.
      expect(
        await page.$eval('#endpoints', (t) => t.parentElement!.scrollWidth > t.parentElement!.clientWidth),
      ).toBe(true);
      await page.goto(`${platform.url}/console#/e/chatty/jobs`);
      await page.waitForSelector('#jobs tbody tr[data-job]');
      expect(await sideways()).toBe(0);
      // Every tab is in the window, none past its right edge.
      const tabsRight = await page.$$eval('.tabs button', (b) =>
        b.map((x) => x.getBoundingClientRect().right),
      );
      expect(Math.max(...tabsRight)).toBeLessThanOrEqual(375);
      await page.click('button[data-tab="charts"]');
      await expect.poll(() => page.$$eval('#charts canvas', (c) => c.length), { timeout: 30_000 }).toBe(4);
      expect(await sideways()).toBe(0);
    } finally {
      await page.setViewportSize({ width: 1280, height: 800 });
    }
  });

  it('marks an endpoint whose workers cannot start as failing, its reason shown', async () => {
    const projectDir = join(apps, 'broken');
    mkdirSync(projectDir);
    writeFileSync(
      join(projectDir, 'broken_api.py'),
      'import ferry_no_such_package_xyz\nfrom ferry import Endpoint\n\napi = Endpoint(name="broken-api", cpu="1-2", workers=(1, 1))\n\n\n@api.get("/x")\ndef x():\n    return 1\n',
    );
    const { endpoints } = await scanProject({ projectDir });
    await platform.db.control.putEndpoint(recordFor(endpoints[0]!, projectDir));
    await platform.workers!.reconcile();
    try {
      await page.goto(`${platform.url}/console#/`);
      const cell = '#endpoints tr[data-endpoint="broken-api"] td:last-child';
      await expect
        .poll(() => page.$$eval(`${cell} .badge`, (b) => b.map((x) => x.textContent)), { timeout: 30_000 })
        .toEqual(['failing']);
      // The reason as text in the list (not only a tooltip: touch and keyboard reach it too), the
      // whole of it in its title.
      const reason = `${cell} .reason`;
      expect(await page.isVisible(reason)).toBe(true);
      expect(await page.innerText(reason)).toMatch(/workers in a row exited/);
      expect(await page.getAttribute(reason, 'title')).toBe(await page.textContent(reason));
      // The working endpoints still show their worker counts.
      expect(await page.textContent('#endpoints tr[data-endpoint="chatty"] td:last-child')).toMatch(/^\d/);
      await shot('endpoints');
      // The endpoint's own page says why, in words, above its tabs.
      await page.click('#endpoints tr[data-endpoint="broken-api"]');
      await expect
        .poll(() => page.textContent('#endpoint-problem'), { timeout: 30_000 })
        .toMatch(/^Workers cannot start: .*workers in a row exited/);
      await page.goto(`${platform.url}/console#/e/chatty/jobs`);
      await page.waitForSelector('#jobs');
      expect(await page.isVisible('#endpoint-problem')).toBe(false);
    } finally {
      await platform.db.control.deleteEndpoint('broken-api');
      await platform.workers!.reconcile();
    }
  });

  it('opens an endpoint and a job from the keyboard, the focus kept through the live redraws', async () => {
    const focused = () => page.evaluate('document.activeElement?.getAttribute("href")');
    const endpointsRead = (r: { url(): string }) => r.url().endsWith('/manage/v1/endpoints');
    await page.goto(`${platform.url}/console#/`);
    await page.waitForSelector('#endpoints tr[data-endpoint="chatty"]');
    await page.focus('#endpoints tr[data-endpoint="chatty"] a');
    // A read is sent once the one before has drawn its rows anew: two reads on, the list was redrawn
    // under the focus at least once.
    await page.waitForRequest(endpointsRead);
    await page.waitForRequest(endpointsRead);
    expect(await focused()).toBe('#/e/chatty');
    await page.keyboard.press('Enter');
    await page.waitForSelector('#jobs tbody tr[data-job]');
    const job = await page.getAttribute('#jobs tbody tr[data-job]', 'data-job');
    await page.focus('#jobs tbody tr[data-job] a');
    await page.keyboard.press('Enter');
    await expect.poll(() => page.textContent('h1'), { timeout: 10_000 }).toBe(`Job ${job}`);
  });

  it('says when a list has nothing to show', async () => {
    await page.goto(`${platform.url}/console#/e/chatty/jobs`);
    await page.waitForSelector('#jobs tbody tr[data-job]');
    await page.selectOption('#status-filter', 'TIMED_OUT');
    await expect
      .poll(() => page.textContent('#jobs tbody'), { timeout: 30_000 })
      .toContain('No TIMED_OUT jobs');
    expect(await page.$$eval('#jobs tbody tr[data-job]', (r) => r.length)).toBe(0);
  });

  it('keeps the status filter when the user comes Back from a job, and on a reload', async () => {
    // Into the list anew (the test before left a filter on its own page).
    await page.goto(`${platform.url}/console#/e/chatty/workers`);
    await page.click('button[data-tab="jobs"]');
    await page.waitForSelector('#jobs tbody tr[data-job]');
    await page.selectOption('#status-filter', 'COMPLETED');
    const statuses = () =>
      page.$$eval('#jobs tbody tr .badge', (b) => [...new Set(b.map((x) => x.textContent))]);
    await expect.poll(statuses, { timeout: 30_000 }).toEqual(['COMPLETED']);
    await page.click('#jobs tbody tr[data-job]');
    await page.waitForSelector('#job-status');
    await page.goBack();
    await page.waitForSelector('#jobs tbody tr[data-job]');
    expect(await page.inputValue('#status-filter')).toBe('COMPLETED');
    await expect.poll(statuses, { timeout: 30_000 }).toEqual(['COMPLETED']);
    await page.reload();
    await page.waitForSelector('#jobs tbody tr[data-job]');
    expect(await page.inputValue('#status-filter')).toBe('COMPLETED');
  });

  it('stops watching a sent job once its page is left', async () => {
    let asked = 0;
    // A job that never ends, answered at once (as where status-sync cannot wait).
    await page.route('**/v2/chatty/status-sync/**', (r) => {
      asked++;
      return r.fulfill({
        status: 200,
        contentType: 'application/json',
        body: '{"id":"x","status":"IN_PROGRESS"}',
      });
    });
    try {
      await page.goto(`${platform.url}/console#/e/chatty/request`);
      await page.fill('#request-input', '{"input": {"name": "Left"}}');
      await page.click('#send-run');
      await expect.poll(() => asked, { timeout: 30_000 }).toBeGreaterThan(0);
      await page.goto(`${platform.url}/console#/`);
      const endpointsRead = (r: { url(): string }) => r.url().endsWith('/manage/v1/endpoints');
      await page.waitForRequest(endpointsRead);
      await page.waitForRequest(endpointsRead);
      const then = asked;
      // Two more reads of the list (every 2 s): no more asking about the job.
      await page.waitForRequest(endpointsRead);
      await page.waitForRequest(endpointsRead);
      expect(asked).toBe(then);
      expect(then).toBeLessThan(10);
    } finally {
      await page.unroute('**/v2/chatty/status-sync/**');
    }
  });

  it('keeps the older jobs it was asked for until Newest', async () => {
    for (let i = 0; i < 30; i++) {
      const { status } = await call(platform.baseUrl, 'POST', '/hello/run', { input: { name: `n${i}` } });
      expect(status).toBe(200);
    }
    const { other, tab, fetched, pause } = await clockTab(`${platform.url}/console#/e/hello/jobs`);
    try {
      const rows = () => tab.$$eval('#jobs tbody tr[data-job]', (r) => r.length);
      await expect.poll(rows, { timeout: 30_000 }).toBe(25);
      await pause();
      await tab.click('button:text("Older")');
      await expect.poll(rows, { timeout: 30_000 }).toBe(30);
      // The live page's read (no cursor) and the endpoint page's own read of the endpoint.
      const reads = async () => {
        const urls = await fetched();
        return {
          live: urls.filter((u) => u.includes('/hello/jobs?') && !u.includes('cursor=')).length,
          endpoint: urls.filter((u) => u.endsWith('/manage/v1/endpoints/hello')).length,
        };
      };
      const before = await reads();
      // 10 s on the clock: past three turns of the live refresh (every 3 s) and two of the endpoint
      // page's poll (every 5 s), which read again (the page's polls did run); the live one did not.
      await tab.clock.runFor(10_000);
      const after = await reads();
      expect(after.endpoint).toBeGreaterThan(before.endpoint);
      expect(after.live).toBe(before.live);
      expect(await rows()).toBe(30);
      await tab.click('#jobs-newest');
      await expect.poll(rows, { timeout: 30_000 }).toBe(25);
    } finally {
      await other.close();
    }
  });

  it('says once that the platform cannot be reached, and clears it when it answers again', async () => {
    await page.goto(`${platform.url}/console#/`);
    await page.waitForSelector('#endpoints tr[data-endpoint="hello"]');
    // fetch fails in the browser as it does with the platform down.
    await page.route('**/manage/v1/**', (r) => r.abort('connectionrefused'));
    const shown = () =>
      page.$$eval('.error', (els) => els.filter((e) => e.checkVisibility()).map((e) => e.textContent));
    try {
      await expect
        .poll(shown, { timeout: 10_000 })
        .toEqual([expect.stringContaining('Cannot reach the platform')]);
      // Two more reads of the list (one after another, every 2 s): the one before the second has
      // failed and been shown, and there is still one banner, the table marked as stale.
      const endpointsRead = (r: { url(): string }) => r.url().endsWith('/manage/v1/endpoints');
      await page.waitForRequest(endpointsRead);
      await page.waitForRequest(endpointsRead);
      expect(await shown()).toEqual([expect.stringContaining('out of date')]);
      expect(await page.getAttribute('#main', 'class')).toContain('stale');
    } finally {
      await page.unroute('**/manage/v1/**');
    }
    await expect.poll(shown, { timeout: 10_000 }).toEqual([]);
    expect(await page.getAttribute('#main', 'class')).not.toContain('stale');
  });

  it("draws an endpoint's page once the platform answers again", async () => {
    await page.goto(`${platform.url}/console#/`);
    await page.waitForSelector('#endpoints tr[data-endpoint="chatty"]');
    await page.route('**/manage/v1/endpoints/chatty', (r) => r.abort('connectionrefused'));
    try {
      await page.goto(`${platform.url}/console#/e/chatty/jobs`);
      await expect
        .poll(() => page.textContent('#problem'), { timeout: 10_000 })
        .toContain('Cannot reach the platform');
    } finally {
      await page.unroute('**/manage/v1/endpoints/chatty');
    }
    await page.waitForSelector('#jobs tbody tr[data-job]');
    expect(await page.isVisible('#problem')).toBe(false);
  });

  it("says a gateway's HTML error page as its status, and clears it when the platform answers", async () => {
    await page.goto(`${platform.url}/console#/`);
    await page.waitForSelector('#endpoints tr[data-endpoint="hello"]');
    await page.route('**/manage/v1/endpoints', (r) =>
      r.fulfill({
        status: 502,
        contentType: 'text/html',
        body: '<html><body><h1>502 Bad Gateway</h1></body></html>',
      }),
    );
    try {
      await expect
        .poll(() => page.textContent('#problem'), { timeout: 10_000 })
        .toContain('The platform answered HTTP 502');
      expect(await page.textContent('#problem')).not.toContain('JSON');
    } finally {
      await page.unroute('**/manage/v1/endpoints');
    }
    await expect.poll(() => page.isVisible('#problem'), { timeout: 10_000 }).toBe(false);
  });

  it('stops asking for a job that is not there', async () => {
    const { other, tab, fetched, pause } = await clockTab(
      `${platform.url}/console#/e/hello/jobs/no-such-job`,
    );
    try {
      await expect.poll(() => tab.innerText('body'), { timeout: 30_000 }).toContain('not found');
      await pause();
      // No empty boxes under the banner.
      expect(await tab.isVisible('#job-facts')).toBe(false);
      expect(await tab.isVisible('#job-logs')).toBe(false);
      const asked = async () => (await fetched()).filter((u) => u.includes('/jobs/no-such-job')).length;
      expect(await asked()).toBe(1);
      // 10 s on the clock, four of the page's polls (every 2.5 s): no more asking, the message shown once.
      await tab.clock.runFor(10_000);
      expect(await asked()).toBe(1);
      expect(await tab.$$eval('.error', (els) => els.filter((e) => e.checkVisibility()).length)).toBe(1);
    } finally {
      await other.close();
    }
  });

  it('says an address is not valid, with a way back', async () => {
    await page.goto(`${platform.url}/console#/e/chatty/workers`);
    await page.waitForSelector('#workers');
    await page.goto(`${platform.url}/console#/e/%E0%A4%A`);
    await expect
      .poll(() => page.textContent('#main'), { timeout: 10_000 })
      .toContain('Not a valid console address');
    expect(await page.getAttribute('#main a', 'href')).toBe('#/');
    await page.click('#main a');
    await page.waitForSelector('#endpoints tr[data-endpoint="hello"]');
  });

  it('says a tab is unknown, names the endpoint it looks for, and names its own icon', async () => {
    const refused: string[] = [];
    const note = (m: { text(): string }) => {
      if (m.text().includes('Content Security Policy')) refused.push(m.text());
    };
    page.on('console', note);
    try {
      await page.goto(`${platform.url}/console#/e/hello/bogus`);
      await page.reload();
      await expect.poll(() => page.textContent('#main'), { timeout: 10_000 }).toContain('No such tab: bogus');
      expect(await page.$$eval('.tabs button.on', (b) => b.length)).toBe(0);
      // A page that names its icon is not asked for /favicon.ico (a 404 on every load), and the
      // policy lets the browser use it.
      expect(await page.getAttribute('link[rel="icon"]', 'href')).toBe('data:,');
      expect(refused).toEqual([]);
      await page.goto(`${platform.url}/console#/e/chatty/workers`);
      await page.waitForSelector('#workers');
      await page.goto(`${platform.url}/console#/e/no-such-endpoint`);
      await expect.poll(() => page.innerText('body'), { timeout: 10_000 }).toContain('not found');
      expect(await page.textContent('#crumbs')).toContain('no-such-endpoint');
      expect(await page.textContent('#crumbs')).not.toContain('chatty');
    } finally {
      page.off('console', note);
    }
  });

  it("counts a load-balanced endpoint's workers in the list, as a queue endpoint's", async () => {
    // A call starts its worker (it scales from 0), which stays, idle, for its idle timeout (60 s).
    const { status, body } = await call(platform.url, 'POST', '/lb/hello-api/echo', { said: 'hi' });
    expect([status, body]).toEqual([200, { echo: { said: 'hi' } }]);
    await page.goto(`${platform.url}/console#/`);
    await expect
      .poll(() => page.textContent('#endpoints tr[data-endpoint="hello-api"] td:last-child'), {
        timeout: 30_000,
      })
      .toBe('1 (0–1)');
  });

  it('offers a load-balanced endpoint only the tabs it has: its workers and logs, no jobs', async () => {
    const tabNames = () => page.$$eval('.tabs button', (b) => b.map((x) => x.textContent));
    await page.goto(`${platform.url}/console#/`);
    await page.click('#endpoints tr[data-endpoint="hello-api"]');
    await expect.poll(tabNames, { timeout: 10_000 }).toEqual(['Workers', 'Logs']);
    expect(await page.textContent('.tabs button.on')).toBe('Workers');
    await page.waitForSelector('#workers');
    // An address of a tab it has not (a link from a queue endpoint's page) says why.
    await page.goto(`${platform.url}/console#/e/hello-api/request`);
    await expect
      .poll(() => page.textContent('#no-such-tab'), { timeout: 10_000 })
      .toBe(
        'hello-api is load-balanced: it takes no jobs, so it has no request tab. Call its routes on its own URL.',
      );
    expect(await page.isVisible('#request-input')).toBe(false);
    // A queue endpoint has all five, Jobs first.
    await page.goto(`${platform.url}/console#/e/hello`);
    await expect
      .poll(tabNames, { timeout: 10_000 })
      .toEqual(['Jobs', 'Request', 'Workers', 'Charts', 'Logs']);
    expect(await page.textContent('.tabs button.on')).toBe('Jobs');
  });

  it("shows log lines' times in the reader's time zone, as the job's other times", async () => {
    const { status, body } = await call(platform.baseUrl, 'POST', '/chatty/runsync', {
      input: { name: 'Zone', lines: 1 },
    });
    expect([status, body.status]).toEqual([200, 'COMPLETED']);
    const job = await call(`${platform.url}/manage/v1`, 'GET', `/endpoints/chatty/jobs/${body.id}`);
    const atMs: number = job.body.logs[0].atMs;
    // India: UTC+5:30 all year (no summer time), so its clock differs from UTC in hours and minutes.
    const other = await chromium.launch({ executablePath: chromiumPath, args: chromiumArgs });
    try {
      const tab = await (await other.newContext({ timezoneId: 'Asia/Kolkata', locale: 'en-US' })).newPage();
      await tab.goto(`${platform.url}/console#/e/chatty/jobs/${body.id}`);
      await tab.fill('#api-key', testApiKey);
      await tab.click('#sign-in');
      await expect.poll(() => tab.textContent('#job-logs'), { timeout: 30_000 }).toContain('working on Zone');
      const kolkata = new Date(atMs + 5.5 * 3_600_000).toISOString().slice(11, 23);
      expect(await tab.textContent('#job-logs .t')).toBe(`${kolkata} `);
      expect(await tab.getAttribute('#job-logs .t', 'title')).toBe(new Date(atMs).toISOString());
    } finally {
      await other.close();
    }
  });

  it('keeps the logs where the reader scrolled while new polls come in', async () => {
    const { status, body } = await call(platform.baseUrl, 'POST', '/chatty/runsync', {
      input: { name: 'Scroll', lines: 300 },
    });
    expect([status, body.status]).toEqual([200, 'COMPLETED']);
    await page.goto(`${platform.url}/console#/e/chatty/logs`);
    await expect
      .poll(() => page.textContent('#endpoint-logs'), { timeout: 30_000 })
      .toContain('working on Scroll: step 299');
    // Following the newest line while at the bottom.
    expect(
      await page.$eval('#endpoint-logs', (pre) => pre.scrollHeight - pre.scrollTop - pre.clientHeight),
    ).toBeLessThan(24);
    await page.$eval('#endpoint-logs', (pre) => {
      pre.scrollTop = 0;
    });
    // Polls are one after another: the second read after the scroll is sent only once the first
    // one's lines are in the box.
    const logRead = (r: { url(): string }) => r.url().includes('/manage/v1/endpoints/chatty/logs');
    await page.waitForRequest(logRead);
    await page.waitForRequest(logRead);
    expect(await page.$eval('#endpoint-logs', (pre) => pre.scrollTop)).toBe(0);
  });

  it("keeps a running job's input and output boxes across polls, and writes the output once it comes", async () => {
    const { status, body } = await call(platform.baseUrl, 'POST', '/chatty/run', {
      input: { name: 'Steady', pause: 6 },
    });
    expect(status).toBe(200);
    const jobRead = (r: { url(): string }) => r.url().endsWith(`/jobs/${body.id}`);
    await page.goto(`${platform.url}/console#/e/chatty/jobs/${body.id}`);
    await expect.poll(() => page.textContent('#job-input'), { timeout: 30_000 }).toContain('Steady');
    // A mark on each box, gone if a poll draws the box anew.
    await page.$$eval('#job-input, #job-output', (boxes) => {
      for (const box of boxes) box.dataset.mark = 'kept';
    });
    await page.waitForRequest(jobRead);
    await page.waitForRequest(jobRead);
    expect(await page.$$eval('#job-input, #job-output', (boxes) => boxes.map((b) => b.dataset.mark))).toEqual(
      ['kept', 'kept'],
    );
    await expect.poll(() => page.textContent('#job-output'), { timeout: 30_000 }).toContain('Hello, Steady!');
  });

  it("shows a streaming job's chunks so far while it runs, takes none from its client, then its output", async () => {
    const projectDir = join(apps, 'streamer');
    mkdirSync(projectDir);
    const go = join(projectDir, 'go');
    writeFileSync(
      join(projectDir, 'drip.py'),
      [
        'import os',
        'import time',
        '',
        'from ferry import Endpoint',
        '',
        '',
        '@Endpoint(name="drip", cpu="1-2", idle_timeout=5)',
        'def drip(words, last, go):',
        '    """Yield each word, wait for the file `go`, then yield `last`."""',
        '    yield from words',
        '    while not os.path.exists(go):',
        '        time.sleep(0.05)',
        '    yield last',
        '',
      ].join('\n'),
    );
    const { endpoints } = await scanProject({ projectDir });
    await platform.db.control.putEndpoint(recordFor(endpoints[0]!, projectDir));
    await platform.workers!.reconcile();
    try {
      const { status, body } = await call(platform.baseUrl, 'POST', '/drip/run', {
        input: { words: ['one', 'two'], last: 'three', go },
      });
      expect(status).toBe(200);
      await page.goto(`${platform.url}/console#/e/drip/jobs/${body.id}`);
      await expect.poll(() => page.textContent('#job-output'), { timeout: 30_000 }).toBe('"one"\n"two"\n');
      expect(await page.textContent('#job-status')).toBe('IN_PROGRESS');
      // The job's client still gets every chunk: the page read them and took none.
      const read = await call(platform.baseUrl, 'POST', `/drip/stream/${body.id}?wait=0`);
      expect(read.body.stream).toEqual([{ output: 'one' }, { output: 'two' }]);
      // Two more of the page's reads (one after another): the chunks shown are not written again.
      await page.evaluate('window.firstChunk = document.getElementById("job-output").firstChild');
      const streamRead = (r: { url(): string }) => r.url().includes(`/jobs/${body.id}/stream`);
      await page.waitForRequest(streamRead);
      await page.waitForRequest(streamRead);
      expect(await page.textContent('#job-output')).toBe('"one"\n"two"\n');
      expect(
        await page.evaluate('document.getElementById("job-output").firstChild === window.firstChunk'),
      ).toBe(true);
      // Ended, the job shows its output: the yields, all three.
      writeFileSync(go, '');
      await expect.poll(() => page.textContent('#job-status'), { timeout: 30_000 }).toBe('COMPLETED');
      await expect
        .poll(async () => JSON.parse((await page.textContent('#job-output')) ?? ''), { timeout: 10_000 })
        .toEqual(['one', 'two', 'three']);
    } finally {
      await platform.db.control.deleteEndpoint('drip');
      await platform.workers!.reconcile();
    }
  });

  it('reads no stream for a running job whose handler does not stream, poll after poll', async () => {
    const { status, body } = await call(platform.baseUrl, 'POST', '/chatty/run', {
      input: { name: 'Plain', lines: 1, pause: 120 },
    });
    expect(status).toBe(200);
    const { other, tab, fetched, pause } = await clockTab(
      `${platform.url}/console#/e/chatty/jobs/${body.id}`,
    );
    // Counted as the page calls fetch: each poll reads the job, and asks for its stream after that.
    const reads = async (path: string) =>
      (await fetched()).filter((u) => u.split('?')[0]!.endsWith(path)).length;
    try {
      await expect
        .poll(() => tab.textContent('#job-logs'), { timeout: 30_000 })
        .toContain('working on Plain: step 0');
      expect(await tab.textContent('#job-status')).toBe('IN_PROGRESS');
      await pause();
      // Three more reads of the job: the page's polls follow one another, so the two before the last
      // are done, each with the stream read it would have made.
      const jobReads = (await reads(`/jobs/${body.id}`)) + 3;
      await expect
        .poll(
          async () => {
            await tab.clock.runFor(2_500);
            return reads(`/jobs/${body.id}`);
          },
          { timeout: 30_000 },
        )
        .toBeGreaterThanOrEqual(jobReads);
      expect(await tab.textContent('#job-status')).toBe('IN_PROGRESS');
      expect(await reads(`/jobs/${body.id}/stream`)).toBe(0);
    } finally {
      await other.close();
      await call(platform.baseUrl, 'POST', `/chatty/cancel/${body.id}`);
    }
  });

  it("shows a retried streaming job's new run alone: the failed run's chunks go, none twice", async () => {
    const projectDir = join(apps, 'redo');
    mkdirSync(projectDir);
    const marks = join(projectDir, 'marks');
    mkdirSync(marks);
    writeFileSync(
      join(projectDir, 'redo.py'),
      [
        'import os',
        'import time',
        '',
        'from ferry import Endpoint',
        '',
        '',
        'def wait_for(path):',
        '    while not os.path.exists(path):',
        '        time.sleep(0.05)',
        '',
        '',
        '@Endpoint(name="redo", cpu="1-2", idle_timeout=5)',
        'def redo(marks):',
        '    """The first run yields two chunks and fails at `fail`; the next yields one, another at `end`."""',
        '    first = not os.path.exists(os.path.join(marks, "ran"))',
        '    open(os.path.join(marks, "ran"), "a").close()',
        '    if first:',
        '        yield "old-1"',
        '        yield "old-2"',
        '        wait_for(os.path.join(marks, "fail"))',
        '        raise RuntimeError("the first run fails")',
        '    yield "new-1"',
        '    wait_for(os.path.join(marks, "end"))',
        '    yield "new-2"',
        '',
      ].join('\n'),
    );
    const { endpoints } = await scanProject({ projectDir });
    await platform.db.control.putEndpoint(recordFor(endpoints[0]!, projectDir));
    await platform.workers!.reconcile();
    const { status, body } = await call(platform.baseUrl, 'POST', '/redo/run', { input: { marks } });
    expect(status).toBe(200);
    const { other, tab, fetched, pause } = await clockTab(`${platform.url}/console#/e/redo/jobs/${body.id}`);
    const jobReads = async () => (await fetched()).filter((u) => u.endsWith(`/jobs/${body.id}`)).length;
    const stream = async () =>
      (await call(`${platform.url}/manage/v1`, 'GET', `/endpoints/redo/jobs/${body.id}/stream`)).body;
    try {
      await expect.poll(() => tab.textContent('#job-output'), { timeout: 30_000 }).toBe('"old-1"\n"old-2"\n');
      // The page sees nothing of what follows until its clock runs: not the failure, not the retry's
      // time in the queue, as a page whose poll came between the two would not.
      await pause();
      writeFileSync(join(marks, 'fail'), '');
      await expect
        .poll(async () => (await call(platform.baseUrl, 'GET', `/redo/status/${body.id}`)).body.status, {
          timeout: 30_000,
        })
        .toBe('FAILED');
      expect((await call(platform.baseUrl, 'POST', `/redo/retry/${body.id}`)).status).toBe(200);
      await expect.poll(stream, { timeout: 30_000 }).toEqual({
        status: 'IN_PROGRESS',
        stream: [{ output: 'new-1' }],
        next: expect.any(Number),
      });
      await expect
        .poll(
          async () => {
            await tab.clock.runFor(2_500);
            return tab.textContent('#job-output');
          },
          { timeout: 30_000 },
        )
        .toBe('"new-1"\n');
      // Two more polls write nothing again.
      const more = (await jobReads()) + 2;
      await expect
        .poll(
          async () => {
            await tab.clock.runFor(2_500);
            return jobReads();
          },
          { timeout: 30_000 },
        )
        .toBeGreaterThanOrEqual(more);
      expect(await tab.textContent('#job-output')).toBe('"new-1"\n');
      expect(await tab.textContent('#job-status')).toBe('IN_PROGRESS');
      // Ended, its output is the new run's yields.
      writeFileSync(join(marks, 'end'), '');
      await expect
        .poll(
          async () => {
            await tab.clock.runFor(2_500);
            return tab.textContent('#job-status');
          },
          { timeout: 30_000 },
        )
        .toBe('COMPLETED');
      expect(JSON.parse((await tab.textContent('#job-output')) ?? '')).toEqual(['new-1', 'new-2']);
    } finally {
      await other.close();
      writeFileSync(join(marks, 'fail'), '');
      writeFileSync(join(marks, 'end'), '');
      await platform.db.control.deleteEndpoint('redo');
      await platform.workers!.reconcile();
    }
  });

  it('shows a job kept for days with its date, its endpoint by name, long timings in minutes and hours, and no attempt as –', async () => {
    const createdAt = Date.now() - 3 * 86_400_000;
    const job = {
      id: 'kept-for-days',
      status: 'COMPLETED',
      createdAt,
      delayMs: 3_720_000,
      executionMs: 600_000,
      // No attempt in the record: the page says –, not "undefined".
      input: { name: 'Old' },
      output: 'Hello, Old!',
      logs: [],
      logsEnded: true,
    };
    await page.route('**/manage/v1/endpoints/chatty/jobs/kept-for-days', (r) =>
      r.fulfill({ status: 200, contentType: 'application/json', body: JSON.stringify(job) }),
    );
    // The example's name is its id: here the endpoint answers another name.
    await page.route('**/manage/v1/endpoints/chatty', async (r) => {
      const response = await r.fetch();
      r.fulfill({ response, json: { ...(await response.json()), name: 'Chatty display' } });
    });
    try {
      await page.goto(`${platform.url}/console#/e/chatty/jobs/kept-for-days`);
      await expect.poll(() => page.textContent('#job-status'), { timeout: 10_000 }).toBe('COMPLETED');
      // Not today: the date in front of the time, the full ISO time in the title.
      const [date, time] = await page.evaluate(
        (t) => [
          new Date(t).toLocaleDateString(undefined, { month: 'short', day: 'numeric' }),
          new Date(t).toLocaleTimeString(),
        ],
        createdAt,
      );
      expect(await page.textContent('#job-facts time')).toBe(`${date} ${time}`);
      expect(await page.getAttribute('#job-facts time', 'title')).toBe(new Date(createdAt).toISOString());
      // Past a minute: minutes and seconds; past an hour: hours and minutes.
      const fact = (name: string) =>
        page.$$eval(
          '#job-facts > div',
          (divs, n) => divs.find((d) => d.firstChild?.textContent === n)?.lastChild?.textContent,
          name,
        );
      expect(await fact('Execution')).toBe('10 min 0 s');
      expect(await fact('Delay')).toBe('1 h 2 min');
      expect(await fact('Attempts')).toBe('–');
      // The crumbs name the endpoint by its name, the link still by its id.
      await expect
        .poll(() => page.$$eval('#crumbs a', (a) => a.map((x) => [x.textContent, x.getAttribute('href')])), {
          timeout: 10_000,
        })
        .toEqual([
          ['Endpoints', '#/'],
          ['Chatty display', '#/e/chatty'],
        ]);
    } finally {
      await page.unroute('**/manage/v1/endpoints/chatty');
      await page.unroute('**/manage/v1/endpoints/chatty/jobs/kept-for-days');
    }
  });

  it('cancels a running job from its page once the user confirms, and offers no Cancel once it ended', async () => {
    const { status, body } = await call(platform.baseUrl, 'POST', '/chatty/run', {
      input: { name: 'Patient', lines: 2, pause: 120 },
    });
    expect(status).toBe(200);
    const cancels: string[] = [];
    const count = (r: Request) => {
      if (r.url().includes('/cancel/')) cancels.push(`${r.method()} ${new URL(r.url()).pathname}`);
    };
    page.on('request', count);
    try {
      await page.goto(`${platform.url}/console#/e/chatty/jobs/${body.id}`);
      await expect
        .poll(() => page.textContent('#job-logs'), { timeout: 30_000 })
        .toContain('working on Patient: step 1');
      expect(await page.textContent('#job-status')).toBe('IN_PROGRESS');
      await shot('job');
      // Answered no: nothing is sent, and the page polls on with the job running.
      page.once('dialog', (d) => d.dismiss());
      await page.click('#job-cancel');
      await page.waitForRequest((r) => r.url().endsWith(`/jobs/${body.id}`));
      expect(cancels).toEqual([]);
      let asked = '';
      page.once('dialog', (d) => {
        asked = d.message();
        return d.accept();
      });
      await page.click('#job-cancel');
      await expect.poll(() => page.textContent('#job-status'), { timeout: 30_000 }).toBe('CANCELLED');
      expect(asked).toContain(body.id);
      expect(cancels).toEqual([`POST /v2/chatty/cancel/${body.id}`]);
      expect(await page.isVisible('#job-cancel')).toBe(false);
      expect((await call(platform.baseUrl, 'GET', `/chatty/status/${body.id}`)).body.status).toBe(
        'CANCELLED',
      );
    } finally {
      page.off('request', count);
    }
  });

  it("says that a job it cancels had already ended, in the page's error style", async () => {
    const { status, body } = await call(platform.baseUrl, 'POST', '/hello/runsync', {
      input: { name: 'Done' },
    });
    expect([status, body.status]).toEqual([200, 'COMPLETED']);
    // The page is told the job still runs (as when it ended after the page read it); the platform,
    // which knows better, answers with the status the job ended in.
    const jobRead = `**/manage/v1/endpoints/hello/jobs/${body.id}`;
    await page.route(jobRead, async (r) => {
      const response = await r.fetch();
      // A read still on its way when the test unroutes has been let through already.
      await r
        .fulfill({ response, json: { ...(await response.json()), status: 'IN_PROGRESS' } })
        .catch(() => {});
    });
    try {
      await page.goto(`${platform.url}/console#/e/hello/jobs/${body.id}`);
      await page.waitForSelector('#job-cancel');
      page.once('dialog', (d) => d.accept());
      await page.click('#job-cancel');
      const refused = '#job-facts .error#job-cancel-error';
      await expect.poll(() => page.textContent(refused), { timeout: 30_000 }).toContain('Not cancelled');
      expect(await page.textContent(refused)).toContain('COMPLETED');
      expect(await page.isVisible(refused)).toBe(true);
      // What it said stays through the polls that follow.
      await page.waitForRequest((r) => r.url().endsWith(`/jobs/${body.id}`));
      await page.waitForRequest((r) => r.url().endsWith(`/jobs/${body.id}`));
      expect(await page.textContent(refused)).toContain('Not cancelled');
    } finally {
      await page.unroute(jobRead);
    }
  });

  it('draws a changed chart range as a poll draws: a busy platform waited out, then its failure shown and asked again at the period', async () => {
    // A fake clock, so the poll's own next read (15 s on) cannot stand in for the range change's.
    const { other, tab, fetched, pause } = await clockTab(`${platform.url}/console#/e/chatty/charts`);
    let asked = 0;
    await tab.route('**/manage/v1/endpoints/chatty/metrics?hours=24', (r) => {
      asked++;
      return asked === 1
        ? r.fulfill({ status: 429, headers: { 'retry-after': '1' }, json: { error: 'Too many reads' } })
        : r.fulfill({ status: 500, json: { error: 'The metrics read failed' } });
    });
    // Counted as the page calls fetch: a read fired while the clock ran is counted once it is done.
    const reads = async () => (await fetched()).filter((u) => u.includes('/metrics?hours=24')).length;
    try {
      await expect.poll(() => tab.$$eval('#charts canvas', (c) => c.length), { timeout: 30_000 }).toBe(4);
      await pause();
      await tab.selectOption('#hours', '24');
      await expect.poll(() => asked, { timeout: 10_000 }).toBe(1);
      // Its Retry-After (1 s) later, and well before the poll's own next read, it is read again (the
      // 429 may reach the page after a first second has run).
      for (let s = 0; s < 5 && (await reads()) < 2; s++) await tab.clock.runFor(1000);
      expect(await reads()).toBe(2);
      await expect
        .poll(() => tab.textContent('#problem'), { timeout: 10_000 })
        .toBe('The metrics read failed');
      expect(await tab.isVisible('#problem')).toBe(true);
      // A failure that is not a busy platform is asked again at the poll's period (15 s), not after
      // the busy wait: it asked again every second, and a race of the page's reads with this test's
      // steps of the clock counted 3.
      await tab.clock.runFor(14_000);
      expect(await reads()).toBe(2);
      await tab.clock.runFor(1_000);
      expect(await reads()).toBe(3);
    } finally {
      await other.close();
    }
  });

  it('sends no call without the key when signing out while a poll is on its way', async () => {
    const { body } = await call(platform.baseUrl, 'POST', '/hello/runsync', { input: { name: 'Out' } });
    const sent: string[] = [];
    const record = (r: Request) => {
      if (/^\/(manage\/v1|v2)\//.test(new URL(r.url()).pathname))
        sent.push(`${r.headers().authorization} ${new URL(r.url()).pathname}`);
    };
    // A job page's poll reads the endpoint (its name), then the job: the first read is held until
    // the user has signed out.
    let held: Request | undefined;
    let release = () => {};
    const released = new Promise<void>((r) => {
      release = r;
    });
    await page.route('**/manage/v1/endpoints/hello', async (r) => {
      held = r.request();
      await released;
      await r.continue().catch(() => {});
    });
    page.on('request', record);
    try {
      await page.goto(`${platform.url}/console#/e/hello/jobs/${body.id}`);
      await expect.poll(() => held !== undefined, { timeout: 30_000 }).toBe(true);
      const over = new Promise<void>((resolve) => {
        const done = (r: Request) => r === held && resolve();
        page.on('requestfinished', done);
        page.on('requestfailed', done);
      });
      await page.click('#sign-out');
      await page.waitForSelector('#api-key');
      release();
      await over;
      // Signed in again and two reads of the list later, nothing went out without the key, and the
      // sign-in page never said the key was refused.
      expect(await page.textContent('#sign-in-error')).toBe('');
      await page.fill('#api-key', testApiKey);
      await page.click('#sign-in');
      const endpointsRead = (r: { url(): string }) => r.url().endsWith('/manage/v1/endpoints');
      await page.waitForRequest(endpointsRead);
      await page.waitForRequest(endpointsRead);
      expect(sent.filter((line) => !line.startsWith(`Bearer ${testApiKey} `))).toEqual([]);
      expect(sent.length).toBeGreaterThan(2);
    } finally {
      page.off('request', record);
      release();
      await page.unroute('**/manage/v1/endpoints/hello');
    }
  });

  it('signing out forgets the key', async () => {
    await page.click('#sign-out');
    await page.waitForSelector('#api-key');
    expect(await page.evaluate('sessionStorage.getItem("ferry.apiKey")')).toBeNull();
  });
});
