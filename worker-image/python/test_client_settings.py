"""Where remote calls find the platform and the key (ferry.client.Platform.from_environ)."""

import os
import tempfile
import unittest

from ferry.client import Platform


class FromEnvironTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.home = os.path.join(self.tmp.name, "home")
        os.makedirs(self.home)

    def tearDown(self):
        self.tmp.cleanup()

    def settings(self, **environ):
        return Platform.from_environ({"FERRY_HOME": self.home, **environ}, cwd=self.tmp.name)

    def test_a_workers_call_token_comes_first(self):
        # Local workers and AWS workers (an ECS secret, core/call-keys.ts) both get FERRY_CALL_TOKEN.
        p = self.settings(FERRY_CALL_TOKEN="call", FERRY_API_KEY="all", RUNPOD_API_KEY="rp")
        self.assertEqual(p.key, "call")

    def test_outside_a_worker_the_users_key_and_the_local_default_url(self):
        p = self.settings(FERRY_API_KEY="all")
        self.assertEqual(p.key, "all")
        self.assertEqual(p.url, "http://127.0.0.1:8888")

    def test_the_api_url_is_taken_as_given(self):
        p = self.settings(FERRY_API_URL="https://abc.execute-api.us-east-1.amazonaws.com/api/", FERRY_API_KEY="k")
        self.assertEqual(p.url, "https://abc.execute-api.us-east-1.amazonaws.com/api")


if __name__ == "__main__":
    unittest.main()
