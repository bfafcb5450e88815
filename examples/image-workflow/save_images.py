"""Write the images of an image-workflow result to PNG files.

    python save_images.py result.json outdir/        # result.json: a job response or just its output
    curl ... /runsync ... | python save_images.py - outdir/

Understands both output shapes of docs/api.md#job-output-shapes ({"images": [{"data": ...}]} and {"message": ...,
"status": ...}), with or without the whole job envelope around them. A `data` or `message` string may be
bare base64 or a data URI: when it starts with "data:", everything up to and including the first comma
is stripped before decoding. Prints one written path per line.
"""

import base64
import binascii
import json
import os
import sys


JOB_STATUSES = ("IN_QUEUE", "IN_PROGRESS", "COMPLETED", "FAILED", "CANCELLED", "TIMED_OUT")


class ImageOutputError(ValueError):
    """The result holds no decodable images."""


def _decode(text, what):
    if not isinstance(text, str):
        raise ImageOutputError(f"{what} must be a base64 string, got {type(text).__name__}")
    if text.startswith("data:"):
        if "," not in text:
            raise ImageOutputError(f"{what} is a data URI with no comma before the data")
        text = text.split(",", 1)[1]
    try:
        return base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ImageOutputError(f"{what} is not valid base64: {exc}") from None


def _safe_name(name, fallback):
    # A filename from the network must not climb out of the output folder.
    base = os.path.basename(str(name or "").replace("\\", "/"))
    if base in ("", ".", ".."):
        base = fallback
    return base if "." in base else base + ".png"


def extract_images(output):
    """[(filename, bytes)] from a job response, or from the output of either §2.1 shape."""
    if isinstance(output, dict) and ("id" in output or output.get("status") in JOB_STATUSES):
        # A whole job response (what /runsync and /status answer): the images are in its output.
        if output.get("status") not in (None, "COMPLETED"):
            detail = output.get("error") or "no output"
            raise ImageOutputError(f"the job is {output.get('status')}: {detail}")
        output = output.get("output")
    if not isinstance(output, dict):
        raise ImageOutputError(f"expected an object with 'images' or 'message', got {type(output).__name__}")
    if "images" in output:
        images = output["images"]
        if not isinstance(images, list):
            raise ImageOutputError("'images' must be a list")
        found = []
        for i, image in enumerate(images):
            if not isinstance(image, dict) or "data" not in image:
                raise ImageOutputError(f"images[{i}] must be an object with 'data'")
            if image.get("type", "base64") != "base64":
                raise ImageOutputError(f"images[{i}] is of type {image.get('type')!r}; download it from its URL instead")
            name = _safe_name(image.get("filename"), f"image_{i + 1:05d}.png")
            found.append((name, _decode(image["data"], f"images[{i}].data")))
        return found
    if "message" in output:
        if output.get("status", "success") != "success":
            raise ImageOutputError(f"the workflow reported status {output.get('status')!r}: {output['message']}")
        return [("image_00001.png", _decode(output["message"], "message"))]
    if "error" in output:
        raise ImageOutputError(f"the job reported an error: {output['error']}")
    raise ImageOutputError("the output has neither 'images' nor 'message'")


def save_images(output, out_dir):
    """Decode every image in `output` into `out_dir` (created if needed); return the written paths."""
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for name, data in extract_images(output):
        path = os.path.join(out_dir, name)
        with open(path, "wb") as f:
            f.write(data)
        paths.append(path)
    return paths


def main(argv):
    if len(argv) != 2:
        print("usage: python save_images.py RESULT.json|- OUT_DIR", file=sys.stderr)
        return 2
    source, out_dir = argv
    try:
        if source == "-":
            result = json.load(sys.stdin)
        else:
            with open(source, encoding="utf-8") as f:
                result = json.load(f)
    except (OSError, ValueError) as exc:
        print(f"error: cannot read {source}: {exc}", file=sys.stderr)
        return 2
    try:
        for path in save_images(result, out_dir):
            print(path)
    except (ImageOutputError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
