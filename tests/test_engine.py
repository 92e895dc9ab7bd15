"""The engine registry (``llm_label_clf.engines.local``) and the sync bridge
(``llm_label_clf.engines.loop``) on the real vLLM engine."""

from __future__ import annotations

import asyncio
import inspect
import threading

import pytest

from helpers import (
    SST2_LABELS,
    SST2_TEMPLATE,
    build_prompt,
    load_texts,
    read_label_logprobs,
)
from llm_label_clf import get_engine
from llm_label_clf.engines.local import engine_count
from llm_label_clf.engines.loop import run_sync
from llm_label_clf.models.builtin import DEFAULT_MODEL


@pytest.fixture(scope="module")
def sst2_prompts(hf_model_fp32, datasets_dir):
    """SST-2 prompts with their label tokens."""
    tokenizer = hf_model_fp32.tokenizer
    texts = load_texts(datasets_dir / "sst2_dev.csv", 8)
    return [build_prompt(tokenizer, SST2_TEMPLATE, text, SST2_LABELS) for text in texts]


def _read(engine, prompts):
    return read_label_logprobs(engine, [p.ids for p in prompts], [p.label_ids for p in prompts])


def test_same_spec_returns_the_same_engine(engine):
    started = engine_count()
    again = get_engine()
    named = get_engine(DEFAULT_MODEL, {})
    assert again is engine
    assert named is engine
    assert engine_count() == started
    assert engine.next_request_id() != engine.next_request_id()


def test_options_in_another_key_order_share_the_engine(engine):
    """One real engine with two options: the same dict in another key order gets
    that engine back, and only one engine is started for both calls."""
    from llm_label_clf.engines.local import shutdown_engine

    options = {"kv_cache_memory_bytes": 128 << 20, "max_model_len": 2048}  # 2048 tokens fit in float32 too
    before = engine_count()
    first = get_engine(engine_options=options)
    try:
        second = get_engine(engine_options=dict(reversed(options.items())))
        assert list(options) != list(dict(reversed(options.items())))
        assert second is first
        assert first is not engine
        assert engine_count() == before + 1
        assert first.max_model_len == 2048  # the options reached vLLM
    finally:
        shutdown_engine(first)  # no public call stops one engine; a later get_engine replaces it


def test_run_sync_inside_a_running_loop(engine, sst2_prompts):
    """Code already inside a running event loop (a Jupyter cell) calls the sync
    API: it must neither deadlock nor differ from a plain call."""
    prompts = sst2_prompts[:6]
    plain = _read(engine, prompts)

    async def notebook_cell():
        assert asyncio.get_running_loop().is_running()
        return _read(engine, prompts)

    assert asyncio.run(notebook_cell()) == plain


def test_run_sync_refuses_the_library_loop_thread():
    inner = asyncio.sleep(0)

    async def on_library_loop():
        with pytest.raises(RuntimeError, match="own loop thread"):
            run_sync(inner)
        return threading.current_thread().name

    assert run_sync(on_library_loop()) == "llm_label_clf-loop"
    # The refused coroutine was closed, not left un-awaited.
    assert inspect.getcoroutinestate(inner) == inspect.CORO_CLOSED
