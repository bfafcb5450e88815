"""The RunPod worker protocol, client side, standard library only (docs/architecture.md#worker-protocol).

Requests go over keep-alive connections (transport.py): a job costs no TCP handshake. The hot calls
have two forms: `take_async` and `done_async` run on the event loop (transport.LoopConnections), so
the runtime's per-job path costs no thread hop; every call also has a blocking form (`take`,
`done`, `poll_stop`, `progress`, `stream`, `ping`) that the runtime runs in daemon threads, so a
long poll never holds the event loop and an abandoned poll never holds the process at exit. Both
forms share each rule: the URLs and headers, the answer of a take (`_take_answer`), and when a POST
is retried (`_post_attempts`).
"""

import json
import threading
import time
import urllib.parse

from .invoke import to_json_bytes
from .transport import Connections, LoopConnections

# The RunPod SDK's client timeout for the long polls (jobs_fetcher_timeout); servers hold ≤ ~30 s.
POLL_TIMEOUT_SEC = 90
POST_TIMEOUT_SEC = 30
POST_ATTEMPTS = 3
POST_BACKOFF_SEC = (0.2, 0.5, 1.0)
# job-done-batch (FERRY_WEBHOOK_POST_OUTPUT_BATCH, a Ferry route): results up to this size may share
# one request; a bigger one keeps its own job-done. The platform takes at most BATCH_MAX_JOBS at once
# (core/limits.ts, jobDoneBatchJobs).
BATCH_RESULT_MAX_BYTES = 64 * 1024
BATCH_MAX_JOBS = 100
# What a 429 asks a worker to wait, when its Retry-After says nothing usable: RunPod's worker SDK
# waits 5 s after a 429 on job-take (rp_scale.py), whatever the answer says.
RATE_LIMITED_WAIT_SEC = 5.0
# The most a Retry-After is honoured for. The platform's worker rate window (core/limits.ts,
# rateLimitWindowMs, 10 s; core/worker-rate.ts) bounds every Retry-After it sends, so an honest one
# is never cut; a buggy or hostile value (an hour, a date next year) must not park a worker that
# long. A platform configured with a longer window costs a worker one more refused request per 10 s.
RETRY_AFTER_MAX_SEC = 10.0
# The least: a Retry-After of 0 (or a date gone by) would have the worker ask again at once, as fast
# as the platform can refuse. delta-seconds are whole seconds, and the platform's are rounded up.
RETRY_AFTER_MIN_SEC = 1.0


class RateLimited(Exception):
    """429 from a poll (job-take, job-stop): the caller waits `wait_sec`, what the answer's
    Retry-After asked (retry_after_sec) or else RATE_LIMITED_WAIT_SEC."""

    def __init__(self, retry_after=None):
        super().__init__("rate limited (HTTP 429)")
        self.wait_sec = RATE_LIMITED_WAIT_SEC if retry_after is None else retry_after


def retry_after_sec(headers, now=time.time):
    """The seconds an answer's Retry-After asks to wait (RFC 9110 §10.2.3: delta-seconds or an
    HTTP-date), within [RETRY_AFTER_MIN_SEC, RETRY_AFTER_MAX_SEC]; None when the answer has none or
    it cannot be read, and the caller waits what it did before. `headers`: the transport's (lower-case
    name bytes to value bytes); `now`: the wall clock, for a date."""
    value = headers.get(b"retry-after") if headers else None
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():  # bytes.isdigit: ASCII digits only, so no sign, no fraction
        seconds = int(value)
    else:
        import email.utils  # only for a date, which the platform never sends

        try:
            when = email.utils.parsedate_to_datetime(value.decode("latin-1"))
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
        if when.tzinfo is None:  # "-0000": UTC, by RFC 5322
            import datetime

            when = when.replace(tzinfo=datetime.timezone.utc)
        seconds = when.timestamp() - now()
    return float(min(max(seconds, RETRY_AFTER_MIN_SEC), RETRY_AFTER_MAX_SEC))


class Refused:
    """What a POST returns when the platform refused it (4xx): falsy, as any POST not taken, with the
    status and the platform's reason (its answer's "error", else the answer's start)."""

    __slots__ = ("status", "reason")

    def __init__(self, status, data):
        self.status = status
        reason = None
        try:
            parsed = json.loads(data)
            reason = parsed.get("error") if isinstance(parsed, dict) else None
        except (ValueError, TypeError):
            pass
        self.reason = reason if isinstance(reason, str) and reason else _snippet(data)

    def __bool__(self):
        return False

    def __repr__(self):
        return f"Refused({self.status}, {self.reason!r})"


class ProtocolError(Exception):
    """A non-success answer or an unreadable body."""


def add_query(url, **params):
    """Append query parameters; the templates already carry `?gpu=...` but do not rely on it."""
    query = urllib.parse.urlencode(params, safe=",")
    if not query:
        return url
    return url + ("&" if "?" in url else "?") + query


class WorkerApi:
    """The worker side of job-take, job-stop, job-done, job-stream and ping."""

    def __init__(self, get_job_url, post_output_url, post_stream_url, ping_url, api_key, worker_id, say,
                 connections=None, post_output_batch_url=None):
        sub = lambda url: url.replace("$RUNPOD_POD_ID", worker_id) if url else url  # noqa: E731
        # GET_JOB substitutes $ID with the worker id (rp_job.get_job); POST_* use $ID for the job id.
        self.take_url = sub(get_job_url).replace("$ID", worker_id)
        self.take_batch_url = self.take_url.replace("/job-take/", "/job-take-batch/")
        self.stop_url = self.take_url.replace("/job-take/", "/job-stop/")
        self.done_url = sub(post_output_url)
        self.stream_url = sub(post_stream_url)
        self.ping_url = sub(ping_url)
        self.done_batch_url = sub(post_output_batch_url) if post_output_batch_url else None
        self._batches = None  # set by bind_loop when the platform has job-done-batch
        self.api_key = api_key
        self.worker_id = worker_id
        self.say = say
        self.connections = connections if connections is not None else Connections()
        self.loop_connections = None  # set by bind_loop
        self._headers = {"Accept": "application/json", "User-Agent": "ferry-worker"}
        if api_key:
            self._headers["Authorization"] = api_key  # raw, no "Bearer" (rp_http.py)

    def bind_loop(self, loop, blocking):
        """Lets take_async and done_async run on `loop`; `blocking(fn, *args)` runs fn in a thread and
        returns an awaitable (for opening connections, and requests through a proxy or over TLS)."""
        self.loop_connections = LoopConnections(loop, self.connections, blocking)
        if self.done_batch_url:
            self._batches = _DoneBatches(self, self.done_batch_url)

    # -- low level -------------------------------------------------------------------------------

    def _headers_for(self, body, job_id):
        headers = self._headers
        if body is not None or job_id:
            headers = dict(headers)
            if body is not None:
                headers["Content-Type"] = "application/json"
            if job_id:
                headers["X-Request-ID"] = job_id
        return headers

    def _request(self, method, url, body=None, timeout=POST_TIMEOUT_SEC, job_id=None):
        """(status, body bytes, answer headers); OSError when the exchange fails."""
        return self.connections.request(method, url, body, self._headers_for(body, job_id), timeout)

    def _post_attempts(self, job_id, what):
        """When a POST is retried, sans-IO: a generator that yields the seconds to wait before each
        attempt (0 before the first) and is sent each attempt's outcome, (status, body) or the
        OSError; it returns whether the server took the POST. 4xx: refused, no retry."""
        problem = None
        for attempt in range(POST_ATTEMPTS):
            outcome = yield POST_BACKOFF_SEC[min(attempt - 1, len(POST_BACKOFF_SEC) - 1)] if attempt else 0
            if isinstance(outcome, OSError):
                problem = f"{type(outcome).__name__}: {outcome}"
                continue
            status, data = outcome
            taken = _taken(status)
            if taken is False:
                self._say_refused(what, job_id, status, data)
                return Refused(status, data)
            if taken is not None:
                return taken
            problem = f"HTTP {status} {_snippet(data)}"
        self.say(f"{what} for job {job_id} failed after {POST_ATTEMPTS} attempts: {problem}")
        return False

    def _say_refused(self, what, job_id, status, data):
        self.say(f"{what} for job {job_id} refused: HTTP {status} {_snippet(data)}")

    def _post(self, url, payload, job_id, what, body=None):
        if body is None:
            body = to_json_bytes(payload)
        headers = self._headers_for(body, job_id)
        attempts = self._post_attempts(job_id, what)
        pause = next(attempts)
        while True:
            if pause:
                time.sleep(pause)
            try:
                outcome = self.connections.request("POST", url, body, headers, POST_TIMEOUT_SEC)[:2]
            except OSError as exc:
                outcome = exc
            try:
                pause = attempts.send(outcome)
            except StopIteration as end:
                return end.value

    async def _post_async(self, url, payload, job_id, what, body=None):
        import asyncio  # only on the loop's path: this module is imported before asyncio (worker.py)

        if body is None:
            body = to_json_bytes(payload)
        headers = self._headers_for(body, job_id)
        attempts = self._post_attempts(job_id, what)
        pause = next(attempts)
        while True:
            if pause:
                await asyncio.sleep(pause)
            try:
                answer = await self.loop_connections.request("POST", url, body, headers, POST_TIMEOUT_SEC)
                outcome = answer[:2]
            except OSError as exc:
                outcome = exc
            try:
                pause = attempts.send(outcome)
            except StopIteration as end:
                return end.value

    def _job_url(self, template, job_id, is_stream):
        return add_query(template.replace("$ID", urllib.parse.quote(job_id, safe="")), isStream=is_stream)

    def _take_url(self, count, in_progress):
        flag = "1" if in_progress else "0"
        if count > 1:
            return add_query(self.take_batch_url, batch_size=count, job_in_progress=flag)
        return add_query(self.take_url, job_in_progress=flag)

    def _take_answer(self, status, data, headers):
        """The jobs in a job-take(-batch) answer. Raises RateLimited / ProtocolError."""
        parsed = _poll_answer(status, data, headers, "job-take")
        if parsed is None:
            return []
        jobs = parsed if isinstance(parsed, list) else [parsed]
        valid = []
        for job in jobs:
            if isinstance(job, dict) and isinstance(job.get("id"), str) and job["id"]:
                valid.append(job)
            else:
                self.say(f"job-take returned something that is not a job, skipped: {_snippet(json.dumps(job))}")
        return valid

    # -- the protocol ----------------------------------------------------------------------------

    def take(self, count, in_progress):
        """Up to `count` jobs (a list, maybe empty). Raises RateLimited / ProtocolError / OSError."""
        answer = self._request("GET", self._take_url(count, in_progress), timeout=POLL_TIMEOUT_SEC)
        return self._take_answer(*answer)

    async def take_async(self, count, in_progress):
        """take() on the event loop (after bind_loop). Cancelling it abandons the request."""
        url = self._take_url(count, in_progress)
        answer = await self.loop_connections.request("GET", url, None, self._headers, POLL_TIMEOUT_SEC)
        return self._take_answer(*answer)

    def poll_stop(self):
        """Ids of held jobs the platform wants stopped (long poll; [] when none)."""
        parsed = _poll_answer(*self._request("GET", self.stop_url, timeout=POLL_TIMEOUT_SEC), "job-stop")
        ids = parsed.get("jobsToStop") if isinstance(parsed, dict) else None
        if not isinstance(ids, list):
            return []
        return [i for i in ids if isinstance(i, str)]

    def done(self, job_id, payload, is_stream, body=None):
        """`body`: `payload` already encoded (to_json_bytes), so a big result is encoded once. True when
        the platform took it; else falsy: False, or Refused with why."""
        url = self._job_url(self.done_url, job_id, "true" if is_stream else "false")
        return self._post(url, payload, job_id, "job-done", body)

    async def done_async(self, job_id, payload, is_stream, body=None):
        """done() on the event loop (after bind_loop). With job-done-batch, a small result that finds
        another job's result on its way waits for it and leaves with the others that did."""
        if body is None:
            body = to_json_bytes(payload)
        if self._batches is not None and len(body) <= BATCH_RESULT_MAX_BYTES:
            return await self._batches.deliver(job_id, is_stream, body)
        return await self._done_one(job_id, is_stream, body)

    def results_leaving(self):
        """Whether results handed to a batch have yet to be sent: their sender starts next turn."""
        batches = self._batches
        return batches is not None and batches.starting and not batches.sending.done()

    def requests_connecting(self):
        """Whether a request of the loop waits for a new connection, so it is not on the wire yet."""
        connections = self.loop_connections
        return connections is not None and connections.connecting > 0

    async def _done_one(self, job_id, is_stream, body):
        url = self._job_url(self.done_url, job_id, "true" if is_stream else "false")
        return await self._post_async(url, None, job_id, "job-done", body)

    def progress(self, job_id, data):
        url = self._job_url(self.done_url, job_id, "false")
        return self._post(url, {"status": "IN_PROGRESS", "output": data}, job_id, "progress update")

    def stream(self, job_id, output):
        url = self._job_url(self.stream_url, job_id, "false")
        return self._post(url, stream_chunk(output), job_id, "job-stream")

    def ping(self, job_ids, timeout_sec):
        params = {"job_id": ",".join(job_ids)} if job_ids else {}
        self._request("GET", add_query(self.ping_url, **params), timeout=timeout_sec)


class _DoneBatches:
    """Group delivery of results (the worker's side of a group commit). A result that finds nothing
    on its way leaves at once on its own job-done, as without batches. Results that finish while a
    delivery is out wait for it, then leave together in one job-done-batch: under load a worker
    sends one request for many jobs, and alone it waits for nothing.

    The platform answers each job's status code. A refused job (4xx) is refused as its job-done would
    be; any other trouble (a 5xx for one job, the whole request failing, an unreadable answer) sends
    the jobs concerned on their own job-done with its retries. A platform without the route (404)
    gets no more batches.
    """

    def __init__(self, api, url):
        self.api = api
        self.url = url
        self.waiting = []  # (job_id, is_stream, body, future)
        self.sending = None  # the task delivering, while one is
        self.starting = False  # that task has not run yet: what waits has not been sent

    async def deliver(self, job_id, is_stream, body):
        import asyncio

        future = asyncio.get_running_loop().create_future()
        self.waiting.append((job_id, is_stream, body, future))
        if self.sending is None:
            self.sending = asyncio.ensure_future(self._send_waiting())
            self.starting = True
        return await future

    async def _send_waiting(self):
        # Sent in this step (an idle connection writes at once), so a job-take that waited for
        # results_leaving goes after them.
        self.starting = False
        try:
            while self.waiting:
                group, self.waiting = self.waiting[:BATCH_MAX_JOBS], self.waiting[BATCH_MAX_JOBS:]
                try:
                    delivered = await self._send(group)
                except Exception as exc:  # noqa: BLE001 - handed to each job's delivery
                    for *_, future in group:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                for (*_, future), ok in zip(group, delivered):
                    if not future.done():
                        future.set_result(ok)
        finally:
            self.sending = None

    async def _send(self, group):
        """Whether each job's result was taken, in the group's order."""
        import asyncio

        alone = lambda item: self.api._done_one(item[0], item[1], item[2])  # noqa: E731
        if len(group) == 1:
            return [await alone(group[0])]  # awaited here, not gathered: it is written in this step
        if self.api._batches is None:
            return await asyncio.gather(*(alone(item) for item in group))
        body = b'{"jobs":[' + b",".join(
            b'{"id":' + json.dumps(job_id).encode() + b',"result":' + result + b"}"
            for job_id, _, result, _ in group
        ) + b"]}"
        answers = None
        try:
            status, data, _ = await self.api.loop_connections.request(
                "POST", self.url, body, self.api._headers_for(body, None), POST_TIMEOUT_SEC)
            if status == 404:
                self.api.say("job-done-batch is not served here: results go one per job-done")
                self.api._batches = None
            elif status == 200:
                answers = {a["id"]: a for a in json.loads(data)["jobs"]}
        except (OSError, ValueError, KeyError, TypeError):
            pass  # each job goes on its own job-done, which has its own retries
        delivered = []
        for item in group:
            answer = answers.get(item[0]) if answers else None
            code = answer.get("statusCode") if isinstance(answer, dict) else None
            taken = _taken(code) if isinstance(code, int) else None
            if taken is None:
                delivered.append(await alone(item))
                continue
            if not taken:
                self.api._say_refused("job-done", item[0], code, str(answer.get("error")))
            delivered.append(taken)
        return delivered


class TakeAhead:
    """One job-take started at once in its own daemon thread; result() waits for its answer (the
    jobs, or the exception take() raised). The worker sends its first take this way while the rest
    of the runtime is still being imported."""

    def __init__(self, api, count):
        self._done = threading.Event()
        self._jobs = None
        self._error = None
        threading.Thread(target=self._take, args=(api, count), daemon=True, name="ferry-take").start()

    def _take(self, api, count):
        try:
            self._jobs = api.take(count, False)
        except BaseException as exc:  # noqa: BLE001 - handed to result()
            self._error = exc
        finally:
            self._done.set()

    def result(self):
        self._done.wait()
        if self._error is not None:
            raise self._error
        return self._jobs


def stream_chunk(value):
    """The job-stream body for one yielded value. RunPod's SDK wraps every yield as {"output": value}
    (rp_job.py run_job_generator), a yielded {"output": x} included: its chunk is
    {"output": {"output": x}} and clients read {"output": x}. The one exception is a yield that is a
    whole spec chunk with metrics (docs/api.md#stream-chunks), {"output", "metrics"} and nothing
    else: it goes as it is, so clients see its metrics beside its output, which RunPod's wrapping
    could not show."""
    if isinstance(value, dict) and set(value) == {"output", "metrics"}:
        return value
    return {"output": value}


def _taken(status):
    """What a POST's answer means to its sender: True, taken (2xx); False, refused (4xx: the job is
    already final, the payload too big...), so retrying won't help; None, worth another try."""
    if 200 <= status < 300:
        return True
    if 400 <= status < 500:
        return False
    return None


def _poll_answer(status, data, headers, what):
    """The JSON of a long poll's answer (job-take, job-stop); None when it brought nothing (204 or an
    empty 200). Raises RateLimited on 429 (with its Retry-After) and ProtocolError on any other status
    or bad JSON."""
    if status == 204 or (status == 200 and not data.strip()):
        return None
    if status == 429:
        raise RateLimited(retry_after_sec(headers))
    if status != 200:
        raise ProtocolError(f"{what} answered HTTP {status} {_snippet(data)}")
    try:
        return json.loads(data)
    except ValueError as exc:
        raise ProtocolError(f"{what} answered invalid JSON: {exc}") from None


def _snippet(data, limit=200):
    if isinstance(data, bytes):
        data = data.decode("utf-8", "replace")
    data = data.strip()
    return data if len(data) <= limit else data[:limit] + "..."
