"""The process-wide registry that embedded (``local``) and remote engines each
keep: engine handles by spec key under one lock, made once per key (an
embedded handle starts its engine on first use), replaced when dead, and
drained at shutdown."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from .handle import Engine

__all__ = ["EngineRegistry"]

logger = logging.getLogger(__name__)


class EngineRegistry:
    """Engines by key; ``shutdown`` stops one (a dead one too)."""

    def __init__(self, shutdown: Callable[[Engine], None]) -> None:
        self._shutdown = shutdown
        self._engines: dict[str, Engine] = {}
        self._lock = threading.Lock()

    def get(self, key: str, start: Callable[[], Engine]) -> Engine:
        """The live engine under ``key``, else a new one from ``start`` (called
        under the lock, so once per key); a dead one is shut down first."""
        with self._lock:
            engine = self._engines.get(key)
            if engine is not None and engine.dead:
                logger.warning("The engine for %s died or was closed; starting a fresh one", engine.model)
                self._shutdown(engine)
                engine = None
            if engine is None:
                engine = self._engines[key] = start()
            return engine

    def find(self, key: str) -> Engine | None:
        """The live engine under ``key``, or None; starts nothing."""
        with self._lock:
            engine = self._engines.get(key)
        return None if engine is None or engine.dead else engine

    def values(self) -> list[Engine]:
        with self._lock:
            return list(self._engines.values())

    def shutdown_all(self) -> None:
        """Empties the registry, then shuts each engine down (outside the lock)."""
        with self._lock:
            engines = list(self._engines.values())
            self._engines.clear()
        for engine in engines:
            self._shutdown(engine)

    def forget_after_fork(self) -> list[Engine]:
        """In a forked child: empties the registry and replaces its lock (the
        parent may have held it at the fork); returns the parent's engines."""
        engines = list(self._engines.values())
        self._engines.clear()
        self._lock = threading.Lock()
        return engines
