"""The environment an embedded engine starts in, set before vLLM is imported
and only where the user has not set it; ``LLM_LABEL_CLF_ENGINE_LOGS=1``
leaves vLLM's logging as it is."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = [
    "ENGINE_LOGS_ENV",
    "START_TIMEOUT_ENV",
    "engine_logs_shown",
    "engine_process_environment",
    "prepare_environment",
    "start_timeout_s",
]

#: Set to 1 to see vLLM's own logs and warnings (start-up, Triton, torch).
ENGINE_LOGS_ENV = "LLM_LABEL_CLF_ENGINE_LOGS"
#: Seconds an engine may take to start before the start fails (vLLM's own default is 600).
START_TIMEOUT_ENV = "LLM_LABEL_CLF_START_TIMEOUT_S"
DEFAULT_START_TIMEOUT_S = 300
#: Python warnings the engine processes drop in quiet mode: torch deprecations
#: that vLLM's imports trigger, and the resource tracker's shared-memory report.
_QUIET_WARNINGS = ("ignore::FutureWarning", "ignore::UserWarning:multiprocessing.resource_tracker")
#: torch's logger that says Triton is missing when a module registers Triton
#: kernels (vLLM's do, on every platform), and the start of that notice.
_TRITON_LOGGER, _TRITON_NOTICE = "torch._library.triton", "Triton not available"


class _DropTritonNotice(logging.Filter):
    """Drops torch's "Triton not available" notice, nothing else."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(_TRITON_NOTICE)


def engine_logs_shown() -> bool:
    """Whether the user asked for vLLM's own logs (``LLM_LABEL_CLF_ENGINE_LOGS``)."""
    return os.environ.get(ENGINE_LOGS_ENV, "").strip().lower() not in ("", "0", "false", "no")


def start_timeout_s() -> int:
    """The start-up timeout in seconds (``LLM_LABEL_CLF_START_TIMEOUT_S``)."""
    value = os.environ.get(START_TIMEOUT_ENV, "")
    try:
        return max(1, int(float(value))) if value.strip() else DEFAULT_START_TIMEOUT_S
    except ValueError:
        raise ValueError(f"{START_TIMEOUT_ENV}={value!r} is not a number of seconds") from None


def prepare_environment() -> None:
    """Sets vLLM's environment before it is imported, only where the user has
    not: engine processes spawned, not forked; on CPU the model's threads
    bound to every core we may use; the start-up timeout; and, unless
    ``LLM_LABEL_CLF_ENGINE_LOGS`` is set, a quiet run (docs/architecture.md)."""
    os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    os.environ.setdefault("VLLM_ENGINE_READY_TIMEOUT_S", str(start_timeout_s()))
    if "VLLM_CPU_OMP_THREADS_BIND" not in os.environ and hasattr(os, "sched_getaffinity"):
        cores = sorted(os.sched_getaffinity(0))
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(map(str, cores))
    if not engine_logs_shown():
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")


@contextmanager
def engine_process_environment() -> Iterator[None]:
    """While an engine starts (its processes inherit the environment then), a
    quiet one for them: torch's C++ notices and the Python warnings above
    dropped; in this process, torch's Triton notice dropped (no environment
    variable quiets it once torch is imported). This process's environment
    and logging are restored afterwards."""
    if engine_logs_shown():
        yield
        return
    saved = {name: os.environ.get(name) for name in ("PYTHONWARNINGS", "TORCH_CPP_LOG_LEVEL", "TORCH_LOGS")}
    present = [w for w in (saved["PYTHONWARNINGS"] or "").split(",") if w]
    os.environ["PYTHONWARNINGS"] = ",".join(present + [w for w in _QUIET_WARNINGS if w not in present])
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    os.environ.setdefault("TORCH_LOGS", "-torch")  # torch's Python loggers at ERROR
    triton_logger, quiet_triton = logging.getLogger(_TRITON_LOGGER), _DropTritonNotice()
    triton_logger.addFilter(quiet_triton)
    try:
        yield
    finally:
        triton_logger.removeFilter(quiet_triton)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
