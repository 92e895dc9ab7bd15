"""Plain helpers shared by the tests: building prompts whose label tokens are
found in context, running label reads on a real engine, and computing the
transformers fp32 reference logprobs those reads are checked against."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

#: The plain completion prompts the tests read (SST-2 and AG News).
SST2_TEMPLATE = "Review: {text}\nSentiment (positive or negative):"
SST2_LABELS = (" positive", " negative")
AGNEWS_TEMPLATE = "Article: {text}\nTopic (World, Sports, Business or Sci/Tech):"
AGNEWS_LABELS = (" World", " Sports", " Business", " Sci/Tech")


class HFModel(NamedTuple):
    """A transformers model and its tokenizer."""

    model: Any
    tokenizer: Any


class Prompt(NamedTuple):
    """A prompt's token ids and the first token of each label after it."""

    ids: list[int]
    label_ids: list[int]


def load_texts(path: Path, n: int) -> list[str]:
    """The first ``n`` texts of a ``text,label`` CSV."""
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    return [row["text"] for row in rows[:n]]


def build_prompt(tokenizer: Any, template: str, text: str, labels: Sequence[str]) -> Prompt:
    """The prompt's token ids and each label's first token as tokenized right
    after the prompt (a label's token depends on what precedes it)."""
    prompt = template.format(text=text)
    ids = tokenizer(prompt, add_special_tokens=False).input_ids
    label_ids = []
    for label in labels:
        full = tokenizer(prompt + label, add_special_tokens=False).input_ids
        assert full[: len(ids)] == ids, f"label {label!r} merges with the prompt's last token"
        label_ids.append(full[len(ids)])
    assert len(set(label_ids)) == len(label_ids), f"labels {labels} share a first token"
    return Prompt(ids, label_ids)


def label_params(label_ids: Sequence[int], **overrides: Any) -> Any:
    """Greedy one-token SamplingParams that return the logprobs of ``label_ids``."""
    from vllm import SamplingParams

    params: dict[str, Any] = {
        "max_tokens": 1,
        "temperature": 0,
        "logprob_token_ids": list(label_ids),
        "detokenize": False,
    }
    params.update(overrides)
    return SamplingParams(**params)


def read_labels(
    engine: Any,
    prompt_id_lists: Sequence[Sequence[int]],
    label_ids: Sequence[int] | Sequence[Sequence[int]],
    *,
    slots: Any = None,
    **params: Any,
) -> list[Any]:
    """Runs one label read per prompt on ``engine`` through the sync bridge and
    returns the ``LabelRead`` objects. ``label_ids`` is one id list shared by
    every prompt or one list per prompt; ``params`` override SamplingParams."""
    from vllm.inputs import TokensPrompt

    from llm_label_clf import next_token_label_reads
    from llm_label_clf.engines.loop import run_sync

    per_prompt = _per_prompt(label_ids, len(prompt_id_lists))
    inputs = [TokensPrompt(prompt_token_ids=list(ids)) for ids in prompt_id_lists]
    sampling = [label_params(ids, **params) for ids in per_prompt]
    return run_sync(
        next_token_label_reads(engine.client, inputs, sampling, engine.next_request_id(), slots=slots)
    )


def read_label_logprobs(
    engine: Any,
    prompt_id_lists: Sequence[Sequence[int]],
    label_ids: Sequence[int] | Sequence[Sequence[int]],
    **params: Any,
) -> list[list[float]]:
    """The label logprobs of one read per prompt (see ``read_labels``)."""
    return [read.logprobs for read in read_labels(engine, prompt_id_lists, label_ids, **params)]


def _per_prompt(label_ids: Sequence[int] | Sequence[Sequence[int]], n: int) -> list[list[int]]:
    if label_ids and not isinstance(label_ids[0], int):
        assert len(label_ids) == n, "one label id list per prompt"
        return [list(ids) for ids in label_ids]  # type: ignore[arg-type]
    return [list(label_ids)] * n  # type: ignore[arg-type]


def hf_logprob_rows(hf: HFModel, ids: Sequence[int]) -> Any:
    """Full-vocabulary log_softmax (float64) of a fp32 forward pass over ``ids``;
    row ``j`` predicts token ``j + 1``."""
    import torch

    with torch.no_grad():
        logits = hf.model(torch.tensor([list(ids)])).logits[0]
    return torch.log_softmax(logits.to(torch.float64), dim=-1)


def hf_label_logprobs(hf: HFModel, ids: Sequence[int], label_ids: Sequence[int]) -> list[float]:
    """The reference logprobs of ``label_ids`` as the token after ``ids``."""
    return hf_logprob_rows(hf, ids)[-1, list(label_ids)].tolist()


def wait_until(condition: Any, deadline_s: float = 30.0, step_s: float = 0.01) -> bool:
    """Polls ``condition()`` until true or ``deadline_s`` passes; returns the last value."""
    import time

    end = time.monotonic() + deadline_s
    while not (ok := bool(condition())) and time.monotonic() < end:
        time.sleep(step_s)
    return ok


def make_classifier(**params: Any) -> Any:
    """An LLMLabelClassifier on the SST-2 prompt with no progress bar and
    no calibration (the engine's exact reads, which most tests check), unless
    ``params`` say otherwise."""
    from llm_label_clf import LLMLabelClassifier

    params.setdefault("prompt", SST2_TEMPLATE)
    params.setdefault("progress", False)
    params.setdefault("calibration", None)
    return LLMLabelClassifier(**params)
