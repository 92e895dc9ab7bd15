"""The shared engine: one vLLM server per machine and (model, engine
settings), on 127.0.0.1, that joblib's loky worker processes and opted-in
processes (``workers``) read through with the remote client, instead of each
loading the model."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ..models.builtin import cache_dir, resolve_model
from .client import RemoteOptions
from .environment import start_timeout_s
from .handle import Engine
from .local import engine_settings, spec_key
from .remote import remote_engine
from .workers import in_worker_process

__all__ = [
    "SHARED_DIR_ENV",
    "SHARED_IDLE_ENV",
    "Registry",
    "free_port",
    "log_tail",
    "owned_shared_engine",
    "registry_dir",
    "shared_engine",
    "shared_servers",
    "stop_shared_servers",
    "wait_for_server",
]

logger = logging.getLogger(__name__)

#: The registry folder (by default ``<cache>/servers``).
SHARED_DIR_ENV = "LLM_LABEL_CLF_SHARED_DIR"
#: Seconds without reads after which a shared server retires (default 300).
SHARED_IDLE_ENV = "LLM_LABEL_CLF_SHARED_IDLE_S"
DEFAULT_IDLE_S = 300.0
#: Reads of a shared server may queue behind other workers' reads: a request
#: gets longer than the remote client's default before it counts as failed.
_REQUEST_TIMEOUT_S = 600.0
_LOG_TAIL_CHARS = 3000
#: Text in a starting server's log that means its start failed: a Python
#: traceback, or vLLM's word that its engine process did not start.
_FAILURE_MARKERS = (b"Traceback (most recent call last)", b"Engine core initialization failed")
#: How much of the log's end is scanned for them at each look.
_SCANNED_BYTES = 1 << 16
#: How long a server that logged a failure may still take to exit or answer.
FAILURE_GRACE_S = 30.0
#: The least time a server that runs, neither answering nor logging a
#: failure, is waited for (docs/architecture.md); at least twice ``LLM_LABEL_CLF_START_TIMEOUT_S``.
_MIN_SAFETY_LIMIT_S = 3600.0
#: How often a waiting process says it is still waiting (log, INFO).
_WAIT_NOTE_S = 60.0

#: Forks once more and execs the server, so that it is no child of the
#: worker that starts it; prints the server's pid, its output goes to argv[1].
_DETACH = """\
import os, sys
pid = os.fork()
if pid:
    print(pid, flush=True)
    os._exit(0)
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
os.dup2(fd, 1)
os.dup2(fd, 2)
os.close(fd)
os.execv(sys.executable, [sys.executable, "-m", "llm_label_clf.engines._shared_server", sys.argv[2]])
"""

#: Entries this process attached to, by name (to skip the lock on later uses).
_attached: dict[str, dict[str, Any]] = {}
_attach_lock = threading.Lock()


def registry_dir() -> Path:
    """The registry folder: ``$LLM_LABEL_CLF_SHARED_DIR``, else ``<cache>/servers``."""
    configured = os.environ.get(SHARED_DIR_ENV)
    return Path(configured).expanduser() if configured else cache_dir() / "servers"


def idle_s() -> float:
    """``LLM_LABEL_CLF_SHARED_IDLE_S`` (default 300); raises ValueError naming
    the variable for anything but a positive number."""
    value = os.environ.get(SHARED_IDLE_ENV, "").strip()
    try:
        seconds = float(value) if value else DEFAULT_IDLE_S
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise ValueError(f"{SHARED_IDLE_ENV}={value!r}: expected a number of seconds > 0")
    return seconds


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")


class Registry:
    """The entries in ``folder``: ``<name>.json`` (the server), ``<name>.lock``
    (taken while a server is looked up, started or retired) and
    ``<name>.log`` (the server's output)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def path(self, name: str, suffix: str = ".json") -> Path:
        return self.folder / f"{name}{suffix}"

    @contextlib.contextmanager
    def lock(self, name: str, *, blocking: bool = True) -> Iterator[bool]:
        """Holds ``name``'s lock (across processes and threads); yields False
        instead of waiting when ``blocking`` is False and another holds it."""
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.path(name, ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)

    def read(self, name: str) -> dict[str, Any] | None:
        try:
            entry = json.loads(self.path(name).read_text())
        except (OSError, ValueError):
            return None
        return entry if isinstance(entry, dict) else None

    def write(self, name: str, entry: Mapping[str, Any]) -> None:
        """Writes ``entry`` atomically, readable by this user only."""
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        partial = self.path(name, f".{os.getpid()}.partial")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump(entry, handle)
        partial.replace(self.path(name))

    def remove(self, name: str) -> None:
        self.path(name).unlink(missing_ok=True)

    def touch(self, name: str, pid: int) -> bool:
        """Marks the entry used now, if it still names server ``pid``."""
        entry = self.read(name)
        if entry is None or entry.get("pid") != pid:
            return False
        try:
            os.utime(self.path(name))
        except OSError:
            return False
        return True

    def touched_s_ago(self, name: str) -> float:
        try:
            return time.time() - self.path(name).stat().st_mtime
        except OSError:
            return float("inf")

    def names(self) -> list[str]:
        return sorted(p.stem for p in self.folder.glob("*.json")) if self.folder.is_dir() else []

    @staticmethod
    def any_owner_alive(entry: Mapping[str, Any]) -> bool:
        return any(pid_alive(int(pid)) for pid in entry.get("owners", ()))


def _name(model: str, settings: Mapping[str, Any]) -> str:
    return hashlib.sha256(spec_key(model, settings).encode()).hexdigest()[:16]


def _owner_pid() -> int:
    """The process a server is kept for: a worker's parent, else this one."""
    return os.getppid() if in_worker_process() else os.getpid()


def _healthy(url: str) -> bool:
    import httpx

    try:
        return httpx.get(f"{url}/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def _key_env(name: str) -> str:
    return f"LLM_LABEL_CLF_SHARED_KEY_{name.upper()}"


def _connect(model: str, entry: Mapping[str, Any]) -> Engine:
    """The remote engine over the server of ``entry`` (its key put where the
    client reads it, an environment variable of this process)."""
    os.environ[_key_env(entry["name"])] = entry["api_key"]
    options = RemoteOptions(timeout_s=_REQUEST_TIMEOUT_S, api_key_env=_key_env(entry["name"]))
    return remote_engine([entry["url"]], model, options)


def shared_engine(model: str, engine_options: Mapping[str, Any] | None = None) -> Engine:
    """The engine over this machine's shared server for ``(model,
    engine_options)``, started if none is live, this process's owner added
    to its entry. Raises RuntimeError, with the server's log, when a server
    does not start."""
    settings = engine_settings(engine_options)
    name = _name(model, settings)
    registry = Registry(registry_dir())
    with _attach_lock:
        known = _attached.get(name)
        if known is not None and pid_alive(known["pid"]) and registry.touch(name, known["pid"]):
            return _connect(model, known)
        with registry.lock(name):
            entry = _live_entry(registry, name)
            if entry is None:
                entry = _start_server(registry, name, model, settings)
            owner = _owner_pid()
            if owner not in entry["owners"]:
                entry["owners"].append(owner)
                registry.write(name, entry)
            else:
                registry.touch(name, entry["pid"])
        _attached[name] = entry
    return _connect(model, entry)


def owned_shared_engine(model: str, engine_options: Mapping[str, Any] | None = None) -> Engine | None:
    """The engine over a live shared server for ``(model, engine_options)``
    that this process owns (its workers started or used it), else None;
    starts nothing."""
    registry = Registry(registry_dir())
    if not registry.folder.is_dir():
        return None
    name = _name(model, engine_settings(engine_options))
    entry = registry.read(name)
    if entry is None or os.getpid() not in entry.get("owners", ()) or not pid_alive(entry["pid"]):
        return None
    return _connect(model, entry) if registry.touch(name, entry["pid"]) else None


def _live_entry(registry: Registry, name: str) -> dict[str, Any] | None:
    """``name``'s entry if its server runs and answers (waiting for one that
    is still starting, whose starter gave up); else None, the entry removed
    and a server that does not answer stopped. Call with the lock held."""
    entry = registry.read(name)
    if entry is None:
        return None
    if pid_alive(entry["pid"]):
        if wait_for_server(entry) is None:
            return entry
        _stop(entry["pid"])
    logger.info("Removing the entry of shared server %s (pid %s): it is gone", entry.get("url"), entry.get("pid"))
    registry.remove(name)
    return None


def _logged_failure(log: Path) -> bool:
    """Whether the end of a server's log shows one of ``_FAILURE_MARKERS``."""
    try:
        with open(log, "rb") as handle:
            handle.seek(max(0, os.fstat(handle.fileno()).st_size - _SCANNED_BYTES))
            end = handle.read()
    except OSError:
        return False
    return any(marker in end for marker in _FAILURE_MARKERS)


def wait_for_server(entry: Mapping[str, Any], *, failure_grace_s: float = FAILURE_GRACE_S) -> str | None:
    """Waits for the server of ``entry`` (its ``pid``, ``url`` and ``log``)
    while it runs and is still starting, however long that takes on a loaded
    machine; None once it answers, else why it never will: it exited, it
    logged a failure and did not answer within ``failure_grace_s``, or it ran
    past the safety limit (an hour at least)."""
    pid, url = entry["pid"], entry["url"]
    log = Path(entry.get("log") or os.devnull)
    limit = max(_MIN_SAFETY_LIMIT_S, 2.0 * start_timeout_s())
    began = time.monotonic()
    failed_at: float | None = None
    note_at = began + _WAIT_NOTE_S
    while True:
        if _healthy(url):
            return None
        if not pid_alive(pid):
            return "exited"
        now = time.monotonic()
        if failed_at is None and _logged_failure(log):
            failed_at = now
        if failed_at is not None and now - failed_at > failure_grace_s:
            return "logged a failure"
        if now - began > limit:
            return f"neither answered nor logged a failure in {limit:.0f} s (safety limit)"
        if now >= note_at:
            logger.info("Still waiting for the shared vLLM server %s (pid %d) to start: %.0f s", url, pid, now - began)
            note_at += _WAIT_NOTE_S
        time.sleep(0.5)


def log_tail(log: Path) -> str:
    """The end of a server's log (the error a failed start printed)."""
    try:
        return log.read_text(errors="replace")[-_LOG_TAIL_CHARS:]
    except OSError as exc:
        return f"(cannot read {log}: {exc})"


def _start_server(registry: Registry, name: str, model: str, settings: dict[str, Any]) -> dict[str, Any]:
    """Starts the server for ``name``, records it, and waits until it answers.
    Call with the lock held."""
    path = resolve_model(model)
    port = free_port()
    api_key = secrets.token_urlsafe(32)
    log = registry.path(name, ".log")
    spec = {
        "registry": str(registry.folder),
        "name": name,
        "port": port,
        "model_path": path,
        "served_model_name": model,
        "settings": settings,
        "idle_s": idle_s(),
    }
    try:
        encoded = json.dumps(spec)
    except TypeError as exc:
        raise ValueError(
            f"engine_options must be plain data (JSON) to start a shared server with them: {exc}"
        ) from None
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLM_LABEL_CLF_SHARED_KEY_")}
    env["VLLM_API_KEY"] = api_key
    package_root = str(Path(__file__).resolve().parents[2])  # importable even when not installed
    env["PYTHONPATH"] = os.pathsep.join([package_root, *filter(None, [env.get("PYTHONPATH")])])
    logger.info("Starting a shared vLLM server for %s on 127.0.0.1:%d", model, port)
    began = time.monotonic()
    launcher = subprocess.Popen(
        [sys.executable, "-c", _DETACH, str(log), encoded],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, env=env, start_new_session=True,
    )  # fmt: skip
    assert launcher.stdout is not None
    with launcher:
        pid = int(launcher.stdout.readline() or 0)
    if not pid:
        raise RuntimeError(f"the shared vLLM server for {model!r} could not be launched (exit {launcher.returncode})")
    entry = {
        "name": name,
        "pid": pid,
        "url": f"http://127.0.0.1:{port}",
        "model": model,
        "settings": settings,
        "owners": [_owner_pid()],
        "idle_s": spec["idle_s"],
        "started": time.time(),
        "log": str(log),
        "api_key": api_key,
    }
    registry.write(name, entry)
    why = wait_for_server(entry)
    if why is None:
        logger.info("Shared vLLM server %s ready in %.0f s", entry["url"], time.monotonic() - began)
        return entry
    _stop(pid)
    registry.remove(name)
    raise RuntimeError(
        f"the shared vLLM server for {model!r} ({path}) {why}; the end of its log {log}:\n{log_tail(log)}"
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _stop(pid: int, timeout_s: float = 30.0) -> None:
    """SIGTERM to server ``pid``, SIGKILL if it lingers past ``timeout_s``."""
    for sig, wait_s in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 5.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if not pid_alive(pid):
                return
            time.sleep(0.1)


def shared_servers() -> list[dict[str, Any]]:
    """The live shared servers of this machine's registry (entries without
    their API key); entries of dead servers are removed."""
    registry = Registry(registry_dir())
    live = []
    for name in registry.names():
        entry = registry.read(name)
        if entry is None:
            continue
        if pid_alive(entry.get("pid", 0)):
            live.append({k: v for k, v in entry.items() if k != "api_key"})
            continue
        with registry.lock(name, blocking=False) as held:
            if held and (current := registry.read(name)) is not None and current.get("pid") == entry.get("pid"):
                registry.remove(name)
    return live


def stop_shared_servers(timeout_s: float = 30.0) -> int:
    """Stops every shared server in the registry now (rather than when they
    idle out) and removes their entries; returns how many were stopped."""
    registry = Registry(registry_dir())
    stopped = 0
    for name in registry.names():
        with registry.lock(name):
            entry = registry.read(name)
            if entry is None:
                continue
            registry.remove(name)
        if pid_alive(entry.get("pid", 0)):
            _stop(entry["pid"], timeout_s)
            stopped += 1
    with _attach_lock:
        _attached.clear()
    return stopped
