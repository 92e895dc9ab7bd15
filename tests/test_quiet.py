"""A quiet first run: a healthy engine start prints nothing of vLLM's, torch's,
transformers' or multiprocessing's (the conversion's own quiet check is in
``test_builtin_model``); ``LLM_LABEL_CLF_ENGINE_LOGS=1`` brings vLLM's logs
back; a failed start still says why."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest

from llm_label_clf.engines.environment import ENGINE_LOGS_ENV, engine_process_environment

#: Third-party output a first run has printed (issue 29), by where it came from.
THIRD_PARTY_OUTPUT = {
    "transformers' GGUF conversion bar": "de-quantizing GGUF tensors",
    "transformers' weights bar": "Loading weights",
    "vLLM's checkpoint bar": "Loading safetensors checkpoint shards",
    "torch's Triton notice": "Triton not available",
}


def _demo(datasets_dir, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != ENGINE_LOGS_ENV}
    environ.update(env)
    command = [sys.executable, "-m", "llm_label_clf", "demo", "--data", str(datasets_dir / "sst2_dev.csv"),
               "--limit", "8"]
    return subprocess.run(command, capture_output=True, text=True, env=environ, timeout=600)


def test_a_healthy_demo_prints_only_its_report(healthy_demo):
    done = healthy_demo
    assert done.returncode == 0, done.stderr[-3000:]
    assert "accuracy" in done.stdout
    for source, text in THIRD_PARTY_OUTPUT.items():
        assert text not in done.stderr, f"{source} on stderr:\n{done.stderr[-3000:]}"
    assert done.stderr.strip() == ""  # no FutureWarning, NUMA or resource-tracker notices either


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.mark.parametrize("logs_shown", [False, True])
def test_torchs_triton_notice_is_dropped_only_while_an_engine_starts(monkeypatch, logs_shown):
    """On a machine's first engine start vLLM imports its Triton kernels in
    this process, where torch logs that Triton is missing: dropped there, and
    only there, unless engine logs are asked for."""
    if logs_shown:
        monkeypatch.setenv(ENGINE_LOGS_ENV, "1")
    else:
        monkeypatch.delenv(ENGINE_LOGS_ENV, raising=False)
    notice = "Triton not available, find_triton_kernels = []"
    logger, records = logging.getLogger("torch._library.triton"), _Records()
    level = logger.level
    logger.setLevel(logging.WARNING)  # whatever torch's own logging settings say
    logger.addHandler(records)
    try:
        with engine_process_environment():
            logger.warning(notice)
            logger.warning("another warning")
        logger.warning(notice)
    finally:
        logger.removeHandler(records)
        logger.setLevel(level)
    while_starting = ["another warning"] if not logs_shown else [notice, "another warning"]
    assert records.messages == while_starting + [notice]


@pytest.mark.full
def test_engine_logs_come_back_on_request(datasets_dir):
    done = _demo(datasets_dir, **{ENGINE_LOGS_ENV: "1", "VLLM_LOGGING_LEVEL": "INFO"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "INFO" in done.stdout + done.stderr


def test_a_failed_start_says_why(engine, capfd):
    from llm_label_clf import get_engine

    with pytest.raises(RuntimeError, match=r"failed to start: .*set LLM_LABEL_CLF_ENGINE_LOGS=1"):
        get_engine(engine_options={"kv_cache_memory_bytes": 2 << 20}).start()
    assert "KV cache" in capfd.readouterr().err  # vLLM's own reason, printed by its engine process
