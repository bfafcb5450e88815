"""End to end: `python -m ferry.worker` in standalone mode (FERRY_MODE=standalone) serving its own
POST /runsync over real HTTP, as `ferry deploy --preview` runs it in a container."""

import json
import os
import re
import shutil
import tempfile
import textwrap
import threading
import unittest
import urllib.error
import urllib.request

from fake_platform import WorkerProcess

APP = textwrap.dedent(
    '''
    import asyncio

    import ferry
    from ferry import Endpoint


    @Endpoint(name="tools", cpu="2-4", max_concurrency=2)
    class Tools:
        def __init__(self):
            import threading
            self.greeting = "ready"
            self.arrived = 0
            self.arrivals = threading.Condition()

        def add(self, a, b):
            return {"sum": a + b, "greeting": self.greeting}

        async def shout(self, text):
            await asyncio.sleep(0.01)
            return text.upper()

        def count(self, n):
            for i in range(n):
                yield {"i": i}

        def summary(self, n):
            for i in range(n):
                yield i
            return {"text": ["done"], "output_tokens": n}

        async def acount(self, n):
            for i in range(n):
                await asyncio.sleep(0)
                yield i * 10

        def boom(self, message):
            raise ValueError(message)

        def refuse(self):
            return {"error": "no such prompt", "hint": "try another"}

        def progress(self, *, job):
            ferry.progress_update(job, {"step": 1})
            return "progressed"

        def meet(self, seconds):
            # Waits up to `seconds` for another call to begin: two calls both meet only when they
            # run side by side, however slow the machine.
            with self.arrivals:
                self.arrived += 1
                self.arrivals.notify_all()
                met = self.arrivals.wait_for(lambda: self.arrived >= 2, timeout=seconds)
            return "met" if met else "alone"


    @Endpoint(name="echo", cpu="1-2")
    def echo(prompt, steps=4):
        return {"prompt": prompt, "steps": steps}


    @Endpoint(name="broken", cpu="1-2")
    class Broken:
        def __init__(self):
            raise RuntimeError("model weights missing")

        def run(self):
            return 1
    '''
)


def request(base, method, path, body=None, raw=None, timeout=10):
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    req = urllib.request.Request(base + path, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        with err:
            return err.code, json.loads(err.read())


def start(app_dir, target, **extra):
    env = {
        "FERRY_MODE": "standalone",
        "FERRY_APP_DIR": app_dir,
        "FERRY_MODULE": "app",
        "FERRY_TARGET": target,
        "FERRY_PORT": "0",  # the worker prints the port it got
    }
    env.update(extra)
    return WorkerProcess(env)


def base_url(worker):
    out = worker.wait_output(" standalone on http://")
    return "http://127.0.0.1:" + re.search(r"standalone on http://[^:]+:(\d+)", out).group(1)


def write_app():
    tmp = tempfile.mkdtemp(prefix="ferry-standalone-test-")
    with open(os.path.join(tmp, "app.py"), "w") as f:
        f.write(APP)
    return tmp


class StandaloneClassTargetTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = write_app()
        cls.worker = start(cls.tmp, "Tools")
        try:
            cls.base = base_url(cls.worker)
        except AssertionError:
            cls.worker.close()
            shutil.rmtree(cls.tmp, ignore_errors=True)
            raise

    @classmethod
    def tearDownClass(cls):
        cls.worker.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def runsync(self, job_input):
        status, body = request(self.base, "POST", "/runsync", {"input": job_input})
        self.assertEqual(status, 200, body)
        self.assertRegex(body["id"], r"^preview-[0-9a-f-]{36}$")
        return body

    def test_ping(self):
        self.assertEqual(request(self.base, "GET", "/ping"), (200, {"status": "healthy"}))
        with urllib.request.urlopen(urllib.request.Request(self.base + "/ping", method="HEAD"), timeout=10) as resp:
            self.assertEqual((resp.status, resp.read()), (200, b""))

    def test_sync_method(self):
        body = self.runsync({"method": "add", "a": 2, "b": 3})
        self.assertEqual(body["status"], "COMPLETED")
        self.assertEqual(body["output"], {"sum": 5, "greeting": "ready"})
        self.assertIsInstance(body["executionTime"], int)
        self.assertIsInstance(body["delayTime"], int)

    def test_async_method(self):
        body = self.runsync({"method": "shout", "text": "hi"})
        self.assertEqual((body["status"], body["output"]), ("COMPLETED", "HI"))

    def test_generator_is_aggregated(self):
        body = self.runsync({"method": "count", "n": 3})
        self.assertEqual(body["output"], [{"i": 0}, {"i": 1}, {"i": 2}])

    def test_generator_return_value_is_the_output(self):
        body = self.runsync({"method": "summary", "n": 2})
        self.assertEqual(body["output"], {"text": ["done"], "output_tokens": 2})

    def test_async_generator_is_aggregated(self):
        body = self.runsync({"method": "acount", "n": 3})
        self.assertEqual((body["status"], body["output"]), ("COMPLETED", [0, 10, 20]))

    def test_progress_update_does_not_break_the_job(self):
        body = self.runsync({"method": "progress"})
        self.assertEqual(body["output"], "progressed")
        self.worker.wait_output('progress: {"step": 1}')

    def test_exception_fails_with_runpod_error_string(self):
        body = self.runsync({"method": "boom", "message": "bad seed"})
        self.assertEqual(body["status"], "FAILED")
        self.assertNotIn("output", body)
        error = json.loads(body["error"])  # a JSON string, as job-done carries it
        self.assertEqual(error["error_message"], "bad seed")
        self.assertEqual(error["error_type"], "<class 'ValueError'>")
        self.assertIn("raise ValueError(message)", error["error_traceback"])

    def test_error_dict_fails_and_keeps_the_rest_as_output(self):
        body = self.runsync({"method": "refuse"})
        self.assertEqual(body["status"], "FAILED")
        self.assertEqual(body["error"], "no such prompt")
        self.assertEqual(body["output"], {"hint": "try another"})

    def test_input_that_does_not_fit_fails_without_traceback(self):
        body = self.runsync({"method": "add", "a": 1, "c": 2})
        self.assertEqual(body["status"], "FAILED")
        error = json.loads(body["error"])
        self.assertEqual(
            error["error_message"],
            "the job input does not fit Tools.add(a, b): missing required argument 'b'; "
            "unexpected argument 'c' (it takes: a, b)",
        )
        self.assertEqual(error["error_traceback"], "")

    def test_unknown_method_fails(self):
        body = self.runsync({"method": "nope"})
        self.assertEqual(body["status"], "FAILED")
        self.assertIn("unknown method 'nope'", json.loads(body["error"])["error_message"])

    def test_jobs_run_concurrently_up_to_max_concurrency(self):
        results = []

        def call():
            results.append(self.runsync({"method": "meet", "seconds": 5}))

        threads = [threading.Thread(target=call) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        # max_concurrency=2: side by side, each waited for the other. One at a time, the first
        # would have waited alone.
        self.assertEqual([r["output"] for r in results], ["met", "met"])
        self.assertNotEqual(results[0]["id"], results[1]["id"])

    def test_bad_bodies_are_400(self):
        for raw, expected in [
            (b"{not json", "not valid JSON"),
            (b"[1, 2]", '"input" field'),
            (b'{"prompt": "a"}', '"input" field'),
            (b"", "send a JSON body"),
        ]:
            status, body = request(self.base, "POST", "/runsync", raw=raw)
            self.assertEqual(status, 400, raw)
            self.assertIn(expected, body["error"])

    def test_other_routes(self):
        for method, path, allowed in (("GET", "/runsync", "POST"), ("POST", "/ping", "GET, HEAD")):
            with self.subTest(method=method, path=path):
                req = urllib.request.Request(self.base + path, data=b"{}" if method == "POST" else None, method=method)
                with self.assertRaises(urllib.error.HTTPError) as caught:
                    urllib.request.urlopen(req, timeout=10)
                self.assertEqual(caught.exception.code, 405)
                self.assertEqual(caught.exception.headers["Allow"], allowed)
                caught.exception.close()
        self.assertEqual(request(self.base, "POST", "/run", {"input": {}})[0], 404)

    def test_no_code_execution_route(self):
        for path in ("/execute", "/exec", "/eval"):
            status, _ = request(self.base, "POST", path, {"function_code": "print(1)"})
            self.assertEqual(status, 404)


class StandaloneLifecycleTest(unittest.TestCase):
    def setUp(self):
        self.tmp = write_app()
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def start(self, target, **extra):
        worker = start(self.tmp, target, **extra)
        self.addCleanup(worker.close)
        return worker

    def test_function_target_and_sigterm_exits_0(self):
        worker = self.start("echo")
        base = base_url(worker)
        status, body = request(base, "POST", "/runsync", {"input": {"prompt": "a"}})
        self.assertEqual(status, 200)
        self.assertEqual((body["status"], body["output"]), ("COMPLETED", {"prompt": "a", "steps": 4}))
        worker.terminate()
        self.assertEqual(worker.wait_exit(), 0)
        self.assertIn("stopped", worker.output)

    def test_missing_port_is_a_startup_error(self):
        worker = self.start("echo", FERRY_PORT="")
        self.assertEqual(worker.wait_exit(), 2)
        self.assertIn("FERRY_PORT is not set", worker.output)

    def test_missing_target_is_a_startup_error(self):
        worker = self.start("")
        self.assertEqual(worker.wait_exit(), 2)
        self.assertIn("FERRY_TARGET is not set", worker.output)

    def test_class_init_failure_exits_1(self):
        worker = self.start("Broken")
        self.assertEqual(worker.wait_exit(), 1)
        self.assertIn("model weights missing", worker.output)

    def test_unknown_mode_names_the_choices(self):
        worker = self.start("echo", FERRY_MODE="preview")
        self.assertEqual(worker.wait_exit(), 2)
        self.assertIn("queue, lb, standalone", worker.output)


if __name__ == "__main__":
    unittest.main()
