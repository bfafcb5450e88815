"""Helpers for the example tests: import an example's modules without installing anything.

The examples' pure modules (workflow.py, textgen.py, save_images.py) need only the standard library.
Their handlers import `ferry`; the real package is used when it imports from worker-image/python, and
a stand-in decorator otherwise, so these tests do not depend on the runtime being finished.
"""

import importlib.util
import os
import sys
import types

EXAMPLES = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(EXAMPLES)


def example_dir(name):
    path = os.path.join(EXAMPLES, name)
    if path not in sys.path:
        sys.path.insert(0, path)
    return path


def _ensure_ferry():
    if "ferry" in sys.modules:
        return
    runtime = os.path.join(REPO, "worker-image", "python")
    if runtime not in sys.path:
        sys.path.insert(0, runtime)
    try:
        import ferry  # noqa: F401

        if hasattr(ferry, "Endpoint"):
            return
    except Exception:  # noqa: BLE001 - any import failure means "use the stand-in"
        pass
    sys.modules.pop("ferry", None)
    stub = types.ModuleType("ferry")

    def _local(fn):
        # The real package runs a decorated function in-process with `.local(...)` (docs/python.md).
        fn.local = fn
        return fn

    class Endpoint:
        def __init__(self, **config):
            self.config = config

        def __call__(self, fn):
            return _local(fn)

        def _route(self, method, path):
            return _local

        def get(self, path):
            return self._route("GET", path)

        def post(self, path):
            return self._route("POST", path)

    stub.Endpoint = Endpoint
    sys.modules["ferry"] = stub


def load_handler(example, filename="handler.py"):
    """Import examples/<example>/<filename> under a unique module name (several examples have handler.py)."""
    path = os.path.join(example_dir(example), filename)
    _ensure_ferry()
    name = "example_" + example.replace("-", "_") + "_" + filename[:-3]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
