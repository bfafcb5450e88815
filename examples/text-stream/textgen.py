"""A deterministic stand-in for a language model, streaming chunks (docs/api.md#stream-chunks). Standard library only.

The "model" is a seeded word generator: the prompt seeds it, so the same prompt and max_tokens always
give the same text, and nothing is downloaded. What matters is the shape of what it streams.

Each chunk is the §2.2 stream-chunk object::

    {"output":  {"input_tokens": 5, "output_tokens": 4, "text": ["the ", "quiet ", "river ", "turns "]},
     "metrics": {"avg_gen_throughput": 812.4, "avg_prompt_throughput": 0.0,
                 "cpu_kv_cache_usage": 0.0, "gpu_kv_cache_usage": 0.0043,
                 "input_tokens": 5, "output_tokens": 4, "pending": 0, "running": 1, "swapped": 0,
                 "stream_index": 0, "scenario": "stream"}}

`output` is this chunk's share (output_tokens counts the tokens in *this* chunk; text holds them, one
string per token), `metrics` are the engine's running totals at the time of the chunk, as a vLLM
worker reports them. The job's final output is the text-generation object of §2.1:
``{"input_tokens", "output_tokens" (the total), "text": [the whole generated text]}`` (see
``final_output``).
"""

import hashlib
import random
import time

VOCABULARY = (
    "the a quiet river turns under old stone bridge light falls on water and morning wind "
    "carries small boats past green hills where birds rest while clouds drift slowly over "
    "fields of wheat near every harbour town people wait for news from distant shores"
).split()
MAX_TOKENS_LIMIT = 4096
# A pretend KV cache: gpu_kv_cache_usage is the share of it the sequence occupies.
KV_CACHE_TOKENS = 4096


class GenerationError(ValueError):
    """Bad generation parameters."""


def count_tokens(text):
    # A whitespace "tokenizer": good enough to make input_tokens depend on the prompt.
    return len(text.split())


def check_params(prompt, max_tokens, chunk_size):
    if not isinstance(prompt, str) or not prompt.strip():
        raise GenerationError(f"prompt must be a non-empty string, got {prompt!r:.60}")
    for name, value, high in (("max_tokens", max_tokens, MAX_TOKENS_LIMIT), ("chunk_size", chunk_size, 256)):
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= high:
            raise GenerationError(f"{name} must be an integer from 1 to {high}, got {value!r}")


def tokens(prompt, max_tokens):
    """The generated tokens: words with their trailing space, seeded by the prompt."""
    rng = random.Random(hashlib.sha256(prompt.encode("utf-8")).hexdigest())
    words = []
    for i in range(max_tokens):
        word = rng.choice(VOCABULARY)
        # A full stop now and then, so the text reads as sentences.
        end = "." if i % 9 == 8 or i == max_tokens - 1 else ""
        words.append(word + end + ("" if i == max_tokens - 1 else " "))
    return words


def stream_chunks(prompt, max_tokens=64, chunk_size=4, token_delay_ms=20, clock=time.perf_counter, sleep=time.sleep):
    """Yield §2.2 chunk objects, `chunk_size` tokens at a time.

    `token_delay_ms` paces generation like a real model (so a client polling /stream sees the chunks
    arrive); `clock` and `sleep` are injectable so tests run instantly.
    """
    check_params(prompt, max_tokens, chunk_size)
    if not isinstance(token_delay_ms, (int, float)) or isinstance(token_delay_ms, bool) or not 0 <= token_delay_ms <= 1000:
        raise GenerationError(f"token_delay_ms must be a number from 0 to 1000, got {token_delay_ms!r}")
    input_tokens = count_tokens(prompt)
    generated = tokens(prompt, max_tokens)
    started = clock()
    prompt_done = clock()
    # Prefill throughput: prompt tokens per second of prefill (our prefill is instant, so measure it).
    prompt_seconds = max(prompt_done - started, 1e-6)
    for index, start in enumerate(range(0, len(generated), chunk_size)):
        piece = generated[start : start + chunk_size]
        if token_delay_ms:
            sleep(token_delay_ms * len(piece) / 1000.0)
        done = start + len(piece)
        elapsed = max(clock() - prompt_done, 1e-6)
        yield {
            "output": {"input_tokens": input_tokens, "output_tokens": len(piece), "text": piece},
            "metrics": {
                "avg_gen_throughput": float(done / elapsed),
                "avg_prompt_throughput": float(input_tokens / prompt_seconds) if index == 0 else 0.0,
                "cpu_kv_cache_usage": 0.0,
                "gpu_kv_cache_usage": float((input_tokens + done) / KV_CACHE_TOKENS),
                "input_tokens": input_tokens,
                "output_tokens": done,
                "pending": 0,
                "running": 1,
                "swapped": 0,
                "stream_index": index,
                "scenario": "stream",
            },
        }


def final_output(chunks):
    """The §2.1 text-generation object for a finished stream: totals and the whole text as one string."""
    chunks = list(chunks)
    if not chunks:
        return {"input_tokens": 0, "output_tokens": 0, "text": [""]}
    return {
        "input_tokens": chunks[0]["output"]["input_tokens"],
        "output_tokens": sum(c["output"]["output_tokens"] for c in chunks),
        "text": ["".join(t for c in chunks for t in c["output"]["text"])],
    }
