"""The endpoint-declaration rules have one owner, core/endpoint-spec.ts. The scanner (cli/build/scan.py)
and the `ferry` package (ferry/endpoint.py) cannot import it: they share one Python copy of its
tables, ferry/declaration.py, tested here against it. Its patterns, enums and bounds must be those of
the generated core/endpoint-spec.schema.json, and each declaration in
test/fixtures/endpoint-declarations.json must be accepted or refused by both exactly as the table says
(test/unit/endpoint-spec.test.ts checks the zod schema against the same table).

Runs from a repository checkout only (the worker image ships neither the scanner nor the table).
"""

import importlib.util
import json
import os
import tempfile
import unittest
from pathlib import Path

from ferry import declaration
from ferry import endpoint as ferry_endpoint

REPO = Path(__file__).resolve().parents[2]
SCHEMA_FILE = REPO / "core" / "endpoint-spec.schema.json"
TABLE_FILE = REPO / "test" / "fixtures" / "endpoint-declarations.json"
SCAN_FILE = REPO / "cli" / "build" / "scan.py"


def load_scanner():
    spec = importlib.util.spec_from_file_location("ferry_scan", SCAN_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@unittest.skipUnless(SCHEMA_FILE.exists() and SCAN_FILE.exists(), "needs a repository checkout")
class EndpointSpecTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.schema = json.loads(SCHEMA_FILE.read_text())
        cls.table = json.loads(TABLE_FILE.read_text())["declarations"]
        cls.scan = load_scanner()

    def prop(self, name):
        return self.schema["properties"][name]

    def test_scanner_and_package_read_one_copy(self):
        # ferry/declaration.py is the Python copy of the rules; the scanner loads it by path.
        self.assertEqual(os.path.realpath(self.scan.declaration.__file__), os.path.realpath(declaration.__file__))
        self.assertIs(ferry_endpoint.NAME_RE, declaration.NAME_RE)

    def test_patterns_are_the_schema_patterns(self):
        self.assertEqual(declaration.NAME_RE.pattern, self.prop("name")["pattern"])
        self.assertEqual(declaration.CPU_RE.pattern, self.prop("cpu")["pattern"])
        self.assertEqual(declaration.ENV_NAME_RE.pattern, self.prop("env")["propertyNames"]["pattern"])
        self.assertEqual(declaration.IMAGE_RE.pattern, self.prop("image")["pattern"])

    def test_image_exclusions_are_the_specs(self):
        spec = (REPO / "core" / "endpoint-spec.ts").read_text()
        excluded = spec.split("imageExcludedParameters = [", 1)[1].split("]", 1)[0]
        names = sorted(n.strip().strip("'") for n in excluded.split(",") if n.strip())
        self.assertEqual(sorted(declaration.IMAGE_EXCLUDED_PARAMETERS), names)

    def test_platform_env_names_are_the_specs(self):
        spec = (REPO / "core" / "endpoint-spec.ts").read_text()
        listed = spec.split("platformEnvNames = [", 1)[1].split("]", 1)[0]
        names = [n.strip().strip("'") for n in listed.split(",") if n.strip()]
        self.assertGreater(len(names), 1)
        self.assertEqual(list(declaration.PLATFORM_ENV_NAMES), names)

    def test_enums_are_the_schema_enums(self):
        self.assertEqual(list(declaration.GPU_MODELS), self.prop("gpu")["anyOf"][0]["anyOf"][0]["enum"])
        self.assertEqual(list(declaration.PYTHON_VERSIONS), self.prop("python_version")["enum"])

    def test_package_accepts_and_refuses_the_table(self):
        for row in self.table:
            with self.subTest(row["why"]):
                try:
                    ferry_endpoint.Endpoint(**row["declaration"])
                    accepted = True
                except (TypeError, ValueError):
                    accepted = False
                self.assertEqual(accepted, row["valid"], row["declaration"])

    def test_scanner_accepts_and_refuses_the_table(self):
        with tempfile.TemporaryDirectory() as root:
            for index, row in enumerate(self.table):
                with self.subTest(row["why"]):
                    args = ", ".join("%s=%r" % item for item in row["declaration"].items())
                    rel = "ep_%d.py" % index
                    source = "from ferry import Endpoint\n\n@Endpoint(%s)\ndef handler(x=None):\n    return x\n" % args
                    if "image" in row["declaration"]:
                        # An image endpoint is a module-level assignment: it has no function of ours.
                        source = "from ferry import Endpoint\n\nworker = Endpoint(%s)\n" % args
                    with open(os.path.join(root, rel), "w") as handle:
                        handle.write(source)
                    result = self.scan.scan(root, [rel])
                    self.assertEqual(result["ok"], row["valid"], (row["declaration"], result.get("errors")))


if __name__ == "__main__":
    unittest.main()
