"""A call's timeout is one budget: runsync's own wait and the polls after it share it (client.py)."""

import unittest
from unittest import mock

from ferry import client
from ferry.client import EndpointClient, Job, RemoteTimeout


class SlowPlatform:
    """Answers every wait with IN_PROGRESS after the full wait, on a fake clock (no real sleeping)."""

    def __init__(self, ends_as_cancelled=None):
        self.now = 1000.0
        self.waits_ms = []
        self.cancelled = False
        # The status the job ended in just before the cancel: it answers that (docs/api.md#cancel).
        self.ends_as_cancelled = ends_as_cancelled

    def monotonic(self):
        return self.now

    def request(self, method, path, body=None, query=None):
        if path.endswith("/cancel/job-1"):
            self.cancelled = True
            return 200, {"id": "job-1", "status": self.ends_as_cancelled or "CANCELLED"}
        if path.endswith("/status/job-1") and self.ends_as_cancelled:
            return 200, {"id": "job-1", "status": self.ends_as_cancelled, "output": {"done": True}}
        wait_ms = int((query or {}).get("wait", 0))
        self.waits_ms.append(wait_ms)
        self.now += wait_ms / 1000
        return 200, {"id": "job-1", "status": "IN_PROGRESS"}


class RunsyncTimeoutTest(unittest.TestCase):
    def test_runsync_gives_up_when_its_timeout_is_spent_in_all(self):
        platform = SlowPlatform()
        with mock.patch.object(client.time, "monotonic", platform.monotonic):
            with self.assertRaises(RemoteTimeout) as raised:
                EndpointClient(platform, id="ep").runsync({}, timeout=2)
        # The runsync waited the whole 2 s; nothing more may be asked for (it was 2 s more).
        self.assertEqual(platform.waits_ms, [2000])
        self.assertTrue(platform.cancelled)
        self.assertEqual(raised.exception.timeout_s, 2)

    def test_a_longer_timeout_polls_for_what_is_left(self):
        platform = SlowPlatform()
        with mock.patch.object(client.time, "monotonic", platform.monotonic):
            with self.assertRaises(RemoteTimeout):
                EndpointClient(platform, id="ep").runsync({}, timeout=150)
        self.assertEqual(platform.waits_ms, [60_000, 60_000, 30_000])

    def test_a_job_that_completes_as_the_timeout_runs_out_is_its_output_not_a_timeout(self):
        platform = SlowPlatform(ends_as_cancelled="COMPLETED")
        with mock.patch.object(client.time, "monotonic", platform.monotonic):
            output = EndpointClient(platform, id="ep").runsync({}, timeout=2)
        self.assertTrue(platform.cancelled)
        self.assertEqual(output, {"done": True})



class QuietStream:
    """A generator job that streams nothing for a while: every stream read takes the platform's 5 s
    default wait on a fake clock. `ends_as_cancelled`: the status the job ended in just before the
    cancel (docs/api.md#cancel), whose last chunk the next read hands out."""

    def __init__(self, ends_as_cancelled=None):
        self.now = 1000.0
        self.cancelled = False
        self.ends_as_cancelled = ends_as_cancelled

    def monotonic(self):
        return self.now

    def request(self, method, path, body=None, query=None):
        if path.endswith("/cancel/job-1"):
            self.cancelled = True
            return 200, {"id": "job-1", "status": self.ends_as_cancelled or "CANCELLED"}
        if self.cancelled and self.ends_as_cancelled:
            return 200, {"id": "job-1", "status": self.ends_as_cancelled, "stream": [{"output": "last"}]}
        self.now += 5
        return 200, {"id": "job-1", "status": "IN_PROGRESS", "stream": []}


class StreamTimeoutTest(unittest.TestCase):
    def test_a_stream_that_times_out_cancels_its_job_as_a_remote_timeout_says(self):
        # RemoteTimeout means the job was cancelled (docs/python.md, "Failures"): a stream's too.
        platform = QuietStream()
        job = Job(EndpointClient(platform, id="ep"), "job-1")
        with mock.patch.object(client.time, "monotonic", platform.monotonic):
            with self.assertRaises(RemoteTimeout):
                list(job.stream(timeout=7))
        self.assertTrue(platform.cancelled)

    def test_a_stream_whose_job_ends_as_the_timeout_runs_out_gives_what_is_left(self):
        platform = QuietStream(ends_as_cancelled="COMPLETED")
        job = Job(EndpointClient(platform, id="ep"), "job-1")
        with mock.patch.object(client.time, "monotonic", platform.monotonic):
            self.assertEqual(list(job.stream(timeout=7)), ["last"])
        self.assertTrue(platform.cancelled)


if __name__ == "__main__":
    unittest.main()
