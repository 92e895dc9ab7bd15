"""Few-shot prompts: k labelled training texts per class, chosen stratified
with a seed and laid out before the text to classify, each in the prompt's
own format followed by its answer. The block is the same for every text, so
vLLM's prefix cache computes it once per engine, not once per text."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["examples_block", "select_examples"]

#: Between two examples, and between the last example and the text.
EXAMPLE_SEPARATOR = "\n\n"


def select_examples(y_index: np.ndarray, n_classes: int, k: int, rng: np.random.RandomState) -> list[int]:
    """Row indices of up to ``k`` examples per class (all of a class's rows when
    it has fewer), interleaved class after class in a seeded random order so
    that no class sits always last (small models echo the last answer)."""
    per_class = []
    for c in range(n_classes):
        rows = np.flatnonzero(y_index == c)
        per_class.append(rng.permutation(rows)[:k].tolist())
    order: list[int] = []
    for rank in range(k):
        round_ = [rows[rank] for rows in per_class if rank < len(rows)]
        order.extend(rng.permutation(round_).tolist())
    return order


def examples_block(
    rows: Sequence[int],
    records: Sequence[Mapping[str, str]],
    answers: Sequence[str],
    render: Callable[[Mapping[str, str]], str],
) -> str:
    """The examples as one text: each rendered prompt, its answer (the class's
    verbalizer, as the model would write it), then a blank line."""
    parts: list[Any] = []
    for row, answer in zip(rows, answers, strict=True):
        parts.append(render(records[row]) + answer + EXAMPLE_SEPARATOR)
    return "".join(parts)
