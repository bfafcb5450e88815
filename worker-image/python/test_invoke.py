"""Unit tests: input → kwargs binding, class dispatch, error format, log routing, LB router, URLs."""

import asyncio
import contextvars
import io
import json
import os
import shutil
import tempfile
import threading
import typing
import unittest

import ferry
from ferry import Endpoint, logs
from ferry.invoke import (
    ASYNC,
    ASYNC_GEN,
    SYNC,
    SYNC_GEN,
    Handler,
    InputError,
    OutputError,
    bind_kwargs,
    error_body,
    kind_of,
    to_json_bytes,
)
from ferry.lb import Router
from ferry.protocol import WorkerApi, add_query


def generate(prompt, steps=4):
    return prompt, steps


def with_job(prompt, *, job):
    return prompt, job


def positional_job(job):
    return job


def build(prompt: str, seed: "int", steps=4, *, style: typing.Optional[str] = None, job):
    return prompt


def loose(n, **extra):
    return n


class BindingTest(unittest.TestCase):
    def test_input_becomes_kwargs(self):
        self.assertEqual(bind_kwargs(generate, {"prompt": "a", "steps": 4}), {"prompt": "a", "steps": 4})
        self.assertEqual(bind_kwargs(generate, {"prompt": "a"}), {"prompt": "a"})

    def test_missing_input_is_empty(self):
        self.assertEqual(bind_kwargs(lambda: 1, None), {})

    def test_non_object_input(self):
        with self.assertRaises(InputError) as caught:
            bind_kwargs(generate, ["a"])
        self.assertIn("must be a JSON object of keyword arguments for generate(prompt, steps=4), got list", str(caught.exception))

    def test_wrong_kwargs_fail_with_the_signature(self):
        with self.assertRaises(InputError) as caught:
            bind_kwargs(generate, {"promt": "a"})
        message = str(caught.exception)
        self.assertIn("does not fit generate(prompt, steps=4)", message)
        self.assertIn("promt", message)
        with self.assertRaises(InputError):
            bind_kwargs(generate, {})  # missing required

    def test_every_missing_and_unexpected_key_is_named_at_once_in_ferry_devs_words(self):
        # As ferry dev names them (cli/dev/inputs.ts), not inspect's first problem alone; the
        # keyword-only job is the runtime's to give, so it is neither missing nor one it takes.
        with self.assertRaises(InputError) as caught:
            bind_kwargs(build, {"promt": "a", "steps": 2, "sed": 1}, {"id": "j"})
        self.assertEqual(
            str(caught.exception),
            "the job input does not fit build(prompt: str, seed: 'int', steps=4, *, style: Optional[str] = None, job): "
            "missing required argument 'prompt' (str); missing required argument 'seed' (int); "
            "unexpected arguments 'promt', 'sed' (it takes: prompt, seed, steps, style)",
        )
        # A queue job's values are not checked against their hints (docs/python.md): the handler gets them.
        self.assertEqual(bind_kwargs(build, {"prompt": 1, "seed": "x"}, {"id": "j"})["seed"], "x")

    def test_defaults_make_keys_optional_and_kwargs_takes_any_other(self):
        with self.assertRaises(InputError) as caught:
            bind_kwargs(generate, {})
        self.assertEqual(
            str(caught.exception),
            "the job input does not fit generate(prompt, steps=4): missing required argument 'prompt'",
        )
        self.assertEqual(bind_kwargs(loose, {"n": 1, "a": 2, "b": 3}), {"n": 1, "a": 2, "b": 3})
        with self.assertRaises(InputError) as caught:
            bind_kwargs(loose, {"a": 2})
        self.assertEqual(
            str(caught.exception), "the job input does not fit loose(n, **extra): missing required argument 'n'"
        )

    def test_keys_a_function_cannot_take_by_name(self):
        def none():
            return 1

        def positional(a, /, b):
            return a

        for fn, payload, problem in (
            (none, {"x": 1}, "unexpected argument 'x' (it takes: none)"),
            (
                positional,
                {"a": 1},
                "positional-only argument 'a' cannot come from the input; missing required argument 'b'; "
                "unexpected argument 'a' (it takes: b)",
            ),
        ):
            with self.assertRaises(InputError) as caught:
                bind_kwargs(fn, payload)
            self.assertTrue(str(caught.exception).endswith(f": {problem}"), str(caught.exception))

    def test_keyword_only_job_receives_the_job(self):
        job = {"id": "j1", "input": {"prompt": "a"}}
        self.assertEqual(bind_kwargs(with_job, job["input"], job), {"prompt": "a", "job": job})
        with self.assertRaises(InputError) as caught:
            bind_kwargs(with_job, {"prompt": "a", "job": 1}, job)
        self.assertIn("clashes", str(caught.exception))

    def test_positional_job_is_an_ordinary_input_key(self):
        self.assertEqual(bind_kwargs(positional_job, {"job": 5}, {"id": "j"}), {"job": 5})

    def test_kinds(self):
        async def a():
            pass

        def g():
            yield

        async def ag():
            yield

        self.assertEqual([kind_of(f) for f in (generate, a, g, ag)], [SYNC, ASYNC, SYNC_GEN, ASYNC_GEN])


class Model:
    def __init__(self):
        self.loaded = True

    def predict(self, x):
        return x * 2

    def describe(self):
        return "model"

    def _private(self):
        pass


class Single:
    def run(self, x):
        return x


class HandlerTest(unittest.TestCase):
    def test_function_target(self):
        fn, kwargs = Handler(generate).prepare({"id": "1", "input": {"prompt": "p"}})
        self.assertIs(fn, generate)
        self.assertEqual(kwargs, {"prompt": "p"})

    def test_class_with_several_methods_needs_method(self):
        handler = Handler(Model)
        self.assertEqual(handler.methods, ["describe", "predict"])
        handler.start()
        instance = handler.instance
        fn, kwargs = handler.prepare({"id": "1", "input": {"method": "predict", "x": 3}})
        self.assertEqual((fn(**kwargs), kwargs), (6, {"x": 3}))
        handler.prepare({"id": "2", "input": {"method": "describe"}})
        self.assertIs(handler.instance, instance)  # instantiated once per worker
        with self.assertRaises(InputError) as caught:
            handler.prepare({"id": "3", "input": {"method": "train"}})
        self.assertEqual(str(caught.exception), "unknown method 'train' for Model; available: describe, predict")
        with self.assertRaises(InputError) as caught:
            handler.prepare({"id": "4", "input": {"x": 1}})
        self.assertIn('name one in input["method"]: describe, predict', str(caught.exception))

    def test_class_with_one_method_is_called_directly(self):
        handler = Handler(Single)
        fn, kwargs = handler.prepare({"id": "1", "input": {"x": 1}})
        self.assertEqual(fn(**kwargs), 1)
        _, kwargs = handler.prepare({"id": "1", "input": {"method": "run", "x": 2}})
        self.assertEqual(kwargs, {"x": 2})

    def test_class_without_public_methods(self):
        class Empty:
            def _hidden(self):
                pass

        with self.assertRaises(TypeError) as caught:
            Handler(Empty)
        self.assertIn("no public methods", str(caught.exception))


class ClassMethodBindingTest(unittest.TestCase):
    def test_a_class_methods_input_names_every_missing_and_unexpected_key(self):
        handler = Handler(Model)
        with self.assertRaises(InputError) as caught:
            handler.prepare({"input": {"method": "predict", "y": 1, "z": 2}})
        self.assertEqual(
            str(caught.exception),
            "the job input does not fit Model.predict(x): missing required argument 'x'; "
            "unexpected arguments 'y', 'z' (it takes: x)",
        )
        fn, kwargs = handler.prepare({"input": {"method": "describe"}})
        self.assertEqual((fn(**kwargs), kwargs), ("model", {}))


class ErrorFormatTest(unittest.TestCase):
    def test_exception_body_is_a_json_string(self):
        try:
            raise ValueError("bad value")
        except ValueError as exc:
            body = error_body(exc, "worker-7")
        self.assertEqual(list(body), ["error"])
        info = json.loads(body["error"])
        self.assertEqual(
            set(info), {"error_type", "error_message", "error_traceback", "hostname", "worker_id", "runpod_version"}
        )
        self.assertEqual(info["runpod_version"], f"ferry-{ferry.__version__}")
        self.assertEqual(info["error_type"], "<class 'ValueError'>")
        self.assertEqual(info["error_message"], "bad value")
        self.assertIn('raise ValueError("bad value")', info["error_traceback"])
        self.assertEqual(info["worker_id"], "worker-7")

    def test_input_errors_carry_no_traceback(self):
        info = json.loads(error_body(InputError("input is wrong"), "w")["error"])
        self.assertEqual((info["error_message"], info["error_traceback"]), ("input is wrong", ""))

    def test_output_errors_carry_no_traceback(self):
        try:
            to_json_bytes({"output": {1, 2}})
        except OutputError as exc:
            info = json.loads(error_body(exc, "w")["error"])
        self.assertIn("the handler's result is not JSON serializable", info["error_message"])
        self.assertEqual(info["error_traceback"], "")

    def test_empty_message_stays_empty_as_in_runpods_record(self):
        # RunPod's SDK sends str(err): "" for `raise KeyError()`; error_type still names the kind.
        info = json.loads(error_body(KeyError(), "w")["error"])
        self.assertEqual(info["error_message"], "")
        self.assertEqual(info["error_type"], "<class 'KeyError'>")

    def test_a_remote_error_without_a_message_names_the_type(self):
        from ferry.client import RemoteError

        err = RemoteError("ep", "j1", "FAILED", error_body(KeyError(), "w")["error"])
        self.assertEqual(str(err), "job j1 on ep ended FAILED: KeyError")

    def test_a_remote_error_from_a_returned_error_object_says_that_object(self):
        from ferry.client import RemoteError
        from ferry.queue_runtime import result_body

        # A handler returned {"error": {"code": 7}}: the job's error is that object's JSON text.
        err = RemoteError("ep", "j1", "FAILED", result_body({"error": {"code": 7}})["error"])
        self.assertEqual(str(err), 'job j1 on ep ended FAILED: {"code": 7}')
        self.assertEqual(err.error_message, '{"code": 7}')

    def test_results_must_be_json(self):
        self.assertEqual(json.loads(to_json_bytes({"output": "é"})), {"output": "é"})
        with self.assertRaises(OutputError):
            to_json_bytes({"output": {1, 2}})
        with self.assertRaises(OutputError):
            to_json_bytes({"output": float("nan")})

    def test_a_lone_surrogate_goes_back_as_the_escape_it_came_as(self):
        # json.loads('"\\ud800"') is valid JSON that UTF-8 cannot encode as it is.
        value = json.loads('{"text": "\\ud800 é"}')
        body = to_json_bytes({"output": value})
        self.assertEqual(body, b'{"output": {"text": "\\ud800 \\u00e9"}}')
        self.assertEqual(json.loads(body), {"output": value})
        # The common path stays UTF-8 text, not escapes.
        self.assertEqual(to_json_bytes({"output": "é"}), '{"output": "é"}'.encode())


class LogRoutingTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def test_writes_route_by_job_context(self):
        echo = io.StringIO()
        passthrough = io.StringIO()
        stream = logs.RoutingStream(passthrough)
        log_a = logs.JobLog("job-a", echo, self.tmp)
        log_b = logs.JobLog("job-b", echo, self.tmp)

        def write_as(log, text):
            logs.activate(log)
            stream.write(text)

        threads = [
            threading.Thread(target=contextvars.copy_context().run, args=(write_as, log_a, "from a\npartial")),
            threading.Thread(target=contextvars.copy_context().run, args=(write_as, log_b, "from b\n")),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stream.write("no job\n")
        log_a.close()
        log_b.close()
        self.assertEqual(passthrough.getvalue(), "no job\n")
        lines = sorted(echo.getvalue().splitlines())
        self.assertEqual(lines, ["[job-a] from a", "[job-a] partial", "[job-b] from b"])
        with open(os.path.join(self.tmp, "job-a.log")) as f:
            self.assertEqual(f.read(), "from a\npartial")

    def test_job_ids_never_become_paths(self):
        self.assertEqual(logs.safe_file_name("../../etc/passwd"), ".._.._etc_passwd")
        self.assertEqual(logs.safe_file_name(".."), "_")


class RouterTest(unittest.TestCase):
    def setUp(self):
        api = Endpoint(name="api")

        @api.get("/items/{item_id}")
        def item(item_id: int, verbose: bool = False, tags=None):
            return {"item_id": item_id, "verbose": verbose, "tags": tags}

        @api.post("/echo")
        async def echo(**kwargs):
            await asyncio.sleep(0)
            return kwargs

        @api.get("/stream")
        def stream():
            yield 1
            yield 2

        self.router = Router(api)

    def test_query_and_path_params_are_converted_by_annotation(self):
        status, body = self.router.handle("GET", "/items/5?verbose=true&tags=a&tags=b", b"")
        self.assertEqual((status, body), (200, {"item_id": 5, "verbose": True, "tags": ["a", "b"]}))
        self.assertEqual(self.router.handle("GET", "/items/5?verbose=maybe", b"")[0], 400)

    def test_json_body_and_async_handler(self):
        self.assertEqual(self.router.handle("POST", "/echo", b'{"a": [1]}'), (200, {"a": [1]}))
        self.assertEqual(self.router.handle("POST", "/echo", b""), (200, {}))
        status, body = self.router.handle("POST", "/echo", b"[1]")
        self.assertEqual(status, 400)
        self.assertIn("must be a JSON object", body["error"])

    def test_a_body_nested_too_deep_is_400_naming_the_limit(self):
        for body in (b'{"a":' + b"[" * 100000 + b"]" * 100000 + b"}", b"{" + b'"a":[' * 512 + b"]" * 512 + b"}"):
            status, answer = self.router.handle("POST", "/echo", body)
            self.assertEqual(status, 400)
            self.assertIn("at most 512 levels are accepted", answer["error"])
        self.assertIn("nested 513 levels deep", answer["error"])
        # 512 levels pass; brackets inside strings are not nesting.
        deep = b'{"a":' + b"[" * 511 + b"]" * 511 + b', "s": "' + b"[" * 600 + b'"}'
        self.assertEqual(self.router.handle("POST", "/echo", deep)[0], 200)

    def test_numbers_json_does_not_have_are_400_naming_them(self):
        for token in ("NaN", "Infinity", "-Infinity", "1e400", "-1E+400"):
            status, answer = self.router.handle("POST", "/echo", b'{"x": [1.5, %s]}' % token.encode())
            self.assertEqual(status, 400, token)
            self.assertIn("not valid JSON", answer["error"])
            self.assertIn(token, answer["error"])
        self.assertEqual(self.router.handle("POST", "/echo", b'{"x": [1e308, -2.5e-400]}'), (200, {"x": [1e308, -0.0]}))

    def test_generators_are_collected(self):
        self.assertEqual(self.router.handle("GET", "/stream", b""), (200, [1, 2]))

    def test_ping_and_unknown(self):
        self.assertEqual(self.router.handle("GET", "/ping", b""), (200, {"status": "healthy"}))
        self.assertEqual(self.router.handle("POST", "/nothing", b"")[0], 404)

    def test_an_empty_path_parameter_is_no_route_at_any_method(self):
        # ferry dev answers the same (test/unit/dev-server-not-allowed.test.ts): a parameter takes one
        # character or more, an encoded slash among them, and /items/ is a 404 however it is asked.
        api = Endpoint(name="api3")
        api.get("/items/{item_id}")(lambda item_id: item_id)
        api.put("/items/{item_id}")(lambda item_id, value=None: item_id)
        api.get("/shelves/{shelf}/items")(lambda shelf: shelf)
        router = Router(api)
        for method, path in (("GET", "/items/"), ("GET", "/items/?full=1"), ("HEAD", "/items/"), ("PUT", "/items/"),
                             ("DELETE", "/items/"), ("GET", "/shelves//items"), ("POST", "/shelves//items")):
            with self.subTest(method=method, path=path):
                self.assertEqual(
                    router.handle(method, path, b""), (404, {"error": f"no route for {method} {path.split('?')[0]}"}))
        for path, value in (("/items/x", "x"), ("/items/%2F", "/"), ("/shelves/s/items", "s")):
            self.assertEqual(router.handle("GET", path, b""), (200, value))

    def test_the_path_is_percent_decoded_once_as_uvicorn_does_with_an_encoded_slash_kept_in_its_parameter(self):
        # The rule both routers keep (docs/api.md#load-balanced-endpoints; ferry dev's side in
        # test/unit/dev-server-not-allowed.test.ts): each segment is decoded as uvicorn decodes a path
        # (urllib's unquote: a % that starts no escape stays, bytes that are not UTF-8 become U+FFFD),
        # then routed, static text and parameters alike; only %2F stays inside its parameter.
        api = Endpoint(name="api4")
        api.get("/items/{item_id}")(lambda item_id: item_id)
        api.get("/pct/a%20b")(lambda: "literal")
        api.get("/semi/a;b")(lambda: "semicolon")
        router = Router(api)
        for path, value in (
            ("/items/x%", "x%"),
            ("/items/a%zz", "a%zz"),
            ("/items/%", "%"),
            ("/items/a%20b", "a b"),
            ("/items/a%2Fb", "a/b"),
            ("/items/a%2fb", "a/b"),
            ("/items/a%2520b", "a%20b"),
            ("/items/%FF", "\ufffd"),
            ("/items/%C3%A9", "\u00e9"),
            ("/it%65ms/x", "x"),
            ("/pct/a%2520b", "literal"),
            ("/semi/a%3Bb", "semicolon"),
        ):
            with self.subTest(path=path):
                self.assertEqual(router.handle("GET", path, b""), (200, value))
        # A route's text is matched as it is written: its % is a %, not an escape.
        self.assertEqual(router.handle("GET", "/pct/a%20b", b"")[0], 404)
        self.assertEqual(router.handle("GET", "/items/a%2Fb/", b"")[0], 404)

    def test_path_and_body_must_agree(self):
        api = Endpoint(name="api2")
        api.put("/items/{item_id}")(lambda item_id, value=None: item_id)
        status, body = Router(api).handle("PUT", "/items/1", b'{"item_id": "2"}')
        self.assertEqual(status, 400)
        self.assertIn("both in the path and the request", body["error"])


class RouterBodyTypeTest(unittest.TestCase):
    """A JSON body's values are checked against their hints by ferry dev's rule for a queue route's
    input (cli/dev/inputs.ts, cli/build/scan.py annotation_schema): a wrong type is a 400 naming it."""

    def setUp(self):
        api = Endpoint(name="typed")

        class Model:
            pass

        @api.post("/typed")
        def typed(x: int, y: float = 0.0, name: str = "a", flag: typing.Optional[bool] = None,
                  items: typing.List[int] = None, pair: tuple = (), opts: "dict | None" = None,
                  either: typing.Union[int, str] = 0, model: Model = None, text: "np.float32" = None):
            return {"x": x, "y": y, "y_type": type(y).__name__, "either": either, "model": model, "text": text}

        @api.get("/opt")
        def opt(n: typing.Optional[int] = None):
            return {"n": n}

        self.router = Router(api)

    def post(self, body):
        return self.router.handle("POST", "/typed", json.dumps(body).encode())

    def test_a_value_of_another_type_than_its_hint_is_400_naming_it(self):
        for value, shown in (("abc", 'str "abc"'), (2.5, "float 2.5"), ("3", 'str "3"'), (3.0, "float 3.0"),
                             (True, "bool true"), ([1], "list [1]"), (None, "None")):
            status, body = self.post({"x": value})
            self.assertEqual(status, 400, value)
            self.assertEqual(body["error"], f"bad parameters for POST /typed: 'x' must be int, got {shown}")

    def test_every_problem_is_named_at_once(self):
        status, body = self.post({"y": "b", "flag": 1, "items": "abc", "opts": [], "name": None, "pair": {}})
        self.assertEqual(status, 400)
        self.assertEqual(
            body["error"],
            # In the signature's order, as ferry dev names them (cli/dev/inputs.ts).
            "bad parameters for POST /typed: missing required argument 'x' (int); 'y' must be float, got str \"b\"; "
            "'name' must be str, got None; 'flag' must be bool or None, got int 1; "
            "'items' must be list or None, got str \"abc\"; 'pair' must be list, got dict {}; "
            "'opts' must be dict or None, got list []",
        )
        status, body = self.post({"x": "a" * 100})
        self.assertIn(f"got str \"{'a' * 56}...", body["error"])

    def test_values_that_fit_pass_as_sent_and_other_hints_pass_unchecked(self):
        # An int passes for a float, unconverted; None where None is allowed; generics by outer type.
        status, body = self.post({"x": 1, "y": 2, "flag": None, "items": ["not", "ints"], "pair": [1, 2],
                                  "opts": None, "either": "s", "model": {"any": 1}, "text": "t"})
        self.assertEqual(status, 200, body)
        self.assertEqual(body, {"x": 1, "y": 2, "y_type": "int", "either": "s", "model": {"any": 1}, "text": "t"})
        self.assertEqual(self.post({"x": 1, "y": 2.5, "flag": False, "opts": {}})[0], 200)

    def test_an_optional_query_value_is_converted_as_a_plain_one_is(self):
        self.assertEqual(self.router.handle("GET", "/opt?n=5", b""), (200, {"n": 5}))
        self.assertEqual(self.router.handle("GET", "/opt", b""), (200, {"n": None}))
        status, body = self.router.handle("GET", "/opt?n=abc", b"")
        self.assertEqual((status, body), (400, {"error": "parameter 'n' must be int, got 'abc'"}))


class RouterArgumentsTest(unittest.TestCase):
    """A load-balanced route names every missing key, every key it does not take and every value of
    another type than its hint in one 400, in ferry dev's words (cli/dev/inputs.ts)."""

    def setUp(self):
        api = Endpoint(name="args")

        @api.post("/make/{kind}")
        def make(kind, size: int, name: str, colour="red", *, strict: bool = False):
            return {"kind": kind, "size": size, "name": name, "colour": colour, "strict": strict}

        @api.post("/loose")
        def loose(n: int, **extra):
            return {"n": n, "extra": extra}

        @api.get("/find")
        def find(q: str, limit: int = 10):
            return {"q": q, "limit": limit}

        self.router = Router(api)

    def post(self, path, body):
        return self.router.handle("POST", path, json.dumps(body).encode())

    def test_every_missing_unknown_and_mistyped_key_at_once(self):
        self.assertEqual(
            self.post("/make/box", {"sise": 1, "colour": "blue", "extra": 2, "strict": "yes"}),
            (400, {"error": "bad parameters for POST /make/{kind}: missing required argument 'size' (int); "
                            "missing required argument 'name' (str); 'strict' must be bool, got str \"yes\"; "
                            "unexpected arguments 'sise', 'extra' (it takes: kind, size, name, colour, strict)"}),
        )
        self.assertEqual(
            self.post("/make/box", {"size": 1, "name": "n"}),
            (200, {"kind": "box", "size": 1, "name": "n", "colour": "red", "strict": False}),
        )

    def test_kwargs_takes_unknown_keys_and_still_needs_its_required_ones(self):
        self.assertEqual(self.post("/loose", {"n": 1, "a": 2}), (200, {"n": 1, "extra": {"a": 2}}))
        self.assertEqual(
            self.post("/loose", {"a": 2, "n2": "x"}),
            (400, {"error": "bad parameters for POST /loose: missing required argument 'n' (int)"}),
        )

    def test_query_parameters_it_does_not_take_are_left_out_and_a_missing_one_is_named(self):
        self.assertEqual(self.router.handle("GET", "/find?q=x&utm=1", b""), (200, {"q": "x", "limit": 10}))
        self.assertEqual(
            self.router.handle("GET", "/find?limit=5&utm=1", b""),
            (400, {"error": "bad parameters for GET /find: missing required argument 'q' (str)"}),
        )
        self.assertEqual(
            self.router.handle("GET", "/find?q=x&limit=abc", b""),
            (400, {"error": "parameter 'limit' must be int, got 'abc'"}),
        )


class ProtocolUrlTest(unittest.TestCase):
    def test_urls_follow_runpod_templates(self):
        api = WorkerApi(
            "http://h/v2/ep/job-take/$ID?gpu=none",
            "http://h/v2/ep/job-done/$RUNPOD_POD_ID/$ID?gpu=none",
            "http://h/v2/ep/job-stream/w1/$ID?gpu=none",
            "http://h/v2/ep/ping/w1?gpu=none",
            "key",
            "w1",
            print,
        )
        self.assertEqual(api.take_url, "http://h/v2/ep/job-take/w1?gpu=none")
        self.assertEqual(api.take_batch_url, "http://h/v2/ep/job-take-batch/w1?gpu=none")
        self.assertEqual(api.stop_url, "http://h/v2/ep/job-stop/w1?gpu=none")
        self.assertEqual(api._job_url(api.done_url, "a/b", "true"), "http://h/v2/ep/job-done/w1/a%2Fb?gpu=none&isStream=true")
        self.assertEqual(add_query("http://h/ping/w1?gpu=none", job_id="a,b"), "http://h/ping/w1?gpu=none&job_id=a,b")
        self.assertEqual(add_query("http://h/x", a=1), "http://h/x?a=1")


if __name__ == "__main__":
    unittest.main()
