"""Where remote calls find the platform and the key (ferry.client.Platform.from_environ)."""

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

from ferry import Endpoint
from ferry.client import DEV_START_WAIT_S, FerryClientError, Platform, dev_platform_url


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

    def test_the_projects_ferry_key_comes_before_a_runpod_key_kept_for_runpod(self):
        # A RunPod (Flash) user keeps RUNPOD_API_KEY exported for RunPod itself: the project's .env
        # FERRY_API_KEY is the key for Ferry, and wins over it; the environment's FERRY_API_KEY over both.
        with open(os.path.join(self.tmp.name, ".env"), "w", encoding="utf-8") as handle:
            handle.write("FERRY_API_KEY=project\n")
        p = self.settings(RUNPOD_API_KEY="rp")
        self.assertEqual((p.key, p.key_source), ("project", f"FERRY_API_KEY in {os.path.join(self.tmp.name, '.env')}"))
        p = self.settings(RUNPOD_API_KEY="rp", FERRY_API_KEY="all")
        self.assertEqual((p.key, p.key_source), ("all", "$FERRY_API_KEY"))
        os.remove(os.path.join(self.tmp.name, ".env"))
        p = self.settings(RUNPOD_API_KEY="rp")
        self.assertEqual((p.key, p.key_source), ("rp", "$RUNPOD_API_KEY"))
        with open(os.path.join(self.home, "api-key"), "w", encoding="utf-8") as handle:
            handle.write("fy_home\n")
        p = self.settings()
        self.assertEqual((p.key, p.key_source), ("fy_home", os.path.join(self.home, "api-key")))

    def test_a_refused_key_is_named_by_where_it_came_from(self):
        import http.server
        import threading

        class Refusing(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - the http.server name
                body = json.dumps({"error": "Missing or invalid API key"}).encode()
                self.send_response(401)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        url = f"http://127.0.0.1:{server.server_address[1]}"
        with self.assertRaises(FerryClientError) as raised:
            self.settings(FERRY_API_URL=url, RUNPOD_API_KEY="stale").request("GET", "/v2/x/health", timeout=5)
        self.assertEqual(raised.exception.status, 401)
        self.assertEqual(
            str(raised.exception),
            f"Missing or invalid API key (the key from $RUNPOD_API_KEY was refused by {url}: "
            "set FERRY_API_KEY to one of its keys)",
        )
        with self.assertRaises(FerryClientError) as raised:
            self.settings(FERRY_API_URL=url).request("GET", "/v2/x/health", timeout=5)
        self.assertIn("no key was sent: set FERRY_API_KEY", str(raised.exception))

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
        """As cli/dev/lock.ts writes it; platform_url None: as taken, before the dev listens."""
        os.makedirs(os.path.join(folder, ".ferry"), exist_ok=True)
        info = {"pid": pid, "startedAt": 1}
        if platform_url is not None:
            info.update(url="http://127.0.0.1:45122", platformUrl=platform_url)
        with open(os.path.join(folder, ".ferry", "dev.json"), "w", encoding="utf-8") as handle:
            json.dump(info, handle)

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

    def test_from_a_subfolder_the_devs_project_gives_the_app_and_the_key(self):
        # docs/python.md: a script run from the project's folder or below calls that dev's endpoints,
        # so the app and the .env key are the project's (as `ferry dev` runs with them), not the
        # subfolder's name and a .env the subfolder lacks.
        self.lock(self.project, self.dev.pid)
        with open(os.path.join(self.project, ".env"), "w", encoding="utf-8") as handle:
            handle.write("FERRY_API_KEY=project-key\n")
        below = os.path.join(self.project, "pkg", "tests")
        p = Platform.from_environ({"FERRY_HOME": self.home}, cwd=below)
        self.assertEqual((p.url, p.app), ("http://127.0.0.1:45123", "project"))
        self.assertEqual((p.key, p.key_source), ("project-key", f"FERRY_API_KEY in {os.path.join(self.project, '.env')}"))
        with open(os.path.join(self.project, ".ferry", "config.json"), "w", encoding="utf-8") as handle:
            json.dump({"app": "named-app"}, handle)
        self.assertEqual(Platform.from_environ({"FERRY_HOME": self.home}, cwd=below).app, "named-app")
        # The environment still wins, as everywhere.
        p = Platform.from_environ({"FERRY_HOME": self.home, "FERRY_APP": "a", "FERRY_API_KEY": "k"}, cwd=below)
        self.assertEqual((p.app, p.key), ("a", "k"))

    def test_a_lock_whose_dev_is_gone_or_another_program_is_ignored(self):
        self.lock(self.project, self.gone_pid())
        self.assertEqual(self.settings(self.project).url, "http://127.0.0.1:8888")
        other = self.sleeper()
        self.lock(self.project, other.pid)
        self.assertEqual(self.settings(self.project).url, "http://127.0.0.1:8888")

    def fake_time(self, on_sleep=lambda: None):
        """A clock that moves only when slept on; `on_sleep` runs at each sleep (the dev meanwhile)."""
        now = [0.0]
        sleeps = []

        def sleep(seconds):
            sleeps.append(seconds)
            now[0] += seconds
            on_sleep()

        return (lambda: now[0]), sleep, sleeps

    def test_a_dev_still_starting_is_waited_for_until_it_writes_its_platform_url(self):
        self.lock(self.project, self.dev.pid, None)
        monotonic, sleep, sleeps = self.fake_time(lambda: self.lock(self.project, self.dev.pid, "http://127.0.0.1:45321"))
        url = dev_platform_url(os.path.join(self.project, "pkg"), monotonic=monotonic, sleep=sleep)
        self.assertEqual(url, "http://127.0.0.1:45321")
        self.assertEqual(len(sleeps), 1)

    def test_a_script_started_right_after_ferry_dev_calls_that_devs_platform(self):
        # Platform.from_environ, as a remote call makes it: the URL the dev writes while it waits.
        self.lock(self.project, self.dev.pid, None)
        written = mock.Mock(side_effect=lambda _s: self.lock(self.project, self.dev.pid, "http://127.0.0.1:45321"))
        with mock.patch("time.sleep", written):
            self.assertEqual(self.settings(self.project).url, "http://127.0.0.1:45321")
        written.assert_called_once()

    def test_a_dev_that_never_writes_its_url_ends_the_wait_with_what_to_do(self):
        self.lock(self.project, self.dev.pid, None)
        monotonic, sleep, sleeps = self.fake_time()
        with self.assertRaises(FerryClientError) as raised:
            dev_platform_url(self.project, monotonic=monotonic, sleep=sleep)
        message = str(raised.exception)
        self.assertIn(f"`ferry dev` (pid {self.dev.pid}) is still starting", message)
        self.assertIn("FERRY_API_URL", message)
        # Bounded: it gave up once the wait was over, not before, and never slept past it.
        self.assertGreaterEqual(sum(sleeps), DEV_START_WAIT_S)
        self.assertLess(sum(sleeps), DEV_START_WAIT_S + 1)

    def test_an_awaited_call_waits_for_a_starting_dev_off_the_callers_event_loop(self):
        # `await fn(x)` builds its client in the call's thread (client._in_thread), so a dev still
        # starting is waited for there while the caller's loop runs on. Here a coroutine on that loop
        # is what finishes the dev's start: a wait on the loop would end in "still starting" after
        # DEV_START_WAIT_S, not in a call to the URL the dev wrote (nothing listens on port 9).
        self.lock(self.project, self.dev.pid, None)
        environ = {"FERRY_HOME": self.home, "FERRY_API_KEY": "k", "FERRY_APP": "app"}
        with mock.patch.dict(os.environ, environ, clear=True):

            @Endpoint(name="far")
            def far(x):
                return x

            async def call_while_dev_starts():
                call = asyncio.ensure_future(far(1))
                await asyncio.sleep(0.05)
                self.lock(self.project, self.dev.pid, "http://127.0.0.1:9")
                with self.assertRaises(FerryClientError) as raised:
                    await call
                return str(raised.exception)

            cwd = os.getcwd()
            os.chdir(self.project)
            try:
                message = asyncio.run(call_while_dev_starts())
            finally:
                os.chdir(cwd)
        self.assertIn("127.0.0.1:9", message)
        self.assertNotIn("still starting", message)

    def test_no_dev_or_a_dev_gone_while_starting_means_no_wait(self):
        monotonic, sleep, sleeps = self.fake_time()
        self.assertIsNone(dev_platform_url(self.project, monotonic=monotonic, sleep=sleep))
        self.lock(self.project, self.gone_pid(), None)
        self.assertIsNone(dev_platform_url(self.project, monotonic=monotonic, sleep=sleep))
        self.assertEqual(sleeps, [])
        self.assertEqual(self.settings(self.project).url, "http://127.0.0.1:8888")

    def test_the_api_url_and_the_port_win_over_the_dev(self):
        self.lock(self.project, self.dev.pid)
        self.assertEqual(self.settings(self.project, FERRY_API_URL="http://h:1").url, "http://h:1")
        self.assertEqual(self.settings(self.project, FERRY_PORT="45555").url, "http://127.0.0.1:45555")

    def serve_info(self, pid, url="http://127.0.0.1:45600"):
        """FERRY_HOME/server.json as `ferry serve` writes it (cli/commands/serve-run.ts)."""
        with open(os.path.join(self.home, "server.json"), "w", encoding="utf-8") as handle:
            json.dump({"pid": pid, "url": url, "startedAt": 1}, handle)

    def test_without_a_dev_the_ferry_serve_of_ferry_home_wherever_it_listens(self):
        serve = self.sleeper("serve")
        self.serve_info(serve.pid)
        self.assertEqual(self.settings(self.tmp.name).url, "http://127.0.0.1:45600")
        # The project's running dev comes first; FERRY_PORT before both.
        self.lock(self.project, self.dev.pid)
        self.assertEqual(self.settings(self.project).url, "http://127.0.0.1:45123")
        self.assertEqual(self.settings(self.tmp.name, FERRY_PORT="45555").url, "http://127.0.0.1:45555")

    def test_a_server_json_whose_serve_is_gone_or_another_program_is_ignored(self):
        self.serve_info(self.gone_pid())
        self.assertEqual(self.settings(self.tmp.name).url, "http://127.0.0.1:8888")
        self.serve_info(self.sleeper().pid)
        self.assertEqual(self.settings(self.tmp.name).url, "http://127.0.0.1:8888")
        with open(os.path.join(self.home, "server.json"), "w", encoding="utf-8") as handle:
            handle.write("not json")
        self.assertEqual(self.settings(self.tmp.name).url, "http://127.0.0.1:8888")

    def test_unreachable_names_the_settings_that_point_elsewhere(self):
        with self.assertRaises(FerryClientError) as raised:
            Platform("http://127.0.0.1:1", "k").request("GET", "/v2/x/health", timeout=5)
        message = str(raised.exception)
        self.assertIn("cannot reach the Ferry platform at http://127.0.0.1:1", message)
        self.assertIn("FERRY_API_URL", message)
        self.assertIn("FERRY_PORT", message)


if __name__ == "__main__":
    unittest.main()
