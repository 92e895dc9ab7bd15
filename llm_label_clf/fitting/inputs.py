"""Turns what users pass as ``X`` into one field dict per text, in order, and
rejects what cannot be a text with an ``InvalidInputError`` that names the
item in its message and carries its index as data."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..exceptions import InvalidInputError

__all__ = ["as_records"]

Record = dict[str, str]


def _check_text(value: Any, item: int, where: str) -> str:
    """``value`` if it is a text; else an error naming ``X``'s ``item`` (``where`` says it in words)."""
    if isinstance(value, str):
        return value
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        raise InvalidInputError(f"X {where} is missing ({value!r}): every input must be a string", [item])
    raise InvalidInputError(
        f"X {where} is a {type(value).__name__} ({value!r:.60}), not a string: "
        "convert your texts with str() or clean them before classifying",
        [item],
    )


def as_records(X: Any) -> list[Record]:
    """One ``{field: text}`` dict per row of ``X``: a sequence, 1-D array or
    Series of strings gives ``{"text": ...}``; a DataFrame gives one field per
    column (its columns bind to the prompt's fields); a 2-D array with one
    column is read as 1-D. Order is kept; nothing is dropped."""
    if isinstance(X, pd.DataFrame):
        columns = [str(c) for c in X.columns]
        return [
            {
                c: _check_text(v, i, f"row {i} (index {X.index[i]!r}), column {c!r}")
                for c, v in zip(columns, row, strict=True)
            }
            for i, row in enumerate(X.itertuples(index=False, name=None))
        ]
    if isinstance(X, pd.Series):
        return [
            {"text": _check_text(value, i, f"item {i} (index {index!r})")}
            for i, (index, value) in enumerate(X.items())
        ]
    if isinstance(X, str):
        raise ValueError("X is a single string; pass a list of texts (for one text: [text])")
    if isinstance(X, np.ndarray):
        if X.ndim == 2 and X.shape[1] == 1:
            X = X[:, 0]
        elif X.ndim != 1:
            raise ValueError(
                f"X has shape {X.shape}; expected a 1-D sequence of texts, a 2-D array "
                "with one column, or a DataFrame whose columns are the prompt's fields"
            )
    elif not isinstance(X, Sequence):
        try:
            X = list(X)
        except TypeError:
            raise ValueError(f"X must be a sequence of texts, got {type(X).__name__}") from None
    return [{"text": _check_text(value, i, f"item {i}")} for i, value in enumerate(X)]
