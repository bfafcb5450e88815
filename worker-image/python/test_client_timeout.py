"""A call's timeout is one budget: runsync's own wait and the polls after it share it (client.py)."""

import unittest
from unittest import mock

from ferry import client
from ferry.client import EndpointClient, RemoteTimeout


class SlowPlatform:
    """Answers every wait with IN_PROGRESS after the full wait, on a fake clock (no real sleeping)."""

    def __init__(self):
        self.now = 1000.0
        self.waits_ms = []
        self.cancelled = False

    def monotonic(self):
        return self.now

    def request(self, method, path, body=None, query=None):
        if path.endswith("/cancel/job-1"):
            self.cancelled = True
            return 200, {"id": "job-1", "status": "CANCELLED"}
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


if __name__ == "__main__":
    unittest.main()
