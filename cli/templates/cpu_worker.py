"""A queue-based CPU endpoint: each job's input becomes keyword arguments.

Run it locally with `ferry dev`, then:
    curl -X POST http://localhost:8888/cpu_worker/runsync -H 'Content-Type: application/json' \
         -d '{"input": {"input_data": {"message": "hello"}}}'
"""

from ferry import Endpoint


@Endpoint(name="cpu_worker", cpu="2-4", workers=(0, 3))
async def cpu_hello(input_data: dict) -> dict:
    """Say hello from a CPU worker."""
    import platform
    from datetime import datetime, timezone

    return {
        "message": f"Hello from the CPU worker: {input_data.get('message', 'hi')}",
        "timestamp": datetime.now(timezone.utc).isoformat(),
        "platform": platform.system(),
        "python_version": platform.python_version(),
    }


if __name__ == "__main__":
    # Calls the endpoint: the job runs in one of its workers (`ferry dev` or a deployed app must be
    # running; `ferry sdk install` makes `ferry` importable here). <function>.local(...) runs it in this process.
    import asyncio

    print(asyncio.run(cpu_hello({"message": "local test"})))
