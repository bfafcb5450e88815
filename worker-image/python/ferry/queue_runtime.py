"""The queue-based worker loop: take jobs, run them, report, honour stop requests.

    take loop ──job──▶ JobRun task ──▶ async handler: awaited on the loop
        ▲                  │           sync handler / generator: a pooled daemon thread (ctx.run)
        └── slot freed ◀───┴──▶ job-stream per yield, progress, then job-done (unless stopped);
            when the handler ends:   the slot is freed as job-done leaves, so the next job-take
                                     overlaps it (at most one result in flight per slot)
    stop loop ── job-stop long poll (in a thread) ──▶ task.cancel() / async exception in the thread
    ping thread ── every RUNPOD_PING_INTERVAL ms, ids of held jobs (renews the leases)

Per job the common path is cheap. job-take(-batch) and job-done are sent from the event loop itself
(WorkerApi.take_async / done_async over transport.LoopConnections): a job of an async handler
crosses no thread at all, and a sync handler's job costs one hop there and back for the handler,
its job-done then leaving from the loop. Everything else that blocks (the job-stop poll, progress,
job-stream, log shipping, the first job-take that worker.py starts before asyncio is imported, and
every call of an api without the loop forms, like standalone's LocalJobs) runs on reused daemon
threads (DaemonThreads). Requests reuse keep-alive connections (transport.py); the progress queue is
only joined for a job that sent progress, the log shipper only flushed for a job that logged, and
the result is encoded once.

Stopping: a stopped job gets NO job-done (the platform already set its final status). An async
handler is cancelled with task.cancel(). A sync handler's thread gets JobStopped raised
asynchronously (PyThreadState_SetAsyncExc): a Python-level loop stops at its next bytecode, but a
long call into C (a CUDA kernel, time.sleep(60)) cannot be interrupted: the slot stays taken until
it returns, and the platform kills the process after its grace period. The exception is raised
and cleared under the job's lock, so it never reaches a pooled thread after the job has left it.
A stop request for a job whose result is already being sent is ignored: nothing is left to stop.

refresh_worker (a job-done carrying stopPod): stop taking jobs, keep pinging, let every running job
finish however long it runs (each has its own execution timeout, which the platform enforces by
stopping it), exit 0. A SIGTERM meanwhile puts the jobs still running under the grace period below.

SIGTERM/SIGINT: stop taking jobs, keep pinging, let running jobs finish for up to FERRY_GRACE_MS,
exit 0. A job-take request still in flight is abandoned (the take loop is cancelled, which closes
its connection); a job the platform might hand out afterwards goes back to the queue when its
lease lapses. If the platform refuses connections while the worker stops (on ECS: the agent
container died, which is why ECS is stopping the task), the running jobs are left at once: their
results could not be delivered, and finishing them through the grace period would only run them
beside the copies the platform starts when their leases lapse (60 s, under a 110 s grace).
"""

import asyncio
import contextvars
import errno
import inspect
import json
import queue as queue_mod
import signal
import sys
import threading
import time
import traceback

from . import logs, progress
from .invoke import (
    ASYNC,
    ASYNC_GEN,
    InputError,
    OutputError,
    check_jsonable,
    error_body,
    kind_of,
    missing_package_hint,
    to_json_bytes,
    without_runtime_frames,
)
from .protocol import RateLimited, Refused


class JobStopped(BaseException):
    """Raised inside a stopped sync handler's thread. BaseException so `except Exception` won't eat it."""


class DaemonThreads:
    """Daemon threads that are reused: a job's take, handler and job-done cost no thread start.

    Daemon (not a concurrent.futures executor, whose threads are joined at exit) so that an
    abandoned long poll or a handler stuck in C never keeps the process alive at exit. A thread
    that is busy (a handler stuck in C, a long poll) is simply not idle: the next call starts a
    new thread, so calls never wait for each other. At most `max_idle` threads wait for work.
    """

    def __init__(self, name="ferry-io", max_idle=16):
        self.name = name
        self.max_idle = max_idle
        self._lock = threading.Lock()
        self._idle = []  # the inboxes (SimpleQueue) of idle threads, LIFO
        self.started = 0

    def submit(self, fn, *args):
        """Run fn(*args) in an idle thread, or a new one. fn must not raise (it is not reported)."""
        with self._lock:
            inbox = self._idle.pop() if self._idle else None
            if inbox is None:
                self.started += 1
        if inbox is not None:
            inbox.put((fn, args))
            return
        inbox = queue_mod.SimpleQueue()
        inbox.put((fn, args))
        threading.Thread(target=self._serve, args=(inbox,), daemon=True, name=self.name).start()

    def _serve(self, inbox):
        while True:
            fn, args = inbox.get()
            try:
                fn(*args)
            except BaseException:  # noqa: BLE001, S110 - fn reports its own outcome
                pass
            with self._lock:
                if len(self._idle) >= self.max_idle:
                    return
                self._idle.append(inbox)


def run_blocking(loop, fn, *args, threads=None):
    """Run `fn` in a daemon thread (one of `threads`, else a fresh one); an awaitable future of its
    result. Daemon threads so that an abandoned long poll or a handler stuck in C never keeps the
    process alive at exit.
    """
    fut = loop.create_future()

    def settle(ok, value):
        if fut.done():
            return
        if ok:
            fut.set_result(value)
        else:
            fut.set_exception(value)

    def target():
        try:
            result = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task
            outcome = (False, exc)
        else:
            outcome = (True, result)
        try:
            loop.call_soon_threadsafe(settle, *outcome)
        except RuntimeError:
            pass  # loop closed: nobody is waiting any more

    if threads is None:
        threading.Thread(target=target, daemon=True, name="ferry-io").start()
    else:
        threads.submit(target)
    return fut


def raise_in_thread(thread_id, exc_type):
    """Schedule `exc_type` in another thread (checked between bytecodes only)."""
    import ctypes  # only when a sync job is stopped: not on every start-up

    set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
    count = set_async_exc(ctypes.c_ulong(thread_id), ctypes.py_object(exc_type))
    if count > 1:  # should not happen; undo rather than hit several threads
        set_async_exc(ctypes.c_ulong(thread_id), None)
        return False
    return count == 1


def clear_pending_exception(thread_id=None):
    """Drop an exception raise_in_thread scheduled in a thread (this one by default) that has not
    fired yet: a pooled thread must not carry a stop for a job that has ended into the next one."""
    import ctypes

    ident = threading.get_ident() if thread_id is None else thread_id
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), None)


def result_body(result):
    """The job-done body for a handler's return value, shaped as RunPod's SDK shapes it (rp_job.py
    run_job). A dict loses its "error" and "refresh_worker" keys: a truthy "error" fails the job with
    that message, a truthy "refresh_worker" adds "stopPod": true, which asks the platform for a fresh
    worker before the next job (docs/workers.md); whatever is left is the output, and an output that
    ends up {} is left out (so {} and {"error": None} send no output at all)."""
    if not isinstance(result, dict):
        return {"output": result}
    rest = {k: v for k, v in result.items() if k not in ("error", "refresh_worker")}
    error = result.get("error")
    body = {"output": rest} if rest else {}
    if error:
        body["error"] = error if isinstance(error, str) else json.dumps(error, default=str)
    if result.get("refresh_worker"):
        body["stopPod"] = True
    return body


def too_large_body(size, reason):
    """The job-done body that fails a job whose result the platform refused as too large (413); the
    platform's reason names its limit."""
    return {
        "error": f"the handler's result of {size} bytes is over the platform's limit ({reason}); "
        "return large outputs as a URL (upload them from the handler)"
    }


def yielded_error(value):
    """The job-done body that ends a stream, for a yielded value that is a dict with a truthy "error";
    None for any other value. As RunPod's SDK (rp_job.py handle_job): that value is not streamed,
    the generator is left, and the job fails with {"error": str(value["error"])}."""
    if isinstance(value, dict) and value.get("error"):
        return {"error": str(value["error"])}
    return None


# A job-take refused before the platform ever answered is retried after STARTUP_RETRY_SEC without a
# word, up to STARTUP_REFUSALS times (10 s in all): the agent beside the worker may not listen yet.
STARTUP_RETRY_SEC = 0.1
STARTUP_REFUSALS = 100


def nothing_there(exc):
    """Whether a request failed because nothing is where the platform was: a refused connection
    (locally: no process listens), or no route to the address (on ECS the agent is a linked
    container on the host's bridge: once it stops, its address answers nothing). A timeout is not
    this: a busy platform times out too."""
    return isinstance(exc, OSError) and exc.errno in (errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH)


class JobRun:
    def __init__(self, job):
        self.job = job
        self.id = job["id"]
        self.lock = threading.Lock()
        self.stopped = False
        self.thread_id = None
        self.interrupted = False  # JobStopped was raised in thread_id
        self.executing = False  # counted in QueueRuntime.executing
        self.delivering = False  # job-done is being sent
        self.progress_sent = False  # the handler queued progress updates
        self.task = None
        self.fn = None
        self.kwargs = None
        self.kind = None
        self.input_error = None


class QueueRuntime:
    def __init__(self, handler, api, max_concurrency, worker_id, say, echo, log_dir=None,
                 grace_ms=25_000, ping_interval_ms=10_000, ping_enabled=True, first_take=None,
                 log_shipper=None):
        self.handler = handler
        self.api = api
        self.max_concurrency = max_concurrency
        self.worker_id = worker_id
        self.say = say
        # A line per completed job, up to a budget a second (failures and lost results always).
        self.completions = logs.LineBudget(say, ("job completed", "jobs completed"))
        self.echo = echo
        self.log_dir = log_dir
        self.log_shipper = log_shipper
        self.grace_sec = grace_ms / 1000
        self.ping_interval_sec = ping_interval_ms / 1000
        self.ping_enabled = ping_enabled
        self.running = {}  # every job held: running, or its result on the way
        self.executing = 0  # jobs whose handler has not finished: what max_concurrency bounds
        self.held = frozenset()  # snapshot for the ping thread; replaced, never mutated
        self._progress_q = queue_mod.Queue()
        self._ping_stop = threading.Event()
        self._ping_now = threading.Event()  # a ping at once (shutdown asks whether the platform is there)
        # Enough idle threads for every slot's handler and request plus the take, stop and progress calls.
        self.threads = DaemonThreads(max_idle=2 * max_concurrency + 8)
        # A job-take started before this module was imported (worker.py, for a quick cold start).
        self._first_take = first_take
        self._on_loop = False  # job-take and job-done from the loop (set in run())
        # Until the platform first answers a job-take, a refused connection is the agent still coming
        # up, not trouble: on ECS the worker container waits for the agent's container dependency
        # condition START, which "validates that a dependent container is started" (ECS
        # ContainerDependency), not that it listens yet. Those takes are retried quickly and quietly,
        # STARTUP_REFUSALS times at most; after that, or once contact was made, each failure is said.
        self._contact = False
        self._startup_refusals_left = STARTUP_REFUSALS

    def _blocking(self, fn, *args):
        return run_blocking(self.loop, fn, *args, threads=self.threads)

    async def _take(self, count, in_progress):
        if self._on_loop:
            return await self.api.take_async(count, in_progress)
        return await self._blocking(self.api.take, count, in_progress)

    async def _done(self, job_id, payload, is_stream, body):
        if self._on_loop:
            return await self.api.done_async(job_id, payload, is_stream, body)
        return await self._blocking(self.api.done, job_id, payload, is_stream, body)

    # -- lifecycle ---------------------------------------------------------------------------------

    async def run(self):
        self.loop = asyncio.get_running_loop()
        self.stopping = asyncio.Event()
        self.shutdown_asked = asyncio.Event()  # SIGTERM/SIGINT (else the stop is a refresh_worker's)
        self.platform_gone = asyncio.Event()  # it refused a connection while stopping (_ping_loop)
        self.slot_free = asyncio.Event()
        # job-take and job-done on the loop itself when the api can (WorkerApi; not standalone's LocalJobs).
        self._on_loop = hasattr(self.api, "bind_loop")
        if self._on_loop:
            self.api.bind_loop(self.loop, self._blocking)
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                self.loop.add_signal_handler(sig, self._begin_shutdown, sig)
            except (NotImplementedError, RuntimeError, ValueError):
                pass
        threading.Thread(target=self._progress_sender, daemon=True, name="ferry-progress").start()
        if self.ping_enabled:
            threading.Thread(target=self._ping_loop, daemon=True, name="ferry-ping").start()
        self.say(f"worker {self.worker_id} taking jobs (max_concurrency={self.max_concurrency})")
        take_task = asyncio.ensure_future(self._take_loop())
        stop_task = asyncio.ensure_future(self._stop_loop())
        await self.stopping.wait()
        take_task.cancel()
        tasks = [run.task for run in self.running.values() if run.task is not None]
        if tasks and not self.shutdown_asked.is_set():
            # refresh_worker: the platform stops this worker once it holds nothing, and each job has
            # its own execution timeout (the platform stops the job), so every job runs to its end.
            self.say(f"waiting for {len(tasks)} running job(s) to finish before exiting for a fresh worker")
            # No longer once SIGTERM comes: the grace period applies from then.
            await self._until_finished(tasks, interrupted_by=(self.shutdown_asked,))
            tasks = [task for task in tasks if not task.done()]
        if tasks:
            self.say(f"waiting up to {self.grace_sec:g} s for {len(tasks)} running job(s)")
            if not await self._until_finished(tasks, timeout=self.grace_sec):
                self.say(
                    "the platform refuses connections: results cannot be delivered, so the running jobs "
                    "are left to go back to the queue when their leases lapse"
                )
        stop_task.cancel()
        self._ping_stop.set()
        self._ping_now.set()
        if self._on_loop:
            self.api.loop_connections.close()
        self.completions.flush()
        left = len(self.running)
        if left:
            self.say(f"exiting with {left} job(s) still running")
        return left

    async def _until_finished(self, tasks, timeout=None, interrupted_by=()):
        """Wait for the running jobs, up to `timeout` (None: however long they run); no longer once
        the platform is gone (their results cannot be delivered) or an event of `interrupted_by` is
        set. Whether the wait ended on its own (every job done, or the timeout)."""
        finished = asyncio.ensure_future(asyncio.wait(tasks, timeout=timeout))
        ended = [asyncio.ensure_future(event.wait()) for event in (self.platform_gone, *interrupted_by)]
        await asyncio.wait([finished, *ended], return_when=asyncio.FIRST_COMPLETED)
        for waiter in ended:
            waiter.cancel()
        if finished.done():
            return True
        finished.cancel()
        return False

    def _begin_stopping(self, why):
        if not self.stopping.is_set():
            self.say(why)
            self.stopping.set()
            self._ping_now.set()

    def _begin_refresh(self, job_id):
        self._begin_stopping(
            f"job {job_id} asked for refresh_worker: no new jobs, finishing running ones, then exiting for a fresh worker")

    def _begin_shutdown(self, sig):
        name = signal.Signals(sig).name
        if self.stopping.is_set() and not self.shutdown_asked.is_set():
            self.say(f"received {name}: running jobs have up to {self.grace_sec:g} s to finish")
        self.shutdown_asked.set()
        self._begin_stopping(f"received {name}: no new jobs, finishing running ones")

    async def _pause(self, seconds):
        """Sleep, but wake at once on shutdown."""
        try:
            await asyncio.wait_for(self.stopping.wait(), timeout=seconds)
        except asyncio.TimeoutError:
            pass

    # -- taking jobs -------------------------------------------------------------------------------

    async def _take_loop(self):
        while not self.stopping.is_set():
            # A slot is free once its handler is done, while the result is still being sent: the next
            # job-take overlaps the last job-done. At most one result in flight per slot.
            free = min(self.max_concurrency - self.executing, 2 * self.max_concurrency - len(self.running))
            if free <= 0:
                self.slot_free.clear()
                await self.slot_free.wait()
                continue
            try:
                if self._first_take is not None:
                    first, self._first_take = self._first_take, None
                    jobs = await self._blocking(first.result)
                else:
                    jobs = await self._take(free, bool(self.running))
            except RateLimited as limited:
                await self._pause(limited.wait_sec)  # what the platform's Retry-After asked
                continue
            except Exception as exc:  # noqa: BLE001 - network trouble: log, back off, retry
                if not self._contact and self._startup_refusals_left > 0 and nothing_there(exc):
                    self._startup_refusals_left -= 1
                    await self._pause(STARTUP_RETRY_SEC)
                    continue
                self.say(f"job-take failed: {type(exc).__name__}: {exc}")
                await self._pause(1)
                continue
            self._contact = True
            for job in jobs:
                self._start(job)
            if jobs:
                # Let the jobs just started run first: an async handler that does not wait finishes
                # and sends its job-done before the next job-take goes out, so its result is not
                # queued behind the take on either side (one loop turn; measured at 1 client). Results
                # handed to a batch leave one turn later, from its sender: wait for that too.
                await asyncio.sleep(0)
                while self._on_loop and self.api.results_leaving():
                    await asyncio.sleep(0)
                # A result whose request opens a new connection (in a thread) is not on the wire
                # yet: the take on an idle connection would overtake it. Connects are quick; a
                # second is the most this waits for one.
                for _ in range(1000):
                    if not (self._on_loop and self.api.requests_connecting()):
                        break
                    await asyncio.sleep(0.001)

    def _start(self, job):
        run = JobRun(job)
        if run.id in self.running:
            self.say(f"job {run.id} is already running here; ignoring the duplicate")
            return
        try:
            run.fn, run.kwargs = self.handler.prepare(job)
            run.kind = kind_of(run.fn)
        except InputError as exc:
            run.input_error = exc
        self.running[run.id] = run
        self.held = frozenset(self.running)
        self.executing += 1
        run.executing = True
        run.task = asyncio.ensure_future(self._run_job(run))
        run.task.add_done_callback(lambda _task: self._finished(run))

    def _release_slot(self, run):
        if run.executing:
            run.executing = False
            self.executing -= 1
            self.slot_free.set()

    def _finished(self, run):
        self.running.pop(run.id, None)
        self.held = frozenset(self.running)
        self._release_slot(run)
        self.slot_free.set()
        task = run.task
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            self.say(f"internal error running job {run.id}: {type(exc).__name__}: {exc}")

    # -- running one job ---------------------------------------------------------------------------

    async def _run_job(self, run):
        log = logs.JobLog(run.id, self.echo, self.log_dir, self.log_shipper)
        logs.activate(log)  # this task's own context copy: other jobs are unaffected
        progress.register(run.id, lambda data: self._queue_progress(run, data))
        started = time.monotonic()
        try:
            try:
                payload, is_stream = await self._execute(run)
            except asyncio.CancelledError as exc:
                if run.stopped:
                    return
                if self.stopping.is_set():
                    raise  # shutdown after the grace period: no result, the lease lapses
                # The handler cancelled itself (say, an inner timeout): a failure, not silence.
                payload, is_stream = self._failure(exc), run.kind == ASYNC_GEN
            except JobStopped:
                return
            if run.stopped:
                return
            if run.progress_sent:
                # Keep the order the handler saw: its progress updates land before the result.
                await self._blocking(self._progress_q.join)
            try:
                body = to_json_bytes(payload)
            except OutputError as exc:
                print(f"ferry: {exc}", file=sys.stderr)
                payload = error_body(exc, self.worker_id)
                body = to_json_bytes(payload)
            # From here on a stop request has nothing left to stop: the result is on its way (the
            # platform sends one for a job it completes while this worker still lists it).
            run.delivering = True
            if payload.get("stopPod"):
                # refresh_worker: this worker takes nothing more; it exits once its jobs are done
                # and the platform starts a fresh one. Set before the slot frees, so no take starts.
                self._begin_refresh(run.id)
            self._release_slot(run)
            if self.log_shipper is not None:
                # The job's lines are stored before its result is: whoever sees it done can read them.
                log.close()
                if log.shipped:
                    await self._blocking(self.log_shipper.flush)
            ok = await self._done(run.id, payload, is_stream, body)
            if isinstance(ok, Refused) and ok.status == 413:
                # Too big for the platform: left so, the job would stay IN_PROGRESS, run again each
                # time its lease lapses, and end as a worker that stopped responding. It fails now.
                payload = too_large_body(len(body), ok.reason)
                ok = await self._done(run.id, payload, is_stream, to_json_bytes(payload))
            failed = "error" in payload
            line = (f"job {run.id} {'failed' if failed else 'completed'} in {time.monotonic() - started:.2f} s"
                    + ("" if ok else " (result not delivered)"))
            if ok and not failed:
                self.completions.routine(line)
            else:
                self.say(line)
        finally:
            progress.unregister(run.id)
            log.close()

    async def _execute(self, run):
        """(job-done body, isStream) for this job."""
        if run.input_error is not None:
            print(f"ferry: {run.input_error}", file=sys.stderr)
            return error_body(run.input_error, self.worker_id), False
        if run.kind == ASYNC:
            try:
                result = await run.fn(**run.kwargs)
            except Exception as exc:  # noqa: BLE001 - the job fails, the worker lives
                return self._failure(exc), False
            return result_body(result), False
        if run.kind == ASYNC_GEN:
            return await self._drain_async_gen(run), True
        ctx = contextvars.copy_context()
        return await self._blocking(ctx.run, self._run_sync, run)

    def _failure(self, exc):
        if isinstance(exc, OutputError):  # a yielded value that is not JSON: said, without our frames
            print(f"ferry: {exc}", file=sys.stderr)
            return error_body(exc, self.worker_id)
        exc = without_runtime_frames(exc)
        traceback.print_exception(type(exc), exc, exc.__traceback__)  # into the job's log
        hint = missing_package_hint(exc)
        if hint is not None:
            print(f"ferry: {hint}", file=sys.stderr)
        return error_body(exc, self.worker_id)

    async def _drain_async_gen(self, run):
        outputs = []
        try:
            gen = run.fn(**run.kwargs)
            async for value in gen:
                error = yielded_error(value)
                if error is not None:
                    await gen.aclose()
                    return error
                check_jsonable(value, "a yielded value")
                outputs.append(value)
                await self._blocking(self.api.stream, run.id, value)
        except Exception as exc:  # noqa: BLE001
            return self._failure(exc)
        return {"output": outputs}

    def _run_sync(self, run):
        """Runs in the job's own thread, inside the job's context."""
        with run.lock:
            if run.stopped:
                raise JobStopped()
            run.thread_id = threading.get_ident()
        try:
            try:
                result = run.fn(**run.kwargs)
                if inspect.isgenerator(result):
                    return self._drain_sync_gen(run, result), True
                if inspect.iscoroutine(result):  # a plain def that returns a coroutine
                    result = asyncio.run(result)
            except JobStopped:
                raise
            except Exception as exc:  # noqa: BLE001
                return self._failure(exc), False
            return result_body(result), False
        finally:
            with run.lock:
                run.thread_id = None
                if run.interrupted:
                    # A stop raised after the handler returned must not fire later in this
                    # (pooled) thread, in the middle of another job.
                    clear_pending_exception()

    def _drain_sync_gen(self, run, gen):
        outputs = []
        try:
            while True:
                try:
                    value = next(gen)
                except StopIteration as stop:
                    # A generator may `return` its final output (say, the text shape of docs/api.md#job-output-shapes);
                    # without one, the output aggregates the yields.
                    if stop.value is not None:
                        return result_body(stop.value)
                    break
                error = yielded_error(value)
                if error is not None:
                    gen.close()
                    return error
                check_jsonable(value, "a yielded value")
                outputs.append(value)
                self.api.stream(run.id, value)
        except JobStopped:
            raise
        except Exception as exc:  # noqa: BLE001
            return self._failure(exc)
        return {"output": outputs}

    # -- stopping ----------------------------------------------------------------------------------

    async def _stop_loop(self):
        last_problem = None
        while True:
            asked = time.monotonic()
            try:
                ids = await self._blocking(self.api.poll_stop)
            except RateLimited as limited:
                await asyncio.sleep(limited.wait_sec)
                continue
            except Exception as exc:  # noqa: BLE001
                problem = f"{type(exc).__name__}: {exc}"
                if problem != last_problem:  # a server without job-stop would flood the log
                    self.say(f"job-stop poll failed: {problem}")
                last_problem = problem
                await asyncio.sleep(1)
                continue
            last_problem = None
            if ids:
                self.stop_jobs(ids)
            elif time.monotonic() - asked < 0.5:
                await asyncio.sleep(1)  # the server did not hold the poll: don't spin

    def stop_jobs(self, ids):
        for job_id in ids:
            run = self.running.get(job_id)
            if run is None or run.delivering:
                continue
            with run.lock:
                already = run.stopped
                run.stopped = True
                thread_id = run.thread_id
                if thread_id is not None and not already:
                    # Under the lock: the thread is still inside this job (_run_sync clears
                    # thread_id under the same lock), never back in the pool running another.
                    run.interrupted = raise_in_thread(thread_id, JobStopped)
            if already:
                continue
            self.say(f"stopping job {job_id} (asked by the platform; no result will be sent)")
            if thread_id is None and (run.kind in (ASYNC, ASYNC_GEN) or run.input_error is not None):
                run.task.cancel()
            # else: a sync job whose thread has not started or has finished sees `stopped` itself.

    # -- progress and ping -------------------------------------------------------------------------

    def _queue_progress(self, run, data):
        check_jsonable(data, "progress_update data")
        run.progress_sent = True
        self._progress_q.put((run.id, data))

    def _progress_sender(self):
        while True:
            job_id, data = self._progress_q.get()
            try:
                self.api.progress(job_id, data)
            except Exception as exc:  # noqa: BLE001
                self.say(f"progress update for job {job_id} failed: {exc}")
            finally:
                self._progress_q.task_done()

    def _ping_loop(self):
        timeout = min(max(2 * self.ping_interval_sec, 1), 30)
        while True:
            try:
                self.api.ping(sorted(self.held), timeout)
            except Exception as exc:  # noqa: BLE001 - a missed ping only shortens the lease
                self.say(f"ping failed: {type(exc).__name__}: {exc}")
                # While stopping, nothing there is final: on ECS the agent container is gone for
                # good (a task's containers are not restarted).
                if self.stopping.is_set() and nothing_there(exc):
                    self.loop.call_soon_threadsafe(self.platform_gone.set)
            self._ping_now.wait(self.ping_interval_sec)
            self._ping_now.clear()
            if self._ping_stop.is_set():
                return
