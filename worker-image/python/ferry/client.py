"""Calling endpoints from Python: remote calls of @Endpoint functions and the client modes.

See docs/python.md. Everything travels as plain JSON over the v2 API (never code or pickles):

* `Platform` — where the platform is and who we are (FERRY_API_URL, the key, app and environment).
* `EndpointClient` — one endpoint, addressed by id (`/v2/<id>/…`) or by name
  (`/v2/by-name/<app>/<env>/<name>/…`): run → `Job`, runsync, health, purge_queue, cancel, and HTTP
  calls to load-balanced routes.
* `RemoteFunction` / `RemoteRoute` / `RemoteClass` — what `@Endpoint` returns outside the endpoint's
  own worker: calling one returns a coroutine that submits a job (or the HTTP request) and gives the
  output; `.remote(...)` is the blocking form.

Standard library only (urllib).
"""

import asyncio
import functools
import inspect
import json
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request

DEFAULT_PORT = 8888
# How long a script started beside a `ferry dev` that is still starting waits for its platform's URL
# (cli/dev/lock.ts writes the lock first, the URL once the dev server listens).
DEV_START_WAIT_S = 10.0
# How long a remote call waits for its output unless the endpoint or FERRY_CALL_TIMEOUT says otherwise.
DEFAULT_CALL_TIMEOUT_S = 600.0
# One long poll of runsync / status-sync; the platform caps it (5 minutes locally, less on AWS).
_POLL_WAIT_MS = 60_000
_FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMED_OUT")
ANY_ENV = "-"


class FerryClientError(Exception):
    """The platform answered with an error (or could not be reached)."""

    def __init__(self, message, status=None):
        super().__init__(message)
        self.status = status


class EndpointNotDeployed(FerryClientError, LookupError):
    """No endpoint of that name in the app/environment: deploy it first, or run `ferry dev`."""


class RemoteError(Exception):
    """A job ended FAILED, CANCELLED or TIMED_OUT. Carries the job id and the worker's error."""

    def __init__(self, endpoint, job_id, status, error):
        self.endpoint = endpoint
        self.job_id = job_id
        self.status = status
        self.error = error
        self.error_type = None
        self.error_message = error if isinstance(error, str) else None
        self.error_traceback = None
        # Workers send RunPod's error record as a JSON *string* (ferry/invoke.py error_body).
        record = error
        if isinstance(error, str):
            try:
                record = json.loads(error)
            except ValueError:
                record = None
        # Only RunPod's record: a handler's own {"error": {...}} reaches us as that object's JSON
        # text (ferry/queue_runtime.py result_body), and its text is then the message.
        if isinstance(record, dict) and ("error_type" in record or "error_message" in record):
            self.error_type = record.get("error_type")
            self.error_message = record.get("error_message")
            self.error_traceback = record.get("error_traceback")
        # `raise KeyError()` has an empty message (RunPod's record keeps str(exc)): name the type then.
        kind = self.error_type
        if isinstance(kind, str) and kind.startswith("<class '") and kind.endswith("'>"):
            kind = kind[len("<class '"):-2]
        detail = self.error_message or kind or status
        super().__init__(f"job {job_id} on {endpoint} ended {status}: {detail}")


class RemoteTimeout(RemoteError, TimeoutError):
    """The output did not arrive in time; the job was cancelled."""

    def __init__(self, endpoint, job_id, timeout_s):
        self.timeout_s = timeout_s
        RemoteError.__init__(self, endpoint, job_id, "TIMED_OUT", f"no output within {timeout_s:g} s")


# -- where the platform is --------------------------------------------------------------------------


def _dotenv(path):
    values = {}
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                match = re.match(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*$", line)
                if match and not line.lstrip().startswith("#"):
                    value = match.group(2)
                    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                        value = value[1:-1]
                    values[match.group(1)] = value
    except OSError:
        pass
    return values


def app_name_of(directory):
    """The app name of a project folder, as the CLI derives it (cli/config.ts appNameOf)."""
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", os.path.basename(os.path.abspath(directory)))
    return re.sub(r"[-_]+$", "", re.sub(r"^[-_]+", "", name)[:63]) or "app"


def _process_alive(pid):
    try:
        os.kill(pid, 0)
    except PermissionError:
        return True
    except (OSError, OverflowError, ValueError):
        return False
    return True


def _command_line_has(pid, words):
    """Whether the command line of `pid` has one of `words` (bytes) as an argument (/proc/<pid>/cmdline),
    as the CLI's commandLineHas: a recorded pid that is alive may be another process's by now. None
    where the command line cannot be read (no /proc, or the process is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            args = handle.read().split(b"\0")
    except OSError:
        return None
    return any(word in args for word in words)


def running_dev_above(directory):
    """The lock (.ferry/dev.json, cli/dev/lock.ts) of the `ferry dev` serving the project that
    `directory` is in: the nearest folder from `directory` up whose lock names a running one (its pid
    alive and, where /proc tells, a `ferry dev` or `ferry run`), with "projectDir", the folder it
    serves, as the CLI's `runningDevAbove`; None when there is none."""
    folder = os.path.abspath(directory)
    while True:
        try:
            with open(os.path.join(folder, ".ferry", "dev.json"), encoding="utf-8") as handle:
                lock = json.load(handle)
        except (OSError, ValueError):
            lock = None
        pid = lock.get("pid") if isinstance(lock, dict) else None
        if isinstance(pid, int) and not isinstance(pid, bool) and _process_alive(pid):
            if _command_line_has(pid, (b"dev", b"run")) is not False:
                return dict(lock, projectDir=folder)
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


def dev_platform_url(directory, wait_s=DEV_START_WAIT_S, monotonic=None, sleep=None):
    """The platform URL of the `ferry dev` serving `directory` (dev_platform), or None."""
    found = dev_platform(directory, wait_s, monotonic, sleep)
    return found and found[0]


def dev_platform(directory, wait_s=DEV_START_WAIT_S, monotonic=None, sleep=None):
    """(platform URL, project folder) of the `ferry dev` serving `directory` (running_dev_above), or
    None when none runs. A dev still starting has written its lock but not yet the URL: that is
    waited for, up to `wait_s`, rather than calling the default port, where this dev's platform is
    not. `monotonic` and `sleep`: time.monotonic and time.sleep unless a test gives its own."""
    monotonic = monotonic or time.monotonic
    sleep = sleep or time.sleep
    deadline = monotonic() + wait_s
    while True:
        dev = running_dev_above(directory)
        if dev is None:
            return None
        url = dev.get("platformUrl")
        if isinstance(url, str) and url:
            return url, dev["projectDir"]
        if monotonic() >= deadline:
            raise FerryClientError(
                f"`ferry dev` (pid {dev.get('pid')}) is still starting: its .ferry/dev.json has no "
                f"platform URL after {wait_s:g} s. Run this again once it prints "
                "'Ferry dev server at …', or set FERRY_API_URL to the platform's URL"
            )
        sleep(0.1)


def serve_platform_url(home):
    """The URL of the `ferry serve` (or `ferry quickstart`) serving FERRY_HOME `home`, from the
    server.json it writes (cli/commands/serve-run.ts), or None when none runs: its pid alive and, where
    /proc tells, a `serve` or `quickstart`, since a recorded pid may be another process's by now.
    Without it a platform started on another port (`ferry serve -p 9000`) was out of a script's reach
    although the CLI finds it."""
    try:
        with open(os.path.join(home, "server.json"), encoding="utf-8") as handle:
            info = json.load(handle)
    except (OSError, ValueError):
        return None
    pid = info.get("pid") if isinstance(info, dict) else None
    url = info.get("url") if isinstance(info, dict) else None
    if not (isinstance(pid, int) and not isinstance(pid, bool) and isinstance(url, str) and url):
        return None
    if not _process_alive(pid) or _command_line_has(pid, (b"serve", b"quickstart")) is False:
        return None
    return url


class Platform:
    """Connection settings. `Platform.from_environ()` is what remote calls use:

    * url: FERRY_API_URL, else http://127.0.0.1:$FERRY_PORT, else the platform of the `ferry dev`
      running for the project (its .ferry/dev.json, in the current folder or one above; waited for
      up to DEV_START_WAIT_S while that dev is still starting), else the `ferry serve` running for
      FERRY_HOME (its server.json), else http://127.0.0.1:8888
    * key: FERRY_CALL_TOKEN (every worker's own key: an HMAC call token locally, a call key minted
      by `ferry deploy` on AWS), FERRY_API_KEY, FERRY_API_KEY in the project's .env, RUNPOD_API_KEY,
      then FERRY_HOME/api-key. The project's own Ferry key comes before RUNPOD_API_KEY, which a RunPod
      (Flash) user keeps exported for RunPod itself; a refused key is named by where it came from.
    * app: FERRY_APP, else the project's .ferry/config.json's app, else the project folder's name
    * env: FERRY_ENV, else the app's only environment that has the endpoint

    The project folder is that of the `ferry dev` found, whose app and key (its .env) are the ones it
    runs with, as `ferry logs` reads them (cli/commands/logs-run.ts): a script run from a subfolder
    calls that dev's endpoints. Else it is the current folder.
    """

    def __init__(self, url, key, app=None, env=None, key_source=None):
        self.url = url.rstrip("/")
        self.key = key
        # Where the key came from ("$FERRY_API_KEY", "FERRY_API_KEY in /p/.env", ...): a 401 names it.
        self.key_source = key_source
        self.app = app
        self.env = env or ANY_ENV

    @classmethod
    def from_environ(cls, environ=None, cwd=None):
        environ = os.environ if environ is None else environ
        cwd = cwd or os.getcwd()
        dotenv = _dotenv(os.path.join(cwd, ".env"))
        url = environ.get("FERRY_API_URL") or dotenv.get("FERRY_API_URL")
        if not url and environ.get("FERRY_PORT"):
            url = f"http://127.0.0.1:{environ['FERRY_PORT']}"
        home = environ.get("FERRY_HOME") or os.path.join(os.path.expanduser("~"), ".ferry")
        project = cwd
        if not url:
            dev = dev_platform(cwd)
            if dev:
                url, project = dev
                if os.path.abspath(project) != os.path.abspath(cwd):
                    dotenv = _dotenv(os.path.join(project, ".env"))
            else:
                url = serve_platform_url(home) or f"http://127.0.0.1:{DEFAULT_PORT}"
        found = (
            ("$FERRY_CALL_TOKEN", environ.get("FERRY_CALL_TOKEN")),
            ("$FERRY_API_KEY", environ.get("FERRY_API_KEY")),
            (f"FERRY_API_KEY in {os.path.join(project, '.env')}", dotenv.get("FERRY_API_KEY")),
            ("$RUNPOD_API_KEY", environ.get("RUNPOD_API_KEY")),
        )
        key_source, key = next(((source, value) for source, value in found if value), (None, None))
        if not key:
            key_file = os.path.join(home, "api-key")
            try:
                with open(key_file, encoding="utf-8") as handle:
                    key = handle.read().strip() or None
            except OSError:
                key = None
            key_source = key_file if key else None
        app = environ.get("FERRY_APP")
        if not app:
            try:
                with open(os.path.join(project, ".ferry", "config.json"), encoding="utf-8") as handle:
                    app = json.load(handle).get("app")
            except (OSError, ValueError, AttributeError):
                app = None
        return cls(url, key, app or app_name_of(project), environ.get("FERRY_ENV") or ANY_ENV, key_source)

    def _refused_key(self):
        """What a 401 adds: which key went, so that a stale one set elsewhere (a RUNPOD_API_KEY kept
        for RunPod) is seen for what it is, not taken for the FERRY_API_KEY the user set."""
        if not self.key:
            return "no key was sent: set FERRY_API_KEY, in the environment or ./.env"
        source = self.key_source or "this client"
        return f"the key from {source} was refused by {self.url}: set FERRY_API_KEY to one of its keys"

    def request(self, method, path, body=None, query=None, timeout=None, raw=False):
        """(status, parsed JSON or text). Errors (4xx/5xx, unreachable) raise FerryClientError.

        `path` is under the platform URL, or a whole http(s) URL (a load-balanced endpoint's own front
        on AWS), which gets the same key."""
        url = path if path.startswith(("https://", "http://")) else self.url + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = None if body is None else json.dumps(body).encode("utf-8")
        headers = {"accept": "application/json"}
        if data is not None:
            headers["content-type"] = "application/json"
        if self.key:
            headers["authorization"] = f"Bearer {self.key}"
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                status, text = response.status, response.read().decode("utf-8")
        except urllib.error.HTTPError as exc:
            status, text = exc.code, exc.read().decode("utf-8", "replace")
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise FerryClientError(
                f"cannot reach the Ferry platform at {self.url}: {reason} "
                "(start it with `ferry serve` or `ferry dev`, or set FERRY_API_URL to its URL, "
                "or FERRY_PORT to its port on 127.0.0.1)"
            ) from None
        try:
            parsed = json.loads(text) if text else None
        except ValueError:
            parsed = text
        if status >= 400 and not raw:
            message = parsed.get("error") if isinstance(parsed, dict) else None
            message = message or f"HTTP {status}"
            if status == 404 and "/by-name/" in path:
                raise EndpointNotDeployed(message, status)
            if status == 401:
                message += f" ({self._refused_key()})"
            raise FerryClientError(message, status)
        return status, parsed


# -- one endpoint --------------------------------------------------------------------------------------


class Job:
    """A submitted job: `.status()`, `.output(timeout)`, `.cancel()`, `.stream()`."""

    def __init__(self, client, job_id, status=None):
        self.client = client
        self.id = job_id
        self.last = {"id": job_id, "status": status} if status else None

    def __repr__(self):
        return f"Job({self.id!r} on {self.client.label})"

    def status(self):
        """The job's status record (`{"id", "status", "output"?, "error"?, ...}`)."""
        _, self.last = self.client.call("GET", f"status/{self.id}")
        return self.last

    @property
    def done(self):
        return bool(self.last) and self.last.get("status") in _FINAL

    def wait(self, timeout=None, *, deadline=None):
        """The final status record; RemoteTimeout (after cancelling) when `timeout` seconds pass.
        `deadline` (a time.monotonic() value) ends the wait instead, for a caller that has already
        spent part of its `timeout`."""
        if deadline is None and timeout is not None:
            deadline = time.monotonic() + timeout
        record = self.last if self.done else None
        while record is None or record.get("status") not in _FINAL:
            wait_ms = _POLL_WAIT_MS
            if deadline is not None:
                left_ms = int((deadline - time.monotonic()) * 1000)
                if left_ms <= 0:
                    # A job that ended as the time ran out is left as it ended and the cancel says
                    # how (docs/api.md#cancel): its record is the answer, not a timeout.
                    if self.cancel().get("status") in ("CANCELLED", None):
                        raise RemoteTimeout(self.client.label, self.id, timeout)
                    _, record = self.client.call("POST", f"status/{self.id}")
                    self.last = record
                    continue
                wait_ms = max(1000, min(wait_ms, left_ms))
            _, record = self.client.call("POST", f"status-sync/{self.id}", query={"wait": wait_ms})
            self.last = record
        return record

    def output(self, timeout=None, *, deadline=None):
        """The job's output; RemoteError when it failed, RemoteTimeout when `timeout` runs out."""
        record = self.wait(timeout, deadline=deadline)
        if record.get("status") != "COMPLETED":
            raise RemoteError(self.client.label, self.id, record.get("status"), record.get("error"))
        return record.get("output")

    def cancel(self):
        _, record = self.client.call("POST", f"cancel/{self.id}")
        return record

    def stream(self, timeout=None):
        """Yields each streamed output chunk of a generator handler until the job ends; RemoteTimeout
        after cancelling the job, as wait() does, when `timeout` seconds pass first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if deadline is not None and time.monotonic() > deadline:
                if self.cancel().get("status") in ("CANCELLED", None):
                    raise RemoteTimeout(self.client.label, self.id, timeout)
                # It ended as the time ran out (docs/api.md#cancel): what is left of it is read below.
                deadline = None
            _, record = self.client.call("GET", f"stream/{self.id}")
            for chunk in record.get("stream") or []:
                yield chunk.get("output") if isinstance(chunk, dict) else chunk
            status = record.get("status")
            if status in _FINAL:
                if status != "COMPLETED":
                    raise RemoteError(self.client.label, self.id, status, record.get("error"))
                return


class EndpointClient:
    """One endpoint on the platform, by id or by (app, env, name)."""

    def __init__(self, platform=None, *, id=None, name=None):
        if (id is None) == (name is None):
            raise TypeError("EndpointClient needs exactly one of id= or name=")
        self.platform = platform or Platform.from_environ()
        self.id = id
        self.name = name
        self._lb_base = None  # where the routes of a load-balanced endpoint are (request)

    @property
    def label(self):
        return self.id or f"{self.platform.app}/{self.platform.env}/{self.name}"

    def _prefix(self):
        if self.id is not None:
            return "/v2/" + urllib.parse.quote(self.id, safe="")
        parts = (self.platform.app, self.platform.env, self.name)
        return "/v2/by-name/" + "/".join(urllib.parse.quote(p, safe="") for p in parts)

    def call(self, method, route, body=None, query=None):
        return self.platform.request(method, f"{self._prefix()}/{route}", body=body, query=query)

    def resolve(self):
        """`{"id", "kind", "app", "env", "name"}` of the endpoint, by name or by id (`GET /v2/<id>`),
        with "url" for a load-balanced endpoint deployed on AWS; EndpointNotDeployed if absent."""
        _, record = self.platform.request("GET", self._prefix())
        return record

    def run(self, input=None, webhook=None, policy=None):
        """Submit a job (`/run`); returns a Job handle at once."""
        body = {"input": {} if input is None else input}
        if webhook:
            body["webhook"] = webhook
        if policy:
            body["policy"] = policy
        _, record = self.call("POST", "run", body)
        return Job(self, record["id"], record.get("status"))

    def runsync(self, input=None, timeout=DEFAULT_CALL_TIMEOUT_S):
        """Submit and wait: the output, RemoteError on failure, RemoteTimeout after `timeout` seconds
        in all (the runsync's own wait counts against it)."""
        deadline = time.monotonic() + timeout
        wait_ms = max(1000, min(_POLL_WAIT_MS, int(timeout * 1000)))
        _, record = self.call("POST", "runsync", {"input": {} if input is None else input}, {"wait": wait_ms})
        job = Job(self, record["id"], record.get("status"))
        job.last = record
        return job.output(timeout, deadline=deadline)

    def status(self, job_id):
        return Job(self, job_id).status()

    def cancel(self, job_id):
        return Job(self, job_id).cancel()

    def health(self):
        _, record = self.call("GET", "health")
        return record

    def purge_queue(self):
        _, record = self.call("POST", "purge-queue")
        return record

    # -- load-balanced endpoints ---------------------------------------------------------------------

    def request(self, method, path, data=None):
        """An HTTP call to a route of a load-balanced endpoint; the parsed JSON answer.

        Where the routes are comes from the endpoint's lookup (by name or by id, core/api.ts): its
        own HTTPS URL when it is deployed on AWS (`url`), else the platform's `/lb/<id>` (the local
        platform, docs/api.md). One lookup per client."""
        if not isinstance(path, str) or not path.startswith("/"):
            raise ValueError(f"route path must start with '/', got {path!r}")
        if self._lb_base is None:
            found = self.resolve()
            url = found.get("url")
            self._lb_base = url.rstrip("/") if url else "/lb/" + urllib.parse.quote(found["id"], safe="")
        query = None
        body = data
        if method in ("GET", "DELETE") and isinstance(data, dict):
            query, body = {k: v if isinstance(v, str) else json.dumps(v) for k, v in data.items()}, None
        _, answer = self.platform.request(method, self._lb_base + path, body=body, query=query)
        return answer


# -- remote calls of decorated functions ------------------------------------------------------------


async def _in_thread(work):
    # The HTTP calls block; a thread keeps the caller's event loop free while the job runs.
    return await asyncio.get_running_loop().run_in_executor(None, work)


def remote_call(work):
    """What calling a remote function returns: a coroutine of the output (Flash's contract: the
    caller side is always awaitable, `asyncio.run(fn(x))` works too). `.remote()` is the blocking form."""
    return _in_thread(work)


def call_timeout(endpoint):
    raw = os.environ.get("FERRY_CALL_TIMEOUT", "").strip()
    if raw:
        try:
            return float(raw)
        except ValueError:
            raise ValueError(f"FERRY_CALL_TIMEOUT must be a number of seconds, got {raw!r}") from None
    if endpoint.execution_timeout_ms:
        # The job may run that long, plus some time in the queue.
        return endpoint.execution_timeout_ms / 1000 + 60
    return DEFAULT_CALL_TIMEOUT_S


def input_of(fn, args, kwargs, skip_self=False):
    """Positional and keyword arguments as the job's input object (parameter name → value)."""
    signature = inspect.signature(fn)
    if skip_self:
        params = list(signature.parameters.values())[1:]
        signature = signature.replace(parameters=params)
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise TypeError(f"{fn.__qualname__}{signature}: {exc}") from None
    out = {}
    for name, value in bound.arguments.items():
        kind = signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            if value:
                raise TypeError(f"{fn.__qualname__}: *{name} cannot travel as a job input; pass keywords")
        elif kind is inspect.Parameter.VAR_KEYWORD:
            out.update(value)
        else:
            out[name] = value
    try:
        json.dumps(out, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"arguments of {fn.__qualname__} must be JSON values for a remote call: {exc}") from None
    return out


class _RemoteCallable:
    """What a function and a route share once seen from outside their worker: `_work(args, kwargs)`
    prepares the call; calling gives an awaitable, `.remote()` blocks, `.local()` runs in process."""

    def __init__(self, fn, endpoint):
        functools.update_wrapper(self, fn)
        self.__ferry_endpoint__ = endpoint
        self._fn = fn

    def _work(self, args, kwargs):
        raise NotImplementedError

    def __call__(self, *args, **kwargs):
        return remote_call(self._work(args, kwargs))

    def remote(self, *args, **kwargs):
        """Blocking call: the output (for sync code)."""
        return self._work(args, kwargs)()

    def local(self, *args, **kwargs):
        return self._fn(*args, **kwargs)


class RemoteFunction(_RemoteCallable):
    """An @Endpoint function seen from outside its own worker: each call is a job on the endpoint.

    `await fn(x)` (or `asyncio.run(fn(x))`, or blocking `fn.remote(x)`) returns the output; `fn.local(x)` runs the
    function in this process."""

    def _client(self):
        return EndpointClient(name=self.__ferry_endpoint__.name)

    def _work(self, args, kwargs):
        payload = input_of(self._fn, args, kwargs)
        endpoint = self.__ferry_endpoint__

        def work():
            return self._client().runsync(payload, timeout=call_timeout(endpoint))

        return work

    def run(self, *args, **kwargs):
        """Submit without waiting: a Job handle."""
        return self._client().run(input_of(self._fn, args, kwargs))

    def __get__(self, instance, owner):
        return self

    def __repr__(self):
        return f"<remote function {self._fn.__qualname__} on endpoint {self.__ferry_endpoint__.name!r}>"


class RemoteClass:
    """A class endpoint seen from outside: `Model()` gives a proxy whose methods are remote calls
    (`await Model().predict(x)`); the worker holds the one real instance."""

    def __init__(self, cls, endpoint):
        functools.update_wrapper(self, cls, updated=())
        self.__ferry_endpoint__ = endpoint
        self._cls = cls

    def __call__(self, *args, **kwargs):
        if args or kwargs:
            raise TypeError(
                f"{self._cls.__name__}: the worker builds the instance with no arguments; "
                "pass values to the methods instead"
            )
        return _RemoteInstance(self)

    def local(self, *args, **kwargs):
        return self._cls(*args, **kwargs)

    def __repr__(self):
        return f"<remote class {self._cls.__qualname__} on endpoint {self.__ferry_endpoint__.name!r}>"


class _RemoteInstance:
    def __init__(self, remote_class):
        self._remote = remote_class

    def __getattr__(self, method):
        from .invoke import public_methods  # no cycle at import time

        cls = self._remote._cls
        if method.startswith("_") or method not in public_methods(cls):
            raise AttributeError(f"{cls.__name__} has no public method {method!r}")
        fn = getattr(cls, method)
        static = isinstance(inspect.getattr_static(cls, method), (staticmethod, classmethod))
        endpoint = self._remote.__ferry_endpoint__

        def prepare(*args, **kwargs):
            payload = dict(input_of(fn, args, kwargs, skip_self=not static), method=method)

            def work():
                return EndpointClient(name=endpoint.name).runsync(payload, timeout=call_timeout(endpoint))

            return work

        def call(*args, **kwargs):
            return remote_call(prepare(*args, **kwargs))

        call.remote = lambda *a, **k: prepare(*a, **k)()
        return call


class RemoteRoute(_RemoteCallable):
    """A load-balanced route seen from outside its endpoint's worker: calling it makes the HTTP
    request (JSON body, or query for GET/DELETE; path parameters filled from the arguments)."""

    def __init__(self, fn, endpoint, route):
        super().__init__(fn, endpoint)
        self._route = route

    def _work(self, args, kwargs):
        payload = input_of(self._fn, args, kwargs)
        path = self._route.path
        for param in self._route.param_names:
            if param not in payload:
                raise TypeError(f"{self._fn.__qualname__}: path parameter {param!r} is missing")
            path = path.replace("{" + param + "}", urllib.parse.quote(str(payload.pop(param)), safe=""))
        method = self._route.method
        name = self.__ferry_endpoint__.name

        def work():
            return EndpointClient(name=name).request(method, path, payload)

        return work

    def __repr__(self):
        return f"<remote route {self._route.method} {self._route.path} of {self.__ferry_endpoint__.name!r}>"


def runs_here(endpoint_name):
    """True inside a worker of `endpoint_name`: its own functions run in place, not as jobs."""
    return os.environ.get("FERRY_ENDPOINT_NAME") == endpoint_name


def local_target(obj):
    """The user's function or class behind a remote wrapper (what a worker must call)."""
    return getattr(obj, "_fn", None) or getattr(obj, "_cls", None) or obj
