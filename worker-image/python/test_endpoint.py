"""Unit tests: Endpoint validation (every rule) and route registration."""

import inspect
import os
import unittest
from unittest import mock

from ferry import Endpoint
from ferry.client import RemoteFunction, local_target
from ferry.endpoint import split_path


class ValidationTest(unittest.TestCase):
    def assertRejects(self, error, fragment, **kwargs):
        with self.assertRaises(error) as caught:
            Endpoint(**kwargs)
        self.assertIn(fragment, str(caught.exception))

    def test_defaults(self):
        ep = Endpoint("x")
        self.assertEqual(ep.name, "x")
        self.assertEqual(ep.gpu, ["any"])  # neither gpu nor cpu: any GPU
        self.assertIsNone(ep.cpu)
        self.assertEqual(ep.workers, (0, 1))
        self.assertEqual(ep.idle_timeout, 60)
        self.assertEqual((ep.gpu_count, ep.execution_timeout_ms, ep.max_concurrency), (1, 0, 1))
        self.assertEqual((ep.dependencies, ep.system_dependencies, ep.env), ([], [], {}))
        self.assertIsNone(ep.python_version)
        self.assertIsNone(ep.kind)

    def test_name(self):
        self.assertRejects(ValueError, "name must start with a letter or digit", name="has space")
        self.assertRejects(ValueError, "'-bad'", name="-bad")
        self.assertRejects(ValueError, "at most 63", name="a" * 64)
        self.assertRejects(TypeError, "name must be a string, got 3", name=3)
        self.assertEqual(Endpoint("ok_name-2").name, "ok_name-2")

    def test_gpu_and_cpu_are_exclusive(self):
        self.assertRejects(ValueError, "gpu and cpu are exclusive", gpu="A100", cpu="2-8")

    def test_gpu(self):
        self.assertEqual(Endpoint(gpu="H100").gpu, ["H100"])
        self.assertEqual(Endpoint(gpu=["A100", "H100", "A100"]).gpu, ["A100", "H100"])
        self.assertEqual(Endpoint(gpu="any").gpu, ["any"])
        self.assertRejects(ValueError, "gpu must be one of T4, A10G, L4, L40S, A100, H100 or 'any', got 'V100'", gpu="V100")
        self.assertRejects(ValueError, "did you mean 'A100'", gpu="a100")
        self.assertRejects(ValueError, "cannot be combined", gpu=["any", "T4"])
        self.assertRejects(TypeError, "non-empty list", gpu=[])
        self.assertRejects(TypeError, "gpu must be", gpu=5)

    def test_cpu(self):
        ep = Endpoint(cpu="2-8")
        self.assertEqual((ep.cpu, ep.gpu), ("2-8", None))
        self.assertRejects(ValueError, "cpu must be 'VCPUS-GIB'", cpu="cpu3c-2-8")
        self.assertRejects(ValueError, "got '0-8'", cpu="0-8")
        self.assertRejects(TypeError, "cpu must be a string", cpu=2)

    def test_workers(self):
        self.assertEqual(Endpoint(workers=3).workers, (0, 3))
        self.assertEqual(Endpoint(workers=(1, 5)).workers, (1, 5))
        self.assertEqual(Endpoint(workers=[0, 1]).workers, (0, 1))
        self.assertEqual(Endpoint(workers=(2, 2)).workers, (2, 2))
        self.assertRejects(ValueError, "workers must be at least 1", workers=0)
        self.assertRejects(ValueError, "min must be >= 0", workers=(-1, 2))
        self.assertRejects(ValueError, "max must be >= 1", workers=(0, 0))
        self.assertRejects(ValueError, "min must not exceed max, got (3, 2)", workers=(3, 2))
        self.assertRejects(TypeError, "workers must be N or (min, max)", workers=(1, 2, 3))
        self.assertRejects(TypeError, "of integers", workers=(1, "2"))
        self.assertRejects(TypeError, "workers must be N or (min, max)", workers=True)

    def test_health_check_grace(self):
        self.assertEqual(Endpoint().health_check_grace, 0)
        self.assertEqual(Endpoint(health_check_grace=1200).health_check_grace, 1200)
        self.assertRejects(ValueError, "health_check_grace must be between 0 and 7200, got 7201", health_check_grace=7201)
        self.assertRejects(TypeError, "health_check_grace must be an integer", health_check_grace="10m")

    def test_idle_timeout(self):
        self.assertEqual(Endpoint(idle_timeout=3600).idle_timeout, 3600)
        self.assertRejects(ValueError, "idle_timeout must be between 1 and 3600, got 0", idle_timeout=0)
        self.assertRejects(ValueError, "got 3601", idle_timeout=3601)
        self.assertRejects(TypeError, "idle_timeout must be an integer, got 1.5", idle_timeout=1.5)

    def test_gpu_count(self):
        self.assertEqual(Endpoint(gpu_count=8).gpu_count, 8)
        self.assertRejects(ValueError, "gpu_count must be between 1 and 8, got 9", gpu_count=9)
        self.assertRejects(ValueError, "gpu_count must be between 1 and 8, got 0", gpu_count=0)
        self.assertRejects(ValueError, "GPU endpoints only", cpu="2-8", gpu_count=2)

    def test_execution_timeout_and_concurrency(self):
        self.assertEqual(Endpoint(execution_timeout_ms=5000).execution_timeout_ms, 5000)
        self.assertRejects(ValueError, "execution_timeout_ms must be >= 0, got -1", execution_timeout_ms=-1)
        self.assertEqual(Endpoint(max_concurrency=4).max_concurrency, 4)
        self.assertRejects(ValueError, "max_concurrency must be >= 1, got 0", max_concurrency=0)
        self.assertRejects(TypeError, "max_concurrency must be an integer", max_concurrency="2")

    def test_python_version(self):
        for version in ("3.10", "3.11", "3.12", "3.13"):
            self.assertEqual(Endpoint(python_version=version).python_version, version)
        self.assertRejects(ValueError, "python_version must be one of 3.10, 3.11, 3.12, 3.13, got '3.9'", python_version="3.9")
        self.assertRejects(TypeError, "python_version must be a string", python_version=3.10)

    def test_env(self):
        self.assertEqual(Endpoint(env={"HF_HOME": "/cache"}).env, {"HF_HOME": "/cache"})
        self.assertRejects(TypeError, "env values must be strings, got 1 for 'A'", env={"A": 1})
        self.assertRejects(ValueError, "env keys must be environment variable names", env={"1A": "x"})
        self.assertRejects(TypeError, "env must be a dict", env=["A=1"])

    def test_dependency_lists(self):
        self.assertEqual(Endpoint(dependencies=["torch", "pillow>=10"]).dependencies, ["torch", "pillow>=10"])
        self.assertEqual(Endpoint(system_dependencies=("ffmpeg",)).system_dependencies, ["ffmpeg"])
        self.assertRejects(TypeError, "dependencies must be a list of strings", dependencies="torch")
        self.assertRejects(TypeError, "non-empty strings", dependencies=["torch", ""])
        self.assertRejects(TypeError, "system_dependencies must be a list", system_dependencies="ffmpeg")

    def test_other_parameters_are_keyword_only(self):
        with self.assertRaises(TypeError):
            Endpoint("x", "A100")

    def test_flash_parameters_are_refused_naming_what_ferry_does_instead(self):
        # The same message as `ferry build` (ferry/names.py owns it): a Flash project moved over
        # with its imports changed hears why, not Python's bare "unexpected keyword argument".
        self.assertRejects(TypeError, "no parameter 'flashboot' in Ferry: Flash's FlashBoot has no Ferry counterpart", flashboot=True)
        self.assertRejects(TypeError, "no parameter 'volume' in Ferry: Ferry has no network volumes", volume=None)
        self.assertRejects(TypeError, "no parameter 'min_cuda_version' in Ferry", min_cuda_version="12.8")
        self.assertRejects(TypeError, 'memory is part of cpu="<vCPUs>-<GiB>"', memory=8)
        self.assertRejects(TypeError, "unexpected keyword argument 'colour'", colour="red")


class QueueDecoratorTest(unittest.TestCase):
    def test_outside_its_worker_a_function_becomes_remote_and_carries_the_endpoint(self):
        @Endpoint(gpu="A100", workers=(0, 3))
        def generate(prompt, steps=4):
            return f"{prompt}:{steps}"

        call = generate("cat")  # a job on the endpoint: a coroutine, nothing sent until awaited
        self.assertTrue(inspect.iscoroutine(call))
        call.close()
        self.assertEqual(generate.local("cat"), "cat:4")
        ep = generate.__ferry_endpoint__
        self.assertEqual((ep.name, ep.kind, ep.target), ("generate", "queue", local_target(generate)))

    def test_inside_its_own_worker_the_function_runs_in_place(self):
        with mock.patch.dict(os.environ, {"FERRY_ENDPOINT_NAME": "generate"}):

            @Endpoint(gpu="A100")
            def generate(prompt, steps=4):
                return f"{prompt}:{steps}"

            @Endpoint(name="other")
            def other():
                return 1

        self.assertEqual(generate("cat"), "cat:4")
        self.assertIsInstance(other, RemoteFunction)

    def test_all_function_kinds_and_classes(self):
        async def a():
            return 1

        def g():
            yield 1

        async def ag():
            yield 1

        class Model:
            def predict(self):
                return 1

        for target in (a, g, ag, Model):
            self.assertIs(local_target(Endpoint(name="n")(target)), target)
            self.assertEqual(target.__ferry_endpoint__.kind, "queue")
        self.assertEqual(Endpoint()(Model).__ferry_endpoint__.name, "Model")

    def test_rejects_non_functions(self):
        with self.assertRaises(TypeError) as caught:
            Endpoint(name="x")(len)
        self.assertIn("decorates a function or a class", str(caught.exception))

    def test_a_required_positional_only_parameter_is_refused_where_no_input_can_give_it(self):
        # A job input is passed by keyword only: `def f(a, /)` could never be called (docs/python.md).
        def positional(a, /, b):
            return a

        with self.assertRaises(TypeError) as caught:
            Endpoint(name="x")(positional)
        self.assertIn(
            "positional() can never be called: its parameter 'a' is positional-only (before the '/') and has no "
            "default, and a job input or a request body is passed by keyword only; drop the '/' or give 'a' a default",
            str(caught.exception),
        )

        class Model:
            def predict(self, x, /):
                return x

        with self.assertRaises(TypeError) as caught:
            Endpoint(name="m")(Model)
        self.assertIn("Model.predict() can never be called: its parameter 'x' is positional-only", str(caught.exception))

        # self and cls before the '/' are the method's own; one with a default is simply no input.
        class Fine:
            def predict(self, /, x):
                return x

            @classmethod
            def build(cls, /, y=1):
                return y

            @staticmethod
            def helper(q=1, /, r=2):
                return q

        Endpoint(name="fine")(Fine)

        def defaulted(a=1, /, b=2):
            return a

        Endpoint(name="defaulted")(defaulted)

    def test_one_target_per_endpoint(self):
        ep = Endpoint(name="x")
        ep(lambda: 1)
        with self.assertRaises(TypeError) as caught:
            ep(lambda: 2)
        self.assertIn("one queue-based Endpoint decorates one function", str(caught.exception))


class RouteTest(unittest.TestCase):
    def test_routes_register_with_each_method(self):
        api = Endpoint(name="my-api", cpu="2-8")

        @api.get("/health")
        def health():
            return {"ok": True}

        @api.post("/process")
        def process(input_data):
            return input_data

        @api.put("/a")
        def put():
            pass

        @api.delete("/a")
        def delete():
            pass

        @api.patch("/a")
        def patch():
            pass

        self.assertEqual(api.kind, "lb")
        self.assertEqual(
            [(r.method, r.path) for r in api.routes],
            [("GET", "/health"), ("POST", "/process"), ("PUT", "/a"), ("DELETE", "/a"), ("PATCH", "/a")],
        )
        self.assertEqual(health.local(), {"ok": True})  # still callable locally
        self.assertIs(process.__ferry_endpoint__, api)

    def test_path_params(self):
        api = Endpoint(name="api")

        @api.get("/items/{item_id}/parts/{part}")
        def part(item_id, part):
            return None

        route = api.routes[0]
        self.assertEqual(route.param_names, ["item_id", "part"])
        self.assertEqual(route.match(split_path("/items/7/parts/x%20y")), {"item_id": "7", "part": "x y"})
        self.assertEqual(route.match(split_path("/items/7/parts/x%2Fy")), {"item_id": "7", "part": "x/y"})
        self.assertIsNone(route.match(split_path("/items/7")))
        self.assertIsNone(route.match(split_path("/items/7/parts/x/extra")))
        self.assertIsNone(route.match(split_path("/items//parts/x")))

    def test_a_route_no_request_can_call_is_refused(self):
        api = Endpoint(name="api")
        with self.assertRaises(TypeError) as caught:
            api.post("/a")(lambda x, /: x)
        self.assertIn("its parameter 'x' is positional-only", str(caught.exception))

        # Only a queue job is given `job` (ferry/invoke.py): a route's required one is never there.
        def progress(x, *, job):
            return x

        with self.assertRaises(TypeError) as caught:
            api.post("/b")(progress)
        self.assertIn(
            "progress() can never be called: it takes a keyword-only 'job' with no default, and only a queue-based "
            "handler is given its job; a load-balanced route gets none",
            str(caught.exception),
        )
        self.assertEqual(api.routes, [])

        @api.post("/c")
        def optional(x, *, job=None):
            return x

        self.assertEqual(len(api.routes), 1)

    def test_path_param_must_be_accepted_by_the_function(self):
        api = Endpoint(name="api")
        with self.assertRaises(ValueError) as caught:
            api.get("/items/{item_id}")(lambda: None)
        self.assertIn("does not accept 'item_id'", str(caught.exception))

        @api.get("/any/{x}")
        def takes_kwargs(**kwargs):
            return kwargs

        self.assertEqual(len(api.routes), 1)

    def test_path_rules(self):
        api = Endpoint(name="api")
        cases = [
            ("health", ValueError, "must start with '/'"),
            ("/ping", ValueError, "reserved"),
            ("/ping/", ValueError, "reserved"),
            ("/a?b=1", ValueError, "query"),
            ("/items/{1x}", ValueError, "Python identifiers"),
            ("/items/id-{x}", ValueError, "whole segment"),
            ("/a/{x}/{x}", ValueError, "appears twice"),
            ("/a b", ValueError, "invalid segment"),
            # ferry dev's router reads these as a wildcard and a parameter, the runtime as text.
            ("/files/*", ValueError, "route path '/files/*' has '*', which ferry dev would read as a wildcard"),
            ("/files/a*b", ValueError, "'*'"),
            ("/time/12:00", ValueError, "route path '/time/12:00' has ':', which ferry dev would read as"),
            ("/v1/models:list", ValueError, "outside a {parameter} a segment takes letters, digits and"),
            # Clients remove dot-segments before they send: /a/./b is asked as /a/b, /a/../b as /b.
            ("/a/./b", ValueError, "route path '/a/./b' has a '.' segment, which clients resolve away"),
            ("/a/..", ValueError, "'..' segment"),
            (5, TypeError, "route path must be a string"),
        ]
        for path, error, fragment in cases:
            with self.subTest(path=path):
                with self.assertRaises(error) as caught:
                    api.get(path)
                self.assertIn(fragment, str(caught.exception))

    def test_duplicate_method_and_path(self):
        api = Endpoint(name="api")
        api.post("/run")(lambda: 1)
        api.get("/run")(lambda: 1)  # same path, other method: fine
        with self.assertRaises(ValueError) as caught:
            api.post("/run")
        self.assertIn("route POST /run is already registered", str(caught.exception))

    def test_lb_requires_a_name(self):
        with self.assertRaises(ValueError) as caught:
            Endpoint(cpu="2-8").get("/x")
        self.assertIn("needs a name", str(caught.exception))

    def test_modes_do_not_mix(self):
        api = Endpoint(name="api")
        api.get("/x")(lambda: 1)
        with self.assertRaises(TypeError) as caught:
            api(lambda: 1)
        self.assertIn("already has routes", str(caught.exception))

        queue = Endpoint(name="q")
        queue(lambda: 1)
        with self.assertRaises(TypeError) as caught:
            queue.post("/x")
        self.assertIn("cannot also have routes", str(caught.exception))

    def test_route_decorates_functions_only(self):
        api = Endpoint(name="api")
        with self.assertRaises(TypeError):
            api.get("/x")(object())


if __name__ == "__main__":
    unittest.main()
