"""Static scanner for `ferry build`: finds the project's @Endpoint declarations without running user code.

Usage: python3 scan.py <project_dir> [--input -]

Prints one JSON object to stdout: {"ok": true, "files": [...], "endpoints": [...], "warnings": [...]}
or {"ok": false, "errors": [{"file", "line", "message"}]}, either with "python": {"version": "3.11",
"executable": sys.executable}. Every file is parsed with `ast` only; user
code is never imported or executed, so a project builds without torch (or anything else) installed.
With `--input -` a JSON object is read from stdin: "files", the project-relative .py paths to scan
(the build passes the files that ship; without it the project is walked with the built-in skip
list), and "requirements", the requirement lines of requirements.txt as cli/build/deps.ts reads them
([{"file", "line", "spec"}]), each checked as a dependencies=[...] entry is (requirement_problem).

Kept compatible with Python 3.8+ (it runs under whatever python3 the user has).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import sys


def _load_ferry_module(name):
    """A module of the ferry package that needs nothing else, loaded by path: the scanner imports no
    user code and not the ferry package itself, only these: names.py, the one table of Flash's
    resource names, hints.py, the one rule of which type hints are checked, and declaration.py, what
    an Endpoint(...) declaration may say."""
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "..", "..", "worker-image", "python", "ferry", f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"ferry_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


names = _load_ferry_module("names")
hints = _load_ferry_module("hints")
declaration = _load_ferry_module("declaration")

SKIP_DIRS = {".ferry", ".venv", "venv", "env", "__pycache__", ".git", "node_modules", "tests"}
# A load-balanced endpoint's route decorators: @api.get, @api.post...
ROUTE_DECORATORS = [method.lower() for method in declaration.HTTP_METHODS]
KNOWN_KWARGS = {
    "name",
    "gpu",
    "cpu",
    "workers",
    "idle_timeout",
    "dependencies",
    "system_dependencies",
    "env",
    "secrets",
    "gpu_count",
    "execution_timeout_ms",
    "max_concurrency",
    "python_version",
    "health_check_grace",
}



# PEP 508 requirement strings for `dependencies=[...]` and requirements.txt lines (the build hands
# those over: --input), checked here because pip meets a malformed one with a traceback (an
# unparsable marker raises InvalidMarker inside pip). Regexes rather than `packaging`, which is not
# in the standard library and may be missing from the user's python3.
REQ_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
# A PEP 440 version as written (any case, separators, leading v). After `===` (arbitrary equality)
# PEP 440 allows any string, and pip takes it (answering "no matching distribution" if none is).
REQ_VERSION = (
    r"v?(?:[0-9]+!)?[0-9]+(?:\.[0-9]+)*"
    r"(?:[-_.]?(?:alpha|beta|preview|pre|a|b|c|rc)[-_.]?[0-9]*)?"
    r"(?:-[0-9]+|[-_.]?(?:post|rev|r)[-_.]?[0-9]*)?"
    r"(?:[-_.]?dev[-_.]?[0-9]*)?"
    r"(?:\+[a-z0-9]+(?:[-_.][a-z0-9]+)*)?"
)
REQ_SPECIFIER = (
    r"(?:===\s*[^\s,;()]+|(?:==|!=)\s*v?(?:[0-9]+!)?[0-9]+(?:\.[0-9]+)*\.\*|(?:~=|==|!=|<=|>=|<|>)\s*%s)"
    % REQ_VERSION
)
REQ_SPECIFIERS = r"%s(?:\s*,\s*%s)*" % (REQ_SPECIFIER, REQ_SPECIFIER)
REQ_URL = r"[A-Za-z][A-Za-z0-9+.-]*://\S+"
# Everything before the `;`: name and [extras], then `@ url`, specifiers, or specifiers in parentheses.
REQ_PREFIX = r"\s*{name}\s*(?:\[\s*(?:{name}(?:\s*,\s*{name})*)?\s*\])?\s*".format(name=REQ_NAME)
REQ_PREFIX_RE = re.compile(REQ_PREFIX)
REQ_HEAD_RE = re.compile(
    r"{prefix}(?:@\s*{url}|\(\s*{specs}\s*\)|{specs})?\s*".format(prefix=REQ_PREFIX, url=REQ_URL, specs=REQ_SPECIFIERS),
    re.IGNORECASE,
)
REQ_URL_RE = re.compile(REQ_URL)
# The archive names pip installs from a file (pip/_internal/utils/filetypes.py).
REQ_ARCHIVE_RE = re.compile(r"\.(whl|zip|tar|tar\.gz|tgz|tar\.bz2|tbz|tar\.xz|txz|tlz|tar\.lz|tar\.lzma)$", re.IGNORECASE)
# The marker grammar as packaging parses it; the variables are the ones pip evaluates.
MARKER_WS = re.compile(r"\s*")
MARKER_VAR = re.compile(
    r"""'[^']*'|"[^"]*"|\b(?:python_version|python_full_version|os[._]name|sys[._]platform|platform_(?:release|system)"""
    r"""|platform[._](?:version|machine|python_implementation)|python_implementation|implementation_(?:name|version)|extra)\b"""
)
MARKER_OP = re.compile(r"===|==|~=|!=|<=|>=|<|>|\bin\b|\bnot\s+in\b")
MARKER_BOOL = re.compile(r"\b(?:and|or)\b")
MARKER_OPEN, MARKER_CLOSE = re.compile(r"\("), re.compile(r"\)")


def marker_ok(text: str) -> bool:
    """Whether `text` parses as a PEP 508 environment marker, such as `python_version < "3.11"`."""
    pos = [0]

    def take(pattern) -> bool:
        found = pattern.match(text, MARKER_WS.match(text, pos[0]).end())
        if found:
            pos[0] = found.end()
        return found is not None

    def atom() -> bool:
        if take(MARKER_OPEN):
            return expression() and take(MARKER_CLOSE)
        return take(MARKER_VAR) and take(MARKER_OP) and take(MARKER_VAR)

    def expression() -> bool:
        if not atom():
            return False
        while take(MARKER_BOOL):
            if not atom():
                return False
        return True

    try:
        ok = expression()
    except RecursionError:
        return False
    return ok and MARKER_WS.match(text, pos[0]).end() == len(text)


def requirement_problem(spec: str) -> str | None:
    """Why pip could not take `spec` as a requirement, or None. Beside PEP 508 this accepts what the
    build passes on to pip unchanged (cli/build/deps.ts): a bare URL (`git+https://...#egg=name`) and a
    local path or archive, each with an optional marker."""
    bare_url = REQ_URL_RE.match(spec) is not None
    # Where pip itself splits off the marker: at "; " after a bare URL (a URL may hold ';'), else at ';'.
    head, sep, marker = spec.partition("; " if bare_url else ";")
    problem = head_problem(head.strip(), bare_url)
    if problem or not sep:
        return problem
    if not marker.strip():
        return "nothing follows ';' where an environment marker belongs"
    if not marker_ok(marker.strip()):
        return "%r is not an environment marker such as python_version < \"3.12\"" % marker.strip()
    return None


def head_problem(head: str, bare_url: bool) -> str | None:
    """requirement_problem for the part before the marker."""
    if bare_url:
        return None if REQ_URL_RE.fullmatch(head) else "a URL cannot contain spaces"
    if REQ_HEAD_RE.fullmatch(head):
        return None
    # pip's own test for a path (pip/_internal/req/constructors.py): a separator, a leading dot or an
    # archive name, unless what comes before an '@' is no path: then it is `name @ url`.
    def looks_like_path(text: str) -> bool:
        return text.startswith(".") or "/" in text or "\\" in text

    if ("@" not in head or looks_like_path(head.split("@", 1)[0])) and (looks_like_path(head) or REQ_ARCHIVE_RE.search(head)):
        return None
    # Name the part that went wrong, when the name itself reads fine.
    prefix = REQ_PREFIX_RE.match(head)
    rest = head[prefix.end() :] if prefix else ""
    if rest.startswith("@"):
        return "%r is not a URL such as https://host/pkg.whl" % rest[1:].strip()
    if rest[:1] in ("<", ">", "=", "!", "~", "("):
        return "%r is not a list of version specifiers such as >=2.1,<3 or ==2.*" % rest
    return "expected a package name with optional [extras] and version specifiers, or name @ URL"


class ScanError(Exception):
    def __init__(self, file: str, line: int, message: str) -> None:
        super().__init__(message)
        self.file = file
        self.line = line
        self.message = message




def walk_project(root: str) -> list:
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        # A folder holding pyvenv.cfg is a virtualenv, whatever its name.
        dirnames[:] = sorted(
            d for d in dirnames if d not in SKIP_DIRS and not os.path.isfile(os.path.join(dirpath, d, "pyvenv.cfg"))
        )
        for name in sorted(filenames):
            if not name.endswith(".py") or name.startswith("test_"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/")
            found.append(rel)
    return found


def module_of(rel: str) -> str:
    parts = rel[: -len(".py")].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def first_doc_line(node) -> str | None:
    doc = ast.get_docstring(node)
    if not doc:
        return None
    for line in doc.splitlines():
        if line.strip():
            return line.strip()
    return None


def is_generator(fn) -> bool:
    """A yield in the function's own body (not in nested functions, lambdas or classes)."""
    stack = list(fn.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return True
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        stack.extend(ast.iter_child_nodes(node))
    return False


def params_of(fn, drop_first: bool = False) -> list:
    """The names an input key can give: a positional-only parameter (before the `/`) is none."""
    args = fn.args
    positional = list(getattr(args, "posonlyargs", [])) + list(args.args)
    if drop_first and positional:
        positional = positional[1:]
    posonly = set(id(a) for a in getattr(args, "posonlyargs", []))
    return [a.arg for a in positional + list(args.kwonlyargs) if id(a) not in posonly]


def unbound_parameter(fn, label: str, drop_first: bool = False, route: bool = False):
    """The problem of a handler no input can call (declaration.py positional_only_problem and
    route_job_problem), else None: a required positional-only parameter, which no key of a job input
    or body gives, and on a load-balanced route a required keyword-only `job`, which only a queue job
    is given. `label`: the handler as the message names it (a method as Class.method)."""
    args = fn.args
    posonly = list(getattr(args, "posonlyargs", []))
    # Defaults belong to the last of posonly + args.
    required = len(posonly) + len(args.args) - len(args.defaults)
    for index, arg in enumerate(posonly):
        if index < required and not (drop_first and index == 0):
            return declaration.positional_only_problem(label, arg.arg)
    if route:
        for arg, default in zip(args.kwonlyargs, args.kw_defaults):
            if arg.arg == "job" and default is None:
                return declaration.route_job_problem(label)
    return None


# The JSON Schema type of each kind of value a checked hint takes (ferry/hints.py).
JSON_TYPES = {"int": "integer", "float": "number", "str": "string", "bool": "boolean", "dict": "object",
              "list": "array"}


def annotation_schema(annotation) -> dict:
    """What `ferry dev` checks an argument against, and what its OpenAPI document shows: a JSON type
    for a hint ferry/hints.py checks (the rule the load-balanced runtime checks a body by), with
    "nullable" when None is allowed too. {} for anything else: those pass unchecked (docs/python.md,
    "The ferry dev loop")."""
    found = hints.hinted_node(annotation)
    if not found:
        return {}
    kind, nullable = found
    return {"type": JSON_TYPES[kind], "nullable": True} if nullable else {"type": JSON_TYPES[kind]}


def inputs_of(fn, drop_first: bool = False, route: bool = False) -> list:
    """Each parameter as the job input sees it: name, required, JSON type and default when literal.
    The keyword-only `job` parameter of a queue handler is the runtime's, not an input
    (ferry/invoke.py); a load-balanced route is given no job, so there it is an argument like any other
    (a required one is refused: unbound_parameter). A positional-only parameter is none: no key gives
    it. A typed parameter whose default is None takes null as well: the handler gets what it would
    without it."""
    args = fn.args
    posonly = list(getattr(args, "posonlyargs", []))
    positional = posonly + list(args.args)
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    pairs = list(zip(positional, defaults))[len(posonly) :]
    if drop_first and not posonly and pairs:
        pairs = pairs[1:]
    pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if route or a.arg != "job"]
    inputs = []
    for arg, default in pairs:
        item = {"name": arg.arg, "required": default is None}
        item.update(annotation_schema(arg.annotation))
        if "type" in item and hints.is_none(default):
            item["nullable"] = True
        if default is not None:
            try:
                value = ast.literal_eval(default)
                json.dumps(value)
                item["default"] = value
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                pass
        inputs.append(item)
    return inputs


def callable_info(fn, drop_first: bool = False, route: bool = False) -> dict:
    info = {
        "name": fn.name,
        "isAsync": isinstance(fn, ast.AsyncFunctionDef),
        "isGenerator": is_generator(fn),
        "params": params_of(fn, drop_first),
        "inputs": inputs_of(fn, drop_first, route),
    }
    if fn.args.kwarg is not None:
        # **kwargs: any other input key is an argument too.
        info["varKeywords"] = True
    summary = first_doc_line(fn)
    if summary is not None:
        info["summary"] = summary
    return info


def is_static(fn) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in fn.decorator_list)


def describe(node) -> str:
    if isinstance(node, ast.Name):
        return "the name '%s'" % node.id
    if isinstance(node, ast.Call):
        return "a call"
    if isinstance(node, ast.Attribute):
        return "an attribute"
    return "an expression"


class FileScanner:
    def __init__(self, rel: str, tree: ast.Module) -> None:
        self.rel = rel
        self.tree = tree
        self.endpoint_names = set()  # names bound to ferry.Endpoint
        self.module_names = set()  # names bound to the ferry module
        self.variables = {}  # module variable -> LB endpoint record
        self.endpoints = []
        self.warnings = []

    def fail(self, node, message: str):
        raise ScanError(self.rel, getattr(node, "lineno", 1), message)

    # -- imports --------------------------------------------------------------------------------
    def imports(self) -> list:
        package = module_of(self.rel).split(".") if self.rel.endswith("__init__.py") else module_of(self.rel).split(".")[:-1]
        names = []
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                names.extend(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    if node.level - 1 > len(package):
                        continue
                    base = package[: len(package) - (node.level - 1)]
                    prefix = ".".join(base + ([node.module] if node.module else []))
                else:
                    prefix = node.module or ""
                if prefix:
                    names.append(prefix)
                # `from pkg import mod` may name a submodule; the build checks whether such a file exists.
                for alias in node.names:
                    if alias.name != "*":
                        names.append(prefix + "." + alias.name if prefix else alias.name)
        seen = set()
        return [n for n in names if n and not (n in seen or seen.add(n))]

    def collect_ferry_names(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.ImportFrom) and node.module == "ferry" and node.level == 0:
                for alias in node.names:
                    if alias.name == "Endpoint":
                        self.endpoint_names.add(alias.asname or "Endpoint")
                    elif alias.name == "*":
                        self.endpoint_names.add("Endpoint")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name == "ferry":
                        self.module_names.add(alias.asname or "ferry")

    def is_endpoint_ref(self, node) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.endpoint_names
        if isinstance(node, ast.Attribute) and node.attr == "Endpoint":
            return isinstance(node.value, ast.Name) and node.value.id in self.module_names
        return False

    def is_endpoint_call(self, node) -> bool:
        return isinstance(node, ast.Call) and self.is_endpoint_ref(node.func)

    # -- Endpoint(...) arguments ----------------------------------------------------------------
    def flash_constant(self, node):
        """`GpuType.L4` and friends (Flash's constants) as their string values, in lists too."""
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in names.CONSTANTS:
            table = names.CONSTANTS[node.value.id]
            if node.attr not in table:
                self.fail(node, "%s has no constant %s (known: %s)" % (node.value.id, node.attr, ", ".join(sorted(table))))
            return table[node.attr]
        if isinstance(node, (ast.List, ast.Tuple)) and any(isinstance(e, ast.Attribute) for e in node.elts):
            return [self.flash_constant(e) if isinstance(e, ast.Attribute) else self.literal(e, "a list item") for e in node.elts]
        return None

    def literal(self, node, what: str):
        constant = self.flash_constant(node)
        if constant is not None:
            return constant
        try:
            return ast.literal_eval(node)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            self.fail(
                node,
                "%s must be a literal value written in place (found %s): the build reads it without running your code"
                % (what, describe(node)),
            )

    def config(self, call: ast.Call, kind: str, default_name: str | None) -> dict:
        raw = {}
        if len(call.args) > 1:
            self.fail(call, "Endpoint takes only `name` as a positional argument; pass the others by keyword")
        if call.args:
            if isinstance(call.args[0], ast.Starred):
                self.fail(call, "Endpoint arguments must be written out, not unpacked with *")
            raw["name"] = self.literal(call.args[0], "Endpoint parameter 'name'")
        for kw in call.keywords:
            if kw.arg is None:
                self.fail(kw.value, "Endpoint arguments must be written out, not unpacked with **")
            if kw.arg not in KNOWN_KWARGS and names.flash_parameter_message(kw.arg):
                self.fail(kw.value, names.flash_parameter_message(kw.arg))
            if kw.arg not in KNOWN_KWARGS:
                self.fail(kw.value, "unknown Endpoint parameter '%s' (known: %s)" % (kw.arg, ", ".join(sorted(KNOWN_KWARGS))))
            if kw.arg in raw:
                self.fail(kw.value, "Endpoint parameter '%s' is given twice" % kw.arg)
            raw[kw.arg] = self.literal(kw.value, "Endpoint parameter '%s'" % kw.arg)
        return self.validate(call, raw, kind, default_name)

    def validate(self, call, raw: dict, kind: str, default_name: str | None) -> dict:
        def bad(message: str):
            self.fail(call, message)

        def is_int(v) -> bool:
            return isinstance(v, int) and not isinstance(v, bool)

        name = raw.get("name", default_name)
        if name is not None:
            self.check_name(call, name)
        gpu, cpu = raw.get("gpu"), raw.get("cpu")
        # Flash's names (GpuGroup.ADA_24, "cpu3c-1-2", ...) become Ferry's, with a note when approximate.
        notes = []
        if gpu is not None:
            gpu, notes = names.translate_gpu(gpu, declaration.GPU_MODELS)
        if cpu is not None:
            cpu, notes = names.translate_cpu(cpu)
        for note in notes:
            self.warnings.append({"file": self.rel, "line": call.lineno, "message": "Endpoint '%s': %s" % (name, note)})
        if gpu is not None and cpu is not None:
            bad("Endpoint '%s' sets both gpu and cpu; choose one" % name)
        gpus = None
        if cpu is not None:
            match = declaration.CPU_RE.match(cpu) if isinstance(cpu, str) else None
            if not match:
                bad("Endpoint '%s': cpu must be \"<vCPUs>-<GiB>\", for example cpu=\"2-8\" (got %r). %s" % (name, cpu, names.unknown_cpu_hint()))
        else:
            wanted = ["any"] if gpu is None else ([gpu] if isinstance(gpu, str) else gpu)
            if not isinstance(wanted, (list, tuple)) or not wanted:
                bad("Endpoint '%s': gpu must be a GPU model, a list of them, or \"any\" (got %r)" % (name, gpu))
            gpus = []
            for item in wanted:
                if item not in declaration.GPU_MODELS and item != "any":
                    # Exact spelling, as the runtime's Endpoint checks it at import time.
                    close = next(
                        (m for m in declaration.GPU_MODELS + ("any",) if isinstance(item, str) and m.lower() == item.strip().lower()),
                        None,
                    )
                    hint = " (did you mean %r?)" % close if close else ""
                    bad("Endpoint '%s': unknown gpu %r%s; choose from %s, or \"any\". %s" % (name, item, hint, ", ".join(declaration.GPU_MODELS), names.unknown_gpu_hint()))
                if item not in gpus:
                    gpus.append(item)
            if "any" in gpus and len(gpus) > 1:
                bad("Endpoint '%s': gpu \"any\" cannot be combined with specific models (got %r)" % (name, gpu))
        workers = raw.get("workers", (0, 1))
        if is_int(workers):
            if workers < 1:
                bad("Endpoint '%s': workers must be at least 1 (got %r)" % (name, workers))
            workers_min, workers_max = 0, workers
        elif isinstance(workers, (list, tuple)) and len(workers) == 2 and all(is_int(w) for w in workers):
            workers_min, workers_max = workers
            if workers_min < 0 or workers_max < 1 or workers_min > workers_max:
                bad("Endpoint '%s': workers=(min, max) needs 0 <= min <= max and max >= 1 (got %r)" % (name, workers))
        else:
            bad("Endpoint '%s': workers must be a number N or a pair (min, max) (got %r)" % (name, workers))

        def int_param(key: str, default: int, low: int, high: int | None) -> int:
            value = raw.get(key, default)
            if not is_int(value) or value < low or (high is not None and value > high):
                span = "%d to %d" % (low, high) if high is not None else "at least %d" % low
                bad("Endpoint '%s': %s must be a whole number %s (got %r)" % (name, key, span, value))
            return value

        def str_list(key: str) -> list:
            value = raw.get(key, [])
            if isinstance(value, tuple):
                value = list(value)
            if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
                bad("Endpoint '%s': %s must be a list of strings (got %r)" % (name, key, value))
            return [v.strip() for v in value]

        env = raw.get("env", {})
        if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            bad("Endpoint '%s': env must be a dict of strings to strings (got %r)" % (name, env))
        for key in env:
            if not declaration.ENV_NAME_RE.match(key):
                bad("Endpoint '%s': env key %r is not an environment variable name" % (name, key))
            entry = declaration.platform_env_name_of(key)
            if entry:
                bad(
                    "Endpoint '%s': env key %s is one the platform sets in every worker itself (%s): a secret "
                    "goes in secrets=, a setting under another name" % (name, key, entry + "*" if entry.endswith("_") else entry)
                )
        secrets = str_list("secrets")
        for secret in secrets:
            if not declaration.ENV_NAME_RE.match(secret):
                bad("Endpoint '%s': secret name %r is not an environment variable name" % (name, secret))
            if secret in env:
                bad("Endpoint '%s': %r is both in env and in secrets" % (name, secret))
        gpu_count = int_param("gpu_count", 1, 1, 8)
        if cpu is not None and "gpu_count" in raw and gpu_count != 1:
            bad("Endpoint '%s': gpu_count applies to GPU endpoints only, and this one sets cpu" % name)
        max_concurrency = int_param("max_concurrency", 1, 1, None)
        dependencies = str_list("dependencies")
        for dependency in dependencies:
            problem = requirement_problem(dependency)
            if problem:
                bad(
                    "Endpoint '%s': dependency %r is not a valid requirement (%s); write a pip requirement "
                    "such as \"torch>=2.1\" or \"pillow\"" % (name, dependency, problem)
                )
        python_version = raw.get("python_version")
        if python_version is not None and python_version not in declaration.PYTHON_VERSIONS:
            bad("Endpoint '%s': python_version must be one of %s (got %r)" % (name, ", ".join(declaration.PYTHON_VERSIONS), python_version))
        system_dependencies = str_list("system_dependencies")
        if system_dependencies:
            # Accepted as Flash accepts it, but nothing installs system packages: say so where the
            # user can act, rather than let the first call fail on a missing binary.
            self.warnings.append({"file": self.rel, "line": call.lineno, "message": (
                "Endpoint '%s': system_dependencies %s are not installed by Ferry: locally they come "
                "from this machine, and Ferry's AWS worker images (slim Python, or CUDA runtime for "
                "GPUs) do not have them; to run with them on AWS, build an image that has them and "
                "declare an image endpoint (image=...)" % (name, ", ".join(system_dependencies)))})
        return {
            "name": name,
            "gpu": gpus,
            "cpu": cpu,
            "gpuCount": gpu_count,
            "workersMin": workers_min,
            "workersMax": workers_max,
            "idleTimeoutSec": int_param("idle_timeout", 60, 1, 3600),
            "executionTimeoutMs": int_param("execution_timeout_ms", 0, 0, None),
            "maxConcurrency": max_concurrency,
            "healthCheckGraceSec": int_param("health_check_grace", 0, 0, 7200),
            "env": env,
            "secrets": secrets,
            "dependencies": dependencies,
            "systemDependencies": system_dependencies,
            "pythonVersion": python_version,
        }

    # -- declarations ---------------------------------------------------------------------------
    def check_name(self, node, name) -> None:
        if not isinstance(name, str) or not declaration.NAME_RE.match(name):
            self.fail(
                node,
                "Endpoint name %r is not valid: use 1-63 letters, digits, '-' or '_', starting with a letter or digit"
                % (name,),
            )

    def queue_target(self, node) -> dict:
        if isinstance(node, ast.ClassDef):
            public = [
                item
                for item in node.body
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and not item.name.startswith("_")
            ]
            for item in public:
                problem = unbound_parameter(item, "%s.%s" % (node.name, item.name), drop_first=not is_static(item))
                if problem:
                    self.fail(item, problem)
            methods = [callable_info(item, drop_first=not is_static(item)) for item in public]
            if not methods:
                self.fail(node, "class endpoint '%s' has no public methods to call" % node.name)
            # The worker builds the class once with no arguments, so its own params stay empty.
            target = {"name": node.name, "type": "class", "isAsync": False, "isGenerator": False, "params": [], "methods": methods}
            summary = first_doc_line(node)
            if summary is not None:
                target["summary"] = summary
            return target
        problem = unbound_parameter(node, node.name)
        if problem:
            self.fail(node, problem)
        return dict(callable_info(node), type="function")

    def route_of(self, decorator):
        """(variable, method, path) when the decorator is `@<var>.<method>("/path")`, else None."""
        if not (isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Attribute)):
            return None
        func = decorator.func
        if not (isinstance(func.value, ast.Name) and func.value.id in self.variables and func.attr in ROUTE_DECORATORS):
            return None
        path_nodes = list(decorator.args[:1]) + [k.value for k in decorator.keywords if k.arg == "path"]
        if len(path_nodes) != 1:
            self.fail(decorator, "@%s.%s needs exactly one path, for example @%s.%s(\"/process\")" % (func.value.id, func.attr, func.value.id, func.attr))
        path = self.literal(path_nodes[0], "route path")
        return func.value.id, func.attr.upper(), path

    def scan(self) -> None:
        self.collect_ferry_names()
        if not self.endpoint_names and not self.module_names:
            return
        top_level = set()
        for stmt in self.tree.body:
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None and self.is_endpoint_call(stmt.value):
                given = {kw.arg for kw in stmt.value.keywords}
                if "id" in given:
                    # A client of an already deployed endpoint (docs/python.md, client modes): nothing to deploy.
                    continue
                if "image" in given:
                    self.endpoints.append(self.image_endpoint(stmt.value))
                    continue
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                if len(targets) != 1 or not isinstance(targets[0], ast.Name):
                    self.fail(stmt, "assign an Endpoint to a single module variable, for example api = Endpoint(name=\"my-api\")")
                variable = targets[0].id
                record = {
                    "kind": "lb",
                    "file": self.rel,
                    "line": stmt.lineno,
                    "variable": variable,
                    "routes": [],
                    # The kind is known only once the variable is used (routes, or @var on a target).
                    "config": self.config(stmt.value, "lb", None),
                }
                self.variables[variable] = record
                self.endpoints.append(record)
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                top_level.add(id(stmt))
                self.declaration(stmt)
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and id(node) not in top_level:
                if any(self.is_endpoint_call(d) or self.is_endpoint_ref(d) or self.route_of(d) for d in node.decorator_list):
                    self.fail(node, "'%s' is decorated as an endpoint but is not defined at the top level of the module" % node.name)
        for record in self.endpoints:
            if record["kind"] == "lb" and record["config"]["maxConcurrency"] != 1:
                self.warnings.append(
                    {
                        "file": self.rel,
                        "line": record["line"],
                        "message": "Endpoint '%s': max_concurrency applies to queue-based endpoints only; ignored" % record["config"]["name"],
                    }
                )
                record["config"]["maxConcurrency"] = 1
            if record["kind"] == "lb" and not record["routes"]:
                self.fail_at(
                    record["line"],
                    "Endpoint %s (%s) is never used: add routes with @%s.post(\"/path\") or decorate a function with @%s"
                    % ("'%s'" % record["config"]["name"] if record["config"]["name"] else "without a name", record["variable"], record["variable"], record["variable"]),
                )

    def image_endpoint(self, call: ast.Call) -> dict:
        """`Endpoint(name=..., image="repo/worker:1.0", ...)`: a queue endpoint whose worker is a prebuilt
        RunPod-protocol image, so no module or target of ours runs in it (docs/python.md, image endpoints)."""
        image_nodes = [kw.value for kw in call.keywords if kw.arg == "image"]
        image = self.literal(image_nodes[0], "Endpoint parameter 'image'")
        if not isinstance(image, str) or not declaration.IMAGE_RE.match(image):
            self.fail(image_nodes[0], "Endpoint parameter 'image' must be an image reference such as \"repo/worker:1.0\" (got %r)" % (image,))
        bare = ast.Call(func=call.func, args=call.args, keywords=[kw for kw in call.keywords if kw.arg != "image"])
        ast.copy_location(bare, call)
        for kw in bare.keywords:
            if kw.arg in declaration.IMAGE_EXCLUDED_PARAMETERS:
                self.fail(kw.value, "Endpoint parameter '%s' does not apply to an image endpoint: the image brings its own code and packages" % kw.arg)
        config = self.config(bare, "queue", None)
        if config["name"] is None:
            self.fail(call, "an image endpoint needs a name: Endpoint(name=\"my-worker\", image=\"%s\")" % image)
        return {"kind": "image", "file": self.rel, "line": call.lineno, "image": image, "config": config}

    def fail_at(self, line: int, message: str):
        raise ScanError(self.rel, line, message)

    def declaration(self, node) -> None:
        for decorator in node.decorator_list:
            if self.is_endpoint_ref(decorator):
                self.fail(decorator, "call Endpoint when decorating: @Endpoint(name=\"...\", ...)")
            if self.is_endpoint_call(decorator):
                self.endpoints.append(
                    {
                        "kind": "queue",
                        "file": self.rel,
                        "line": decorator.lineno,
                        "target": self.queue_target(node),
                        "config": self.config(decorator, "queue", node.name),
                    }
                )
                continue
            if isinstance(decorator, ast.Name) and decorator.id in self.variables:
                # `ep = Endpoint(...)` then `@ep` on a function or class: a queue endpoint, as at runtime.
                record = self.variables[decorator.id]
                if record["routes"]:
                    self.fail(decorator, "Endpoint '%s' already has routes (load-balanced); it cannot also decorate '%s'; use a separate Endpoint" % (record["config"]["name"], node.name))
                if record["kind"] == "queue":
                    self.fail(decorator, "Endpoint '%s' already decorates '%s'; one queue-based Endpoint decorates one function or class" % (record["config"]["name"], record["target"]["name"]))
                if record["config"]["name"] is None:
                    record["config"]["name"] = node.name
                    self.check_name(decorator, node.name)
                record["kind"] = "queue"
                record["target"] = self.queue_target(node)
                record["line"] = decorator.lineno
                del record["variable"], record["routes"]
                continue
            route = self.route_of(decorator)
            if route is None:
                continue
            variable, method, path = route
            if isinstance(node, ast.ClassDef):
                self.fail(node, "a route handler must be a function, not a class")
            record = self.variables[variable]
            if record["kind"] == "queue":
                self.fail(decorator, "Endpoint '%s' already decorates '%s' (queue-based); it cannot also have routes" % (record["config"]["name"], record["target"]["name"]))
            if record["config"]["name"] is None:
                self.fail(decorator, "a load-balanced Endpoint needs a name: %s = Endpoint(name=\"my-api\", ...)" % variable)
            if not isinstance(path, str):
                self.fail(decorator, "route path must be a string starting with '/' (got %r)" % (path,))
            problem = declaration.path_problem(path)
            if problem:
                self.fail(decorator, problem)
            for other in record["routes"]:
                if other["method"] == method and other["path"] == path:
                    self.fail(decorator, "duplicate route %s %s on Endpoint '%s' (first declared at %s:%d)" % (method, path, record["config"]["name"], self.rel, other["line"]))
            problem = unbound_parameter(node, node.name, route=True)
            if problem:
                self.fail(node, problem)
            info = callable_info(node, route=True)
            takes_any = node.args.kwarg is not None
            keyword_params = [a.arg for a in list(node.args.args) + list(node.args.kwonlyargs)]
            for param in declaration.PATH_PARAM_RE.findall(path):
                if param not in keyword_params and not takes_any:
                    self.fail(decorator, "route %s %s has path parameter {%s} but '%s' takes no such argument" % (method, path, param, node.name))
            record["routes"].append(dict(info, method=method, path=path, line=node.lineno))


def scan(root: str, files: list, requirements: list = ()) -> dict:
    errors, warnings, endpoints, file_records = [], [], [], []
    for rel in files:
        path = os.path.join(root, rel)
        try:
            with open(path, "rb") as handle:
                source = handle.read()
            tree = ast.parse(source, filename=rel)
        except SyntaxError as error:
            errors.append(
                {
                    "file": rel,
                    "line": error.lineno or 1,
                    "message": "syntax error: %s (parsed with Python %d.%d)" % (error.msg, sys.version_info[0], sys.version_info[1]),
                }
            )
            continue
        except (OSError, ValueError) as error:
            errors.append({"file": rel, "line": 1, "message": "cannot read file: %s" % error})
            continue
        scanner = FileScanner(rel, tree)
        file_records.append({"path": rel, "module": module_of(rel), "imports": scanner.imports()})
        try:
            scanner.scan()
        except ScanError as error:
            errors.append({"file": error.file, "line": error.line, "message": error.message})
            continue
        warnings.extend(scanner.warnings)
        endpoints.extend(scanner.endpoints)
    seen = {}
    for endpoint in endpoints:
        name = endpoint["config"]["name"]
        if name in seen:
            first = seen[name]
            errors.append(
                {
                    "file": endpoint["file"],
                    "line": endpoint["line"],
                    "message": "endpoint name '%s' is already used at %s:%d; endpoint names must be unique" % (name, first["file"], first["line"]),
                }
            )
        else:
            seen[name] = endpoint
    for requirement in requirements:
        problem = requirement_problem(requirement["spec"])
        if problem:
            errors.append(
                {
                    "file": requirement["file"],
                    "line": requirement["line"],
                    "message": "%r is not a valid requirement (%s); write a pip requirement such as \"torch>=2.1\" or "
                    "\"pillow\", a pip option such as --index-url <url>, or # before a comment"
                    % (requirement["spec"], problem),
                }
            )
    if errors:
        return {"ok": False, "errors": errors}
    for endpoint in endpoints:
        for route in endpoint.get("routes", []):
            del route["line"]
    return {"ok": True, "files": file_records, "endpoints": endpoints, "warnings": warnings}


def main(argv: list) -> int:
    if len(argv) < 2:
        sys.stderr.write("usage: scan.py <project_dir> [--input -]\n")
        return 2
    root = os.path.abspath(argv[1])
    if not os.path.isdir(root):
        sys.stderr.write("not a directory: %s\n" % argv[1])
        return 2
    given = json.loads(sys.stdin.read()) if "--input" in argv[2:] else {}
    if "files" in given:
        files = [f for f in given["files"] if isinstance(f, str) and f.endswith(".py")]
    else:
        files = walk_project(root)
    result = scan(root, sorted(files), given.get("requirements", []))
    # The interpreter that ran the scan, so the build needs no second start of it to learn its version,
    # and runs its later steps (import check, pip) on this binary rather than through a shim again.
    result["python"] = {"version": "%d.%d" % sys.version_info[:2], "executable": sys.executable or None}
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
