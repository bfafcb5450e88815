"""Job log capture and shipping (ferry/logs.py): lines reach the job-log route with their job and
stream, a 404 falls back to stderr, and a failing platform never blocks the worker."""

import io
import json
import threading
import unittest

from ferry import logs


class FakeRoute:
    def __init__(self, status=200):
        self.status = status
        self.bodies = []
        self.lock = threading.Lock()

    def __call__(self, body):
        with self.lock:
            self.bodies.append(json.loads(body))
        if isinstance(self.status, Exception):
            raise self.status
        return self.status

    def lines(self):
        with self.lock:
            return [line for body in self.bodies for line in body["lines"]]


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
