"""Worker configuration from the environment the platform sets (docs/architecture.md#worker-protocol).

Every problem is a ConfigError whose message names the variable; the worker exits 2 on it.
"""

import importlib
import os
import sys


class ConfigError(Exception):
    pass


DEFAULT_GRACE_MS = 25_000  # under ECS's default 30 s stopTimeout, so we exit before SIGKILL
DEFAULT_PING_INTERVAL_MS = 10_000
# queue: pull jobs from the platform; lb: serve an Endpoint's routes; standalone: a queue target
# that serves its own /runsync (`ferry deploy --preview`, no platform around).
MODES = ("queue", "lb", "standalone")


def _int(environ, name, default, low, high=None):
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {raw!r}") from None
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f">= {low}"
        raise ConfigError(f"{name} must be {bound}, got {value}")
    return value


def _required(environ, name, why):
    value = environ.get(name, "").strip()
    if not value:
        raise ConfigError(f"{name} is not set ({why})")
    return value


def _front_door_secret(environ):
    """The secret the platform's front door sends with every request (lb.FRONT_DOOR_HEADER), or None.

    Another endpoint's code on the same host can reach this server's port (loopback locally, the
    Docker bridge on ECS), so the server answers only requests that carry it. FERRY_LB_SECRET holds
    it (the local platform, per worker); FERRY_LB_SECRET_FILE names a file holding it (ECS, where
    the task's init container draws one per task and the agent reads the same file)."""
    value = environ.get("FERRY_LB_SECRET", "").strip()
    path = environ.get("FERRY_LB_SECRET_FILE", "").strip()
    if path and not value:
        try:
            with open(path, encoding="utf-8") as file:
                value = file.read().strip()
        except OSError as exc:
            raise ConfigError(f"FERRY_LB_SECRET_FILE {path!r} cannot be read: {exc}") from None
        if not value:
            raise ConfigError(f"FERRY_LB_SECRET_FILE {path!r} is empty")
    return value or None


class Config:
    def __init__(self, environ):
        self.mode = environ.get("FERRY_MODE", "").strip() or "queue"
        if self.mode not in MODES:
            raise ConfigError(f"FERRY_MODE must be one of {', '.join(MODES)}, got {self.mode!r}")
        self.app_dir = os.path.abspath(environ.get("FERRY_APP_DIR", "").strip() or os.getcwd())
        if not os.path.isdir(self.app_dir):
            raise ConfigError(f"FERRY_APP_DIR {self.app_dir!r} is not a directory")
        self.module = _required(environ, "FERRY_MODULE", "the dotted module to import, e.g. gpu_worker")
        self.grace_ms = _int(environ, "FERRY_GRACE_MS", DEFAULT_GRACE_MS, 0)
        self.log_dir = environ.get("FERRY_LOG_DIR", "").strip() or None
        self.max_concurrency = _int(environ, "FERRY_MAX_CONCURRENCY", None, 1)
        self.worker_id = environ.get("RUNPOD_POD_ID", "").strip() or _random_id()
        self.endpoint_id = environ.get("RUNPOD_ENDPOINT_ID", "").strip() or None
        if self.mode in ("queue", "standalone"):
            self.target = _required(environ, "FERRY_TARGET", "the function or class to serve")
        if self.mode == "lb":
            self.variable = _required(environ, "FERRY_VARIABLE", "the module variable holding the Endpoint")
        if self.mode in ("lb", "standalone"):
            self.host = environ.get("FERRY_HOST", "").strip() or "127.0.0.1"
            if not environ.get("FERRY_PORT", "").strip():
                raise ConfigError(f"FERRY_PORT is not set (the port to serve {self.mode} mode on)")
            self.port = _int(environ, "FERRY_PORT", None, 0, 65535)
            self.front_door_secret = _front_door_secret(environ)
        if self.mode == "queue":
            self.get_job_url = _required(environ, "RUNPOD_WEBHOOK_GET_JOB", "the job-take URL")
            if "/job-take/" not in self.get_job_url:
                raise ConfigError(f"RUNPOD_WEBHOOK_GET_JOB must contain '/job-take/', got {self.get_job_url!r}")
            self.post_output_url = _required(environ, "RUNPOD_WEBHOOK_POST_OUTPUT", "the job-done URL")
            if "$ID" not in self.post_output_url:
                raise ConfigError(f"RUNPOD_WEBHOOK_POST_OUTPUT must contain $ID, got {self.post_output_url!r}")
            self.post_stream_url = environ.get("RUNPOD_WEBHOOK_POST_STREAM", "").strip() or (
                self.post_output_url.replace("/job-done/", "/job-stream/")
            )
            self.ping_url = environ.get("RUNPOD_WEBHOOK_PING", "").strip() or None
            self.ping_interval_ms = _int(environ, "RUNPOD_PING_INTERVAL", DEFAULT_PING_INTERVAL_MS, 1)
            self.api_key = environ.get("RUNPOD_AI_API_KEY", "")
            # Ferry's job-log route; absent on RunPod, where job output stays on stderr.
            self.post_log_url = environ.get("FERRY_WEBHOOK_POST_LOG", "").strip() or None
            # "stderr": the platform reads our stderr, and keeps a shipped line's copy there until it
            # is sent (ferry/logs.py), so a crash loses none. The local platform sets it.
            self.log_backup = environ.get("FERRY_LOG_BACKUP", "").strip() == "stderr"
            # Ferry's job-done-batch route; absent on RunPod, where each result has its own job-done.
            self.post_output_batch_url = environ.get("FERRY_WEBHOOK_POST_OUTPUT_BATCH", "").strip() or None


def _random_id():
    import uuid  # only without RUNPOD_POD_ID: the platform always sets it

    return str(uuid.uuid4())


def import_user_module(config):
    """Import FERRY_MODULE from FERRY_APP_DIR; ConfigError (with the cause) when it fails."""
    if config.app_dir not in sys.path:
        sys.path.insert(0, config.app_dir)
    try:
        return importlib.import_module(config.module)
    except ModuleNotFoundError as exc:
        # FERRY_MODULE itself (or a package on its way) is missing: that is the whole story, no
        # traceback. A module it imports is missing: the traceback says which file and line.
        if exc.name and (config.module == exc.name or config.module.startswith(exc.name + ".")):
            raise ConfigError(
                f"FERRY_MODULE {config.module!r} was not found in FERRY_APP_DIR {config.app_dir!r}"
            ) from None
        raise ConfigError(f"FERRY_MODULE {config.module!r} failed to import: {exc}") from exc
    except BaseException as exc:  # noqa: BLE001 - user code can raise anything at import, even SystemExit
        raise ConfigError(f"FERRY_MODULE {config.module!r} failed to import: {type(exc).__name__}: {exc}") from exc


def lookup(module, name, env_name):
    try:
        return getattr(module, name)
    except AttributeError:
        raise ConfigError(f"{env_name} {name!r} is not defined in module {module.__name__!r}") from None
