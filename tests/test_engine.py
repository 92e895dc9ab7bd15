"""The engine registry (``llm_label_clf.engine``) and the sync bridge
(``llm_label_clf._bridge``) on the real vLLM engine."""

from __future__ import annotations

import _thread
import asyncio
import inspect
import threading
import time

import pytest

from helpers import (
    SST2_LABELS,
    SST2_TEMPLATE,
    build_prompt,
    label_params,
    load_texts,
    read_label_logprobs,
    wait_until,
)
from llm_label_clf import get_engine, next_token_label_reads
from llm_label_clf._bridge import run_sync
from llm_label_clf.engine import DEFAULT_MODEL, engine_count


@pytest.fixture(scope="module")
def sst2_prompts(hf_model_fp32, datasets_dir):
    """400 SST-2 prompts (a read long enough to interrupt) with their label tokens."""
    tokenizer = hf_model_fp32.tokenizer
    texts = load_texts(datasets_dir / "sst2_dev.csv", 400)
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
    from llm_label_clf.engine import _shutdown_one

    options = {"kv_cache_memory_bytes": 64 << 20, "max_model_len": 2048}
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
        _shutdown_one(first)  # no public call stops one engine; a later get_engine replaces it


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


def test_ctrl_c_aborts_the_read_and_the_engine_stays_usable(engine, sst2_prompts):
    """Ctrl-C during a long read through run_sync raises KeyboardInterrupt,
    aborts every unfinished request in the engine, and the next read works."""
    from vllm.inputs import TokensPrompt

    probe = sst2_prompts[:8]
    run_sync(engine.client.reset_prefix_cache())
    before = _read(engine, probe)

    in_flight = threading.Event()
    interrupted = threading.Event()
    stop = threading.Event()

    def press_ctrl_c():
        # Wait until the long read is in the engine, let it run ~1 s, then interrupt.
        if not wait_until(lambda: stop.is_set() or engine.client.get_num_unfinished_requests() > 0, 120):
            return
        in_flight.set()
        time.sleep(0.5)
        if not stop.is_set() and engine.client.get_num_unfinished_requests() > 0:
            interrupted.set()
            _thread.interrupt_main()

    timer = threading.Thread(target=press_ctrl_c, daemon=True)
    # four copies of the prompts, each led by its own digit so that no copy is
    # served from the prefix cache (earlier tests read these prompts): ~30 s of
    # work, long enough that the timer thread sees the read in flight even when
    # other work starves it of CPU
    digits = [engine.tokenizer.encode(str(d), add_special_tokens=False)[0] for d in range(1, 5)]
    long_read = [([digit, *p.ids], p.label_ids) for digit in digits for p in sst2_prompts]
    inputs = [TokensPrompt(prompt_token_ids=ids) for ids, _ in long_read]
    params = [label_params(label_ids) for _, label_ids in long_read]
    try:
        with pytest.raises(KeyboardInterrupt):
            timer.start()
            run_sync(next_token_label_reads(engine.client, inputs, params, engine.next_request_id()))
    finally:
        stop.set()
        timer.join()
    assert in_flight.is_set() and interrupted.is_set()
    assert wait_until(lambda: engine.client.get_num_unfinished_requests() == 0, 30)
    assert not engine.dead
    assert _read(engine, probe) == before
