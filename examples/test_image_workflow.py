"""Tests for examples/image-workflow: the executor, the PNGs, the handler's two shapes, save_images."""

import base64
import copy
import io
import json
import os
import struct
import tempfile
import time
import unittest
import zlib
from contextlib import redirect_stderr, redirect_stdout

from _support import example_dir, load_handler

example_dir("image-workflow")

import save_images as si  # noqa: E402
import workflow as wf  # noqa: E402

SAMPLE = os.path.join(example_dir("image-workflow"), "workflow_api.json")


def sample():
    with open(SAMPLE, encoding="utf-8") as f:
        return json.load(f)


def decode_png(data):
    """(width, height, rows) of an 8-bit RGB PNG with filter 0, checking signature, CRCs and sizes."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG signature"
    pos, chunks = 8, []
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        assert zlib.crc32(kind + body) & 0xFFFFFFFF == crc, f"bad CRC in {kind!r}"
        chunks.append((kind, body))
        pos += 12 + length
    assert chunks[0][0] == b"IHDR" and chunks[-1][0] == b"IEND"
    width, height, depth, color, _, _, _ = struct.unpack(">IIBBBBB", chunks[0][1])
    assert (depth, color) == (8, 2), "expected 8-bit RGB"
    raw = zlib.decompress(b"".join(body for kind, body in chunks if kind == b"IDAT"))
    stride = 1 + 3 * width
    assert len(raw) == height * stride, "pixel data does not match IHDR"
    rows = [raw[i * stride + 1 : (i + 1) * stride] for i in range(height)]
    assert all(raw[i * stride] == 0 for i in range(height))
    return width, height, rows


def read(path):
    with open(path, "rb") as f:
        return f.read()


def small(seed=7, width=64, height=32, batch=1, **sampler):
    w = sample()
    w["5"]["inputs"].update(width=width, height=height, batch_size=batch)
    w["3"]["inputs"].update(seed=seed, steps=8, **sampler)
    return w


class RunTest(unittest.TestCase):
    def test_sample_workflow_gives_one_512_png_quickly(self):
        started = time.perf_counter()
        saved = wf.run_workflow(sample())
        elapsed = time.perf_counter() - started
        self.assertEqual([name for name, _ in saved], ["ComfyUI_00001_.png"])
        width, height, rows = decode_png(saved[0][1])
        self.assertEqual((width, height), (512, 512))
        self.assertGreater(len(set(rows)), 8, "the picture should not be flat")
        # "Well under a second" on an idle core; generous here for a shared machine.
        self.assertLess(elapsed, 3.0)

    def test_width_height_and_batch_size_are_honoured(self):
        saved = wf.run_workflow(small(width=96, height=40, batch=3))
        self.assertEqual(len(saved), 3)
        self.assertEqual(len({name for name, _ in saved}), 3)
        for _, png in saved:
            self.assertEqual(decode_png(png)[:2], (96, 40))
        self.assertEqual(len({png for _, png in saved}), 3, "batch items differ")

    def test_same_seed_same_bytes_other_seed_other_bytes(self):
        a = wf.run_workflow(small(seed=1))[0][1]
        self.assertEqual(a, wf.run_workflow(small(seed=1))[0][1])
        self.assertNotEqual(a, wf.run_workflow(small(seed=2))[0][1])

    def test_steps_cfg_prompt_and_guidance_change_the_image(self):
        base = wf.run_workflow(small())[0][1]
        for change in (
            lambda w: w["3"]["inputs"].update(steps=30),
            lambda w: w["3"]["inputs"].update(cfg=7.0),
            lambda w: w["6"]["inputs"].update(text="a red bicycle"),
            lambda w: w["10"]["inputs"].update(guidance=10.0),
            lambda w: w["4"]["inputs"].update(ckpt_name="sd_xl_turbo_1.0.safetensors"),
        ):
            w = small()
            change(w)
            self.assertNotEqual(wf.run_workflow(w)[0][1], base)

    def test_filename_prefix_and_two_save_nodes(self):
        w = small()
        w["9"]["inputs"]["filename_prefix"] = "../out/cat"
        w["11"] = {"class_type": "SaveImage", "inputs": {"images": ["8", 0], "filename_prefix": "cat"}}
        names = [name for name, _ in wf.run_workflow(w)]
        self.assertEqual(names, ["cat_00001_.png", "cat_00002_.png"])

    def test_unused_nodes_are_not_executed_but_still_validated(self):
        w = small()
        w["20"] = {"class_type": "EmptyLatentImage", "inputs": {"width": 2048, "height": 2048, "batch_size": 1}}
        self.assertEqual(len(wf.run_workflow(w)), 1)


class ValidationTest(unittest.TestCase):
    def assert_error(self, workflow, node_id, *fragments):
        with self.assertRaises(wf.WorkflowError) as caught:
            wf.validate(workflow)
        self.assertEqual(caught.exception.node_id, node_id)
        message = str(caught.exception)
        if node_id is not None:
            self.assertIn(f"node {node_id!r}", message)
        for fragment in fragments:
            self.assertIn(fragment, message)

    def test_unknown_class_type(self):
        w = sample()
        w["4"]["class_type"] = "CheckpointLoaderFancy"
        self.assert_error(w, "4", "unknown class_type 'CheckpointLoaderFancy'", "KSampler")

    def test_link_to_missing_node(self):
        w = sample()
        w["3"]["inputs"]["model"] = ["99", 0]
        self.assert_error(w, "3", "'model'", "'99'", "not in the workflow")

    def test_bad_link_shapes(self):
        for bad in (["4"], [4, 0], ["4", "0"], ["4", 0, 1], ["4", True]):
            w = sample()
            w["3"]["inputs"]["model"] = bad
            self.assert_error(w, "3", "bad link", "[node_id string, output_index integer]")

    def test_link_to_output_index_the_node_lacks(self):
        w = sample()
        w["8"]["inputs"]["vae"] = ["4", 3]
        self.assert_error(w, "8", "output 3", "node '4' (CheckpointLoaderSimple)", "2: VAE")

    def test_missing_required_input(self):
        w = sample()
        del w["3"]["inputs"]["seed"]
        self.assert_error(w, "3", "missing required input 'seed'")

    def test_cycle(self):
        # 6 and 10 feed each other: FluxGuidance(6) <- FluxGuidance(10) <- 6.
        w = sample()
        w["6"] = {"class_type": "FluxGuidance", "inputs": {"conditioning": ["10", 0], "guidance": 1.0}}
        with self.assertRaises(wf.WorkflowError) as caught:
            wf.validate(w)
        self.assertIn(caught.exception.node_id, {"6", "10"})
        self.assertIn(f"node {caught.exception.node_id!r} (FluxGuidance)", str(caught.exception))
        self.assertRegex(str(caught.exception), r"cycle: (6 -> 10 -> 6|10 -> 6 -> 10)")

    def test_self_link_is_a_cycle(self):
        w = sample()
        w["10"]["inputs"]["conditioning"] = ["10", 0]
        self.assert_error(w, "10", "cycle: 10 -> 10")

    def test_wrong_types(self):
        cases = [
            ("3", "seed", "42", "must be an integer"),
            ("3", "steps", True, "must be an integer"),
            ("3", "cfg", "high", "must be a number"),
            ("6", "text", 5, "must be a string"),
            ("3", "model", 5, "must be a link"),
            ("5", "width", 500, "multiple of 8"),
            ("3", "denoise", 1.5, "between 0.0 and 1.0"),
        ]
        for node_id, name, value, fragment in cases:
            with self.subTest(name=name):
                w = sample()
                w[node_id]["inputs"][name] = value
                self.assert_error(w, node_id, f"'{name}'", fragment)

    def test_link_of_the_wrong_type(self):
        w = sample()
        w["3"]["inputs"]["positive"] = ["4", 1]
        self.assert_error(w, "3", "expects CONDITIONING", "is CLIP")

    def test_unknown_input_and_bad_node_shapes(self):
        w = sample()
        w["3"]["inputs"]["sed"] = 1
        self.assert_error(w, "3", "unknown input 'sed'")
        w = sample()
        w["7"] = "not a node"
        self.assert_error(w, "7", "must be an object")
        w = sample()
        w["7"]["inputs"] = None
        self.assert_error(w, "7", "inputs must be an object")

    def test_graph_wide_errors(self):
        self.assert_error({}, None, "non-empty object")
        self.assert_error([], None, "non-empty object")
        w = sample()
        del w["9"]
        self.assert_error(w, None, "no output node")


class HandlerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.handler = load_handler("image-workflow")

    def test_images_shape(self):
        out = self.handler.run.local(workflow=small(batch=2))
        self.assertEqual(set(out), {"images"})
        self.assertEqual(len(out["images"]), 2)
        for image in out["images"]:
            self.assertEqual(image["type"], "base64")
            self.assertTrue(image["filename"].endswith(".png"))
            self.assertTrue(image["data"].startswith("data:image/png;base64,"))
            png = base64.b64decode(image["data"].split(",", 1)[1])
            self.assertEqual(decode_png(png)[:2], (64, 32))
        json.dumps(out)  # it must travel as JSON

    def test_message_shape(self):
        out = self.handler.run.local(workflow=small(), output_format="message")
        self.assertEqual(out["status"], "success")
        self.assertTrue(out["message"].startswith("data:image/png;base64,"))
        self.assertEqual(decode_png(base64.b64decode(out["message"].split(",", 1)[1]))[:2], (64, 32))

    def test_workflow_as_json_string(self):
        out = self.handler.run.local(workflow=json.dumps(small()))
        self.assertEqual(len(out["images"]), 1)

    def test_errors_are_returned_as_error(self):
        w = small()
        w["3"]["inputs"]["steps"] = 0
        out = self.handler.run.local(workflow=w)
        self.assertIn("Workflow validation failed: node '3' (KSampler)", out["error"])
        self.assertIn("output_format", self.handler.run.local(workflow=small(), output_format="png")["error"])
        self.assertIn("Invalid JSON", self.handler.run.local(workflow="{nope")["error"])


class SaveImagesTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.png = wf.run_workflow(small())[0][1]
        self.b64 = base64.b64encode(self.png).decode()

    def written(self, paths):
        return [(os.path.basename(p), read(p)) for p in paths]

    def test_images_shape_with_and_without_prefix(self):
        for data in (self.b64, "data:image/png;base64," + self.b64):
            out = {"images": [{"filename": "a_00001_.png", "type": "base64", "data": data}]}
            paths = si.save_images(out, os.path.join(self.tmp.name, "x"))
            self.assertEqual(self.written(paths), [("a_00001_.png", self.png)])

    def test_message_shape_with_and_without_prefix(self):
        for data in (self.b64, "data:image/png;base64," + self.b64):
            paths = si.save_images({"message": data, "status": "success"}, self.tmp.name)
            self.assertEqual(self.written(paths), [("image_00001.png", self.png)])

    def test_whole_job_response_and_handler_output(self):
        handler = load_handler("image-workflow")
        response = {"id": "sync-1-u1", "status": "COMPLETED", "output": handler.run.local(workflow=small(batch=2))}
        paths = si.save_images(response, self.tmp.name)
        self.assertEqual(len(paths), 2)
        for path in paths:
            self.assertEqual(decode_png(read(path))[:2], (64, 32))

    def test_filenames_cannot_escape_the_folder(self):
        out = {"images": [{"filename": "../../evil.png", "data": self.b64}, {"data": self.b64}]}
        paths = si.save_images(out, self.tmp.name)
        self.assertEqual([os.path.dirname(p) for p in paths], [self.tmp.name] * 2)
        self.assertEqual([os.path.basename(p) for p in paths], ["evil.png", "image_00002.png"])

    def test_bad_results_raise_clear_errors(self):
        cases = [
            ({"images": [{"data": "!!not base64!!"}]}, "not valid base64"),
            ({"images": [{"type": "s3_url", "data": "https://x"}]}, "s3_url"),
            ({"message": "data:image/png;base64", "status": "success"}, "no comma"),
            ({"id": "j", "status": "FAILED", "error": "boom"}, "FAILED: boom"),
            ({"error": "Workflow validation failed"}, "Workflow validation failed"),
            ([1, 2], "expected an object"),
        ]
        for result, fragment in cases:
            with self.subTest(fragment=fragment):
                with self.assertRaises(si.ImageOutputError) as caught:
                    si.save_images(result, self.tmp.name)
                self.assertIn(fragment, str(caught.exception))

    def test_cli(self):
        result = os.path.join(self.tmp.name, "result.json")
        with open(result, "w") as f:
            json.dump({"id": "x", "status": "COMPLETED", "output": {"message": self.b64, "status": "success"}}, f)
        out_dir = os.path.join(self.tmp.name, "out")
        stdout, stderr = io.StringIO(), io.StringIO()
        with redirect_stdout(stdout), redirect_stderr(stderr):
            self.assertEqual(si.main([result, out_dir]), 0)
            self.assertEqual(si.main([os.path.join(self.tmp.name, "missing.json"), out_dir]), 2)
            self.assertEqual(si.main([]), 2)
        self.assertEqual(stdout.getvalue().strip(), os.path.join(out_dir, "image_00001.png"))
        self.assertIn("cannot read", stderr.getvalue())


if __name__ == "__main__":
    unittest.main()
