"""Helpers for tests, benchmarks and examples: the datasets folder, and a vLLM
OpenAI server on loopback for the remote engine.

Importing this module imports neither vLLM nor torch: the server runs in a
process of its own.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from .engines.shared import free_port, log_tail

__all__ = ["DATASETS_ENV", "Server", "datasets_dir", "free_port", "vllm_server"]

#: The environment variable naming the datasets folder.
DATASETS_ENV = "LLM_LABEL_CLF_DATASETS"
#: The file whose presence marks a datasets folder.
_DATASETS_MARKER = "sst2_dev.csv"
#: KV cache of a test server: 1 GiB, as the embedded engine's CPU default.
_KV_CACHE_BYTES = 1 << 30


def datasets_dir() -> Path:
    """The folder of labelled CSV datasets: ``$LLM_LABEL_CLF_DATASETS``, or else
    ``shared/datasets`` beside the repository root (the folder holding this
    checkout). Raises FileNotFoundError, naming the variable, when the folder
    has no ``sst2_dev.csv``."""
    configured = os.environ.get(DATASETS_ENV)
    folder = Path(configured) if configured else Path(__file__).resolve().parents[2] / "shared" / "datasets"
    if not (folder / _DATASETS_MARKER).is_file():
        origin = f"from ${DATASETS_ENV}" if configured else f"the default; ${DATASETS_ENV} is not set"
        raise FileNotFoundError(
            f"no datasets in {folder} ({origin}): set {DATASETS_ENV} to the datasets folder "
            f"(the one holding {_DATASETS_MARKER})"
        )
    return folder


class Server:
    """A vLLM OpenAI server started by :func:`vllm_server`, in a process group
    of its own (so that signalling the group reaches its engine process too)."""

    def __init__(self, proc: subprocess.Popen, port: int, log_path: Path, started: float, timeout_s: float) -> None:
        self.proc = proc
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log_path
        #: Seconds from launch until /health answered (None until then).
        self.start_s: float | None = None
        self._started = started
        self._deadline = started + timeout_s

    def __repr__(self) -> str:
        return f"Server(url={self.url!r}, pid={self.proc.pid}, returncode={self.proc.returncode})"

    def wait_healthy(self) -> float:
        """Waits until ``/health`` answers 200 and returns the seconds since
        launch. If the process exits or the start timeout passes first, stops
        the server and raises RuntimeError with the tail of its log."""
        import httpx

        if self.start_s is not None:
            return self.start_s
        while time.monotonic() < self._deadline and self.proc.poll() is None:
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    self.start_s = time.monotonic() - self._started
                    return self.start_s
            except httpx.TransportError:
                pass
            time.sleep(0.25)
        status = "timed out" if self.proc.poll() is None else f"exited with {self.proc.returncode}"
        self.stop()
        raise RuntimeError(
            f"vLLM server {self.url} did not become healthy ({status}); log {self.log_path}:\n{log_tail(self.log_path)}"
        )

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 20) -> None:
        """Sends ``sig`` to the server's process group and waits for the server
        to exit; after any other signal than SIGKILL, SIGKILLs the group if it
        lingers past ``timeout_s``. A server already gone is left alone."""
        try:
            os.killpg(self.proc.pid, sig)
            self.proc.wait(timeout=timeout_s)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=timeout_s)


@contextlib.contextmanager
def vllm_server(
    model_path: str,
    *,
    served_model_name: str | None = None,
    api_key: str | None = None,
    log_path: str | os.PathLike[str] | None = None,
    port: int | None = None,
    extra_args: Sequence[str] = (),
    start_timeout_s: float = 600,
    wait: bool = True,
) -> Iterator[Server]:
    """Starts ``python -m vllm.entrypoints.openai.api_server`` on 127.0.0.1
    serving ``model_path`` (eager mode, a 1 GiB KV cache, the environment the
    embedded engine prepares: thread binding and quiet logs; on CPU the dtype
    and KV block size an embedded engine gets here), yields its
    :class:`Server` once ``/health`` answers, and always stops it on exit
    (SIGTERM to its process group, then SIGKILL).

    ``api_key`` makes the server demand that key (given through the
    server's ``VLLM_API_KEY`` variable, so it stays out of ``ps``); one
    inherited from this process is never passed on. ``log_path`` receives
    the server's output (by default a temporary file, removed on a clean exit);
    ``port`` defaults to a free one. With ``wait=False`` it yields at once,
    so that several servers start side by side: call
    :meth:`Server.wait_healthy` on each (``start_timeout_s`` counts from the
    launch either way).
    """
    from .engines.local import engine_settings, prepare_environment

    prepare_environment()  # the embedded engine's thread binding, so the two compare fairly
    settings = engine_settings()
    same_as_embedded = [
        arg for name in ("dtype", "block_size", "gpu_memory_utilization") if name in settings
        for arg in (f"--{name.replace('_', '-')}", str(settings[name]))
    ]
    env = {k: v for k, v in os.environ.items() if k != "VLLM_API_KEY"}
    if api_key:
        env["VLLM_API_KEY"] = api_key
    port = free_port() if port is None else port
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_path)]
    if served_model_name is not None:
        cmd += ["--served-model-name", served_model_name]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--enforce-eager",
            "--kv-cache-memory-bytes", str(_KV_CACHE_BYTES), *same_as_embedded, *extra_args]  # fmt: skip
    temporary = log_path is None
    if temporary:
        fd, name = tempfile.mkstemp(prefix="vllm-server-", suffix=".log")
        os.close(fd)
        log = Path(name)
    else:
        log = Path(log_path)
    started = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    server = Server(proc, port, log, started, start_timeout_s)
    try:
        if wait:
            server.wait_healthy()
        yield server
    finally:
        server.stop()
    if temporary:  # kept when anything failed, for the error it names
        log.unlink(missing_ok=True)
