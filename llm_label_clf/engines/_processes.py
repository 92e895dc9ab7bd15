"""Engine processes that outlive a Ctrl-C but not their parent: engines start
in a process group of their own, and on Linux every engine process asks for
SIGKILL when its parent goes (``PR_SET_PDEATHSIG``), through a spawn launcher."""

from __future__ import annotations

import hashlib
import logging
import multiprocessing.spawn
import os
import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..models.builtin import cache_dir

__all__ = ["main_script_not_rerun", "own_process_group"]

logger = logging.getLogger(__name__)

#: Runs in a spawned process before Python proper, given the launcher's path,
#: the parent's pid and the spawn arguments: a target's process leaves the
#: caller's group and asks for SIGKILL when its parent goes (docs/architecture.md).
_LAUNCH = """\
import os, sys
launcher, parent, *args = sys.argv[1:]
if args[-3:-2] == ["-c"] and args[-1] == "--multiprocessing-fork":
    if os.environ.get("LLM_LABEL_CLF_ENGINE_GROUP") != str(os.getpgid(0)):
        os.setpgid(0, 0)
        os.environ["LLM_LABEL_CLF_ENGINE_GROUP"] = str(os.getpid())
    if sys.platform.startswith("linux"):
        import ctypes, signal
        ctypes.CDLL(None).prctl(1, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != int(parent):
            os._exit(1)
    args[-2] = "import multiprocessing.spawn as s; s.set_executable(%r); %s" % (launcher, args[-2])
os.execv(sys.executable, [sys.executable, *args])
"""


def _launcher(python: str) -> Path | None:
    """The launcher script for ``python`` in the cache (written once), or None
    where it cannot be written or executed (a read-only or noexec cache)."""
    script = f'#!/bin/sh\nexec {shlex.quote(python)} -I -S -c {shlex.quote(_LAUNCH)} "$0" "$PPID" "$@"\n'
    digest = hashlib.sha256(script.encode()).hexdigest()[:16]
    path = cache_dir() / "bin" / f"python-own-group-{digest}"
    try:
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
            partial.write_text(script)
            partial.chmod(0o755)
            partial.replace(path)
    except OSError as exc:
        logger.warning("Engine processes stay in this process group (a Ctrl-C will stop them): %s", exc)
        return None
    if not os.access(path, os.X_OK):
        logger.warning("Engine processes stay in this process group: %s cannot be executed", path)
        return None
    return path


@contextmanager
def own_process_group() -> Iterator[None]:
    """While active, processes started with multiprocessing's spawn method
    begin in a process group of their own and, on Linux, die with their
    parent, as do the processes they spawn the same way (POSIX only;
    elsewhere a no-op)."""
    if os.name != "posix":
        yield
        return
    python = os.fsdecode(multiprocessing.spawn.get_executable() or sys.executable)
    launcher = _launcher(python)
    if launcher is None:
        yield
        return
    multiprocessing.spawn.set_executable(str(launcher))
    try:
        yield
    finally:
        multiprocessing.spawn.set_executable(python)


@contextmanager
def main_script_not_rerun() -> Iterator[None]:
    """While active, processes started with multiprocessing's spawn method do
    not run the caller's main script again (a script without a ``__main__``
    guard would start a second engine there): the main module hides its path
    and spec from ``multiprocessing.spawn.get_preparation_data``."""
    main = sys.modules.get("__main__")
    names = ("__file__", "__spec__")
    hidden = {name: getattr(main, name) for name in names if main is not None and hasattr(main, name)}
    for name in hidden:
        if name == "__file__":
            delattr(main, name)
        else:
            setattr(main, name, None)
    try:
        yield
    finally:
        for name, value in hidden.items():
            setattr(main, name, value)
