"""The sync bridge: one library-owned event loop on a daemon thread, created
lazily under a lock (fsspec's pattern). Plain scripts and code already inside a
running loop (Jupyter) both call ``run_sync``; engines are created on this loop
so their background tasks live on it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_thread: threading.Thread | None = None
_pid: int | None = None


def get_loop() -> asyncio.AbstractEventLoop:
    """The library's loop, started on first use and restarted in a forked child."""
    global _loop, _thread, _pid
    with _lock:
        if _loop is None or _pid != os.getpid() or _thread is None or not _thread.is_alive():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="llm_label_clf-loop", daemon=True)
            thread.start()
            _loop, _thread, _pid = loop, thread, os.getpid()
        return _loop


def on_loop_thread() -> bool:
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


def stop_loop() -> None:
    """Stops the library loop (used at interpreter exit, after engines shut down)."""
    global _loop, _thread
    with _lock:
        if _loop is not None and _pid == os.getpid():
            _loop.call_soon_threadsafe(_loop.stop)
            if _thread is not None:
                _thread.join(timeout=5)
        _loop, _thread = None, None
