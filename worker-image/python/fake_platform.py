"""A small fake of the platform's worker-protocol server, for the runtime tests (not shipped).

It speaks the server side of docs/architecture.md#worker-protocol on 127.0.0.1 (port 0) and records every call, so a test
can queue jobs, ask for stops and wait for what the worker sent.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
POLL_HOLD_SEC = 0.5  # short long-polls keep the tests fast
TAKE_SETTLE_SEC = 0.01


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        # A worker killed mid-request (test teardown) resets its connection: not a test failure.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class FakePlatform:
    def __init__(self, endpoint_id="ep1", api_key="worker-token-1"):
        self.endpoint_id = endpoint_id
        self.api_key = api_key
        self.cond = threading.Condition()
        self.queue = []
        self.to_stop = []
        self.calls = []  # every request: dict(op, path, query, body, auth, content_type)
        self.connections = 0  # TCP connections accepted (workers keep theirs alive)
        self._sockets = []  # the accepted connections, for crash()
        self.done_hold_sec = 0.0  # hold every job-done answer this long (a slow platform)
        self.done_limit_bytes = None  # job-done bodies over this are refused with 413, unread (as the platform's)
        self.takes_refused = []  # the next takes are answered 429, each with this Retry-After (None: none)
        platform = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, like the real platform

            def setup(self):
                super().setup()
                with platform.cond:
                    platform.connections += 1
                    platform._sockets.append(self.connection)

            def do_GET(self):
                platform._handle(self, "GET")

            def do_POST(self):
                platform._handle(self, "POST")

            def log_message(self, *args):
                pass

        self.server = _QuietServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def crash(self):
        """Gone at once, as an agent container that died: kept-alive connections are cut too, and
        new ones are refused."""
        self.close()
        with self.cond:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    # -- what the platform would set in the worker's environment --------------------------------

    def env(self, worker_id):
        base = f"http://127.0.0.1:{self.port}/v2/{self.endpoint_id}"
        return {
            "RUNPOD_WEBHOOK_GET_JOB": f"{base}/job-take/{worker_id}?gpu=none",
            "RUNPOD_WEBHOOK_POST_OUTPUT": f"{base}/job-done/{worker_id}/$ID?gpu=none",
            "RUNPOD_WEBHOOK_POST_STREAM": f"{base}/job-stream/{worker_id}/$ID?gpu=none",
            "RUNPOD_WEBHOOK_PING": f"{base}/ping/{worker_id}?gpu=none",
            "FERRY_WEBHOOK_POST_OUTPUT_BATCH": f"{base}/job-done-batch/{worker_id}",
            "RUNPOD_AI_API_KEY": self.api_key,
            "RUNPOD_POD_ID": worker_id,
            "RUNPOD_ENDPOINT_ID": self.endpoint_id,
        }

    # -- test controls ------------------------------------------------------------------------------

    def add_job(self, job_id, job_input, worker=None):
        with self.cond:
            self.queue.append(({"id": job_id, "input": job_input}, worker))
            self.cond.notify_all()

    def add_jobs(self, jobs, worker=None):
        """Queue several (job_id, input) at once: the next job-take-batch finds them all."""
        with self.cond:
            self.queue.extend(({"id": job_id, "input": job_input}, worker) for job_id, job_input in jobs)
            self.cond.notify_all()

    def stop(self, job_id):
        with self.cond:
            self.to_stop.append(job_id)
            self.cond.notify_all()

    def wait_for(self, predicate, timeout=10.0, what="condition"):
        """Wait until predicate(calls) is truthy; returns its value or raises AssertionError."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                value = predicate(self.calls)
                if value:
                    return value
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out waiting for {what}; calls so far: {self.summary()}")
                self.cond.wait(left)

    def summary(self):
        return [(c["op"], c["job_id"], c["query"].get("isStream")) for c in self.calls if c["op"] != "ping"]

    def done_for(self, job_id, timeout=10.0):
        return self.wait_for(
            lambda calls: next((c for c in calls if c["op"] == "job-done" and c["job_id"] == job_id
                                and not _is_progress(c)), None),
            timeout,
            f"job-done for {job_id}",
        )

    def of(self, op, job_id=None):
        with self.cond:
            return [c for c in self.calls if c["op"] == op and (job_id is None or c["job_id"] == job_id)]

    # -- the server side ----------------------------------------------------------------------------

    def _handle(self, req, method):
        parts = urllib.parse.urlsplit(req.path)
        segs = parts.path.strip("/").split("/")  # v2, ep, op, worker, [job]
        query = {k: v[0] for k, v in urllib.parse.parse_qs(parts.query, keep_blank_values=True).items()}
        length = int(req.headers.get("Content-Length") or 0)
        raw = req.rfile.read(length) if length else b""
        op = segs[2] if len(segs) > 2 else ""
        over_limit = op == "job-done" and self.done_limit_bytes is not None and len(raw) > self.done_limit_bytes
        call = {
            "op": op,
            "method": method,
            "path": parts.path,
            "worker": segs[3] if len(segs) > 3 else None,
            "job_id": urllib.parse.unquote(segs[4]) if len(segs) > 4 else None,
            "query": query,
            "body": json.loads(raw) if raw and not over_limit else None,
            "bytes": len(raw),
            "auth": req.headers.get("Authorization"),
            "content_type": req.headers.get("Content-Type"),
            "at": time.monotonic(),
        }
        if call["auth"] != self.api_key:
            return self._reply(req, 401, {"error": "bad worker token"})
        if op in ("job-take", "job-take-batch"):
            # A take on a kept-alive connection is read at once; a result written just before it on a
            # new connection waits for the accept and its handler thread. Recorded a moment later,
            # the calls list the order the worker sent them in, which is what the tests check.
            time.sleep(TAKE_SETTLE_SEC)
        with self.cond:
            self.calls.append(call)
            if op == "job-done-batch":
                # Each result also as the job-done call it stands for (what the tests look for).
                for item in call["body"]["jobs"]:
                    self.calls.append({**call, "op": "job-done", "job_id": item["id"], "body": item["result"],
                                       "batch": True})
            self.cond.notify_all()
        if op == "job-done-batch":
            if self.done_hold_sec:
                time.sleep(self.done_hold_sec)
            return self._reply(req, 200, {"jobs": [{"id": item["id"], "statusCode": 200, "status": "COMPLETED"}
                                                   for item in call["body"]["jobs"]]})
        if op in ("job-take", "job-take-batch"):
            with self.cond:
                refused = self.takes_refused.pop(0) if self.takes_refused else False
            if refused is not False:
                headers = {} if refused is None else {"Retry-After": refused}
                return self._reply(req, 429, {"error": "Rate limit exceeded"}, headers)
            limit = int(query.get("batch_size", "1")) if op == "job-take-batch" else 1
            jobs = self._take(call["worker"], limit)
            call["gave"] = [job["id"] for job in jobs]
            if not jobs:
                return self._reply(req, 204, None)
            return self._reply(req, 200, jobs if op == "job-take-batch" else jobs[0])
        if op == "job-stop":
            with self.cond:
                self.cond.wait_for(lambda: self.to_stop, POLL_HOLD_SEC)
                ids, self.to_stop = self.to_stop, []
            return self._reply(req, 200, {"jobsToStop": ids}) if ids else self._reply(req, 204, None)
        if over_limit:
            return self._reply(req, 413, {"error": f"Request body is over the limit of POST {parts.path}: "
                                                   f"it takes at most {self.done_limit_bytes} bytes"})
        if op == "job-done" and self.done_hold_sec:
            time.sleep(self.done_hold_sec)
        return self._reply(req, 200, {})

    def _take(self, worker, limit):
        def mine():
            return [i for i, (_, w) in enumerate(self.queue) if w in (None, worker)]

        with self.cond:
            self.cond.wait_for(mine, POLL_HOLD_SEC)
            picked = mine()[:limit]
            jobs = [self.queue[i][0] for i in picked]
            for i in reversed(picked):
                del self.queue[i]
            return jobs

    def _reply(self, req, status, payload, headers=None):
        data = b"" if payload is None else json.dumps(payload).encode()
        req.send_response(status)
        for name, value in (headers or {}).items():
            req.send_header(name, value)
        if payload is not None:
            req.send_header("Content-Type", "application/json")
        req.send_header("Content-Length", str(len(data)))
        req.end_headers()
        req.wfile.write(data)


def _is_progress(call):
    body = call["body"]
    return isinstance(body, dict) and body.get("status") == "IN_PROGRESS"


class WorkerProcess:
    """`python -m ferry.worker` as a child; stderr collected; always killed in close()."""

    def __init__(self, env):
        full = dict(os.environ)
        for key in list(full):
            if key.startswith(("RUNPOD_", "FERRY_")):
                del full[key]
        full.update(env)
        full["PYTHONPATH"] = HERE + os.pathsep + full.get("PYTHONPATH", "")
        full["PYTHONDONTWRITEBYTECODE"] = "1"
        full["PYTHONUNBUFFERED"] = "1"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ferry.worker"],
            env=full,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._lines = []
        self._cond = threading.Condition()
        self._readers = [
            threading.Thread(target=self._read, args=(self.proc.stderr,), daemon=True),
            threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _read(self, stream):
        for line in stream:
            with self._cond:
                self._lines.append(line)
                self._cond.notify_all()

    @property
    def output(self):
        with self._cond:
            return "".join(self._lines)

    def wait_output(self, text, timeout=10.0):
        deadline = time.monotonic() + timeout
        with self._cond:
            while text not in "".join(self._lines):
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._readers_alive()):
                    raise AssertionError(f"worker never printed {text!r}; output:\n{''.join(self._lines)}")
                self._cond.wait(min(left, 0.2))
        return self.output

    def _readers_alive(self):
        return any(r.is_alive() for r in self._readers)

    def wait_exit(self, timeout=15.0):
        code = self.proc.wait(timeout)
        for reader in self._readers:
            reader.join(2)
        return code

    def terminate(self):
        self.proc.send_signal(signal.SIGTERM)

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        for reader in self._readers:
            reader.join(2)
        self.proc.stdout.close()
        self.proc.stderr.close()
