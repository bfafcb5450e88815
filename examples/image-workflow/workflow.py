"""A tiny ComfyUI-style node-graph executor: the image-workflow case of docs/api.md#job-output-shapes, standard library only.

A workflow ("Export (API)" format) is a dict of node id -> node::

    {"3": {"class_type": "KSampler", "_meta": {"title": "KSampler"},
           "inputs": {"seed": 42, "model": ["4", 0], ...}}, ...}

An input is either a literal (int, float, string) or a link ``[node_id string, output_index integer]``
to another node's output. ``validate`` checks the whole graph first and names the node at fault in
every error; ``run_workflow`` then executes only the nodes the output nodes (SaveImage) need, in
dependency order, and returns the PNG files they saved.

There are no real weights: the "model" is a seeded procedural painter. It honours what a diffusion
sampler honours, so the example behaves like the real thing from the outside: the same seed gives the
same bytes, another seed another picture, and steps, cfg, denoise, guidance, the prompt text and the
checkpoint name all change the result. Work happens on a latent grid 1/8 of the image size (as Stable
Diffusion's latents are), which keeps 512x512 in pure Python well under a second; VAEDecode scales up.
"""

import hashlib
import math
import random
import struct
import zlib

LATENT_SCALE = 8
MAX_SIDE = 2048
MAX_BATCH = 8
# Bounds the work and the size of the base64 answer (20 MB /runsync, docs/api.md#limits).
MAX_PIXELS = 4 * 1024 * 1024
MAX_STEPS = 150

LINK_TYPES = ("MODEL", "CLIP", "VAE", "CONDITIONING", "LATENT", "IMAGE")
REQUIRED = object()


class WorkflowError(ValueError):
    """A workflow that cannot run. `node_id` names the node at fault (None for graph-wide problems)."""

    def __init__(self, message, node_id=None):
        super().__init__(message)
        self.node_id = node_id


class Spec:
    """One input of a node type: its type, default (or REQUIRED) and bounds."""

    def __init__(self, kind, default=REQUIRED, low=None, high=None, multiple_of=None):
        self.kind = kind
        self.default = default
        self.low = low
        self.high = high
        self.multiple_of = multiple_of

    @property
    def required(self):
        return self.default is REQUIRED


# -- the nodes ---------------------------------------------------------------------------------------


def _digest(*parts):
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode("utf-8")).digest()


def _unit_floats(digest, count):
    """`count` floats in [-1, 1] from a digest (stretched with sha256 when more are needed)."""
    data = digest
    while len(data) < count:
        data += hashlib.sha256(data).digest()
    return [b / 127.5 - 1.0 for b in data[:count]]


def checkpoint_loader(ckpt_name):
    # Placeholders: the checkpoint name seeds everything downstream, as different weights would.
    model = {"type": "MODEL", "ckpt_name": ckpt_name, "key": _digest("model", ckpt_name).hex()}
    clip = {"type": "CLIP", "key": _digest("clip", ckpt_name).hex()}
    vae = {"type": "VAE", "key": _digest("vae", ckpt_name).hex()}
    return (model, clip, vae)


def clip_text_encode(text, clip):
    vector = _unit_floats(_digest(clip["key"], text), 24)
    return ({"type": "CONDITIONING", "vector": vector, "guidance": None, "text": text},)


def flux_guidance(conditioning, guidance):
    return (dict(conditioning, guidance=float(guidance)),)


def empty_latent_image(width, height, batch_size=1):
    lw, lh = max(1, width // LATENT_SCALE), max(1, height // LATENT_SCALE)
    samples = [[0.5] * (lw * lh * 3) for _ in range(batch_size)]
    return ({"type": "LATENT", "width": width, "height": height, "lw": lw, "lh": lh, "samples": samples},)


def _field(model, conditioning, lw, lh):
    """What a prompt "looks like" under a model: three channels of interfering waves."""
    v = _unit_floats(_digest(model["key"], *conditioning["vector"]), 24)
    guidance = conditioning["guidance"]
    # Flux-style guidance: stronger guidance, higher contrast (3.5 is Flux's usual value).
    amp = 0.42 if guidance is None else 0.5 * guidance / (guidance + 1.5)
    out = [0.0] * (lw * lh * 3)
    for c in range(3):
        k = c * 8
        fx, fy = 0.6 + 2.4 * abs(v[k]), 0.6 + 2.4 * abs(v[k + 1])
        px, py = math.pi * v[k + 2], math.pi * v[k + 3]
        cx, cy, rf = 0.5 + 0.4 * v[k + 4], 0.5 + 0.4 * v[k + 5], 2.0 + 4.0 * abs(v[k + 6])
        bias = 0.5 + 0.2 * v[k + 7]
        cols = [math.sin(2 * math.pi * fx * (x + 0.5) / lw + px) for x in range(lw)]
        for y in range(lh):
            vy = (y + 0.5) / lh
            row_wave = math.cos(2 * math.pi * fy * vy + py)
            base = (y * lw) * 3 + c
            for x in range(lw):
                ux = (x + 0.5) / lw
                radial = math.cos(rf * math.hypot(ux - cx, vy - cy) * math.pi)
                out[base + x * 3] = bias + amp * (0.6 * cols[x] * row_wave + 0.4 * radial)
    return out


def _composition(rng, lw, lh):
    """Seeded low-frequency blobs: the seed decides the layout, as initial noise does in diffusion."""
    grid = 4
    knots = [[rng.random() for _ in range((grid + 1) * (grid + 1))] for _ in range(3)]
    out = [0.0] * (lw * lh * 3)
    for y in range(lh):
        gy = (y + 0.5) / lh * grid
        y0 = min(int(gy), grid - 1)
        fy = gy - y0
        for x in range(lw):
            gx = (x + 0.5) / lw * grid
            x0 = min(int(gx), grid - 1)
            fx = gx - x0
            i = y0 * (grid + 1) + x0
            for c in range(3):
                k = knots[c]
                top = k[i] + (k[i + 1] - k[i]) * fx
                bottom = k[i + grid + 1] + (k[i + grid + 2] - k[i + grid + 1]) * fx
                out[(y * lw + x) * 3 + c] = top + (bottom - top) * fy - 0.5
    return out


def _clamp(value):
    return 0.0 if value < 0.0 else 1.0 if value > 1.0 else value


def ksampler(model, seed, steps, cfg, sampler_name, scheduler, positive, negative, latent_image, denoise=1.0):
    lw, lh = latent_image["lw"], latent_image["lh"]
    pos = _field(model, positive, lw, lh)
    neg = _field(model, negative, lw, lh)
    # Classifier-free guidance: push away from the negative prompt, softened so cfg 8 does not saturate.
    scale = 1.0 + (cfg - 1.0) * 0.15
    guided = [n + scale * (p - n) for p, n in zip(pos, neg)]
    # More steps resolve more fine detail; the sampler and scheduler set its texture.
    detail_gain = 0.1 * steps / (steps + 10.0)
    texture = _unit_floats(_digest(sampler_name, scheduler), 2)
    hf = 9.0 + 6.0 * abs(texture[0])
    detail = [
        detail_gain * math.sin(hf * (x + 1) + (hf + texture[1]) * (y + 1) + c)
        for y in range(lh)
        for x in range(lw)
        for c in range(3)
    ]
    ancestral = "ancestral" in sampler_name or "sde" in sampler_name
    alpha = 0.3 if scheduler == "karras" else 0.25
    samples = []
    for index, start in enumerate(latent_image["samples"]):
        rng = random.Random(f"{seed}:{index}")
        comp = _composition(rng, lw, lh)
        target = [_clamp(g + 0.35 * s + d) for g, s, d in zip(guided, comp, detail)]
        # denoise < 1 keeps part of the incoming latent, as img2img does.
        x = [(1.0 - denoise) * s + denoise * rng.random() for s in start]
        for step in range(steps):
            sigma = 1.0 - (step + 1) / steps
            x = [xi + (ti - xi) * alpha for xi, ti in zip(x, target)]
            if ancestral and sigma > 0:
                x = [xi + (rng.random() - 0.5) * 0.04 * sigma for xi in x]
        # The last step lands on the target, scaled by how much we were asked to denoise.
        x = [xi + (ti - xi) * denoise * 0.5 for xi, ti in zip(x, target)]
        samples.append(x)
    return (dict(latent_image, samples=samples),)


def vae_decode(samples, vae):
    lw, lh = samples["lw"], samples["lh"]
    width, height = samples["width"], samples["height"]
    tint = _unit_floats(bytes.fromhex(vae["key"]), 3)
    images = []
    for latent in samples["samples"]:
        rows = []
        for y in range(lh):
            pixels = []
            for x in range(lw):
                i = (y * lw + x) * 3
                pixels.append(
                    bytes(int(_clamp(latent[i + c] + 0.03 * tint[c]) * 255.0 + 0.5) for c in range(3))
                )
            # Nearest-neighbour upscale: each latent pixel becomes an 8x8 block (sides are multiples of 8).
            rows.extend([b"".join(p * LATENT_SCALE for p in pixels)] * LATENT_SCALE)
        if len(rows) != height or len(rows[0]) != width * 3:
            raise ValueError(f"latent {lw}x{lh} does not decode to {width}x{height}")
        images.append(rows)
    return ({"type": "IMAGE", "width": width, "height": height, "images": images},)


def _safe_prefix(prefix):
    cleaned = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in prefix.split("/")[-1])
    return cleaned.strip(".") or "ComfyUI"


def save_image(images, filename_prefix="ComfyUI"):
    prefix = _safe_prefix(filename_prefix)
    saved = []
    for i, rows in enumerate(images["images"]):
        saved.append((f"{prefix}_{i + 1:05d}_.png", encode_png(images["width"], images["height"], rows)))
    return (saved,)


class NodeType:
    def __init__(self, fn, inputs, outputs, output_node=False):
        self.fn = fn
        self.inputs = inputs
        self.outputs = outputs
        self.output_node = output_node


NODE_TYPES = {
    "CheckpointLoaderSimple": NodeType(
        checkpoint_loader, {"ckpt_name": Spec("STRING")}, ("MODEL", "CLIP", "VAE")
    ),
    "CLIPTextEncode": NodeType(
        clip_text_encode, {"text": Spec("STRING"), "clip": Spec("CLIP")}, ("CONDITIONING",)
    ),
    "FluxGuidance": NodeType(
        flux_guidance,
        {"conditioning": Spec("CONDITIONING"), "guidance": Spec("FLOAT", low=0.0, high=100.0)},
        ("CONDITIONING",),
    ),
    "EmptyLatentImage": NodeType(
        empty_latent_image,
        {
            "width": Spec("INT", low=16, high=MAX_SIDE, multiple_of=8),
            "height": Spec("INT", low=16, high=MAX_SIDE, multiple_of=8),
            "batch_size": Spec("INT", default=1, low=1, high=MAX_BATCH),
        },
        ("LATENT",),
    ),
    "KSampler": NodeType(
        ksampler,
        {
            "model": Spec("MODEL"),
            "seed": Spec("INT", low=0, high=2**64 - 1),
            "steps": Spec("INT", low=1, high=MAX_STEPS),
            "cfg": Spec("FLOAT", low=0.0, high=100.0),
            "sampler_name": Spec("STRING"),
            "scheduler": Spec("STRING"),
            "positive": Spec("CONDITIONING"),
            "negative": Spec("CONDITIONING"),
            "latent_image": Spec("LATENT"),
            "denoise": Spec("FLOAT", default=1.0, low=0.0, high=1.0),
        },
        ("LATENT",),
    ),
    "VAEDecode": NodeType(vae_decode, {"samples": Spec("LATENT"), "vae": Spec("VAE")}, ("IMAGE",)),
    "SaveImage": NodeType(
        save_image,
        {"images": Spec("IMAGE"), "filename_prefix": Spec("STRING", default="ComfyUI")},
        (),
        output_node=True,
    ),
}


# -- validation ----------------------------------------------------------------------------------------


def _where(node_id, node):
    class_type = node.get("class_type") if isinstance(node, dict) else None
    return f"node {node_id!r} ({class_type})" if isinstance(class_type, str) else f"node {node_id!r}"


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _check_literal(node_id, where, name, spec, value):
    if spec.kind in LINK_TYPES:
        raise WorkflowError(
            f"{where}: input {name!r} must be a link [node_id, output_index] to a {spec.kind} output, "
            f"got {value!r}",
            node_id,
        )
    if spec.kind == "STRING":
        if not isinstance(value, str):
            raise WorkflowError(f"{where}: input {name!r} must be a string, got {value!r}", node_id)
        if spec.required and name != "text" and not value.strip():
            raise WorkflowError(f"{where}: input {name!r} must not be empty", node_id)
        return
    if spec.kind == "INT" and not _is_int(value):
        raise WorkflowError(f"{where}: input {name!r} must be an integer, got {value!r}", node_id)
    if spec.kind == "FLOAT" and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise WorkflowError(f"{where}: input {name!r} must be a number, got {value!r}", node_id)
    if isinstance(value, float) and not math.isfinite(value):
        raise WorkflowError(f"{where}: input {name!r} must be finite, got {value!r}", node_id)
    if (spec.low is not None and value < spec.low) or (spec.high is not None and value > spec.high):
        raise WorkflowError(
            f"{where}: input {name!r} must be between {spec.low} and {spec.high}, got {value!r}", node_id
        )
    if spec.multiple_of and value % spec.multiple_of:
        raise WorkflowError(f"{where}: input {name!r} must be a multiple of {spec.multiple_of}, got {value!r}", node_id)


def _check_link(workflow, node_id, where, name, spec, value):
    if len(value) != 2 or not isinstance(value[0], str) or not _is_int(value[1]):
        raise WorkflowError(
            f"{where}: input {name!r} has a bad link {value!r}; a link is [node_id string, output_index integer]",
            node_id,
        )
    source_id, index = value
    if source_id not in workflow:
        raise WorkflowError(f"{where}: input {name!r} links to node {source_id!r}, which is not in the workflow", node_id)
    source = workflow[source_id]
    source_type = NODE_TYPES.get(source.get("class_type")) if isinstance(source, dict) else None
    if source_type is None:
        return  # the source node reports its own problem when it is checked
    outputs = source_type.outputs
    if index < 0 or index >= len(outputs):
        have = ", ".join(f"{i}: {kind}" for i, kind in enumerate(outputs)) or "none"
        raise WorkflowError(
            f"{where}: input {name!r} links to output {index} of {_where(source_id, source)}, "
            f"which has outputs [{have}]",
            node_id,
        )
    if spec.kind != outputs[index]:
        raise WorkflowError(
            f"{where}: input {name!r} expects {spec.kind} but output {index} of "
            f"{_where(source_id, source)} is {outputs[index]}",
            node_id,
        )


def _check_node(workflow, node_id, node):
    where = _where(node_id, node)
    if not isinstance(node, dict):
        raise WorkflowError(f"{where}: a node must be an object with class_type and inputs, got {node!r}", node_id)
    class_type = node.get("class_type")
    if not isinstance(class_type, str):
        raise WorkflowError(f"{where}: class_type must be a string, got {class_type!r}", node_id)
    node_type = NODE_TYPES.get(class_type)
    if node_type is None:
        raise WorkflowError(
            f"{where}: unknown class_type {class_type!r}; this worker knows {', '.join(sorted(NODE_TYPES))}",
            node_id,
        )
    meta = node.get("_meta", {})
    if not isinstance(meta, dict) or not isinstance(meta.get("title", ""), str):
        raise WorkflowError(f"{where}: _meta must be an object whose title is a string, got {meta!r}", node_id)
    inputs = node.get("inputs")
    if not isinstance(inputs, dict):
        raise WorkflowError(f"{where}: inputs must be an object, got {inputs!r}", node_id)
    for name in inputs:
        if name not in node_type.inputs:
            raise WorkflowError(
                f"{where}: unknown input {name!r}; {class_type} takes {', '.join(node_type.inputs)}", node_id
            )
    for name, spec in node_type.inputs.items():
        if name not in inputs:
            if spec.required:
                raise WorkflowError(f"{where}: missing required input {name!r} ({spec.kind})", node_id)
            continue
        value = inputs[name]
        if isinstance(value, list):
            _check_link(workflow, node_id, where, name, spec, value)
        else:
            _check_literal(node_id, where, name, spec, value)
    if class_type == "EmptyLatentImage":
        pixels = inputs["width"] * inputs["height"] * inputs.get("batch_size", 1)
        if pixels > MAX_PIXELS:
            raise WorkflowError(f"{where}: width x height x batch_size is {pixels} pixels; the limit is {MAX_PIXELS}", node_id)


def _links(node):
    return [v[0] for v in node["inputs"].values() if isinstance(v, list)]


def _order(workflow, roots):
    """Dependency order (post-order DFS) of everything `roots` need; raises on a cycle."""
    state = {}  # node id -> "open" while on the DFS path, "done" after
    order = []
    for root in roots:
        if state.get(root) == "done":
            continue
        stack = [(root, iter(_links(workflow[root])))]
        path = [root]
        state[root] = "open"
        while stack:
            node_id, deps = stack[-1]
            dep = next(deps, None)
            if dep is None:
                stack.pop()
                path.pop()
                state[node_id] = "done"
                order.append(node_id)
            elif state.get(dep) == "open":
                cycle = path[path.index(dep) :] + [dep]
                raise WorkflowError(
                    f"{_where(dep, workflow[dep])}: the workflow has a cycle: {' -> '.join(cycle)}", dep
                )
            elif state.get(dep) is None:
                state[dep] = "open"
                path.append(dep)
                stack.append((dep, iter(_links(workflow[dep]))))
    return order


def _sort_key(node_id):
    return (0, int(node_id), "") if node_id.isdigit() else (1, 0, node_id)


def validate(workflow):
    """Check the whole workflow; return the node ids to execute, in order. Raises WorkflowError."""
    if not isinstance(workflow, dict) or not workflow:
        raise WorkflowError(f"the workflow must be a non-empty object of node id -> node, got {workflow!r:.80}")
    for node_id, node in workflow.items():
        _check_node(workflow, node_id, node)
    # Cycles anywhere are errors, even in nodes no output needs: the graph is broken.
    _order(workflow, sorted(workflow, key=_sort_key))
    outputs = [n for n in sorted(workflow, key=_sort_key) if NODE_TYPES[workflow[n]["class_type"]].output_node]
    if not outputs:
        raise WorkflowError("the workflow has no output node; add a SaveImage node")
    return _order(workflow, outputs)


def run_workflow(workflow):
    """Validate and execute; return [(filename, png_bytes)] from every SaveImage node, in node order."""
    order = validate(workflow)
    results = {}
    saved = []
    for node_id in order:
        node = workflow[node_id]
        node_type = NODE_TYPES[node["class_type"]]
        kwargs = {}
        for name, spec in node_type.inputs.items():
            value = node["inputs"].get(name, spec.default)
            kwargs[name] = results[value[0]][value[1]] if isinstance(value, list) else value
        results[node_id] = node_type.fn(**kwargs)
        if node_type.output_node:
            saved.extend(results[node_id][0])
    return _unique_names(saved)


def _unique_names(saved):
    # Two SaveImage nodes with one prefix would both write ComfyUI_00001_.png; number on instead.
    seen = set()
    out = []
    for name, data in saved:
        base, counter = name[: -len("_00001_.png")], int(name[-len("00001_.png") : -len("_.png")])
        while name in seen:
            counter += 1
            name = f"{base}_{counter:05d}_.png"
        seen.add(name)
        out.append((name, data))
    return out


# -- PNG ------------------------------------------------------------------------------------------------


def _chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def encode_png(width, height, rows):
    """An 8-bit RGB PNG from `height` rows of 3*width bytes (filter type 0 on every row)."""
    if len(rows) != height or any(len(r) != width * 3 for r in rows):
        raise ValueError("rows do not match width and height")
    raw = b"".join(b"\x00" + bytes(r) for r in rows)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(raw, 6)) + _chunk(b"IEND", b"")
