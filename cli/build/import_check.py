"""Build-time import check: imports each endpoint module the way a worker will, and reports.

Usage: python import_check.py <module> [<module> ...]
(FERRY_CHECK_PATH: a JSON list of folders to put first on sys.path: the staged artifact, then ferry.
Not PYTHONPATH, which cannot hold a folder with ':' in its name.)

Prints one JSON object: {"results": [{"module", "ok", "type"?, "message"?, "missing"?, "inPackage"?,
"traceback"?}]}. `missing` is the top-level name of a module that was not found; `inPackage` says the
failure happened inside an installed package rather than in the project's own code. The caller
decides what is fatal (a package the base image ships, such as torch, may be missing here).
"""

import importlib
import json
import os
import sys
import traceback


def check(module, project_files):
    try:
        importlib.import_module(module)
        return {"module": module, "ok": True}
    except BaseException as exc:  # noqa: BLE001 - user code can raise anything at import
        frames = traceback.extract_tb(exc.__traceback__)
        last = os.path.abspath(frames[-1].filename) if frames else ""
        result = {
            "module": module,
            "ok": False,
            "type": type(exc).__name__,
            "message": str(exc),
            "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-6:]),
            # Raised inside an installed package rather than by the project's own code.
            "inPackage": last not in project_files,
        }
        if isinstance(exc, ModuleNotFoundError) and exc.name:
            result["missing"] = exc.name.split(".")[0]
        return result


def main(argv):
    sys.path[0:0] = json.loads(os.environ.get("FERRY_CHECK_PATH", "[]"))
    root = os.environ.get("FERRY_CHECK_ROOT", os.getcwd())
    listed = json.loads(os.environ.get("FERRY_CHECK_PROJECT_FILES", "[]"))
    project_files = {os.path.abspath(os.path.join(root, p)) for p in listed}
    results = [check(module, project_files) for module in argv[1:]]
    sys.stdout.write(json.dumps({"results": results}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
