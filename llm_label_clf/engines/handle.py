"""The engine handle: what every reader holds, an embedded vLLM ``AsyncLLM``
or a ``RemoteClient``. An embedded engine's handle is made before its
engine starts and starts it, on the library loop, on the first use of
``client``."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

from .loop import on_loop_thread, run_sync

__all__ = ["Engine", "finished_engine_processes"]


class Engine:
    """An engine handle: the client, its tokenizer, its context length and
    the spec it serves. ``settings`` are what an embedded engine starts with:
    the user's options over our defaults (every vLLM engine argument we set,
    and the dtype it runs). ``start``, where given, makes the client on the
    first use of ``client`` (on the library loop); ``config`` is the vLLM
    configuration an embedded engine's handle was resolved with (None where
    a record served it: ``recorded``). Handles are
    not picklable: estimators find theirs again by their plain-data spec."""

    def __init__(
        self,
        model: str,
        options: dict[str, Any],
        client: Any = None,
        tokenizer: Any = None,
        max_model_len: int = 0,
        settings: dict[str, Any] | None = None,
        *,
        start: Callable[[], Any] | None = None,
        config: Any = None,
    ) -> None:
        self.model = model
        self.options = options
        self._client = client
        self.tokenizer = tokenizer
        self.max_model_len = max_model_len
        self.settings = dict(settings or {})
        self.config = config
        self._start = start
        self._closed = False
        self._start_lock = threading.Lock()  # held by the loop thread while it starts the engine
        self._lock = threading.Lock()
        self._request_counter = 0

    def __repr__(self) -> str:
        return (f"Engine(model={self.model!r}, options={self.options!r}, max_model_len={self.max_model_len}, "
                f"started={self.started})")

    def __reduce__(self) -> Any:
        raise TypeError(f"the engine handle for {self.model!r} is not picklable: estimators re-attach by their spec")

    @property
    def client(self) -> Any:
        """The client (vLLM's ``AsyncLLM``, or the remote client), the engine
        started first if it has not (on the library loop: tens of seconds on a
        CPU); None once shut down. Raises RuntimeError when the start fails."""
        if self._client is not None or self._start is None or self._closed:
            return self._client
        if on_loop_thread():
            return self._start_here()
        return run_sync(self._start_on_loop())

    async def _start_on_loop(self) -> Any:
        return self._start_here()

    def _start_here(self) -> Any:
        """Starts the engine on the loop thread, unless it started or closed."""
        with self._start_lock:
            if self._client is None and not self._closed and self._start is not None:
                self._client = self._start()
            return self._client

    def start(self) -> Engine:
        """Starts the engine now, where it has not started; returns the handle."""
        _ = self.client
        return self

    @property
    def started(self) -> bool:
        """Whether the handle holds a client (started, and not shut down)."""
        return self._client is not None

    def close(self) -> Any:
        """Marks the handle shut down and hands back its client (None if it
        never started) for the caller to shut down; a start in progress on the
        loop finishes first, so no engine is left behind."""
        with self._start_lock:
            self._closed = True
            client, self._client = self._client, None
        return client

    def next_request_id(self, prefix: str = "llc") -> str:
        """A request-id prefix unique within this engine (vLLM requires it)."""
        with self._lock:
            self._request_counter += 1
            return f"{prefix}{os.getpid()}-{self._request_counter}"

    @property
    def dead(self) -> bool:
        """True once shut down, or once the client errored (vLLM's public
        ``EngineClient.errored``), or, for embedded engines, once one of its
        engine processes has exited, even before vLLM's monitor thread sets
        ``errored`` (``finished_engine_processes``): the registry then starts
        a fresh one. A handle whose engine has not started yet is not dead
        (this never starts it)."""
        client = self._client
        if client is None:
            return self._closed or self._start is None
        if bool(getattr(client, "errored", False)):
            return True
        return bool(finished_engine_processes(client))


def finished_engine_processes(client: Any) -> dict[str, int]:
    """The exited engine processes of an embedded ``AsyncLLM`` (name -> exit
    code); empty for other clients. vLLM 0.32 has no public way to list an
    engine's processes, so this reads its private
    ``engine_core.resources.engine_manager`` and fails soft (empty) when that
    is missing or raises."""
    try:
        return dict(client.engine_core.resources.engine_manager.finished_procs())
    except Exception:  # private vLLM internals: absent in remote clients, may change in any release
        return {}
