"""ferry: declare serverless endpoints in Python (docs/architecture.md#the-ferry-python-package) and run them (`python -m ferry.worker`).

    from ferry import Endpoint

    @Endpoint(name="hello", cpu="2-8")
    def hello(name="world"):
        return {"greeting": f"hello {name}"}

Standard library only, Python 3.10-3.13.
"""

from .client import EndpointNotDeployed, FerryClientError, Job, Platform, RemoteError, RemoteTimeout
from .endpoint import GPU_MODELS, PYTHON_VERSIONS, Endpoint
from .names import CpuInstanceType, GpuGroup, GpuType
from .progress import progress_update

__all__ = [
    "Endpoint",
    "progress_update",
    "GPU_MODELS",
    "PYTHON_VERSIONS",
    "GpuType",
    "GpuGroup",
    "CpuInstanceType",
    "Job",
    "Platform",
    "RemoteError",
    "RemoteTimeout",
    "EndpointNotDeployed",
    "FerryClientError",
]
__version__ = "0.1.0"
