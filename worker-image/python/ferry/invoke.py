"""Turning a job into a call, and a failure into RunPod's error format.

Binding rules (docs/architecture.md#the-ferry-python-package): the job's ``input`` object becomes keyword arguments. A handler that
wants the whole job (to call ``ferry.progress_update`` or read extra fields) declares a
*keyword-only* parameter named ``job``::

    @Endpoint(name="render")
    def render(prompt, steps=4, *, job):
        ferry.progress_update(job, {"step": 1})

Keyword-only keeps it explicit: a positional parameter called ``job`` is an ordinary input key.
"""

import asyncio
import concurrent.futures
import inspect
import json
import os
import socket
import traceback

from .inputs import input_problems

JOB_PARAM = "job"


class InputError(Exception):
    """The job input does not fit the handler; the job fails with this message, no traceback."""


# -- handler kinds -------------------------------------------------------------------------------

ASYNC = "async"
ASYNC_GEN = "asyncgen"
SYNC = "sync"
SYNC_GEN = "gen"


def kind_of(fn):
    """How the runtime must drive `fn`: await it, iterate it, or run it in a thread."""
    if inspect.isasyncgenfunction(fn):
        return ASYNC_GEN
    if inspect.iscoroutinefunction(fn):
        return ASYNC
    if inspect.isgeneratorfunction(fn):
        return SYNC_GEN
    return SYNC


_signatures = {}


def signature_of(fn):
    """inspect.signature(fn), remembered: a worker binds every job's input to the same handler,
    and a class endpoint's method is a new bound-method object on every getattr."""
    func = getattr(fn, "__func__", None)
    key = (func, True) if func is not None and getattr(fn, "__self__", None) is not None else (fn, False)
    try:
        found = _signatures.get(key)
    except TypeError:  # an unhashable callable
        return inspect.signature(fn)
    if found is None:
        found = inspect.signature(fn)
        if len(_signatures) >= 256:
            _signatures.clear()
        _signatures[key] = found
    return found


def wants_job(fn):
    try:
        param = signature_of(fn).parameters.get(JOB_PARAM)
    except (TypeError, ValueError):
        return False
    return param is not None and param.kind is inspect.Parameter.KEYWORD_ONLY


def bind_kwargs(fn, payload, job=None):
    """Keyword arguments for `fn` from a job input, checked with inspect.signature before the call."""
    if payload is None:
        payload = {}
    if not isinstance(payload, dict):
        raise InputError(
            f"the job input must be a JSON object of keyword arguments for {_describe(fn)}, "
            f"got {type(payload).__name__}: {_short(payload)}"
        )
    kwargs = dict(payload)
    if wants_job(fn):
        if JOB_PARAM in kwargs:
            raise InputError(
                f"input key {JOB_PARAM!r} clashes with the keyword-only {JOB_PARAM!r} parameter of {_describe(fn)}"
            )
        kwargs[JOB_PARAM] = job
    try:
        signature = signature_of(fn)
    except (TypeError, ValueError):
        return kwargs  # a builtin without a signature: let the call itself complain
    try:
        signature.bind(**kwargs)
    except TypeError as exc:
        raise InputError(f"the job input does not fit {_describe(fn)}: {_binding_problem(signature, payload, exc)}") from None
    return kwargs


def _binding_problem(signature, payload, exc):
    """Every missing and unexpected key at once, in ferry dev's words (ferry/inputs.py); the job's own
    keyword-only `job` is the runtime's to give, not an input key. Values are not checked against
    their hints here (docs/python.md)."""
    params = [p for p in signature.parameters.values() if not (p.name == JOB_PARAM and p.kind is p.KEYWORD_ONLY)]
    return "; ".join(input_problems(signature.replace(parameters=params), payload)) or str(exc)


def public_methods(cls):
    """Names of the callable public methods of a class endpoint, sorted."""
    names = []
    for name in dir(cls):
        if name.startswith("_"):
            continue
        raw = inspect.getattr_static(cls, name)
        if isinstance(raw, (staticmethod, classmethod)) or inspect.isfunction(raw):
            names.append(name)
    return sorted(names)


class Handler:
    """A queue target ready to take jobs: a function, or a class instantiated once per worker."""

    def __init__(self, target):
        self.target = target
        self.instance = None
        self.methods = []
        if inspect.isclass(target):
            self.methods = public_methods(target)
            if not self.methods:
                raise TypeError(f"class {target.__name__} has no public methods to call")
        elif not callable(target):
            raise TypeError(f"{target!r} is not a function or a class")

    def start(self):
        """Instantiate a class target (its __init__ typically loads a model: once per worker)."""
        if inspect.isclass(self.target) and self.instance is None:
            self.instance = self.target()

    def prepare(self, job):
        """(callable, kwargs) for this job, or InputError."""
        payload = job.get("input")
        if not inspect.isclass(self.target):
            fn = self.target
        else:
            self.start()
            fn, payload = self._pick_method(payload)
        return fn, bind_kwargs(fn, payload, job)

    def _pick_method(self, payload):
        available = ", ".join(self.methods)
        cls_name = self.target.__name__
        if len(self.methods) == 1:
            only = self.methods[0]
            if isinstance(payload, dict) and payload.get("method") == only:
                payload = {k: v for k, v in payload.items() if k != "method"}
            return getattr(self.instance, only), payload
        if not isinstance(payload, dict):
            raise InputError(
                f"the job input must be a JSON object naming one of {cls_name}'s methods in \"method\" "
                f"({available}), got {type(payload).__name__}: {_short(payload)}"
            )
        method = payload.get("method")
        if method is None:
            raise InputError(f"{cls_name} has several methods; name one in input[\"method\"]: {available}")
        if method not in self.methods:
            raise InputError(f"unknown method {method!r} for {cls_name}; available: {available}")
        rest = {k: v for k, v in payload.items() if k != "method"}
        return getattr(self.instance, method), rest


# -- results and errors ----------------------------------------------------------------------------


def hostname():
    return os.environ.get("RUNPOD_POD_HOSTNAME") or socket.gethostname()


def runtime_version():
    """What the error record's "runpod_version" says: the worker SDK that wrote it, here Ferry's runtime."""
    from . import __version__  # at call time: the package is fully imported by then

    return f"ferry-{__version__}"


# Where the frames at the top of a user's traceback come from that are not the user's: this package,
# and the asyncio and concurrent.futures machinery it runs coroutines through (a load-balanced async
# route runs on the server's loop and is waited for through a future).
_RUNTIME_DIRS = tuple(
    os.path.dirname(os.path.abspath(path)) for path in (__file__, asyncio.__file__, concurrent.futures.__file__)
)


def without_runtime_frames(exc):
    """`exc` with the runtime's own frames dropped from the top of its traceback, so that it starts at
    the user's code: a handler that raised, a class's __init__, a load-balanced route. Users read their
    code; the runtime's paths are the platform's business (and `ferry dev` answers the caller with
    these lines when a worker cannot start)."""
    tb = exc.__traceback__
    while tb is not None and os.path.dirname(os.path.abspath(tb.tb_frame.f_code.co_filename)) in _RUNTIME_DIRS:
        tb = tb.tb_next
    return exc.with_traceback(tb) if tb is not None else exc


def missing_package_hint(exc):
    """The line that follows a missing module's traceback (at import or in a handler), or None: the
    worker runs only what is installed where it runs, and an endpoint's packages are declared, not
    found (`ferry dev` and `ferry build` install what is declared)."""
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return None
    top = exc.name.split(".")[0]
    return (
        f"hint: {top!r} is not installed where this worker runs: if it is a package, add it to the "
        "endpoint's dependencies=[...] or to requirements.txt"
    )


def error_info(exc, worker_id, with_traceback=True):
    """RunPod's error record (rp_job.py run_job): the server keeps it as the job's `error` string.
    As there, error_message is str(exc), which is "" for `raise KeyError()`: error_type still says
    what was raised."""
    if with_traceback and exc.__traceback__ is not None:
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    else:
        tb = ""
    return {
        "error_type": str(type(exc)),
        "error_message": str(exc),
        "error_traceback": tb,
        "hostname": hostname(),
        "worker_id": worker_id,
        "runpod_version": runtime_version(),
    }


def error_body(exc, worker_id):
    """The job-done body for a failed job: `error` is a JSON *string*, as RunPod's SDK sends it.
    The input not fitting the handler (InputError) or its result not being JSON (OutputError) is
    said by the message alone: their tracebacks are this package's frames, not the user's code."""
    with_tb = not isinstance(exc, (InputError, OutputError))
    return {"error": json.dumps(error_info(exc, worker_id, with_tb), ensure_ascii=False)}


class OutputError(TypeError):
    """The handler produced something that cannot travel as JSON."""


def to_json_bytes(body):
    """`body` as the UTF-8 JSON text the platform takes: every body this package sends with user
    data in it (job-done, job-done-batch, job-stream, progress updates, shipped log lines, the
    load-balanced answers) is written here. allow_nan=False: NaN is not JSON and the platform
    would refuse the whole result.

    A str may hold a lone surrogate (json.loads makes one of the valid JSON text "\\ud800"), which
    UTF-8 cannot encode: such a body is written with ensure_ascii=True instead, which gives it back
    as the same \\ud800 escape. ensure_ascii=False stays the common path (a shorter text, and a
    faster one for non-ASCII text)."""
    try:
        text = json.dumps(body, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise OutputError(f"the handler's result is not JSON serializable: {exc}") from None
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(body, allow_nan=False).encode("ascii")


def check_jsonable(value, what):
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise OutputError(f"{what} is not JSON serializable: {exc}") from None


def _describe(fn):
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", repr(fn))
    try:
        return f"{name}{inspect.signature(fn)}"
    except (TypeError, ValueError):
        return name


def _short(value, limit=120):
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
