"""Batching of remote reads: the reads that leave one event loop in the same
loop iteration for the same server, with the same parameters, share one
``/v1/completions`` request of at most ``max_batch`` prompts. Fewer HTTP
round trips, same results: each read still gets its own choice, or its own
error (a 4xx for several reads makes them retry alone, see ``Split``)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ._http import batch_key, completion_choices
from ._server_pool import Server
from ._transport import copy_error

__all__ = ["Batch", "Outbox", "Send"]

#: Sends one request: (server, payload, request id for errors, headers) -> JSON body.
Send = Callable[[Server, dict[str, Any], str, dict[str, str]], Awaitable[Any]]


@dataclass
class Batch:
    """Reads bound for one server with the same parameters, sent as one request."""

    server: Server
    template: dict[str, Any]
    headers: dict[str, str]
    prompts: list[list[int]] = field(default_factory=list)
    futures: list[asyncio.Future[Mapping[str, Any]]] = field(default_factory=list)


class Outbox:
    """One event loop's reads waiting to leave in this loop iteration, and the
    batch requests in flight (owned by this loop: it must not be shared)."""

    def __init__(self, send: Send, max_batch: int) -> None:
        self._send = send
        self.max_batch = max_batch
        self._waiting: dict[tuple[str, str], Batch] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def read(self, server: Server, payload: dict[str, Any], headers: dict[str, str]) -> Mapping[str, Any]:
        """Adds one read (``payload`` of one prompt) to this iteration's batch
        for ``server`` and waits for its choice; raises what its batch raised
        (its own copy), or ``Split`` when the server rejected the batch."""
        loop = asyncio.get_running_loop()
        key = (server.url, batch_key(payload, headers))
        if not self._waiting:
            loop.call_soon(self._flush)
        batch = self._waiting.get(key)
        if batch is None or len(batch.prompts) >= self.max_batch:
            if batch is not None:
                self._launch(batch)
            batch = self._waiting[key] = Batch(server, payload, headers)
        future: asyncio.Future[Mapping[str, Any]] = loop.create_future()
        batch.prompts.append(payload["prompt"][0])
        batch.futures.append(future)
        return await future

    def _flush(self) -> None:
        batches, self._waiting = list(self._waiting.values()), {}
        for batch in batches:
            self._launch(batch)

    def _launch(self, batch: Batch) -> None:
        task = asyncio.get_running_loop().create_task(self._post(batch))
        self._tasks.add(task)  # a reference, so the task is not collected mid-flight
        task.add_done_callback(self._tasks.discard)

    async def _post(self, batch: Batch) -> None:
        """Sends a batch and hands each read its choice, or its error."""
        payload = {**batch.template, "prompt": batch.prompts}
        n = len(batch.prompts)
        try:
            body = await self._send(batch.server, payload, f"(a batch of {n})", batch.headers)
            choices = completion_choices(body, n, batch.server.url)
        except asyncio.CancelledError:  # the loop is going away: so are its reads
            for future in batch.futures:
                future.cancel()
            raise
        except Exception as exc:
            for future in batch.futures:
                if not future.done():
                    future.set_exception(copy_error(exc, n))
            return
        for future, choice in zip(batch.futures, choices, strict=True):
            if not future.done():
                future.set_result(choice)
