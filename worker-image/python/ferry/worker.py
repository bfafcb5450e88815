"""`python -m ferry.worker`: the worker process the platform starts (docs/architecture.md#worker-protocol).

Exit codes: 0 after a clean shutdown (SIGTERM), 1 when user code fails at start (a class
endpoint's __init__ raising), 2 when the configuration is wrong or the module/target cannot be
imported. All configuration comes from the environment; see README.md next to this package.
"""

import os
import signal
import sys
import threading
import time
import traceback

from . import logs
from .client import local_target
from .config import Config, ConfigError, import_user_module, lookup
from .endpoint import Endpoint
from .invoke import Handler, missing_package_hint, without_runtime_frames


def _sayer(stream):
    lock = threading.RLock()

    def say(message):
        with lock:
            try:
                stream.write(f"ferry worker: {message}\n")
                stream.flush()
            except (OSError, ValueError):
                pass

    return say


def _report_startup_failure(environ, text):
    """Hands the agent beside us (ECS) why we cannot start: it cannot read this container's output,
    and it records the last lines on the endpoint it marks failing (docs/aws.md#failing-endpoints).
    Best effort: a worker that cannot reach its agent still exits with its code."""
    url = environ.get("FERRY_WEBHOOK_POST_STARTUP", "").strip()
    if not url:
        return
    import json
    import urllib.request

    lines = [line for line in text.splitlines() if line.strip()][-20:]
    request = urllib.request.Request(
        url,
        data=json.dumps({"lines": lines}).encode(),
        method="POST",
        headers={
            "Content-Type": "application/json",
            "Authorization": environ.get("RUNPOD_AI_API_KEY", ""),
        },
    )
    try:
        urllib.request.urlopen(request, timeout=5).close()
    except Exception:  # noqa: BLE001 - the exit code still tells the agent the start failed
        pass


def _user_traceback(exc):
    """An import's traceback without the frames of importlib and of this runtime: the user's own files
    and lines, from the endpoint module down to the line that raised (a missing import, a name one
    module cannot import from another, any exception at module level)."""
    import importlib

    runtime = tuple(os.path.dirname(os.path.abspath(m.__file__)) + os.sep for m in (logs, importlib))
    frames = [
        frame
        for frame in traceback.extract_tb(exc.__traceback__)
        if not frame.filename.startswith("<") and not os.path.abspath(frame.filename).startswith(runtime)
    ]
    if not frames:
        return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return ("Traceback (most recent call last):\n" + "".join(traceback.format_list(frames))
            + "".join(traceback.format_exception_only(type(exc), exc)))


def _startup_error(say, exc, environ=None):
    say(f"startup failed: {exc}")
    text = f"startup failed: {exc}\n"
    cause = exc.__cause__
    if cause is not None:
        detail = _user_traceback(cause)
        hint = missing_package_hint(cause)
        if hint is not None:
            detail += hint + "\n"
        sys.stderr.write(detail)
        text += detail
    if environ is not None:
        _report_startup_failure(environ, text)
    return 2


def _exit_with_parent(environ, say):
    """Exit when the platform that started us dies (FERRY_PARENT_PID): after a kill -9 of the
    platform, an orphaned worker would otherwise keep polling with a token nobody accepts."""
    try:
        parent = int(environ.get("FERRY_PARENT_PID", ""))
    except ValueError:
        return

    def watch():
        while True:
            time.sleep(1)
            if os.getppid() != parent:
                say("the platform that started this worker is gone: exiting")
                os._exit(0)

    threading.Thread(target=watch, daemon=True, name="ferry-parent-watch").start()


def main(environ=None):
    environ = os.environ if environ is None else environ
    real_stderr = logs.install()
    say = _sayer(real_stderr)
    _exit_with_parent(environ, say)
    try:
        config = Config(environ)
        module = import_user_module(config)
        if config.mode in ("queue", "standalone"):
            # The user's own function, also where the decorator returned a remote wrapper (a worker
            # started without FERRY_ENDPOINT_NAME).
            target = local_target(lookup(module, config.target, "FERRY_TARGET"))
            if isinstance(target, Endpoint):
                raise ConfigError(
                    f"FERRY_TARGET {config.target!r} is an Endpoint object, not a decorated function or class "
                    "(a load-balanced endpoint runs with FERRY_MODE=lb and FERRY_VARIABLE)"
                )
            endpoint = getattr(target, "__ferry_endpoint__", None)
            handler = Handler(target)
        else:
            endpoint = lookup(module, config.variable, "FERRY_VARIABLE")
            if not isinstance(endpoint, Endpoint) or not endpoint.routes:
                raise ConfigError(
                    f"FERRY_VARIABLE {config.variable!r} in {config.module!r} is not an Endpoint with routes "
                    f"(got {type(endpoint).__name__})"
                )
    except ConfigError as exc:
        return _startup_error(say, exc, environ)
    except TypeError as exc:  # Handler(): not callable, or a class without public methods
        return _startup_error(say, ConfigError(f"FERRY_TARGET {config.target!r}: {exc}"), environ)

    if config.mode == "lb":
        return serve_lb(config, endpoint, say)

    try:
        handler.start()
    except Exception as exc:  # noqa: BLE001 - user __init__ failed: say so plainly, exit 1
        say(f"{config.target}() failed while starting:")
        exc = without_runtime_frames(exc)
        detail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        real_stderr.write(detail)
        _report_startup_failure(environ, f"{config.target}() failed while starting:\n{detail}")
        return 1
    if config.mode == "standalone":
        return serve_standalone(config, handler, endpoint, say, real_stderr)
    return serve_queue(config, handler, endpoint, say, real_stderr)


def _max_concurrency(config, endpoint):
    return config.max_concurrency or (endpoint.max_concurrency if endpoint is not None else 1)


def serve_queue(config, handler, endpoint, say, echo):
    from .protocol import TakeAhead, WorkerApi

    max_concurrency = _max_concurrency(config, endpoint)
    api = WorkerApi(
        config.get_job_url,
        config.post_output_url,
        config.post_stream_url,
        config.ping_url or "",
        config.api_key,
        config.worker_id,
        say,
        post_output_batch_url=config.post_output_batch_url,
    )
    # Cold start: the first job-take goes out now (the handler is ready), while asyncio and the
    # runtime are still being imported; the runtime's take loop picks up its answer.
    first_take = TakeAhead(api, max_concurrency)
    import asyncio

    from .queue_runtime import QueueRuntime

    if not config.ping_url:
        say("RUNPOD_WEBHOOK_PING is not set: no heartbeat, leases will not be renewed")
    log_shipper = _log_shipper(config, echo)
    runtime = QueueRuntime(
        handler,
        api,
        max_concurrency,
        config.worker_id,
        say,
        echo,
        log_dir=config.log_dir,
        grace_ms=config.grace_ms,
        ping_interval_ms=config.ping_interval_ms,
        ping_enabled=bool(config.ping_url),
        first_take=first_take,
        log_shipper=log_shipper,
    )
    left = asyncio.run(runtime.run())
    if log_shipper is not None:
        log_shipper.close()
    say("stopped")
    if left:
        # Handler threads stuck in C calls would block a normal interpreter exit.
        sys.stdout.flush()
        os._exit(0)
    return 0


def _log_shipper(config, echo, **options):
    """Ships job output to FERRY_WEBHOOK_POST_LOG when the platform set it (never on RunPod).
    `options`: LogShipper's (a test's clock)."""
    if not config.post_log_url:
        return None
    from .logs import LogShipper
    from .protocol import retry_after_sec
    from .transport import Connections

    connections = Connections()
    url = config.post_log_url.replace("$RUNPOD_POD_ID", config.worker_id)
    headers = {"Content-Type": "application/json", "User-Agent": "ferry-worker"}
    if config.api_key:
        headers["Authorization"] = config.api_key

    def post(body):
        status, _data, answer_headers = connections.request("POST", url, body, headers, 10.0)
        return status, retry_after_sec(answer_headers) if status == 429 else None

    return LogShipper(post, echo, backup=config.log_backup, **options)


def serve_standalone(config, handler, endpoint, say, echo):
    """A queue target with its own POST /runsync (ferry/standalone.py): the same QueueRuntime as
    queue mode, fed in-process, behind lb.py's HTTP server."""
    import asyncio

    from .lb import make_server
    from .queue_runtime import QueueRuntime
    from .standalone import LocalJobs, StandaloneRouter

    jobs = LocalJobs(say)
    try:
        server = make_server(StandaloneRouter(jobs), config.host, config.port, say, config.front_door_secret)
    except OSError as exc:
        say(f"startup failed: cannot listen on {config.host}:{config.port} (FERRY_HOST/FERRY_PORT): {exc}")
        return 2
    runtime = QueueRuntime(
        handler,
        jobs,
        _max_concurrency(config, endpoint),
        config.worker_id,
        say,
        echo,
        log_dir=config.log_dir,
        grace_ms=config.grace_ms,
        ping_enabled=False,
    )

    async def run():
        task = asyncio.ensure_future(runtime.run())
        # One turn of the loop runs the runtime up to its first await: its SIGTERM/SIGINT handlers
        # are installed before the "serving" line, so whoever waits for that line may signal at once.
        await asyncio.sleep(0)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()
        host, port = server.server_address[:2]
        say(f"serving {config.target!r} standalone on http://{host}:{port} (POST /runsync, GET /ping)")
        return await task

    left = asyncio.run(run())
    server.shutdown()
    jobs.close()  # requests still waiting get 503
    deadline = time.monotonic() + 2
    while server.active["count"] and time.monotonic() < deadline:
        time.sleep(0.05)
    server.server_close()
    say("stopped")
    if left:
        sys.stdout.flush()
        os._exit(0)
    return 0


def serve_lb(config, endpoint, say):
    import asyncio

    from .lb import Router, make_server

    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True, name="ferry-lb-loop").start()
    router = Router(endpoint, loop)
    # Installed before the "serving" line: whoever waits for it may signal at once.
    stop = threading.Event()

    received = []

    def on_signal(signum, _frame):
        # Only record it: a signal handler that logs could deadlock on say()'s lock.
        received.append(signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        server = make_server(router, config.host, config.port, say, config.front_door_secret)
    except OSError as exc:
        say(f"startup failed: cannot listen on {config.host}:{config.port} (FERRY_HOST/FERRY_PORT): {exc}")
        return 2
    host, port = server.server_address[:2]
    routes = ", ".join(f"{r.method} {r.path}" for r in endpoint.routes)
    say(f"serving {endpoint.name!r} on http://{host}:{port} ({routes})")

    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
    thread.start()
    while not stop.wait(0.5):
        pass
    say(f"received {signal.Signals(received[0]).name}: finishing in-flight requests")
    server.shutdown()
    deadline = time.monotonic() + config.grace_ms / 1000
    while server.active["count"] and time.monotonic() < deadline:
        time.sleep(0.05)
    server.server_close()
    server.answered.flush()
    loop.call_soon_threadsafe(loop.stop)
    say("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
