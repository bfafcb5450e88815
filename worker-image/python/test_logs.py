"""Job log capture and shipping (ferry/logs.py): lines reach the job-log route with their job and
stream, a 404 falls back to stderr, a 429 (the worker's rate limit) keeps the lines and sends them
again after the wait, and a failing platform never blocks the worker. Routine worker lines keep to
their budget (LineBudget)."""

import io
import json
import threading
import types
import unittest

from unittest import mock

from ferry import logs, transport, worker
from test_runtime_speed import _Server


class FakeRoute:
    def __init__(self, status=200, retry_after=None):
        self.status = status
        self.retry_after = retry_after  # what a 429's Retry-After asked, read (protocol.retry_after_sec)
        self.bodies = []
        self.lock = threading.Lock()

    def __call__(self, body):
        with self.lock:
            self.bodies.append(json.loads(body))
        if isinstance(self.status, Exception):
            raise self.status
        return self.status, self.retry_after

    def lines(self):
        with self.lock:
            return [line for body in self.bodies for line in body["lines"]]


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class LogShipperTest(unittest.TestCase):
    def test_lines_of_a_job_are_shipped_with_their_stream(self):
        route, echo = FakeRoute(), io.StringIO()
        shipper = logs.LogShipper(route, echo, interval_s=60)
        log = logs.JobLog("job-1", echo, shipper=shipper)
        log.write("hello\nwor", "stdout")
        log.write("oops\n", "stderr")
        log.write("ld\n", "stdout")
        log.write("tail without newline", "stdout")
        log.close()
        shipper.flush()
        lines = route.lines()
        self.assertEqual(
            [(line["jobId"], line["stream"], line["text"]) for line in lines],
            [("job-1", "stdout", "hello"), ("job-1", "stderr", "oops"), ("job-1", "stdout", "world"),
             ("job-1", "stdout", "tail without newline")],
        )
        self.assertTrue(all(isinstance(line["atMs"], int) for line in lines))
        self.assertEqual(echo.getvalue(), "")  # shipped lines are not echoed twice
        shipper.close()

    def test_with_backup_each_line_is_marked_on_stderr_until_its_batch_is_sent(self):
        route, echo = FakeRoute(), io.StringIO()
        shipper = logs.LogShipper(route, echo, interval_s=60, backup=True)
        log = logs.JobLog("job-1", echo, shipper=shipper)
        log.write("about to crash\nsecond\n", "stdout")
        marks = echo.getvalue().splitlines()
        self.assertEqual([m.split(" ", 3)[:3] for m in marks], [["::ferry-log", "line", "1"],
                                                                 ["::ferry-log", "line", "2"]])
        self.assertEqual(json.loads(marks[0].split(" ", 3)[3])["text"], "about to crash")
        self.assertEqual(route.lines(), [])  # not sent yet: a crash now leaves only the marks
        shipper.flush()
        self.assertEqual(echo.getvalue().splitlines()[2:], ["::ferry-log sent 2"])
        self.assertEqual([line["text"] for line in route.lines()], ["about to crash", "second"])
        shipper.flush()  # nothing new: nothing more said
        self.assertEqual(len(echo.getvalue().splitlines()), 3)
        shipper.close()

    def test_a_line_with_a_lone_surrogate_is_shipped_as_its_escape(self):
        route, echo = FakeRoute(), io.StringIO()
        shipper = logs.LogShipper(route, echo, interval_s=60)
        shipper.add("job-5", "stdout", "half a pair: \ud800", 1)
        shipper.flush()
        self.assertEqual([line["text"] for line in route.lines()], ["half a pair: \ud800"])
        shipper.close()

    def test_a_platform_without_the_route_gets_the_lines_on_stderr(self):
        route, echo = FakeRoute(404), io.StringIO()
        shipper = logs.LogShipper(route, echo, interval_s=60)
        log = logs.JobLog("job-2", echo, shipper=shipper)
        log.write("first\n")
        shipper.flush()
        log.write("second\n")
        shipper.flush()
        self.assertFalse(shipper.enabled)
        self.assertEqual(echo.getvalue(), "[job-2] first\n[job-2] second\n")
        self.assertEqual(len(route.bodies), 1)  # asked once, then never again
        shipper.close()

    def test_a_failing_platform_drops_lines_and_says_so_once(self):
        route, echo = FakeRoute(OSError("connection refused")), io.StringIO()
        shipper = logs.LogShipper(route, echo, interval_s=60)
        log = logs.JobLog("job-3", echo, shipper=shipper)
        for i in range(3):
            log.write(f"line {i}\n")
            shipper.flush()
        self.assertTrue(shipper.enabled)
        self.assertEqual(echo.getvalue().count("not delivered"), 1)
        shipper.close()

    def test_a_429_keeps_the_lines_and_sends_them_again_once_the_wait_is_over(self):
        route, echo, clock = FakeRoute(429), io.StringIO(), FakeClock()
        shipper = logs.LogShipper(route, echo, interval_s=60, backup=True, retry_after_s=10, clock=clock)
        for i in range(3):
            shipper.add("job-6", "stdout", f"line {i}", i)
        shipper.flush()
        self.assertEqual(len(route.bodies), 1)
        # Not said sent (the platform keeps its backup copies), and not said dropped.
        self.assertEqual([m for m in echo.getvalue().splitlines() if " line " not in m], [])
        # While the wait lasts a flush (the runtime's, before a job's result) sends nothing and
        # returns at once; lines printed meanwhile join the kept ones.
        shipper.add("job-6", "stderr", "line 3", 3)
        clock.now += 9.9
        route.status = 200
        shipper.flush()
        self.assertEqual(len(route.bodies), 1)
        clock.now += 0.1
        shipper.flush()
        self.assertEqual(len(route.bodies), 2)
        self.assertEqual([line["text"] for line in route.bodies[1]["lines"]], [f"line {i}" for i in range(4)])
        self.assertEqual(echo.getvalue().splitlines()[-1], "::ferry-log sent 4")
        self.assertNotIn("dropping", echo.getvalue())
        shipper.close()

    def test_a_429_waits_what_its_retry_after_asked_not_the_default(self):
        route, echo, clock = FakeRoute(429, retry_after=1.0), io.StringIO(), FakeClock()
        shipper = logs.LogShipper(route, echo, interval_s=60, retry_after_s=10, clock=clock)
        shipper.add("job-6", "stdout", "kept", 1)
        shipper.flush()
        route.status = 200
        clock.now += 0.9
        shipper.flush()
        self.assertEqual(len(route.bodies), 1)
        clock.now += 0.1
        shipper.flush()  # 1 s on, not the 10 s a 429 without a Retry-After waits
        self.assertEqual([line["text"] for line in route.bodies[1]["lines"]], ["kept"])
        shipper.close()

    def test_the_workers_shipper_reads_the_retry_after_of_its_route(self):
        server = _Server()
        self.addCleanup(server.close)
        config = types.SimpleNamespace(post_log_url=server.url + "/retry-after/1/v2/ep/job-log/$RUNPOD_POD_ID",
                                       worker_id="w1", api_key="tok", log_backup=False)
        clock, plain = FakeClock(), transport.Connections

        def connections():
            made = plain()
            self.addCleanup(made.close)  # the worker's stay open until it exits
            return made

        with mock.patch.object(transport, "Connections", connections):
            shipper = worker._log_shipper(config, io.StringIO(), interval_s=60, clock=clock)
        shipper.add("job-6", "stdout", "kept", 1)
        shipper.flush()
        posted = lambda: [r for r in server.requests if r[1] == "/retry-after/1/v2/ep/job-log/w1"]  # noqa: E731
        self.assertEqual(len(posted()), 1)
        clock.now += 0.9
        shipper.flush()
        self.assertEqual(len(posted()), 1)
        clock.now += 0.1
        shipper.flush()  # again 429: the lines are kept, and given up on close
        self.assertEqual(len(posted()), 2)
        shipper.close()

    def test_lines_kept_after_a_429_are_bounded_and_the_oldest_dropped_said_once(self):
        route, echo, clock = FakeRoute(429), io.StringIO(), FakeClock()
        shipper = logs.LogShipper(route, echo, interval_s=60, max_lines=10, max_kept=20, backup=True,
                                  retry_after_s=10, clock=clock)
        for i in range(15):
            shipper.add("job-7", "stdout", str(i), i)
        shipper.flush()
        for i in range(15, 45):
            shipper.add("job-7", "stdout", str(i), i)
        route.status = 200
        clock.now += 10
        shipper.flush()
        self.assertEqual([line["text"] for line in route.bodies[1]["lines"] + route.bodies[2]["lines"]],
                         [str(i) for i in range(25, 45)])
        self.assertEqual(echo.getvalue().count("dropping the oldest"), 1)
        self.assertEqual(echo.getvalue().splitlines()[-1], "::ferry-log sent 45")
        shipper.close()

    def test_close_tries_kept_lines_once_more_then_gives_them_up(self):
        route, echo, clock = FakeRoute(429), io.StringIO(), FakeClock()
        shipper = logs.LogShipper(route, echo, interval_s=60, retry_after_s=10, clock=clock)
        shipper.add("job-8", "stdout", "last words", 1)
        shipper.flush()
        shipper.close()
        self.assertEqual(len(route.bodies), 2)
        self.assertEqual(echo.getvalue().count("not delivered (HTTP 429)"), 1)

    def test_the_thread_sends_kept_lines_once_the_wait_is_over(self):
        route, echo = FakeRoute(429), io.StringIO()
        shipper = logs.LogShipper(route, echo, interval_s=60, retry_after_s=0.05)
        shipper.add("job-9", "stdout", "kept", 1)
        shipper.flush()
        route.status = 200
        for _ in range(3000):
            if len(route.bodies) > 1:
                break
            threading.Event().wait(0.01)
        self.assertEqual([line["text"] for line in route.bodies[1]["lines"]], ["kept"])
        shipper.close()

    def test_the_thread_ships_without_a_flush(self):
        route, echo = FakeRoute(), io.StringIO()
        shipper = logs.LogShipper(route, echo, interval_s=0.01)
        shipper.add("job-4", "stdout", "by the thread", 1)
        for _ in range(3000):
            if route.lines():
                break
            threading.Event().wait(0.01)
        self.assertEqual(route.lines()[0]["text"], "by the thread")
        shipper.close()

    def test_big_backlogs_go_in_batches(self):
        route, echo = FakeRoute(), io.StringIO()
        shipper = logs.LogShipper(route, echo, interval_s=60, max_lines=10)
        for i in range(25):
            shipper.add("job-5", "stdout", str(i), i)
        shipper.flush()
        self.assertTrue(all(len(body["lines"]) <= 10 for body in route.bodies))
        self.assertEqual([line["text"] for line in route.lines()], [str(i) for i in range(25)])
        shipper.close()


if __name__ == "__main__":
    unittest.main()


class LineBudgetTest(unittest.TestCase):
    """On a fake clock; `schedule` records the summary's timer instead of starting a thread."""

    def setUp(self):
        self.now = 100.0
        self.said = []
        self.timers = []
        self.budget = logs.LineBudget(self.said.append, ("job completed", "jobs completed"), per_second=3,
                                      clock=lambda: self.now,
                                      schedule=lambda delay, fn: self.timers.append((delay, fn)))

    def fire_timers(self):
        timers, self.timers = self.timers, []
        for _, fn in timers:
            fn()

    def test_every_line_shows_under_the_budget(self):
        for i in range(3):
            self.budget.routine(f"job {i} completed")
            self.now += 0.1
        self.now += 1
        for i in range(3, 6):
            self.budget.routine(f"job {i} completed")
            self.now += 0.1
        self.assertEqual(self.said, [f"job {i} completed" for i in range(6)])
        self.assertEqual(self.timers, [])

    def test_lines_over_the_budget_are_counted_and_summed_up_when_the_second_ends(self):
        for i in range(10):
            self.budget.routine(f"job {i} completed")
            self.now += 0.05
        self.assertEqual(self.said, ["job 0 completed", "job 1 completed", "job 2 completed"])
        # One timer, for the end of the second that began with job 0.
        self.assertEqual(len(self.timers), 1)
        self.assertAlmostEqual(self.timers[0][0], 1 - 0.15)
        self.now = 101.0
        self.fire_timers()
        self.assertEqual(self.said[3:], ["7 more jobs completed in the last 1.0 s (a line each up to 3 a second)"])
        # The next second has its budget again.
        self.budget.routine("job 10 completed")
        self.assertEqual(self.said[-1], "job 10 completed")

    def test_a_line_after_the_second_ends_says_the_summary_first(self):
        for i in range(5):
            self.budget.routine(f"job {i} completed")
        self.now += 1.2  # the timer has not run yet (a busy loop): the next line closes the second
        self.budget.routine("job 5 completed")
        self.assertEqual(self.said[3:], ["2 more jobs completed in the last 1.2 s (a line each up to 3 a second)",
                                         "job 5 completed"])
        self.fire_timers()  # nothing left out since: says nothing more
        self.assertEqual(len(self.said), 5)

    def test_flush_says_what_was_left_out_and_nothing_twice(self):
        for i in range(4):
            self.budget.routine(f"job {i} completed")
        self.now += 0.5
        self.budget.flush()
        self.budget.flush()
        self.assertEqual(self.said[3:], ["1 more job completed in the last 0.5 s (a line each up to 3 a second)"])

    def test_the_real_timer_says_the_summary_without_another_line(self):
        said = []
        done = threading.Event()

        def say(message):
            said.append(message)
            if "more" in message:
                done.set()

        budget = logs.LineBudget(say, ("request answered", "requests answered"), per_second=1)
        budget.routine("GET /a 200")
        budget.routine("GET /b 200")
        self.assertTrue(done.wait(5))
        self.assertEqual(said[0], "GET /a 200")
        self.assertRegex(said[1], r"^1 more request answered in the last \d\.\d s")
