"""The smallest Ferry app: one queue-based endpoint and one load-balanced endpoint."""

from ferry import Endpoint


# Queue-based: each job's input becomes keyword arguments ({"input": {"name": "Ada"}} -> greet(name="Ada")).
@Endpoint(name="hello", cpu="1-2", workers=(0, 2))
def greet(name="world"):
    """Greet someone by name."""
    return {"greeting": f"Hello, {name}!"}


# Load-balanced: routes take the JSON body (or, for GET, the query) as keyword arguments, no wrapper.
api = Endpoint(name="hello-api", cpu="1-2", workers=(0, 1))


@api.post("/echo")
def echo(**body):
    """Send the JSON body back."""
    return {"echo": body}


@api.get("/health")
def health():
    """Report that the worker is up."""
    return {"status": "ok"}
