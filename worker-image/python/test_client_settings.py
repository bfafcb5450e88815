"""Where remote calls find the platform and the key (ferry.client.Platform.from_environ)."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

from ferry.client import FerryClientError, Platform


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


class RunningDevTest(unittest.TestCase):
    """With no FERRY_API_URL or FERRY_PORT, a script in a project that `ferry dev` serves calls that
    dev's platform, wherever it listens: its lock, .ferry/dev.json (cli/dev/lock.ts), says where."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.home = os.path.join(self.tmp.name, "home")
        self.project = os.path.join(self.tmp.name, "project")
        os.makedirs(self.home)
        os.makedirs(os.path.join(self.project, "pkg", "tests"))
        # A live process whose command line has `dev`, as `ferry dev`'s has.
        self.dev = self.sleeper("dev")

    def sleeper(self, *args):
        """A process that sleeps, once it runs its own command line (not its parent's, forked)."""
        process = subprocess.Popen(
            [sys.executable, "-c", "print('ready', flush=True); import time; time.sleep(60)", *args],
            stdout=subprocess.PIPE,
        )
        self.addCleanup(process.wait)
        self.addCleanup(process.stdout.close)
        self.addCleanup(process.kill)
        process.stdout.readline()
        return process

    def tearDown(self):
        self.tmp.cleanup()

    def lock(self, folder, pid, platform_url="http://127.0.0.1:45123"):
        os.makedirs(os.path.join(folder, ".ferry"), exist_ok=True)
        with open(os.path.join(folder, ".ferry", "dev.json"), "w", encoding="utf-8") as handle:
            json.dump({"pid": pid, "startedAt": 1, "url": "http://127.0.0.1:45122", "platformUrl": platform_url}, handle)

    def settings(self, cwd, **environ):
        return Platform.from_environ({"FERRY_HOME": self.home, "FERRY_API_KEY": "k", **environ}, cwd=cwd)

    def gone_pid(self):
        done = subprocess.Popen([sys.executable, "-c", "pass", "dev"])
        done.wait()
        return done.pid

    def test_the_running_devs_platform_in_the_project_folder(self):
        self.lock(self.project, self.dev.pid)
        self.assertEqual(self.settings(self.project).url, "http://127.0.0.1:45123")

    def test_from_a_subfolder_the_nearest_running_dev_above(self):
        self.lock(self.tmp.name, self.dev.pid, "http://127.0.0.1:45999")
        self.lock(self.project, self.dev.pid)
        self.lock(os.path.join(self.project, "pkg"), self.gone_pid(), "http://127.0.0.1:45777")
        self.assertEqual(self.settings(os.path.join(self.project, "pkg", "tests")).url, "http://127.0.0.1:45123")

    def test_a_lock_whose_dev_is_gone_or_another_program_is_ignored(self):
        self.lock(self.project, self.gone_pid())
        self.assertEqual(self.settings(self.project).url, "http://127.0.0.1:8888")
        other = self.sleeper()
        self.lock(self.project, other.pid)
        self.assertEqual(self.settings(self.project).url, "http://127.0.0.1:8888")

    def test_the_api_url_and_the_port_win_over_the_dev(self):
        self.lock(self.project, self.dev.pid)
        self.assertEqual(self.settings(self.project, FERRY_API_URL="http://h:1").url, "http://h:1")
        self.assertEqual(self.settings(self.project, FERRY_PORT="45555").url, "http://127.0.0.1:45555")

    def test_unreachable_names_the_settings_that_point_elsewhere(self):
        with self.assertRaises(FerryClientError) as raised:
            Platform("http://127.0.0.1:1", "k").request("GET", "/v2/x/health", timeout=5)
        message = str(raised.exception)
        self.assertIn("cannot reach the Ferry platform at http://127.0.0.1:1", message)
        self.assertIn("FERRY_API_URL", message)
        self.assertIn("FERRY_PORT", message)


if __name__ == "__main__":
    unittest.main()
