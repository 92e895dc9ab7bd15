"""The engine layer: where label reads are computed (embedded vLLM, remote
servers, the shared server for worker processes). Importing it imports
neither vLLM, torch nor transformers."""

from .client import RemoteClient, RemoteOptions
from .handle import Engine
from .local import engine_info, get_engine, shutdown_engines
from .remote import get_remote_engine, shutdown_remote_engines
from .select import engine_for

__all__ = [
    "Engine",
    "RemoteClient",
    "RemoteOptions",
    "engine_for",
    "engine_info",
    "get_engine",
    "get_remote_engine",
    "shutdown_engines",
    "shutdown_remote_engines",
]
