"""A quiet first run: a healthy engine start prints nothing of vLLM's, torch's
or multiprocessing's; ``LLM_LABEL_CLF_ENGINE_LOGS=1`` brings vLLM's logs
back; a failed start still says why."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from llm_label_clf.engines.environment import ENGINE_LOGS_ENV


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
    assert done.stderr.strip() == ""  # no Triton, FutureWarning, NUMA or resource-tracker notices


@pytest.mark.full
def test_engine_logs_come_back_on_request(datasets_dir):
    done = _demo(datasets_dir, **{ENGINE_LOGS_ENV: "1", "VLLM_LOGGING_LEVEL": "INFO"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "INFO" in done.stdout + done.stderr


def test_a_failed_start_says_why(engine, capfd):
    from llm_label_clf import get_engine

    with pytest.raises(RuntimeError, match=r"failed to start: .*set LLM_LABEL_CLF_ENGINE_LOGS=1"):
        get_engine(engine_options={"kv_cache_memory_bytes": 2 << 20})
    assert "KV cache" in capfd.readouterr().err  # vLLM's own reason, printed by its engine process
