"""The runtime's cheap paths: keep-alive HTTP (ferry/transport.py), reused threads, the next job-take
overlapping the last job-done, and the cached handler signature."""

import json
import os
import shutil
import socket
import tempfile
import textwrap
import threading
import time
import unittest
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from unittest import mock

from fake_platform import FakePlatform, WorkerProcess
from ferry import transport
from ferry.invoke import bind_kwargs, signature_of
from ferry.queue_runtime import DaemonThreads, JobStopped, clear_pending_exception, raise_in_thread
from ferry.transport import Connections, ResponseError


def _serve_garbage_once(test):
    """The URL of a listener that answers one request with bytes that are not HTTP, then closes."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    test.addCleanup(listener.close)

    def garbage():
        sock, _ = listener.accept()
        sock.recv(65536)
        sock.sendall(b"SMTP ready\r\n\r\n")
        sock.close()

    threading.Thread(target=garbage, daemon=True).start()
    return f"http://127.0.0.1:{listener.getsockname()[1]}/x"


class _Server:
    """An HTTP/1.1 server whose answers a test scripts by path; counts connections."""

    def __init__(self):
        self.connections = 0
        self.requests = []
        self.answered_once = set()  # paths of /once/... already answered with their failure
        self.take_answer = b"[]"  # what a job-take(-batch) path answers
        # (status, body) a job-done-batch path answers, given the parsed request: every job taken.
        self.batch_answer = lambda batch: (200, json.dumps(
            {"jobs": [{"id": j["id"], "statusCode": 200, "status": "COMPLETED"} for j in batch["jobs"]]}).encode())
        self.hold_ended = threading.Event()  # the client closed a /hold connection
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self):
                super().setup()
                server.connections += 1

            def log_message(self, *args):
                pass

            def do_GET(self):
                self._answer(b"")

            def do_POST(self):
                self._answer(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

            def _answer(self, body):
                server.requests.append((self.command, self.path, dict(self.headers), body))
                if self.path == "/chunked":
                    self.send_response(200)
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for part in (b'{"a":', b" 1}"):
                        self.wfile.write(b"%x;ext=1\r\n%s\r\n" % (len(part), part))
                    self.wfile.write(b"0\r\nX-Trailer: t\r\n\r\n")
                elif self.path == "/until-close":
                    self.send_response(200)
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.wfile.write(b"all of it")
                    self.close_connection = True
                elif self.path == "/then-close":  # keep-alive answer, then the server drops the connection
                    self._send(200, b"bye")
                    self.close_connection = True
                elif self.path == "/hang-up":  # no answer at all
                    self.close_connection = True
                elif self.path.startswith("/once/"):  # /once/<status or hang-up>/...: that once, then 200
                    what = self.path.split("/")[2]
                    if self.path in server.answered_once:
                        self._send(200, b"{}")
                    elif what == "hang-up":
                        server.answered_once.add(self.path)
                        self.close_connection = True
                    else:
                        server.answered_once.add(self.path)
                        self._send(int(what), b'{"error": "once"}')
                elif "/retry-after/" in self.path:  # .../retry-after/<value or none>/...: a 429
                    value = urllib.parse.unquote(self.path.split("/retry-after/")[1].split("/")[0])
                    self.send_response(429)
                    if value != "none":
                        self.send_header("Retry-After", value)
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"{}")
                elif self.path.startswith("/status/"):  # /status/<code>/...
                    status = int(self.path.split("/")[2])
                    # A 204 has no body (RFC 9110 §15.3.5): one sent anyway is left unread by the
                    # client, whose close then resets the connection this server still reads.
                    self._send(status, b"" if status == 204 else b'{"error": "scripted"}')
                elif self.path.startswith("/hold"):  # no answer; wait for the client to close
                    self.rfile.read(1)
                    server.hold_ended.set()
                    self.close_connection = True
                elif "/job-done-batch" in self.path:
                    self._send(*server.batch_answer(json.loads(body)))
                elif "/job-take" in self.path:
                    self._send(200, server.take_answer)
                elif self.path == "/empty":
                    self._send(204, b"")
                elif self.path == "/missing":
                    self._send(404, b'{"error": "nope"}')
                else:
                    self._send(200, b"echo:" + body)

            def _send(self, status, data):
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class TransportTest(unittest.TestCase):
    def setUp(self):
        self.server = _Server()
        self.addCleanup(self.server.close)
        self.conns = Connections()
        self.addCleanup(self.conns.close)

    def test_requests_share_one_connection(self):
        for i in range(20):
            status, data, _ = self.conns.request("POST", self.server.url + f"/x?i={i}", b'{"n": %d}' % i,
                                                 {"Authorization": "tok", "Content-Type": "application/json"})
            self.assertEqual((status, data), (200, b'echo:{"n": %d}' % i))
        self.assertEqual(self.server.connections, 1)
        self.assertEqual(self.conns.opened, 1)
        method, path, headers, body = self.server.requests[-1]
        self.assertEqual((method, path, body), ("POST", "/x?i=19", b'{"n": 19}'))
        self.assertEqual(headers["Authorization"], "tok")
        self.assertEqual(headers["Content-Length"], "9")
        self.assertEqual(headers["Host"], self.server.url.split("//")[1])

    def test_chunked_answer(self):
        self.assertEqual(self.conns.request("GET", self.server.url + "/chunked")[:2], (200, b'{"a": 1}'))
        self.assertEqual(self.conns.request("GET", self.server.url + "/x")[:2], (200, b"echo:"))
        self.assertEqual(self.server.connections, 1)  # the chunked answer left the connection usable

    def test_answer_read_to_close_is_not_reused(self):
        self.assertEqual(self.conns.request("GET", self.server.url + "/until-close")[:2], (200, b"all of it"))
        self.assertEqual(self.conns.request("GET", self.server.url + "/x")[:2], (200, b"echo:"))
        self.assertEqual(self.conns.opened, 2)

    def test_answers_come_with_their_headers(self):
        status, _, headers = self.conns.request("GET", self.server.url + "/retry-after/3/x")
        self.assertEqual((status, headers[b"retry-after"], headers[b"content-length"]), (429, b"3", b"2"))
        self.assertNotIn(b"retry-after", self.conns.request("GET", self.server.url + "/x")[2])

    def test_no_body_and_error_statuses(self):
        self.assertEqual(self.conns.request("GET", self.server.url + "/empty")[:2], (204, b""))
        self.assertEqual(self.conns.request("GET", self.server.url + "/missing")[:2], (404, b'{"error": "nope"}'))
        self.assertEqual(self.conns.opened, 1)

    def test_connection_closed_by_the_server_is_replaced(self):
        self.assertEqual(self.conns.request("GET", self.server.url + "/then-close")[:2], (200, b"bye"))
        time.sleep(0.05)  # the server's FIN arrives: the idle connection is seen closed before reuse
        self.assertEqual(self.conns.request("POST", self.server.url + "/x", b"again")[:2], (200, b"echo:again"))
        self.assertEqual(self.conns.opened, 2)

    def test_idle_connection_check_sees_a_close_or_stray_bytes(self):
        for peer_does in ("nothing", "close", "send"):
            mine, peer = socket.socketpair()
            self.addCleanup(mine.close)
            self.addCleanup(peer.close)
            mine.settimeout(30)  # as after a request: the check must neither block nor change it
            if peer_does == "close":
                peer.close()
            elif peer_does == "send":
                peer.sendall(b"HTTP/1.1 408 Request Timeout\r\n\r\n")
            self.assertEqual(transport._Conn(mine, 30).usable(), peer_does == "nothing", peer_does)
            self.assertEqual(mine.gettimeout(), 30)

    def test_stale_connection_that_fails_the_request_is_retried_once(self):
        self.assertEqual(self.conns.request("GET", self.server.url + "/x")[:2], (200, b"echo:"))
        with mock.patch.object(transport._Conn, "usable", return_value=True):
            # A reused connection dies with no answer: one more try on a new connection...
            with self.assertRaises(ConnectionError):
                self.conns.request("GET", self.server.url + "/hang-up")
        self.assertEqual(self.conns.opened, 2)  # ...which fails too: the caller sees the error
        self.assertEqual(sum(1 for r in self.server.requests if r[1] == "/hang-up"), 2)

    def test_new_connection_failure_is_not_retried(self):
        with self.assertRaises(ConnectionError):
            self.conns.request("GET", self.server.url + "/hang-up")
        self.assertEqual(sum(1 for r in self.server.requests if r[1] == "/hang-up"), 1)

    def test_idle_connection_past_reuse_age_is_dropped(self):
        now = [100.0]
        conns = Connections(clock=lambda: now[0])
        self.addCleanup(conns.close)
        conns.request("GET", self.server.url + "/x")
        now[0] += transport.IDLE_REUSE_SEC + 1
        conns.request("GET", self.server.url + "/x")
        self.assertEqual(conns.opened, 2)

    def test_a_request_that_ends_after_close_closes_its_connection(self):
        # A request still out when its pool is closed (in the runtime tests, the job-stop long poll
        # when the test closes the worker's connections) gave its connection back to the closed
        # pool, where nothing would ever close it.
        used = []
        exchange = transport._Conn.exchange

        def closed_meanwhile(conn, *args):
            used.append(conn)
            self.conns.close()  # while this request waits for its answer
            return exchange(conn, *args)

        with mock.patch.object(transport._Conn, "exchange", closed_meanwhile):
            self.assertEqual(self.conns.request("GET", self.server.url + "/x")[:2], (200, b"echo:"))
        self.addCleanup(used[0].close)  # the old code's leak must not outlive the test
        self.assertEqual(used[0].sock.fileno(), -1, "the connection was kept after close()")

    def test_garbage_answer_is_a_connection_error(self):
        url = _serve_garbage_once(self)
        with self.assertRaises(ResponseError):
            self.conns.request("GET", url)

    def test_bad_urls_are_refused_before_sending(self):
        with self.assertRaises(ValueError):
            self.conns.request("GET", "ftp://example.com/x")
        with self.assertRaises(ValueError):
            self.conns.request("GET", self.server.url + "/a b")
        self.assertEqual(self.server.requests, [])

    def test_a_configured_proxy_is_honoured(self):
        with mock.patch.dict(os.environ, {"http_proxy": self.server.url, "no_proxy": ""}):
            status, data, _ = Connections().request("GET", "http://worker-platform.invalid/v2/x")
            # An error answer through urllib (HTTPError) comes with its headers too, as ours do.
            limited = Connections().request("GET", "http://worker-platform.invalid/retry-after/7/x")
        self.assertEqual((limited[0], limited[2][b"retry-after"]), (429, b"7"))
        self.assertEqual(status, 200)
        self.assertEqual(self.server.requests[0][1], "http://worker-platform.invalid/v2/x")  # absolute URI


class ThreadsTest(unittest.TestCase):
    def test_threads_are_reused(self):
        threads = DaemonThreads()
        seen = set()
        for _ in range(30):
            done = threading.Event()
            threads.submit(lambda d=done: (seen.add(threading.get_ident()), d.set()))
            self.assertTrue(done.wait(5))
            time.sleep(0.002)  # let the thread get back to the idle list
        self.assertEqual(threads.started, len(seen))
        self.assertLessEqual(threads.started, 2)

    def test_busy_threads_do_not_delay_new_work(self):
        threads = DaemonThreads()
        release = threading.Event()
        threads.submit(release.wait)
        ran = threading.Event()
        threads.submit(ran.set)
        self.assertTrue(ran.wait(5))
        release.set()
        self.assertEqual(threads.started, 2)

    def test_a_stop_that_did_not_fire_is_cleared(self):
        outcome = []
        blocked = threading.Event()
        release = threading.Event()

        def job():
            try:
                blocked.set()
                release.wait()  # blocked in C: a scheduled exception cannot fire until it returns
                total = 0
                for i in range(100_000):  # plenty of bytecode boundaries for a pending exception
                    total += i
                outcome.append("ran to the end")
            except JobStopped:
                outcome.append("stopped")

        for clear in (False, True):
            outcome.clear()
            blocked.clear()
            release.clear()
            thread = threading.Thread(target=job)
            thread.start()
            self.assertTrue(blocked.wait(5))
            time.sleep(0.05)
            self.assertTrue(raise_in_thread(thread.ident, JobStopped))
            if clear:
                clear_pending_exception(thread.ident)
            release.set()
            thread.join(5)
            self.assertEqual(outcome, ["ran to the end"] if clear else ["stopped"])


class SignatureCacheTest(unittest.TestCase):
    def test_bound_methods_and_functions(self):
        class Model:
            def predict(self, x, *, job):
                return x

        a, b = Model(), Model()
        self.assertIs(signature_of(a.predict), signature_of(b.predict))
        self.assertEqual(list(signature_of(a.predict).parameters), ["x", "job"])
        self.assertEqual(list(signature_of(Model.predict).parameters), ["self", "x", "job"])
        self.assertEqual(bind_kwargs(a.predict, {"x": 1}, {"id": "j"}), {"x": 1, "job": {"id": "j"}})


APP = textwrap.dedent(
    '''
    from ferry import Endpoint

    @Endpoint(name="echo")
    def echo(**kwargs):
        return kwargs
    '''
)


class WorkerConnectionsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ferry-speed-test-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        with open(os.path.join(self.tmp, "echo_worker.py"), "w") as f:
            f.write(APP)
        self.platform = FakePlatform()
        self.addCleanup(self.platform.close)

    def start(self):
        env = dict(self.platform.env("wS"), FERRY_APP_DIR=self.tmp, FERRY_MODULE="echo_worker", FERRY_TARGET="echo",
                   RUNPOD_PING_INTERVAL="100")
        worker = WorkerProcess(env)
        self.addCleanup(worker.close)
        return worker

    def test_many_jobs_cost_a_few_connections(self):
        self.start()
        for i in range(30):
            self.platform.add_job(f"job-{i}", {"i": i})
        for i in range(30):
            self.assertEqual(self.platform.done_for(f"job-{i}")["body"], {"output": {"i": i}})
        # job-take, job-done, the job-stop poll and ping each keep a connection alive; 30 jobs
        # over new connections would have needed 60 and more.
        self.assertLessEqual(self.platform.connections, 8)

    def test_next_take_overlaps_the_last_job_done(self):
        self.platform.done_hold_sec = 0.6
        worker = self.start()
        self.platform.add_job("job-a", {"n": 1})
        done_a = self.platform.wait_for(
            lambda calls: next((c for c in calls if c["op"] == "job-done" and c["job_id"] == "job-a"), None),
            what="job-done for job-a",
        )
        # While job-a's result is still being answered, the platform asks it to stop (it does so
        # for a job it just completed); nothing is left to stop.
        self.platform.stop("job-a")
        self.platform.add_job("job-b", {"n": 2})
        done_b = self.platform.done_for("job-b")
        # max_concurrency 1, yet a job-take went out while job-a was still held (its result on the way).
        overlapping = [c for c in self.platform.of("job-take")
                       if abs(c["at"] - done_a["at"]) < 0.5 and c["query"]["job_in_progress"] == "1"]
        self.assertTrue(overlapping, f"no job-take while job-a's job-done was held: {self.platform.summary()}")
        self.assertLess(done_b["at"] - done_a["at"], 1.1)  # not one held job-done after the other
        worker.wait_output("job job-a completed")
        self.assertNotIn("stopping job job-a", worker.output)


if __name__ == "__main__":
    unittest.main()
