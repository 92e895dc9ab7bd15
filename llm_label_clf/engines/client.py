"""Remote vLLM servers as an engine client: ``RemoteClient`` has the shape of
vLLM's ``EngineClient.generate`` over HTTP, so the label-read core and the
reading layer run unchanged on one or several OpenAI-compatible vLLM servers.

Each read goes to the live server with the fewest reads in flight (at most
``max_concurrency`` per server, ``_server_pool``); reads that leave together
share one ``/v1/completions`` request (up to ``max_batch`` prompts,
``_batcher``). A read is retried with exponential backoff on connection
errors, 429 and 5xx, and moved to another server when its own dies
(``_retry``); one that exhausts its retries raises, so the core names its
item in a ``GenerationError``: no read is lost silently.

The API key is read from an environment variable at each request (``Bearer``)
and never stored on an object, so neither ``repr`` nor a pickle can expose it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from ._batcher import Outbox
from ._http import (
    EnvBearerAuth,
    RemoteOutput,
    completion_choices,
    completion_payload,
    parse_choice,
    prompt_token_ids,
)
from ._retry import PickAgain, with_retries
from ._server_pool import Server, ServerPool
from ._transport import Split, post_completions
from .options import DEFAULT_API_KEY_ENV, RemoteOptions

__all__ = ["RemoteClient"]

#: How long ``shutdown`` waits for other loops to close their connections.
_CLOSE_TIMEOUT_S = 5.0


@dataclass
class _LoopState:
    """What an event loop owns: its connections, its per-server slots and
    its outbox of reads waiting to leave."""

    http: httpx.AsyncClient
    semaphores: dict[str, asyncio.Semaphore]
    outbox: Outbox


class RemoteClient:
    """An engine client over vLLM servers (``servers`` maps each base URL to the
    model name it serves), with vLLM's ``EngineClient.generate`` signature.

    Each read takes one of its server's ``max_concurrency`` slots; reads that
    get slots in the same loop iteration leave as one request of at most
    ``max_batch`` prompts (fewer HTTP round trips, same results). Of the
    ``SamplingParams`` it forwards ``max_tokens``, ``temperature``, ``logprobs``
    and ``logprob_token_ids``. Connections and slots belong to each event loop.
    The options are checked by ``RemoteOptions``."""

    def __init__(
        self,
        servers: Mapping[str, str],
        *,
        max_concurrency: int = RemoteOptions.max_concurrency,
        max_batch: int = RemoteOptions.max_batch,
        timeout_s: float = RemoteOptions.timeout_s,
        max_retries: int = RemoteOptions.max_retries,
        api_key_env: str = DEFAULT_API_KEY_ENV,
        backoff_s: float = 0.25,
    ) -> None:
        self._setup(servers, RemoteOptions(max_concurrency, max_batch, timeout_s, max_retries, api_key_env), backoff_s)

    @classmethod
    def from_options(
        cls, servers: Mapping[str, str], options: RemoteOptions, *, backoff_s: float = 0.25
    ) -> RemoteClient:
        """A client with options already checked (the registry's way in)."""
        client = cls.__new__(cls)
        client._setup(servers, options, backoff_s)
        return client

    def _setup(self, servers: Mapping[str, str], options: RemoteOptions, backoff_s: float) -> None:
        self.options = options
        self._pool = ServerPool(servers, backoff_s=backoff_s)
        self.retries = 0  # attempts that failed and were retried (a diagnostic)
        self.requests = 0  # HTTP completion requests sent (a diagnostic)
        self._closed = False
        self._loops: dict[asyncio.AbstractEventLoop, _LoopState] = {}

    # --- the options, read-only ----------------------------------------------

    @property
    def max_concurrency(self) -> int:
        return self.options.max_concurrency

    @property
    def max_batch(self) -> int:
        return self.options.max_batch

    @property
    def timeout_s(self) -> float:
        return self.options.timeout_s

    @property
    def max_retries(self) -> int:
        return self.options.max_retries

    @property
    def api_key_env(self) -> str:
        return self.options.api_key_env

    @property
    def backoff_s(self) -> float:
        return self._pool.backoff_s

    @property
    def urls(self) -> list[str]:
        return self._pool.urls

    @property
    def errored(self) -> bool:
        """True once closed (the registry then starts a fresh client)."""
        return self._closed

    def __repr__(self) -> str:
        return (
            f"RemoteClient(urls={self.urls}, max_concurrency={self.max_concurrency}, "
            f"max_batch={self.max_batch}, timeout_s={self.timeout_s}, max_retries={self.max_retries}, "
            f"api_key_env={self.api_key_env!r}, closed={self._closed})"
        )

    def __reduce__(self) -> Any:
        raise TypeError(
            "RemoteClient holds live connections and is not picklable: pickle the "
            "estimator (plain data), which reconnects through get_remote_engine"
        )

    # --- reads -------------------------------------------------------------

    async def generate(
        self,
        prompt: Any,
        sampling_params: Any,
        request_id: str,
        *,
        lora_request: Any | None = None,
        trace_headers: Mapping[str, str] | None = None,
        priority: int = 0,
        **_: Any,
    ) -> AsyncIterator[RemoteOutput]:
        """Reads one prompt (a ``TokensPrompt``) on a server and yields its one
        final output. Raises RemoteServerError when every retry failed and
        RemoteRequestError when a server rejected the read."""
        if self._closed:
            raise RuntimeError(f"{self!r} is closed: get_remote_engine() starts a fresh one")
        if lora_request is not None:
            raise ValueError("LoRA requests are not supported remotely: serve the adapter under its own model name")
        ids = prompt_token_ids(prompt)
        headers = dict(trace_headers or {})
        server, choice = await self._read(sampling_params, ids, request_id, headers, priority)
        yield parse_choice(choice, request_id, ids, server.url)

    async def _read(
        self, params: Any, ids: list[int], request_id: str, headers: dict[str, str], priority: int
    ) -> tuple[Server, Mapping[str, Any]]:
        """One read's choice: batched with its neighbours unless ``max_batch``
        is 1 or its batch was rejected (then alone, so errors name it)."""
        state = self._state()
        alone = self.max_batch == 1

        async def attempt(server: Server) -> Mapping[str, Any]:
            nonlocal alone
            async with state.semaphores[server.url]:
                if not server.live(time.monotonic()) and self._pool.live_other(server):
                    raise PickAgain  # it died while this read waited for a slot
                payload = completion_payload(server.model, [ids], params, priority=priority)
                if alone:
                    body = await self._post(state.http, server, payload, request_id, headers)
                    return completion_choices(body, 1, server.url)[0]
                try:
                    return await state.outbox.read(server, payload, headers)
                except Split:
                    alone = True
                    raise PickAgain from None

        return await with_retries(
            self._pool, attempt, request_id=request_id, max_retries=self.max_retries, on_retry=self._count_retry
        )

    def _count_retry(self) -> None:
        self.retries += 1

    async def _post(
        self,
        http: httpx.AsyncClient,
        server: Server,
        payload: dict[str, Any],
        request_id: str,
        headers: dict[str, str],
    ) -> Any:
        """Sends one request (counted in ``requests``)."""
        self.requests += 1
        return await post_completions(http, server.url, payload, request_id, headers, api_key_env=self.api_key_env)

    def _state(self) -> _LoopState:
        """This loop's connections and slots, made on its first read (the
        states of loops closed since, such as ``asyncio.run``'s, are dropped)."""
        loop = asyncio.get_running_loop()
        state = self._loops.get(loop)
        if state is None:
            self._loops = {known: s for known, s in self._loops.items() if not known.is_closed()}
            n = self.max_concurrency * len(self._pool)
            http = httpx.AsyncClient(
                timeout=httpx.Timeout(self.timeout_s),
                limits=httpx.Limits(max_connections=n, max_keepalive_connections=n),
                auth=EnvBearerAuth(self.api_key_env),
            )
            sems = {s.url: asyncio.Semaphore(self.max_concurrency) for s in self._pool.servers}
            outbox = Outbox(functools.partial(self._post, http), self.max_batch)
            state = self._loops[loop] = _LoopState(http, sems, outbox)
        return state

    # --- closing -----------------------------------------------------------

    async def aclose(self) -> None:
        """Closes the client and its connections; later reads raise."""
        here, _ = self._close(asyncio.get_running_loop())
        if here is not None:
            await here.http.aclose()

    def shutdown(self) -> None:
        """Closes the client from sync code: each loop's connections close on
        that loop, and those of loops on other threads (the library's loop at
        exit) are waited for, briefly."""
        try:
            current: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            current = None
        here, closing = self._close(current)
        if here is not None and current is not None:  # called from our own loop: close once it is free
            asyncio.run_coroutine_threadsafe(here.http.aclose(), current)
        concurrent.futures.wait(closing, timeout=_CLOSE_TIMEOUT_S)

    def _close(
        self, here: asyncio.AbstractEventLoop | None
    ) -> tuple[_LoopState | None, list[concurrent.futures.Future[None]]]:
        """Marks the client closed and closes each running loop's connections
        on that loop; returns the state of ``here`` for the caller to close,
        and the other loops' closings."""
        self._closed = True
        states, self._loops = list(self._loops.items()), {}
        mine = None
        closing = []
        for loop, state in states:
            if loop is here:
                mine = state
            elif loop.is_running():
                closing.append(asyncio.run_coroutine_threadsafe(state.http.aclose(), loop))
        return mine, closing
