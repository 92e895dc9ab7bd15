"""The library's event loop and its exit hooks: one loop on a daemon thread,
created lazily under a lock (``run_sync``, ``run_on_loop``), and one
``atexit`` handler that runs the engines' shutdown hooks in order, then
stops the loop."""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import logging
import os
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = [
    "ORDER_LOCAL",
    "ORDER_REMOTE",
    "get_loop",
    "on_exit",
    "on_loop_thread",
    "rearm_exit_handler",
    "run_on_loop",
    "run_sync",
    "stop_loop",
]

T = TypeVar("T")

logger = logging.getLogger(__name__)

#: Exit-hook orders (lower runs first): remote clients close their HTTP
#: connections while the loop still runs, then local engines stop.
ORDER_REMOTE = 10
ORDER_LOCAL = 20

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_thread: threading.Thread | None = None
_pid: int | None = None
_hooks: dict[Callable[[], None], int] = {}
_hooks_lock = threading.Lock()


def get_loop() -> asyncio.AbstractEventLoop:
    """The library's loop, started on first use and restarted in a forked
    child; starting it registers the exit handler."""
    global _loop, _thread, _pid
    with _lock:
        if _loop is None or _pid != os.getpid() or _thread is None or not _thread.is_alive():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="llm_label_clf-loop", daemon=True)
            thread.start()
            _loop, _thread, _pid = loop, thread, os.getpid()
            rearm_exit_handler()
        return _loop


def on_loop_thread() -> bool:
    """True when called from the library loop's own thread."""
    return _thread is not None and threading.current_thread() is _thread


def run_sync(coro: Coroutine[Any, Any, T], *, poll_s: float = 0.1) -> T:
    """Runs ``coro`` on the library loop and waits for it in short steps, so that
    Ctrl-C interrupts the wait. On interrupt the task is cancelled (vLLM then
    aborts its requests) before ``KeyboardInterrupt`` is re-raised."""
    if on_loop_thread():
        coro.close()
        raise RuntimeError("run_sync was called on llm_label_clf's own loop thread; await instead")
    finished = threading.Event()

    async def tracked() -> T:
        try:
            return await coro
        finally:
            finished.set()

    future = asyncio.run_coroutine_threadsafe(tracked(), get_loop())
    try:
        while True:
            try:
                return future.result(timeout=poll_s)
            except concurrent.futures.TimeoutError:
                continue
    except BaseException:
        if not future.done():
            future.cancel()
            finished.wait(timeout=30)  # until the task has unwound and aborted its requests
        raise


async def run_on_loop(coro: Coroutine[Any, Any, T]) -> T:
    """Awaits ``coro`` on the library loop from another running loop, which
    stays free meanwhile; cancelling the caller cancels ``coro``."""
    if on_loop_thread():
        return await coro
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, get_loop()))


def stop_loop() -> None:
    """Stops the library loop (used at interpreter exit, after engines shut down)."""
    global _loop, _thread
    with _lock:
        if _loop is not None and _pid == os.getpid():
            _loop.call_soon_threadsafe(_loop.stop)
            if _thread is not None:
                _thread.join(timeout=5)
        _loop, _thread = None, None


def on_exit(hook: Callable[[], None], *, order: int) -> None:
    """Runs ``hook`` at interpreter exit, before the loop stops: hooks of lower
    ``order`` first (``ORDER_REMOTE``, then ``ORDER_LOCAL``), equal orders in
    registration order. Registering a hook again only changes its order."""
    with _hooks_lock:
        _hooks[hook] = order


def rearm_exit_handler() -> None:
    """(Re-)registers the exit handler so that it runs before every ``atexit``
    hook registered so far: call it after importing vLLM, whose hooks would
    otherwise tear its engines down under ours."""
    atexit.unregister(_at_exit)
    atexit.register(_at_exit)


def _at_exit() -> None:
    """The one exit handler: every hook in order, each shielded from the
    others' errors, then the loop stops."""
    with _hooks_lock:
        hooks = sorted(_hooks.items(), key=lambda item: item[1])
    for hook, _ in hooks:
        try:
            hook()
        except Exception:  # at exit, one failed shutdown must not skip the others
            logger.debug("Exit hook %r raised", hook, exc_info=True)
    stop_loop()
