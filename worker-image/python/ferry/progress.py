"""`progress_update(job, data)`: report progress of a running job (status stays IN_PROGRESS).

The runtime registers a sender per running job id; the lookup is by id (not a context variable)
so that a thread the handler started itself can report too. Called outside a worker (a local call
of the decorated function) it prints the update to stderr instead of failing.
"""

import sys
import threading

_lock = threading.Lock()
_senders = {}


def register(job_id, send):
    with _lock:
        _senders[job_id] = send


def unregister(job_id):
    with _lock:
        _senders.pop(job_id, None)


def progress_update(job, data):
    """Send `data` as the job's progress output: the job dict a handler received, or its id."""
    job_id = job.get("id") if isinstance(job, dict) else job
    if not isinstance(job_id, str):
        raise TypeError(f"progress_update(job, data) needs the job dict or its id, got {job!r}")
    with _lock:
        send = _senders.get(job_id)
    if send is None:
        print(f"ferry progress [{job_id}] (not running in a worker): {data!r}", file=sys.stderr)
        return
    send(data)
