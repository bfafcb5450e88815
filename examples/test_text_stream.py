"""Tests for examples/text-stream: every §2.2 chunk field with its type, and the §2.1 final output."""

import itertools
import json
import unittest

from _support import example_dir, load_handler

example_dir("text-stream")

import textgen  # noqa: E402

FLOAT_METRICS = ("avg_gen_throughput", "avg_prompt_throughput", "cpu_kv_cache_usage", "gpu_kv_cache_usage")
INT_METRICS = ("input_tokens", "output_tokens", "pending", "running", "swapped", "stream_index")


def fake_clock():
    ticks = itertools.count()
    return lambda: next(ticks) * 0.01


def chunks(prompt="Tell me about rivers", max_tokens=10, chunk_size=4):
    return list(textgen.stream_chunks(prompt, max_tokens, chunk_size, clock=fake_clock(), sleep=lambda s: None))


def is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def run_generator(gen):
    """(yields, return value) of a generator, as the runtime sees them."""
    yields = []
    while True:
        try:
            yields.append(next(gen))
        except StopIteration as stop:
            return yields, stop.value


class ChunkShapeTest(unittest.TestCase):
    def assert_chunk(self, chunk):
        self.assertEqual(set(chunk), {"output", "metrics"})
        out, metrics = chunk["output"], chunk["metrics"]
        self.assertEqual(set(out), {"input_tokens", "output_tokens", "text"})
        self.assertTrue(is_int(out["input_tokens"]) and is_int(out["output_tokens"]))
        self.assertIsInstance(out["text"], list)
        self.assertTrue(all(isinstance(t, str) for t in out["text"]))
        self.assertEqual(set(metrics), set(FLOAT_METRICS) | set(INT_METRICS) | {"scenario"})
        for name in FLOAT_METRICS:
            self.assertIsInstance(metrics[name], float, name)
        for name in INT_METRICS:
            self.assertTrue(is_int(metrics[name]), name)
        self.assertIsInstance(metrics["scenario"], str)
        json.dumps(chunk, allow_nan=False)

    def test_every_chunk_has_every_field_with_its_type(self):
        result = chunks()
        self.assertEqual(len(result), 3)  # 10 tokens, 4 per chunk
        for chunk in result:
            self.assert_chunk(chunk)

    def test_counts_and_indexes(self):
        result = chunks(prompt="one two three", max_tokens=10, chunk_size=4)
        self.assertEqual([c["metrics"]["stream_index"] for c in result], [0, 1, 2])
        self.assertEqual([c["output"]["output_tokens"] for c in result], [4, 4, 2])
        self.assertEqual([len(c["output"]["text"]) for c in result], [4, 4, 2])
        self.assertEqual([c["metrics"]["output_tokens"] for c in result], [4, 8, 10])
        self.assertTrue(all(c["output"]["input_tokens"] == 3 for c in result))

    def test_same_prompt_same_text_other_prompt_other_text(self):
        text = [c["output"]["text"] for c in chunks()]
        self.assertEqual(text, [c["output"]["text"] for c in chunks()])
        self.assertNotEqual(text, [c["output"]["text"] for c in chunks(prompt="Tell me about hills")])

    def test_bad_parameters(self):
        for kwargs, fragment in (
            ({"prompt": ""}, "prompt"),
            ({"prompt": 5}, "prompt"),
            ({"max_tokens": 0}, "max_tokens"),
            ({"max_tokens": True}, "max_tokens"),
            ({"chunk_size": 1000}, "chunk_size"),
        ):
            with self.subTest(kwargs=kwargs):
                with self.assertRaises(textgen.GenerationError) as caught:
                    chunks(**kwargs)
                self.assertIn(fragment, str(caught.exception))


class FinalOutputTest(unittest.TestCase):
    def test_final_output_has_the_text_generation_shape(self):
        result = chunks(max_tokens=10)
        final = textgen.final_output(result)
        self.assertEqual(set(final), {"input_tokens", "output_tokens", "text"})
        self.assertEqual(final["input_tokens"], 4)
        self.assertEqual(final["output_tokens"], 10)
        self.assertEqual(final["text"], ["".join(t for c in result for t in c["output"]["text"])])
        self.assertEqual(len(final["text"][0].split()), 10)

    def test_handler_yields_chunks_and_returns_the_final_output(self):
        handler = load_handler("text-stream")
        yields, final = run_generator(handler.generate.local(prompt="Tell me about rivers", max_tokens=9, token_delay_ms=0))
        self.assertEqual(len(yields), 3)
        self.assertEqual([y["output"] for y in yields], [c["output"] for c in chunks(max_tokens=9)])
        self.assertEqual(final, textgen.final_output(yields))
        self.assertEqual(final["output_tokens"], 9)

    def test_handler_fails_before_the_first_chunk_on_bad_input(self):
        handler = load_handler("text-stream")
        with self.assertRaises(ValueError):
            next(handler.generate.local(prompt="", max_tokens=5))


if __name__ == "__main__":
    unittest.main()
