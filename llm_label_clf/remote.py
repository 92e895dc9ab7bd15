"""Remote vLLM servers as an engine: ``RemoteClient`` has the shape of vLLM's
``EngineClient.generate`` over HTTP, so the label-read core and the scoring
layer run unchanged on one or several OpenAI-compatible vLLM servers.

Each read goes to the live server with the fewest reads in flight (at most
``max_concurrency`` per server); reads that leave together share one
``/v1/completions`` request (up to ``max_batch`` prompts). A read is retried
with exponential backoff on connection errors, 429 and 5xx, and moved to
another server when its own dies; one that exhausts its retries raises, so the
core names its item in a ``GenerationError``: no read is lost silently.

The API key is read from an environment variable at each request (``Bearer``)
and never stored on an object, so neither ``repr`` nor a pickle can expose it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import random
import threading
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from ._http import (
    EnvBearerAuth,
    RemoteOutput,
    RemoteRequestError,
    RemoteServerError,
    auth_message,
    batch_key,
    check_label_reads,
    check_tokenizer,
    completion_choices,
    completion_payload,
    error_text,
    normalize_url,
    parse_choice,
    prompt_token_ids,
    served_card,
)
from .builtin_model import resolve_model
from .engine import Engine

__all__ = [
    "DEFAULT_API_KEY_ENV",
    "RemoteClient",
    "RemoteRequestError",
    "RemoteServerError",
    "get_remote_engine",
    "shutdown_remote_engines",
]

logger = logging.getLogger(__name__)

#: The variable vLLM's own server reads its key from (``--api-key`` otherwise).
DEFAULT_API_KEY_ENV = "VLLM_API_KEY"
_RETRY_STATUS = frozenset({408, 429})
_MAX_COOLDOWN_S = 30.0


class _Retry(Exception):
    """One attempt failed in a way another attempt may not (internal)."""

    def __init__(self, reason: str, *, server_down: bool) -> None:
        super().__init__(reason)
        self.server_down = server_down


class _Split(Exception):
    """A server rejected a batch: its reads go alone, so the error names its read."""


@dataclass
class _Server:
    """One server's address and health, shared by every loop that reads."""

    url: str
    model: str  # the name this server serves the model under
    in_flight: int = 0
    failures: int = 0
    down_until: float = 0.0

    def live(self, now: float) -> bool:
        return self.down_until <= now


@dataclass
class _Batch:
    """Reads bound for one server with the same parameters, sent as one request."""

    server: _Server
    template: dict[str, Any]
    headers: dict[str, str]
    prompts: list[list[int]] = field(default_factory=list)
    futures: list[asyncio.Future[Mapping[str, Any]]] = field(default_factory=list)


@dataclass
class _LoopState:
    """What an event loop owns: connections, semaphores and the reads waiting
    to leave in this loop iteration."""

    http: httpx.AsyncClient
    semaphores: dict[str, asyncio.Semaphore]
    outbox: dict[tuple[str, str], _Batch] = field(default_factory=dict)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)


class RemoteClient:
    """An engine client over vLLM servers (``servers`` maps each base URL to the
    model name it serves), with vLLM's ``EngineClient.generate`` signature.

    Each read takes one of its server's ``max_concurrency`` slots; reads that
    get slots in the same loop iteration leave as one request of at most
    ``max_batch`` prompts (fewer HTTP round trips, same results). Of the
    ``SamplingParams`` it forwards ``max_tokens``, ``temperature``, ``logprobs``
    and ``logprob_token_ids``. Connections and slots belong to each event loop."""

    def __init__(
        self,
        servers: Mapping[str, str],
        *,
        max_concurrency: int = 32,
        max_batch: int = 16,
        timeout_s: float = 60.0,
        max_retries: int = 4,
        api_key_env: str = DEFAULT_API_KEY_ENV,
        backoff_s: float = 0.25,
    ) -> None:
        _check_options(max_concurrency, max_batch, timeout_s, max_retries, api_key_env)
        if not servers:
            raise ValueError("RemoteClient needs at least one server URL")
        self._servers = [_Server(normalize_url(url), name) for url, name in servers.items()]
        if len({s.url for s in self._servers}) != len(self._servers):
            raise ValueError(f"RemoteClient lists a server twice: {list(servers)}")
        self.max_concurrency = max_concurrency
        self.max_batch = max_batch
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.api_key_env = api_key_env
        self.backoff_s = backoff_s
        self.retries = 0  # attempts that failed and were retried (a diagnostic)
        self.requests = 0  # HTTP completion requests sent (a diagnostic)
        self._closed = False
        self._turn = itertools.count()
        self._loops: dict[asyncio.AbstractEventLoop, _LoopState] = {}

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self._servers]

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
    ) -> tuple[_Server, Mapping[str, Any]]:
        """One read's choice: on the least busy live server, retried and moved
        to another server on failure, until ``max_retries`` is used up."""
        state = self._state()
        errors: list[str] = []
        avoid: _Server | None = None
        alone = self.max_batch == 1
        while True:
            server = self._pick(avoid)
            server.in_flight += 1
            try:
                async with state.semaphores[server.url]:
                    if not server.live(time.monotonic()) and self._live_other(server):
                        continue  # it died while this read waited for a slot: pick again
                    payload = completion_payload(server.model, [ids], params, priority=priority)
                    if alone:
                        body = await self._post_once(state.http, server, payload, request_id, headers)
                        choice = completion_choices(body, 1, server.url)[0]
                    else:
                        choice = await self._enqueue(state, server, payload, headers)
                    server.failures = 0
                    return server, choice
            except _Split:
                alone = True
                continue
            except _Retry as exc:
                errors.append(f"{server.url}: {exc}")
                if exc.server_down:
                    self._mark_down(server)
            finally:
                server.in_flight -= 1
            if len(errors) > self.max_retries:
                raise RemoteServerError(
                    f"request {request_id} failed after {len(errors)} attempt(s) "
                    f"({'; '.join(errors[-3:])}): check that the servers {self.urls} are running "
                    "and reachable, or raise max_retries / timeout_s"
                )
            self.retries += 1
            avoid = server
            if not self._live_other(server):
                delay = self.backoff_s * 2 ** (len(errors) - 1)
                await asyncio.sleep(delay * random.uniform(0.75, 1.25))

    async def _enqueue(
        self, state: _LoopState, server: _Server, payload: dict[str, Any], headers: dict[str, str]
    ) -> Mapping[str, Any]:
        """Adds a read to this loop iteration's batch for ``server`` and waits for its choice."""
        loop = asyncio.get_running_loop()
        key = (server.url, batch_key(payload, headers))
        if not state.outbox:
            loop.call_soon(self._flush, state)
        batch = state.outbox.get(key)
        if batch is None or len(batch.prompts) >= self.max_batch:
            if batch is not None:
                self._launch(state, batch)
            batch = state.outbox[key] = _Batch(server, payload, headers)
        future: asyncio.Future[Mapping[str, Any]] = loop.create_future()
        batch.prompts.append(payload["prompt"][0])
        batch.futures.append(future)
        return await future

    def _flush(self, state: _LoopState) -> None:
        batches, state.outbox = list(state.outbox.values()), {}
        for batch in batches:
            self._launch(state, batch)

    def _launch(self, state: _LoopState, batch: _Batch) -> None:
        task = asyncio.get_running_loop().create_task(self._post_batch(state, batch))
        state.tasks.add(task)  # a reference, so the task is not collected mid-flight
        task.add_done_callback(state.tasks.discard)

    async def _post_batch(self, state: _LoopState, batch: _Batch) -> None:
        """Sends a batch and hands each read its choice, or its error: a 4xx for
        several reads splits them (one bad prompt fails the whole request)."""
        payload = {**batch.template, "prompt": batch.prompts}
        n = len(batch.prompts)
        try:
            body = await self._post_once(state.http, batch.server, payload, f"(a batch of {n})", batch.headers)
            choices = completion_choices(body, n, batch.server.url)
        except asyncio.CancelledError:  # the loop is going away: so are its reads
            for future in batch.futures:
                future.cancel()
            raise
        except Exception as exc:
            for future in batch.futures:
                if not future.done():
                    future.set_exception(_copy_error(exc, n))
            return
        for future, choice in zip(batch.futures, choices, strict=True):
            if not future.done():
                future.set_result(choice)

    async def _post_once(
        self, http: httpx.AsyncClient, server: _Server, payload: dict[str, Any], request_id: str,
        headers: dict[str, str],
    ) -> Any:
        self.requests += 1
        try:
            response = await http.post(f"{server.url}/v1/completions", json=payload, headers=headers)
        except httpx.TransportError as exc:  # refused, reset, timed out, closed mid-answer
            raise _Retry(f"{type(exc).__name__}: {exc}", server_down=True) from None
        status = response.status_code
        if status in _RETRY_STATUS:
            raise _Retry(f"HTTP {status}", server_down=False)
        if status >= 500:  # 502-504: the server or its proxy is down or overloaded
            raise _Retry(f"HTTP {status}: {error_text(response)}", server_down=status in (502, 503, 504))
        if status in (401, 403):
            raise RemoteRequestError(auth_message(server.url, status, self.api_key_env), status)
        if status != 200:
            raise RemoteRequestError(
                f"{server.url} rejected request {request_id} (HTTP {status}): {error_text(response)}", status
            )
        return response.json()

    def _state(self) -> _LoopState:
        """This loop's connections and slots, made on its first read (the
        states of loops closed since, such as ``asyncio.run``'s, are dropped)."""
        loop = asyncio.get_running_loop()
        state = self._loops.get(loop)
        if state is None:
            self._loops = {known: s for known, s in self._loops.items() if not known.is_closed()}
            n = self.max_concurrency * len(self._servers)
            http = httpx.AsyncClient(
                timeout=httpx.Timeout(self.timeout_s),
                limits=httpx.Limits(max_connections=n, max_keepalive_connections=n),
                auth=EnvBearerAuth(self.api_key_env),
            )
            sems = {s.url: asyncio.Semaphore(self.max_concurrency) for s in self._servers}
            state = self._loops[loop] = _LoopState(http, sems)
        return state

    def _pick(self, avoid: _Server | None) -> _Server:
        """The live server with the fewest reads in flight (ties in turn); when
        all are down, the one that comes back first."""
        now = time.monotonic()
        live = [s for s in self._servers if s.live(now)]
        pool = [s for s in live if s is not avoid] or live
        if not pool:
            return min(self._servers, key=lambda s: s.down_until)
        start = next(self._turn) % len(pool)
        return min(pool[start:] + pool[:start], key=lambda s: s.in_flight)

    def _live_other(self, server: _Server) -> bool:
        now = time.monotonic()
        return any(s is not server and s.live(now) for s in self._servers)

    def _mark_down(self, server: _Server) -> None:
        """Takes ``server`` out of rotation for a cooldown that doubles with
        each failure in a row (reads failing together count once)."""
        now = time.monotonic()
        if not server.live(now):
            return
        server.failures += 1
        server.down_until = now + min(self.backoff_s * 2**server.failures, _MAX_COOLDOWN_S)
        if server.failures == 1:
            logger.warning("vLLM server %s failed; moving its reads to other servers", server.url)

    async def aclose(self) -> None:
        """Closes the client and its connections; later reads raise."""
        here = self._close(asyncio.get_running_loop())
        if here is not None:
            await here.http.aclose()

    def shutdown(self) -> None:
        """Closes the client from sync code (connections close on their loops)."""
        self._close(None)

    def _close(self, here: asyncio.AbstractEventLoop | None) -> _LoopState | None:
        """Marks the client closed and closes each loop's connections on that
        loop; returns the state of ``here`` for the caller to await."""
        self._closed = True
        states, self._loops = list(self._loops.items()), {}
        mine = None
        for loop, state in states:
            if loop is here:
                mine = state
            elif loop.is_running():
                asyncio.run_coroutine_threadsafe(state.http.aclose(), loop)
        return mine


def _copy_error(exc: Exception, n: int) -> Exception:
    """The error each read of a failed batch of ``n`` raises: its own copy of a
    retryable one, or ``_Split`` when the server rejected several reads."""
    if isinstance(exc, _Retry):
        return _Retry(str(exc), server_down=exc.server_down)
    if isinstance(exc, RemoteRequestError) and n > 1 and exc.status not in (401, 403):
        return _Split(str(exc))
    return exc


def _check_options(
    max_concurrency: int, max_batch: int, timeout_s: float, max_retries: int, api_key_env: str
) -> None:
    if not isinstance(max_concurrency, int) or max_concurrency < 1:
        raise ValueError(f"max_concurrency={max_concurrency!r}: must be an int >= 1")
    if not isinstance(max_batch, int) or max_batch < 1:
        raise ValueError(f"max_batch={max_batch!r}: must be an int >= 1 (1 sends each read alone)")
    if not isinstance(timeout_s, int | float) or not timeout_s > 0:
        raise ValueError(f"timeout_s={timeout_s!r}: must be a number of seconds > 0")
    if not isinstance(max_retries, int) or max_retries < 0:
        raise ValueError(f"max_retries={max_retries!r}: must be an int >= 0")
    if not isinstance(api_key_env, str) or not api_key_env:
        raise ValueError(f"api_key_env={api_key_env!r}: must name an environment variable")


# --- the registry: one checked engine per (servers, model, options) ---------

_registry: dict[str, Engine] = {}
_registry_lock = threading.Lock()


def get_remote_engine(
    base_url: str | Sequence[str],
    model: str,
    *,
    max_concurrency: int = 32,
    timeout_s: float = 60.0,
    max_retries: int = 4,
    api_key_env: str = DEFAULT_API_KEY_ENV,
    max_batch: int = 16,
) -> Engine:
    """The shared engine over the vLLM server(s) at ``base_url`` serving
    ``model``, checked on first use: each server answers, serves ``model``,
    tokenizes like the local tokenizer and honours ``logprob_token_ids``.

    ``model`` is the served model name; its tokenizer comes from the built-in
    model, a local folder, or the server's model root. ``max_concurrency``
    bounds the reads in flight per server, ``max_batch`` the prompts in one
    request, ``timeout_s`` each request. Raises ValueError for a
    bad URL or option, a model the server does not serve or another tokenizer;
    RemoteServerError when a server does not answer; PermissionError when it
    wants an API key (read from the environment variable ``api_key_env``);
    RuntimeError when its vLLM ignores ``logprob_token_ids``."""
    urls = [base_url] if isinstance(base_url, str) else list(base_url)
    urls = [normalize_url(url) for url in urls]
    if not urls:
        raise ValueError("base_url is empty: pass a server URL such as 'http://127.0.0.1:8000'")
    if len(set(urls)) != len(urls):
        raise ValueError(f"base_url lists a server twice: {urls}")
    _check_options(max_concurrency, max_batch, timeout_s, max_retries, api_key_env)
    options = {
        "base_url": urls,
        "max_concurrency": max_concurrency,
        "max_batch": max_batch,
        "timeout_s": timeout_s,
        "max_retries": max_retries,
        "api_key_env": api_key_env,
    }
    key = json.dumps([model, {**options, "base_url": sorted(urls)}], sort_keys=True)
    with _registry_lock:
        engine = _registry.get(key)
        if engine is None or engine.dead:
            engine = _registry[key] = _connect(model, options)
        return engine


def shutdown_remote_engines() -> None:
    """Closes every remote engine of this process; the next use reconnects."""
    with _registry_lock:
        engines = list(_registry.values())
        _registry.clear()
    for engine in engines:
        engine.client.shutdown()


def _connect(model: str, options: dict[str, Any]) -> Engine:
    urls, env = options["base_url"], options["api_key_env"]
    with httpx.Client(timeout=min(options["timeout_s"], 30.0), auth=EnvBearerAuth(env)) as http:
        cards = {url: served_card(http, url, model, env) for url in urls}
        tokenizer = _load_tokenizer(model, next(iter(cards.values())))
        for url, card in cards.items():
            check_tokenizer(http, url, card["id"], tokenizer, env)
            check_label_reads(http, url, card["id"], tokenizer, env)
    lengths = [card["max_model_len"] for card in cards.values() if card.get("max_model_len")]
    if not lengths:
        raise RemoteServerError(f"the servers {urls} do not report max_model_len: are they vLLM servers?")
    client = RemoteClient(
        {url: card["id"] for url, card in cards.items()},
        max_concurrency=options["max_concurrency"],
        max_batch=options["max_batch"],
        timeout_s=options["timeout_s"],
        max_retries=options["max_retries"],
        api_key_env=env,
    )
    logger.info("Connected to %s serving %s", urls, model)
    return Engine(model=model, options=options, client=client, tokenizer=tokenizer, max_model_len=min(lengths))


def _load_tokenizer(model: str, card: Mapping[str, Any]) -> Any:
    """The tokenizer of the built-in model, of a local folder ``model``, else of
    the server's model root (a local folder or a hub id)."""
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise ImportError("remote engines need transformers: pip install 'llm_label_clf[remote]'") from None
    source = resolve_model(model)
    if not Path(source).is_dir():
        source = card.get("root") or model
    try:
        return AutoTokenizer.from_pretrained(source)
    except Exception as exc:  # transformers raises many kinds (OSError, ValueError, HF errors)
        raise ValueError(
            f"cannot load the tokenizer for {model!r} from {source!r} ({type(exc).__name__}: {exc}): "
            "pass model= a local Hugging Face folder of the model the server runs"
        ) from exc


