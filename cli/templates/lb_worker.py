"""A load-balanced endpoint: HTTP routes served by always-ready workers.

Run it locally with `ferry dev`, then:
    curl -X POST http://localhost:8888/lb_worker/process -H 'Content-Type: application/json' \
         -d '{"input_data": {"message": "hello"}}'
    curl http://localhost:8888/lb_worker/health
"""

from ferry import Endpoint

api = Endpoint(name="lb_worker", cpu="1-2", workers=(1, 3))


@api.post("/process")
async def process(input_data: dict) -> dict:
    """Echo the input back with a timestamp."""
    from datetime import datetime, timezone

    return {
        "status": "success",
        "echo": input_data,
        "timestamp": datetime.now(timezone.utc).isoformat(),
    }


@api.get("/health")
async def health() -> dict:
    """Report that the worker is up."""
    return {"status": "healthy"}
