"""Remote vLLM servers as an engine client: ``RemoteClient`` has the shape of
vLLM's ``EngineClient.generate`` over HTTP, so the label-read core and the
reading layer run unchanged on one or several OpenAI-compatible vLLM servers."""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from ._http import EnvBearerAuth, RemoteOutput, completion_choices, completion_payload, parse_choice, prompt_token_ids
from ._server_pool import PickAgain, Server, ServerPool, post_completions, with_retries

__all__ = ["DEFAULT_API_KEY_ENV", "RemoteClient", "RemoteOptions"]

#: The variable vLLM's own server reads its key from (``--api-key`` otherwise).
DEFAULT_API_KEY_ENV = "VLLM_API_KEY"


@dataclass(frozen=True)
class RemoteOptions:
    """How the client talks to vLLM servers: reads in flight per server
    (``max_concurrency``), seconds per request (``timeout_s``), retries per read
    (``max_retries``), and the environment variable holding the API key
    (``api_key_env``; the key itself is never stored)."""

    max_concurrency: int = 32
    timeout_s: float = 60.0
    max_retries: int = 4
    api_key_env: str = DEFAULT_API_KEY_ENV

    def __post_init__(self) -> None:
        if not isinstance(self.max_concurrency, int) or self.max_concurrency < 1:
            raise ValueError(f"max_concurrency={self.max_concurrency!r}: must be an int >= 1")
        if not isinstance(self.timeout_s, int | float) or not self.timeout_s > 0:
            raise ValueError(f"timeout_s={self.timeout_s!r}: must be a number of seconds > 0")
        if not isinstance(self.max_retries, int) or self.max_retries < 0:
            raise ValueError(f"max_retries={self.max_retries!r}: must be an int >= 0")
        if not isinstance(self.api_key_env, str) or not self.api_key_env:
            raise ValueError(f"api_key_env={self.api_key_env!r}: must name an environment variable")

    @classmethod
    def from_engine_options(cls, options: Mapping[str, Any] | None, *, owner: str) -> RemoteOptions:
        """The options an estimator's ``engine_options`` give the remote client.
        Raises ValueError, naming ``owner``, for keys that are vLLM engine
        options (they belong where the servers are started) or unknown."""
        given = dict(options or {})
        fields = sorted(f.name for f in dataclasses.fields(cls))
        unknown = sorted(set(given) - set(fields))
        if unknown:
            raise ValueError(
                f"{owner}: engine_options {unknown} do not apply to remote servers (base_url is set); "
                f"the remote client takes {fields}, and the servers' own engine options are set "
                "where they are started"
            )
        return cls(**given)

    def as_dict(self) -> dict[str, Any]:
        """The options as keyword arguments (of ``RemoteClient``, ``get_remote_engine``)."""
        return dataclasses.asdict(self)


#: How long ``shutdown`` waits for other loops to close their connections.
_CLOSE_TIMEOUT_S = 5.0


@dataclass
class _LoopState:
    """What an event loop owns: its connections and its per-server slots."""

    http: httpx.AsyncClient
    semaphores: dict[str, asyncio.Semaphore]


class RemoteClient:
    """An engine client over vLLM servers (``servers`` maps each base URL to the
    model name it serves), with vLLM's ``EngineClient.generate`` signature.

    Each read takes one of its server's ``options.max_concurrency`` slots and
    sends one request. Of the ``SamplingParams`` it forwards ``max_tokens``,
    ``temperature``, ``logprobs``, ``logprob_token_ids`` and structured
    outputs. Connections and slots belong to each event loop. ``backoff_s``
    is the first retry delay and server cooldown (doubled per failure)."""

    def __init__(
        self, servers: Mapping[str, str], options: RemoteOptions | None = None, *, backoff_s: float = 0.25
    ) -> None:
        self.options = options if options is not None else RemoteOptions()
        self._pool = ServerPool(servers, backoff_s=backoff_s)
        self.retries = 0  # attempts that failed and were retried (a diagnostic)
        self.requests = 0  # HTTP completion requests sent (a diagnostic)
        self._closed = False
        self._loops: dict[asyncio.AbstractEventLoop, _LoopState] = {}

    @property
    def urls(self) -> list[str]:
        return self._pool.urls

    @property
    def errored(self) -> bool:
        """True once closed (the registry then starts a fresh client)."""
        return self._closed

    def __repr__(self) -> str:
        options = ", ".join(f"{k}={v!r}" for k, v in self.options.as_dict().items())
        return f"RemoteClient(urls={self.urls}, {options}, closed={self._closed})"

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
        state = self._state()

        async def attempt(server: Server) -> Mapping[str, Any]:
            async with state.semaphores[server.url]:
                if not server.live(time.monotonic()) and self._pool.live_other(server):
                    raise PickAgain  # it died while this read waited for a slot
                payload = completion_payload(server.model, [ids], sampling_params, priority=priority)
                self.requests += 1
                body = await post_completions(
                    state.http, server.url, payload, request_id, headers, api_key_env=self.options.api_key_env
                )
                return completion_choices(body, 1, server.url)[0]

        server, choice = await with_retries(
            self._pool, attempt, request_id=request_id, max_retries=self.options.max_retries, on_retry=self._count_retry
        )
        yield parse_choice(choice, request_id, ids, server.url)

    def _count_retry(self) -> None:
        self.retries += 1

    def _state(self) -> _LoopState:
        """This loop's connections and slots, made on its first read (the
        states of loops closed since, such as ``asyncio.run``'s, are dropped)."""
        loop = asyncio.get_running_loop()
        state = self._loops.get(loop)
        if state is None:
            self._loops = {known: s for known, s in self._loops.items() if not known.is_closed()}
            per_server = self.options.max_concurrency
            n = per_server * len(self._pool)
            http = httpx.AsyncClient(
                timeout=httpx.Timeout(self.options.timeout_s),
                limits=httpx.Limits(max_connections=n, max_keepalive_connections=n),
                auth=EnvBearerAuth(self.options.api_key_env),
            )
            sems = {s.url: asyncio.Semaphore(per_server) for s in self._pool.servers}
            state = self._loops[loop] = _LoopState(http, sems)
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
