"""Per-job log capture.

sys.stdout and sys.stderr are replaced by proxies that look up the current job in a context
variable. asyncio tasks copy the context when created and the runtime runs sync handlers with
``ctx.run`` in their thread, so a handler's print() lands in its own job's log even with several
jobs running at once. Each complete line goes to the platform's job-log route (FERRY_WEBHOOK_POST_LOG, through a
LogShipper, with its time and stream) when the platform offers one; otherwise, or once the route
answers 404 (an older platform, or RunPod), it is echoed to the worker's real stderr as
``[job_id] line``. When FERRY_LOG_DIR is set it is also appended to ``<dir>/<job_id>.log``.

With FERRY_LOG_BACKUP=stderr (the local platform sets it: it reads its workers' stderr) each shipped
line is also written to the real stderr, marked (``::ferry-log line <seq> <json>``), and once its batch
has been sent a ``::ferry-log sent <seq>`` says so. The platform keeps the marked lines not yet said
sent and records them itself only if the process dies first (os._exit, a segfault, kill -9): the lines
a job printed just before it crashed are not lost with the shipper's batch, and are stored once.

Threads that a handler starts itself do not inherit the context (before Python 3.14); their
output goes to the worker's stderr without a prefix.
"""

import contextvars
import io
import json
import os
import re
import sys
import threading
import time

from .invoke import to_json_bytes

_current = contextvars.ContextVar("ferry_job_log", default=None)
_echo_lock = threading.Lock()

# What starts a job line's backup copy on stderr, and the note that lines were sent (FERRY_LOG_BACKUP).
BACKUP_MARK = "::ferry-log"


def safe_file_name(job_id):
    """A job id as a file name: never a path (ids come from the network)."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", job_id)[:200]
    return name if name not in ("", ".", "..") else "_"


class JobLog:
    """The log sink of one job."""

    def __init__(self, job_id, echo, log_dir=None, shipper=None):
        self.job_id = job_id
        self._echo = echo
        self._shipper = shipper
        self._lock = threading.Lock()
        self._partial = {"stdout": "", "stderr": ""}
        self._file = None
        self.path = None
        self.shipped = False  # lines went to the shipper: the runtime flushes it before job-done
        if log_dir:
            self.path = os.path.join(log_dir, safe_file_name(job_id) + ".log")
            try:
                os.makedirs(log_dir, exist_ok=True)
                self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
            except OSError as exc:
                _write_echo(echo, f"ferry worker: cannot open job log {self.path}: {exc}\n")
                self._file = None

    def write(self, text, stream="stdout"):
        with self._lock:
            if self._file is not None:
                self._file.write(text)
                self._file.flush()
            data = self._partial.get(stream, "") + text
            lines = data.split("\n")
            self._partial[stream] = lines.pop()
        if lines:
            self._emit(stream, lines)

    def _emit(self, stream, lines):
        shipper = self._shipper
        if shipper is not None and shipper.enabled:
            self.shipped = True
            at_ms = int(time.time() * 1000)
            for line in lines:
                shipper.add(self.job_id, stream, line, at_ms)
        else:
            _write_echo(self._echo, "".join(f"[{self.job_id}] {line}\n" for line in lines))

    def close(self):
        with self._lock:
            rests, self._partial = self._partial, {"stdout": "", "stderr": ""}
            file, self._file = self._file, None
        for stream, rest in rests.items():
            if rest:
                self._emit(stream, [rest])
        if file is not None:
            file.close()


def _timer(delay_s, fn):
    timer = threading.Timer(delay_s, fn)
    timer.daemon = True
    timer.start()


class LineBudget:
    """Routine worker lines (a job's completion, a load-balanced request) up to `per_second` a second.

    Beyond that they are counted, and one line at the end of the second says how many were left
    out. At the rates a person reads (`ferry dev`, a few jobs a second) every line shows; at
    thousands a second a line each floods the console and the log store: every worker line is a
    stored row locally (5 to 7 % of the platform's CPU per job, bench/results.md) and an ingested
    CloudWatch event on AWS. Lines that say something went wrong never go through a budget.
    """

    def __init__(self, say, what, per_second=10, clock=time.monotonic, schedule=_timer):
        self._say = say
        self._what = what  # names the left-out lines, one and many: ("job completed", "jobs completed")
        self._per_second = per_second
        self._clock = clock
        self._schedule = schedule  # schedule(delay_s, fn): calls fn once, later, on any thread
        self._lock = threading.Lock()
        self._window_start = None
        self._said = 0
        self._left_out = 0

    def routine(self, message):
        """Says `message` unless this second's budget is spent."""
        now = self._clock()
        with self._lock:
            summary = None
            if self._window_start is None or now - self._window_start >= 1:
                summary = self._close_window(now)
                self._window_start, self._said = now, 0
            if self._said < self._per_second:
                self._said += 1
            else:
                self._left_out += 1
                if self._left_out == 1:
                    self._schedule(max(0.0, self._window_start + 1 - now), self.flush)
                message = None
        if summary:
            self._say(summary)
        if message:
            self._say(message)

    def flush(self):
        """Says how many lines were left out since the last summary, if any (also at shutdown)."""
        with self._lock:
            summary = self._close_window(self._clock())
            self._window_start = None
        if summary:
            self._say(summary)

    def _close_window(self, now):
        left_out, self._left_out = self._left_out, 0
        if not left_out:
            return None
        seconds = now - self._window_start
        what = self._what[0] if left_out == 1 else self._what[1]
        return (f"{left_out} more {what} in the last {seconds:.1f} s "
                f"(a line each up to {self._per_second} a second)")


class LogShipper:
    """Sends jobs' output lines to the platform's job-log route in batches, from its own thread.

    A batch goes out every `interval_s`, when `max_lines` are waiting, or on flush() (the runtime
    flushes a job's lines before posting its result, so they are readable when the job is). A 404
    or 405 means the platform has no such route: shipping stops and lines are echoed to stderr
    instead, so a worker never depends on it. A 429 is the worker's rate limit, where a batch counts
    by the jobs it names (docs/security.md): its lines are kept and sent again once the wait the
    answer's Retry-After asked has passed (`retry_after_s` when it had none), flushes sending nothing
    until then, and past `max_kept` lines waiting the oldest are dropped (said once on stderr). Other
    failures drop that batch (said once on stderr): logs must never hold up a job.
    """

    def __init__(self, post, echo, interval_s=0.5, max_lines=500, backup=False, retry_after_s=10.0,
                 max_kept=10_000, clock=time.monotonic):
        # post(body bytes) -> (HTTP status, the seconds a 429's Retry-After asked, bounded, or None);
        # raises OSError when it cannot.
        self._post = post
        self._echo = echo
        # FERRY_LOG_BACKUP=stderr: each line also goes to `echo` marked, until its batch is sent.
        self._backup = backup
        self._seq = 0
        self._said_sent = 0  # the last `sent` mark written
        self._interval_s = interval_s
        self._max_lines = max_lines
        # After a 429 without a usable Retry-After: the platform's window (core/limits.ts,
        # rateLimitWindowMs, 10 s) bounds every Retry-After it sends, so after it a batch fits again.
        self._retry_after_s = retry_after_s
        self._max_kept = max_kept
        self._clock = clock
        self._resume_at = None  # after a 429: no batch goes out before this time
        self._dropping = False  # the oldest kept lines are being dropped (said once per 429 spell)
        self._pending = []  # the lines not yet sent, in order: sequence numbers up to self._seq
        self._cond = threading.Condition()
        self._send_lock = threading.Lock()
        self._closed = False
        self._warned = False
        self.enabled = True
        self._thread = threading.Thread(target=self._loop, name="ferry-log-shipper", daemon=True)
        self._thread.start()

    def add(self, job_id, stream, text, at_ms):
        line = {"jobId": job_id, "atMs": at_ms, "stream": stream, "text": text}
        with self._cond:
            self._seq += 1
            self._pending.append(line)
            if self._backup:
                # Under the lock: the platform reads the marks in sequence order, each line before
                # the "sent" that covers it.
                _write_echo(self._echo, f"{BACKUP_MARK} line {self._seq} {json.dumps(line)}\n")
            if self._resume_at is not None:
                # Waiting out a 429: the lines are kept, up to a bound, and the thread left asleep.
                if len(self._pending) > self._max_kept:
                    del self._pending[0]
                    self._say_dropping()
            elif len(self._pending) >= self._max_lines:
                self._cond.notify()

    def flush(self):
        """Sends everything waiting now; returns when it is sent (or given up). While a 429 is
        waited out it sends nothing and returns at once: the lines go when the wait is over."""
        self._flush(force=False)

    def close(self):
        with self._cond:
            self._closed = True
            self._cond.notify()
        # The last chance: lines still kept after a 429 are tried once more, then given up.
        self._flush(force=True)

    def _flush(self, force):
        with self._send_lock:
            with self._cond:
                if not force and self._resume_at is not None and self._clock() < self._resume_at:
                    return
                self._resume_at = None
                batch, self._pending = self._pending, []
            kept = []
            wait_s = None
            for start in range(0, len(batch), self._max_lines):
                chunk = batch[start:start + self._max_lines]
                if wait_s is None:
                    wait_s = self._send(chunk, keep=not force)
                if wait_s is not None:
                    kept.extend(chunk)  # after a 429 the rest waits too, in order
            with self._cond:
                if kept:
                    self._resume_at = self._clock() + wait_s
                    self._cond.notify()  # the thread sleeps until then, not its usual interval
                    self._pending[:0] = kept
                    excess = len(self._pending) - self._max_kept
                    if excess > 0:
                        del self._pending[:excess]
                        self._say_dropping()
                else:
                    self._dropping = False
                # The lines not pending any more (delivered, echoed, dropped) are the oldest ones.
                done = self._seq - len(self._pending)
                said, self._said_sent = self._said_sent, done
            if self._backup and done > said:
                # Delivered, echoed or dropped (said once): the platform keeps them no longer.
                _write_echo(self._echo, f"{BACKUP_MARK} sent {done}\n")

    def _say_dropping(self):
        if not self._dropping:
            self._dropping = True
            _write_echo(self._echo, "ferry worker: the platform asks to wait (HTTP 429) and more than "
                                    f"{self._max_kept} job log lines are waiting; dropping the oldest\n")

    def _loop(self):
        while True:
            with self._cond:
                if not self._closed:
                    if self._resume_at is not None:
                        self._cond.wait(max(0.0, self._resume_at - self._clock()))
                    elif len(self._pending) < self._max_lines:
                        self._cond.wait(self._interval_s)
                if self._closed:
                    return
            self.flush()

    def _send(self, batch, keep=True):
        """Sends `batch`; None when done with it (delivered, echoed or dropped), else the seconds to
        wait before sending it again: the platform answered 429 and `keep`, so the lines are kept."""
        if not batch:
            return None
        if not self.enabled:
            self._echo_lines(batch)
            return None
        body = to_json_bytes({"lines": batch})
        try:
            status, retry_after_s = self._post(body)
        except (OSError, ValueError) as exc:
            status, problem = None, f"{type(exc).__name__}: {exc}"
        else:
            problem = f"HTTP {status}"
        if status is not None and 200 <= status < 300:
            return None
        if status in (404, 405):
            self.enabled = False
            self._echo_lines(batch)
            return None
        if status == 429 and keep:
            return self._retry_after_s if retry_after_s is None else retry_after_s
        if not self._warned:
            self._warned = True
            _write_echo(self._echo, f"ferry worker: job log lines not delivered ({problem}); dropping them\n")
        return None

    def _echo_lines(self, batch):
        _write_echo(self._echo, "".join(f"[{line['jobId']}] {line['text']}\n" for line in batch))


def _write_echo(echo, text):
    with _echo_lock:
        try:
            echo.write(text)
            echo.flush()
        except (OSError, ValueError):
            pass


class RoutingStream(io.TextIOBase):
    """Stands in for sys.stdout/sys.stderr: writes go to the current job's log, else through."""

    def __init__(self, original, name="stdout"):
        super().__init__()
        self._original = original
        self._name = name

    def write(self, text):
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        log = _current.get()
        if log is None:
            return self._original.write(text)
        log.write(text, self._name)
        return len(text)

    def flush(self):
        try:
            self._original.flush()
        except (OSError, ValueError):
            pass

    def writable(self):
        return True

    def isatty(self):
        return False

    def fileno(self):
        return self._original.fileno()

    @property
    def encoding(self):
        return getattr(self._original, "encoding", "utf-8")

    @property
    def errors(self):
        return getattr(self._original, "errors", "strict")


def install():
    """Route sys.stdout/sys.stderr by job; returns the real stderr for the worker's own messages."""
    real_stderr = sys.stderr
    if not isinstance(sys.stdout, RoutingStream):
        sys.stdout = RoutingStream(sys.stdout, "stdout")
    if not isinstance(sys.stderr, RoutingStream):
        sys.stderr = RoutingStream(sys.stderr, "stderr")
    else:
        real_stderr = sys.stderr._original
    return real_stderr


def activate(log):
    """Make `log` the current job log in this context; returns the token for reset()."""
    return _current.set(log)


def reset(token):
    _current.reset(token)


def current():
    return _current.get()
