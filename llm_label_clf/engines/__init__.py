"""The engine layer: where label reads are computed.

An ``Engine`` (``handle``) is what the reading code holds: a client with vLLM's
``EngineClient.generate`` signature, its tokenizer and its spec. Two kinds:

- ``local``: an embedded vLLM ``AsyncLLM`` per (model, engine settings), its
  processes in their own process group (``_processes``), started with
  defaults chosen for the CPU it runs on (``hardware``; ``engine_info``
  tells what was chosen and why); its handle holds the tokenizer and
  context length vLLM resolves, and starts the engine when a read first
  needs it, so reads found in the read store start none;
- ``remote``: a ``RemoteClient`` (``client``) over one or several vLLM
  servers, built from a server pool with one read's POST and retry loop
  (``_server_pool``) and the HTTP plumbing (``_http``), configured by
  ``RemoteOptions``, validated once.

A third way in stands for the embedded engine where loading the model again
would not do: joblib's loky worker processes (``n_jobs`` with its default
process backend; ``workers`` decides, other processes opt in) read through
``shared``, one vLLM server per
machine and (model, engine settings) on loopback, started by the first
worker (``_shared_server``), found through a per-user registry, and retiring
by itself when idle or when the processes it serves have exited.

``select.engine_for`` picks one for an estimator's (model, base_url,
engine_options). Both registries (``_registry``: engines by spec, under a
lock) live on the library's event loop (``loop``),
which also owns shutdown: at exit remote clients close, then local engines
stop, then the loop stops.

Importing this package imports neither vLLM, torch nor transformers: they
are imported when the first engine starts.
"""

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
