"""What an `Endpoint(...)` declaration may say, in Python.

core/endpoint-spec.ts owns these rules. The `ferry` package (ferry/endpoint.py, checking a
declaration when it runs) and the static scanner (cli/build/scan.py, checking it without running
the user's code) are Python and cannot import that file, so this module is their one copy:
endpoint.py imports it and scan.py loads it by path, as it loads names.py and hints.py.
worker-image/python/test_endpoint_spec.py checks it against the generated
core/endpoint-spec.schema.json. Standard library only, and nothing of the ferry package.
"""

import re

GPU_MODELS = ("T4", "A10G", "L4", "L40S", "A100", "H100")
PYTHON_VERSIONS = ("3.10", "3.11", "3.12", "3.13")
HTTP_METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH")
# The platform's health check (docs/workers.md): no route of a load-balanced endpoint may take it.
RESERVED_PATHS = ("/ping",)

# Endpoint names end up in URLs and stack names.
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")
CPU_RE = re.compile(r"^([1-9][0-9]*)-([1-9][0-9]*)$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Image endpoints (core/endpoint-spec.ts imagePattern, imageExcludedParameters).
IMAGE_RE = re.compile(r"^[a-z0-9][A-Za-z0-9._/:-]*(@sha256:[a-f0-9]{64})?$")
IMAGE_EXCLUDED_PARAMETERS = ("dependencies", "system_dependencies", "python_version")

# Variables the platform sets in every worker itself (an entry ending in _ is a prefix; compared
# without case): an env key may not be one. core/endpoint-spec.ts (platformEnvNames) says why.
PLATFORM_ENV_NAMES = (
    "FERRY_",
    "RUNPOD_WEBHOOK_",
    "RUNPOD_AI_API_KEY",
    "RUNPOD_ENDPOINT_ID",
    "RUNPOD_PING_INTERVAL",
    "RUNPOD_POD_ID",
    "RUNPOD_POD_HOSTNAME",
)


def platform_env_name_of(key):
    """The entry of PLATFORM_ENV_NAMES that `key` is (or starts with, for a prefix), if any."""
    upper = key.upper()
    return next((e for e in PLATFORM_ENV_NAMES if (upper.startswith(e) if e.endswith("_") else upper == e)), None)


# A load-balanced route's path: `{name}` segments are its path parameters.
PATH_PARAM_RE = re.compile(r"\{([^{}]*)\}")
_IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# What a segment outside a {parameter} may hold: RFC 3986's pchar (a % is the character itself: the
# request's path is decoded before it is matched, lb.py), less the two that ferry dev's router
# (find-my-way, cli/dev/routes.ts) reads otherwise: `*` a wildcard, `:` a parameter (_ROUTER_CHARS).
_PATH_SEGMENT_RE = re.compile(r"^[A-Za-z0-9._~!$&'()+,;=@%-]*$")
_PATH_TEXT = "letters, digits and - . _ ~ ! $ & ' ( ) + , ; = @ %"
_ROUTER_CHARS = {"*": "a wildcard", ":": "the start of a path parameter"}


def path_problem(path):
    """What is wrong with the route path `path` (a str), or None when the runtime can route it."""
    if not path.startswith("/"):
        return "route path must start with '/' (got %r)" % path
    if path.rstrip("/") in RESERVED_PATHS or path in RESERVED_PATHS:
        return "route path %s is reserved for the platform's health check; choose another path" % path
    if "?" in path or "#" in path:
        return "route path must not contain a query or fragment (got %r)" % path
    seen = set()
    for segment in path.split("/")[1:]:
        if segment in (".", ".."):
            # RFC 3986's dot-segments: curl, browsers and fetch remove them (with the segment before
            # a ..) before a request is sent, so no client's request could reach such a route.
            return (
                "route path %r has a %r segment, which clients resolve away before they send a request, "
                "so nothing could reach it" % (path, segment)
            )
        params = PATH_PARAM_RE.findall(segment)
        if params:
            if not re.fullmatch(r"\{[^{}]*\}", segment):
                return "a path parameter must be a whole segment like /items/{item_id} (got %r)" % path
            if not _IDENT_RE.match(params[0]):
                return "path parameter names must be Python identifiers (got {%s} in %r)" % (params[0], path)
            if params[0] in seen:
                return "path parameter {%s} appears twice in %r" % (params[0], path)
            seen.add(params[0])
        elif "{" in segment or "}" in segment:
            return "route path has an invalid segment %r in %r" % (segment, path)
        elif not _PATH_SEGMENT_RE.match(segment):
            char = next((c for c in _ROUTER_CHARS if c in segment), None)
            if char is not None:
                return (
                    "route path %r has %r, which ferry dev would read as %s and the deployed runtime as "
                    "the character itself; outside a {parameter} a segment takes %s"
                    % (path, char, _ROUTER_CHARS[char], _PATH_TEXT)
                )
            return "route path has an invalid segment %r in %r; outside a {parameter} a segment takes %s" % (
                segment, path, _PATH_TEXT)
    return None


# What a handler's signature may say. A job's input and a load-balanced request's body reach the
# handler as keyword arguments only (ferry/invoke.py, ferry/lb.py), so a parameter no keyword can give
# makes it a handler nothing can call. The scanner (cli/build/scan.py, on the AST) and the ferry
# package (ferry/endpoint.py, on inspect.signature) refuse such a handler in these words.


def positional_only_problem(function, parameter):
    """Why `function` (an endpoint function, a class endpoint's public method or a load-balanced
    route, by its name) can never be called: its parameter `parameter` is positional-only, before
    the `/`, and has no default. One with a default is simply no input."""
    return (
        "%s() can never be called: its parameter %r is positional-only (before the '/') and has no default, "
        "and a job input or a request body is passed by keyword only; drop the '/' or give %r a default"
        % (function, parameter, parameter)
    )


def route_job_problem(function):
    """Why the load-balanced route `function` can never be called: it takes a required keyword-only
    `job`, which only a queue-based handler is given (ferry/invoke.py JOB_PARAM)."""
    return (
        "%s() can never be called: it takes a keyword-only 'job' with no default, and only a queue-based "
        "handler is given its job; a load-balanced route gets none (progress_update is for queue jobs): "
        "drop 'job' or give it a default" % (function,)
    )
