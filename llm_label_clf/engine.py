"""The engine layer: one vLLM ``AsyncLLM`` per (model, engine options) per
process, created lazily on the library loop and shared by every caller that
asks for the same spec (estimators cloned by ``cross_val_score`` included).

Engines are never pickled; an estimator re-attaches to the registry by its
plain-data spec. A dead engine (its process killed) is replaced on next use.
"""

from __future__ import annotations

import asyncio
import atexit
import gc
import json
import logging
import os
import threading
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ._bridge import run_sync, stop_loop
from ._engine_processes import own_process_group
from .builtin_model import resolve_model

__all__ = ["Engine", "cpu_defaults", "engine_count", "get_engine", "shutdown_engines"]

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "smollm2-135m-instruct"
#: KV cache on CPU: 1 GiB holds ~46k tokens of the built-in model; vLLM's
#: default memory share is of a NUMA node whose size drifts and can fail.
CPU_KV_CACHE_BYTES = 1 << 30
#: KV block size on CPU: the prefix cache reuses whole blocks only.
CPU_BLOCK_SIZE = 32


@dataclass
class Engine:
    """A started engine: the vLLM client, its tokenizer and the spec it serves."""

    model: str
    options: dict[str, Any]
    client: Any
    tokenizer: Any
    max_model_len: int
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _request_counter: int = 0

    def next_request_id(self, prefix: str = "llc") -> str:
        """A request-id prefix unique within this engine (vLLM requires it)."""
        with self._lock:
            self._request_counter += 1
            return f"{prefix}{os.getpid()}-{self._request_counter}"

    @property
    def dead(self) -> bool:
        return self.client is None or bool(getattr(self.client, "errored", False))


_registry: dict[str, Engine] = {}
_registry_lock = threading.Lock()
_starts = 0


def _spec_key(model: str, options: Mapping[str, Any]) -> str:
    return json.dumps([model, dict(options)], sort_keys=True, default=repr)


def cpu_defaults() -> dict[str, Any]:
    """Engine options that start fast and fit a small CPU machine: eager mode
    (~20 s to start instead of ~65 s, and compiled is only ~10% faster), an
    explicit 1 GiB KV cache, and 32-token KV blocks (the CPU backend's smallest;
    its default 128 means a prompt shorter than 128 tokens is never reused from
    the prefix cache, which multi-token labels and few-shot prompts rely on).
    User options override each of these."""
    return {"enforce_eager": True, "kv_cache_memory_bytes": CPU_KV_CACHE_BYTES, "block_size": CPU_BLOCK_SIZE}


def _prepare_environment() -> None:
    """Sets vLLM's environment before it is imported, only where the user has
    not: quiet logs; engine processes spawned, not forked (this process runs
    a loop thread, and only spawned processes can leave its process group, see
    ``_engine_processes``; vLLM on CPU spawns anyway); and on CPU the model's
    threads bound to every core we may use (vLLM binds one core by default;
    all cores measured 1.5x faster)."""
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    if "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:
        cores = sorted(os.sched_getaffinity(0))
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(map(str, cores))


def engine_count() -> int:
    """How many engines this process has started so far (for tests and benchmarks)."""
    return _starts


def get_engine(model: str = DEFAULT_MODEL, engine_options: Mapping[str, Any] | None = None) -> Engine:
    """The shared engine for ``(model, engine_options)``, started on first use.
    ``engine_options`` are vLLM ``AsyncEngineArgs`` fields, passed through."""
    options = dict(engine_options or {})
    key = _spec_key(model, options)
    with _registry_lock:
        engine = _registry.get(key)
        if engine is not None and engine.dead:
            logger.warning("The engine for %s died; starting a fresh one", model)
            _shutdown_one(engine)
            engine = None
        if engine is None:
            engine = _start_engine(model, options)
            _registry[key] = engine
        return engine


def _start_engine(model: str, options: dict[str, Any]) -> Engine:
    global _starts
    _prepare_environment()
    path = resolve_model(model)

    async def create() -> Engine:
        with warnings.catch_warnings():
            # torch deprecations that vLLM's import triggers; nothing for our users to act on
            warnings.simplefilter("ignore", FutureWarning)
            from vllm.engine.arg_utils import AsyncEngineArgs
            from vllm.platforms import current_platform
            from vllm.v1.engine.async_llm import AsyncLLM

        args = {"model": path, "disable_log_stats": True, "use_tqdm_on_load": False}
        if current_platform.is_cpu():
            args.update(cpu_defaults())
        args.update(options)
        with own_process_group():  # a Ctrl-C in the caller's group must not stop the engine
            client = AsyncLLM.from_engine_args(AsyncEngineArgs(**args))
        try:
            return Engine(
                model=model,
                options=options,
                client=client,
                tokenizer=client.get_tokenizer(),
                max_model_len=client.model_config.max_model_len,
            )
        finally:
            # vLLM keeps a reference to this frame; without this the client
            # would outlive shutdown and be finalised during interpreter teardown.
            del client

    logger.info("Starting a vLLM engine for %s", model)
    engine = run_sync(create())
    if _starts == 0:
        # Registered after vLLM is imported, so it runs before vLLM's own exit hooks.
        atexit.register(_at_exit)
    _starts += 1
    return engine


async def _close(client: Any) -> None:
    """Shuts ``client`` down on the library loop, its output reader first, so the
    engine process exiting is not logged as a failure."""
    handler = getattr(client, "output_handler", None)
    if handler is not None and not handler.done():
        handler.cancel()
        await asyncio.sleep(0)
    client.shutdown()


def _shutdown_one(engine: Engine) -> None:
    # Drop our reference too, so AsyncLLM.__del__ runs now rather than during
    # interpreter teardown, when the modules it needs are already gone.
    client, engine.client = engine.client, None
    if client is None:
        return
    try:
        run_sync(_close(client))
    except Exception:  # a dead engine may fail to shut down cleanly; nothing to keep
        logger.debug("Engine shutdown raised", exc_info=True)
    del client
    gc.collect()  # AsyncLLM sits in reference cycles: collect it while its modules are alive


def shutdown_engines() -> None:
    """Shuts down every engine this process started; the next use starts anew."""
    with _registry_lock:
        engines = list(_registry.values())
        _registry.clear()
    for engine in engines:
        _shutdown_one(engine)


def _at_exit() -> None:
    from .remote import shutdown_remote_engines

    shutdown_remote_engines()
    shutdown_engines()
    stop_loop()

