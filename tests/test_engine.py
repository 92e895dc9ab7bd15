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


#: Engine options of an engine of their own (2048 tokens fit in float32 too).
OTHER_OPTIONS = {"kv_cache_memory_bytes": 128 << 20, "max_model_len": 2048}


def test_options_in_another_key_order_share_the_engine(engine):
    """An engine handle for two options: the same dict in another key order
    gets that handle back, resolved by vLLM's configuration (the options
    reached it) and not started. Its start is the next test's (full tier)."""
    from llm_label_clf.engines.local import shutdown_engine

    before = engine_count()
    first = get_engine(engine_options=OTHER_OPTIONS)
    try:
        second = get_engine(engine_options=dict(reversed(OTHER_OPTIONS.items())))
        assert list(OTHER_OPTIONS) != list(dict(reversed(OTHER_OPTIONS.items())))
        assert second is first
        assert first is not engine
        assert first.max_model_len == 2048 and not first.started and engine_count() == before
    finally:
        shutdown_engine(first)  # no public call stops one engine; a later get_engine replaces it


# An engine start of its own (~30 s). CI keeps: the handle above; options reaching
# vLLM's engine core (test_quiet::test_a_failed_start_says_why); one start, then
# shared (the session's engine, test_same_spec_returns_the_same_engine).
@pytest.mark.full
def test_an_engine_of_other_options_starts_once_on_first_use(engine):
    """That engine, started: one start, vLLM's model config has the options,
    and the same options in another key order get the started engine."""
    from llm_label_clf.engines.local import shutdown_engine

    before = engine_count()
    first = get_engine(engine_options=OTHER_OPTIONS)
    try:
        first.start()
        assert engine_count() == before + 1
        assert first.client.model_config.max_model_len == 2048  # the options reached vLLM
        again = get_engine(engine_options=dict(reversed(OTHER_OPTIONS.items())))
        assert again.client is first.client and engine_count() == before + 1
    finally:
        shutdown_engine(first)


def test_a_handle_is_resolved_without_starting_its_engine(model_path):
    """A handle for a spec of its own: vLLM's configuration and tokenizer,
    no engine (no start counted, not found as a started engine, listed by
    engine_info as not started, not dead); its tokenizer gives vLLM's token
    ids; shutting it down closes it without starting anything."""
    from vllm.tokenizers.registry import get_tokenizer

    from llm_label_clf import engine_info
    from llm_label_clf.engines.local import find_engine, shutdown_engine

    options = {"max_model_len": 1024}
    before = engine_count()
    handle = get_engine(engine_options=options)
    assert not handle.started and not handle.dead and handle.max_model_len == 1024
    assert find_engine(engine_options=options) is None and engine_count() == before
    (listed,) = [e for e in engine_info()["engines"] if e["options"] == options]
    assert listed["started"] is False and listed["settings"]["dtype"] == handle.settings["dtype"]
    reference = get_tokenizer(model_path)
    for text in ["Review: a gem of a film\nSentiment:", " positive", "<|im_start|>assistant\n"]:
        assert handle.tokenizer.encode(text) == reference.encode(text)
    shutdown_engine(handle)
    assert handle.dead and handle.client is None and not handle.started and engine_count() == before
    assert get_engine(engine_options=options) is not handle  # the registry replaces a closed handle


def test_the_handle_holds_what_the_started_engine_reports(engine):
    """The handle's resolution (vLLM's configuration and tokenizer, before
    any start) equals what the started engine reports: max_model_len, dtype,
    the tokenizer's vocabulary, chat template and token ids."""
    client = engine.client
    assert engine.started and engine.max_model_len == client.model_config.max_model_len
    assert engine.settings["dtype"] == str(client.model_config.dtype).removeprefix("torch.")
    started = client.get_tokenizer()
    assert engine.tokenizer.get_vocab() == started.get_vocab()
    assert engine.tokenizer.chat_template == started.chat_template
    for text in ["Review: a gem of a film\nSentiment:", " negative", "<|im_start|>user\nhi<|im_end|>\n"]:
        assert engine.tokenizer.encode(text) == started.encode(text)


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
