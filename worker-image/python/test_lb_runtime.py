"""End to end: `python -m ferry.worker` in load-balanced mode (FERRY_MODE=lb) serving real HTTP."""

import json
import os
import re
import shutil
import tempfile
import textwrap
import unittest
import urllib.error
import urllib.request

from fake_platform import WorkerProcess
from ferry.client import EndpointClient, Platform

APP = textwrap.dedent(
    '''
    import asyncio
    from ferry import Endpoint

    api = Endpoint(name="my-api", cpu="2-8", workers=(1, 3))


    @api.post("/process")
    def process(input_data):
        """Echo the input with a count."""
        return {"received": input_data, "keys": len(input_data)}


    @api.get("/items/{item_id}")
    def get_item(item_id: int, q=None):
        return {"item_id": item_id, "q": q}


    @api.put("/async/{name}")
    async def put_async(name, value):
        await asyncio.sleep(0.01)
        return {"name": name, "value": value}


    @api.post("/add")
    def add(x: int, y: float = 0.0):
        return {"sum": x + y}


    @api.delete("/fail")
    def fail():
        raise RuntimeError("route exploded")


    @api.delete("/async-fail")
    async def async_fail():
        raise ValueError("async route exploded")


    @api.get("/search")
    def search(tags: list, options: dict = None, limit: int = None, exact: bool = False):
        return {"tags": tags, "options": options, "limit": limit, "exact": exact}


    @api.get("/needs-package")
    def needs_package():
        import package_nobody_installed_xyz
    '''
)


def request(base, method, path, body=None, raw=None, headers=None):
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    req = urllib.request.Request(base + path, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    for name, value in (headers or {}).items():
        req.add_header(name, value)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        with err:
            return err.code, json.loads(err.read())


class LoadBalancedWorkerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ferry-lb-test-")
        with open(os.path.join(cls.tmp, "lb_worker.py"), "w") as f:
            f.write(APP)
        cls.worker = WorkerProcess(
            {
                "FERRY_MODE": "lb",
                "FERRY_APP_DIR": cls.tmp,
                "FERRY_MODULE": "lb_worker",
                "FERRY_VARIABLE": "api",
                "FERRY_PORT": "0",  # the worker prints the port it got
            }
        )
        try:
            out = cls.worker.wait_output(" on http://")
        except AssertionError:
            cls.worker.close()
            raise
        port = re.search(r"on http://127\.0\.0\.1:(\d+)", out).group(1)
        cls.base = f"http://127.0.0.1:{port}"

    @classmethod
    def tearDownClass(cls):
        cls.worker.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_post_route_gets_json_body_as_kwargs(self):
        status, body = request(self.base, "POST", "/process", {"input_data": {"a": 1, "b": 2}})
        self.assertEqual(status, 200)
        self.assertEqual(body, {"received": {"a": 1, "b": 2}, "keys": 2})

    def test_get_route_gets_path_and_query(self):
        self.assertEqual(request(self.base, "GET", "/items/42?q=red"), (200, {"item_id": 42, "q": "red"}))
        self.assertEqual(request(self.base, "GET", "/items/7"), (200, {"item_id": 7, "q": None}))

    def test_a_query_parameter_the_route_does_not_take_is_left_out(self):
        # A cache-buster or tracking parameter, as FastAPI (Flash) leaves it; a missing one is still a 400.
        self.assertEqual(request(self.base, "GET", "/items/42?q=red&_=1700000000"), (200, {"item_id": 42, "q": "red"}))
        self.assertEqual(request(self.base, "GET", "/ping?probe=lb"), (200, {"status": "healthy"}))

    def test_async_route(self):
        status, body = request(self.base, "PUT", "/async/x", {"value": [1, 2]})
        self.assertEqual((status, body), (200, {"name": "x", "value": [1, 2]}))

    def test_the_clients_query_arguments_reach_a_get_route_as_sent(self):
        # docs/python.md: a remote call of a GET route sends its arguments as the query string, a
        # list or dict (and None) as JSON text; the route gets the values, not that text.
        client = EndpointClient(Platform(self.base, None), id="my-api")
        client._lb_base = self.base  # where the lookup would point it (a deployed endpoint's url)
        self.assertEqual(
            client.request("GET", "/search", {"tags": ["a", 1], "options": {"k": [2]}, "limit": None, "exact": True}),
            {"tags": ["a", 1], "options": {"k": [2]}, "limit": None, "exact": True},
        )
        self.assertEqual(
            client.request("GET", "/search", {"tags": [], "options": None}),
            {"tags": [], "options": None, "limit": None, "exact": False},
        )

    def test_a_list_parameter_takes_a_repeated_or_single_query_key(self):
        self.assertEqual(
            request(self.base, "GET", "/search?tags=a&tags=b"),
            (200, {"tags": ["a", "b"], "options": None, "limit": None, "exact": False}),
        )
        self.assertEqual(
            request(self.base, "GET", "/search?tags=a"),
            (200, {"tags": ["a"], "options": None, "limit": None, "exact": False}),
        )

    def test_a_dict_parameter_that_is_not_a_json_object_is_a_400(self):
        status, body = request(self.base, "GET", "/search?tags=a&options=k")
        self.assertEqual(status, 400)
        self.assertIn("'options' must be dict", body["error"])
        status, body = request(self.base, "GET", "/search?tags=%7B%22a%22%3A1%7D")  # {"a":1} for a list
        self.assertEqual(status, 400)
        self.assertIn("'tags' must be list", body["error"])

    def test_ping(self):
        self.assertEqual(request(self.base, "GET", "/ping"), (200, {"status": "healthy"}))

    def test_unknown_route_is_404(self):
        status, body = request(self.base, "GET", "/nope")
        self.assertEqual(status, 404)
        self.assertIn("no route for GET /nope", body["error"])

    def test_wrong_method_is_405_with_the_allow_header(self):
        # RFC 9110 15.5.6: a 405 carries Allow, as Starlette's (Flash's FastAPI) does.
        for method, path, allowed in (("GET", "/process", "POST"), ("DELETE", "/items/42", "GET, HEAD")):
            with self.subTest(method=method, path=path):
                req = urllib.request.Request(self.base + path, method=method)
                with self.assertRaises(urllib.error.HTTPError) as caught:
                    urllib.request.urlopen(req, timeout=10)
                self.assertEqual(caught.exception.code, 405)
                self.assertEqual(caught.exception.headers["Allow"], allowed)
                body = json.loads(caught.exception.read())
                caught.exception.close()
                self.assertEqual(body["error"], f"method {method} not allowed for {path}; allowed: {allowed}")

    def test_bad_json_is_400(self):
        status, body = request(self.base, "POST", "/process", raw=b"{not json")
        self.assertEqual(status, 400)
        self.assertIn("not valid JSON", body["error"])

    def test_a_lone_surrogate_in_the_body_comes_back_as_its_escape(self):
        status, body = request(self.base, "POST", "/process", raw=b'{"input_data": {"a": "\\ud800"}}')
        self.assertEqual((status, body), (200, {"received": {"a": "\ud800"}, "keys": 1}))

    def test_a_body_nested_too_deep_is_400_not_a_dropped_request(self):
        raw = b'{"input_data":' + b"[" * 100000 + b"]" * 100000 + b"}"
        status, body = request(self.base, "POST", "/process", raw=raw, headers={"Content-Type": "text/plain"})
        self.assertEqual(status, 400)
        self.assertIn("at most 512 levels are accepted", body["error"])
        self.assertEqual(request(self.base, "GET", "/ping")[0], 200)

    def test_not_a_number_is_400_not_a_500_on_the_way_out(self):
        status, body = request(self.base, "POST", "/process", raw=b'{"input_data": {"x": NaN}}')
        self.assertEqual(status, 400)
        self.assertIn("NaN", body["error"])

    def test_head_answers_as_get_without_the_body(self):
        for path in ("/ping", "/items/42?q=red"):
            with self.subTest(path=path):
                status, get_body = request(self.base, "GET", path)
                req = urllib.request.Request(self.base + path, method="HEAD")
                with urllib.request.urlopen(req, timeout=10) as resp:
                    self.assertEqual(resp.status, status)
                    self.assertEqual(resp.headers["Content-Type"], "application/json")
                    self.assertEqual(int(resp.headers["Content-Length"]), len(json.dumps(get_body, ensure_ascii=False)))
                    self.assertEqual(resp.read(), b"")
        # A HEAD where there is no GET route is refused like any other method.
        req = urllib.request.Request(self.base + "/process", method="HEAD")
        with self.assertRaises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(req, timeout=10)
        self.assertEqual(caught.exception.code, 405)
        # The connection stays usable: the next request on the server still answers.
        self.assertEqual(request(self.base, "GET", "/items/7"), (200, {"item_id": 7, "q": None}))

    def test_missing_param_is_400(self):
        self.assertEqual(
            request(self.base, "POST", "/process", {"other": 1}),
            (400, {"error": "bad parameters for POST /process: missing required argument 'input_data'; "
                            "unexpected argument 'other' (it takes: input_data)"}),
        )

    def test_every_missing_unknown_and_mistyped_key_is_named_in_one_400(self):
        # In ferry dev's words for a queue route (cli/dev/inputs.ts), not Python's first bind() problem.
        self.assertEqual(
            request(self.base, "POST", "/add", {"y": "1", "z": 1, "w": 2}),
            (400, {"error": "bad parameters for POST /add: missing required argument 'x' (int); "
                            "'y' must be float, got str \"1\"; unexpected arguments 'z', 'w' (it takes: x, y)"}),
        )

    def test_bad_path_param_type_is_400(self):
        status, body = request(self.base, "GET", "/items/abc")
        self.assertEqual(status, 400)
        self.assertIn("'item_id' must be int", body["error"])

    def test_a_body_value_of_another_type_than_its_hint_is_400_not_the_handlers_500(self):
        self.assertEqual(
            request(self.base, "POST", "/add", {"x": "abc"}),
            (400, {"error": "bad parameters for POST /add: 'x' must be int, got str \"abc\""}),
        )
        self.assertEqual(
            request(self.base, "POST", "/add", {"x": 2.5, "y": "1"}),
            (400, {"error": "bad parameters for POST /add: 'x' must be int, got float 2.5; 'y' must be float, got str \"1\""}),
        )
        self.assertEqual(request(self.base, "POST", "/add", {"x": 2, "y": 1}), (200, {"sum": 3}))

    def test_handler_exception_is_500_with_message(self):
        status, body = request(self.base, "DELETE", "/fail")
        self.assertEqual((status, body), (500, {"error": "route exploded"}))
        self.worker.wait_output("RuntimeError: route exploded")

    def test_a_failing_route_prints_the_users_frames_not_the_runtimes(self):
        # What the worker prints is what `ferry dev` shows and `ferry logs` keeps: the user's file and
        # line, not the runtime's (ferry/lb.py), nor asyncio's and concurrent.futures' that run an
        # async route on the server's loop.
        for path, last in (("/fail", "RuntimeError: route exploded"), ("/async-fail", "ValueError: async route exploded")):
            self.assertEqual(request(self.base, "DELETE", path)[0], 500)
            out = self.worker.wait_output(last)
            end = out.rindex(last)
            printed = out[out.rindex("Traceback", 0, end) : end]
            self.assertIn(f'File "{os.path.join(self.tmp, "lb_worker.py")}"', printed)
            self.assertNotIn(os.path.join("ferry", "lb.py"), printed)
            self.assertNotIn("asyncio", printed)
            self.assertNotIn("concurrent", printed)

    def test_a_missing_package_in_a_route_is_followed_by_where_to_declare_it(self):
        status, body = request(self.base, "GET", "/needs-package")
        self.assertEqual((status, body), (500, {"error": "No module named 'package_nobody_installed_xyz'"}))
        self.worker.wait_output(
            "ferry worker: hint: 'package_nobody_installed_xyz' is not installed where this worker runs: "
            "if it is a package, add it to the endpoint's dependencies=[...] or to requirements.txt"
        )

    def test_no_code_execution_route(self):
        status, _ = request(self.base, "POST", "/execute", {"function_code": "print(1)"})
        self.assertEqual(status, 404)


class LoadBalancedLifecycleTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ferry-lb-test-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        with open(os.path.join(self.tmp, "lb_worker.py"), "w") as f:
            f.write(APP + "\nnot_an_endpoint = 3\n")

    def start(self, **extra):
        env = {"FERRY_MODE": "lb", "FERRY_APP_DIR": self.tmp, "FERRY_MODULE": "lb_worker", "FERRY_PORT": "0"}
        env.update(extra)
        worker = WorkerProcess(env)
        self.addCleanup(worker.close)
        return worker

    def test_sigterm_exits_0(self):
        worker = self.start(FERRY_VARIABLE="api")
        worker.wait_output(" on http://")
        worker.terminate()
        self.assertEqual(worker.wait_exit(), 0)
        self.assertIn("stopped", worker.output)

    def test_answered_requests_keep_to_a_line_budget_and_refused_ones_always_get_a_line(self):
        worker = self.start(FERRY_VARIABLE="api")
        out = worker.wait_output(" on http://")
        base = "http://127.0.0.1:" + re.search(r"on http://127\.0\.0\.1:(\d+)", out).group(1)
        for _ in range(30):
            self.assertEqual(request(base, "GET", "/ping")[0], 200)
        self.assertEqual(request(base, "GET", "/nope")[0], 404)
        worker.terminate()
        self.assertEqual(worker.wait_exit(), 0)
        output = worker.output
        shown = output.count('"GET /ping HTTP/1.1" 200')
        left_out = sum(int(n) for n in re.findall(r"(\d+) more requests? answered in the last", output))
        # Every request is accounted for, a line each up to logs.LineBudget's 10 a second.
        self.assertEqual(shown + left_out, 30)
        self.assertGreater(left_out, 0)
        self.assertIn('"GET /nope HTTP/1.1" 404', output)

    def test_variable_that_is_not_an_endpoint_is_a_startup_error(self):
        worker = self.start(FERRY_VARIABLE="not_an_endpoint")
        self.assertEqual(worker.wait_exit(), 2)
        self.assertIn("FERRY_VARIABLE 'not_an_endpoint'", worker.output)

    def test_missing_port_is_a_startup_error(self):
        worker = self.start(FERRY_VARIABLE="api", FERRY_PORT="")
        self.assertEqual(worker.wait_exit(), 2)
        self.assertIn("FERRY_PORT is not set", worker.output)

    def base_of(self, worker):
        out = worker.wait_output(" on http://")
        return "http://127.0.0.1:" + re.search(r"on http://127\.0\.0\.1:(\d+)", out).group(1)

    def test_with_a_front_door_secret_only_requests_carrying_it_run(self):
        for source in ("env", "file"):
            with self.subTest(source=source):
                secret = "s3cr3t-" + source
                if source == "env":
                    worker = self.start(FERRY_VARIABLE="api", FERRY_LB_SECRET=secret)
                else:
                    path = os.path.join(self.tmp, "lb-secret")
                    with open(path, "w") as f:
                        f.write(secret + "\n")
                    worker = self.start(FERRY_VARIABLE="api", FERRY_LB_SECRET_FILE=path)
                base = self.base_of(worker)
                body = {"input_data": {"a": 1}}
                # Another endpoint's code on the same host knows the port, not the secret.
                for headers in ({}, {"X-Ferry-Lb-Secret": "wrong"}, {"X-Ferry-Lb-Secret": secret + "x"}):
                    status, answer = request(base, "POST", "/process", body, headers=headers)
                    self.assertEqual((status, answer["error"]), (403, "requests reach this worker through the platform only"))
                    self.assertEqual(request(base, "GET", "/ping", headers=headers)[0], 403)
                good = {"X-Ferry-Lb-Secret": secret}
                self.assertEqual(request(base, "POST", "/process", body, headers=good), (200, {"received": {"a": 1}, "keys": 1}))
                self.assertEqual(request(base, "GET", "/ping", headers=good)[0], 200)

    def test_an_unreadable_secret_file_is_a_startup_error(self):
        worker = self.start(FERRY_VARIABLE="api", FERRY_LB_SECRET_FILE=os.path.join(self.tmp, "missing"))
        self.assertEqual(worker.wait_exit(), 2)
        self.assertIn("FERRY_LB_SECRET_FILE", worker.output)


if __name__ == "__main__":
    unittest.main()
