"""How ``LLMLabelClassifierCV`` reads its training texts: every text once
per reader, under the prompt the refit will use, or, for a text that prompt
shows as a few-shot example, under that prompt with the text swapped out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from sklearn.base import clone
from sklearn.utils import check_random_state

from ..classifier import LLMLabelClassifier
from ..engines import engine_for
from ..fitting.fit import content_free_log_proba
from ..reading.build import FewShotTooLongError, plan_showing
from ..reading.driver import read_plans
from ..reading.plan import ClassReads
from .scores import ReaderReads

__all__ = ["in_row_order", "read_reader", "swapped_examples"]


def swapped_examples(shown: Sequence[int], y_index: np.ndarray, random_state: Any) -> list[list[int]]:
    """For each example row ``shown[i]``, the examples with it replaced, at
    its place, by a row of its class that ``shown`` does not hold (drawn by
    ``random_state``), or left out where its class has no such row."""
    rng = check_random_state(random_state)
    taken = set(shown)
    out = []
    for i, row in enumerate(shown):
        spare = [r for r in np.flatnonzero(y_index == y_index[row]).tolist() if r not in taken]
        swapped = list(shown)
        if spare:
            swapped[i] = int(spare[rng.randint(len(spare))])
        else:
            del swapped[i]
        out.append(swapped)
    return out


def read_reader(
    reader: LLMLabelClassifier,
    records: Sequence[Mapping[str, str]],
    y_index: np.ndarray,
    owner: str,
) -> ReaderReads:
    """``reader``'s (fitted without calibration on every text: a plan, no
    reads) reads of every training text and of the content-free inputs: each
    text under its prompt, but an example text under that prompt with itself
    swapped out (``swapped_examples``), or left out where the text swapped in
    is too long for the model's context."""
    plan = reader.plans_[0]
    engine = engine_for(reader.model, reader.base_url, reader.engine_options, owner=owner)
    shown = list(reader.few_shot_rows_)
    rest = np.setdiff1d(np.arange(len(records)), shown)
    parts = [(rest, read_plans([plan], [records[i] for i in rest], engine, batch_size=reader.batch_size,
                               progress=reader.progress)[0])]

    def showing(examples: list[int]) -> Any:
        return plan_showing(plan, reader.verbalizers_, records, y_index, examples, few_shot=int(reader.few_shot),
                            tokenizer=engine.tokenizer, max_model_len=engine.max_model_len, owner=owner)

    for row, examples in zip(shown, swapped_examples(shown, y_index, clone(reader.random_state, safe=False)),
                             strict=True):
        try:
            alone = showing(examples)
        except FewShotTooLongError:  # the text swapped in is longer than the refit's prompt leaves room for
            alone = showing([r for r in shown if r != row])
        parts.append((np.array([row]), read_plans([alone], [records[row]], engine, batch_size=1, progress=False)[0]))
    return ReaderReads(in_row_order(parts, len(records)), content_free_log_proba(plan, engine))


def in_row_order(parts: Sequence[tuple[np.ndarray, ClassReads]], n_rows: int) -> ClassReads:
    """The reads of disjoint row sets, each ``(rows, reads)``, as one
    ``ClassReads`` of ``n_rows`` rows in row order."""
    first = parts[0][1]

    def gathered(name: str) -> Any:
        if any(getattr(reads, name) is None for _, reads in parts):
            return None
        sample = getattr(first, name)
        out = np.empty((n_rows, *sample.shape[1:]), dtype=sample.dtype)
        for rows, reads in parts:
            out[rows] = getattr(reads, name)
        return out

    return ClassReads(gathered("class_logprobs"), gathered("scores"), gathered("top_token"),
                      gathered("first_logmass"))
