"""Shared fixtures: one default engine per test session, the built-in model's
converted folder, the datasets folder and a transformers fp32 reference model.
Helpers that are plain functions live in ``tests/helpers.py``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

#: The suite reads in float32 on every CPU. On CPUs with native bf16 (AMX),
#: vLLM's bf16 reads of the same prompt differ by up to ~0.19 nats with the
#: batch they land in and the prefix-cache state (measured 2026-12-01), so
#: tests that check reads against each other or against transformers need
#: float32, which is exact and deterministic there. Set it before any engine
#: starts; subprocesses (CLI, notebook kernel, workers, servers) inherit it.
os.environ.setdefault("LLM_LABEL_CLF_DTYPE", "float32")
#: On a GPU each engine would take vLLM's default 90% of its memory and the
#: session's second engine (other options, a server) would not start: a share
#: that leaves room for several small-model engines. CPUs ignore it.
os.environ.setdefault("LLM_LABEL_CLF_GPU_MEMORY_UTILIZATION", "0.15")
#: How long an engine or shared server may take to start (the library's
#: default is 300 s). Engines here start beside other engines, servers and
#: workers on 2 cores; on a loaded AVX2 CPU a start has taken up to ~130 s, and
#: a limit the suite can hit on a slow machine fails healthy runs.
os.environ.setdefault("LLM_LABEL_CLF_START_TIMEOUT_S", "1200")

from helpers import HFModel


@pytest.fixture(scope="session")
def engine():
    """The default engine (built-in model, default options), started once per
    session; every engine the session started is shut down at its end."""
    from llm_label_clf import get_engine, shutdown_engines

    started = get_engine().start()
    yield started
    shutdown_engines()


@pytest.fixture(scope="session")
def fp32_engine(engine):
    """A second engine serving the built-in model in float32, for checks of
    exactness against transformers (bf16 differs by up to ~0.15 nats); the
    ``engine`` fixture's teardown shuts it down with the rest."""
    from llm_label_clf import get_engine

    return get_engine(engine_options={"dtype": "float32"}).start()


@pytest.fixture(scope="session")
def model_path() -> str:
    """The built-in model's converted Hugging Face folder (in the user cache)."""
    from llm_label_clf.models.builtin import DEFAULT_MODEL, resolve_model

    return resolve_model(DEFAULT_MODEL)


@pytest.fixture(scope="session")
def datasets_dir() -> Path:
    """The labelled CSV datasets: ``$LLM_LABEL_CLF_DATASETS`` or ``shared/datasets``
    (the rule of ``llm_label_clf.testing.datasets_dir``)."""
    from llm_label_clf.testing import datasets_dir

    try:
        return datasets_dir()
    except FileNotFoundError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="session")
def hf_model_fp32(model_path: str) -> HFModel:
    """The built-in model loaded by transformers in float32, eval mode, with its
    tokenizer: the reference that engine logprobs are checked against."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    model.eval()
    return HFModel(model=model, tokenizer=tokenizer)


@pytest.fixture(scope="session")
def sst2_all(datasets_dir: Path):
    """All SST-2 dev texts (list) and labels (array); modules slice what they need."""
    import pandas as pd

    frame = pd.read_csv(datasets_dir / "sst2_dev.csv")
    return frame["text"].tolist(), frame["label"].to_numpy()


@pytest.fixture(scope="session")
def healthy_demo(datasets_dir: Path):
    """``python -m llm_label_clf demo`` on 40 SST-2 reviews, run once per
    session without engine logs: the CLI's report and the quiet first run are
    both checked on this one run (each run starts an engine: ~30 s)."""
    import subprocess
    import sys

    from llm_label_clf.engines.environment import ENGINE_LOGS_ENV

    environ = {k: v for k, v in os.environ.items() if k != ENGINE_LOGS_ENV}
    command = [sys.executable, "-m", "llm_label_clf", "demo", "--data", str(datasets_dir / "sst2_dev.csv"),
               "--limit", "40"]
    return subprocess.run(command, capture_output=True, text=True, env=environ, timeout=900)


def pytest_configure(config) -> None:
    """The ``full`` marker, and the table of seconds and engine starts per file
    printed at the end of every run (``tests/budget.py``)."""
    import budget

    config.addinivalue_line(
        "markers", "full: the full tier beyond CI (make test-full); CI runs pytest -m 'not full'"
    )
    budget.register(config)
