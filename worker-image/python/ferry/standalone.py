"""Standalone mode (FERRY_MODE=standalone): a queue endpoint that serves its own `/runsync`.

`ferry deploy --preview` runs each endpoint in its own container with no platform to pull jobs
from, so the worker plays both sides in one process:

    POST /runsync {"input": ...} ──▶ LocalJobs.submit ──▶ queue ──▶ QueueRuntime (take loop, the
           ▲                                                        same code as queue mode)
           └──── 200 {id, status, output | error} ◀── LocalJobs.done ◀──┘

The jobs run through QueueRuntime unchanged (all four handler kinds, a generator's aggregate or
return value, class endpoints, max_concurrency, RunPod's error format); only the transport is
in-process instead of HTTP. The HTTP side reuses lb.py's server. Routes: GET /ping and
POST /runsync only; there is deliberately no route that runs code sent by the caller.
"""

import json
import queue as queue_mod
import threading
import time
import urllib.parse
import uuid

from .lb import BadRequest, method_not_allowed, parse_json_body

# No platform bounds a preview job: a request waits for its job however long it takes, and only
# shutdown ends the wait. The take poll wakes this often to notice that nothing is queued.
TAKE_POLL_SEC = 1.0
STOP_POLL_SEC = 30.0


class ShuttingDown(Exception):
    """The worker stopped before the job finished."""


class _Pending:
    def __init__(self, job_id):
        self.id = job_id
        self.done = threading.Event()
        self.payload = None
        self.submitted = time.monotonic()
        self.taken = None
        self.finished = None


class LocalJobs:
    """The worker-protocol calls QueueRuntime makes (WorkerApi's interface), served in-process."""

    def __init__(self, say):
        self.say = say
        self._queue = queue_mod.Queue()
        self._pending = {}
        self._lock = threading.Lock()
        self._closed = threading.Event()

    # -- the HTTP side ---------------------------------------------------------------------------

    def submit(self, job_input):
        """Queue one job; its _Pending (wait on .done)."""
        pending = _Pending(f"preview-{uuid.uuid4()}")
        with self._lock:
            if self._closed.is_set():
                raise ShuttingDown()
            self._pending[pending.id] = pending
        self._queue.put({"id": pending.id, "input": job_input})
        return pending

    def close(self):
        """Fail every job still waiting: the runtime will not report them any more."""
        with self._lock:
            self._closed.set()
            left = list(self._pending.values())
            self._pending.clear()
        for pending in left:
            pending.done.set()

    # -- the runtime side (same names and results as protocol.WorkerApi) -------------------------

    def take(self, count, _in_progress):
        jobs = []
        try:
            jobs.append(self._queue.get(timeout=TAKE_POLL_SEC))
            while len(jobs) < count:
                jobs.append(self._queue.get_nowait())
        except queue_mod.Empty:
            pass
        now = time.monotonic()
        with self._lock:
            for job in jobs:
                pending = self._pending.get(job["id"])
                if pending is not None:
                    pending.taken = now
        return jobs

    def done(self, job_id, payload, _is_stream, body=None):  # noqa: ARG002 - body: WorkerApi's encoded payload
        with self._lock:
            pending = self._pending.pop(job_id, None)
        if pending is None:
            return False
        pending.payload = payload
        pending.finished = time.monotonic()
        pending.done.set()
        return True

    def stream(self, _job_id, _output):
        # /runsync answers with the aggregate job-done carries; single chunks have no reader here.
        return True

    def progress(self, job_id, data):
        self.say(f"job {job_id} progress: {json.dumps(data, ensure_ascii=False, default=str)[:200]}")
        return True

    def poll_stop(self):
        # Nobody cancels preview jobs; hold the poll like a platform would.
        self._closed.wait(STOP_POLL_SEC)
        return []

    def ping(self, _job_ids, _timeout_sec):
        return None


def job_response(pending):
    """The /runsync body for a finished job, from the job-done body the runtime produced."""
    payload = pending.payload
    if payload is None:
        raise ShuttingDown()
    body = {"id": pending.id}
    if "error" in payload:
        body["status"] = "FAILED"
        body["error"] = payload["error"]
        if "output" in payload:
            body["output"] = payload["output"]
    else:
        body["status"] = "COMPLETED"
        body["output"] = payload.get("output")
    if pending.taken is not None:
        body["delayTime"] = round((pending.taken - pending.submitted) * 1000)
        body["executionTime"] = round((pending.finished - pending.taken) * 1000)
    return body


def parse_runsync(body):
    """The job input from a /runsync body, or BadRequest 400."""
    if not body:
        raise BadRequest(400, 'send a JSON body {"input": {...}}')
    data = parse_json_body(body)
    if not isinstance(data, dict) or "input" not in data:
        raise BadRequest(400, 'request body must be a JSON object with an "input" field: {"input": {...}}')
    return data["input"]


class StandaloneRouter:
    """The `router` lb.make_server expects: handle(method, raw_path, body) → (status, body[, headers])."""

    def __init__(self, jobs):
        self.jobs = jobs

    def handle(self, method, raw_path, body):
        path = urllib.parse.urlsplit(raw_path).path or "/"
        if path == "/ping":
            if method not in ("GET", "HEAD"):
                return method_not_allowed(method, path, ["GET"]).answer()
            return 200, {"status": "healthy"}
        if path != "/runsync":
            return 404, {"error": f"no route for {method} {path}; this worker serves POST /runsync and GET /ping"}
        if method != "POST":
            return method_not_allowed(method, path, ["POST"]).answer()
        try:
            job_input = parse_runsync(body)
        except BadRequest as exc:
            return exc.answer()
        try:
            pending = self.jobs.submit(job_input)
            pending.done.wait()
            return 200, job_response(pending)
        except ShuttingDown:
            return 503, {"error": "the worker is shutting down"}
