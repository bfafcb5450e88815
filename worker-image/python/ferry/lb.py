"""Load-balanced mode: serve an Endpoint's routes over HTTP (standard library only).

A request is bound like a queue job: the JSON body (or, when there is no body, the query string)
plus the path parameters become keyword arguments. Strings from the path and query are converted
when the parameter is annotated int, float or bool (hinted_type), and read as JSON text when it is
annotated list or dict (_from_json_text: the ferry client's encoding); the arguments are checked, a
JSON body's values against their hints too, never converted, as ferry dev checks a queue route's input
(ferry/inputs.py input_problems: every missing, unknown or mistyped key at once). A query parameter
the function does not take is left out (_takes). Answers are JSON: 200 with the return value,
400/404/405/413 with {"error": ...} for bad requests, 500 {"error": <message>} when the handler
raises (traceback to stderr). GET /ping is the platform's health check. HEAD answers as GET does,
without the body. A body is read as JSON whatever its content type: nested deeper than
MAX_JSON_DEPTH, or holding NaN, Infinity or a number beyond a float (1e400), it is a 400. There is
deliberately no route that runs code sent by the caller.

With a front-door secret (config.py FERRY_LB_SECRET / FERRY_LB_SECRET_FILE), every request, /ping
included, must carry it in FRONT_DOOR_HEADER: the platform's front door checked the caller's API key
and adds it; a request that reaches the port some other way (another endpoint's code on the same
host) gets 403 and runs nothing.
"""

import asyncio
import hmac
import inspect
import json
import math
import sys
import threading
import traceback
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .endpoint import split_path
from .inputs import hinted_type, input_problems
from .invoke import OutputError, missing_package_hint, to_json_bytes, without_runtime_frames
from .logs import LineBudget

MAX_BODY_BYTES = 20 * 1024 * 1024  # the /runsync payload limit (docs/api.md#limits)
# The platform's nesting limit (core/json.ts maxJsonDepth). Its front door checks it for JSON
# content types only; this worker reads every body as JSON, so it checks it itself.
MAX_JSON_DEPTH = 512
# Sent by the platform's front door (the local pool's forward, the ECS agent) with every request.
FRONT_DOOR_HEADER = "X-Ferry-Lb-Secret"


class BadRequest(Exception):
    def __init__(self, status, message, headers=None):
        super().__init__(message)
        self.status = status
        self.headers = headers

    def answer(self):
        """What a router's handle returns for it: (status, {"error"}), and its headers if it has any."""
        body = {"error": str(self)}
        return (self.status, body, self.headers) if self.headers else (self.status, body)


def method_not_allowed(method, path, allowed):
    """The 405 for `path`, which takes only the methods `allowed`: with the Allow header a 405 must
    carry (RFC 9110, 15.5.6), which Starlette (Flash's FastAPI) sends too. HEAD is served by a GET
    route, so it is allowed wherever GET is."""
    methods = sorted(set(allowed) | ({"HEAD"} if "GET" in allowed else set()))
    listed = ", ".join(methods)
    return BadRequest(405, f"method {method} not allowed for {path}; allowed: {listed}", {"Allow": listed})


def _convert(value, annotation, name, default_none=False):
    """Path/query values are strings; honour simple annotations so `item_id: int` gets an int, and
    `tags: list` or `options: dict` the value of the JSON text in the query (_from_json_text).
    `default_none`: the parameter's default is None, which then fits as its hint's None does."""
    hint = hinted_type(annotation)
    kind = (hint or (None,))[0]
    if kind in ("list", "dict"):
        return _from_json_text(value, kind, hint[1] or default_none, name)
    if isinstance(value, list):
        return [_convert(v, annotation, name) for v in value]
    if value == "null" and kind in ("int", "float", "bool") and (hint[1] or default_none):
        return None  # the ferry client's None; no int, float or bool is written so
    try:
        if kind == "int":
            return int(value)
        if kind == "float":
            return float(value)
        if kind == "bool":
            lowered = value.lower()
            if lowered in ("true", "1", "yes"):
                return True
            if lowered in ("false", "0", "no"):
                return False
            raise ValueError(value)
    except ValueError:
        raise BadRequest(400, f"parameter {name!r} must be {kind}, got {value!r}") from None
    return value


def _from_json_text(value, kind, nullable, name):
    """A query value for a parameter hinted list or dict. The ferry client sends a list or dict
    argument of a GET or DELETE route as its JSON text (ferry/client.py EndpointClient.request), and
    None as `null`: each is read back as that value. A key given more than once (`?tags=a&tags=b`,
    as FastAPI reads a list) is the list of its values, and a single value that is not JSON text
    of a list or an object is a list of one, as there."""
    if isinstance(value, list):
        if kind == "list":
            return value
        raise BadRequest(400, f"parameter {name!r} must be dict (as JSON text), got {len(value)} values")
    try:
        parsed = parse_json_body(value.encode("utf-8"))
    except BadRequest:
        parsed = value
    if isinstance(parsed, list if kind == "list" else dict) or (parsed is None and nullable):
        return parsed
    if kind == "list" and not isinstance(parsed, dict) and parsed is not None:
        return [value]
    raise BadRequest(400, f"parameter {name!r} must be {kind} (as JSON text), got {value!r}")


# What the checks of a body need of it, in one pass: every bracket as [ or ], every digit as 0, e as
# E; a + goes (so "1e+400" reads "1E000"). Quotes and backslashes stay, so strings stay strings.
_SCAN = bytes.maketrans(b"123456789e{}", b"000000000E[]")
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'"[]')


def scan(body):
    return body.translate(_SCAN, b"+")


def json_depth(scanned, limit=MAX_JSON_DEPTH):
    """How deep the JSON text nests, as core/json.ts counts it ("[]" is 1), given scan(text); 0
    when it is plainly no deeper than `limit`. Byte operations of C speed, then a Python step for
    each peak that is left, never for each byte: a fraction of the body's json.loads."""
    if scanned.count(b"[") <= limit:
        return 0
    if b"\\" in scanned:  # escapes out first, so every quote left starts or ends a string
        scanned = scanned.replace(b"\\\\", b"").replace(b'\\"', b"")
    marks = scanned.translate(None, _NOT_STRUCTURE)  # quotes and brackets
    if b'"' in marks:
        # Strings without brackets are "" now; dropping a pair of adjacent quotes keeps every
        # other quote's parity, then brackets inside strings (odd pieces) go.
        marks = marks.replace(b'""', b"")
        if b'"' in marks:
            marks = b"".join(marks.split(b'"')[::2])
    # Each pass drops the empty containers, one level off every branch; while that shrinks the text
    # a lot, it is the cheapest way down.
    passes = 0
    while marks and passes <= limit:
        shorter = marks.replace(b"[]", b"")
        passes += 1
        dropped, marks = len(marks) - len(shorter), shorter
        if dropped * 4 < len(marks):
            break
    # Then one step a peak: each piece between two "][" rises, then falls.
    level = deepest = -1
    for piece in marks.split(b"]["):
        opens = piece.count(b"[")
        level += opens + 1
        deepest = max(deepest, level)
        level -= len(piece) - opens + 1
    return passes + max(deepest, 0)


def _refuse_constant(token):
    raise BadRequest(400, f"request body is not valid JSON: {token} is not a JSON number")


def _finite_float(text):
    value = float(text)
    if value in (math.inf, -math.inf):
        shown = text if len(text) <= 40 else f"{text[:20]}...{text[-10:]}"
        raise BadRequest(400, f"request body is not valid JSON: the number {shown} is out of range")
    return value


def parse_json_body(body):
    """The JSON value of a request body (bytes), or BadRequest 400 with what is wrong: not JSON,
    nested deeper than MAX_JSON_DEPTH, or a value JSON does not have (NaN, Infinity, 1e400, which
    Python's json module reads and could not write back)."""
    scanned = scan(body)
    depth = json_depth(scanned)
    if depth > MAX_JSON_DEPTH:
        raise BadRequest(
            400, f"request body is nested {depth} levels deep; at most {MAX_JSON_DEPTH} levels are accepted")
    # A number too big for a float (1e400) has an exponent of three digits or more, or some 200
    # digits in a row (an exponent of two gives at most 10^99 of the rest): only a body with one
    # of those has every float go through a hook, which costs a third more on a body of floats.
    try:
        if b"E000" in scanned or b"0" * 200 in scanned:
            return json.loads(body, parse_constant=_refuse_constant, parse_float=_finite_float)
        return json.loads(body, parse_constant=_refuse_constant)
    except ValueError as exc:
        raise BadRequest(400, f"request body is not valid JSON: {exc}") from None
    except RecursionError:  # the handler's thread was deep in calls already
        raise BadRequest(
            400, f"request body is nested too deep to read; at most {MAX_JSON_DEPTH} levels are accepted") from None


class Router:
    """Matches a request to a route and calls it; independent of the HTTP server for testing."""

    def __init__(self, endpoint, loop=None):
        self.endpoint = endpoint
        self.routes = list(endpoint.routes)
        self.loop = loop

    def find(self, method, path):
        """(route, path params) or BadRequest 404/405. HEAD runs the GET route (the server sends
        its status and headers, not its body), as Starlette does."""
        wanted = "GET" if method == "HEAD" else method
        allowed = []
        segments = split_path(path)
        for route in self.routes:
            params = route.match(segments)
            if params is None:
                continue
            if route.method == wanted:
                return route, params
            allowed.append(route.method)
        if allowed:
            raise method_not_allowed(method, path, allowed)
        raise BadRequest(404, f"no route for {method} {path}")

    def build_kwargs(self, route, path_params, query, body):
        try:
            signature = inspect.signature(route.fn)
        except (TypeError, ValueError):
            signature = None
        if body:
            data = parse_json_body(body)
            if not isinstance(data, dict):
                raise BadRequest(400, f"request body must be a JSON object, got {type(data).__name__}")
            kwargs, from_strings = dict(data), set()
        else:
            kwargs = {}
            for key, values in urllib.parse.parse_qs(query, keep_blank_values=True).items():
                if _takes(signature, key):
                    kwargs[key] = values[0] if len(values) == 1 else values
            from_strings = set(kwargs)
        for key, value in path_params.items():
            if key in kwargs and kwargs[key] != value:
                raise BadRequest(400, f"parameter {key!r} is given both in the path and the request")
            kwargs[key] = value
            from_strings.add(key)
        if signature is not None:
            for key in from_strings:
                param = signature.parameters.get(key)
                if param is not None and param.annotation is not inspect.Parameter.empty:
                    kwargs[key] = _convert(kwargs[key], param.annotation, key, param.default is None)
            # A body is checked as ferry dev checks a queue route's input, every problem named at once:
            # a wrong type is the caller's 400 and not the handler's TypeError (a 500).
            problems = input_problems(signature, kwargs, check_types=True, unchecked=from_strings)
            if not problems:
                try:
                    signature.bind(**kwargs)
                except TypeError as exc:  # a case input_problems does not know: still the caller's 400
                    problems.append(str(exc))
            if problems:
                raise BadRequest(400, f"bad parameters for {route.method} {route.path}: {'; '.join(problems)}")
        return kwargs

    def call(self, route, kwargs):
        fn = route.fn
        if inspect.isasyncgenfunction(fn):
            return self._on_loop(_collect_async(fn(**kwargs)))
        if inspect.iscoroutinefunction(fn):
            return self._on_loop(fn(**kwargs))
        result = fn(**kwargs)
        if inspect.isgenerator(result):
            return list(result)
        if inspect.iscoroutine(result):
            return self._on_loop(result)
        return result

    def _on_loop(self, coro):
        if self.loop is None:
            return asyncio.run(coro)
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def handle(self, method, raw_path, body):
        """(status, JSON-able body) for one request, or (status, body, headers) for an answer that
        needs headers of its own (a 405's Allow)."""
        parts = urllib.parse.urlsplit(raw_path)
        path = parts.path or "/"
        if path == "/ping" and method in ("GET", "HEAD"):
            return 200, {"status": "healthy"}
        try:
            route, params = self.find(method, path)
            kwargs = self.build_kwargs(route, params, parts.query, body)
        except BadRequest as exc:
            return exc.answer()
        try:
            return 200, self.call(route, kwargs)
        except Exception as exc:  # noqa: BLE001 - a handler failure is a 500, the server lives
            exc = without_runtime_frames(exc)
            traceback.print_exception(type(exc), exc, exc.__traceback__)
            hint = missing_package_hint(exc)
            if hint is not None:
                print(f"ferry worker: {hint}", file=sys.stderr)
            return 500, {"error": str(exc) or type(exc).__name__}


def _takes(signature, name):
    """Whether a query parameter goes to the function: one it names, or any with **kwargs. Others are
    left out, as web frameworks (Flash's FastAPI among them) leave them: a cache-buster or a tracking
    parameter on a GET must not turn it into a 400. A JSON body stays bound whole, like a job's input."""
    if signature is None:
        return True
    params = signature.parameters
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


async def _collect_async(agen):
    return [value async for value in agen]


def make_server(router, host, port, say, front_door_secret=None):
    expected = front_door_secret.encode("utf-8") if front_door_secret else None
    active = {"count": 0}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "ferry-lb"

        def _serve(self):
            with lock:
                active["count"] += 1
            try:
                self._serve_one()
            finally:
                with lock:
                    active["count"] -= 1

        def _serve_one(self):
            method = self.command
            if expected is not None:
                given = (self.headers.get(FRONT_DOOR_HEADER) or "").encode("utf-8")
                if not hmac.compare_digest(given, expected):
                    # The body is never read: close rather than leave it in the stream.
                    self.close_connection = True
                    return self._reply(403, {"error": "requests reach this worker through the platform only"})
            body = b""
            length = self.headers.get("Content-Length")
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                self.close_connection = True
                return self._reply(411, {"error": "send the body with a Content-Length"})
            if length:
                try:
                    size = int(length)
                except ValueError:
                    self.close_connection = True
                    return self._reply(400, {"error": f"bad Content-Length {length!r}"})
                if size > MAX_BODY_BYTES:
                    self.close_connection = True
                    return self._reply(413, {"error": f"request body over {MAX_BODY_BYTES} bytes"})
                body = self.rfile.read(size)
            status, payload, *headers = router.handle(method, self.path, body.strip())
            self._reply(status, payload, *headers)

        def _reply(self, status, payload, headers=None):
            try:
                data = to_json_bytes(payload)
            except OutputError as exc:
                say(f"{self.command} {self.path}: {exc}")
                status, data = 500, to_json_bytes({"error": str(exc)})
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))  # a HEAD's too: the GET body's length
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = do_PATCH = _serve

        def log_request(self, code="-", size="-"):
            line = f'{self.address_string()} "{self.requestline}" {code}'
            # An answer below 400 is routine; a refused or failed request always gets its line.
            if isinstance(code, int) and code < 400:
                answered.routine(line)
            else:
                say(line)

        def log_message(self, fmt, *args):
            say(f"{self.address_string()} {fmt % args}")

    answered = LineBudget(say, ("request answered", "requests answered"))
    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    server.active = active
    server.answered = answered
    return server
