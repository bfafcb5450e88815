// The Ferry web console (docs/observability.md): plain DOM, no framework. It reads the management
// API (/manage/v1) and sends jobs through the v2 API (/v2) on its own origin, with the API key the
// user typed. The key lives in sessionStorage only (gone when the tab closes) and never in a URL.
// Everything shown from the platform (names, inputs, outputs, log lines) goes in as text, never HTML.

const keyName = 'ferry.apiKey';
const main = document.getElementById('main');
const crumbs = document.getElementById('crumbs');
const signOut = document.getElementById('sign-out');
const problem = document.getElementById('problem');
const finals = new Set(['COMPLETED', 'FAILED', 'CANCELLED', 'TIMED_OUT']);
let timers = [];
let charts = [];
// Bumped when the page changes, so a poll of the page left behind stops.
let pageId = 0;
// Aborted when the key is forgotten (`forgetKey`): the calls then in flight are dropped, so none
// goes on to a next call without a key.
let session = new AbortController();

// ── tiny DOM helpers ────────────────────────────────────────────────────────────────────────────

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith('on')) node.addEventListener(name.slice(2), value);
    else if (name === 'class') node.className = value;
    else node.setAttribute(name, value === true ? '' : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** One muted row across a table: what is loading, or that there is nothing to show. */
const note = (columns, text) =>
  el('tr', { class: 'note' }, el('td', { colspan: columns, class: 'muted' }, text));
/**
 * Puts a live table's new rows in (each poll draws them anew), with the keyboard's focus back on the
 * link it was on: replaced with its row, it fell back to the page's start every 2 or 3 s.
 */
function replaceRows(body, rows) {
  const href = body.contains(document.activeElement) ? document.activeElement.getAttribute('href') : null;
  body.replaceChildren(...rows);
  if (href) [...body.querySelectorAll('a')].find((a) => a.getAttribute('href') === href)?.focus();
}
/** A table in a box of its own that scrolls sideways in a window narrower than it: the page never does. */
const wide = (table) => el('div', { class: 'wide' }, table);
const badge = (status) => el('span', { class: `badge ${status}` }, status);
/** A duration: ms under a second, seconds under a minute, then minutes and seconds, then hours and minutes. */
function ms(value) {
  if (value === undefined || value === null) return '–';
  if (value < 1000) return `${value} ms`;
  if (value < 60_000) return `${(value / 1000).toFixed(2)} s`;
  const seconds = Math.floor(value / 1000);
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ${seconds % 60} s`;
  return `${Math.floor(seconds / 3600)} h ${Math.floor((seconds % 3600) / 60)} min`;
}
/**
 * A moment as a <time>: today's as the time only, any other day's with its date in front (and its
 * year when not this one), so a job kept for days does not read as today's; the full ISO time in
 * its title.
 */
function when(epochMs) {
  if (!epochMs) return '–';
  const at = new Date(epochMs);
  const now = new Date();
  const time = at.toLocaleTimeString();
  const text =
    at.toDateString() === now.toDateString()
      ? time
      : `${at.toLocaleDateString(undefined, {
          month: 'short',
          day: 'numeric',
          ...(at.getFullYear() === now.getFullYear() ? {} : { year: 'numeric' }),
        })} ${time}`;
  const iso = at.toISOString();
  return el('time', { datetime: iso, title: iso }, text);
}
/**
 * A log line's time of day to the millisecond, in the reader's time zone as every other time on the
 * page: in UTC, with nothing to say so, a job created at 14:03 had lines at 13:03 in Berlin.
 */
const clock = (epochMs) =>
  new Date(epochMs).toLocaleTimeString(undefined, {
    hour: '2-digit',
    minute: '2-digit',
    second: '2-digit',
    fractionalSecondDigits: 3,
    hourCycle: 'h23',
  });
const json = (value) => (value === undefined ? '–' : JSON.stringify(value, null, 2));

/**
 * Calls `fn` now and again `periodMs` after each call is done, while the page is the same. `fn`
 * returning false stops it, and so does a 404 (the job or endpoint is gone: asking again cannot
 * bring it back; `report` has said so once). A busy platform (429/503: on AWS, CloudWatch Logs'
 * read quota, 5 a second for the whole account) is waited out for its Retry-After, then twice as
 * long each time, up to a minute.
 *
 * Returns `again()`, which calls `fn` as one of the poll's calls: at once, or once the call in
 * flight is done, or when a busy platform's wait is over. So what the user asks for (a chart's
 * range) fails, waits and draws as the poll does, and never races a poll's call.
 */
function poll(fn, periodMs) {
  const mine = pageId;
  const slot = timers.push(undefined) - 1;
  let busyMs = 0;
  let running = false;
  let asked = false;
  const tick = async () => {
    if (mine !== pageId) return;
    running = true;
    asked = false;
    let again = true;
    try {
      again = (await fn()) !== false;
      busyMs = 0;
    } catch (error) {
      // Only a busy answer waits longer: any other failure is asked again at the period, where a 500
      // after a 429 kept the 429's wait and asked again every second.
      busyMs = error instanceof Busy ? Math.min(60_000, Math.max(error.retryAfterMs, busyMs * 2)) : 0;
      if (error instanceof NotFound) again = false;
    }
    running = false;
    if ((again || asked) && mine === pageId)
      timers[slot] = setTimeout(tick, busyMs || (asked ? 0 : periodMs));
  };
  tick();
  return () => {
    if (running || busyMs) asked = true;
    else {
      clearTimeout(timers[slot]);
      tick();
    }
  };
}

function clearPage() {
  pageId++;
  // clearInterval also clears a setTimeout (one list of timers in the HTML standard).
  for (const t of timers) clearInterval(t);
  timers = [];
  for (const c of charts) c.destroy();
  charts = [];
  main.replaceChildren();
  crumbs.replaceChildren();
  report(undefined);
}

/**
 * The one place a failed call is shown: a banner above the page, replaced by the next problem (never
 * added to), the page's figures dimmed as stale, and both gone when a call succeeds again (`api`) or
 * the page changes. `undefined` clears it.
 */
function report(error) {
  problem.textContent =
    error instanceof Unreachable
      ? 'Cannot reach the platform; what is shown may be out of date.'
      : (error?.message ?? '');
  problem.hidden = !error;
  main.classList.toggle('stale', Boolean(error));
}

function setCrumbs(...parts) {
  crumbs.replaceChildren(
    ...parts.flatMap((part, i) => [
      ...(i > 0 ? [el('span', { class: 'sep' }, '/')] : []),
      part.href ? el('a', { href: part.href }, part.text) : el('span', {}, part.text),
    ]),
  );
}

// ── the API ─────────────────────────────────────────────────────────────────────────────────────

class Unauthorized extends Error {}

/** fetch itself failed: the platform is down or the network is. */
class Unreachable extends Error {}

/** 404: the endpoint or job is not there (or no more: a job's results expire). */
class NotFound extends Error {}

/** The key was forgotten (signed out, or refused) while the call was due or on its way. */
class SignedOut extends Error {}

/** 429/503: the platform asks us to come back later. */
class Busy extends Error {
  constructor(message, retryAfterMs) {
    super(message);
    this.retryAfterMs = retryAfterMs;
  }
}

async function api(path, options = {}) {
  const key = sessionStorage.getItem(keyName);
  const { signal } = session;
  // Never sent without a key (it would go out as "Bearer null").
  if (!key || signal.aborted) throw new SignedOut('Signed out.');
  const mine = pageId;
  let response;
  try {
    response = await fetch(path, {
      ...options,
      signal,
      headers: {
        authorization: `Bearer ${key}`,
        'content-type': 'application/json',
        ...(options.headers ?? {}),
      },
    });
  } catch {
    throw signal.aborted ? new SignedOut('Signed out.') : new Unreachable('Cannot reach the platform.');
  }
  const text = await response.text().catch(() => '');
  if (signal.aborted) throw new SignedOut('Signed out.');
  // A proxy or gateway in between may answer an HTML page or nothing: then the status says it.
  let body;
  try {
    body = text ? JSON.parse(text) : undefined;
  } catch {
    if (response.ok) throw new Error(`The platform answered ${path} with something that is not JSON.`);
  }
  if (response.status === 401) throw new Unauthorized(body?.error ?? 'Key refused');
  if (response.status === 429 || response.status === 503) {
    const seconds = Number(response.headers.get('retry-after'));
    throw new Busy(body?.error ?? `HTTP ${response.status}`, seconds > 0 ? seconds * 1000 : 5000);
  }
  if (response.status === 404) throw new NotFound(body?.error ?? 'Not found');
  if (!response.ok)
    throw new Error(
      body?.error ??
        body?.message ??
        `The platform answered HTTP ${response.status}${response.statusText ? ` ${response.statusText}` : ''}.`,
    );
  // An answer clears the banner, unless the page it was for has been left since.
  if (mine === pageId) report(undefined);
  return body;
}

const manage = (path, query = {}) => {
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(query))
    if (value !== undefined && value !== '') params.set(name, value);
  const qs = params.toString();
  return api(`/manage/v1${path}${qs ? `?${qs}` : ''}`);
};

// ── pages ───────────────────────────────────────────────────────────────────────────────────────

function signInPage(message) {
  clearPage();
  signOut.hidden = true;
  setCrumbs({ text: 'Sign in' });
  const input = el('input', { type: 'password', id: 'api-key', placeholder: 'fy_…', autocomplete: 'off' });
  const problem = el('p', { class: 'error', id: 'sign-in-error' }, message ?? '');
  const form = el(
    'form',
    {
      onsubmit: async (event) => {
        event.preventDefault();
        const key = input.value.trim();
        // Nothing typed: said here, where \`api\` would refuse to send it and say "Signed out."
        if (!key) {
          problem.textContent = 'Enter an API key first (ferry keys create makes one).';
          input.focus();
          return;
        }
        sessionStorage.setItem(keyName, key);
        try {
          await manage('/endpoints');
          route();
        } catch (error) {
          forgetKey();
          problem.textContent = error instanceof Unauthorized ? 'That key was refused.' : error.message;
        }
      },
    },
    el('label', { for: 'api-key' }, 'API key'),
    input,
    el('button', { class: 'primary', type: 'submit', id: 'sign-in' }, 'Sign in'),
    problem,
  );
  main.append(
    el(
      'div',
      { class: 'card signin' },
      el('h1', {}, 'Ferry console'),
      el('p', { class: 'muted' }, 'Sign in with an API key of this platform. It is kept in this tab only.'),
      form,
    ),
  );
  input.focus();
}

async function endpointsPage() {
  clearPage();
  setCrumbs({ text: 'Endpoints' });
  const body = el('tbody', {}, note(9, 'Loading…'));
  main.append(
    el('h1', {}, 'Endpoints'),
    wide(
      el(
        'table',
        { id: 'endpoints' },
        el(
          'thead',
          {},
          el(
            'tr',
            {},
            ['Name', 'Id', 'App / env', 'Kind', 'In queue', 'Running', 'Completed', 'Failed', 'Workers'].map(
              (h, i) => el('th', { class: i >= 4 ? 'num' : '' }, h),
            ),
          ),
        ),
        body,
      ),
    ),
  );
  poll(async () => {
    const { endpoints } = await manage('/endpoints').catch(handle);
    if (endpoints.length === 0) {
      body.replaceChildren(note(9, 'No endpoints yet: deploy a project to this platform (ferry deploy).'));
      return;
    }
    replaceRows(
      body,
      endpoints.map((e) => {
        const h = e.health;
        // A load-balanced endpoint has no health (it takes no jobs): its workers come beside it.
        const counted = h?.workers ?? e.workers;
        const workers = counted ? counted.running + counted.idle : undefined;
        // Workers that cannot start (docs/workers.md): the verdict, and its reason under it as text
        // (cut short by the stylesheet, the whole of it in the title).
        const problem = h?.problem ?? e.problem;
        const href = `#/e/${encodeURIComponent(e.id)}`;
        return el(
          'tr',
          { class: 'click', 'data-endpoint': e.id, onclick: () => (location.hash = href) },
          el('td', {}, el('a', { href }, el('b', {}, e.name))),
          el('td', { class: 'muted' }, e.id),
          el('td', {}, `${e.app} / ${e.env}`),
          el('td', {}, e.kind),
          el('td', { class: 'num' }, h ? h.jobs.inQueue : '–'),
          el('td', { class: 'num' }, h ? h.jobs.inProgress : '–'),
          el('td', { class: 'num' }, h ? h.jobs.completed : '–'),
          el('td', { class: 'num' }, h ? h.jobs.failed : '–'),
          el(
            'td',
            { class: 'num' },
            problem
              ? [
                  el('span', { class: `badge ${problem.state}` }, problem.state),
                  el('span', { class: 'reason', title: problem.reason }, problem.reason),
                ]
              : workers === undefined
                ? '–'
                : `${workers}${e.scaling ? ` (${e.scaling.workersMin}–${e.scaling.workersMax})` : ''}`,
          ),
        );
      }),
    );
  }, 2000);
}

/** The tabs of an endpoint's page, in their order, by the name the address gives them. */
const tabs = new Map([
  ['jobs', jobsTab],
  ['request', requestTab],
  ['workers', workersTab],
  ['charts', chartsTab],
  ['logs', logsTab],
]);

/** `tab`: the one the address names; without one, the first the endpoint has. */
async function endpointPage(id, tab) {
  clearPage();
  setCrumbs({ text: 'Endpoints', href: '#/' }, { text: id });
  // Why its workers cannot start (docs/workers.md), while they cannot: above every tab.
  const trouble = el('p', { class: 'error', id: 'endpoint-problem', hidden: true });
  let shown = false;
  // Read again every 5 s: a first read that failed (platform out of reach, a 5xx) is tried again
  // until the page can be drawn, and the problem line follows the endpoint's state.
  poll(async () => {
    const endpoint = await manage(`/endpoints/${encodeURIComponent(id)}`).catch(handle);
    const problem = endpoint.health?.problem ?? endpoint.problem;
    trouble.hidden = !problem;
    trouble.textContent = problem
      ? `${problem.state === 'failing' ? 'Workers cannot start' : 'Workers keep crashing; restarts are delayed'}: ${problem.reason}`
      : '';
    if (shown) return;
    shown = true;
    setCrumbs({ text: 'Endpoints', href: '#/' }, { text: endpoint.name });
    // A load-balanced endpoint takes no jobs (its routes answer on its own URL): a Jobs, Request or
    // Charts tab would show nothing, or offer a /run the platform refuses.
    const offered = endpoint.kind === 'lb' ? ['workers', 'logs'] : [...tabs.keys()];
    const showing = tab ?? offered[0];
    const content = el('div');
    main.append(
      el(
        'h1',
        {},
        endpoint.name,
        ' ',
        el('span', { class: 'muted' }, `${endpoint.id} · ${endpoint.app}/${endpoint.env}`),
      ),
      trouble,
      el(
        'div',
        { class: 'tabs' },
        offered.map((t) =>
          el(
            'button',
            {
              class: t === showing ? 'on' : '',
              'data-tab': t,
              onclick: () => (location.hash = `#/e/${encodeURIComponent(id)}/${t}`),
            },
            t[0].toUpperCase() + t.slice(1),
          ),
        ),
      ),
      content,
    );
    if (offered.includes(showing)) tabs.get(showing)(content, endpoint);
    else
      content.append(
        el(
          'p',
          { class: 'error', id: 'no-such-tab' },
          tabs.has(showing)
            ? `${endpoint.name} is load-balanced: it takes no jobs, so it has no ${showing} tab. Call its routes on its own URL.`
            : `No such tab: ${showing}`,
        ),
      );
  }, 5000);
}

function jobsTab(content, endpoint) {
  const status = el(
    'select',
    { id: 'status-filter' },
    el('option', { value: '' }, 'Any status'),
    ['IN_QUEUE', 'IN_PROGRESS', 'COMPLETED', 'FAILED', 'CANCELLED', 'TIMED_OUT'].map((s) =>
      el('option', { value: s }, s),
    ),
  );
  // The filter is kept in this page's history entry, so Back from a job's page (or a reload) shows
  // the list as it was left, not every status again.
  status.value = history.state?.jobsStatus ?? '';
  const body = el('tbody', {}, note(6, 'Loading…'));
  const more = el('button', { class: 'secondary', id: 'jobs-older', hidden: true }, 'Older');
  const newest = el('button', { class: 'secondary', id: 'jobs-newest', hidden: true }, 'Newest');
  let next;
  // The table is live (the newest page, every 3 s) until the user asks for Older jobs; then it
  // keeps what was loaded until Newest or another status filter brings the live page back.
  let paged = false;
  // Only the latest load fills the table: a live refresh still on its way when Older was clicked
  // must not replace the older rows.
  let loads = 0;
  const row = (job) => {
    const href = `#/e/${encodeURIComponent(endpoint.id)}/jobs/${encodeURIComponent(job.id)}`;
    return el(
      'tr',
      { class: 'click', 'data-job': job.id, onclick: () => (location.hash = href) },
      el('td', {}, el('a', { href }, job.id)),
      el('td', {}, badge(job.status)),
      el('td', {}, when(job.createdAt)),
      el('td', { class: 'num' }, ms(job.delayMs)),
      el('td', { class: 'num' }, ms(job.executionMs)),
      el('td', { class: 'muted' }, job.workerId ?? ''),
    );
  };
  const load = async (append) => {
    const mine = ++loads;
    paged = append;
    newest.hidden = !paged;
    const page = await manage(`/endpoints/${encodeURIComponent(endpoint.id)}/jobs`, {
      status: status.value,
      limit: 25,
      cursor: append ? next : undefined,
    }).catch(handle);
    if (mine !== loads) return;
    next = page.next;
    more.hidden = !next;
    if (append) body.append(...page.jobs.map(row));
    else if (page.jobs.length === 0)
      body.replaceChildren(
        note(
          6,
          status.value
            ? `No ${status.value} jobs (a finished job is listed until its results expire).`
            : 'No jobs yet (a finished job is listed until its results expire).',
        ),
      );
    else replaceRows(body, page.jobs.map(row));
  };
  status.addEventListener('change', () => {
    history.replaceState({ ...history.state, jobsStatus: status.value }, '');
    load(false);
  });
  more.addEventListener('click', () => load(true));
  newest.addEventListener('click', () => load(false));
  content.append(
    el('div', { class: 'row' }, status),
    wide(
      el(
        'table',
        { id: 'jobs' },
        el(
          'thead',
          {},
          el(
            'tr',
            {},
            ['Job', 'Status', 'Created', 'Delay', 'Execution', 'Worker'].map((h, i) =>
              el('th', { class: i === 3 || i === 4 ? 'num' : '' }, h),
            ),
          ),
        ),
        body,
      ),
    ),
    el('div', { class: 'row' }, more, newest),
  );
  poll(() => (paged ? undefined : load(false)), 3000);
}

function requestTab(content, endpoint) {
  const input = el('textarea', { id: 'request-input', rows: 8 }, '{\n  "input": {}\n}');
  const out = el('div', { id: 'request-result' });
  const send = async (route) => {
    out.replaceChildren(el('p', { class: 'muted' }, `Sending ${route}…`));
    let body;
    try {
      body = JSON.parse(input.value);
    } catch (error) {
      out.replaceChildren(el('p', { class: 'error' }, `Not JSON: ${error.message}`));
      return;
    }
    try {
      let job = await api(`/v2/${encodeURIComponent(endpoint.id)}/${route}`, {
        method: 'POST',
        body: JSON.stringify(body),
      });
      const link = el(
        'a',
        {
          href: `#/e/${encodeURIComponent(endpoint.id)}/jobs/${encodeURIComponent(job.id)}`,
          id: 'request-job',
        },
        job.id,
      );
      const status = el('span', { id: 'request-status' }, badge(job.status));
      // As the job's page shows them: the output, or the error read as the runtime wrote it (its
      // type, message and traceback), where a JSON string of that JSON was shown before.
      const result = el('div', { id: 'request-output', class: 'kv' });
      const showResult = () =>
        result.replaceChildren(job.error ? errorView(job.error) : el('pre', {}, json(job.output)));
      showResult();
      out.replaceChildren(el('div', { class: 'row' }, 'Job ', link, status), result);
      // Watched while this page is shown (leaving it stops the asking), at most once a second
      // (status-sync answers at once where it cannot wait), through an outage or a busy platform.
      const watching = pageId;
      while (!finals.has(job.status)) {
        if (watching !== pageId) return;
        const askedAt = Date.now();
        try {
          job = await api(
            `/v2/${encodeURIComponent(endpoint.id)}/status-sync/${encodeURIComponent(job.id)}?wait=5000`,
            { method: 'POST' },
          );
          status.replaceChildren(badge(job.status));
        } catch (error) {
          if (error instanceof Unauthorized) return handle(error);
          if (!(error instanceof Unreachable || error instanceof Busy)) throw error;
          status.replaceChildren(
            badge(job.status),
            el('span', { class: 'muted' }, ` ${error.message} Still watching…`),
          );
        }
        if (!finals.has(job.status) && Date.now() - askedAt < 1000)
          await new Promise((resolve) => setTimeout(resolve, 1000));
      }
      showResult();
    } catch (error) {
      out.replaceChildren(el('p', { class: 'error' }, error.message));
    }
  };
  content.append(
    el(
      'div',
      { class: 'card' },
      el('p', { class: 'muted' }, 'A request body as /run and /runsync take it.'),
      input,
      el(
        'div',
        { class: 'row' },
        el('button', { class: 'primary', id: 'send-run', onclick: () => send('run') }, 'Run'),
        el('button', { class: 'secondary', id: 'send-runsync', onclick: () => send('runsync') }, 'Run sync'),
      ),
      out,
    ),
  );
}

function workersTab(content, endpoint) {
  const body = el('tbody', {}, note(4, 'Loading…'));
  content.append(
    wide(
      el(
        'table',
        { id: 'workers' },
        el(
          'thead',
          {},
          el(
            'tr',
            {},
            ['Worker', 'State', 'Holds jobs', 'Last seen'].map((h) => el('th', {}, h)),
          ),
        ),
        body,
      ),
    ),
  );
  poll(async () => {
    const { workers } = await manage(`/endpoints/${encodeURIComponent(endpoint.id)}/workers`).catch(handle);
    body.replaceChildren(
      ...(workers.length === 0
        ? [
            el(
              'tr',
              {},
              el('td', { colspan: 4, class: 'muted' }, 'No workers right now (they start with work).'),
            ),
          ]
        : []),
      ...workers.map((w) =>
        el(
          'tr',
          {},
          el('td', {}, w.workerId),
          el('td', {}, badge(w.state)),
          el('td', {}, w.jobIds.join(', ') || '–'),
          el('td', {}, when(w.lastSeenAt)),
        ),
      ),
    );
  }, 2000);
}

/**
 * A y axis as wide as its longest tick label (uPlot calls it again when the labels change): a fixed
 * 60 px cut the first digits off a ten-minute p95 (600,000 ms).
 */
function axisWidth(self, values, axisIdx, cycleNum) {
  const axis = self.axes[axisIdx];
  // uPlot sizes the axes in cycles until the layout settles: past the first, the size found stands.
  if (cycleNum > 1) return axis._size;
  const longest = (values ?? []).reduce((a, v) => (v.length > a.length ? v : a), '');
  // The axis font is scaled by the device's pixel ratio; the size is in CSS pixels, with the ticks,
  // their gap and 4 px to spare.
  self.ctx.font = axis.font[0];
  return axis.ticks.size + axis.gap + self.ctx.measureText(longest).width / devicePixelRatio + 4;
}

function chartsTab(content, endpoint) {
  const hours = el(
    'select',
    { id: 'hours' },
    ['1', '3', '6', '24'].map((h) => el('option', { value: h, selected: h === '3' }, `Last ${h} h`)),
  );
  const grid = el('div', { class: 'charts', id: 'charts' });
  content.append(el('div', { class: 'row' }, hours), grid);
  const panels = [
    {
      title: 'Jobs per second',
      series: [
        ['jobsPerSec', 'done/s', '#2f5bea'],
        ['failedPerSec', 'failed/s', '#c62f2f'],
      ],
    },
    {
      title: 'Execution time (ms)',
      series: [
        ['executionP50Ms', 'p50', '#1f8a4c'],
        ['executionP95Ms', 'p95', '#b7791f'],
      ],
    },
    {
      title: 'Delay in queue (ms)',
      series: [
        ['delayP50Ms', 'p50', '#1f8a4c'],
        ['delayP95Ms', 'p95', '#b7791f'],
      ],
    },
    {
      title: 'Queue depth and workers',
      series: [
        ['queueDepth', 'queue', '#2f5bea'],
        ['workers', 'workers', '#6b46c1'],
      ],
    },
  ];
  const draw = async () => {
    const m = await manage(`/endpoints/${encodeURIComponent(endpoint.id)}/metrics`, {
      hours: hours.value,
    }).catch(handle);
    for (const c of charts) c.destroy();
    charts = [];
    const boxes = panels.map((panel) => el('div', { class: 'card chart' }, el('h3', {}, panel.title)));
    grid.replaceChildren(...boxes);
    // Measured once every panel is in the grid, so each chart fits its own column.
    panels.forEach((panel, i) => {
      const box = boxes[i];
      charts.push(
        new window.uPlot(
          {
            width: Math.max(280, box.clientWidth - 32),
            height: 200,
            spanGaps: true,
            series: [
              {},
              ...panel.series.map(([, label, stroke]) => ({
                label,
                stroke,
                width: 2,
                points: { show: true, size: 5 },
              })),
            ],
            axes: [{}, { size: axisWidth }],
          },
          [m.t, ...panel.series.map(([name]) => m[name])],
          box,
        ),
      );
    });
  };
  hours.addEventListener('change', poll(draw, 15000));
}

/**
 * Appends log lines. The box follows the newest line only while the reader is at its bottom: one
 * who scrolled up to read an earlier line keeps their place when the next poll comes in.
 */
function logLines(pre, lines) {
  const atBottom = pre.scrollHeight - pre.scrollTop - pre.clientHeight < 24;
  if (lines.length > 0) pre.querySelector('.placeholder')?.remove();
  for (const line of lines) {
    pre.append(
      el(
        'span',
        { class: 't', title: new Date(line.atMs).toISOString() },
        `${clock(line.atMs)} ${line.jobId ? '' : `[${line.container ?? 'worker'} ${line.workerId}] `}`,
      ),
      el('span', { class: line.stream }, `${line.text}\n`),
    );
  }
  if (atBottom) pre.scrollTop = pre.scrollHeight;
}

function logsTab(content, endpoint) {
  const pre = el(
    'pre',
    { class: 'logs', id: 'endpoint-logs' },
    el('span', { class: 'placeholder' }, 'No log lines in the last hour yet; new ones show up here.'),
  );
  content.append(pre);
  let after;
  // follow: the API hands out only lines that can no longer be overtaken by a late one (on AWS,
  // 10 s old), so `next` never passes a line. Every 3 s: each read is a CloudWatch Logs call on AWS.
  poll(async () => {
    const page = await manage(`/endpoints/${encodeURIComponent(endpoint.id)}/logs`, {
      after,
      since: after ? undefined : Date.now() - 3_600_000,
      limit: 1000,
      follow: 1,
    }).catch(handle);
    after = page.next;
    logLines(
      pre,
      page.lines.map((l) => ({ ...l, text: l.jobId ? `[${l.jobId}] ${l.text}` : l.text })),
    );
  }, 3000);
}

/** The runtime's error is JSON (type, message, traceback); anything else is shown as it is. */
function errorView(error) {
  let parsed;
  try {
    parsed = JSON.parse(error);
  } catch {
    parsed = undefined;
  }
  const message = parsed?.error_message
    ? `${String(parsed.error_type ?? '').replace(/^<class '(.*)'>$/, '$1')}: ${parsed.error_message}`
    : error;
  return el(
    'div',
    {},
    el('b', {}, 'Error'),
    el('span', { class: 'error', id: 'job-error' }, message),
    parsed?.error_traceback ? el('pre', { class: 'logs' }, parsed.error_traceback) : null,
  );
}

async function jobPage(endpointId, jobId) {
  clearPage();
  const base = `/endpoints/${encodeURIComponent(endpointId)}`;
  const crumbsWith = (endpointName) =>
    setCrumbs(
      { text: 'Endpoints', href: '#/' },
      { text: endpointName, href: `#/e/${encodeURIComponent(endpointId)}` },
      { text: jobId },
    );
  crumbsWith(endpointId);
  let named = false;
  const facts = el('div', { class: 'card kv', id: 'job-facts' });
  const io = el('div', { class: 'grid' });
  const inputBox = el('pre', { id: 'job-input' });
  const outputBox = el('pre', { id: 'job-output' });
  const pre = el('pre', { class: 'logs', id: 'job-logs' }, el('span', { class: 'placeholder' }, 'Loading…'));
  main.append(el('h1', {}, 'Job ', jobId), facts, io, el('h2', {}, 'Logs'), pre);
  // Shown while the job can still be cancelled: core/job.ts moves IN_QUEUE and IN_PROGRESS to
  // CANCELLED, the statuses that are not final. Made once, so a poll redrawing the facts keeps it
  // and what a refused cancel said.
  const cancel = el('button', { class: 'secondary small', id: 'job-cancel', type: 'button' }, 'Cancel');
  const refused = el('span', { class: 'error', id: 'job-cancel-error' });
  cancel.addEventListener('click', async () => {
    if (!confirm(`Cancel job ${jobId}?`)) return;
    cancel.disabled = true;
    refused.textContent = '';
    try {
      const job = await api(`/v2/${encodeURIComponent(endpointId)}/cancel/${encodeURIComponent(jobId)}`, {
        method: 'POST',
      });
      facts.querySelector('#job-status')?.replaceChildren(badge(job.status));
      if (finals.has(job.status)) cancel.remove();
      // A job that ended meanwhile answers 200 with the status it ended in (docs/api.md), not CANCELLED.
      if (job.status !== 'CANCELLED')
        refused.textContent = `Not cancelled: the job had already ended ${job.status}`;
    } catch (error) {
      if (error instanceof Unauthorized || error instanceof SignedOut) return handle(error);
      refused.textContent = `Not cancelled: ${error.message}`;
    } finally {
      cancel.disabled = false;
    }
  });
  let after;
  let logsEnded = false;
  // A streaming job's chunks so far, while it runs and has no output of its own: read from the
  // management API, which takes none of them (/v2's stream hands each chunk out once, to the job's
  // client), after the last one read, and appended, a line each, so a poll writes only what is new.
  // Only for a job the API says `streams`: any other running job's page read it on every poll.
  let streamNext = 0;
  let streamed = false;
  // The run (a take: its retries, attempt and start) whose chunks are shown. A retried or requeued
  // job's stream is cleared and starts again: a page that polled past its time back in the queue
  // wrote the new run's chunks under the old run's.
  let streamRun;
  const refresh = async () => {
    // The endpoint's name in the crumbs (its id until it is read). Read before the job, and quietly:
    // the job's answer is the one that sets or clears the banner.
    if (!named) {
      const endpoint = await manage(base).catch((error) => {
        if (error instanceof NotFound) named = true;
      });
      if (endpoint) {
        named = true;
        crumbsWith(endpoint.name);
      }
    }
    const job = await manage(`${base}/jobs/${encodeURIComponent(jobId)}`).catch((error) => {
      // Gone (or never there): the banner says so, with no empty boxes under it.
      if (error instanceof NotFound) for (const part of main.children) part.hidden = part.tagName !== 'H1';
      return handle(error);
    });
    facts.replaceChildren(
      ...[
        el(
          'div',
          {},
          el('b', {}, 'Status'),
          el('span', { id: 'job-status' }, badge(job.status)),
          finals.has(job.status) ? null : cancel,
          refused,
        ),
        el('div', {}, el('b', {}, 'Created'), when(job.createdAt)),
        el('div', {}, el('b', {}, 'Delay'), ms(job.delayMs)),
        el('div', {}, el('b', {}, 'Execution'), ms(job.executionMs)),
        el('div', {}, el('b', {}, 'Worker'), job.workerId ?? '–'),
        el(
          'div',
          {},
          el('b', {}, 'Attempts'),
          `${job.attempt ?? '–'}${job.retries ? ` (retried ${job.retries}×)` : ''}`,
        ),
        job.error ? errorView(job.error) : null,
      ].filter(Boolean),
    );
    // Shown from the first read on, then only a text that changed is written: redrawn on every poll,
    // a running job's input and output lost the reader's scroll position and text selection every 2.5 s.
    if (!io.firstChild) {
      io.append(
        el('div', {}, el('h2', {}, 'Input'), inputBox),
        el('div', {}, el('h2', {}, 'Output'), outputBox),
      );
    }
    const streaming = job.streams === true && job.status === 'IN_PROGRESS' && job.output === undefined;
    // A new run's chunks are read from its first, in place of the old run's ('–' until one comes).
    // Chunks of a run newer than this job read (a retry in between) are put right by the next poll.
    const run = `${job.retries}/${job.attempt}/${job.startedAt}`;
    if (run !== streamRun) {
      streamRun = run;
      streamNext = 0;
      streamed = false;
    }
    if (streaming) {
      const read = await manage(`${base}/jobs/${encodeURIComponent(jobId)}/stream`, {
        after: streamNext,
      }).catch(handle);
      streamNext = read.next;
      if (read.stream.length > 0) {
        if (!streamed) outputBox.textContent = '';
        streamed = true;
        outputBox.append(read.stream.map((chunk) => `${JSON.stringify(chunk?.output)}\n`).join(''));
      }
    }
    for (const [box, value] of [
      [inputBox, job.input],
      // The chunks stay until the job has an output (its final one, once it ends).
      ...(streaming && streamed ? [] : [[outputBox, job.output]]),
    ]) {
      const text = json(value);
      if (box.textContent !== text) box.textContent = text;
    }
    if (after === undefined) {
      after = job.logsNext;
      logsEnded = job.logsEnded === true;
      logLines(pre, job.logs);
    } else if (!logsEnded) {
      const page = await manage(`${base}/logs`, { job: jobId, after, follow: 1 }).catch(handle);
      after = page.next;
      logsEnded = page.ended === true;
      logLines(pre, page.lines);
    }
    // The page stops once the job has ended and the API says its lines are all out (on AWS a few
    // seconds after the end, when no late line can come any more).
    const placeholder = pre.querySelector('.placeholder');
    if (placeholder)
      placeholder.textContent = finals.has(job.status) && logsEnded ? 'No log lines.' : 'No log lines yet.';
    return !(finals.has(job.status) && logsEnded);
  };
  poll(refresh, 2500);
}

// ── routing ─────────────────────────────────────────────────────────────────────────────────────

function handle(error) {
  if (error instanceof Unauthorized) {
    forgetKey();
    signInPage('Your key was refused; sign in again.');
    // A busy platform (429/503) is waited out by `poll`, not shown; a call dropped at sign-out has
    // nothing to say on the sign-in page.
  } else if (!(error instanceof Busy || error instanceof SignedOut)) {
    report(error);
  }
  throw error;
}

/** Forgets the key and drops the calls still on their way with it (`api` sends none without one). */
function forgetKey() {
  sessionStorage.removeItem(keyName);
  session.abort();
  session = new AbortController();
}

function route() {
  if (!sessionStorage.getItem(keyName)) return signInPage();
  signOut.hidden = false;
  let parts;
  try {
    parts = location.hash.replace(/^#\/?/, '').split('/').filter(Boolean).map(decodeURIComponent);
  } catch {
    // A broken %-escape (a truncated or hand-edited link).
    clearPage();
    setCrumbs({ text: 'Endpoints', href: '#/' });
    main.append(
      el('p', { class: 'error', id: 'bad-address' }, 'Not a valid console address.'),
      el('a', { href: '#/' }, 'Go to the endpoints'),
    );
    return;
  }
  const go =
    parts[0] === 'e' && parts[1]
      ? parts[2] === 'jobs' && parts[3]
        ? jobPage(parts[1], parts[3])
        : endpointPage(parts[1], parts[2])
      : endpointsPage();
  go.catch(() => {});
}

signOut.addEventListener('click', () => {
  forgetKey();
  location.hash = '#/';
  signInPage();
});
window.addEventListener('hashchange', route);
window.addEventListener('unhandledrejection', (event) => event.preventDefault());
route();
