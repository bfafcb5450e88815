"""Per-job log capture.

sys.stdout and sys.stderr are replaced by proxies that look up the current job in a context
variable. asyncio tasks copy the context when created and the runtime runs sync handlers with
``ctx.run`` in their thread, so a handler's print() lands in its own job's log even with several
jobs running at once. Each complete line is echoed to the worker's real stderr as ``[job_id] line``
and, when FERRY_LOG_DIR is set, appended to ``<dir>/<job_id>.log``.

Threads that a handler starts itself do not inherit the context (before Python 3.14); their
output goes to the worker's stderr without a prefix.
"""

import contextvars
import io
import os
import re
import sys
import threading

_current = contextvars.ContextVar("ferry_job_log", default=None)
_echo_lock = threading.Lock()


def safe_file_name(job_id):
    """A job id as a file name: never a path (ids come from the network)."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", job_id)[:200]
    return name if name not in ("", ".", "..") else "_"


class JobLog:
    """The log sink of one job."""

    def __init__(self, job_id, echo, log_dir=None):
        self.job_id = job_id
        self._echo = echo
        self._lock = threading.Lock()
        self._partial = ""
        self._file = None
        self.path = None
        if log_dir:
            self.path = os.path.join(log_dir, safe_file_name(job_id) + ".log")
            try:
                os.makedirs(log_dir, exist_ok=True)
                self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
            except OSError as exc:
                _write_echo(echo, f"ferry worker: cannot open job log {self.path}: {exc}\n")
                self._file = None

    def write(self, text):
        with self._lock:
            if self._file is not None:
                self._file.write(text)
                self._file.flush()
            data = self._partial + text
            lines = data.split("\n")
            self._partial = lines.pop()
        if lines:
            _write_echo(self._echo, "".join(f"[{self.job_id}] {line}\n" for line in lines))

    def close(self):
        with self._lock:
            rest, self._partial = self._partial, ""
            file, self._file = self._file, None
        if rest:
            _write_echo(self._echo, f"[{self.job_id}] {rest}\n")
        if file is not None:
            file.close()


def _write_echo(echo, text):
    with _echo_lock:
        try:
            echo.write(text)
            echo.flush()
        except (OSError, ValueError):
            pass


class RoutingStream(io.TextIOBase):
    """Stands in for sys.stdout/sys.stderr: writes go to the current job's log, else through."""

    def __init__(self, original):
        super().__init__()
        self._original = original

    def write(self, text):
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        log = _current.get()
        if log is None:
            return self._original.write(text)
        log.write(text)
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
        sys.stdout = RoutingStream(sys.stdout)
    if not isinstance(sys.stderr, RoutingStream):
        sys.stderr = RoutingStream(sys.stderr)
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
