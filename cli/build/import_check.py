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


def shown_traceback(exc, root):
    """What the user reads: their own frames, from the endpoint module down to the line that raised,
    without importlib's (<frozen importlib._bootstrap>, importlib/) or this checker's; and a file of
    the staged artifact by its path in the project, which is the file to edit (`helper.py`, not
    `.ferry/build/helper.py`)."""
    skip = (os.path.dirname(os.path.abspath(importlib.__file__)) + os.sep, os.path.abspath(__file__))
    frames = [
        frame
        for frame in traceback.extract_tb(exc.__traceback__)
        if not frame.filename.startswith("<") and not os.path.abspath(frame.filename).startswith(skip)
    ]
    text = "".join(traceback.format_list(frames) + traceback.format_exception_only(type(exc), exc))
    return text.replace(f'File "{os.path.abspath(root)}{os.sep}', 'File "')


# Written to stderr before each import: when the build stops a check that runs too long, the last
# one names the module whose import did not finish (importCheck.ts).
STARTED = "ferry-import-check: importing "


def check(module, project_files, root):
    sys.stderr.write(STARTED + module + "\n")
    sys.stderr.flush()
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
            "traceback": shown_traceback(exc, root),
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
    results = [check(module, project_files, root) for module in argv[1:]]
    sys.stdout.write(json.dumps({"results": results}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
