"""job-take and job-done from the event loop (ferry/transport.py LoopConnections, WorkerApi.take_async /
done_async, QueueRuntime): against a real local HTTP server, and a runtime whose jobs cross no thread."""

import asyncio
import errno
import io
import json
import re
import sys
import threading
import unittest
import urllib.parse
from unittest import mock

from fake_platform import FakePlatform
from ferry import logs, protocol, transport
from ferry.logs import LogShipper
from ferry.invoke import Handler, to_json_bytes
from ferry.protocol import RateLimited, WorkerApi
from ferry.queue_runtime import QueueRuntime, run_blocking
from ferry.transport import Connections, LoopConnections, ResponseError
from test_runtime_speed import _serve_garbage_once, _Server


def _run(coro):
    return asyncio.run(coro)


class LoopTest(unittest.TestCase):
    """Each test runs its own loop; `self.conns` / `self.loop_conns` are bound to it in `start()`."""

    def setUp(self):
        self.server = _Server()
        self.addCleanup(self.server.close)
        self.conns = Connections()
        self.addCleanup(self.conns.close)
        self.blocking_calls = []

    def bind(self):
        loop = asyncio.get_running_loop()

        def blocking(fn, *args):
            self.blocking_calls.append(getattr(fn, "__name__", repr(fn)))
            return run_blocking(loop, fn, *args)

        self.blocking = blocking
        self.loop_conns = LoopConnections(loop, self.conns, blocking)
        return self.loop_conns

    def api(self, take_path="/v2/ep/job-take/$ID", done_path="/v2/ep/job-done/w1/$ID", batch_path=None):
        self.said = []
        api = WorkerApi(self.server.url + take_path, self.server.url + done_path, self.server.url + "/s/$ID",
                        self.server.url + "/ping/w1", "tok", "w1", self.said.append, connections=self.conns,
                        post_output_batch_url=self.server.url + batch_path if batch_path else None)
        api.bind_loop(asyncio.get_running_loop(), self.blocking)
        return api


class LoopConnectionsTest(LoopTest):
    def test_requests_share_one_connection(self):
        async def main():
            conns = self.bind()
            out = [(await conns.request("POST", self.server.url + f"/x?i={i}", b'{"n": %d}' % i,
                                        {"Authorization": "tok"}))[:2] for i in range(20)]
            conns.close()
            return out

        out = _run(main())
        self.assertEqual(out, [(200, b'echo:{"n": %d}' % i) for i in range(20)])
        self.assertEqual((self.server.connections, self.conns.opened), (1, 1))
        self.assertEqual(self.blocking_calls, ["_connect"])  # only opening the connection left the loop
        method, path, headers, body = self.server.requests[-1]
        self.assertEqual((method, path, body), ("POST", "/x?i=19", b'{"n": 19}'))
        self.assertEqual(headers["Authorization"], "tok")
        self.assertEqual(headers["Content-Length"], "9")

    def test_chunked_and_read_to_close_answers(self):
        async def main():
            conns = self.bind()
            out = [(await conns.request("GET", self.server.url + p))[:2]
                   for p in ("/chunked", "/x", "/until-close", "/x")]
            conns.close()
            return out

        self.assertEqual(_run(main()), [(200, b'{"a": 1}'), (200, b"echo:"), (200, b"all of it"), (200, b"echo:")])
        self.assertEqual(self.conns.opened, 2)  # chunked keeps the connection; read-to-close does not

    def test_idle_connection_closed_by_the_server_is_replaced_without_a_request(self):
        async def main():
            conns = self.bind()
            first = (await conns.request("GET", self.server.url + "/then-close"))[:2]
            while self.server.connections == 1 and conns._idle.take(("http", "127.0.0.1", self._port())):
                await asyncio.sleep(0.01)  # wait until asyncio has seen the close (connection_lost)
            second = (await conns.request("GET", self.server.url + "/x"))[:2]
            conns.close()
            return first, second

        self.assertEqual(_run(main()), ((200, b"bye"), (200, b"echo:")))
        self.assertEqual(self.conns.opened, 2)
        self.assertEqual([r[1] for r in self.server.requests], ["/then-close", "/x"])

    def _port(self):
        return int(self.server.url.rsplit(":", 1)[1])

    def test_reused_connection_closed_before_any_answer_is_retried_once_silently(self):
        async def main():
            conns = self.bind()
            await conns.request("GET", self.server.url + "/x")
            out = (await conns.request("GET", self.server.url + "/once/hang-up/a"))[:2]
            conns.close()
            return out

        self.assertEqual(_run(main()), (200, b"{}"))
        self.assertEqual(self.conns.opened, 2)
        self.assertEqual(sum(1 for r in self.server.requests if r[1] == "/once/hang-up/a"), 2)

    def test_stale_retry_failing_again_and_a_new_connection_failing_are_the_callers(self):
        async def main():
            conns = self.bind()
            with self.assertRaises(ConnectionError):  # new connection: no second try
                await conns.request("GET", self.server.url + "/hang-up")
            await conns.request("GET", self.server.url + "/x")
            with self.assertRaises(ConnectionError):  # reused: one second try, which fails too
                await conns.request("GET", self.server.url + "/hang-up")
            conns.close()

        _run(main())
        self.assertEqual(sum(1 for r in self.server.requests if r[1] == "/hang-up"), 3)

    def test_timeout_fails_the_request_and_closes_its_connection(self):
        async def main():
            conns = self.bind()
            with self.assertRaises(TimeoutError):
                await conns.request("GET", self.server.url + "/hold", timeout=0.2)
            conns.close()

        _run(main())
        self.assertTrue(self.server.hold_ended.wait(5), "the timed-out connection was not closed")

    def test_cancelled_request_closes_its_connection(self):
        async def main():
            conns = self.bind()
            task = asyncio.ensure_future(conns.request("GET", self.server.url + "/hold", timeout=60))
            while not any(r[1] == "/hold" for r in self.server.requests):
                await asyncio.sleep(0.01)
            task.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await task
            conns.close()

        _run(main())
        self.assertTrue(self.server.hold_ended.wait(5), "the abandoned request's connection was not closed")

    def test_request_cancelled_while_its_connection_opens_closes_that_connection(self):
        # A thread opens the connection: the job-take in flight when the worker stops can be
        # cancelled before the socket reaches the loop, which left that socket open (a
        # ResourceWarning once collected).
        entered, gate = threading.Event(), threading.Event()
        openers, opened = [], []
        connect = self.conns._connect

        def gated_connect(key, timeout):
            openers.append(threading.current_thread())
            entered.set()
            gate.wait(10)
            sock = connect(key, timeout)
            self.addCleanup(sock.close)  # the old code's leak must not outlive the test
            opened.append(sock)
            return sock

        async def main():
            conns = self.bind()
            loop = asyncio.get_running_loop()
            with mock.patch.object(self.conns, "_connect", gated_connect):
                task = asyncio.ensure_future(conns.request("GET", self.server.url + "/x"))
                await loop.run_in_executor(None, entered.wait, 10)
                task.cancel()
                with self.assertRaises(asyncio.CancelledError):
                    await task
                gate.set()
                await loop.run_in_executor(None, openers[0].join, 10)
            conns.close()

        _run(main())
        self.assertEqual(len(opened), 1)
        self.assertEqual(opened[0].fileno(), -1, "the socket opened for the cancelled request was left open")
        self.assertEqual(self.server.requests, [])

    def test_request_cancelled_before_its_opened_connection_reached_the_loop_closes_that_connection(self):
        # The thread has connected, but the loop has not taken the socket yet when the request goes.
        opened = []

        def connected_not_delivered(fn, *args):
            sock = fn(*args)
            self.addCleanup(sock.close)  # the old code's leak must not outlive the test
            opened.append(sock)
            return asyncio.get_running_loop().create_future()

        async def main():
            conns = self.bind()
            conns._blocking = connected_not_delivered
            task = asyncio.ensure_future(conns.request("GET", self.server.url + "/x"))
            while not opened:
                await asyncio.sleep(0)
            task.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await task
            conns.close()

        _run(main())
        self.assertEqual(opened[0].fileno(), -1, "the socket opened for the cancelled request was left open")

    def test_garbage_answer_is_a_response_error(self):
        url = _serve_garbage_once(self)

        async def main():
            conns = self.bind()
            with self.assertRaises(ResponseError):
                await conns.request("GET", url)
            conns.close()

        _run(main())

    def test_https_and_proxy_go_through_the_blocking_front_end(self):
        async def main():
            conns = self.bind()
            with mock.patch.dict("os.environ", {"http_proxy": self.server.url, "no_proxy": ""}):
                out = await conns.request("GET", "http://worker-platform.invalid/v2/x")
            conns.close()
            return out

        self.assertEqual(_run(main())[0], 200)
        self.assertEqual(self.server.requests[-1][1], "http://worker-platform.invalid/v2/x")  # absolute URI
        self.assertEqual(self.blocking_calls, ["request"])


class LoopWorkerApiTest(LoopTest):
    def test_take_batch(self):
        self.server.take_answer = json.dumps([{"id": "a", "input": 1}, {"no": "id"}, {"id": "b"}]).encode()

        async def main():
            self.bind()
            api = self.api()
            jobs = await api.take_async(3, True)
            one = await api.take_async(1, False)
            api.loop_connections.close()
            return jobs, one

        jobs, one = _run(main())
        self.assertEqual([j["id"] for j in jobs], ["a", "b"])
        self.assertEqual(len(self.said), 2)  # the item without an id, in each answer
        self.assertIn("not a job", self.said[0])
        paths = [r[1] for r in self.server.requests]
        self.assertEqual(paths, ["/v2/ep/job-take-batch/w1?batch_size=3&job_in_progress=1",
                                 "/v2/ep/job-take/w1?job_in_progress=0"])
        self.assertEqual(self.server.requests[0][2]["Authorization"], "tok")

    def test_take_answers(self):
        async def main():
            self.bind()
            out = []
            for path in ("/status/204/", "/status/429/", "/status/500/"):
                api = self.api(take_path=path + "job-take/$ID")
                try:
                    out.append(await api.take_async(2, False))
                except Exception as exc:  # noqa: BLE001
                    out.append(type(exc))
                api.loop_connections.close()
            return out

        self.assertEqual(_run(main()), [[], RateLimited, protocol.ProtocolError])

    def test_a_429_on_a_poll_carries_the_wait_its_retry_after_asked(self):
        async def main():
            self.bind()
            waits = []
            for value in ("1", "none", "3600", "soon"):
                api = self.api(take_path=f"/retry-after/{value}/job-take/$ID")
                polls = (lambda: api.take_async(2, False), lambda: self.blocking(api.take, 1, False),
                         lambda: self.blocking(api.poll_stop))
                for poll in polls:
                    try:
                        await poll()
                    except RateLimited as limited:
                        waits.append(limited.wait_sec)
                api.loop_connections.close()
            return waits

        # As asked; without one, or one that cannot be read, the 5 s of before; an hour, the bound.
        five, most = protocol.RATE_LIMITED_WAIT_SEC, protocol.RETRY_AFTER_MAX_SEC
        self.assertEqual(_run(main()), [1.0] * 3 + [five] * 3 + [most] * 3 + [five] * 3)

    def test_done_4xx_is_refused_without_retry(self):
        async def main():
            self.bind()
            api = self.api(done_path="/status/409/$ID")
            ok = await api.done_async("j1", {"output": 1}, False)
            api.loop_connections.close()
            return ok

        self.assertFalse(_run(main()))
        self.assertEqual([r[1] for r in self.server.requests], ["/status/409/j1?isStream=false"])
        self.assertEqual(self.server.requests[0][3], to_json_bytes({"output": 1}))
        self.assertEqual(self.server.requests[0][2]["X-Request-ID"], "j1")
        self.assertIn("refused: HTTP 409", self.said[0])

    def test_done_5xx_is_retried(self):
        async def main():
            self.bind()
            api = self.api(done_path="/once/503/$ID")
            ok_later = await api.done_async("j1", {"output": 1}, True)
            api.loop_connections.close()
            api = self.api(done_path="/status/502/$ID")
            never = await api.done_async("j2", {"output": 2}, False)
            api.loop_connections.close()
            return ok_later, never

        with mock.patch.object(protocol, "POST_BACKOFF_SEC", (0, 0, 0)):
            self.assertEqual(_run(main()), (True, False))
        paths = [r[1] for r in self.server.requests]
        self.assertEqual(paths, ["/once/503/j1?isStream=true"] * 2 + ["/status/502/j2?isStream=false"] * 3)
        self.assertIn(f"failed after {protocol.POST_ATTEMPTS} attempts: HTTP 502", self.said[-1])

    # -- job-done-batch ---------------------------------------------------------------------------

    def deliver(self, results, batch_path="/v2/ep/job-done-batch/w1", together=True):
        """done_async for each (job_id, payload): all in one turn, or one after another."""
        async def main():
            self.bind()
            api = self.api(batch_path=batch_path)
            calls = [api.done_async(job_id, payload, False) for job_id, payload in results]
            if together:
                delivered = await asyncio.gather(*calls)
            else:
                delivered = [await call for call in calls]
            api.loop_connections.close()
            return list(delivered)

        with mock.patch.object(protocol, "POST_BACKOFF_SEC", (0, 0, 0)):
            return _run(main())

    def paths(self):
        return [r[1] for r in self.server.requests]

    def test_results_of_one_turn_leave_in_one_batch_and_a_lone_result_on_its_job_done(self):
        results = [("j1", {"output": 1}), ("j2", {"error": "boom"}), ("j/3", {"output": [3]})]
        self.assertEqual(self.deliver(results), [True, True, True])
        self.assertEqual(self.paths(), ["/v2/ep/job-done-batch/w1"])
        method, _, headers, body = self.server.requests[0]
        self.assertEqual((method, headers["Authorization"], headers["Content-Type"]), ("POST", "tok", "application/json"))
        self.assertEqual(json.loads(body), {"jobs": [{"id": job_id, "result": payload} for job_id, payload in results]})
        self.server.requests.clear()
        self.assertEqual(self.deliver(results[:2], together=False), [True, True])
        self.assertEqual(self.paths(), ["/v2/ep/job-done/w1/j1?isStream=false", "/v2/ep/job-done/w1/j2?isStream=false"])

    def test_each_job_of_a_batch_is_answered_on_its_own(self):
        def answer(batch):
            codes = {"taken": 200, "refused": 409, "failed": 500}
            return 200, json.dumps({"jobs": [{"id": j["id"], "statusCode": codes[j["id"]], "error": "scripted"}
                                             for j in batch["jobs"] if j["id"] in codes]}).encode()

        self.server.batch_answer = answer
        delivered = self.deliver([("taken", {"output": 1}), ("refused", {"output": 2}), ("failed", {"output": 3}),
                                  ("unanswered", {"output": 4})])
        # Refused as its own job-done would be; a 5xx and a job missing from the answer go on their own.
        self.assertEqual(delivered, [True, False, True, True])
        self.assertEqual(self.paths(), ["/v2/ep/job-done-batch/w1", "/v2/ep/job-done/w1/failed?isStream=false",
                                        "/v2/ep/job-done/w1/unanswered?isStream=false"])
        self.assertIn("job-done for job refused refused: HTTP 409 scripted", self.said)

    def test_a_failed_batch_sends_each_job_on_its_own_job_done(self):
        for path in ("/status/500/job-done-batch", "/status/400/job-done-batch", "/hang-up"):
            self.server.requests.clear()
            self.assertEqual(self.deliver([("a", {"output": 1}), ("b", {"output": 2})], batch_path=path), [True, True])
            self.assertEqual(self.paths()[1:], ["/v2/ep/job-done/w1/a?isStream=false",
                                                "/v2/ep/job-done/w1/b?isStream=false"], path)

    def test_a_platform_without_the_route_gets_no_more_batches(self):
        async def main():
            self.bind()
            api = self.api(batch_path="/missing")
            first = await asyncio.gather(api.done_async("a", {"output": 1}, False), api.done_async("b", {}, False))
            second = await asyncio.gather(api.done_async("c", {"output": 3}, False), api.done_async("d", {}, False))
            api.loop_connections.close()
            return list(first) + list(second)

        self.assertEqual(_run(main()), [True] * 4)
        paths = self.paths()
        # a and b leave one after the other once the batch is refused; c and d leave together, each on
        # its own job-done and connection, so the server may read either one first.
        self.assertEqual(paths[:3], ["/missing"] + [f"/v2/ep/job-done/w1/{j}?isStream=false" for j in "ab"])
        self.assertEqual(sorted(paths[3:]), [f"/v2/ep/job-done/w1/{j}?isStream=false" for j in "cd"])
        self.assertIn("job-done-batch is not served here", self.said[0])

    def test_a_big_result_keeps_its_own_job_done(self):
        big = {"output": "x" * protocol.BATCH_RESULT_MAX_BYTES}
        self.assertEqual(self.deliver([("a", {"output": 1}), ("big", big), ("b", {"output": 2})]), [True] * 3)
        self.assertEqual(sorted(self.paths()), ["/v2/ep/job-done-batch/w1", "/v2/ep/job-done/w1/big?isStream=false"])
        self.assertEqual([j["id"] for j in json.loads(self.server.requests[self.paths().index(
            "/v2/ep/job-done-batch/w1")][3])["jobs"]], ["a", "b"])

    def test_post_attempts_back_off_and_stop(self):
        api = WorkerApi("http://h/job-take/$ID", "http://h/d/$ID", "", "", "", "w", lambda m: None)
        attempts = api._post_attempts("j", "job-done")
        pauses = [next(attempts), attempts.send(ConnectionResetError("reset")), attempts.send((500, b""))]
        with self.assertRaises(StopIteration) as end:
            attempts.send((503, b""))
        self.assertEqual(pauses, [0, protocol.POST_BACKOFF_SEC[0], protocol.POST_BACKOFF_SEC[1]])
        self.assertFalse(end.exception.value)
        attempts = api._post_attempts("j", "job-done")
        next(attempts)
        with self.assertRaises(StopIteration) as end:
            attempts.send((200, b"{}"))
        self.assertTrue(end.exception.value)


APP_KINDS = {
    "async": "async def handler(n):\n    return {'n': n}\n",
    "sync": "def handler(n):\n    return {'n': n}\n",
}


class RetryAfterTest(unittest.TestCase):
    """protocol.retry_after_sec: what a 429's Retry-After asks, read once for the polls and the logs."""

    NOW = 1_700_000_000.0  # the wall clock a date is read against: Tue, 14 Nov 2023 22:13:20 GMT

    def wait(self, value):
        return protocol.retry_after_sec({b"retry-after": value}, now=lambda: self.NOW)

    def test_delta_seconds_within_the_bounds(self):
        self.assertEqual([self.wait(v) for v in (b"1", b" 7 ", b"10")], [1.0, 7.0, 10.0])
        # 0 would have the worker ask again at once, as fast as the platform refuses; an hour or
        # a huge number must not park it.
        self.assertEqual([self.wait(v) for v in (b"0", b"11", b"3600", b"9" * 40)],
                         [protocol.RETRY_AFTER_MIN_SEC] + [protocol.RETRY_AFTER_MAX_SEC] * 3)

    def test_an_http_date(self):
        self.assertEqual(self.wait(b"Tue, 14 Nov 2023 22:13:24 GMT"), 4.0)
        self.assertEqual(self.wait(b"Tue, 14 Nov 2023 22:13:24 -0000"), 4.0)
        self.assertEqual(self.wait(b"Tue, 14 Nov 2023 22:00:00 GMT"), protocol.RETRY_AFTER_MIN_SEC)  # gone by
        self.assertEqual(self.wait(b"Wed, 14 Nov 2024 22:13:20 GMT"), protocol.RETRY_AFTER_MAX_SEC)

    def test_nothing_usable_is_none(self):
        for value in (b"", b"-1", b"1.5", b"+3", b"soon", b"\xff\xfe", b"Tue, 99 Nov 2023 22:13:24 GMT"):
            self.assertIsNone(self.wait(value), value)
        self.assertIsNone(protocol.retry_after_sec({b"content-length": b"2"}))
        self.assertIsNone(protocol.retry_after_sec(None))


class StopLoopRateLimitTest(unittest.TestCase):
    """QueueRuntime._stop_loop after a 429 on job-stop: it waits what the answer asked, then polls again."""

    def test_the_stop_poll_waits_what_each_429_asked(self):
        asked = [RateLimited(1.0), RateLimited(), RateLimited(protocol.RETRY_AFTER_MAX_SEC)]
        polls, waits = [], []

        class Api:  # the one call the stop loop makes
            def poll_stop(self):
                polls.append(len(waits))
                raise asked[len(polls) - 1]

        runtime = QueueRuntime(Handler(lambda job: None), Api(), 1, "w1", lambda line: None, io.StringIO(),
                               ping_enabled=False)

        async def recorded_sleep(sec):
            waits.append(sec)
            if len(waits) == len(asked):
                raise asyncio.CancelledError  # ends the loop, which runs until the runtime stops

        async def main():
            runtime.loop = asyncio.get_running_loop()
            with mock.patch.object(asyncio, "sleep", recorded_sleep):
                with self.assertRaises(asyncio.CancelledError):
                    await runtime._stop_loop()

        _run(main())
        # Each poll came after the wait the 429 before it asked (its Retry-After, else the default).
        self.assertEqual(waits, [1.0, protocol.RATE_LIMITED_WAIT_SEC, protocol.RETRY_AFTER_MAX_SEC])
        self.assertEqual(polls, [0, 1, 2])


class RuntimeOnTheLoopTest(unittest.TestCase):
    """A QueueRuntime in this process against the fake platform: which calls left the loop."""

    def run_jobs(self, source, count, log_shipper=None, on_api=None, batch=False, said=None, on_runtime=None):
        namespace = {}
        exec(source, namespace)  # noqa: S102 - the test's own handler
        platform = FakePlatform()
        self.addCleanup(platform.close)
        env = platform.env("w1")
        said = [] if said is None else said
        api = WorkerApi(env["RUNPOD_WEBHOOK_GET_JOB"], env["RUNPOD_WEBHOOK_POST_OUTPUT"],
                        env["RUNPOD_WEBHOOK_POST_STREAM"], env["RUNPOD_WEBHOOK_PING"], platform.api_key, "w1",
                        said.append,
                        post_output_batch_url=env["FERRY_WEBHOOK_POST_OUTPUT_BATCH"] if batch else None)
        self.addCleanup(api.connections.close)
        if on_api is not None:
            on_api(api)
        runtime = QueueRuntime(Handler(namespace["handler"]), api, 4, "w1", said.append, io.StringIO(),
                               ping_enabled=False, log_shipper=log_shipper)
        self.platform = platform
        if on_runtime is not None:
            on_runtime(runtime)
        left_the_loop = []
        plain = runtime._blocking

        def recorded(fn, *args):
            left_the_loop.append(getattr(fn, "__name__", repr(fn)))
            return plain(fn, *args)

        runtime._blocking = recorded

        async def main():
            task = asyncio.ensure_future(runtime.run())
            for i in range(count):
                platform.add_job(f"job-{i}", {"n": i})
            loop = asyncio.get_running_loop()
            dones = [await loop.run_in_executor(None, platform.done_for, f"job-{i}") for i in range(count)]
            runtime.stopping.set()
            self.assertEqual(await task, 0)
            return dones

        dones = _run(main())
        self.assertEqual([d["body"] for d in dones], [{"output": {"n": i}} for i in range(count)])
        # A line per job up to the budget, then the count of those left out (logs.LineBudget).
        shown = sum(1 for line in said if re.fullmatch(r"job job-\d+ completed in \S+ s", line))
        left_out = sum(int(m.group(1)) for line in said if (m := re.match(r"(\d+) more jobs? completed", line)))
        self.assertEqual(shown + left_out, count)
        self.assertLessEqual(shown, count)
        return left_the_loop

    def test_async_handler_jobs_cross_no_thread(self):
        left = self.run_jobs(APP_KINDS["async"], 24)
        # The job-stop poll and opening connections leave the loop; no job-take, job-done or handler does.
        self.assertLessEqual(set(left), {"poll_stop", "_connect"})
        # At most a job-done per slot and per result in flight, and the take, at once: kept alive.
        self.assertLessEqual(left.count("_connect"), 2 * 4 + 1)

    def test_an_async_job_sends_its_result_before_the_next_take(self):
        calls = []

        def record(api):
            take, done = api.take_async, api.done_async

            async def take_async(count, in_progress):
                calls.append("take")
                jobs = await take(count, in_progress)
                calls.extend(f"got {job['id']}" for job in jobs)
                return jobs

            async def done_async(job_id, *args):
                calls.append(f"done {job_id}")
                return await done(job_id, *args)

            api.take_async, api.done_async = take_async, done_async

        self.run_jobs(APP_KINDS["async"], 3, on_api=record)
        # The next job-take waits one loop turn: a handler that finishes at once has its result on
        # the wire first, so neither side handles the take ahead of the result someone waits for.
        got, done = set(), set()
        for call in calls:
            kind, _, job_id = call.partition(" ")
            {"got": got, "done": done}.get(kind, set()).add(job_id)
            if kind == "take":
                self.assertEqual(got - done, set(), f"a job-take went out before their results: {calls}")
        self.assertEqual(done, {"job-0", "job-1", "job-2"})

    def test_with_batches_results_still_reach_the_platform_before_the_next_take(self):
        # Results handed to a batch leave from its sender a turn later, and the next job-take waits
        # for that too. Judged in the order the worker wrote its requests: the platform reads each
        # connection in its own thread, so the order they arrive in there can differ.
        written = []  # [request line, body, answer (status, data) once it came]
        exchange = transport._LoopConn.exchange

        async def recorded(conn, head, body, method, timeout):
            # exchange writes the request before it first waits: the list is in the order written.
            call = [head.split(b"\r\n", 1)[0].decode(), body, None]
            written.append(call)
            call[2] = await exchange(conn, head, body, method, timeout)
            return call[2]

        with mock.patch.object(transport._LoopConn, "exchange", recorded):
            self.run_jobs(APP_KINDS["async"], 3, batch=True)
        given, done = set(), set()
        for line, body, answer in written:
            segs = line.split()[1].split("?")[0].strip("/").split("/")  # v2, ep, op, worker, [job]
            if segs[2] in ("job-take", "job-take-batch"):
                self.assertEqual(given - done, set(), f"a job-take went out before their results: {written}")
                if answer is not None and answer[0] == 200:
                    jobs = json.loads(answer[1])
                    given.update(job["id"] for job in (jobs if isinstance(jobs, list) else [jobs]))
            elif segs[2] == "job-done":
                done.add(urllib.parse.unquote(segs[4]))
            elif segs[2] == "job-done-batch":
                done.update(item["id"] for item in json.loads(body)["jobs"])
        self.assertEqual(given, {"job-0", "job-1", "job-2"})
        self.assertEqual(done, {"job-0", "job-1", "job-2"})

    def test_sync_handler_costs_one_hop_for_the_handler_only(self):
        left = self.run_jobs(APP_KINDS["sync"], 24)
        self.assertEqual(left.count("run"), 24)  # ctx.run of each handler call
        self.assertLessEqual(set(left), {"run", "poll_stop", "_connect"})

    def test_a_job_that_logged_has_its_lines_shipped_before_its_result(self):
        shipped = []  # (job id, whether its job-done had arrived when its line was posted)

        def post(body):
            for line in json.loads(body)["lines"]:
                shipped.append((line["jobId"], bool(self.platform.of("job-done", line["jobId"]))))
            return 200, None

        shipper = LogShipper(post, io.StringIO(), interval_s=60)
        self.addCleanup(shipper.close)
        source = "def handler(n):\n    if n % 3 == 0:\n        print(f'line {n}')\n    return {'n': n}\n"
        with mock.patch.object(sys, "stdout", logs.RoutingStream(sys.stdout)):
            left = self.run_jobs(source, 12, shipper)
        self.assertEqual(sorted(shipped), sorted((f"job-{i}", False) for i in range(0, 12, 3)))
        self.assertEqual(left.count("flush"), 4)  # only the jobs that logged wait for the shipper

    def test_a_take_refused_with_429_waits_what_its_retry_after_asked(self):
        paused = []

        def refuse_takes(runtime):
            # A Retry-After of 1 s, none (the 5 s of before), and an hour (bounded by the window).
            self.platform.takes_refused.extend(["1", None, "3600"])

            async def pause(seconds):  # records the wait instead of waiting
                paused.append(seconds)

            runtime._pause = pause

        self.run_jobs(APP_KINDS["async"], 3, on_runtime=refuse_takes)
        self.assertEqual(paused, [1.0, protocol.RATE_LIMITED_WAIT_SEC, protocol.RETRY_AFTER_MAX_SEC])
        self.assertGreater(len([c for c in self.platform.calls if c["op"].startswith("job-take")]), 3)

    def test_takes_refused_while_the_agent_comes_up_are_retried_without_a_word(self):
        # On ECS the worker may start before the agent beside it listens (its START dependency waits
        # for the agent's container to be started only): the first takes find nothing there.
        refused = []

        def refuse_first_takes(api):
            plain = api.take_async

            async def take_async(*args):
                if len(refused) < 3:
                    refused.append(args)
                    raise ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")
                return await plain(*args)

            api.take_async = take_async

        said = []
        self.run_jobs(APP_KINDS["async"], 2, on_api=refuse_first_takes, said=said)
        self.assertEqual(len(refused), 3)
        self.assertEqual([line for line in said if "job-take failed" in line], [])

    def test_shutdown_abandons_a_take_in_flight(self):
        server = _Server()
        self.addCleanup(server.close)
        said = []
        api = WorkerApi(server.url + "/hold/job-take/$ID", server.url + "/d/$ID", "", "", "tok", "w1", said.append)
        self.addCleanup(api.connections.close)
        runtime = QueueRuntime(Handler(lambda: None), api, 1, "w1", said.append, io.StringIO(), ping_enabled=False)

        async def main():
            task = asyncio.ensure_future(runtime.run())
            while not any(r[1].startswith("/hold/job-take") for r in server.requests):
                await asyncio.sleep(0.01)
            runtime.stopping.set()
            return await task

        self.assertEqual(_run(main()), 0)
        self.assertTrue(server.hold_ended.wait(5), "the job-take in flight was not abandoned")


if __name__ == "__main__":
    unittest.main()
