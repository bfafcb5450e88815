"""A queue-based GPU endpoint. torch is imported inside the function: the project deploys (and
`ferry dev` scans it) without torch installed locally, and the worker image ships torch.

Run it locally with `ferry dev`, then:
    curl -X POST http://localhost:8888/gpu_worker/runsync -H 'Content-Type: application/json' \
         -d '{"input": {"input_data": {"message": "hello"}}}'
"""

from ferry import Endpoint


@Endpoint(name="gpu_worker", gpu="any", workers=(0, 3), dependencies=["torch"])
async def gpu_hello(input_data: dict) -> dict:
    """Say hello from a GPU (or from the CPU when there is none)."""
    import platform

    try:
        import torch

        if torch.cuda.is_available():
            device = {"available": True, "name": torch.cuda.get_device_name(0)}
            total = float(torch.arange(1000, device="cuda").sum().item())
        else:
            device = {"available": False, "name": "cpu (no GPU visible to torch)"}
            total = float(torch.arange(1000).sum().item())
    except ImportError:
        device = {"available": False, "name": "cpu (torch is not installed here)"}
        total = float(sum(range(1000)))

    return {
        "message": f"Hello from the GPU worker: {input_data.get('message', 'hi')}",
        "gpu": device,
        "sum": total,
        "python_version": platform.python_version(),
    }


if __name__ == "__main__":
    # Calls the endpoint: the job runs in one of its workers (`ferry dev` or a deployed app must be
    # running; `ferry sdk install` makes `ferry` importable here). <function>.local(...) runs it in this process.
    import asyncio

    print(asyncio.run(gpu_hello({"message": "local test"})))
