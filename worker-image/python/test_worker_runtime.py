"""End to end: `python -m ferry.worker` against a fake worker-protocol server (fake_platform.py)."""

import errno
import json
import os
import shutil
import tempfile
import textwrap
import time
import unittest

from fake_platform import FakePlatform, WorkerProcess
from ferry.queue_runtime import nothing_there

APP = textwrap.dedent(
    '''
    import asyncio
    import time

    import ferry
    from ferry import Endpoint


    @Endpoint(name="tools", cpu="2-4", max_concurrency=4)
    class Tools:
        def __init__(self):
            self.greeting = "ready"

        def add(self, a, b):
            print(f"adding {a} and {b}")
            return {"sum": a + b}

        async def shout(self, text):
            await asyncio.sleep(0.01)
            return text.upper()

        def count(self, n):
            for i in range(n):
                yield {"i": i}

        async def acount(self, n):
            for i in range(n):
                await asyncio.sleep(0)
                yield i * 10

        def half_stream(self):
            yield "first"
            raise RuntimeError("stream broke")

        def boom(self, message):
            raise ValueError(message)

        def needs_package(self):
            import package_nobody_installed_xyz.sub

        def spin(self, seconds=30):
            end = time.time() + seconds
            while time.time() < end:
                time.sleep(0.02)
            return "spun to the end"

        async def nap(self, seconds=30):
            await asyncio.sleep(seconds)
            return "woke up"

        def steps(self, n, *, job):
            for i in range(n):
                ferry.progress_update(job, {"step": i})
            return "stepped"

        async def cancels_itself(self):
            raise asyncio.CancelledError()

        def unserializable(self):
            return {"a set": {1, 2}}

        def yields_unserializable(self):
            yield "fine"
            yield {"a set": {1, 2}}

        def yields_error(self):
            yield "one"
            yield {"error": "gen failed", "partial": 1}
            yield "never"

        async def yields_error_async(self):
            yield "a"
            yield {"error": {"code": 7}}
            yield "never"

        def yields_outputs(self, n):
            for i in range(n):
                yield {"output": i}

        def yields_falsy_error(self):
            yield {"error": None, "x": 1}

        def empty(self):
            return {}

        def null_error(self):
            return {"error": None, "a": 1}

        def raises_bare(self):
            raise KeyError()


    @Endpoint(name="hello")
    def hello(name="world", *, job):
        print(f"hi from hello to {name}")
        return {"greeting": f"hello {name}", "job_id": job["id"]}


    def slow(seconds):
        print(f"sleeping {seconds} s")
        time.sleep(seconds)
        return {"slept": seconds}


    def big(n):
        return "x" * n


    def dies(code=3):
        print("about to crash", flush=True)
        import os
        os._exit(code)


    def slow_or_refresh(seconds=0, refresh=False):
        print(f"sleeping {seconds} s")
        time.sleep(seconds)
        return {"slept": seconds, "refresh_worker": refresh}
    '''
)


class QueueWorkerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ferry-worker-test-")
        cls.app_dir = os.path.join(cls.tmp, "app")
        os.makedirs(os.path.join(cls.app_dir, "workers"))
        with open(os.path.join(cls.app_dir, "workers", "__init__.py"), "w") as f:
            f.write("")
        with open(os.path.join(cls.app_dir, "workers", "tools.py"), "w") as f:
            f.write(APP)
        cls.log_dir = os.path.join(cls.tmp, "logs")
        cls.platform = FakePlatform()
        cls.worker = WorkerProcess(
            dict(
                cls.platform.env("wA"),
                FERRY_APP_DIR=cls.app_dir,
                FERRY_MODULE="workers.tools",
                FERRY_TARGET="Tools",
                RUNPOD_PING_INTERVAL="200",
            )
        )

    @classmethod
    def tearDownClass(cls):
        cls.worker.close()
        cls.platform.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def run_job(self, job_id, job_input):
        self.platform.add_job(job_id, job_input, worker="wA")
        return self.platform.done_for(job_id)

    def error_of(self, done):
        self.assertEqual(set(done["body"]), {"error"})
        self.assertIsInstance(done["body"]["error"], str)  # RunPod's format: a JSON *string*
        return json.loads(done["body"]["error"])

    def test_sync_method_result_and_headers(self):
        done = self.run_job("job-add", {"method": "add", "a": 1, "b": 2})
        self.assertEqual(done["body"], {"output": {"sum": 3}})
        self.assertEqual(done["query"]["isStream"], "false")
        self.assertEqual(done["query"]["gpu"], "none")
        self.assertEqual(done["auth"], "worker-token-1")
        self.assertEqual(done["content_type"], "application/json")
        self.worker.wait_output("[job-add] adding 1 and 2")

    def test_async_method(self):
        done = self.run_job("job-shout", {"method": "shout", "text": "hey"})
        self.assertEqual(done["body"], {"output": "HEY"})

    def test_a_lone_surrogate_in_the_input_comes_back_in_the_result(self):
        # "\ud800" is valid JSON text; Python reads it as a str that UTF-8 cannot encode.
        done = self.run_job("job-surrogate", {"method": "shout", "text": "a\ud800"})
        self.assertEqual(done["body"], {"output": "A\ud800"})

    def test_generator_streams_chunks_then_aggregate(self):
        done = self.run_job("job-count", {"method": "count", "n": 3})
        self.assertEqual(done["query"]["isStream"], "true")
        self.assertEqual(done["body"], {"output": [{"i": 0}, {"i": 1}, {"i": 2}]})
        chunks = self.platform.of("job-stream", "job-count")
        self.assertEqual([c["body"] for c in chunks], [{"output": {"i": i}} for i in range(3)])
        self.assertTrue(all(c["query"]["isStream"] == "false" for c in chunks))
        self.assertLess(chunks[-1]["at"], done["at"])

    def test_async_generator(self):
        done = self.run_job("job-acount", {"method": "acount", "n": 3})
        self.assertEqual(done["body"], {"output": [0, 10, 20]})
        self.assertEqual([c["body"]["output"] for c in self.platform.of("job-stream", "job-acount")], [0, 10, 20])

    def test_a_yielded_output_dict_is_streamed_and_aggregated_as_runpod_does(self):
        # RunPod's SDK (rp_job.py) posts {"output": <the yield>} per yield and aggregates the yields
        # as they are: a yielded {"output": i} is not taken for a chunk of its own.
        done = self.run_job("job-youts", {"method": "yields_outputs", "n": 2})
        self.assertEqual(done["body"], {"output": [{"output": 0}, {"output": 1}]})
        chunks = [c["body"] for c in self.platform.of("job-stream", "job-youts")]
        self.assertEqual(chunks, [{"output": {"output": 0}}, {"output": {"output": 1}}])

    def test_generator_error_ends_stream_with_error(self):
        done = self.run_job("job-half", {"method": "half_stream"})
        self.assertEqual(done["query"]["isStream"], "true")
        info = self.error_of(done)
        self.assertEqual(info["error_message"], "stream broke")
        self.assertEqual(len(self.platform.of("job-stream", "job-half")), 1)

    def test_a_yielded_error_ends_the_stream_and_fails_the_job(self):
        # RunPod's SDK (rp_job.py handle_job): a yielded dict with a truthy "error" is not streamed,
        # ends the stream, and the job fails with {"error": str(error)}.
        done = self.run_job("job-yerr", {"method": "yields_error"})
        self.assertEqual(done["query"]["isStream"], "true")
        self.assertEqual(done["body"], {"error": "gen failed"})
        self.assertEqual([c["body"] for c in self.platform.of("job-stream", "job-yerr")], [{"output": "one"}])
        done = self.run_job("job-ayerr", {"method": "yields_error_async"})
        self.assertEqual(done["body"], {"error": str({"code": 7})})
        self.assertEqual([c["body"] for c in self.platform.of("job-stream", "job-ayerr")], [{"output": "a"}])
        # A falsy "error" is an ordinary chunk.
        done = self.run_job("job-yfalsy", {"method": "yields_falsy_error"})
        self.assertEqual(done["body"], {"output": [{"error": None, "x": 1}]})

    def test_an_empty_or_falsy_error_result_is_shaped_as_runpod_does(self):
        # rp_job.py run_job pops "error" whatever its value and drops an output that ends up {}.
        self.assertEqual(self.run_job("job-empty", {"method": "empty"})["body"], {})
        self.assertEqual(self.run_job("job-nullerr", {"method": "null_error"})["body"], {"output": {"a": 1}})

    def test_an_exception_without_a_message_is_recorded_as_runpod_does(self):
        info = self.error_of(self.run_job("job-bare", {"method": "raises_bare"}))
        self.assertEqual(info["error_message"], "")
        self.assertEqual(info["error_type"], "<class 'KeyError'>")
        self.assertTrue(info["runpod_version"].startswith("ferry-"))

    def test_exception_is_reported_in_runpod_format(self):
        done = self.run_job("job-boom", {"method": "boom", "message": "it broke"})
        self.assertEqual(done["query"]["isStream"], "false")
        info = self.error_of(done)
        self.assertEqual(info["error_type"], "<class 'ValueError'>")
        self.assertEqual(info["error_message"], "it broke")
        self.assertIn("raise ValueError(message)", info["error_traceback"])
        self.assertEqual(info["worker_id"], "wA")
        self.assertTrue(info["hostname"])
        self.worker.wait_output("[job-boom] ValueError: it broke")

    def test_a_missing_package_in_a_handler_is_followed_by_where_to_declare_it(self):
        info = self.error_of(self.run_job("job-nopkg", {"method": "needs_package"}))
        self.assertEqual(info["error_type"], "<class 'ModuleNotFoundError'>")
        self.worker.wait_output(
            "[job-nopkg] ferry: hint: 'package_nobody_installed_xyz' is not installed where this worker runs: "
            "if it is a package, add it to the endpoint's dependencies=[...] or to requirements.txt"
        )

    def test_unknown_method_names_available_ones(self):
        info = self.error_of(self.run_job("job-unknown", {"method": "fly"}))
        self.assertIn("unknown method 'fly'", info["error_message"])
        self.assertIn("acount, add, boom, cancels_itself, count", info["error_message"])

    def test_missing_method(self):
        info = self.error_of(self.run_job("job-nomethod", {"a": 1}))
        self.assertIn('input["method"]', info["error_message"])

    def test_wrong_kwargs_fail_before_calling(self):
        info = self.error_of(self.run_job("job-badargs", {"method": "add", "a": 1, "c": 2}))
        self.assertIn("does not fit", info["error_message"])
        self.assertEqual(info["error_traceback"], "")

    def test_non_object_input(self):
        info = self.error_of(self.run_job("job-list", [1, 2]))
        self.assertIn("JSON object", info["error_message"])

    def test_unserializable_output_fails_clearly(self):
        info = self.error_of(self.run_job("job-set", {"method": "unserializable"}))
        self.assertIn("not JSON serializable", info["error_message"])
        # What was wrong is the result, not a line of code: no traceback of Ferry's own frames.
        self.assertEqual(info["error_traceback"], "")
        info = self.error_of(self.run_job("job-yields-set", {"method": "yields_unserializable"}))
        self.assertIn("a yielded value is not JSON serializable", info["error_message"])
        self.assertEqual(info["error_traceback"], "")

    def test_handler_cancelling_itself_fails_the_job(self):
        info = self.error_of(self.run_job("job-selfcancel", {"method": "cancels_itself"}))
        self.assertEqual(info["error_type"], "<class 'asyncio.exceptions.CancelledError'>")

    def test_progress_updates_arrive_before_result(self):
        done = self.run_job("job-steps", {"method": "steps", "n": 3})
        self.assertEqual(done["body"], {"output": "stepped"})
        updates = [c for c in self.platform.of("job-done", "job-steps") if c["body"].get("status") == "IN_PROGRESS"]
        self.assertEqual([u["body"]["output"] for u in updates], [{"step": 0}, {"step": 1}, {"step": 2}])
        self.assertTrue(all(u["query"]["isStream"] == "false" for u in updates))
        self.assertLess(updates[-1]["at"], done["at"])

    def _held_in_ping(self, job_id):
        return lambda calls: any(
            c["op"] == "ping" and job_id in c["query"].get("job_id", "").split(",") for c in calls
        )

    def _stop_and_check(self, job_id):
        self.platform.wait_for(self._held_in_ping(job_id), what=f"a ping holding {job_id}")
        self.platform.stop(job_id)
        self.worker.wait_output(f"stopping job {job_id}")
        # Stopped means the handler ended: a later ping no longer lists the job.
        stopped_at = time.monotonic()
        self.platform.wait_for(
            lambda calls: any(
                c["op"] == "ping" and c["at"] > stopped_at + 0.3 and job_id not in c["query"].get("job_id", "")
                for c in calls
            ),
            what=f"a ping without {job_id}",
        )
        time.sleep(0.3)
        self.assertEqual([c for c in self.platform.of("job-done", job_id)], [], "a stopped job gets no job-done")

    def test_stop_cancels_running_async_job(self):
        self.platform.add_job("job-nap", {"method": "nap"}, worker="wA")
        self._stop_and_check("job-nap")

    def test_stop_interrupts_running_sync_loop(self):
        self.platform.add_job("job-spin", {"method": "spin"}, worker="wA")
        self._stop_and_check("job-spin")
        # The worker still serves jobs after interrupting a thread:
        self.assertEqual(self.run_job("job-after-stop", {"method": "add", "a": 2, "b": 2})["body"], {"output": {"sum": 4}})

    def test_ping_without_jobs_omits_job_id(self):
        self.platform.wait_for(
            lambda calls: any(c["op"] == "ping" and "job_id" not in c["query"] for c in calls),
            what="an idle ping",
        )
        ping = self.platform.of("ping")[0]
        self.assertEqual(ping["auth"], "worker-token-1")
        self.assertEqual(ping["worker"], "wA")

    def test_take_uses_batch_when_several_slots_are_free(self):
        self.platform.wait_for(
            lambda calls: any(c["op"] == "job-take-batch" and c["query"].get("batch_size") for c in calls),
            what="a job-take-batch",
        )
        take = self.platform.of("job-take-batch")[0]
        self.assertIn(take["query"]["job_in_progress"], ("0", "1"))
        self.assertEqual(take["worker"], "wA")


    def test_results_that_finish_together_share_a_job_done_batch(self):
        ids = [f"job-many-{i}" for i in range(12)]
        self.platform.add_jobs([(job_id, {"method": "shout", "text": job_id}) for job_id in ids], worker="wA")
        for job_id in ids:
            self.assertEqual(self.platform.done_for(job_id)["body"], {"output": job_id.upper()})
        batches = [c for c in self.platform.of("job-done-batch") if any(j["id"] in ids for j in c["body"]["jobs"])]
        self.assertTrue(batches, self.platform.summary())
        self.assertEqual(batches[0]["path"], "/v2/ep1/job-done-batch/wA")
        self.assertEqual(batches[0]["content_type"], "application/json")
        # Each result went once, in a batch or on its own job-done.
        delivered = [c["job_id"] for c in self.platform.of("job-done") if c["job_id"] in ids]
        self.assertEqual(sorted(delivered), sorted(ids))


class FunctionWorkerTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ferry-worker-test-")
        with open(os.path.join(self.tmp, "gpu_worker.py"), "w") as f:
            f.write(APP)
        self.platform = FakePlatform()
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.addCleanup(self.platform.close)

    def start(self, target, **extra):
        env = dict(self.platform.env("wB"), FERRY_APP_DIR=self.tmp, FERRY_MODULE="gpu_worker", FERRY_TARGET=target)
        env.update(extra)
        worker = WorkerProcess(env)
        self.addCleanup(worker.close)
        return worker

    def test_function_gets_job_and_logs_go_to_file(self):
        log_dir = os.path.join(self.tmp, "logs")
        worker = self.start("hello", FERRY_LOG_DIR=log_dir)
        self.platform.add_job("job-1", {"name": "ada"})
        done = self.platform.done_for("job-1")
        self.assertEqual(done["body"], {"output": {"greeting": "hello ada", "job_id": "job-1"}})
        worker.wait_output("[job-1] hi from hello to ada")
        with open(os.path.join(log_dir, "job-1.log"), encoding="utf-8") as f:
            self.assertEqual(f.read(), "hi from hello to ada\n")
        # max_concurrency 1: single job-take, never the batch route.
        self.assertEqual(self.platform.of("job-take-batch"), [])
        self.assertEqual(self.platform.of("job-take")[0]["query"]["job_in_progress"], "0")

    def _log_url(self):
        return f"http://127.0.0.1:{self.platform.port}/v2/{self.platform.endpoint_id}/job-log/wB"

    def _marks(self, output):
        return [line.split(" ", 3)[1:] for line in output.splitlines() if line.startswith("::ferry-log ")]

    def test_a_shipped_line_is_kept_on_stderr_until_it_is_sent(self):
        # FERRY_LOG_BACKUP=stderr (the local platform reads its workers' stderr): each job line is
        # also written there, marked, and a "sent" follows once its batch went out.
        worker = self.start("hello", FERRY_WEBHOOK_POST_LOG=self._log_url(), FERRY_LOG_BACKUP="stderr")
        self.platform.add_job("job-1", {"name": "ada"})
        self.platform.done_for("job-1")
        [call] = self.platform.of("job-log")
        self.assertEqual([line["text"] for line in call["body"]["lines"]], ["hi from hello to ada"])
        worker.wait_output("::ferry-log sent 1")
        [line, sent] = self._marks(worker.output)
        self.assertEqual(line[:2], ["line", "1"])
        self.assertEqual(json.loads(line[2]), call["body"]["lines"][0])
        self.assertEqual(sent, ["sent", "1"])
        self.assertNotIn("[job-1] hi from hello", worker.output)  # shipped: no unmarked echo

    def test_a_line_printed_just_before_the_process_dies_is_left_on_stderr(self):
        worker = self.start("dies", FERRY_WEBHOOK_POST_LOG=self._log_url(), FERRY_LOG_BACKUP="stderr")
        self.platform.add_job("job-dies", {})
        self.assertEqual(worker.wait_exit(), 3)
        # The shipper's batch died with the process; the marked copy is what the platform records.
        self.assertEqual(self.platform.of("job-log"), [])
        [line] = self._marks(worker.output)
        self.assertEqual(line[:2], ["line", "1"])
        self.assertEqual(json.loads(line[2])["text"], "about to crash")
        self.assertEqual(json.loads(line[2])["jobId"], "job-dies")

    def test_without_the_backup_setting_nothing_is_marked(self):
        worker = self.start("hello", FERRY_WEBHOOK_POST_LOG=self._log_url())
        self.platform.add_job("job-1", {"name": "ada"})
        self.platform.done_for("job-1")
        self.platform.wait_for(lambda calls: [c for c in calls if c["op"] == "job-log"], what="job-log")
        self.assertNotIn("::ferry-log", worker.output)

    def test_sigterm_lets_the_running_job_finish_then_exits_0(self):
        worker = self.start("slow", RUNPOD_PING_INTERVAL="100")
        self.platform.add_job("job-slow", {"seconds": 1})
        self.platform.wait_for(
            lambda calls: any(c["op"] == "ping" and c["query"].get("job_id") == "job-slow" for c in calls),
            what="job-slow running",
        )
        worker.terminate()
        self.assertEqual(worker.wait_exit(), 0)
        self.assertEqual(self.platform.done_for("job-slow", timeout=1)["body"], {"output": {"slept": 1}})
        self.assertIn("received SIGTERM", worker.output)

    def test_sigterm_after_the_platform_died_leaves_the_running_job_at_once(self):
        # On ECS the agent container died and ECS is stopping the task: the result could not be
        # delivered, and running on through the grace period would overlap the copy the platform
        # starts when the lease lapses. The ping interval (10 s) and the grace (60 s) are long, so
        # only the ping SIGTERM sends at once can end this wait within the few seconds allowed.
        worker = self.start("slow", FERRY_GRACE_MS="60000")
        self.platform.add_job("job-stuck", {"seconds": 60})
        worker.wait_output("[job-stuck] sleeping 60 s")
        self.platform.crash()
        worker.terminate()
        self.assertEqual(worker.wait_exit(timeout=8), 0)
        self.assertIn("the platform refuses connections", worker.output)
        self.assertIn("exiting with 1 job(s) still running", worker.output)
        self.assertEqual(self.platform.of("job-done"), [])

    def _refresh_beside(self, long_seconds, **extra):
        """A worker with 2 slots runs a long job; a short job beside it returns refresh_worker."""
        worker = self.start("slow_or_refresh", FERRY_MAX_CONCURRENCY="2", RUNPOD_PING_INTERVAL="100", **extra)
        self.platform.add_job("job-long", {"seconds": long_seconds})
        worker.wait_output(f"[job-long] sleeping {long_seconds} s")
        self.platform.add_job("job-refresh", {"refresh": True})
        self.assertEqual(self.platform.done_for("job-refresh")["body"], {"output": {"slept": 0}, "stopPod": True})
        return worker

    def test_refresh_worker_lets_the_jobs_beside_it_finish_however_long(self):
        # RunPod's SDK only adds stopPod to that job's result and goes on running the others; the
        # platform stops the worker once it holds nothing. The grace period (a SIGTERM's) is not
        # what a refresh waits for: the long job outlasts it and still delivers its result.
        worker = self._refresh_beside(2.5, FERRY_GRACE_MS="300")
        self.assertEqual(worker.wait_exit(timeout=15), 0)
        self.assertEqual(self.platform.done_for("job-long", timeout=1)["body"], {"output": {"slept": 2.5}})
        self.assertIn("running job(s) to finish before exiting for a fresh worker", worker.output)
        self.assertNotIn("still running", worker.output)

    def test_sigterm_during_a_refresh_gives_the_running_jobs_the_grace_period(self):
        worker = self._refresh_beside(60, FERRY_GRACE_MS="300")
        worker.wait_output("before exiting for a fresh worker")
        worker.terminate()
        self.assertEqual(worker.wait_exit(timeout=8), 0)
        self.assertIn("received SIGTERM: running jobs have up to 0.3 s to finish", worker.output)
        self.assertIn("exiting with 1 job(s) still running", worker.output)
        self.assertEqual(self.platform.of("job-done", "job-long"), [])

    def test_a_result_over_the_platforms_limit_fails_the_job_with_the_reason(self):
        # The platform refuses it with 413 (the job stays IN_PROGRESS): without another job-done it
        # would run again on each lease lapse and end as "stopped responding".
        self.platform.done_limit_bytes = 50_000
        worker = self.start("big")
        self.platform.add_job("job-big", {"n": 70_000})
        done = self.platform.wait_for(
            lambda calls: [c for c in calls if c["op"] == "job-done" and c["job_id"] == "job-big"][1:],
            what="a second job-done for job-big",
        )[0]
        [refused] = [c for c in self.platform.of("job-done", "job-big") if c["body"] is None]
        size = refused["bytes"]
        self.assertEqual(size, len(b'{"output": ""}') + 70_000)
        self.assertEqual(done["query"]["isStream"], "false")
        self.assertEqual(set(done["body"]), {"error"})
        self.assertIn(f"the handler's result of {size} bytes is over the platform's limit", done["body"]["error"])
        self.assertIn("it takes at most 50000 bytes", done["body"]["error"])
        worker.wait_output("job job-big failed")
        self.assertEqual(len(self.platform.of("job-done", "job-big")), 2)

    def test_what_counts_as_the_platform_being_gone(self):
        self.assertTrue(nothing_there(ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")))
        # A linked container's address once it stopped (ECS bridge networking).
        self.assertTrue(nothing_there(OSError(errno.EHOSTUNREACH, "No route to host")))
        self.assertFalse(nothing_there(TimeoutError("timed out")))
        self.assertFalse(nothing_there(ConnectionResetError(errno.ECONNRESET, "reset")))
        self.assertFalse(nothing_there(ValueError("bad answer")))

    def test_missing_target_is_a_startup_error(self):
        worker = self.start("nope")
        self.assertEqual(worker.wait_exit(), 2)
        self.assertIn("FERRY_TARGET 'nope' is not defined", worker.output)

    def test_unimportable_module_is_a_startup_error(self):
        worker = self.start("hello", FERRY_MODULE="not_there")
        self.assertEqual(worker.wait_exit(), 2)
        self.assertIn("FERRY_MODULE 'not_there' was not found", worker.output)

    def test_a_module_the_endpoint_imports_that_is_missing_names_its_file_and_line(self):
        with open(os.path.join(self.tmp, "g.py"), "w") as f:
            f.write("import helper2\n\n\ndef h():\n    return 1\n")
        with open(os.path.join(self.tmp, "helper2.py"), "w") as f:
            f.write("import requestz\n")
        worker = self.start("h", FERRY_MODULE="g")
        self.assertEqual(worker.wait_exit(), 2)
        out = worker.output
        self.assertIn("FERRY_MODULE 'g' failed to import: No module named 'requestz'", out)
        self.assertIn(f'File "{os.path.join(self.tmp, "g.py")}", line 1', out)
        self.assertIn(f'File "{os.path.join(self.tmp, "helper2.py")}", line 1', out)
        self.assertIn("import requestz", out)
        self.assertIn("ModuleNotFoundError: No module named 'requestz'", out)
        self.assertIn(
            "hint: 'requestz' is not installed where this worker runs: if it is a package, add it to the "
            "endpoint's dependencies=[...] or to requirements.txt",
            out,
        )
        # The user's own frames only: not importlib's, not the runtime's.
        self.assertNotIn("<frozen", out)
        self.assertNotIn("ferry/config.py", out)
        self.assertNotIn("importlib", out)

    def test_any_failure_of_the_endpoints_import_names_the_users_file_and_line_only(self):
        # A name one module cannot import from another (ImportError, not a missing module), and any
        # exception at module level: the user's frames, as for a missing import.
        with open(os.path.join(self.tmp, "helper3.py"), "w") as f:
            f.write("LIMIT = 1 / 0\n")
        with open(os.path.join(self.tmp, "h3.py"), "w") as f:
            f.write("import os\nfrom helper3 import LIMIT\n\n\ndef h():\n    return 1\n")
        with open(os.path.join(self.tmp, "names.py"), "w") as f:
            f.write("from os import not_a_name\n\n\ndef h():\n    return 1\n")
        for module, shown in (
            ("h3", [("h3.py", 2), ("helper3.py", 1), "ZeroDivisionError: division by zero"]),
            ("names", [("names.py", 1), "ImportError: cannot import name 'not_a_name' from 'os'"]),
        ):
            worker = self.start("h", FERRY_MODULE=module)
            self.assertEqual(worker.wait_exit(), 2)
            out = worker.output
            self.assertIn(f"FERRY_MODULE '{module}' failed to import", out)
            for what in shown:
                if isinstance(what, tuple):
                    what = f'File "{os.path.join(self.tmp, what[0])}", line {what[1]}'
                self.assertIn(what, out)
            self.assertNotIn("<frozen", out)
            self.assertNotIn(os.path.join("ferry", "config.py"), out)
            self.assertNotIn("importlib", out)

    def test_a_missing_submodule_of_the_endpoints_package_is_not_the_module_missing(self):
        os.makedirs(os.path.join(self.tmp, "pkg"))
        open(os.path.join(self.tmp, "pkg", "__init__.py"), "w").close()
        with open(os.path.join(self.tmp, "pkg", "mod.py"), "w") as f:
            f.write("import pkg.gone\n")
        worker = self.start("h", FERRY_MODULE="pkg.mod")
        self.assertEqual(worker.wait_exit(), 2)
        self.assertIn("FERRY_MODULE 'pkg.mod' failed to import: No module named 'pkg.gone'", worker.output)
        self.assertIn(f'File "{os.path.join(self.tmp, "pkg", "mod.py")}", line 1', worker.output)

    def test_the_endpoint_module_itself_missing_is_one_short_line(self):
        worker = self.start("hello", FERRY_MODULE="not_there.sub")
        self.assertEqual(worker.wait_exit(), 2)
        self.assertIn("FERRY_MODULE 'not_there.sub' was not found", worker.output)
        self.assertNotIn("Traceback", worker.output)

    def _startup_url(self):
        return f"http://127.0.0.1:{self.platform.port}/v2/{self.platform.endpoint_id}/startup-failed/wB"

    def test_startup_error_is_handed_to_the_agent(self):
        # On ECS the agent cannot read the worker's output: the runtime posts why before it exits.
        worker = self.start("hello", FERRY_MODULE="not_there", FERRY_WEBHOOK_POST_STARTUP=self._startup_url())
        self.assertEqual(worker.wait_exit(), 2)
        [call] = self.platform.of("startup-failed")
        self.assertEqual(call["auth"], self.platform.api_key)
        self.assertTrue(any("FERRY_MODULE 'not_there' was not found" in line for line in call["body"]["lines"]))

    def test_failing_init_is_handed_to_the_agent_with_its_traceback(self):
        with open(os.path.join(self.tmp, "bad_init.py"), "w") as f:
            f.write(
                "class Model:\n"
                "    def __init__(self):\n"
                "        raise RuntimeError('no weights')\n\n"
                "    def run(self):\n"
                "        return 1\n"
            )
        worker = self.start("Model", FERRY_MODULE="bad_init", FERRY_WEBHOOK_POST_STARTUP=self._startup_url())
        self.assertEqual(worker.wait_exit(), 1)
        [call] = self.platform.of("startup-failed")
        text = "\n".join(call["body"]["lines"])
        self.assertIn("Model() failed while starting:", text)
        self.assertIn("RuntimeError: no weights", text)
        # The user's own frames, from __init__ down: not the runtime's that called it. `ferry dev` answers
        # the caller with these lines, and health shows them.
        for shown in (text, worker.output):
            self.assertIn(f'File "{os.path.join(self.tmp, "bad_init.py")}", line 3, in __init__', shown)
            self.assertNotIn(os.path.join("ferry", "worker.py"), shown)
            self.assertNotIn(os.path.join("ferry", "invoke.py"), shown)

    def test_startup_error_without_the_route_still_exits(self):
        worker = self.start("hello", FERRY_MODULE="not_there")
        self.assertEqual(worker.wait_exit(), 2)
        self.assertEqual(self.platform.of("startup-failed"), [])

    def test_missing_protocol_env_is_a_startup_error(self):
        worker = self.start("hello", RUNPOD_WEBHOOK_GET_JOB="")
        self.assertEqual(worker.wait_exit(), 2)
        self.assertIn("RUNPOD_WEBHOOK_GET_JOB is not set", worker.output)

    def test_bad_concurrency_env_is_a_startup_error(self):
        worker = self.start("hello", FERRY_MAX_CONCURRENCY="0")
        self.assertEqual(worker.wait_exit(), 2)
        self.assertIn("FERRY_MAX_CONCURRENCY must be >= 1", worker.output)


if __name__ == "__main__":
    unittest.main()
