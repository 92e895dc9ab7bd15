"""Embedded vLLM engines: one ``AsyncLLM`` per (model, engine options) per
process, shared by every caller that asks for the same spec (estimators
cloned by ``cross_val_score`` included); a recorded handle (``recorded``)
needs neither vLLM nor torch until a read needs the engine."""

from __future__ import annotations

import asyncio
import functools
import gc
import json
import logging
import os
import time
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from ..exceptions import ReadStoreError
from ..models.builtin import DEFAULT_MODEL, resolve_model
from ..models.source import check_model_source
from ._processes import main_script_not_rerun, own_process_group
from ._registry import EngineRegistry
from .environment import ENGINE_LOGS_ENV, START_TIMEOUT_ENV, engine_process_environment, prepare_environment
from .handle import Engine
from .hardware import DTYPE_ENV, choose_cpu_dtype, cpu_info
from .loop import ORDER_LOCAL, on_exit, rearm_exit_handler, run_sync
from .recorded import load_tokenizer, read_record, tokenizer_class, write_record
from .workers import run_before_children_are_joined, spawnable_start_method

__all__ = [
    "CPU_BLOCK_SIZE",
    "CPU_KV_CACHE_BYTES",
    "cpu_defaults",
    "cpu_platform",
    "download_model",
    "engine_count",
    "engine_info",
    "engine_settings",
    "find_engine",
    "get_engine",
    "prepare_environment",
    "shutdown_engine",
    "shutdown_engines",
]

logger = logging.getLogger(__name__)

#: KV cache on CPU: 1 GiB holds ~46k tokens of the built-in model; vLLM's
#: default memory share is of a NUMA node whose size drifts and can fail.
CPU_KV_CACHE_BYTES = 1 << 30
#: KV block size on CPU: the prefix cache reuses whole blocks only.
CPU_BLOCK_SIZE = 32
#: The share of GPU memory each embedded GPU engine takes, where set (vLLM's
#: default, 0.9, leaves no room for a second engine in the process: the test
#: suite and a notebook comparing engine options start several).
GPU_MEMORY_ENV = "LLM_LABEL_CLF_GPU_MEMORY_UTILIZATION"

#: The engines this process started, by ``spec_key``.
_registry = EngineRegistry(lambda engine: shutdown_engine(engine))
_starts = 0


def spec_key(model: str, options: Mapping[str, Any]) -> str:
    """The registry key of an engine: its model and options, as stable text
    (the shared server's name is derived from it too)."""
    return json.dumps([model, dict(options)], sort_keys=True, default=repr)


def cpu_defaults() -> dict[str, Any]:
    """Engine options that start fast and fit a small CPU machine: eager mode
    (~20 s to start instead of ~65 s, and compiled is only ~10% faster), an
    explicit 1 GiB KV cache, and 32-token KV blocks (the CPU backend's smallest;
    its default 128 means a prompt shorter than 128 tokens is never reused from
    the prefix cache, which multi-token labels and few-shot prompts rely on).
    User options override each of these."""
    return {"enforce_eager": True, "kv_cache_memory_bytes": CPU_KV_CACHE_BYTES, "block_size": CPU_BLOCK_SIZE}


def engine_count() -> int:
    """How many engines this process has started so far (for tests and benchmarks)."""
    return _starts


def get_engine(model: str = DEFAULT_MODEL, engine_options: Mapping[str, Any] | None = None) -> Engine:
    """The process-wide embedded vLLM engine for ``(model, engine_options)``.

    Its handle comes first (a few seconds: vLLM resolves the configuration
    and loads the tokenizer, as its engine would); the engine itself starts
    when a read first needs it (20 to 60 s on a CPU), or with
    ``Engine.start()``. Shared by every estimator with the same model and
    resolved settings, clones included; a dead engine is replaced on the
    next call. Engines stop at exit, or with :func:`shutdown_engines`.

    Parameters
    ----------
    model : str, default="smollm2-135m-instruct"
        A built-in model name, a local Hugging Face folder, or a hub id.
    engine_options : dict or None
        vLLM ``AsyncEngineArgs`` fields, passed through over our defaults (on
        CPU: eager mode, a 1 GiB KV cache, 32-token blocks and the dtype
        chosen for this CPU; see :func:`engine_info`). Options that resolve to
        the same settings share one engine.

    Returns
    -------
    Engine
        The handle the estimators read on: ``client`` (vLLM's ``AsyncLLM``,
        started on first use), ``tokenizer``, ``max_model_len`` and
        ``settings`` (what it starts with).

    Raises
    ------
    ModelNotFoundError
        ``model`` is a local path that does not exist (before vLLM is imported).
    ModelUnavailableError
        ``model`` is a hub id with no cached copy and no way to download it.
    RuntimeError
        vLLM refused the model or the options (here), or, on first use of
        ``client``, the engine failed to start or did not start within
        ``LLM_LABEL_CLF_START_TIMEOUT_S`` seconds (default 300); vLLM's error
        log is printed above it.

    Examples
    --------
    >>> from llm_label_clf import get_engine
    >>> engine = get_engine(engine_options={"dtype": "float32"})  # doctest: +SKIP
    >>> engine.settings["block_size"], engine.settings["dtype"], engine.started  # doctest: +SKIP
    (32, 'float32', False)
    """
    check_model_source(model)
    options = dict(engine_options or {})
    settings = engine_settings(options)
    return _registry.get(spec_key(model, settings), lambda: _resolve_engine(model, options, settings))


def find_engine(model: str = DEFAULT_MODEL, engine_options: Mapping[str, Any] | None = None) -> Engine | None:
    """The live engine this process has started for ``(model,
    engine_options)``, or None (also while its handle has not started it);
    starts nothing."""
    engine = _registry.find(spec_key(model, engine_settings(engine_options)))
    return engine if engine is not None and engine.started else None


def _platform() -> Any:
    prepare_environment()
    with _quiet_imports():
        from vllm.platforms import current_platform
    return current_platform


def cpu_platform() -> bool:
    """Whether embedded engines run on vLLM's CPU platform: vLLM's answer,
    recorded once it is the CPU, so later processes need not import vLLM."""
    if read_record("platform", None) is not None:
        return True
    is_cpu = bool(_platform().is_cpu())
    if is_cpu:
        write_record("platform", None, {"cpu": True})
    return is_cpu


def engine_settings(engine_options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The vLLM engine arguments an embedded engine starts with: on CPU, our
    defaults (``cpu_defaults``, and the dtype ``choose_cpu_dtype`` picks for
    this CPU), then ``engine_options`` over them. GPUs keep vLLM's defaults,
    except that a dtype set in ``LLM_LABEL_CLF_DTYPE`` and a memory share set
    in ``LLM_LABEL_CLF_GPU_MEMORY_UTILIZATION`` apply there."""
    settings: dict[str, Any] = {}
    user_dtype = "dtype" in (engine_options or {})
    if cpu_platform():
        settings.update(cpu_defaults())
        if not user_dtype:
            dtype, why = choose_cpu_dtype(cpu_info())
            if dtype != "auto":
                settings["dtype"] = dtype
            _log_dtype_choice(dtype, why)
    else:
        if not user_dtype and os.environ.get(DTYPE_ENV, "auto") != "auto":
            settings["dtype"] = os.environ[DTYPE_ENV]
        if os.environ.get(GPU_MEMORY_ENV):
            settings["gpu_memory_utilization"] = float(os.environ[GPU_MEMORY_ENV])
    settings.update(engine_options or {})
    return settings


@functools.cache
def _log_dtype_choice(dtype: str, why: str) -> None:
    cpu = cpu_info()
    logger.info("CPU %s (%s, %d cores): engine dtype %s", cpu.model, cpu.capability, cpu.cores, why)


def engine_info() -> dict[str, Any]:
    """What the embedded engines run on and with, to explain a slow or fast run.

    Starts nothing: it reads the CPU's description and the engine registry.

    Returns
    -------
    dict
        ``cpu`` (the model name), ``cpu_capability`` ("AMX", "AVX512_BF16",
        "AVX512", "AVX2", ...), ``cores`` (usable by this process),
        ``default_cpu_dtype`` and ``default_cpu_dtype_reason`` (what an engine
        without a ``dtype`` option gets here, and why: bf16 only where the CPU
        computes it natively, or what ``LLM_LABEL_CLF_DTYPE`` says), and
        ``engines``: for each engine of this process its ``model``,
        ``options``, ``settings`` and ``started`` (False while no read has
        needed it, as in a run served by its read store).

    Examples
    --------
    >>> from llm_label_clf import engine_info
    >>> info = engine_info()
    >>> sorted(info)
    ['cores', 'cpu', 'cpu_capability', 'default_cpu_dtype', 'default_cpu_dtype_reason', 'engines']
    >>> info["cores"] >= 1
    True
    """
    cpu = cpu_info()
    dtype, why = choose_cpu_dtype(cpu)
    engines = [{"model": e.model, "options": dict(e.options), "settings": dict(e.settings), "started": e.started}
               for e in _registry.values()]
    return {
        "cpu": cpu.model,
        "cpu_capability": cpu.capability,
        "cores": cpu.cores,
        "default_cpu_dtype": dtype,
        "default_cpu_dtype_reason": why,
        "engines": engines,
    }


def _engine_args(path: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    """The ``AsyncEngineArgs`` of an engine: the model's local path (or hub id) and its settings."""
    return {"model": path, "disable_log_stats": True, "use_tqdm_on_load": False, **settings}


@contextmanager
def _quiet_imports() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch deprecations in vLLM's imports
        yield


def _resolve_engine(model: str, options: dict[str, Any], settings: dict[str, Any]) -> Engine:
    """The handle of an engine that has not started, from vLLM's own
    resolution of it: ``AsyncEngineArgs(...).create_engine_config()``, the
    call ``AsyncLLM.from_engine_args`` begins with, on the same arguments
    (``_launch``); and vLLM's ``cached_tokenizer_from_config`` of that
    configuration, the call that makes the tokenizer of the engine's
    renderer (``renderer_from_config``; ``AsyncLLM.get_tokenizer()`` returns
    the renderer's shallow copy of the object this call caches for the
    process), so the token ids are the engine's.

    ``max_model_len`` is that configuration's, which a started engine
    reports (``AsyncLLM.model_config`` is its configuration's
    ``model_config``). Read in vLLM 0.32: after ``create_engine_config``
    only the engine core changes it, by KV-cache auto-fit, which runs for
    ``max_model_len=-1`` alone and can only lower it (the ready response
    takes the minimum); such a handle starts its engine at once and takes
    the started value. ``_launch`` checks the two agree at every start.
    On CPU the configuration sets the environment vLLM's platform wants for
    its engine processes (``LD_PRELOAD``, thread counts), as a start always did.
    On CPU a local folder's handle is recorded, and its record serves later
    processes without vLLM (``recorded``; no ``config``, the start resolves it)."""
    path = resolve_model(model)
    key = _record_key(model, path, settings)
    found = read_record("handle", key) if key else None
    if found:
        try:
            tokenizer = load_tokenizer(found["tokenizer_class"], path)
        except Exception:  # transformers could not load it: vLLM resolves the handle instead
            logger.debug("Engine record of %s not used", model, exc_info=True)
        else:
            return Engine(model, options, tokenizer=tokenizer, max_model_len=found["max_model_len"],
                          settings=found["settings"],
                          start=functools.partial(_launch, model, path, settings, found["max_model_len"]))
    try:
        with _quiet_imports():
            from vllm.engine.arg_utils import AsyncEngineArgs
            from vllm.tokenizers.registry import cached_tokenizer_from_config
            from vllm.usage.usage_lib import UsageContext
        with engine_process_environment():
            config = AsyncEngineArgs(**_engine_args(path, settings)).create_engine_config(UsageContext.ENGINE_CONTEXT)
            tokenizer = cached_tokenizer_from_config(config.model_config)
    except Exception as exc:
        raise _start_failure(model, path, exc, 0.0) from exc
    resolved = config.model_config
    auto_fit = resolved.original_max_model_len == -1
    engine = Engine(
        model, options, tokenizer=tokenizer, max_model_len=resolved.max_model_len,
        settings={**settings, "dtype": str(resolved.dtype).removeprefix("torch.")}, config=config,
        start=functools.partial(_launch, model, path, settings, None if auto_fit else resolved.max_model_len),
    )
    if auto_fit:  # known once the engine has sized its KV cache
        engine.max_model_len = engine.start().client.model_config.max_model_len
    elif key and resolved.tokenizer == path and cpu_platform():
        record = {"settings": engine.settings, "max_model_len": engine.max_model_len,
                  "tokenizer_class": tokenizer_class(path, tokenizer)}
        if record["tokenizer_class"] and json.loads(json.dumps(record, default=repr)) == record:
            write_record("handle", key, record)
    return engine


def _record_key(model: str, path: str, settings: Mapping[str, Any]) -> list[Any] | None:
    """A handle record's key: the model, its folder and fingerprint, the settings; None for a hub id."""
    if not os.path.isdir(path):
        return None
    from ..store.fingerprint import model_fingerprint

    try:
        return [model, path, model_fingerprint(path), json.loads(json.dumps(dict(settings), default=repr))]
    except ReadStoreError:  # an unreadable folder: vLLM says what is wrong with it
        return None


def _launch(model: str, path: str, settings: dict[str, Any], max_model_len: int | None) -> Any:
    """Starts a handle's engine and returns its client. Runs on the library
    loop (``Engine.client``), where the engine's tasks then live. Raises
    RuntimeError when it fails, or reports another ``max_model_len`` than
    its handle was resolved with (None: auto-fit, nothing to compare)."""
    global _starts
    with _quiet_imports():
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

    logger.info("Starting a vLLM engine for %s", model)
    began = time.monotonic()
    try:
        # own process group: a Ctrl-C in the caller's group must not stop the engine
        # spawnable_start_method: in a loky worker, vLLM's engine process is
        # otherwise told to use loky's start method, unknown to it
        # main_script_not_rerun: a script without the __main__ guard works as written
        with own_process_group(), main_script_not_rerun(), spawnable_start_method(), engine_process_environment():
            client = AsyncLLM.from_engine_args(AsyncEngineArgs(**_engine_args(path, settings)))
    except Exception as exc:
        raise _start_failure(model, path, exc, time.monotonic() - began) from exc
    # vLLM registered its exit hooks on import: ours must run before them.
    rearm_exit_handler()
    run_before_children_are_joined(shutdown_engines)
    _starts += 1
    try:
        reported = client.model_config.max_model_len
        if max_model_len is not None and reported != max_model_len:
            client.shutdown()
            raise RuntimeError(
                f"the vLLM engine for {model!r} started with max_model_len={reported}, where its configuration "
                f"gave {max_model_len} before the start: please report this (vLLM version change?)"
            )
        return client
    finally:
        # vLLM keeps a reference to this frame; without this the client
        # would outlive shutdown and be finalised during interpreter teardown.
        del client


def download_model(model: str, engine_options: Mapping[str, Any] | None = None) -> None:
    """Brings a hub model's files into the local hub cache as its engine's
    start would (vLLM's ``get_model_loader(load_config).download_model``, on
    the configuration of its handle), without starting it, so that the read
    store fingerprints the weights the engine loads. Local models have
    nothing to fetch."""
    config = get_engine(model, engine_options).config
    with _quiet_imports():
        from vllm.model_executor.model_loader import get_model_loader
    with engine_process_environment():
        get_model_loader(config.load_config).download_model(config.model_config)


def _start_failure(model: str, path: str, exc: Exception, waited_s: float) -> RuntimeError:
    """What to tell the user when an engine does not start: what was waited
    for, vLLM's reason, and how to see more or wait longer."""
    if isinstance(exc, TimeoutError):
        why = (
            f"its engine process did not report ready within {waited_s:.0f} s (loading the weights and "
            f"sizing the KV cache); set {START_TIMEOUT_ENV} to wait longer"
        )
    else:
        why = f"{type(exc).__name__}: {exc}"
    return RuntimeError(
        f"the vLLM engine for {model!r} ({path}) failed to start: {why}. vLLM's error log, if any, is "
        f"above; set {ENGINE_LOGS_ENV}=1 to see all of vLLM's logs"
    )


async def _close(client: Any) -> None:
    """Shuts ``client`` down on the library loop, its output reader first, so the
    engine process exiting is not logged as a failure."""
    handler = getattr(client, "output_handler", None)
    if handler is not None and not handler.done():
        handler.cancel()
        await asyncio.sleep(0)
    client.shutdown()


def shutdown_engine(engine: Engine) -> None:
    """Shuts one engine down and drops its client (a dead engine too; a
    handle that never started is only closed)."""
    # Drop our reference too, so AsyncLLM.__del__ runs now rather than during
    # interpreter teardown, when the modules it needs are already gone.
    client = engine.close()
    if client is None:
        return
    try:
        run_sync(_close(client))
    except Exception:  # a dead engine may fail to shut down cleanly; nothing to keep
        logger.debug("Engine shutdown raised", exc_info=True)
    del client
    gc.collect()  # AsyncLLM sits in reference cycles: collect it while its modules are alive


def shutdown_engines() -> None:
    """Shuts down every embedded engine this process started, and closes
    the handles of those that never started.

    The next use starts a fresh engine. Called at exit too (after remote
    clients close), so scripts need not call it; tests and benchmarks do, to
    free the memory between configurations.
    """
    _registry.shutdown_all()


#: A forked child's copies of its parent's engines: kept referenced, never
#: used (collecting one would shut down the parent's engine processes).
_inherited: list[Engine] = []


def _forget_engines_after_fork() -> None:
    """A forked child (a ``multiprocessing`` fork pool's worker) sets aside
    its parent's engines, which it cannot drive, and starts its own if needed."""
    global _starts
    _inherited.extend(_registry.forget_after_fork())
    _starts = 0


on_exit(shutdown_engines, order=ORDER_LOCAL)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_engines_after_fork)
