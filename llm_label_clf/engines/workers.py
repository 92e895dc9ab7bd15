"""Which engine a process reads with when scikit-learn runs it as a worker:
a loky worker reads through the machine's shared server (``shared``), any
other process starts its own engine; ``LLM_LABEL_CLF_WORKER_ENGINE``
(``shared`` or ``own``) and ``LLM_LABEL_CLF_SHARED_ENGINE=1`` change that."""

from __future__ import annotations

import multiprocessing
import multiprocessing.util
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = [
    "SHARED_ENGINE_ENV",
    "WORKER_ENGINE_ENV",
    "in_loky_worker",
    "in_worker_process",
    "run_before_children_are_joined",
    "spawnable_start_method",
    "uses_shared_engine",
]

#: ``shared``: worker processes read through the shared server (the default
#: in loky workers); ``own``: each starts its own engine (the default elsewhere).
WORKER_ENGINE_ENV = "LLM_LABEL_CLF_WORKER_ENGINE"
WORKER_ENGINE_MODES = ("own", "shared")
#: ``1``: this process reads through the shared server, worker or not.
SHARED_ENGINE_ENV = "LLM_LABEL_CLF_SHARED_ENGINE"
#: Start methods every fresh interpreter knows (loky's ``'loky'`` is not one).
_STANDARD_START_METHODS = ("fork", "forkserver", "spawn")
#: Where ``LokyProcess`` lives: joblib's vendored copy of loky, and loky itself.
_LOKY_PROCESS_MODULES = ("joblib.externals.loky.backend.process", "loky.backend.process")
_before_join: set[Callable[[], None]] = set()


def in_worker_process() -> bool:
    """True in a process started by ``multiprocessing`` or loky (joblib's
    worker processes, a ``multiprocessing.Pool``'s, Dask's)."""
    return multiprocessing.parent_process() is not None


def in_loky_worker() -> bool:
    """True in a loky worker process (joblib's default process backend): its
    process object is a ``LokyProcess``. Checked only against modules already
    imported (a loky worker has imported its own), so it imports nothing."""
    process = multiprocessing.current_process()
    for name in _LOKY_PROCESS_MODULES:
        module = sys.modules.get(name)
        loky_process = getattr(module, "LokyProcess", None)
        if loky_process is not None and isinstance(process, loky_process):
            return True
    return False


def worker_engine_mode() -> str:
    """``LLM_LABEL_CLF_WORKER_ENGINE``: ``shared`` or ``own``; unset, ``shared``
    in a loky worker and ``own`` elsewhere. Raises ValueError naming the
    variable for any other value."""
    mode = os.environ.get(WORKER_ENGINE_ENV, "").strip().lower()
    if not mode:
        return "shared" if in_loky_worker() else "own"
    if mode not in WORKER_ENGINE_MODES:
        raise ValueError(f"{WORKER_ENGINE_ENV}={mode!r}: expected one of {list(WORKER_ENGINE_MODES)}")
    return mode


def uses_shared_engine() -> bool:
    """Whether this process reads through the shared server instead of
    starting an embedded engine (the rules and their variables:
    docs/architecture.md, ``engines/workers.py``). Raises ValueError for an
    unknown value of a variable, RuntimeError in a daemonic worker that would
    start an engine."""
    if os.environ.get(SHARED_ENGINE_ENV, "").strip().lower() in ("1", "true", "yes"):
        return True
    if not in_worker_process():
        return False
    if worker_engine_mode() == "shared":
        return True
    if multiprocessing.current_process().daemon:
        raise RuntimeError(
            "this worker process is daemonic (a multiprocessing.Pool's, or joblib's 'multiprocessing' "
            "backend) and cannot start vLLM's engine processes: set "
            f"{WORKER_ENGINE_ENV}=shared in its environment to read through the machine's shared "
            "server, or use joblib's loky backend (its workers read through that server by default)"
        )
    return False


@contextmanager
def spawnable_start_method() -> Iterator[None]:
    """While active, ``multiprocessing``'s default start method is one a fresh
    interpreter knows (in a loky worker it is ``'loky'``, which a spawned
    process cannot find). Elsewhere a no-op."""
    method = multiprocessing.get_start_method(allow_none=True)
    if method is None or method in _STANDARD_START_METHODS:
        yield
        return
    multiprocessing.set_start_method("spawn", force=True)
    try:
        yield
    finally:
        multiprocessing.set_start_method(method, force=True)


def run_before_children_are_joined(hook: Callable[[], None]) -> None:
    """In a worker process, runs ``hook`` when the worker exits, before
    ``multiprocessing`` joins the worker's own children (an engine process
    stops only once shut down). Elsewhere a no-op (``atexit`` runs first)."""
    if in_worker_process() and hook not in _before_join:
        _before_join.add(hook)
        multiprocessing.util.Finalize(None, hook, exitpriority=100)
