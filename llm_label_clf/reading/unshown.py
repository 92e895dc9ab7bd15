"""Reads of training texts, each under a prompt that does not show it.

A few-shot prompt shows some training texts as examples; a text read under
a prompt that holds its own answer is read too well. ``read_unshown`` reads
every other text under the prompt, and an example text under that prompt
with itself swapped for another text of its class: what a new text sees.
``fit`` calibrates on these reads, as cross-validation scores on them, so
the refit is the model the folds scored."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from sklearn.base import clone
from sklearn.utils import check_random_state

from ..engines.handle import Engine
from .build import FewShotTooLongError, plan_showing
from .driver import read_plans
from .plan import ClassReads, ReadingPlan

__all__ = ["read_unshown", "swapped_examples"]


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


def read_unshown(
    plan: ReadingPlan,
    verbalizers: Sequence[Sequence[str]],
    records: Sequence[Mapping[str, str]],
    y_index: np.ndarray,
    rows: np.ndarray,
    shown: Sequence[int],
    engine: Engine,
    *,
    few_shot: int,
    random_state: Any,
    batch_size: int,
    progress: bool,
    owner: str,
) -> ClassReads:
    """The reads of ``records[rows]``, in ``rows``' order: each under
    ``plan``, but a row of ``shown`` (``plan``'s examples) under ``plan`` with
    itself swapped out (``swapped_examples``, seeded by a copy of
    ``random_state``: a refit swaps as the scoring did, so a read cache
    answers it), or left out where the text swapped in is too long for the
    model's context."""
    rows = np.asarray(rows, dtype=np.int64)
    held = set(rows.tolist())
    examples = [r for r in shown if r in held]
    unshown = np.flatnonzero(~np.isin(rows, examples))
    parts = []
    if unshown.size:
        parts.append((unshown, read_plans([plan], [records[i] for i in rows[unshown]], engine,
                                          batch_size=batch_size, progress=progress)[0]))

    def showing(examples: list[int]) -> ReadingPlan:
        return plan_showing(plan, verbalizers, records, y_index, examples, few_shot=few_shot,
                            tokenizer=engine.tokenizer, max_model_len=engine.max_model_len, owner=owner)

    swaps = dict(zip(shown, swapped_examples(shown, y_index, clone(random_state, safe=False)), strict=True))
    for row in examples:
        try:
            alone = showing(swaps[row])
        except FewShotTooLongError:  # the text swapped in is longer than the prompt leaves room for
            alone = showing([r for r in shown if r != row])
        read = read_plans([alone], [records[row]], engine, batch_size=1, progress=False)[0]
        parts.append((np.flatnonzero(rows == row), read))
    return _in_row_order(parts, len(rows))


def _in_row_order(parts: Sequence[tuple[np.ndarray, ClassReads]], n_rows: int) -> ClassReads:
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
