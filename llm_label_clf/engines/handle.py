"""The engine handle: what every reader holds, whether the engine is an
embedded vLLM ``AsyncLLM`` or a ``RemoteClient`` over vLLM servers. The reading
code sees only this, so it never needs to know which kind it talks to."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Engine", "finished_engine_processes"]


@dataclass
class Engine:
    """A started engine: the vLLM client, its tokenizer and the spec it serves."""

    model: str
    options: dict[str, Any]
    client: Any
    tokenizer: Any
    max_model_len: int
    settings: dict[str, Any] = field(default_factory=dict)
    """What the engine was started with: the user's options over our defaults
    (embedded engines: every vLLM engine argument we set, and the dtype it runs)."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _request_counter: int = 0

    def next_request_id(self, prefix: str = "llc") -> str:
        """A request-id prefix unique within this engine (vLLM requires it)."""
        with self._lock:
            self._request_counter += 1
            return f"{prefix}{os.getpid()}-{self._request_counter}"

    @property
    def dead(self) -> bool:
        """True once the client is gone or errored (vLLM's public
        ``EngineClient.errored``), or, for embedded engines, once one of its
        engine processes has exited, even before vLLM's monitor thread sets
        ``errored`` (``finished_engine_processes``): the registry then starts
        a fresh one."""
        if self.client is None or bool(getattr(self.client, "errored", False)):
            return True
        return bool(finished_engine_processes(self.client))


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
