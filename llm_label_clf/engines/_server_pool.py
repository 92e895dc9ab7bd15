"""The remote client's servers and their health: which server a read goes to
(the least busy live one), and how long a failed server stays out of
rotation. Shared by every event loop that reads, so it holds no loop objects.

Kept (not a single URL) because it is what makes ``base_url`` a list: reads
survive a server's death (``test_remote``: server A SIGKILLed after 30 of
200 reads, every read still equals the embedded engine's) and spread over
servers on separate machines. It buys no speed on one machine: two servers
sharing 2 CPUs gave 18.5 texts/s against 24.5 for one (``bench/remote.py``)."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from ._http import normalize_url

__all__ = ["MAX_COOLDOWN_S", "Server", "ServerPool"]

logger = logging.getLogger(__name__)

#: The longest a failed server stays out of rotation.
MAX_COOLDOWN_S = 30.0


@dataclass
class Server:
    """One server's address and health."""

    url: str
    model: str  # the name this server serves the model under
    in_flight: int = 0
    failures: int = 0
    down_until: float = 0.0

    def live(self, now: float) -> bool:
        return self.down_until <= now


class ServerPool:
    """The servers of one client (``servers`` maps each base URL to the model
    name it serves); ``backoff_s`` is the first cooldown, doubled with each
    failure in a row up to ``MAX_COOLDOWN_S``."""

    def __init__(self, servers: Mapping[str, str], *, backoff_s: float) -> None:
        if not servers:
            raise ValueError("RemoteClient needs at least one server URL")
        self.servers = [Server(normalize_url(url), name) for url, name in servers.items()]
        if len({s.url for s in self.servers}) != len(self.servers):
            raise ValueError(f"RemoteClient lists a server twice: {list(servers)}")
        self.backoff_s = backoff_s
        self._turn = itertools.count()

    def __len__(self) -> int:
        return len(self.servers)

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self.servers]

    def pick(self, avoid: Server | None = None) -> Server:
        """The live server with the fewest reads in flight (ties in turn),
        other than ``avoid`` where possible; when all are down, the one that
        comes back first."""
        now = time.monotonic()
        live = [s for s in self.servers if s.live(now)]
        pool = [s for s in live if s is not avoid] or live
        if not pool:
            return min(self.servers, key=lambda s: s.down_until)
        start = next(self._turn) % len(pool)
        return min(pool[start:] + pool[:start], key=lambda s: s.in_flight)

    def live_other(self, server: Server) -> bool:
        """Whether a server other than ``server`` is live now."""
        now = time.monotonic()
        return any(s is not server and s.live(now) for s in self.servers)

    @contextmanager
    def busy(self, server: Server) -> Iterator[Server]:
        """Counts a read as in flight on ``server`` (waiting for a slot included)."""
        server.in_flight += 1
        try:
            yield server
        finally:
            server.in_flight -= 1

    def mark_up(self, server: Server) -> None:
        """A read succeeded on ``server``: its next failure starts a fresh cooldown."""
        server.failures = 0

    def mark_down(self, server: Server) -> None:
        """Takes ``server`` out of rotation for a cooldown that doubles with
        each failure in a row (reads failing together count once)."""
        now = time.monotonic()
        if not server.live(now):
            return
        server.failures += 1
        server.down_until = now + min(self.backoff_s * 2**server.failures, MAX_COOLDOWN_S)
        if server.failures == 1:
            logger.warning("vLLM server %s failed; moving its reads to other servers", server.url)
