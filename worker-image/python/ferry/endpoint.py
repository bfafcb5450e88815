"""`Endpoint`: how users declare what runs where (docs/architecture.md#the-ferry-python-package).

Two mutually exclusive modes on one `Endpoint` object:

* queue-based: ``@Endpoint(name="x", gpu="A100")`` on a function or class. Inside the endpoint's
  own worker the decorator returns the original object; anywhere else it returns a remote wrapper
  (ferry/client.py) whose calls are jobs on the endpoint. Either way ``__ferry_endpoint__`` is set.
* load-balanced: ``api = Endpoint(name="my-api", cpu="2-8")`` then ``@api.post("/process")``.

Validation happens at construction so a typo fails at import time with a message naming the
parameter and the value given. The CLI finds endpoints by a static scan (it never imports user code),
so everything accepted here must also be a plain literal the scan can read.
"""

import inspect
import os
import re
import sys
import urllib.parse

from . import client, names

from .declaration import (
    CPU_RE,
    ENV_NAME_RE,
    GPU_MODELS,
    HTTP_METHODS,
    IMAGE_EXCLUDED_PARAMETERS,
    IMAGE_RE,
    NAME_RE,
    PATH_PARAM_RE,
    PYTHON_VERSIONS,
    path_problem,
    platform_env_name_of,
    positional_only_problem,
    route_job_problem,
)
from .invoke import JOB_PARAM, public_methods

_NO_DATA = object()


def _is_int(value):
    # bool is an int subclass; `workers=True` is a mistake, not "1 worker".
    return isinstance(value, int) and not isinstance(value, bool)


def _check_int(param, value, low, high=None):
    if not _is_int(value):
        raise TypeError(f"{param} must be an integer, got {value!r}")
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f">= {low}"
        raise ValueError(f"{param} must be {bound}, got {value!r}")
    return value


def _check_str_list(param, value, example):
    if value is None:
        return []
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise TypeError(f"{param} must be a list of strings such as {example}, got {value!r}")
    for item in value:
        if not isinstance(item, str) or not item.strip():
            raise TypeError(f"{param} must contain only non-empty strings, got {item!r} in {value!r}")
    return list(value)


def _check_name(name):
    if not isinstance(name, str):
        raise TypeError(f"name must be a string, got {name!r}")
    if not NAME_RE.match(name):
        raise ValueError(
            "name must start with a letter or digit and contain only letters, digits, '_' and '-' "
            f"(at most 63 characters), got {name!r}"
        )
    return name


def _note(message):
    # Printed where the user runs their code, not in every worker start.
    if not os.environ.get("FERRY_ENDPOINT_NAME"):
        sys.stderr.write(f"ferry: note: {message}\n")


def _check_gpu(gpu):
    gpu, notes = names.translate_gpu(gpu, GPU_MODELS)
    for note in notes:
        _note(note)
    models = [gpu] if isinstance(gpu, str) else gpu
    if not isinstance(models, (list, tuple)) or not models:
        raise TypeError(f"gpu must be a GPU model name or a non-empty list of them, got {gpu!r}")
    allowed = ", ".join(GPU_MODELS)
    result = []
    for model in models:
        if model == "any" or model in GPU_MODELS:
            if model not in result:
                result.append(model)
            continue
        hint = ""
        if isinstance(model, str):
            for known in GPU_MODELS + ("any",):
                if known.lower() == model.strip().lower():
                    hint = f" (did you mean {known!r}?)"
        raise ValueError(f"gpu must be one of {allowed} or 'any', got {model!r}{hint}. {names.unknown_gpu_hint()}")
    if "any" in result and len(result) > 1:
        raise ValueError(f"gpu 'any' cannot be combined with specific models, got {gpu!r}")
    return result


def _check_cpu(cpu):
    cpu, notes = names.translate_cpu(cpu)
    for note in notes:
        _note(note)
    if not isinstance(cpu, str):
        raise TypeError(f"cpu must be a string 'VCPUS-GIB' such as '2-8', got {cpu!r}")
    if not CPU_RE.match(cpu):
        raise ValueError(
            f"cpu must be 'VCPUS-GIB' such as '2-8' (2 vCPUs, 8 GiB), got {cpu!r}. {names.unknown_cpu_hint()}"
        )
    return cpu


def _check_workers(workers):
    if workers is None:
        return (0, 1)
    if _is_int(workers):
        if workers < 1:
            raise ValueError(f"workers must be at least 1 (it means (0, N)), got {workers!r}")
        return (0, workers)
    if isinstance(workers, (list, tuple)) and len(workers) == 2:
        low, high = workers
        if not _is_int(low) or not _is_int(high):
            raise TypeError(f"workers must be N or (min, max) of integers, got {workers!r}")
        if low < 0:
            raise ValueError(f"workers min must be >= 0, got {workers!r}")
        if high < 1:
            raise ValueError(f"workers max must be >= 1, got {workers!r}")
        if low > high:
            raise ValueError(f"workers min must not exceed max, got {workers!r}")
        return (low, high)
    raise TypeError(f"workers must be N or (min, max), got {workers!r}")


def _check_env(env):
    if env is None:
        return {}
    if not isinstance(env, dict):
        raise TypeError(f"env must be a dict of str to str, got {env!r}")
    for key, value in env.items():
        if not isinstance(key, str) or not ENV_NAME_RE.match(key):
            raise ValueError(f"env keys must be environment variable names, got {key!r}")
        entry = platform_env_name_of(key)
        if entry:
            shown = entry + "*" if entry.endswith("_") else entry
            raise ValueError(
                f"env key {key} is one the platform sets in every worker itself ({shown}): a secret goes in "
                "secrets=, a setting under another name"
            )
        if not isinstance(value, str):
            raise TypeError(f"env values must be strings, got {value!r} for {key!r}")
    return dict(env)


def _check_python_version(version):
    if version is None:
        return None
    if not isinstance(version, str):
        # 3.10 written as a float is 3.1: refuse rather than guess.
        raise TypeError(f"python_version must be a string such as '3.11', got {version!r}")
    if version not in PYTHON_VERSIONS:
        raise ValueError(f"python_version must be one of {', '.join(PYTHON_VERSIONS)}, got {version!r}")
    return version


def _accepts(fn, name):
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return True
    if name in params and params[name].kind is not inspect.Parameter.POSITIONAL_ONLY:
        return True
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def _check_callable(fn, label, drop_first=False, route=False):
    """TypeError when no input can call `fn` (declaration.py says why, as the scanner does): a
    required positional-only parameter, or on a load-balanced route a required keyword-only `job`.
    The scanner refuses such a handler at build; this says it where the code runs without one (a
    worker started by hand), at import rather than on every job."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return
    for param in params[1:] if drop_first else params:
        if param.default is not inspect.Parameter.empty:
            continue
        if param.kind is inspect.Parameter.POSITIONAL_ONLY:
            raise TypeError(positional_only_problem(label, param.name))
        if route and param.name == JOB_PARAM and param.kind is inspect.Parameter.KEYWORD_ONLY:
            raise TypeError(route_job_problem(label))


def _check_target(target):
    """_check_callable on a queue target: the function, or each public method of a class (a method's
    own self or cls is no input)."""
    if not inspect.isclass(target):
        _check_callable(target, target.__name__)
        return
    for name in public_methods(target):
        raw = inspect.getattr_static(target, name)
        fn = getattr(raw, "__func__", raw)
        _check_callable(fn, f"{target.__name__}.{name}", drop_first=not isinstance(raw, staticmethod))


def split_path(path):
    """A request's path (as sent, without its query) as the routers read it (docs/api.md#load-balanced-endpoints):
    its segments, each percent-decoded once as uvicorn decodes a path (urllib's unquote: UTF-8, a %
    that starts no escape kept as it is, bytes that are not UTF-8 each U+FFFD), so /it%65ms/a%20b is
    /items/a b, as FastAPI routes it. Split before decoding, so an encoded slash (%2F) stays in its
    segment, a parameter's value: FastAPI would answer 404 there, but the ferry client sends a / in an
    argument so (client.py RemoteRoute), and ferry dev's router (find-my-way) reads it so too."""
    return [urllib.parse.unquote(segment) for segment in path.split("/")]


class Route:
    """One load-balanced route: method + path template → function."""

    def __init__(self, method, path, fn):
        self.method = method
        self.path = path
        self.fn = fn
        # Segment by segment: a parameter is a whole segment (declaration.py path_problem), and the
        # rest of a segment is text to match as written (its % too: the request's path is decoded).
        self.segments = [
            (True, found.group(1)) if (found := PATH_PARAM_RE.fullmatch(segment)) else (False, segment)
            for segment in path.split("/")
        ]
        self.param_names = [name for is_param, name in self.segments if is_param]

    def match(self, segments):
        """The path parameters when the request's path, as split_path gives it, fits this template,
        else None. A parameter takes one character or more: /items/ is no route for /items/{id}."""
        if len(segments) != len(self.segments):
            return None
        params = {}
        for (is_param, text), given in zip(self.segments, segments):
            if is_param:
                if given == "":
                    return None
                params[text] = given
            elif given != text:
                return None
        return params

    def __repr__(self):
        return f"Route({self.method} {self.path} -> {getattr(self.fn, '__name__', self.fn)!r})"


class Endpoint:
    """A serverless endpoint: resources plus either one queue target or a set of HTTP routes."""

    def __init__(
        self,
        name=None,
        *,
        gpu=None,
        cpu=None,
        workers=None,
        idle_timeout=60,
        dependencies=None,
        system_dependencies=None,
        env=None,
        secrets=None,
        gpu_count=1,
        execution_timeout_ms=0,
        max_concurrency=1,
        python_version=None,
        id=None,
        image=None,
        health_check_grace=0,
        **others,
    ):
        for parameter in others:
            # Flash's own parameters get the message that says what Ferry does instead.
            raise TypeError(
                names.flash_parameter_message(parameter) or f"Endpoint() got an unexpected keyword argument {parameter!r}"
            )
        self.name = None if name is None else _check_name(name)
        # Client modes (docs/python.md): id= talks to an existing endpoint; image= is an endpoint that
        # runs a prebuilt RunPod-compatible image, deployed by `ferry deploy` and called by name.
        if id is not None and image is not None:
            raise ValueError("id and image are exclusive: id= connects to an existing endpoint")
        if id is not None and (not isinstance(id, str) or not id.strip()):
            raise TypeError(f"id must be an endpoint id string, got {id!r}")
        if image is not None:
            if not isinstance(image, str) or not IMAGE_RE.match(image):
                raise TypeError(f"image must be an image reference such as 'repo/worker:1.0', got {image!r}")
            if self.name is None:
                raise ValueError("an image endpoint needs a name: Endpoint(name='my-model', image='repo/worker:1.0')")
            given = {"dependencies": dependencies, "system_dependencies": system_dependencies, "python_version": python_version}
            for parameter in IMAGE_EXCLUDED_PARAMETERS:
                if given[parameter] is not None:
                    raise ValueError(
                        f"{parameter} does not apply to an image endpoint: the image brings its own code and packages"
                    )
        self.id = id
        self.image = image
        self._client_cache = None
        if gpu is not None and cpu is not None:
            raise ValueError(f"gpu and cpu are exclusive: give one, got gpu={gpu!r} and cpu={cpu!r}")
        self.cpu = None if cpu is None else _check_cpu(cpu)
        # Neither gpu nor cpu means "any GPU" (docs/architecture.md#the-ferry-python-package).
        self.gpu = None if cpu is not None else (["any"] if gpu is None else _check_gpu(gpu))
        self.gpu_count = _check_int("gpu_count", gpu_count, 1, 8)
        if cpu is not None and gpu_count != 1:
            raise ValueError(f"gpu_count applies to GPU endpoints only, got gpu_count={gpu_count!r} with cpu={cpu!r}")
        self.workers = _check_workers(workers)
        self.idle_timeout = _check_int("idle_timeout", idle_timeout, 1, 3600)
        self.dependencies = _check_str_list("dependencies", dependencies, "['torch', 'pillow>=10']")
        self.system_dependencies = _check_str_list("system_dependencies", system_dependencies, "['ffmpeg']")
        self.env = _check_env(env)
        # Names only: values are set with `ferry secrets set` and reach the workers as variables.
        self.secrets = _check_str_list("secrets", secrets, "['HF_TOKEN']")
        for secret in self.secrets:
            if not ENV_NAME_RE.match(secret):
                raise ValueError(f"secret names must be environment variable names, got {secret!r}")
        self.execution_timeout_ms = _check_int("execution_timeout_ms", execution_timeout_ms, 0)
        self.max_concurrency = _check_int("max_concurrency", max_concurrency, 1)
        self.python_version = _check_python_version(python_version)
        # Seconds a worker may take to start (model loading): a load-balanced one may fail health
        # checks this long, a queue one may go this long without contact before it counts as a failed
        # start. 0 is the platform's default (none for queue workers).
        self.health_check_grace = _check_int("health_check_grace", health_check_grace, 0, 7200)
        self.target = None
        self.routes = []

    @property
    def kind(self):
        """'queue' once it decorates a target, 'lb' once it has routes, else None."""
        if self.target is not None:
            return "queue"
        if self.routes:
            return "lb"
        return None

    # -- queue-based: decorator mode -------------------------------------------------------------

    def __call__(self, target):
        if self.routes:
            raise TypeError(
                f"Endpoint {self.name!r} already has routes (load-balanced); it cannot also decorate "
                f"{getattr(target, '__name__', target)!r}. Use a separate Endpoint."
            )
        if self.target is not None:
            raise TypeError(
                f"Endpoint {self.name!r} already decorates {self.target.__name__!r}; "
                "one queue-based Endpoint decorates one function or class"
            )
        if self.is_client:
            raise TypeError(
                "an Endpoint with id= or image= is a client: call .run()/.runsync() on it instead of decorating "
                f"{getattr(target, '__name__', target)!r}"
            )
        if not (inspect.isclass(target) or inspect.isfunction(target)):
            raise TypeError(f"@Endpoint decorates a function or a class, got {target!r}")
        _check_target(target)
        if self.name is None:
            self.name = _check_name(target.__name__)
        self.target = target
        target.__ferry_endpoint__ = self
        if client.runs_here(self.name):
            return target
        # Anywhere else (a script, another endpoint's worker) a call is a job on this endpoint.
        return client.RemoteClass(target, self) if inspect.isclass(target) else client.RemoteFunction(target, self)

    # -- load-balanced: route mode -----------------------------------------------------------------

    def route(self, method, path):
        """Decorator registering `fn` for `method path` (what .get/.post/... call)."""
        method = str(method).upper()
        if self.is_client:
            raise TypeError("an Endpoint with id= or image= is a client: pass data, e.g. .post('/path', {...})")
        if method not in HTTP_METHODS:
            raise ValueError(f"method must be one of {', '.join(HTTP_METHODS)}, got {method!r}")
        if self.target is not None:
            raise TypeError(
                f"Endpoint {self.name!r} already decorates {self.target.__name__!r} (queue-based); "
                "it cannot also have routes. Use a separate Endpoint."
            )
        if self.name is None:
            raise ValueError("a load-balanced Endpoint needs a name, e.g. api = Endpoint(name='my-api')")
        _check_path(path)
        for existing in self.routes:
            if existing.method == method and existing.path == path:
                raise ValueError(f"route {method} {path} is already registered on Endpoint {self.name!r}")

        def register(fn):
            if not inspect.isfunction(fn):
                raise TypeError(f"@{self.name}.{method.lower()}({path!r}) decorates a function, got {fn!r}")
            _check_callable(fn, fn.__name__, route=True)
            route = Route(method, path, fn)
            for param in route.param_names:
                if not _accepts(fn, param):
                    raise ValueError(
                        f"path {path!r} has parameter {{{param}}} but {fn.__name__}() does not accept {param!r}"
                    )
            self.routes.append(route)
            fn.__ferry_endpoint__ = self
            if client.runs_here(self.name):
                return fn
            return client.RemoteRoute(fn, self, route)

        return register

    # With one argument these register a route; with data (or on a client-mode Endpoint) they call one:
    # api.post("/compute") is a decorator, api.post("/compute", {"x": 1}) an HTTP request.
    def get(self, path, data=_NO_DATA):
        return self._route_or_call("GET", path, data)

    def post(self, path, data=_NO_DATA):
        return self._route_or_call("POST", path, data)

    def put(self, path, data=_NO_DATA):
        return self._route_or_call("PUT", path, data)

    def delete(self, path, data=_NO_DATA):
        return self._route_or_call("DELETE", path, data)

    def patch(self, path, data=_NO_DATA):
        return self._route_or_call("PATCH", path, data)

    def _route_or_call(self, method, path, data):
        if data is _NO_DATA and not self.is_client:
            return self.route(method, path)
        return self._client().request(method, path, None if data is _NO_DATA else data)

    # -- calling the endpoint (any mode) -----------------------------------------------------------

    @property
    def is_client(self):
        return self.id is not None or self.image is not None

    def _client(self):
        if self._client_cache is None:
            if self.id is not None:
                self._client_cache = client.EndpointClient(id=self.id)
            elif self.name is not None:
                self._client_cache = client.EndpointClient(name=self.name)
            else:
                raise TypeError("this Endpoint has no name or id to call")
        return self._client_cache

    def run(self, input=None, webhook=None):
        """Submit a job; a Job handle with .status(), .output(timeout), .cancel(), .stream()."""
        return self._client().run(input, webhook=webhook)

    def runsync(self, input=None, timeout=60):
        """Submit and wait for the output (RemoteError on failure, RemoteTimeout after `timeout` s)."""
        return self._client().runsync(input, timeout=timeout)

    def cancel(self, job_id):
        return self._client().cancel(job_id)

    def status(self, job_id):
        return self._client().status(job_id)

    def health(self):
        return self._client().health()

    def purge_queue(self):
        return self._client().purge_queue()

    def __repr__(self):
        if self.is_client:
            return f"Endpoint(id={self.id!r})" if self.id is not None else f"Endpoint(name={self.name!r}, image={self.image!r})"
        return f"Endpoint(name={self.name!r}, kind={self.kind!r})"


def _check_path(path):
    if not isinstance(path, str):
        raise TypeError(f"route path must be a string starting with '/', got {path!r}")
    problem = path_problem(path)
    if problem is not None:
        raise ValueError(problem)
