"""The image-workflow endpoint: a workflow in, either output shape of docs/api.md#job-output-shapes out.

    {"input": {"workflow": {...}}}                              -> {"images": [{"filename", "type", "data"}]}
    {"input": {"workflow": {...}, "output_format": "message"}}  -> {"message": "data:image/png;base64,...",
                                                                    "status": "success"}

The first shape is what worker-comfyui 5.x answers, the second what it answered before 5.0 (one image:
the first one saved). A workflow that cannot run ends the job FAILED with a message naming the node,
the way worker-comfyui reports "Workflow validation failed": the handler returns {"error": ...} and the
runtime turns that into the job's error (RunPod's rule, docs/architecture.md#worker-protocol).
"""

import base64
import json

from ferry import Endpoint

from workflow import WorkflowError, run_workflow

OUTPUT_FORMATS = ("images", "message")


@Endpoint(name="image-workflow", cpu="2-8", workers=(0, 2), execution_timeout_ms=120_000)
def run(workflow, output_format="images"):
    """Run a ComfyUI-style workflow and return its images as base64 PNGs."""
    if output_format not in OUTPUT_FORMATS:
        return {"error": f"output_format must be one of {', '.join(OUTPUT_FORMATS)}, got {output_format!r}"}
    if isinstance(workflow, str):
        # worker-comfyui accepts the workflow as a JSON string too.
        try:
            workflow = json.loads(workflow)
        except ValueError as exc:
            return {"error": f"Invalid JSON format in workflow: {exc}"}
    try:
        saved = run_workflow(workflow)
    except WorkflowError as exc:
        return {"error": f"Workflow validation failed: {exc}"}
    return shape_output(saved, output_format)


def shape_output(saved, output_format="images"):
    """[(filename, png_bytes)] -> one of the two §2.1 image-workflow shapes."""
    uris = [(name, "data:image/png;base64," + base64.b64encode(data).decode("ascii")) for name, data in saved]
    if output_format == "message":
        return {"message": uris[0][1], "status": "success"}
    return {"images": [{"filename": name, "type": "base64", "data": uri} for name, uri in uris]}
