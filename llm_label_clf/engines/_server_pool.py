"""The remote client's servers and one read's way through them: the least
busy live server, how long a failed one stays out, the read's
``/v1/completions`` POST, and its retry and fail-over loop (one that used up
its retries raises ``RemoteServerError``). Holds no loop objects."""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from ..exceptions import RemoteServerError
from ._http import RemoteRequestError, auth_message, error_text, normalize_url

__all__ = ["PickAgain", "Retry", "Server", "ServerPool", "post_completions", "with_retries"]

logger = logging.getLogger(__name__)
T = TypeVar("T")

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


#: Statuses that say "later", not "never": timeout and rate limit.
RETRY_STATUS = frozenset({408, 429})


class Retry(Exception):
    """One attempt failed in a way another attempt may not; ``server_down``
    when the server itself looks down (its reads move elsewhere)."""

    def __init__(self, reason: str, *, server_down: bool) -> None:
        super().__init__(reason)
        self.server_down = server_down


async def post_completions(
    http: httpx.AsyncClient,
    url: str,
    payload: dict[str, Any],
    request_id: str,
    headers: dict[str, str],
    *,
    api_key_env: str,
) -> Any:
    """POSTs ``payload`` to ``url``'s ``/v1/completions`` and returns the JSON
    body. Raises ``Retry`` on connection errors, 408, 429 and 5xx, and
    ``RemoteRequestError`` on any other non-200 status."""
    try:
        response = await http.post(f"{url}/v1/completions", json=payload, headers=headers)
    except httpx.TransportError as exc:  # refused, reset, timed out, closed mid-answer
        raise Retry(f"{type(exc).__name__}: {exc}", server_down=True) from None
    status = response.status_code
    if status in RETRY_STATUS:
        raise Retry(f"HTTP {status}", server_down=False)
    if status >= 500:  # 502-504: the server or its proxy is down or overloaded
        raise Retry(f"HTTP {status}: {error_text(response)}", server_down=status in (502, 503, 504))
    if status in (401, 403):
        raise RemoteRequestError(auth_message(url, status, api_key_env), status)
    if status != 200:
        raise RemoteRequestError(f"{url} rejected request {request_id} (HTTP {status}): {error_text(response)}", status)
    return response.json()


class PickAgain(Exception):
    """An attempt did not use its server (it went down while the read waited
    for a slot): pick again, not a failure."""


async def with_retries(
    pool: ServerPool,
    attempt: Callable[[Server], Awaitable[T]],
    *,
    request_id: str,
    max_retries: int,
    on_retry: Callable[[], None] | None = None,
) -> tuple[Server, T]:
    """``attempt(server)`` until it succeeds, and the server that answered.
    ``Retry`` counts as a failed attempt (``on_retry`` is called before each
    new try); ``PickAgain`` does not; any other error propagates."""
    errors: list[str] = []
    avoid: Server | None = None
    while True:
        server = pool.pick(avoid)
        with pool.busy(server):
            try:
                result = await attempt(server)
            except PickAgain:
                continue
            except Retry as exc:
                errors.append(f"{server.url}: {exc}")
                if exc.server_down:
                    pool.mark_down(server)
            else:
                pool.mark_up(server)
                return server, result
        if len(errors) > max_retries:
            raise RemoteServerError(
                f"request {request_id} failed after {len(errors)} attempt(s) "
                f"({'; '.join(errors[-3:])}): check that the servers {pool.urls} are running "
                "and reachable, or raise max_retries / timeout_s"
            )
        if on_retry is not None:
            on_retry()
        avoid = server
        if not pool.live_other(server):
            delay = pool.backoff_s * 2 ** (len(errors) - 1)
            await asyncio.sleep(delay * random.uniform(0.75, 1.25))
