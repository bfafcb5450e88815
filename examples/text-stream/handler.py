"""A streaming queue endpoint: a generator whose yields are stream chunks (docs/api.md#stream-chunks).

    POST /v2/<id>/run     {"input": {"prompt": "Tell me about rivers", "max_tokens": 32}}
    GET  /v2/<id>/stream/<job id>   -> {"status": ..., "stream": [<chunk>, ...]}
    GET  /v2/<id>/status/<job id>   -> {"status": "COMPLETED", "output": {input_tokens, output_tokens, text}}

Two choices, both explained in README.md:

* Each yield is the whole §2.2 chunk `{"output": {...}, "metrics": {...}}`. The runtime posts a yielded
  object with exactly those two keys as the chunk itself, so /stream shows `metrics` beside `output`;
  anything else it wraps as RunPod's SDK does (`{"output": <yielded>}`).
* The generator *returns* the §2.1 text-generation object. A generator's return value, when it is not
  None, is the job's final output; without one the runtime would aggregate the yields into a list.
"""

from ferry import Endpoint

from textgen import final_output, stream_chunks


@Endpoint(name="text-stream", cpu="1-2", workers=(0, 1))
def generate(prompt, max_tokens=64, chunk_size=4, token_delay_ms=20):
    """Stream generated text, a few tokens per chunk."""
    # Bad parameters raise GenerationError (a ValueError) before the first chunk: the job fails with it.
    chunks = []
    for chunk in stream_chunks(prompt, max_tokens, chunk_size, token_delay_ms):
        chunks.append(chunk)
        yield chunk
    return final_output(chunks)
