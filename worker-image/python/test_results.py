"""How handler results and yields become job-done and job-stream bodies."""
import unittest

from ferry.protocol import stream_chunk
from ferry.queue_runtime import result_body


class ResultBodyTest(unittest.TestCase):
    def test_plain_values_are_output(self):
        self.assertEqual(result_body({"a": 1}), {"output": {"a": 1}})
        self.assertEqual(result_body([1, 2]), {"output": [1, 2]})
        self.assertEqual(result_body(None), {"output": None})

    def test_a_returned_error_fails_the_job_and_keeps_the_rest(self):
        self.assertEqual(result_body({"error": "bad node"}), {"error": "bad node"})
        self.assertEqual(
            result_body({"error": "bad", "details": ["x"], "refresh_worker": True}),
            {"error": "bad", "output": {"details": ["x"]}, "stopPod": True},
        )

    def test_refresh_worker_is_taken_out_of_the_output_and_asks_for_stop_pod(self):
        self.assertEqual(result_body({"refresh_worker": True, "a": 1}), {"output": {"a": 1}, "stopPod": True})
        # Nothing left but the flag: no output at all, as RunPod's SDK sends it.
        self.assertEqual(result_body({"refresh_worker": True}), {"stopPod": True})
        self.assertEqual(result_body({"refresh_worker": False, "a": 1}), {"output": {"a": 1}})

    def test_a_non_string_error_becomes_a_string(self):
        self.assertEqual(result_body({"error": {"code": 3}}), {"error": '{"code": 3}'})

    def test_a_falsy_error_is_taken_out_of_the_output(self):
        # RunPod's SDK pops "error" whatever its value; only a truthy one fails the job.
        self.assertEqual(result_body({"error": None, "x": 1}), {"output": {"x": 1}})
        self.assertEqual(result_body({"error": "", "x": 1}), {"output": {"x": 1}})
        self.assertEqual(result_body({"error": None}), {})

    def test_an_empty_dict_sends_no_output(self):
        # As RunPod's SDK: an output that ends up {} is dropped, and the job completes without one.
        self.assertEqual(result_body({}), {})
        self.assertEqual(result_body({"refresh_worker": False}), {})


class StreamChunkTest(unittest.TestCase):
    def test_values_are_wrapped_like_runpod(self):
        self.assertEqual(stream_chunk("tok"), {"output": "tok"})
        self.assertEqual(stream_chunk({"text": "a"}), {"output": {"text": "a"}})

    def test_a_spec_chunk_goes_as_it_is(self):
        chunk = {"output": {"text": ["a"]}, "metrics": {"stream_index": 0}}
        self.assertEqual(stream_chunk(chunk), chunk)

    def test_a_yielded_output_dict_is_wrapped_like_runpod(self):
        # RunPod's SDK (rp_job.py run_job_generator) wraps it too: clients read {"output": 1} back.
        self.assertEqual(stream_chunk({"output": 1}), {"output": {"output": 1}})

    def test_other_dicts_with_output_are_wrapped(self):
        self.assertEqual(stream_chunk({"output": 1, "extra": 2}), {"output": {"output": 1, "extra": 2}})


if __name__ == "__main__":
    unittest.main()
